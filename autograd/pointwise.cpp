// The pointwise family, recorded: forwards and derivatives side by side.
#include <cmath>
#include <initializer_list>
#include <iterator>

#include "autograd/math.h"
#include "autograd/record.h"

namespace dl::ag {

using namespace math;

// ---- unary: a node saves x, or y for the ops whose derivative reads the output --------

namespace {
constexpr bool uses_output(Op op) {
  return op == Op::Exp || op == Op::Expm1 || op == Op::Sqrt || op == Op::Rsqrt || op == Op::Tan ||
         op == Op::Tanh || op == Op::Sigmoid || op == Op::Erfinv || op == Op::Exp2;
}
}  // namespace

Tensor unary(Op op, const Tensor& x) {
  Tensor y = dl::unary(op, x);
  Ref<Node> n = maybe_node(op, {&x});
  if (!n) return y;
  if (uses_output(op)) n->save(y, /*is_output=*/true);
  else n->save(x);
  return finish(n, y);
}

namespace {
// sum of c[k] x^k (Horner's rule), recorded.
Tensor polynomial(const Tensor& x, std::initializer_list<double> c) {
  const double* k = std::data(c) + c.size();
  Tensor acc = full(Shape{}, Scalar(*--k), x.dtype(), x.device());
  while (k != std::data(c)) acc = acc * x + *--k;
  return acc;
}
// v / x where |x| >= 1e-3, and below, `near`: the Taylor polynomial of v / x there (its
// next term under 1e-20), so that every order of derivative is right near 0 (the quotient
// cancels there); the division sees 1 in that branch, so neither branch's gradient is NaN.
Tensor over_x(const Tensor& v, const Tensor& x, const Tensor& near) {
  const Tensor small = ag::compare(Op::Lt, abs(x), Scalar(1e-3));
  const Tensor safe = ag::where(small, ones(Shape{}, x.dtype(), x.device()), x);
  return ag::where(small, near, v / safe);
}
// J_1(x) / x and I_1(x) / x near 0: 1/2 -+ x^2/16 + x^4/384 -+ x^6/18432.
Tensor j1_over_x_near(const Tensor& x) { return polynomial(x * x, {0.5, -1.0 / 16, 1.0 / 384, -1.0 / 18432}); }
Tensor i1_over_x_near(const Tensor& x) { return polynomial(x * x, {0.5, 1.0 / 16, 1.0 / 384, 1.0 / 18432}); }
}  // namespace

#define DL_UNARY_GRAD(Name, var, expr)                                         \
  template <> Grads derivative<Op::Name>(Node & n, const TensorList& g) { \
    static_assert(uses_output(Op::Name) == (#var[0] == 'y'));                  \
    const Tensor& gy = g[0];                                                   \
    Tensor var = n.unpack(0);                                                  \
    return {expr};                                                             \
  }

DL_UNARY_GRAD(Neg, x, -gy)
DL_UNARY_GRAD(Abs, x, gy * sign(x))
DL_UNARY_GRAD(Exp, y, gy * y)
DL_UNARY_GRAD(Log, x, gy / x)
DL_UNARY_GRAD(Log1p, x, gy / (x + 1.0))
DL_UNARY_GRAD(Expm1, y, gy * (y + 1.0))
DL_UNARY_GRAD(Sqrt, y, gy / (y * 2.0))
DL_UNARY_GRAD(Rsqrt, y, gy * (y * y * y) * -0.5)
DL_UNARY_GRAD(Sin, x, gy * cos(x))
DL_UNARY_GRAD(Cos, x, -(gy * sin(x)))
DL_UNARY_GRAD(Tan, y, gy * (y * y + 1.0))
DL_UNARY_GRAD(Asin, x, gy * rsqrt(1.0 - x * x))
DL_UNARY_GRAD(Acos, x, -(gy * rsqrt(1.0 - x * x)))
DL_UNARY_GRAD(Atan, x, gy / (x * x + 1.0))
DL_UNARY_GRAD(Sinh, x, gy * cosh(x))
DL_UNARY_GRAD(Cosh, x, gy * sinh(x))
DL_UNARY_GRAD(Asinh, x, gy * rsqrt(x * x + 1.0))
DL_UNARY_GRAD(Acosh, x, gy * rsqrt(x * x - 1.0))
DL_UNARY_GRAD(Atanh, x, gy / (1.0 - x * x))
DL_UNARY_GRAD(Exp2, y, gy * y * M_LN2)
DL_UNARY_GRAD(Log2, x, gy / (x * M_LN2))
DL_UNARY_GRAD(Log10, x, gy / (x * M_LN10))
DL_UNARY_GRAD(Erfc, x, gy * exp(-(x * x)) * (-2.0 / std::sqrt(M_PI)))
// One pass each instead of two or three recorded ops (ops.def, "Derivatives of unary
// ops"); themselves differentiable, so higher orders still work.
DL_UNARY_GRAD(Tanh, y, ag::binary(Op::TanhBackward, gy, y))
DL_UNARY_GRAD(Sigmoid, y, ag::binary(Op::SigmoidBackward, gy, y))
DL_UNARY_GRAD(Relu, x, ag::binary(Op::ReluBackward, gy, x))
DL_UNARY_GRAD(Softplus, x, gy * sigmoid(x))
DL_UNARY_GRAD(Erf, x, gy * exp(-(x * x)) * (2.0 / std::sqrt(M_PI)))
DL_UNARY_GRAD(Gelu, x, ag::binary(Op::GeluBackward, gy, x))
DL_UNARY_GRAD(Erfinv, y, gy * exp(y * y) * (std::sqrt(M_PI) / 2.0))
DL_UNARY_GRAD(Lgamma, x, gy * ag::unary(Op::Digamma, x))
DL_UNARY_GRAD(Digamma, x, gy * ag::binary(Op::Polygamma, ones(Shape{}, x.dtype(), x.device()), x))
// The Bessel functions (tensor/bessel.h): J_0' = -J_1, J_1' = J_0 - J_1 / x, the same for Y;
// I_0' = I_1, I_1' = I_0 - I_1 / x; K_0' = -K_1, K_1' = -K_0 - K_1 / x; the scaled forms by
// the product rule. J_1 / x and I_1 / x (1/2 at 0) by their series near 0 (over_x).
DL_UNARY_GRAD(I0, x, gy * ag::unary(Op::I1, x))
DL_UNARY_GRAD(I0e, x, gy * (ag::unary(Op::I1e, x) - sign(x) * ag::unary(Op::I0e, x)))
DL_UNARY_GRAD(I1, x, gy * (ag::unary(Op::I0, x) - over_x(ag::unary(Op::I1, x), x, i1_over_x_near(x))))
DL_UNARY_GRAD(I1e, x, gy * (ag::unary(Op::I0e, x) - over_x(ag::unary(Op::I1e, x), x, exp(-abs(x)) * i1_over_x_near(x)) -
                           sign(x) * ag::unary(Op::I1e, x)))
DL_UNARY_GRAD(BesselJ0, x, -(gy * ag::unary(Op::BesselJ1, x)))
DL_UNARY_GRAD(BesselJ1, x, gy * (ag::unary(Op::BesselJ0, x) - over_x(ag::unary(Op::BesselJ1, x), x, j1_over_x_near(x))))
DL_UNARY_GRAD(BesselY0, x, -(gy * ag::unary(Op::BesselY1, x)))
DL_UNARY_GRAD(BesselY1, x, gy * (ag::unary(Op::BesselY0, x) - ag::unary(Op::BesselY1, x) / x))
DL_UNARY_GRAD(BesselK0, x, -(gy * ag::unary(Op::BesselK1, x)))
DL_UNARY_GRAD(BesselK1, x, -(gy * (ag::unary(Op::BesselK0, x) + ag::unary(Op::BesselK1, x) / x)))
DL_UNARY_GRAD(BesselK0e, x, gy * (ag::unary(Op::BesselK0e, x) - ag::unary(Op::BesselK1e, x)))
DL_UNARY_GRAD(BesselK1e, x, gy * (ag::unary(Op::BesselK1e, x) * (1.0 - 1.0 / x) - ag::unary(Op::BesselK0e, x)))
// (cos x - sin(x) / x) / x, near 0 its series -x/3 + x^3/30 - x^5/840 + x^7/45360
DL_UNARY_GRAD(SphericalJ0, x, gy * over_x(cos(x) - ag::unary(Op::SphericalJ0, x), x,
                                          x * polynomial(x * x, {-1.0 / 3, 1.0 / 30, -1.0 / 840, 1.0 / 45360})))
#undef DL_UNARY_GRAD

// ---- binary: one row per op --------------------------------------------------------------

// Note [Binary derivative rows]
// Each differentiable binary op of tensor/ops.def is one row: what its node saves, and
// the gradient of each input as ordinary recorded math (autograd/math.h) of the incoming
// gradient g, the inputs a and b, and the output y (saved only by the rows that say
// so). An undefined result is no gradient. The rows are all there is: the forward reads
// a row's `saves`, the backward its two formulas, and the derivative table
// (autograd/table.cpp) gets each row's backward by its op. A number operand (x * 2,
// 2 ^ x) is a 0-d tensor in the formula, except where the gradient needs only the
// number (binary_scalar_backward's shortcuts).
//   X(Name, saves, d/da, d/db)
#define DL_BINARY_DERIVATIVES(X)                                                                     \
  X(Add, kNothing, g, g)                                                                             \
  X(Sub, kNothing, g, -g)                                                                            \
  X(Mul, kInputs, g * b, g * a)                                                                      \
  X(Div, kInputs, g / b, -(g * a / (b * b)))                                                         \
  X(Mod, kInputs, g, -(g * floor(a / b)))                                                            \
  X(Fmod, kInputs, g, -(g * trunc(a / b)))                                                           \
  X(Pow, kOutput, g * b * pow(a, b - 1.0), g * y * log_or_zero(a, b))                                \
  X(Maximum, kInputs, g * share(Op::Gt, a, b, g), g * share(Op::Lt, a, b, g))                        \
  X(Minimum, kInputs, g * share(Op::Lt, a, b, g), g * share(Op::Gt, a, b, g))                        \
  X(Atan2, kInputs, g * b / (a * a + b * b), -(g * a / (a * a + b * b)))                             \
  /* n is a whole number: no gradient */                                                           \
  X(Polygamma, kInputs, Tensor(), g * ag::binary(Op::Polygamma, a + 1.0, b))                        \
  /* zeta(x, q): d/dq = -x zeta(x + 1, q); d/dx has no closed form here */                         \
  X(Zeta, kInputs, no_derivative("zeta", "x (its first operand)"), -(g * a * ag::binary(Op::Zeta, a + 1.0, b))) \
  /* P(a, x)' in x = x^(a - 1) e^-x / Gamma(a) (PyTorch's formula, NaN at a = 1, x = 0 as its); none in a */ \
  X(Igamma, kInputs, no_derivative("igamma", "a (its first operand)"), g * gamma_density(a, b))       \
  X(Igammac, kInputs, no_derivative("igammac", "a (its first operand)"), -(g * gamma_density(a, b)))  \
  /* the gradients of unary ops (ops.def): linear in a, the incoming gradient */                    \
  X(TanhBackward, kInputs, ag::binary(Op::TanhBackward, g, b), g * a * b * -2.0)                     \
  X(SigmoidBackward, kInputs, ag::binary(Op::SigmoidBackward, g, b), g * a * (1.0 - b * 2.0))        \
  X(ReluBackward, kInputs, ag::binary(Op::ReluBackward, g, b), Tensor())                             \
  X(GeluBackward, kInputs, ag::binary(Op::GeluBackward, g, b),                                       \
    g * a * exp(b * b * -0.5) * 0.39894228040143267794 * (2.0 - b * b))

namespace {

enum Saves { kNothing, kInputs, kOutput };   // kOutput: the inputs and the output

// For an input whose derivative is not implemented: asking for it is an error, never a
// gradient of 0.
Tensor no_derivative(const char* op, const char* input) {
  fail(ErrorKind::NotImplemented, op, ": the derivative with respect to ", input, " is not implemented");
}

// The 1 where cmp(a, b) holds, 1/2 where a == b (max and min split a tie).
Tensor share(Op cmp, const Tensor& a, const Tensor& b, const Tensor& like) {
  return mask(ag::compare(cmp, a, b), like) + mask(ag::compare(Op::Eq, a, b), like) * 0.5;
}
// log(a), taken as 0 where a == 0 and b >= 0, so that 0 ^ b's gradient in b is 0 there
// (PyTorch's convention).
Tensor log_or_zero(const Tensor& a, const Tensor& b) {
  Tensor zero_base = ag::compare(Op::Logical_and, ag::compare(Op::Eq, a, Scalar(0.0)), ag::compare(Op::Ge, b, Scalar(0.0)));
  return log(ag::where(zero_base, ones(Shape{}, a.dtype(), a.device()), a));
}

// x^(a - 1) e^-x / Gamma(a), the Gamma(a, 1) density: the incomplete gammas' derivative in x.
Tensor gamma_density(const Tensor& a, const Tensor& x) {
  return exp((a - 1.0) * log(x) - x - ag::unary(Op::Lgamma, a));
}

struct Operands {
  const Tensor& g;
  const Tensor& a;
  const Tensor& b;
  const Tensor& y;
};
using Formula = Tensor (*)(const Operands&);
struct BinaryDerivative {
  Saves saves;
  Formula da, db;
};

#define DL_OPERANDS                     \
  [[maybe_unused]] const Tensor& g = v.g; \
  [[maybe_unused]] const Tensor& a = v.a; \
  [[maybe_unused]] const Tensor& b = v.b; \
  [[maybe_unused]] const Tensor& y = v.y;
#define DL_ROW(Name, saves, da, db)                                    \
  BinaryDerivative{saves, [](const Operands& v) -> Tensor { DL_OPERANDS return da; }, \
                   [](const Operands& v) -> Tensor { DL_OPERANDS return db; }},
const BinaryDerivative kRows[] = {DL_BINARY_DERIVATIVES(DL_ROW)};
#undef DL_ROW
#undef DL_OPERANDS

enum RowIndex {
#define DL_ROW(Name, ...) kRow##Name,
  DL_BINARY_DERIVATIVES(DL_ROW)
#undef DL_ROW
};

const BinaryDerivative& row_of(Op op) {
  switch (op) {
#define DL_ROW(Name, ...) case Op::Name: return kRows[kRow##Name];
    DL_BINARY_DERIVATIVES(DL_ROW)
#undef DL_ROW
    default: fail(ErrorKind::Internal, "no derivative row for ", op_name(op));
  }
}

Grads binary_backward(const BinaryDerivative& row, Node& n, const TensorList& g) {
  const bool saved = row.saves != kNothing;
  const Tensor a = saved ? n.unpack(0) : Tensor(), b = saved ? n.unpack(1) : Tensor();
  const Tensor y = row.saves == kOutput ? n.unpack(2) : Tensor();
  const Operands v{g[0], a, b, y};
  Grads out(2);
  if (n.next[0].valid()) out[0] = row.da(v);
  if (n.next[1].valid()) out[1] = row.db(v);
  return out;
}

// a op s (or s op a) whose gradient in a needs only the number: a number added or
// subtracted, a multiple, a divided by a number. Such a node saves nothing.
constexpr bool linear_in_tensor(Op op, bool scalar_first) {
  return op == Op::Add || op == Op::Sub || op == Op::Mul || (op == Op::Div && !scalar_first);
}

Grads binary_scalar_backward(Node& n, const TensorList& g) {
  const Op op = Op(n.attrs.i[0]);
  const bool first = n.attrs.i[1] != 0;
  const double s = n.attrs.d[0];
  if (linear_in_tensor(op, first)) {  // nothing was saved
    switch (op) {
      case Op::Add: return {g[0]};
      case Op::Sub: return {first ? -g[0] : g[0]};
      case Op::Mul: return {g[0] * s};
      default: return {g[0] / s};  // Div, not first
    }
  }
  // x^s: g s x^(s-1), with s - 1 taken as a number (as PyTorch's pow_backward); x^1 is x
  // (the second derivative of x^3 computes one op fewer).
  if (op == Op::Pow && !first) {
    Tensor x = n.unpack(0);
    const double e = s - 1.0;
    return {g[0] * s * (e == 1.0 ? x : pow(x, e))};
  }
  const BinaryDerivative& row = row_of(op);
  const Tensor x = n.unpack(0), y = row.saves == kOutput && first ? n.unpack(1) : Tensor();
  const Tensor st = full(Shape{}, Scalar(s), is_floating(x.dtype()) ? x.dtype() : default_float(), x.device());
  return {first ? row.db(Operands{g[0], st, x, y}) : row.da(Operands{g[0], x, st, y})};
}

}  // namespace

Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  Tensor y = dl::binary(op, a, b);
  Ref<Node> n = maybe_node(op, {&a, &b});
  if (!n) return y;
  const Saves saves = row_of(op).saves;
  if (saves != kNothing) {
    n->save(a);
    n->save(b);
  }
  if (saves == kOutput) n->save(y, true);
  return finish(n, y);
}

Tensor binary(Op op, const Tensor& a, Scalar s, bool scalar_first) {
  Tensor y = dl::binary(op, a, s, scalar_first);
  Ref<Node> n = maybe_node(op_name(op), derivative_of(op) ? binary_scalar_backward : nullptr, {&a});
  if (!n) return y;
  if (!linear_in_tensor(op, scalar_first)) n->save(a);
  // s ^ a's gradient reads s ^ a (a ^ s's shortcut does not)
  if (scalar_first && row_of(op).saves == kOutput) n->save(y, true);
  n->attrs.i[0] = int64_t(op);
  n->attrs.i[1] = scalar_first;
  n->attrs.d[0] = s.v;
  return finish(n, y);
}

#define DL_ROW(Name, ...) \
  template <> Grads derivative<Op::Name>(Node & n, const TensorList& g) { return binary_backward(kRows[kRow##Name], n, g); }
DL_BINARY_DERIVATIVES(DL_ROW)
#undef DL_ROW

// ---- comparisons: never recorded ---------------------------------------------------------

Tensor compare(Op op, const Tensor& a, const Tensor& b) { return dl::compare(op, a, b); }
Tensor compare(Op op, const Tensor& a, Scalar s, bool first) { return dl::compare(op, a, s, first); }

// ---- where, clamp, masked_fill, cast ------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor y = dl::where(cond, a, b);
  Ref<Node> n = maybe_node(Op::Where, {&a, &b});
  if (!n) return y;
  n->save(cond);
  return finish(n, y);
}
template <> Grads derivative<Op::Where>(Node& n, const TensorList& g) {
  Tensor c = n.unpack(0);
  return {kept(c, g[0]), kept(dl::unary(Op::Logical_not, c), g[0])};
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  Tensor y = dl::clamp(x, lo, hi);
  Ref<Node> n = maybe_node(Op::Clamp, {&x});
  if (!n) return y;
  n->save(x);
  n->attrs.d[0] = lo ? *lo : -INFINITY;
  n->attrs.d[1] = hi ? *hi : INFINITY;
  return finish(n, y);
}
template <> Grads derivative<Op::Clamp>(Node& n, const TensorList& g) {
  Tensor x = n.unpack(0);
  Tensor inside = ag::compare(Op::Logical_and, ag::compare(Op::Ge, x, Scalar(n.attrs.d[0])),
                          ag::compare(Op::Le, x, Scalar(n.attrs.d[1])));
  return {kept(inside, g[0])};
}

Tensor masked_fill(const Tensor& x, const Tensor& m, Scalar value) {
  Tensor y = dl::masked_fill(x, m, value);
  Ref<Node> n = maybe_node(Op::MaskedFill, {&x});
  if (!n) return y;
  n->save(m);
  return finish(n, y);
}
template <> Grads derivative<Op::MaskedFill>(Node& n, const TensorList& g) {
  return {kept(dl::unary(Op::Logical_not, n.unpack(0)), g[0])};
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor y = dl::cast(x, dtype);
  if (!is_floating(dtype)) return y;  // no gradient through integers
  Ref<Node> n = maybe_node(Op::Cast, {&x});
  return finish(n, y);
}
// The engine casts each gradient to its input's dtype.
template <> Grads derivative<Op::Cast>(Node&, const TensorList& g) { return {g[0]}; }

namespace {
// The gradient of a move goes back to the device the value came from (attrs.i: its
// type and index); the move back is itself recorded, for higher derivatives.
Grads to_device_backward(Node& n, const TensorList& g) {
  return {to_device(g[0], Device{DeviceType(n.attrs.i[0]), int8_t(n.attrs.i[1])})};
}
}  // namespace

Tensor to_device(const Tensor& x, Device d) {
  if (d == x.device()) return x;
  Tensor y = dl::empty(x.shape(), x.dtype(), d, "to");
  dl::copy_(y, x);
  if (!is_floating(x.dtype())) return y;
  Ref<Node> n = maybe_node("to", to_device_backward, {&x});
  if (!n) return y;
  n->attrs.i[0] = int64_t(x.device().type);
  n->attrs.i[1] = x.device().index;
  return finish(n, y);
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor y = dl::contiguous(x);
  return finish(maybe_node(Op::Contiguous, {&x}), y);
}
Tensor clone(const Tensor& x) {
  Tensor y = dl::clone(x);
  return finish(maybe_node(Op::Contiguous, {&x}), y);
}
template <> Grads derivative<Op::Contiguous>(Node&, const TensorList& g) { return {g[0]}; }

}  // namespace dl::ag
