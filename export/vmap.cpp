// The batched run of a captured graph (vmap.h).
//
// Note [Batching rules]
// ~~~~~~~~~~~~~~~~~~~~~
// A graph captured on one example says, for every value, its shape for that example
// (its logical shape). The batched run keeps each value either shared (the logical shape
// itself) or batched (a batch dim in front: dim 0, of size B, then the logical shape),
// as functorch's BatchedTensor does with its batch dim always moved to the front. A node
// none of whose inputs is batched runs as it is: its results are shared. Otherwise its
// op's rule turns the node into engine calls on the batched operands:
//
//   - dims move by one: a dim d >= 0 of the example is d + 1 of the batch; a negative
//     dim counts from the end and stays (softmax, cumsum, sort, narrow, cat ...);
//   - operands that broadcast get their batch dims lined up: a batched operand of lower
//     logical rank gets size-1 dims after its batch dim (binary ops, where, matmul,
//     expand), shared operands broadcast as they are;
//   - ops that already work over leading dims run on the batch as it is (layer_norm, the
//     decompositions), and ops over a leading batch of their own fold B into it
//     (conv2d, pooling, cross_entropy with its sum of per-row losses split per example);
//   - every result of a rule is reshaped to (B, logical shape...), which is where the
//     shape functions' rules end (reshape, view, squeeze, unsqueeze are that reshape).
//
// An op with no rule, or a case its rule does not take, runs once per example on the
// examples' slices, and its results are stacked (functorch's fallback): always right,
// never fast; looped() names such ops so that dl.vmap can say so. Rules call the same
// front ends eager execution calls, so a batched result equals the stacked results of
// one example at a time (tests/lua/test_vmap.lua compares every rule with that).
#include "export/vmap.h"

#include <algorithm>

#include "export/ops.h"
#include "tensor/error.h"
#include "tensor/nn.h"

namespace dl::graph {

namespace {

int64_t logical_rank(const BatchedValue& v) { return v.t.dim() - (v.batched ? 1 : 0); }

// A dim of one example as a dim of the batch.
int64_t shifted(int64_t d) { return d >= 0 ? d + 1 : d; }

// A batched tensor with size-1 dims added after its batch dim up to logical rank r.
Tensor padded(const Tensor& t, int64_t r) {
  Tensor x = t;
  while (x.dim() - 1 < r) x = unsqueeze(x, 1);
  return x;
}

// The value for every example: shared ones expanded along a new batch dim.
Tensor batched_form(const BatchedValue& v, int64_t batch) {
  if (v.batched) return v.t;
  Shape s = v.t.shape();
  s.insert(0, batch);
  return expand(unsqueeze(v.t, 0), s);
}

// The node being run: its row, its inputs and its resolved ints.
struct Call {
  const Node& n;
  const OpRow& row;
  std::vector<BatchedValue> in;
  std::vector<int64_t> ints;
  int64_t batch;
  Device device;   // the inputs' (a full node makes its tensor there)

