// Grad mode, tensor histories, variables, and the backward engine.
#include "autograd/engine.h"

#include <algorithm>

#include "autograd/autograd.h"
#include "autograd/record.h"

namespace dl::ag {

// ---- grad mode --------------------------------------------------------------------

namespace {
thread_local int t_scopes = 0;        // open GradScopes
thread_local bool t_no_grad = false;  // inside a NoGradScope
thread_local VariableLog* t_varlog = nullptr;
thread_local uint64_t t_stamp = 0;
}  // namespace

bool is_recording() { return t_scopes > 0 && !t_no_grad; }
GradScope::GradScope() { ++t_scopes; }
GradScope::~GradScope() { --t_scopes; }
NoGradScope::NoGradScope() : prev_(t_no_grad) { t_no_grad = true; }
NoGradScope::~NoGradScope() { t_no_grad = prev_; }
uint64_t next_history_stamp() { return ++t_stamp; }

// ---- nodes -------------------------------------------------------------------------

namespace {
thread_local std::vector<Node*>* t_graveyard = nullptr;

// Drops one reference to `n`; the node is deleted by the outermost ~Node's loop.
void bury(Ref<Node>& r) {
  Node* n = r.release();
  if (n && n->release_ref()) t_graveyard->push_back(n);
}
}  // namespace

Node::~Node() {
  // See Note [Teardown of long chains].
  bool outermost = t_graveyard == nullptr;
  std::vector<Node*> local;
  if (outermost) t_graveyard = &local;
  for (int i = 0; i < next.size(); ++i) bury(next[i].node);
  for (int i = 0; i < saved.size(); ++i) bury(saved[i].edge.node);
  if (outermost) {
    while (!local.empty()) {
      Node* n = local.back();
      local.pop_back();
      delete n;  // its children land in `local`
    }
    t_graveyard = nullptr;
  }
}

namespace {
// A new TensorImpl sharing t's storage and geometry, with no history and no base.
Tensor alias(const Tensor& t) {
  auto impl = make_ref<TensorImpl>(t.impl()->storage, t.shape(), t.strides(), t.offset(), t.dtype());
  return Tensor(std::move(impl));
}
}  // namespace

void Node::save(const Tensor& t, bool is_output, uint32_t output_nr) {
  SavedTensor s;
  s.data = alias(t);
  s.version = t.storage().version();
  s.is_output = is_output;
  s.output_nr = output_nr;
  if (!is_output) s.edge = edge_of(t);
  saved.push_back(std::move(s));
}

Tensor Node::unpack(int i) {
  DL_CHECK(!released, name, ": its graph was already used by a backward pass and freed "
           "(take all gradients in one call, or use a persistent tape)");
  SavedTensor& s = saved[i];
  DL_CHECK(s.data.storage().version() == s.version, name,
           ": a tensor needed to compute its gradient was modified by an in-place operation "
           "(version ", s.data.storage().version(), ", expected ", s.version, ")");
  if (!is_recording()) return s.data;
  Tensor t = alias(s.data);
  if (s.is_output) set_history(t, Ref<Node>(this), s.output_nr);
  else if (s.edge.valid()) set_history(t, s.edge.node, s.edge.nr);
  return t;
}

// ---- histories -----------------------------------------------------------------------

void set_history(const Tensor& t, const Ref<Node>& node, uint32_t nr) {
  TensorImpl* i = t.impl();
  i->grad_node = node;
  i->grad_nr = nr;
  i->grad_version = next_history_stamp();
}

Edge edge_of(const Tensor& t) {
  TensorImpl* i = t.impl();
  if (i->is_variable) {
    if (!is_recording()) return {};
    if (t_varlog) t_varlog->note(t);
  }
  TensorImpl* base = i->view_base.get();
  if (base && base->grad_node && base->grad_version > i->grad_version) regenerate_view_history(t);
  if (!i->grad_node) return {};
  return Edge{Ref<Node>(static_cast<Node*>(i->grad_node.get())), i->grad_nr};
}

bool requires_grad(const Tensor& t) { return is_recording() && edge_of(t).valid(); }

Tensor detach(const Tensor& x) { return alias(x); }

namespace {
TensorList identity_backward(Node&, const TensorList& g) { return {g[0]}; }
}  // namespace

Tensor watch(const Tensor& x) {
  DL_CHECK_KIND(Type, x.is_floating(), "grad: cannot differentiate with respect to a tensor of dtype ",
                dtype_name(x.dtype()), " (only float32 and float64)");
  Tensor y = alias(x);
  Ref<Node> n = make_ref<Node>();
  n->name = "watch";
  n->backward = identity_backward;
  n->next.push_back(edge_of(x));
  n->inputs.push_back(InputMeta{x.shape(), x.dtype()});
  set_history(y, n, 0);
  return y;
}

void watch_inplace(const Tensor& x) {
  DL_CHECK_KIND(Type, x.is_floating(), "watch: cannot differentiate with respect to a tensor of dtype ",
                dtype_name(x.dtype()), " (only float32 and float64)");
  TensorImpl* i = x.impl();
  if (i->grad_node) return;
  Ref<Node> leaf = make_ref<Node>();
  leaf->name = "watch";
  set_history(x, leaf, 0);
}

// ---- variables -------------------------------------------------------------------------

void mark_variable(const Tensor& x) {
  DL_CHECK_KIND(Type, x.is_floating(), "Variable: expected a floating tensor, got ",
                dtype_name(x.dtype()));
  TensorImpl* i = x.impl();
  if (i->is_variable) return;
  Ref<Node> leaf = make_ref<Node>();
  leaf->name = "Variable";
  i->grad_node = leaf;
  i->grad_nr = 0;
  i->grad_version = next_history_stamp();
  i->is_variable = true;
}

bool is_variable(const Tensor& x) { return x.impl()->is_variable; }

VariableLog::VariableLog() : prev_(t_varlog) { t_varlog = this; }
VariableLog::~VariableLog() { t_varlog = prev_; }
void VariableLog::note(const Tensor& v) {
  const void* key = v.impl();
  if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) return;
  seen_.push_back(key);
  used_.push_back(v);
  if (prev_) prev_->note(v);  // an enclosing log sees it too
}

