// Front ends of the neural-network ops (tensor/nn.h): argument checks with messages
// that name the op and the shapes, dtype promotion, output allocation, and the empty
// cases; the arithmetic is in the device kernels (Backend, "neural networks").
//
// A 3-D (C, H, W) image is handled here as a batch of one, so kernels only see 4-D.
// Inputs reach the kernels contiguous and in the compute dtype (one copy when they
// are not already).
#include <algorithm>
#include <cmath>

#include "tensor/backend.h"
#include "tensor/observe.h"
#include "tensor/half_ops.h"

namespace dl {

namespace {

void check_device(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  if (!b.defined()) return;
  DL_CHECK(a.device() == b.device(), op, ": expected ", what, " on the same device as the input (",
           a.device(), "), got ", b.device());
}

// The dtype a float-only op computes in: the promotion of its (defined) tensors,
// integers and bool promoted to the default float dtype.
DType float_dtype(std::initializer_list<const Tensor*> ts) {
  bool first = true;
  DType dt = DType::Float32;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    dt = first ? t->dtype() : promote(dt, t->dtype());
    first = false;
  }
  return is_floating(dt) ? dt : default_float();
}

// t in dtype dt, contiguous: what the kernels read.
Tensor prepared(const Tensor& t, DType dt) {
  if (!t.defined()) return t;
  return contiguous(cast(t, dt));
}

// A 4-D view of a 3-D (C, H, W) image or image gradient.
Tensor batched(const Tensor& t) { return t.dim() == 3 ? unsqueeze(t, 0) : t; }
Shape batched(const Shape& s) {
  if (s.size() != 3) return s;
  Shape b = s;
  b.insert(0, 1);
  return b;
}

std::string pair_str(const int64_t v[2]) { return detail::str_cat("(", v[0], ", ", v[1], ")"); }

// ---- convolution geometry -----------------------------------------------------------

void check_conv_opts(const char* op, const Conv2dOpts& o) {
  DL_CHECK(o.stride[0] >= 1 && o.stride[1] >= 1, op, ": stride must be positive, got ", pair_str(o.stride));
  DL_CHECK(o.padding[0] >= 0 && o.padding[1] >= 0, op, ": padding must be non-negative, got ",
           pair_str(o.padding));
  DL_CHECK(o.dilation[0] >= 1 && o.dilation[1] >= 1, op, ": dilation must be positive, got ",
           pair_str(o.dilation));
  DL_CHECK(o.groups >= 1, op, ": groups must be positive, got ", o.groups);
}

// A size computed from a caller's geometry, in 128 bits (an empty input can have a dim
// near 2^63, and kernel, stride, padding and dilation come as ints); refused when it
// does not fit int64.
int64_t fit(const char* op, __int128 v, const char* what) {
  DL_CHECK_KIND(Memory, v >= INT64_MIN && v <= INT64_MAX, op, ": the ", what, " overflows 64 bits");
  return int64_t(v);
}

void check_image(const char* op, const Shape& xs, const char* what) {
  DL_CHECK(xs.size() == 3 || xs.size() == 4, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) ", what,
           ", got shape ", xs);
  checked_numel(xs, op);  // a shape given by the caller (the gradient ops) may be negative
}

// Sizes of a convolution of an input of shape xs (3-D or 4-D) with a weight of shape
// ws, checked. Out is 4-D.
struct ConvDims {
  int64_t N, C, H, W, O, Ho, Wo;
  Shape out;  // the output's shape: 3-D for a 3-D input
};

ConvDims conv_dims(const char* op, const Shape& xs, const Shape& ws, const Conv2dOpts& o) {
  check_conv_opts(op, o);
  check_image(op, xs, "input");
  DL_CHECK(ws.size() == 4, op, ": expected a 4-D weight (out_channels, in_channels / groups, kH, kW), got shape ", ws);
  checked_numel(ws, op);
  const Shape b = batched(xs);
  ConvDims d;
  d.N = b[0]; d.C = b[1]; d.H = b[2]; d.W = b[3]; d.O = ws[0];
  DL_CHECK(ws[2] >= 1 && ws[3] >= 1, op, ": the kernel size must be positive, got a weight of shape ", ws);
  DL_CHECK(d.O % o.groups == 0, op, ": out_channels ", d.O, " (weight of shape ", ws,
           ") must be divisible by groups = ", o.groups);
  const int64_t c = fit(op, __int128(ws[1]) * o.groups, "channel count");
  DL_CHECK(d.C == c, op, ": expected input of shape ", xs.size() == 4 ? "(N, C, H, W)" : "(C, H, W)",
           " with C = ", c, ", got ", xs, " (weight of shape ", ws, ", groups = ", o.groups, ")");
  const int64_t eh = fit(op, __int128(o.dilation[0]) * (ws[2] - 1) + 1, "dilated kernel size");
  const int64_t ew = fit(op, __int128(o.dilation[1]) * (ws[3] - 1) + 1, "dilated kernel size");
  const int64_t ph = fit(op, __int128(d.H) + 2 * __int128(o.padding[0]), "padded input size");
  const int64_t pw = fit(op, __int128(d.W) + 2 * __int128(o.padding[1]), "padded input size");
  DL_CHECK(eh <= ph && ew <= pw, op, ": the kernel (", eh, ", ", ew, ")", (eh > ws[2] || ew > ws[3]) ? " (dilated)" : "",
           " is larger than the padded input (", ph, ", ", pw, ") of an input of shape ", xs);
  d.Ho = (ph - eh) / o.stride[0] + 1;
  d.Wo = (pw - ew) / o.stride[1] + 1;
  d.out = xs.size() == 4 ? Shape{d.N, d.O, d.Ho, d.Wo} : Shape{d.O, d.Ho, d.Wo};
  return d;
}

