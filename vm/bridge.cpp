// Tensors between the host and Lua, and where the Lua module finds the C ABI.
//
// Note [Finding the C ABI]
// The Lua module (scripts/dlua/) reaches the engine through the LuaJIT FFI. In a
// runtime the engine is already in the process: libdlua.so links libdlua_core.so. The
// runtime registers package.preload["dlua.clib"], which returns ffi.load(<the path
// of the libdlua_core.so already mapped>, found with dladdr), so the module binds
// the very copy of the engine the host uses (one allocator, one handle table), even
// when the host itself was dlopen'ed with RTLD_LOCAL. When the engine is linked
// into the executable instead, it returns ffi.C (the executable must then export
// its symbols). The module asks require("dlua.clib") first and falls back to its own
// ffi.load search when that module does not exist (stock luajit).
//
// Note [Tensors across the boundary]
// A Lua tensor is a `struct dl_tensor` cdata: the id of a handle in the bindings' table
// (bindings/handles.h), or a small tensor held inline (Note [Small tensors inline] in
// bindings/value.cpp). Host -> Lua: the tensor gets a temporary handle, dlua.tensor's
// from_id(id) makes a Lua tensor owning an alias of it (dl_alias), and the temporary
// handle is released. Lua -> host: dlua.tensor's id_of gives the handle id, first
// making an inline tensor a handle in place, and the handle table gives the engine
// tensor. Both directions share the storage: nothing is copied, and a host that
// writes into a tensor a script gave it changes the script's tensor.
#include <dlfcn.h>

#include "bindings/capi.h"
#include "bindings/arenas.h"
#include "bindings/handles.h"
#include "tensor/error.h"
#include "vm/runtime_impl.h"

namespace dlua::vm {
namespace {

constexpr int kLuaTCdata = 10;  // lua_type() of a cdata in LuaJIT

const char kClibLoader[] = R"(
local path = ...
local ffi = require("ffi")
if path then
  local ok, lib = pcall(ffi.load, path)
  if ok then return lib end
end
return ffi.C
)";

const char kBridge[] = R"(
local T = require("dlua.tensor")
return T.id_of, T.from_id
)";

int clib_preload(lua_State* L) {
  if (luaL_loadbuffer(L, kClibLoader, sizeof kClibLoader - 1, "=[dlua clib]") != 0)
    return lua_error(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 1, 1);
  return 1;
}

// Pushes the bridge's id_of and from_id functions (made once per state).
void push_bridge(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "dlua.bridge");
  if (lua_type(L, -1) != LUA_TTABLE) {
    lua_pop(L, 1);
    if (luaL_loadbuffer(L, kBridge, sizeof kBridge - 1, "=[dlua bridge]") != 0) lua_error(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "dlua.G");
    lua_setfenv(L, -2);
    lua_call(L, 0, 2);
    if (lua_type(L, -1) != LUA_TFUNCTION || lua_type(L, -2) != LUA_TFUNCTION)
      luaL_error(L, "dlua: dlua.tensor has no id_of/from_id for host tensors");
    lua_createtable(L, 2, 0);
    lua_insert(L, -3);
    lua_rawseti(L, -3, 2);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "dlua.bridge");
  }
}

}  // namespace

void register_capi(lua_State* L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&dl_abi_version), &info) != 0 && info.dli_fname)
    lua_pushstring(L, info.dli_fname);
  else
    lua_pushnil(L);
  lua_pushcclosure(L, clib_preload, 1);
  lua_setfield(L, -2, "dlua.clib");
  lua_pop(L, 2);
}

void push_tensor(lua_State* L, const Tensor& t) {
  dl::Tensor et(dl::Ref<dl::TensorImpl>(static_cast<dl::TensorImpl*>(t.unsafe_impl())));
  uint64_t id = 0;
  bool failed = false;
  try {
    id = dl::bind::handle_new(std::move(et));
  } catch (const std::exception&) {
    failed = true;
  }
  if (failed) luaL_error(L, "dlua: cannot pass the tensor to Lua (handle table full)");
  push_bridge(L);
  lua_rawgeti(L, -1, 2);
  lua_remove(L, -2);
  lua_pushnumber(L, double(id));
  int st = lua_pcall(L, 1, 1, 0);
  dl::bind::handle_release(id);  // the Lua tensor holds its own alias
  if (st != 0) lua_error(L);
  if (lua_isnil(L, -1)) luaL_error(L, "dlua: cannot pass the tensor to Lua");
}

bool to_tensor(lua_State* L, int idx, Tensor* out) {
  if (lua_type(L, idx) != kLuaTCdata) return false;
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  push_bridge(L);
  lua_rawgeti(L, -1, 1);
  lua_remove(L, -2);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 1);
  bool is = lua_type(L, -1) == LUA_TNUMBER;
  uint64_t id = is ? uint64_t(lua_tonumber(L, -1)) : 0;
  lua_pop(L, 1);
  if (!is || !dl::bind::handle_valid(id)) return false;
  *out = Tensor::unsafe_wrap(dl::bind::handle_get(id, "dlua").impl());
  return true;
}

}  // namespace dlua::vm
