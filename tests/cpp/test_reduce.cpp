// Reductions, max/min with indices, softmax and sum_to against PyTorch.
//
// The reference values are in tests/cpp/ref/reduce_ref.inc, written by
// tests/ref/gen_reduce_refs.py with Debian's PyTorch: nothing here compares dlua with
// itself, except the thread-count determinism test, whose point is exactly that.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor/backend.h"
#include "tensor/ops.h"

using namespace dl;

namespace {

// One case of the reference file (its field order is the generator's).
struct RefCase {
  const char* label;
  const char* op;
  int in_dtype;
  int64_t base_n;
  const double* base;  // nullptr: hash_value(i, seed) * scale
  unsigned seed;
  double scale;
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  int64_t offset;
  int ndims;  // -1: no dim (flattened argmax); 0: every dim
  int dims[kMaxDims];
  bool keepdim;
  double correction;
  double p;
  int out_dtype;
  int out_ndim;
  int64_t out_sizes[kMaxDims];
  int64_t sample;  // every sample-th output is stored
  int64_t out_n;
  const double* expected;
  const double* expected2;  // indices of max_dim/min_dim
};

#include "ref/reduce_ref.inc"

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

Tensor input_of(const RefCase& c) {
  DType dt = DType(c.in_dtype);
  Tensor base;
  if (c.base) {
    base = from_values(c.base, c.base_n, Shape{c.base_n}, dt);
  } else {
    std::vector<double> v(size_t(c.base_n));
    for (int64_t i = 0; i < c.base_n; ++i) v[size_t(i)] = hash_value(i, c.seed) * c.scale;
    base = from_values(v.data(), c.base_n, Shape{c.base_n}, dt);
  }
  return make_view(base, Shape(c.sizes, c.ndim), Shape(c.strides, c.ndim), c.offset);
}

// Every element of t (any layout) in row-major order.
std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
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

// Float32 results are checked against torch's float64 result of the same inputs, so
// the tolerance is float32's; integer and bool results must be exact. NaN matches NaN
// and an infinity only itself.
bool close(double got, double want, DType dt) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want) || !is_floating(dt)) return got == want;
  double rtol = dt == DType::Float32 ? 1e-5 : 1e-12, atol = dt == DType::Float32 ? 1e-6 : 1e-12;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

void check_output(const RefCase& c, const Tensor& y, DType dt, const double* expected) {
  INFO(c.label);
  REQUIRE(y.dtype() == dt);
  REQUIRE(y.shape() == Shape(c.out_sizes, c.out_ndim));
  std::vector<double> v = values_of(y);
  int64_t n = 0;
  std::string bad;
  for (int64_t i = 0; i < int64_t(v.size()); i += c.sample, ++n) {
    if (n < c.out_n && close(v[size_t(i)], expected[n], dt)) continue;
    bad = "element " + std::to_string(i) + ": got " + std::to_string(v[size_t(i)]) +
          ", expected " + (n < c.out_n ? std::to_string(expected[n]) : "nothing");
    break;
  }
  CHECK(bad == "");
  CHECK(n == c.out_n);
}

Op op_by_name(const char* name) {
  for (int i = 0; i < kNumOps; ++i)
    if (std::strcmp(op_info(Op(i)).lua_name, name) == 0) return Op(i);
  FAIL("unknown op " << name);
  return Op::Sum;
}

void run_case(const RefCase& c) {
  INFO(c.label);
  Tensor x = input_of(c);
  std::string op = c.op;
  DType out_dt = DType(c.out_dtype);
  if (op == "max_dim" || op == "min_dim") {
    auto [v, i] = op == "max_dim" ? max_dim(x, c.dims[0], c.keepdim) : min_dim(x, c.dims[0], c.keepdim);
    check_output(c, v, out_dt, c.expected);
    check_output(c, i, DType::Int64, c.expected2);
  } else if (op == "argmax" || op == "argmin") {
    std::optional<int> dim;
    if (c.ndims > 0) dim = c.dims[0];
    Tensor i = op == "argmax" ? argmax(x, dim, c.keepdim) : argmin(x, dim, c.keepdim);
    check_output(c, i, out_dt, c.expected);
  } else if (op == "softmax" || op == "log_softmax") {
    Tensor y = op == "softmax" ? softmax(x, c.dims[0]) : log_softmax(x, c.dims[0]);
    check_output(c, y, out_dt, c.expected);
  } else if (op == "sum_to") {
    check_output(c, sum_to(x, Shape(c.out_sizes, c.out_ndim)), out_dt, c.expected);
  } else {
    std::vector<int> dims(c.dims, c.dims + c.ndims);
    ReduceOpts o;
    o.correction = c.correction;
    o.p = c.p;
    check_output(c, reduce(op_by_name(c.op), x, dims, c.keepdim, o), out_dt, c.expected);
  }
}

