// Fused optimizer updates: one pass over a parameter and its state, in place (the rules
// are in tensor/optim_functors.h). dlua.optim's SGD, Adam and AdamW step through these;
// the unfused rule, an op per term, read and wrote the parameter's size in memory five
// to nine times per step.
//
// Every tensor is a floating tensor of one shape on one device; the parameter and its
// state share a dtype, and the gradient (any layout) is converted to it. Nothing here is
// recorded for autograd: call them under no_grad, as an optimizer does.
#pragma once
#include "tensor/optim_functors.h"
#include "tensor/tensor.h"

namespace dl {

// buf: the momentum buffer (ignored when momentum is 0); when `s.first`, it is written,
// not read.
void sgd_step_(const Tensor& p, const Tensor& g, const Tensor& buf, const fn::SgdStep& s);
// vmax: AdamW/Adam's amsgrad maximum of v, or an undefined tensor without amsgrad.
void adam_step_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                const fn::AdamStep& s);

}  // namespace dl
