// Traces of compiled functions and the call in progress (trace.h).
//
// Note [Deferred steps]
// A compiled function's Lua code runs on every call, as in eager execution; what
// changes is when its tensor work runs. Each op of the pointwise and reduction families
// that it makes on float tensors (host or CUDA), outside any gradient, is matched
// against the function's trace instead of being run: the op, and for each operand
// either the earlier step whose result it is or, for any other tensor, its dtype, shape
// and device. A matched op becomes a step of the call and Lua gets a promise of its
// result (a proxy, bindings/capi_compile.cpp), which later ops of the call can use as
// operands. Lua numbers are not matched: each call's own are the steps' parameters, so
// a learning rate that changes every call changes nothing here.
//
// Steps run when a value must leave for Lua (anything but a deferred op reading a
// proxy, or any other entry point of the C ABI: sync()), and at the end of the call.
// Up to the end, every result is kept, since the rest of the call may take any path;
// at the end, a result is computed only when it is returned, read by a later step, or
// was still referenced after the call when its trace was captured (the Lua side learns
// that with a full collection at the end of every call that recorded). So the steps'
// order is eager's and each step computes what eager computes; a call can only differ
// in which results it never writes.
//
// An op that does not match leaves the trace: another trace whose first ops equal the
// call's so far and whose next op matches is taken (traces form a tree by their shared
// prefixes, as LuaJIT's side traces do); else a new trace starts with the call's ops so
// far and records what follows, deferred as before. With kMaxTraces traces, the rest of
// the call runs eagerly and the function's report says where it left. A call never has
// to undo anything: the steps deferred up to a divergence are eager's own.
#include "compile/trace.h"

#include "compile/grad.h"

#include <algorithm>
#include <atomic>
#include <sstream>

