// float16 and bfloat16 (tensor/half.h, tensor/cpu/half.cpp): the rounding against its
// definition (the nearest representable value, ties to the even one) over every half
// value and a sweep of floats, the F16C path against the portable one, and the ops'
// rule that a half tensor computes in float32 and stores its result back.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/half.h"
#include "tensor/half_ops.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

using namespace dl;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The float16 nearest to f by definition: search the ordered positive half values
// (exact in double), ties to the one with an even bit pattern; inf past 65520.
uint16_t nearest_half(float f) {
  static std::vector<double> values = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7c00; ++h) v.push_back(double(half_bits_to_float(uint16_t(h))));
    return v;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;
  auto it = std::lower_bound(values.begin(), values.end(), a);
  if (it == values.end()) return sign | 0x7bff;   // between 65504 and 65520
  uint16_t hi = uint16_t(it - values.begin());
  if (values[hi] == a || hi == 0) return sign | hi;
  const uint16_t lo = hi - 1;
  const double dlo = a - values[lo], dhi = values[hi] - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

// The same for bfloat16: the candidates are f's bits truncated and the next pattern up.
uint16_t nearest_bfloat16(float f) {
  const uint32_t u = bits(f);
  const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
  const double a = std::fabs(double(f));
  const double vlo = std::fabs(double(bfloat16_bits_to_float(lo))), vhi = std::fabs(double(bfloat16_bits_to_float(hi)));
  if (a == vlo) return lo;
  const double dlo = a - vlo, dhi = vhi - a;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

// Floats worth converting: random bit patterns (every exponent), values near the half
// range's edges, ties, subnormals, and the specials.
std::vector<float> probe_floats() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e-8f, -3e-8f,
                          5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 6.1035156e-05f, 6.1035152e-05f,
                          INFINITY, -INFINITY, 3.4e38f, 1e-45f};
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) v.push_back(from_bits(rng()));
  for (int e = -30; e <= 17; ++e)
    for (uint32_t m = 0; m < 64; ++m) {
      // exact ties between two halves and their neighbours
      const float base = std::ldexp(1.0f + float(m) / 64.0f, e);
      const uint32_t b = bits(base);
      for (int d = -2; d <= 2; ++d) v.push_back(from_bits(b + uint32_t(d) * 0x1000u));
    }
  return v;
}

bool is_nan_half(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

}  // namespace

TEST_CASE("float16: every value converts to float32 and back to itself", "[half]") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = half_bits_to_float(uint16_t(h));
    const uint16_t back = float_to_half_bits(f);
    if (is_nan_half(uint16_t(h))) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_nan_half(back));
      REQUIRE((back & 0x8000) == (h & 0x8000));
    } else {
      REQUIRE(back == h);
    }
  }
  CHECK(half_bits_to_float(0x3c00) == 1.0f);
  CHECK(half_bits_to_float(0x7bff) == 65504.0f);
  CHECK(half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
}

TEST_CASE("float16 and bfloat16 round to the nearest value, ties to even", "[half]") {
  for (float f : probe_floats()) {
    if (std::isnan(f)) {
      CHECK(is_nan_half(float_to_half_bits(f)));
      CHECK(std::isnan(bfloat16_bits_to_float(float_to_bfloat16_bits(f))));
      continue;
    }
    INFO("float bits " << bits(f));
    REQUIRE(float_to_half_bits(f) == nearest_half(f));
    if (std::isfinite(f) && std::fabs(f) < 3.38e38f) REQUIRE(float_to_bfloat16_bits(f) == nearest_bfloat16(f));
  }
  CHECK(float_to_bfloat16_bits(INFINITY) == 0x7f80);
  CHECK(float_to_bfloat16_bits(3.4e38f) == 0x7f80);   // past bfloat16's largest: inf
}