// ---- the engine -------------------------------------------------------------------------

GraphTask::GraphTask(const TensorList& outputs, const TensorList& grad_outputs,
                     const TensorList& inputs, bool create_graph, bool retain_graph)
    // A recorded backward refers to the forward graph: keep it for the outer pass.
    : inputs_(inputs), create_graph_(create_graph), retain_graph_(retain_graph || create_graph) {
  DL_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
           "grad: ", outputs.size(), " outputs but ", grad_outputs.size(), " output gradients");
  GradScope scope;  // edges of variables are visible while the task is set up
  for (const Tensor& x : inputs) input_edges_.push_back(edge_of(x));
  captured_.resize(inputs.size());
  std::vector<Edge> roots;
  TensorList seeds;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& y = outputs[k];
    Tensor g;
    if (!grad_outputs.empty() && grad_outputs[k].defined()) {
      g = grad_outputs[k];
      DL_CHECK(g.shape() == y.shape(), "grad: output gradient of shape ", g.shape(),
               " does not match the output's shape ", y.shape());
    } else {
      DL_CHECK(y.numel() == 1, "grad: the function must return a single-element tensor to be "
               "differentiated, got shape ", y.shape(), " (sum it, or pass output gradients)");
      DL_CHECK_KIND(Type, y.is_floating(), "grad: the function's result has dtype ",
                    dtype_name(y.dtype()), "; gradients need float32 or float64");
      g = ones(y.shape(), y.dtype(), y.device());
    }
    Edge e = edge_of(y);
    if (!e.valid()) continue;  // the output does not depend on anything watched
    roots.push_back(e);
    seeds.push_back(g);
  }
  discover(roots);
  for (size_t k = 0; k < roots.size(); ++k) {
    keep_.push_back(roots[k].node);
    add_grad(roots[k], seeds[k]);
  }
  for (auto& [n, inf] : info_)
    if (inf.deps == 0 && inf.needed) ready_.push_back(n);
}

GraphTask::~GraphTask() = default;

void GraphTask::discover(const std::vector<Edge>& roots) {
  std::vector<Node*> targets;
  for (const Edge& e : input_edges_) if (e.valid()) targets.push_back(e.node.get());
  // Iterative DFS: count the edges into each node; order nodes for the "needed" pass.
  std::vector<Node*> stack, order;
  for (const Edge& e : roots) {
    if (info_.count(e.node.get())) continue;
    info_[e.node.get()];
    stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (int i = 0; i < n->next.size(); ++i) {
      Node* c = n->next[i].node.get();
      if (!c) continue;
      auto [it, fresh] = info_.try_emplace(c);
      it->second.deps++;
      if (fresh) stack.push_back(c);
    }
  }
  // A node is needed when it is a target or feeds a needed node. Propagate to a fixed
  // point in reverse discovery order (children were discovered after parents).
  for (Node* t : targets) if (info_.count(t)) info_[t].needed = true;
  bool changed = true;
  while (changed) {
    changed = false;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Info& inf = info_[*it];
      if (inf.needed) continue;
      for (int i = 0; i < (*it)->next.size(); ++i) {
        Node* c = (*it)->next[i].node.get();
        if (c && info_[c].needed) { inf.needed = true; changed = true; break; }
      }
    }
  }
  // Dependencies only count edges from needed nodes (others never run).
  for (auto& [n, inf] : info_) inf.deps = 0;
  for (Node* n : order) {
    if (!info_[n].needed) continue;
    for (int i = 0; i < n->next.size(); ++i)
      if (Node* c = n->next[i].node.get()) info_[c].deps++;
  }
}

