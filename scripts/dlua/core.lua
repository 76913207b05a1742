-- dlua.core: the engine's C ABI (bindings/capi.h) seen from Lua, error raising and the
-- op table shared by the other dlua modules (stepping the collector is dlua.lifetime).
-- Internal: scripts use `dlua`.
--
-- Finding the engine (libdlua_core.so), first match wins:
--   0. require("dlua.clib") when the host registered it (package.preload): the
--      runtime (vm/bridge.cpp, Note [Finding the C ABI]) hands over the very copy of
--      the engine it links, so that host and scripts share one handle table;
--   1. the host program itself, when it links the engine and exports its symbols
--      (ffi.C);
--   2. the environment variable DLUA_CORE, the path of the library file;
--   3. package.cpath, searched for the name "dlua_core" (a pattern like
--      "<build>/lib/lib?.so" finds "<build>/lib/libdlua_core.so");
--   4. next to this file: <repo>/build/lib/ when run from the source tree
--      (scripts/dlua/core.lua), <prefix>/lib/ when installed under
--      <prefix>/share/lua/5.1/dlua/;
--   5. the system's library path (ffi.load("dlua_core")).
-- So from stock luajit in the source tree:
--   LUA_PATH="scripts/?/init.lua;scripts/?.lua;;" LUA_CPATH="build/lib/lib?.so;;" luajit x.lua
--
-- Sandbox note: every library function this file and the other dlua modules use is
-- captured here or at the top of each module, before any script runs, so a script
-- that replaces string.format or collectgarbage does not change dlua's behaviour.
local ffi = require("ffi")

local type, pcall, error, tostring, select = type, pcall, error, tostring, select
local ffi_string = ffi.string
local getinfo = debug and debug.getinfo
local getenv = os and os.getenv
local searchpath = package and package.searchpath
local cpath = package and package.cpath
local ssub, smatch, concat = string.sub, string.match, table.concat
local ipairs, pairs, io_open = ipairs, pairs, io and io.open
local floor = math.floor

local M = {}
M.ffi = ffi

-- ---- the library ------------------------------------------------------------------------

ffi.cdef("const char* dl_cdef(void);")

local function has_engine(lib)
  local ok = pcall(function() return lib.dl_cdef end)
  return ok
end

local function this_dir()
  if not getinfo then return nil end
  local src = getinfo(1, "S").source
  if ssub(src, 1, 1) ~= "@" then return nil end
  local dir = smatch(ssub(src, 2), "^(.*)/[^/]*$")
  return dir or "."
end

