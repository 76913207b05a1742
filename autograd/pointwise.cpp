// The pointwise family, recorded: forwards and derivatives side by side.
#include <cmath>

#include "autograd/math.h"
#include "autograd/record.h"

namespace dl::ag {

using namespace math;

// ---- unary: a node saves x, or y for the ops whose derivative reads the output --------

namespace {
constexpr bool uses_output(Op op) {
  return op == Op::Exp || op == Op::Expm1 || op == Op::Sqrt || op == Op::Rsqrt || op == Op::Tan ||
         op == Op::Tanh || op == Op::Sigmoid;
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
// One pass each instead of two or three recorded ops (ops.def, "Derivatives of unary
// ops"); themselves differentiable, so higher orders still work.
DL_UNARY_GRAD(Tanh, y, ag::binary(Op::TanhBackward, gy, y))
DL_UNARY_GRAD(Sigmoid, y, ag::binary(Op::SigmoidBackward, gy, y))
DL_UNARY_GRAD(Relu, x, ag::binary(Op::ReluBackward, gy, x))
DL_UNARY_GRAD(Softplus, x, gy * sigmoid(x))
DL_UNARY_GRAD(Erf, x, gy * exp(-(x * x)) * (2.0 / std::sqrt(M_PI)))
DL_UNARY_GRAD(Gelu, x, ag::binary(Op::GeluBackward, gy, x))
#undef DL_UNARY_GRAD

// ---- binary: nodes save a (0) and b (1); scalar forms keep the number in attrs --------

namespace {
Grads binary_scalar_backward(Node& n, const TensorList& g);

// a op s (or s op a) whose derivative in a is a number: a number added, subtracted, a
// multiple, a divided by a number. Such a node saves nothing; binary_scalar_backward
// takes these ops' gradients from the number alone.
constexpr bool linear_in_tensor(Op op, bool scalar_first) {
  return op == Op::Add || op == Op::Sub || op == Op::Mul || (op == Op::Div && !scalar_first);
}
}

Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  Tensor y = dl::binary(op, a, b);
  Ref<Node> n = maybe_node(op, {&a, &b});
  if (!n) return y;
  n->attrs.i[0] = int64_t(op);
  if (op == Op::Add || op == Op::Sub) return finish(n, y);  // nothing to save
  n->save(a);
  n->save(b);
  if (op == Op::Pow) n->save(y, true);
  return finish(n, y);
}

Tensor binary(Op op, const Tensor& a, Scalar s, bool scalar_first) {
  Tensor y = dl::binary(op, a, s, scalar_first);
  Ref<Node> n = maybe_node(op_name(op), derivative_of(op) ? binary_scalar_backward : nullptr, {&a});
  if (!n) return y;
  if (!linear_in_tensor(op, scalar_first)) n->save(a);
  if (op == Op::Pow && scalar_first) n->save(y, true);  // s^a's gradient reads s^a
  n->attrs.i[0] = int64_t(op);
  n->attrs.i[1] = scalar_first;
  n->attrs.d[0] = s.v;
  return finish(n, y);
}

namespace {
// d(a op b)/da and d(a op b)/db times g, for tensors or (with one side a number) mixed.
Tensor grad_a(Op op, const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& y) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mod: return g;
    case Op::Mul: return g * b;
    case Op::Div: return g / b;
    case Op::Pow: return g * b * pow(a, b - 1.0);
    case Op::Maximum: return g * (mask(ag::compare(Op::Gt, a, b), g) + mask(ag::compare(Op::Eq, a, b), g) * 0.5);
    case Op::Minimum: return g * (mask(ag::compare(Op::Lt, a, b), g) + mask(ag::compare(Op::Eq, a, b), g) * 0.5);
    case Op::Atan2: return g * b / (a * a + b * b);
    // Linear in the incoming gradient a: the same op on g.
    case Op::TanhBackward: case Op::SigmoidBackward: case Op::ReluBackward: case Op::GeluBackward:
      return ag::binary(op, g, b);
    default: fail(ErrorKind::Internal, "no derivative for ", op_name(op));
  }
}
Tensor grad_b(Op op, const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& y) {
  switch (op) {
    case Op::Add: return g;
    case Op::Sub: return -g;
    case Op::Mul: return g * a;
    case Op::Div: return -(g * a / (b * b));
    case Op::Mod: return -(g * floor(a / b));
    case Op::Pow: {
      // y * log(a), defined as 0 where a == 0 and b >= 0 (PyTorch's convention).
      Tensor safe = ag::compare(Op::Logical_and, ag::compare(Op::Eq, a, Scalar(0.0)), ag::compare(Op::Ge, b, Scalar(0.0)));
      Tensor la = log(ag::where(safe, ones(Shape{}, a.dtype(), a.device()), a));
      return g * y * la;
    }
    case Op::Maximum: return g * (mask(ag::compare(Op::Lt, a, b), g) + mask(ag::compare(Op::Eq, a, b), g) * 0.5);
    case Op::Minimum: return g * (mask(ag::compare(Op::Gt, a, b), g) + mask(ag::compare(Op::Eq, a, b), g) * 0.5);
    case Op::Atan2: return -(g * a / (a * a + b * b));
    case Op::TanhBackward: return g * a * b * -2.0;           // d/dy of a (1 - y^2)
    case Op::SigmoidBackward: return g * a * (1.0 - b * 2.0);  // d/dy of a y (1 - y)
    case Op::ReluBackward: return Tensor();                    // 0 almost everywhere: none
    // d/dx of a (Phi(x) + x phi(x)) = a phi(x) (2 - x^2)
    case Op::GeluBackward: return g * a * exp(b * b * -0.5) * 0.39894228040143267794 * (2.0 - b * b);
    default: fail(ErrorKind::Internal, "no derivative for ", op_name(op));
  }
}

Grads binary_backward(Node& n, const TensorList& g) {
  Op op = Op(n.attrs.i[0]);
  bool saved = op != Op::Add && op != Op::Sub;
  Tensor a = saved ? n.unpack(0) : Tensor(), b = saved ? n.unpack(1) : Tensor();
  Tensor y = op == Op::Pow ? n.unpack(2) : Tensor();
  const Tensor& gy = g[0];
  Grads out(2);
  if (n.next[0].valid()) out[0] = grad_a(op, gy, a, b, y);
  if (n.next[1].valid()) out[1] = grad_b(op, gy, a, b, y);
  return out;
}

Grads binary_scalar_backward(Node& n, const TensorList& g) {
  Op op = Op(n.attrs.i[0]);
  bool first = n.attrs.i[1] != 0;
  if (linear_in_tensor(op, first)) {  // nothing was saved
    switch (op) {
      case Op::Add: return {g[0]};
      case Op::Sub: return {first ? -g[0] : g[0]};
      case Op::Mul: return {g[0] * n.attrs.d[0]};
      default: return {g[0] / n.attrs.d[0]};  // Div, not first
    }
  }
  // x^s: g s x^(s-1), with s - 1 taken as a number (as PyTorch's pow_backward); x^1 is x
  // (the second derivative of x^3 computes one op fewer).
  if (op == Op::Pow && !first) {
    Tensor x = n.unpack(0);
    const double e = n.attrs.d[0] - 1.0;
    return {g[0] * n.attrs.d[0] * (e == 1.0 ? x : pow(x, e))};
  }
  Tensor x = n.unpack(0), y = op == Op::Pow && first ? n.unpack(1) : Tensor();
  const Tensor& gy = g[0];
  Tensor s = full(Shape{}, Scalar(n.attrs.d[0]), is_floating(x.dtype()) ? x.dtype() : default_float(), x.device());
  return {first ? grad_b(op, gy, s, x, y) : grad_a(op, gy, x, s, y)};
}
}  // namespace

