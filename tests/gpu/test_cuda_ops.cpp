// Every op of the op table (tensor/ops.def) run on CUDA and on the CPU, compared.
//
// Linked against libdlua_core.so (the engine the plugin binds to), not the static
// archives. Without a usable device it prints "skipped: no CUDA device (why)" and exits
// 77, which ctest reports as a skip. The math of the functors is checked by the CPU
// tests; here each op's CUDA kernel must agree with the CPU kernel, on contiguous,
// strided and broadcast inputs of every dtype the op takes, and fail the same way.
// ctest also runs it on the plugin's stand-in (tests/gpu/fake_plugin.cpp: the CPU's
// kernels as "cuda"), where the values agree trivially but every op's paths by device,
// layouts and errors run without a GPU.
// Tolerances: exact for integers, bools, copies and the random streams (except randn:
// CUDA's log and cos may differ in the last bit of a double); float results within a
// few ulps per element folded (sums fold in another order on the GPU).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compile/plan.h"
#include "tensor/nn.h"
#include "tensor/ops.h"
#include "tensor/optim.h"
#include "tensor/plugin.h"

using namespace dl;

namespace {

const Device kCuda{DeviceType::CUDA, 0};
const DType kAll[] = {DType::Bool, DType::UInt8, DType::Int32, DType::Int64, DType::Float32, DType::Float64};

Tensor to_device(const Tensor& t, Device d) {
  Tensor o = empty(t.shape(), t.dtype(), d);
  copy_(o, t);
  return o;
}

std::vector<double> host_values(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : to_device(t, Device{});
  Tensor d = contiguous(cast(h, DType::Float64));
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

// Random test data of a dtype: normal floats (scaled), small integers, random bools.
Tensor sample(const Shape& s, DType dt, double scale = 3) {
  Tensor r = binary(Op::Mul, randn(s, DType::Float64), Scalar(scale));
  switch (dt) {
    case DType::Bool: return compare(Op::Gt, r, Scalar(0.0));
    case DType::UInt8: return cast(unary(Op::Abs, unary(Op::Round, binary(Op::Mul, r, Scalar(4.0)))), dt);
    case DType::Int32:
    case DType::Int64: return cast(unary(Op::Round, binary(Op::Mul, r, Scalar(4.0))), dt);
    default: return cast(r, dt);
  }
}

// Float results within a few ulps per element folded into them (log2 of the count for
// the relative part, its square root for the absolute part, scaled by the largest
// result); integer, bool and exact results bit for bit.
struct Tol {
  bool exact = false;
  double folded = 1;
};
const Tol kExact{true, 1};
Tol folds(double n = 1) { return Tol{false, n}; }

void expect_same(const Tensor& cpu, const Tensor& gpu, Tol tol, const std::string& what) {
  INFO(what);
  REQUIRE(gpu.device() == kCuda);
  REQUIRE(cpu.shape() == gpu.shape());
  REQUIRE(cpu.dtype() == gpu.dtype());
  const bool exact = tol.exact || !is_floating(cpu.dtype());
  const bool single = cpu.dtype() == DType::Float32;
  const double rtol = (single ? 2e-5 : 1e-12) * (1 + std::log2(tol.folded));
  const double atol = (single ? 1e-6 : 1e-14) * std::sqrt(tol.folded);
  const std::vector<double> a = host_values(cpu), b = host_values(gpu);
  double scale = 0;
  for (double v : a)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (std::isnan(x) || std::isnan(y)) {
      INFO("element " << i << ": cpu " << x << ", cuda " << y);
      CHECK((std::isnan(x) && std::isnan(y)));
      continue;
    }
    if (std::isinf(x) || std::isinf(y) || exact) {
      INFO("element " << i << ": cpu " << x << ", cuda " << y);
      CHECK(x == y);
      continue;
    }
    const double err = std::fabs(x - y), bound = rtol * std::fabs(x) + atol * std::max(1.0, scale);
    INFO("element " << i << ": cpu " << x << ", cuda " << y);
    CHECK(err <= bound);
  }
}

// Runs f on the CPU inputs and on their CUDA copies; both must succeed and agree, or
// both fail with the same message.
void compare_op(const std::string& what, const std::vector<Tensor>& inputs,
                const std::function<Tensor(const std::vector<Tensor>&)>& f, Tol tol) {
  std::vector<Tensor> dev;
  for (const Tensor& t : inputs) dev.push_back(to_device(t, kCuda));
  Tensor want, got;
  std::string cpu_err, gpu_err;
  try {
    want = f(inputs);
  } catch (const Error& e) {
    cpu_err = e.what();
  }
  try {
    got = f(dev);
  } catch (const Error& e) {
    gpu_err = e.what();
  }
  INFO(what);
  // (an op reads its inputs and never writes them: cuFFT's C2R, for one, would overwrite
  // what it is given; the CPU's inputs stand for the values the device's started from)
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<double> a = host_values(inputs[i]), b = host_values(dev[i]);
    bool same = a.size() == b.size();
    for (size_t k = 0; same && k < a.size(); ++k) same = a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k]));
    INFO("input " << i << " unchanged");
    CHECK(same);
  }
  if (!cpu_err.empty() || !gpu_err.empty()) {
    CHECK(gpu_err == cpu_err);
    return;
  }
  expect_same(want, got, tol, what);
}

// Input layouts: contiguous, transposed (strided), and a broadcast (expanded) view.
struct InputView {
  const char* name;
  std::function<Tensor(const Tensor&)> view;
};
const InputView kLayouts[] = {
    {"contiguous", [](const Tensor& t) { return t; }},
    {"transposed", [](const Tensor& t) { return transpose(t, 0, 1); }},
    {"sliced", [](const Tensor& t) { return slice(t, 1, 1, t.size(1), 2); }},
};

// f applied to views of CUDA copies of the same base tensors as on the CPU.
void compare_layouts(const std::string& what, const std::vector<Tensor>& bases,
                     const std::function<Tensor(const std::vector<Tensor>&)>& f, Tol tol) {
  for (const InputView& l : kLayouts) {
    compare_op(what + " (" + l.name + ")", bases, [&](const std::vector<Tensor>& xs) {
      std::vector<Tensor> vs;
      for (const Tensor& x : xs) vs.push_back(l.view(x));
      return f(vs);
    }, tol);
  }
}

bool takes(DType dt, unsigned flags) {
  return !(dt == DType::Bool && (flags & kNoBool)) && !(is_floating(dt) && (flags & kIntOnly));
}

// ---- the "other" ops, each with its comparison -------------------------------------------

using Check = std::function<void()>;

// ---- decompositions and solves: cuSOLVER against LAPACK. Vectors are compared through
// what their sign choices do not change (products like Q R, V diag(1..n) V^T); the
// tolerance allows for the two libraries' different orders of operations.
Tensor flat(const Tensor& x) { return reshape(x, Shape{-1}); }
Tensor mT(const Tensor& x) { return transpose(x, -2, -1); }
// x diag(1..k) y for x (..., m, k).
Tensor sandwich(const Tensor& x, const Tensor& y) {
  const int64_t k = x.size(x.dim() - 1);
  return matmul(binary(Op::Mul, x, arange(1, double(k) + 1, 1, x.dtype(), x.device())), y);
}
// Far from singular: small entries plus 8 on the diagonal.
Tensor well(const Shape& s, DType dt) {
  const int64_t n = s[s.size() - 1];
  return cast(binary(Op::Add, sample(s, DType::Float64, 1), binary(Op::Mul, eye(n, n, DType::Float64), Scalar(8.0))), dt);
}
const Tol kDecomp = folds(1 << 16);

