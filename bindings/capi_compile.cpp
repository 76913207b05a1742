// The C ABI of dl.compile (capi.h; the Lua side is scripts/dlua/compile.lua, the
// engine side compile/).
//
// Note [Proxies]
// A deferred op (Note [Deferred steps] in compile/trace.cpp) hands Lua a proxy: a
// struct dl_tensor with id 0 whose dtype byte is kProxyTag, naming the call (its serial)
// and the step. It is never a valid inline value, so every entry point that reads it
// goes to value_of, which resolves it here: the call's deferred steps run first (sync),
// then the step's result is read. The deferred ops themselves take proxies of their own
// call as operands without running anything. Metadata (shape, dtype) is answered from
// the step without running it.
//
// The Lua side keeps every proxy of a call referenced until the call ends (so their
// memory is not reused while the engine may still write it), then settles each: a
// proxy whose result was computed becomes that value in place (inline or a handle,
// exactly as an eager op's result would be delivered), and one whose result the call
// never wrote becomes expired. A script that reads an expired proxy (it kept a tensor
// past the call that the function did not keep when it was captured) gets an error
// naming the op and its line, and the trace keeps that result from the next call on:
// a loud failure, never a stale value. A proxy of a call that has ended but was not
// settled (a copy of the cdata) is refused the same way.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "autograd/autograd.h"
#include "bindings/capi.h"
#include "bindings/compile.h"
#include "bindings/guard.h"
#include "compile/grad.h"
#include "compile/trace.h"

using dl::DType;
using dl::Op;
using dl::OpFamily;
using dl::Shape;
using dl::Tensor;
using dl::bind::ProxyRef;
namespace compile = dl::compile;

