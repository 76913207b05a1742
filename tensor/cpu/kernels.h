// The CPU kernels behind dl::cpu_backend() (see tensor/backend.h for the contract).
#pragma once
#include "tensor/ops.h"

namespace dl::cpu {

void unary(Op op, const Tensor& out, const Tensor& x);
void binary(Op op, const Tensor& out, const Tensor& a, const Tensor& b);
void binary_scalar(Op op, const Tensor& out, const Tensor& a, double s, bool scalar_first);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void clamp(const Tensor& out, const Tensor& x, double lo, double hi);
void copy(const Tensor& out, const Tensor& src);
void fill(const Tensor& out, double value);

}  // namespace dl::cpu
