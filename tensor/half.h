// float16 and bfloat16 elements: 16-bit storage types, converted to float32 to compute.
//
// Note [Half-precision storage]
// float16 (IEEE binary16: 5 exponent bits, 10 mantissa bits, largest 65504) and
// bfloat16 (float32's top 16 bits: its range, 7 mantissa bits) are storage dtypes: a
// tensor holds them, and every op that computes on one converts its operands to
// float32, computes in float32 with the float32 kernels, and stores the result back in
// the half dtype (PyTorch's CPU does the same per element for both). Conversion rounds
// to nearest, ties to even; overflow gives infinity, NaN stays NaN (quiet, sign and top
// payload bits kept, as the F16C instructions do), subnormals are kept. The functions
// here are the one definition of the rounding: the CPU's vector loops
// (tensor/cpu/half.cpp) and the CUDA plugin use them or instructions with the same
// results, and tests/cpp/test_half.cpp checks them against every float16 value.
#pragma once
#include <cstdint>
#include <cstring>

#include "tensor/functors.h"

namespace dl {

namespace half_detail {
DL_HD uint32_t bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
DL_HD float float_of(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace half_detail

// float32 -> binary16 bits, round to nearest even.
DL_HD uint16_t float_to_half_bits(float value) {
  using namespace half_detail;
  uint32_t x = bits_of(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN, quiet
  if (x >= 0x47800000u) return uint16_t(sign | 0x7c00u);   // >= 65536 (and inf): inf
  if (x < 0x38800000u) {
    // Below 2^-14 the result is subnormal (or zero): adding 0.5 puts the half's
    // 10 mantissa bits, rounded by the float adder (to nearest even), at the bottom of
    // the sum's mantissa. 0.5 = 2^-1 and the half's unit in the last place is 2^-24.
    const float sum = float_of(x) + 0.5f;
    return uint16_t(sign | (bits_of(sum) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even; a
  // carry out of the mantissa moves into the exponent, up to infinity at 65520.
  const uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;   // (15 - 127) << 23, plus the rounding bias
  return uint16_t(sign | (x >> 13));
}

// binary16 bits -> float32, exact.
DL_HD float half_bits_to_float(uint16_t h) {
  using namespace half_detail;
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in float32
    const float v = float(mant) * 5.9604644775390625e-08f;
    return float_of(sign | bits_of(v));
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float32 -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN.
DL_HD uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t x = half_detail::bits_of(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

DL_HD float bfloat16_bits_to_float(uint16_t b) { return half_detail::float_of(uint32_t(b) << 16); }

// The element types. Arithmetic is not defined on them on purpose: a kernel that meets
// one without converting fails to compile instead of computing in 16 bits.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  DL_HD explicit Half(float f) : bits(float_to_half_bits(f)) {}
  DL_HD explicit operator float() const { return half_bits_to_float(bits); }
  DL_HD explicit operator double() const { return double(half_bits_to_float(bits)); }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  DL_HD explicit BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  DL_HD explicit operator float() const { return bfloat16_bits_to_float(bits); }
  DL_HD explicit operator double() const { return double(bfloat16_bits_to_float(bits)); }
};

template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };

template <typename T> constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Conversions between a storage element and any element type: through float32 for the
// half types (double -> float rounds first, then float -> half: PyTorch's order too).
template <typename To, typename From>
DL_HD To convert_element(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<To>) {
    if constexpr (kIsHalf<From>) return To(float(v));
    else return To(float(v));
  } else if constexpr (kIsHalf<From>) {
    return fn::convert<To>(float(v));
  } else {
    return fn::convert<To>(v);
  }
}

// A number written into a tensor (fill_, full, x[i] = v): a whole number wraps to an
// integer dtype's width, as beside it in arithmetic (uint8's -1 is 255), anything else
// converts as convert_element. The front ends first refuse a number that the dtype cannot
// hold (check_fits in tensor/ops.h), as PyTorch does.
template <typename T>
DL_HD T fill_value(double v) {
  if constexpr (kIsHalf<T>) return convert_element<T>(v);
  else return fn::scalar_operand<T>(v);
}

}  // namespace dl

// DL_DISPATCH_ALL plus the half dtypes, for the kernels that move or convert elements
// without computing on them (copies, fills, gathers, reading and writing values).
#define DL_DISPATCH_STORAGE(dt, opname, ...)                                       \
  do {                                                                             \
    switch (dt) {                                                                  \
      DL_DTYPE_CASE(Bool, bool, __VA_ARGS__)                                       \
      DL_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Float32, float, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Float64, double, __VA_ARGS__)                                  \
      DL_DTYPE_CASE(Float16, ::dl::Half, __VA_ARGS__)                              \
      DL_DTYPE_CASE(BFloat16, ::dl::BFloat16, __VA_ARGS__)                         \
    }                                                                              \
  } while (0)
