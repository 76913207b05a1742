// CPU kernels of the fused optimizer updates (tensor/optim.h): the rules of
// tensor/optim_functors.h over every element, in one pass. Operands may have any
// strides (a Linear layer's weight gradient is a transposed view); contiguous runs
// take a plain indexed loop.
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

#include <type_traits>

namespace dl::cpu {

namespace {

template <typename T, int N>
T& at(const std::array<char*, N>& p, const std::array<int64_t, N>& s, int k, int64_t i) {
  return *reinterpret_cast<T*>(p[k] + i * s[k]);
}

// Note [Optimizer steps on two threads]
// An update reads and writes several operands per element, and a small model's
// parameters sit in L2: the 784-256-10 MLP's SGD step on its 200,704-element weight
// was a tenth of its epoch on one thread, while the other waited. So updates split
// from kOptimGrain elements, far below kParallelGrain, and are throttled like matmul's
// split products, since a region waits for a preempted thread whatever its size.
constexpr int64_t kOptimGrain = int64_t(1) << 15;
RegionThrottle g_sgd_throttle, g_adam_throttle;

}  // namespace

namespace {

// Note [Optimizer updates for each vector width]
// An update on contiguous operands runs in a loop built for AVX-512, AVX2 and the
// baseline (DL_TARGET_CLONES in loops.h: no fused multiply-adds, so each version rounds
// every element as the others do). A small model's parameters stay in the second-level
// cache between steps (Note [Optimizer steps on two threads]), where the baseline's
// four floats a vector made the update compute-bound (bench/ `sgdstep` and `adamstep`;
// docs/performance.md, "Optimizer updates").
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov, typename T>
[[gnu::always_inline]] inline void sgd_dense(const fn::SgdStep::Consts<T>& c, T* __restrict pp,
                                             const T* __restrict gp, T* bp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) fn::SgdStep::apply<kDecay, kMomentum, kFirst, kNesterov>(c, pp[i], gp[i], bp[i]);
}

// The rule's switches as bits: 1 decay, 2 momentum, 4 first, 8 nesterov.
template <typename T, int kFlags = 0>
[[gnu::always_inline]] inline void sgd_dense_flags(int flags, const fn::SgdStep::Consts<T>& c, T* pp, const T* gp,
                                                   T* bp, int64_t n) {
  if constexpr (kFlags < 16) {
    if (flags != kFlags) return sgd_dense_flags<T, kFlags + 1>(flags, c, pp, gp, bp, n);
    sgd_dense<(kFlags & 1) != 0, (kFlags & 2) != 0, (kFlags & 4) != 0, (kFlags & 8) != 0>(c, pp, gp, bp, n);
  }
}

// (An overload per dtype: target_clones takes no templates.)
DL_TARGET_CLONES void sgd_dense_of(int flags, const fn::SgdStep::Consts<float>& c, float* pp, const float* gp,
                                   float* bp, int64_t n) {
  sgd_dense_flags<float>(flags, c, pp, gp, bp, n);
}
DL_TARGET_CLONES void sgd_dense_of(int flags, const fn::SgdStep::Consts<double>& c, double* pp, const double* gp,
                                   double* bp, int64_t n) {
  sgd_dense_flags<double>(flags, c, pp, gp, bp, n);
}

template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov, typename T>
void sgd_loop(const StridedOperands<3>& ops, const fn::SgdStep::Consts<T> c) {
  using Step = fn::SgdStep;
  constexpr int kFlags = (kDecay ? 1 : 0) | (kMomentum ? 2 : 0) | (kFirst ? 4 : 0) | (kNesterov ? 8 : 0);
  parallel_range_throttled(g_sgd_throttle, ops.numel, kOptimGrain, [&](int64_t b, int64_t e) {
    for_each_run<3>(ops, b, e, [&](const std::array<char*, 3>& ptr, const std::array<int64_t, 3>& s,
                                   int64_t n) {
      const int64_t z = int64_t(sizeof(T));
      if (s[0] == z && s[1] == z && s[2] == z) {
        T* pp = reinterpret_cast<T*>(ptr[0]);
        // Without momentum, buf is p itself (never written): not a restrict pointer.
        T* bp = kMomentum ? reinterpret_cast<T*>(ptr[2]) : pp;
        sgd_dense_of(kFlags, c, pp, reinterpret_cast<const T*>(ptr[1]), bp, n);
      } else {
        for (int64_t i = 0; i < n; ++i)
          Step::apply<kDecay, kMomentum, kFirst, kNesterov>(c, at<T, 3>(ptr, s, 0, i), at<T, 3>(ptr, s, 1, i),
                                                           at<T, 3>(ptr, s, 2, i));
      }
    });
  });
}

// Adam's contiguous loop, built as sgd_dense_of is; xp is null without amsgrad. The rule
// is copied first: its fields read through the reference could be any of the operands'
// memory, as far as the compiler knows, and the loop was not vectorised.
template <typename T>
[[gnu::always_inline]] inline void adam_dense(const fn::AdamStep& rule, T* pp, const T* gp,
                                              T* mp, T* vp, T* xp, int64_t n) {
  const fn::AdamStep f = rule;
  if (xp) {
    for (int64_t i = 0; i < n; ++i) f(pp[i], gp[i], mp[i], vp[i], &xp[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) f(pp[i], gp[i], mp[i], vp[i], static_cast<T*>(nullptr));
  }
}
DL_TARGET_CLONES void adam_dense_of(const fn::AdamStep& f, float* pp, const float* gp, float* mp, float* vp,
                                    float* xp, int64_t n) {
  adam_dense(f, pp, gp, mp, vp, xp, n);
}
DL_TARGET_CLONES void adam_dense_of(const fn::AdamStep& f, double* pp, const double* gp, double* mp, double* vp,
                                    double* xp, int64_t n) {
  adam_dense(f, pp, gp, mp, vp, xp, n);
}

// f(std::bool_constant<flag>{}): a run-time switch made a compile-time one.
template <typename F>
void with_flag(bool flag, F&& f) {
  if (flag) f(std::true_type{});
  else f(std::false_type{});
}

}  // namespace

void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const fn::SgdStep& f) {
  StridedOperands<3> ops = make_operands<3>({&p, &g, &buf});
  DL_DISPATCH_FLOAT(p.dtype(), "sgd_step", {
    using T = scalar_t;
    const auto c = f.consts<T>();
    with_flag(f.weight_decay != 0, [&](auto decay) {
      with_flag(f.momentum != 0, [&](auto momentum) {
        with_flag(f.first, [&](auto first) {
          with_flag(f.nesterov, [&](auto nesterov) {
            sgd_loop<decay(), momentum(), first(), nesterov()>(ops, c);
          });
        });
      });
    });
  });
}

void adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const fn::AdamStep& f) {
  const bool ams = vmax.defined();
  // Without amsgrad the fifth operand walks v again and is not used.
  StridedOperands<5> ops = make_operands<5>({&p, &g, &m, &v, ams ? &vmax : &v});
  DL_DISPATCH_FLOAT(p.dtype(), "adam_step", {
    using T = scalar_t;
    parallel_range_throttled(g_adam_throttle, ops.numel, kOptimGrain, [&](int64_t b, int64_t e) {
      for_each_run<5>(ops, b, e, [&](const std::array<char*, 5>& ptr, const std::array<int64_t, 5>& s,
                                     int64_t n) {
        const int64_t z = int64_t(sizeof(T));
        if (s[0] == z && s[1] == z && s[2] == z && s[3] == z && s[4] == z) {
          adam_dense_of(f, reinterpret_cast<T*>(ptr[0]), reinterpret_cast<const T*>(ptr[1]),
                        reinterpret_cast<T*>(ptr[2]), reinterpret_cast<T*>(ptr[3]),
                        ams ? reinterpret_cast<T*>(ptr[4]) : nullptr, n);
        } else {
          for (int64_t i = 0; i < n; ++i)
            f(at<T, 5>(ptr, s, 0, i), at<T, 5>(ptr, s, 1, i), at<T, 5>(ptr, s, 2, i), at<T, 5>(ptr, s, 3, i),
              ams ? &at<T, 5>(ptr, s, 4, i) : nullptr);
        }
      });
    });
  });
}

}  // namespace dl::cpu
