// The deferred ops of dl.compile, as the family entry points of capi.cpp call them
// (capi_compile.cpp, Note [Proxies]).
//
//   bool at_once = runs_at_once(x);
//   if (!at_once && compile::current()) {
//     int st = defer_unary(op, x, out);          // 2 or 3: a proxy in *out; -1: error
//     if (answered(st, &at_once)) return st;     // -2: not deferred, run the eager op;
//   }                                            // kRunAtOnce: the same, at once
#pragma once
#include <cstdint>
#include <optional>

#include "bindings/capi.h"
#include "tensor/tensor.h"

namespace dl::bind {

// Note [Inline operands run at once]
// An op whose operands are all small values held inline (Note [Small tensors inline]
// in value.cpp) runs eagerly inside a compiled call too: its fast path costs less than
// matching it (bench/ `chainfwdc16` against `chainfwdc256`;
// docs/performance-compile.md), and its result is again such a value, so tiny-tensor
// code pays almost nothing for being compiled. An op that reads a proxy is always deferred. The entry
// points ask this first, before they look the call up: a few loads, where going into
// the defer_* functions to be told cost about 59 instructions an op (callgrind, bench/
// `chainfwd 16 c`).
// b: null for an op of one operand.
inline bool runs_at_once(const dl_tensor* a, const dl_tensor* b = nullptr) {
  auto held_inline = [](const dl_tensor* t) { return t->id == 0 && t->inl_dtype < dl::kNumDTypes; };
  return held_inline(a) && (!b || held_inline(b));
}

// Note [Small handles run at once]
// The same holds for an op whose operands are handles of tensors that small on the host
// (at most kInlineBytes of elements: a view of a row, a tensor made before the call),
// or such handles and inline values, while no gradient's scope of the call is open and
// nothing is recorded: the op runs as eager execution runs it (its fast path, Note [The
// paths of a + b]) and its result, small too unless broadcasting made it larger, is held
// inline, so the ops after it run at once as well. Eager's answer is the same, because no deferred step writes a tensor held by a
// handle (deferred steps make new tensors; an in-place op runs the deferred steps
// first), so the handle holds what eager execution would read. Where a gradient's scope
// is open, the op is deferred as any other: the scope must see every op on the tensors
// it differentiates (a Variable's use included), and it sees deferred ones only. The
// defer_* functions decide this (a handle lookup per operand held by one) and answer
// kRunAtOnce. A view of such a handle (defer_view) runs at once too, but only while
// the call has deferred nothing and has no gradient's scope, since the eager view's
// entry point runs the deferred steps first. Measured with bench/ `replay16`
// (docs/performance-compile.md).
constexpr int kRunAtOnce = -4;

// Whether an entry point returns the answer st of a defer_* function (a proxy written,
// or an error); otherwise it runs the eager op, without the call's deferred steps when
// st is kRunAtOnce (sets *at_once).
inline bool answered(int st, bool* at_once) {
  if (st == kRunAtOnce) {
    *at_once = true;
    return false;
  }
  return st != -2;
}

// The deferred op's result in *out when the thread's compiled call takes it (see the
// top of this file); the operands are not all held inline (runs_at_once).
int defer_unary(int op, const dl_tensor* x, dl_tensor* out);
int defer_binary(int op, const dl_tensor* a, const dl_tensor* b, dl_tensor* out);
int defer_binary_scalar(int op, const dl_tensor* a, double s, int first, dl_tensor* out);
int defer_compare(int op, const dl_tensor* a, const dl_tensor* b, dl_tensor* out);
int defer_compare_scalar(int op, const dl_tensor* a, double s, int first, dl_tensor* out);
int defer_matmul(const dl_tensor* a, const dl_tensor* b, dl_tensor* out);
// which: 0 reshape, 1 view (shape, nshape), 2 transpose (d1, d2), 3 squeeze (d1; 0: every
// dim of size 1), 4 unsqueeze (d1); dims as Lua gives them. A view of a promised result
// or of a tensor held by a handle is deferred; of a value held inline, not.
int defer_view(int which, const dl_tensor* x, const int64_t* shape, int nshape, int d1, int d2, dl_tensor* out);
// op: Op::Softmax or Op::LogSoftmax; dim as Lua gives it (1-based, or negative).
int defer_softmax(int op, const dl_tensor* x, int dim, dl_tensor* out);
int defer_reduce(int op, const dl_tensor* x, const int32_t* dims, int ndims, int keepdim,
                 dl_tensor* out);
int defer_watch(const dl_tensor* x, dl_tensor* out);
// logits (a proxy or a tensor) and 1-based labels held by a handle or inline (labels
// made inside the call: not deferred); reduction 0 none, 1 mean, 2 sum; no ignore_index.
int defer_cross_entropy(const dl_tensor* logits, const dl_tensor* target, int reduction, dl_tensor* out);
// cross_entropy's checks of its labels against logits of this shape (1-based, in range)
// and their 0-based copy; *ignore set from has_ignore (0-based) (capi_nn.cpp).
Tensor cross_entropy_labels(const Shape& logits, const Tensor& labels, int reduction, int has_ignore,
                            int64_t ignore_index, std::optional<int64_t>* ignore);
// dl_grad_enter (enter) and dl_grad_exit in a compiled call: 0 done, 1 the caller opens
// (closes) autograd's scope as outside one, -1 error (compile/grad.h).
int compiled_grad_scope(bool enter);
// dl_backward_one in a compiled call: as dl_backward_one, or -2 (not the call's: the
// caller runs it as outside one).
int compiled_backward_one(const dl_tensor* y, const dl_tensor* x, dl_tensor* out, int* task);
// The same for n tensors (dl_backward_many): each watched in the call's scope, or a
// Variable (the implicit gradients).
int compiled_backward(const dl_tensor* y, const dl_tensor* const* xs, int n, dl_tensor* const* outs, int* task);

// What dl_grad_enter / dl_grad_exit do outside a compiled call, and dl_backward_one's
// pass: 0 with the gradient in *grad, 2 with a custom gradient's task in *task, -1 error
// (capi_autograd.cpp).
void grad_scope_open();
void grad_scope_close();
int backward_one(const Tensor& y, const Tensor& x, Tensor* grad, int* task);
int backward_many(const Tensor& y, const TensorList& xs, TensorList* grads, int* task);
// Whether a gradient-ready hook (dl_grad_hook_arm, dl.dist's reducer) waits for the next
// pass: such a pass runs as autograd's, hook and all, never from a compiled plan.
bool grad_hook_armed();

// Fills *out with a proxy's metadata, known without running anything; false for
// anything that is not a proxy of the thread's call.
bool proxy_meta(const dl_tensor* x, dl_meta* out);

}  // namespace dl::bind