// ---- pooling geometry -----------------------------------------------------------------

// PyTorch's pooling_output_shape: floor (or ceil) division, and with ceil_mode the last
// window must start inside the input or its left padding.
// (In 128 bits: an empty input's length can be near 2^63; the result is at most it.)
int64_t pool_out(int64_t len, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  const __int128 num = __int128(len) + 2 * __int128(p) - k + (ceil_mode ? s - 1 : 0);
  const __int128 q = num >= 0 ? num / s : -((-num + s - 1) / s);
  __int128 out = q + 1;
  if (ceil_mode && (out - 1) * s >= __int128(len) + p) --out;
  return int64_t(out);
}

struct PoolDims {
  Pool2dOpts o;  // with the stride resolved
  Shape out;     // 3-D for a 3-D input
};

PoolDims pool_dims(const char* op, const Shape& xs, const Pool2dOpts& opts) {
  check_image(op, xs, "input");
  PoolDims d;
  d.o = opts;
  Pool2dOpts& o = d.o;
  DL_CHECK(o.kernel[0] >= 1 && o.kernel[1] >= 1, op, ": kernel_size must be positive, got ", pair_str(o.kernel));
  DL_CHECK(o.stride[0] >= 0 && o.stride[1] >= 0, op, ": stride must be positive, got ", pair_str(o.stride));
  if (o.stride[0] == 0 && o.stride[1] == 0) {
    o.stride[0] = o.kernel[0];
    o.stride[1] = o.kernel[1];
  }
  DL_CHECK(o.stride[0] >= 1 && o.stride[1] >= 1, op, ": stride must be positive, got ", pair_str(o.stride));
  DL_CHECK(o.padding[0] >= 0 && o.padding[1] >= 0 && o.padding[0] <= o.kernel[0] / 2 &&
               o.padding[1] <= o.kernel[1] / 2,
           op, ": padding must be between 0 and half the kernel size, got padding ", pair_str(o.padding),
           " for kernel_size ", pair_str(o.kernel));
  const Shape b = batched(xs);
  DL_CHECK(b[2] >= 1 && b[3] >= 1, op, ": expected an input with non-empty height and width, got shape ", xs);
  const int64_t ho = pool_out(b[2], o.kernel[0], o.stride[0], o.padding[0], o.ceil_mode);
  const int64_t wo = pool_out(b[3], o.kernel[1], o.stride[1], o.padding[1], o.ceil_mode);
  DL_CHECK(ho >= 1 && wo >= 1, op, ": the output size (", ho, ", ", wo, ") is too small: kernel_size ",
           pair_str(o.kernel), " is larger than the padded input (", double(b[2]) + 2.0 * o.padding[0], ", ",
           double(b[3]) + 2.0 * o.padding[1], ") of an input of shape ", xs);
  d.out = xs.size() == 4 ? Shape{b[0], b[1], ho, wo} : Shape{b[1], ho, wo};
  return d;
}

// What the ops below report to an observer (observe.h): an optional tensor not given
// as null, a pooling's options as integers, every result of the multi-result ops.
const Tensor* optional(const Tensor& t) { return t.defined() ? &t : nullptr; }

std::vector<int64_t> pool_ints(const Pool2dOpts& o, bool with_indices) {
  return {o.kernel[0], o.kernel[1], o.stride[0], o.stride[1], o.padding[0], o.padding[1],
          o.ceil_mode, o.count_include_pad, with_indices};
}

}  // namespace

void observed_outs(const BatchNormResult& r, std::vector<Tensor>& l) { l.insert(l.end(), {r.y, r.mean, r.invstd}); }
void observed_outs(const LayerNormResult& r, std::vector<Tensor>& l) { l.insert(l.end(), {r.y, r.mean, r.invstd}); }

// ---- convolution --------------------------------------------------------------------------