  const Tensor& t(size_t k) const { return in[k].t; }
  bool batched(size_t k) const { return k < in.size() && in[k].batched; }
  bool only_first_batched() const {
    for (size_t k = 1; k < in.size(); ++k)
      if (in[k].batched) return false;
    return in[0].batched;
  }
  int64_t max_rank() const {
    int64_t r = 0;
    for (const BatchedValue& v : in)
      if (v.t.defined()) r = std::max(r, logical_rank(v));
    return r;
  }
  // Runs the node's row on these tensors and ints.
  void run(const std::vector<Tensor>& ts, const std::vector<int64_t>& is, std::vector<Tensor>& out) const {
    std::vector<const Tensor*> p;
    for (const Tensor& x : ts) p.push_back(x.defined() ? &x : nullptr);
    row.run(row, OpArgs{p.data(), int(p.size()), is.data(), int(is.size()), n.nums.data(), int(n.nums.size()), device},
            out);
  }
  std::vector<Tensor> tensors() const {
    std::vector<Tensor> ts;
    for (const BatchedValue& v : in) ts.push_back(v.t);
    return ts;
  }
};

// ---- the rules: each returns false for a case it does not take ------------------------------

bool broadcasting(const Call& c, std::vector<Tensor>& out) {
  const int64_t r = c.max_rank();
  std::vector<Tensor> ts;
  for (const BatchedValue& v : c.in) ts.push_back(v.batched ? padded(v.t, r) : v.t);
  c.run(ts, c.ints, out);
  return true;
}

bool as_is(const Call& c, std::vector<Tensor>& out) {
  c.run(c.tensors(), c.ints, out);
  return true;
}

// Ops whose ints[k] is a dim of the first input (softmax, cumsum, sort, narrow ...).
template <int k>
bool dim_arg(const Call& c, std::vector<Tensor>& out) {
  if (!c.only_first_batched() || logical_rank(c.in[0]) == 0) return false;
  std::vector<int64_t> is = c.ints;
  is[k] = shifted(is[k]);
  c.run(c.tensors(), is, out);
  return true;
}

// Appends the region {sizes (k), strides (k), offset} at v[at..] with the batch in front,
// one more dim of `each` elements a step: {k + 1 sizes, k + 1 strides, offset}.
void batched_region(std::vector<int64_t>& is, const std::vector<int64_t>& v, size_t at, int64_t k, int64_t batch,
                    int64_t each) {
  is.push_back(batch);
  is.insert(is.end(), v.begin() + at, v.begin() + at + k);
  is.push_back(each);
  is.insert(is.end(), v.begin() + at + k, v.begin() + at + 2 * k);
  is.push_back(v[at + 2 * k]);
}

// embed's ints {b, k, base (b), sizes (k), strides (k), offset}: the batch is one more
// dim of both the base and the region, whose stride is the base's size.
bool embed_rule(const Call& c, std::vector<Tensor>& out) {
  const std::vector<int64_t>& v = c.ints;
  if (v.size() < 3) return false;
  const int64_t b = v[0], k = v[1];
  if (b < 0 || k < 0 || int64_t(v.size()) != 3 + b + 2 * k) return false;
  int64_t numel = 1;
  for (int64_t i = 0; i < b; ++i) numel *= v[size_t(2 + i)];
  std::vector<int64_t> is = {b + 1, k + 1, c.batch};
  is.insert(is.end(), v.begin() + 2, v.begin() + 2 + b);
  batched_region(is, v, size_t(2 + b), k, c.batch, numel);
  c.run(c.tensors(), is, out);
  return true;
}

// strided_view's ints {k, sizes (k), strides (k), offset}, of each example's contiguous
// elements: the batch is one more dim, whose stride is an example's size.
bool strided_view_rule(const Call& c, std::vector<Tensor>& out) {
  const std::vector<int64_t>& v = c.ints;
  if (v.empty() || int64_t(v.size()) != 2 + 2 * v[0] || !c.batched(0)) return false;
  const int64_t k = v[0], each = c.batch > 0 ? c.t(0).numel() / c.batch : 0;
  std::vector<int64_t> is = {k + 1};
  batched_region(is, v, 1, k, c.batch, each);
  c.run(c.tensors(), is, out);
  return true;
}

// ints {keepdim, dims...}; no dims: all of them.
bool reduction(const Call& c, std::vector<Tensor>& out) {
  const int64_t r = logical_rank(c.in[0]);
  if (r == 0) return false;
  std::vector<int64_t> is = {c.ints[0]};
  if (c.ints.size() == 1)
    for (int64_t d = 1; d <= r; ++d) is.push_back(d);
  for (size_t k = 1; k < c.ints.size(); ++k) is.push_back(shifted(c.ints[k]));
  c.run(c.tensors(), is, out);
  return true;
}

// ints {has a dim, the dim, keepdim}; without a dim, over the whole example.
bool arg_reduction(const Call& c, std::vector<Tensor>& out) {
  if (logical_rank(c.in[0]) == 0) return false;
  if (c.ints[0]) return dim_arg<1>(c, out);
  c.run({reshape(c.t(0), Shape{c.batch, -1})}, {1, 1, 0}, out);
  return true;
}

bool matmul_rule(const Call& c, std::vector<Tensor>& out) {
  Tensor a = c.t(0), b = c.t(1);
  int64_t ra = logical_rank(c.in[0]), rb = logical_rank(c.in[1]);
  // A batched vector becomes a matrix (a row on the left, a column on the right); the
  // reshape to the result's shape removes the dim again.
  if (c.batched(0) && ra == 1) a = unsqueeze(a, 1), ra = 2;
  if (c.batched(1) && rb == 1) b = unsqueeze(b, 2), rb = 2;
  const int64_t r = std::max(ra, rb);
  if (c.batched(0)) a = padded(a, r);
  if (c.batched(1)) b = padded(b, r);
  out = {matmul(a, b)};
  return true;
}

// ints {the shape}: sum the example's extra leading dims, then its size-1 dims.
bool sum_to_rule(const Call& c, std::vector<Tensor>& out) {
  Tensor x = c.t(0);
  const int64_t lead = logical_rank(c.in[0]) - int64_t(c.ints.size());
  if (lead > 0) {
    std::vector<int> dims;
    for (int d = 1; d <= lead; ++d) dims.push_back(d);
    x = reduce(Op::Sum, x, dims, false);
    if (x.dtype() != c.t(0).dtype()) x = cast(x, c.t(0).dtype());
  }
  std::vector<int64_t> is = {c.batch};
  is.insert(is.end(), c.ints.begin(), c.ints.end());
  c.run({x}, is, out);
  return true;
}

bool expand_rule(const Call& c, std::vector<Tensor>& out) {
  std::vector<int64_t> is = {c.batch};
  is.insert(is.end(), c.ints.begin(), c.ints.end());
  c.run({padded(c.t(0), int64_t(c.ints.size()))}, is, out);
  return true;
}

// The result's shape is all the node needs (reshape, view, squeeze, unsqueeze): the
// reshape of every result in run() does it.
bool reshaped(const Call& c, std::vector<Tensor>& out) {
  out = {c.t(0)};
  return true;
}

bool transpose_rule(const Call& c, std::vector<Tensor>& out) {
  if (logical_rank(c.in[0]) == 0) return false;
  c.run(c.tensors(), {shifted(c.ints[0]), shifted(c.ints[1])}, out);
  return true;
}

bool permute_rule(const Call& c, std::vector<Tensor>& out) {
  const int64_t r = logical_rank(c.in[0]);
  std::vector<int64_t> is = {0};
  for (int64_t d : c.ints) is.push_back((d < 0 ? d + r : d) + 1);
  c.run(c.tensors(), is, out);
  return true;
}

// cat, stack, gather, scatter_add: every operand batched, ints[0] the dim.
bool all_batched(const Call& c, std::vector<Tensor>& out) {
  if (c.max_rank() == 0 && c.n.op != "stack") return false;
  std::vector<Tensor> ts;
  for (const BatchedValue& v : c.in) ts.push_back(batched_form(v, c.batch));
  c.run(ts, {shifted(c.ints[0])}, out);
  return true;
}

// index_select(x, dim, index) with x mapped (its dim moves) or with x shared and the
// index mapped (an embedding lookup per example): every example's indices in one call,
// the batch of them then moved to the front.
bool index_select_rule(const Call& c, std::vector<Tensor>& out) {
  if (c.batched(0) && !c.batched(1)) return dim_arg<0>(c, out);
  if (c.batched(0) || logical_rank(c.in[1]) != 1) return false;
  const Tensor& x = c.t(0);
  const int64_t d = c.ints[0] < 0 ? c.ints[0] + x.dim() : c.ints[0];
  if (d < 0 || d >= x.dim()) return false;   // the engine's message, from the fallback
  const Tensor& index = c.t(1);   // (B, k)
  Tensor r = index_select(x, int(d), reshape(index, Shape{-1}));   // dim d: B * k
  Shape s;
  for (int64_t k = 0; k < d; ++k) s.push_back(x.size(int(k)));
  s.push_back(c.batch);
  s.push_back(index.size(1));
  for (int64_t k = d + 1; k < x.dim(); ++k) s.push_back(x.size(int(k)));
  std::vector<int> order = {int(d)};
  for (int k = 0; k < s.size(); ++k)
    if (k != int(d)) order.push_back(k);
  out = {permute(reshape(r, s), order)};
  return true;
}

// conv2d, conv_transpose2d and the pools on (N, C, H, W) examples: N becomes B * N; on
// (C, H, W) examples the batch is the N. The other operands are shared.
bool folded_images(const Call& c, std::vector<Tensor>& out) {
  if (!c.only_first_batched()) return false;
  std::vector<Tensor> ts = c.tensors();
  const int64_t r = logical_rank(c.in[0]);
  if (r == 4) {
    Shape s = ts[0].shape();
    ts[0] = reshape(ts[0], Shape{s[0] * s[1], s[2], s[3], s[4]});
  } else if (r != 3) {
    return false;
  }
  c.run(ts, c.ints, out);
  return true;
}

// x, weight, bias: normalised over its trailing dims, which the batch does not touch.
bool layer_norm_rule(const Call& c, std::vector<Tensor>& out) {
  if (!c.only_first_batched() || c.ints[0] < 0 || c.ints[0] > logical_rank(c.in[0])) return false;
  return as_is(c, out);
}

// gates (..., 4H) and c (..., H), which must share their leading dims: both batched.
bool lstm_gates_rule(const Call& c, std::vector<Tensor>& out) {
  c.run({batched_form(c.in[0], c.batch), batched_form(c.in[1], c.batch)}, c.ints, out);
  return true;
}

// ints {reduction, has ignore_index, ignore_index}: the per-row losses of every example
// in one call, then summed (or averaged) per example.
bool cross_entropy_rule(const Call& c, std::vector<Tensor>& out) {
  const auto reduction = Reduction(c.ints[0]);
  const int64_t r = logical_rank(c.in[0]);
  if (r < 1 || (reduction == Reduction::Mean && c.ints[1])) return false;
  Tensor logits = batched_form(c.in[0], c.batch), target = batched_form(c.in[1], c.batch);
  if (r >= 2) {   // (B, N, C, ...) -> (B * N, C, ...), the targets alike
    Shape s = logits.shape(), st = target.shape();
    Shape fs{s[0] * s[1]}, ft{st[0] * st[1]};
    for (int d = 2; d < s.size(); ++d) fs.push_back(s[d]);
    for (int d = 2; d < st.size(); ++d) ft.push_back(st[d]);
    logits = reshape(logits, fs);
    target = reshape(target, ft);
  }
  std::vector<int64_t> is = c.ints;
  is[0] = int64_t(Reduction::None);
  c.run({logits, target}, is, out);
  if (reduction == Reduction::None) return true;
  Tensor per = reshape(out[0], Shape{c.batch, -1});
  Tensor y = reduction == Reduction::Sum ? reduce(Op::Sum, per, {1}, false) : reduce(Op::Mean, per, {1}, false);
  out = {y};
  return true;
}

// Solves on a matrix and a vector or matrix right side: both batched.
bool solve_rule(const Call& c, std::vector<Tensor>& out) {
  if (logical_rank(c.in[0]) != 2 || logical_rank(c.in[1]) > 2) return false;
  Tensor a = batched_form(c.in[0], c.batch), b = batched_form(c.in[1], c.batch);
  if (logical_rank(c.in[1]) == 1) b = unsqueeze(b, 2);
  c.run({a, b}, c.ints, out);
  return true;
}

using Rule = bool (*)(const Call&, std::vector<Tensor>&);

struct NamedRule {
  std::string_view op;
  Rule rule;
};

// The rules of the ops outside the op table's families, by row name (export/ops.cpp).
constexpr NamedRule kRules[] = {
    {"matmul", matmul_rule},
    {"sum_to", sum_to_rule},
    {"expand", expand_rule},
    {"reshape", reshaped},
    {"view", reshaped},
    {"squeeze", reshaped},
    {"unsqueeze", reshaped},
    {"transpose", transpose_rule},
    {"to", as_is},
    {"contiguous", as_is},
    {"clone", as_is},
    {"where", broadcasting},
    {"clamp", as_is},
    {"softmax", dim_arg<0>},
    {"log_softmax", dim_arg<0>},
    {"cumsum", dim_arg<0>},
    {"cumprod", dim_arg<0>},
    {"max_dim", dim_arg<0>},
    {"min_dim", dim_arg<0>},
    {"argmax", arg_reduction},
    {"argmin", arg_reduction},
    {"permute", permute_rule},
    {"narrow", dim_arg<0>},
    {"slice", dim_arg<0>},
    {"select", dim_arg<0>},
    {"cat", all_batched},
    {"stack", all_batched},
    {"index_select", index_select_rule},
    {"gather", all_batched},
    {"scatter_add", all_batched},
    {"conv2d", folded_images},
    {"conv_transpose2d", folded_images},
    {"max_pool2d", folded_images},
    {"avg_pool2d", folded_images},
    {"layer_norm", layer_norm_rule},
    {"lstm_gates", lstm_gates_rule},
    {"cross_entropy", cross_entropy_rule},
    {"one_hot", as_is},
    {"sort", dim_arg<0>},
    {"linalg_solve", solve_rule},
    {"solve_triangular", solve_rule},
    {"cholesky", as_is},
    {"fft_c2c", as_is},
    {"fft_r2c", as_is},
    {"fft_c2r", as_is},
    {"embed", embed_rule},
    {"strided_view", strided_view_rule},
    {"qr", as_is},
    {"eigh", as_is},
    {"svd", as_is},
    {"slogdet", as_is},
};

Rule rule_of(const Node& n, const OpRow& row) {
  const OpInfo& info = op_info(row.op);
  if (info.lua_name == row.name) {
    switch (info.family) {
      case OpFamily::Unary: return as_is;
      case OpFamily::Binary:
      case OpFamily::Compare: return broadcasting;
      case OpFamily::Reduce: return reduction;
      case OpFamily::Other: break;
    }
  }
  for (const NamedRule& r : kRules)
    if (r.op == n.op) return r.rule;
  return nullptr;
}

// The fallback: the node once per example, its results stacked.
void per_example(const Call& c, std::vector<Tensor>& out) {
  std::vector<std::vector<Tensor>> each(c.n.out.size());
  std::vector<Tensor> ts(c.in.size()), r;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (size_t k = 0; k < c.in.size(); ++k) ts[k] = c.in[k].batched ? select(c.in[k].t, 0, b) : c.in[k].t;
    r.clear();
    c.run(ts, c.ints, r);
    for (size_t k = 0; k < each.size() && k < r.size(); ++k) each[k].push_back(r[k]);
  }
  out.clear();
  for (auto& list : each) out.push_back(list.size() == size_t(c.batch) && list[0].defined() ? stack(list, 0) : Tensor());
}

}  // namespace

