// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"):
// a counter-based generator, so element i of a random tensor depends only on
// (seed, offset + i). The same stream comes out on any thread count and on the GPU.
#pragma once
#include <cmath>
#include <cstdint>

#include "tensor/functors.h"

namespace dl::fn {

struct Philox {
  uint32_t key0, key1;

  static constexpr int kRounds = 10;
  static constexpr uint32_t kBump0 = 0x9E3779B9u, kBump1 = 0xBB67AE85u;  // the key schedule
  static constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // the round's multipliers

  // One round on the counter words c[0..3] with round key (k0, k1). (The CPU kernel runs
  // it over many counters side by side, tensor/cpu/random.cpp.)
  DL_HD static void round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
    const uint64_t p0 = uint64_t(kMul0) * c0, p1 = uint64_t(kMul1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = uint32_t(p1);
    c2 = n2;
    c3 = uint32_t(p0);
  }
  // Four 32-bit random words for a 128-bit counter (here: a 64-bit block number).
  DL_HD void block(uint64_t ctr, uint32_t out[4]) const {
    uint32_t c0 = uint32_t(ctr), c1 = uint32_t(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = key0, k1 = key1;
    for (int r = 0; r < kRounds; ++r) {
      round(c0, c1, c2, c3, k0, k1);
      k0 += kBump0;
      k1 += kBump1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
  }
  // Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
  DL_HD float uniform_f(uint32_t w) const { return float(w >> 8) * (1.0f / 16777216.0f); }
  DL_HD double uniform_d(uint32_t a, uint32_t b) const {
    uint64_t bits = ((uint64_t(a) << 32) | uint64_t(b)) >> 11;  // 53 bits
    return double(bits) * (1.0 / 9007199254740992.0);
  }
};

// What a random tensor holds: its distribution and where its numbers start in the
// stream. Element i is spec(i), a double that the kernel converts to the tensor's
// dtype; the CPU and CUDA kernels both run this, so a seed gives the same tensor on
// every device (bit for bit, except that randn's log and cos may differ in the last
// bit of a double between the C library and CUDA's).
struct RandomSpec {
  enum Kind : uint8_t { Uniform, Normal, Int, Bernoulli };
  Philox ph{0, 0};
  uint64_t first = 0;      // the first counter block
  Kind kind = Uniform;
  bool single = false;     // Uniform: 24 random bits (float32) instead of 53
  int64_t lo = 0;          // Int: lo + r % range
  uint64_t range = 1;
  double p = 0;            // Bernoulli: 1 with probability p

  // Counter blocks (four words each) that n elements use: Normal takes a block per
  // element, the others two words.
  static DL_HD uint64_t blocks(Kind k, uint64_t n) { return k == Normal ? n : (n + 1) / 2; }

  // The stream block (less `first`) that element i reads.
  DL_HD uint64_t block_of(uint64_t i) const { return kind == Normal ? i : i / 2; }

  DL_HD double operator()(uint64_t i) const {
    uint32_t w[4];
    ph.block(first + block_of(i), w);
    return from_block(i, w);
  }

  // Element i from the four words of its block.
  DL_HD double from_block(uint64_t i, const uint32_t w[4]) const {
    if (kind == Normal) return normal(w);
    // Words 2i and 2i + 1 of the stream: both in block i / 2.
    const uint32_t a = w[(i % 2) * 2], b = w[(i % 2) * 2 + 1];
    switch (kind) {
      case Uniform: return single ? uniform_single(a) : uniform(a, b);
      case Int: return integer(a, b);
      default: return bernoulli(a, b);
    }
  }

  // The distributions, from an element's words (four for Normal, two for the others).
  // Box-Muller: one block gives two uniforms in double precision.
  DL_HD double normal(const uint32_t w[4]) const {
    double u1 = ph.uniform_d(w[0], w[1]), u2 = ph.uniform_d(w[2], w[3]);
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  DL_HD double uniform_single(uint32_t a) const { return double(ph.uniform_f(a)); }
  DL_HD double uniform(uint32_t a, uint32_t b) const { return ph.uniform_d(a, b); }
  DL_HD double integer(uint32_t a, uint32_t b) const {
    uint64_t r = (uint64_t(a) << 32) | b;
    return double(int64_t(uint64_t(lo) + r % range));
  }
  // uniform(a, b) < p, compared as integers: the uniform is k 2^-53 for the integer k of
  // its 53 bits, and k 2^-53 < p exactly when k < ceil(p 2^53). (A double comparison
  // compiled to a branch, mispredicted every other element at p = 0.5.)
  DL_HD double bernoulli(uint32_t a, uint32_t b) const {
    const uint64_t k = ((uint64_t(a) << 32) | b) >> 11;
    const uint64_t below = p >= 1 ? uint64_t(1) << 53 : p > 0 ? uint64_t(std::ceil(p * 9007199254740992.0)) : 0;
    return double(k < below);
  }
};

}  // namespace dl::fn