static Tensor conv2d_impl(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o) {
  if (any_half({&x, &w, &bias}))
    return narrowed(conv2d_impl(widened(x), widened(w), widened(bias), o), storage_of({&x, &w, &bias}));
  const char* op = "conv2d";
  check_device(x, w, op, "the weight");
  check_device(x, bias, op, "the bias");
  const ConvDims d = conv_dims(op, x.shape(), w.shape(), o);
  if (bias.defined())
    DL_CHECK(bias.dim() == 1 && bias.size(0) == d.O, op, ": expected a bias of shape (", d.O,
             ",) for a weight of shape ", w.shape(), ", got ", bias.shape());
  const DType dt = float_dtype({&x, &w, &bias});
  Tensor out = empty(d.out, dt, x.device(), op);
  if (out.numel() == 0) return out;
  if (d.C == 0) {  // a sum of no products: the bias alone
    if (bias.defined()) copy_(out, view(cast(bias, dt), Shape{d.O, 1, 1}));
    else fill_(out, Scalar(0.0));
    return out;
  }
  kernel(x.device(), &Backend::conv2d, op)(batched(out), batched(prepared(x, dt)), prepared(w, dt),
                                           prepared(bias, dt), o);
  return out;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o) {
  return observed_other("conv2d", [&] { return conv2d_impl(x, w, bias, o); }, [&](Observed& ob, const Tensor&) {
    ob.ins = {&x, &w, bias.defined() ? &bias : nullptr};
    ob.ints = {o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1], o.groups};
  });
}

Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Shape& input_shape, const Conv2dOpts& o) {
  if (any_half({&g, &w}))
    return narrowed(conv2d_input_grad(widened(g), widened(w), input_shape, o), storage_of({&g, &w}));
  const char* op = "conv2d_input_grad";
  check_device(g, w, op, "the weight");
  const ConvDims d = conv_dims(op, input_shape, w.shape(), o);
  DL_CHECK(g.shape() == d.out, op, ": expected a gradient of shape ", d.out, " (the output of conv2d for an input of shape ",
           input_shape, " and a weight of shape ", w.shape(), "), got ", g.shape());
  const DType dt = float_dtype({&g, &w});
  Tensor gx = empty(input_shape, dt, g.device(), op);
  if (gx.numel() == 0) return gx;
  if (g.numel() == 0) {  // no output channels: nothing flows back
    fill_(gx, Scalar(0.0));
    return gx;
  }
  kernel(g.device(), &Backend::conv2d_input_grad, op)(batched(gx), batched(prepared(g, dt)), prepared(w, dt), o);
  return gx;
}

Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Shape& weight_shape, const Conv2dOpts& o) {
  if (any_half({&x, &g}))
    return narrowed(conv2d_weight_grad(widened(x), widened(g), weight_shape, o), storage_of({&x, &g}));
  const char* op = "conv2d_weight_grad";
  check_device(x, g, op, "the gradient");
  const ConvDims d = conv_dims(op, x.shape(), weight_shape, o);
  DL_CHECK(g.shape() == d.out, op, ": expected a gradient of shape ", d.out, " (the output of conv2d for an input of shape ",
           x.shape(), " and a weight of shape ", weight_shape, "), got ", g.shape());
  const DType dt = float_dtype({&x, &g});
  Tensor gw = empty(weight_shape, dt, x.device(), op);
  if (gw.numel() == 0) return gw;
  if (d.N == 0) {  // an empty batch contributes nothing
    fill_(gw, Scalar(0.0));
    return gw;
  }
  kernel(x.device(), &Backend::conv2d_weight_grad, op)(gw, batched(prepared(x, dt)), batched(prepared(g, dt)), o);
  return gw;
}

Shape conv_transpose2d_shape(const Tensor& x, const Tensor& w, const Conv2dOpts& o, const int64_t output_padding[2]) {
  const char* op = "conv_transpose2d";
  check_conv_opts(op, o);
  check_image(op, x.shape(), "input");
  DL_CHECK(w.dim() == 4, op, ": expected a 4-D weight (in_channels, out_channels / groups, kH, kW), got shape ",
           w.shape());
  DL_CHECK(w.size(2) >= 1 && w.size(3) >= 1, op, ": the kernel size must be positive, got a weight of shape ",
           w.shape());
  const Shape b = batched(x.shape());
  DL_CHECK(b[1] == w.size(0), op, ": expected input of shape ", x.dim() == 4 ? "(N, C, H, W)" : "(C, H, W)",
           " with C = ", w.size(0), ", got ", x.shape(), " (weight of shape ", w.shape(), ")");
  DL_CHECK(w.size(0) % o.groups == 0, op, ": in_channels ", w.size(0), " (weight of shape ", w.shape(),
           ") must be divisible by groups = ", o.groups);
  for (int i = 0; i < 2; ++i)
    DL_CHECK(output_padding[i] >= 0 && output_padding[i] < o.stride[i], op,
             ": output_padding must be non-negative and smaller than the stride, got output_padding ",
             pair_str(output_padding), " and stride ", pair_str(o.stride));
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    // (b - 1) s - 2 p + d (k - 1) + output_padding + 1 in 128 bits, as conv_dims does:
    // an empty input can have a dim near 2^63.
    const __int128 v = __int128(b[2 + i] - 1) * o.stride[i] - 2 * __int128(o.padding[i]) +
                       __int128(o.dilation[i]) * (w.size(2 + i) - 1) + output_padding[i] + 1;
    DL_CHECK_KIND(Memory, v >= INT64_MIN && v <= INT64_MAX, op, ": the output size overflows for an input of shape ",
                  x.shape(), " and a weight of shape ", w.shape());
    out[i] = int64_t(v);
  }
  DL_CHECK(b[2] >= 1 && b[3] >= 1 && out[0] >= 1 && out[1] >= 1, op, ": the output size (", out[0], ", ", out[1],
           ") is too small for an input of shape ", x.shape(), " and a weight of shape ", w.shape());
  const int64_t c = fit(op, __int128(w.size(1)) * o.groups, "channel count");
  return x.dim() == 4 ? Shape{b[0], c, out[0], out[1]} : Shape{c, out[0], out[1]};
}

