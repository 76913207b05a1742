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

  DL_HD static uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
    uint64_t p = uint64_t(a) * uint64_t(b);
    *hi = uint32_t(p >> 32);
    return uint32_t(p);
  }
  // Four 32-bit random words for a 128-bit counter (here: a 64-bit block number).
  DL_HD void block(uint64_t ctr, uint32_t out[4]) const {
    uint32_t c0 = uint32_t(ctr), c1 = uint32_t(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = key0, k1 = key1;
    for (int r = 0; r < 10; ++r) {
      uint32_t hi0, hi1;
      uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
      uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
      uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
      c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
      k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
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

  DL_HD double operator()(uint64_t i) const {
    uint32_t w[4];
    if (kind == Normal) {
      // Box-Muller: one block gives two uniforms in double precision.
      ph.block(first + i, w);
      double u1 = ph.uniform_d(w[0], w[1]), u2 = ph.uniform_d(w[2], w[3]);
      if (u1 < 1e-300) u1 = 1e-300;
      return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
    // Words 2i and 2i + 1 of the stream: both in block i / 2.
    ph.block(first + i / 2, w);
    const uint32_t a = w[(i % 2) * 2], b = w[(i % 2) * 2 + 1];
    switch (kind) {
      case Uniform: return single ? double(ph.uniform_f(a)) : ph.uniform_d(a, b);
      case Int: {
        uint64_t r = (uint64_t(a) << 32) | b;
        return double(int64_t(uint64_t(lo) + r % range));
      }
      default: return ph.uniform_d(a, b) < p ? 1.0 : 0.0;
    }
  }
};

}  // namespace dl::fn