namespace dl::compile {

thread_local Call* t_call = nullptr;
std::atomic<int> g_calls{0};

namespace {

uint64_t next_serial() {
  static std::atomic<uint64_t> serial{1};
  return serial.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// The kinds that a trace keys by their `fn` and `arg` too.
bool keyed_by_arg(Kind k) { return k == Kind::Shape || k == Kind::CrossEntropy; }
}  // namespace

std::string describe(const Function& fn, const TraceOp& t) {
  std::ostringstream os;
  if (t.kind == Kind::Marker) {
    switch (t.mark) {
      case Mark::GradEnter: os << "gradient scope" << (t.symbolic ? " (compiled)" : " (recorded on a tape)"); break;
      case Mark::GradExit: os << "end of the gradient scope"; break;
      case Mark::Backward:
        os << (t.plan >= 0 ? "backward pass, compiled:" : "backward pass, by autograd");
        break;
      case Mark::BackwardInput:
        os << "backward pass, also with respect to " << (t.a.step >= 0 ? "step " + std::to_string(t.a.step + 1) : "a tensor");
        break;
      case Mark::BackwardStep: os << "step of the backward pass"; break;
    }
    return os.str();
  }
  os << (t.kind == Kind::Watch ? "watch" : t.kind == Kind::Shape ? fn_name(t.fn) : op_name(t.op)) << "(";
  auto operand = [&](const OperandKey& k) {
    if (k.step >= 0) os << "step " << k.step + 1;
    else os << dtype_name(k.dtype) << " " << k.shape << (k.device.is_cpu() ? "" : " on " + k.device.str());
  };
  operand(t.a);
  if (arity(t.kind) == 2) {
    os << ", ";
    operand(t.b);
  } else if (t.kind == Kind::BinaryScalar || t.kind == Kind::CompareScalar) {
    os << ", number";
  }
  os << ")";
  if (t.line >= 0 && size_t(t.line) < fn.lines.size()) os << " at " << fn.lines[size_t(t.line)];
  return os.str();
}

// A step of a recorded backward pass, its operands as steps of the call (1-based, as
// the report numbers them).
std::string describe_backward(const BackwardStep& b, size_t base, bool is_grad) {
  std::ostringstream os;
  const Step& st = b.step;
  switch (st.kind) {
    case Kind::Full: os << "full(" << st.arg << ", " << st.s << ")"; break;
    case Kind::Shape: os << fn_name(st.fn) << "("; break;
    case Kind::SoftmaxBackward: os << "softmax_backward("; break;
    case Kind::OneHot: os << "one_hot("; break;
    default: os << op_name(st.op) << "("; break;
  }
  if (st.kind != Kind::Full) {
    auto ref = [&](const Ref& r) {
      if (r.to == Ref::To::Result) os << "step " << r.i + 1;
      else if (r.to == Ref::To::Backward) os << "step " << base + size_t(r.i) + 1;
      else os << (r.k == 0 ? "first" : "second") << " operand of step " << r.i + 1;
    };
    ref(b.a);
    if (arity(st.kind) == 2) {
      os << ", ";
      ref(b.b);
    } else if (st.kind == Kind::BinaryScalar || st.kind == Kind::CompareScalar) {
      os << ", " << st.s;
    }
    os << ")";
  }
  if (st.alone) os << " (alone)";
  if (is_grad) os << ": the gradient";
  return os.str();
}

bool same_prefix(const Trace* a, const Trace* b, size_t n) {
  if (!a) return n == 0;
  if (a->ops.size() < n || b->ops.size() < n) return false;
  for (size_t i = 0; i < n; ++i)
    if (!a->ops[i].same_op(b->ops[i])) return false;
  return true;
}

void push(Call& c, Step&& step) {
  c.steps.push_back(std::move(step));
  c.results.emplace_back();
  c.returned.push_back(0);
}

TraceOp key_of(const Step& st, const OperandKey& a, const OperandKey& b) {
  TraceOp k;
  k.kind = st.kind;
  k.op = st.op;
  k.a = a;
  if (arity(st.kind) == 2) k.b = b;
  k.ndims = st.ndims;
  k.keepdim = st.keepdim;
  for (int i = 0; i < st.ndims; ++i) k.dims[i] = st.dims[i];
  k.out_dtype = st.dtype;
  k.out_shape = st.shape;
  if (keyed_by_arg(st.kind)) {
    k.fn = st.fn;
    k.arg = st.arg;
  }
  if (st.kind == Kind::Marker) {
    k.mark = st.mark;
    k.b = b;
  }
  return k;
}

// Counted each time (a call that switches traces on every call comes here every call:
// nothing is formatted until the report).
void note_divergence(Call& c, size_t pos, const TraceOp& got) {
  Function& fn = *c.fn;
  const size_t ti = c.trace ? c.trace_index : kMaxTraces;
  for (Divergence& d : fn.divergences)
    if (d.trace == ti && d.pos == pos && d.got.same_op(got)) {
      ++d.count;
      return;
    }
  if (fn.divergences.size() < 64) fn.divergences.push_back(Divergence{ti, pos, got, 1});
}

// What a divergence was: "expected ...; got ...".
std::string what_of(const Function& fn, const Divergence& d) {
  const Trace* t = d.trace < fn.traces.size() ? fn.traces[d.trace].get() : nullptr;
  if (!t) return "no trace starts with " + describe(fn, d.got);
  if (d.pos >= t->ops.size()) return "the trace ended; got " + describe(fn, d.got);
  return "expected " + describe(fn, t->ops[d.pos]) + "; got " + describe(fn, d.got);
}

void run(Call& c, const std::vector<uint8_t>& want) {
  ExecStats& s = exec_stats();
  ExecStats before = s;
  execute(c.steps, c.flushed, c.steps.size(), c.results, want, c.trace ? &c.trace->schedules : nullptr);
  c.flushed = c.steps.size();
  Function& fn = *c.fn;
  ++fn.flushes;
  fn.fused += s.fused_steps - before.fused_steps;
  fn.groups += s.groups - before.groups;
  fn.elided += s.elided - before.elided;
  fn.single += s.single_steps - before.single_steps;
}

}  // namespace

namespace {
}  // namespace

bool TraceOp::same_op(const TraceOp& o) const {
  if (kind != o.kind || op != o.op || !(a == o.a)) return false;
  if (arity(kind) == 2 && !(b == o.b)) return false;
  if (kind == Kind::Marker && (mark != o.mark || !(b == o.b))) return false;
  if (kind == Kind::Reduce || kind == Kind::Softmax || kind == Kind::Shape) {
    if (ndims != o.ndims || keepdim != o.keepdim) return false;
    for (int i = 0; i < ndims; ++i)
      if (dims[i] != o.dims[i]) return false;
  }
  if (keyed_by_arg(kind) && (fn != o.fn || !(arg == o.arg))) return false;
  return true;
}

bool TraceOp::matches(const Step& st, const OperandKey& ka, const OperandKey& kb) const {
  if (kind != st.kind || op != st.op || !(a == ka)) return false;
  if (arity(kind) == 2 && !(b == kb)) return false;
  if (kind == Kind::Marker && (mark != st.mark || !(b == kb))) return false;
  if (kind == Kind::Reduce || kind == Kind::Softmax || kind == Kind::Shape) {
    if (ndims != st.ndims || keepdim != st.keepdim) return false;
    for (int i = 0; i < ndims; ++i)
      if (dims[i] != st.dims[i]) return false;
  }
  if (keyed_by_arg(kind) && (fn != st.fn || !(arg == st.arg))) return false;
  return true;
}

Function::Function(std::string n, uint64_t i) : name(std::move(n)), id(i) {}
Function::~Function() = default;

void Function::note(const std::string& why) {
  for (const std::string& n : notes)
    if (n == why) return;
  if (notes.size() < 16) notes.push_back(why);
}

int Function::line_id(const std::string& where) {
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i] == where) return int(i);
  lines.push_back(where);
  return int(lines.size() - 1);
}

