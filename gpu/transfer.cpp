// Copies between host and device memory (see gpu/common.h).
//
// Host to device, the bytes go through two pinned buffers per device, in chunks: the
// host fills one while the DMA engine moves the other, and the copy returns once the
// last chunk is in a staging buffer, without waiting for the transfer itself (a copy
// from pageable memory would first wait for the whole stream to drain). A buffer is
// refilled once the transfer that last read it is done (an event). Device to host,
// below kStageThreshold bytes, cudaMemcpyAsync straight into the caller's memory and a
// wait for the stream; above, the same double buffering, draining one buffer while the
// other fills. Without pinned memory, plain copies.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "gpu/common.h"

namespace dl::gpu {

namespace {

constexpr size_t kStageThreshold = size_t(1) << 20;
constexpr size_t kStageChunk = size_t(4) << 20;
constexpr int kMaxDevices = 128;

struct Staging {
  std::mutex mu;
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};  // the last transfer that used each buffer
  int next = 0;  // the buffer the next chunk goes to: alternating across calls too
  bool tried = false;
  bool ok = false;
};

Staging* stagings() {
  static Staging* s = new Staging[kMaxDevices];  // leaked on purpose, like the allocator
  return s;
}

// Sets up the device's staging buffers once (the device is current, st.mu held); false
// when pinned memory cannot be had, and copies then go the plain way.
bool staging_ready(Staging& st) {
  if (st.tried) return st.ok;
  st.tried = true;
  for (int i = 0; i < 2; ++i) {
    if (cudaHostAlloc(&st.buf[i], kStageChunk, cudaHostAllocDefault) != cudaSuccess ||
        cudaEventCreateWithFlags(&st.done[i], cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
  }
  st.ok = true;
  return true;
}

}  // namespace

void h2d(void* dst, const void* src, size_t n, int device, const char* op) {
  if (n == 0) return;
  DeviceContext& c = activate(device, op);
  {
    Staging& st = stagings()[device];
    std::lock_guard<std::mutex> g(st.mu);
    if (staging_ready(st)) {
      for (size_t off = 0; off < n; off += kStageChunk) {
        const size_t len = std::min(kStageChunk, n - off);
        const int b = st.next;
        st.next ^= 1;
        check_cuda(cudaEventSynchronize(st.done[b]), op, "waiting for a staging buffer");
        std::memcpy(st.buf[b], static_cast<const char*>(src) + off, len);
        check_cuda(cudaMemcpyAsync(static_cast<char*>(dst) + off, st.buf[b], len, cudaMemcpyHostToDevice,
                                   c.stream),
                   op, "a copy to the device");
        check_cuda(cudaEventRecord(st.done[b], c.stream), op, "a copy to the device");
      }
      return;
    }
  }
  check_cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c.stream), op, "a copy to the device");
}

void d2h(void* dst, const void* src, size_t n, int device, const char* op) {
  if (n == 0) return;
  DeviceContext& c = activate(device, op);
  if (n >= kStageThreshold) {
    Staging& st = stagings()[device];
    std::lock_guard<std::mutex> g(st.mu);
    if (staging_ready(st)) {
      int prev = -1;
      size_t prev_off = 0, prev_len = 0, k = 0;
      auto drain = [&] {
        check_cuda(cudaEventSynchronize(st.done[prev]), op, "a copy from the device");
        std::memcpy(static_cast<char*>(dst) + prev_off, st.buf[prev], prev_len);
      };
      for (size_t off = 0; off < n; off += kStageChunk, ++k) {
        const size_t len = std::min(kStageChunk, n - off);
        const int b = int(k % 2);  // drained at the previous step (or never used here)
        check_cuda(cudaMemcpyAsync(st.buf[b], static_cast<const char*>(src) + off, len,
                                   cudaMemcpyDeviceToHost, c.stream),
                   op, "a copy from the device");
        check_cuda(cudaEventRecord(st.done[b], c.stream), op, "a copy from the device");
        if (prev >= 0) drain();
        prev = b;
        prev_off = off;
        prev_len = len;
      }
      drain();
      return;
    }
  }
  check_cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c.stream), op, "a copy from the device");
  check_cuda(cudaStreamSynchronize(c.stream), op, "a copy from the device");
}

}  // namespace dl::gpu