static Tensor conv_transpose2d_impl(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o,
                        const int64_t output_padding[2]) {
  if (any_half({&x, &w, &bias}))
    return narrowed(conv_transpose2d_impl(widened(x), widened(w), widened(bias), o, output_padding),
                    storage_of({&x, &w, &bias}));
  const Shape s = conv_transpose2d_shape(x, w, o, output_padding);
  const int64_t c = s[s.size() - 3];
  if (bias.defined())
    DL_CHECK(bias.dim() == 1 && bias.size(0) == c, "conv_transpose2d: expected a bias of shape (", c,
             ",) for a weight of shape ", w.shape(), ", got ", bias.shape());
  Tensor y = conv2d_input_grad(x, w, s, o);
  if (!bias.defined()) return y;
  return binary(Op::Add, y, view(bias, Shape{c, 1, 1}));
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o,
                        const int64_t output_padding[2]) {
  return observed_other("conv_transpose2d", [&] { return conv_transpose2d_impl(x, w, bias, o, output_padding); },
                        [&](Observed& ob, const Tensor&) {
                          ob.ins = {&x, &w, bias.defined() ? &bias : nullptr};
                          ob.ints = {o.stride[0],   o.stride[1],       o.padding[0],      o.padding[1],
                                     o.dilation[0], o.dilation[1],     o.groups,          output_padding[0],
                                     output_padding[1]};
                        });
}

// ---- pooling --------------------------------------------------------------------------------

static std::pair<Tensor, Tensor> max_pool2d_impl(const Tensor& x, const Pool2dOpts& opts, bool with_indices) {
  if (is_half(x.dtype())) return narrowed(max_pool2d_impl(widened(x), opts, with_indices), x.dtype());
  const char* op = "max_pool2d";
  const PoolDims d = pool_dims(op, x.shape(), opts);
  const DType dt = float_dtype({&x});
  Tensor out = empty(d.out, dt, x.device(), op);
  Tensor idx = with_indices ? empty(d.out, DType::Int64, x.device(), op) : Tensor();
  if (out.numel() == 0) return {out, idx};
  kernel(x.device(), &Backend::max_pool2d, op)(batched(out), with_indices ? batched(idx) : idx,
                                               batched(prepared(x, dt)), d.o);
  return {out, idx};
}

std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dOpts& opts, bool with_indices) {
  return observed_other("max_pool2d", [&] { return max_pool2d_impl(x, opts, with_indices); },
                        [&](Observed& o, const auto&) { o.ins = {&x}; o.ints = pool_ints(opts, with_indices); });
}

Tensor max_pool2d_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape) {
  if (is_half(g.dtype())) return narrowed(max_pool2d_backward(widened(g), indices, input_shape), g.dtype());
  const char* op = "max_pool2d_backward";
  check_device(g, indices, op, "the indices");
  check_image(op, input_shape, "input");
  DL_CHECK_KIND(Type, indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, op,
                ": expected int64 or int32 indices, got ", dtype_name(indices.dtype()));
  DL_CHECK(g.shape() == indices.shape(), op, ": expected a gradient of the indices' shape ", indices.shape(),
           ", got ", g.shape());
  const Shape b = batched(input_shape);
  DL_CHECK(g.dim() == input_shape.size() && batched(g.shape())[0] == b[0] && batched(g.shape())[1] == b[1], op,
           ": a gradient of shape ", g.shape(), " does not match an input of shape ", input_shape);
  const DType dt = float_dtype({&g});
  Tensor gx = empty(input_shape, dt, g.device(), op);
  if (gx.numel() == 0) return gx;
  if (g.numel() == 0) {
    fill_(gx, Scalar(0.0));
    return gx;
  }
  kernel(g.device(), &Backend::max_pool2d_backward, op)(batched(gx), batched(prepared(g, dt)),
                                                        batched(prepared(indices, DType::Int64)));
  return gx;
}

