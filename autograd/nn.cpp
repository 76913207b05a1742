// The neural-network family, recorded: forwards and derivatives side by side.
//
// The convolution ops close under differentiation. With A_w the linear map x -> conv(x, w):
//   conv2d(x, w)              = A_w x        d/dx: A_w^T g = input_grad(g, w)
//                                            d/dw: weight_grad(x, g)
//   input_grad(g, w)          = A_w^T g      d/dg: A_w gg = conv2d(gg, w)
//                                            d/dw: weight_grad(gg, g)
//   weight_grad(x, g)         (bilinear; <gg, weight_grad(x, g)> = <conv2d(x, gg), g>)
//                                            d/dx: input_grad(g, gg); d/dg: conv2d(x, gg)
// so every order of gradient is made of these three ops. Likewise avg_pool2d and
// avg_pool2d_backward are each other's adjoints, and max_pool2d_backward (a scatter
// at the saved indices) has a gather as its derivative.
#include "autograd/nn.h"

#include <algorithm>

#include "autograd/math.h"
#include "autograd/record.h"
#include "tensor/observe.h"

namespace dl::ag {

using namespace math;

namespace {

void store(Attrs& a, const Conv2dOpts& o) {
  a.dims = Shape{o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1], o.groups};
}
Conv2dOpts conv_opts(const Attrs& a) {
  Conv2dOpts o;
  o.stride[0] = a.dims[0]; o.stride[1] = a.dims[1];
  o.padding[0] = a.dims[2]; o.padding[1] = a.dims[3];
  o.dilation[0] = a.dims[4]; o.dilation[1] = a.dims[5];
  o.groups = a.dims[6];
  return o;
}

void store(Attrs& a, const Pool2dOpts& o) {
  a.dims = Shape{o.kernel[0], o.kernel[1], o.stride[0], o.stride[1], o.padding[0], o.padding[1],
                 int64_t(o.ceil_mode), int64_t(o.count_include_pad)};
}
Pool2dOpts pool_opts(const Attrs& a) {
  Pool2dOpts o;
  o.kernel[0] = a.dims[0]; o.kernel[1] = a.dims[1];
  o.stride[0] = a.dims[2]; o.stride[1] = a.dims[3];
  o.padding[0] = a.dims[4]; o.padding[1] = a.dims[5];
  o.ceil_mode = a.dims[6] != 0;
  o.count_include_pad = a.dims[7] != 0;
  return o;
}

// Every dim of an image-shaped tensor but the channel dim (dim 1 of NCHW, 0 of CHW).
std::vector<int> non_channel_dims(int ndim, int channel_dim) {
  std::vector<int> d;
  for (int i = 0; i < ndim; ++i)
    if (i != channel_dim) d.push_back(i);
  return d;
}

}  // namespace

// ---- convolution ---------------------------------------------------------------------------

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o) {
  Tensor y = dl::conv2d(x, w, bias, o);
  Ref<Node> n = bias.defined() ? maybe_node(Op::Conv2d, {&x, &w, &bias}) : maybe_node(Op::Conv2d, {&x, &w});
  if (!n) return y;
  n->save(x);
  n->save(w);
  store(n->attrs, o);
  return finish(n, y);
}
template <> Grads derivative<Op::Conv2d>(Node& n, const TensorList& grads) {
  const Conv2dOpts o = conv_opts(n.attrs);
  Tensor x = n.unpack(0), w = n.unpack(1);
  const Tensor& g = grads[0];
  Grads out(n.inputs.size());
  if (n.next[0].valid()) out[0] = ag::conv2d_input_grad(g, w, x.shape(), o);
  if (n.next[1].valid()) out[1] = ag::conv2d_weight_grad(x, g, w.shape(), o);
  if (n.inputs.size() == 3 && n.next[2].valid())
    out[2] = ag::reduce(Op::Sum, g, non_channel_dims(g.dim(), g.dim() - 3), false);
  return out;
}

Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Shape& input_shape, const Conv2dOpts& o) {
  Tensor y = dl::conv2d_input_grad(g, w, input_shape, o);
  Ref<Node> n = maybe_node(Op::Conv2dInputGrad, {&g, &w});
  if (!n) return y;
  n->save(g);
  n->save(w);
  store(n->attrs, o);
  return finish(n, y);
}
// (Also conv_transpose2d's node, with its bias as a third input.)
template <> Grads derivative<Op::Conv2dInputGrad>(Node& n, const TensorList& grads) {
  const Conv2dOpts o = conv_opts(n.attrs);
  Tensor g = n.unpack(0), w = n.unpack(1);
  const Tensor& gg = grads[0];
  Grads out(n.inputs.size());
  if (n.next[0].valid()) out[0] = ag::conv2d(gg, w, Tensor(), o);
  if (n.next[1].valid()) out[1] = ag::conv2d_weight_grad(gg, g, w.shape(), o);
  if (n.inputs.size() == 3 && n.next[2].valid())
    out[2] = ag::reduce(Op::Sum, gg, non_channel_dims(gg.dim(), gg.dim() - 3), false);
  return out;
}

Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Shape& weight_shape, const Conv2dOpts& o) {
  Tensor y = dl::conv2d_weight_grad(x, g, weight_shape, o);
  Ref<Node> n = maybe_node(Op::Conv2dWeightGrad, {&x, &g});
  if (!n) return y;
  n->save(x);
  n->save(g);
  store(n->attrs, o);
  return finish(n, y);
}
template <> Grads derivative<Op::Conv2dWeightGrad>(Node& n, const TensorList& grads) {
  const Conv2dOpts o = conv_opts(n.attrs);
  Tensor x = n.unpack(0), g = n.unpack(1);
  const Tensor& gg = grads[0];
  Grads out(2);
  if (n.next[0].valid()) out[0] = ag::conv2d_input_grad(g, gg, x.shape(), o);
  if (n.next[1].valid()) out[1] = ag::conv2d(x, gg, Tensor(), o);
  return out;
}

