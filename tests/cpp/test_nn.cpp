// The neural-network ops against PyTorch: convolution (and its gradient ops), pooling,
// batch normalisation, cross-entropy and embedding, forward values and gradients; then
// dropout's properties, the empty cases, and every error path.
//
// Reference values are in tests/cpp/ref/nn_ref.inc, written by tests/ref/gen_nn_refs.py
// with Debian's PyTorch; inputs are recomputed here from the same hash (see Input).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "autograd/nn.h"
#include "tensor/nn.h"

using namespace dl;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A deterministic input (the generator's Input): hash * scale + shift, quantised when
// quant != 0, NaN at nan_at when >= 0. seed 0 means "no such input".
struct Input {
  int ndim;
  int64_t shape[kMaxDims];
  unsigned seed;
  double scale, shift, quant;
  int64_t nan_at;
};
// torch's result: its shape, and every `every`-th element (n of them).
struct Ref {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t every;
  int64_t n;
  const double* v;
};
struct ConvCase {
  const char* name;
  int dtype;
  Input x, w;
  bool has_bias;
  Input b, g;
  int64_t stride[2], pad[2], dil[2];
  int64_t groups;
  Ref y, gx, gw, gb;
};
struct ConvTCase {
  const char* name;
  int dtype;
  Input x, w;
  bool has_bias;
  Input b, g;
  int64_t stride[2], pad[2], out_pad[2], dil[2];
  int64_t groups;
  Ref y, gx, gw, gb;
};
struct PoolCase {
  const char* name;
  const char* kind;
  int dtype;
  Input x, g;
  int64_t k[2], s[2], p[2];
  bool ceil, count_include_pad;
  Ref y, idx, gx;
};
struct BNCase {
  const char* name;
  int dtype;
  Input x, w, b, rm, rv;
  bool training;
  double momentum, eps;
  Input g;
  Ref y, gx, gw, gb, rm_after, rv_after;
};
struct CECase {
  const char* name;
  int dtype;
  Input logits;
  int64_t n_targets;
  const double* targets;
  int reduction;
  bool has_ignore;
  int64_t ignore;
  Input g;
  Ref loss, gl;
};
struct EmbCase {
  const char* name;
  int dtype;
  Input w;
  int idx_ndim;
  int64_t idx_shape[kMaxDims];
  const double* idx;
  bool has_pad;
  int64_t pad;
  Input g;
  Ref y, gw;
};

#include "ref/nn_ref.inc"

// Mirrors hash_values() of the generator: murmur3's finaliser, then an exact scaling.
double hash_value(int64_t i, unsigned seed) {
  uint32_t h = uint32_t(uint64_t(i) + uint64_t(seed) * (uint64_t(1) << 20));
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return double(h) / 2147483648.0 - 1.0;
}

Tensor make(const Input& in, DType dt) {
  if (in.seed == 0) return Tensor();
  Shape s(in.shape, in.ndim);
  const int64_t n = checked_numel(s, "test");
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double x = hash_value(i, in.seed) * in.scale + in.shift;
    if (in.quant != 0) x = std::floor(x * in.quant) / in.quant;
    v[size_t(i)] = x;
  }
  if (in.nan_at >= 0) v[size_t(in.nan_at)] = NAN;
  return from_values(v.data(), n, s, dt);
}

