// The table-driven gradient check: every differentiable op of tensor/ops.def, first
// and second order, in float64, against central finite differences, over broadcast
// and non-contiguous inputs. Unary, binary and reduction rows are checked by being
// declared; other rows need a sample call in other_cases() (a missing one fails).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include "autograd/autograd.h"
#include "autograd/nn.h"

using namespace dl;
namespace ag = dl::ag;

namespace {

using Fn = std::function<Tensor(const TensorList&)>;
struct Case {
  std::string name;
  Fn f;
  TensorList inputs;
};

// Deterministic values in ±[0.3, 1.3] (or [0.3, 1.3] when positive).
Tensor values(const Shape& s, uint64_t seed, bool positive = false) {
  manual_seed(seed);
  Tensor u = rand(s, DType::Float64);
  Tensor mag = binary(Op::Add, u, Scalar(0.3));
  if (positive) return mag;
  Tensor sgn = binary(Op::Sub, binary(Op::Mul, cast(compare(Op::Gt, rand(s, DType::Float64), Scalar(0.5)),
                                                    DType::Float64), Scalar(2.0)), Scalar(1.0));
  return binary(Op::Mul, mag, sgn);
}
// A non-contiguous tensor of shape (r, c): the transpose of a contiguous (c, r) one.
Tensor transposed(int64_t r, int64_t c, uint64_t seed, bool positive = false) {
  return transpose(values(Shape{c, r}, seed, positive), 0, 1);
}

// (the gamma family on (0.3, 1.3), away from its poles; polygamma's n, rounded, 0 or 1)
bool needs_positive(Op op) {
  return op == Op::Log || op == Op::Sqrt || op == Op::Rsqrt || op == Op::Pow || op == Op::Log1p ||
         op == Op::Lgamma || op == Op::Digamma || op == Op::Polygamma || op == Op::Log2 || op == Op::Log10 ||
         op == Op::BesselY0 || op == Op::BesselY1 || op == Op::BesselK0 || op == Op::BesselK1 ||
         op == Op::BesselK0e || op == Op::BesselK1e;
}
// Ops defined on (-1, 1) only: their inputs scaled into it.
bool needs_unit(Op op) { return op == Op::Erfinv || op == Op::Asin || op == Op::Acos || op == Op::Atanh; }
// acosh, from 1: its inputs moved to (1.3, 2.3).
bool needs_above_one(Op op) { return op == Op::Acosh; }

double* element(const Tensor& t, int64_t linear) {
  int64_t off = 0, rem = linear;
  for (int d = t.dim() - 1; d >= 0; --d) {
    off += (rem % t.size(d)) * t.stride(d);
    rem /= t.size(d);
  }
  return t.data<double>() + off;
}

// sum(f(x) * w) for fixed weights w, so every output element matters.
Tensor scalarize(const Tensor& y, const Tensor& w) {
  return ag::reduce(Op::Sum, ag::binary(Op::Mul, y, w), {}, false);
}

TensorList analytic(const Case& c, const Tensor& w, bool create_graph, TensorList* watched) {
  TensorList xs;
  for (const Tensor& x : c.inputs) xs.push_back(ag::watch(x));
  if (watched) *watched = xs;
  Tensor l = scalarize(c.f(xs), w);
  return ag::grad({l}, {}, xs, create_graph);
}

// Central differences of g(inputs) (a scalar) with respect to every input element.
TensorList numeric(const Case& c, const std::function<double()>& g, double eps) {
  TensorList out;
  for (const Tensor& x : c.inputs) {
    Tensor gx = zeros(x.shape(), DType::Float64);
    for (int64_t i = 0; i < x.numel(); ++i) {
      double* p = element(x, i);
      double v = *p;
      *p = v + eps;
      double hi = g();
      *p = v - eps;
      double lo = g();
      *p = v;
      *element(gx, i) = (hi - lo) / (2 * eps);
    }
    out.push_back(gx);
  }
  return out;
}

void require_close(const Tensor& a, const Tensor& n, const std::string& what, double tol) {
  REQUIRE(a.shape() == n.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = *element(contiguous(cast(a, DType::Float64)), i), y = *element(n, i);
    INFO(what << " element " << i << ": analytic " << x << ", numeric " << y);
    REQUIRE(std::fabs(x - y) <= tol * (1 + std::fabs(y)));
  }
}

void gradcheck(const Case& c) {
  INFO("op case " << c.name);
  ag::GradScope scope;
  Tensor y0;
  {
    ag::NoGradScope off;
    y0 = c.f(c.inputs);
  }
  Tensor w = values(y0.shape(), 99);
  // First order.
  TensorList ga = analytic(c, w, false, nullptr);
  TensorList gn = numeric(c, [&] {
    ag::NoGradScope off;
    return scalarize(c.f(c.inputs), w).item();
  }, 1e-6);
  for (size_t k = 0; k < ga.size(); ++k) require_close(ga[k], gn[k], "first order", 1e-5);
  // Second order: the gradient of <grad f, v> against differences of the analytic
  // first-order gradient.
  TensorList vs;
  for (size_t k = 0; k < c.inputs.size(); ++k) vs.push_back(values(c.inputs[k].shape(), 200 + k));
  auto inner = [&](bool create_graph, TensorList* watched) {
    TensorList g = analytic(c, w, create_graph, watched);
    Tensor acc = full(Shape{}, Scalar(0.0), DType::Float64);
    for (size_t k = 0; k < g.size(); ++k)
      acc = ag::binary(Op::Add, acc, ag::reduce(Op::Sum, ag::binary(Op::Mul, g[k], vs[k]), {}, false));
    return acc;
  };
  TensorList watched;
  Tensor gv = inner(true, &watched);
  TensorList h = ag::grad({gv}, {}, watched, false);
  TensorList hn = numeric(c, [&] { return inner(false, nullptr).item(); }, 1e-5);
  for (size_t k = 0; k < h.size(); ++k) require_close(h[k], hn[k], "second order", 1e-4);
}

std::vector<Case> unary_cases(Op op) {
  bool pos = needs_positive(op);
  auto f = [op](const TensorList& x) { return ag::unary(op, x[0]); };
  if (needs_above_one(op)) {
    auto above = [](Tensor t) { return binary(Op::Add, t, Scalar(1.0)); };
    return {{"contiguous", f, {above(values(Shape{2, 3}, 1, true))}},
            {"transposed", f, {transpose(above(values(Shape{2, 3}, 2, true)), 0, 1)}},
            {"0-dim", f, {above(values(Shape{}, 3, true))}}};
  }
  if (needs_unit(op)) {
    auto unit = [](Tensor t) { return binary(Op::Mul, t, Scalar(0.7)); };
    return {{"contiguous", f, {unit(values(Shape{2, 3}, 1))}},
            {"transposed", f, {transpose(unit(values(Shape{2, 3}, 2)), 0, 1)}},
            {"0-dim", f, {unit(values(Shape{}, 3))}}};
  }
  return {{"contiguous", f, {values(Shape{2, 3}, 1, pos)}},
          {"transposed", f, {transposed(3, 2, 2, pos)}},
          {"0-dim", f, {values(Shape{}, 3, pos)}}};
}

// Ops differentiable in their second operand only: zeta(x, q) on x in (1.3, 2.3), and
// the incomplete gammas P(a, x), Q(a, x) on a in (1.3, 2.3); the second on (0.3, 1.3).
bool second_operand_only(Op op) { return op == Op::Zeta || op == Op::Igamma || op == Op::Igammac; }
std::vector<Case> second_operand_cases(Op op) {
  Tensor first = binary(Op::Add, values(Shape{2, 3}, 11, true), Scalar(1.0));
  auto f = [op, first](const TensorList& q) { return ag::binary(op, first, q[0]); };
  auto sf = [op](const TensorList& q) { return ag::binary(op, q[0], Scalar(2.5), true); };
  return {{"second", f, {values(Shape{2, 3}, 12, true)}},
          {"second broadcast", f, {values(Shape{3}, 13, true)}},
          {"second non-contiguous", f, {transposed(2, 3, 14, true)}},
          {"number first", sf, {values(Shape{2, 2}, 15, true)}}};
}

std::vector<Case> binary_cases(Op op) {
  if (second_operand_only(op)) return second_operand_cases(op);
  bool pos = needs_positive(op);
  auto f = [op](const TensorList& x) { return ag::binary(op, x[0], x[1]); };
  auto fs = [op](const TensorList& x) { return ag::binary(op, x[0], Scalar(1.7)); };
  auto sf = [op](const TensorList& x) { return ag::binary(op, x[0], Scalar(1.7), true); };
  return {{"same shape", f, {values(Shape{2, 3}, 1, pos), values(Shape{2, 3}, 2, true)}},
          {"broadcast row", f, {values(Shape{3, 4}, 3, pos), values(Shape{4}, 4, true)}},
          {"broadcast both", f, {values(Shape{3, 1}, 5, pos), transposed(1, 4, 6, true)}},
          {"non-contiguous", f, {transposed(3, 2, 7, pos), values(Shape{3, 2}, 8, true)}},
          {"tensor op number", fs, {values(Shape{2, 2}, 9, pos)}},
          {"number op tensor", sf, {values(Shape{2, 2}, 10, true)}}};
}

std::vector<Case> reduce_cases(Op op) {
  auto all = [op](const TensorList& x) { return ag::reduce(op, x[0], {}, false); };
  auto dim1 = [op](const TensorList& x) { return ag::reduce(op, x[0], {1}, false); };
  auto keep = [op](const TensorList& x) { return ag::reduce(op, x[0], {0, 2}, true); };
  std::vector<Case> cs = {{"all", all, {values(Shape{2, 3}, 1)}},
                          {"dim 1", dim1, {transposed(3, 4, 2)}},
                          {"dims 0,2 keepdim", keep, {values(Shape{2, 3, 2}, 3)}}};
  if (op == Op::Norm) {
    for (double p : {1.0, 3.0, double(INFINITY)}) {
      cs.push_back({"p=" + std::to_string(p), [p](const TensorList& x) {
        ReduceOpts o;
        o.p = p;
        return ag::reduce(Op::Norm, x[0], {1}, false, o);
      }, {values(Shape{2, 3}, 4)}});
    }
  }
  return cs;
}

Tensor idx(std::initializer_list<double> v, const Shape& s) {
  std::vector<double> d(v);
  return from_values(d.data(), int64_t(d.size()), s, DType::Int64);
}

// ---- decompositions and solves: well-conditioned inputs; eigenvectors and singular
// vectors read through functions their sign choices do not change.
Tensor well(const Shape& s, uint64_t seed) {   // values + 3 I: far from singular
  const int64_t n = s[s.size() - 1];
  return binary(Op::Add, values(s, seed), binary(Op::Mul, eye(n, n, DType::Float64), Scalar(3.0)));
}
Tensor flat(const Tensor& x) { return ag::reshape(x, Shape{-1}); }
Tensor weights(int64_t k) {   // the constant diagonal (1, 2, ..., k) as a row
  return arange(1, double(k) + 1, 1, DType::Float64);
}
// X diag(1..k) Y for X (..., m, k), Y (..., k, n).
Tensor sandwich(const Tensor& x, const Tensor& y) {
  return ag::matmul(ag::binary(Op::Mul, x, weights(x.size(x.dim() - 1))), y);
}
Tensor sym(const Tensor& x) { return ag::binary(Op::Add, x, ag::transpose(x, -2, -1)); }

std::vector<Case> linalg_cases(Op op) {
  using L = const TensorList&;
  switch (op) {
    case Op::LinalgSolve:
      return {{"solve", [](L x) { return ag::linalg_solve(x[0], x[1]); }, {well(Shape{3, 3}, 101), values(Shape{3, 2}, 102)}},
              {"solve, batch broadcast, transposed A", [](L x) { return ag::linalg_solve(ag::transpose(x[0], -2, -1), x[1]); },
               {well(Shape{2, 3, 3}, 103), values(Shape{3, 1}, 104)}}};
    case Op::SolveTriangular:
      return {{"upper", [](L x) { return ag::solve_triangular(x[0], x[1], true, false); },
               {well(Shape{3, 3}, 105), values(Shape{3, 2}, 106)}},
              {"lower, unit diagonal, batch", [](L x) { return ag::solve_triangular(x[0], x[1], false, true); },
               {values(Shape{2, 3, 3}, 107), values(Shape{2, 3, 2}, 108)}}};
    case Op::Cholesky:
      return {{"cholesky of x x^T + 3 I", [](L x) {
                 Tensor a = ag::matmul(x[0], ag::transpose(x[0], -2, -1));
                 return ag::cholesky(ag::binary(Op::Add, a, binary(Op::Mul, eye(3, 3, DType::Float64), Scalar(3.0))));
               }, {values(Shape{2, 3, 3}, 109)}}};
    case Op::Qr: {
      auto both = [](L x) { auto [q, r] = ag::qr(x[0], false); return ag::cat({flat(q), flat(r)}, 0); };
      auto r_only = [](L x) { return ag::qr(x[0], false).second; };
      auto q_only = [](L x) { return ag::qr(x[0], false).first; };
      return {{"tall", both, {values(Shape{4, 3}, 110)}}, {"square, batch", both, {values(Shape{2, 3, 3}, 111)}},
              {"wide", both, {values(Shape{2, 4}, 112)}}, {"wide, R only", r_only, {values(Shape{2, 4}, 113)}},
              {"tall, Q only", q_only, {values(Shape{4, 2}, 114)}}};
    }
    case Op::Eigh:
      return {{"eigenvalues", [](L x) { return ag::eigh(sym(x[0])).first; }, {values(Shape{2, 3, 3}, 115)}},
              {"V diag(1..n) V^T", [](L x) {
                 auto [w, v] = ag::eigh(sym(x[0]));
                 return sandwich(v, ag::transpose(v, -2, -1));
               }, {values(Shape{3, 3}, 116)}},
              {"both", [](L x) {
                 auto [w, v] = ag::eigh(sym(x[0]));
                 return ag::cat({flat(w), flat(sandwich(v, ag::transpose(v, -2, -1)))}, 0);
               }, {values(Shape{3, 3}, 117)}}};
    case Op::Svd: {
      auto all = [](L x) {
        SvdResult r = ag::svd(x[0], false);
        Tensor u = r.u, vh = r.vh;
        return ag::cat({flat(r.s), flat(sandwich(u, vh)), flat(sandwich(u, ag::transpose(u, -2, -1))),
                        flat(sandwich(ag::transpose(vh, -2, -1), vh))}, 0);
      };
      return {{"values", [](L x) { return ag::svd(x[0], false).s; }, {values(Shape{2, 4, 3}, 118)}},
              {"tall", all, {values(Shape{4, 3}, 119)}},
              {"wide", all, {values(Shape{3, 4}, 120)}},
              {"square, batch", all, {values(Shape{2, 3, 3}, 121)}},
              {"U diag Vh only", [](L x) { SvdResult r = ag::svd(x[0], false); return sandwich(r.u, r.vh); },
               {values(Shape{4, 2}, 122)}}};
    }
    case Op::Slogdet:
      return {{"log|det|", [](L x) { return ag::slogdet(x[0]).second; }, {well(Shape{2, 3, 3}, 123)}},
              {"log|det| of a negative determinant", [](L x) {
                 return ag::slogdet(ag::binary(Op::Mul, x[0], Scalar(-1.0))).second; }, {well(Shape{3, 3}, 124)}}};
    default:
      return {};
  }
}

std::vector<Case> other_cases(Op op) {
  auto x23 = [] { return values(Shape{2, 3}, 11); };
  switch (op) {
    case Op::MaxDim:
      return {{"max dim", [](const TensorList& x) { return ag::max_dim(x[0], 1, false).first; }, {x23()}},
              {"max keepdim", [](const TensorList& x) { return ag::max_dim(x[0], 0, true).first; }, {transposed(3, 2, 12)}}};
    case Op::MinDim:
      return {{"min dim", [](const TensorList& x) { return ag::min_dim(x[0], -1, false).first; }, {x23()}}};
    case Op::Softmax:
      return {{"softmax", [](const TensorList& x) { return ag::softmax(x[0], 1); }, {x23()}},
              {"softmax dim 0", [](const TensorList& x) { return ag::softmax(x[0], 0); }, {transposed(3, 2, 13)}}};
    case Op::LogSoftmax:
      return {{"log_softmax", [](const TensorList& x) { return ag::log_softmax(x[0], -1); }, {x23()}}};
    case Op::Cumsum:
      return {{"cumsum dim 1", [](const TensorList& x) { return ag::cumsum(x[0], 1); }, {x23()}},
              {"cumsum dim 0, transposed, reversed", [](const TensorList& x) { return ag::cumsum(x[0], 0, true); },
               {transposed(3, 2, 93)}}};
    case Op::Cumprod: {
      // Lines without a zero, with one, and with two (the gradient's three regimes).
      const double z1[] = {0.7, -1.2, 0.0, 0.9, 1.1, 0.0, 0.8, -0.6, 1.3, 0.5, 0.0, 1.2};
      Tensor with_zeros = from_values(z1, 12, Shape{3, 4}, DType::Float64);
      return {{"cumprod dim 1", [](const TensorList& x) { return ag::cumprod(x[0], 1); }, {x23()}},
              {"cumprod with zeros, dim 1 and reversed dim 0", [](const TensorList& x) {
                 return ag::binary(Op::Add, ag::cumprod(x[0], 1), ag::cumprod(x[0], 0, true)); }, {with_zeros}}};
    }
    case Op::Sort:
      return {{"sort dim 1", [](const TensorList& x) { return ag::sort(x[0], 1, false).first; }, {x23()}},
              {"sort dim 0, descending, transposed", [](const TensorList& x) { return ag::sort(x[0], 0, true).first; },
               {transposed(3, 2, 94)}}};
    case Op::Where: {
      Tensor c = compare(Op::Gt, values(Shape{2, 3}, 14), Scalar(0.0));
      return {{"where", [c](const TensorList& x) { return ag::where(c, x[0], x[1]); },
               {x23(), values(Shape{3}, 15)}}};
    }
    case Op::Clamp:
      return {{"clamp", [](const TensorList& x) { return ag::clamp(x[0], -0.5, 0.8); }, {values(Shape{3, 3}, 16)}}};
    case Op::MaskedFill: {
      Tensor m = compare(Op::Gt, values(Shape{2, 3}, 17), Scalar(0.0));
      return {{"masked_fill", [m](const TensorList& x) { return ag::masked_fill(x[0], m, Scalar(2.0)); }, {x23()}}};
    }
    case Op::MatMul: {
      auto f = [](const TensorList& x) { return ag::matmul(x[0], x[1]); };
      return {{"2-D", f, {values(Shape{3, 4}, 18), values(Shape{4, 2}, 19)}},
              {"transposed operands", f, {transposed(3, 4, 20), transposed(4, 2, 21)}},
              {"1-D x 2-D", f, {values(Shape{4}, 22), values(Shape{4, 2}, 23)}},
              {"2-D x 1-D", f, {values(Shape{3, 4}, 24), values(Shape{4}, 25)}},
              {"dot", f, {values(Shape{4}, 26), values(Shape{4}, 27)}},
              {"broadcast batch", f, {values(Shape{2, 3, 4}, 28), values(Shape{4, 2}, 29)}},
              {"two batch dims, b stored transposed", f, {values(Shape{2, 2, 3, 4}, 99), transposed(4, 2, 100)}},
              {"batch, b a vector", f, {values(Shape{2, 3, 4}, 101), values(Shape{4}, 102)}},
              {"batched 1-D", f, {values(Shape{4}, 30), values(Shape{2, 4, 3}, 31)}}};
    }
    case Op::Cast:
      return {{"to float64", [](const TensorList& x) { return ag::cast(ag::binary(Op::Mul, x[0], Scalar(1.0)), DType::Float64); }, {x23()}}};
    case Op::Contiguous:
      return {{"contiguous", [](const TensorList& x) { return ag::contiguous(x[0]); }, {transposed(2, 3, 32)}},
              {"clone", [](const TensorList& x) { return ag::clone(x[0]); }, {x23()}}};
    case Op::View:
      return {{"view", [](const TensorList& x) { return ag::view(x[0], Shape{3, 2}); }, {x23()}},
              {"reshape of transposed", [](const TensorList& x) { return ag::reshape(x[0], Shape{6}); }, {transposed(2, 3, 33)}},
              {"flatten", [](const TensorList& x) { return ag::flatten(x[0]); }, {values(Shape{2, 2, 2}, 34)}}};
    case Op::Transpose:
      return {{"transpose", [](const TensorList& x) { return ag::transpose(x[0], 0, 1); }, {x23()}}};
    case Op::Permute:
      return {{"permute", [](const TensorList& x) { return ag::permute(x[0], {2, 0, 1}); }, {values(Shape{2, 3, 2}, 35)}}};
    case Op::Narrow:
      return {{"narrow", [](const TensorList& x) { return ag::narrow(x[0], 1, 1, 2); }, {x23()}}};
    case Op::Slice:
      return {{"slice step 2", [](const TensorList& x) { return ag::slice(x[0], 1, 0, 5, 2); }, {values(Shape{2, 5}, 36)}}};
    case Op::Select:
      return {{"select", [](const TensorList& x) { return ag::select(x[0], 0, -1); }, {x23()}},
              {"select of transposed", [](const TensorList& x) { return ag::select(x[0], 1, 0); }, {transposed(2, 3, 37)}}};
    case Op::Expand:
      return {{"expand", [](const TensorList& x) { return ag::expand(x[0], Shape{2, 3, 4}); }, {values(Shape{3, 1}, 38)}}};
    case Op::Squeeze:
      return {{"squeeze", [](const TensorList& x) { return ag::squeeze(x[0], std::nullopt); }, {values(Shape{2, 1, 3}, 39)}}};
    case Op::Unsqueeze:
      return {{"unsqueeze", [](const TensorList& x) { return ag::unsqueeze(x[0], 1); }, {x23()}}};
    case Op::Cat:
      return {{"cat", [](const TensorList& x) { return ag::cat({x[0], x[1]}, 1); },
               {x23(), transposed(2, 2, 40)}}};
    case Op::Stack:
      return {{"stack", [](const TensorList& x) { return ag::stack({x[0], x[1]}, 1); },
               {x23(), values(Shape{2, 3}, 41)}}};
    case Op::IndexSelect: {
      Tensor i = idx({2, 0, 2}, Shape{3});
      return {{"index_select", [i](const TensorList& x) { return ag::index_select(x[0], 1, i); }, {x23()}}};
    }
    case Op::Gather: {
      Tensor i = idx({0, 2, 1, 1, 0, 0}, Shape{2, 3});
      return {{"gather", [i](const TensorList& x) { return ag::gather(x[0], 1, i); }, {x23()}}};
    }
    case Op::ScatterAdd: {
      Tensor i = idx({0, 2, 0, 1}, Shape{2, 2});
      return {{"scatter_add", [i](const TensorList& x) { return ag::scatter_add(x[0], 1, i, x[1]); },
               {x23(), values(Shape{2, 2}, 42)}}};
    }
    case Op::Copy:
      return {{"copy into a slice", [](const TensorList& x) {
        Tensor y = ag::binary(Op::Mul, x[0], Scalar(2.0));
        Tensor v = ag::narrow(y, 1, 1, 2);
        ag::copy_(v, ag::unary(Op::Sin, x[1]));
        return ag::binary(Op::Mul, y, y);
      }, {x23(), values(Shape{2, 2}, 43)}}};
    // ---- neural networks (autograd/nn.cpp) ----
    case Op::Conv2d: {
      Conv2dOpts pad1;
      pad1.padding[0] = pad1.padding[1] = 1;
      Conv2dOpts odd;  // strided, dilated, grouped, uneven padding
      odd.stride[0] = 2;
      odd.padding[0] = 1;
      odd.dilation[1] = 2;
      odd.groups = 2;
      return {{"conv2d padded, bias", [pad1](const TensorList& x) { return ag::conv2d(x[0], x[1], x[2], pad1); },
               {values(Shape{1, 2, 4, 4}, 44), values(Shape{2, 2, 3, 3}, 45), values(Shape{2}, 46)}},
              {"conv2d stride, dilation, groups", [odd](const TensorList& x) { return ag::conv2d(x[0], x[1], Tensor(), odd); },
               {values(Shape{1, 4, 5, 4}, 47), values(Shape{4, 2, 2, 2}, 48)}},
              {"conv2d 1x1", [](const TensorList& x) { return ag::conv2d(x[0], x[1], Tensor(), Conv2dOpts{}); },
               {values(Shape{2, 3, 2, 2}, 49), values(Shape{2, 3, 1, 1}, 50)}},
              {"conv2d unbatched", [](const TensorList& x) { return ag::conv2d(x[0], x[1], x[2], Conv2dOpts{}); },
               {values(Shape{2, 3, 3}, 51), values(Shape{2, 2, 2, 2}, 52), values(Shape{2}, 53)}}};
    }
    case Op::Conv2dInputGrad: {
      Conv2dOpts pad1;
      pad1.padding[0] = pad1.padding[1] = 1;
      Conv2dOpts s2;
      s2.stride[0] = s2.stride[1] = 2;
      s2.padding[0] = s2.padding[1] = 1;
      s2.groups = 2;
      return {{"input grad padded", [pad1](const TensorList& x) { return ag::conv2d_input_grad(x[0], x[1], Shape{1, 2, 4, 4}, pad1); },
               {values(Shape{1, 2, 4, 4}, 54), values(Shape{2, 2, 3, 3}, 55)}},
              {"input grad strided, grouped", [s2](const TensorList& x) { return ag::conv2d_input_grad(x[0], x[1], Shape{1, 4, 5, 5}, s2); },
               {values(Shape{1, 4, 3, 3}, 56), values(Shape{4, 2, 3, 3}, 57)}}};
    }
    case Op::Conv2dWeightGrad: {
      Conv2dOpts pad1;
      pad1.padding[0] = pad1.padding[1] = 1;
      Conv2dOpts s2;
      s2.stride[0] = s2.stride[1] = 2;
      s2.dilation[0] = 2;
      return {{"weight grad padded", [pad1](const TensorList& x) { return ag::conv2d_weight_grad(x[0], x[1], Shape{2, 2, 3, 3}, pad1); },
               {values(Shape{1, 2, 4, 4}, 58), values(Shape{1, 2, 4, 4}, 59)}},
              {"weight grad strided, dilated", [s2](const TensorList& x) { return ag::conv2d_weight_grad(x[0], x[1], Shape{2, 2, 2, 3}, s2); },
               {values(Shape{2, 2, 5, 5}, 60), values(Shape{2, 2, 2, 2}, 61)}}};
    }
    case Op::MaxPool2d: {
      Pool2dOpts k2;
      k2.kernel[0] = k2.kernel[1] = 2;
      Pool2dOpts k3;  // overlapping windows, padding, partial windows at the end
      k3.kernel[0] = k3.kernel[1] = 3;
      k3.stride[0] = k3.stride[1] = 2;
      k3.padding[0] = k3.padding[1] = 1;
      k3.ceil_mode = true;
      return {{"max_pool2d 2x2", [k2](const TensorList& x) { return ag::max_pool2d(x[0], k2).first; }, {values(Shape{1, 2, 4, 4}, 62)}},
              {"max_pool2d padded, ceil", [k3](const TensorList& x) { return ag::max_pool2d(x[0], k3).first; }, {values(Shape{2, 6, 6}, 63)}}};
    }
    case Op::MaxPool2dBackward: {
      Pool2dOpts k2;
      k2.kernel[0] = k2.kernel[1] = 2;
      k2.stride[0] = k2.stride[1] = 1;
      Tensor i = max_pool2d(values(Shape{1, 2, 4, 4}, 64), k2).second;
      return {{"max_pool2d_backward", [i](const TensorList& x) { return ag::max_pool2d_backward(x[0], i, Shape{1, 2, 4, 4}); },
               {values(Shape{1, 2, 3, 3}, 65)}}};
    }
    case Op::AvgPool2d: {
      Pool2dOpts k3;
      k3.kernel[0] = k3.kernel[1] = 3;
      k3.stride[0] = k3.stride[1] = 2;
      k3.padding[0] = k3.padding[1] = 1;
      Pool2dOpts k3c = k3;
      k3c.ceil_mode = true;
      k3c.count_include_pad = false;
      return {{"avg_pool2d padded", [k3](const TensorList& x) { return ag::avg_pool2d(x[0], k3); }, {values(Shape{1, 2, 5, 5}, 66)}},
              {"avg_pool2d ceil, excluding pad", [k3c](const TensorList& x) { return ag::avg_pool2d(x[0], k3c); }, {values(Shape{2, 6, 6}, 67)}}};
    }
    case Op::AvgPool2dBackward: {
      Pool2dOpts k3;
      k3.kernel[0] = k3.kernel[1] = 3;
      k3.stride[0] = k3.stride[1] = 2;
      k3.padding[0] = k3.padding[1] = 1;
      k3.ceil_mode = true;
      k3.count_include_pad = false;
      return {{"avg_pool2d_backward", [k3](const TensorList& x) { return ag::avg_pool2d_backward(x[0], Shape{1, 2, 6, 6}, k3); },
               {values(Shape{1, 2, 4, 4}, 68)}}};
    }
    case Op::Dropout:
      // The mask is drawn afresh each call: seed it so every evaluation sees the same one.
      return {{"dropout", [](const TensorList& x) { manual_seed(1234); return ag::dropout(x[0], 0.4, true); }, {values(Shape{4, 5}, 69)}}};
    case Op::BatchNorm: {
      Tensor rm = zeros(Shape{2}, DType::Float64), rv = ones(Shape{2}, DType::Float64);
      Tensor em = values(Shape{3}, 70), ev = values(Shape{3}, 71, true);
      return {{"batch_norm training, affine", [rm, rv](const TensorList& x) {
                 return ag::batch_norm(x[0], x[1], x[2], rm, rv, true, 0.1, 1e-5); },
               {values(Shape{3, 2, 2, 2}, 72), values(Shape{2}, 73), values(Shape{2}, 74)}},
              {"batch_norm training, 2-D, no affine", [](const TensorList& x) {
                 return ag::batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5); },
               {values(Shape{4, 3}, 75)}},
              {"batch_norm training, bias only", [](const TensorList& x) {
                 return ag::batch_norm(x[0], Tensor(), x[1], Tensor(), Tensor(), true, 0.1, 1e-5); },
               {values(Shape{4, 2, 3}, 76), values(Shape{2}, 77)}},
              {"batch_norm eval", [em, ev](const TensorList& x) {
                 return ag::batch_norm(x[0], x[1], x[2], em, ev, false, 0.1, 1e-5); },
               {values(Shape{2, 3, 2}, 78), values(Shape{3}, 79), values(Shape{3}, 80)}}};
    }
    case Op::LayerNorm:
      return {{"layer_norm last dim, affine", [](const TensorList& x) { return ag::layer_norm(x[0], 1, x[1], x[2], 1e-5); },
               {values(Shape{3, 4}, 87), values(Shape{4}, 88), values(Shape{4}, 89)}},
              {"layer_norm last two dims, weight only", [](const TensorList& x) {
                 return ag::layer_norm(x[0], 2, x[1], Tensor(), 1e-5); },
               {values(Shape{2, 3, 2}, 90), values(Shape{3, 2}, 91)}},
              {"layer_norm whole tensor, no affine", [](const TensorList& x) {
                 return ag::layer_norm(x[0], 2, Tensor(), Tensor(), 1e-5); },
               {values(Shape{3, 3}, 92)}}};
    case Op::LstmGates: {
      auto both = [](const TensorList& x) {
        auto [h, c2] = ag::lstm_gates(x[0], x[1]);
        return ag::cat({flat(h), flat(c2)}, 0);
      };
      return {{"lstm_gates h and c", both, {values(Shape{2, 12}, 93), values(Shape{2, 3}, 94)}},
              {"lstm_gates h only, leading dims", [](const TensorList& x) { return ag::lstm_gates(x[0], x[1]).first; },
               {values(Shape{2, 2, 8}, 95), values(Shape{2, 2, 2}, 96)}},
              {"lstm_gates c only, non-contiguous", [](const TensorList& x) { return ag::lstm_gates(x[0], x[1]).second; },
               {transposed(3, 8, 97), transposed(3, 2, 98)}}};
    }
    case Op::Embedding: {
      Tensor i = idx({1, 4, 1, 0, 2, 1}, Shape{2, 3});
      // The padding row is looked up but gets no gradient (PyTorch's rule): the check
      // zeroes the rows it fills, so that the function really does not depend on it.
      Tensor keep = cast(compare(Op::Ne, view(i, Shape{2, 3, 1}), Scalar::integer(1)), DType::Float64);
      return {{"embedding", [i](const TensorList& x) { return ag::embedding(x[0], i, std::nullopt); }, {values(Shape{5, 3}, 81)}},
              {"embedding padding_idx", [i, keep](const TensorList& x) {
                 return ag::binary(Op::Mul, ag::embedding(x[0], i, -4), keep); }, {values(Shape{5, 3}, 82)}}};
    }
    case Op::FftC2c: {
      auto f = [](const TensorList& x) { return ag::fft_c2c(x[0], false); };
      auto inv = [](const TensorList& x) { return ag::fft_c2c(x[0], true); };
      return {{"fft, n = 8", f, {values(Shape{2, 8, 2}, 87)}},
              {"fft, n = 5 (radix 5)", f, {values(Shape{5, 2}, 88)}},
              {"fft, n = 37 (Bluestein)", f, {values(Shape{37, 2}, 90)}},
              {"inverse, n = 6, non-contiguous", inv, {transpose(values(Shape{6, 3, 2}, 89), 0, 1)}}};
    }
    case Op::FftR2c: {
      auto f = [](int64_t w) { return [w](const TensorList& x) { return ag::fft_r2c(x[0], w); }; };
      return {{"rfft, n = 8", f(1), {values(Shape{2, 8}, 91)}},
              {"rfft, n = 7 (odd), weight 2", f(2), {values(Shape{7}, 92)}},
              {"rfft, n = 38 (Bluestein of 19)", f(1), {values(Shape{38}, 93)}},
              {"rfft, n = 6, non-contiguous", f(2), {transpose(values(Shape{6, 3}, 94), 0, 1)}}};
    }
    case Op::FftC2r: {
      auto f = [](int64_t n, int64_t w) { return [n, w](const TensorList& x) { return ag::fft_c2r(x[0], n, w); }; };
      return {{"irfft, n = 8", f(8, 2), {values(Shape{2, 5, 2}, 95)}},
              {"irfft, n = 7 (odd), weight 1", f(7, 1), {values(Shape{4, 2}, 96)}},
              {"irfft, n = 1", f(1, 2), {values(Shape{3, 1, 2}, 97)}},
              {"irfft, n = 10, non-contiguous", f(10, 2), {transpose(values(Shape{6, 3, 2}, 98), 0, 1)}}};
    }
    case Op::CrossEntropy: {
      Tensor t = idx({2, 0, 3, 1}, Shape{4});
      return {{"cross_entropy mean", [t](const TensorList& x) { return ag::cross_entropy(x[0], t, Reduction::Mean, std::nullopt); },
               {values(Shape{4, 5}, 83)}},
              {"cross_entropy sum, ignore", [t](const TensorList& x) { return ag::cross_entropy(x[0], t, Reduction::Sum, 0); },
               {values(Shape{4, 5}, 84)}},
              {"cross_entropy none, ignore", [t](const TensorList& x) { return ag::cross_entropy(x[0], t, Reduction::None, 3); },
               {values(Shape{4, 5}, 85)}},
              {"cross_entropy mean, ignore", [t](const TensorList& x) { return ag::cross_entropy(x[0], t, Reduction::Mean, 2); },
               {values(Shape{4, 5}, 86)}}};
    }
    default:
      return linalg_cases(op);
  }
}

