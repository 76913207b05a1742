// The caching device allocator (see gpu/common.h).
//
// Sizes are rounded to a size class: multiples of 512 bytes below 1 MiB, then eight
// classes per power of two (at most 12.5% unused). Each device keeps a free list per
// class; a block remembers the stream it was last used on and is handed out again only
// for that stream, where stream order guarantees that the kernels which used it are
// done before the next ones start (the plugin uses one stream per device, so every
// cached block of a device qualifies). Nothing is given back to the driver until an
// allocation fails or the cache is emptied: then the device is synchronised first, since
// a cached block may still be read by queued work. Bytes handed out are reported to the
// engine (tensor/allocator.h) so that the Lua collector counts device tensors.
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gpu/common.h"
#include "tensor/allocator.h"

namespace dl::gpu {

namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr int kMaxDevices = 128;  // Device::index is an int8_t

size_t round_size(size_t n) {
  if (n <= kMinBlock) return kMinBlock;
  if (n < kSmallLimit) return (n + kMinBlock - 1) / kMinBlock * kMinBlock;
  const size_t top = size_t(1) << (63 - __builtin_clzll(static_cast<unsigned long long>(n)));
  const size_t step = top / 8;
  return (n + step - 1) / step * step;
}

struct Block {
  void* p;
  cudaStream_t stream;
};

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<Block>> free;  // by size class
  int64_t in_use = 0;
  int64_t cached = 0;
  int64_t peak = 0;
};

Pool* pools() {
  static Pool* p = new Pool[kMaxDevices];  // leaked on purpose: tensors freed at exit use it
  return p;
}

// Gives every cached block of `device` (current) back to the driver.
void release_cached(int device) noexcept {
  Pool& pool = pools()[device];
  std::vector<void*> all;
  {
    std::lock_guard<std::mutex> g(pool.mu);
    for (auto& [size, blocks] : pool.free)
      for (const Block& b : blocks) all.push_back(b.p);
    pool.free.clear();
    pool.cached = 0;
  }
  if (all.empty()) return;
  cudaDeviceSynchronize();  // queued work may still use a cached block
  for (void* p : all) cudaFree(p);
  cudaGetLastError();
}

}  // namespace

void* device_alloc(size_t nbytes, int device, const char* op) {
  DL_CHECK(device >= 0 && device < kMaxDevices, op, ": device cuda:", device, " is not available");
  DeviceContext& c = activate(device, op);
  const size_t r = round_size(nbytes);
  Pool& pool = pools()[device];
  {
    std::lock_guard<std::mutex> g(pool.mu);
    auto it = pool.free.find(r);
    if (it != pool.free.end()) {
      std::vector<Block>& v = it->second;
      for (size_t i = v.size(); i-- > 0;) {
        if (v[i].stream != c.stream) continue;
        void* p = v[i].p;
        v[i] = v.back();
        v.pop_back();
        pool.cached -= int64_t(r);
        pool.in_use += int64_t(r);
        if (pool.in_use > pool.peak) pool.peak = pool.in_use;
        device_memory::note_alloc(int64_t(r));
        return p;
      }
    }
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, r);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    release_cached(device);
    e = cudaMalloc(&p, r);
  }
  if (e != cudaSuccess) {
    if (e != cudaErrorMemoryAllocation) throw_cuda(e, op, "allocating device memory");
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    int64_t in_use = 0, cached = 0;
    {
      std::lock_guard<std::mutex> g(pool.mu);
      in_use = pool.in_use;
      cached = pool.cached;
    }
    fail(ErrorKind::Memory, op, ": CUDA out of memory on cuda:", device, ": asked for ", nbytes,
         " bytes (", format_bytes(int64_t(nbytes)), "); ", format_bytes(in_use), " in use by tensors, ",
         format_bytes(cached), " cached; the device has ", format_bytes(int64_t(free_b)), " free of ",
         format_bytes(int64_t(total_b)));
  }
  std::lock_guard<std::mutex> g(pool.mu);
  pool.in_use += int64_t(r);
  if (pool.in_use > pool.peak) pool.peak = pool.in_use;
  device_memory::note_alloc(int64_t(r));
  return p;
}

void device_free(void* p, size_t nbytes, int device) noexcept {
  if (!p || device < 0 || device >= kMaxDevices) return;
  const size_t r = round_size(nbytes);
  Pool& pool = pools()[device];
  const cudaStream_t s = device_stream(device);
  std::lock_guard<std::mutex> g(pool.mu);
  pool.in_use -= int64_t(r);
  pool.cached += int64_t(r);
  pool.free[r].push_back(Block{p, s});
  device_memory::note_free(int64_t(r));
}

CudaMemoryStats memory_stats(int device) {
  activate(device, "cuda.memory_stats");
  CudaMemoryStats m;
  {
    Pool& pool = pools()[device];
    std::lock_guard<std::mutex> g(pool.mu);
    m.in_use = pool.in_use;
    m.cached = pool.cached;
    m.peak_in_use = pool.peak;
  }
  size_t free_b = 0, total_b = 0;
  check_cuda(cudaMemGetInfo(&free_b, &total_b), "cuda.memory_stats", "querying the device's memory");
  m.device_free = int64_t(free_b);
  m.device_total = int64_t(total_b);
  return m;
}

void empty_cache() noexcept {
  for (int d = 0; d < device_count() && d < kMaxDevices; ++d) {
    bool any = false;
    {
      Pool& pool = pools()[d];
      std::lock_guard<std::mutex> g(pool.mu);
      any = pool.cached > 0;
    }
    if (!any) continue;
    try {
      activate(d, "cuda.empty_cache");
    } catch (...) {
      continue;
    }
    release_cached(d);
  }
}

}  // namespace dl::gpu
