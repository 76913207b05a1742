// Gradients inside compiled calls (grad.h).
//
// Note [Compiled gradients]
// `dl.compile(dl.grad(f))` makes, on every call, the same entry points as eager: open
// a gradient scope, watch the argument (or the arguments: dl.grad(f, {1, 2})), f's ops,
// close the scope, one backward pass, discard the tape. The pass's Backward marker names
// the result and the first watched tensor, a BackwardInput marker after it each other
// one, and the plan gives a gradient per watched tensor. In a compiled call each of
// them is a step of the trace (the scope's marks, the watched arguments, the ops, the
// backward pass), so a scope is matched like any other op, and it runs in one of
// three modes:
// - Capture (the call records the scope): autograd runs everything as in eager
//   execution (the ops at once, recorded; their proxies stand for the recorded
//   tensors), and its backward pass runs with an observer on the engine's ops
//   (tensor/observe.h) that writes each op down with its operands as references: a
//   step's result, a step's operand, or an earlier op of the pass. If every op is one
//   the executor can run and the gradient is one of their results, the trace keeps the
//   plan and marks the scope compiled.
// - Symbolic (a later call matches a compiled scope): autograd's scope is never
//   opened, so the ops are deferred like any other and nothing is recorded; the backward
//   pass pushes the plan's ops as steps that read the call's own values. Forward and
//   backward then run as one plan: no tape and no nodes, the backward's pointwise ops
//   fused with the forward values they read, results nobody reads never written. The
//   plan is autograd's own pass, op for op and in its order, so the gradient is eager's
//   bit for bit.
// - Real (a matched scope that was not compiled, or a Symbolic one that had to stop):
//   as Capture, without recording a plan.
// A Symbolic scope becomes Real (materialize) when anything but its expected steps
// happens inside it: an op that leaves the trace, any other entry point of the C ABI (a
// value read back, a tensor made, an in-place write: scope_event), a nested gradient.
// Autograd's scope is then opened and the scope's steps so far run again with autograd,
// from the watched argument on, so the rest of the scope has their history: the call goes
// on exactly as eager execution would have from there. A plan also names the tensors it
// saw as one (an argument and its watched alias, a tensor several ops read): a call where
// they are not one runs the backward with autograd.
#include "compile/grad.h"

#include <algorithm>
#include <cstring>

#include "autograd/autograd.h"
#include "autograd/nn.h"