TEST_CASE("the vector conversions give the scalar rounding's bits", "[half]") {
  std::vector<float> in = probe_floats();
  in.push_back(NAN);
  const int64_t n = int64_t(in.size());
  std::vector<uint16_t> vec(in.size()), plain(in.size()), bf(in.size());
  cpu::half_from_float(DType::Float16, in.data(), vec.data(), n, true);
  cpu::half_from_float(DType::Float16, in.data(), plain.data(), n, false);
  cpu::half_from_float(DType::BFloat16, in.data(), bf.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(vec[size_t(i)] == plain[size_t(i)]);
    REQUIRE(plain[size_t(i)] == float_to_half_bits(in[size_t(i)]));
    REQUIRE(bf[size_t(i)] == float_to_bfloat16_bits(in[size_t(i)]));
  }
  std::vector<float> back_vec(in.size()), back_plain(in.size());
  cpu::half_to_float(DType::Float16, vec.data(), back_vec.data(), n, true);
  cpu::half_to_float(DType::Float16, vec.data(), back_plain.data(), n, false);
  CHECK(std::memcmp(back_vec.data(), back_plain.data(), in.size() * 4) == 0);
}

TEST_CASE("large conversions, written with streaming stores, give the same bits", "[half]") {
  // Results from 16 MB up are stored with non-temporal stores (Note [Streaming stores for
  // large conversions] in tensor/cpu/half.cpp); a destination one element past its
  // alignment takes the head loop too. Every bit pattern is as likely: NaNs, infinities,
  // subnormals and the overflow to infinity included.
  const int64_t n = (int64_t(16) << 20) / 2 + 1001;
  std::vector<float> in(size_t(n) + 1);
  uint32_t state = 0x9e3779b9u;
  for (float& f : in) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    std::memcpy(&f, &state, 4);
  }
  for (int64_t off : {0, 1}) {
    INFO("offset " << off);
    std::vector<uint16_t> vec(size_t(n) + 1), plain(size_t(n) + 1);
    cpu::half_from_float(DType::Float16, in.data() + off, vec.data() + off, n, true);
    cpu::half_from_float(DType::Float16, in.data() + off, plain.data() + off, n, false);
    REQUIRE(std::memcmp(vec.data() + off, plain.data() + off, size_t(n) * 2) == 0);
    std::vector<float> back_vec(size_t(n) + 1), back_plain(size_t(n) + 1);
    cpu::half_to_float(DType::Float16, vec.data() + off, back_vec.data() + off, n, true);
    cpu::half_to_float(DType::Float16, vec.data() + off, back_plain.data() + off, n, false);
    REQUIRE(std::memcmp(back_vec.data() + off, back_plain.data() + off, size_t(n) * 4) == 0);
  }
}

TEST_CASE("half tensors compute in float32 and store the result back", "[half]") {
  Tensor a32 = randn(Shape{37, 19}, DType::Float32), b32 = randn(Shape{19}, DType::Float32);
  for (DType h : {DType::Float16, DType::BFloat16}) {
    Tensor a = cast(a32, h), b = cast(b32, h);
    auto same = [&](const Tensor& got, const Tensor& want32) {
      REQUIRE(got.dtype() == h);
      Tensor want = cast(want32, h);
      REQUIRE(got.shape() == want.shape());
      Tensor g = contiguous(got), w = contiguous(want);
      CHECK(std::memcmp(g.raw_data(), w.raw_data(), size_t(g.numel()) * 2) == 0);
    };
    Tensor af = cast(a, DType::Float32), bf = cast(b, DType::Float32);
    same(binary(Op::Mul, a, b), binary(Op::Mul, af, bf));
    same(unary(Op::Exp, a), unary(Op::Exp, af));
    same(reduce(Op::Sum, a, {1}, false), reduce(Op::Sum, af, {1}, false));
    same(softmax(a, 1), softmax(af, 1));
    same(matmul(a, transpose(a, 0, 1)), matmul(af, transpose(af, 0, 1)));
    same(layer_norm(a, 1, Tensor(), Tensor(), 1e-5).y, layer_norm(af, 1, Tensor(), Tensor(), 1e-5).y);
    CHECK(compare(Op::Gt, a, 0.0).dtype() == DType::Bool);
    CHECK(argmax(a, 1, false).dtype() == DType::Int64);
    // promotion: with float32 the result is float32; float16 with bfloat16 too
    CHECK(binary(Op::Add, a, b32).dtype() == DType::Float32);
    CHECK(binary(Op::Add, cast(a32, DType::Float16), cast(b32, DType::BFloat16)).dtype() == DType::Float32);
    CHECK(binary(Op::Add, a, Scalar(2.5)).dtype() == h);
    // in place: computed in float32, stored in the tensor's own dtype
    Tensor c = clone(a);
    binary_(Op::Add, c, b);
    same(c, binary(Op::Add, af, bf));
  }
}