std::string Function::report() const {
  std::ostringstream os;
  os << "compiled function " << name << ": " << calls << " calls, " << traces.size()
     << (traces.size() == 1 ? " trace" : " traces") << "\n";
  os << "  ops: " << matched << " replayed, " << recorded << " recorded; " << fused
     << " ran fused in " << groups << " groups, " << single << " alone, " << elided
     << " results never written\n";
  if (eager_calls) os << "  " << eager_calls << " calls ran partly eagerly (trace limit " << kMaxTraces << ")\n";
  if (small_at_once)
    os << "  " << small_at_once << " ops on small tensors held by handles ran at once, as eagerly (faster than "
       << "deferring them; the option defer_small defers them)\n";
  if (expired_reads)
    os << "  " << expired_reads << " reads of a result that was not kept (now kept)\n";
  for (size_t t = 0; t < traces.size(); ++t) {
    const Trace& tr = *traces[t];
    os << "  trace " << t + 1 << ": " << tr.ops.size() << " ops, followed to its end "
       << tr.replays << (tr.replays == 1 ? " time" : " times");
    size_t kept = 0;
    for (uint8_t k : tr.kept) kept += k;
    if (tr.analysed) os << ", " << kept << " results kept past the call";
    os << "\n";
    // A recorded backward pass's places show the pass's own steps.
    const BackwardPlan* plan = nullptr;
    size_t base = 0;
    const size_t shown = std::min<size_t>(tr.ops.size(), 60);
    for (size_t i = 0; i < shown; ++i) {
      const TraceOp& op = tr.ops[i];
      if (op.kind == Kind::Marker && op.mark == Mark::Backward) {
        plan = op.plan >= 0 ? &tr.plans[size_t(op.plan)] : nullptr;
        base = i + 1;
      }
      if (op.kind == Kind::Marker && op.mark == Mark::BackwardInput) base = i + 1;
      os << "    " << i + 1 << " ";
      if (op.kind == Kind::Marker && op.mark == Mark::BackwardStep && plan && i - base < plan->steps.size())
        os << describe_backward(plan->steps[i - base], base,
                                std::find(plan->grads.begin(), plan->grads.end(), int32_t(i - base)) != plan->grads.end());
      else
        os << describe(*this, op);
      os << "\n";
    }
    if (tr.ops.size() > shown) os << "    ... " << tr.ops.size() - shown << " more\n";
  }
  for (const std::string& n : notes) os << "  a gradient not compiled: " << n << "\n";
  for (const Divergence& d : divergences) {
    os << "  left ";
    if (d.trace < kMaxTraces) os << "trace " << d.trace + 1 << " at op " << d.pos + 1;
    else os << "no trace at op " << d.pos + 1;
    os << " (" << d.count << (d.count == 1 ? " time" : " times") << "): " << what_of(*this, d) << "\n";
  }
  return os.str();
}