Tensor int_tensor(const double* v, int64_t n, const Shape& s, DType dt = DType::Int64) {
  return from_values(v, n, s, dt);
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
  v.reserve(size_t(t.numel()));
  int64_t idx[kMaxDims] = {};
  for (int64_t i = 0; i < t.numel(); ++i) {
    v.push_back(t.value_at(idx));
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return v;
}

// torch computed in float64 from the same (rounded) inputs, so the tolerance is the
// result dtype's. NaN matches NaN.
void check(const Tensor& t, const Ref& r, DType dt, const char* what) {
  INFO(what);
  REQUIRE(t.defined());
  REQUIRE(t.shape() == Shape(r.shape, r.ndim));
  const double tol = dt == DType::Float32 ? 1e-4 : 1e-9;
  std::vector<double> v = values_of(t);
  std::string bad;
  int64_t k = 0;
  for (int64_t i = 0; i < int64_t(v.size()) && bad.empty(); i += r.every, ++k) {
    const double got = v[size_t(i)], want = k < r.n ? r.v[k] : NAN;
    const bool ok = std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= tol * (1 + std::fabs(want));
    if (!ok || k >= r.n)
      bad = "element " + std::to_string(i) + ": got " + std::to_string(got) + ", expected " + std::to_string(want);
  }
  CHECK(bad == "");
  CHECK(k == r.n);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

template <typename F>
ErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Internal;
}

// Runs f with `n` OpenMP threads (more than the cores is fine: it exercises the
// per-thread buffers and partial sums), then restores the count.
void with_threads(int n, const std::function<void()>& f) {
#ifdef _OPENMP
  int before = omp_get_max_threads();
  omp_set_num_threads(n);
  try {
    f();
  } catch (...) {
    omp_set_num_threads(before);
    throw;
  }
  omp_set_num_threads(before);
#else
  (void)n;
  f();
#endif
}

// Gradients of sum(y * g) with respect to xs, through the tape.
TensorList grads(const Tensor& y, const Tensor& g, const TensorList& xs) {
  return ag::grad({y}, {g}, xs, false);
}

Conv2dOpts conv_opts(const int64_t stride[2], const int64_t pad[2], const int64_t dil[2], int64_t groups) {
  Conv2dOpts o;
  for (int i = 0; i < 2; ++i) {
    o.stride[i] = stride[i];
    o.padding[i] = pad[i];
    o.dilation[i] = dil[i];
  }
  o.groups = groups;
  return o;
}

Pool2dOpts pool_opts(int64_t k, int64_t s = 0, int64_t p = 0) {
  Pool2dOpts o;
  o.kernel[0] = o.kernel[1] = k;
  o.stride[0] = o.stride[1] = s;
  o.padding[0] = o.padding[1] = p;
  return o;
}

Tensor randu(const Shape& s, DType dt = DType::Float32) { return rand(s, dt); }

void run_conv_case(const ConvCase& c) {
  INFO("conv case " << c.name);
  const DType dt = DType(c.dtype);
  const Conv2dOpts o = conv_opts(c.stride, c.pad, c.dil, c.groups);
  Tensor x = make(c.x, dt), w = make(c.w, dt), b = make(c.b, dt), g = make(c.g, dt);
  check(conv2d(x, w, b, o), c.y, dt, "conv2d");
  check(conv2d_input_grad(g, w, x.shape(), o), c.gx, dt, "conv2d_input_grad");
  check(conv2d_weight_grad(x, g, w.shape(), o), c.gw, dt, "conv2d_weight_grad");
  ag::GradScope scope;
  TensorList in = {ag::watch(x), ag::watch(w)};
  if (c.has_bias) in.push_back(ag::watch(b));
  Tensor y = ag::conv2d(in[0], in[1], c.has_bias ? in[2] : Tensor(), o);
  check(y, c.y, dt, "recorded conv2d");
  TensorList gs = grads(y, g, in);
  check(gs[0], c.gx, dt, "gradient for x");
  check(gs[1], c.gw, dt, "gradient for w");
  if (c.has_bias) check(gs[2], c.gb, dt, "gradient for the bias");
}

}  // namespace

// ---- convolution --------------------------------------------------------------------------

TEST_CASE("conv2d matches torch: stride, padding, dilation, groups, bias, 1x1, large", "[nn]") {
  for (const ConvCase& c : nn_ref::kConvCases) run_conv_case(c);
}

TEST_CASE("conv2d gives the same results with more threads than cores", "[nn]") {
  with_threads(3, [] {
    for (const ConvCase& c : nn_ref::kConvCases) run_conv_case(c);
  });
  with_threads(1, [] {
    for (const ConvCase& c : nn_ref::kConvCases) run_conv_case(c);
  });
}

TEST_CASE("conv_transpose2d matches torch", "[nn]") {
  for (const ConvTCase& c : nn_ref::kConvTCases) {
    INFO("conv_transpose2d case " << c.name);
    const DType dt = DType(c.dtype);
    const Conv2dOpts o = conv_opts(c.stride, c.pad, c.dil, c.groups);
    Tensor x = make(c.x, dt), w = make(c.w, dt), b = make(c.b, dt), g = make(c.g, dt);
    check(conv_transpose2d(x, w, b, o, c.out_pad), c.y, dt, "conv_transpose2d");
    ag::GradScope scope;
    TensorList in = {ag::watch(x), ag::watch(w)};
    if (c.has_bias) in.push_back(ag::watch(b));
    Tensor y = ag::conv_transpose2d(in[0], in[1], c.has_bias ? in[2] : Tensor(), o, c.out_pad);
    check(y, c.y, dt, "recorded conv_transpose2d");
    TensorList gs = grads(y, g, in);
    check(gs[0], c.gx, dt, "gradient for x");
    check(gs[1], c.gw, dt, "gradient for w");
    if (c.has_bias) check(gs[2], c.gb, dt, "gradient for the bias");
  }
}

TEST_CASE("conv2d promotes dtypes and handles empty sizes", "[nn]") {
  Tensor xi = cast(binary(Op::Mul, randu({1, 2, 4, 4}), Scalar(10.0)), DType::Int64);
  Tensor w = randu({3, 2, 3, 3});
  CHECK(conv2d(xi, w, Tensor(), Conv2dOpts{}).dtype() == DType::Float32);
  CHECK(conv2d(randu({1, 2, 4, 4}), cast(w, DType::Float64), Tensor(), Conv2dOpts{}).dtype() == DType::Float64);
  // An integer weight and input: the default float dtype.
  CHECK(conv2d(xi, cast(w, DType::Int32), Tensor(), Conv2dOpts{}).dtype() == DType::Float32);

  Tensor y = conv2d(zeros({0, 2, 4, 4}, DType::Float32), w, Tensor(), Conv2dOpts{});
  CHECK(y.shape() == Shape{0, 3, 2, 2});
  CHECK(conv2d_weight_grad(zeros({0, 2, 4, 4}, DType::Float32), y, w.shape(), Conv2dOpts{}).shape() == w.shape());
  CHECK(reduce(Op::Sum, conv2d_weight_grad(zeros({0, 2, 4, 4}, DType::Float32), y, w.shape(), Conv2dOpts{}), {}, false).item() == 0);
  // No input channels: the output is the bias alone.
  double bv[] = {1, 2};
  Tensor b = from_values(bv, 2, Shape{2}, DType::Float32);
  Tensor yc = conv2d(zeros({1, 0, 3, 3}, DType::Float32), zeros({2, 0, 2, 2}, DType::Float32), b, Conv2dOpts{});
  CHECK(yc.shape() == Shape{1, 2, 2, 2});
  CHECK(values_of(yc) == std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2});
  // No output channels: nothing flows back.
  Tensor gx = conv2d_input_grad(zeros({1, 0, 2, 2}, DType::Float32), zeros({0, 2, 3, 3}, DType::Float32),
                                Shape{1, 2, 4, 4}, Conv2dOpts{});
  CHECK(reduce(Op::Sum, unary(Op::Abs, gx), {}, false).item() == 0);
}