std::vector<Case> cases_for(const OpInfo& info) {
  switch (info.family) {
    case OpFamily::Unary: return unary_cases(info.op);
    case OpFamily::Binary: return binary_cases(info.op);
    case OpFamily::Reduce: return reduce_cases(info.op);
    default: return other_cases(info.op);
  }
}

}  // namespace

TEST_CASE("every differentiable op passes first- and second-order gradient checks", "[gradcheck]") {
  for (int k = 0; k < kNumOps; ++k) {
    const OpInfo& info = op_info(Op(k));
    if (!(info.flags & kDiff)) continue;
    DYNAMIC_SECTION(info.lua_name) {
      std::vector<Case> cases = cases_for(info);
      if (cases.empty()) FAIL("op " << info.lua_name << " is differentiable but has no sample in test_gradcheck.cpp");
      for (const Case& c : cases) gradcheck(c);
    }
  }
}

TEST_CASE("an input whose derivative is not implemented raises instead of getting 0", "[gradcheck]") {
  ag::GradScope scope;
  Tensor x = ag::watch(full(Shape{2}, Scalar(2.0), DType::Float64));
  Tensor q = full(Shape{2}, Scalar(1.5), DType::Float64);
  Tensor y = ag::reduce(Op::Sum, ag::binary(Op::Zeta, x, q), {}, false);
  REQUIRE_THROWS_WITH(ag::grad({y}, {}, {x}, false),
                      Catch::Contains("zeta: the derivative with respect to x (its first operand) is not implemented"));
}
