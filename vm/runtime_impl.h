// The inside of dlua::Runtime: the lua_State, its limits, and the helpers the embedding
// APIs (api.cpp, capi.cpp) and the `dlua` program (repl/) share.
//
// Note [Stopping a script]
// A time limit, interrupt() and Ctrl-C all stop Lua code the same way, following
// docs/design.md, "The time limit": a count hook that, once it fires, stays armed at a count
// of 1 and raises the stop message on every instruction (sticky), so pcall, xpcall and
// coroutine.resume inside the script cannot swallow it; the host disarms it when the
// outermost call returns. A hook is ignored by JIT-compiled code, so runtimes with a
// time limit or a sandbox run with the JIT engine off, and the REPL marks its chunks
// NOJIT (hot library code stays compiled). Long C functions cannot be preempted: the
// sandbox replaces string.find/match/gmatch/gsub by a matcher that polls the same
// stop check (vm/strmatch.cpp); tensor kernels are not interrupted.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlua/dlua.hpp"
#include "vm/embedded.h"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

namespace dlua {

enum class StopReason : int { None = 0, Timeout, Interrupt };

struct Runtime::Impl {
  explicit Impl(const Options& o);
  ~Impl();

  Options opts;
  lua_State* L = nullptr;
  uint64_t generation = 0;

  // Lua heap accounting (the allocator's user data is this Impl).
  size_t heap_used = 0;
  size_t heap_limit = 0;  // 0: none
  bool heap_refused = false;
  bool in_msgh = false;   // the message handler may go a little over the cap

  // Stopping (Note [Stopping a script]).
  std::atomic<bool> interrupt_flag{false};
  std::atomic<int> stop{0};  // StopReason
  bool periodic_hook = false;       // a count hook is always on
  bool has_deadline = false;
  std::chrono::steady_clock::time_point deadline;
  std::atomic<int> depth{0};        // nested host calls into Lua (read by interrupt())
  bool nojit_chunks = false;        // the REPL: chunks compiled NOJIT

  int64_t prev_tensor_limit = 0;
  bool owns_tensor_limit = false;

  // ---- state life ----
  void open();   // a fresh state with the library loaded (throws Error)
  void close();  // lua_close; tensors held only by Lua are freed
  void reopen();

  // ---- running code ----
  // Everything that touches the Lua stack runs inside guard(): a lua_cpcall, so that
  // an error (out of memory near the heap cap, most of all) never reaches the panic
  // handler. A body reports failures through `pending`; guard() then throws it as an
  // Error, outside every Lua frame, and retires the state after a Timeout or a Memory
  // stop (notes §1). A Lua error raised inside a body unwinds its C++ frames with their
  // destructors (LuaJIT's external unwinder on x86-64/arm64; checked here), but no C++
  // exception may leave a body (LuaJIT would turn it into "C++ exception").
  struct Pending {
    bool active = false;
    ErrorKind kind = ErrorKind::Runtime;
    std::string message, traceback;
    void set(ErrorKind k, std::string m, std::string tb = {}) {
      active = true; kind = k; message = std::move(m); traceback = std::move(tb);
    }
    void clear() { active = false; message.clear(); traceback.clear(); }
  } pending;
  void guard(lua_CFunction body, void* ud);
  template <typename F>
  void guarded(F&& f) {  // f(lua_State*) runs inside guard()
    struct Ctx { F* f; } ctx{&f};
    guard([](lua_State* L) -> int {
      auto* c = static_cast<Ctx*>(lua_touserdata(L, 1));
      lua_settop(L, 0);
      (*c->f)(L);
      return 0;
    }, &ctx);
  }
  // Compiles a chunk (text only in a sandbox) in the script environment and pushes it;
  // false (and `pending` set) when it does not compile.
  bool load(std::string_view code, const char* chunkname);
  // Calls the function below `nargs` arguments under the limits, with a traceback on
  // error. Returns the number of results left on the stack, or -1 with `pending` set
  // (the function and arguments popped).
  int call(int nargs, int nresults = LUA_MULTRET);
  // Pushes the script's global table (the sandbox environment when sandboxed).
  void push_env();

  // ---- values (api.cpp); false with `pending` set on failure ----
  bool push_value(const Value& v, int level = 0);
  bool to_value(int idx, Value* out, int level = 0);
  std::vector<const void*> visiting;  // tables being converted (cycle check)

  // ---- stopping ----
  bool check_stop();                 // true once a stop is due (and arms the sticky hook)
  [[noreturn]] void raise_stop();    // lua_error with the stop message
  std::string stop_message() const;
  void arm(double seconds);          // outermost call: start the deadline
  void disarm();
  bool retire_on(ErrorKind k) const {
    return k == ErrorKind::Timeout || (k == ErrorKind::Memory && heap_limit > 0);
  }
};

namespace vm {
// The Impl of the runtime owning L.
Runtime::Impl* impl_of(lua_State* L);
// The count hook of Note [Stopping a script].
void stop_hook(lua_State* L, lua_Debug* ar);
// Registers embedded modules in package.preload; their chunks run in the real globals.
void preload_embedded(lua_State* L, const EmbeddedModule* list);
// sandbox.cpp: builds the script environment of a sandboxed state (registry "dlua.env").
void build_sandbox(lua_State* L, Runtime::Impl* rt);
// Pushes an xpcall whose handler runs after unwinding (notes §3.4): with a time limit,
// a handler that loops inside the stop hook could never be stopped.
void push_safe_xpcall(lua_State* L);
// Replaces the global print (or the sandbox's) by one that calls Options::print.
int host_print(lua_State* L);
// strmatch.cpp: interruptible find/match/gmatch/gsub, set into the table at `idx`.
void install_safe_patterns(lua_State* L, int idx);
// bridge.cpp: tensors across the boundary, through the bindings' handle table.
// register_capi tells the Lua module where the C ABI symbols are (see bridge.cpp).
void register_capi(lua_State* L);
// Pushes a Lua tensor sharing t's storage; raises a Lua error on failure.
void push_tensor(lua_State* L, const Tensor& t);
// True when the value at idx is a dlua tensor (then *out refers to it).
bool to_tensor(lua_State* L, int idx, Tensor* out);
}  // namespace vm

}  // namespace dlua