// Runs (or, when `dry`, only counts) the reference cases whose label starts with one of
// `prefixes`.
int run_cases(const std::vector<std::string>& prefixes, bool dry = false) {
  int n = 0;
  for (const RefCase& c : reduce_ref::kCases) {
    std::string label = c.label;
    for (const std::string& p : prefixes) {
      if (label.compare(0, p.size(), p) != 0) continue;
      if (!dry) run_case(c);
      ++n;
      break;
    }
  }
  return n;
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

Tensor hash_tensor(const Shape& shape, unsigned seed, DType dt, double shift = 0) {
  int64_t n = checked_numel(shape, "test");
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = hash_value(i, seed) + shift;
  return from_values(v.data(), n, shape, dt);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.is_contiguous() &&
         b.is_contiguous() && std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * a.itemsize()) == 0;
}

}  // namespace

// ---- against PyTorch --------------------------------------------------------------------

TEST_CASE("sum, mean and prod match PyTorch", "[reduce]") {
  CHECK(run_cases({"sum ", "mean ", "prod ", "int64 prod"}) > 100);
}

TEST_CASE("amax, amin, any and all match PyTorch", "[reduce]") {
  CHECK(run_cases({"amax ", "amin ", "any ", "all "}) > 100);
}

TEST_CASE("var and std match PyTorch, with every correction", "[reduce]") {
  CHECK(run_cases({"var ", "std "}) > 100);
}

TEST_CASE("norm of every order matches PyTorch", "[reduce]") {
  CHECK(run_cases({"norm "}) > 100);
}

TEST_CASE("logsumexp is stable and matches PyTorch", "[reduce]") {
  CHECK(run_cases({"logsumexp "}) > 50);
}

TEST_CASE("max_dim, min_dim, argmax and argmin match PyTorch (ties, NaN)", "[reduce]") {
  CHECK(run_cases({"max_dim ", "min_dim ", "argmax ", "argmin "}) > 60);
}

TEST_CASE("softmax and log_softmax are stable and match PyTorch", "[reduce]") {
  CHECK(run_cases({"softmax ", "log_softmax "}) > 20);
}

TEST_CASE("sum_to matches PyTorch's sums", "[reduce]") {
  CHECK(run_cases({"sum_to "}) == 14);
}

TEST_CASE("large reductions (threaded paths) match PyTorch", "[reduce]") {
  CHECK(run_cases({"big "}) == 19);
}

TEST_CASE("every reference case belongs to one of the tests above", "[reduce]") {
  size_t total = sizeof(reduce_ref::kCases) / sizeof(reduce_ref::kCases[0]);
  int n = run_cases({"sum ", "mean ", "prod ", "int64 prod", "amax ", "amin ", "any ", "all ",
                     "var ", "std ", "norm ", "logsumexp ", "max_dim ", "min_dim ", "argmax ",
                     "argmin ", "softmax ", "log_softmax ", "sum_to ", "big "},
                    /*dry=*/true);
  CHECK(size_t(n) == total);
}

// ---- accuracy and determinism -----------------------------------------------------------

TEST_CASE("summing 1e7 float32 values is accurate", "[reduce]") {
  // Values in [0, 2), the same as the generator's; the exact sum is torch-independent
  // (math.fsum), so this checks the accumulation itself.
  Tensor x = hash_tensor(Shape{reduce_ref::kBigSumN}, reduce_ref::kBigSumSeed, DType::Float32, 1.0);
  double exact = reduce_ref::kBigSumExact;
  double s = reduce(Op::Sum, x, {}, false).item();
  CHECK(std::fabs(s - exact) <= exact * 1.2e-7);  // within float32's rounding of the result
  double m = reduce(Op::Mean, x, {}, false).item();
  CHECK(std::fabs(m - exact / double(reduce_ref::kBigSumN)) <= 1.2e-7);
  // A plain float32 loop is far off here: the check above is able to fail.
  float naive = 0;
  const float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) naive += p[i];
  CHECK(std::fabs(double(naive) - exact) > exact * 1e-4);
}