namespace dl::compile {

namespace {

ScopeHooks g_hooks;

const Tensor& operand_tensor(const Operand& o, const std::vector<Tensor>& results) {
  return o.step >= 0 ? results[size_t(o.step)] : o.input;
}

// A step run by autograd, recorded (what eager execution does for it in a scope).
Tensor run_recorded(const Step& st, const std::vector<Tensor>& results) {
  if (st.kind == Kind::Marker) return Tensor();
  const Tensor& a = operand_tensor(st.a, results);
  switch (st.kind) {
    case Kind::Unary: return ag::unary(st.op, a);
    case Kind::Binary: return ag::binary(st.op, a, operand_tensor(st.b, results));
    case Kind::BinaryScalar: return ag::binary(st.op, a, Scalar::from_lua(st.s), st.scalar_first);
    case Kind::Compare: return ag::compare(st.op, a, operand_tensor(st.b, results));
    case Kind::CompareScalar: return ag::compare(st.op, a, Scalar::from_lua(st.s), st.scalar_first);
    case Kind::Reduce: {
      std::vector<int> dims(st.dims, st.dims + st.ndims);
      return ag::reduce(st.op, a, dims, st.keepdim, st.opts);
    }
    case Kind::MatMul: return ag::matmul(a, operand_tensor(st.b, results));
    case Kind::Softmax: return st.op == Op::LogSoftmax ? ag::log_softmax(a, st.dims[0]) : ag::softmax(a, st.dims[0]);
    case Kind::Shape:   // the views Lua defers (plan.cpp's infer_view)
      switch (st.fn) {
        case Fn::Reshape: return ag::reshape(a, st.arg);
        case Fn::View: return ag::view(a, st.arg);
        case Fn::Transpose: return ag::transpose(a, st.dims[0], st.dims[1]);
        case Fn::Unsqueeze: return ag::unsqueeze(a, st.dims[0]);
        case Fn::Squeeze: return ag::squeeze(a, st.ndims ? std::optional<int>(st.dims[0]) : std::nullopt);
        default: break;
      }
      break;
    case Kind::CrossEntropy:
      return ag::cross_entropy(a, operand_tensor(st.b, results), Reduction(st.arg[0]), std::nullopt);
    case Kind::Watch: return ag::watch(a);
    default: break;
  }
  fail(ErrorKind::Internal, "compile: a step of this kind is never run by autograd");
}

void push_marker(Call& c, Mark m, const OperandKey& a, const OperandKey& b, int* r) {
  Step st;
  st.kind = Kind::Marker;
  st.mark = m;
  *r = defer(c, std::move(st), a, b);
}

bool same_tensor(const Tensor& x, const Tensor& y) {
  if (x.defined() && x.impl() == y.impl()) return true;   // (one tensor read twice: the common case)
  return x.defined() && y.defined() && &x.storage() == &y.storage() && x.offset() == y.offset() &&
         x.shape() == y.shape() && x.strides() == y.strides() && x.dtype() == y.dtype();
}

}  // namespace

void set_scope_hooks(const ScopeHooks& h) { g_hooks = h; }

bool scope_recording(const Call& c) { return c.scope.mode == ScopeMode::Symbolic && !c.scope.exited; }

void run_now(Call& c) {
  const size_t i = c.steps.size() - 1;
  if (c.flushed < i) {
    std::vector<uint8_t> want(i - c.flushed, 1);
    execute(c.steps, c.flushed, i, c.results, want);
  }
  c.results[i] = run_recorded(c.steps[i], c.results);
  c.flushed = i + 1;
}

void materialize(Call& c) {
  if (c.scope.mode != ScopeMode::Symbolic) return;
  Scope& s = c.scope;
  s.mode = ScopeMode::Real;   // first: what runs below must not come back here
  s.failed = true;
  if (c.flushed < s.start) {
    std::vector<uint8_t> want(s.start - c.flushed, 1);
    execute(c.steps, c.flushed, s.start, c.results, want);
  }
  g_hooks.enter();
  for (size_t i = s.start; i < c.steps.size(); ++i) c.results[i] = run_recorded(c.steps[i], c.results);
  if (s.exited) g_hooks.exit();
  c.flushed = c.steps.size();
}

void scope_event(Call& c) {
  if (c.scope.mode == ScopeMode::Symbolic) materialize(c);
  else if (c.scope.mode != ScopeMode::None && !c.scope.failed) {
    c.scope.failed = true;
    if (c.recording) c.fn->note("inside its scope, something other than a deferred op ran (a value read back, a tensor made, an in-place write, a nested gradient)");
  }
}

bool scope_enter(Call& c) {
  if (c.scope.mode != ScopeMode::None) {   // a gradient inside the scope: autograd's
    scope_event(c);
    ++c.scope.nested;
    return true;
  }
  if (c.eager || ag::is_recording()) return true;
  flush(c);
  int r = 0;
  push_marker(c, Mark::GradEnter, OperandKey{}, OperandKey{}, &r);
  if (r == 0) return true;
  c.scope = Scope{};
  c.scope.start = c.steps.size() - 1;
  if (r == 1 && c.trace->ops[c.scope.start].symbolic) {
    c.scope.mode = ScopeMode::Symbolic;
    return false;
  }
  c.scope.mode = c.recording ? ScopeMode::Capture : ScopeMode::Real;
  return true;
}

bool scope_exit(Call& c) {
  Scope& s = c.scope;
  if (s.mode == ScopeMode::None) return true;
  if (s.nested > 0) {
    --s.nested;
    return true;
  }
  int r = 0;
  push_marker(c, Mark::GradExit, OperandKey{}, OperandKey{}, &r);
  // (r == 0: the call has left its traces for good; the scope is autograd's by now.)
  const bool real = s.mode != ScopeMode::Symbolic;
  s.exited = true;
  return real;
}

bool scope_done(Call& c) {
  // (A gradient taken inside the scope discards its own tape before the scope ends.)
  if (c.scope.mode == ScopeMode::None || !c.scope.exited) return true;
  const bool real = c.scope.mode != ScopeMode::Symbolic;
  if (real) {
    // As the tape is discarded, the scope's values become constants (in eager execution
    // the tape drops their history): they hold no graph past the scope.
    for (size_t i = c.scope.start; i < c.results.size(); ++i)
      if (c.results[i].defined() && c.results[i].impl()->grad_node) c.results[i] = ag::detach(c.results[i]);
  }
  c.scope = Scope{};
  return real;
}

const BackwardPlan* plan_at(const Call& c, size_t marker) {
  if (!c.trace || marker >= c.trace->ops.size()) return nullptr;
  const int32_t p = c.trace->ops[marker].plan;
  return p >= 0 && size_t(p) < c.trace->plans.size() ? &c.trace->plans[size_t(p)] : nullptr;
}

namespace {
// The scope's operands (before the backward marker) that are `v`.
std::vector<Ref> operands_that_are(const Call& c, size_t marker, const Tensor& v) {
  std::vector<Ref> at;
  for (size_t i = c.scope.start; i < marker && i < c.steps.size(); ++i) {
    const Operand* ops[2] = {&c.steps[i].a, &c.steps[i].b};
    for (int k = 0; k < 2; ++k)
      if (ops[k]->step < 0 && ops[k]->input.defined() && ops[k]->input.impl() == v.impl())
        at.push_back(Ref{Ref::To::Operand, int8_t(k), int32_t(i)});
  }
  return at;
}

bool same_refs(const std::vector<Ref>& x, const std::vector<Ref>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].to != y[i].to || x[i].k != y[i].k || x[i].i != y[i].i) return false;
  return true;
}
}  // namespace

