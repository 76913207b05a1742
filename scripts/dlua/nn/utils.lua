-- dlua.nn.utils: dl.nn.utils, PyTorch's torch.nn.utils for gradients as dlua makes them
-- (lists of tensors, or the {gradient, Variable} pairs of dl.implicit_grad).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, dl = T.is_tensor, T.dl
local type, tostring, ipairs, select, huge = type, tostring, ipairs, select, math.huge

local utils = {}

-- The gradient of a sum or mean comes from the engine as an expanded view (one value
-- shared by every element, as torch.autograd.grad's), which an in-place op refuses: a
-- clip makes it dense first, in place (x:set_), so that every reference to it (the
-- list's, an optimizer's) sees the clipped values. (PyTorch clips p.grad, which its
-- accumulation made dense.)
local function dense(g)
  if T.overlapping(g) then g:set_(g:contiguous()) end
end

-- The gradients of `grads` (tensors, or {gradient, Variable} pairs; holes skipped) as a list.
local function gradient_list(op, grads)
  if type(grads) ~= "table" then bad_arg(op, "a list of gradients", grads) end
  if is_tensor(grads) then grads = { grads } end
  local list = {}
  for i = 1, table.maxn(grads) do
    local g = grads[i]
    if type(g) == "table" and not is_tensor(g) then g = g[1] end
    if g ~= nil then
      if not is_tensor(g) then raise(op .. ": element " .. i .. " is a " .. type(g) .. ", expected a tensor") end
      list[#list + 1] = g
    end
  end
  return list
end

-- clip_grad_norm_(grads, max_norm [, norm_type = 2] [, {error_if_nonfinite = false}]): the
-- norm of all gradients together (norm_type a p > 0, or math.huge for the largest
-- magnitude), and every gradient scaled in place by min(1, max_norm / (norm + 1e-6)), as
-- PyTorch's: by NaN when the norm is NaN, by 0 when it is infinite, unless
-- error_if_nonfinite makes those an error (the gradients left as they were). Returns the
-- norm before clipping, a 0-dim tensor of the gradients' dtype.
local CLIP_OPTS = { error_if_nonfinite = true }

function utils.clip_grad_norm_(grads, max_norm, norm_type, opts, ...)
  local op = "clip_grad_norm_"
  if type(norm_type) == "table" and opts == nil then norm_type, opts = nil, norm_type end
  if select("#", ...) > 0 then raise(op .. ": too many arguments (grads, max_norm [, norm_type] [, options])") end
  opts = core.options(op, opts, CLIP_OPTS)
  local list = gradient_list(op, grads)
  if type(max_norm) ~= "number" or not (max_norm >= 0) then raise(op .. ": max_norm must be a number >= 0, got " .. tostring(max_norm)) end
  local p = norm_type == nil and 2 or norm_type
  if type(p) ~= "number" or not (p > 0) then raise(op .. ": norm_type must be a number > 0 or math.huge, got " .. tostring(p)) end
  local strict = opts.error_if_nonfinite
  if strict ~= nil and type(strict) ~= "boolean" then
    raise(op .. ": error_if_nonfinite must be a boolean, got " .. tostring(strict))
  end
  if #list == 0 then return dl.tensor(0) end
  return dl.no_grad(function()
    local total
    if p == huge then
      local m = 0
      for _, g in ipairs(list) do
        local v = g:abs():max():item()
        if v ~= v or v > m then m = v end   -- a NaN stays (math.max would drop it)
        if m ~= m then break end
      end
      total = dl.tensor(m, { dtype = list[1].dtype })
    else
      -- (The square as a product: pow is libm's general routine per element, 2.7% of
      -- bench/'s char transformer step for this sum alone.)
      local acc = 0
      for _, g in ipairs(list) do
        local d = g:double()
        acc = acc + (p == 2 and d * d or d:abs():pow(p)):sum():item()
      end
      total = dl.tensor(acc ^ (1 / p), { dtype = list[1].dtype })
    end
    local t = total:item()
    if strict and (t ~= t or t == huge) then
      raise(op .. ": the total norm of order " .. tostring(p) .. " of the gradients is " .. tostring(t)
            .. ", so they cannot be clipped (error_if_nonfinite = false scales them by it anyway)")
    end
    local coef = max_norm / (t + 1e-6)
    if coef ~= coef or coef < 1 then
      -- (all made dense first: a 0-dim gradient and an expanded view of its memory would
      -- otherwise be scaled twice)
      for _, g in ipairs(list) do dense(g) end
      for _, g in ipairs(list) do g:mul_(coef) end
    end
    return total
  end)
end

-- clip_grad_value_(grads, v): every gradient clamped to [-v, v] in place.
function utils.clip_grad_value_(grads, v)
  local op = "clip_grad_value_"
  local list = gradient_list(op, grads)
  if type(v) ~= "number" or v < 0 then raise(op .. ": clip_value must be a number >= 0, got " .. tostring(v)) end
  dl.no_grad(function()
    for _, g in ipairs(list) do dense(g) end
    for _, g in ipairs(list) do g:clamp_(-v, v) end
  end)
end

-- parameters_to_vector(params): the parameters (a list, or a module's) flattened into one
-- 1-D tensor, in order; vector_to_parameters(vec, params) copies it back, in place.
local function parameter_list(op, params)
  if type(params) == "table" and type(params.parameters) == "function" and not is_tensor(params) then
    params = params:parameters()
  end
  if type(params) ~= "table" then bad_arg(op, "a list of parameters or a module", params) end
  for i, p in ipairs(params) do
    if not is_tensor(p) then raise(op .. ": element " .. i .. " is a " .. type(p) .. ", expected a tensor") end
  end
  return params
end

function utils.parameters_to_vector(params)
  local list = parameter_list("parameters_to_vector", params)
  local flat = {}
  for i, p in ipairs(list) do flat[i] = p:reshape(-1) end
  return dl.cat(flat, 1)
end

function utils.vector_to_parameters(vec, params)
  local op = "vector_to_parameters"
  if not is_tensor(vec) or vec:dim() ~= 1 then bad_arg(op, "a 1-D tensor", vec) end
  local list = parameter_list(op, params)
  local total = 0
  for _, p in ipairs(list) do total = total + p:numel() end
  if total ~= vec:numel() then
    raise(op .. ": the vector has " .. vec:numel() .. " elements for parameters of " .. total)
  end
  dl.no_grad(function()
    local at = 1
    for _, p in ipairs(list) do
      p:copy_(vec:narrow(1, at, p:numel()):view(p.shape))
      at = at + p:numel()
    end
  end)
end

-- utils.rnn: torch.nn.utils.rnn's padding and packing of sequences (dlua.nn.packing).
utils.rnn = require("dlua.nn.packing")

return utils
