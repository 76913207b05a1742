-- dlua.statistics: summaries of a tensor's values, as PyTorch's (functions of dl and
-- methods, loaded when first used):
--
--   x:nansum([dim [, keepdim]]), x:nanmean(...)   sum and mean ignoring NaN
--   dl.var_mean(x [, dim [, {unbiased = true, keepdim}]]), dl.std_mean(...)   both at once
--   x:aminmax([dim [, keepdim]])                  the smallest and largest values
--   dl.bincount(x [, weights [, minlength]])      counts (or weight sums) of 1..max(x)
--   dl.histc(x [, bins = 100, min, max])          a histogram of bins equal widths
--
-- dlua's counts are 1-based as its indices: bincount's slot i counts the value i (values
-- from 1; PyTorch counts 0..max).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise = core.raise
local shape_str, methods, dl = T.shape_str, T.methods, T.dl
local type, tostring, floor = type, tostring, math.floor

local check = T.check_tensor   -- (op, x): an error naming op unless x is a tensor

-- x with NaN replaced by 0, and (for the mean) the count of the others.
local function without_nan(x)
  if not x:is_floating_point() then return x, nil end
  local nan = x:ne(x)
  return dl.where(nan, 0, x), nan:logical_not()
end

function methods.nansum(x, dim, keepdim)
  check("nansum", x)
  local y = without_nan(x)
  if dim == nil then return y:sum() end
  return y:sum(dim, keepdim)
end

function methods.nanmean(x, dim, keepdim)
  check("nanmean", x)
  if not x:is_floating_point() then raise("nanmean: expected a floating-point tensor, got " .. x.dtype) end
  local y, kept = without_nan(x)
  if dim == nil then return y:sum() / kept:sum():to(x.dtype) end
  return y:sum(dim, keepdim) / kept:sum(dim, keepdim):to(x.dtype)
end
dl.nansum, dl.nanmean = methods.nansum, methods.nanmean

local function with_mean(op, spread)
  return function(x, dim, opts)
    check(op, x)
    if type(dim) == "table" then dim, opts = nil, dim end
    opts = core.options(op, opts, { unbiased = true, keepdim = true })
    local keep = opts.keepdim and true or false
    local o = { unbiased = opts.unbiased }
    if dim == nil then return x[spread](x, o), x:mean() end
    return x[spread](x, dim, keep, o), x:mean(dim, keep)
  end
end
dl.var_mean, dl.std_mean = with_mean("var_mean", "var"), with_mean("std_mean", "std")

function methods.aminmax(x, dim, keepdim)
  check("aminmax", x)
  if dim == nil then return x:amin(), x:amax() end
  return x:amin(dim, keepdim), x:amax(dim, keepdim)
end
dl.aminmax = methods.aminmax

function dl.bincount(x, weights, minlength)
  local op = "bincount"
  check(op, x)
  if type(weights) == "number" then weights, minlength = nil, weights end
  if x:dim() ~= 1 or x:is_floating_point() or x.dtype == "bool" then
    raise(op .. ": expected a 1-D tensor of integers, got " .. x.dtype .. " of shape " .. shape_str(x.shape))
  end
  minlength = minlength or 0
  if not core.integer(minlength) or minlength < 0 then
    raise(op .. ": minlength must be an integer >= 0, got " .. tostring(minlength))
  end
  local n = minlength
  if x:numel() > 0 then
    if x:min():item() < 1 then raise(op .. ": values must be 1 or more (dlua counts from 1)") end
    n = math.max(n, x:max():item())
  end
  local w = weights
  if w ~= nil then
    check(op, w)
    if w:dim() ~= 1 or w:numel() ~= x:numel() then
      raise(op .. ": weights must be 1-D with one per value, got shape " .. shape_str(w.shape))
    end
    if not w:is_floating_point() then w = w:double() end
  end
  local out = dl.zeros(n, { dtype = w and w.dtype or "int64", device = x.device })
  if x:numel() == 0 then return out end
  return out:scatter_add(1, x:long(), w or dl.ones(x:numel(), { dtype = "int64", device = x.device }))
end

function dl.histc(x, bins, lo, hi)
  local op = "histc"
  check(op, x)
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
  bins = bins or 100
  if not core.integer(bins) or bins < 1 then
    raise(op .. ": bins must be an integer >= 1, got " .. tostring(bins))
  end
  lo, hi = lo or 0, hi or 0
  local flat = x:reshape(-1)
  if lo == 0 and hi == 0 and flat:numel() > 0 then lo, hi = flat:min():item(), flat:max():item() end
  if lo == hi then lo, hi = lo - 1, hi + 1 end
  if lo > hi then raise(op .. ": max (" .. hi .. ") is below min (" .. lo .. ")") end
  local inside = flat:ge(lo):logical_and(flat:le(hi))
  -- bin of v: floor((v - lo) bins / (hi - lo)), the top edge in the last bin (PyTorch's)
  local b = ((flat - lo) * bins / (hi - lo)):floor():clamp(0, bins - 1):long() + 1
  local counts = dl.zeros(bins + 1, { dtype = x.dtype, device = x.device })
    :scatter_add(1, dl.where(inside, b, bins + 1), dl.ones(flat:numel(), { dtype = x.dtype, device = x.device }))
  return counts:narrow(1, 1, bins)
end

return {}
