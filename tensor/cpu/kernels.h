// The CPU kernels behind dl::cpu_backend(): one per row of tensor/kernels.def (the
// contracts are there), in tensor/cpu/*.cpp, and the CPU's own helpers.
#pragma once
#include <optional>

#include "tensor/nn.h"
#include "tensor/ops.h"
#include "tensor/optim_functors.h"
#include "tensor/random.h"

namespace dl::fused { struct Program; }

namespace dl::cpu {

#define DL_KERNEL(name, params) void name params;
#include "tensor/kernels.def"

// Contiguous float32 <-> float16/bfloat16 conversions (tensor/cpu/half.cpp). `vector`
// false runs the portable rounding for float16 even where F16C exists (for tests).
void half_from_float(DType to, const float* s, void* d, int64_t n, bool vector = true);
void half_to_float(DType from, const void* s, float* d, int64_t n, bool vector = true);
// copy() of a contiguous float32 tensor into a half one of the same size or back, as
// one vector loop; false (nothing done) for anything else.
bool convert_half(const Tensor& out, const Tensor& src);

}  // namespace dl::cpu