Batching::Batching(const Graph& g, const std::vector<Tensor>& constants, int64_t batch)
    : g_(g), constants_(constants), batch_(batch) {}

std::vector<BatchedValue> Batching::run(const std::vector<BatchedValue>& inputs) {
  DL_CHECK_KIND(Type, inputs.size() == g_.inputs.size(), "vmap: the graph takes ", g_.inputs.size(),
                " inputs, got ", inputs.size());
  DL_CHECK(batch_ >= 1, "vmap: a batch of ", batch_, " examples");
  looped_.clear();
  std::vector<BatchedValue> vals(g_.values.size());
  for (size_t k = 0; k < g_.constants.size(); ++k) vals[size_t(g_.constants[k].first)] = {constants_.at(k), false};
  for (size_t k = 0; k < inputs.size(); ++k) vals[size_t(g_.inputs[k])] = inputs[k];
  Device device;   // the arguments' (dl_vmap_begin's capture saw them all on one)
  for (const BatchedValue& v : inputs)
    if (v.t.defined()) device = v.t.device();
  std::vector<Tensor> out;
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const Node& n = g_.nodes[i];
    const OpRow* row = find_op(n.op);
    DL_CHECK(row && row->ngraphs == 0, "vmap: ", n.op, " (dl.while_loop) cannot run on a batch");
    Call c{n, *row, {}, {}, batch_, device};
    bool any = false;
    for (int32_t v : n.in) {
      c.in.push_back(v >= 0 ? vals[size_t(v)] : BatchedValue{});
      any = any || c.in.back().batched;
    }
    for (const Int& x : n.ints) c.ints.push_back(x.add);   // a vmap graph has no symbols
    out.clear();
    try {
      if (!any) {
        c.run(c.tensors(), c.ints, out);
      } else {
        const Rule rule = rule_of(n, *row);
        if (!rule || !rule(c, out)) {
          per_example(c, out);
          if (std::find(looped_.begin(), looped_.end(), n.op) == looped_.end()) looped_.push_back(n.op);
        }
      }
    } catch (const Error& e) {
      fail(e.kind(), "vmap: ", n.op, ": ", e.what());
    }
    for (size_t k = 0; k < n.out.size() && k < out.size(); ++k) {
      const int32_t v = n.out[k];
      if (v < 0 || !out[k].defined()) continue;
      if (!any) {
        vals[size_t(v)] = {std::move(out[k]), false};
        continue;
      }
      Shape s{batch_};
      for (const Int& d : g_.values[size_t(v)].shape) s.push_back(d.add);
      vals[size_t(v)] = {out[k].shape() == s ? std::move(out[k]) : reshape(out[k], s), true};
    }
  }
  std::vector<BatchedValue> results;
  for (int32_t v : g_.outputs) results.push_back(vals[size_t(v)]);
  return results;
}

}  // namespace dl::graph