bool replay_backward(Call& c, size_t marker, const TensorList& targets, std::vector<int64_t>* grads) {
  const BackwardPlan* plan = plan_at(c, marker);
  if (!plan || plan->grads.empty() || plan->variables.size() != targets.size()) return false;
  for (size_t j = 0; j < targets.size(); ++j)
    if (targets[j].defined() && !same_refs(operands_that_are(c, marker, targets[j]), plan->variables[j]))
      return false;
  // The tensor a reference names in this call, for the plan's checks: a bound operand,
  // or the argument a watched alias stands for.
  // (By reference: a copy of a tensor costs two atomic updates of its count.)
  static const Tensor none;
  auto bound = [&](const Ref& r) -> const Tensor& {
    if (r.to == Ref::To::Operand) {
      const Step& st = c.steps[size_t(r.i)];
      const Operand& o = r.k == 0 ? st.a : st.b;
      return o.step < 0 ? o.input : none;
    }
    if (r.to == Ref::To::Result && c.steps[size_t(r.i)].kind == Kind::Watch &&
        c.steps[size_t(r.i)].a.step < 0)
      return c.steps[size_t(r.i)].a.input;
    return none;
  };
  for (const std::vector<Ref>& same : plan->same) {
    const Tensor& first = bound(same[0]);
    for (const Ref& r : same)
      if (!same_tensor(first, bound(r))) return false;
  }
  for (const auto& [pos, v] : plan->numbers) {
    const double now = c.steps[size_t(pos)].s;
    if (now == v || (now != now && v != v)) continue;
    // The recorded pass has this number baked into its steps; autograd runs this call's.
    // A number that keeps changing (a schedule inside the function) stops compiling the
    // scope, so its calls do not pay for both.
    BackwardPlan& p = c.trace->plans[size_t(c.trace->ops[marker].plan)];
    if (++p.misses >= 2 && c.scope.start < c.trace->ops.size()) {
      c.trace->ops[c.scope.start].symbolic = false;
      c.fn->note("a Lua number that its derivative reads (as in x * k) changes from call to call");
    }
    return false;
  }
  const size_t base = marker + plan->grads.size(), n = plan->steps.size();
  c.steps.reserve(base + n);
  c.results.resize(base + n);
  c.returned.resize(base + n, 0);
  for (const BackwardStep& b : plan->steps) {
    c.steps.push_back(b.step);   // copied in place; its operands are set below
    Step& st = c.steps.back();
    const Ref* refs[2] = {&b.a, &b.b};
    Operand* ops[2] = {&st.a, &st.b};
    for (int k = 0; k < 2; ++k) {
      const Ref& r = *refs[k];
      if (r.to == Ref::To::Result) ops[k]->step = r.i;
      else if (r.to == Ref::To::Backward) ops[k]->step = int32_t(base + size_t(r.i));
      else ops[k]->input = bound(r);
    }
  }
  c.fn->matched += int64_t(plan->steps.size());
  grads->clear();
  for (int32_t g : plan->grads) grads->push_back(int64_t(base) + g);
  return true;
}

