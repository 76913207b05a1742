-- dlua.statistics: summaries of a tensor's values, as PyTorch's (functions of dl and
-- methods, loaded when first used):
--
--   x:nansum([dim [, keepdim]]), x:nanmean(...)   sum and mean ignoring NaN
--   dl.var_mean(x [, dim [, keepdim]] [, {correction, unbiased}]), dl.std_mean(...)
--                                                 both at once (x:var's arguments)
--   x:aminmax([dim [, keepdim]] | {dim, keepdim}) the smallest and largest values
--   dl.bincount(x [, weights [, minlength]])      counts (or weight sums) of 1..max(x)
--   dl.histc(x [, bins = 100, min, max])          a histogram of bins equal widths
--   dl.cov(x [, {correction, fweights, aweights}]), dl.corrcoef(x)   rows are variables
--   dl.quantile(x, q [, dim [, keepdim [, interpolation = "linear"]]]), dl.nanquantile
--                                                 q a number or a vector in [0, 1]
--   x:renorm(p, dim, maxnorm)                     each slice along dim with a p-norm over
--                                                 maxnorm scaled down to it
--
-- dlua's counts are 1-based as its indices: bincount's slot i counts the value i (values
-- from 1; PyTorch counts 0..max).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise = core.raise
local shape_str, methods, dl = T.shape_str, T.methods, T.dl
local type, tostring, ipairs, next, floor = type, tostring, ipairs, next, math.floor

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

-- dl.var_mean(x [, dim | {dims}] [, keepdim] [, {correction, unbiased}]): x:var's
-- arguments (keepdim also as an option, as torch's keyword).
local MEAN_OPTS = { correction = true, unbiased = true, keepdim = true }
local function with_mean(op, spread)
  return function(x, dim, keepdim, opts)
    check(op, x)
    if type(dim) == "table" and dim[1] == nil and next(dim) ~= nil then   -- (x, opts)
      if keepdim ~= nil or opts ~= nil then raise(op .. ": unexpected arguments after the options") end
      dim, opts = nil, dim
    elseif type(keepdim) == "table" then
      if opts ~= nil then raise(op .. ": unexpected arguments after the options") end
      keepdim, opts = nil, keepdim
    end
    opts = core.options(op, opts, MEAN_OPTS)
    if opts.keepdim ~= nil then
      if keepdim ~= nil and keepdim ~= opts.keepdim then raise(op .. ": keepdim given twice, differently") end
      keepdim = opts.keepdim
    end
    if keepdim ~= nil and type(keepdim) ~= "boolean" then core.bad_arg(op, "keepdim (a boolean)", keepdim) end
    local n = math.max(x:dim(), 1)
    if type(dim) == "number" then
      core.positive_dim(op, dim, n, x:dim())
    elseif type(dim) == "table" then
      for _, d in ipairs(dim) do core.positive_dim(op, d, n, x:dim()) end
    elseif dim ~= nil then
      core.bad_arg(op, "a dimension or a table of dims", dim)
    end
    keepdim = keepdim or false
    return x[spread](x, dim, keepdim, { correction = opts.correction, unbiased = opts.unbiased }), x:mean(dim, keepdim)
  end
end
dl.var_mean, dl.std_mean = with_mean("var_mean", "var"), with_mean("std_mean", "std")
methods.var_mean, methods.std_mean = dl.var_mean, dl.std_mean

-- x:aminmax([dim [, keepdim]]) or x:aminmax({dim =, keepdim =}) (torch's keywords).
function methods.aminmax(x, dim, keepdim)
  local op = "aminmax"
  check(op, x)
  if type(dim) == "table" then
    if keepdim ~= nil then raise(op .. ": unexpected arguments after the options") end
    local opts = core.options(op, dim, { dim = true, keepdim = true })
    dim, keepdim = opts.dim, opts.keepdim
  end
  if keepdim ~= nil and type(keepdim) ~= "boolean" then core.bad_arg(op, "keepdim (a boolean)", keepdim) end
  if dim == nil then
    if x:numel() == 0 then raise(op .. ": cannot take the smallest and largest of an empty tensor") end
    if not keepdim then return x:amin(), x:amax() end
    local all = {}
    for d = 1, x:dim() do all[d] = d end
    return x:amin(all, true), x:amax(all, true)
  end
  if not core.integer(dim) then core.bad_arg(op, "a dimension (an integer)", dim) end
  local d = core.positive_dim(op, dim, math.max(x:dim(), 1), x:dim())
  if x:dim() > 0 and x:size(d) == 0 then raise(op .. ": cannot reduce over dimension " .. dim .. " of size 0") end
  return x:amin(dim, keepdim or false), x:amax(dim, keepdim or false)
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
  -- (min == max, whatever their value: the data's range, as PyTorch's)
  if lo == hi and flat:numel() > 0 then lo, hi = flat:min():item(), flat:max():item() end
  if not (lo > -math.huge and lo < math.huge and hi > -math.huge and hi < math.huge) then
    raise(op .. ": the range [" .. lo .. ", " .. hi .. "] is not finite (give min and max to leave out NaN and inf)")
  end
  if lo == hi then lo, hi = lo - 1, hi + 1 end
  if lo > hi then raise(op .. ": max (" .. hi .. ") is below min (" .. lo .. ")") end
  local inside = flat:ge(lo):logical_and(flat:le(hi))
  -- bin of v: floor((v - lo) bins / (hi - lo)), the top edge in the last bin (PyTorch's)
  local b = ((flat - lo) * bins / (hi - lo)):floor():clamp(0, bins - 1):long() + 1
  local counts = dl.zeros(bins + 1, { dtype = x.dtype, device = x.device })
    :scatter_add(1, dl.where(inside, b, bins + 1), dl.ones(flat:numel(), { dtype = x.dtype, device = x.device }))
  return counts:narrow(1, 1, bins)
end

-- ---- covariance and quantiles ---------------------------------------------------------------

local COV_OPTS = { correction = true, fweights = true, aweights = true }

-- cov(x [, {correction = 1, fweights, aweights}]): rows of x are variables, columns
-- observations (a vector: one variable); PyTorch's weighted form.
function dl.cov(x, opts)
  local op = "cov"
  check(op, x)
  opts = core.options(op, opts, COV_OPTS)
  if x:dim() > 2 then raise(op .. ": expected a vector or a matrix, got shape " .. shape_str(x.shape)) end
  local m = x:dim() < 2 and x:reshape(1, -1) or x
  m = T.floating(m)
  local n = m:size(2)
  local corr = opts.correction == nil and 1 or opts.correction
  if type(corr) ~= "number" then raise(op .. ": correction must be a number, got " .. tostring(corr)) end
  local w = nil
  for _, key in ipairs({ "fweights", "aweights" }) do
    local v = opts[key]
    if v ~= nil then
      check(op, v)
      if v:dim() ~= 1 or v:size(1) ~= n then
        raise(op .. ": " .. key .. " must be a vector of " .. n .. " (one per observation), got shape "
              .. shape_str(v.shape))
      end
      if key == "fweights" and v:is_floating_point() then raise(op .. ": fweights must be integers") end
      if v:lt(0):any() then raise(op .. ": " .. key .. " must not be negative") end
      v = v:to(m.dtype)
      w = w and w * v or v
    end
  end
  local wsum = w and w:sum() or n
  local avg = w and (m * w):sum(2, true) / wsum or m:mean(2, true)
  local norm
  if opts.aweights ~= nil then
    norm = wsum - (w * opts.aweights:to(m.dtype)):sum() * corr / wsum
  else
    norm = wsum - corr
  end
  local xm = m - avg
  local c = (w and xm * w or xm):matmul(xm:t())
  if type(norm) == "number" then
    c = c / math.max(norm, 0)
  else
    c = c / norm:clamp(0)
  end
  if x:dim() < 2 or m:size(1) == 1 then return c:reshape({}) end
  return c
end

function dl.corrcoef(x)
  local op = "corrcoef"
  check(op, x)
  local c = dl.cov(x)
  if c:dim() == 0 then return c / c end
  local sd = c:diagonal():sqrt()
  return (c / sd:unsqueeze(2) / sd:unsqueeze(1)):clamp(-1, 1)
end

local QUANTILE_MODES = { linear = true, lower = true, higher = true, midpoint = true, nearest = true }

-- The q-th quantiles of x along dim (all of x without one), interpolated between the
-- sorted values as PyTorch's; `skip_nan`: nanquantile, over each slice's values that are
-- not NaN (else a slice with a NaN has NaN quantiles).
local function quantile(op, x, q, dim, keepdim, interpolation, skip_nan)
  check(op, x)
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
  interpolation = interpolation or "linear"
  if not QUANTILE_MODES[interpolation] then
    raise(op .. ": interpolation must be linear, lower, higher, midpoint or nearest, got " .. tostring(interpolation))
  end
  local qs, scalar_q = q, type(q) == "number"
  if scalar_q then
    qs = dl.tensor({ q }, { dtype = x.dtype, device = x.device })
  elseif T.is_tensor(q) and q:dim() <= 1 then
    scalar_q = q:dim() == 0
    qs = q:reshape(-1):to(x.dtype)
  else
    core.bad_arg(op, "a number or a 0-dim or 1-dim tensor of quantiles", q)
  end
  if qs:numel() > 0 and (qs:lt(0):any() or qs:gt(1):any() or qs:ne(qs):any()) then
    raise(op .. ": q must lie in [0, 1]")
  end
  local v, d
  if dim == nil then
    v, d = x:reshape(-1), 1
  else
    d = core.positive_dim(op, dim, x:dim())
    v = x
  end
  local n = v:size(d)
  if n == 0 then raise(op .. ": cannot take quantiles of an empty dim") end
  v = v:movedim(d, -1)                            -- (..., n)
  local sorted = v:sort(-1)                       -- NaN last
  local nan = sorted:ne(sorted)
  -- ranks (..., #q): q (count - 1), 0-based, count the values of a slice that count
  local count = skip_nan and nan:logical_not():sum(-1, true):to(x.dtype) or nil
  local ranks = count and (count - 1):clamp(0) * qs or qs * (n - 1)
  if interpolation == "lower" then ranks = ranks:floor()
  elseif interpolation == "higher" then ranks = ranks:ceil()
  elseif interpolation == "nearest" then ranks = ranks:round() end
  if not skip_nan then   -- a slice with a NaN: its last (NaN) value
    ranks = dl.where(nan:any(-1, true), n - 1, ranks)
  else                   -- a slice of NaN only: NaN (its last value)
    ranks = dl.where(count:eq(0), n - 1, ranks)
  end
  local below = ranks:floor():long()
  local y = sorted:gather(-1, below + 1)
  if interpolation == "linear" or interpolation == "midpoint" then
    local above = ranks:ceil():long()
    local w = interpolation == "midpoint" and 0.5 or (ranks - below:to(x.dtype))
    y = dl.lerp(y, sorted:gather(-1, above + 1), w)
  end
  -- (..., #q) -> (#q, ...) with dim kept as 1 or dropped
  y = y:movedim(-1, 1)
  if keepdim then
    if dim == nil then
      local shape = { qs:numel() }
      for i = 1, x:dim() do shape[i + 1] = 1 end
      y = y:reshape(shape)
    else
      y = y:unsqueeze(d + 1)
    end
  end
  if scalar_q then y = y:squeeze(1) end
  return y
end

function dl.quantile(x, q, dim, keepdim, interpolation)
  return quantile("quantile", x, q, dim, keepdim, interpolation, false)
end
function dl.nanquantile(x, q, dim, keepdim, interpolation)
  return quantile("nanquantile", x, q, dim, keepdim, interpolation, true)
end
methods.quantile, methods.nanquantile, methods.cov, methods.corrcoef = dl.quantile, dl.nanquantile, dl.cov, dl.corrcoef


-- x:renorm(p, dim, maxnorm): as PyTorch's: each slice x[..., i, ...] along dim whose
-- p-norm (over the slice's elements) exceeds maxnorm is scaled by maxnorm / (norm + 1e-7);
-- the others are kept. The scale is differentiated through, as PyTorch's.
function methods.renorm(x, p, dim, maxnorm)
  local op = "renorm"
  check(op, x)
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
  if type(p) ~= "number" or not (p > 0) then raise(op .. ": p must be a number > 0, got " .. tostring(p)) end
  if type(maxnorm) ~= "number" or not (maxnorm >= 0) then
    raise(op .. ": maxnorm must be a number >= 0, got " .. tostring(maxnorm))
  end
  if x:dim() < 2 then raise(op .. ": expected a tensor of at least 2 dims, got " .. x:dim()) end
  local d = core.positive_dim(op, dim, x:dim())
  local others = {}
  for k = 1, x:dim() do if k ~= d then others[#others + 1] = k end end
  local norm = x:norm(others, true, { p = p })
  return x * dl.where(norm:gt(maxnorm), maxnorm / (norm + 1e-7), 1)
end
dl.renorm = methods.renorm

return {}