void linalg_checks(std::map<Op, Check>& m) {
  const DType kFloats[] = {DType::Float32, DType::Float64};
  m[Op::LinalgSolve] = [=] {
    for (DType dt : kFloats) {
      const std::string t(dtype_name(dt));
      compare_op("solve " + t, {well({4, 6, 6}, dt), sample({4, 6, 3}, dt)},
                 [](const auto& x) { return linalg_solve(x[0], x[1]); }, kDecomp);
      compare_op("solve one column, broadcast batch " + t, {well({6, 6}, dt), sample({2, 6, 1}, dt)},
                 [](const auto& x) { return linalg_solve(x[0], x[1]); }, kDecomp);
      compare_op("solve transposed A " + t, {well({5, 5}, dt), sample({5, 2}, dt)},
                 [](const auto& x) { return linalg_solve(mT(x[0]), x[1]); }, kDecomp);
      compare_op("solve singular " + t, {zeros({2, 3, 3}, dt), sample({2, 3, 1}, dt)},
                 [](const auto& x) { return linalg_solve(x[0], x[1]); }, kDecomp);
    }
  };
  m[Op::SolveTriangular] = [=] {
    for (DType dt : kFloats)
      for (bool upper : {false, true})
        for (bool unit : {false, true})
          compare_op(std::string("solve_triangular ") + std::string(dtype_name(dt)) + (upper ? " upper" : " lower") +
                         (unit ? " unit" : ""),
                     {well({3, 5, 5}, dt), sample({3, 5, 4}, dt)},
                     [=](const auto& x) { return solve_triangular(x[0], x[1], upper, unit); }, kDecomp);
  };
  m[Op::Cholesky] = [=] {
    for (DType dt : kFloats) {
      const std::string t(dtype_name(dt));
      compare_op("cholesky " + t, {sample({3, 6, 6}, dt, 1)}, [](const auto& x) {
        return cholesky(binary(Op::Add, matmul(x[0], mT(x[0])), eye(6, 6, x[0].dtype(), x[0].device())));
      }, kDecomp);
      compare_op("cholesky not positive-definite " + t, {sample({2, 4, 4}, dt)}, [](const auto& x) {
        return cholesky(binary(Op::Sub, x[0], binary(Op::Mul, eye(4, 4, x[0].dtype(), x[0].device()), Scalar(100.0))));
      }, kDecomp);
    }
  };
  m[Op::Qr] = [=] {
    for (DType dt : kFloats)
      for (Shape s : {Shape{2, 7, 4}, Shape{4, 4}, Shape{3, 6}})
        for (bool complete : {false, true})
          compare_op(std::string("qr ") + std::string(dtype_name(dt)) + (complete ? " complete " : " reduced ") +
                         std::to_string(s[s.size() - 2]) + "x" + std::to_string(s[s.size() - 1]),
                     {sample(s, dt)}, [=](const auto& x) {
                       auto [q, r] = qr(x[0], complete);
                       return cat({flat(matmul(q, r)), flat(unary(Op::Abs, r)), flat(matmul(q, mT(q)))}, 0);
                     }, kDecomp);
  };
  m[Op::Eigh] = [=] {
    for (DType dt : kFloats)
      compare_op(std::string("eigh ") + std::string(dtype_name(dt)), {sample({3, 6, 6}, dt)}, [](const auto& x) {
        auto [w, v] = eigh(binary(Op::Add, x[0], mT(x[0])));
        return cat({flat(w), flat(sandwich(v, mT(v)))}, 0);
      }, kDecomp);
  };
  m[Op::Svd] = [=] {
    for (DType dt : kFloats)
      for (Shape s : {Shape{2, 7, 4}, Shape{5, 5}, Shape{3, 4, 6}})
        for (bool full : {false, true})
          compare_op(std::string("svd ") + std::string(dtype_name(dt)) + (full ? " full " : " reduced ") +
                         std::to_string(s[s.size() - 2]) + "x" + std::to_string(s[s.size() - 1]),
                     {sample(s, dt)}, [=](const auto& x) {
                       SvdResult r = svd(x[0], full);
                       const int64_t k = r.s.size(r.s.dim() - 1);
                       Tensor u = narrow(r.u, -1, 0, k), vh = narrow(r.vh, -2, 0, k);
                       return cat({flat(r.s), flat(sandwich(u, vh)), flat(sandwich(u, mT(u))),
                                   flat(sandwich(mT(vh), vh)), flat(matmul(r.u, mT(r.u))), flat(matmul(mT(r.vh), r.vh))},
                                  0);
                     }, kDecomp);
  };
  m[Op::Slogdet] = [=] {
    for (DType dt : kFloats) {
      const std::string t(dtype_name(dt));
      compare_op("slogdet " + t, {sample({4, 5, 5}, dt)}, [](const auto& x) {
        auto [sign, logabs] = slogdet(x[0]);
        return cat({sign, logabs}, 0);
      }, kDecomp);
      compare_op("slogdet singular " + t, {zeros({2, 3, 3}, dt)}, [](const auto& x) {
        auto [sign, logabs] = slogdet(x[0]);
        return cat({sign, logabs}, 0);
      }, kExact);
    }
  };
}

