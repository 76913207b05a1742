#include "tensor/backend.h"

#include <atomic>

#include "tensor/allocator.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/nn_kernels.h"
#include "tensor/plugin.h"

namespace dl {

namespace {
void* cpu_alloc(size_t n, int, const char* op) { return host_allocator::allocate(n, op); }
void cpu_free(void* p, size_t n, int) { host_allocator::deallocate(p, n); }

// Filled by name (C++20 designated initializers, in the struct's order): an entry
// added to Backend can never shift the others.
const Backend kCpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .unary = cpu::unary,
    .binary = cpu::binary,
    .binary_scalar = cpu::binary_scalar,
    .where = cpu::where,
    .clamp = cpu::clamp,
    .copy = cpu::copy,
    .fill = cpu::fill,
    .fused = cpu::fused,
    // reductions
    .reduce = cpu::reduce,
    .arg_reduce = cpu::arg_reduce,
    .softmax = cpu::softmax,
    .scan = cpu::scan,
    // sorting and selection
    .sort = cpu::sort,
    .nonzero = cpu::nonzero,
    .searchsorted = cpu::searchsorted,
    // indexing and linear algebra
    .cat = cpu::cat,
    .index_select = cpu::index_select,
    .gather = cpu::gather,
    .scatter_add = cpu::scatter_add,
    .matmul = cpu::matmul,
    // decompositions and solves
    .linalg = cpu::linalg,
    // random numbers
    .random = cpu::random,
    // optimizer updates
    .sgd_step = cpu::sgd_step,
    .adam_step = cpu::adam_step,
    // neural networks
    .conv2d = cpu::conv2d,
    .conv2d_input_grad = cpu::conv2d_input_grad,
    .conv2d_weight_grad = cpu::conv2d_weight_grad,
    .max_pool2d = cpu::max_pool2d,
    .max_pool2d_backward = cpu::max_pool2d_backward,
    .avg_pool2d = cpu::avg_pool2d,
    .avg_pool2d_backward = cpu::avg_pool2d_backward,
    .batch_norm_stats = cpu::batch_norm_stats,
    .channel_affine = cpu::channel_affine,
    .layer_norm = cpu::layer_norm,
    .layer_norm_backward = cpu::layer_norm_backward,
    .cross_entropy = cpu::cross_entropy,
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
