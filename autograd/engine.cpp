// Grad mode, tensor histories, variables, and the backward engine.
#include "autograd/engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "autograd/autograd.h"
#include "autograd/record.h"
#include "autograd/views.h"
#include "tensor/observe.h"

namespace dl::ag {

// ---- grad mode --------------------------------------------------------------------

namespace {
// One thread-local, so that is_recording (asked by every op) looks up one address.
struct GradMode {
  int scopes = 0;        // open GradScopes
  bool no_grad = false;  // inside a NoGradScope
};
thread_local GradMode t_mode;
thread_local VariableLog* t_varlog = nullptr;
// History stamps, increasing across threads: a tensor's and a scope's (Note [History
// scopes] in engine.h) are compared whatever thread made them.
std::atomic<uint64_t> g_stamp{0};
}  // namespace

bool is_recording() {
  const GradMode& m = t_mode;
  return m.scopes > 0 && !m.no_grad;
}
GradScope::GradScope() { ++t_mode.scopes; }
GradScope::~GradScope() {
  if (open_) --t_mode.scopes;
}
NoGradScope::NoGradScope() : prev_(t_mode.no_grad) { t_mode.no_grad = true; }
NoGradScope::~NoGradScope() { t_mode.no_grad = prev_; }
EnableGradScope::EnableGradScope() : prev_(t_mode.no_grad) { t_mode.no_grad = false; }
EnableGradScope::~EnableGradScope() { t_mode.no_grad = prev_; }
uint64_t next_history_stamp() { return g_stamp.fetch_add(1, std::memory_order_relaxed) + 1; }

uint64_t history_stamp(const Tensor& t) noexcept {
  const TensorImpl* i = t.impl();
  return i->grad_node && !i->is_variable ? i->grad_version : 0;
}

void forget_history_if(const Tensor& t, uint64_t stamp) noexcept {
  if (stamp != 0 && history_stamp(t) == stamp) forget_history(t);
}

// ---- nodes -------------------------------------------------------------------------

namespace {
thread_local std::vector<Node*>* t_graveyard = nullptr;

// Drops one reference to `n`; the node is deleted by the outermost ~Node's loop.
void bury(Ref<Node>& r, std::vector<Node*>& yard) {
  Node* n = r.release();
  if (n && n->release_ref()) yard.push_back(n);
}
}  // namespace

Node::~Node() {
  // See Note [Teardown of long chains]. (The thread-local is looked up once.)
  std::vector<Node*>*& yard = t_graveyard;
  bool outermost = yard == nullptr;
  std::vector<Node*> local;
  if (outermost) yard = &local;
  for (int i = 0; i < next.size(); ++i) bury(next[i].node, *yard);
  for (int i = 0; i < saved.size(); ++i) bury(saved[i].edge.node, *yard);
  if (outermost) {
    while (!local.empty()) {
      Node* n = local.back();
      local.pop_back();
      delete n;  // its children land in `local`
    }
    yard = nullptr;
  }
}

namespace {
// A new TensorImpl sharing t's storage and geometry, with no history and no base.
Tensor alias(const Tensor& t) {
  auto impl = make_ref<TensorImpl>(t.impl()->storage, t.shape(), t.strides(), t.offset(), t.dtype(), t.numel(),
                                   t.is_contiguous());
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

void forget_history(const Tensor& x) {
  TensorImpl* i = x.impl();
  i->grad_node.reset();
  i->grad_nr = 0;
}

namespace {
Grads identity_backward(Node&, const TensorList& g) { return {g[0]}; }
}  // namespace

Tensor watch(const Tensor& x) {
  DL_CHECK_KIND(Type, x.is_floating(), "grad: cannot differentiate with respect to a tensor of dtype ",
                dtype_name(x.dtype()), " (only float32 and float64)");
  Tensor y = alias(x);
  Ref<Node> n = make_ref<Node>();
  n->name = "watch";
  n->argument = true;
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
  if (i->grad_node) {
    Node* n = static_cast<Node*>(i->grad_node.get());
    if (n->next.empty() && n->backward == nullptr && std::strcmp(n->name, "watch") == 0) n->argument = true;   // again
    return;
  }
  Ref<Node> leaf = make_ref<Node>();
  leaf->name = "watch";
  leaf->argument = true;
  set_history(x, leaf, 0);
}

void watch_done(const Tensor& x) {
  Node* n = static_cast<Node*>(x.impl()->grad_node.get());
  if (n && n->next.empty() && n->backward == nullptr && std::strcmp(n->name, "watch") == 0) n->argument = false;
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

void note_variable_use(const Tensor& x) {
  if (t_varlog && !t_mode.no_grad && x.impl()->is_variable) t_varlog->note(x);
}

bool logging_variables() {
  for (const VariableLog* l = t_varlog; l; l = l->prev_)
    if (l->collects_) return true;
  return false;
}
VariableLog::VariableLog(bool collects) : prev_(t_varlog), collects_(collects) { t_varlog = this; }
VariableLog::~VariableLog() { t_varlog = prev_; }
void VariableLog::note(const Tensor& v) {
  const void* key = v.impl();
  if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) return;
  seen_.push_back(key);
  used_.push_back(v);
  if (prev_) prev_->note(v);  // an enclosing log sees it too
}

// ---- the engine -------------------------------------------------------------------------

Tensor* GraphTask::Info::slot(uint32_t nr) {
  if (nr == 0) return &grad0;
  if (more.size() < nr) more.resize(nr);
  return &more[nr - 1];
}

const Tensor* GraphTask::Info::peek(uint32_t nr) const {
  const Tensor* t = nr == 0 ? &grad0 : (nr <= more.size() ? &more[nr - 1] : nullptr);
  return t && t->defined() ? t : nullptr;
}

bool GraphTask::Info::any() const {
  if (grad0.defined()) return true;
  for (const Tensor& g : more) if (g.defined()) return true;
  return false;
}

namespace {
// Fibonacci hashing of a node's address (pooled blocks: the low bits carry nothing).
size_t hash_node(const Node* n, size_t mask) {
  return size_t((uint64_t(reinterpret_cast<uintptr_t>(n)) * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}
}  // namespace

int GraphTask::Index::find(const Node* n) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash_node(n, mask);; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.stamp != stamp_) return -1;
    if (s.node == n) return s.index;
  }
}

int GraphTask::Index::insert(const Node* n, int next, bool* fresh) {
  if (2 * (used_ + 1) > slots_.size()) grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash_node(n, mask);; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.stamp != stamp_) {
      s = {n, next, stamp_};
      ++used_;
      *fresh = true;
      return next;
    }
    if (s.node == n) {
      *fresh = false;
      return s.index;
    }
  }
}

