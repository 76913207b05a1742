// The C ABI of the neural-network ops (declared in bindings/capi.h, "neural networks";
// the engine side is tensor/nn.h, recorded through autograd/nn.h).
//
// Conventions are those of Note [The C ABI] in capi.cpp: handles, 0 / -1 on failure,
// and Lua's 1-based numbering converted here with messages in Lua's terms: class
// labels, embedding indices, padding_idx and max_pool2d's indices are 1-based. (h, w)
// pairs travel as two ints so that a call allocates nothing on the Lua side.
#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include "autograd/autograd.h"
#include "autograd/nn.h"
#include "bindings/capi.h"
#include "bindings/guard.h"
#include "bindings/arenas.h"
#include "bindings/handles.h"
#include "bindings/compile.h"
#include "bindings/value.h"
#include "tensor/optim.h"

using dl::DType;
using dl::ErrorKind;
using dl::Op;
using dl::Scalar;
using dl::Shape;
using dl::Tensor;
using dl::fail;
namespace ag = dl::ag;
using dl::bind::get;
using dl::bind::guard_handle;
using dl::bind::guard_status;

namespace {

Shape shape_arg(const int64_t* sizes, int n, const char* op) {
  if (n < 0 || n > dl::kMaxDims)
    fail(ErrorKind::Value, op, ": at most ", dl::kMaxDims, " dimensions are supported, got ", n);
  if (n > 0 && !sizes) fail(ErrorKind::Value, op, ": no sizes given");
  return Shape(sizes, n);
}

// The tensor behind an optional handle (0: none).
Tensor optional(uint64_t id, const char* op) { return id ? get(id, op) : Tensor(); }

dl::Conv2dOpts conv_opts(int sh, int sw, int ph, int pw, int dh, int dw, int groups) {
  dl::Conv2dOpts o;
  o.stride[0] = sh;
  o.stride[1] = sw;
  o.padding[0] = ph;
  o.padding[1] = pw;
  o.dilation[0] = dh;
  o.dilation[1] = dw;
  o.groups = groups;
  return o;
}

dl::Pool2dOpts pool_opts(int kh, int kw, int sh, int sw, int ph, int pw, int ceil_mode, int count_include_pad) {
  dl::Pool2dOpts o;
  o.kernel[0] = kh;
  o.kernel[1] = kw;
  o.stride[0] = sh;
  o.stride[1] = sw;
  o.padding[0] = ph;
  o.padding[1] = pw;
  o.ceil_mode = ceil_mode != 0;
  o.count_include_pad = count_include_pad != 0;
  return o;
}

void check_int(const Tensor& t, const char* op, const char* what) {
  DL_CHECK_KIND(Type, t.dtype() == DType::Int64 || t.dtype() == DType::Int32, op, ": expected int64 or int32 ",
                what, ", got ", dl::dtype_name(t.dtype()));
}

// The value of a one-element integer tensor on any device, exactly (item() is a double,
// which cannot hold every int64, and converting one past 2^63 back is undefined).
int64_t int_item(const Tensor& t) {
  Tensor host = dl::empty(Shape{}, DType::Int64);
  dl::copy_(host, t);
  return *host.data<int64_t>();
}

// The smallest and largest value of a non-empty integer tensor, leaving out the
// entries equal to `skip` ({1, 1} when nothing is left).
std::pair<int64_t, int64_t> int_range(const Tensor& t, std::optional<int64_t> skip) {
  dl::Unobserved check;   // not an op of an exported graph (tensor/observe.h)
  if (!skip)
    return {int_item(dl::reduce(Op::Amin, t, {}, false)), int_item(dl::reduce(Op::Amax, t, {}, false))};
  Tensor keep = dl::compare(Op::Ne, t, Scalar::integer(*skip));
  if (dl::reduce(Op::Any, keep, {}, false).item() == 0) return {1, 1};
  // Left-out entries are replaced by a bound that cannot win.
  Tensor big = dl::full(Shape{}, Scalar::integer(INT32_MAX), t.dtype(), t.device());
  Tensor small = dl::full(Shape{}, Scalar::integer(INT32_MIN), t.dtype(), t.device());
  return {int_item(dl::reduce(Op::Amin, dl::where(keep, t, big), {}, false)),
          int_item(dl::reduce(Op::Amax, dl::where(keep, t, small), {}, false))};
}

// 1-based indices in [1, size] made 0-based; `what` names them in the error.
Tensor from_lua_indices(const Tensor& t, int64_t size, const char* op, const char* what, const char* range) {
  if (t.numel() > 0) {
    auto [lo, hi] = int_range(t, std::nullopt);
    if (lo < 1 || hi > size)
      fail(ErrorKind::Index, op, ": ", what, " ", lo < 1 ? lo : hi, " is out of range for ", range,
           " (expected 1..", size, ")");
  }
  return dl::binary(Op::Sub, t, Scalar::integer(1));
}

}  // namespace

