// Random tensors from one global, seedable Philox stream (tensor/random.h).
#include <cmath>
#include <mutex>

#include "tensor/backend.h"
#include "tensor/half_ops.h"
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

// A fresh tensor holding spec(i) at element i, made by the device's kernel (on the
// host and copied when the device's backend has none).
Tensor random_tensor(const Shape& shape, DType dtype, Device device, const char* op,
                     fn::RandomSpec spec) {
  // A half dtype: the float32 values, rounded (the same stream as float32 draws).
  if (is_half(dtype)) return cast(random_tensor(shape, DType::Float32, device, op, spec), dtype);
  Tensor t = empty(shape, dtype, device, op);
  spec.ph = reserve(fn::RandomSpec::blocks(spec.kind, uint64_t(t.numel())), &spec.first);
  if (t.numel() == 0) return t;
  const Backend& be = backend_for(device, op);
  if (be.random) {
    be.random(t, spec);
    return t;
  }
  Tensor host = empty(shape, dtype, Device{}, op);
  cpu_backend().random(host, spec);
  copy_(t, host);
  return t;
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

RngState rng_state() {
  GenState& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  return RngState{g.seed, g.offset};
}

void set_rng_state(const RngState& s) {
  GenState& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  g.seed = s.seed;
  g.offset = s.offset;
}

Tensor rand(const Shape& shape, DType dtype, Device device) {
  DL_CHECK_KIND(Type, is_floating(dtype), "rand: expected a floating dtype, got ", dtype_name(dtype));
  fn::RandomSpec spec;
  spec.kind = fn::RandomSpec::Uniform;
  spec.single = dtype == DType::Float32;
  return random_tensor(shape, dtype, device, "rand", spec);
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  DL_CHECK_KIND(Type, is_floating(dtype), "randn: expected a floating dtype, got ", dtype_name(dtype));
  fn::RandomSpec spec;
  spec.kind = fn::RandomSpec::Normal;
  return random_tensor(shape, dtype, device, "randn", spec);
}

Tensor randint(int64_t lo, int64_t hi, const Shape& shape, DType dtype, Device device) {
  DL_CHECK(hi > lo, "randint: expected lo < hi, got [", lo, ", ", hi, ")");
  fn::RandomSpec spec;
  spec.kind = fn::RandomSpec::Int;
  spec.lo = lo;
  spec.range = uint64_t(hi) - uint64_t(lo);
  return random_tensor(shape, dtype, device, "randint", spec);
}

Tensor bernoulli(const Shape& shape, double p, DType dtype, Device device) {
  DL_CHECK(p >= 0 && p <= 1, "bernoulli: probability must be in [0, 1], got ", p);
  fn::RandomSpec spec;
  spec.kind = fn::RandomSpec::Bernoulli;
  spec.p = p;
  return random_tensor(shape, dtype, device, "bernoulli", spec);
}

std::pair<Tensor, Tensor> dropout(const Tensor& x, double p) {
  if (is_half(x.dtype())) return narrowed(dropout(widened(x), p), x.dtype());
  DL_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p);
  const DType dt = is_floating(x.dtype()) ? x.dtype() : default_float();
  if (p == 1) {
    Tensor mask = zeros(x.shape(), dt, x.device());
    return {binary(Op::Mul, cast(x, dt), mask), mask};
  }
  const Tensor xc = contiguous(cast(x, dt));
  Tensor y = empty(x.shape(), dt, x.device(), "dropout"), mask = empty(x.shape(), dt, x.device(), "dropout");
  fn::RandomSpec spec;
  spec.kind = fn::RandomSpec::Bernoulli;
  spec.p = 1 - p;
  spec.ph = reserve(fn::RandomSpec::blocks(spec.kind, uint64_t(y.numel())), &spec.first);
  if (y.numel() > 0) kernel(x.device(), &Backend::dropout, "dropout")(y, mask, xc, spec, 1 / (1 - p));
  return {y, mask};
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