void GraphTask::Index::grow() {
  std::vector<Slot> old(std::max<size_t>(64, 2 * slots_.size()));
  old.swap(slots_);
  const uint32_t live = stamp_;
  stamp_ = 1;  // the fresh slots are all stamped 0
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.stamp != live) continue;
    size_t i = hash_node(s.node, mask);
    while (slots_[i].stamp == stamp_) i = (i + 1) & mask;
    slots_[i] = {s.node, s.index, stamp_};
  }
}

void GraphTask::Index::clear() {
  used_ = 0;
  if (++stamp_ == 0) {  // wrapped: no slot may look taken
    for (Slot& s : slots_) s.stamp = 0;
    stamp_ = 1;
  }
}

// Note [Backward task buffers]
// A backward task is made per backward pass, and for a small graph its vectors were
// most of its cost: a dozen allocations (more as they grew), about a sixth of the
// instructions of a second derivative (callgrind, bench/ `d2`). So a task's vectors
// live in a Buffers object that the thread keeps when the task ends, cleared (every
// tensor and node reference dropped) but with its capacity, for the next task; tasks on
// one thread can nest (a custom gradient's Lua backward may run a backward pass of its
// own), so the thread keeps a few. Buffers grown past kKeptNodes nodes, inputs or
// outputs are freed instead, so that one large graph does not pin its memory.
struct GraphTask::Buffers {
  TensorList inputs;
  std::vector<Edge> input_edges;
  std::vector<Tensor> captured;
  std::vector<Info> infos;
  std::vector<int> kids;
  Index index;
  TensorList scratch;
  std::vector<int> ready;
  std::vector<Ref<Node>> keep;
  TensorList pending;
  // The constructor's and discover()'s working lists.
  std::vector<Edge> roots;
  TensorList seeds;
  std::vector<int> stack;

