#include "tensor/backend.h"

#include <atomic>

#include "tensor/allocator.h"
#include "tensor/cpu/kernels.h"
#include "tensor/plugin.h"

namespace dl {

namespace {
void* cpu_alloc(size_t n, int, const char* op) { return host_allocator::allocate(n, op); }
void cpu_free(void* p, size_t n, int) { host_allocator::deallocate(p, n); }

// Filled by name (C++20 designated initializers, in the struct's order), one entry per
// row of tensor/kernels.def.
const Backend kCpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
#define DL_KERNEL(name, params) .name = cpu::name,
#include "tensor/kernels.def"
};

std::atomic<const Backend*> g_cuda{nullptr};
std::atomic<int> g_cuda_count{-1};  // devices the backend serves; -1: unbounded
}  // namespace

const Backend& cpu_backend() { return kCpu; }

const Backend& backend_for(Device d, const char* op) {
  if (d.is_cpu()) return kCpu;
  const Backend* b = g_cuda.load(std::memory_order_acquire);
  if (!b) {
    cuda::available();  // loads the plugin on first use, which registers its backend
    b = g_cuda.load(std::memory_order_acquire);
    if (!b) fail(ErrorKind::NotImplemented, op, ": cuda is not available (", cuda::status(), ")");
  }
  const int n = g_cuda_count.load(std::memory_order_acquire);
  if (n >= 0 && (d.index < 0 || d.index >= n))
    fail(ErrorKind::Value, op, ": device ", d, " is not available (", n, " CUDA device",
         n == 1 ? "" : "s", ")");
  return *b;
}

void register_backend(DeviceType type, const Backend* b, int device_count) {
  DL_ASSERT(type == DeviceType::CUDA);
  g_cuda_count.store(b ? device_count : -1, std::memory_order_release);
  g_cuda.store(b, std::memory_order_release);
}

}  // namespace dl