void GraphTask::add_grad(const Edge& e, const Tensor& g) {
  auto it = info_.find(e.node.get());
  if (it == info_.end() || !it->second.needed || !g.defined()) return;
  auto& buf = it->second.buf;
  if (buf.size() < e.node->num_outputs) buf.resize(e.node->num_outputs);
  Tensor& slot = buf[e.nr];
  slot = slot.defined() ? ag::binary(Op::Add, slot, g) : g;
}

bool GraphTask::run() {
  // Backward formulas are recorded only when a higher-order gradient is wanted.
  std::optional<GradScope> rec;
  std::optional<NoGradScope> norec;
  if (create_graph_) rec.emplace(); else norec.emplace();
  while (!ready_.empty()) {
    Node* n = ready_.back();
    ready_.pop_back();
    Info& inf = info_[n];
    // Capture gradients arriving at the inputs asked for.
    for (size_t k = 0; k < input_edges_.size(); ++k) {
      const Edge& e = input_edges_[k];
      if (e.node.get() != n || e.nr >= inf.buf.size() || !inf.buf[e.nr].defined()) continue;
      captured_[k] = captured_[k].defined() ? ag::binary(Op::Add, captured_[k], inf.buf[e.nr])
                                            : inf.buf[e.nr];
    }
    bool any = false, feeds = false;
    for (auto& g : inf.buf) any = any || g.defined();
    for (int i = 0; i < n->next.size() && !feeds; ++i) {
      auto it = info_.find(n->next[i].node.get());
      feeds = it != info_.end() && it->second.needed;
    }
    if (!any || !feeds || !n->backward) {
      finish_node(n, {});
      continue;
    }
    if (n->custom_ref) {  // a Lua backward: hand control back to the binding
      custom_ = n;
      pending_.assign(inf.buf.begin(), inf.buf.end());
      pending_.resize(n->num_outputs);
      return false;
    }
    TensorList grads = n->backward(*n, inf.buf);
    finish_node(n, grads);
  }
  return true;
}

void GraphTask::supply(const TensorList& grads) {
  DL_CHECK(custom_ != nullptr, "custom_gradient: no gradient was asked for");
  Node* n = custom_;
  custom_ = nullptr;
  pending_.clear();
  DL_CHECK(int(grads.size()) == n->next.size(), "custom_gradient: the gradient function returned ",
           grads.size(), " gradients for ", n->next.size(), " inputs");
  finish_node(n, grads);
}

void GraphTask::finish_node(Node* n, const TensorList& grads) {
  for (int i = 0; i < n->next.size(); ++i) {
    const Edge& e = n->next[i];
    if (!e.valid()) continue;
    if (i < int(grads.size()) && grads[i].defined()) {
      Tensor g = grads[i];
      const InputMeta& m = n->inputs[i];
      // The one place broadcast gradients are reduced to the input's shape and dtype.
      if (g.shape() != m.shape) g = ag::sum_to(g, m.shape);
      if (g.dtype() != m.dtype && is_floating(m.dtype)) g = ag::cast(g, m.dtype);
      add_grad(e, g);
    }
    auto it = info_.find(e.node.get());
    if (it != info_.end() && it->second.needed && --it->second.deps == 0) ready_.push_back(e.node.get());
  }
  info_[n].buf.clear();
  if (!retain_graph_ && !n->custom_ref) {
    n->saved.clear();
    n->released = n->backward != nullptr;
  }
}

TensorList GraphTask::results() const {
  TensorList out;
  for (size_t k = 0; k < inputs_.size(); ++k)
    out.push_back(captured_[k].defined() ? captured_[k] : zeros(inputs_[k].shape(), inputs_[k].dtype(),
                                                                 inputs_[k].device()));
  return out;
}

TensorList grad(const TensorList& outputs, const TensorList& grad_outputs, const TensorList& inputs,
                bool create_graph, bool retain_graph) {
  GraphTask task(outputs, grad_outputs, inputs, create_graph, retain_graph);
  DL_CHECK(task.run(), "grad: the graph holds a custom gradient; call it from Lua");
  return task.results();
}

}  // namespace dl::ag