Call& begin_call(std::shared_ptr<Function> fn) {
  DL_CHECK(!t_call, "compile: a compiled call is already in progress on this thread");
  Call* c = fn->spare ? fn->spare.release() : new Call();
  c->fn = std::move(fn);
  c->serial = next_serial();
  ++c->fn->calls;
  t_call = c;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return *c;
}

namespace {
thread_local Call* t_suspended = nullptr;
}

Call* suspend() {
  Call* c = current();
  if (!c) return nullptr;
  sync();
  t_call = nullptr;
  t_suspended = c;
  return c;
}

void resume(Call* c) noexcept {
  if (!c) return;
  t_suspended = nullptr;
  t_call = c;
}

Call* suspended() noexcept { return t_suspended; }

void end_call() noexcept {
  Call* c = t_call;
  t_call = nullptr;
  if (!c) return;
  g_calls.fetch_sub(1, std::memory_order_relaxed);
  // Parked in its function for the next call, emptied but with its vectors' room.
  std::shared_ptr<Function> fn = std::move(c->fn);
  c->trace = nullptr;
  c->trace_index = 0;
  c->recording = c->eager = c->recorded_any = false;
  c->scope = Scope{};
  c->steps.clear();
  c->results.clear();
  c->returned.clear();
  c->flushed = 0;
  fn->spare.reset(c);
}

// Note [Replayed ops]
// Once a function's traces are recorded, nearly every op of a call is the one its trace
// expects next. defer matches a step built apart and keys built for it (copies of
// shapes, a step of some 300 bytes moved into the call). So the bindings ask first
// what the trace expects (expected), build the step in place at the end of the call's
// steps (open_step), compare its operands with the trace's keys as they fill it, and
// keep it (matched_step) or take it back (drop_step) and call defer, which then decides
// as before. Either way the call's steps are the same. In bench/ `chainc` this took
// about 190 of a deferred op's 700 instructions (callgrind: 95.6 to 89.8 thousand a
// call of 31 ops).
Step& open_step(Call& c) {
  c.steps.emplace_back();
  c.results.emplace_back();
  c.returned.push_back(0);
  return c.steps.back();
}

void drop_step(Call& c) noexcept {
  c.steps.pop_back();
  c.results.pop_back();
  c.returned.pop_back();
}

void matched_step(Call& c, const TraceOp& t) {
  Step& st = c.steps.back();
  st.dtype = t.out_dtype;
  st.shape = t.out_shape;
  ++c.fn->matched;
  if (c.scope.mode == ScopeMode::Capture || c.scope.mode == ScopeMode::Real) run_now(c);
}

