// Pointwise ops on small contiguous host buffers, with no Tensor around them.
//
//   float a[4] = {1, 2, 3, 4}, b = 10, out[4];
//   bool done = dl::small::binary(dl::Op::Add, dl::DType::Float32, out, a, 1, &b, 0, 4);
//   // done: out is {11, 12, 13, 14}; not done: nothing was written, take the general path
//
// The bindings run the ops of tensors that live inline in Lua values through these
// (Note [Small tensors inline] in bindings/value.cpp; every path an op can take: Note
// [The paths of a + b] in tensor/small_sizes.h): no allocation, promotion or
// broadcasting machinery, only the arithmetic. They apply the kernels' own functors
// (tensor/functors.h) in the dtype the general front end (tensor/pointwise.cpp) would
// compute in, so a value is the same whichever path made it. They serve float32 and
// float64 operands of one dtype, where that front end computes in the operands' dtype;
// for anything else they return false and write nothing.
//
// A step is 1 for an operand with n elements and 0 for a one-element operand read for
// every output element. out may be one of the inputs.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/ops.h"

namespace dl::small {

// The dtype of out: dt, or Bool for logical_not.
bool unary(Op op, DType dt, void* out, const void* x, int64_t n);
// Binary ops (out of dtype dt) and comparisons (out of Bool).
bool binary(Op op, DType dt, void* out, const void* a, int a_step, const void* b, int b_step,
            int64_t n);
// a op s (s op a when scalar_first), s a Lua number.
bool binary_scalar(Op op, DType dt, void* out, const void* a, double s, bool scalar_first, int64_t n);

// The same for blocks of a few thousand elements (dl.compile's fused groups), built for
// wider vectors (Note [Blocks for AVX-512] in tensor/cpu/small.cpp); the same bits.
bool block_unary(Op op, DType dt, void* out, const void* x, int64_t n);
bool block_binary(Op op, DType dt, void* out, const void* a, int a_step, const void* b, int b_step,
                  int64_t n);
bool block_binary_scalar(Op op, DType dt, void* out, const void* a, double s, bool scalar_first, int64_t n);

}  // namespace dl::small
