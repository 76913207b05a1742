// The neural-network ops of tensor/nn.h, recorded (namespace dl::ag, see autograd.h).
//
//   dl::ag::GradScope scope;
//   dl::Tensor w = dl::ag::watch(weight);
//   dl::Tensor h = dl::ag::conv2d(x, w, b, opts);               // (N, O, Ho, Wo)
//   dl::Tensor p = dl::ag::max_pool2d(h, pool).first;
//   dl::Tensor l = dl::ag::cross_entropy(dl::ag::flatten(p, 1), labels,
//                                        dl::Reduction::Mean, std::nullopt);
//   dl::Tensor gw = dl::ag::grad({l}, {}, {w}, /*create_graph=*/true)[0];
//
// Every derivative here is written with recorded ops, so gradients of gradients work:
// conv2d's gradients are the ops conv2d_input_grad and conv2d_weight_grad, whose own
// derivatives are convolutions again; the pools' gradients are the ops
// max_pool2d_backward and avg_pool2d_backward; batch_norm and cross_entropy have fused
// forwards and composite (recorded) backwards.
#pragma once
#include <optional>
#include <utility>

#include "autograd/autograd.h"
#include "tensor/nn.h"

namespace dl::ag {

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o);
Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Shape& input_shape, const Conv2dOpts& o);
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Shape& weight_shape, const Conv2dOpts& o);
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o,
                        const int64_t output_padding[2]);

// Values and indices; without `with_indices` the indices are only computed (and then
// returned) when the op is recorded, since its gradient needs them.
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dOpts& o, bool with_indices = true);
Tensor max_pool2d_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const Pool2dOpts& o);
Tensor avg_pool2d_backward(const Tensor& g, const Shape& input_shape, const Pool2dOpts& o);
// Mean over H and W: (N, C) (or (N, C, 1, 1) with keepdim) from (N, C, H, W).
Tensor global_avg_pool2d(const Tensor& x, bool keepdim = false);

// x itself when not training or p == 0 (evaluation mode is the identity).
Tensor dropout(const Tensor& x, double p, bool training = true);

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps);

Tensor layer_norm(const Tensor& x, int normalized, const Tensor& weight, const Tensor& bias, double eps);

// h' and c' of an LSTM step from the gates' pre-activations (..., 4H) and c (..., H)
// (tensor/nn.h); its backward is one fused kernel unless a gradient of it is wanted.
std::pair<Tensor, Tensor> lstm_gates(const Tensor& gates, const Tensor& c);

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     std::optional<int64_t> ignore_index);

}  // namespace dl::ag