int defer(Call& c, Step&& step, const OperandKey& a, const OperandKey& b) {
  if (c.eager) return 0;
  Function& fn = *c.fn;
  const size_t pos = c.steps.size();
  if (!c.recording && c.trace && pos < c.trace->ops.size()) {
    const TraceOp& t = c.trace->ops[pos];
    if (t.matches(step, a, b)) {   // the common case: the result is known, nothing to infer
      push(c, std::move(step));
      matched_step(c, t);
      return 1;
    }
  }
  if (!infer(step, a.dtype, a.shape, b.dtype, b.shape)) return 0;
  const TraceOp key = key_of(step, a, b);
  if (!c.recording) {
    for (size_t i = 0; i < fn.traces.size(); ++i) {
      Trace* t = fn.traces[i].get();
      if (t == c.trace || pos >= t->ops.size() || !t->ops[pos].same_op(key)) continue;
      if (!same_prefix(c.trace, t, pos)) continue;
      if (c.trace) note_divergence(c, pos, key);   // left one trace for another
      c.trace = t;
      c.trace_index = i;
      push(c, std::move(step));
      ++fn.matched;
      if (c.scope.mode == ScopeMode::Capture || c.scope.mode == ScopeMode::Real) run_now(c);
      return 1;
    }
    if (c.trace || !fn.traces.empty()) note_divergence(c, pos, key);
    if (c.scope.mode == ScopeMode::Symbolic) {   // a gradient's scope goes on with autograd
      materialize(c);
      c.scope.diverged = !c.scope.nested;
    }
    if (fn.traces.size() >= kMaxTraces) {
      c.eager = true;
      ++fn.eager_calls;
      if (!fn.warned) {
        fn.warned = true;
        fn.warning = "dl.compile: " + fn.name + " has " + std::to_string(kMaxTraces) +
                     " traces; calls that leave them run eagerly from there (first: " +
                     what_of(fn, fn.divergences.back()) + "). dl.compile.explain lists them";
      }
      return 0;
    }
    auto t = std::make_unique<Trace>();
    if (c.trace) {
      t->ops.assign(c.trace->ops.begin(), c.trace->ops.begin() + long(pos));
      t->kept.assign(c.trace->kept.begin(), c.trace->kept.begin() + long(pos));
      // The plans of the scopes in the prefix come along; the open scope is not
      // compiled in the new trace until its own backward pass is recorded.
      for (TraceOp& op : t->ops) {
        if (op.kind == Kind::Marker && op.mark == Mark::Backward && op.plan >= 0) {
          t->plans.push_back(c.trace->plans[size_t(op.plan)]);
          op.plan = int32_t(t->plans.size() - 1);
        }
      }
      if (c.scope.mode != ScopeMode::None && c.scope.start < t->ops.size())
        t->ops[c.scope.start].symbolic = false;
    }
    c.trace = t.get();
    c.trace_index = fn.traces.size();
    fn.traces.push_back(std::move(t));
    c.recording = true;
    // A scope left on its way (materialized: its steps so far have their history) is
    // recorded from here as one that is being captured.
    if (c.scope.mode == ScopeMode::Real && c.scope.diverged) {
      c.scope.mode = ScopeMode::Capture;
      c.scope.failed = false;
    }
  }
  c.trace->ops.push_back(key);
  c.trace->kept.push_back(0);
  c.recorded_any = true;
  push(c, std::move(step));
  ++fn.recorded;
  if (c.scope.mode == ScopeMode::Capture || c.scope.mode == ScopeMode::Real) run_now(c);
  return 2;
}

void flush(Call& c) {
  if (c.flushed == c.steps.size()) return;
  std::vector<uint8_t> want(c.steps.size() - c.flushed, 1);
  run(c, want);
}

void sync_slow() {
  Call& c = *t_call;
  if (c.scope.mode != ScopeMode::None) scope_event(c);
  if (pending(&c)) flush(c);
}

void finish_call(Call& c) {
  const size_t n = c.steps.size();
  const Trace* t = c.trace;
  // Results may be left unwritten only on a trace whose kept results are known, that
  // the call followed without leaving it (its every op so far is the trace's).
  const bool known = t && t->analysed && !c.recording && !c.eager && n <= t->ops.size();
  const size_t ran = c.flushed;   // steps run before the end, every result written
  if (c.flushed < n) {
    std::vector<uint8_t> want(n - c.flushed, 1);
    if (known)
      for (size_t i = c.flushed; i < n; ++i) want[i - c.flushed] = t->kept[i] || c.returned[i];
    run(c, want);
  }
  if (!known) return;
  // Note [Flushed results released at the end]
  // Results that ran before the end (a value left for Lua mid-call, as an optimizer's
  // in-place update makes every pending step run) were all written, since the rest of
  // the call could read any of them. At the end, those the trace knows did not outlive
  // the call, and that are not returned, go back to the allocator now, warm, as an
  // unwritten result would have: delivered to Lua, they would wait for the collector.
  for (size_t i = 0; i < ran; ++i)
    if (!t->kept[i] && !c.returned[i]) c.results[i] = Tensor();
  if (n == t->ops.size()) ++c.trace->replays;
}

}  // namespace dl::compile