TEST_CASE("results do not depend on the thread count", "[reduce]") {
#ifdef _OPENMP
  Tensor a = hash_tensor(Shape{3, 200000}, 50, DType::Float32);
  Tensor b = hash_tensor(Shape{100000, 5}, 51, DType::Float32);
  Tensor c = hash_tensor(Shape{1000000}, 52, DType::Float64);
  auto run = [&] {
    return TensorList{
        reduce(Op::Sum, a, {}, false),       reduce(Op::Sum, a, {1}, false),
        reduce(Op::Var, b, {0}, false),      reduce(Op::Logsumexp, b, {0}, false),
        reduce(Op::Norm, c, {}, false),      reduce(Op::Mean, b, {}, false),
        argmax(c, std::nullopt, false),      max_dim(b, 0, false).second,
        softmax(a, 1),                        sum_to(b, Shape{1, 5}),
    };
  };
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  TensorList one = run();
  omp_set_num_threads(3);
  TensorList three = run();
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(bitwise_equal(one[i], three[i]));
  }
#else
  SUCCEED("built without OpenMP");
#endif
}

// ---- dtypes, shapes and identity ------------------------------------------------------------

TEST_CASE("result dtypes follow PyTorch's rules", "[reduce]") {
  Tensor i32 = hash_tensor(Shape{4, 5}, 60, DType::Int32);
  Tensor b = hash_tensor(Shape{4, 5}, 61, DType::Bool);
  Tensor f64 = hash_tensor(Shape{4, 5}, 62, DType::Float64);
  CHECK(reduce(Op::Sum, i32, {}, false).dtype() == DType::Int64);
  CHECK(reduce(Op::Prod, b, {0}, false).dtype() == DType::Int64);
  CHECK(reduce(Op::Sum, f64, {}, false).dtype() == DType::Float64);
  CHECK(reduce(Op::Amax, i32, {1}, false).dtype() == DType::Int32);
  CHECK(reduce(Op::Any, f64, {}, false).dtype() == DType::Bool);
  CHECK(reduce(Op::All, i32, {0}, true).dtype() == DType::Bool);
  CHECK(reduce(Op::Mean, i32, {}, false).dtype() == DType::Float32);
  CHECK(softmax(i32, 1).dtype() == DType::Float32);
  set_default_float(DType::Float64);
  CHECK(reduce(Op::Mean, i32, {}, false).dtype() == DType::Float64);
  CHECK(reduce(Op::Logsumexp, b, {1}, false).dtype() == DType::Float64);
  CHECK(log_softmax(i32, 0).dtype() == DType::Float64);
  set_default_float(DType::Float32);
  CHECK(max_dim(i32, 1, false).first.dtype() == DType::Int32);
  CHECK(max_dim(i32, 1, false).second.dtype() == DType::Int64);
  CHECK(argmin(f64, 0, true).dtype() == DType::Int64);
}

TEST_CASE("keepdim and results are fresh contiguous tensors", "[reduce]") {
  Tensor x = hash_tensor(Shape{2, 3, 4}, 63, DType::Float32);
  Tensor y = reduce(Op::Sum, x, {1}, true);
  CHECK(y.shape() == Shape{2, 1, 4});
  CHECK(y.is_contiguous());
  Tensor z = reduce(Op::Sum, x, {-1, 0}, false);
  CHECK(z.shape() == Shape{3});
  CHECK(z.is_contiguous());
  CHECK(!z.same_storage(x));
  CHECK(reduce(Op::Amax, x, {}, true).shape() == Shape{1, 1, 1});
  CHECK(argmax(x, std::nullopt, true).shape() == Shape{1, 1, 1});
  CHECK(argmax(x, std::nullopt, false).shape() == Shape{});
}

