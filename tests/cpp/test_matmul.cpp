// matmul (tensor/linalg.cpp, tensor/cpu/matmul.cpp) against PyTorch (ref/matmul_ref.inc)
// for every rank combination and dtype, with each operand in each layout the kernel
// treats differently, and every error path.

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <limits>

#include "ref/ref_check.h"
#include "ref/matmul_ref.inc"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/openblas.h"
#include "tensor/cpu/small_gemm.h"

using namespace dl;

namespace {

double tol_for(DType t) { return t == DType::Float32 ? 1e-5 : (t == DType::Float64 ? 1e-12 : 0); }

// Ways of laying out the same matrix values: the kernel must give the same product.
enum class Arrangement { Contiguous, Transposed, Strided, Broadcast };

// `t` with the same values laid out as asked (>= 2-D only; Broadcast needs a batch dim).
Tensor relayout(const Tensor& t, Arrangement l) {
  const int n = t.dim();
  switch (l) {
    case Arrangement::Contiguous:
      return t;
    case Arrangement::Transposed:  // stride pattern (1, ld): read with CblasTrans
      return transpose(contiguous(transpose(t, n - 2, n - 1)), n - 2, n - 1);
    case Arrangement::Strided: {  // every other row and column of a bigger tensor: no BLAS layout
      Shape big = t.shape();
      big[n - 2] *= 2;
      big[n - 1] *= 2;
      Tensor b = full(big, Scalar(std::nan("")), t.dtype());
      Tensor v = slice(slice(b, n - 2, 0, big[n - 2], 2), n - 1, 0, big[n - 1], 2);
      copy_(v, t);
      return v;
    }
    case Arrangement::Broadcast: {  // the first batch dim read through a zero stride
      Tensor first = narrow(t, 0, 0, 1);
      Shape s = t.shape();
      return expand(first, s);
    }
  }
  return t;
}

// A deterministic pseudo-random integer tensor with entries in [-range, range].
Tensor small_ints(const Shape& shape, int range, DType dt, unsigned seed) {
  int64_t n = checked_numel(shape, "test");
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t s = seed;
  for (auto& e : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    e = double(int64_t((s >> 33) % uint64_t(2 * range + 1)) - range);
  }
  return from_values(v.data(), n, shape, dt);
}

}  // namespace

TEST_CASE("matmul matches torch for every rank combination and dtype", "[matmul]") {
  for (const ref::MatmulCase& c : ref::kMatmulCases) {
    INFO("case " << c.name);
    Tensor a = from_ref(*c.a, c.ta), b = from_ref(*c.b, c.tb);
    Tensor out = matmul(a, b);
    CHECK(out.dtype() == promote(c.ta, c.tb));
    CHECK(out.is_contiguous());
    check_ref(out, *c.out, tol_for(out.dtype()));
  }
}

TEST_CASE("matmul gives the same product whatever the operands' layout", "[matmul]") {
  const Arrangement layouts[] = {Arrangement::Contiguous, Arrangement::Transposed, Arrangement::Strided};
  for (const ref::MatmulCase& c : ref::kMatmulCases) {
    Tensor a0 = from_ref(*c.a, c.ta), b0 = from_ref(*c.b, c.tb);
    for (Arrangement la : layouts)
      for (Arrangement lb : layouts) {
        INFO("case " << c.name << ", layouts " << int(la) << " x " << int(lb));
        Tensor a = a0.dim() >= 2 ? relayout(a0, la) : a0;
        Tensor b = b0.dim() >= 2 ? relayout(b0, lb) : b0;
        check_ref(matmul(a, b), *c.out, tol_for(promote(c.ta, c.tb)));
      }
  }
}

TEST_CASE("matmul of 1-D operands with strides", "[matmul]") {
  for (const ref::MatmulCase& c : ref::kMatmulCases) {
    if (c.a->shape.size() != 1 && c.b->shape.size() != 1) continue;
    INFO("case " << c.name);
    auto strided = [](const Tensor& v) {
      if (v.dim() != 1) return v;
      Tensor big = full({3 * v.size(0)}, Scalar(std::nan("")), v.dtype());
      Tensor s = slice(big, 0, 1, 3 * v.size(0), 3);
      copy_(s, v);
      return s;
    };
    Tensor a = strided(from_ref(*c.a, c.ta)), b = strided(from_ref(*c.b, c.tb));
    check_ref(matmul(a, b), *c.out, tol_for(promote(c.ta, c.tb)));
    // A vector read through a zero stride (all entries the same) is copied, not passed
    // to BLAS with increment 0.
    if (a.dim() == 1) {
      Tensor e = expand(narrow(a, 0, 0, 1), {a.size(0)});
      Tensor dense = contiguous(e);
      check_values(matmul(e, b), values_of(matmul(dense, b)), tol_for(promote(c.ta, c.tb)));
    }
  }
}