local function find_engine()
  local tried = {}
  local preload = package and package.preload
  if preload and preload["dlua.clib"] then
    local lib = require("dlua.clib")
    if has_engine(lib) then return lib end
    tried[#tried + 1] = "dlua.clib (no dlua engine in it)"
  end
  if has_engine(ffi.C) then return ffi.C end
  local function try(path)
    tried[#tried + 1] = path
    local ok, lib = pcall(ffi.load, path)
    if ok and has_engine(lib) then return lib end
    if ok then tried[#tried] = path .. " (no dlua engine in it)" end
    return nil
  end
  local env = getenv and getenv("DLUA_CORE")
  if env and env ~= "" then
    local lib = try(env)
    if lib then return lib end
  end
  if searchpath and cpath then
    local path = searchpath("dlua_core", cpath)
    if path then
      local lib = try(path)
      if lib then return lib end
    end
  end
  local dir = this_dir()
  if dir then
    for _, rel in ipairs({ "/../../build/lib/libdlua_core.so", "/../../../../lib/libdlua_core.so" }) do
      local path = dir .. rel
      local f = io_open and io_open(path, "rb")
      if f then
        f:close()
        local lib = try(path)
        if lib then return lib end
      end
    end
  end
  local lib = try("dlua_core")
  if lib then return lib end
  error("dlua: cannot find the engine library libdlua_core.so (tried: the host program, "
        .. concat(tried, ", ")
        .. "); set DLUA_CORE to its path or add its directory to LUA_CPATH as <dir>/lib?.so", 0)
end

local C = find_engine()
M.C = C   -- kept referenced: a library loaded with ffi.load is unloaded with its last reference

if pcall(ffi.typeof, "struct dl_tensor") then
  error("dlua: the engine's types are already declared in this Lua state (dlua loaded twice?)", 0)
end
ffi.cdef(ffi_string(C.dl_cdef()))

-- ---- errors -----------------------------------------------------------------------------

-- Chunk names of dlua's own Lua files: an error is reported at the first caller outside
-- them, that is at the script's line, however deep inside dlua it was raised.
local own = {}
function M.own_source()
  if getinfo then own[getinfo(2, "S").source] = true end
end
M.own_source()

local function raise(msg)
  local level = 2
  if getinfo then
    while true do
      local info = getinfo(level, "S")
      if not info then level = 0 break end  -- no script frame (a tail call): no position
      if info.what ~= "C" and not own[info.source] then break end
      level = level + 1
    end
  else
    level = 3
  end
  error(msg, level)
end
M.raise = raise

-- "chunk:line" of the first caller outside dlua's own files: where a script made the
-- call being served (a compiled op's line, scripts/dlua/compile.lua).
function M.where()
  if not getinfo then return "?" end
  local level = 2
  while true do
    local info = getinfo(level, "Sl")
    if not info then return "?" end
    if info.what ~= "C" and not own[info.source] then
      return info.short_src .. ":" .. tostring(info.currentline)
    end
    level = level + 1
  end
end

-- Raises the engine's last error.
function M.raise_last()
  raise(ffi_string(C.dl_last_error()))
end

-- "op: expected <what>, got <type>".
local TT   -- the tensor ctype, set by dlua.tensor
function M.typename(v)
  if TT and ffi.istype(TT, v) then return "tensor" end
  return type(v)
end
function M.set_tensor_type(ct) TT = ct end

-- Note [Walking nested tables]
-- `for k, v in M.entries(t)` visits what `pairs(t)` visits. The library uses it instead
-- of pairs for the recursive walkers of nested argument and result tables (dl.grad's
-- watched arguments, GradientTape's sources, dl.compile's results) and for loops nested
-- in a loop over another table (optimizer and checkpoint state). LuaJIT's parser turns
-- a loop over `pairs(...)` or `next` into its specialised ITERN bytecode, and the LuaJIT
-- of Debian 12 (2.1.0~beta3+git20220320) mis-iterates a specialised loop that was
-- despecialised while a nested one ran (upstream issues 744, 827 and 1510: elements
-- skipped, the loop ended early, or the same key visited forever). A walker that calls
-- itself inside its own loop is that case: tests/lua/test_compile.lua's comparison of
-- results hung in about one run in 110 on the same key. Called through another name,
-- the iterator is not specialised, and `next` runs as an ordinary call.
function M.entries(t) return next, t, nil end

function M.bad_arg(op, what, v)
  raise(op .. ": expected " .. what .. ", got " .. M.typename(v))
end

-- f, when it is a function or a callable table (an nn module); else "op: expected a
-- function[ for what], got <type>".
function M.check_callable(op, f, what)
  if type(f) == "function" then return f end
  local mt = type(f) == "table" and getmetatable(f)
  if mt and mt.__call then return f end
  raise(op .. ": expected a function" .. (what and " for " .. what or "") .. ", got " .. M.typename(f))
end

-- An options table of `op`: {} for nil; an error for anything but a table, or for a key
-- that `allowed` (a set: {name = true, ...}) does not hold.
-- Note [Modules loaded on first use]
-- The transforms (dl.jacobian ...), einsum, the rearranging ops (x:tile ...), the CSV
-- reader, the attention layers, dl.nn.init / dl.nn.utils, dl.dist and most of the
-- functions composed in Lua (subscripts, the activations and resampling layers, the
-- statistics ...) load when a script first reaches one of their names, not when dlua
-- loads: loading every module's chunk is most of a state's start-up (bench/, `startup`),
-- which a host that makes a state per task would pay every time, and every chunk loaded
-- stays in the Lua heap, which each full collection marks (Note [Stepping the collector]
-- in lifetime.lua). on_first_use(tbl, names, load) puts a stub for each name in a table
-- behind tbl (its metatable's __index: a table, so a lookup that misses, such as a
-- tensor property after the methods, costs one more table probe and no call); the stub
-- runs load(), which defines the real function in tbl itself, and calls it. Names that
-- are tables (the attention classes) use on_first_index instead, a function __index.
-- Tools that look functions up by identity resolve a stub with M.resolve_stub.
local stub_of = setmetatable({}, { __mode = "k" })

function M.on_first_use(tbl, names, load)
  local mt = getmetatable(tbl)
  if mt == nil then
    mt = {}
    setmetatable(tbl, mt)
  end
  if mt.__index == nil then mt.__index = {} end
  local stubs = mt.__index
  for _, name in ipairs(names) do
    local stub = function(...)
      load()
      return rawget(tbl, name)(...)
    end
    stubs[name] = stub
    stub_of[stub] = { tbl = tbl, name = name, load = load }
  end
end

-- The function a stub of on_first_use stands for (its module loaded), or nil when f is no
-- stub: for tools that look functions up by identity (the REPL's help).
function M.resolve_stub(f)
  local s = stub_of[f]
  if s == nil then return nil end
  s.load()
  return rawget(s.tbl, s.name)
end

-- tbl[name], for each name of `loads`, made by loads[name]() when first read (values of
-- any kind).
-- (The metatable's __lazy lists the names, for tools that list a table's keys without
-- loading anything: the REPL's completion.)
function M.on_first_index(tbl, loads)
  setmetatable(tbl, { __lazy = loads, __index = function(t, k)
    local load = loads[k]
    if load == nil then return nil end
    load()
    return rawget(t, k)
  end })
end

-- Whether v is a number that is a whole number of double's exact range (not an
-- infinity, which floor leaves as it is).
function M.integer(v)
  return type(v) == "number" and v == floor(v) and v < 2 ^ 53 and v > -2 ^ 53
end

-- A boolean argument of op (`what` names it in the error), `default` where it is nil.
function M.boolean_arg(op, v, what, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then M.bad_arg(op, what .. " (a boolean)", v) end
  return v
end

-- A dim argument d (1-based, negative from the end) of a tensor of n dims, as a positive
-- dim; an error naming op otherwise.
function M.positive_dim(op, d, n, ndim)   -- (ndim: the tensor's dims named in the error, if not n)
  if type(d) ~= "number" or d ~= floor(d) or d == 0 or d > n or d < -n then
    raise(op .. ": dimension " .. tostring(d) .. " is out of range for a tensor of " .. (ndim or n) .. " dims")
  end
  return d < 0 and n + d + 1 or d
end

function M.options(op, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" then M.bad_arg(op, "an options table", opts) end
  for k in pairs(opts) do
    if not allowed[k] then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
  end
  return opts
end

-- ---- the op table -------------------------------------------------------------------------

-- ops[name] = {id =, family =, arity =, flags =}, from tensor/ops.def through the C ABI.
local FAMILIES = { [0] = "unary", "binary", "compare", "reduce", "other" }
M.ops = {}
M.op_list = {}
for i = 0, C.dl_op_count() - 1 do
  local name = ffi_string(C.dl_op_name(i))
  local op = { id = i, name = name, family = FAMILIES[C.dl_op_family(i)],
               arity = C.dl_op_arity(i), flags = C.dl_op_flags(i) }
  M.ops[name] = op
  M.op_list[#M.op_list + 1] = op
end
M.FLAG_DIFF, M.FLAG_FLOAT_ONLY, M.FLAG_NO_BOOL, M.FLAG_INT_EXACT, M.FLAG_INT_ONLY = 1, 2, 4, 8, 16

-- dtypes: code -> name, name (and alias) -> code.
M.dtype_names = {}
M.dtype_codes = {}
for i = 0, C.dl_dtype_count() - 1 do
  local name = ffi_string(C.dl_dtype_name(i))
  M.dtype_names[i] = name
  M.dtype_codes[name] = i
end
for _, alias in ipairs({ "float", "double", "half", "int", "long", "byte" }) do
  local code = C.dl_dtype_code(alias)
  if code >= 0 then M.dtype_codes[alias] = code end
end

return M
