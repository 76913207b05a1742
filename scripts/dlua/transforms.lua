-- dlua.transforms: function transforms built on dl.grad's engine (docs/autograd.md,
-- "Jacobians, Hessians and friends"), as JAX names them:
--
--   local y, back = dl.vjp(f, x, w)     -- back(dy) -> dx, dw: vector-Jacobian products
--   local y, dy = dl.jvp(f, { x }, { t })   -- the Jacobian times a tangent
--   dl.jacobian(f)(x)                  -- shape y.shape .. x.shape
--   dl.hessian(f)(x)                   -- the Jacobian of the gradient
--   dl.checkpoint(f, x, w)             -- f(x, w), recomputed in the backward pass
--
-- All of them compose with dl.grad and with each other, to any order: each runs on the
-- engine's recorded backward passes, which are themselves recorded when an outer
-- gradient is being taken.
local core = require("dlua.core")
local T = require("dlua.tensor")
local AG = require("dlua.autograd")
core.own_source()

local raise = core.raise
local is_tensor, dl = T.is_tensor, T.dl
local entries = core.entries
local type, select, ipairs, tostring, unpack, getmetatable =
  type, select, ipairs, tostring, unpack, getmetatable

local function pack(...) return { n = select("#", ...), ... } end

local callable = core.check_callable

-- Whether argument v is differentiated: numbers, float tensors and tables of them.
-- Other arguments (integer labels, strings, options) pass through unchanged and get no
-- gradient (nil).
local function differentiable(v)
  if type(v) == "number" then return true end
  if is_tensor(v) then return v:is_floating_point() end
  return type(v) == "table" and getmetatable(v) == nil
end

-- The function's outputs as a list of tensors, and whether it returned one tensor.
local function outputs_of(op, r)
  local y = r[1]
  if type(y) == "number" or is_tensor(y) then return { AG.result_tensor(op, y) }, true end
  if type(y) == "table" and #y > 0 then
    local list = {}
    for i, v in ipairs(y) do list[i] = AG.result_tensor(op, v) end
    return list, false
  end
  raise(op .. ": the function must return a tensor or a list of tensors, got " .. type(y))
end