// ---- recording a backward pass --------------------------------------------------------

struct BackwardCapture::Known {
  const TensorImpl* impl;
  const Storage* storage;
  int64_t offset;
  Shape sizes, strides;
  DType dtype;
  Ref ref;
};

BackwardCapture::BackwardCapture(Call& c) : on_(this) {
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const Step& st = c.steps[i];
    if (c.results[i].defined()) remember(c.results[i], Ref{Ref::To::Result, 0, int32_t(i)});
    const Operand* ops[2] = {&st.a, &st.b};
    for (int k = 0; k < 2; ++k)
      if (ops[k]->step < 0 && ops[k]->input.defined())
        remember(ops[k]->input, Ref{Ref::To::Operand, int8_t(k), int32_t(i)});
  }
}

BackwardCapture::~BackwardCapture() = default;

void BackwardCapture::remember(const Tensor& t, Ref r) {
  known_.push_back(Known{t.impl(), &t.storage(), t.offset(), t.shape(), t.strides(), t.dtype(), r});
}

void BackwardCapture::fail(const char* why) {
  if (!why_) why_ = why;
}

// The reference for t: the tensor itself if it is known (the latest), else a known
// tensor with its storage and layout (an alias: a node saves aliases of its inputs).
// Several such are one tensor now; the plan notes them, to be one again.
bool BackwardCapture::find(const Tensor& t, Ref* r) {
  for (size_t i = known_.size(); i-- > 0;)
    if (known_[i].impl == t.impl()) {
      *r = known_[i].ref;
      return true;
    }
  std::vector<Ref> same;
  for (const Known& k : known_)
    if (k.storage == &t.storage() && k.offset == t.offset() && k.sizes == t.shape() &&
        k.strides == t.strides() && k.dtype == t.dtype())
      same.push_back(k.ref);
  if (same.empty()) return false;
  *r = same[0];
  // (Each read of an alias finds the same set: a chain's ten reads of w's saved alias
  // made ten copies of one list of ten, checked on every call.)
  auto known = [&](const std::vector<Ref>& g) { return same_refs(g, same); };
  if (same.size() > 1 && std::none_of(plan_.same.begin(), plan_.same.end(), known)) plan_.same.push_back(same);
  return true;
}