namespace {

// Compiled functions by id: a function is freed when its Lua object is collected, and
// an expired proxy names it by id, so a late read finds nothing rather than freed memory.
struct Registry {
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<compile::Function>> fns;
  uint64_t next = 1;
};
Registry& registry() {
  static Registry* r = new Registry();   // never destroyed: finalizers may run at exit
  return *r;
}

std::shared_ptr<compile::Function> find_fn(uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.fns.find(id);
  return it == r.fns.end() ? nullptr : it->second;
}

const char* line_of(const compile::Function& fn, const compile::Trace& t, uint32_t pos) {
  if (pos >= t.ops.size()) return nullptr;
  int line = t.ops[pos].line;
  return line >= 0 && size_t(line) < fn.lines.size() ? fn.lines[size_t(line)].c_str() : nullptr;
}

// k := what the trace knows of step `pos` of c as the operand of a later step. (Keys
// are filled in place, not returned: built apart and copied whole, their copies stalled
// as Note [Headers as words] in value.cpp says.)
void fill_step_key(const compile::Call& c, uint32_t pos, compile::OperandKey& k) {
  const compile::Step& st = c.steps[pos];
  k.step = int32_t(pos);
  k.dtype = st.dtype;
  k.shape = st.shape;
  k.device = st.device;
}

// k := what the trace knows of a tensor held for the call (an argument, a closure's
// tensor, a Variable) as an operand: its dtype, shape and device, read live each call.
void fill_bound_key(const Tensor& t, compile::OperandKey& k) {
  k.step = -1;
  k.dtype = t.dtype();
  k.shape = t.shape();
  k.device = t.device();
}

// A dim as Lua gives it (1-based, or negative from the end) as 0-based for n dims; -1
// when out of range (the eager op then says what is wrong).
int zero_based(int d, int n) {
  const int z = d < 0 ? d + n : d - 1;
  return z >= 0 && z < n ? z : -1;
}

// The thread's compiled call when it may defer an op now, else null: inside a
// gradient's scope that autograd runs (Note [Compiled gradients] in compile/grad.cpp) an
// op is a step run at once, recorded; in any other recording scope it is autograd's
// alone.
compile::Call* deferring() {
  compile::Call* c = compile::current();
  if (!c || c->eager || c->scope.nested > 0) return nullptr;
  const compile::ScopeMode mode = c->scope.mode;
  if (dl::ag::is_recording() && mode != compile::ScopeMode::Capture && mode != compile::ScopeMode::Real)
    return nullptr;
  return c;
}

// Whether recording st would log its operands that are Variables (autograd records an
// op only where it has a derivative: not comparisons, not floor or sign).
bool records_operands(const compile::Step& st) {
  switch (st.kind) {
    case compile::Kind::Unary:
    case compile::Kind::Binary:
    case compile::Kind::BinaryScalar:
    case compile::Kind::Reduce: return dl::ag::has_derivative(st.op);
    case compile::Kind::MatMul:
    case compile::Kind::Softmax:
    case compile::Kind::CrossEntropy:   // (its labels are a fresh copy, never a Variable)
    case compile::Kind::Shape: return true;
    default: return false;
  }
}

// In a symbolic gradient scope nothing is recorded, so the Variables that recording
// would log are logged by the deferred ops, in its order (dl.implicit_grad's list of
// Variables): a step's bound operands, taken before the step is kept.
struct Logged {
  Tensor a, b;
};
bool logs(const compile::Call& c, const compile::Step& st) {
  return compile::scope_recording(c) && records_operands(st);
}
Logged to_log(const compile::Call& c, const compile::Step& st) {
  if (!logs(c, st)) return {};
  return {st.a.input, st.b.input};
}
void log_operands(const Tensor& a, const Tensor& b) {
  for (const Tensor* t : {&a, &b})
    if (t->defined()) dl::ag::note_variable_use(*t);
}

// After the call kept a step as its last: writes the step's proxy into *out.
void promised(compile::Call& c, dl_tensor* out) {
  ProxyRef p;
  p.pos = uint32_t(c.steps.size() - 1);
  p.serial = c.serial;
  dl::bind::write_proxy(out, p);
}

// Defers `st`, whose operands' keys are ka and kb, and writes its promise into *out: 2,
// 3 (the same, for an op just recorded, whose line the Lua side then notes), or -2 (the
// call takes no more: the caller runs the eager op).
int promise(compile::Call& c, compile::Step&& st, const compile::OperandKey& ka, const compile::OperandKey& kb,
            dl_tensor* out) {
  const Logged v = to_log(c, st);
  const int r = compile::defer(c, std::move(st), ka, kb);
  if (r == 0) return -2;
  log_operands(v.a, v.b);
  promised(c, out);
  return r == 2 ? 3 : 2;
}

// Whether r, read from a proxy, is a promise of the call c (not an expired one, not of
// another call).
bool of_call(const compile::Call& c, const ProxyRef& r) {
  return r.tag == dl::bind::kProxyTag && r.serial == c.serial && r.pos < c.steps.size();
}

// t is a proxy of the call c: *r says which step.
bool own_proxy(const compile::Call& c, const dl_tensor* t, ProxyRef* r) {
  return dl::bind::proxy_ref(t, r) && of_call(c, *r);
}

// An operand of a deferred op: a proxy of this call, or any other tensor on the host or
// a CUDA device. False: the op is not deferred (a proxy of another call, another device).
bool operand_for(compile::Call& c, const dl_tensor* t, compile::Operand& o, compile::OperandKey& k,
                 const char* op) {
  // (The operand is written in place too, as the keys.)
  ProxyRef r;
  if (dl::bind::proxy_ref(t, &r)) {
    if (!of_call(c, r)) return false;
    o.step = int32_t(r.pos);
    fill_step_key(c, r.pos, k);
    return true;
  }
  o.step = -1;
  o.input = dl::bind::operand_of(t, op);
  const Tensor& x = o.input;
  if (!x.device().is_cpu() && !x.device().is_cuda()) return false;
  fill_bound_key(x, k);
  return true;
}

// Whether t, an operand of the op the call's trace expects next, is what the trace's
// key k says, writing it into o as it goes (Note [Replayed ops] in compile/trace.cpp).
bool replay_operand(const compile::Call& c, const dl_tensor* t, const compile::OperandKey& k,
                    compile::Operand& o, const char* op) {
  ProxyRef r;
  if (dl::bind::proxy_ref(t, &r)) {
    // (The step being filled is the call's last: a proxy names an earlier one.)
    if (!of_call(c, r) || r.pos + 1 >= c.steps.size()) return false;
    o.step = int32_t(r.pos);
    return k.step == o.step;
  }
  if (k.step >= 0) return false;
  o.input = dl::bind::operand_of(t, op);
  const Tensor& x = o.input;
  return x.dtype() == k.dtype && x.shape() == k.shape && x.device() == k.device;
}

// An op of defer's kinds below (pointwise, reductions, softmax, products), when it is
// the one the call's trace expects next (t): its step is built in place and kept, and
// its proxy written to *out: 2. -3: it is not (nothing kept; the general way decides).
// The operands' errors are thrown as in `defer` below.
int replay(compile::Call& c, const compile::TraceOp& t, compile::Kind kind, Op op, const dl_tensor* a,
           const dl_tensor* b, double s, int first, const int32_t* dims, int ndims, int keepdim,
           dl_tensor* out, const char* name) {
  if (t.kind != kind || t.op != op) return -3;
  const bool dimmed = kind == compile::Kind::Reduce || kind == compile::Kind::Softmax;
  if (dimmed && (ndims != t.ndims || (keepdim != 0) != t.keepdim || (ndims > 0 && !dims))) return -3;
  compile::Step& st = compile::open_step(c);
  struct Undo {
    compile::Call& c;
    bool armed = true;
    ~Undo() { if (armed) compile::drop_step(c); }
  } undo{c};
  if (!replay_operand(c, a, t.a, st.a, name)) return -3;
  if (compile::arity(kind) == 2 && !replay_operand(c, b, t.b, st.b, name)) return -3;
  if (dimmed) {
    for (int i = 0; i < ndims; ++i) {
      const int d = zero_based(dims[i], t.a.shape.size());
      if (d != t.dims[i]) return -3;
      st.dims[i] = int8_t(d);
    }
    st.ndims = int8_t(ndims);
    st.keepdim = keepdim != 0;
  }
  st.kind = kind;
  st.op = op;
  st.s = s;
  st.scalar_first = first != 0;
  st.device = st.a.step >= 0 ? c.steps[size_t(st.a.step)].device : st.a.input.device();
  // (Logged from the step itself, not from copies: a scope that logs is Symbolic, where
  // matched_step runs nothing, so the step is still the call's last.)
  const bool log = logs(c, st);
  undo.armed = false;
  compile::matched_step(c, t);
  if (log) log_operands(c.steps.back().a.input, c.steps.back().b.input);
  promised(c, out);
  return 2;
}

// defer's general way: the op is matched against the trace (or traces) by compile::defer.
int defer_new(compile::Call* c, compile::Kind kind, int op, const dl_tensor* a, const dl_tensor* b, double s,
              int first, const int32_t* dims, int ndims, int keepdim, dl_tensor* out) {
  const bool two = compile::arity(kind) == 2;
  dl::MessageBase base(1);
  try {
    const dl::OpInfo& info = dl::op_info(Op(op));
    compile::Step st;
    compile::OperandKey ka, kb;
    st.kind = kind;
    st.op = Op(op);
    st.s = s;
    st.scalar_first = first != 0;
    if (!operand_for(*c, a, st.a, ka, info.lua_name)) return -2;
    if (two && !operand_for(*c, b, st.b, kb, info.lua_name)) return -2;
    if (two && kb.device != ka.device) return -2;   // the eager op names both devices
    st.device = ka.device;
    if (kind == compile::Kind::Reduce || kind == compile::Kind::Softmax) {
      if (ndims < 0 || ndims > dl::kMaxDims || (ndims > 0 && !dims)) return -2;
      const int rank = ka.shape.size();
      for (int i = 0; i < ndims; ++i) {
        const int d = zero_based(dims[i], rank);
        if (d < 0) return -2;
        for (int j = 0; j < i; ++j)
          if (st.dims[j] == d) return -2;
        st.dims[i] = int8_t(d);
      }
      st.ndims = int8_t(ndims);
      st.keepdim = keepdim != 0;
    }
    return promise(*c, std::move(st), ka, kb, out);
  } catch (...) {
    dl::bind::capture_exception();
    return -1;
  }
}

// Whether an op on a and b (null for an op of one operand) runs at once in the call c
// (Note [Small handles run at once] in compile.h): each operand small on the host, held
// by a handle or inline. Counted for explain when it does.
bool small_operands(const compile::Call& c, const dl_tensor* a, const dl_tensor* b) {
  auto small = [](const dl_tensor* t) {
    if (t->id == 0) return t->inl_dtype < dl::kNumDTypes;   // held inline (a proxy is not)
    const Tensor* x = dl::bind::handle_find(t->id);
    return x && dl::bind::small_host_bytes(*x);
  };
  const bool scope_open = c.scope.mode != compile::ScopeMode::None && !c.scope.exited;
  const bool at_once = !scope_open && !c.fn->defer_small && small(a) && (!b || small(b)) &&
                       !dl::ag::is_recording() && !dl::bind::maybe_capturing();
  if (at_once) ++c.fn->small_at_once;
  return at_once;
}

// Defers an op of a pointwise or reduction family when the thread has a compiled call
// that can take it: 2 (a proxy in *out), 3 (the same, for an op just recorded, whose
// line the Lua side then notes), -1 (the eager op's own error, raised here), -2 (not
// deferred: the caller runs the eager op), kRunAtOnce (the same, at once).
int defer(compile::Kind kind, int op, const dl_tensor* a, const dl_tensor* b, double s, int first,
          const int32_t* dims, int ndims, int keepdim, dl_tensor* out) {
  compile::Call* c = deferring();
  if (!c || op < 0 || op >= dl::kNumOps) return -2;
  if (kind != compile::Kind::Watch && small_operands(*c, a, compile::arity(kind) == 2 ? b : nullptr))
    return dl::bind::kRunAtOnce;
  if (const compile::TraceOp* t = kind != compile::Kind::Watch ? compile::expected(*c) : nullptr) {
    dl::MessageBase base(1);
    try {
      const int r = replay(*c, *t, kind, Op(op), a, b, s, first, dims, ndims, keepdim, out,
                           dl::op_info(Op(op)).lua_name);
      if (r != -3) return r;
    } catch (...) {
      dl::bind::capture_exception();
      return -1;
    }
  }
  return defer_new(c, kind, op, a, b, s, first, dims, ndims, keepdim, out);
}

}  // namespace

