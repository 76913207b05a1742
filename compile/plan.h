// The steps of a compiled call and the executor that runs them, fused (dl.compile).
//
//   std::vector<Step> steps;          // a + b, then tanh of it, then its sum
//   steps.push_back(Step::binary(Op::Add, Operand::input(a), Operand::input(b)));
//   steps.push_back(Step::unary(Op::Tanh, Operand::of(0)));
//   steps.push_back(Step::reduce(Op::Sum, Operand::of(1), {}, false));
//   std::vector<Tensor> results(3);
//   execute(steps, 0, 3, results, {0, 0, 1});   // only the sum is wanted: add and tanh
//                                               // run as one pass, their results unkept
//
// A step is an op of the pointwise or reduction families, a softmax, or a matrix
// product, whose result was promised to
// Lua before it was computed (Note [Deferred steps] in compile/trace.cpp says when a
// call defers one). The executor runs a range of them in their order, with the engine's
// own arithmetic, so that every value is the one eager execution gives, bit for bit
// (Note [Fused groups] in plan.cpp). It knows nothing of Lua or autograd: a step is
// never recorded, and a call defers none while a gradient is being taken.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/observe.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace dl::compile {

enum class Kind : uint8_t {
  Unary, Binary, BinaryScalar, Compare, CompareScalar, Reduce, MatMul,
  Softmax,  // softmax or log_softmax (`op`) along dims[0] (0-based)
  SoftmaxBackward,   // softmax's fused gradient: a the incoming gradient, b the softmax (last dim)
  Shape,    // a shape function or a copy (`fn`: SumTo, Expand, Reshape, View, Squeeze,
            // Unsqueeze, Transpose, Cast, Contiguous, Clone), from a recorded backward
  Full,     // a constant (`arg` its shape, `arg_dtype`, `s` its value), likewise
  CrossEntropy,   // a the logits (N, C), b the 0-based int64 labels (N); arg {reduction}
  OneHot,   // a an int64 index; arg {classes}, arg_dtype: from a recorded backward
  Watch,    // a gradient's watched argument: the operand itself
  Marker,   // a place in the call (a gradient's scope, its backward pass): no value
};

// The tensors a step of this kind reads: 2 where its second operand (b) is one.
constexpr int arity(Kind k) {
  return k == Kind::Binary || k == Kind::Compare || k == Kind::MatMul || k == Kind::SoftmaxBackward ||
                 k == Kind::CrossEntropy
             ? 2
             : 1;
}

// What a marker step marks (compile/grad.cpp).
// A pass with respect to several watched tensors has its Backward marker (the result and
// the first tensor) followed by a BackwardInput marker for each of the others.
enum class Mark : uint8_t { GradEnter, GradExit, Backward, BackwardInput, BackwardStep };

// A step's operand: the result of an earlier step of the same call (step >= 0), or a
// tensor bound for this call (an argument, a closure's tensor, a value from an op that
// was not deferred), read when the step runs.
struct Operand {
  int32_t step = -1;
  Tensor input;
  static Operand of(int32_t s) { Operand o; o.step = s; return o; }
  static Operand bound(Tensor t) { Operand o; o.input = std::move(t); return o; }
};

struct Step {
  Kind kind = Kind::Unary;
  Op op = Op::Neg;
  Operand a, b;
  double s = 0;                  // the Lua number of the *Scalar kinds: a runtime parameter
  bool scalar_first = false;
  // Reductions: the dims (0-based, none: all), keepdim.
  int8_t ndims = 0;
  bool keepdim = false;
  int8_t dims[kMaxDims] = {};   // Reduce: 0-based dims; Transpose: two; (Un)squeeze: one
  ReduceOpts opts;
  Fn fn = Fn::Unary;            // Shape: which function
  Shape arg;                    // Shape: the shape asked for; Full: its shape; see Kind
  DType arg_dtype = DType::Float32;   // Cast, Full
  Mark mark = Mark::GradEnter;  // Marker
  bool alone = false;           // never fused (operands of another dtype than its own)
  // The result's, worked out when the step was deferred.
  DType dtype = DType::Float32;
  Shape shape;
  Device device;                // its operands' (a step's operands share a device)
};

// Works out a step's result dtype and shape from its operands' (a_dtype/a_shape, and
// b's for the two-operand kinds), as the eager front end would, raising the eager
// front end's error for operands it refuses. False: the step is not one the executor
// takes (an operand that is not a float32 or float64 tensor, mixed dtypes, a
// reduction it does not defer); nothing is deferred then, and the eager op runs.
bool infer(Step& s, DType a_dtype, const Shape& a_shape, DType b_dtype, const Shape& b_shape);

// Runs steps [begin, end) in order. results[i] receives step i's result when it is
// needed: want[i - begin] (wanted after this range), or read by a step of the range
// that is not fused with it. Operands that are earlier steps' results are read from
// results. Pointwise steps of one float dtype and one shape run fused, a chunk of
// elements at a time through all of them (a fused program, tensor/fused.h), and a sum,
// mean, amax or amin of all the elements of one of them, right after them, is folded as
// the chunks are made.
//
// `cache`, when given, keeps what execute works out from the steps alone for a later
// range of the same steps (Note [Schedules] in plan.cpp): a compiled trace's.
struct Schedule;
struct Schedules {
  std::vector<std::unique_ptr<Schedule>> at;   // by the step a range begins at
  Schedules();
  ~Schedules();
  Schedules(Schedules&&) noexcept;
  Schedules& operator=(Schedules&&) noexcept;
};
void execute(const std::vector<Step>& steps, size_t begin, size_t end, std::vector<Tensor>& results,
             const std::vector<uint8_t>& want, Schedules* cache = nullptr);

// How many steps of [begin, end) the last execute() ran in fused groups, and how many
// groups: for dl.compile.explain and the tests.
struct ExecStats {
  int64_t fused_steps = 0, groups = 0, single_steps = 0, elided = 0;
  int64_t unlowered = 0;   // groups off the host too large for one fused program
};
ExecStats& exec_stats();

// How groups on the host run (Note [Host groups] in plan.cpp): Auto, the default, runs
// a group as a fused program (tensor/fused.h, its chunks in registers, a trailing
// reduction folded in it), and as blocks when it does not fit in one. The tests force
// either way to compare them: Programs lowers every group as groups on a CUDA device are
// (no reduction folded; a group too large for one program runs a step at a time there);
// Blocks runs every group a block at a time.
enum class HostGroups : uint8_t { Auto, Programs, Blocks };
void set_host_groups(HostGroups how);

}  // namespace dl::compile