  void clear() {
    inputs.clear();
    input_edges.clear();
    captured.clear();
    infos.clear();
    kids.clear();
    index.clear();
    scratch.clear();
    ready.clear();
    keep.clear();
    pending.clear();
    roots.clear();
    seeds.clear();
    stack.clear();
  }
  // Grown past what a small graph needs (kKeptNodes nodes, inputs or outputs).
  bool large() const {
    for (size_t c : {inputs.capacity(), input_edges.capacity(), captured.capacity(), infos.capacity(), kids.capacity(),
                     roots.capacity(), seeds.capacity(), keep.capacity(), stack.capacity(), ready.capacity()})
      if (c > kKeptNodes) return true;
    return index.capacity() > 4 * kKeptNodes;
  }
  static constexpr size_t kKeptNodes = 1024;
};

namespace {
// The thread's spare buffers, in thread-locals without destructors: a task still held
// when its thread ends (by the binding's own thread-local list, say) may be destroyed
// after any thread-local that has one. t_pool_owner's destructor frees the spares at
// thread exit and closes the pool; buffers given back after that are freed at once.
constexpr int kKeptBuffers = 4;
thread_local GraphTask::Buffers* t_spare[kKeptBuffers];
thread_local int t_nspare = 0;
thread_local bool t_pool_closed = false;
struct PoolOwner {
  ~PoolOwner() {
    for (int i = 0; i < t_nspare; ++i) delete t_spare[i];
    t_nspare = 0;
    t_pool_closed = true;
  }
};
thread_local PoolOwner t_pool_owner;

GraphTask::Buffers* take_buffers() {
  (void)&t_pool_owner;  // constructed (its destructor registered) on the thread's first use
  if (t_nspare == 0) return new GraphTask::Buffers();
  return t_spare[--t_nspare];
}

// Clears b and keeps it for the next task, or frees it. Never throws.
void give_back(GraphTask::Buffers* b) noexcept {
  b->clear();
  if (t_pool_closed || t_nspare == kKeptBuffers || b->large()) {
    delete b;
    return;
  }
  t_spare[t_nspare++] = b;
}
}  // namespace

GraphTask::GraphTask(const TensorList& outputs, const TensorList& grad_outputs,
                     const TensorList& inputs, bool create_graph, bool retain_graph)
    : buf_(take_buffers()),
      inputs_(buf_->inputs),
      input_edges_(buf_->input_edges),
      captured_(buf_->captured),
      infos_(buf_->infos),
      index_(buf_->index),
      scratch_(buf_->scratch),
      kids_(buf_->kids),
      ready_(buf_->ready),
      keep_(buf_->keep),
      // A recorded backward refers to the forward graph: keep it for the outer pass.
      create_graph_(create_graph),
      retain_graph_(retain_graph || create_graph),
      pending_(buf_->pending) {
  // The buffers go back to the thread if the set-up throws (no destructor runs then).
  struct Guard {
    Buffers* b;
    ~Guard() { if (b) give_back(b); }
  } guard{buf_};
  DL_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
           "grad: ", outputs.size(), " outputs but ", grad_outputs.size(), " output gradients");
  inputs_.assign(inputs.begin(), inputs.end());
  GradScope scope;  // edges of variables are visible while the task is set up,
  EnableGradScope enable;   // inside no_grad too
  for (const Tensor& x : inputs) input_edges_.push_back(edge_of(x));
  captured_.resize(inputs.size());
  std::vector<Edge>& roots = buf_->roots;
  TensorList& seeds = buf_->seeds;
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
    add_grad(info(roots[k].node.get()), roots[k].nr, seeds[k]);
  }
  // In reverse discovery order, so that of two ready roots the first is run first.
  for (int k = int(infos_.size()) - 1; k >= 0; --k)
    if (infos_[size_t(k)].deps == 0 && infos_[size_t(k)].needed) ready_.push_back(k);
  roots.clear();
  seeds.clear();
  guard.b = nullptr;
}

