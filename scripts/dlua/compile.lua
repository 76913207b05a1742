-- dl.compile: a Lua function whose tensor work is deferred, matched against a trace
-- and run fused (docs/compile.md).
--
--   local step = dl.compile(function(x, w) return dl.tanh(x * w + 1):sum() end)
--   step(x, w)                        -- records the trace
--   step(x, w)                        -- matches it: the pointwise ops run as one pass
--   print(dl.compile.explain(step))   -- traces, where calls left them, with lines
--
-- The function runs on every call, as in eager execution: prints, counters, closures
-- and globals behave as they would without compiling. What changes is when its ops run
-- (Note [Deferred steps] in compile/trace.cpp) and which unused results are never
-- written. A call ends by settling its proxies (Note [Proxies] in
-- bindings/capi_compile.cpp): results become ordinary values, the caller's own. A call
-- that recorded ops then runs a full collection to learn which results outlived it
-- (kept in a table, a closure, a field), so that later calls keep exactly those.
--
-- DLUA_COMPILE=0 in the environment makes every compiled function call its Lua
-- function directly. DLUA_COMPILE_DEFER_SMALL=1 makes `defer_small` every function's
-- default (the test suite runs dl.compile's tests both ways).
local ffi = require("ffi")
local core = require("dlua.core")
core.own_source()
local T = require("dlua.tensor")

local C = core.C
local entries = core.entries   -- Note [Walking nested tables] in core.lua
local L = require("dlua.lifetime")
local total, mark, budget, collect = L.total, L.mark, L.budget, L.collect
local dl = T.dl
local Tensor, own, proxies = T.Tensor, T.own, T.proxies
local istype, ffi_string = ffi.istype, ffi.string
local type, pairs, pcall, select, error, setmetatable, collectgarbage =
  type, pairs, pcall, select, error, setmetatable, collectgarbage
local unpack = unpack or table.unpack

local PROXY = 0xFD   -- bindings/value.h, kProxyTag
local compiled_t = ffi.typeof("struct dl_compiled")
local weak_keys = { __mode = "k" }
local enabled = os.getenv("DLUA_COMPILE") ~= "0"
local defer_small_default = os.getenv("DLUA_COMPILE_DEFER_SMALL") == "1"

-- True while this Lua state runs a compiled function's Lua code (a compiled call found
-- in progress at any other time was left by an error: dl_compile_abandon).
local running = false

-- Compiled function -> its state, for explain.
local states = setmetatable({}, weak_keys)

local function is_proxy(v)
  return v.id == 0 and v.inl_dtype == PROXY
end

-- Tells the call which of its proxies it returns, through tables too (as dl.grad takes
-- nested tables), so that their results are computed whatever the trace knows.
local function mark_returned(v, seen, depth)
  if istype(Tensor, v) then
    if is_proxy(v) then C.dl_compile_return(v) end
  elseif type(v) == "table" and depth < 16 and not seen[v] then
    seen[v] = true
    for k, x in entries(v) do
      mark_returned(k, seen, depth + 1)
      mark_returned(x, seen, depth + 1)
    end
  end
end

-- Tells the call that it returns v.
local function mark_result(v)
  if istype(Tensor, v) then
    if is_proxy(v) then C.dl_compile_return(v) end
  elseif type(v) == "table" then
    mark_returned(v, {}, 0)
  end
end

-- Ends the thread's compiled call: runs what it still defers, turns its proxies into
-- values and, when it recorded, marks which results outlived it. ok is false when the
-- call's function raised an error. Returns the first error the end met, or nil.
-- Note [The end of a call in fixed-arity functions]
-- The end of every call runs in `ended` (below), which calls this and mark_result, and
-- its start in `direct` and `start`: functions of fixed arity, not the vararg functions
-- around them. LuaJIT starts a trace at the entry of a function of fixed arity once it
-- is hot, never at a vararg one's, and the path from the call's function back to its
-- caller is not compiled as part of any other trace (it returns through pcall's frame:
-- Note [A Lua frame between pcall and f]). In the interpreter each FFI call costs
-- hundreds of instructions, and each bytecode an indirect jump; in a trace, a few.
local function settle(ok)
  local rec = C.dl_compile_finish(ok and 0 or 1)
  local failed = rec < 0 and ffi_string(C.dl_last_error()) or nil
  local outlived = rec == 1 and setmetatable({}, weak_keys) or nil
  local n = proxies.n
  for i = 1, n do
    local r = proxies[i]
    proxies[i] = nil
    local slot, was_proxy = r.inl_slot, is_proxy(r)
    local st = C.dl_compile_settle(r)
    if st == 1 then
      own(r, r.id)
    elseif st < 0 and not failed then
      failed = ffi_string(C.dl_last_error())
    end
    if outlived and was_proxy then outlived[r] = slot end
  end
  proxies.n = 0
  if outlived then
    -- What survives a full collection is referenced from outside the call (or returned).
    collectgarbage("collect")
    for _, slot in pairs(outlived) do C.dl_compile_keep(slot) end
    C.dl_compile_analysed()
  end
  local warning = C.dl_compile_end()
  if warning ~= nil then io.stderr:write(ffi_string(warning), "\n") end
  return failed
