// The environment of untrusted scripts (docs/design.md, "The sandbox").
//
// Note [Two global tables]
// The library (dlua and its submodules) is trusted: it was loaded before any script,
// runs in the real globals (registry "dlua.G") and keeps ffi, the C library handle and
// the real string functions as upvalues. Scripts run in a second table (registry
// "dlua.env") holding copies of the safe libraries, so a script that writes
// `string.format = error` or `table.insert = nil` changes only its own view, never the
// library's. Nothing reachable from the environment leads back to the real globals:
// getfenv/setfenv/debug are absent, and load() gives new chunks the environment too.
// The string metatable is shared by every string, so it is protected (__metatable)
// and its __index holds interruptible pattern functions (vm/strmatch.cpp).
#include <cstdio>
#include <cstring>

#include "vm/runtime_impl.h"

namespace dlua::vm {
namespace {

// load(chunk [, chunkname [, mode [, env]]]): text only whatever `mode` says (crafted
// bytecode crashes the VM), and new chunks get the sandbox environment.
int safe_load(lua_State* L) {
  size_t len = 0;
  const char* code;
  int t = lua_type(L, 1);
  if (t == LUA_TSTRING) {
    code = lua_tolstring(L, 1, &len);
  } else if (t == LUA_TFUNCTION) {
    // A reader function: concatenate its pieces first (each call runs under the hook).
    luaL_Buffer b;
    lua_settop(L, 4);
    luaL_buffinit(L, &b);
    for (;;) {
      lua_pushvalue(L, 1);
      lua_call(L, 0, 1);
      if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TSTRING && lua_objlen(L, -1) == 0)) {
        lua_pop(L, 1);
        break;
      }
      if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "reader function must return a string");
      luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_replace(L, 1);
    code = lua_tolstring(L, 1, &len);
  } else {
    return luaL_argerror(L, 1, "string or function expected");
  }
  const char* name = luaL_optstring(L, 2, code);
  if (luaL_loadbufferx(L, code, len, name, "t") != 0) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;  // nil, message
  }
  if (lua_type(L, 4) == LUA_TTABLE) lua_pushvalue(L, 4);
  else lua_getfield(L, LUA_REGISTRYINDEX, "dlua.env");
  lua_setfenv(L, -2);
  return 1;
}

// loadstring(s [, chunkname])
int safe_loadstring(lua_State* L) {
  luaL_checkstring(L, 1);
  lua_settop(L, 2);
  return safe_load(L);
}

// require(name): only "dlua" itself. Its submodules are internals (dlua.core holds
// ffi and the C library, dlua.tensor can forge handles); scripts reach the public
// parts as fields of dl (dl.nn, dl.optim ...).
int safe_require(lua_State* L) {
  const char* name = luaL_checkstring(L, 1);
  if (std::strcmp(name, "dlua") != 0)
    return luaL_error(L, "module '%s' is not available in the sandbox", name);
  lua_getfield(L, LUA_REGISTRYINDEX, "dlua.G");
  lua_getfield(L, -1, "require");
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

int safe_collectgarbage(lua_State* L) {
  const char* opt = luaL_optstring(L, 1, "collect");
  if (std::strcmp(opt, "count") != 0)
    return luaL_error(L, "collectgarbage: only \"count\" is allowed in the sandbox");
  lua_pushnumber(L, lua_gc(L, LUA_GCCOUNT, 0) + lua_gc(L, LUA_GCCOUNTB, 0) / 1024.0);
  return 1;
}

int stop_pending(lua_State* L) {
  lua_pushboolean(L, impl_of(L)->stop.load() != 0);
  return 1;
}

// xpcall's handler would run inside the stop hook with hooks suppressed, so a looping
// handler could never be stopped (notes §3.4). This one pcalls, lets a stop through,
// and calls the handler after unwinding, like an ordinary function.
const char kXpcall[] = R"(
local pcall, select, unpack, error, stop_pending = ...
local function pass(ok, ...)
  return ok, select('#', ...), {...}
end
return function(f, handler, ...)
  local ok, n, r = pass(pcall(f, ...))
  if ok then return true, unpack(r, 1, n) end
  if stop_pending() then error(r[1], 0) end
  return false, (handler(r[1]))
end
)";