void BackwardCapture::seen(const Observed& o) {
  if (why_) return;
  if (o.fn == Fn::Write) return fail("an in-place write");
  if (!o.out.defined()) return fail("an op without a result");
  BackwardStep b;
  Step& st = b.step;
  st.op = o.op;
  st.s = o.s;
  st.scalar_first = o.first;
  st.fn = o.fn;
  const Tensor* const* in = o.in;
  int nin = o.nin;
  switch (o.fn) {
    case Fn::Unary: st.kind = Kind::Unary; break;
    case Fn::Binary: st.kind = Kind::Binary; break;
    case Fn::BinaryScalar: st.kind = Kind::BinaryScalar; break;
    case Fn::Compare: st.kind = Kind::Compare; break;
    case Fn::CompareScalar: st.kind = Kind::CompareScalar; break;
    case Fn::MatMul: st.kind = Kind::MatMul; break;
    case Fn::Full: st.kind = Kind::Full; break;
    case Fn::Reduce: st.kind = Kind::Reduce; break;
    case Fn::Other: {
      // Of the ops reported by name, softmax and log_softmax are steps (their input, and
      // their dim, 0-based, as the report's one integer), and so is softmax's fused
      // gradient (the incoming gradient and the softmax).
      const bool soft = o.name && std::strcmp(o.name, "softmax") == 0;
      const bool log = o.name && std::strcmp(o.name, "log_softmax") == 0;
      const bool back = o.name && std::strcmp(o.name, "softmax_backward") == 0;
      if (back && o.ins.size() == 2 && o.ins[0] && o.ins[1]) {
        st.kind = Kind::SoftmaxBackward;
        in = o.ins.data();
        nin = 2;
        break;
      }
      // cross_entropy's gradient: the one-hot rows of the labels (the report's integers:
      // the class count and the dtype, set below with the other fields).
      if (o.name && std::strcmp(o.name, "one_hot") == 0 && o.ins.size() == 1 && o.ins[0] && o.ints.size() == 2) {
        st.kind = Kind::OneHot;
        in = o.ins.data();
        nin = 1;
        break;
      }
      if (!(soft || log) || o.ins.size() != 1 || !o.ins[0] || o.ints.size() != 1) return fail(o.name);
      st.kind = Kind::Softmax;
      st.op = log ? Op::LogSoftmax : Op::Softmax;
      st.ndims = 1;
      st.dims[0] = int8_t(o.ints[0]);
      in = o.ins.data();
      nin = 1;
      break;
    }
    default: st.kind = Kind::Shape; break;
  }
  if (st.kind != Kind::Softmax) {
    const int ndims = int(o.dims.size());
    if (ndims > kMaxDims) return fail("too many dims");
    st.ndims = int8_t(ndims);
    for (int i = 0; i < ndims && i < kMaxDims; ++i) st.dims[i] = int8_t(o.dims[size_t(i)]);
  }
  st.keepdim = o.keepdim;
  st.opts = o.opts;
  st.arg = st.kind == Kind::OneHot ? Shape{o.ints[0]} : o.shape;
  st.arg_dtype = st.kind == Kind::OneHot ? DType(o.ints[1]) : o.dtype;
  st.dtype = o.out.dtype();
  st.shape = o.out.shape();
  st.device = o.out.device();   // the pass's device: a plan runs where its ops ran
  // A pointwise step runs fused only with operands of its own dtype (the fused loops
  // compute in one dtype); otherwise alone, through the engine's front end, as here.
  bool same_dtype = st.dtype == DType::Float32 || st.dtype == DType::Float64;
  Ref* refs[2] = {&b.a, &b.b};
  for (int k = 0; k < nin; ++k) {
    if (!find(*in[k], refs[k])) return fail("a tensor made by an op the plan cannot run");
    same_dtype = same_dtype && in[k]->dtype() == st.dtype;
  }
  st.alone = !same_dtype;
  remember(o.out, Ref{Ref::To::Backward, 0, int32_t(plan_.steps.size())});
  hold_.push_back(o.out);
  plan_.steps.push_back(std::move(b));
}

bool BackwardCapture::finish(const Call& c, size_t marker, const TensorList& grads, const TensorList& targets,
                             BackwardPlan* plan, std::string* why) {
  plan_.grads.clear();
  for (const Tensor& grad : grads) {
    Ref r;
    if (!why_ && (!grad.defined() || !find(grad, &r) || r.to != Ref::To::Backward))
      fail("a gradient that is not the result of an op of the pass");
    if (why_) break;
    plan_.grads.push_back(r.i);
  }
  if (why_) {
    *why = why_;
    return false;
  }
  for (size_t i = c.scope.start; i < marker; ++i) {
    const Step& st = c.steps[i];
    if (st.kind == Kind::BinaryScalar && st.op != Op::Add && st.op != Op::Sub)
      plan_.numbers.emplace_back(int32_t(i), st.s);
  }
  plan_.variables.clear();
  for (const Tensor& v : targets)
    plan_.variables.push_back(v.defined() ? operands_that_are(c, marker, v) : std::vector<Ref>{});
  *plan = std::move(plan_);
  return true;
}

}  // namespace dl::compile
