// The C ABI of dl.export's captures (declared in bindings/capi.h, "dl.export" section;
// the Lua side is scripts/dlua/export.lua, the engine side export/).
//
// A capture belongs to the thread that runs it: dl_export_begin sets its Capture as the
// thread's op observer (tensor/observe.h) and marks the thread as exporting, so that
// values keep their identity (value.h, maybe_exporting) and escapes to Lua are refused
// (check_no_escape). Finished captures are kept per thread, numbered from 0, for the Lua
// side to compare (dl_export_unify), name and save; dl_export_clear drops them.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/node.h"
#include "bindings/capi.h"
#include "bindings/guard.h"
#include "bindings/arenas.h"
#include "bindings/handles.h"
#include "bindings/value.h"
#include "export/capture.h"
#include "export/model.h"
#include "export/vmap.h"
#include "tensor/error.h"
#include "tensor/plugin.h"

using dl::ErrorKind;
using dl::fail;
using dl::bind::get;
using dl::bind::guard_status;
using dl::graph::Capture;

namespace dl::bind {

std::atomic<int> g_exports{0};

namespace {

struct Exporting {
  // The capture in progress, and inside it the loop graphs being captured (Note [Loops]
  // in export/capture.cpp): the innermost is observed.
  std::vector<std::unique_ptr<Capture>> stack;
  std::vector<std::unique_ptr<Capture>> loop_graphs;   // finished, for dl_export_loop
  bool paused = false;   // a loop runs eagerly: values may be read, results are marked
  std::unique_ptr<dl::graph::Marking> marking;
  std::unique_ptr<dl::Observing> observing;
  std::vector<std::unique_ptr<Capture>> done;
  std::string text;   // dl_export_graph's result
  const char* who = "export";   // the capture's user, for messages: "export" or "vmap"
  std::vector<std::string> looped;   // dl_vmap_run's ops without a batching rule
};
thread_local Exporting t_export;

Capture& active(const char* op) {
  if (t_export.stack.empty()) fail(ErrorKind::Value, op, ": no capture in progress");
  return *t_export.stack.back();
}

Capture& done(int k, const char* op) {
  if (k < 0 || size_t(k) >= t_export.done.size()) fail(ErrorKind::Value, op, ": no capture ", k);
  return *t_export.done[size_t(k)];
}

// A text made from a finished capture's graph, kept until the next such call.
const char* text_of(int capture, std::string (*make)(const dl::graph::Graph&)) noexcept {
  const char* r = nullptr;
  guard_status([&] {
    t_export.text = make(done(capture, "export").graph);
    r = t_export.text.c_str();
  });
  return r;
}

// The thread's ops are reported to c (null: to nobody).
void observe(Capture* c) {
  t_export.observing.reset();
  if (c) t_export.observing = std::make_unique<dl::Observing>(c);
}

void stop() noexcept {
  if (t_export.stack.empty()) return;
  t_export.observing.reset();
  t_export.marking.reset();
  t_export.stack.clear();
  t_export.loop_graphs.clear();
  t_export.paused = false;
  g_exports.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

bool exporting() noexcept { return !t_export.stack.empty() && !t_export.paused; }
bool capturing() noexcept { return !t_export.stack.empty(); }

void check_no_escape(const char* what) {
  if (!maybe_exporting()) return;
  if (std::string_view(t_export.who) == "vmap")
    fail(ErrorKind::Value, "vmap: ", what,
         " reads a tensor's value into Lua, which one function for every example cannot do; use "
         "dl.where for choices that depend on values");
  fail(ErrorKind::Value, "export: ", what,
       " reads a tensor's value into Lua, which a graph cannot hold; use dl.where or dl.cond for "
       "choices that depend on values, dl.while_loop for loops");
}

}  // namespace dl::bind

using namespace dl::bind;

extern "C" {

namespace {
int begin(const uint64_t* xs, const char* const* names, int n, const char* who) {
  return guard_status([&] {
    if (!t_export.stack.empty() && std::string_view(who) == "vmap")
      fail(ErrorKind::Value, "vmap: inside ", t_export.who == std::string_view("vmap") ? "another dl.vmap" : "dl.export",
           "'s function: a mapped function is captured, and captures do not nest (map over the outer dim "
           "with one dl.vmap, or call this one outside)");
    DL_CHECK(t_export.stack.empty(), who, ": a capture is already in progress on this thread");
    DL_CHECK(!dl::compile::current(), who, ": cannot capture from inside a compiled function");
    t_export.who = who;
    // An export computes on the cpu (its runner's); a vmap on its arguments' device.
    dl::Device device;
    if (std::string_view(who) == "vmap" && n > 0) device = get(xs[0], who).device();
    auto c = std::make_unique<Capture>(device);
    for (int i = 0; i < n; ++i) c->input(get(xs[i], who), names && names[i] ? names[i] : "");
    if (!c->error().empty()) fail(ErrorKind::Value, who, ": ", c->error());
    t_export.stack.push_back(std::move(c));
    observe(t_export.stack.back().get());
    g_exports.fetch_add(1, std::memory_order_relaxed);
  });
}
}  // namespace

int dl_export_begin(const uint64_t* xs, const char* const* names, int n) { return begin(xs, names, n, "export"); }

int dl_vmap_begin(const uint64_t* xs, int n) { return begin(xs, nullptr, n, "vmap"); }

int dl_export_output(uint64_t y) {
  return guard_status([&] {
    Capture& c = active("export");
    DL_CHECK(!t_export.paused && t_export.stack.size() == 1, "export: a loop's capture is still in progress");
    observe(nullptr);   // what the caller does with the results is not captured
    c.output(get(y, t_export.who));
  });
}

int dl_export_end(void) {
  int k = -1;
  guard_status([&] {
    active("export");
    DL_CHECK(t_export.stack.size() == 1 && !t_export.paused, "export: a loop's capture is still in progress");
    std::unique_ptr<Capture> cap = std::move(t_export.stack.back());
    stop();
    if (!cap->error().empty()) fail(ErrorKind::Value, t_export.who, ": ", cap->error());
    // A mapped function's results carry no gradient history: one that reads a tensor a
    // gradient is being taken with respect to (a weight it closes over; a Variable while
    // an implicit gradient collects them, unless frozen: implicit gradients leave those
    // out) would give that tensor a gradient of zero, silently.
    if (std::string_view(t_export.who) == "vmap" && dl::ag::is_recording())
      for (const dl::Tensor& t : cap->constant_sources()) {
        const bool variable = t.impl()->is_variable;
        if (variable && (!dl::ag::logging_variables() || t.impl()->frozen)) continue;
        DL_CHECK(!variable && !dl::ag::edge_of(t).valid(), "vmap: the mapped function reads a tensor that requires grad (",
                 variable ? "a Variable" : "a tensor it closes over", " of shape ", t.shape(),
                 ") while a gradient is being taken; the batched results carry no gradient history, so "
                 "differentiate inside the mapped function (dl.vmap(dl.grad(f)) with the weights as arguments), "
                 "not through it");
      }
    cap->prune();
    t_export.done.push_back(std::move(cap));
    k = int(t_export.done.size()) - 1;
  });
  return k;
}

void dl_export_abort(void) { stop(); }

int dl_export_active(void) { return exporting() ? 1 : 0; }

int dl_export_sub_begin(const uint64_t* xs, int n) {
  return guard_status([&] {
    Capture& parent = active("while_loop");
    DL_CHECK(!t_export.paused, "while_loop: a loop's graph inside a loop that runs eagerly");
    auto c = std::make_unique<Capture>(&parent);
    for (int i = 0; i < n; ++i) c->input(get(xs[i], "while_loop"), "");
    if (!c->error().empty()) fail(ErrorKind::Value, "export: ", c->error());
    t_export.stack.push_back(std::move(c));
    observe(t_export.stack.back().get());
  });
}

int dl_export_sub_output(uint64_t y) {
  return guard_status([&] {
    Capture& c = active("while_loop");
    DL_CHECK(t_export.stack.size() > 1, "while_loop: no loop graph is being captured");
    observe(nullptr);
    c.output(get(y, "while_loop"));
  });
}

int dl_export_sub_end(void) {
  return guard_status([&] {
    active("while_loop");
    DL_CHECK(t_export.stack.size() > 1, "while_loop: no loop graph is being captured");
    t_export.loop_graphs.push_back(std::move(t_export.stack.back()));
    t_export.stack.pop_back();
    observe(t_export.stack.back().get());
  });
}

int dl_export_pause(int pause) {
  return guard_status([&] {
    Capture& c = active("while_loop");
    t_export.paused = pause != 0;
    t_export.observing.reset();
    if (pause) {
      t_export.marking = std::make_unique<dl::graph::Marking>(c);
      t_export.observing = std::make_unique<dl::Observing>(t_export.marking.get());
    } else {
      t_export.marking.reset();
      observe(&c);
    }
  });
}

int dl_export_loop(const uint64_t* init, const uint64_t* final, int n) {
  return guard_status([&] {
    Capture& c = active("while_loop");
    DL_CHECK(t_export.loop_graphs.size() >= 2, "while_loop: its condition and body were not captured");
    std::unique_ptr<Capture> body = std::move(t_export.loop_graphs.back());
    t_export.loop_graphs.pop_back();
    std::unique_ptr<Capture> cond = std::move(t_export.loop_graphs.back());
    t_export.loop_graphs.pop_back();
    std::vector<dl::Tensor> a, b;
    for (int i = 0; i < n; ++i) {
      a.push_back(get(init[i], "while_loop"));
      b.push_back(get(final[i], "while_loop"));
    }
    c.loop(*cond, *body, a, b);
    if (!c.error().empty()) fail(ErrorKind::Value, "export: ", c.error());
  });
}

int dl_export_symbols(int capture, const char* const* names, int n) {
  return guard_status([&] {
    Capture& c = done(capture, "export");
    DL_CHECK(n >= 0 && size_t(n) <= dl::graph::kMaxSymbols, "export: at most ", dl::graph::kMaxSymbols,
             " symbolic dims");
    c.graph.symbols.assign(names, names + n);
  });
}

int dl_export_unify(int first, int second, int sym, const double* base, const double* at, int n) {
  return guard_status([&] {
    Capture& a = done(first, "export");
    const Capture& b = done(second, "export");
    DL_CHECK(sym < int(a.graph.symbols.size()) && n == int(a.graph.symbols.size()), "export: bad symbol");
    const std::vector<int64_t> base_v(base, base + n), at_v(at, at + n);
    const std::string e = dl::graph::unify(a, b, sym, base_v, at_v);
    if (!e.empty()) fail(ErrorKind::Value, "export: ", e);
  });
}

int dl_export_name(int capture, uint64_t x, const char* name) {
  return guard_status([&] { done(capture, "export").name(get(x, "export"), name ? name : ""); });
}

int dl_export_save(int capture, const char* path, const char* const* meta, int nmeta) {
  return guard_status([&] {
    const Capture& c = done(capture, "export");
    DL_CHECK(path && *path, "export: no path given");
    std::vector<std::pair<std::string, std::string>> extra;
    for (int i = 0; i + 1 < nmeta; i += 2) extra.emplace_back(meta[i], meta[i + 1]);
    dl::graph::save_model(path, c.graph, c.constants, extra);
  });
}

const char* dl_export_graph(int capture) { return text_of(capture, dl::graph::to_json); }

const char* dl_export_describe(int capture) { return text_of(capture, dl::graph::summary); }

void dl_export_clear(void) { t_export.done.clear(); }

int dl_vmap_run(int capture, const uint64_t* xs, const int* batched, int n, int64_t batch, uint64_t* out,
                int* out_batched, int nout) {
  int count = -1;
  guard_status([&] {
    const Capture& c = done(capture, "vmap");
    std::vector<dl::graph::BatchedValue> in;
    for (int i = 0; i < n; ++i) in.push_back({get(xs[i], "vmap"), batched[i] != 0});
    dl::graph::Batching run(c.graph, c.constants, batch);
    std::vector<dl::graph::BatchedValue> r = run.run(in);
    t_export.looped = run.looped();
    DL_CHECK(int(r.size()) <= nout, "vmap: ", r.size(), " results, room for ", nout);
    for (size_t k = 0; k < r.size(); ++k) {
      out[k] = handle_new(std::move(r[k].t));
      out_batched[k] = r[k].batched ? 1 : 0;
    }
    count = int(r.size());
  });
  return count;
}

const char* dl_vmap_looped(int k) {
  return k >= 0 && size_t(k) < t_export.looped.size() ? t_export.looped[size_t(k)].c_str() : nullptr;
}

// dl.export.onnx's converter lives in a plugin (export/onnx.cpp), loaded by the first
// conversion from beside the engine (or DLUA_ONNX_PLUGIN), so that only a program that
// converts loads protobuf.
int dl_export_onnx(const char* dlg, const char* onnx_path, int opset) {
  return guard_status([&] {
    using Convert = int (*)(const char*, const char*, int, char*, int);
    static std::once_flag once;
    static Convert convert = nullptr;
    static std::string why;
    std::call_once(once, [] {
      const char* env = std::getenv("DLUA_ONNX_PLUGIN");
      const std::string path = env && *env ? std::string(env) : dl::engine_dir() + "libdlua_onnx.so";
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* e = dlerror();
        why = "cannot load " + path + " (" + (e ? e : "unknown error") +
              "): this dlua was built without ONNX support (Debian's libonnx-dev and libprotobuf-dev)";
        return;
      }
      convert = reinterpret_cast<Convert>(dlsym(h, "dlua_onnx_convert"));
      if (!convert) why = path + " is not dlua's ONNX converter";
    });
    if (!convert) fail(ErrorKind::NotImplemented, "export.onnx: ", why);
    DL_CHECK(dlg && *dlg && onnx_path && *onnx_path, "export.onnx: no path given");
    char err[1024] = "";
    if (convert(dlg, onnx_path, opset, err, int(sizeof err)) != 0) fail(ErrorKind::Value, err);
  });
}

}  // extern "C"