TEST_CASE("conv2d errors name the op and the shapes", "[nn]") {
  Tensor x = randu({2, 4, 8, 8}), w = randu({16, 3, 3, 3});
  CHECK(error_of([&] { conv2d(x, w, Tensor(), Conv2dOpts{}); }) ==
        "conv2d: expected input of shape (N, C, H, W) with C = 3, got (2, 4, 8, 8) (weight of shape (16, 3, 3, 3), groups = 1)");
  CHECK_THAT(error_of([&] { conv2d(randu({4, 8, 8}), randu({2, 3, 3, 3}), Tensor(), Conv2dOpts{}); }),
             StartsWith("conv2d: expected input of shape (C, H, W) with C = 3, got (4, 8, 8)"));
  CHECK(error_of([&] { conv2d(randu({4, 4}), w, Tensor(), Conv2dOpts{}); }) ==
        "conv2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape (4, 4)");
  CHECK_THAT(error_of([&] { conv2d(x, randu({16, 4, 3}), Tensor(), Conv2dOpts{}); }),
             StartsWith("conv2d: expected a 4-D weight (out_channels, in_channels / groups, kH, kW), got shape (16, 4, 3)"));
  CHECK(error_of([&] { conv2d(x, randu({16, 4, 3, 3}), randu({15}), Conv2dOpts{}); }) ==
        "conv2d: expected a bias of shape (16,) for a weight of shape (16, 4, 3, 3), got (15,)");
  Conv2dOpts g4;
  g4.groups = 4;
  CHECK(error_of([&] { conv2d(x, randu({6, 1, 3, 3}), Tensor(), g4); }) ==
        "conv2d: out_channels 6 (weight of shape (6, 1, 3, 3)) must be divisible by groups = 4");
  CHECK_THAT(error_of([&] { conv2d(randu({1, 4, 4, 4}), randu({2, 4, 5, 5}), Tensor(), Conv2dOpts{}); }),
             StartsWith("conv2d: the kernel (5, 5) is larger than the padded input (4, 4)"));
  Conv2dOpts dil;
  dil.dilation[0] = 3;
  CHECK_THAT(error_of([&] { conv2d(randu({1, 4, 6, 6}), randu({2, 4, 3, 3}), Tensor(), dil); }),
             StartsWith("conv2d: the kernel (7, 3) (dilated) is larger than the padded input (6, 6)"));
  Conv2dOpts bad;
  bad.stride[0] = 0;
  CHECK(error_of([&] { conv2d(x, randu({2, 4, 3, 3}), Tensor(), bad); }) == "conv2d: stride must be positive, got (0, 1)");
  bad = Conv2dOpts{};
  bad.padding[1] = -1;
  CHECK(error_of([&] { conv2d(x, randu({2, 4, 3, 3}), Tensor(), bad); }) ==
        "conv2d: padding must be non-negative, got (0, -1)");
  bad = Conv2dOpts{};
  bad.dilation[0] = 0;
  CHECK(error_of([&] { conv2d(x, randu({2, 4, 3, 3}), Tensor(), bad); }) == "conv2d: dilation must be positive, got (0, 1)");
  bad = Conv2dOpts{};
  bad.groups = 0;
  CHECK(error_of([&] { conv2d(x, randu({2, 4, 3, 3}), Tensor(), bad); }) == "conv2d: groups must be positive, got 0");
  CHECK_THAT(error_of([&] { conv2d(x, randu({2, 4, 0, 3}), Tensor(), Conv2dOpts{}); }),
             StartsWith("conv2d: the kernel size must be positive"));

  // The gradient ops check the gradient against the conv2d output they belong to.
  CHECK(error_of([&] { conv2d_input_grad(randu({2, 16, 5, 5}), w, Shape{2, 3, 8, 8}, Conv2dOpts{}); }) ==
        "conv2d_input_grad: expected a gradient of shape (2, 16, 6, 6) (the output of conv2d for an input of shape "
        "(2, 3, 8, 8) and a weight of shape (16, 3, 3, 3)), got (2, 16, 5, 5)");
  CHECK_THAT(error_of([&] { conv2d_input_grad(randu({2, 16, 6, 6}), w, Shape{2, 4, 8, 8}, Conv2dOpts{}); }),
             StartsWith("conv2d_input_grad: expected input of shape (N, C, H, W) with C = 3, got (2, 4, 8, 8)"));
  CHECK_THAT(error_of([&] { conv2d_weight_grad(randu({2, 3, 8, 8}), randu({2, 15, 6, 6}), Shape{16, 3, 3, 3}, Conv2dOpts{}); }),
             StartsWith("conv2d_weight_grad: expected a gradient of shape (2, 16, 6, 6)"));
  CHECK(error_of([&] { conv2d_weight_grad(randu({2, 3, 8, 8}), randu({2, 16, 6, 6}), Shape{16, -3, 3, 3}, Conv2dOpts{}); }) ==
        "conv2d_weight_grad: negative dimension -3 in shape (16, -3, 3, 3)");
  CHECK(error_of([&] { conv2d_input_grad(randu({2, 16, 6, 6}), w, Shape{-2, 3, 8, 8}, Conv2dOpts{}); }) ==
        "conv2d_input_grad: negative dimension -2 in shape (-2, 3, 8, 8)");

  int64_t op1[2] = {1, 1}, op2[2] = {2, 0};
  Conv2dOpts s2;
  s2.stride[0] = s2.stride[1] = 2;
  CHECK(error_of([&] { conv_transpose2d(randu({1, 4, 3, 3}), randu({4, 2, 3, 3}), Tensor(), s2, op2); }) ==
        "conv_transpose2d: output_padding must be non-negative and smaller than the stride, got output_padding (2, 0) and stride (2, 2)");
  CHECK_THAT(error_of([&] { conv_transpose2d(randu({1, 3, 3, 3}), randu({4, 2, 3, 3}), Tensor(), s2, op1); }),
             StartsWith("conv_transpose2d: expected input of shape (N, C, H, W) with C = 4, got (1, 3, 3, 3)"));
  CHECK(error_of([&] { conv_transpose2d(randu({1, 4, 3, 3}), randu({4, 2, 3, 3}), randu({3}), s2, op1); }) ==
        "conv_transpose2d: expected a bias of shape (2,) for a weight of shape (4, 2, 3, 3), got (3,)");
  // An empty input may have a dim near 2^63: the output size is checked, not overflowed.
  Tensor huge = zeros({0, 4, int64_t(1) << 62, 3}, DType::Float32);
  CHECK_THAT(error_of([&] { conv_transpose2d(huge, randu({4, 2, 3, 3}), Tensor(), s2, op1); }),
             StartsWith("conv_transpose2d: the output size overflows for an input of shape (0, 4, 4611686018427387904, 3)"));
  // ... and so can conv2d's and the pools' (sizes computed in 128 bits, refused past 64)
  const int64_t top = std::numeric_limits<int64_t>::max();
  Conv2dOpts pad1;
  pad1.padding[0] = pad1.padding[1] = 1;
  CHECK_THAT(error_of([&] { conv2d(zeros({0, 3, top, 4}, DType::Float32), w, Tensor(), pad1); }),
             StartsWith("conv2d: the padded input size overflows 64 bits"));
  Pool2dOpts wide;
  wide.kernel[0] = wide.kernel[1] = 1;
  wide.stride[0] = wide.stride[1] = std::numeric_limits<int>::max();
  wide.ceil_mode = true;
  CHECK(max_pool2d(zeros({0, 1, top, 1}, DType::Float32), wide).first.numel() == 0);
  // Sizes the C ABI cannot pass (it takes ints) but C++ callers can: a stride near 2^63
  // (conv's tap bounds), a window of 2^64 padded pixels (avg_pool2d's divisor), and the
  // channel statistics of an empty (2^62, 2^62, 0) input (batch_norm's N * C).
  Conv2dOpts far;
  far.stride[1] = top;
  Tensor x4 = randu({1, 1, 2, 2});
  Tensor y4 = conv2d(x4, ones({1, 1, 1, 1}, DType::Float32), Tensor(), far);
  CHECK(y4.shape() == Shape{1, 1, 2, 1});
  int64_t at[] = {0, 0, 1, 0};
  CHECK(y4.value_at(at) == x4.value_at(at));
  Pool2dOpts vast;
  vast.kernel[0] = vast.kernel[1] = int64_t(1) << 32;
  vast.padding[0] = vast.padding[1] = int64_t(1) << 31;
  Tensor one = ones({1, 1, 1, 1}, DType::Float64);
  int64_t at0[] = {0, 0, 0, 0};
  CHECK(avg_pool2d(one, vast).value_at(at0) == std::ldexp(1.0, -64));
  const int64_t half = int64_t(1) << 62;
  CHECK_THAT(error_of([&] { batch_norm(zeros({half, half, 0}, DType::Float32), Tensor(), Tensor(), Tensor(),
                                       Tensor(), true, 0.1, 1e-5); }),
             StartsWith("batch_norm: expected more than 1 value per channel when training"));
  // An LSTM step's cell state of an empty (0, 2^62): its gates' size was compared with 4 x 2^62.
  CHECK_THAT(error_of([&] { lstm_gates(zeros({0, 4}, DType::Float32), zeros({0, half}, DType::Float32)); }),
             StartsWith("lstm_gates: expected gates (..., 4 H) and a cell state (..., H)"));
  // The engine stays usable.
  CHECK(conv2d(randu({1, 3, 4, 4}), w, Tensor(), Conv2dOpts{}).shape() == Shape{1, 16, 2, 2});
}