std::map<Op, Check> other_checks() {
  std::map<Op, Check> m;
  auto each_dtype = [](const std::function<void(DType)>& f) {
    for (DType dt : kAll) f(dt);
  };
  m[Op::MaxDim] = [&] {
    each_dtype([](DType dt) {
      for (int dim : {0, 1, -1})
        compare_layouts(std::string("max_dim ") + std::string(dtype_name(dt)) + " dim " + std::to_string(dim),
                        {sample({6, 7, 5}, dt)}, [&](const auto& x) {
                          auto [v, i] = max_dim(x[0], dim, false);
                          return cat({cast(v, DType::Float64), cast(i, DType::Float64)}, 0);
                        }, kExact);
    });
    // Long rows (split into slices on the GPU), NaNs and ties.
    compare_op("max_dim long row", {sample({3, 300000}, DType::Float32)},
               [](const auto& x) { return max_dim(x[0], 1, false).second; }, kExact);
    compare_op("max_dim long column", {sample({300000, 3}, DType::Float64)},
               [](const auto& x) { return max_dim(x[0], 0, true).second; }, kExact);
    double v[] = {1, NAN, 3, 3, NAN, -1};
    compare_op("max_dim nan", {from_values(v, 6, Shape{6}, DType::Float32)},
               [](const auto& x) { return max_dim(x[0], 0, false).second; }, kExact);
  };
  m[Op::MinDim] = [&] {
    each_dtype([](DType dt) {
      compare_layouts(std::string("min_dim ") + std::string(dtype_name(dt)), {sample({6, 7, 5}, dt)},
                      [](const auto& x) { return min_dim(x[0], 1, true).second; }, kExact);
    });
  };
  m[Op::Argmax] = [&] {
    each_dtype([](DType dt) {
      compare_layouts(std::string("argmax ") + std::string(dtype_name(dt)), {sample({9, 8}, dt)},
                      [](const auto& x) { return argmax(x[0], std::nullopt, false); }, kExact);
    });
    compare_op("argmax flat, large", {sample({1 << 21}, DType::Float32)},
               [](const auto& x) { return argmax(x[0], std::nullopt, false); }, kExact);
  };
  m[Op::Argmin] = [&] {
    each_dtype([](DType dt) {
      compare_layouts(std::string("argmin ") + std::string(dtype_name(dt)), {sample({9, 8}, dt)},
                      [](const auto& x) { return argmin(x[0], 0, true); }, kExact);
    });
  };
  for (Op op : {Op::Softmax, Op::LogSoftmax}) {
    m[op] = [op] {
      for (DType dt : {DType::Float32, DType::Float64, DType::Int64})
        for (int dim : {0, 1, 2})
          compare_layouts(std::string(op_name(op)) + " " + std::string(dtype_name(dt)) + " dim " + std::to_string(dim),
                          {sample({5, 6, 7}, dt)}, [&](const auto& x) {
                            return op == Op::Softmax ? softmax(x[0], dim) : log_softmax(x[0], dim);
                          }, folds(8));
      if (op == Op::Softmax)
        for (DType dt : {DType::Float32, DType::Float64})
          compare_op("softmax backward " + std::string(dtype_name(dt)), {sample({6, 300}, dt), sample({6, 300}, dt)},
                     [](const auto& x) { return softmax_backward(x[0], softmax(x[1], 1)); }, folds(300));
      compare_op("softmax long rows", {sample({4, 5000}, DType::Float32)},
                 [op](const auto& x) { return op == Op::Softmax ? softmax(x[0], 1) : log_softmax(x[0], 1); },
                 folds(5000));
      // Rows kept in registers (a multiple of 16 bytes, at most 4,096 floats), the
      // longest such row, and the same rows one element off a 16-byte boundary.
      for (DType dt : {DType::Float32, DType::Float64})
        for (int64_t n : {4, 64, 1000, 2048, 4096}) {
          const std::string name = std::string(op_name(op)) + " dense rows " + std::string(dtype_name(dt)) + " " +
                                   std::to_string(n);
          compare_op(name, {sample({9, n}, dt)},
                     [op](const auto& x) { return op == Op::Softmax ? softmax(x[0], 1) : log_softmax(x[0], 1); },
                     folds(n));
          compare_op(name + " off a boundary", {sample({9 * n + 1}, dt)}, [op, n](const auto& x) {
            Tensor v = reshape(narrow(x[0], 0, 1, 9 * n), Shape{9, n});
            return op == Op::Softmax ? softmax(v, 1) : log_softmax(v, 1);
          }, folds(n));
          if (op != Op::Softmax) continue;
          compare_op(name + " backward", {sample({9, n}, dt), sample({9, n}, dt)},
                     [](const auto& x) { return softmax_backward(x[0], softmax(x[1], 1)); }, folds(n));
          compare_op(name + " backward off a boundary", {sample({9 * n + 1}, dt), sample({9, n}, dt)},
                     [n](const auto& x) {
                       return softmax_backward(reshape(narrow(x[0], 0, 1, 9 * n), Shape{9, n}), softmax(x[1], 1));
                     }, folds(n));
        }
    };
  }
  m[Op::Cumsum] = [&] {
    each_dtype([](DType dt) {
      for (int dim : {0, 1, 2})
        for (bool rev : {false, true})
          compare_layouts(std::string("cumsum ") + std::string(dtype_name(dt)) + " dim " + std::to_string(dim) +
                              (rev ? " reversed" : ""),
                          {sample({5, 6, 7}, dt)}, [&](const auto& x) { return cumsum(x[0], dim, rev); }, folds(7));
    });
  };
  m[Op::Cumprod] = [&] {
    each_dtype([](DType dt) {
      for (int dim : {0, 1, 2})
        compare_layouts(std::string("cumprod ") + std::string(dtype_name(dt)) + " dim " + std::to_string(dim),
                        {sample({5, 6, 7}, dt, 0.4)}, [&](const auto& x) { return cumprod(x[0], dim, dim == 1); },
                        folds(7));
    });
  };
  // (the CPU's radix and Bluestein transforms against the device's direct sums, up to 16,
  // and cuFFT past it; the lengths make more plans than gpu/fft.cu's cache keeps)
  m[Op::FftC2c] = [&] {
    for (DType dt : {DType::Float32, DType::Float64})
      for (int64_t n : {1, 5, 8, 16, 17, 64, 100, 1024})
        for (bool inverse : {false, true})
          compare_op("fft_c2c " + std::string(dtype_name(dt)) + " n " + std::to_string(n) + (inverse ? " inverse" : ""),
                     {sample({3, n, 2}, dt)}, [&](const auto& x) { return fft_c2c(x[0], inverse); }, folds(double(n) * 4));
    // (views that start between two complex values: cuFFT reads from an aligned copy)
    for (DType dt : {DType::Float32, DType::Float64})
      for (int64_t n : {5, 17, 1001}) {
        const std::string name = "fft_c2c of a view one value in, " + std::string(dtype_name(dt)) + " n " + std::to_string(n);
        compare_op(name, {sample({6 * n + 1}, dt)},
                   [&](const auto& x) { return fft_c2c(view(narrow(x[0], 0, 1, 6 * n), {3, n, 2}), false); },
                   folds(double(n) * 4));
        compare_op("rfft of rows after the first, " + std::string(dtype_name(dt)) + " n " + std::to_string(n),
                   {sample({4, n}, dt)}, [&](const auto& x) { return fft_r2c(narrow(x[0], 0, 1, 3), 1); },
                   folds(double(n) * 4));
      }
  };
  // (the CPU's half-length transform and its odd-length path against the device's)
  m[Op::FftR2c] = [&] {
    for (DType dt : {DType::Float32, DType::Float64})
      for (int64_t n : {1, 2, 5, 8, 16, 17, 64, 100, 1001, 1024})
        for (int64_t weight : {1, 2})
          compare_op("fft_r2c " + std::string(dtype_name(dt)) + " n " + std::to_string(n) + " weight " +
                         std::to_string(weight),
                     {sample({3, n}, dt)}, [&](const auto& x) { return fft_r2c(x[0], weight); }, folds(double(n) * 4));
  };
  m[Op::FftC2r] = [&] {
    for (DType dt : {DType::Float32, DType::Float64})
      for (int64_t n : {1, 2, 5, 8, 16, 17, 64, 100, 1001, 1024})
        for (int64_t weight : {1, 2})
          compare_op("fft_c2r " + std::string(dtype_name(dt)) + " n " + std::to_string(n) + " weight " +
                         std::to_string(weight),
                     {sample({3, n / 2 + 1, 2}, dt)}, [&](const auto& x) { return fft_c2r(x[0], n, weight); },
                     folds(double(n) * 4));
  };
  m[Op::Where] = [&] {
    each_dtype([](DType dt) {
      compare_op(std::string("where ") + std::string(dtype_name(dt)),
                 {sample({4, 1, 6}, DType::Bool), sample({5, 6}, dt), sample({4, 5, 1}, dt)},
                 [](const auto& x) { return where(x[0], x[1], x[2]); }, kExact);
    });
  };
  m[Op::Clamp] = [&] {
    each_dtype([](DType dt) {
      compare_layouts(std::string("clamp ") + std::string(dtype_name(dt)), {sample({6, 5}, dt)},
                      [](const auto& x) { return clamp(x[0], -2.5, 4.0); }, kExact);
      compare_op(std::string("clamp high only ") + std::string(dtype_name(dt)), {sample({6, 5}, dt)},
                 [](const auto& x) { return clamp(x[0], std::nullopt, 1e300); }, kExact);
    });
  };
  m[Op::MaskedFill] = [&] {
    each_dtype([](DType dt) {
      compare_op(std::string("masked_fill ") + std::string(dtype_name(dt)),
                 {sample({3, 4}, dt), sample({4}, DType::Bool)},
                 [](const auto& x) { return masked_fill(x[0], x[1], Scalar(7.0)); }, kExact);
    });
  };
  m[Op::MatMul] = [&] {
    struct Case { Shape a, b; };
    const Case cases[] = {{{5}, {5}}, {{3, 5}, {5}}, {{5}, {5, 4}}, {{3, 5}, {5, 4}}, {{2, 3, 5}, {5, 4}},
                          {{2, 1, 3, 5}, {4, 5, 6}}, {{1, 3, 5}, {2, 5, 4}}, {{64, 130}, {130, 70}}};
    for (DType dt : {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::UInt8})
      for (const Case& c : cases) {
        compare_op(std::string("matmul ") + std::string(dtype_name(dt)), {sample(c.a, dt), sample(c.b, dt)},
                   [](const auto& x) { return matmul(x[0], x[1]); }, folds(130));
      }
    // Transposed and non-BLAS layouts, broadcast batches.
    compare_op("matmul transposed", {sample({5, 3}, DType::Float32), sample({4, 5}, DType::Float32)},
               [](const auto& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); },
               folds(5));
    compare_op("matmul strided batch", {sample({3, 4, 6}, DType::Float64), sample({6, 3, 2}, DType::Float64)},
               [](const auto& x) { return matmul(x[0], permute(x[1], {1, 0, 2})); },
               folds(6));
    compare_op("matmul sliced", {sample({4, 10}, DType::Float32), sample({5, 3}, DType::Float32)},
               [](const auto& x) { return matmul(slice(x[0], 1, 0, 10, 2), x[1]); }, folds(5));
    compare_op("matmul promotes", {sample({2, 3}, DType::Int64), sample({3, 2}, DType::Float32)},
               [](const auto& x) { return matmul(x[0], x[1]); }, folds(3));
  };
  m[Op::Cast] = [&] {
    for (DType from : kAll)
      for (DType to : kAll)
        compare_layouts(std::string("cast ") + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)),
                        {sample({5, 6}, from, 1e3)}, [to](const auto& x) { return cast(x[0], to, true); },
                        kExact);
    double v[] = {NAN, INFINITY, -INFINITY, 1e30, -1e30, 2.5, -2.5};
    for (DType to : kAll)
      compare_op("cast special values", {from_values(v, 7, Shape{7}, DType::Float64)},
                 [to](const auto& x) { return cast(x[0], to); }, kExact);
  };
  m[Op::Contiguous] = [&] {
    each_dtype([](DType dt) {
      compare_layouts(std::string("contiguous ") + std::string(dtype_name(dt)), {sample({7, 9}, dt)},
                      [](const auto& x) { return contiguous(x[0]); }, kExact);
    });
  };
  m[Op::View] = [] {
    compare_op("view", {sample({4, 6}, DType::Float32)}, [](const auto& x) { return view(x[0], Shape{3, 8}); },
               kExact);
  };
  m[Op::Transpose] = [] {
    compare_op("transpose", {sample({4, 6, 2}, DType::Int32)},
               [](const auto& x) { return contiguous(transpose(x[0], 0, 2)); }, kExact);
  };
  m[Op::Permute] = [] {
    compare_op("permute", {sample({4, 6, 2}, DType::Float64)},
               [](const auto& x) { return contiguous(permute(x[0], {2, 0, 1})); }, kExact);
  };
  m[Op::Narrow] = [] {
    compare_op("narrow", {sample({4, 6}, DType::UInt8)},
               [](const auto& x) { return binary(Op::Add, narrow(x[0], 1, 2, 3), Scalar::integer(1)); },
               kExact);
  };
  m[Op::Slice] = [] {
    compare_op("slice", {sample({8, 6}, DType::Float32)},
               [](const auto& x) { return unary(Op::Exp, slice(x[0], 0, 1, 8, 3)); }, folds());
  };
  m[Op::Select] = [] {
    compare_op("select", {sample({8, 6}, DType::Int64)},
               [](const auto& x) { return clone(select(x[0], 1, 4)); }, kExact);
  };
  m[Op::Expand] = [] {
    compare_op("expand", {sample({1, 6}, DType::Bool)},
               [](const auto& x) { return contiguous(expand(x[0], Shape{5, 6})); }, kExact);
  };
  m[Op::Squeeze] = [] {
    compare_op("squeeze", {sample({1, 6, 1}, DType::Float64)},
               [](const auto& x) { return clone(squeeze(x[0], std::nullopt)); }, kExact);
  };
  m[Op::Unsqueeze] = [] {
    compare_op("unsqueeze", {sample({6, 2}, DType::Float64)},
               [](const auto& x) { return clone(unsqueeze(x[0], 1)); }, kExact);
  };
  m[Op::Cat] = [] {
    compare_op("cat", {sample({2, 3}, DType::Float32), sample({4, 3}, DType::Int32), sample({0}, DType::Float32)},
               [](const auto& x) { return cat({x[0], x[1], x[2]}, 0); }, kExact);
    compare_op("cat dim 1, strided", {sample({3, 2}, DType::Int64), sample({4, 3}, DType::Int64)},
               [](const auto& x) { return cat({x[0], transpose(x[1], 0, 1)}, 1); }, kExact);
  };
  m[Op::Stack] = [] {
    compare_op("stack", {sample({2, 3}, DType::UInt8), sample({2, 3}, DType::UInt8)},
               [](const auto& x) { return stack({x[0], x[1]}, 1); }, kExact);
  };
  m[Op::IndexSelect] = [] {
    double iv[] = {2, 0, 2, 1};
    for (DType idt : {DType::Int64, DType::Int32})
      for (DType dt : kAll)
        compare_op("index_select", {sample({3, 5}, dt), from_values(iv, 4, Shape{4}, idt)},
                   [](const auto& x) { return index_select(x[0], 0, x[1]); }, kExact);
    double bad[] = {0, 3};
    compare_op("index_select bad index", {sample({3, 5}, DType::Float32), from_values(bad, 2, Shape{2}, DType::Int64)},
               [](const auto& x) { return index_select(x[0], 0, x[1]); }, kExact);
  };
  m[Op::Gather] = [] {
    double iv[] = {2, 0, 1, 1, 0, 2};
    for (DType dt : kAll)
      compare_op("gather", {sample({2, 3}, dt), from_values(iv, 6, Shape{2, 3}, DType::Int64)},
                 [](const auto& x) { return gather(x[0], 1, x[1]); }, kExact);
    double bad[] = {0, 1, -1, 0, 0, 0};
    compare_op("gather bad index", {sample({2, 3}, DType::Float32), from_values(bad, 6, Shape{2, 3}, DType::Int32)},
               [](const auto& x) { return gather(x[0], 1, x[1]); }, kExact);
  };
  m[Op::ScatterAdd] = [] {
    double iv[] = {2, 0, 1, 1, 0, 2, 2, 2};
    for (DType dt : kAll)
      compare_op(std::string("scatter_add ") + std::string(dtype_name(dt)),
                 {sample({2, 3}, dt), from_values(iv, 8, Shape{2, 4}, DType::Int64), sample({2, 4}, dt)},
                 [](const auto& x) { return scatter_add(x[0], 1, x[1], x[2]); }, folds(4));
    double bad[] = {0, 5};
    compare_op("scatter_add bad index",
               {sample({3}, DType::Float32), from_values(bad, 2, Shape{2}, DType::Int64), sample({2}, DType::Float32)},
               [](const auto& x) { return scatter_add(x[0], 0, x[1], x[2]); }, kExact);
  };
  m[Op::Copy] = [] {
    // Host -> device and back, into strided targets, with conversion and broadcast, and
    // large enough for the pinned staging path (several chunks).
    for (const Shape& s : {Shape{3, 4}, Shape{1500, 1100}}) {
      Tensor src = sample(s, DType::Float64);
      Tensor dst = zeros(Shape{s[1], s[0]}, DType::Float32, kCuda);
      Tensor dt = transpose(dst, 0, 1);
      copy_(dt, src);
      expect_same(cast(src, DType::Float32), contiguous(dt), kExact, "copy_ into a strided view");
      Tensor back = zeros(s, DType::Float64);
      copy_(back, dt);
      REQUIRE(host_values(back) == host_values(cast(cast(src, DType::Float32), DType::Float64)));
    }
    Tensor row = sample({5}, DType::Int32);
    Tensor wide = zeros(Shape{3, 5}, DType::Int64, kCuda);
    copy_(wide, row);
    expect_same(contiguous(expand(cast(row, DType::Int64), Shape{3, 5})), wide, kExact, "broadcast copy_");
    CHECK(full(Shape{}, Scalar(2.5), DType::Float64, kCuda).item() == 2.5);
  };
  m[Op::Conv2d] = [] {
    struct Case { Shape x, w; Conv2dOpts o; };
    Conv2dOpts plain, strided, grouped;
    strided.stride[0] = 2;
    strided.stride[1] = 1;
    strided.padding[0] = 1;
    strided.padding[1] = 2;
    strided.dilation[1] = 2;
    grouped.groups = 2;
    grouped.padding[0] = grouped.padding[1] = 1;
    const Case cases[] = {{{2, 3, 9, 8}, {4, 3, 3, 3}, plain}, {{2, 3, 9, 8}, {5, 3, 3, 2}, strided},
                          {{3, 4, 7, 7}, {6, 2, 3, 3}, grouped}, {{1, 2, 5, 5}, {3, 2, 1, 1}, plain}};
    for (DType dt : {DType::Float32, DType::Float64})
      for (const Case& c : cases) {
        compare_op("conv2d", {sample(c.x, dt), sample(c.w, dt), sample({c.w[0]}, dt)},
                   [&](const auto& x) { return conv2d(x[0], x[1], x[2], c.o); }, folds(64));
      }
  };
  m[Op::Conv2dInputGrad] = [] {
    Conv2dOpts o;
    o.stride[0] = o.stride[1] = 2;
    o.padding[0] = o.padding[1] = 1;
    for (DType dt : {DType::Float32, DType::Float64})
      compare_op("conv2d_input_grad", {sample({2, 4, 5, 5}, dt), sample({4, 3, 3, 3}, dt)},
                 [&](const auto& x) { return conv2d_input_grad(x[0], x[1], Shape{2, 3, 9, 9}, o); }, folds(64));
  };
  m[Op::Conv2dWeightGrad] = [] {
    Conv2dOpts o;
    o.groups = 2;
    for (DType dt : {DType::Float32, DType::Float64})
      compare_op("conv2d_weight_grad", {sample({3, 4, 6, 6}, dt), sample({3, 6, 4, 4}, dt)},
                 [&](const auto& x) { return conv2d_weight_grad(x[0], x[1], Shape{6, 2, 3, 3}, o); },
                 folds(64));
  };
  m[Op::MaxPool2d] = [] {
    Pool2dOpts o;
    o.kernel[0] = o.kernel[1] = 3;
    o.stride[0] = o.stride[1] = 2;
    o.padding[0] = o.padding[1] = 1;
    o.ceil_mode = true;
    for (DType dt : {DType::Float32, DType::Float64}) {
      compare_op("max_pool2d values", {sample({2, 3, 9, 8}, dt)},
                 [&](const auto& x) { return max_pool2d(x[0], o).first; }, kExact);
      compare_op("max_pool2d indices", {sample({2, 3, 9, 8}, dt)},
                 [&](const auto& x) { return max_pool2d(x[0], o).second; }, kExact);
    }
  };
  m[Op::MaxPool2dBackward] = [] {
    Pool2dOpts o;
    o.kernel[0] = o.kernel[1] = 3;
    o.stride[0] = o.stride[1] = 1;
    Tensor x = sample({2, 3, 6, 6}, DType::Float64);
    Tensor idx = max_pool2d(x, o).second;
    compare_op("max_pool2d_backward", {sample({2, 3, 4, 4}, DType::Float64), idx},
               [](const auto& v) { return max_pool2d_backward(v[0], v[1], Shape{2, 3, 6, 6}); },
               folds(9));
  };
  m[Op::AvgPool2d] = [] {
    for (bool include : {true, false}) {
      Pool2dOpts o;
      o.kernel[0] = 3;
      o.kernel[1] = 2;
      o.stride[0] = o.stride[1] = 2;
      o.padding[0] = o.padding[1] = 1;
      o.ceil_mode = true;
      o.count_include_pad = include;
      compare_op("avg_pool2d", {sample({2, 3, 9, 8}, DType::Float32)},
                 [&](const auto& x) { return avg_pool2d(x[0], o); }, folds(6));
    }
  };
  m[Op::AvgPool2dBackward] = [] {
    Pool2dOpts o;
    o.kernel[0] = o.kernel[1] = 3;
    o.stride[0] = o.stride[1] = 2;
    o.padding[0] = o.padding[1] = 1;
    o.ceil_mode = true;
    Tensor y = avg_pool2d(zeros(Shape{2, 3, 9, 8}, DType::Float64), o);
    compare_op("avg_pool2d_backward", {sample(y.shape(), DType::Float64)},
               [&](const auto& x) { return avg_pool2d_backward(x[0], Shape{2, 3, 9, 8}, o); },
               folds(9));
  };
  m[Op::Dropout] = [] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor x = sample({40, 50}, dt);
      manual_seed(11);
      Tensor want = dropout(x, 0.3).first;
      manual_seed(11);
      Tensor got = dropout(to_device(x, kCuda), 0.3).first;
      expect_same(want, got, folds(), "dropout");
    }
  };
  m[Op::BatchNorm] = [] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      compare_op("batch_norm training", {sample({8, 3, 5, 4}, dt), sample({3}, dt), sample({3}, dt)},
                 [](const auto& x) {
                   BatchNormResult r = batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true, 0.1, 1e-5);
                   return cat({view(r.y, Shape{-1}), r.mean, r.invstd}, 0);
                 }, folds(160));
    }
  };
  m[Op::LayerNorm] = [] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      compare_op("layer_norm", {sample({6, 5, 40}, dt), sample({40}, dt), sample({40}, dt)},
                 [](const auto& x) {
                   LayerNormResult r = layer_norm(x[0], 1, x[1], x[2], 1e-5);
                   return cat({view(r.y, Shape{-1}), view(r.mean, Shape{-1}), view(r.invstd, Shape{-1})}, 0);
                 }, folds(40));
    }
  };
  m[Op::LstmGates] = [] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      compare_op("lstm_gates", {sample({3, 2, 28}, dt), sample({3, 2, 7}, dt)}, [](const auto& x) {
        auto [h, c2] = lstm_gates(x[0], x[1]);
        return cat({view(h, Shape{-1}), view(c2, Shape{-1})}, 0);
      }, folds(8));
      compare_op("lstm_gates backward", {sample({5, 36}, dt), sample({5, 9}, dt), sample({5, 9}, dt), sample({5, 9}, dt)},
                 [](const auto& x) {
                   auto [dg, dc] = lstm_gates_backward(x[0], x[1], x[2], x[3]);
                   auto [dg1, dc1] = lstm_gates_backward(x[0], x[1], x[2], Tensor());   // no gradient for c'
                   return cat({view(dg, Shape{-1}), view(dc, Shape{-1}), view(dg1, Shape{-1}), view(dc1, Shape{-1})}, 0);
                 }, folds(16));
    }
  };
  m[Op::Embedding] = [] {
    double iv[] = {3, 0, 3, 1, 2, 2};
    compare_op("embedding", {sample({4, 5}, DType::Float32), from_values(iv, 6, Shape{2, 3}, DType::Int64)},
               [](const auto& x) { return embedding(x[0], x[1], std::nullopt); }, kExact);
  };
  m[Op::CrossEntropy] = [] {
    double tv[] = {2, 0, 9, 4, 9, 1};
    for (DType dt : {DType::Float32, DType::Float64})
      for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
        compare_op("cross_entropy", {sample({6, 5}, dt, 10), from_values(tv, 6, Shape{6}, DType::Int64)},
                   [r](const auto& x) { return cross_entropy(x[0], x[1], r, int64_t(9)); }, folds(8));
    compare_op("cross_entropy wide", {sample({3, 1000}, DType::Float32), from_values(tv, 3, Shape{3}, DType::Int64)},
               [](const auto& x) { return cross_entropy(x[0], x[1], Reduction::None, std::nullopt); },
               folds(1000));
    double bad[] = {0, 7};
    compare_op("cross_entropy bad target", {sample({2, 5}, DType::Float32), from_values(bad, 2, Shape{2}, DType::Int64)},
               [](const auto& x) { return cross_entropy(x[0], x[1], Reduction::None, std::nullopt); },
               folds());
  };
  m[Op::Sort] = [&] {
    each_dtype([](DType dt) {
      if (dt == DType::Bool) return;
      for (int dim : {0, 1, 2})
        for (bool desc : {false, true})
          compare_layouts(std::string("sort ") + std::string(dtype_name(dt)) + " dim " + std::to_string(dim) +
                              (desc ? " descending" : ""),
                          {sample({5, 6, 7}, dt)}, [&](const auto& x) {
                            auto [v, i] = sort(x[0], dim, desc);
                            return cat({flatten(cast(v, DType::Float64)), flatten(cast(i, DType::Float64))}, 0);
                          }, kExact);
    });
    // ties keep their order, NaN goes last (first descending), -0.0 equals 0.0; a long row
    const double special[] = {2, NAN, -0.0, 1, 0.0, NAN, 2, -INFINITY, 1, INFINITY};
    for (bool desc : {false, true})
      compare_op(std::string("sort ties and NaN") + (desc ? " descending" : ""),
                 {from_values(special, 10, Shape{10}, DType::Float32)},
                 [&](const auto& x) { return cast(sort(x[0], 0, desc).second, DType::Float64); }, kExact);
    compare_op("sort long rows", {sample({3, 5000}, DType::Float32)},
               [](const auto& x) { return cast(sort(x[0], 1, false).second, DType::Float64); }, kExact);
  };
  m[Op::Nonzero] = [&] {
    each_dtype([](DType dt) {
      compare_op(std::string("nonzero ") + std::string(dtype_name(dt)), {sample({4, 5, 6}, dt, 0.5)},
                 [](const auto& x) { return nonzero(x[0]); }, kExact);
    });
    compare_op("nonzero large", {sample({300001}, DType::Float32, 0.5)},
               [](const auto& x) { return nonzero(compare(Op::Gt, x[0], Scalar(0.3))); }, kExact);
    compare_op("nonzero none", {zeros({7, 3}, DType::Float32)}, [](const auto& x) { return nonzero(x[0]); }, kExact);
  };
  m[Op::Searchsorted] = [&] {
    for (DType dt : {DType::Float32, DType::Float64, DType::Int64})
      for (bool right : {false, true}) {
        const std::string name = std::string("searchsorted ") + std::string(dtype_name(dt)) + (right ? " right" : "");
        compare_op(name, {sample({4, 9}, dt), sample({4, 5}, dt)}, [&](const auto& x) {
          return searchsorted(sort(x[0], 1, false).first, x[1], right);
        }, kExact);
        compare_op(name + " 1-D sequence", {sample({9}, dt), sample({3, 5}, dt)}, [&](const auto& x) {
          return searchsorted(sort(x[0], 0, false).first, x[1], right);
        }, kExact);
      }
  };
  linalg_checks(m);
  return m;
}

}  // namespace