// Note [Small products without OpenBLAS] in tensor/cpu/matmul.cpp: the sums in the
// order it documents, written out plainly.
template <typename T>
T lanes_dot(const T* r, const T* x, int64_t n) {
  T acc[16] = {};
  for (int64_t j = 0; j < n; ++j) acc[j % 16] += r[j] * x[j];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

template <typename T>
void check_vector_products(DType dt) {
  const struct { int64_t m, k; } sizes[] = {{1, 1}, {5, 17}, {4, 16}, {7, 33}, {9, 3}, {256, 784}};
  for (auto d : sizes) {
    INFO(d.m << " x " << d.k << ", " << dtype_name(dt));
    Tensor W = randn(Shape{d.m, d.k}, dt), x = randn(Shape{1, d.k}, dt), v = randn(Shape{d.m}, dt);
    Tensor xs = slice(randn(Shape{1, 3 * d.k}, dt), 1, 1, 3 * d.k, 3);   // a strided vector
    const T* w = W.data<T>();
    std::vector<T> xv(size_t(d.k));
    for (int64_t j = 0; j < d.k; ++j) xv[size_t(j)] = T(x.value_at(std::vector<int64_t>{0, j}.data()));
    // y = x W^T, one dot per row of W (the layout of a Linear layer on one example).
    for (const Tensor& xx : {x, xs}) {
      std::vector<T> xd(size_t(d.k));
      for (int64_t j = 0; j < d.k; ++j) xd[size_t(j)] = T(xx.value_at(std::vector<int64_t>{0, j}.data()));
      Tensor y = matmul(xx, transpose(W, 0, 1));
      for (int64_t i = 0; i < d.m; ++i)
        REQUIRE(T(y.value_at(std::vector<int64_t>{0, i}.data())) == lanes_dot(w + i * d.k, xd.data(), d.k));
    }
    // y = v W: the rows of W added in order.
    Tensor y = matmul(unsqueeze(v, 0), W);
    for (int64_t j = 0; j < d.k; ++j) {
      T want = 0;
      for (int64_t i = 0; i < d.m; ++i) want += T(v.value_at(&i)) * w[i * d.k + j];
      REQUIRE(T(y.value_at(std::vector<int64_t>{0, j}.data())) == want);
    }
    // W x as a column, and the same through transposed storage.
    Tensor c = matmul(W, unsqueeze(squeeze(x, 0), 1));
    Tensor ct = matmul(transpose(contiguous(transpose(W, 0, 1)), 0, 1), unsqueeze(squeeze(x, 0), 1));
    for (int64_t i = 0; i < d.m; ++i) {
      const T want = lanes_dot(w + i * d.k, xv.data(), d.k);
      REQUIRE(T(c.value_at(std::vector<int64_t>{i, 0}.data())) == want);
      const T got_t = T(ct.value_at(std::vector<int64_t>{i, 0}.data()));
      REQUIRE(std::abs(double(got_t - want)) <= 1e-5 * std::sqrt(double(d.k)) * (1 + std::abs(double(want))));
    }
  }
  // A dot of two vectors, and OpenBLAS not needed for any of it when nothing loaded it.
  Tensor a = randn(Shape{100}, dt), b = randn(Shape{100}, dt);
  REQUIRE(T(matmul(a, b).item()) == lanes_dot(a.data<T>(), b.data<T>(), 100));
}

TEST_CASE("products with a vector operand add in their documented order", "[matmul]") {
  // With each build of the loops this CPU can run (Note [Builds for each vector width]
  // in tensor/cpu/loops.h).
  for (int bytes = cpu::vector_bytes(); bytes >= 16; bytes /= 2) {
    INFO("the build for vectors of " << bytes << " bytes");
    cpu::limit_vector_bytes(bytes);
    check_vector_products<float>(DType::Float32);
    check_vector_products<double>(DType::Float64);
  }
  cpu::limit_vector_bytes(0);
}

// Note [Small products of matrices] in tensor/cpu/small_gemm.cpp: each element of a
// product with m n k up to 2^20 (float32; further with AVX-512) or 2^15 (float64; 2^20
// with AVX-512) is
// fma(a(i,k-1), b(k-1,j), ... fma(a(i,1), b(1,j), fma(a(i,0), b(0,j), 0))), whatever the
// layouts and the build. Where no build of the loop runs (an x86-64 vector width
// limited to 16 bytes), OpenBLAS's values to a product's rounding.
template <typename T>
void check_small_products(DType dt, int64_t volume) {
  struct Dims {
    int64_t m, n, k;
  };
  // Each operand as stored, read transposed, and both of those inside a wider matrix
  // (a leading dimension larger than the row).
  auto lay = [](const Tensor& t, int how) {
    const Tensor src = how % 2 ? transpose(t, 0, 1) : t;   // what is stored
    Tensor stored = src;
    if (how >= 2) {
      Tensor wide = full(Shape{src.size(0), src.size(1) + 3}, Scalar(std::nan("")), src.dtype());
      stored = narrow(wide, 1, 0, src.size(1));
      copy_(stored, src);
    } else {
      stored = contiguous(src);
    }
    return how % 2 ? transpose(stored, 0, 1) : stored;
  };
  // Tiles of 6 (AVX2) or 12 (AVX-512) rows by two vectors of columns, with and without
  // partial ones (every m % 6 and most m % 12), last columns of more and of at most half
  // a tile (one vector wide), a tile-wide matrix, a 1-term sum, the largest volume every
  // build takes, and larger ones that AVX-512's takes with b in place (cut between
  // threads along rows or columns).
  for (Dims d : {Dims{2, 2, 1}, Dims{3, 5, 7}, Dims{6, 16, 4}, Dims{7, 17, 33}, Dims{11, 9, 20}, Dims{13, 33, 64},
                 Dims{23, 50, 9}, Dims{25, 7, 3}, Dims{20, 40, 6}, Dims{32, 32, 32}, Dims{64, 64, 64},
                 Dims{64, 10, 256}, Dims{128, 64, 128}, Dims{128, 128, 128}, Dims{64, 256, 784}, Dims{784, 64, 256}}) {
    if (d.m * d.n * d.k > volume) continue;
    Tensor a0 = randn(Shape{d.m, d.k}, dt), b0 = randn(Shape{d.k, d.n}, dt);
    const T* a = a0.data<T>();
    const T* b = b0.data<T>();
    std::vector<T> want(size_t(d.m * d.n));
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j) {
        T acc = 0;
        for (int64_t p = 0; p < d.k; ++p) acc = std::fma(a[i * d.k + p], b[p * d.n + j], acc);
        want[size_t(i * d.n + j)] = acc;
      }
    // (rows: of the one product that ran, a batch's folded into one)
    auto check = [&](const Tensor& r, const Tensor& rhs, int64_t rows) {
      const bool own = cpu::small_gemm_takes<T>(rows, d.n, d.k, rhs.stride(0), rhs.stride(1));
      if (own) {
        CHECK(std::memcmp(r.raw_data(), want.data(), want.size() * sizeof(T)) == 0);
      } else {
        std::vector<double> close(want.begin(), want.end());
        check_values(r, close, 1e-4);
      }
    };
    for (int la = 0; la < 4; ++la)
      for (int lb = 0; lb < 4; ++lb) {
        INFO(d.m << " x " << d.k << " x " << d.n << ", " << dtype_name(dt) << ", layouts " << la << " x " << lb);
        const Tensor rhs = lay(b0, lb);
        Tensor r = matmul(lay(a0, la), rhs);
        REQUIRE(r.shape() == Shape{d.m, d.n});
        check(r, rhs, d.m);
      }
    // A batch folded into the rows of one product (4 m rows by the same b), and the same
    // batch read through a zero stride (a product per matrix).
    if (4 * d.m * d.n * d.k <= volume) {
      INFO(d.m << " x " << d.k << " x " << d.n << ", " << dtype_name(dt) << ", a batch of 4");
      Tensor batch = expand(unsqueeze(a0, 0), {4, d.m, d.k});
      for (const Tensor& lhs : {contiguous(batch), batch}) {
        Tensor r = matmul(lhs, b0);
        const int64_t rows = lhs.is_contiguous() ? 4 * d.m : d.m;
        for (int64_t t = 0; t < 4; ++t) check(contiguous(select(r, 0, t)), b0, rows);
      }
    }
  }
}

