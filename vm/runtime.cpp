// The lua_State of a Runtime: creation, the capped allocator, the stop hook, protected
// calls and their errors. See Note [Stopping a script] in vm/runtime_impl.h.
#include <cstdlib>
#include <cstring>

#include "bindings/capi.h"
#include "tensor/allocator.h"
#include "vm/runtime_impl.h"

extern "C" {
#include <luajit.h>
}

namespace dlua {
namespace {

// Instructions between two looks at the clock and the interrupt flag: a clock read costs
// as much as tens of instructions, so this is well under 1% of interpreted time, and a
// stop comes within a fraction of a millisecond.
constexpr int kHookPeriod = 1000;
// The message handler may go this far over the heap cap, so a traceback can still be
// built for the error that hit it.
constexpr size_t kHandlerSlack = 64 * 1024;

void* capped_alloc(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* rt = static_cast<Runtime::Impl*>(ud);
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    rt->heap_used -= old;
    return nullptr;
  }
  if (rt->heap_limit && nsize > old) {
    size_t cap = rt->heap_limit + (rt->in_msgh ? kHandlerSlack : 0);
    if (rt->heap_used - old + nsize > cap) {
      rt->heap_refused = true;
      return nullptr;
    }
  }
  void* p = std::realloc(ptr, nsize);
  if (p) rt->heap_used = rt->heap_used - old + nsize;
  return p;
}

// Runs at the error point (before unwinding) of a host call: keeps the traceback aside
// and turns the error value into a message without running script code in a sandbox
// (an error object's __tostring could loop).
int message_handler(lua_State* L) {
  Runtime::Impl* rt = vm::impl_of(L);
  rt->in_msgh = true;
  if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TNUMBER) {
    if (!(rt->opts.sandbox || rt->stop.load()) && luaL_callmeta(L, 1, "__tostring") &&
        lua_type(L, -1) == LUA_TSTRING) {
      lua_replace(L, 1);
    } else {
      lua_settop(L, 1);
      lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
      lua_replace(L, 1);
    }
  }
  luaL_traceback(L, L, nullptr, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "dlua.traceback");
  rt->in_msgh = false;
  lua_settop(L, 1);
  return 1;
}

int embedded_loader(lua_State* L) {
  auto* m = static_cast<const vm::EmbeddedModule*>(lua_touserdata(L, lua_upvalueindex(1)));
  if (luaL_loadbuffer(L, m->source, m->size, m->chunkname) != 0) lua_error(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "dlua.G");  // library code sees the real globals
  lua_setfenv(L, -2);
  lua_pushstring(L, m->name);
  lua_call(L, 1, 1);
  return 1;
}

// Raw reading of an error value: never runs script code.
std::string error_text(lua_State* L, int idx) {
  if (lua_type(L, idx) == LUA_TSTRING || lua_type(L, idx) == LUA_TNUMBER) {
    size_t n = 0;
    const char* s = lua_tolstring(L, idx, &n);
    return std::string(s, n);
  }
  return std::string("(error object is a ") + luaL_typename(L, idx) + " value)";
}

int open_body(lua_State* L) {
  auto* rt = static_cast<Runtime::Impl*>(lua_touserdata(L, 1));
  lua_settop(L, 0);
  luaL_openlibs(L);
  lua_pushlightuserdata(L, rt);
  lua_setfield(L, LUA_REGISTRYINDEX, "dlua.impl");
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  lua_setfield(L, LUA_REGISTRYINDEX, "dlua.G");
  vm::preload_embedded(L, vm::embedded_library());
  vm::register_capi(L);
  if (rt->opts.sandbox || rt->opts.time_limit > 0 || !rt->opts.jit)
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
  if (rt->opts.print) {
    lua_getglobal(L, "tostring");
    lua_pushcclosure(L, vm::host_print, 1);
    lua_setglobal(L, "print");
  }
  if (rt->opts.sandbox || rt->opts.preload_dl) {
    lua_pushcfunction(L, message_handler);
    lua_getglobal(L, "require");
    lua_pushstring(L, "dlua");
    if (lua_pcall(L, 1, 1, 1) != 0) {
      // Keep the traceback with the message: this is a bug in the library, not a script.
      lua_getfield(L, LUA_REGISTRYINDEX, "dlua.traceback");
      lua_concat(L, 2);
      lua_error(L);
    }
    lua_setglobal(L, "dl");
    lua_pop(L, 1);
  }
  if (rt->opts.sandbox) {
    vm::build_sandbox(L, rt);
  } else if (rt->opts.time_limit > 0) {
    // After the library is loaded: its own xpcalls keep their tracebacks.
    vm::push_safe_xpcall(L);
    lua_setglobal(L, "xpcall");
  }
  return 0;
}

}  // namespace

