// Gradients inside compiled calls: the scope of dl.grad as steps, and its backward pass
// recorded once and replayed as steps (Note [Compiled gradients] in grad.cpp).
//
//   if (compile::Call* c = compile::current())
//     if (!compile::scope_enter(*c)) return 0;   // compiled: autograd's scope stays shut
//   ... open autograd's scope ...
#pragma once
#include <string>
#include <vector>

#include "compile/trace.h"

namespace dl::compile {

// What the bindings do to open and close autograd's scope (their GradScope and tape),
// for a scope that must become autograd's after all (materialize).
struct ScopeHooks {
  void (*enter)() = nullptr;
  void (*exit)() = nullptr;
};
void set_scope_hooks(const ScopeHooks& h);

// dl_grad_enter, dl_grad_exit and dl_arena_done of a compiled call: true when the
// bindings must do what they do outside one (open, close, discard autograd's scope).
bool scope_enter(Call& c);
bool scope_exit(Call& c);
bool scope_done(Call& c);
// What dl_is_recording answers in a compiled scope.
bool scope_recording(const Call& c);
// Runs the call's last step at once with autograd (a Capture or Real scope's op).
void run_now(Call& c);
// Turns a Symbolic scope into a Real one: autograd's scope is opened and the scope's
// steps so far run again, recorded, so that what follows can use their history.
void materialize(Call& c);
// Something a compiled scope cannot replay happened inside it (an entry point that is
// not a deferred op): a Symbolic scope materializes, a Capture one will not be compiled.
void scope_event(Call& c);

// Autograd's backward pass of a Capture scope, recorded as it runs (an observer of the
// engine's ops): the plan, if every op was one it can replay and the gradient is one of
// their results.
class BackwardCapture : public Observer {
 public:
  explicit BackwardCapture(Call& c);
  ~BackwardCapture() override;
  void seen(const Observed& op) override;
  bool takes_fused() const override { return true; }   // a plan runs them again
  // c's backward marker is at `marker`; grads: one per watched tensor, in their order;
  // targets: the tensors the pass was taken with respect to (a Variable, or undefined
  // for a watched step).
  bool finish(const Call& c, size_t marker, const TensorList& grads, const TensorList& targets,
              BackwardPlan* plan, std::string* why);

 private:
  struct Known;
  bool find(const Tensor& t, Ref* r);
  void remember(const Tensor& t, Ref r);
  void fail(const char* why);
  std::vector<Known> known_;
  std::vector<Tensor> hold_;
  BackwardPlan plan_;
  const char* why_ = nullptr;
  Observing on_;
};

// A Symbolic scope's backward pass, at its marker step (and the input markers after
// it), with respect to `targets` (as finish's): the plan's steps pushed after them; the
// gradients' steps in `grads`, or false when the plan does not apply to this call
// (tensors it saw as one are not one now, a Variable is not where it was): nothing is
// pushed then.
bool replay_backward(Call& c, size_t marker, const TensorList& targets, std::vector<int64_t>* grads);
// The trace's plan for the backward marker at `marker` (null: autograd runs it).
const BackwardPlan* plan_at(const Call& c, size_t marker);

}  // namespace dl::compile
