// The optimizers' update rules for one element, written once for the host and the
// device (docs/design.md, "Kernel math written once"): tensor/cpu/optim.cpp and gpu/optim.cu run
// them over whole tensors in one pass (tensor/optim.h). The arithmetic follows PyTorch's
// torch.optim (1.13, single-tensor path) step by step in the tensor's dtype, so that an update
// matches PyTorch's to float rounding (tests/lua/test_optim.lua).
#pragma once
#include <cmath>

#include "tensor/functors.h"

namespace dl::fn {

// SGD: d = g + wd p; buf = d on the first step, else buf = mom buf + (1 - dampening) d;
// d = d + mom buf (nesterov) or buf (momentum > 0); p = p - lr d.
struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first;  // first: buf holds nothing yet and is written

  // The constants in the tensor's type, converted once.
  template <typename T>
  struct Consts {
    T neg_lr, momentum, keep, weight_decay;  // keep = 1 - dampening
  };
  template <typename T>
  DL_HD Consts<T> consts() const {
    return {T(-lr), T(momentum), T(1 - dampening), T(weight_decay)};
  }

  // One element with the rule's switches fixed at compile time: the CPU kernel runs a
  // branch-free, vectorised loop per combination.
  template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov, typename T>
  DL_HD static void apply(const Consts<T>& c, T& p, T g, T& buf) {
    T d = g;
    if constexpr (kDecay) d = d + c.weight_decay * p;
    if constexpr (kMomentum) {
      T b;
      if constexpr (kFirst) b = d;
      else b = T(buf * c.momentum) + c.keep * d;
      buf = b;
      if constexpr (kNesterov) d = d + c.momentum * b;
      else d = b;
    }
    p = p + c.neg_lr * d;
  }

  // The same with the switches read at run time (the CUDA kernel, where a branch that
  // every thread takes alike costs nothing).
  template <typename T>
  DL_HD void operator()(const Consts<T>& c, T& p, T g, T& buf) const {
    T d = g;
    if (weight_decay != 0) d = d + c.weight_decay * p;
    if (momentum != 0) {
      T b = first ? d : T(T(buf * c.momentum) + c.keep * d);
      buf = b;
      d = nesterov ? T(d + c.momentum * b) : b;
    }
    p = p + c.neg_lr * d;
  }
};

// Adam and AdamW: g = g + wd p (Adam's L2 decay) or p = p (1 - lr wd) (AdamW's decoupled
// decay); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; with amsgrad vmax = max(vmax, v)
// and v replaced by vmax below; p = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps),
// where bc1 = 1 - b1^t and bc2 = 1 - b2^t at step t (1-based).
struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1, bias_correction2_sqrt;  // 1 - b1^t, sqrt(1 - b2^t)
  bool decoupled;

  template <typename T>
  DL_HD void operator()(T& p, T g, T& m, T& v, T* vmax) const {
    if (weight_decay != 0) {
      if (decoupled) p = p * T(1 - lr * weight_decay);
      else g = g + T(weight_decay) * p;
    }
    m = T(m * T(beta1)) + T(1 - beta1) * g;
    v = T(v * T(beta2)) + T(1 - beta2) * T(g * g);
    T s = v;
    if (vmax) {
      if (*vmax == *vmax && !(*vmax >= v)) *vmax = v;  // torch.maximum: a NaN on either side wins
      s = *vmax;
    }
    T denom = T(std::sqrt(s) / T(bias_correction2_sqrt)) + T(eps);
    p = p + T(-(lr / bias_correction1)) * T(m / denom);
  }
};

}  // namespace dl::fn
