// Operators for writing derivative formulas as ordinary (recorded) math:
//   return {gy * (1 - y * y)};
// Each one calls the recorded op of autograd.h, so a formula is itself differentiable.
#pragma once
#include "autograd/autograd.h"

namespace dl::ag::math {

inline Tensor operator+(const Tensor& a, const Tensor& b) { return ag::binary(Op::Add, a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ag::binary(Op::Sub, a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ag::binary(Op::Mul, a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ag::binary(Op::Div, a, b); }
inline Tensor operator+(const Tensor& a, double s) { return ag::binary(Op::Add, a, Scalar(s)); }
inline Tensor operator-(const Tensor& a, double s) { return ag::binary(Op::Sub, a, Scalar(s)); }
inline Tensor operator*(const Tensor& a, double s) { return ag::binary(Op::Mul, a, Scalar(s)); }
inline Tensor operator/(const Tensor& a, double s) { return ag::binary(Op::Div, a, Scalar(s)); }
inline Tensor operator+(double s, const Tensor& a) { return ag::binary(Op::Add, a, Scalar(s), true); }
inline Tensor operator-(double s, const Tensor& a) { return ag::binary(Op::Sub, a, Scalar(s), true); }
inline Tensor operator*(double s, const Tensor& a) { return ag::binary(Op::Mul, a, Scalar(s), true); }
inline Tensor operator/(double s, const Tensor& a) { return ag::binary(Op::Div, a, Scalar(s), true); }
inline Tensor operator-(const Tensor& a) { return ag::unary(Op::Neg, a); }

inline Tensor exp(const Tensor& x) { return ag::unary(Op::Exp, x); }
inline Tensor log(const Tensor& x) { return ag::unary(Op::Log, x); }
inline Tensor sqrt(const Tensor& x) { return ag::unary(Op::Sqrt, x); }
inline Tensor sin(const Tensor& x) { return ag::unary(Op::Sin, x); }
inline Tensor cos(const Tensor& x) { return ag::unary(Op::Cos, x); }
inline Tensor sinh(const Tensor& x) { return ag::unary(Op::Sinh, x); }
inline Tensor cosh(const Tensor& x) { return ag::unary(Op::Cosh, x); }
inline Tensor rsqrt(const Tensor& x) { return ag::unary(Op::Rsqrt, x); }
inline Tensor sign(const Tensor& x) { return ag::unary(Op::Sign, x); }
inline Tensor abs(const Tensor& x) { return ag::unary(Op::Abs, x); }
inline Tensor sigmoid(const Tensor& x) { return ag::unary(Op::Sigmoid, x); }
inline Tensor floor(const Tensor& x) { return ag::unary(Op::Floor, x); }
inline Tensor trunc(const Tensor& x) { return sign(x) * floor(abs(x)); }
inline Tensor pow(const Tensor& x, double p) { return ag::binary(Op::Pow, x, Scalar(p)); }
inline Tensor pow(const Tensor& x, const Tensor& p) { return ag::binary(Op::Pow, x, p); }

// Constant (never differentiated) masks from comparisons, as the gradient's dtype.
inline Tensor mask(const Tensor& b, const Tensor& like) { return ag::cast(b, like.dtype()); }

// g where `keep` holds and 0 elsewhere, by selecting, as PyTorch's where, clamp and
// masked_fill gradients do: g * mask(keep) would turn an infinite or NaN g where it is
// not kept into NaN (0 times it), and a gradient that flows back through the branch of
// a select not taken (dl.cond exported, Note [A gradient through both branches] in
// scripts/dlua/control.lua) would be NaN wherever that branch's derivative is.
inline Tensor kept(const Tensor& keep, const Tensor& g) {
  return ag::where(keep, g, dl::zeros({}, g.dtype(), g.device()));
}

}  // namespace dl::ag::math
