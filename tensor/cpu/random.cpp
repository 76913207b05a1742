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

#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace dl::cpu {

namespace {

// Blocks computed side by side. (16 were unrolled whole before the loop vectoriser
// saw them, and the rounds stayed scalar: 64 are not.)
constexpr int kLanes = 64;

// Blocks ctr0, ctr0 + 1, ..., ctr0 + kLanes - 1: block k's words at w[4 k .. 4 k + 3].
DL_TARGET_CLONES void philox_blocks_vectorised(const fn::Philox& ph, uint64_t ctr0, uint32_t* w) {
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

// Note [Philox rounds in AVX2]
// The loop vectoriser's AVX2 code for the rounds above spends most of its instructions
// moving the halves of the 64-bit products between lanes (perf of bench/'s `chartf`:
// philox_blocks 11% of a step, most of it shuffles); written with the instructions
// that take them apart in place (vpmuludq on the even lanes and on the odd ones shifted
// down, then two blends), eight blocks a vector, the same words in clearly less time
// a block (a C++ loop of calls of 64 blocks; docs/performance.md, "Measurements behind
// the code"). Used where the machine's vectors are AVX2's (Note [Builds for each
// vector width] in loops.h); with AVX-512 the vectoriser's own build stays, not
// measured against these.
#ifdef DL_WIDTH_BUILDS
// The high and low 32 bits of a[l] * m for the eight lanes.
DL_TARGET_AVX2 inline void mul_halves(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

DL_TARGET_AVX2 void philox_blocks_avx2(const fn::Philox& ph, uint64_t ctr0, uint32_t* w) {
  const __m256i m0 = _mm256_set1_epi32(int(fn::Philox::kMul0)), m1 = _mm256_set1_epi32(int(fn::Philox::kMul1));
  for (int g = 0; g < kLanes; g += 8) {
    // The counters base .. base + 7, their low and high words.
    const uint64_t base = ctr0 + uint64_t(g);
    __m256i c0, c1;
    if (uint32_t(base) <= 0xFFFFFFFFu - 7) {
      c0 = _mm256_add_epi32(_mm256_set1_epi32(int(uint32_t(base))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      c1 = _mm256_set1_epi32(int(uint32_t(base >> 32)));
    } else {   // the low word carries into the high one within these eight
      alignas(32) uint32_t lo[8], hi[8];
      for (int k = 0; k < 8; ++k) {
        const uint64_t c = base + uint64_t(k);
        lo[k] = uint32_t(c);
        hi[k] = uint32_t(c >> 32);
      }
      c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
      c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
    }
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    uint32_t k0 = ph.key0, k1 = ph.key1;
    for (int r = 0; r < fn::Philox::kRounds; ++r) {   // fn::Philox::round, eight at a time
      __m256i hi0, lo0, hi1, lo1;
      mul_halves(c0, m0, hi0, lo0);
      mul_halves(c2, m1, hi1, lo1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int(k0)));
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int(k1)));
      c1 = lo1;
      c3 = lo0;
      k0 += fn::Philox::kBump0;
      k1 += fn::Philox::kBump1;
    }
    // Four vectors of one word each to eight blocks of four words.
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i* out = reinterpret_cast<__m256i*>(w + 4 * g);
    _mm256_storeu_si256(out, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
}
#endif

void philox_blocks(const fn::Philox& ph, uint64_t ctr0, uint32_t* w) {
#ifdef DL_WIDTH_BUILDS
  if (vector_bytes() == 32) return philox_blocks_avx2(ph, ctr0, w);
#endif
  philox_blocks_vectorised(ph, ctr0, w);
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