// ---- pooling ---------------------------------------------------------------------------------

TEST_CASE("max_pool2d and avg_pool2d match torch: values, indices, gradients", "[nn]") {
  for (const PoolCase& c : nn_ref::kPoolCases) {
    INFO(c.kind << "_pool2d case " << c.name);
    const DType dt = DType(c.dtype);
    Pool2dOpts o;
    for (int i = 0; i < 2; ++i) {
      o.kernel[i] = c.k[i];
      o.stride[i] = c.s[i];
      o.padding[i] = c.p[i];
    }
    o.ceil_mode = c.ceil;
    o.count_include_pad = c.count_include_pad;
    Tensor x = make(c.x, dt), g = make(c.g, dt);
    const bool is_max = std::string(c.kind) == "max";
    if (is_max) {
      auto [y, idx] = max_pool2d(x, o);
      check(y, c.y, dt, "max_pool2d values");
      CHECK(idx.dtype() == DType::Int64);
      check(idx, c.idx, DType::Float64, "max_pool2d indices");
      check(max_pool2d_backward(g, idx, x.shape()), c.gx, dt, "max_pool2d_backward");
      auto [v, none] = max_pool2d(x, o, /*with_indices=*/false);
      check(v, c.y, dt, "max_pool2d values alone");
      CHECK(!none.defined());
    } else {
      check(avg_pool2d(x, o), c.y, dt, "avg_pool2d");
      check(avg_pool2d_backward(g, x.shape(), o), c.gx, dt, "avg_pool2d_backward");
    }
    ag::GradScope scope;
    Tensor xw = ag::watch(x);
    // Without indices asked for, the recorded op still computes the ones it needs.
    Tensor y = is_max ? ag::max_pool2d(xw, o, /*with_indices=*/false).first : ag::avg_pool2d(xw, o);
    check(grads(y, g, {xw})[0], c.gx, dt, "gradient through the tape");
  }
}

