// The per-element math of layer normalisation, written once for the CPU kernels
// (tensor/cpu/norm.cpp) and the CUDA ones (gpu/nn.cu) (docs/design.md, "Kernel math written once").
// A row's statistics (its mean and 1 / sqrt(var + eps); the means of g w and of g w xhat for the
// backward) are computed by each kernel in double and passed in as T.
#pragma once
#include "tensor/functors.h"

namespace dl::fn {

// y = (x - mean) invstd w + b.
struct LayerNormY {
  template <typename T>
  DL_HD T operator()(T x, T mean, T invstd, T w, T b) const { return (x - mean) * invstd * w + b; }
};

// The input's gradient: invstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g w.
struct LayerNormDx {
  template <typename T>
  DL_HD T operator()(T gw, T xhat, T invstd, T mean_gw, T mean_gwx) const {
    return invstd * (gw - mean_gw - xhat * mean_gwx);
  }
};

}  // namespace dl::fn