namespace dl::bind {

Tensor cross_entropy_labels(const Shape& logits, const Tensor& t, int reduction, int has_ignore,
                            int64_t ignore_index, std::optional<int64_t>* ignore) {
  const char* op = "cross_entropy";
  DL_CHECK(reduction >= 0 && reduction <= 2, op, ": unknown reduction ", reduction, " (0 none, 1 mean, 2 sum)");
  DL_CHECK(logits.size() == 2, op, ": expected logits of shape (N, C), got shape ", logits);
  check_int(t, op, "class labels");
  if (has_ignore) *ignore = ignore_index;
  const int64_t c = logits[1];
  if (t.numel() > 0) {
    auto [lo, hi] = int_range(t, *ignore);
    if (lo < 1 || hi > c)
      fail(ErrorKind::Index, op, ": class label ", lo < 1 ? lo : hi, " is out of range for ", c,
           " classes (labels are 1-based: 1..", c, ")");
  }
  // To 0-based. Both sides wrap around alike (integer tensors do), so a label equal to
  // the ignore index still matches it after the shift, even at INT64_MIN.
  if (*ignore) *ignore = int64_t(uint64_t(**ignore) - 1);
  return dl::binary(Op::Sub, t, Scalar::integer(1));
}

}  // namespace dl::bind

