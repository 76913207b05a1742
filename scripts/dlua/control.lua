-- dl.cond and dl.while_loop: control flow on tensor values that dl.export can capture
-- (docs/export.md, "Control flow"). Eagerly they are a Lua `if` and a Lua `while`; under
-- dl.grad they record what ran, as any Lua code does.
--
--   local y = dl.cond(x:sum():gt(0), function(x) return x * 2 end, function(x) return -x end, x)
--   local i, acc = dl.while_loop(function(i, acc) return i:lt(10) end,
--                                function(i, acc) return i + 1, acc * 2 end, { i0, acc0 })
--
-- While dl.export captures, dl.cond runs both branches and selects with dl.where (both
-- must give tensors of one dtype and shape), and dl.while_loop captures
-- its condition and body once each as graphs of their own, then runs the loop eagerly
-- for the values that follow (Note [Loops] in export/capture.cpp).
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local C, raise, raise_last = core.C, core.raise, core.raise_last
local dl, is_tensor, hid = T.dl, T.is_tensor, T.hid
local type, select, pcall, error, unpack = type, select, pcall, error, unpack or table.unpack

local function pack(...) return { n = select("#", ...), ... } end

local callable = core.check_callable

-- A predicate's truth: a Lua boolean, or a tensor of one element (nonzero is true).
local function truth(op, p)
  if type(p) == "boolean" then return p end
  if not is_tensor(p) then raise(op .. ": expected a boolean or a one-element tensor, got " .. core.typename(p)) end
  if p:numel() ~= 1 then raise(op .. ": expected a one-element tensor, got " .. p:numel() .. " elements") end
  local v = p:item()   -- a bool tensor's item is a Lua boolean
  if type(v) == "boolean" then return v end
  return v ~= 0
end

local function capturing() return C.dl_export_active() ~= 0 end