TEST_CASE("every unary, binary and compare op matches the CPU", "[cuda]") {
  for (int k = 0; k < kNumOps; ++k) {
    const Op op = Op(k);
    const OpInfo& info = op_info(op);
    if (info.family == OpFamily::Unary) {
      for (DType dt : kAll) {
        if (is_floating(dt) && (info.flags & kIntOnly)) continue;
        compare_layouts(std::string(info.lua_name) + " " + std::string(dtype_name(dt)), {sample({6, 5}, dt)},
                        [op](const auto& x) { return unary(op, x[0]); }, folds(2));
      }
    } else if (info.family == OpFamily::Binary || info.family == OpFamily::Compare) {
      const bool cmp = info.family == OpFamily::Compare;
      for (DType dt : kAll) {
        if (!takes(dt, info.flags)) continue;
        const std::string name = std::string(info.lua_name) + " " + std::string(dtype_name(dt));
        // Divisors without zeros, so that integer remainders and quotients are defined.
        const bool divides = op == Op::Mod || op == Op::Fmod || op == Op::Floor_divide;
        Tensor b = divides ? binary(Op::Add, unary(Op::Abs, sample({6, 5}, dt)), Scalar::integer(1))
                           : sample({6, 5}, dt);
        if (op == Op::Pow && !is_floating(dt)) b = clamp(b, 0.0, 6.0);
        auto f = [op, cmp](const std::vector<Tensor>& x) {
          return cmp ? compare(op, x[0], x[1]) : binary(op, x[0], x[1]);
        };
        compare_layouts(name, {sample({6, 5}, dt), b}, f, folds(2));
        compare_op(name + " broadcast", {sample({4, 1, 5}, dt), sample({3, 1}, dt)}, f, folds(2));
        for (double s : {2.0, -3.0, 0.5}) {
          if (divides && s == 0) continue;
          for (bool first : {false, true})
            compare_op(name + " scalar " + std::to_string(s) + (first ? " first" : ""), {sample({6, 5}, dt)},
                       [=](const auto& x) {
                         Scalar sc = Scalar::from_lua(s);
                         return cmp ? compare(op, x[0], sc, first) : binary(op, x[0], sc, first);
                       },
                       folds(2));
        }
      }
    }
  }
  // In place, and mixing devices (an error naming both).
  Tensor a = to_device(sample({3, 4}, DType::Float32), kCuda);
  Tensor want = binary(Op::Add, to_device(a, Device{}), Scalar(1.0));
  binary_(Op::Add, a, Scalar(1.0));
  expect_same(want, a, folds(), "add_ in place");
  try {
    binary(Op::Add, sample({2}, DType::Float32), a);
    FAIL("mixing devices did not fail");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "add: expected tensors on the same device, got cpu and cuda:0");
  }
}

