// The differentiable front of the engine: every op of tensor/ops.h, recorded on the
// tape when a gradient is being taken, plus the gradient API used by the bindings.
//
//   dl::ag::GradScope scope;                      // a gradient is being taken
//   dl::Tensor x = dl::ag::watch(dl::full({}, 3.0, dl::DType::Float64));
//   dl::Tensor y = dl::ag::binary(dl::Op::Mul, x, x);
//   dl::Tensor g = dl::ag::grad({y}, {}, {x}, /*create_graph=*/false)[0];   // 6
//
// Recording happens only inside a GradScope (dl.grad, GradientTape.record ...) and
// only for ops with an input that requires a gradient: when no gradient is being
// taken nothing is recorded and these functions cost one branch over tensor/ops.h.
// The derivative formulas (the derivative<Op::...> specialisations of
// autograd/pointwise.cpp, whose DL_UNARY_GRAD and DL_BINARY_DERIVATIVES rows hold the
// unary and binary ops', and of autograd/inplace.cpp, linalg.cpp, nn.cpp, reduce.cpp and
// shape.cpp) are written with these same functions, so gradients of gradients need no
// special case (docs/design.md, "Derivatives are recorded ops").
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "tensor/ops.h"

namespace dl::ag {

// ---- grad mode ------------------------------------------------------------------
// Recording is on while at least one GradScope is open and no NoGradScope is.
bool is_recording();
class GradScope {
 public:
  GradScope();
  ~GradScope();
  // Movable, so that a binding can keep its open scopes in a vector.
  GradScope(GradScope&& o) noexcept : open_(o.open_) { o.open_ = false; }
  GradScope& operator=(GradScope&&) = delete;
  GradScope(const GradScope&) = delete;
  GradScope& operator=(const GradScope&) = delete;

 private:
  bool open_ = true;
};
class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();
  NoGradScope(const NoGradScope&) = delete;
  NoGradScope& operator=(const NoGradScope&) = delete;

 private:
  bool prev_;
};
// Recording switched back on inside a NoGradScope, as torch.enable_grad: a gradient
// taken inside dl.no_grad (the bindings' user-level scopes open one) is taken.
class EnableGradScope {
 public:
  EnableGradScope();
  ~EnableGradScope();
  EnableGradScope(const EnableGradScope&) = delete;
  EnableGradScope& operator=(const EnableGradScope&) = delete;

 private:
  bool prev_;
};

// ---- what gradients are taken with respect to ---------------------------------------
// A new tensor sharing x's storage whose gradient can be asked for (a fresh node each
// call: an inner gradient never confuses its argument with an outer one's). If x
// itself is being differentiated by an enclosing gradient, the result stays
// connected to it.
Tensor watch(const Tensor& x);
// Makes x itself differentiable (a leaf), unless it already has a history
// (GradientTape.watch: later ops on the same tensor are recorded).
void watch_inplace(const Tensor& x);
// The tape that watched x in place is done recording: x is no longer held to the leaf
// rule (written in place while recorded: an error), though it stays differentiable.
void watch_done(const Tensor& x);
// True when ops on x are recorded right now.
bool requires_grad(const Tensor& x);
// x's values without its history (shares storage).
Tensor detach(const Tensor& x);
// Drops x's history in place: from now on x is a constant to every gradient (the
// bindings do this when the tape that recorded x is discarded).
void forget_history(const Tensor& x);

// Variables: trainable tensors with a stable identity. Recorded only while a
// GradScope is open; each use inside a VariableLog is logged once, in order.
void mark_variable(const Tensor& x);
bool is_variable(const Tensor& x);
// Logs x (if a Variable) as a recorded use would, no_grad included, for a caller that
// defers the op instead of recording it (dl.compile's symbolic gradient scopes). Only
// an op with a derivative records (and logs) its operands: has_derivative says which.
void note_variable_use(const Tensor& x);
bool has_derivative(Op op);
// Whether a collecting VariableLog is open on this thread (an implicit gradient
// collects the Variables it will differentiate; a probe only asks which were used).
bool logging_variables();
class VariableLog {
 public:
  explicit VariableLog(bool collects = true);
  ~VariableLog();
  const TensorList& used() const { return used_; }
  bool collects() const { return collects_; }
  void note(const Tensor& v);

