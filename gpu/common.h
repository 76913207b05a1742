// The CUDA plugin's shared pieces: errors, devices and their streams, memory, copies
// between host and device, and the Backend entries (gpu/*.cu). Host code only: the
// .cpp files are compiled by the host compiler, the .cu files by nvcc.
//
// Execution model. Each device has one stream (non-blocking, created when the device
// is first used); every kernel, copy and cuBLAS call for a tensor on that device goes
// to it, so work is ordered without any synchronisation, and memory freed by a tensor
// can be handed to the next one at once (stream order makes the reuse safe). The host
// waits only where a value comes back to it: device-to-host copies (item(), printing,
// x:cpu()), and the index kernels, which report a bad index as a dl::Error naming it.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/backend.h"
#include "tensor/plugin.h"

namespace dl::gpu {

// ---- errors ------------------------------------------------------------------------------
// A failed CUDA call as a dl::Error: "op: CUDA error on cuda:0 during what: message
// (name)"; errors that leave the context unusable say so.
[[noreturn]] void throw_cuda(cudaError_t e, const char* op, const char* what);
inline void check_cuda(cudaError_t e, const char* op, const char* what) {
  if (e != cudaSuccess) throw_cuda(e, op, what);
}
// After a kernel launch: a bad launch, or an earlier asynchronous fault.
void check_launch(const char* op);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* op, const char* what);
inline void check_cublas(cublasStatus_t s, const char* op, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_cublas(s, op, what);
}
// "1.50 GiB", "512 B".
std::string format_bytes(int64_t n);

// ---- devices --------------------------------------------------------------------------
struct DeviceContext {
  int index = 0;
  cudaStream_t stream = nullptr;
  int sm_count = 1;
  std::string name;
};

// Called once by the plugin's init with the number of devices found.
void init_devices(int n);
int device_count();
// Makes `device` current on this thread and returns its context, created on first use.
DeviceContext& activate(int device, const char* op);
inline DeviceContext& activate(const Tensor& t, const char* op) { return activate(t.device().index, op); }
// The device's stream, without making it current (null before its first use).
cudaStream_t device_stream(int device) noexcept;
// The device's cuBLAS handle, bound to its stream (created on first use).
cublasHandle_t cublas(const DeviceContext& c, const char* op);
// Blocks of `threads` for a grid-stride loop over n elements (a few waves at most).
unsigned grid_for(int64_t n, const DeviceContext& c, int threads = 256);
// Waits for the device's stream (-1: every device that was used).
void synchronize(int device);
const char* device_name(int device);

// ---- memory (gpu/allocator.cpp) ----------------------------------------------------------
// A caching allocator: blocks freed go to size-binned free lists per device and stream
// and are handed out again without cudaMalloc; an allocation that fails gives the
// device's cached blocks back and tries once more, then throws (Memory) naming the size
// asked and what is in use.
void* device_alloc(size_t nbytes, int device, const char* op);
void device_free(void* p, size_t nbytes, int device) noexcept;
CudaMemoryStats memory_stats(int device);
void empty_cache() noexcept;

// Device scratch memory for the duration of a kernel launch sequence, back to the cache
// when it goes out of scope (stream order makes that safe).
class Scratch {
 public:
  Scratch(size_t nbytes, int device, const char* op)
      : p_(device_alloc(nbytes, device, op)), n_(nbytes), device_(device) {}
  ~Scratch() { device_free(p_, n_, device_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_;
  size_t n_;
  int device_;
};

// ---- host <-> device (gpu/transfer.cpp) ----------------------------------------------------
// Host to device, ordered on the device's stream; returns once `src` may be reused.
// Large copies go through pinned staging buffers, double-buffered so that filling one
// overlaps the transfer of the other.
void h2d(void* dst, const void* src, size_t n, int device, const char* op);
// Device to host; returns when the bytes are in `dst` (waits for the stream).
void d2h(void* dst, const void* src, size_t n, int device, const char* op);

// ---- Backend entries: one per row of tensor/kernels.def (contracts there), in gpu/*.cu --
#define DL_KERNEL(name, params) void name params;
#include "tensor/kernels.def"
// out = src on the same device, converted and broadcast (the kernel behind copy).
void convert(const Tensor& out, const Tensor& src, const char* op);

}  // namespace dl::gpu
