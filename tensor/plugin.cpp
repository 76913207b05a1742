// Loading the CUDA plugin (see tensor/plugin.h).
#include "tensor/plugin.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "tensor/backend.h"

namespace dl::cuda {

namespace {

struct PluginState {
  std::once_flag once;
  std::atomic<bool> ready{false};  // loaded, registered, at least one device
  std::string status;
  CudaPluginInit api;
};

PluginState& state() {
  static PluginState* s = new PluginState();  // leaked on purpose: tensors freed at exit use it
  return *s;
}

void load(PluginState& s) {
  std::string path;
  if (const char* env = std::getenv("DLUA_CUDA_PLUGIN"); env && *env) {
    path = env;
  } else {
    path = engine_dir() + "libdlua_cuda.so";
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    s.status = "cannot load the CUDA plugin " + path + ": " + (err ? err : "unknown error");
    return;
  }
  // The plugin stays loaded for the life of the process: device storages freed at exit
  // call back into it.
  auto init = reinterpret_cast<CudaPluginInitFn>(dlsym(handle, "dl_cuda_plugin_init"));
  if (!init) {
    s.status = path + " is not a dlua CUDA plugin (no dl_cuda_plugin_init)";
    return;
  }
  s.api = CudaPluginInit{};
  s.api.core_marker = reinterpret_cast<const void*>(&register_backend);  // (see plugin.h)
  int rc = 0;
  try {
    rc = init(&s.api);
  } catch (const std::exception& e) {
    s.status = std::string("the CUDA plugin failed to start: ") + e.what();
    return;
  }
  s.api.error[sizeof(s.api.error) - 1] = '\0';
  if (rc != 0 || !s.api.backend) {
    s.status = s.api.error[0] ? s.api.error : "the CUDA plugin failed to start";
    return;
  }
  if (s.api.device_count <= 0) {
    s.status = "no CUDA device found";
    return;
  }
  register_backend(DeviceType::CUDA, s.api.backend, s.api.device_count);
  s.status = "CUDA plugin " + path + ": " + std::to_string(s.api.device_count) + " device" +
             (s.api.device_count == 1 ? "" : "s");
  s.ready.store(true, std::memory_order_release);
}

PluginState& loaded_state() {
  PluginState& s = state();
  std::call_once(s.once, [&] { load(s); });
  return s;
}

void check_index(int device, const char* op) {
  DL_CHECK(available(), op, ": cuda is not available (", status(), ")");
  DL_CHECK(device >= 0 && device < device_count(), op, ": device cuda:", device,
           " is not available (", device_count(), " CUDA device", device_count() == 1 ? "" : "s", ")");
}

}  // namespace

bool available() { return loaded_state().ready.load(std::memory_order_acquire); }

int device_count() { return available() ? state().api.device_count : 0; }

const std::string& status() { return loaded_state().status; }

bool loaded() { return state().ready.load(std::memory_order_acquire); }

void synchronize(int device) {
  if (!loaded()) return;
  if (device >= 0) check_index(device, "cuda.synchronize");
  state().api.synchronize(device);
}

CudaMemoryStats memory_stats(int device) {
  check_index(device, "cuda.memory_stats");
  return state().api.memory_stats(device);
}

std::string device_name(int device) {
  check_index(device, "cuda.get_device_name");
  return state().api.device_name(device);
}

void empty_cache() {
  if (loaded()) state().api.empty_cache();
}

}  // namespace dl::cuda

namespace dl {

std::string engine_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda::available), &info) == 0 || !info.dli_fname) return {};
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace dl
