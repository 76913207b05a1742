// Element types, their names, and PyTorch's type promotion.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tensor/error.h"

namespace dl {

// Bool < integers < floats by promotion category; the codes are the C ABI's and the
// files' (new dtypes go at the end). float16 and bfloat16 are storage dtypes: ops
// compute on them in float32 (Note [Half-precision storage] in tensor/half.h).
enum class DType : uint8_t {
  Bool = 0, UInt8 = 1, Int32 = 2, Int64 = 3, Float32 = 4, Float64 = 5, Float16 = 6, BFloat16 = 7
};
constexpr int kNumDTypes = 8;

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool: case DType::UInt8: return 1;
    case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::Float32: return 4;
    case DType::Int64: case DType::Float64: return 8;
  }
  return 0;
}
constexpr bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || is_half(t);
}
// The dtype an op computes a tensor of dtype t in: float32 for the half dtypes.
constexpr DType compute_type(DType t) { return is_half(t) ? DType::Float32 : t; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::UInt8 || t == DType::Int32 || t == DType::Int64 ||
         (include_bool && t == DType::Bool);
}
// Whether a result of dtype `from` may be written into a tensor of dtype `to` (an
// in-place op's), as PyTorch's can_cast: within a kind, narrowing included (float64
// into float32, int64 into int32, wrapping), and up the kinds; never a float into an
// integer tensor, nor anything but a bool into a bool one.
constexpr bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  return to != DType::Bool || from == DType::Bool;
}

std::string_view dtype_name(DType t);
// Parses "float32", "float", "double", "int64", "long", ...; throws on unknown names.
DType dtype_from_name(std::string_view name);

// The dtype that floats default to (dl.set_default_dtype); float32 unless changed.
DType default_float();
void set_default_float(DType t);

// Promotion of two dtypes of the same priority (PyTorch's promoteTypes).
DType promote(DType a, DType b);

// The kind of a wrapped Lua number: integral values are ints, others floats.
enum class ScalarKind : uint8_t { Int, Float, Bool };

template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };

// Whether v is a whole number that dtype t holds exactly. A comparison of an integer
// tensor with one compares in t; with any other number (0.5, 256 beside uint8) it compares
// in double, so that the answer is the mathematical one.
inline bool holds_whole(DType t, double v) {
  if (!(v == std::floor(v))) return false;
  switch (t) {
    case DType::Bool: return v == 0 || v == 1;
    case DType::UInt8: return v >= 0 && v <= 255;
    case DType::Int32: return v >= -2147483648.0 && v <= 2147483647.0;
    case DType::Int64: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    default: return true;
  }
}

}  // namespace dl

// Runs the body with `scalar_t` bound to the C++ type of `dt`.
#define DL_DTYPE_CASE(enumv, type, ...) \
  case ::dl::DType::enumv: { using scalar_t = type; __VA_ARGS__; } break;

// The computing dtypes; a half dtype here is an error naming the op (its front end
// should have converted it: Note [Half-precision storage]).
#define DL_DISPATCH_ALL(dt, opname, ...)                                          \
  do {                                                                             \
    switch (dt) {                                                                  \
      DL_DTYPE_CASE(Bool, bool, __VA_ARGS__)                                       \
      DL_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Float32, float, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Float64, double, __VA_ARGS__)                                  \
      default: ::dl::fail(::dl::ErrorKind::Type, opname, ": not implemented for dtype ", \
                          ::dl::dtype_name(dt));                                   \
    }                                                                              \
  } while (0)

#define DL_DISPATCH_NUMERIC(dt, opname, ...)                                      \
  do {                                                                             \
    switch (dt) {                                                                  \
      DL_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Float32, float, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Float64, double, __VA_ARGS__)                                  \
      default: ::dl::fail(::dl::ErrorKind::Type, opname, ": not implemented for dtype ", \
                          ::dl::dtype_name(dt));                                   \
    }                                                                              \
  } while (0)

// An index tensor's dtype (the front ends allow int64 and int32 only) as index_t.
#define DL_DISPATCH_INDEX(dt, ...)                                      \
  do {                                                                  \
    if ((dt) == ::dl::DType::Int64) { using index_t = int64_t; __VA_ARGS__; } \
    else { using index_t = int32_t; __VA_ARGS__; }                      \
  } while (0)

// The integer dtypes and bool (an integer tensor against a fractional number, say).
#define DL_DISPATCH_INTEGRAL_OR_BOOL(dt, opname, ...)                                     \
  do {                                                                                    \
    switch (dt) {                                                                         \
      DL_DTYPE_CASE(Bool, bool, __VA_ARGS__)                                              \
      DL_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                          \
      DL_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                          \
      DL_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                          \
      default: ::dl::fail(::dl::ErrorKind::Type, opname, ": not implemented for dtype ",       \
                          ::dl::dtype_name(dt));                                          \
    }                                                                                     \
  } while (0)

#define DL_DISPATCH_FLOAT(dt, opname, ...)                                        \
  do {                                                                             \
    switch (dt) {                                                                  \
      DL_DTYPE_CASE(Float32, float, __VA_ARGS__)                                   \
      DL_DTYPE_CASE(Float64, double, __VA_ARGS__)                                  \
      default: ::dl::fail(::dl::ErrorKind::Type, opname, ": expected a floating tensor, got ", \
                          ::dl::dtype_name(dt));                                   \
    }                                                                              \
  } while (0)
