-- dlua.sampling: drawing from distributions given as tensors, as PyTorch's (functions of
-- dl and methods, loaded when first used); they draw from the engine's generator, so
-- dl.manual_seed(n) repeats them:
--
--   dl.bernoulli(p)                -- 1 with probability p, else 0 (p's dtype and shape)
--   dl.multinomial(probs, n [, {replacement = false}])
--                                  -- n category numbers (1-based, int64) per row of
--                                  -- probs (1-D or 2-D, weights that need not sum to 1)
--
-- With replacement, each draw finds a uniform number's place in the running sums of the
-- row (searchsorted); without, the n largest of log p - log(-log u) are taken (the Gumbel
-- top-k, which draws in the same proportions as one category after another).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local is_tensor, methods, dl = T.is_tensor, T.methods, T.dl
local type, tostring, select, floor = type, tostring, select, math.floor

local function check(op, p)
  if not is_tensor(p) then bad_arg(op, "a tensor of probabilities", p) end
  if not p:is_floating_point() then raise(op .. ": expected floating-point probabilities, got " .. p.dtype) end
end

function dl.bernoulli(p)
  check("bernoulli", p)
  -- (NaN is neither >= 0 nor <= 1)
  if p:numel() > 0 and not p:ge(0):logical_and(p:le(1)):all() then
    raise("bernoulli: probabilities must lie in [0, 1], got a value outside or NaN")
  end
  return dl.rand_like(p):lt(p):to(p.dtype)
end
methods.bernoulli = dl.bernoulli

function dl.multinomial(probs, n, opts)
  local op = "multinomial"
  check(op, probs)
  opts = options(op, opts, { replacement = true })
  if not core.integer(n) or n < 1 then
    raise(op .. ": the number of samples must be an integer >= 1, got " .. tostring(n))
  end
  local nd = probs:dim()
  if nd ~= 1 and nd ~= 2 then raise(op .. ": expected probabilities of 1 or 2 dims, got shape " .. T.shape_str(probs.shape)) end
  local p = nd == 1 and probs:unsqueeze(1) or probs
  local rows, cats = p:size(1), p:size(2)
  if cats == 0 then raise(op .. ": there are no categories to draw from") end
  if not opts.replacement and n > cats then
    raise(op .. ": cannot draw " .. n .. " samples from " .. cats .. " categories without replacement")
  end
  if rows == 0 then return dl.zeros(0, n, { dtype = "int64", device = p.device }) end
  if not p:ge(0):logical_and(p:lt(math.huge)):all() then
    raise(op .. ": probabilities must not be negative, infinite or NaN")
  end
  local nonzero = p:gt(0):sum(2)
  if nonzero:min():item() == 0 then raise(op .. ": a row of probabilities sums to 0") end
  local out
  p = dl.no_grad(function() return p:double() end)
  if opts.replacement then
    local cdf = p:cumsum(2)
    local u = dl.rand(rows, n, { dtype = "float64", device = p.device }) * cdf:narrow(2, cats, 1)
    out = dl.searchsorted(cdf, u, { right = true }):clamp(nil, cats)
  else
    if nonzero:min():item() < n then
      raise(op .. ": a row has fewer than " .. n .. " categories of nonzero probability to draw without replacement")
    end
    local u = dl.rand(rows, cats, { dtype = "float64", device = p.device }):clamp(1e-300)
    local _, idx = (p:log() - (-u:log()):log()):topk(n, 2)
    out = idx
  end
  out = out:long()
  return nd == 1 and out:squeeze(1) or out
end
methods.multinomial = dl.multinomial

-- dl.normal(mean, std [, shape... | {shape}] [, opts]): draws of N(mean, std^2), as
-- torch.normal: mean and std tensors (broadcast; no shape then), or numbers, when the
-- shape (as dl.randn's, with its dtype and device options) gives the size.
function dl.normal(mean, std, ...)
  local op = "normal"
  local like = is_tensor(mean) and mean or is_tensor(std) and std or nil
  if like == nil then
    if type(mean) ~= "number" or type(std) ~= "number" then bad_arg(op, "tensors or numbers for mean and std", mean) end
    if not (std >= 0) then raise(op .. ": std must be >= 0, got " .. tostring(std)) end
    if select("#", ...) == 0 or ... == nil then raise(op .. ": give a shape when mean and std are numbers") end
    local _, opts = T.parse_shape(op, true, ...)   -- (checked here, for errors that name normal)
    T.parse_opts(op, opts)
    return dl.randn(...) * std + mean
  end
  if (...) ~= nil then raise(op .. ": the shape comes from mean and std when one is a tensor: give no shape") end
  if type(std) == "number" and not (std >= 0) then raise(op .. ": std must be >= 0, got " .. tostring(std)) end
  if is_tensor(std) and std:numel() > 0 and not std:ge(0):all() then
    raise(op .. ": std must be >= 0 (every element, not NaN)")
  end
  local shape_of = is_tensor(mean) and is_tensor(std) and (mean + std) or like
  return dl.randn(shape_of.shape, { dtype = like.dtype, device = like.device }) * std + mean
end

return {}
