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

}  // namespace dl::fn