-- Note [A gradient through both branches]
-- Exported, dl.cond runs both branches and selects, so a gradient of it flows back through
-- the branch not taken too, with a zero cotangent; where that branch's own derivative is
-- not finite there (sqrt of a negative value, log of 0), 0 times it is NaN, and eagerly,
-- with one branch run, the gradient was finite (JAX's select has the same trap). So an
-- argument that carries a gradient enters each branch as dl.where(p, x, stop_gradient(x))
-- (the other way round for else_fn): the same values, and the gradient the branch not
-- taken sends back is dropped by the where before it reaches x. Only tensors passed as
-- arguments themselves are guarded, not those inside a table passed, nor those a branch
-- reads from its closure: pass them as arguments.
local function guarded(p, args, taken_when_true)
  local out = { n = args.n }
  for i = 1, args.n do
    local v = args[i]
    if is_tensor(v) and v:requires_grad() then
      local kept = dl.stop_gradient(v)
      out[i] = taken_when_true and dl.where(p, v, kept) or dl.where(p, kept, v)
    else
      out[i] = v
    end
  end
  return unpack(out, 1, out.n)
end

-- dl.cond(pred, then_fn, else_fn, ...): then_fn(...) when pred holds, else else_fn(...).
function dl.cond(pred, then_fn, else_fn, ...)
  callable("cond", then_fn, "the then branch")
  callable("cond", else_fn, "the else branch")
  if not (capturing() and is_tensor(pred)) then
    if truth("cond", pred) then return then_fn(...) end
    return else_fn(...)
  end
  -- Both branches into the graph; the predicate selects.
  if pred:numel() ~= 1 then raise("cond: expected a one-element tensor, got " .. pred:numel() .. " elements") end
  -- (as a 0-dim tensor: a one-element predicate of shape (1) must not give its shape to
  -- what it selects, which eagerly is a branch's result as it is)
  local p = (pred.dtype == "bool" and pred or pred:ne(0)):reshape({})
  local args = pack(...)
  local a, b = pack(then_fn(guarded(p, args, true))), pack(else_fn(guarded(p, args, false)))
  if a.n ~= b.n then raise("cond: the branches give " .. a.n .. " and " .. b.n .. " results") end
  local out = {}
  for i = 1, a.n do
    if not (is_tensor(a[i]) and is_tensor(b[i])) then
      raise("cond: result " .. i .. " of a branch is not a tensor (a graph selects between tensors)")
    end
    local as, bs = a[i].shape, b[i].shape
    local same = a[i].dtype == b[i].dtype and #as == #bs
    for d = 1, #as do same = same and as[d] == bs[d] end
    if not same then
      raise("cond: result " .. i .. " is " .. a[i].dtype .. " (" .. table.concat(as, ", ") .. ") in one branch and " ..
            b[i].dtype .. " (" .. table.concat(bs, ", ") .. ") in the other; a graph's branches give alike")
    end
    out[i] = dl.where(p, a[i], b[i])
  end
  return unpack(out, 1, a.n)
end

local function state_of(op, state)
  if type(state) ~= "table" or #state == 0 then raise(op .. ": expected a list of state tensors") end
  for i = 1, #state do
    if not is_tensor(state[i]) then raise(op .. ": state " .. i .. " is a " .. core.typename(state[i]) .. ", not a tensor") end
  end
  return state
end

local function same_kind(s, r)
  if r.n ~= #s then raise("while_loop: the body gives " .. r.n .. " values for a state of " .. #s) end
  for i = 1, #s do
    local a, b = s[i], r[i]
    if not is_tensor(b) then raise("while_loop: the body's value " .. i .. " is a " .. core.typename(b) .. ", not a tensor") end
    local as, bs = a.shape, b.shape
    local same = a.dtype == b.dtype and #as == #bs
    for d = 1, #as do same = same and as[d] == bs[d] end
    if not same then
      raise("while_loop: the body changed state " .. i .. " from " .. a.dtype .. " (" .. table.concat(as, ", ") ..
            ") to " .. b.dtype .. " (" .. table.concat(bs, ", ") .. "); a loop's state keeps its dtype and shape")
    end
  end
end

local function run_loop(cond_fn, body_fn, s)
  while truth("while_loop", cond_fn(unpack(s))) do
    local r = pack(body_fn(unpack(s)))
    same_kind(s, r)
    s = r
  end
  return s
end

local function ids_of(list)
  local a = ffi.new("uint64_t[?]", #list + 1)
  for i = 1, #list do a[i - 1] = hid(list[i]) end
  return a
end

-- Copies of a list of tensors, as handles (made while the capture is paused: promoted
-- later, an inline value would become a constant of the capture).
local function copies_of(list)
  local out = {}
  for i = 1, #list do
    out[i] = list[i]:clone()
    hid(out[i])
  end
  return out
end

-- One of the loop's functions captured as a graph on the state; `want` results. The
-- graph's inputs are copies of the state (made unobserved), so that a state value that is
-- also read from outside (the loop started from an argument it reads) stays two values.
local function capture_graph(f, state, want)
  if C.dl_export_pause(1) ~= 0 then raise_last() end
  local ok, copies = pcall(copies_of, state)
  C.dl_export_pause(0)
  if not ok then error(copies, 0) end
  state = copies
  if C.dl_export_sub_begin(ids_of(state), #state) ~= 0 then raise_last() end
  local r = pack(pcall(f, unpack(state)))
  local why = not r[1] and r[2] or nil
  if not why and r.n - 1 ~= want then
    why = "while_loop: " .. (want == 1 and "the condition" or "the body") .. " gives " .. (r.n - 1) ..
          " values, not " .. want
  end
  for i = 2, why and 0 or r.n do
    if not is_tensor(r[i]) then
      why = "while_loop: a graph's value " .. (i - 1) .. " is a " .. core.typename(r[i]) .. ", not a tensor"
      break
    end
    if C.dl_export_sub_output(hid(r[i])) ~= 0 then
      why = ffi.string(C.dl_last_error())
      break
    end
  end
  if C.dl_export_sub_end() ~= 0 and not why then why = ffi.string(C.dl_last_error()) end
  if why then error(why, 0) end
end

-- dl.while_loop(cond_fn, body_fn, state): while cond_fn(state...) holds, state =
-- body_fn(state...); returns the final state's values.
function dl.while_loop(cond_fn, body_fn, state)
  callable("while_loop", cond_fn, "the condition")
  callable("while_loop", body_fn, "the body")
  state_of("while_loop", state)
  local s = {}
  for i = 1, #state do s[i] = state[i] end
  if not capturing() then return unpack(run_loop(cond_fn, body_fn, s), 1, #s) end
  capture_graph(cond_fn, s, 1)
  capture_graph(body_fn, s, #s)
  if C.dl_export_pause(1) ~= 0 then raise_last() end
  -- The final state as copies: after no iteration it would be the initial state itself,
  -- or a value from outside the body returned as state, which the capture already knows.
  local ok, final = pcall(function() return copies_of(run_loop(cond_fn, body_fn, s)) end)
  C.dl_export_pause(0)
  if not ok then error(final, 0) end
  if C.dl_export_loop(ids_of(s), ids_of(final), #s) ~= 0 then raise_last() end
  return unpack(final, 1, #s)
end

return dl
