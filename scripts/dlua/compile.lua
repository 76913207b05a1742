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
-- function directly.
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
-- values and, when it recorded, marks which results outlived it. ok and the values
-- after it are pcall's.
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
  if failed then core.raise(failed) end
end

local function pack(...) return { n = select("#", ...), ... } end

-- Note [A Lua frame between pcall and f]
-- A compiled function runs as pcall(through, f, ...), not pcall(f, ...): LuaJIT cannot
-- record a return into pcall's frame ("NYI: return to lower frame"), so with f called
-- by pcall itself, the path from a loop's exit in f to f's end ran interpreted on every
-- call. Returning into `through`, a Lua frame, it is compiled with the rest. `through`
-- calls f as an argument (not a tail call), so it is f's caller while f runs: an error
-- raised at f's caller (`error(msg, 2)` in f) is positioned at this file's line, not at
-- the caller of the compiled function as in eager execution, and `reraise` below moves it
-- there.
local function identity(...) return ... end
local function through(f, ...) return identity(f(...)) end
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

-- The end of a call (not checked against eager): its results pass through as pcall
-- gave them, never packed into a table (a table per call, and the JIT compiles
-- neither the packing nor unpack).
local function ended(ok, ...)
  running = false
  finish(ok, ...)
  if not ok then reraise((...), 2) end   -- (ended is tail-called: level 2 is the caller's)
  return ...
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

-- dl.compile(f [, {name = ...}])
local function compile(f, opts)
  core.check_callable("compile", f)
  if opts ~= nil and type(opts) ~= "table" then
    core.raise("compile: expected a table of options, got " .. core.typename(opts))
  end
  local name = opts and opts.name or (type(f) == "function" and name_of(f) or "callable")
  if type(name) ~= "string" then core.raise("compile: name must be a string") end
  local check = opts and opts.check
  if check ~= nil and type(check) ~= "boolean" then core.raise("compile: check must be a boolean") end
  for k in pairs(opts or {}) do
    if k ~= "name" and k ~= "check" then core.raise("compile: unknown option " .. tostring(k)) end
  end
  local fid = C.dl_compile_new(name)
  if fid == 0 then core.raise_last() end
  local obj = ffi.gc(compiled_t(fid), C.dl_compile_release)
  local function cf(...)
    if not enabled then return f(...) end
    if C.dl_compile_active() ~= 0 then
      if running then return f(...) end   -- inside an enclosing compiled call: part of it
      C.dl_compile_abandon()   -- left in progress by an error that stopped its end
    end
    if C.dl_is_recording() ~= 0 then return f(...) end   -- eager under a gradient
    if C.dl_export_active() ~= 0 then return f(...) end  -- its ops go into an exported graph
    -- The collector is stepped here, as before an eager op allocates (Note [Stepping the
    -- collector] in lifetime.lua): the call's results are allocated when its steps run, and
    -- the garbage of the calls before (last call's results) is then freed and reused.
    if total[0] - mark[0] > budget[0] then collect() end
    local want, rng_before, rng_after
    if check then
      -- Eagerly first, then compiled from the same random state: both must agree.
      rng_before = dl.get_rng_state()
      want = pack(pcall(through, f, ...))
      rng_after = dl.get_rng_state()
      dl.set_rng_state(rng_before)
    end
    if C.dl_compile_begin(fid) ~= 0 then core.raise_last() end
    running = true
    if not check then return ended(pcall(through, f, ...)) end
    local rets = pack(pcall(through, f, ...))
    running = false
    finish(unpack(rets, 1, rets.n))
    if check then
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
    end
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