TEST_CASE("every reduction matches the CPU", "[cuda]") {
  const std::vector<std::vector<int>> dim_sets = {{}, {0}, {1}, {2}, {0, 2}, {-1}};
  for (int k = 0; k < kNumOps; ++k) {
    const Op op = Op(k);
    const OpInfo& info = op_info(op);
    if (info.family != OpFamily::Reduce) continue;
    std::vector<ReduceOpts> variants(1);
    if (op == Op::Norm)
      for (double p : {1.0, 0.0, 3.0, double(INFINITY), -double(INFINITY)}) variants.push_back(ReduceOpts{1, p});
    if (op == Op::Var || op == Op::Std) variants.push_back(ReduceOpts{0, 2});
    for (DType dt : kAll)
      for (const ReduceOpts& o : variants)
        for (const auto& dims : dim_sets)
          for (bool keep : {false, true}) {
            std::string name = std::string(info.lua_name) + " " + std::string(dtype_name(dt)) + " dims " +
                               std::to_string(dims.size()) + (keep ? " keepdim" : "");
            compare_op(name, {sample({5, 7, 6}, dt)},
                       [&](const auto& x) { return reduce(op, x[0], dims, keep, o); }, folds(256));
            compare_op(name + " (permuted)", {sample({5, 7, 6}, dt)},
                       [&](const auto& x) { return reduce(op, permute(x[0], {2, 0, 1}), dims, keep, o); },
                       folds(256));
          }
    // Long folds that the GPU splits into slices, rows and columns, and an empty one.
    for (DType dt : {DType::Float32, DType::Int64}) {
      const std::string name = std::string(info.lua_name) + " " + std::string(dtype_name(dt));
      compare_op(name + " full, large", {sample({1 << 20}, dt, 0.5)},
                 [op](const auto& x) { return reduce(op, x[0], {}, false); }, folds(1 << 20));
      compare_op(name + " columns, large", {sample({100000, 3}, dt, 0.5)},
                 [op](const auto& x) { return reduce(op, x[0], {0}, false); }, folds(100000));
      compare_op(name + " rows", {sample({3, 70000}, dt, 0.5)},
                 [op](const auto& x) { return reduce(op, x[0], {1}, true); }, folds(70000));
      compare_op(name + " empty", {sample({0, 4}, dt)},
                 [op](const auto& x) { return reduce(op, x[0], {0}, false); }, folds());
      compare_op(name + " a view off a 16-byte boundary", {sample({1 << 16}, dt, 0.5)},
                 [op](const auto& x) { return reduce(op, narrow(x[0], 0, 1, (1 << 16) - 4), {}, false); },
                 folds(1 << 16));
    }
    // Dense rows, read 16 bytes a load: rows of 1,001 elements start at every offset from
    // a 16-byte boundary, so each has its own head and tail.
    for (DType dt : kAll)
      compare_op(std::string(info.lua_name) + " " + std::string(dtype_name(dt)) + " rows of every alignment",
                 {sample({17, 1001}, dt, 0.5)}, [op](const auto& x) { return reduce(op, x[0], {1}, false); },
                 folds(1001));
    // Columns, read 16 bytes (several outputs) a load where the kept inner dim allows:
    // over the outer dim, the middle one, both, a long one cut into slices, and a view off
    // a 16-byte boundary (the general kernel).
    for (DType dt : kAll) {
      const std::string name = std::string(info.lua_name) + " " + std::string(dtype_name(dt)) + " columns";
      for (const std::vector<int>& dims : std::vector<std::vector<int>>{{0}, {1}, {0, 1}})
        compare_op(name + " dims " + std::to_string(dims.size()) + std::to_string(dims[0]),
                   {sample({37, 8, 16}, dt, 0.5)}, [op, dims](const auto& x) { return reduce(op, x[0], dims, false); },
                   folds(37 * 8));
      compare_op(name + " long", {sample({20000, 8}, dt, 0.5)},
                 [op](const auto& x) { return reduce(op, x[0], {0}, true); }, folds(20000));
      compare_op(name + " off a boundary", {sample({300 * 64 + 1}, dt, 0.5)}, [op](const auto& x) {
        return reduce(op, reshape(narrow(x[0], 0, 1, 300 * 64), Shape{300, 64}), {0}, false);
      }, folds(300));
    }
  }
}

