// Watching the engine's ops as they run: what dl.compile records of a backward pass.
//
//   struct Log : dl::Observer {
//     void seen(const dl::Observed& o) override { ops.push_back(o.fn); }
//     std::vector<dl::Fn> ops;
//   } log;
//   {
//     dl::Observing on(&log);            // this thread's ops are reported to log
//     dl::Tensor y = dl::binary(dl::Op::Mul, a, b);   // seen: Fn::Binary, Op::Mul
//   }
//
// Only the outermost op is reported: the ops an op runs inside itself (a cast of an
// operand, the view that reshapes a reduction) are its own business, and replaying the
// outer op runs them again. What reports itself: the pointwise and reduction families,
// matmul, the shape functions below, casts and copies, and the constants (zeros, ones,
// full), each with its typed fields; every other op of the front ends (ops.h, nn.h) as
// Fn::Other, by name with generic argument lists (observed_other); in-place writes as
// Fn::Write (their target), so that an observer can refuse what it could not replay.
// A result allocated outside every reported op (empty() at depth 0) is reported to
// unreported(): an op that forgot to report itself, which a strict observer (dl.export)
// must refuse rather than take its result for a constant. Nothing is reported, and
// nothing costs more than a thread-local load, while no observer is set (the usual case).
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "tensor/ops.h"

namespace dl {

enum class Fn : uint8_t {
  Unary, Binary, BinaryScalar, Compare, CompareScalar, Reduce, MatMul,
  SumTo, Expand, Reshape, View, Squeeze, Unsqueeze, Transpose, Cast, Contiguous, Clone, Full,
  Write,
  Other,   // by name (Observed::name), with ins/ints/nums/outs
};

inline const char* fn_name(Fn f) {
  switch (f) {
    case Fn::SumTo: return "sum_to";
    case Fn::Expand: return "expand";
    case Fn::Reshape: return "reshape";
    case Fn::View: return "view";
    case Fn::Squeeze: return "squeeze";
    case Fn::Unsqueeze: return "unsqueeze";
    case Fn::Transpose: return "transpose";
    case Fn::Cast: return "to";
    case Fn::Contiguous: return "contiguous";
    case Fn::Clone: return "clone";
    case Fn::Full: return "full";
    case Fn::Write: return "an in-place write";
    case Fn::Other: return "an op outside the table";
    default: return "an op of the table";
  }
}

// One op as it ran: its inputs (in[0..nin)), arguments and result.
struct Observed {
  Fn fn = Fn::Unary;
  Op op = Op::Neg;
  const Tensor* in[2] = {nullptr, nullptr};
  int nin = 0;
  double s = 0;             // the number of the *Scalar fns, Full's value
  ScalarKind skind = ScalarKind::Float;   // and its kind (an integer or a float)
  bool first = false;       // the number came first
  std::vector<int> dims;    // Reduce: the dims; Transpose: two; Squeeze/Unsqueeze: one (or none)
  bool keepdim = false;
  ReduceOpts opts;
  Shape shape;              // SumTo, Expand, Reshape, View, Full: the shape asked for
  DType dtype = DType::Float32;   // Cast, Full
  Device device;            // Full
  Tensor out;
  // Fn::Other: the op's name (export/ops.cpp lists each with the meaning of its lists),
  // its tensor inputs (null for an optional one not given), integer arguments (dims,
  // sizes, flags), numbers, and every result (out is the first).
  const char* name = nullptr;
  std::vector<const Tensor*> ins;
  std::vector<int64_t> ints;
  std::vector<double> nums;
  std::vector<Tensor> outs;
};

struct Observer {
  virtual void seen(const Observed& op) = 0;
  // A tensor was allocated for `op` outside every reported op.
  virtual void unreported(const char* op) {}
  // Whether it takes a derivative's fused op (reported by name) as it is, as dl.compile's
  // plans do, which run it again through the same front end: then a derivative runs its
  // fused op, as eager execution does, and a plan has eager's bits. Observers that
  // rewrite what they see (dl.vmap, dl.export) need the formula's table ops instead.
  virtual bool takes_fused() const { return false; }
  virtual ~Observer() = default;
};

// This thread's observer and how deep inside reported ops it is; how many observers
// are set on any thread (a plain load that spares the front ends a thread-local lookup
// while there are none, the usual case).
extern thread_local Observer* t_observer;
extern thread_local int t_observe_depth;
extern std::atomic<int> g_observers;

// Whether an observer is set on this thread (the ops it sees must be the functional
// ones: an engine shortcut that writes in place asks first).
inline bool observing() {
  return __builtin_expect(g_observers.load(std::memory_order_relaxed) != 0, 0) && t_observer != nullptr;
}

// Whether an observer is set that needs derivatives as the formula's table ops (a fused
// derivative would be an op it cannot rewrite; Observer::takes_fused).
inline bool observing_formulas() { return observing() && !t_observer->takes_fused(); }

// Sets the thread's observer for a scope.
class Observing {
 public:
  explicit Observing(Observer* o) : prev_(t_observer), depth_(t_observe_depth) {
    t_observer = o;
    t_observe_depth = 0;
    g_observers.fetch_add(1, std::memory_order_relaxed);
  }
  ~Observing() {
    t_observer = prev_;
    t_observe_depth = depth_;
    g_observers.fetch_sub(1, std::memory_order_relaxed);
  }
  Observing(const Observing&) = delete;
  Observing& operator=(const Observing&) = delete;

