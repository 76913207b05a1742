// The plugin's entry point: dl_cuda_plugin_init (the handshake of tensor/plugin.h) and
// the CUDA Backend table, filled by name.
#include <cstdio>
#include <cstring>
#include <exception>

#include "gpu/common.h"

namespace dl::gpu {

namespace {

void* backend_alloc(size_t nbytes, int device, const char* op) { return device_alloc(nbytes, device, op); }
void backend_free(void* p, size_t nbytes, int device) { device_free(p, nbytes, device); }

const Backend kCuda = {
    .name = "cuda",
    .alloc = backend_alloc,
    .free = backend_free,
#define DL_KERNEL(name, params) .name = name,
#include "tensor/kernels.def"
    .half_matmul = true,
};

void api_synchronize(int device) { synchronize(device); }
CudaMemoryStats api_memory_stats(int device) { return memory_stats(device); }
void api_empty_cache() { empty_cache(); }
const char* api_device_name(int device) { return device_name(device); }

void set_error(CudaPluginInit* init, const std::string& msg) {
  std::snprintf(init->error, sizeof init->error, "%s", msg.c_str());
}

// Why cudaGetDeviceCount failed, in words a user can act on.
std::string no_devices(cudaError_t e) {
  switch (e) {
    case cudaErrorNoDevice:
      return "no CUDA device found";
    case cudaErrorInsufficientDriver:
      return "no usable CUDA driver (missing, or older than the CUDA " + std::to_string(CUDART_VERSION / 1000) +
             "." + std::to_string(CUDART_VERSION % 1000 / 10) + " runtime the plugin was built with)";
    default:
      return std::string("CUDA cannot be used: ") + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  }
}

}  // namespace

}  // namespace dl::gpu

extern "C" __attribute__((visibility("default"))) int dl_cuda_plugin_init(dl::CudaPluginInit* init) {
  using namespace dl;
  if (!init) return 1;
  try {
    if (init->abi != kCudaPluginAbi) {
      gpu::set_error(init, "the CUDA plugin was built for another version of dlua (plugin ABI " +
                               std::to_string(kCudaPluginAbi) + ", engine ABI " + std::to_string(init->abi) + ")");
      return 1;
    }
    // The plugin is linked against libdlua_core.so; an engine linked statically into
    // a program is another copy, whose tensors and backend table this one cannot see.
    if (init->core_marker != reinterpret_cast<const void*>(&register_backend)) {
      gpu::set_error(init, "the CUDA plugin works with the engine in libdlua_core.so only, and this "
                           "program has its own copy of the engine");
      return 1;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
      cudaGetLastError();
      gpu::set_error(init, e != cudaSuccess ? gpu::no_devices(e) : std::string("no CUDA device found"));
      return 1;
    }
    gpu::init_devices(n);
    init->backend = &gpu::kCuda;
    init->device_count = n;
    init->synchronize = gpu::api_synchronize;
    init->memory_stats = gpu::api_memory_stats;
    init->empty_cache = gpu::api_empty_cache;
    init->device_name = gpu::api_device_name;
    return 0;
  } catch (const std::exception& ex) {
    gpu::set_error(init, std::string("the CUDA plugin failed to start: ") + ex.what());
    return 1;
  } catch (...) {
    gpu::set_error(init, "the CUDA plugin failed to start");
    return 1;
  }
}
