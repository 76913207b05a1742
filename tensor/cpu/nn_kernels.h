// The CPU kernels of the neural-network ops behind dl::cpu_backend() (contracts in
// tensor/backend.h, "neural networks").
#pragma once
#include <optional>

#include "tensor/cpu/loops.h"
#include "tensor/nn.h"

namespace dl::cpu {

// tensor/cpu/conv.cpp
void conv2d(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o);
void conv2d_input_grad(const Tensor& gx, const Tensor& g, const Tensor& w, const Conv2dOpts& o);
void conv2d_weight_grad(const Tensor& gw, const Tensor& x, const Tensor& g, const Conv2dOpts& o);

// tensor/cpu/pool.cpp
void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dOpts& o);
void max_pool2d_backward(const Tensor& gx, const Tensor& g, const Tensor& indices);
void avg_pool2d(const Tensor& out, const Tensor& x, const Pool2dOpts& o);
void avg_pool2d_backward(const Tensor& gx, const Tensor& g, const Pool2dOpts& o);

// tensor/cpu/norm.cpp
void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x);
void channel_affine(const Tensor& out, const Tensor& x, const Tensor& scale, const Tensor& shift);
void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps);
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& g,
                         const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight);

// tensor/cpu/loss.cpp
void cross_entropy(const Tensor& loss, const Tensor& logits, const Tensor& target,
                   std::optional<int64_t> ignore_index);

}  // namespace dl::cpu