namespace vm {

void stop_hook(lua_State* L, lua_Debug*) {
  Runtime::Impl* rt = impl_of(L);
  if (rt->check_stop()) rt->raise_stop();
}

Runtime::Impl* impl_of(lua_State* L) {
  void* ud = nullptr;
  if (lua_getallocf(L, &ud) == capped_alloc) return static_cast<Runtime::Impl*>(ud);
  lua_getfield(L, LUA_REGISTRYINDEX, "dlua.impl");
  auto* rt = static_cast<Runtime::Impl*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return rt;
}

void preload_embedded(lua_State* L, const EmbeddedModule* list) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  for (const EmbeddedModule* m = list; m->name; ++m) {
    lua_pushlightuserdata(L, const_cast<EmbeddedModule*>(m));
    lua_pushcclosure(L, embedded_loader, 1);
    lua_setfield(L, -2, m->name);
  }
  lua_pop(L, 2);
}

}  // namespace vm

// ---- life of the state ---------------------------------------------------------------

Runtime::Impl::Impl(const Options& o) : opts(o) {
  heap_limit = o.lua_memory_limit;
  if (o.tensor_memory_limit > 0) {
    prev_tensor_limit = dl::host_allocator::stats().limit;
    dl::host_allocator::set_limit(int64_t(o.tensor_memory_limit));
    owns_tensor_limit = true;
  }
  periodic_hook = o.sandbox || o.time_limit > 0;
  open();
}

Runtime::Impl::~Impl() {
  close();
  if (owns_tensor_limit) dl::host_allocator::set_limit(prev_tensor_limit);
}

void Runtime::Impl::open() {
  heap_used = 0;
  heap_refused = false;
  stop.store(0);
  // The counting allocator only where a limit needs it: LuaJIT's own allocator is
  // faster than glibc's malloc behind capped_alloc (d2/dx2 of x^3 spent a fifth of its
  // time in malloc and free).
  L = heap_limit ? lua_newstate(capped_alloc, this) : luaL_newstate();
  if (!L) {
    // A non-GC64 LuaJIT on x86-64 refuses custom allocators.
    if (heap_limit)
      throw Error(ErrorKind::Memory, "dlua: this LuaJIT build does not accept a custom "
                                     "allocator, so lua_memory_limit is unavailable");
    L = luaL_newstate();
    if (!L) throw Error(ErrorKind::Memory, "dlua: cannot create a Lua state");
  }
  int st = lua_cpcall(L, open_body, this);
  if (st != 0) {
    std::string msg = error_text(L, -1);
    lua_close(L);
    L = nullptr;
    bool mem = st == LUA_ERRMEM || heap_refused;
    throw Error(mem ? ErrorKind::Memory : ErrorKind::Runtime,
                "dlua: cannot load the library: " + msg +
                    (mem && heap_limit ? " (Lua memory limit of " + std::to_string(heap_limit) +
                                             " bytes)" : ""));
  }
  if (periodic_hook) lua_sethook(L, vm::stop_hook, LUA_MASKCOUNT, kHookPeriod);
}

void Runtime::Impl::close() {
  if (!L) return;
  lua_sethook(L, nullptr, 0, 0);
  lua_close(L);  // finalizers run with hooks off (lj_gc.c); tensors go back to the pool
  L = nullptr;
}

void Runtime::Impl::reopen() {
  close();
  ++generation;
  open();
}

// ---- stopping ------------------------------------------------------------------------

bool Runtime::Impl::check_stop() {
  if (stop.load(std::memory_order_relaxed) != 0) return true;
  StopReason why;
  if (interrupt_flag.exchange(false)) {
    why = StopReason::Interrupt;
  } else if (has_deadline && std::chrono::steady_clock::now() >= deadline) {
    why = StopReason::Timeout;
  } else {
    return false;
  }
  stop.store(int(why));
  lua_sethook(L, vm::stop_hook, LUA_MASKCOUNT, 1);  // sticky: every instruction from now on
  return true;
}

std::string Runtime::Impl::stop_message() const {
  switch (StopReason(stop.load())) {
    case StopReason::Timeout: {
      char buf[96];
      std::snprintf(buf, sizeof buf, "time limit exceeded (%g s)", opts.time_limit);
      return buf;
    }
    case StopReason::Interrupt: return "interrupted";
    case StopReason::None: break;
  }
  return "stopped";
}

void Runtime::Impl::raise_stop() {
  // A plain string, so a script that catches it can print it; it is raised again at
  // the next instruction anyway.
  lua_pushstring(L, StopReason(stop.load()) == StopReason::Timeout ? "time limit exceeded"
                                                                     : "interrupted");
  lua_error(L);
  std::abort();  // lua_error does not return
}

