// The C ABI of autograd (declared in bindings/capi.h, "autograd" section): grad mode,
// watched tensors, variables, the resumable backward pass that lets the Lua side run
// custom gradients (docs/design.md, "C++ never calls Lua"), and recording custom-gradient nodes.
#include <memory>
#include <mutex>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/engine.h"
#include "bindings/capi.h"
#include "bindings/compile.h"
#include "compile/grad.h"
#include "bindings/guard.h"
#include "bindings/handles.h"
#include "bindings/arenas.h"

using dl::Tensor;
using dl::TensorList;
namespace ag = dl::ag;
using namespace dl::bind;

namespace {

// Scopes opened from Lua; the Lua side pairs every enter with an exit (also on error).
thread_local std::vector<ag::GradScope> t_grad;
thread_local std::vector<std::unique_ptr<ag::NoGradScope>> t_nograd;
// dl.enable_grad's, and each gradient's own: a gradient taken inside dl.no_grad is taken
// (as functorch's transforms and TF's tapes do), not silently zero.
thread_local std::vector<std::unique_ptr<ag::EnableGradScope>> t_enable;
thread_local std::vector<std::unique_ptr<ag::VariableLog>> t_logs;

// Backward passes in flight, by id (never a pointer handed to Lua).
thread_local std::vector<std::unique_ptr<ag::GraphTask>> t_tasks;

ag::GraphTask& task_of(int id, const char* op) {
  if (id < 1 || id > int(t_tasks.size()) || !t_tasks[size_t(id - 1)])
    dl::fail(dl::ErrorKind::Value, op, ": invalid backward task");
  return *t_tasks[size_t(id - 1)];
}

// A task's id for the calls that drive it.
int add_task(std::unique_ptr<ag::GraphTask> task) {
  for (size_t k = 0; k < t_tasks.size(); ++k) {
    if (!t_tasks[k]) {
      t_tasks[k] = std::move(task);
      return int(k) + 1;
    }
  }
  t_tasks.push_back(std::move(task));
  return int(t_tasks.size());
}

TensorList tensors(const uint64_t* ids, int n, const char* op, bool allow_zero = false) {
  TensorList out;
  for (int i = 0; i < n; ++i) {
    if (allow_zero && ids[i] == 0) out.emplace_back();
    else out.push_back(get(ids[i], op));
  }
  return out;
}

// Custom (Lua) gradient functions whose nodes have died: the Lua side drains this list
// to drop its references (the engine never calls into Lua to say so).
std::mutex g_dead_mu;
std::vector<double> g_dead_refs;

struct CustomNode : ag::Node {
  ~CustomNode() override {
    std::lock_guard<std::mutex> lock(g_dead_mu);
    g_dead_refs.push_back(double(custom_ref));
  }
};

ag::Grads no_backward(ag::Node&, const TensorList&) { return {}; }

// Note [Gradient-ready hook]
// dl.dist reduces gradients over the ranks while the backward pass still runs, as
// DDP's autograd hooks do: its plugin arms a dl_grad_hook, and the next pass on the
// thread that records nothing takes it. A pass made inside the function being
// differentiated records (the outer scope is open), so it never takes the hook meant
// for the outer one. The engine reports each input's final gradient (Note [Gradient
// ready] in autograd/engine.cpp); hook_ready hands the hook memory it may write while
// the pass goes on: the gradient's own when it is contiguous and nothing else refers to
// it (no other tensor, view or node still to run would see the write), else a private
// copy, which becomes the result. end() runs before the results reach Lua, so they hold
// what the hook wrote. C++ never calls Lua (docs/design.md, "C++ never calls Lua"): the hook is C.
struct HookRun {
  dl_grad_hook h{};
  bool armed = false;                    // waiting for a pass
  bool taken = false;                    // a pass took it (begin accepted)
  const ag::GraphTask* task = nullptr;   // that pass, until end
};
thread_local HookRun t_hook;

void hook_ready(void* ctx, size_t k, Tensor& g) {
  const HookRun& run = *static_cast<HookRun*>(ctx);
  const bool own = g.is_contiguous() && g.impl_ref()->use_count() == 1 && g.storage().use_count() == 1;
  if (!own) g = dl::clone(g);
  run.h.ready(run.h.ctx, int(k), g.raw_data(), g.numel(), int(g.dtype()));
}

// Gives the armed hook to a pass that records nothing.
void hook_attach(ag::GraphTask& task, const TensorList& inputs, bool create_graph) {
  if (!t_hook.armed || create_graph) return;
  t_hook.armed = false;
  std::vector<int64_t> numels;
  std::vector<int> dtypes, host;
  for (const Tensor& x : inputs) {
    numels.push_back(x.numel());
    dtypes.push_back(int(x.dtype()));
    host.push_back(x.device().is_cpu() ? 1 : 0);
  }
  if (t_hook.h.begin(t_hook.h.ctx, int(inputs.size()), numels.data(), dtypes.data(), host.data()) != 0) return;
  t_hook.taken = true;
  t_hook.task = &task;
  task.on_ready(hook_ready, &t_hook);
}

// Ends the hook's work on `task` (ok: the pass finished): 0, or -1 with the error set.
int hook_end(const ag::GraphTask* task, bool ok) {
  if (!task || t_hook.task != task) return 0;
  t_hook.task = nullptr;
  if (t_hook.h.end(t_hook.h.ctx, ok ? 1 : 0) >= 0 || !ok) return 0;
  return guard_status([] { dl::fail(dl::ErrorKind::Value, "grad: the gradient-ready hook failed"); });
}

}  // namespace