TEST_CASE("sum_to returns x itself when the shapes already match", "[reduce]") {
  Tensor x = hash_tensor(Shape{3, 4}, 64, DType::Float32);
  CHECK(sum_to(x, Shape{3, 4}).impl() == x.impl());
  Tensor s = sum_to(x, Shape{1, 4});
  CHECK(s.shape() == Shape{1, 4});
  CHECK(s.is_contiguous());
}

TEST_CASE("integer remainder by zero is caught through reduce(any)", "[reduce]") {
  double av[] = {1, 2, 3}, bv[] = {1, 0, 2};
  Tensor a = from_values(av, 3, Shape{3}, DType::Int32);
  Tensor b = from_values(bv, 3, Shape{3}, DType::Int32);
  CHECK(error_of([&] { binary(Op::Mod, a, b); }) == "remainder: integer division by zero");
  double cv[] = {1, 5, 2};
  Tensor c = from_values(cv, 3, Shape{3}, DType::Int32);
  CHECK(binary(Op::Mod, a, c).numel() == 3);
}

// ---- errors -------------------------------------------------------------------------------------

TEST_CASE("reductions refuse bad dims", "[reduce]") {
  Tensor x = hash_tensor(Shape{2, 3}, 70, DType::Float32);
  CHECK(error_of([&] { reduce(Op::Sum, x, {3}, false); }) ==
        "sum: dimension 3 out of range for a tensor of 2 dimensions");
  CHECK(error_kind_of([&] { reduce(Op::Sum, x, {3}, false); }) == ErrorKind::Index);
  CHECK(error_of([&] { reduce(Op::Var, x, {-3}, false); }) ==
        "var: dimension -3 out of range for a tensor of 2 dimensions");
  CHECK(error_of([&] { reduce(Op::Mean, x, {0, -2}, false); }) ==
        "mean: dimension 0 appears more than once in the dims {0, -2}");
  CHECK(error_of([&] { reduce(Op::Any, x, {1, 1}, true); }) ==
        "any: dimension 1 appears more than once in the dims {1, 1}");
  CHECK(error_of([&] { max_dim(x, 2, false); }) ==
        "max: dimension 2 out of range for a tensor of 2 dimensions");
  CHECK(error_of([&] { argmin(x, -3, false); }) ==
        "argmin: dimension -3 out of range for a tensor of 2 dimensions");
  CHECK(error_of([&] { softmax(x, 2); }) ==
        "softmax: dimension 2 out of range for a tensor of 2 dimensions");
  CHECK(error_of([&] { log_softmax(x, -5); }) ==
        "log_softmax: dimension -5 out of range for a tensor of 2 dimensions");
  Tensor s = hash_tensor(Shape{}, 71, DType::Float32);
  CHECK(error_of([&] { reduce(Op::Sum, s, {1}, false); }) ==
        "sum: dimension 1 out of range for a tensor of 0 dimensions");
}

TEST_CASE("softmax of an empty tensor whose other sizes multiply past 2^63", "[reduce]") {
  // Found by fuzz_ops: the sizes before dim were multiplied before the 0 was seen
  // (UBSan in the sanitizer suite).
  const int64_t half = int64_t(1) << 62;
  Tensor e = zeros(Shape{half, half, 0}, DType::Float64);
  CHECK(softmax(e, 2).shape() == e.shape());
  CHECK(log_softmax(e, 1).shape() == e.shape());
}

