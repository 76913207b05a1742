-- dlua.nn.utils: dl.nn.utils, PyTorch's torch.nn.utils for gradients as dlua makes them
-- (lists of tensors, or the {gradient, Variable} pairs of dl.implicit_grad).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, dl = T.is_tensor, T.dl
local type, tostring, ipairs, max, huge = type, tostring, ipairs, math.max, math.huge

local utils = {}

-- clip_grad_norm_(grads, max_norm [, norm_type = 2]): the norm of all gradients
-- together (norm_type a p >= 1, or math.huge for the largest magnitude), and when it
-- exceeds max_norm every gradient scaled in place by max_norm / (norm + 1e-6), as
-- PyTorch's. Returns the norm before clipping, a 0-dim tensor of the gradients' dtype.
function utils.clip_grad_norm_(grads, max_norm, norm_type)
  local op = "clip_grad_norm_"
  if type(grads) ~= "table" then bad_arg(op, "a list of gradients", grads) end
  if is_tensor(grads) then grads = { grads } end
  if type(max_norm) ~= "number" or max_norm < 0 then raise(op .. ": max_norm must be a number >= 0, got " .. tostring(max_norm)) end
  local p = norm_type == nil and 2 or norm_type
  if type(p) ~= "number" or (p < 1 and p ~= huge) then raise(op .. ": norm_type must be >= 1 or math.huge, got " .. tostring(p)) end
  local list = {}
  for i = 1, table.maxn(grads) do
    local g = grads[i]
    if type(g) == "table" and not is_tensor(g) then g = g[1] end
    if g ~= nil then
      if not is_tensor(g) then raise(op .. ": element " .. i .. " is a " .. type(g) .. ", expected a tensor") end
      list[#list + 1] = g
    end
  end
  if #list == 0 then return dl.tensor(0) end
  return dl.no_grad(function()
    local total
    if p == huge then
      local m = 0
      for _, g in ipairs(list) do m = max(m, g:abs():max():item()) end
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
    local coef = max_norm / (total:item() + 1e-6)
    if coef < 1 then
      for _, g in ipairs(list) do g:mul_(coef) end
    end
    return total
  end)
end

return utils