 private:
  TensorList used_;
  std::vector<const void*> seen_;
  VariableLog* prev_;
  bool collects_;
  friend bool logging_variables();
};

// Gradients of sum(outputs[i] * grad_outputs[i]) with respect to `inputs` (tensors
// made by watch(), Variables, or anything recorded). grad_outputs may be empty
// (ones for one-element outputs). An input that the outputs do not depend on gets
// zeros. With create_graph the computation of the gradients is itself recorded.
// Custom (Lua) gradient nodes are not allowed here: use GraphTask.
TensorList grad(const TensorList& outputs, const TensorList& grad_outputs,
                const TensorList& inputs, bool create_graph, bool retain_graph = false);

// ---- the ops, recorded --------------------------------------------------------------
Tensor unary(Op op, const Tensor& x);
Tensor binary(Op op, const Tensor& a, const Tensor& b);
Tensor binary(Op op, const Tensor& a, Scalar s, bool scalar_first = false);
Tensor compare(Op op, const Tensor& a, const Tensor& b);                        // never recorded
Tensor compare(Op op, const Tensor& a, Scalar s, bool scalar_first = false);    // never recorded
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor cast(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, Device d);   // x itself when already there
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor reduce(Op op, const Tensor& x, const std::vector<int>& dims, bool keepdim,
              const ReduceOpts& opts = {});
std::pair<Tensor, Tensor> max_dim(const Tensor& x, int dim, bool keepdim);
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int dim, bool keepdim);
Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);
Tensor cumsum(const Tensor& x, int dim, bool reverse = false);
Tensor cumprod(const Tensor& x, int dim, bool reverse = false);
Tensor fft_c2c(const Tensor& x, bool inverse);
Tensor fft_r2c(const Tensor& x, int64_t weight);
Tensor fft_c2r(const Tensor& y, int64_t n, int64_t weight);
std::pair<Tensor, Tensor> sort(const Tensor& x, int dim, bool descending);
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int d0, int d1);
Tensor permute(const Tensor& x, const std::vector<int>& order);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t stop, int64_t step);
Tensor select(const Tensor& x, int dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, std::optional<int> dim);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor flatten(const Tensor& x, int start_dim = 0, int end_dim = -1);
Tensor cat(const TensorList& xs, int dim);
Tensor stack(const TensorList& xs, int dim);
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
Tensor gather(const Tensor& x, int dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src);
Tensor matmul(const Tensor& a, const Tensor& b);
// Decompositions and solves (autograd/linalg.cpp; the engine's forms in tensor/ops.h).
Tensor linalg_solve(const Tensor& a, const Tensor& b);
Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool unitriangular);
Tensor cholesky(const Tensor& a);
std::pair<Tensor, Tensor> qr(const Tensor& a, bool complete);
std::pair<Tensor, Tensor> eigh(const Tensor& a);
SvdResult svd(const Tensor& a, bool full_matrices);
std::pair<Tensor, Tensor> slogdet(const Tensor& a);
Tensor sum_to(const Tensor& x, const Shape& shape);

// In place. Writing into a tensor (or a view of one) that is part of a recorded
// computation rewrites its history so later gradients see the new values; writing
// into a tensor whose old value a recorded op still needs makes that op's backward
// fail with a clear error (version counters), never a silently wrong gradient.
void copy_(Tensor& dst, const Tensor& src);
void fill_(Tensor& dst, Scalar value);
void binary_(Op op, Tensor& a, const Tensor& b);
void binary_(Op op, Tensor& a, Scalar s);

}  // namespace dl::ag