TEST_CASE("pooling: defaults, promotion, empty batches, global average", "[nn]") {
  Tensor x = randu({2, 3, 4, 6});
  // stride 0 is the kernel size (PyTorch's stride=None).
  CHECK(max_pool2d(x, pool_opts(2)).first.shape() == Shape{2, 3, 2, 3});
  CHECK(avg_pool2d(x, pool_opts(2, 1)).shape() == Shape{2, 3, 3, 5});
  Tensor xi = cast(binary(Op::Mul, x, Scalar(100.0)), DType::Int32);
  CHECK(max_pool2d(xi, pool_opts(2)).first.dtype() == DType::Float32);
  CHECK(avg_pool2d(xi, pool_opts(2)).dtype() == DType::Float32);
  auto [e, ei] = max_pool2d(zeros({0, 3, 4, 4}, DType::Float32), pool_opts(2));
  CHECK(e.shape() == Shape{0, 3, 2, 2});
  CHECK(ei.shape() == Shape{0, 3, 2, 2});
  CHECK(max_pool2d_backward(e, ei, Shape{0, 3, 4, 4}).shape() == Shape{0, 3, 4, 4});

  Tensor gap = global_avg_pool2d(x);
  CHECK(gap.shape() == Shape{2, 3});
  CHECK(global_avg_pool2d(x, true).shape() == Shape{2, 3, 1, 1});
  Tensor mean = reduce(Op::Mean, reshape(x, Shape{2, 3, 24}), {2}, false);
  CHECK(reduce(Op::Amax, unary(Op::Abs, binary(Op::Sub, gap, mean)), {}, false).item() < 1e-6);
  ag::GradScope scope;
  Tensor xw = ag::watch(x);
  Tensor gx = ag::grad({ag::reduce(Op::Sum, ag::global_avg_pool2d(xw), {}, false)}, {}, {xw}, false)[0];
  CHECK(std::fabs(reduce(Op::Amax, gx, {}, false).item() - 1.0 / 24) < 1e-7);
  CHECK(std::fabs(reduce(Op::Amin, gx, {}, false).item() - 1.0 / 24) < 1e-7);
}