TEST_CASE("every other op of the table matches the CPU", "[cuda]") {
  const std::map<Op, Check> checks = other_checks();
  std::string missing;
  for (int k = 0; k < kNumOps; ++k) {
    const OpInfo& info = op_info(Op(k));
    if (info.family != OpFamily::Other) continue;
    auto it = checks.find(Op(k));
    if (it == checks.end()) {
      missing += std::string(" ") + info.lua_name;
      continue;
    }
    INFO("op " << info.lua_name);
    it->second();
  }
  INFO("ops without a CUDA comparison:" << missing);
  CHECK(missing.empty());
}

TEST_CASE("random tensors are the CPU's stream", "[cuda]") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    manual_seed(5);
    Tensor want = rand(Shape{1000, 3}, dt);
    manual_seed(5);
    expect_same(want, rand(Shape{1000, 3}, dt, kCuda), kExact, "rand");
    manual_seed(6);
    want = randn(Shape{999}, dt);
    manual_seed(6);
    expect_same(want, randn(Shape{999}, dt, kCuda), folds(), "randn");
  }
  for (DType dt : kAll) {
    if (dt == DType::Bool) continue;
    manual_seed(7);
    Tensor want = randint(-3, 100, Shape{501}, dt);
    manual_seed(7);
    expect_same(want, randint(-3, 100, Shape{501}, dt, kCuda), kExact, "randint");
  }
  manual_seed(8);
  Tensor want = bernoulli(Shape{77}, 0.25, DType::Bool);
  manual_seed(8);
  expect_same(want, bernoulli(Shape{77}, 0.25, DType::Bool, kCuda), kExact, "bernoulli");
  for (DType dt : {DType::Float32, DType::Float64}) {   // dropout's one-pass kernel
    const Tensor x = randn(Shape{301, 7}, dt);
    manual_seed(9);
    auto [y, mask] = dropout(x, 0.3);
    manual_seed(9);
    auto [yc, maskc] = dropout(to_device(x, kCuda), 0.3);
    expect_same(mask, maskc, kExact, "dropout mask");
    expect_same(y, yc, kExact, "dropout");
  }
}