extern "C" {

// ---- convolution --------------------------------------------------------------------------

uint64_t dl_conv2d(uint64_t x, uint64_t weight, uint64_t bias, int stride_h, int stride_w, int pad_h, int pad_w,
                   int dilation_h, int dilation_w, int groups) {
  return guard_handle([&] {
    return ag::conv2d(get(x, "conv2d"), get(weight, "conv2d"), optional(bias, "conv2d"),
                      conv_opts(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups));
  });
}

uint64_t dl_conv2d_input_grad(uint64_t grad, uint64_t weight, const int64_t* input_shape, int ndim, int stride_h,
                              int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups) {
  return guard_handle([&] {
    const char* op = "conv2d_input_grad";
    return ag::conv2d_input_grad(get(grad, op), get(weight, op), shape_arg(input_shape, ndim, op),
                                 conv_opts(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups));
  });
}

uint64_t dl_conv2d_weight_grad(uint64_t x, uint64_t grad, const int64_t* weight_shape, int ndim, int stride_h,
                               int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups) {
  return guard_handle([&] {
    const char* op = "conv2d_weight_grad";
    return ag::conv2d_weight_grad(get(x, op), get(grad, op), shape_arg(weight_shape, ndim, op),
                                  conv_opts(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups));
  });
}

uint64_t dl_conv_transpose2d(uint64_t x, uint64_t weight, uint64_t bias, int stride_h, int stride_w, int pad_h,
                             int pad_w, int out_pad_h, int out_pad_w, int dilation_h, int dilation_w, int groups) {
  return guard_handle([&] {
    const char* op = "conv_transpose2d";
    const int64_t out_pad[2] = {out_pad_h, out_pad_w};
    return ag::conv_transpose2d(get(x, op), get(weight, op), optional(bias, op),
                                conv_opts(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups), out_pad);
  });
}

// ---- pooling ------------------------------------------------------------------------------

int dl_max_pool2d(uint64_t x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w,
                  int ceil_mode, uint64_t* out2) {
  if (out2) out2[0] = out2[1] = 0;
  return guard_status([&] {
    DL_CHECK(out2 != nullptr, "max_pool2d: no room for the results");
    auto r = ag::max_pool2d(get(x, "max_pool2d"),
                            pool_opts(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, ceil_mode, 1));
    Tensor idx = dl::binary(Op::Add, r.second, Scalar::integer(1));
    dl::bind::handles_new({r.first, idx}, out2);
  });
}

uint64_t dl_max_pool2d_values(uint64_t x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h,
                              int pad_w, int ceil_mode) {
  return guard_handle([&] {
    return ag::max_pool2d(get(x, "max_pool2d"),
                          pool_opts(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, ceil_mode, 1),
                          /*with_indices=*/false)
        .first;
  });
}

uint64_t dl_max_pool2d_backward(uint64_t grad, uint64_t indices, const int64_t* input_shape, int ndim) {
  return guard_handle([&] {
    const char* op = "max_pool2d_backward";
    Shape s = shape_arg(input_shape, ndim, op);
    const Tensor& idx = get(indices, op);
    check_int(idx, op, "indices");
    DL_CHECK(s.size() >= 2, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ", s);
    checked_numel(s, op);
    int64_t plane = 0;
    if (__builtin_mul_overflow(s[s.size() - 2], s[s.size() - 1], &plane))  // an empty shape's dims
      fail(ErrorKind::Memory, op, ": input shape ", s, " has too many elements per plane");
    return ag::max_pool2d_backward(get(grad, op), from_lua_indices(idx, plane, op, "index", "a plane"), s);
  });
}

uint64_t dl_avg_pool2d(uint64_t x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w,
                       int ceil_mode, int count_include_pad) {
  return guard_handle([&] {
    return ag::avg_pool2d(get(x, "avg_pool2d"), pool_opts(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w,
                                                          ceil_mode, count_include_pad));
  });
}

uint64_t dl_avg_pool2d_backward(uint64_t grad, const int64_t* input_shape, int ndim, int kernel_h, int kernel_w,
                                int stride_h, int stride_w, int pad_h, int pad_w, int ceil_mode,
                                int count_include_pad) {
  return guard_handle([&] {
    const char* op = "avg_pool2d_backward";
    return ag::avg_pool2d_backward(get(grad, op), shape_arg(input_shape, ndim, op),
                                   pool_opts(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, ceil_mode,
                                             count_include_pad));
  });
}

uint64_t dl_global_avg_pool2d(uint64_t x, int keepdim) {
  return guard_handle([&] { return ag::global_avg_pool2d(get(x, "global_avg_pool2d"), keepdim != 0); });
}

// ---- dropout, batch normalisation ------------------------------------------------------------

uint64_t dl_dropout(uint64_t x, double p, int training) {
  return guard_handle([&] { return ag::dropout(get(x, "dropout"), p, training != 0); });
}

uint64_t dl_batch_norm(uint64_t x, uint64_t weight, uint64_t bias, uint64_t running_mean, uint64_t running_var,
                       int training, double momentum, double eps) {
  return guard_handle([&] {
    const char* op = "batch_norm";
    return ag::batch_norm(get(x, op), optional(weight, op), optional(bias, op), optional(running_mean, op),
                          optional(running_var, op), training != 0, momentum, eps);
  });
}

uint64_t dl_layer_norm(uint64_t x, int normalized, uint64_t weight, uint64_t bias, double eps) {
  return guard_handle([&] {
    const char* op = "layer_norm";
    return ag::layer_norm(get(x, op), normalized, optional(weight, op), optional(bias, op), eps);
  });
}

int dl_lstm_gates(uint64_t gates, uint64_t c, uint64_t* out2) {
  if (out2) out2[0] = out2[1] = 0;
  return guard_status([&] {
    const char* op = "lstm_gates";
    DL_CHECK(out2 != nullptr, op, ": no room for the results");
    auto [h, c2] = ag::lstm_gates(get(gates, op), get(c, op));
    dl::bind::handles_new({h, c2}, out2);
  });
}

// ---- embedding, loss ------------------------------------------------------------------------------

uint64_t dl_embedding(uint64_t weight, uint64_t indices, int64_t padding_idx) {
  return guard_handle([&] {
    const char* op = "embedding";
    const Tensor& w = get(weight, op);
    const Tensor& idx = get(indices, op);
    DL_CHECK(w.dim() == 2, op, ": expected a 2-D weight (num_embeddings, embedding_dim), got shape ", w.shape());
    check_int(idx, op, "indices");
    const int64_t v = w.size(0);
    std::optional<int64_t> pad;
    if (padding_idx != 0) {
      DL_CHECK_KIND(Index, padding_idx >= -v && padding_idx <= v, op, ": padding_idx ", padding_idx,
                    " is out of range for ", v, " embeddings (expected 1..", v, " or -", v, "..-1)");
      pad = padding_idx > 0 ? padding_idx - 1 : padding_idx + v;
    }
    return ag::embedding(w, from_lua_indices(idx, v, op, "index", "the embeddings"), pad);
  });
}

uint64_t dl_cross_entropy(uint64_t logits, uint64_t target, int reduction, int has_ignore, int64_t ignore_index) {
  return guard_handle([&] {
    const Tensor& l = get(logits, "cross_entropy");
    std::optional<int64_t> ignore;
    Tensor labels = dl::bind::cross_entropy_labels(l.shape(), get(target, "cross_entropy"), reduction, has_ignore,
                                                   ignore_index, &ignore);
    return ag::cross_entropy(l, labels, dl::Reduction(reduction), ignore);
  });
}

int dl_cross_entropy_value(const struct dl_tensor* logits, const struct dl_tensor* target, int reduction,
                           int has_ignore, int64_t ignore_index, struct dl_tensor* out) {
  if (dl::compile::current() && !has_ignore) {
    const int st = dl::bind::defer_cross_entropy(logits, target, reduction, out);
    if (st != -2) return st;
  }
  return dl::bind::guard_value(out, [&] {
    const Tensor l = dl::bind::value_of(logits, "cross_entropy");
    std::optional<int64_t> ignore;
    Tensor labels = dl::bind::cross_entropy_labels(l.shape(), dl::bind::value_of(target, "cross_entropy"),
                                                   reduction, has_ignore, ignore_index, &ignore);
    return ag::cross_entropy(l, labels, dl::Reduction(reduction), ignore);
  });
}

}  // extern "C"

// ---- fused optimizer updates -----------------------------------------------------------------

int dl_sgd_step_(uint64_t p, uint64_t g, uint64_t buf, double lr, double momentum, double dampening,
                 double weight_decay, int nesterov, int first) {
  return guard_status([&] {
    DL_CHECK(!dl::ag::is_recording(), "sgd_step: an optimizer update is not recorded; run it under no_grad");
    const char* op = "sgd_step";
    dl::fn::SgdStep s{lr, momentum, dampening, weight_decay, nesterov != 0, first != 0};
    dl::sgd_step_(get(p, op), get(g, op), momentum != 0 ? get(buf, op) : Tensor(), s);
  });
}

int dl_adam_step_(uint64_t p, uint64_t g, uint64_t m, uint64_t v, uint64_t vmax, double lr,
                  double beta1, double beta2, double eps, double weight_decay, int decoupled,
                  double step) {
  return guard_status([&] {
    DL_CHECK(!dl::ag::is_recording(), "adam_step: an optimizer update is not recorded; run it under no_grad");
    const char* op = "adam_step";
    DL_CHECK(step >= 1, op, ": the step count must be at least 1, got ", step);
    dl::fn::AdamStep s{lr, beta1, beta2, eps, weight_decay, 1 - std::pow(beta1, step),
                       std::sqrt(1 - std::pow(beta2, step)), decoupled != 0};
    dl::adam_step_(get(p, op), get(g, op), get(m, op), get(v, op), vmax ? get(vmax, op) : Tensor(), s);
  });
}