namespace dl::bind {
void grad_scope_open() {
  t_grad.reserve(t_grad.size() + 1);
  t_enable.reserve(t_enable.size() + 1);
  arena_open();
  t_enable.push_back(std::make_unique<ag::EnableGradScope>());
  t_grad.emplace_back();
}
void grad_scope_close() {
  DL_CHECK(!t_grad.empty() && !t_enable.empty(), "grad: unbalanced scope exit");
  t_grad.pop_back();
  t_enable.pop_back();
  arena_close();
}
}  // namespace dl::bind

namespace dl::bind {
namespace {
// The end of a pass that ran without an error: 0 with its results taken by `take`, or 2
// with the task left for the Lua side to drive (the graph holds a custom gradient);
// -1 on error.
template <typename Take>
int end_pass(std::unique_ptr<ag::GraphTask> t, bool done, int* task, Take&& take) {
  if (done) {
    if (hook_end(t.get(), true) != 0) return -1;
    take(*t);
    return 0;
  }
  int id = -1;
  if (guard_status_nosync([&] { id = add_task(std::move(t)); }) != 0) return -1;
  *task = id;
  return 2;
}
}  // namespace

int backward_one(const Tensor& y, const Tensor& x, Tensor* grad, int* task) {
  // The argument lists are kept for the next call (the task copies what it keeps).
  thread_local TensorList o(1), i(1), none;
  std::unique_ptr<ag::GraphTask> t;
  bool done = false;
  if (guard_status_nosync([&] {
        o[0] = y;
        i[0] = x;
        t = std::make_unique<ag::GraphTask>(o, none, i, ag::is_recording(), false);
        hook_attach(*t, i, ag::is_recording());
        o[0] = i[0] = Tensor();
        done = t->run();
      }) != 0) {
    o[0] = i[0] = Tensor();
    hook_end(t.get(), false);
    return -1;
  }
  return end_pass(std::move(t), done, task, [&](ag::GraphTask& g) { *grad = g.take_result(0); });
}

bool grad_hook_armed() { return t_hook.armed; }

int backward_many(const Tensor& y, const TensorList& xs, TensorList* grads, int* task) {
  std::unique_ptr<ag::GraphTask> t;
  bool done = false;
  if (guard_status_nosync([&] {
        t = std::make_unique<ag::GraphTask>(TensorList{y}, TensorList{}, xs, ag::is_recording(), false);
        hook_attach(*t, xs, ag::is_recording());
        done = t->run();
      }) != 0) {
    hook_end(t.get(), false);
    return -1;
  }
  return end_pass(std::move(t), done, task, [&](ag::GraphTask& g) { *grads = g.take_results(); });
}
}  // namespace dl::bind