TEST_CASE("fused optimizer updates match the CPU", "[cuda]") {
  // Every switch of each rule, with a transposed gradient (made contiguous on the way).
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int variant = 0; variant < 6; ++variant) {
      manual_seed(uint64_t(40 + variant));
      Tensor p = randn(Shape{37, 23}, dt), g = transpose(randn(Shape{23, 37}, dt), 0, 1);
      Tensor a = rand(Shape{37, 23}, dt), b = rand(Shape{37, 23}, dt), c = rand(Shape{37, 23}, dt);
      Tensor dp = to_device(p, kCuda), dg = to_device(g, kCuda);
      Tensor da = to_device(a, kCuda), db = to_device(b, kCuda), dc = to_device(c, kCuda);
      std::string what = "variant " + std::to_string(variant) + " " + std::string(dtype_name(dt));
      if (variant < 3) {
        fn::SgdStep s{0.1, variant == 0 ? 0.0 : 0.9, variant == 2 ? 0.0 : 0.25, 0.01, variant == 2, variant == 1};
        sgd_step_(p, g, a, s);
        sgd_step_(dp, dg, da, s);
      } else {
        fn::AdamStep s{1e-2, 0.9, 0.99, 1e-8, variant == 3 ? 0.0 : 0.05, 1 - std::pow(0.9, 3),
                       std::sqrt(1 - std::pow(0.99, 3)), variant == 5};
        Tensor vmax = variant == 4 ? c : Tensor(), dvmax = variant == 4 ? dc : Tensor();
        adam_step_(p, g, a, b, vmax, s);
        adam_step_(dp, dg, da, db, dvmax, s);
        expect_same(b, db, folds(), what + " v");
      }
      expect_same(p, dp, folds(), what + " p");
      expect_same(a, da, folds(), what + " state");
    }
  }
}

