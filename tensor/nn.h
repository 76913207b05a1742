// The neural-network ops of the engine (front ends: tensor/nn.cpp; CPU kernels:
// tensor/cpu/conv.cpp, pool.cpp, norm.cpp, loss.cpp), with no autograd.
//
//   dl::Conv2dOpts o;                    // stride 1, no padding, dilation 1, groups 1
//   o.padding[0] = o.padding[1] = 1;
//   dl::Tensor y = dl::conv2d(x, w, b, o);                 // (N, C, H, W) * (O, C, 3, 3)
//   dl::Pool2dOpts p;
//   p.kernel[0] = p.kernel[1] = 2;                          // stride defaults to the kernel
//   auto [v, idx] = dl::max_pool2d(y, p);
//   dl::Tensor loss = dl::cross_entropy(logits, labels, dl::Reduction::Mean, std::nullopt);
//
// Conventions are PyTorch's (torch.nn.functional), with 0-based class indices, pooling
// indices and padding_idx: the Lua layer converts from its 1-based ones. Images are
// NCHW (a 3-D (C, H, W) input is one unbatched image), conv weights OIHW. Integer
// inputs of the float-only ops are promoted to the default float dtype. The recorded
// versions are in autograd/nn.h; the gradient ops (conv2d_input_grad, ...) are ops of
// their own so that gradients of gradients are ordinary recorded ops.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>

#include "tensor/ops.h"

namespace dl {

struct Conv2dOpts {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};   // zeros on both sides
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

struct Pool2dOpts {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {0, 0};    // 0: the kernel size (PyTorch's stride=None)
  int64_t padding[2] = {0, 0};   // implicit -inf (max) or zero (avg) padding, at most kernel/2
  bool ceil_mode = false;        // output size rounded up: partial windows at the end
  bool count_include_pad = true; // avg_pool2d: padded zeros count in the divisor
};

enum class Reduction : uint8_t { None = 0, Mean = 1, Sum = 2 };

// ---- convolution (tensor/cpu/conv.cpp) ----------------------------------------------
// x (N, C, H, W) or (C, H, W); w (O, C / groups, kH, kW); bias (O) or undefined.
// Result (N, O, Ho, Wo), Ho = (H + 2 pad - dilation (kH - 1) - 1) / stride + 1.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o);
// The gradient of conv2d with respect to its input, for an output gradient g, as a
// tensor of `input_shape` (a transposed convolution: col2im of w^T g).
Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Shape& input_shape,
                         const Conv2dOpts& o);
// The gradient of conv2d with respect to its weight (g col(x)^T summed over the batch).
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Shape& weight_shape,
                          const Conv2dOpts& o);
// PyTorch's conv_transpose2d: w (C_in, C_out / groups, kH, kW), bias (C_out) or
// undefined; output_padding must be smaller than the stride.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o,
                        const int64_t output_padding[2]);
// The (N, C, H, W) or (C, H, W) shape conv_transpose2d gives (checks its arguments).
Shape conv_transpose2d_shape(const Tensor& x, const Tensor& w, const Conv2dOpts& o,
                             const int64_t output_padding[2]);

// ---- pooling (tensor/cpu/pool.cpp) -------------------------------------------------
// x (N, C, H, W) or (C, H, W). max_pool2d gives the maxima and, as int64, the index of
// each within its (H, W) plane (h * W + w), as PyTorch's return_indices (undefined
// without `with_indices`, which is faster); NaN wins.
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dOpts& o, bool with_indices = true);
// Zeros of `input_shape` with each g added at its index (the gradient of max_pool2d).
Tensor max_pool2d_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const Pool2dOpts& o);
// The adjoint of avg_pool2d: each g spread evenly over its window, as `input_shape`.
Tensor avg_pool2d_backward(const Tensor& g, const Shape& input_shape, const Pool2dOpts& o);
// Mean over H and W of (N, C, H, W): (N, C), or (N, C, 1, 1) with keepdim.
Tensor global_avg_pool2d(const Tensor& x, bool keepdim = false);