extern "C" {


int dl_grad_enter(void) {
  if (dl::compile::current()) {
    const int st = compiled_grad_scope(true);
    if (st != 1) return st;
  }
  return guard_status_nosync([] { grad_scope_open(); });
}
int dl_grad_exit(void) {
  if (dl::compile::current()) {
    const int st = compiled_grad_scope(false);
    if (st != 1) return st;
  }
  return guard_status_nosync([] { grad_scope_close(); });
}
void dl_arena_done(void) {
  if (dl::compile::Call* c = dl::compile::current())
    if (!dl::compile::scope_done(*c)) return;
  arena_done();
}
double dl_arena_hold(void) { return double(arena_hold()); }
void dl_arena_free(double serial) {
  if (serial >= 1 && serial < 9007199254740992.0) arena_free(uint64_t(serial));
}
double dl_arena_values(void) { return double(arena_values()); }
int dl_no_grad_enter(void) {
  return guard_status([] { t_nograd.push_back(std::make_unique<ag::NoGradScope>()); });
}
int dl_no_grad_exit(void) {
  return guard_status([] {
    DL_CHECK(!t_nograd.empty(), "no_grad: unbalanced scope exit");
    t_nograd.pop_back();
  });
}
int dl_enable_grad_enter(void) {
  return guard_status([] { t_enable.push_back(std::make_unique<ag::EnableGradScope>()); });
}
int dl_enable_grad_exit(void) {
  return guard_status([] {
    DL_CHECK(!t_enable.empty(), "enable_grad: unbalanced scope exit");
    t_enable.pop_back();
  });
}
int dl_is_recording(void) {
  if (dl::compile::Call* c = dl::compile::current())
    if (dl::compile::scope_recording(*c)) return 1;
  return ag::is_recording() ? 1 : 0;
}

uint64_t dl_watch(uint64_t x) { return guard_handle([&] { return ag::watch(get(x, "watch")); }); }
int dl_watch_value(const struct dl_tensor* x, struct dl_tensor* out) {
  if (dl::compile::current()) {
    const int st = defer_watch(x, out);
    if (st != -2) return st;
  }
  // A handle's memory is the script's (a Variable, a promoted value), and so is a value
  // kept in an arena (it can be promoted and written to): their alias stays a handle, so
  // that an inline copy never stands for memory a script can write to.
  const bool shared = x->id != 0 || x->inl_arena != 0;
  int st = -1;
  guard_status([&] {
    Tensor w = ag::watch(value_of(x, "watch"));
    st = shared ? deliver_handle(std::move(w), out) : deliver(std::move(w), out);
  });
  return st;
}
uint64_t dl_detach(uint64_t x) { return guard_handle([&] { return ag::detach(get(x, "detach")); }); }
int dl_requires_grad(uint64_t x) {
  int r = -1;
  guard_status([&] { r = ag::requires_grad(get(x, "requires_grad")) ? 1 : 0; });
  return r;
}
int dl_mark_variable(uint64_t x) { return guard_status([&] { ag::mark_variable(get(x, "Variable")); }); }
int dl_set_frozen(uint64_t x, int frozen) {
  return guard_status([&] { get(x, "requires_grad_").impl()->frozen = frozen != 0; });
}
int dl_is_variable(uint64_t x) {
  int r = -1;
  guard_status_nosync([&] { r = ag::is_variable(get(x, "is_variable")) ? 1 : 0; });
  return r;
}

// The log of Variables used reads no values: a compiled call's deferred steps go on
// (a symbolic scope notes its Variables as it defers their ops, capi_compile.cpp).
int dl_varlog_push(void) {
  return guard_status_nosync([] { t_logs.push_back(std::make_unique<ag::VariableLog>()); });
}
int dl_varlog_probe(void) {
  return guard_status_nosync([] { t_logs.push_back(std::make_unique<ag::VariableLog>(false)); });
}
int dl_varlog_count(void) { return t_logs.empty() ? 0 : int(t_logs.back()->used().size()); }
int dl_varlog_depth(void) { return ag::logging_variables() ? 1 : 0; }
uint64_t dl_varlog_get(int i) {
  return guard_handle_nosync([&] {
    DL_CHECK(!t_logs.empty() && i >= 1 && i <= int(t_logs.back()->used().size()),
             "implicit_grad: variable ", i, " out of range");
    return t_logs.back()->used()[size_t(i - 1)];
  });
}
int dl_varlog_pop(void) {
  return guard_status_nosync([] {
    DL_CHECK(!t_logs.empty(), "implicit_grad: unbalanced variable log");
    t_logs.pop_back();
  });
}

int dl_backward_begin(const uint64_t* outs, int nout, const uint64_t* grad_outs,
                      const uint64_t* ins, int nin, int create_graph, int retain_graph) {
  int id = -1;
  guard_status([&] {
    TensorList o = tensors(outs, nout, "grad");
    TensorList g = grad_outs ? tensors(grad_outs, nout, "grad", true) : TensorList{};
    TensorList i = tensors(ins, nin, "grad");
    auto t = std::make_unique<ag::GraphTask>(o, g, i, create_graph != 0, retain_graph != 0);
    hook_attach(*t, i, create_graph != 0);
    id = add_task(std::move(t));
  });
  return id;
}

int dl_backward_run(int task) {
  int r = -1;
  const ag::GraphTask* t = nullptr;
  guard_status([&] {
    t = &task_of(task, "grad");
    r = task_of(task, "grad").run() ? 1 : 0;
  });
  if (r != 0 && hook_end(t, r == 1) != 0) return -1;
  return r;
}

double dl_backward_custom_ref(int task) {
  double r = 0;
  guard_status([&] {
    ag::Node* n = task_of(task, "grad").custom_node();
    DL_CHECK(n != nullptr, "grad: no custom gradient is pending");
    r = double(n->custom_ref);
  });
  return r;
}

int dl_backward_pending(int task, uint64_t* out, int n) {
  return guard_status([&] {
    const TensorList& p = task_of(task, "grad").pending_grads();
    DL_CHECK(int(p.size()) <= n, "grad: ", p.size(), " pending gradients, room for ", n);
    for (size_t k = 0; k < p.size(); ++k) out[k] = p[k].defined() ? handle_new(p[k]) : 0;
    for (int k = int(p.size()); k < n; ++k) out[k] = 0;
  });
}

int dl_backward_supply(int task, const uint64_t* grads, int n) {
  return guard_status([&] { task_of(task, "custom_gradient").supply(tensors(grads, n, "custom_gradient", true)); });
}

int dl_backward_results(int task, uint64_t* out, int n) {
  return guard_status([&] {
    TensorList r = task_of(task, "grad").take_results();
    DL_CHECK(int(r.size()) == n, "grad: ", r.size(), " results, room for ", n);
    for (size_t k = 0; k < r.size(); ++k) out[k] = handle_new(r[k]);
  });
}

void dl_backward_free(int task) {
  if (task < 1 || task > int(t_tasks.size())) return;
  hook_end(t_tasks[size_t(task - 1)].get(), false);   // (a pass that did not finish)
  t_tasks[size_t(task - 1)].reset();
}

void dl_grad_hook_arm(const struct dl_grad_hook* h) {
  t_hook.h = *h;
  t_hook.armed = true;
  t_hook.taken = false;
}

int dl_grad_hook_disarm(void) {
  t_hook.armed = false;
  const int taken = t_hook.taken ? 1 : 0;
  t_hook.taken = false;
  return taken;
}

// The four calls above in one: the Lua driver is interpreted (its pcalls keep it so),
// where each FFI call costs a sizeable part of a second derivative of x^3 (bench/, `d2`).
int dl_backward_once(const uint64_t* outs, int nout, const uint64_t* grad_outs, const uint64_t* ins,
                     int nin, int retain_graph, uint64_t* res, int* task) {
  *task = 0;
  const int id = dl_backward_begin(outs, nout, grad_outs, ins, nin, ag::is_recording() ? 1 : 0, retain_graph);
  if (id < 0) return -1;
  const int st = dl_backward_run(id);
  if (st == 0) {
    *task = id;
    return 0;
  }
  const int r = st < 0 ? -1 : dl_backward_results(id, res, nin);
  dl_backward_free(id);
  return r < 0 ? -1 : 1;
}


int dl_backward_one(const struct dl_tensor* y, const struct dl_tensor* x, struct dl_tensor* out,
                    int* task) {
  *task = 0;
  if (dl::compile::current()) {
    const int st = compiled_backward_one(y, x, out, task);
    if (st != -2) return st;
  }
  Tensor ty, tx, g;
  if (guard_status([&] {
        ty = value_of(y, "grad");
        tx = value_of(x, "grad");
      }) != 0)
    return -1;
  const int st = backward_one(ty, tx, &g, task);
  if (st != 0) return st;
  return guard_value(out, [&] { return std::move(g); });
}

int dl_backward_many(const struct dl_tensor* y, const struct dl_tensor* const* xs, int n,
                     struct dl_tensor* const* outs, int* task) {
  *task = 0;
  if (!dl::compile::current()) return -2;
  return compiled_backward(y, xs, n, outs, task);
}

// Connects fresh outputs `outs` (replaced in place by new handles) to `ins` through a
// node whose backward is the Lua function registered as `ref`.
int dl_custom_record(const uint64_t* ins, int nin, uint64_t* outs, int nout, double ref) {
  return guard_status([&] {
    TensorList in = tensors(ins, nin, "custom_gradient");
    TensorList out = tensors(outs, nout, "custom_gradient");
    if (!ag::is_recording()) return;
    bool any = false;
    for (const Tensor& t : in) any = any || ag::edge_of(t).valid();
    if (!any) return;
    dl::Ref<ag::Node> n(new CustomNode());
    n->name = "custom_gradient";
    n->backward = no_backward;  // never called: the engine stops at custom nodes
    n->custom_ref = int64_t(ref);
    n->num_outputs = uint32_t(nout);
    for (const Tensor& t : in) {
      n->next.push_back(ag::edge_of(t));
      n->inputs.push_back(ag::InputMeta{t.shape(), t.dtype()});
    }
    for (int k = 0; k < nout; ++k) {
      Tensor y = ag::detach(out[size_t(k)]);
      ag::set_history(y, n, uint32_t(k));
      outs[k] = handle_new(y);
    }
  });
}

int dl_watch_inplace(uint64_t x) { return guard_status([&] { ag::watch_inplace(get(x, "watch")); }); }
int dl_watch_done(uint64_t x) { return guard_status([&] { ag::watch_done(get(x, "watch")); }); }

double dl_tensor_key(uint64_t x) {
  double k = 0;
  guard_status_nosync([&] { k = double(reinterpret_cast<uintptr_t>(get(x, "tensor").impl())); });
  return k;
}

int dl_dead_custom_refs(double* out, int n) {
  std::lock_guard<std::mutex> lock(g_dead_mu);
  int k = 0;
  while (k < n && !g_dead_refs.empty()) {
    out[k++] = g_dead_refs.back();
    g_dead_refs.pop_back();
  }
  return k;
}

}  // extern "C"
