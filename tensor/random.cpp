// Random tensors from one global, seedable Philox stream (tensor/random.h).
#include <cmath>
#include <mutex>

#include "tensor/backend.h"
#include "tensor/cpu/loops.h"
#include "tensor/random.h"

namespace dl {

namespace {
struct GenState {
  std::mutex mu;
  uint64_t seed = 0x5eed5eedULL;
  uint64_t offset = 0;  // blocks of four words used so far
};
GenState& gen() {
  static GenState g;
  return g;
}
// Reserves `blocks` counter blocks; returns the generator and the first block.
fn::Philox reserve(uint64_t blocks, uint64_t* first) {
  GenState& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  *first = g.offset;
  g.offset += blocks;
  return fn::Philox{uint32_t(g.seed), uint32_t(g.seed >> 32)};
}

// Fills a host tensor with f(philox, element index, first block) for each element,
// in parallel chunks; then moves it to `device`.
template <typename F>
Tensor random_tensor(const Shape& shape, DType dtype, Device device, const char* op,
                     uint64_t words_per_elem, F f) {
  Tensor t = empty(shape, dtype, Device{}, op);
  int64_t n = t.numel();
  uint64_t first = 0;
  fn::Philox ph = reserve((uint64_t(n) * words_per_elem + 3) / 4, &first);
  DL_DISPATCH_ALL(dtype, op, {
    scalar_t* p = t.data<scalar_t>();
    cpu::parallel_range(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = fn::convert<scalar_t>(f(ph, first, uint64_t(i)));
    });
  });
  if (device.is_cpu()) return t;
  Tensor d = empty(shape, dtype, device, op);
  copy_(d, t);
  return d;
}

// The k-th 32-bit word of the stream starting at block `first`.
inline uint32_t word(const fn::Philox& ph, uint64_t first, uint64_t k) {
  uint32_t w[4];
  ph.block(first + k / 4, w);
  return w[k % 4];
}
}  // namespace

void manual_seed(uint64_t seed) {
  GenState& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  g.seed = seed;
  g.offset = 0;
}

uint64_t initial_seed() {
  GenState& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.seed;
}

Tensor rand(const Shape& shape, DType dtype, Device device) {
  DL_CHECK_KIND(Type, is_floating(dtype), "rand: expected a floating dtype, got ", dtype_name(dtype));
  return random_tensor(shape, dtype, device, "rand", 2, [dtype](const fn::Philox& ph, uint64_t f, uint64_t i) {
    uint32_t w[4];
    ph.block(f + i / 2, w);
    return dtype == DType::Float32 ? double(ph.uniform_f(w[(i % 2) * 2]))
                                   : ph.uniform_d(w[(i % 2) * 2], w[(i % 2) * 2 + 1]);
  });
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  DL_CHECK_KIND(Type, is_floating(dtype), "randn: expected a floating dtype, got ", dtype_name(dtype));
  // Box-Muller: one block of four words gives two uniforms in double precision.
  return random_tensor(shape, dtype, device, "randn", 4, [](const fn::Philox& ph, uint64_t f, uint64_t i) {
    uint32_t w[4];
    ph.block(f + i, w);
    double u1 = ph.uniform_d(w[0], w[1]), u2 = ph.uniform_d(w[2], w[3]);
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}

Tensor randint(int64_t lo, int64_t hi, const Shape& shape, DType dtype, Device device) {
  DL_CHECK(hi > lo, "randint: expected lo < hi, got [", lo, ", ", hi, ")");
  uint64_t range = uint64_t(hi) - uint64_t(lo);
  return random_tensor(shape, dtype, device, "randint", 2, [=](const fn::Philox& ph, uint64_t f, uint64_t i) {
    uint64_t r = (uint64_t(word(ph, f, 2 * i)) << 32) | word(ph, f, 2 * i + 1);
    return double(int64_t(uint64_t(lo) + r % range));
  });
}

Tensor bernoulli(const Shape& shape, double p, DType dtype, Device device) {
  DL_CHECK(p >= 0 && p <= 1, "bernoulli: probability must be in [0, 1], got ", p);
  return random_tensor(shape, dtype, device, "bernoulli", 2, [p](const fn::Philox& ph, uint64_t f, uint64_t i) {
    return ph.uniform_d(word(ph, f, 2 * i), word(ph, f, 2 * i + 1)) < p ? 1.0 : 0.0;
  });
}

Tensor randperm(int64_t n, DType dtype) {
  DL_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  Tensor t = empty(Shape{n}, DType::Int64, Device{}, "randperm");
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t first = 0;
  fn::Philox ph = reserve(uint64_t(n), &first);
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    uint32_t w[4];
    ph.block(first + uint64_t(i), w);
    uint64_t r = (uint64_t(w[0]) << 32) | w[1];
    int64_t j = int64_t(r % uint64_t(i + 1));
    std::swap(p[i], p[j]);
  }
  return cast(t, dtype);
}

}  // namespace dl
