// The random stream (tensor/random.h) and its CPU kernel (tensor/cpu/random.cpp): the
// Philox rounds against the published known answer, and the kernel, which computes
// blocks many at a time, against the spec's own element-by-element definition (what
// the CUDA kernel runs) for every distribution, dtype, size and stream offset.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/nn.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "tests/cpp/bits.h"

using namespace dl;

TEST_CASE("Philox-4x32-10 gives the known answer for a zero counter and key", "[random]") {
  // Salmon et al. (Random123), kat_vectors: philox4x32 10 rounds, counter 0, key 0.
  uint32_t w[4];
  fn::Philox{0, 0}.block(0, w);
  CHECK(w[0] == 0x6627e8d5u);
  CHECK(w[1] == 0xe169c58du);
  CHECK(w[2] == 0xbc57ac4cu);
  CHECK(w[3] == 0x9b00dbd8u);
}

TEST_CASE("the CPU random kernel gives element i of the spec's stream", "[random]") {
  using K = fn::RandomSpec;
  struct Kind {
    const char* name;
    K spec;
  };
  K uniform, single, normal, integer, bernoulli;
  uniform.kind = K::Uniform;
  single.kind = K::Uniform;
  single.single = true;
  normal.kind = K::Normal;
  integer.kind = K::Int;
  integer.lo = -5;
  integer.range = 11;
  bernoulli.kind = K::Bernoulli;
  bernoulli.p = 0.3;
  const Kind kinds[] = {{"uniform", uniform}, {"uniform single", single}, {"normal", normal},
                        {"int", integer}, {"bernoulli", bernoulli}};
  // With each build of the blocks' rounds this CPU can run (Note [Philox rounds in AVX2]).
  for (int bytes = cpu::vector_bytes(); bytes >= 16; bytes /= 2)
    for (const Kind& k : kinds)
      for (DType dt : {DType::Float32, DType::Float64, DType::Int64})
        for (int64_t n : {int64_t(1), int64_t(2), int64_t(3), int64_t(127), int64_t(128), int64_t(129),
                          int64_t(1000), int64_t(300001)})  // the last in parallel chunks
          for (uint64_t first : {uint64_t(0), uint64_t(7), ~uint64_t(0) - 40}) {  // the last wraps
            if (dt == DType::Int64 && k.spec.kind != K::Int && k.spec.kind != K::Bernoulli) continue;
            INFO(k.name << ", " << dtype_name(dt) << ", " << n << " elements from block " << first
                        << ", vectors of " << bytes << " bytes");
            cpu::limit_vector_bytes(bytes);
            K spec = k.spec;
            spec.ph = fn::Philox{0x12345678u, 0x9abcdef0u};
            spec.first = first;
            Tensor t = empty(Shape{n}, dt);
            cpu::random(t, spec);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; ++i) {
              const double want = spec(uint64_t(i));
              double got = 0;
              if (dt == DType::Float32) got = t.data<float>()[i];
              else if (dt == DType::Float64) got = t.data<double>()[i];
              else got = double(t.data<int64_t>()[i]);
              const double expect = dt == DType::Float32 ? double(float(want)) : dt == DType::Int64 ? double(int64_t(want)) : want;
              if (std::memcmp(&got, &expect, sizeof got) != 0) bad = i;  // the same bits
            }
            CHECK(bad == -1);
          }
  cpu::limit_vector_bytes(0);
}

TEST_CASE("dropout's one pass draws bernoulli's stream, scaled, times x", "[random]") {
  // The kernel of Backend::dropout against the composite it replaced: a bernoulli mask
  // of the keeping probability, times 1 / (1 - p), times x, bit for bit, and the stream
  // read as far.
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (double p : {0.1, 0.5, 0.9}) {
      const Tensor x = binary(Op::Sub, randn(Shape{37, 129}, dt), Scalar(0.25));
      const Tensor xt = transpose(x, 0, 1);   // read through its strides
      manual_seed(21);
      auto [y, mask] = dropout(xt, p);
      const Tensor after = rand(Shape{3}, dt);
      manual_seed(21);
      Tensor want_mask = bernoulli(xt.shape(), 1 - p, dt);
      binary_(Op::Mul, want_mask, Scalar(1 / (1 - p)));
      CHECK(dl::test::same_bits(mask, want_mask));
      CHECK(dl::test::same_bits(y, binary(Op::Mul, xt, want_mask)));
      CHECK(dl::test::same_bits(rand(Shape{3}, dt), after));
    }
  }
  auto [z, zm] = dropout(ones(Shape{4}, DType::Int64), 1.0);   // integers compute in the default float
  CHECK(z.dtype() == default_float());
  CHECK(dl::test::same_bits(z, zeros(Shape{4}, default_float())));
  CHECK_THROWS_WITH(dropout(ones(Shape{2}, DType::Float32), 1.5), Catch::Contains("dropout: probability must be in [0, 1]"));
}