namespace dl::bind {

Tensor resolve_proxy(const ProxyRef& r, const char* op) {
  compile::Call* c = compile::current();
  if (r.tag == kProxyTag && !c) {
    // A proxy of a call set aside (Note [Suspended calls]): its steps have all run.
    compile::Call* s = compile::suspended();
    if (s && s->serial == r.serial && r.pos < s->steps.size() && s->results[r.pos].defined())
      return s->results[r.pos];
  }
  if (r.tag == kProxyTag) {
    DL_CHECK(c && c->serial == r.serial && r.pos < c->steps.size(), op,
             ": a tensor promised by a compiled call (dl.compile) that has ended; it was copied "
             "out of the call's own value, which holds the result");
    compile::sync();
    const Tensor& t = c->results[r.pos];
    DL_CHECK(t.defined(), op, ": a tensor of a compiled call read after its call finished");
    return t;
  }
  // Expired: the function keeps this result from its next call on.
  std::shared_ptr<compile::Function> fn = find_fn(r.fn);
  const char* where = nullptr;
  const char* what = "an op";
  if (fn && r.serial >= 1 && r.serial <= fn->traces.size()) {
    compile::Trace& t = *fn->traces[r.serial - 1];
    if (r.pos < t.kept.size()) {
      t.kept[r.pos] = 1;
      // (A marker's place holds a step of the recorded backward pass.)
      what = t.ops[r.pos].kind == compile::Kind::Marker ? "a step of a backward pass" : op_name(t.ops[r.pos].op);
      where = line_of(*fn, t, r.pos);
    }
    ++fn->expired_reads;
  }
  fail(ErrorKind::Value, op, ": this tensor (", what, where ? " at " : "", where ? where : "",
       ") was made inside a compiled call and kept past it, but the compiled function did not "
       "keep it when it was captured, so its value was never written. It is kept from the "
       "next call on; to keep a tensor of a compiled call, return it (or keep t:clone())");
}

}  // namespace dl::bind

