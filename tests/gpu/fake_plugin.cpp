// A stand-in for the CUDA plugin, for tests only: the CPU's kernels registered as the
// device "cuda", on host memory, one device. With DLUA_CUDA_PLUGIN set to it, the paths
// that scripts and the engine take by device (moving tensors, a compiled call's plan on
// a device, a gradient's way back) run where no GPU is lent, as in CI: what is decided
// by device, not what a GPU computes (tests/gpu/test_cuda_ops.cpp checks that, on one).
#include "tensor/backend.h"
#include "tensor/plugin.h"

namespace {

dl::Backend g_stand_in;

void synchronize(int) {}
dl::CudaMemoryStats memory_stats(int) { return {}; }
void empty_cache() {}
const char* device_name(int) { return "host stand-in (tests/gpu/fake_plugin.cpp)"; }

}  // namespace

extern "C" __attribute__((visibility("default"))) int dl_cuda_plugin_init(dl::CudaPluginInit* init) {
  if (!init || init->abi != dl::kCudaPluginAbi) return 1;
  if (init->core_marker != reinterpret_cast<const void*>(&dl::register_backend)) return 1;
  g_stand_in = dl::cpu_backend();
  g_stand_in.name = "cuda";
  init->backend = &g_stand_in;
  init->device_count = 1;
  init->synchronize = synchronize;
  init->memory_stats = memory_stats;
  init->empty_cache = empty_cache;
  init->device_name = device_name;
  return 0;
}