// The engine's conv_transpose2d runs the forward (one op for an observer: dl.compile and
// dl.export see conv_transpose2d itself); its node is conv2d_input_grad's, whose
// gradients for x and w are those of the same computation, with the bias's added.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o,
                        const int64_t output_padding[2]) {
  Tensor y = dl::conv_transpose2d(x, w, bias, o, output_padding);
  Ref<Node> n = bias.defined() ? maybe_node(Op::Conv2dInputGrad, {&x, &w, &bias})
                               : maybe_node(Op::Conv2dInputGrad, {&x, &w});
  if (!n) return y;
  n->save(x);
  n->save(w);
  store(n->attrs, o);
  return finish(n, y);
}

// ---- pooling -----------------------------------------------------------------------------------

std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dOpts& o, bool with_indices) {
  Ref<Node> n = maybe_node(Op::MaxPool2d, {&x});
  auto r = dl::max_pool2d(x, o, with_indices || n);
  if (!n) return r;
  n->save(r.second);
  n->attrs.shape = x.shape();
  n->num_outputs = 2;  // the indices carry no gradient
  r.first = finish(n, r.first, 0);
  return r;
}
template <> Grads derivative<Op::MaxPool2d>(Node& n, const TensorList& grads) {
  return {ag::max_pool2d_backward(grads[0], n.unpack(0), n.attrs.shape)};
}

Tensor max_pool2d_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape) {
  Tensor y = dl::max_pool2d_backward(g, indices, input_shape);
  Ref<Node> n = maybe_node(Op::MaxPool2dBackward, {&g});
  if (!n) return y;
  n->save(indices);
  return finish(n, y);
}
template <> Grads derivative<Op::MaxPool2dBackward>(Node& n, const TensorList& grads) {
  // Each output took the value at its index: gather there, plane by plane.
  const Tensor& gg = grads[0];
  Tensor idx = n.unpack(0);
  const int d = gg.dim();
  Tensor planes = ag::flatten(gg, d - 2, d - 1);
  Tensor flat_idx = dl::flatten(dl::cast(idx, DType::Int64), d - 2, d - 1);
  return {ag::reshape(ag::gather(planes, d - 2, flat_idx), n.inputs[0].shape)};
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOpts& o) {
  Tensor y = dl::avg_pool2d(x, o);
  Ref<Node> n = maybe_node(Op::AvgPool2d, {&x});
  if (!n) return y;
  n->attrs.shape = x.shape();
  store(n->attrs, o);
  return finish(n, y);
}
template <> Grads derivative<Op::AvgPool2d>(Node& n, const TensorList& grads) {
  return {ag::avg_pool2d_backward(grads[0], n.attrs.shape, pool_opts(n.attrs))};
}

Tensor avg_pool2d_backward(const Tensor& g, const Shape& input_shape, const Pool2dOpts& o) {
  Tensor y = dl::avg_pool2d_backward(g, input_shape, o);
  Ref<Node> n = maybe_node(Op::AvgPool2dBackward, {&g});
  if (!n) return y;
  store(n->attrs, o);
  return finish(n, y);
}
template <> Grads derivative<Op::AvgPool2dBackward>(Node& n, const TensorList& grads) {
  return {ag::avg_pool2d(grads[0], pool_opts(n.attrs))};
}