-- The cotangents given to a vjp's back(), one per output, each of its output's shape.
local function cotangents(op, ct, ys, single)
  local list = single and { ct } or ct
  if type(list) ~= "table" or (not single and is_tensor(list)) then
    raise(op .. ": expected " .. (single and "a tensor" or ("a list of " .. #ys .. " tensors")) .. " of cotangents")
  end
  local out = {}
  for i, y in ipairs(ys) do
    local c = list[i]
    if type(c) == "number" then c = dl.full(y.shape, c, { dtype = y.dtype, device = y.device }) end
    if not is_tensor(c) then raise(op .. ": cotangent " .. i .. " is a " .. type(c) .. ", expected a tensor") end
    if T.shape_str(c.shape) ~= T.shape_str(y.shape) then
      raise(op .. ": cotangent " .. i .. " has shape " .. T.shape_str(c.shape) .. ", the output has "
            .. T.shape_str(y.shape))
    end
    out[i] = c
  end
  return out
end

-- dl.vjp(f, ...): f's result y, and back(dy), which returns the gradient of <dy, y>
-- with respect to each argument (dy: a tensor of y's shape, or a list for a list of
-- outputs). back may be called many times: the recorded graph is kept until back is
-- collected.
local function vjp(op, f, ...)
  callable(op, f)
  local args = pack(...)
  local trees, flat = {}, {}
  local tape = dl.GradientTape({ persistent = true })
  local r = pack(tape:record(function()
    for i = 1, args.n do
      if differentiable(args[i]) then
        args[i] = AG.watch_tree(op, args[i], flat, 0)
        trees[i] = args[i]
      end
    end
    return f(unpack(args, 1, args.n))
  end))
  local ys, single = outputs_of(op, r)
  local function back(ct)
    local cts = cotangents(op, ct, ys, single)
    local g = #flat > 0 and tape:gradient(ys, flat, cts) or {}
    local out = {}
    for i = 1, args.n do
      if trees[i] ~= nil then out[i] = AG.rebuild(trees[i], flat, g) end
    end
    return unpack(out, 1, args.n)
  end
  return single and ys[1] or ys, back
end

function dl.vjp(f, ...) return vjp("vjp", f, ...) end

-- dl.jvp(f, primals, tangents): f's result at the primals (a list of arguments) and its
-- Jacobian times the tangents (one per primal, of its shape): forward-mode derivatives
-- by the double-backward trick (the vjp is linear in its cotangent u, and the
-- derivative of <vjp(u), t> with respect to u is J t), as PyTorch's
-- autograd.functional.jvp; one forward and two backward passes.
function dl.jvp(f, primals, tangents)
  callable("jvp", f)
  if type(primals) ~= "table" or is_tensor(primals) then raise("jvp: primals must be a list of arguments") end
  if type(tangents) ~= "table" or is_tensor(tangents) then raise("jvp: tangents must be a list, one per primal") end
  local n = primals.n or #primals
  local y, back = vjp("jvp", f, unpack(primals, 1, n))
  local single = is_tensor(y)
  local ys = single and { y } or y
  local us = {}
  local tape = dl.GradientTape()
  for i, yi in ipairs(ys) do
    us[i] = dl.zeros(yi.shape, { dtype = yi.dtype, device = yi.device })
    tape:watch(us[i])
  end
  local s = tape:record(function()
    local gs = pack(back(single and us[1] or us))
    local total = nil
    for i = 1, n do
      local g, t = gs[i], tangents[i]
      if g ~= nil then
        if type(t) == "number" then t = dl.full(primals[i] ~= nil and is_tensor(primals[i]) and primals[i].shape or {}, t) end
        if not is_tensor(t) then raise("jvp: tangent " .. i .. " is a " .. type(t) .. ", expected a tensor") end
        if T.shape_str(t.shape) ~= T.shape_str(g.shape) then
          raise("jvp: tangent " .. i .. " has shape " .. T.shape_str(t.shape) .. ", its primal has " .. T.shape_str(g.shape))
        end
        local term = (g * t):sum()
        total = total and total + term or term
      end
    end
    if total == nil then raise("jvp: no primal is differentiable (numbers or float tensors)") end
    return total
  end)
  local jt = tape:gradient(s, us)
  if single then return y, jt[1] end
  return y, jt
end

-- dl.jacobian(f [, argnums]): a function that returns the Jacobian of f at its
-- arguments with respect to argument argnums (1), of shape y.shape followed by the
-- argument's shape: one backward pass per element of y, as PyTorch's
-- autograd.functional.jacobian. A list of argnums gives one block per argument; f of
-- several results (or a list of them) one per result, as torch's tuples:
--
--   one result, argnums k          J
--   one result, argnums {k, l}     Jk, Jl
--   results a, b (or {a, b})       Ja, Jb (or {Ja, Jb}); with argnums {k, l}, each is
--                                  the list {Jak, Jal}
local function jacobian(op, f, argnums, opts)
  callable(op, f)
  core.options(op, opts, {})
  local nums, multi = AG.argnum_list(op, argnums)
  return function(...)
    local args = pack(...)
    local picked = {}
    for i, k in ipairs(nums) do
      if k > args.n then raise(op .. ": argnum " .. k .. " out of range for " .. args.n .. " argument(s)") end
      local a = args[k]
      if type(a) == "number" then a = dl.tensor(a, { dtype = core.dtype_names[core.C.dl_default_dtype()] }) end
      if not is_tensor(a) or not differentiable(a) then
        raise(op .. ": argument " .. k .. " must be a float tensor or a number, got " .. (is_tensor(a) and a.dtype or type(a)))
      end
      picked[i] = a
    end
    local separate = false   -- f returned several results (not one tensor, not a list)
    local y, back = vjp(op, function(...)
      local xs = { ... }
      for i, k in ipairs(nums) do args[k] = xs[i] end
      local r = pack(f(unpack(args, 1, args.n)))
      if r.n <= 1 then return r[1] end
      separate = true
      for i = 1, r.n do
        if r[i] == nil then raise(op .. ": result " .. i .. " of the function is nil, expected a tensor") end
      end
      return { unpack(r, 1, r.n) }
    end, unpack(picked))
    local single = is_tensor(y)
    local ys = single and { y } or y
    local blocks = {}
    for o, yo in ipairs(ys) do
      local m = yo:numel()
      local rows = {}
      for i = 1, #nums do rows[i] = {} end
      local basis = m > 0 and dl.eye(m, { dtype = yo.dtype, device = yo.device }) or nil
      for e = 1, m do
        local cts = {}
        for q, yq in ipairs(ys) do cts[q] = q == o and basis[e]:reshape(yo.shape) or dl.zeros_like(yq) end
        local gs = pack(back(single and cts[1] or cts))
        for i = 1, #nums do rows[i][e] = (gs[i] or dl.zeros_like(picked[i])):reshape(-1) end
      end
      local out = {}
      for i, x in ipairs(picked) do
        local shape = {}
        for _, d in ipairs(yo.shape) do shape[#shape + 1] = d end
        for _, d in ipairs(x.shape) do shape[#shape + 1] = d end
        out[i] = (m == 0 and dl.zeros({ 0, x:numel() }, { dtype = yo.dtype }) or dl.stack(rows[i], 1)):reshape(shape)
      end
      blocks[o] = multi and out or out[1]
    end
    if single then
      if multi then return unpack(blocks[1], 1, #nums) end
      return blocks[1]
    end
    if separate then return unpack(blocks, 1, #ys) end
    return blocks
  end
end

function dl.jacobian(f, argnums, opts) return jacobian("jacobian", f, argnums, opts) end

-- dl.hessian(f [, argnums]): the Jacobian of dl.grad(f): for x of shape s, a tensor of
-- shape s .. s (f returns a single-element tensor). With argnums {k, l}, the blocks as
-- torch.autograd.functional.hessian nests them: {Hkk, Hkl}, {Hlk, Hll}.
function dl.hessian(f, argnums, opts)
  callable("hessian", f)
  core.options("hessian", opts, {})
  return jacobian("hessian", dl.grad(f, argnums), argnums)
end

-- The float tensors of v (an argument: plain tables are walked), each appended once to
-- list (index: a tensor's place in it).
local function collect(v, list, index, depth)
  if is_tensor(v) then
    if v:is_floating_point() and not index[v] then
      list[#list + 1] = v
      index[v] = #list
    end
  elseif type(v) == "table" and getmetatable(v) == nil then
    if depth > 32 then raise("checkpoint: argument tables nested too deeply") end
    for _, x in entries(v) do collect(x, list, index, depth + 1) end
  end
end

-- v with each tensor that collect() listed replaced by its counterpart in `by`.
local function substitute(v, index, by, depth)
  if is_tensor(v) then
    local i = index[v]
    if i then return by[i] end
    return v
  end
  if type(v) == "table" and getmetatable(v) == nil and depth <= 32 then
    local out = {}
    for k, x in entries(v) do out[k] = substitute(x, index, by, depth + 1) end
    return out
  end
  return v
end

-- dl.checkpoint(f, ...): f(...), without keeping f's intermediate values for the
-- backward pass: the backward pass runs f again (recorded) to get them, trading compute
-- for memory (activation checkpointing, as torch.utils.checkpoint). The random state is
-- restored for the rerun, so dropout draws the same mask. f may return several tensors.
--
-- Gradients reach what f differentiates through: the float tensors among its arguments
-- (in tables too), and the Variables it uses (a module's parameters), found by running
-- the forward recorded with a log of the Variables, its history then discarded. A
-- tensor with a history that f reads otherwise (a closure's) cannot be an input of the
-- node, and is an error (Note [What a custom node does not see] in autograd.lua).
function dl.checkpoint(f, ...)
  callable("checkpoint", f)
  if not dl.is_grad_enabled() then return f(...) end
  local args = pack(...)
  local inputs, index = {}, {}
  for i = 1, args.n do collect(args[i], inputs, index, 0) end
  AG.check_captured("checkpoint", f, inputs)
  local detached = {}
  for i, x in ipairs(inputs) do detached[i] = dl.detach(x) end
  local rng = dl.get_rng_state()
  local function call_with(by)
    local full = {}
    for i = 1, args.n do full[i] = substitute(args[i], index, by, 0) end
    return f(unpack(full, 1, args.n))
  end
  local r, used, stray = AG.call_forgetting(call_with, detached)
  if stray then
    raise("checkpoint: the function reads a tensor that needs a gradient and is neither an argument nor a "
          .. "Variable (from a closure?): it would get none; pass it as an argument")
  end
  local ins = {}
  for i, x in ipairs(inputs) do ins[i] = x end
  for _, v in ipairs(used) do
    if not index[v] then ins[#ins + 1] = v end
  end
  -- The results that carry gradients: float tensors (others pass through).
  local outs, at = {}, {}
  for i = 1, r.n do
    local y = r[i]
    if is_tensor(y) and y:is_floating_point() then
      outs[#outs + 1] = y
      at[#outs] = i
    elseif type(y) == "table" and getmetatable(y) == nil then
      raise("checkpoint: result " .. i .. " is a table; the function must return tensors (several as "
            .. "separate results)")
    end
  end
  if #outs == 0 then return unpack(r, 1, r.n) end
  local nin = #inputs
  local function back(...)
    local dys = pack(...)
    local now = dl.get_rng_state()
    dl.set_rng_state(rng)
    local flat = {}
    local tape = dl.GradientTape()
    local ok, rr = pcall(function()
      return pack(tape:record(function()
        for i, x in ipairs(inputs) do flat[i] = AG.watch_tree("checkpoint", x, {}, 0) end
        return call_with(flat)
      end))
    end)
    dl.set_rng_state(now)
    if not ok then error(rr, 0) end
    local ys, cts = {}, {}
    for j, i in ipairs(at) do
      if dys[j] ~= nil then
        local y = rr[i]
        if not is_tensor(y) then raise("checkpoint: result " .. i .. " of the rerun is a " .. type(y)) end
        ys[#ys + 1], cts[#cts + 1] = y, dys[j]
      end
    end
    local sources = {}
    for i = 1, nin do sources[i] = flat[i] end
    for i = nin + 1, #ins do sources[i] = ins[i] end
    if #ys == 0 then return {} end
    return tape:gradient(ys, sources, cts)
  end
  local ys = AG.custom_record("checkpoint", ins, outs, back)
  for j, i in ipairs(at) do r[i] = ys[j] end
  return unpack(r, 1, r.n)
end

return dl