TEST_CASE("pooling errors name the op and the shapes", "[nn]") {
  Tensor x = randu({1, 2, 4, 4});
  CHECK(error_of([&] { max_pool2d(randu({4, 4}), pool_opts(2)); }) ==
        "max_pool2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape (4, 4)");
  CHECK(error_of([&] { avg_pool2d(x, pool_opts(0)); }) == "avg_pool2d: kernel_size must be positive, got (0, 0)");
  CHECK(error_of([&] { max_pool2d(x, pool_opts(2, -1)); }) == "max_pool2d: stride must be positive, got (-1, -1)");
  CHECK(error_of([&] { max_pool2d(x, pool_opts(2, 2, 2)); }) ==
        "max_pool2d: padding must be between 0 and half the kernel size, got padding (2, 2) for kernel_size (2, 2)");
  CHECK(error_of([&] { avg_pool2d(x, pool_opts(3, 1, -1)); }) ==
        "avg_pool2d: padding must be between 0 and half the kernel size, got padding (-1, -1) for kernel_size (3, 3)");
  CHECK_THAT(error_of([&] { max_pool2d(x, pool_opts(5)); }),
             StartsWith("max_pool2d: the output size (0, 0) is too small: kernel_size (5, 5) is larger than the padded "
                        "input (4, 4) of an input of shape (1, 2, 4, 4)"));
  CHECK(error_of([&] { max_pool2d(zeros({1, 2, 0, 4}, DType::Float32), pool_opts(2, 2, 1)); }) ==
        "max_pool2d: expected an input with non-empty height and width, got shape (1, 2, 0, 4)");

  auto [y, idx] = max_pool2d(x, pool_opts(2));
  CHECK(error_of([&] { max_pool2d_backward(y, cast(idx, DType::Float32), x.shape()); }) ==
        "max_pool2d_backward: expected int64 or int32 indices, got float32");
  CHECK(error_kind_of([&] { max_pool2d_backward(y, cast(idx, DType::Float32), x.shape()); }) == ErrorKind::Type);
  CHECK(error_of([&] { max_pool2d_backward(randu({1, 2, 3, 2}), idx, x.shape()); }) ==
        "max_pool2d_backward: expected a gradient of the indices' shape (1, 2, 2, 2), got (1, 2, 3, 2)");
  CHECK(error_of([&] { max_pool2d_backward(y, idx, Shape{1, 3, 4, 4}); }) ==
        "max_pool2d_backward: a gradient of shape (1, 2, 2, 2) does not match an input of shape (1, 3, 4, 4)");
  Tensor bad_idx = binary(Op::Add, idx, Scalar::integer(99));
  CHECK_THAT(error_of([&] { max_pool2d_backward(y, bad_idx, x.shape()); }),
             StartsWith("max_pool2d_backward: index ") && Contains("is out of range for a plane of 16 elements (4, 4)"));
  CHECK(error_kind_of([&] { max_pool2d_backward(y, bad_idx, x.shape()); }) == ErrorKind::Index);
  CHECK(error_of([&] { avg_pool2d_backward(randu({1, 2, 3, 3}), x.shape(), pool_opts(2)); }) ==
        "avg_pool2d_backward: expected a gradient of shape (1, 2, 2, 2) (the output of avg_pool2d for an input of "
        "shape (1, 2, 4, 4)), got (1, 2, 3, 3)");
  CHECK(error_of([&] { global_avg_pool2d(randu({4, 4})); }) ==
        "global_avg_pool2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape (4, 4)");
  CHECK(error_of([&] { ag::global_avg_pool2d(randu({4, 4})); }) ==
        "global_avg_pool2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape (4, 4)");
}

// ---- batch normalisation ------------------------------------------------------------------------

TEST_CASE("batch_norm matches torch: training, evaluation, running statistics, gradients", "[nn]") {
  for (const BNCase& c : nn_ref::kBNCases) {
    INFO("batch_norm case " << c.name);
    const DType dt = DType(c.dtype);
    Tensor x = make(c.x, dt), w = make(c.w, dt), b = make(c.b, dt), g = make(c.g, dt);
    Tensor rm = make(c.rm, dt), rv = make(c.rv, dt);
    ag::GradScope scope;
    TensorList in = {ag::watch(x)};
    if (w.defined()) in.push_back(ag::watch(w));
    if (b.defined()) in.push_back(ag::watch(b));
    Tensor y = ag::batch_norm(in[0], w.defined() ? in[1] : Tensor(), b.defined() ? in.back() : Tensor(), rm, rv,
                              c.training, c.momentum, c.eps);
    check(y, c.y, dt, "batch_norm");
    if (rm.defined()) {
      check(rm, c.rm_after, dt, "running_mean");
      check(rv, c.rv_after, dt, "running_var");
    }
    TensorList gs = grads(y, g, in);
    check(gs[0], c.gx, dt, "gradient for x");
    if (w.defined()) check(gs[1], c.gw, dt, "gradient for the weight");
    if (b.defined()) check(gs.back(), c.gb, dt, "gradient for the bias");
  }
}