namespace dl::bind {

int defer_unary(int op, const struct dl_tensor* x, struct dl_tensor* out) {
  return defer(compile::Kind::Unary, op, x, nullptr, 0, 0, nullptr, 0, 0, out);
}
int defer_binary(int op, const struct dl_tensor* a, const struct dl_tensor* b,
                            struct dl_tensor* out) {
  return defer(compile::Kind::Binary, op, a, b, 0, 0, nullptr, 0, 0, out);
}
int defer_binary_scalar(int op, const struct dl_tensor* a, double s, int first,
                                   struct dl_tensor* out) {
  return defer(compile::Kind::BinaryScalar, op, a, nullptr, s, first, nullptr, 0, 0, out);
}
int defer_compare(int op, const struct dl_tensor* a, const struct dl_tensor* b,
                             struct dl_tensor* out) {
  return defer(compile::Kind::Compare, op, a, b, 0, 0, nullptr, 0, 0, out);
}
int defer_compare_scalar(int op, const struct dl_tensor* a, double s, int first,
                                    struct dl_tensor* out) {
  return defer(compile::Kind::CompareScalar, op, a, nullptr, s, first, nullptr, 0, 0, out);
}
int defer_reduce(int op, const struct dl_tensor* x, const int32_t* dims, int ndims,
                            int keepdim, struct dl_tensor* out) {
  return defer(compile::Kind::Reduce, op, x, nullptr, 0, 0, dims, ndims, keepdim, out);
}

int defer_watch(const struct dl_tensor* x, struct dl_tensor* out) {
  compile::Call* c = compile::current();
  if (!c || c->scope.mode == compile::ScopeMode::None || c->scope.nested > 0 || c->scope.exited) return -2;
  return defer(compile::Kind::Watch, 0, x, nullptr, 0, 0, nullptr, 0, 0, out);
}

namespace {
void register_hooks() {
  static const bool once = [] {
    compile::ScopeHooks h;
    h.enter = grad_scope_open;
    h.exit = grad_scope_close;
    compile::set_scope_hooks(h);
    return true;
  }();
  (void)once;
}
}  // namespace

int compiled_grad_scope(bool enter) {
  compile::Call* c = compile::current();
  if (!c) return 1;
  dl::MessageBase base(1);
  try {
    register_hooks();
    return (enter ? compile::scope_enter(*c) : compile::scope_exit(*c)) ? 1 : 0;
  } catch (...) {
    capture_exception();
    return -1;
  }
}

// The gradients of y with respect to the n tensors xs (watched in the scope, or
// Variables), into outs (a proxy each):
// 4, a custom gradient's task (2), an error (-1), or -2 when the pass is not the scope's
// own (the caller runs it as outside a compiled call).
int compiled_backward(const struct dl_tensor* y, const struct dl_tensor* const* xs, int n,
                      struct dl_tensor* const* outs, int* task) {
  compile::Call* c = compile::current();
  compile::Scope& s = c->scope;
  if (s.mode == compile::ScopeMode::None || s.nested > 0 || !s.exited || n < 1) return -2;
  dl::MessageBase base(1);
  try {
    // Each tensor is watched in the scope (a proxy of a Watch step) or a Variable (held
    // by a handle; its key is its dtype, shape and device, as any operand held so).
    ProxyRef ry;
    std::vector<ProxyRef> rx(static_cast<size_t>(n));
    TensorList variables(static_cast<size_t>(n));
    std::vector<compile::OperandKey> keys(static_cast<size_t>(n));
    bool ours = own_proxy(*c, y, &ry) && !grad_hook_armed();
    for (int k = 0; k < n && ours; ++k) {
      const size_t i = size_t(k);
      if (own_proxy(*c, xs[k], &rx[i])) {
        ours = rx[i].pos > s.start && c->steps[rx[i].pos].kind == compile::Kind::Watch;
        if (ours) fill_step_key(*c, rx[i].pos, keys[i]);
      } else {
        ours = xs[k]->id != 0 && !proxy_ref(xs[k], &rx[i]);
        if (ours) variables[i] = dl::bind::operand_of(xs[k], "grad");
        ours = ours && dl::ag::is_variable(variables[i]);
        if (ours) fill_bound_key(variables[i], keys[i]);
      }
    }
    if (!ours) {
      compile::scope_event(*c);   // not the scope's pass: autograd's
      return -2;
    }
    // The pass's markers: Backward (the result and the first tensor), then one
    // BackwardInput for each other tensor.
    compile::Step mark;
    mark.kind = compile::Kind::Marker;
    mark.mark = compile::Mark::Backward;
    compile::OperandKey ky;
    fill_step_key(*c, ry.pos, ky);
    if (compile::defer(*c, std::move(mark), ky, keys[0]) == 0) return -2;   // the call runs eagerly now
    const size_t marker = c->steps.size() - 1;
    for (int k = 1; k < n; ++k) {
      compile::Step more;
      more.kind = compile::Kind::Marker;
      more.mark = compile::Mark::BackwardInput;
      if (compile::defer(*c, std::move(more), keys[size_t(k)], compile::OperandKey{}) == 0) return -2;
    }
    ProxyRef g;
    g.serial = c->serial;
    std::vector<int64_t> at;
    if (s.mode == compile::ScopeMode::Symbolic) {
      if (compile::replay_backward(*c, marker, variables, &at)) {
        for (int k = 0; k < n; ++k) {
          g.pos = uint32_t(at[size_t(k)]);
          write_proxy(outs[k], g);
        }
        return 4;
      }
      compile::materialize(*c);
    }
    // Autograd's pass, on the recorded tensors; recorded itself when the call records.
    TensorList grads;
    int st;
    const bool capture = c->recording && !s.failed;
    compile::BackwardPlan plan;
    std::string why;
    bool have = false;
    {
      std::optional<compile::BackwardCapture> cap;
      if (capture) cap.emplace(*c);
      TensorList xt;
      for (int k = 0; k < n; ++k)
        xt.push_back(variables[size_t(k)].defined() ? variables[size_t(k)] : c->results[rx[size_t(k)].pos]);
      st = backward_many(c->results[ry.pos], xt, &grads, task);
      if (st == 0 && cap) have = cap->finish(*c, marker, grads, variables, &plan, &why);
    }
    if (st != 0) {
      s.failed = true;
      return st;   // an error, or a custom gradient's task for the Lua side to drive
    }
    if (capture && !have) c->fn->note("its backward pass holds " + why);
    if (have) {
      c->trace->plans.push_back(std::move(plan));
      c->trace->ops[marker].plan = int32_t(c->trace->plans.size() - 1);
      c->trace->ops[s.start].symbolic = true;
    }
    // The trace's places for the pass's steps, each gradient in its own.
    const compile::BackwardPlan* p = compile::plan_at(*c, marker);
    const size_t places = p ? p->steps.size() : size_t(n);
    const size_t first = marker + size_t(n);
    for (size_t k = 0; k < places; ++k) {
      compile::Step place;
      place.kind = compile::Kind::Marker;
      place.mark = compile::Mark::BackwardStep;
      if (compile::defer(*c, std::move(place), compile::OperandKey{}, compile::OperandKey{}) == 0) {
        // The call runs eagerly now: the gradient as a value, or the gradients as handles.
        if (n == 1) return deliver(std::move(grads[0]), outs[0]);
        for (int j = 0; j < n; ++j)
          if (deliver_handle(std::move(grads[size_t(j)]), outs[j]) < 0) return -1;
        return 1;
      }
    }
    for (int k = 0; k < n; ++k) {
      const size_t pos = first + (p ? size_t(p->grads[size_t(k)]) : size_t(k));
      c->results[pos] = std::move(grads[size_t(k)]);
      g.pos = uint32_t(pos);
      write_proxy(outs[k], g);
    }
    c->flushed = c->steps.size();
    return 4;
  } catch (...) {
    capture_exception();
    return -1;
  }
}

int compiled_backward_one(const struct dl_tensor* y, const struct dl_tensor* x, struct dl_tensor* out,
                          int* task) {
  return compiled_backward(y, &x, 1, &out, task);
}

namespace {
// The sizes, strides and offset a step's result will have, as the eager ops lay them
// out: a fresh result is contiguous; a view (a Shape step Lua deferred) is laid out from
// its operand's layout by the view op's own rule (tensor/shape.h's layout functions).
dl::Layout layout_of(const compile::Call& c, size_t pos, int64_t* offset) {
  const compile::Step& st = c.steps[pos];
  if (st.kind != compile::Kind::Shape) {
    *offset = 0;
    return {st.shape, dl::contiguous_strides(st.shape)};
  }
  dl::Layout in;
  if (st.a.step >= 0) {
    in = layout_of(c, size_t(st.a.step), offset);
  } else {
    in = {st.a.input.shape(), st.a.input.strides()};
    *offset = st.a.input.offset();
  }
  switch (st.fn) {
    case dl::Fn::Transpose: return dl::transpose_layout(in, st.dims[0], st.dims[1]);
    case dl::Fn::Unsqueeze: return dl::unsqueeze_layout(in, st.dims[0]);
    case dl::Fn::Squeeze:
      return dl::squeeze_layout(in, st.ndims == 1 ? std::optional<int>(st.dims[0]) : std::nullopt);
    default:   // View, Reshape: a view where one exists, else (reshape) a fresh copy
      if (std::optional<Shape> v = dl::compute_stride(in.sizes, in.strides, st.shape)) return {st.shape, *v};
      *offset = 0;
      return {st.shape, dl::contiguous_strides(st.shape)};
  }
}
}  // namespace

int defer_view(int which, const struct dl_tensor* x, const int64_t* shape, int nshape, int d1, int d2,
               struct dl_tensor* out) {
  static constexpr dl::Fn kFns[] = {dl::Fn::Reshape, dl::Fn::View, dl::Fn::Transpose, dl::Fn::Squeeze,
                                    dl::Fn::Unsqueeze};
  compile::Call* c = deferring();
  if (!c || which < 0 || which > 4) return -2;
  // A promised result of the call, or a tensor held by a handle (a weight's w:t(): as an
  // eager view inside a gradient's scope it would end the scope's compiling). A value
  // held inline is not: its view is of the Lua value's own memory, which a later
  // in-place write changes.
  ProxyRef r;
  const bool promised = own_proxy(*c, x, &r);
  if (!promised && (x->id == 0 || proxy_ref(x, &r))) return -2;
  // A view of a small tensor held by a handle runs at once as ops on it do, while the
  // call has nothing deferred and no gradient's scope, so that the entry point's sync
  // has nothing to do: eager's view, a handle, whose ops then run at once too.
  if (!promised && !compile::pending(c) && c->scope.mode == compile::ScopeMode::None &&
      small_operands(*c, x, nullptr))
    return -2;
  dl::MessageBase base(1);
  try {
    compile::Step st;
    st.kind = compile::Kind::Shape;
    st.fn = kFns[which];
    compile::OperandKey ka;
    if (!operand_for(*c, x, st.a, ka, dl::fn_name(st.fn))) return -2;
    const int rank = ka.shape.size();
    switch (st.fn) {
      case dl::Fn::View:
      case dl::Fn::Reshape: {
        if (nshape < 0 || nshape > dl::kMaxDims || (nshape > 0 && !shape)) return -2;
        for (int i = 0; i < nshape; ++i) st.arg.push_back(shape[i]);
        if (st.fn == dl::Fn::Reshape) break;
        // A view must exist for the operand's layout (strides included); where none
        // does, or the shape does not fit, the eager op runs and says why.
        int64_t offset = 0;
        const dl::Layout in = promised ? layout_of(*c, r.pos, &offset)
                                       : dl::Layout{st.a.input.shape(), st.a.input.strides()};
        try {
          const Shape sizes = dl::infer_size(st.arg, dl::checked_numel(in.sizes, "view"), "view");
          if (!dl::compute_stride(in.sizes, in.strides, sizes)) return -2;
        } catch (const dl::Error&) {
          return -2;
        }
        break;
      }
      case dl::Fn::Transpose: {
        const int a = zero_based(d1, rank), b = zero_based(d2, rank);
        if (a < 0 || b < 0) return -2;
        st.ndims = 2;
        st.dims[0] = int8_t(a);
        st.dims[1] = int8_t(b);
        break;
      }
      case dl::Fn::Squeeze: {
        const int a = d1 == 0 ? 0 : zero_based(d1, rank);
        if (a < 0) return -2;
        st.ndims = d1 == 0 ? 0 : 1;
        st.dims[0] = int8_t(a);
        break;
      }
      default: {   // Unsqueeze
        const int a = zero_based(d1, rank + 1);
        if (a < 0) return -2;
        st.ndims = 1;
        st.dims[0] = int8_t(a);
        break;
      }
    }
    st.device = ka.device;
    return promise(*c, std::move(st), ka, compile::OperandKey{}, out);
  } catch (...) {
    capture_exception();
    return -1;
  }
}

int defer_softmax(int op, const struct dl_tensor* x, int dim, struct dl_tensor* out) {
  const int32_t d = dim;
  return defer(compile::Kind::Softmax, op, x, nullptr, 0, 0, &d, 1, 0, out);
}

int defer_cross_entropy(const struct dl_tensor* logits, const struct dl_tensor* target, int reduction,
                        struct dl_tensor* out) {
  compile::Call* c = deferring();
  ProxyRef r;
  if (!c || proxy_ref(target, &r)) return -2;
  dl::MessageBase base(1);
  try {
    compile::Step st;
    st.kind = compile::Kind::CrossEntropy;
    st.op = Op::CrossEntropy;
    compile::OperandKey ka;
    if (!operand_for(*c, logits, st.a, ka, "cross_entropy")) return -2;
    const Tensor t = dl::bind::operand_of(target, "cross_entropy");
    if (t.device() != ka.device) return -2;   // the eager op names both devices
    // The labels are checked and made 0-based now, as the eager entry point does: a bad
    // label fails where eager execution fails, and the step reads the 0-based copy.
    std::optional<int64_t> ignore;
    Tensor labels = cross_entropy_labels(ka.shape, t, reduction, 0, 0, &ignore);
    compile::OperandKey kb;
    fill_bound_key(labels, kb);
    st.b = compile::Operand::bound(std::move(labels));
    st.arg = Shape{int64_t(reduction)};
    st.device = ka.device;
    return promise(*c, std::move(st), ka, kb, out);
  } catch (...) {
    capture_exception();
    return -1;
  }
}

int defer_matmul(const struct dl_tensor* a, const struct dl_tensor* b, struct dl_tensor* out) {
  return defer(compile::Kind::MatMul, int(Op::MatMul), a, b, 0, 0, nullptr, 0, 0, out);
}

bool proxy_meta(const struct dl_tensor* x, dl_meta* out) {
  ProxyRef r;
  if (!dl::bind::proxy_ref(x, &r) || r.tag != dl::bind::kProxyTag) return false;
  compile::Call* c = compile::current();
  if (!c || c->serial != r.serial || r.pos >= c->steps.size()) return false;
  // A result that exists already (an op run at once, as in a scope that autograd
  // records: a gradient there fills a placeholder step) tells its own layout; a promised
  // one is laid out as the eager op would lay it out.
  const compile::Step& st = c->steps[r.pos];
  const Tensor& t = c->results[r.pos];
  int64_t offset = 0;
  dl::Layout l = t.defined() ? dl::Layout{t.shape(), t.strides()} : layout_of(*c, r.pos, &offset);
  if (t.defined()) offset = t.offset();
  out->ndim = l.sizes.size();
  out->dtype = int(t.defined() ? t.dtype() : st.dtype);
  const dl::Device dev = t.defined() ? t.device() : st.device;
  out->device_type = int(dev.type);
  out->device_index = dev.index;
  out->contiguous = dl::contiguous_layout(l.sizes, l.strides) ? 1 : 0;
  out->requires_grad = 0;
  int64_t n = 1;
  for (int64_t d : l.sizes) n *= d;
  out->numel = double(n);
  out->offset = double(offset);
  for (int d = 0; d < dl::kMaxDims; ++d) {
    out->sizes[d] = d < l.sizes.size() ? double(l.sizes[d]) : 0;
    out->strides[d] = d < l.sizes.size() ? double(l.strides[d]) : 0;
  }
  return true;
}

}  // namespace dl::bind