end

-- settle, after marking the results of a call that returned (ok and the values after
-- it are pcall's).
local function finish(ok, ...)
  if ok then
    local n = select("#", ...)
    if n > 0 then
      local a, b = ...
      mark_result(a)
      if n > 1 then mark_result(b) end
      for i = 3, n do mark_result((select(i, ...))) end
    end
  end
  local failed = settle(ok)
  if failed then core.raise(failed) end
end

local function pack(...) return { n = select("#", ...), ... } end

-- Note [A Lua frame between pcall and f]
-- A compiled function runs as pcall(through, f, ...), not pcall(f, ...): LuaJIT cannot
-- record a return into pcall's frame ("NYI: return to lower frame"), so with f called
-- by pcall itself, the side trace from a loop's exit in f could not be compiled at all
-- and the path from there to f's end ran interpreted on every call. f returns into
-- `through`, a Lua frame, and `through` returns f's results after a marker (true), not
-- by a tail call: a return (not a call) from a vararg function in the side trace's own
-- frame ends the trace, which then hands the return to the interpreter. (A tail call
-- from there is NYI too, as is a return into pcall from any function the trace entered.)
-- The results go through `count` on the way, which puts their number before them, so
-- that `ended`, which takes the call's end from there, can be a function of fixed
-- arity (Note [The end of a call in fixed-arity functions]): it takes the first two
-- results as arguments, and any others from `extra`, where `count` keeps them.
-- `through` calls f as an argument, so it is f's caller while f runs: an error raised
-- at f's caller (`error(msg, 2)` in f) is positioned at this file's line, not at the
-- caller of the compiled function as in eager execution, and `reraise` below moves it
-- there.
local extra = nil   -- the results of the call that just returned, when more than two
local function count(...)
  local n = select("#", ...)
  if n > 2 then extra = pack(...) end
  return n, ...
end
local function through(f, ...) return true, count(f(...)) end
local through_where = select(2, pcall(through, function() error("", 2) end))
if type(through_where) ~= "string" or through_where == "" then through_where = nil end

-- Raises the error of a call of f at `level` (2: the caller of the function that calls
-- reraise): an error positioned at `through` is positioned at that level instead, as
-- eager execution positions it; any other error passes as it was.
local function reraise(e, level)
  if through_where and type(e) == "string" and e:sub(1, #through_where) == through_where then
    error(e:sub(#through_where + 1), level + 1)
  end
  error(e, 0)
end

-- The end of a call (not checked against eager): ok and e are pcall's, then `through`'s
-- marker, the number of results n and the first two, a and b (the others in `extra`).
-- Its results are never packed into a table but for calls of more than two (a table
-- per call, and the JIT compiles neither the packing nor unpack).
local function ended(ok, e, n, a, b)
  running = false
  if not ok then
    finish(false)
    reraise(e, 2)   -- (ended is tail-called: level 2 is the caller's)
  end
  if n == 1 then
    finish(true, a)
    return a
  elseif n == 2 then
    finish(true, a, b)
    return a, b
  elseif n == 0 then
    finish(true)
    return
  end
  local t = extra
  extra = nil
  finish(true, unpack(t, 1, n))
  return unpack(t, 1, n)
end

-- pcall(through, f, ...)'s values packed as pcall(f, ...)'s would be.
local function outcome(ok, e, n, ...)
  extra = nil
  if ok then return pack(true, ...) end
  return pack(false, e)
end

-- Whether a call of a compiled function runs its function directly, as eager
-- execution would: with DLUA_COMPILE=0, inside an enclosing compiled call (part of it),
-- under a gradient or an export. Else the caller begins a call (start below). The
-- collector is stepped here, as before an eager op allocates (Note [Stepping the
-- collector] in lifetime.lua): the call's results are allocated when its steps run,
-- and the garbage of the calls before (last call's results) is then freed and reused.
-- (Fixed arity: Note [The end of a call in fixed-arity functions].)
local function direct()
  if not enabled then return true end
  if C.dl_compile_active() ~= 0 then
    if running then return true end
    C.dl_compile_abandon()   -- left in progress by an error that stopped its end
  end
  if C.dl_is_recording() ~= 0 then return true end   -- eager under a gradient
  if C.dl_export_active() ~= 0 then return true end  -- its ops go into an exported graph
  if total[0] - mark[0] > budget[0] then collect() end
  return false
end

-- Begins a call of the compiled function fid on this thread. What a call stopped before
-- its end left behind is dropped first: a time limit or an interrupt raises again at
-- every instruction outside a trace, so it can stop the end itself part way (and the
-- runtime then abandons the call, vm/runtime.cpp). Its proxies stay what they are,
-- promises of an ended call, which a read refuses (Note [Proxies] in
-- bindings/capi_compile.cpp).
local function start(fid)
  local n = proxies.n
  if n > 0 then
    for i = 1, n do proxies[i] = nil end
    proxies.n = 0
  end
  extra = nil
  if C.dl_compile_begin(fid) ~= 0 then core.raise_last() end
  running = true
end

-- Same dtype, shape and bits (nan equal to nan), through tables; else what differs.
local function differ(got, want, where, depth)
  if istype(Tensor, want) or istype(Tensor, got) then
    if not (istype(Tensor, want) and istype(Tensor, got)) then return where .. ": a tensor and a " .. type(got) end
    if got.dtype ~= want.dtype then return where .. ": dtype " .. got.dtype .. ", eager " .. want.dtype end
    local gs, ws = got.shape, want.shape
    if #gs ~= #ws then return where .. ": shapes differ" end
    for i = 1, #ws do if gs[i] ~= ws[i] then return where .. ": shapes differ" end end
    local same = dl.equal(got, want)
    if not same and got:is_floating_point() then
      local gn, wn = got:ne(got), want:ne(want)   -- nan where nan
      same = dl.equal(gn, wn) and dl.equal(got:masked_fill(gn, 0), want:masked_fill(wn, 0))
    end
    return not same and (where .. ": values differ from eager's") or nil
  elseif type(want) == "table" and type(got) == "table" and depth < 16 then
    for k, v in entries(want) do
      local d = differ(got[k], v, where .. "." .. tostring(k), depth + 1)
      if d then return d end
    end
    return nil
  end
  if got ~= want and not (got ~= got and want ~= want) then return where .. ": differs from eager's" end
  return nil
end

local function name_of(f)
  local info = debug and debug.getinfo and debug.getinfo(f, "S")
  if info and info.short_src then return info.short_src .. ":" .. tostring(info.linedefined) end
  return "function"
end

-- dl.compile(f [, {name = ..., check = false, defer_small = false}]). defer_small: ops on
-- small tensors held by handles are deferred like any other, where by default they run
-- at once (Note [Small handles run at once] in bindings/compile.h).
local COMPILE_OPTIONS = { name = true, check = true, defer_small = true }
local function compile(f, opts)
  core.check_callable("compile", f)
  opts = core.options("compile", opts, COMPILE_OPTIONS)
  local name = opts.name or (type(f) == "function" and name_of(f) or "callable")
  if type(name) ~= "string" then core.raise("compile: name must be a string") end
  local check = opts.check
  if check ~= nil and type(check) ~= "boolean" then core.raise("compile: check must be a boolean") end
  local defer_small = opts.defer_small
  if defer_small == nil then defer_small = defer_small_default end
  if type(defer_small) ~= "boolean" then core.raise("compile: defer_small must be a boolean") end
  local fid = C.dl_compile_new(name, defer_small and 1 or 0)
  if fid == 0 then core.raise_last() end
  local obj = ffi.gc(compiled_t(fid), C.dl_compile_release)
  local function cf(...)
    if direct() then return f(...) end
    if not check then
      start(fid)
      return ended(pcall(through, f, ...))
    end
    -- Eagerly first, then compiled from the same random state: both must agree.
    local rng_before = dl.get_rng_state()
    local want = outcome(pcall(through, f, ...))
    local rng_after = dl.get_rng_state()
    dl.set_rng_state(rng_before)
    start(fid)
    local rets = outcome(pcall(through, f, ...))
    running = false
    finish(unpack(rets, 1, rets.n))
    local d
    if want[1] ~= rets[1] then
      d = "the eager call " .. (want[1] and "returned" or "raised an error") .. ", the compiled one did not"
    else
      if want.n ~= rets.n then d = "a different number of results" end
      for i = 2, want.n do d = d or differ(rets[i], want[i], "result " .. (i - 1), 0) end
      local now_state = dl.get_rng_state()
      if not d and (now_state.offset ~= rng_after.offset or now_state.seed ~= rng_after.seed) then
        d = "a different number of random draws"
      end
    end
    if d then core.raise("compile: check failed for " .. name .. ": " .. d) end
    if not rets[1] then reraise(rets[2], 2) end
    return unpack(rets, 2, rets.n)
  end
  states[cf] = { fid = fid, obj = obj, name = name }
  return cf
end

local M = setmetatable({}, { __call = function(_, f, opts) return compile(f, opts) end })

-- dl.compile.explain(cf): the traces of a compiled function, how often calls followed
-- them, where calls left them (with the line of the op they expected), as text.
function M.explain(cf)
  local st = states[cf]
  if not st then core.raise("compile.explain: expected a compiled function, got " .. core.typename(cf)) end
  local text = ffi_string(C.dl_compile_report(st.fid))
  if not enabled then text = "dl.compile is off (DLUA_COMPILE=0): calls run eagerly\n" .. text end
  return text
end

-- dl.compile.enabled(): false when DLUA_COMPILE=0.
function M.enabled() return enabled end

dl.compile = M
return M