TEST_CASE("small products of matrices add in their documented order", "[matmul]") {
  for (int bytes = cpu::vector_bytes(); bytes >= 16; bytes /= 2) {
    INFO("the build for vectors of " << bytes << " bytes");
    cpu::limit_vector_bytes(bytes);
    check_small_products<float>(DType::Float32, int64_t(1) << 24);
    check_small_products<double>(DType::Float64, int64_t(1) << 20);
  }
  cpu::limit_vector_bytes(0);
#if defined(__x86_64__)
  // Every x86-64 CPU with AVX2 and FMA runs the loop.
  CHECK(cpu::small_gemm_takes<float>(64, 64, 64, 64, 1) ==
        (cpu::vector_bytes() >= 32 && __builtin_cpu_supports("fma")));
#else
  CHECK(cpu::small_gemm_takes<float>(64, 64, 64, 64, 1));
#endif
  const bool wide = cpu::vector_bytes() == 64;
  CHECK(cpu::small_gemm_takes<float>(64, 256, 784, 256, 1) == wide);
  CHECK(cpu::small_gemm_takes<float>(64, 256, 784, 1, 784) == wide);   // b read transposed
  CHECK(cpu::small_gemm_takes<double>(64, 64, 64, 1, 64) == wide);
  CHECK_FALSE(cpu::small_gemm_takes<double>(64, 256, 784, 256, 1));
  CHECK_FALSE(cpu::small_gemm_takes<float>(64, 256, 784, 2, 1600));    // neither contiguous
  CHECK_FALSE(cpu::small_gemm_takes<float>(128, 128, 128, 2, 256));
  CHECK_FALSE(cpu::small_gemm_takes<float>(512, 512, 512, 512, 1));
  CHECK_FALSE(cpu::small_gemm_takes<float>(2, int64_t(1) << 40, int64_t(1) << 40, int64_t(1) << 40, 1));
  // Past 2^20 the product is OpenBLAS's, whose fused multiply-adds round otherwise: the
  // same values to a float32 product's rounding.
  Tensor a = randn(Shape{129, 128}, DType::Float32), b = randn(Shape{128, 64}, DType::Float32);
  Tensor big = matmul(a, b), parts = matmul(slice(a, 0, 0, 128, 1), b);
  check_values(slice(big, 0, 0, 128, 1), values_of(parts), 1e-4);
}