// ---- the entry points ------------------------------------------------------------------

uint64_t dl_compile_new(const char* name, int defer_small) {
  try {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    const uint64_t id = r.next++;
    auto fn = std::make_shared<compile::Function>(name ? name : "?", id);
    fn->defer_small = defer_small != 0;
    r.fns.emplace(id, std::move(fn));
    return id;
  } catch (...) {
    dl::bind::capture_exception();
    return 0;
  }
}

void dl_compile_release(struct dl_compiled f) {
  Registry& r = registry();
  std::shared_ptr<compile::Function> gone;   // freed outside the lock
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.fns.find(f.id);
  if (it == r.fns.end()) return;
  gone = std::move(it->second);
  r.fns.erase(it);
}

int dl_compile_begin(uint64_t f) {
  return dl::bind::guard_status([&] {
    std::shared_ptr<compile::Function> fn = find_fn(f);
    DL_CHECK(fn, "compile: not a compiled function (it was released)");
    compile::begin_call(std::move(fn));
  });
}

int dl_compile_active(void) { return compile::current() ? 1 : 0; }

int dl_compile_return(const struct dl_tensor* x) {
  ProxyRef r;
  compile::Call* c = compile::current();
  if (!c || !own_proxy(*c, x, &r))
    return 0;
  c->returned[r.pos] = 1;
  return 1;
}