TEST_CASE("reductions without an identity refuse empty reductions", "[reduce]") {
  Tensor e = zeros(Shape{0, 3}, DType::Float32);
  CHECK(error_of([&] { reduce(Op::Amax, e, {}, false); }) ==
        "amax: cannot reduce over dimension 0 of size 0 (tensor of shape (0, 3)): "
        "the operation has no identity");
  CHECK(error_of([&] { reduce(Op::Amin, e, {0}, true); }) ==
        "amin: cannot reduce over dimension 0 of size 0 (tensor of shape (0, 3)): "
        "the operation has no identity");
  ReduceOpts inf;
  inf.p = INFINITY;
  CHECK_THAT(error_of([&] { reduce(Op::Norm, e, {}, false, inf); }),
             Catch::Matchers::StartsWith("norm: cannot compute the inf norm over dimension 0"));
  inf.p = -INFINITY;
  CHECK_THAT(error_of([&] { reduce(Op::Norm, e, {0}, false, inf); }),
             Catch::Matchers::StartsWith("norm: cannot compute the -inf norm over dimension 0"));
  CHECK(error_of([&] { max_dim(e, 0, false); }) ==
        "max: cannot reduce over dimension 0 of size 0 (tensor of shape (0, 3)): "
        "the operation has no identity");
  CHECK(error_of([&] { argmax(e, std::nullopt, false); }) ==
        "argmax: cannot take the argmax of an empty tensor (shape (0, 3))");
  CHECK(error_of([&] { argmin(e, 0, false); }) ==
        "argmin: cannot reduce over dimension 0 of size 0 (tensor of shape (0, 3)): "
        "the operation has no identity");
  // The reduced dim is not empty here, only the result: allowed, as in PyTorch.
  CHECK(reduce(Op::Amax, e, {1}, false).shape() == Shape{0});
  CHECK(max_dim(e, 1, false).first.shape() == Shape{0});
}

TEST_CASE("reduce refuses ops that are not reductions and bad options", "[reduce]") {
  Tensor x = hash_tensor(Shape{2, 3}, 72, DType::Float32);
  CHECK(error_of([&] { reduce(Op::Add, x, {}, false); }) == "reduce: add is not a reduction");
  ReduceOpts o;
  o.p = NAN;
  CHECK(error_of([&] { reduce(Op::Norm, x, {}, false, o); }) ==
        "norm: the order p must be a number, got nan");
  o = ReduceOpts{};
  o.correction = INFINITY;
  CHECK(error_of([&] { reduce(Op::Std, x, {}, false, o); }) ==
        "std: correction must be finite, got inf");
}

TEST_CASE("sum_to refuses shapes x was not broadcast from", "[reduce]") {
  Tensor x = hash_tensor(Shape{2, 3}, 73, DType::Float32);
  CHECK(error_of([&] { sum_to(x, Shape{4}); }) ==
        "sum_to: cannot sum a tensor of shape (2, 3) to the shape (4,) "
        "(dimension 1 has size 3, the target 4)");
  CHECK(error_of([&] { sum_to(x, Shape{2, 2}); }) ==
        "sum_to: cannot sum a tensor of shape (2, 3) to the shape (2, 2) "
        "(dimension 1 has size 3, the target 2)");
  CHECK(error_of([&] { sum_to(x, Shape{1, 2, 3}); }) ==
        "sum_to: cannot sum a tensor of shape (2, 3) to the shape (1, 2, 3), which has more "
        "dimensions");
}

namespace {
void* fake_alloc(size_t n, int, const char*) { return std::malloc(n ? n : 1); }
void fake_free(void* p, size_t, int) { std::free(p); }
}  // namespace

TEST_CASE("a backend without reduction kernels says so", "[reduce]") {
  bool had_cuda = error_of([] { backend_for(Device{DeviceType::CUDA, 0}, "test"); }) == "<no error>";
  if (had_cuda) {
    SUCCEED("a real GPU plugin is loaded; not replacing it");
    return;
  }
  // A stand-in device whose memory is host memory and whose reduction entries are empty.
  Backend fake = cpu_backend();
  fake.name = "fake-cuda";
  fake.alloc = fake_alloc;
  fake.free = fake_free;
  fake.reduce = nullptr;
  fake.arg_reduce = nullptr;
  fake.softmax = nullptr;
  register_backend(DeviceType::CUDA, &fake);
  {
    Tensor x = empty(Shape{2, 3}, DType::Float32, Device{DeviceType::CUDA, 0});
    CHECK(error_of([&] { reduce(Op::Sum, x, {}, false); }) == "sum: not implemented for cuda");
    CHECK(error_kind_of([&] { reduce(Op::Sum, x, {}, false); }) == ErrorKind::NotImplemented);
    CHECK(error_of([&] { max_dim(x, 1, false); }) == "max: not implemented for cuda");
    CHECK(error_of([&] { argmin(x, std::nullopt, false); }) == "argmin: not implemented for cuda");
    CHECK(error_of([&] { softmax(x, 0); }) == "softmax: not implemented for cuda");
  }
  register_backend(DeviceType::CUDA, nullptr);
}