TEST_CASE("matmul reads broadcast batch operands in place", "[matmul]") {
  for (const ref::MatmulCase& c : ref::kMatmulCases) {
    if (c.a->shape.size() < 3 || c.b->shape.size() < 3) continue;
    INFO("case " << c.name);
    Tensor a0 = from_ref(*c.a, c.ta), b0 = from_ref(*c.b, c.tb);
    // Expanding the first batch entry over the batch: same as the product of that entry.
    Tensor ea = relayout(a0, Arrangement::Broadcast);
    Tensor expect = matmul(contiguous(ea), b0);
    check_values(matmul(ea, b0), values_of(expect), tol_for(expect.dtype()));
    check_values(matmul(ea, relayout(b0, Arrangement::Transposed)), values_of(expect), tol_for(expect.dtype()));
    check_values(matmul(relayout(ea, Arrangement::Strided), b0), values_of(expect), tol_for(expect.dtype()));
  }
  // A (B, M, K) x (K, N) product folded into one gemm, and its unfoldable twins.
  Tensor a = from_ref(ref::bmm_big_a, DType::Float32), b = from_ref(ref::bmm_big_b, DType::Float32);
  check_ref(matmul(a, expand(unsqueeze(b, 0), {3, 18, 20})), ref::bmm_big_out, 1e-5);
  check_ref(matmul(transpose(contiguous(transpose(a, 0, 1)), 0, 1), b), ref::bmm_big_out, 1e-5);
  Tensor r4 = matmul(unsqueeze(a, 0), b);
  CHECK(r4.shape() == Shape{1, 3, 12, 20});
  check_values(r4, ref::bmm_big_out.values, 1e-5);
  Tensor r = matmul(a, b);
  CHECK(r.shape() == Shape{3, 12, 20});
}

TEST_CASE("matmul copies no operand that BLAS can read in place", "[matmul]") {
  auto bytes_allocated_by = [](auto&& f) {
    host_allocator::take_allocated_since_reset();
    f();
    return host_allocator::take_allocated_since_reset();
  };
  for (DType t : {DType::Float32, DType::Float64}) {
    Tensor a = ones({64, 32}, t), b = ones({32, 48}, t), batch = ones({4, 64, 32}, t);
    Tensor at = relayout(a, Arrangement::Transposed), bt = relayout(b, Arrangement::Transposed);
    Tensor eb = expand(unsqueeze(b, 0), {4, 32, 48});
    Tensor v = ones({32}, t), w = ones({64}, t);
    const int64_t mm = bytes_allocated_by([&] { empty({64, 48}, t); });
    const int64_t bmm = bytes_allocated_by([&] { empty({4, 64, 48}, t); });
    const int64_t mv = bytes_allocated_by([&] { empty({64}, t); });
    const int64_t vm = bytes_allocated_by([&] { empty({48}, t); });
    INFO("dtype " << dtype_name(t));
    CHECK(bytes_allocated_by([&] { matmul(a, b); }) == mm);
    CHECK(bytes_allocated_by([&] { matmul(at, b); }) == mm);
    CHECK(bytes_allocated_by([&] { matmul(a, bt); }) == mm);
    CHECK(bytes_allocated_by([&] { matmul(at, bt); }) == mm);
    CHECK(bytes_allocated_by([&] { matmul(batch, b); }) == bmm);
    CHECK(bytes_allocated_by([&] { matmul(batch, eb); }) == bmm);
    CHECK(bytes_allocated_by([&] { matmul(a, v); }) == mv);
    CHECK(bytes_allocated_by([&] { matmul(at, v); }) == mv);
    CHECK(bytes_allocated_by([&] { matmul(w, a); }) == bytes_allocated_by([&] { empty({32}, t); }));
    CHECK(bytes_allocated_by([&] { matmul(v, bt); }) == vm);
    // The layouts BLAS cannot read are copied (so the checks above can fail).
    CHECK(bytes_allocated_by([&] { matmul(relayout(a, Arrangement::Strided), b); }) > mm);
  }
}