 private:
  Observer* prev_;
  int depth_;
};

// Runs `run` (which returns the op's result) and reports it, filled in by `fill`,
// when an observer is set and this is the outermost op. The front ends wrap their
// bodies in it (one call of `run`, so that the body is inlined here).
template <typename Run, typename Fill>
[[gnu::always_inline]] inline Tensor observed(Run&& run, Fill&& fill) {
  Observer* o = __builtin_expect(g_observers.load(std::memory_order_relaxed) == 0, 1) ? nullptr : t_observer;
  struct Depth {
    Observer* o;
    explicit Depth(Observer* ob) : o(ob) { if (o) ++t_observe_depth; }
    ~Depth() { if (o) --t_observe_depth; }
  };
  bool outermost = false;
  Tensor r;
  {
    if (o) outermost = t_observe_depth == 0;
    Depth d(o);
    r = run();
  }
  if (outermost) {
    Observed op;
    fill(op);
    op.out = r;
    o->seen(op);
  }
  return r;
}

// Like observed() for an op reported as Fn::Other: `fill(o, result)` sets o's inputs,
// ints and nums (the name and results are set here). Any result type: a Tensor, a pair,
// a struct of tensors (`outs(result, list)` lists them).
inline void observed_outs(const Tensor& t, std::vector<Tensor>& l) { l.push_back(t); }
inline void observed_outs(const std::pair<Tensor, Tensor>& p, std::vector<Tensor>& l) {
  l.push_back(p.first);
  l.push_back(p.second);
}
inline void observed_outs(const SvdResult& r, std::vector<Tensor>& l) {
  l.push_back(r.u);
  l.push_back(r.s);
  l.push_back(r.vh);
}
template <typename Run, typename Fill>
[[gnu::always_inline]] inline auto observed_other(const char* name, Run&& run, Fill&& fill) -> decltype(run()) {
  Observer* o = __builtin_expect(g_observers.load(std::memory_order_relaxed) == 0, 1) ? nullptr : t_observer;
  if (!o) return run();
  const bool outermost = t_observe_depth == 0;
  auto r = [&] {
    ++t_observe_depth;
    struct Undo {
      ~Undo() { --t_observe_depth; }
    } undo;
    return run();
  }();
  if (outermost) {
    Observed op;
    op.fn = Fn::Other;
    op.name = name;
    fill(op, r);
    observed_outs(r, op.outs);
    if (!op.outs.empty()) op.out = op.outs[0];
    o->seen(op);
  }
  return r;
}

// A scope whose ops are not reported: checks that read values (an index's range) and
// are no part of what an op computes.
struct Unobserved {
  Unobserved() { ++t_observe_depth; }
  ~Unobserved() { --t_observe_depth; }
  Unobserved(const Unobserved&) = delete;
  Unobserved& operator=(const Unobserved&) = delete;
};

// empty()'s report of a result allocated outside every reported op.
inline void observe_allocation(const char* op) {
  if (__builtin_expect(g_observers.load(std::memory_order_relaxed) == 0, 1)) return;
  Observer* o = t_observer;
  if (o && t_observe_depth == 0) o->unreported(op);
}

// For the in-place ops: reports a write to `target` (before it happens).
inline void observe_write(const Tensor& target) {
  if (g_observers.load(std::memory_order_relaxed) == 0) return;
  Observer* o = t_observer;
  if (!o || t_observe_depth != 0) return;
  Observed op;
  op.fn = Fn::Write;
  op.in[0] = &target;
  op.nin = 1;
  o->seen(op);
}

}  // namespace dl