GraphTask::~GraphTask() { give_back(buf_); }

// Note [Inputs by index]
// Discovery looks every node up in the index once per edge into it; it records where
// each input's Info lies (kids_, a node's inputs in a row from Info::kids), so that
// nothing after it looks a node up again: the passes below and the run read those
// indices. The lookups were a tenth of a small graph's backward pass.
void GraphTask::discover(const std::vector<Edge>& roots) {
  // Iterative DFS: count the edges into each node; infos_ is in discovery order, which
  // the "needed" pass below walks backwards (children were discovered after parents).
  std::vector<int>& stack = buf_->stack;
  bool fresh = false;
  auto add = [&](Node* n) {
    int i = index_.insert(n, int(infos_.size()), &fresh);
    if (fresh) {
      infos_.push_back(Info{});
      infos_.back().node = n;
      stack.push_back(i);
    }
    return i;
  };
  for (const Edge& e : roots) add(e.node.get());
  while (!stack.empty()) {
    const int at = stack.back();
    stack.pop_back();
    Node* n = infos_[size_t(at)].node;
    infos_[size_t(at)].kids = int(kids_.size());
    for (int i = 0; i < n->next.size(); ++i) {
      Node* c = n->next[i].node.get();
      kids_.push_back(c ? add(c) : -1);
    }
  }
  // A node is needed when it is a target or feeds a needed node. Propagate to a fixed
  // point in reverse discovery order.
  for (const Edge& e : input_edges_)
    if (e.valid())
      if (Info* t = info(e.node.get())) t->needed = true;
  bool changed = true;
  while (changed) {
    changed = false;
    for (auto it = infos_.rbegin(); it != infos_.rend(); ++it) {
      if (it->needed) continue;
      for (int i = 0; i < it->node->next.size(); ++i) {
        const Info* c = kid(*it, i);
        if (c && c->needed) { it->needed = true; changed = true; break; }
      }
    }
  }
  // Dependencies only count edges from needed nodes (others never run).
  for (const Info& inf : infos_) {
    if (!inf.needed) continue;
    for (int i = 0; i < inf.node->next.size(); ++i)
      if (Info* c = kid(inf, i)) c->deps++;
  }
}

// Note [Gradients accumulated in place]
// A tensor used by several ops receives one gradient from each, and the engine adds
// them up as they arrive. A recurrent layer's weight is used once a step: its
// gradient, (4H, H) for an LSTM, arrives once a step, and adding out of place made a
// new buffer of that size each time (1 MB a step for the LSTM row of bench/, more
// memory allocated than every other gradient of the step together). When the
// backward records nothing and no observer replays the ops it sees, a sum that only
// the engine holds (the conditions of add_region's buffer) is added to in place:
// the same additions in the same order, into the same bits.
bool GraphTask::exclusive(const Tensor& t) {
  return t.impl()->use_count() == 1 && t.storage().use_count() == 1 && !t.storage().borrowed() &&
         !t.impl()->view_base && t.is_contiguous() && t.offset() == 0;
}

void GraphTask::add_grad(Info* inf, uint32_t nr, const Tensor& g) {
  if (!inf || !inf->needed || !g.defined()) return;
  Tensor* slot = inf->slot(nr);
  if (!slot->defined()) {
    *slot = g;
  } else if (!create_graph_ && slot->shape() == g.shape() && slot->dtype() == g.dtype() &&
             slot->device() == g.device() && exclusive(*slot) && !observing()) {
    dl::binary_(Op::Add, *slot, g);
  } else {
    *slot = ag::binary(Op::Add, *slot, g);
  }
}