namespace {
// What a device backend's matmul was handed, for the autocast test below.
DType g_seen_out = DType::Bool, g_seen_a = DType::Bool;
void recording_matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  g_seen_out = out.dtype();
  g_seen_a = a.dtype();
  // The product of the 2-D contiguous operands, accumulated in float32 and stored in
  // out's dtype (the fake device's memory is the host's).
  auto at = [](const Tensor& t, int64_t i) {
    float v = 0;
    DL_DISPATCH_STORAGE(t.dtype(), "test", v = convert_element<float>(t.data<scalar_t>()[i]));
    return v;
  };
  const int64_t M = out.size(0), N = out.size(1), K = a.size(1);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += at(a, i * K + k) * at(b, k * N + j);
      DL_DISPATCH_STORAGE(out.dtype(), "test", out.data<scalar_t>()[i * N + j] = convert_element<scalar_t>(acc));
    }
}
}  // namespace

TEST_CASE("autocast hands a half-capable device's matmul half operands", "[half]") {
  // Note [Autocast] in tensor/half_ops.h, with a fake "cuda" backend that runs on the
  // host and multiplies half matrices (as the CUDA plugin does with cuBLAS).
  Backend fake = cpu_backend();
  fake.name = "cuda";
  fake.matmul = recording_matmul;
  fake.half_matmul = true;
  register_backend(DeviceType::CUDA, &fake);
  {   // the device tensors are freed while the fake backend is still registered
    Device dev{DeviceType::CUDA, 0};
    Tensor a = full(Shape{2, 3}, Scalar(0.1), DType::Float32, dev), b = ones(Shape{3, 2}, DType::Float32, dev);
    CHECK(matmul(a, b).dtype() == DType::Float32);   // autocast off: float32 as given
    CHECK(g_seen_out == DType::Float32);
    {
      t_autocast = {true, DType::Float16};
      Tensor y = matmul(a, b);
      t_autocast = {};
      CHECK(y.dtype() == DType::Float16);
      CHECK(g_seen_out == DType::Float16);
      CHECK(g_seen_a == DType::Float16);
      CHECK(y.data<Half>()[0].bits == float_to_half_bits(3 * half_bits_to_float(float_to_half_bits(0.1f))));
    }
    // half operands of one dtype reach the device's kernel without autocast too
    matmul(cast(a, DType::BFloat16), cast(b, DType::BFloat16));
    CHECK(g_seen_a == DType::BFloat16);
    // mixed halves are computed in float32
    CHECK(matmul(cast(a, DType::Float16), cast(b, DType::BFloat16)).dtype() == DType::Float32);
    CHECK(g_seen_a == DType::Float32);
  }
  register_backend(DeviceType::CUDA, nullptr);
  // the CPU computes half products in float32 whatever autocast says
  t_autocast = {true, DType::Float16};
  Tensor c = matmul(ones(Shape{2, 2}, DType::Float32), ones(Shape{2, 2}, DType::Float32));
  t_autocast = {};
  CHECK(c.dtype() == DType::Float32);
}