TEST_CASE("matmul with empty dims returns zeros of the right shape", "[matmul]") {
  for (DType t : {DType::Float32, DType::Float64, DType::Int64, DType::Int32}) {
    INFO("dtype " << dtype_name(t));
    Tensor k0 = matmul(ones({2, 0}, t), ones({0, 3}, t));
    CHECK(k0.shape() == Shape{2, 3});
    check_values(k0, std::vector<double>(6, 0.0), 0);
    Tensor dot0 = matmul(ones({0}, t), ones({0}, t));
    CHECK(dot0.dim() == 0);
    CHECK(dot0.item() == 0);
    CHECK(matmul(ones({0, 4}, t), ones({4, 3}, t)).shape() == Shape{0, 3});
    CHECK(matmul(ones({2, 4}, t), ones({4, 0}, t)).shape() == Shape{2, 0});
    CHECK(matmul(ones({0, 2, 4}, t), ones({4, 3}, t)).shape() == Shape{0, 2, 3});
    CHECK(matmul(ones({5, 1, 2, 0}, t), ones({3, 0, 6}, t)).shape() == Shape{5, 3, 2, 6});
    check_values(matmul(ones({5, 1, 2, 0}, t), ones({3, 0, 6}, t)), std::vector<double>(180, 0.0), 0);
    CHECK(matmul(ones({3}, t), ones({2, 3, 0}, t)).shape() == Shape{2, 0});
  }
}

TEST_CASE("matmul integer dtypes accumulate exactly in int64", "[matmul]") {
  // Products beyond 2^53 are exact in int64 (a float64 accumulation would round).
  double av[] = {3037000499.0, 2.0, 1.0, 1.0};
  double bv[] = {3037000499.0, 1.0};
  Tensor a = from_values(av, 4, Shape{2, 2}, DType::Int64);
  Tensor b = from_values(bv, 2, Shape{2}, DType::Int64);
  Tensor r = matmul(a, b);
  CHECK(r.dtype() == DType::Int64);
  CHECK(r.data<int64_t>()[0] == 3037000499ll * 3037000499ll + 2);
  CHECK(r.data<int64_t>()[1] == 3037000500ll);
  // uint8 wraps like torch's.
  Tensor u = matmul(full({1, 4}, Scalar(200.0), DType::UInt8), full({4, 1}, Scalar(2.0), DType::UInt8));
  CHECK(u.dtype() == DType::UInt8);
  CHECK(u.item() == double((200 * 2 * 4) % 256));
  // int32 and uint8 promote to int32; int with float to float.
  CHECK(matmul(ones({2, 2}, DType::Int32), ones({2, 2}, DType::UInt8)).dtype() == DType::Int32);
  CHECK(matmul(ones({2, 2}, DType::Int32), ones({2, 2}, DType::Float64)).dtype() == DType::Float64);
}

TEST_CASE("matmul of large integer matrices (threaded) matches a plain loop", "[matmul]") {
  const int64_t B = 2, M = 70, K = 50, N = 60;
  Tensor a = small_ints({B, M, K}, 9, DType::Int32, 11);
  Tensor bt = small_ints({N, K}, 9, DType::Int32, 12);
  Tensor b = transpose(bt, 0, 1);  // strided: the integer loop takes any layout
  Tensor r = matmul(a, b);
  REQUIRE(r.shape() == Shape{B, M, N});
  std::vector<double> expect;
  for (int64_t z = 0; z < B; ++z)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          int64_t ia[] = {z, i, k}, ib[] = {k, j};
          acc += a.value_at(ia) * b.value_at(ib);
        }
        expect.push_back(acc);
      }
  check_values(r, expect, 0);
}

TEST_CASE("small products run on one BLAS thread; large ones that cannot be split, on all", "[matmul]") {
  // Note [BLAS threads] in tensor/cpu/matmul.cpp. Both sides of the threshold give the
  // product (the values are checked by the torch cases); here, the thread count.
  Tensor big = ones(Shape{256, 512}, DType::Float32);
  Tensor bt = ones(Shape{512, 256}, DType::Float32);
  // 2 * 100 * 100 * 2000 flops, more than kSplitFlops, but too narrow to cut in two.
  Tensor narrow_a = ones(Shape{100, 2000}, DType::Float32), narrow_b = ones(Shape{2000, 100}, DType::Float32);
  // (Smaller products than this one run in the engine's own loop: Note [Small products
  // of matrices]; 128 x 128 x 96 is past it and under the size split between threads.)
  // (b read transposed: an AVX-512 build takes larger ones with b in place)
  Tensor small = ones(Shape{128, 128}, DType::Float32), small_b = transpose(ones(Shape{96, 128}, DType::Float32), 0, 1);
  Tensor r = matmul(narrow_a, narrow_b);
  CHECK(r.value_at(std::vector<int64_t>{99, 99}.data()) == 2000);
  const int all = cpu::openblas().openblas_get_num_threads();
  const bool several = std::thread::hardware_concurrency() > 1 && !std::getenv("OPENBLAS_NUM_THREADS") &&
                       !std::getenv("OMP_NUM_THREADS");
  if (several) CHECK(all > 1);
  r = matmul(small, small_b);
  CHECK(r.value_at(std::vector<int64_t>{0, 0}.data()) == 128);
  CHECK(cpu::openblas().openblas_get_num_threads() == 1);
  r = matmul(narrow_a, narrow_b);
  CHECK(cpu::openblas().openblas_get_num_threads() == all);
  // A large product that can be cut is split between OpenMP threads (unless the
  // throttle saw contention, which a test cannot rule out): the values are the same.
  r = matmul(big, bt);
  CHECK(r.value_at(std::vector<int64_t>{255, 255}.data()) == 512);
}