// Note [Slice gradients added in place]
// The backward of narrow, slice and select puts the gradient into zeros of the input's
// shape (embed() in shape.cpp), and the engine adds that to what the input has
// received. A model that takes each step of a sequence from one tensor (a recurrent
// layer narrows its projected inputs, (T, B, 4H), once a step) then fills and adds T
// tensors of the whole sequence's size: memory traffic that grows with T^2. The LSTM
// row of bench/ spent most of its time there.
// So when the backward records nothing (no create_graph: then the embedding must be a
// recorded op, and is) and no observer replays what it sees (a capture by dl.vmap,
// dl.export or dl.compile takes embed() as one op, but could not replay a write into a
// buffer it never saw made), the engine adds such a gradient into the part of the input's
// gradient buffer that the view covers: the buffer is made once, zeros (or a copy of
// what arrived first, when anything else may hold that tensor), and each step's
// gradient goes into its region. Every element receives the same additions in the same
// order as before, less the additions of zero (so a -0.0 stays -0.0).
bool GraphTask::add_region(Info& inf, int at) {
  Node* n = inf.node;
  Geometry geo;
  if (n->next.size() != 1 || !region_of(*n, &geo)) return false;
  Info* c = kid(inf, 0);
  const Tensor* in = inf.peek(0);
  if (!c || !c->needed || !in) return false;
  const InputMeta& m = n->inputs[0];
  Tensor g = *in;
  const Device dev = g.device();   // the input's: a view is on its base's device
  if (g.dtype() != m.dtype) {
    if (!is_floating(m.dtype)) return false;
    g = dl::cast(g, m.dtype);
  }
  Tensor* slot = c->slot(n->next[0].nr);
  // Only a buffer nothing else can see is changed: this Tensor the one reference to its
  // impl, the impl to its storage, and memory the engine allocated.
  const bool own = slot->defined() && exclusive(*slot) && slot->shape() == m.shape && slot->dtype() == m.dtype &&
                   slot->device() == dev;
  if (!slot->defined()) {
    *slot = dl::zeros(m.shape, m.dtype, dev);
  } else if (!own) {
    Tensor copy = dl::empty(m.shape, m.dtype, dev, "backward");
    dl::copy_(copy, *slot);   // broadcasts nothing: what arrived has the input's shape
    *slot = copy;
  }
  Tensor region = make_view(*slot, geo.sizes, geo.strides, geo.offset);
  dl::binary_(Op::Add, region, g);
  gather_grads(inf);   // clears what this node received
  scratch_.clear();
  finish_node(at, Grads());
  return true;
}

const TensorList& GraphTask::gather_grads(Info& inf) {
  scratch_.clear();
  scratch_.push_back(std::move(inf.grad0));
  for (Tensor& g : inf.more) scratch_.push_back(std::move(g));
  scratch_.resize(std::max<size_t>(inf.node->num_outputs, 1));
  inf.clear();
  return scratch_;
}