Tensor global_avg_pool2d(const Tensor& x, bool keepdim) {
  DL_CHECK(x.dim() == 3 || x.dim() == 4,
           "global_avg_pool2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ", x.shape());
  return ag::reduce(Op::Mean, x, {-2, -1}, keepdim);
}

// ---- dropout ----------------------------------------------------------------------------------------

Tensor dropout(const Tensor& x, double p, bool training) {
  DL_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  auto [y, scaled_mask] = dl::dropout(x, p);
  Ref<Node> n = maybe_node(Op::Dropout, {&x});
  if (!n) return y;
  n->save(scaled_mask);
  return finish(n, y);
}
// The saved mask already holds 1 / (1 - p) where it keeps an element.
template <> Grads derivative<Op::Dropout>(Node& n, const TensorList& grads) {
  return {grads[0] * n.unpack(0)};
}

// ---- normalisations ------------------------------------------------------------------------------------
// batch_norm and layer_norm record the same node: inputs x, weight, bias (the defined
// ones), saved x, weight, the statistics' mean and invstd; attrs i[0] the op's own
// (training, the normalised dims), i[1] and i[2] whether weight and bias were given,
// d[0] eps.

namespace {

Ref<Node> norm_node(const char* name, Op op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& mean, const Tensor& invstd, double eps, int64_t own) {
  TensorList ins{x};
  if (weight.defined()) ins.push_back(weight);
  if (bias.defined()) ins.push_back(bias);
  Ref<Node> n = maybe_node(name, derivative_of(op), ins);
  if (!n) return n;
  n->save(x);
  if (weight.defined()) n->save(weight);
  n->save(mean);
  n->save(invstd);
  n->attrs.i[0] = own;
  n->attrs.i[1] = weight.defined();
  n->attrs.i[2] = bias.defined();
  n->attrs.d[0] = eps;
  return n;
}

struct NormSaved {
  Tensor x, w, mean, invstd;
  bool has_w, has_b;
  int iw, ib;   // the weight's and bias's input positions (-1: none)
};

NormSaved unpack_norm(Node& n) {
  NormSaved v;
  v.has_w = n.attrs.i[1] != 0;
  v.has_b = n.attrs.i[2] != 0;
  int k = 0;
  v.x = n.unpack(k++);
  if (v.has_w) v.w = n.unpack(k++);
  v.mean = n.unpack(k++);
  v.invstd = n.unpack(k++);
  v.iw = v.has_w ? 1 : -1;
  v.ib = v.has_b ? (v.has_w ? 2 : 1) : -1;
  return v;
}

// For a gradient of the gradient: the statistics over `dims` recomputed as recorded
// functions of x, so that it sees how they depend on x. Returns xhat; *inv the recorded
// 1 / sqrt(var + eps).
Tensor recorded_xhat(const Tensor& x, const std::vector<int>& dims, double eps, Tensor* inv) {
  ReduceOpts biased;
  biased.correction = 0;
  Tensor m = ag::reduce(Op::Mean, x, dims, true);
  *inv = ag::unary(Op::Rsqrt, ag::reduce(Op::Var, x, dims, true, biased) + eps);
  return (x - m) * *inv;
}

// x's gradient when the statistics over `dims` are x's own: gh the gradient for xhat.
Tensor normalised_input_grad(const Tensor& gh, const Tensor& xhat, const Tensor& inv, const std::vector<int>& dims) {
  Tensor mg = ag::reduce(Op::Mean, gh, dims, true);
  Tensor mgx = ag::reduce(Op::Mean, gh * xhat, dims, true);
  return inv * (gh - mg - xhat * mgx);
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  BatchNormResult r = dl::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
  Ref<Node> n = norm_node("batch_norm", Op::BatchNorm, x, weight, bias, r.mean, r.invstd, eps, training);
  if (!n) return r.y;
  return finish(n, r.y);
}
template <> Grads derivative<Op::BatchNorm>(Node& n, const TensorList& grads) {
  const bool training = n.attrs.i[0] != 0;
  const NormSaved v = unpack_norm(n);
  const Tensor& g = grads[0];
  const std::vector<int> dims = non_channel_dims(v.x.dim(), 1);
  Shape per_channel;  // (1, C, 1, ...): broadcasts a (C) vector against x
  for (int i = 0; i < v.x.dim(); ++i) per_channel.push_back(i == 1 ? v.x.size(1) : 1);
  Tensor inv, xhat;
  if (training && is_recording()) {
    xhat = recorded_xhat(v.x, dims, n.attrs.d[0], &inv);
  } else {
    inv = ag::reshape(v.invstd, per_channel);
    xhat = (v.x - ag::reshape(v.mean, per_channel)) * inv;
  }
  Grads out(n.inputs.size());
  if (n.next[0].valid()) {
    Tensor gh = v.has_w ? g * ag::reshape(v.w, per_channel) : g;  // the gradient for xhat
    // Training: xhat depends on x through the batch mean and variance too.
    out[0] = training ? normalised_input_grad(gh, xhat, inv, dims) : gh * inv;
  }
  if (v.iw >= 0 && n.next[v.iw].valid()) out[size_t(v.iw)] = ag::reduce(Op::Sum, g * xhat, dims, false);
  if (v.ib >= 0 && n.next[v.ib].valid()) out[size_t(v.ib)] = ag::reduce(Op::Sum, g, dims, false);
  return out;
}

Tensor layer_norm(const Tensor& x, int normalized, const Tensor& weight, const Tensor& bias, double eps) {
  LayerNormResult r = dl::layer_norm(x, normalized, weight, bias, eps);
  Ref<Node> n = norm_node("layer_norm", Op::LayerNorm, x, weight, bias, r.mean, r.invstd, eps, normalized);
  if (!n) return r.y;
  return finish(n, r.y);
}
// With g the gradient for xhat (times the weight), per row: dx = invstd (g - mean(g) -
// xhat mean(g xhat)); dweight and dbias sum over the rows.
template <> Grads derivative<Op::LayerNorm>(Node& n, const TensorList& grads) {
  const int normalized = int(n.attrs.i[0]);
  const NormSaved v = unpack_norm(n);
  const Tensor& g = grads[0];
  const bool want_w = v.iw >= 0 && n.next[v.iw].valid(), want_b = v.ib >= 0 && n.next[v.ib].valid();
  Grads out(n.inputs.size());
  if (!is_recording()) {
    // The fused kernel: the row sums, dx, and the column sums for the weight and bias.
    LayerNormGrads r = dl::layer_norm_backward(g, v.x, v.mean, v.invstd, v.w, want_w, want_b);
    if (n.next[0].valid()) out[0] = r.dx;
    if (want_w) out[size_t(v.iw)] = r.dweight;
    if (want_b) out[size_t(v.ib)] = r.dbias;
    return out;
  }
  // A gradient of this gradient is wanted: the formula in recorded ops.
  std::vector<int> rows, lead;   // the normalised dims; the others
  for (int i = 0; i < v.x.dim(); ++i) (i >= v.x.dim() - normalized ? rows : lead).push_back(i);
  Tensor inv;
  Tensor xhat = recorded_xhat(v.x, rows, n.attrs.d[0], &inv);
  if (n.next[0].valid()) out[0] = normalised_input_grad(v.has_w ? g * v.w : g, xhat, inv, rows);
  if (want_w) out[size_t(v.iw)] = lead.empty() ? g * xhat : ag::reduce(Op::Sum, g * xhat, lead, false);
  if (want_b) out[size_t(v.ib)] = lead.empty() ? g : ag::reduce(Op::Sum, g, lead, false);
  return out;
}

// ---- an LSTM step's gates ------------------------------------------------------------------------------
// The node saves the gates' pre-activations and c; the backward computes the activations
// again (tensor/rnn_functors.h).

std::pair<Tensor, Tensor> lstm_gates(const Tensor& gates, const Tensor& c) {
  auto [h, c2] = dl::lstm_gates(gates, c);
  Ref<Node> n = maybe_node(Op::LstmGates, {&gates, &c});
  if (!n) return {h, c2};
  n->save(gates);
  n->save(c);
  finish_all(n, {&h, &c2});
  return {h, c2};
}
// With gc' = gh o (1 - tanh(c')^2) + gc, the whole gradient of c': the pre-activations'
// gradients gc' g i (1 - i), gc' c f (1 - f), gc' i (1 - g^2), gh tanh(c') o (1 - o), and
// c's gc' f.
template <> Grads derivative<Op::LstmGates>(Node& n, const TensorList& g) {
  Tensor gates = n.unpack(0), c = n.unpack(1);
  if (!is_recording() && !observing()) {
    auto [dgates, dc] = dl::lstm_gates_backward(gates, c, g[0], g[1]);
    return {dgates, dc};
  }
  // A gradient of this gradient is wanted, or an observer replays the pass (a compiled
  // gradient's plan, dl.vmap's capture: they run the ops of the table they see): the
  // formula in recorded ops.
  const int64_t H = c.size(c.dim() - 1);
  Tensor i = sigmoid(ag::narrow(gates, -1, 0, H)), f = sigmoid(ag::narrow(gates, -1, H, H));
  Tensor gg = ag::unary(Op::Tanh, ag::narrow(gates, -1, 2 * H, H)), o = sigmoid(ag::narrow(gates, -1, 3 * H, H));
  Tensor tc = ag::unary(Op::Tanh, f * c + i * gg);
  const Tensor zero = zeros(c.shape(), gates.dtype(), c.device());
  const Tensor& gh = g[0].defined() ? g[0] : zero;
  Tensor gcn = gh * o * (1.0 - tc * tc);
  if (g[1].defined()) gcn = gcn + g[1];
  Tensor dgates = ag::cat({gcn * gg * i * (1.0 - i), gcn * c * f * (1.0 - f), gcn * i * (1.0 - gg * gg),
                           gh * tc * o * (1.0 - o)}, -1);
  return {dgates, gcn * f};
}

// ---- embedding, loss -------------------------------------------------------------------------------------

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  Tensor y = dl::embedding(weight, indices, padding_idx);
  Ref<Node> n = maybe_node(Op::Embedding, {&weight});
  if (!n) return y;
  n->save(indices);
  n->attrs.i[0] = padding_idx.has_value();
  n->attrs.i[1] = padding_idx ? (*padding_idx < 0 ? *padding_idx + weight.size(0) : *padding_idx) : 0;
  return finish(n, y);
}
template <> Grads derivative<Op::Embedding>(Node& n, const TensorList& grads) {
  // Rows of g added into zeros at their indices; the padding row gets nothing.
  const Shape& ws = n.inputs[0].shape;
  Tensor idx = dl::cast(n.unpack(0), DType::Int64);
  const int64_t m = idx.numel(), D = ws[1];
  Tensor g = ag::reshape(grads[0], Shape{m, D});
  Tensor flat = dl::reshape(idx, Shape{m, 1});
  if (n.attrs.i[0]) {
    Tensor keep = dl::compare(Op::Ne, flat, Scalar::integer(n.attrs.i[1]));
    g = g * mask(keep, g);
  }
  Tensor rows = dl::contiguous(dl::expand(flat, Shape{m, D}));
  return {ag::scatter_add(zeros(ws, g.dtype(), g.device()), 0, rows, g)};
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     std::optional<int64_t> ignore_index) {
  Tensor y = dl::cross_entropy(logits, target, reduction, ignore_index);
  Ref<Node> n = maybe_node(Op::CrossEntropy, {&logits});
  if (!n) return y;
  n->save(logits);
  n->save(target);
  n->attrs.i[0] = int64_t(reduction);
  n->attrs.i[1] = ignore_index.has_value();
  n->attrs.i[2] = ignore_index.value_or(0);
  n->attrs.d[0] = reduction == Reduction::Mean ? double(cross_entropy_count(target, ignore_index)) : 1.0;
  return finish(n, y);
}
template <> Grads derivative<Op::CrossEntropy>(Node& n, const TensorList& grads) {
  // (softmax(logits) - onehot(target)) times the output gradient of each row; ignored
  // rows get zero. softmax is recorded, so this is differentiable again.
  Tensor x = n.unpack(0);
  Tensor t = dl::cast(n.unpack(1), DType::Int64);
  const int64_t N = x.size(0), C = x.size(1);
  const DType dt = is_floating(x.dtype()) ? x.dtype() : default_float();
  Tensor keep = ones(Shape{N, 1}, dt, x.device());
  Tensor onehot;
  if (n.attrs.i[1]) {
    Tensor col = dl::reshape(t, Shape{N, 1});
    Tensor kept = dl::compare(Op::Ne, col, Scalar::integer(n.attrs.i[2]));
    keep = dl::cast(kept, dt);
    col = dl::where(kept, col, zeros(Shape{}, DType::Int64, x.device()));  // any class: masked out
    onehot = dl::scatter_add(zeros(Shape{N, C}, dt, x.device()), 1, col, keep);
  } else {
    onehot = dl::one_hot(t, C, dt);   // (a step of a compiled plan, where scatter_add is not)
  }
  Tensor g = grads[0];
  switch (Reduction(n.attrs.i[0])) {
    case Reduction::None: g = ag::reshape(g, Shape{N, 1}) * keep; break;
    case Reduction::Sum: g = g * keep; break;
    // All rows ignored: a NaN loss, but zero gradients (as PyTorch's).
    case Reduction::Mean: g = g * keep / std::max(n.attrs.d[0], 1.0); break;
  }
  return {(ag::softmax(x, 1) - onehot) * g};
}

}  // namespace dl::ag
