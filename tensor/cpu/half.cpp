// Conversions between float32 and the half dtypes over contiguous memory: what every
// op on a float16 or bfloat16 tensor runs twice (Note [Half-precision storage] in
// tensor/half.h). float16 uses the F16C instructions where the CPU has them (8 values
// per instruction, rounding to nearest even like float_to_half_bits, which the other
// CPUs run); bfloat16 is integer arithmetic the compiler vectorises.
#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/half.h"

namespace dl::cpu {

namespace {

// Note [Streaming stores for large conversions]
// A conversion's result larger than kStreamBytes is written with non-temporal stores:
// they go to memory without first reading each line of the destination into the cache
// (the read that an ordinary store of a line not in cache costs), and a result that
// large does not stay in cache for its reader anyway: bench/'s `half1e7` (1e7 floats
// to float16, 6 bytes of traffic an element) measures it (docs/performance.md, "Half
// precision: conversions"). Values are the same: only the way the bytes reach memory
// differs. The stores need aligned destinations: the elements before the first aligned
// one are converted one at a time, as the tail is.
constexpr int64_t kStreamBytes = int64_t(16) << 20;

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* s, uint16_t* d, int64_t n, bool stream) {
  int64_t i = 0;
  if (stream) {
    for (; i < n && reinterpret_cast<uintptr_t>(d + i) % 16 != 0; ++i) d[i] = float_to_half_bits(s[i]);
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), h);
    }
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
  for (; i < n; ++i) d[i] = float_to_half_bits(s[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* s, float* d, int64_t n, bool stream) {
  int64_t i = 0;
  if (stream) {
    for (; i < n && reinterpret_cast<uintptr_t>(d + i) % 32 != 0; ++i) d[i] = half_bits_to_float(s[i]);
    for (; i + 8 <= n; i += 8)
      _mm256_stream_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = half_bits_to_float(s[i]);
}

DL_TARGET_CLONES void f32_to_f16_plain(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_half_bits(s[i]);
}
DL_TARGET_CLONES void f16_to_f32_plain(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = half_bits_to_float(s[i]);
}
DL_TARGET_CLONES void f32_to_bf16(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bfloat16_bits(s[i]);
}
DL_TARGET_CLONES void bf16_to_f32(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = bfloat16_bits_to_float(s[i]);
}

// F16C is CPUID leaf 1's ECX bit 29, read directly: clang's __builtin_cpu_supports does
// not know "f16c" (the fuzz build, tests/fuzz/run.sh, is clang's). "avx" also says that
// the OS saves the vector registers the conversions use.
bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u) != 0;
  }();
  return yes;
}

// Runs f(begin, end) over [0, n) in parts, on OpenMP's threads when n is large.
template <typename F>
void in_parts(int64_t n, F f) {
  if (n < kParallelGrain) {
    f(0, n);
    return;
  }
  const int64_t parts = (n + kParallelGrain - 1) / kParallelGrain;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < parts; ++p) f(p * kParallelGrain, std::min(n, (p + 1) * kParallelGrain));
}

}  // namespace

void half_from_float(DType to, const float* s, void* d, int64_t n, bool vector) {
  auto* o = static_cast<uint16_t*>(d);
  if (to == DType::BFloat16) return in_parts(n, [&](int64_t a, int64_t b) { f32_to_bf16(s + a, o + a, b - a); });
  if (vector && has_f16c()) {
    const bool stream = 2 * n >= kStreamBytes;
    return in_parts(n, [&](int64_t a, int64_t b) { f32_to_f16_f16c(s + a, o + a, b - a, stream); });
  }
  in_parts(n, [&](int64_t a, int64_t b) { f32_to_f16_plain(s + a, o + a, b - a); });
}

void half_to_float(DType from, const void* s, float* d, int64_t n, bool vector) {
  const auto* i = static_cast<const uint16_t*>(s);
  if (from == DType::BFloat16) return in_parts(n, [&](int64_t a, int64_t b) { bf16_to_f32(i + a, d + a, b - a); });
  if (vector && has_f16c()) {
    const bool stream = 4 * n >= kStreamBytes;
    return in_parts(n, [&](int64_t a, int64_t b) { f16_to_f32_f16c(i + a, d + a, b - a, stream); });
  }
  in_parts(n, [&](int64_t a, int64_t b) { f16_to_f32_plain(i + a, d + a, b - a); });
}

bool convert_half(const Tensor& out, const Tensor& src) {
  const bool to_half = is_half(out.dtype()) && src.dtype() == DType::Float32;
  const bool from_half = is_half(src.dtype()) && out.dtype() == DType::Float32;
  if (!(to_half || from_half) || !out.is_contiguous() || !src.is_contiguous() ||
      out.numel() != src.numel())
    return false;
  if (to_half) half_from_float(out.dtype(), src.data<float>(), out.raw_data(), out.numel());
  else half_to_float(src.dtype(), src.raw_data(), out.data<float>(), out.numel());
  return true;
}

}  // namespace dl::cpu
