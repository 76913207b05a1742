// The table-driven gradient check: every differentiable op of tensor/ops.def, first
// and second order, in float64, against central finite differences, over broadcast
// and non-contiguous inputs. Unary, binary and reduction rows are checked by being
// declared; other rows need a sample call in other_cases() (a missing one fails).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include "autograd/autograd.h"

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

bool needs_positive(Op op) {
  return op == Op::Log || op == Op::Sqrt || op == Op::Rsqrt || op == Op::Pow || op == Op::Log1p;
}

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
  return {{"contiguous", f, {values(Shape{2, 3}, 1, pos)}},
          {"transposed", f, {transposed(3, 2, 2, pos)}},
          {"0-dim", f, {values(Shape{}, 3, pos)}}};
}

std::vector<Case> binary_cases(Op op) {
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
    default:
      return {};
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