static Tensor avg_pool2d_impl(const Tensor& x, const Pool2dOpts& opts) {
  if (is_half(x.dtype())) return narrowed(avg_pool2d_impl(widened(x), opts), x.dtype());
  const char* op = "avg_pool2d";
  const PoolDims d = pool_dims(op, x.shape(), opts);
  const DType dt = float_dtype({&x});
  Tensor out = empty(d.out, dt, x.device(), op);
  if (out.numel() == 0) return out;
  kernel(x.device(), &Backend::avg_pool2d, op)(batched(out), batched(prepared(x, dt)), d.o);
  return out;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOpts& opts) {
  return observed_other("avg_pool2d", [&] { return avg_pool2d_impl(x, opts); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = pool_ints(opts, false); });
}

Tensor avg_pool2d_backward(const Tensor& g, const Shape& input_shape, const Pool2dOpts& opts) {
  if (is_half(g.dtype())) return narrowed(avg_pool2d_backward(widened(g), input_shape, opts), g.dtype());
  const char* op = "avg_pool2d_backward";
  const PoolDims d = pool_dims(op, input_shape, opts);
  DL_CHECK(g.shape() == d.out, op, ": expected a gradient of shape ", d.out, " (the output of avg_pool2d for an input of shape ",
           input_shape, "), got ", g.shape());
  const DType dt = float_dtype({&g});
  Tensor gx = empty(input_shape, dt, g.device(), op);
  if (gx.numel() == 0) return gx;
  kernel(g.device(), &Backend::avg_pool2d_backward, op)(batched(gx), batched(prepared(g, dt)), d.o);
  return gx;
}

Tensor global_avg_pool2d(const Tensor& x, bool keepdim) {
  check_image("global_avg_pool2d", x.shape(), "input");
  return reduce(Op::Mean, x, {-2, -1}, keepdim);
}

// ---- batch normalisation -----------------------------------------------------------------------

static BatchNormResult batch_norm_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  if (any_half({&x, &weight, &bias, &running_mean, &running_var})) {
    // Running statistics of a half dtype are updated through float32 copies.
    Tensor rm = widened(running_mean), rv = widened(running_var);
    BatchNormResult r = batch_norm_impl(widened(x), widened(weight), widened(bias), rm, rv, training, momentum, eps);
    if (training && rm.defined() && rm.dtype() != running_mean.dtype()) copy_(const_cast<Tensor&>(running_mean), rm);
    if (training && rv.defined() && rv.dtype() != running_var.dtype()) copy_(const_cast<Tensor&>(running_var), rv);
    const DType st = storage_of({&x, &weight, &bias});
    return {narrowed(r.y, st), narrowed(r.mean, st), narrowed(r.invstd, st)};
  }
  const char* op = "batch_norm";
  DL_CHECK(x.dim() >= 2, op, ": expected an input of shape (N, C, ...) with at least 2 dimensions, got shape ",
           x.shape());
  const int64_t N = x.size(0), C = x.size(1);
  const std::pair<const Tensor*, const char*> per_channel[] = {
      {&weight, "weight"}, {&bias, "bias"}, {&running_mean, "running_mean"}, {&running_var, "running_var"}};
  for (auto [t, name] : per_channel) {
    if (!t->defined()) continue;
    check_device(x, *t, op, name);
    DL_CHECK(t->dim() == 1 && t->size(0) == C, op, ": expected ", name, " of shape (", C,
             ",) for an input of shape ", x.shape(), ", got ", t->shape());
  }
  for (const Tensor* t : {&running_mean, &running_var})
    if (t->defined())
      DL_CHECK_KIND(Type, t->is_floating(), op, ": expected floating running statistics, got ",
                    dtype_name(t->dtype()));
  DL_CHECK(std::isfinite(eps) && eps >= 0, op, ": eps must be non-negative, got ", eps);
  DL_CHECK(std::isfinite(momentum), op, ": momentum must be finite, got ", momentum);
  if (!training)
    DL_CHECK(running_mean.defined() && running_var.defined(), op,
             ": running_mean and running_var are needed in evaluation mode");
  // (an empty x's N * C may pass 2^63: (2^62, 2^62, 0))
  const int64_t S = x.numel() == 0 ? 0 : x.numel() / (N * C);
  const int64_t count = N * S;
  if (training && C > 0)
    DL_CHECK(count > 1, op, ": expected more than 1 value per channel when training, got an input of shape ",
             x.shape());
  const DType dt = float_dtype({&x, &weight, &bias});
  BatchNormResult r;
  r.y = empty(x.shape(), dt, x.device(), op);
  if (C == 0) {
    r.mean = empty(Shape{0}, dt, x.device(), op);
    r.invstd = r.mean;
    return r;
  }
  Tensor x3 = view(prepared(x, dt), Shape{N, C, S});
  if (training) {
    r.mean = empty(Shape{C}, dt, x.device(), op);
    Tensor var = empty(Shape{C}, dt, x.device(), op);
    kernel(x.device(), &Backend::batch_norm_stats, op)(r.mean, var, x3);
    r.invstd = unary(Op::Rsqrt, binary(Op::Add, var, Scalar(eps)));
    // Running statistics track the unbiased variance, as PyTorch's do.
    Tensor rm = running_mean, rv = running_var;
    if (rm.defined()) {
      binary_(Op::Mul, rm, Scalar(1 - momentum));
      binary_(Op::Add, rm, cast(binary(Op::Mul, r.mean, Scalar(momentum)), rm.dtype()));
    }
    if (rv.defined()) {
      binary_(Op::Mul, rv, Scalar(1 - momentum));
      const double unbias = double(count) / double(count - 1);
      binary_(Op::Add, rv, cast(binary(Op::Mul, var, Scalar(momentum * unbias)), rv.dtype()));
    }
  } else {
    // Copies: a later in-place update of the running statistics must not change what
    // this call's backward reads.
    r.mean = cast(running_mean, dt, /*copy=*/true);
    r.invstd = unary(Op::Rsqrt, binary(Op::Add, cast(running_var, dt), Scalar(eps)));
  }
  Tensor scale = weight.defined() ? binary(Op::Mul, cast(weight, dt), r.invstd) : r.invstd;
  Tensor shift = binary(Op::Mul, r.mean, scale);
  shift = bias.defined() ? binary(Op::Sub, cast(bias, dt), shift) : unary(Op::Neg, shift);
  if (count > 0)
    kernel(x.device(), &Backend::channel_affine, op)(view(r.y, Shape{N, C, S}), x3, contiguous(scale),
                                                     contiguous(shift));
  return r;
}

BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  return observed_other(
      "batch_norm", [&] { return batch_norm_impl(x, weight, bias, running_mean, running_var, training, momentum, eps); },
      [&](Observed& o, const BatchNormResult&) {
        o.ins = {&x, optional(weight), optional(bias), optional(running_mean), optional(running_var)};
        o.ints = {training};
        o.nums = {momentum, eps};
      });
}

// ---- layer normalisation ---------------------------------------------------------------------

// One pass for the statistics (in double) and one for y, a row at a time (the CPU
// and CUDA kernels share fn::LayerNormY); absent affine parameters are ones and zeros.
static LayerNormResult layer_norm_impl(const Tensor& x, int normalized, const Tensor& weight, const Tensor& bias, double eps) {
  if (any_half({&x, &weight, &bias})) {
    LayerNormResult r = layer_norm_impl(widened(x), normalized, widened(weight), widened(bias), eps);
    const DType st = storage_of({&x, &weight, &bias});
    return {narrowed(r.y, st), narrowed(r.mean, st), narrowed(r.invstd, st)};
  }
  const char* op = "layer_norm";
  DL_CHECK(normalized >= 1 && normalized <= x.dim(), op, ": cannot normalise the last ", normalized,
           " dims of an input of shape ", x.shape());
  DL_CHECK_KIND(Type, x.is_floating(), op, ": expected a float32 or float64 input, got ", dtype_name(x.dtype()));
  const int nlead = x.dim() - normalized;
  Shape lead(x.shape().begin(), nlead), tail(x.shape().begin() + nlead, normalized);
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&weight, "weight"}, {&bias, "bias"}}) {
    if (!t->defined()) continue;
    check_device(x, *t, op, name);
    DL_CHECK(t->shape() == tail, op, ": expected ", name, " of shape ", tail, " (the normalised dims of ",
             x.shape(), "), got ", t->shape());
  }
  DL_CHECK(std::isfinite(eps) && eps >= 0, op, ": eps must be non-negative, got ", eps);
  int64_t D = 1;
  for (int64_t d : tail) D *= d;
  DL_CHECK(D > 0 || x.numel() == 0, op, ": the normalised dims ", tail, " hold no element");
  const int64_t R = D == 0 ? 0 : x.numel() / D;
  const DType dt = float_dtype({&x, &weight, &bias});
  LayerNormResult r;
  r.y = empty(x.shape(), dt, x.device(), op);
  Tensor mean = empty(Shape{R}, dt, x.device(), op), inv = empty(Shape{R}, dt, x.device(), op);
  if (x.numel() > 0) {
    Tensor w = weight.defined() ? view(prepared(weight, dt), Shape{D}) : ones(Shape{D}, dt, x.device());
    Tensor b = bias.defined() ? view(prepared(bias, dt), Shape{D}) : zeros(Shape{D}, dt, x.device());
    kernel(x.device(), &Backend::layer_norm, op)(view(r.y, Shape{R, D}), mean, inv,
                                                 view(prepared(x, dt), Shape{R, D}), w, b, eps);
  }
  r.mean = view(mean, lead);
  r.invstd = view(inv, lead);
  return r;
}

LayerNormResult layer_norm(const Tensor& x, int normalized, const Tensor& weight, const Tensor& bias, double eps) {
  return observed_other("layer_norm", [&] { return layer_norm_impl(x, normalized, weight, bias, eps); },
                        [&](Observed& o, const LayerNormResult&) {
                          o.ins = {&x, optional(weight), optional(bias)};
                          o.ints = {normalized};
                          o.nums = {eps};
                        });
}

LayerNormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Tensor& weight, bool want_weight, bool want_bias) {
  if (any_half({&g, &x, &mean, &invstd, &weight})) {
    LayerNormGrads r = layer_norm_backward(widened(g), widened(x), widened(mean), widened(invstd), widened(weight),
                                           want_weight, want_bias);
    const DType st = storage_of({&g, &x});
    return {narrowed(r.dx, st), narrowed(r.dweight, st), narrowed(r.dbias, st)};
  }
  const char* op = "layer_norm";
  const DType dt = mean.dtype();   // the forward's (x may have been cast to it)
  const int64_t R = mean.numel(), D = R == 0 ? 0 : x.numel() / R;
  const int nlead = mean.dim();
  Shape tail(x.shape().begin() + nlead, x.dim() - nlead);
  LayerNormGrads r;
  r.dx = empty(x.shape(), dt, x.device(), op);
  if (want_weight) r.dweight = zeros(tail, dt, x.device());
  if (want_bias) r.dbias = zeros(tail, dt, x.device());
  if (x.numel() == 0) return r;
  Tensor w = weight.defined() ? view(prepared(weight, dt), Shape{D}) : ones(Shape{D}, dt, x.device());
  kernel(x.device(), &Backend::layer_norm_backward, op)(
      view(r.dx, Shape{R, D}), want_weight ? view(r.dweight, Shape{D}) : Tensor(),
      want_bias ? view(r.dbias, Shape{D}) : Tensor(), view(prepared(g, dt), Shape{R, D}),
      view(prepared(x, dt), Shape{R, D}), view(prepared(mean, dt), Shape{R}), view(prepared(invstd, dt), Shape{R}), w);
  return r;
}

// ---- an LSTM step's gates ------------------------------------------------------------------

namespace {

// gates (..., 4H) and c (..., H) with the same leading dims, on one device.
void check_lstm_gates(const Tensor& gates, const Tensor& c) {
  const char* op = "lstm_gates";
  check_device(c, gates, op, "the gates");
  const int last = c.dim() - 1;
  // (gates' last size over 4, not c's times 4: an empty c's may be near 2^63)
  bool ok = last >= 0 && gates.dim() == c.dim() && gates.size(last) % 4 == 0 && gates.size(last) / 4 == c.size(last);
  for (int d = 0; ok && d < last; ++d) ok = gates.size(d) == c.size(d);
  DL_CHECK(ok, op, ": expected gates (..., 4 H) and a cell state (..., H) with the same leading dims, got shapes ",
           gates.shape(), " and ", c.shape());
}

std::pair<Tensor, Tensor> lstm_gates_impl(const Tensor& gates, const Tensor& c) {
  if (any_half({&gates, &c})) {
    auto [h, c2] = lstm_gates_impl(widened(gates), widened(c));
    const DType st = storage_of({&gates, &c});
    return {narrowed(h, st), narrowed(c2, st)};
  }
  const char* op = "lstm_gates";
  check_lstm_gates(gates, c);
  const DType dt = float_dtype({&gates, &c});
  Tensor h = empty(c.shape(), dt, c.device(), op), c2 = empty(c.shape(), dt, c.device(), op);
  if (c.numel() > 0) {
    const int64_t H = c.size(c.dim() - 1), R = c.numel() / H;
    kernel(c.device(), &Backend::lstm_gates, op)(view(h, Shape{R, H}), view(c2, Shape{R, H}),
                                                 view(prepared(gates, dt), Shape{R, 4 * H}),
                                                 view(prepared(c, dt), Shape{R, H}));
  }
  return {h, c2};
}

}  // namespace

std::pair<Tensor, Tensor> lstm_gates(const Tensor& gates, const Tensor& c) {
  return observed_other("lstm_gates", [&] { return lstm_gates_impl(gates, c); },
                        [&](Observed& o, const std::pair<Tensor, Tensor>&) { o.ins = {&gates, &c}; });
}

std::pair<Tensor, Tensor> lstm_gates_backward(const Tensor& gates, const Tensor& c, const Tensor& gh, const Tensor& gc) {
  if (any_half({&gates, &c, &gh, &gc})) {
    auto [dg, dc] = lstm_gates_backward(widened(gates), widened(c), widened(gh), widened(gc));
    const DType st = storage_of({&gates, &c});
    return {narrowed(dg, st), narrowed(dc, st)};
  }
  const char* op = "lstm_gates";
  check_lstm_gates(gates, c);
  const DType dt = float_dtype({&gates, &c});
  for (const Tensor* g : {&gh, &gc})
    if (g->defined())
      DL_CHECK(g->shape() == c.shape(), op, ": expected the gradients of h and c of shape ", c.shape(), ", got ",
               g->shape());
  Tensor dgates = empty(gates.shape(), dt, c.device(), op), dc = empty(c.shape(), dt, c.device(), op);
  if (c.numel() == 0) return {dgates, dc};
  const int64_t H = c.size(c.dim() - 1), R = c.numel() / H;
  auto rows = [&](const Tensor& t) {
    return view(t.defined() ? prepared(t, dt) : zeros(c.shape(), dt, c.device()), Shape{R, H});
  };
  kernel(c.device(), &Backend::lstm_gates_backward, op)(view(dgates, Shape{R, 4 * H}), view(dc, Shape{R, H}),
                                                        view(prepared(gates, dt), Shape{R, 4 * H}), rows(c),
                                                        rows(gh), rows(gc));
  return {dgates, dc};
}

