// The CUDA plugin (gpu/, libdlua_cuda.so), loaded on first use (docs/design.md, "Plugins load on
// first use").
//
//   if (dl::cuda::available()) {                       // loads the plugin once
//     dl::Tensor x = dl::ones({2, 3}, dl::DType::Float32, dl::Device{dl::DeviceType::CUDA, 0});
//   }
//   std::string why = dl::cuda::status();              // "no CUDA driver ..." when not
//
// The core never links the CUDA libraries: it dlopens the plugin, which links them, and
// calls its one exported function, dl_cuda_plugin_init, with a CudaPluginInit to fill.
// The file is $DLUA_CUDA_PLUGIN when that is set, else libdlua_cuda.so in the directory
// of the library holding the engine (libdlua_core.so). The first cuda op, or
// dl::cuda::available(), loads it, under a lock, once; the result is kept. A missing
// file, a failed dlopen (no CUDA libraries on the machine), a plugin built against
// another copy of the engine, a missing driver or zero devices all leave the plugin
// unloaded or unregistered: CUDA is then "not available" and status() says why.
#pragma once
#include <cstdint>
#include <string>

namespace dl {

struct Backend;

// The memory of one CUDA device, in bytes.
struct CudaMemoryStats {
  int64_t in_use = 0;        // held by tensors (rounded to the allocator's block sizes)
  int64_t cached = 0;        // freed blocks kept by the plugin's caching allocator
  int64_t peak_in_use = 0;
  int64_t device_free = 0;   // as the driver reports it
  int64_t device_total = 0;
};

// The handshake. The core fills the inputs and calls
//   extern "C" int dl_cuda_plugin_init(dl::CudaPluginInit*);
// which returns 0 with the outputs filled, or non-zero with `error` saying why CUDA
// cannot be used. Bump kCudaPluginAbi whenever this struct or dl::Backend changes.
constexpr int kCudaPluginAbi = 2;

struct CudaPluginInit {
  // in
  int abi = kCudaPluginAbi;
  // &dl::register_backend as the loading engine sees it: the plugin compares it with
  // its own link to the engine, and refuses to run against a second copy.
  const void* core_marker = nullptr;
  // out
  const Backend* backend = nullptr;
  int device_count = 0;
  void (*synchronize)(int device) = nullptr;      // waits for the device's stream; -1: all
  CudaMemoryStats (*memory_stats)(int device) = nullptr;
  void (*empty_cache)() = nullptr;                // gives cached blocks back to the driver
  const char* (*device_name)(int device) = nullptr;
  char error[512] = {};
};

using CudaPluginInitFn = int (*)(CudaPluginInit*);

// The directory of the shared object that holds the engine (libdlua_core.so, or the
// program that links it), with a trailing slash; empty when unknown. Plugins are
// looked for there.
std::string engine_dir();

namespace cuda {

// True when the plugin loaded and found at least one device (loads it on first use).
bool available();
// The number of devices (0 when not available).
int device_count();
// Why CUDA is not available, or which plugin and devices are in use.
const std::string& status();
// Whether the plugin has been loaded and registered; never loads it.
bool loaded();
// Waits until the work queued on `device` (-1: every device) is done. Does nothing
// when the plugin is not loaded.
void synchronize(int device = -1);
// Throws when CUDA is not available or the index is out of range.
CudaMemoryStats memory_stats(int device);
std::string device_name(int device);
// Gives the cached device blocks back; does nothing when the plugin is not loaded.
void empty_cache();

}  // namespace cuda
}  // namespace dl