// ---- dropout (tensor/random.cpp) ------------------------------------------------------
// Training-mode dropout with the engine's Philox stream: y = x * mask, mask holding 0
// (probability p) or 1 / (1 - p), drawn as bernoulli(1 - p) draws them; returns y and
// that scaled mask, made in one pass (Backend::dropout). p = 1 gives zeros.
// (Evaluation mode, and p = 0, are the identity: autograd/nn.h's dropout skips this.)
std::pair<Tensor, Tensor> dropout(const Tensor& x, double p);

// ---- batch normalisation (tensor/cpu/norm.cpp) ---------------------------------------
// x (N, C, ...) normalised per channel (dim 1). Training: by the batch mean and biased
// variance; running_mean / running_var (C), when defined, are updated in place:
// r = (1 - momentum) r + momentum s, with the unbiased variance (as PyTorch). Eval: by
// the running statistics. weight and bias (C) are optional. Also returns the mean and
// 1 / sqrt(var + eps) used, per channel, for the backward.
struct BatchNormResult {
  Tensor y, mean, invstd;
};
BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var, bool training,
                           double momentum, double eps);

// ---- layer normalisation (tensor/cpu/norm.cpp, a row at a time) ---------------------------
// Each row of x over its last `normalized` dims (R rows of D elements) normalised by
// its mean and biased variance: (x - mean) / sqrt(var + eps), then times weight and
// plus bias (each of the normalised dims' shape; optional). Also returns the mean and
// 1 / sqrt(var + eps) per row (x's leading shape), for the backward.
struct LayerNormResult {
  Tensor y, mean, invstd;
};
LayerNormResult layer_norm(const Tensor& x, int normalized, const Tensor& weight, const Tensor& bias, double eps);
// The gradients from the output's, g, and the forward's x, mean and invstd (and weight,
// when there was one): the input's, and the weight's and bias's when wanted. Not
// recorded: autograd's derivative uses it when no gradient of the gradient is wanted.
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
LayerNormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Tensor& weight, bool want_weight, bool want_bias);

// ---- an LSTM step's gates (tensor/cpu/recurrent.cpp) ---------------------------------------
// The pointwise half of an LSTM step (fn::LstmGates): gates (..., 4H), the
// pre-activations x W_ih^T + b_ih + h W_hh^T + b_hh in PyTorch's order i, f, g, o, and the
// cell state c (..., H) give h' and c' (..., H).
std::pair<Tensor, Tensor> lstm_gates(const Tensor& gates, const Tensor& c);
// The gradients of gates and c from gh and gc, those of h' and c' (either undefined: no
// gradient). Not recorded: autograd's derivative uses it when no gradient of the gradient
// is wanted.
std::pair<Tensor, Tensor> lstm_gates_backward(const Tensor& gates, const Tensor& c, const Tensor& gh, const Tensor& gc);

// ---- embedding, loss -------------------------------------------------------------------
// Rows of weight (V, D) at integer `indices` of any shape: indices.shape + (D). The
// row `padding_idx` (negative counts from the end) gets no gradient (autograd/nn.h).
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx);
// Log-softmax cross-entropy of logits (N, C) against int target (N) of class indices
// in [0, C); rows whose target is ignore_index count for nothing (mean divides by the
// rows that count; all ignored gives NaN, as PyTorch). Stable for any finite logits.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     std::optional<int64_t> ignore_index);
// The number of rows of `target` that are not ignore_index (the divisor of Mean).
int64_t cross_entropy_count(const Tensor& target, std::optional<int64_t> ignore_index);
// index.shape + (classes) in dtype: 1 where the last dim's position equals the int64
// index, else 0 (cross_entropy's gradient; an index outside [0, classes) gives a row
// of zeros).
Tensor one_hot(const Tensor& index, int64_t classes, DType dtype);

}  // namespace dl