TEST_CASE("device memory: caching, statistics, clear out-of-memory errors", "[cuda]") {
  // The plugin's caching allocator and its errors; the stand-in of ctest's "stand-in"
  // run (tests/gpu/fake_plugin.cpp) has none.
  if (cuda::device_name(0).find("stand-in") != std::string::npos) return;
  cuda::synchronize();
  const CudaMemoryStats before = cuda::memory_stats(0);
  {
    Tensor t = empty(Shape{1 << 20}, DType::Float32, kCuda);
    CHECK(cuda::memory_stats(0).in_use >= before.in_use + (int64_t(4) << 20));
  }
  const CudaMemoryStats after = cuda::memory_stats(0);
  CHECK(after.in_use == before.in_use);
  CHECK(after.cached >= before.cached);
  try {
    Tensor huge = empty(Shape{int64_t(1) << 48}, DType::Float32, kCuda);
    FAIL("a petabyte allocation succeeded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Memory);
    CHECK_THAT(e.what(), Catch::Contains("CUDA out of memory") && Catch::Contains("asked for") &&
                             Catch::Contains("in use"));
  }
  // The device is still usable after the failure.
  Tensor sum2 = reduce(Op::Sum, full(Shape{2}, Scalar(3.0), DType::Float32, kCuda), {}, false);
  CHECK(to_device(sum2, Device{}).item() == 6);
  cuda::empty_cache();
  CHECK(cuda::memory_stats(0).cached == 0);
}

TEST_CASE("dl.compile's fused groups on CUDA equal the device's one-op kernels", "[cuda]") {
  // A group lowered to one fused program (gpu/fused.cu), and one too long for a program
  // (run a step at a time), over every kind of operand the executor reads; with short ops
  // only, and with two long ones (the device's other interpreter: Note [Long ops in fused
  // programs] in tensor/fused.h).
  using compile::Kind;
  using compile::Operand;
  using compile::Step;
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int length : {7, 60, -7}) {
      const bool with_long = length < 0;
      length = std::abs(length);
      const Shape s{300, 257};
      const Tensor outside[] = {to_device(sample(s, dt), kCuda), to_device(sample({257}, dt), kCuda),
                                to_device(sample({1}, dt), kCuda), to_device(sample({300, 1}, dt), kCuda),
                                transpose(to_device(sample({257, 300}, dt), kCuda), 0, 1)};
      const Op unary_ops[] = {with_long ? Op::Softplus : Op::Tanh, Op::Exp, Op::Abs, Op::Sigmoid, Op::Relu,
                              with_long ? Op::BesselJ0 : Op::Sin};
      const Op binary_ops[] = {Op::Add, Op::Mul, Op::Sub, Op::Maximum, Op::Div, Op::Atan2};
      std::vector<Step> steps;
      std::vector<Tensor> eager;
      for (int k = 0; k < length; ++k) {
        Step st;
        st.dtype = dt;
        st.shape = s;
        st.device = kCuda;
        st.a = k == 0 ? Operand::bound(outside[0]) : Operand::of(k - 1);
        const Tensor& a = k == 0 ? outside[0] : eager.back();
        if (k % 3 == 0) {
          st.kind = Kind::Unary;
          st.op = unary_ops[k % 6];
          eager.push_back(unary(st.op, a));
        } else if (k % 3 == 1) {
          st.kind = Kind::Binary;
          st.op = binary_ops[k % 6];
          st.b = Operand::bound(outside[k % 5]);
          eager.push_back(binary(st.op, a, outside[k % 5]));
        } else {
          st.kind = Kind::BinaryScalar;
          st.op = binary_ops[k % 4];
          st.s = 0.75;
          st.scalar_first = k % 2 == 0;
          eager.push_back(binary(st.op, a, Scalar::from_lua(0.75), st.scalar_first));
        }
        steps.push_back(std::move(st));
      }
      std::vector<Tensor> results(steps.size());
      std::vector<uint8_t> want(steps.size(), 0);
      want[2] = want.back() = 1;
      const compile::ExecStats before = compile::exec_stats();
      compile::execute(steps, 0, steps.size(), results, want);
      CHECK(compile::exec_stats().unlowered - before.unlowered == (length > 48 ? 1 : 0));
      for (size_t i : {size_t(2), steps.size() - 1}) {
        REQUIRE(results[i].device() == kCuda);
        expect_same(eager[i], results[i], folds(2), "fused step " + std::to_string(i) + " of " +
                                                         std::to_string(length) + " " + std::string(dtype_name(dt)) +
                                                         (with_long ? " with long ops" : ""));
      }
    }
  }
}

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("skipped: no CUDA device (%s)\n", cuda::status().c_str());
    return 77;
  }
  std::printf("%s, device 0: %s\n", cuda::status().c_str(), cuda::device_name(0).c_str());
  return Catch::Session().run(argc, argv);
}