TEST_CASE("batch_norm errors and edge cases", "[nn]") {
  Tensor x = randu({4, 3, 2, 2}), c3 = randu({3});
  CHECK(error_of([&] { batch_norm(randu({4}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5); }) ==
        "batch_norm: expected an input of shape (N, C, ...) with at least 2 dimensions, got shape (4,)");
  CHECK(error_of([&] { batch_norm(x, randu({4}), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5); }) ==
        "batch_norm: expected weight of shape (3,) for an input of shape (4, 3, 2, 2), got (4,)");
  CHECK(error_of([&] { batch_norm(x, c3, randu({3, 1}), Tensor(), Tensor(), true, 0.1, 1e-5); }) ==
        "batch_norm: expected bias of shape (3,) for an input of shape (4, 3, 2, 2), got (3, 1)");
  CHECK(error_of([&] { batch_norm(x, c3, c3, randu({2}), c3, true, 0.1, 1e-5); }) ==
        "batch_norm: expected running_mean of shape (3,) for an input of shape (4, 3, 2, 2), got (2,)");
  CHECK(error_of([&] { batch_norm(x, c3, c3, Tensor(), Tensor(), false, 0.1, 1e-5); }) ==
        "batch_norm: running_mean and running_var are needed in evaluation mode");
  CHECK(error_of([&] { batch_norm(randu({1, 3}), c3, c3, Tensor(), Tensor(), true, 0.1, 1e-5); }) ==
        "batch_norm: expected more than 1 value per channel when training, got an input of shape (1, 3)");
  CHECK(error_of([&] { batch_norm(x, c3, c3, zeros({3}, DType::Int64), c3, true, 0.1, 1e-5); }) ==
        "batch_norm: expected floating running statistics, got int64");
  CHECK(error_of([&] { batch_norm(x, c3, c3, Tensor(), Tensor(), true, 0.1, -1); }) ==
        "batch_norm: eps must be non-negative, got -1");
  // Evaluation of a single value per channel is fine; integer inputs are promoted.
  Tensor xi = cast(binary(Op::Mul, randu({1, 3}), Scalar(10.0)), DType::Int64);
  BatchNormResult r = batch_norm(xi, Tensor(), Tensor(), zeros({3}, DType::Float32), ones({3}, DType::Float32),
                                 false, 0.1, 0.0);
  CHECK(r.y.dtype() == DType::Float32);
  CHECK(values_of(r.y) == values_of(cast(xi, DType::Float32)));
  // Float64 running statistics of a float32 input stay float64.
  Tensor rm = zeros({3}, DType::Float64), rv = ones({3}, DType::Float64);
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.5, 1e-5);
  CHECK(rm.dtype() == DType::Float64);
  Tensor m = reduce(Op::Mean, x, {0, 2, 3}, false);
  CHECK(std::fabs(rm.value_at(std::vector<int64_t>{1}.data()) - 0.5 * m.value_at(std::vector<int64_t>{1}.data())) < 1e-6);
}

// ---- cross-entropy and embedding ---------------------------------------------------------------------

TEST_CASE("cross_entropy matches torch: reductions, ignore_index, large logits", "[nn]") {
  for (const CECase& c : nn_ref::kCECases) {
    INFO("cross_entropy case " << c.name);
    const DType dt = DType(c.dtype);
    Tensor logits = make(c.logits, dt), g = make(c.g, dt);
    Tensor t = int_tensor(c.targets, c.n_targets, Shape{c.n_targets});
    std::optional<int64_t> ignore;
    if (c.has_ignore) ignore = c.ignore;
    const Reduction red = Reduction(c.reduction);
    check(cross_entropy(logits, t, red, ignore), c.loss, dt, "cross_entropy");
    check(cross_entropy(logits, cast(t, DType::Int32), red, ignore), c.loss, dt, "int32 target");
    ag::GradScope scope;
    Tensor lw = ag::watch(logits);
    Tensor y = ag::cross_entropy(lw, t, red, ignore);
    check(y, c.loss, dt, "recorded cross_entropy");
    check(grads(y, g, {lw})[0], c.gl, dt, "gradient for the logits");
  }
}

TEST_CASE("cross_entropy errors and empty batches", "[nn]") {
  Tensor logits = randu({3, 5});
  double tv[] = {0, 4, 2}, bad[] = {0, 7, 2}, neg[] = {0, -1, 2};
  Tensor t = int_tensor(tv, 3, Shape{3});
  CHECK(error_of([&] { cross_entropy(randu({5}), t, Reduction::Mean, std::nullopt); }) ==
        "cross_entropy: expected logits of shape (N, C), got shape (5,)");
  CHECK(error_of([&] { cross_entropy(logits, cast(t, DType::Float32), Reduction::Mean, std::nullopt); }) ==
        "cross_entropy: expected an int64 or int32 target of class indices, got float32");
  CHECK(error_kind_of([&] { cross_entropy(logits, cast(t, DType::Float32), Reduction::Mean, std::nullopt); }) ==
        ErrorKind::Type);
  CHECK(error_of([&] { cross_entropy(logits, int_tensor(tv, 2, Shape{2}), Reduction::Mean, std::nullopt); }) ==
        "cross_entropy: expected a target of shape (3,) for logits of shape (3, 5), got (2,)");
  CHECK(error_of([&] { cross_entropy(logits, int_tensor(bad, 3, Shape{3}), Reduction::Sum, std::nullopt); }) ==
        "cross_entropy: target 7 is out of range for 5 classes (expected 0..4)");
  CHECK(error_kind_of([&] { cross_entropy(logits, int_tensor(neg, 3, Shape{3}), Reduction::Sum, std::nullopt); }) ==
        ErrorKind::Index);
  // An ignored label need not be a class.
  CHECK(std::isfinite(cross_entropy(logits, int_tensor(neg, 3, Shape{3}), Reduction::Mean, -1).item()));
  CHECK(error_of([&] { cross_entropy(zeros({2, 0}, DType::Float32), int_tensor(tv, 2, Shape{2}), Reduction::Mean,
                                     std::nullopt); }) ==
        "cross_entropy: expected at least one class, got logits of shape (2, 0)");
  Tensor e = zeros({0, 5}, DType::Float32), et = zeros({0}, DType::Int64);
  CHECK(std::isnan(cross_entropy(e, et, Reduction::Mean, std::nullopt).item()));
  CHECK(cross_entropy(e, et, Reduction::Sum, std::nullopt).item() == 0);
  CHECK(cross_entropy(e, et, Reduction::None, std::nullopt).shape() == Shape{0});
}

