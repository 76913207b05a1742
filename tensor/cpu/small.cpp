// dl::small (tensor/small.h): the pointwise functors over small contiguous buffers.
#include "tensor/small.h"

#include "tensor/cpu/loops.h"
#include "tensor/functors.h"

namespace dl::small {

namespace {

// One loop per (functor, dtype): short enough that the dispatch costs more than it.
// Each step pattern has its loop, which the compiler vectorises. A one-element operand
// beside a dense one is read once before the loop, as the general loops read a
// broadcast operand (tensor/cpu/loops.h), in case out is the buffer it lies in; with
// both operands one element, the value is computed once and written n times (the
// callers pass n > 1 only for a fresh out, where reading again would give the same).
// Always inlined: a loop left out of line is compiled once, for the baseline x86-64, and
// the AVX2 clones below would call that (the two-operand loops were: SSE's four lanes
// ran dl.compile's fused blocks at half speed).
template <typename Out, typename T, typename F>
[[gnu::always_inline]] inline void loop2(void* out, const void* a, int sa, const void* b, int sb,
                                         int64_t n, F f) {
  Out* o = static_cast<Out*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = Out(f(x[i], y[i]));
  } else if (sa == 1) {
    const T yv = *y;
    for (int64_t i = 0; i < n; ++i) o[i] = Out(f(x[i], yv));
  } else if (sb == 1) {
    const T xv = *x;
    for (int64_t i = 0; i < n; ++i) o[i] = Out(f(xv, y[i]));
  } else {
    const Out v = Out(f(*x, *y));
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

template <typename Out, typename T, typename F>
[[gnu::always_inline]] inline void loop1(void* out, const void* a, int64_t n, F f) {
  Out* o = static_cast<Out*>(out);
  const T* x = static_cast<const T*>(a);
  for (int64_t i = 0; i < n; ++i) o[i] = Out(f(x[i]));
}

bool served(DType dt) { return dt == DType::Float32 || dt == DType::Float64; }

}  // namespace

// Note [Small loops for AVX2]
// Built for the baseline x86-64 (SSE2), a float32 tanh over 16 elements took 730
// instructions, its double-precision polynomial two lanes at a time; the loops are also
// built for AVX2 (four lanes), picked once at load time where the CPU has it. Only AVX2,
// not FMA: fused multiply-adds would round differently from the general loops, and lane
// width alone changes no element's bits (tests/cpp/test_pointwise.cpp compares them).
// Not AVX-512: short bursts of 512-bit code cost more time than they save; AVX-512
// versions of these loops made the `chain` row slower for 1% fewer instructions
// (docs/performance.md, "Measurements behind the code"). dl.compile's fused groups run
// these loops too, over blocks of 2,048 elements. Where the loader has no ifunc (not
// glibc ELF), the one baseline build serves.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && defined(__GLIBC__)
#define DL_SMALL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DL_SMALL_CLONES
#endif

namespace {

// The bodies, inlined into each entry point below and so built for each of its targets.
[[gnu::always_inline]] inline bool unary_body(Op op, DType dt, void* out, const void* x, int64_t n) {
  if (!served(dt)) return false;
  switch (op) {
#define DL_UNARY(Name, lua, Fn, flags)                                                 \
    case Op::Name:                                                                     \
      if constexpr (((flags) & kIntOnly) != 0) return false;                           \
      if (op == Op::Logical_not) {                                                     \
        if (dt == DType::Float32) loop1<bool, float>(out, x, n, fn::Fn{});             \
        else loop1<bool, double>(out, x, n, fn::Fn{});                                 \
      } else {                                                                         \
        if (dt == DType::Float32) loop1<float, float>(out, x, n, fn::Fn{});            \
        else loop1<double, double>(out, x, n, fn::Fn{});                               \
      }                                                                                \
      return true;
#include "tensor/ops.def"
    default: return false;
  }
}

[[gnu::always_inline]] inline bool binary_body(Op op, DType dt, void* out, const void* a, int a_step,
                                               const void* b, int b_step, int64_t n) {
  if (!served(dt)) return false;
  switch (op) {
#define DL_BINARY(Name, lua, Fn, flags)                                                \
    case Op::Name:                                                                     \
      if constexpr (((flags) & kIntOnly) != 0) return false;                           \
      if (dt == DType::Float32) loop2<float, float>(out, a, a_step, b, b_step, n, fn::Fn{}); \
      else loop2<double, double>(out, a, a_step, b, b_step, n, fn::Fn{});              \
      return true;
#define DL_COMPARE(Name, lua, Fn)                                                      \
    case Op::Name:                                                                     \
      if (dt == DType::Float32) loop2<bool, float>(out, a, a_step, b, b_step, n, fn::Fn{}); \
      else loop2<bool, double>(out, a, a_step, b, b_step, n, fn::Fn{});                \
      return true;
#include "tensor/ops.def"
    default: return false;
  }
}

// The general kernels convert the number to the tensor's dtype first
// (cpu::binary_scalar); so does this.
template <typename Binary>
bool with_scalar(Binary binary, Op op, DType dt, void* out, const void* a, double s, bool scalar_first,
                 int64_t n) {
  if (dt == DType::Float32) {
    float v = fn::convert<float>(s);
    return scalar_first ? binary(op, dt, out, &v, 0, a, 1, n) : binary(op, dt, out, a, 1, &v, 0, n);
  }
  if (dt == DType::Float64)
    return scalar_first ? binary(op, dt, out, &s, 0, a, 1, n) : binary(op, dt, out, a, 1, &s, 0, n);
  return false;
}

}  // namespace

DL_SMALL_CLONES bool unary(Op op, DType dt, void* out, const void* x, int64_t n) {
  return unary_body(op, dt, out, x, n);
}

DL_SMALL_CLONES bool binary(Op op, DType dt, void* out, const void* a, int a_step, const void* b,
                            int b_step, int64_t n) {
  return binary_body(op, dt, out, a, a_step, b, b_step, n);
}

bool binary_scalar(Op op, DType dt, void* out, const void* a, double s, bool scalar_first, int64_t n) {
  return with_scalar(binary, op, dt, out, a, s, scalar_first, n);
}

// Note [Blocks for AVX-512]
// dl.compile's fused groups run blocks of up to 2,048 elements (compile/plan.cpp), not
// the short bursts of inline values that Note [Small loops for AVX2] weighs: these run
// the same bodies built for AVX-512 as well, as the eager kernels' general and wide
// loops are (DL_TARGET_CLONES: no fused multiply-adds, so the same bits): a compiled
// MLP step's tanh ran slower in the AVX2 loop than eager's in its AVX-512 one (bench/
// `mlpstepc`; docs/performance.md, "Measurements behind the code").
DL_TARGET_CLONES bool block_unary(Op op, DType dt, void* out, const void* x, int64_t n) {
  return unary_body(op, dt, out, x, n);
}

DL_TARGET_CLONES bool block_binary(Op op, DType dt, void* out, const void* a, int a_step, const void* b,
                                   int b_step, int64_t n) {
  return binary_body(op, dt, out, a, a_step, b, b_step, n);
}

bool block_binary_scalar(Op op, DType dt, void* out, const void* a, double s, bool scalar_first, int64_t n) {
  return with_scalar(block_binary, op, dt, out, a, s, scalar_first, n);
}

}  // namespace dl::small
