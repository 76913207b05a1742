// Traces of compiled functions and the call in progress (dl.compile).
//
//   auto fn = std::make_shared<Function>("step");
//   Call& c = begin_call(fn);                   // the thread's call of fn
//   int r = defer(c, std::move(step), key);     // 1: matched the trace, 2: recorded
//   ...                                         // (0: not deferred, run it eagerly)
//   finish_call(c);                             // runs what is still deferred
//   end_call();
//
// Note [Deferred steps] in trace.cpp has the rules. Nothing here knows Lua: the bindings
// (bindings/capi_compile.cpp) turn deferred results into Lua values and back, and the
// Lua module (scripts/dlua/compile.lua) runs the function.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compile/plan.h"

namespace dl::compile {

// At most this many traces per function; then its calls run eagerly.
constexpr size_t kMaxTraces = 8;

// What a trace knows of an operand: an earlier step's result, or a bound tensor's
// dtype and shape (its values are read live at every call).
struct OperandKey {
  int32_t step = -1;
  DType dtype = DType::Float32;
  Shape shape;
  Device device;
  bool operator==(const OperandKey& o) const {
    return step == o.step && (step >= 0 || (dtype == o.dtype && shape == o.shape && device == o.device));
  }
};

// One op of a trace: what a call's op must equal to be matched (its Lua numbers are
// not part of it: they are parameters of each call's step).
struct TraceOp {
  Kind kind = Kind::Unary;
  Op op = Op::Neg;
  OperandKey a, b;
  int8_t ndims = 0;
  bool keepdim = false;
  int8_t dims[kMaxDims] = {};
  int line = -1;   // an index into Function::lines, -1 unknown
  DType out_dtype = DType::Float32;   // the result's, as infer() worked it out
  Shape out_shape;
  Mark mark = Mark::GradEnter;   // Marker
  Fn fn = Fn::Unary;             // Shape: which view, and the shape asked for
  Shape arg;
  bool symbolic = false;         // GradEnter: the scope's backward pass was recorded
  int32_t plan = -1;             // Backward: its plan in Trace::plans
  bool same_op(const TraceOp& o) const;
  // `step`, whose operands are `a` and `b`, is this op.
  bool matches(const Step& step, const OperandKey& a, const OperandKey& b) const;
};

// A recorded backward pass's reference to a value (Note [Compiled gradients] in
// compile/grad.cpp): a step's result, a step's bound operand, or an earlier step of the
// backward pass itself.
struct Ref {
  enum class To : uint8_t { Result, Operand, Backward } to = To::Result;
  int8_t k = 0;       // Operand: 0 for a, 1 for b
  int32_t i = 0;
};
struct BackwardStep {
  Step step;          // its kind, op and arguments, and its result's dtype and shape
  Ref a, b;
};
struct BackwardPlan {
  std::vector<BackwardStep> steps;
  std::vector<int32_t> grads;           // per watched tensor, the step whose result is its gradient
  std::vector<std::vector<Ref>> same;   // refs that named one tensor: they must again
  // Per tensor the pass is taken with respect to, where it is a Variable (an implicit
  // gradient's): the scope's operands that were that Variable. A call applies the plan
  // only where exactly these operands are it (a Variable moved to another operand of
  // the same shape would otherwise get the first one's gradient).
  std::vector<std::vector<Ref>> variables;
  // The Lua numbers of the scope's steps that a derivative may read (x * k, x / k):
  // the pass was recorded with these, and applies to a call with the same.
  std::vector<std::pair<int32_t, double>> numbers;
  int misses = 0;                       // calls whose numbers differed
};

struct Trace {
  std::vector<TraceOp> ops;
  std::vector<BackwardPlan> plans;
  std::vector<uint8_t> kept;   // per op: its result outlived the call when it was captured
  bool analysed = false;       // kept is known (a call that recorded has ended)
  int64_t replays = 0;         // calls that followed it to its end without recording
  Schedules schedules;         // what running its steps takes, worked out once (plan.h)
};

struct Divergence {
  size_t trace;      // the trace the call followed (kMaxTraces: none)
  size_t pos;        // the op where it left it
  TraceOp got;       // the op that came instead of the trace's
  int64_t count = 0;
};

struct Call;

struct Function {
  Function(std::string n, uint64_t i);
  ~Function();
  std::string name;
  uint64_t id;                              // the bindings' id of it
  std::unique_ptr<Call> spare;              // the last call's, reused (its vectors' room)
  std::vector<std::unique_ptr<Trace>> traces;
  std::vector<std::string> lines;           // "chunk:line" of recorded ops
  std::vector<Divergence> divergences;
  int64_t calls = 0, matched = 0, recorded = 0, eager_calls = 0, flushes = 0;
  int64_t fused = 0, groups = 0, elided = 0, single = 0, expired_reads = 0;
  int64_t small_at_once = 0;   // ops on small tensors held by handles run at once (bindings)
  bool defer_small = false;  // dl.compile's option (Note [Small handles run at once] in bindings/compile.h)
  std::string warning;       // to be printed once by the Lua side
  std::vector<std::string> notes;   // why gradient scopes were not compiled
  void note(const std::string& why);
  bool warned = false;
  int line_id(const std::string& where);
  std::string report() const;
};

// A gradient's scope in a call (Note [Compiled gradients] in compile/grad.cpp).
enum class ScopeMode : uint8_t { None, Capture, Symbolic, Real };
struct Scope {
  ScopeMode mode = ScopeMode::None;
  size_t start = 0;      // its GradEnter step
  int nested = 0;        // scopes opened inside it, left to autograd
  bool exited = false;
  bool failed = false;   // Capture: something the plan could not replay happened
  bool diverged = false; // materialized because the call left its trace (not an event)
};

// The thread's call of a compiled function.
struct Call {
  std::shared_ptr<Function> fn;
  Trace* trace = nullptr;
  size_t trace_index = 0;
  bool recording = false;   // new ops extend `trace`
  bool eager = false;       // left every trace with no room for another: no more deferring
  bool recorded_any = false;
  uint64_t serial = 0;      // unique among all calls: stamped on the proxies (bindings)
  std::vector<Step> steps;
  std::vector<Tensor> results;
  std::vector<uint8_t> returned;
  size_t flushed = 0;       // steps [0, flushed) have run
  Scope scope;
};

// The thread's call in progress, or null. g_calls counts the calls in progress on every
// thread: a plain load that spares the C ABI's hot entry points a thread-local lookup
// while none is (eager execution).
extern thread_local Call* t_call;
extern std::atomic<int> g_calls;
[[gnu::always_inline]] inline Call* current() noexcept {
  return g_calls.load(std::memory_order_relaxed) == 0 ? nullptr : t_call;
}
// Starts the thread's call of fn; an error if one is in progress (the Lua side runs a
// nested compiled function as part of the enclosing call instead).
Call& begin_call(std::shared_ptr<Function> fn);
// Ends it, dropping everything it held.
void end_call() noexcept;

// Note [Suspended calls]
// dl.vmap captures its function as dl.export does, which a compiled call's deferral
// would get in the way of; inside a compiled function it runs eagerly instead, as part
// of the call. suspend() runs the call's pending steps (every result written, as for a
// value that leaves for Lua) and sets the call aside: current() is null until resume(),
// so that every op in between runs eagerly, on the results of the call's steps so far
// (a proxy of the suspended call reads its step's result: suspended()). The ops in
// between are not steps of the call, on any call: its traces see their results as
// tensors from outside, as they see a Variable's.

// Runs the thread's call's pending steps and sets the call aside; null if no call is in
// progress (nothing to set aside).
Call* suspend();
// Takes up c (suspend's) again.
void resume(Call* c) noexcept;
// The call set aside on this thread, or null.
Call* suspended() noexcept;

// Matches `step`, whose operands are `a` and `b` (b unused for one-operand kinds),
// against the call's trace. 1: matched and deferred; 2: deferred and recorded (a new
// trace, or the call's trace grows); 0: not deferred (an op the executor does not take,
// or the call has left every trace and may make no more): run the op eagerly. Throws
// the eager op's error for operands it refuses.
int defer(Call& c, Step&& step, const OperandKey& a, const OperandKey& b);

// defer's matched path for a caller that builds the step in place (Note [Replayed ops]
// in trace.cpp). expected(c): the op c's trace has at c's next position while c follows
// it without recording, else null. open_step appends c's next step (and its result's
// slot) for the caller to fill; drop_step takes it back (not the expected op: the caller
// goes through defer instead); matched_step keeps it as the expected op t, as defer
// keeps a matched step.
inline const TraceOp* expected(const Call& c) {
  return !c.recording && c.trace && c.steps.size() < c.trace->ops.size() ? &c.trace->ops[c.steps.size()]
                                                                          : nullptr;
}
Step& open_step(Call& c);
void drop_step(Call& c) noexcept;
void matched_step(Call& c, const TraceOp& t);

// Runs every deferred step, keeping every result (a value leaves for Lua; the rest of
// the call may take any path).
void flush(Call& c);
// The thread's call has deferred steps that have not run.
inline bool pending(const Call* c) noexcept { return c && c->flushed < c->steps.size(); }
// sync()'s work when there is some: a gradient scope sees an event (grad.h), pending
// steps run.
void sync_slow();
// flush() of the thread's call when it has pending steps: what every entry point of the
// C ABI that is not a deferred op does first, so that it sees eager's state.
[[gnu::always_inline]] inline void sync() {
  const Call* c = current();
  if (c && (pending(c) || c->scope.mode != ScopeMode::None)) sync_slow();
}
// Runs the call's remaining steps at its end: a result is computed only if it is
// returned, read later in the call, or was kept when its trace was captured (unless the
// trace is not yet analysed, or the call took a path it does not know: then all are).
void finish_call(Call& c);

}  // namespace dl::compile