TEST_CASE("embedding matches torch, padding_idx included", "[nn]") {
  for (const EmbCase& c : nn_ref::kEmbCases) {
    INFO("embedding case " << c.name);
    const DType dt = DType(c.dtype);
    Tensor w = make(c.w, dt), g = make(c.g, dt);
    Shape is(c.idx_shape, c.idx_ndim);
    Tensor idx = int_tensor(c.idx, checked_numel(is, "test"), is);
    std::optional<int64_t> pad;
    if (c.has_pad) pad = c.pad;
    check(embedding(w, idx, pad), c.y, dt, "embedding");
    check(embedding(w, cast(idx, DType::Int32), pad), c.y, dt, "int32 indices");
    ag::GradScope scope;
    Tensor ww = ag::watch(w);
    Tensor y = ag::embedding(ww, idx, pad);
    check(grads(y, g, {ww})[0], c.gw, dt, "gradient for the weight");
  }
}

TEST_CASE("embedding errors", "[nn]") {
  Tensor w = randu({5, 3});
  double iv[] = {0, 4, 5};
  CHECK(error_of([&] { embedding(randu({5}), int_tensor(iv, 2, Shape{2}), std::nullopt); }) ==
        "embedding: expected a 2-D weight (num_embeddings, embedding_dim), got shape (5,)");
  CHECK(error_of([&] { embedding(w, randu({2}), std::nullopt); }) ==
        "embedding: expected int64 or int32 indices, got float32");
  CHECK(error_of([&] { embedding(w, int_tensor(iv, 3, Shape{3}), std::nullopt); }) ==
        "embedding: index 5 is out of range for a weight of 5 embeddings (shape (5, 3))");
  CHECK(error_kind_of([&] { embedding(w, int_tensor(iv, 3, Shape{3}), std::nullopt); }) == ErrorKind::Index);
  CHECK(error_of([&] { embedding(w, int_tensor(iv, 2, Shape{2}), 5); }) ==
        "embedding: padding_idx 5 is out of range for 5 embeddings");
  CHECK(embedding(w, zeros({0}, DType::Int64), std::nullopt).shape() == Shape{0, 3});
}

// ---- dropout -------------------------------------------------------------------------------------------

TEST_CASE("dropout: the mask, its scaling, its gradient, reproducibility", "[nn]") {
  const double p = 0.3;
  Tensor x = binary(Op::Add, randu({200, 500}), Scalar(0.5));  // no zeros of its own
  manual_seed(42);
  auto [y, mask] = dropout(x, p);
  std::vector<double> xv = values_of(x), yv = values_of(y);
  int64_t dropped = 0;
  bool scaled = true;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0) { ++dropped; continue; }
    scaled = scaled && std::fabs(yv[i] - xv[i] / (1 - p)) <= 1e-6 * std::fabs(yv[i]);
  }
  CHECK(scaled);
  CHECK(std::fabs(double(dropped) / double(xv.size()) - p) < 0.01);  // 100000 draws: 7 sigma
  manual_seed(42);
  CHECK(values_of(dropout(x, p).first) == yv);

  ag::GradScope scope;
  Tensor xw = ag::watch(x);
  manual_seed(42);
  Tensor yr = ag::dropout(xw, p);
  CHECK(values_of(yr) == yv);
  Tensor gx = ag::grad({ag::reduce(Op::Sum, yr, {}, false)}, {}, {xw}, false)[0];
  std::vector<double> gv = values_of(gx);
  bool grad_ok = true;
  for (size_t i = 0; i < gv.size(); ++i)
    grad_ok = grad_ok && (yv[i] == 0 ? gv[i] == 0 : std::fabs(gv[i] - 1 / (1 - p)) < 1e-6);
  CHECK(grad_ok);

  // p = 0 and evaluation mode are the identity; p = 1 drops everything.
  CHECK(values_of(ag::dropout(x, 0.0)) == xv);
  CHECK(values_of(ag::dropout(x, 0.5, false)) == xv);
  Tensor all = ag::dropout(xw, 1.0);
  CHECK(reduce(Op::Amax, unary(Op::Abs, all), {}, false).item() == 0);
  Tensor g1 = ag::grad({ag::reduce(Op::Sum, all, {}, false)}, {}, {xw}, false)[0];
  CHECK(reduce(Op::Amax, unary(Op::Abs, g1), {}, false).item() == 0);
  CHECK(dropout(cast(x, DType::Int64), 0.5).first.dtype() == DType::Float32);
  CHECK(error_of([&] { dropout(x, 1.5); }) == "dropout: probability must be in [0, 1], got 1.5");
  CHECK(error_of([&] { ag::dropout(x, -0.1); }) == "dropout: probability must be in [0, 1], got -0.1");
}