#define DL_BINARY_GRAD(Name) \
  template <> Grads derivative<Op::Name>(Node & n, const TensorList& g) { return binary_backward(n, g); }
DL_BINARY_GRAD(Add)
DL_BINARY_GRAD(Sub)
DL_BINARY_GRAD(Mul)
DL_BINARY_GRAD(Div)
DL_BINARY_GRAD(Mod)
DL_BINARY_GRAD(Pow)
DL_BINARY_GRAD(Maximum)
DL_BINARY_GRAD(Minimum)
DL_BINARY_GRAD(Atan2)
DL_BINARY_GRAD(TanhBackward)
DL_BINARY_GRAD(SigmoidBackward)
DL_BINARY_GRAD(ReluBackward)
DL_BINARY_GRAD(GeluBackward)
#undef DL_BINARY_GRAD

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
  return {g[0] * mask(c, g[0]), g[0] * mask(dl::unary(Op::Logical_not, c), g[0])};
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
  return {g[0] * mask(inside, g[0])};
}

Tensor masked_fill(const Tensor& x, const Tensor& m, Scalar value) {
  Tensor y = dl::masked_fill(x, m, value);
  Ref<Node> n = maybe_node(Op::MaskedFill, {&x});
  if (!n) return y;
  n->save(m);
  return finish(n, y);
}
template <> Grads derivative<Op::MaskedFill>(Node& n, const TensorList& g) {
  return {g[0] * mask(dl::unary(Op::Logical_not, n.unpack(0)), g[0])};
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