int dl_compile_finish(int keep_all) {
  compile::Call* c = compile::current();
  if (!c) return 0;
  dl::MessageBase base(1);
  try {
    if (keep_all) compile::flush(*c);
    else compile::finish_call(*c);
  } catch (...) {
    dl::bind::capture_exception();
    return -1;
  }
  return c->recorded_any ? 1 : 0;
}

int dl_compile_settle(struct dl_tensor* x) {
  ProxyRef r;
  compile::Call* c = compile::current();
  if (!c || !own_proxy(*c, x, &r))
    return 2;
  // (Copied, not moved out: two proxies may name one result, as the gradients of x + y
  // with respect to x and to y are one tensor, and each gets it, as eagerly. The call's
  // own reference goes at its end.)
  Tensor t = c->results[r.pos];
  if (!t.defined()) {
    ProxyRef e;
    e.tag = dl::bind::kExpiredTag;
    e.pos = r.pos;
    e.serial = c->trace ? c->trace_index + 1 : 0;
    e.fn = c->fn->id;
    dl::bind::write_proxy(x, e);
    return 0;
  }
  dl::MessageBase base(1);
  try {
    return dl::bind::deliver(std::move(t), x);
  } catch (...) {
    dl::bind::capture_exception();
    return -1;
  }
}