void copy_table(lua_State* L, int src, const char* const* skip) {
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, src) != 0) {
    bool drop = false;
    if (lua_type(L, -2) == LUA_TSTRING)
      for (const char* const* s = skip; s && *s; ++s)
        if (std::strcmp(lua_tostring(L, -2), *s) == 0) drop = true;
    if (drop) {
      lua_pop(L, 1);
    } else {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, -4);
    }
  }
}

}  // namespace

void build_sandbox(lua_State* L, Runtime::Impl* rt) {
  // No raw addresses or foreign memory for scripts (dl.from_ptr, x:data_ptr()).
  lua_getglobal(L, "require");
  lua_pushliteral(L, "dlua.tensor");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "restrict");
  lua_call(L, 0, 0);
  lua_pop(L, 1);
  // No files either: dl.save, dl.load, checkpoints, summaries and data-set readers
  // refuse to run (they would let a script read or write the host's files).
  lua_getglobal(L, "require");
  lua_pushliteral(L, "dlua.io");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "deny_files");
  lua_pushliteral(L, "not available in the sandbox");
  lua_call(L, 1, 0);
  lua_pop(L, 1);

  // The real string table: no dump (bytecode), interruptible patterns, and a metatable
  // that scripts can neither get nor change.
  lua_getglobal(L, "string");
  int str = lua_gettop(L);
  lua_pushnil(L);
  lua_setfield(L, str, "dump");
  install_safe_patterns(L, str);
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);

  lua_newtable(L);  // the environment
  int env = lua_gettop(L);
  static const char* const kSafe[] = {
      "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget",
      "rawset", "select", "setmetatable", "getmetatable", "tonumber", "tostring", "type",
      "unpack", "_VERSION", "dl", nullptr};
  for (const char* const* n = kSafe; *n; ++n) {
    lua_getglobal(L, *n);
    lua_setfield(L, env, *n);
  }
  static const char* const kLibs[] = {"string", "table", "math", "bit", "coroutine", nullptr};
  static const char* const kNoDump[] = {"dump", nullptr};
  for (const char* const* n = kLibs; *n; ++n) {
    lua_getglobal(L, *n);
    copy_table(L, lua_gettop(L), kNoDump);
    lua_setfield(L, env, *n);
    lua_pop(L, 1);
  }
  lua_pushcfunction(L, safe_load);
  lua_setfield(L, env, "load");
  lua_pushcfunction(L, safe_loadstring);
  lua_setfield(L, env, "loadstring");
  lua_pushcfunction(L, safe_require);
  lua_setfield(L, env, "require");
  lua_pushcfunction(L, safe_collectgarbage);
  lua_setfield(L, env, "collectgarbage");
  lua_getglobal(L, "tostring");
  lua_pushcclosure(L, host_print, 1);
  lua_setfield(L, env, "print");

  push_safe_xpcall(L);
  lua_setfield(L, env, "xpcall");

  lua_pushvalue(L, env);
  lua_setfield(L, env, "_G");
  lua_pushvalue(L, env);
  lua_setfield(L, LUA_REGISTRYINDEX, "dlua.env");
  lua_settop(L, str - 1);
  (void)rt;
}

void push_safe_xpcall(lua_State* L) {
  if (luaL_loadbuffer(L, kXpcall, sizeof kXpcall - 1, "=[dlua xpcall]") != 0) lua_error(L);
  lua_getglobal(L, "pcall");
  lua_getglobal(L, "select");
  lua_getglobal(L, "unpack");
  lua_getglobal(L, "error");
  lua_pushcfunction(L, stop_pending);
  lua_call(L, 5, 1);
}

int host_print(lua_State* L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; ++i) {
    lua_pushvalue(L, lua_upvalueindex(1));  // the real tostring
    lua_pushvalue(L, i);
    lua_call(L, 1, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "'tostring' must return a string to 'print'");
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  size_t len = 0;
  const char* s = lua_tolstring(L, -1, &len);
  Runtime::Impl* rt = impl_of(L);
  if (!rt->opts.print) {
    std::fwrite(s, 1, len, stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  bool failed = false;
  try {
    rt->opts.print(std::string_view(s, len));
  } catch (...) {
    failed = true;
  }
  if (failed) return luaL_error(L, "print: the host's logger failed");
  return 0;
}

}  // namespace dlua::vm