bool GraphTask::run() {
  // Backward formulas are recorded only when a higher-order gradient is wanted.
  std::optional<GradScope> rec;
  std::optional<NoGradScope> norec;
  if (create_graph_) rec.emplace(); else norec.emplace();
  while (!ready_.empty()) {
    const int at = ready_.back();
    ready_.pop_back();
    Info& inf = infos_[size_t(at)];
    Node* n = inf.node;
    // Capture gradients arriving at the inputs asked for.
    for (size_t k = 0; k < input_edges_.size(); ++k) {
      const Edge& e = input_edges_[k];
      const Tensor* g = e.node.get() == n ? inf.peek(e.nr) : nullptr;
      if (!g) continue;
      captured_[k] = captured_[k].defined() ? ag::binary(Op::Add, captured_[k], *g) : *g;
    }
    bool feeds = false;
    for (int i = 0; i < n->next.size() && !feeds; ++i) {
      const Info* c = kid(inf, i);
      feeds = c && c->needed;
    }
    if (!inf.any() || !feeds || !n->backward) {
      finish_node(at, Grads());
      continue;
    }
    if (n->custom_ref) {  // a Lua backward: hand control back to the binding
      custom_ = n;
      custom_at_ = at;
      pending_ = gather_grads(inf);
      scratch_.clear();
      return false;
    }
    if (!create_graph_ && !observing() && add_region(inf, at)) continue;
    Grads grads = n->backward(*n, gather_grads(inf));
    scratch_.clear();
    finish_node(at, grads);
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
  finish_node(custom_at_, grads);
}

void GraphTask::finish_node(int at, const Grads& grads) {
  Info& inf = infos_[size_t(at)];
  Node* n = inf.node;
  for (int i = 0; i < n->next.size(); ++i) {
    const Edge& e = n->next[i];
    Info* c = kid(inf, i);
    if (!c) continue;   // no gradient flows there
    if (i < int(grads.size()) && grads[i].defined()) {
      Tensor g = grads[i];
      const InputMeta& m = n->inputs[i];
      // The one place broadcast gradients are reduced to the input's shape and dtype
      // (and a custom gradient of a shape that cannot be is refused, needed or not).
      if (g.shape() != m.shape) g = ag::sum_to(g, m.shape);
      if (g.dtype() != m.dtype && is_floating(m.dtype)) g = ag::cast(g, m.dtype);
      add_grad(c, e.nr, g);
    }
    if (c->needed && --c->deps == 0) ready_.push_back(int(c - infos_.data()));
  }
  inf.clear();
  if (!retain_graph_ && !n->custom_ref) {
    n->saved.clear();
    n->released = n->backward != nullptr;
  }
  if (ready_fn_)
    for (int k = ready_first_[size_t(at)]; k >= 0; k = ready_next_[size_t(k)]) fire_ready(size_t(k));
}

// Note [Gradient ready]
// An input's gradient is final once its node has run: every gradient into the node
// arrived before it became ready (dependency counting), and it was captured then. So
// the task reports it at the end of finish_node, after the node's own backward took
// what it reads, and a caller (dl.dist's reducer, through the bindings) can start
// reducing it while the rest of the graph still runs backwards, as PyTorch's DDP does
// from its autograd hooks. Inputs the outputs do not depend on get their zeros at once,
// in on_ready, so that a reducer never waits for a gradient that will not come. The
// engine keeps no reference to the gradient it reported except captured_[k]: whether
// other tensors share its memory (a gradient passed on unchanged to two inputs, or to
// a node still to run) is the callback's to check, by the reference counts.
void GraphTask::on_ready(ReadyFn fn, void* ctx) {
  ready_fn_ = fn;
  ready_ctx_ = ctx;
  if (!fn) return;
  // Each node's inputs as a list (ready_first_ by Info index, then ready_next_), in
  // input order, so that finish_node reports a node's inputs without a scan of them all.
  ready_first_.assign(infos_.size(), -1);
  ready_next_.assign(input_edges_.size(), -1);
  for (size_t k = input_edges_.size(); k-- > 0;) {
    const Edge& e = input_edges_[k];
    const int at = e.valid() ? index_.find(e.node.get()) : -1;
    if (at < 0 || !infos_[size_t(at)].needed) continue;
    ready_next_[k] = ready_first_[size_t(at)];
    ready_first_[size_t(at)] = int(k);
  }
  for (size_t k = 0; k < input_edges_.size(); ++k) {
    const Edge& e = input_edges_[k];
    const Info* t = e.valid() ? info(e.node.get()) : nullptr;
    if (!t || !t->needed) fire_ready(k);
  }
}

void GraphTask::fire_ready(size_t k) {
  if (!captured_[k].defined()) captured_[k] = zeros(inputs_[k].shape(), inputs_[k].dtype(), inputs_[k].device());
  ready_fn_(ready_ctx_, k, captured_[k]);
}

Tensor GraphTask::take_result(size_t k) {
  DL_ASSERT(k < inputs_.size());
  if (captured_[k].defined()) return std::move(captured_[k]);
  return zeros(inputs_[k].shape(), inputs_[k].dtype(), inputs_[k].device());
}

TensorList GraphTask::take_results() {
  TensorList out;
  for (size_t k = 0; k < inputs_.size(); ++k) out.push_back(take_result(k));
  return out;
}

TensorList grad(const TensorList& outputs, const TensorList& grad_outputs, const TensorList& inputs,
                bool create_graph, bool retain_graph) {
  GraphTask task(outputs, grad_outputs, inputs, create_graph, retain_graph);
  DL_CHECK(task.run(), "grad: the graph holds a custom gradient; call it from Lua");
  return task.take_results();
}

}  // namespace dl::ag