void Runtime::Impl::arm(double seconds) {
  interrupt_flag.store(false);
  stop.store(0);
  heap_refused = false;
  has_deadline = seconds > 0;
  if (has_deadline)
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(seconds));
  if (periodic_hook) lua_sethook(L, vm::stop_hook, LUA_MASKCOUNT, kHookPeriod);
  else lua_sethook(L, nullptr, 0, 0);
}

void Runtime::Impl::disarm() {
  has_deadline = false;
  stop.store(0);
  interrupt_flag.store(false);
  if (periodic_hook) lua_sethook(L, vm::stop_hook, LUA_MASKCOUNT, kHookPeriod);
  else lua_sethook(L, nullptr, 0, 0);
}

// ---- running -------------------------------------------------------------------------

void Runtime::Impl::push_env() {
  if (opts.sandbox) lua_getfield(L, LUA_REGISTRYINDEX, "dlua.env");
  else lua_pushvalue(L, LUA_GLOBALSINDEX);
}

bool Runtime::Impl::load(std::string_view code, const char* chunkname) {
  int st = luaL_loadbufferx(L, code.data(), code.size(), chunkname,
                            opts.sandbox ? "t" : nullptr);
  if (st != 0) {
    pending.set(st == LUA_ERRMEM ? ErrorKind::Memory : ErrorKind::Syntax, error_text(L, -1));
    lua_pop(L, 1);
    return false;
  }
  if (opts.sandbox) {
    push_env();
    lua_setfenv(L, -2);
  }
  if (nojit_chunks) luaJIT_setmode(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
  return true;
}

int Runtime::Impl::call(int nargs, int nresults) {
  int base = lua_gettop(L) - nargs;  // the function
  lua_pushcfunction(L, message_handler);
  lua_insert(L, base);
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, "dlua.traceback");
  bool outer = depth == 0;
  if (outer) arm(opts.time_limit);
  ++depth;
  int st = lua_pcall(L, nargs, nresults, base);
  --depth;
  // A gradient that raised an error leaves its tape pending: it goes with the call
  // (Note [Recorded values in arenas] in bindings/arenas.cpp).
  if (outer) dl_arena_done();
  in_msgh = false;
  if (st == 0) {
    if (outer) disarm();
    lua_remove(L, base);
    return lua_gettop(L) - base + 1;
  }
  ErrorKind kind = ErrorKind::Runtime;
  std::string msg = error_text(L, -1);
  switch (StopReason(stop.load())) {
    case StopReason::Timeout: kind = ErrorKind::Timeout; msg = stop_message(); break;
    case StopReason::Interrupt: kind = ErrorKind::Interrupted; msg = "interrupted"; break;
    case StopReason::None:
      if (st == LUA_ERRMEM || (heap_refused && msg.find("not enough memory") != std::string::npos))
        kind = ErrorKind::Memory;
      break;
  }
  if (kind == ErrorKind::Memory && heap_limit)
    msg += " (Lua memory limit of " + std::to_string(heap_limit) + " bytes)";
  std::string tb;
  lua_getfield(L, LUA_REGISTRYINDEX, "dlua.traceback");
  if (lua_type(L, -1) == LUA_TSTRING) tb = lua_tostring(L, -1);
  // The last frame is the host's own C function (the guard's cpcall): not the script's.
  size_t last = tb.rfind("\n\t[C]: ");
  if (last != std::string::npos && tb.find('\n', last + 1) == std::string::npos &&
      (tb.find(" at 0x", last) != std::string::npos || tb.find(" in ?", last) != std::string::npos))
    tb.erase(last);
  lua_settop(L, base - 1);
  if (outer) disarm();
  pending.set(kind, std::move(msg), std::move(tb));
  return -1;
}

void Runtime::Impl::guard(lua_CFunction body, void* ud) {
  pending.clear();
  visiting.clear();
  int st = lua_cpcall(L, body, ud);
  if (st != 0 && !pending.active) {
    pending.set(st == LUA_ERRMEM ? ErrorKind::Memory : ErrorKind::Runtime, error_text(L, -1));
    lua_pop(L, 1);
  }
  if (!pending.active) return;
  // An error that unwound through a compiled call before it could end (a time limit or
  // an interrupt stops its cleanup too) must not leave that call in progress on this
  // thread for the ops that come next (scripts/dlua/compile.lua).
  if (depth == 0) dl_compile_abandon();
  Error e(pending.kind, pending.message, pending.traceback);
  pending.clear();
  // Notes §1: after a time-limit or memory stop the state is retired, not reused.
  if (depth == 0 && retire_on(e.kind())) reopen();
  throw e;
}

}  // namespace dlua
