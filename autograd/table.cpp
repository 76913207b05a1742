// The derivative table, built from tensor/ops.def (see autograd/record.h).
#include "autograd/record.h"

namespace dl::ag {

namespace {
template <Op op, bool diff>
constexpr BackwardFn pick() {
  if constexpr (diff) return &derivative<op>;
  else return nullptr;
}

const BackwardFn kTable[] = {
#define DL_OP(Name, lua, arity, flags) pick<Op::Name, ((flags) & kDiff) != 0>(),
#include "tensor/ops.def"
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == size_t(kNumOps));
}  // namespace

BackwardFn derivative_of(Op op) { return kTable[static_cast<int>(op)]; }
bool has_derivative(Op op) { return derivative_of(op) != nullptr; }

namespace {
const Tensor& deref(const Tensor* t) { return *t; }
const Tensor& deref(const Tensor& t) { return t; }

template <typename It>
Ref<Node> make_node(const char* name, BackwardFn fn, It begin, It end) {
  if (!is_recording() || !fn) return {};
  constexpr int kInline = 4;   // most ops have at most 4 inputs: no allocation for them
  bool any = false;
  Edge edges[kInline];
  int k = 0;
  std::vector<Edge> many;
  for (It it = begin; it != end; ++it, ++k) {
    Edge e = edge_of(deref(*it));
    any = any || e.valid();
    if (k < kInline) edges[k] = std::move(e); else many.push_back(std::move(e));
  }
  if (!any) return {};
  Ref<Node> n = make_ref<Node>();
  n->name = name;
  n->backward = fn;
  k = 0;
  for (It it = begin; it != end; ++it, ++k) {
    const Tensor& t = deref(*it);
    n->next.push_back(k < kInline ? std::move(edges[k]) : std::move(many[k - kInline]));
    n->inputs.emplace_back(t.shape(), t.dtype());
  }
  return n;
}
}  // namespace

Ref<Node> maybe_node(const char* name, BackwardFn fn, std::initializer_list<const Tensor*> ins) {
  return make_node(name, fn, ins.begin(), ins.end());
}
Ref<Node> maybe_node(const char* name, BackwardFn fn, const TensorList& ins) {
  return make_node(name, fn, ins.begin(), ins.end());
}

Tensor finish(const Ref<Node>& node, Tensor y, uint32_t nr) {
  if (!node) return y;
  // An op that returned its input unchanged (a cast to the same dtype, contiguous()
  // of a contiguous tensor) must not overwrite that input's history: alias it.
  if (y.impl()->grad_node || y.impl()->is_variable)  // (inputs without history record nothing)
    y = make_view(y, y.shape(), y.strides(), y.offset());
  set_history(y, node, nr);
  return y;
}

void finish_all(const Ref<Node>& node, std::initializer_list<Tensor*> outs) {
  node->num_outputs = uint32_t(outs.size());
  uint32_t nr = 0;
  for (Tensor* y : outs) *y = finish(node, std::move(*y), nr++);
}

std::vector<int> dims_of(const Attrs& a) {
  std::vector<int> d;
  for (int64_t v : a.dims) d.push_back(int(v));
  return d;
}

}  // namespace dl::ag
