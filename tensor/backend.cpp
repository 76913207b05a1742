#include "tensor/backend.h"

#include <atomic>

#include "tensor/allocator.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/nn_kernels.h"

namespace dl {

namespace {
void* cpu_alloc(size_t n, int, const char* op) { return host_allocator::allocate(n, op); }
void cpu_free(void* p, size_t n, int) { host_allocator::deallocate(p, n); }

const Backend kCpu = {
    "cpu", cpu_alloc, cpu_free, cpu::unary, cpu::binary, cpu::binary_scalar,
    cpu::where, cpu::clamp, cpu::copy, cpu::fill,
    // reductions
    cpu::reduce, cpu::arg_reduce, cpu::softmax,
    // indexing and linear algebra
    cpu::cat, cpu::index_select, cpu::gather, cpu::scatter_add, cpu::matmul,
    // neural networks
    cpu::conv2d, cpu::conv2d_input_grad, cpu::conv2d_weight_grad, cpu::max_pool2d,
    cpu::max_pool2d_backward, cpu::avg_pool2d, cpu::avg_pool2d_backward, cpu::batch_norm_stats,
    cpu::channel_affine, cpu::cross_entropy,
};

std::atomic<const Backend*> g_cuda{nullptr};
}  // namespace

const Backend& cpu_backend() { return kCpu; }

const Backend& backend_for(Device d, const char* op) {
  if (d.is_cpu()) return kCpu;
  const Backend* b = g_cuda.load(std::memory_order_acquire);
  if (!b) fail(ErrorKind::NotImplemented, op, ": cuda is not available (no GPU plugin loaded)");
  return *b;
}

void register_backend(DeviceType type, const Backend* b) {
  DL_ASSERT(type == DeviceType::CUDA);
  g_cuda.store(b, std::memory_order_release);
}

}  // namespace dl