TEST_CASE("a batch of small products shared out between threads gives each product's own bits", "[matmul]") {
  // batches_between_threads in tensor/cpu/matmul.cpp: attention's per-head products
  // (1.6 MFLOP each here; two of them are too few to share out, three are enough).
  for (int64_t batch : {2, 3, 32}) {
    Tensor a = randn(Shape{batch, 128, 64}, DType::Float32), b = randn(Shape{batch, 64, 96}, DType::Float32);
    Tensor bt = transpose(randn(Shape{batch, 96, 64}, DType::Float32), 1, 2);   // read transposed
    for (const Tensor* rhs : {&b, &bt}) {
      Tensor r = matmul(a, *rhs);
      REQUIRE(r.shape() == Shape{batch, 128, 96});
      for (int64_t k = 0; k < batch; ++k) {
        INFO("batch " << batch << ", product " << k);
        Tensor one = matmul(select(a, 0, k), select(*rhs, 0, k));
        Tensor got = contiguous(select(r, 0, k));
        CHECK(std::memcmp(got.raw_data(), one.raw_data(), size_t(one.numel()) * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("products split between OpenMP threads match one BLAS call", "[matmul]") {
  // Note [Products split between OpenMP threads]: from 2^22 flops, cut along the
  // larger of the output's dims (rows when m >= n, else columns), each operand in
  // either BLAS layout. The reference is one cblas_sgemm call over the whole product.
  struct Dims {
    int m, n, k;
  };
  for (Dims d : {Dims{64, 256, 784}, Dims{784, 256, 64}, Dims{130, 301, 150}, Dims{300, 257, 600}}) {
    Tensor a0 = randn(Shape{d.m, d.k}, DType::Float32), b0 = randn(Shape{d.k, d.n}, DType::Float32);
    std::vector<float> want(size_t(d.m) * size_t(d.n));
    cpu::openblas().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.m, d.n, d.k, 1.0f,
                                a0.data<float>(), d.k, b0.data<float>(), d.n, 0.0f, want.data(), d.n);
    for (Arrangement la : {Arrangement::Contiguous, Arrangement::Transposed})
      for (Arrangement lb : {Arrangement::Contiguous, Arrangement::Transposed}) {
        INFO(d.m << " x " << d.k << " x " << d.n << ", layouts " << int(la) << " x " << int(lb));
        Tensor r = matmul(relayout(a0, la), relayout(b0, lb));
        REQUIRE(r.shape() == Shape{d.m, d.n});
        const float* got = r.data<float>();
        // Each part may sum in another order than the whole: a float32 product's
        // rounding over k terms of about unit size.
        const float tol = 1e-6f * float(d.k);
        int64_t bad = -1;
        for (size_t i = 0; i < want.size() && bad < 0; ++i)
          if (!(std::fabs(got[i] - want[i]) <= tol)) bad = int64_t(i);
        INFO("element " << bad << ": got " << (bad >= 0 ? got[bad] : 0) << ", want " << (bad >= 0 ? want[size_t(bad)] : 0));
        CHECK(bad == -1);
      }
  }
}

TEST_CASE("a product's bits do not depend on whether its parts ran on several threads", "[matmul]") {
  // Note [Products split between OpenMP threads]: the cut depends on the shapes and the
  // thread count; inside another parallel region (as under contention) the parts run in
  // order on one thread. Before, such a product was kept whole there, and OpenBLAS gave
  // some rows other last bits than in a part.
  struct Dims {
    int m, n, k;
  };
  for (Dims d : {Dims{200, 200, 300}, Dims{64, 256, 784}, Dims{784, 256, 64}, Dims{130, 301, 150}}) {
    Tensor a = randn(Shape{d.m, d.k}, DType::Float32), b = randn(Shape{d.k, d.n}, DType::Float32);
    for (Arrangement lb : {Arrangement::Contiguous, Arrangement::Transposed}) {
      INFO(d.m << " x " << d.k << " x " << d.n << ", layout of b " << int(lb));
      Tensor rb = relayout(b, lb);
      Tensor shared = matmul(a, rb);
      Tensor alone;
#pragma omp parallel num_threads(2)
      {
#pragma omp single
        alone = matmul(a, rb);
      }
      REQUIRE(alone.shape() == shared.shape());
      CHECK(std::memcmp(alone.raw_data(), shared.raw_data(), size_t(shared.numel()) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("matmul overwrites whatever its output memory held", "[matmul]") {
  // The kernel is handed fresh, uninitialised memory: NaN there must not leak through
  // (BLAS with beta = 0 may scale instead of overwrite).
  const ref::MatmulCase* picks[] = {&ref::kMatmulCases[0], &ref::kMatmulCases[1], &ref::kMatmulCases[2],
                               &ref::kMatmulCases[3], &ref::kMatmulCases[8]};
  for (const ref::MatmulCase* c : picks) {
    INFO("case " << c->name);
    Tensor a = from_ref(*c->a, c->ta), b = from_ref(*c->b, c->tb);
    Tensor am = a.dim() == 1 ? unsqueeze(a, 0) : a;
    Tensor bm = b.dim() == 1 ? unsqueeze(b, 1) : b;
    Shape full_shape;
    for (int i = 0; i + 2 < am.dim(); ++i) full_shape.push_back(am.size(i));
    full_shape.push_back(am.size(am.dim() - 2));
    full_shape.push_back(bm.size(bm.dim() - 1));
    Tensor out = full(full_shape, Scalar(std::nan("")), DType::Float32);
    cpu_backend().matmul(out, am, bm);
    check_values(out, c->out->values, 1e-5);
  }
}

TEST_CASE("matmul errors", "[matmul]") {
  Tensor a = ones({2, 3}, DType::Float32);
  CHECK_THAT(error_of([&] { matmul(a, ones({4, 5}, DType::Float32)); }),
             StartsWith("matmul: shapes (2, 3) and (4, 5) cannot be multiplied"));
  CHECK_THAT(error_of([&] { matmul(ones({3}, DType::Float32), ones({4}, DType::Float32)); }),
             StartsWith("matmul: shapes (3,) and (4,) cannot be multiplied"));
  CHECK_THAT(error_of([&] { matmul(a, ones({2}, DType::Float32)); }),
             StartsWith("matmul: shapes (2, 3) and (2,) cannot be multiplied"));
  CHECK_THAT(error_of([&] { matmul(ones({4}, DType::Float32), a); }),
             StartsWith("matmul: shapes (4,) and (2, 3) cannot be multiplied"));
  CHECK_THAT(error_of([&] { matmul(ones({2, 2, 3}, DType::Float32), ones({3, 3, 4}, DType::Float32)); }),
             StartsWith("matmul: the batch dimensions of shapes (2, 2, 3) and (3, 3, 4) cannot be broadcast"));
  CHECK_THAT(error_of([&] { matmul(ones(Shape{}, DType::Float32), a); }),
             StartsWith("matmul: both arguments need at least 1 dimension, got shapes () and (2, 3)"));
  CHECK_THAT(error_of([&] { matmul(a, ones(Shape{}, DType::Float32)); }),
             StartsWith("matmul: both arguments need at least 1 dimension"));
  CHECK_THAT(error_of([&] { matmul(ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool)); }),
             StartsWith("matmul: not supported for bool tensors (got bool and bool)"));
  CHECK_THAT(error_of([&] { matmul(ones({2, 2}, DType::Float32), ones({2, 2}, DType::Bool)); }),
             StartsWith("matmul: not supported for bool tensors (got float32 and bool)"));
  CHECK(error_kind_of([&] { matmul(ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool)); }) == ErrorKind::Type);
  // Sizes past BLAS's int are refused before any copy (both operands are stride-0 views
  // of one element, so nothing big is allocated).
  const int64_t huge = int64_t(std::numeric_limits<int>::max()) + 1;
  Tensor one = zeros({1, 1}, DType::Float32);
  CHECK_THAT(error_of([&] { matmul(expand(one, {2, huge}), expand(one, {huge, 2})); }),
             Contains("too large for BLAS"));
}

TEST_CASE("matmul on a backend without it, and across devices", "[matmul]") {
  Backend fake = cpu_backend();
  fake.name = "cuda";
  fake.matmul = nullptr;
  register_backend(DeviceType::CUDA, &fake);
  {
    Device dev{DeviceType::CUDA, 0};
    Tensor a = ones({2, 3}, DType::Float32, dev), b = ones({3, 2}, DType::Float32, dev);
    CHECK_THAT(error_of([&] { matmul(a, b); }), StartsWith("matmul: not implemented for cuda"));
    CHECK(error_kind_of([&] { matmul(a, b); }) == ErrorKind::NotImplemented);
    CHECK_THAT(error_of([&] { matmul(ones({2, 3}, DType::Float32), b); }),
               StartsWith("matmul: expected tensors on the same device, got cpu and cuda:0"));
  }
  register_backend(DeviceType::CUDA, nullptr);
}

TEST_CASE("two parallel regions in a row much slower than the best seen turn splitting off for a while", "[matmul]") {
  // Note [Throttling parallel regions under contention] (tensor/cpu/loops.h), with
  // made-up times: 1 ns a unit of work is the best, 2 is within the factor, 4 is not.
  // The third number is the starting thread's time in its own parts: a slow region where
  // that thread waited for the others longer than it worked (400 of 4000) is contention;
  // one slow on that thread too (3500 of 4000: fresh memory's page faults) is not.
  dl::cpu::RegionThrottle t;
  const int64_t s = 1000000000;
  CHECK(t.allowed(0));
  t.record(1000, 1000, 900, 10 * s);
  t.record(1000, 2000, 400, 11 * s);
  CHECK(t.allowed(11 * s));
  t.record(1000, 4000, 400, 12 * s);  // one slow region alone: a stall, splitting stays on
  CHECK(t.allowed(12 * s));
  t.record(1000, 1500, 1400, 12 * s);
  t.record(1000, 4000, 400, 12 * s);  // not two in a row either
  CHECK(t.allowed(12 * s));
  t.record(1000, 4000, 3500, 12 * s);  // slow on the starting thread as well
  t.record(1000, 4000, 3500, 12 * s);
  t.record(1000, 4000, 2000, 12 * s);  // as long in its own part as waiting
  CHECK(t.allowed(12 * s));
  t.record(1000, 4000, 400, 12 * s);
  t.record(1000, 4000, 400, 12 * s);  // now two in a row
  CHECK_FALSE(t.allowed(12 * s));
  CHECK_FALSE(t.allowed(12 * s + dl::cpu::RegionThrottle::kBackoffNs - 1));
  CHECK(t.allowed(12 * s + dl::cpu::RegionThrottle::kBackoffNs));  // a probe
  t.record(1000, 900, 850, 14 * s);  // fast again: a new best, and splitting stays on
  CHECK(t.allowed(14 * s));
  t.record(1000, 2600, 100, 15 * s);  // 2.9 times the new best, twice
  t.record(1000, 2600, 100, 15 * s);
  CHECK(t.allowed(15 * s));
}

TEST_CASE("a timed region counts the starting thread's own parts", "[matmul]") {
  // run_part in tensor/cpu/loops.h: a region whose parts all run on the starting thread
  // (parallel_units below its grain) spent no time waiting, however slow it was.
  dl::cpu::RegionThrottle t;
  const int64_t s = 1000000000;
  t.record(1e6, 1000000, 900000, s);   // best: 1 ns a unit
  auto spin = [](int64_t ns) {
    const int64_t end = dl::cpu::monotonic_ns() + ns;
    while (dl::cpu::monotonic_ns() < end) {
    }
  };
  for (int i = 0; i < 3; ++i)
    t.timed(1e3, [&] { dl::cpu::parallel_units(1, 1.0, [&](int64_t, int64_t, int) { spin(200000); }); });
  CHECK(t.allowed(dl::cpu::monotonic_ns()));
  // Without parts run through the helpers, the whole region was waiting.
  for (int i = 0; i < 2; ++i) t.timed(1e3, [&] { spin(200000); });
  CHECK_FALSE(t.allowed(dl::cpu::monotonic_ns()));
}

TEST_CASE("OpenBLAS's core: a fallback is replaced by the CPU's best", "[matmul][blas]") {
  // Note [Choosing OpenBLAS's core] in tensor/cpu/openblas.cpp.
  CHECK(better_blas_core("Prescott", 5) == std::string("SkylakeX"));
  CHECK(better_blas_core("prescott", 4) == std::string("Haswell"));
  CHECK(better_blas_core("Nehalem", 3) == std::string("Sandybridge"));
  CHECK(better_blas_core("Core2", 0) == nullptr);        // an old CPU: nothing better
  CHECK(better_blas_core("Haswell", 5) == nullptr);      // OpenBLAS's own choice stands
  CHECK(better_blas_core("Cooperlake", 5) == nullptr);
  CHECK(better_blas_core("Zen", 4) == nullptr);

  const int level = cpu_simd_level();
  if (!cpu::openblas().gotoblas_dynamic_init || level < 3) {
    WARN("not a DYNAMIC_ARCH OpenBLAS or a CPU without AVX: the swap is not exercised");
    return;
  }
  // Fake the fallback: make OpenBLAS load its generic kernels, as it does on a CPU it
  // does not know, then run what the engine runs when its image loads.
  const std::string before = cpu::openblas().openblas_get_corename();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const std::string user = env ? env : "";
  REQUIRE(select_blas_core("Prescott"));
  CHECK(std::string(cpu::openblas().openblas_get_corename()) == "Prescott");
  unsetenv("OPENBLAS_CORETYPE");
  select_blas_core_at_load();
  BlasInfo info = blas_info();
  CHECK(info.detected == "Prescott");
  CHECK(info.chosen_by == "dlua");
  CHECK(info.core == better_blas_core("Prescott", level));
  CHECK(info.config.find(info.core) != std::string::npos);
  // Products are right on the new kernels (one BLAS thread and several).
  Tensor a = ones(Shape{300, 200}, DType::Float32), b = ones(Shape{200, 100}, DType::Float32);
  CHECK(matmul(a, b).value_at(std::vector<int64_t>{299, 99}.data()) == 200);
  Tensor s = ones(Shape{8, 8}, DType::Float64);
  CHECK(matmul(s, s).value_at(std::vector<int64_t>{7, 7}.data()) == 8);

  // A core the user named stands: nothing is swapped.
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  REQUIRE(select_blas_core("Prescott"));
  select_blas_core_at_load();
  CHECK(std::string(cpu::openblas().openblas_get_corename()) == "Prescott");
  CHECK(blas_info().chosen_by == "OPENBLAS_CORETYPE");

  // Back to what the process had, for the tests after this one.
  if (user.empty()) unsetenv("OPENBLAS_CORETYPE");
  else setenv("OPENBLAS_CORETYPE", user.c_str(), 1);
  select_blas_core(before.c_str());
  CHECK(std::string(cpu::openblas().openblas_get_corename()) == before);
}
