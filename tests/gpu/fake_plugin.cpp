// A stand-in for the CUDA plugin, for tests only: the CPU's kernels registered as the
// device "cuda", on host memory, one device. With DLUA_CUDA_PLUGIN set to it, the paths
// that scripts and the engine take by device (moving tensors, a compiled call's plan on
// a device, a gradient's way back, the memory statistics) run where no GPU is lent, as
// in CI: what is decided by device, not what a GPU computes (tests/gpu/test_cuda_ops.cpp
// checks that, on one). Half-precision products stay the GPU's (half_matmul is off).
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "tensor/backend.h"
#include "tensor/plugin.h"

namespace {

dl::Backend g_stand_in;
std::atomic<int64_t> g_in_use{0}, g_peak{0};

void* alloc(size_t nbytes, int device, const char* op) {
  void* p = dl::cpu_backend().alloc(nbytes, device, op);
  const int64_t now = g_in_use.fetch_add(int64_t(nbytes)) + int64_t(nbytes);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void release(void* p, size_t nbytes, int device) {
  if (p) g_in_use.fetch_sub(int64_t(nbytes));
  dl::cpu_backend().free(p, nbytes, device);
}

void synchronize(int) {}

// The host's memory stands for the device's; nothing is cached.
dl::CudaMemoryStats memory_stats(int) {
  dl::CudaMemoryStats s;
  s.in_use = g_in_use.load();
  s.peak_in_use = g_peak.load();
  const int64_t page = sysconf(_SC_PAGESIZE);
  s.device_total = page * int64_t(sysconf(_SC_PHYS_PAGES));
  s.device_free = std::min(s.device_total, page * int64_t(sysconf(_SC_AVPHYS_PAGES)));
  return s;
}

void empty_cache() {}
const char* device_name(int) { return "host stand-in (tests/gpu/fake_plugin.cpp)"; }

}  // namespace

extern "C" __attribute__((visibility("default"))) int dl_cuda_plugin_init(dl::CudaPluginInit* init) {
  if (!init || init->abi != dl::kCudaPluginAbi) return 1;
  if (init->core_marker != reinterpret_cast<const void*>(&dl::register_backend)) return 1;
  g_stand_in = dl::cpu_backend();
  g_stand_in.name = "cuda";
  g_stand_in.alloc = alloc;
  g_stand_in.free = release;
  init->backend = &g_stand_in;
  init->device_count = 1;
  init->synchronize = synchronize;
  init->memory_stats = memory_stats;
  init->empty_cache = empty_cache;
  init->device_name = device_name;
  return 0;
}