// ---- embedding, loss --------------------------------------------------------------------------

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  const char* op = "embedding";
  check_device(weight, indices, op, "the indices");
  DL_CHECK(weight.dim() == 2, op, ": expected a 2-D weight (num_embeddings, embedding_dim), got shape ",
           weight.shape());
  DL_CHECK_KIND(Type, indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, op,
                ": expected int64 or int32 indices, got ", dtype_name(indices.dtype()));
  const int64_t V = weight.size(0), D = weight.size(1);
  if (padding_idx)
    DL_CHECK_KIND(Index, *padding_idx >= -V && *padding_idx < V, op, ": padding_idx ", *padding_idx,
                  " is out of range for ", V, " embeddings");
  if (indices.numel() > 0) {
    Unobserved check;   // a range check, no part of the result
    const double lo = reduce(Op::Amin, indices, {}, false).item();
    const double hi = reduce(Op::Amax, indices, {}, false).item();
    DL_CHECK_KIND(Index, lo >= 0 && hi < double(V), op, ": index ", int64_t(lo < 0 ? lo : hi),
                  " is out of range for a weight of ", V, " embeddings (shape ", weight.shape(), ")");
  }
  Shape out = indices.shape();
  out.push_back(D);
  Tensor rows = index_select(weight, 0, reshape(indices, Shape{indices.numel()}));
  return view(rows, out);
}

int64_t cross_entropy_count(const Tensor& target, std::optional<int64_t> ignore_index) {
  if (!ignore_index || target.numel() == 0) return target.numel();
  Tensor kept = compare(Op::Ne, target, Scalar::integer(*ignore_index));
  return int64_t(reduce(Op::Sum, kept, {}, false).item());
}

static Tensor cross_entropy_impl(const Tensor& logits, const Tensor& target, Reduction reduction,
                     std::optional<int64_t> ignore_index) {
  if (is_half(logits.dtype()))
    return narrowed(cross_entropy_impl(widened(logits), target, reduction, ignore_index), logits.dtype());
  const char* op = "cross_entropy";
  check_device(logits, target, op, "the target");
  DL_CHECK(logits.dim() == 2, op, ": expected logits of shape (N, C), got shape ", logits.shape());
  DL_CHECK_KIND(Type, target.dtype() == DType::Int64 || target.dtype() == DType::Int32, op,
                ": expected an int64 or int32 target of class indices, got ", dtype_name(target.dtype()));
  const int64_t N = logits.size(0), C = logits.size(1);
  DL_CHECK(target.dim() == 1 && target.size(0) == N, op, ": expected a target of shape (", N,
           ",) for logits of shape ", logits.shape(), ", got ", target.shape());
  DL_CHECK(C >= 1 || N == 0, op, ": expected at least one class, got logits of shape ", logits.shape());
  const DType dt = float_dtype({&logits});
  Tensor loss = empty(Shape{N}, dt, logits.device(), op);
  if (N > 0)
    kernel(logits.device(), &Backend::cross_entropy, op)(loss, prepared(logits, dt),
                                                        prepared(target, DType::Int64), ignore_index);
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return reduce(Op::Sum, loss, {}, false);
    case Reduction::Mean: {
      // 0 / 0 when every row is ignored: NaN, as PyTorch.
      Tensor sum = reduce(Op::Sum, loss, {}, false);
      return binary(Op::Div, sum, Scalar(double(cross_entropy_count(target, ignore_index))));
    }
  }
  fail(ErrorKind::Value, op, ": unknown reduction ", int(reduction));
}

Tensor one_hot(const Tensor& index, int64_t classes, DType dtype) {
  return observed_other("one_hot", [&] {
    DL_CHECK_KIND(Type, index.dtype() == DType::Int64, "one_hot: expected an int64 index, got ",
                  dtype_name(index.dtype()));
    DL_CHECK(classes >= 0, "one_hot: expected a count of classes, got ", classes);
    const Tensor positions = arange(0, double(classes), 1, DType::Int64, index.device());
    return cast(compare(Op::Eq, unsqueeze(index, index.dim()), positions), dtype);
  }, [&](Observed& o, const Tensor&) {
    o.ins = {&index};
    o.ints = {classes, int64_t(dtype)};
  });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     std::optional<int64_t> ignore_index) {
  return observed_other("cross_entropy", [&] { return cross_entropy_impl(logits, target, reduction, ignore_index); },
                        [&](Observed& o, const Tensor&) {
                          o.ins = {&logits, &target};
                          o.ints = {int64_t(reduction), ignore_index.has_value(), ignore_index.value_or(0)};
                        });
}

}  // namespace dl