void dl_compile_keep(uint32_t pos) {
  compile::Call* c = compile::current();
  if (c && c->trace && pos < c->trace->kept.size()) c->trace->kept[pos] = 1;
}

void dl_compile_analysed(void) {
  compile::Call* c = compile::current();
  if (c && c->trace) c->trace->analysed = true;
}

void dl_compile_line(uint32_t pos, const char* where) {
  compile::Call* c = compile::current();
  if (!c || !c->trace || pos >= c->trace->ops.size() || !where) return;
  try {
    c->trace->ops[pos].line = c->fn->line_id(where);
  } catch (...) {
  }
}

const char* dl_compile_end(void) {
  thread_local std::string warning;
  warning.clear();
  compile::Call* c = compile::current();
  if (c && !c->fn->warning.empty()) warning.swap(c->fn->warning);
  compile::end_call();
  return warning.empty() ? nullptr : warning.c_str();
}

int dl_compile_suspend(void) {
  dl::MessageBase base(1);
  try {
    return compile::suspend() ? 1 : 0;
  } catch (...) {
    dl::bind::capture_exception();
    return -1;
  }
}

void dl_compile_resume(void) { compile::resume(compile::suspended()); }

void dl_compile_abandon(void) {
  if (!compile::current()) compile::resume(compile::suspended());   // one set aside is ended too
  compile::Call* c = compile::current();
  if (!c) return;
  // Autograd's scope, if the call had opened one, is the bindings' to close: the Lua
  // side that would have closed it is gone.
  compile::end_call();
}

const char* dl_compile_report(uint64_t f) {
  thread_local std::string text;
  std::shared_ptr<compile::Function> fn = find_fn(f);
  try {
    text = fn ? fn->report() : std::string("compiled function released\n");
  } catch (...) {
    text = "compile: out of memory\n";
  }
  return text.c_str();
}
