// CPU kernel of the random tensors: element i of the spec's stream (tensor/random.h),
// in parallel chunks; the values do not depend on the thread count.
//
// Note [Random numbers by blocks]
// Element by element, each element computed its Philox block (ten rounds of two 32x32
// multiplies) on its own: a uniform, Bernoulli or integer block, which serves two
// elements, was computed twice, and the rounds ran one counter at a time. Here the blocks of kLanes
// consecutive counters are computed side by side, the rounds running across the lanes
// (loops the compiler vectorises, AVX-512 or AVX2 picked at load time where the CPU
// has it), and each element then takes its words from its block, the distribution's
// function chosen once per chunk (docs/performance.md, "Measurements behind the code",
// has the times). The words are
// Philox::round's, the same as the GPU's one block at a time, so a seed still gives
// the same tensor on every device and thread count.
#include <algorithm>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace dl::cpu {

namespace {

// Blocks computed side by side. (16 were unrolled whole before the loop vectoriser
// saw them, and the rounds stayed scalar: 64 are not.)
constexpr int kLanes = 64;

// Blocks ctr0, ctr0 + 1, ..., ctr0 + kLanes - 1: block k's words at w[4 k .. 4 k + 3].
DL_TARGET_CLONES void philox_blocks(const fn::Philox& ph, uint64_t ctr0, uint32_t* w) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    const uint64_t c = ctr0 + uint64_t(k);
    c0[k] = uint32_t(c);
    c1[k] = uint32_t(c >> 32);
    c2[k] = 0;
    c3[k] = 0;
  }
  uint32_t k0 = ph.key0, k1 = ph.key1;
  for (int r = 0; r < fn::Philox::kRounds; ++r) {
    for (int k = 0; k < kLanes; ++k) fn::Philox::round(c0[k], c1[k], c2[k], c3[k], k0, k1);
    k0 += fn::Philox::kBump0;
    k1 += fn::Philox::kBump1;
  }
  for (int k = 0; k < kLanes; ++k) {
    w[4 * k] = c0[k];
    w[4 * k + 1] = c1[k];
    w[4 * k + 2] = c2[k];
    w[4 * k + 3] = c3[k];
  }
}

// draw(i, words of element i) for i in [b, e): kWords words an element (4 for Normal,
// 2 for the others), blocks computed kLanes at a time.
template <int kWords, typename F>
void for_each_draw(const fn::RandomSpec& spec, int64_t b, int64_t e, F draw) {
  constexpr int64_t kPer = 4 / kWords;  // elements a block serves
  uint32_t w[4 * kLanes];
  for (int64_t i = b; i < e;) {
    const int64_t block = i / kPer, base = block * kPer, end = std::min<int64_t>(e, base + kPer * kLanes);
    philox_blocks(spec.ph, spec.first + uint64_t(block), w);
    for (; i < end; ++i) draw(i, w + kWords * (i - base));
  }
}

// p[i] = value(words of element i) for i in [b, e).
template <int kWords, typename T, typename F>
void fill(const fn::RandomSpec& spec, T* p, int64_t b, int64_t e, F value) {
  for_each_draw<kWords>(spec, b, e, [&](int64_t i, const uint32_t* w) { p[i] = fn::convert<T>(value(w)); });
}

}  // namespace

void random(const Tensor& out, const fn::RandomSpec& spec) {
  DL_ASSERT(out.is_contiguous());
  using K = fn::RandomSpec;
  DL_DISPATCH_ALL(out.dtype(), "random", {
    scalar_t* p = out.data<scalar_t>();
    parallel_range(out.numel(), [&](int64_t b, int64_t e) {
      // The kind decided once per chunk, not per element (the same functions as
      // RandomSpec::operator()).
      switch (spec.kind) {
        case K::Normal: fill<4>(spec, p, b, e, [&](const uint32_t* w) { return spec.normal(w); }); break;
        case K::Uniform:
          if (spec.single) fill<2>(spec, p, b, e, [&](const uint32_t* w) { return spec.uniform_single(w[0]); });
          else fill<2>(spec, p, b, e, [&](const uint32_t* w) { return spec.uniform(w[0], w[1]); });
          break;
        case K::Int: fill<2>(spec, p, b, e, [&](const uint32_t* w) { return spec.integer(w[0], w[1]); }); break;
        case K::Bernoulli: fill<2>(spec, p, b, e, [&](const uint32_t* w) { return spec.bernoulli(w[0], w[1]); }); break;
      }
    });
  });
}

void dropout(const Tensor& out, const Tensor& mask, const Tensor& x, const fn::RandomSpec& spec, double scale) {
  DL_ASSERT(out.is_contiguous() && mask.is_contiguous() && x.is_contiguous());
  DL_DISPATCH_FLOAT(out.dtype(), "dropout", {
    scalar_t* o = out.data<scalar_t>();
    scalar_t* m = mask.data<scalar_t>();
    const scalar_t* xs = x.data<scalar_t>();
    const scalar_t kept = scalar_t(scale);
    parallel_range(out.numel(), [&](int64_t b, int64_t e) {
      for_each_draw<2>(spec, b, e, [&](int64_t i, const uint32_t* w) {
        const scalar_t k = spec.bernoulli(w[0], w[1]) != 0 ? kept : scalar_t(0);
        m[i] = k;
        o[i] = xs[i] * k;
      });
    });
  });
}

}  // namespace dl::cpu
