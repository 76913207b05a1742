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
local ffi = require("ffi")

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

-- ---- in-place fills ---------------------------------------------------------------------------
--
--   x:random_([from,] to)          integers from <= k < to (as values, not indices: torch's
--                                  range; bounds within x's dtype, and int64's drawn
--                                  exactly past 2^53); without bounds, 0 to 2^mantissa
--                                  (floats) or the dtype's top (integers)
--   x:exponential_([lambd = 1]), x:geometric_(p), x:cauchy_([median = 0, sigma = 1]),
--   x:log_normal_([mean = 1, std = 2]), x:bernoulli_([p = 0.5, a number or a tensor])
-- Each draws uniform numbers (float64) from the engine's generator and transforms them;
-- the fill is not recorded for gradients (as torch's).

local function target(op, x)
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
  return x
end
local function float_target(op, x)
  target(op, x)
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
  return x
end
local function uniform(x) return dl.rand(x.shape, { dtype = "float64", device = x.device }) end
local function fill(op, x, v)
  dl.no_grad(function() T.write_into(op, x, v) end)
  return x
end
local function number(op, name, v, default)
  if v == nil then return default end
  if type(v) ~= "number" then bad_arg(op, name .. " (a number)", v) end
  return v
end

-- random_'s default top (inclusive), and the range its bounds must lie in (torch's check:
-- from and to - 1 are values of the dtype). int64's top 2^63 - 1 is 2^63 as a double.
local TOP = { float32 = 2 ^ 24, float64 = 2 ^ 53, float16 = 2 ^ 11, bfloat16 = 2 ^ 8, bool = 1, uint8 = 255, int8 = 127,
              int16 = 32767, int32 = 2147483647, int64 = 2 ^ 63 }
local F16, BF16, F32, F64 = 65504, 3.3895313892515355e38, 3.4028234663852886e38, 1.7976931348623157e308
local RANGE = { float16 = { -F16, F16 }, bfloat16 = { -BF16, BF16 }, float32 = { -F32, F32 }, float64 = { -F64, F64 },
                bool = { 0, 1 }, uint8 = { 0, 255 }, int8 = { -128, 127 }, int16 = { -32768, 32767 },
                int32 = { -2147483648, 2147483647 }, int64 = { -2 ^ 63, 2 ^ 63 } }
local MAX_ROUNDS = 1000

-- v (a whole number, or a uint64 below 2^63) as a 0-d int64 tensor, exactly
local function exact(v, device)
  if type(v) == "number" then return dl.full({}, v, { dtype = "int64", device = device }) end
  return dl.full({}, tonumber(v / 2 ^ 32), { dtype = "int64", device = device }) * 2 ^ 32 + tonumber(v % 2 ^ 32)
end
local function as_u64(v) return v >= 0 and ffi.cast("uint64_t", v) or ffi.cast("uint64_t", ffi.new("int64_t", v)) end

-- from <= k < to as int64, uniform and exact for any span: below 2^53 through float64;
-- wider, from 63 or 64 random bits (two halves), redrawn where they fall past the
-- largest multiple of the span (so that no value is favoured) or outside [from, to).
local function integer_draws(op, x, from, to)
  local span = to - from
  local base = exact(from, x.device)
  if span < 2 ^ 53 then return (uniform(x) * span):floor():clamp(nil, span - 1):long() + base end
  local function bits(n) return (uniform(x) * 2 ^ n):floor():long() end
  local d = as_u64(to) - as_u64(from)   -- (mod 2^64: exact)
  local half = ffi.cast("uint64_t", 2 ^ 63)
  local draw, keep
  if d <= half then
    local limit = half / d * d
    local dt, lim = exact(d, x.device), limit < half and exact(limit, x.device) or nil
    draw = function() return bits(32) * 2 ^ 31 + bits(31) end   -- [0, 2^63)
    keep = function(r)
      local all = dl.ones_like(r, { dtype = "bool" })
      if d == half then return all, r + base end
      return lim and r:lt(lim) or all, r:remainder(dt) + base
    end
  else
    local top = exact(to, x.device)
    draw = function() return bits(32) * 2 ^ 32 + bits(32) end   -- every int64 (the product wraps)
    keep = function(r) return r:ge(base):logical_and(r:lt(top)), r end
  end
  local out = dl.zeros(x.shape, { dtype = "int64", device = x.device })
  local todo = dl.ones(x.shape, { dtype = "bool", device = x.device })
  for _ = 1, MAX_ROUNDS do
    local ok, k = keep(draw())
    ok = ok:logical_and(todo)
    out, todo = dl.where(ok, k, out), todo:logical_and(ok:logical_not())
    if not todo:any() then return out end
  end
  raise(op .. ": the draws past 2^53 were not all accepted in " .. MAX_ROUNDS .. " rounds")
end

local function whole(v) return type(v) == "number" and v == floor(v) and v > -math.huge and v < math.huge end

function methods.random_(x, from, to)
  local op = "random_"
  target(op, x)
  local dt = x.dtype
  local default = from == nil and to == nil
  if to == nil then from, to = 0, from end
  if to == nil then to = TOP[dt] + 1 end
  if not whole(from) or not whole(to) then
    raise(op .. ": expected whole-number bounds, got " .. tostring(from) .. " and " .. tostring(to))
  end
  if from >= to then raise(op .. ": expects from < to, got from = " .. from .. " and to = " .. to) end
  local lowest, top = RANGE[dt][1], RANGE[dt][2]
  -- (int64's top, 2^63 - 1, is 2^63 as a double: its bounds are the whole doubles below)
  local function beyond(v) return v < lowest or v > top or (dt == "int64" and v >= 2 ^ 63) end
  if beyond(from) then raise(op .. ": from (" .. ("%.0f"):format(from) .. ") is out of bounds for " .. dt) end
  if not default and beyond(to - 1) then
    raise(op .. ": to - 1 (" .. ("%.0f"):format(to - 1) .. ") is out of bounds for " .. dt)
  end
  if not x:is_floating_point() then return fill(op, x, integer_draws(op, x, from, to)) end
  return fill(op, x, (uniform(x) * (to - from)):floor():clamp(nil, to - from - 1) + from)
end

function methods.exponential_(x, lambd)
  local op = "exponential_"
  float_target(op, x)
  lambd = number(op, "lambd", lambd, 1)
  if not (lambd >= 0) then raise(op .. ": lambd must be >= 0, got " .. tostring(lambd)) end
  if lambd == 0 then return fill(op, x, dl.full({}, math.huge, { dtype = "float64", device = x.device })) end
  return fill(op, x, -(-uniform(x)):log1p() / lambd)
end

-- the number of trials up to the first success: ceil(log u / log(1 - p)), at least 1
function methods.geometric_(x, p)
  local op = "geometric_"
  target(op, x)
  p = number(op, "p", p, nil)
  if p == nil or not (p > 0 and p < 1) then raise(op .. ": p must lie in (0, 1), got " .. tostring(p)) end
  local u = uniform(x):clamp(1e-300)
  -- (log1p: 1 - p rounds away a p below 1e-16, and its digits well above)
  return fill(op, x, (u:log() / dl.full({}, -p, { dtype = "float64" }):log1p()):ceil():clamp(1))
end

function methods.cauchy_(x, median, sigma)
  local op = "cauchy_"
  float_target(op, x)
  median, sigma = number(op, "median", median, 0), number(op, "sigma", sigma, 1)
  if not (sigma > 0) then raise(op .. ": sigma must be > 0, got " .. tostring(sigma)) end
  return fill(op, x, ((uniform(x) - 0.5) * math.pi):tan() * sigma + median)
end

function methods.log_normal_(x, mean, std)
  local op = "log_normal_"
  float_target(op, x)
  mean, std = number(op, "mean", mean, 1), number(op, "std", std, 2)
  if not (std > 0) then raise(op .. ": std must be > 0, got " .. tostring(std)) end
  return fill(op, x, (dl.randn(x.shape, { dtype = "float64", device = x.device }) * std + mean):exp())
end

function methods.bernoulli_(x, p)
  local op = "bernoulli_"
  target(op, x)
  if p == nil then p = 0.5 end
  if is_tensor(p) then
    if not p:is_floating_point() then raise(op .. ": expected floating-point probabilities, got " .. p.dtype) end
    if p:numel() > 0 and not p:ge(0):logical_and(p:le(1)):all() then
      raise(op .. ": probabilities must lie in [0, 1], got a value outside or NaN")
    end
    p = p:detach():double()
  elseif type(p) ~= "number" then
    bad_arg(op, "a probability (a number or a tensor)", p)
  elseif not (p >= 0 and p <= 1) then
    raise(op .. ": p must lie in [0, 1], got " .. tostring(p))
  end
  return fill(op, x, uniform(x):lt(p))
end

-- ---- counts -----------------------------------------------------------------------------------
--
--   dl.poisson(rates)              a Poisson draw per rate (rates' dtype and shape)
--   dl.binomial(count, prob)       a binomial draw per element (broadcast; count's dtype)
-- Small means (below 10) by inversion: k counts the cumulative probabilities below one
-- uniform number; larger ones by Hörmann's transformed rejection (PTRS for Poisson,
-- BTRS for binomial, as PyTorch's), every element drawing until accepted. Not
-- differentiable (as PyTorch's).

-- The number of cumulative probabilities below u: pmf(0) and the ratio pmf(k+1)/pmf(k)
-- given as tensors (step(k, pk)), until every u is covered or `limit` (a tensor) is hit.
local function inversion(u, p0, step, limit)
  local k = dl.zeros_like(u)
  local pk, cdf = p0, p0
  local out = dl.zeros_like(u)
  for _ = 1, 100000 do
    local below = u:gt(cdf):logical_and(k:lt(limit))
    if not below:any() then break end
    out = out + below:to(u.dtype)
    pk = step(k, pk)
    k = k + 1
    cdf = cdf + pk
  end
  return out
end

-- log k! - ((k + 1/2) log(k + 1) - (k + 1) + log sqrt(2 pi)), k a whole number >= 0:
-- through lgamma up to 9 (no cancellation there), above by the series, since lgamma's
-- values near 1e16 (k of 1e15) keep no fraction at all
local HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
local function stirling_tail(k)
  local k1 = k + 1
  local exact = (k1:lgamma() - (k + 0.5) * k1:log() + k1) - HALF_LOG_2PI
  local sq = k1 * k1
  local series = ((1 / 1260 / sq - 1 / 360) / sq + 1 / 12) / k1
  return dl.where(k:le(9), exact, series)
end

-- Draws rounds of (U, V) for the elements not yet accepted: accept(U, V) gives (k, ok).
local function rejection(op, shape, device, accept)
  local out = dl.zeros(shape, { dtype = "float64", device = device })
  local done = dl.zeros(shape, { dtype = "bool", device = device })
  for _ = 1, MAX_ROUNDS do
    local U = dl.rand(shape, { dtype = "float64", device = device }) - 0.5
    local V = dl.rand(shape, { dtype = "float64", device = device })
    local k, ok = accept(U, V)
    local now = ok:logical_and(done:logical_not())
    out = dl.where(now, k, out)
    done = done:logical_or(now)
    if done:all() then return out end
  end
  raise(op .. ": the rejection sampler did not accept every element in " .. MAX_ROUNDS .. " rounds")
end

local function ptrs(lam)
  local slam, loglam = lam:sqrt(), lam:log()
  local b = slam * 2.53 + 0.931
  local a = b * 0.02483 - 0.059
  local invalpha = 1.1239 + 1.1328 / (b - 3.4)
  local vr = 0.9277 - 3.6224 / (b - 2)
  return rejection("poisson", lam.shape, lam.device, function(U, V)
    local us = 0.5 - U:abs()
    local k = ((a * 2 / us + b) * U + lam + 0.43):floor()
    local quick = us:ge(0.07):logical_and(V:le(vr))
    local bound = V:log() + invalpha:log() - (a / (us * us) + b):log()
    local exact = bound:le(-lam + k * loglam - (k + 1):lgamma())
    local ok = quick:logical_or(k:ge(0):logical_and(us:ge(0.013):logical_or(V:le(us))):logical_and(exact))
    return k, ok
  end)
end

function dl.poisson(rates)
  local op = "poisson"
  if not is_tensor(rates) then bad_arg(op, "a tensor of rates", rates) end
  if not rates:is_floating_point() then raise(op .. ": expected floating-point rates, got " .. rates.dtype) end
  local lam = rates:detach():double()
  if lam:numel() > 0 and not lam:ge(0):logical_and(lam:lt(math.huge)):all() then
    raise(op .. ": rates must be finite and >= 0")
  end
  return dl.no_grad(function()
    local small = lam:lt(10)
    local ls = dl.where(small, lam, 0)
    local u = dl.rand(lam.shape, { dtype = "float64", device = lam.device })
    local k = inversion(u, (-ls):exp(), function(j, pj) return pj * ls / (j + 1) end, dl.full_like(u, math.huge))
    if not small:all() then k = dl.where(small, k, ptrs(dl.where(small, 10, lam))) end
    return k:to(rates.dtype)
  end)
end

-- BTRS's ratio f(k) / f(mode) is formed from logarithms of ratios and Stirling's tails
-- (PyTorch's form), not as differences of lgamma; (n - m + 1) / (n - k + 1) as log1p of
-- (k - m) / (n - k + 1), whole numbers exact, so that it stays right at n of 1e15.
local function btrs(n, p)
  local q = 1 - p
  local sd = (n * p * q):sqrt()
  local b = sd * 2.53 + 1.15
  local a = b * 0.0248 + p * 0.01 - 0.0873
  local c = n * p + 0.5
  local vr = 0.92 - 4.2 / b
  local r = p / q
  local logr = r:log()
  local alpha = (5.1 / b + 2.83) * sd
  local m = ((n + 1) * p):floor()
  local at_mode = (m + 0.5) * ((m + 1) / (r * (n - m + 1))):log() + stirling_tail(m) + stirling_tail(n - m)
  return rejection("binomial", n.shape, n.device, function(U, V)
    local us = 0.5 - U:abs()
    local k = ((a * 2 / us + b) * U + c):floor()
    local inside = k:ge(0):logical_and(k:le(n))
    local quick = us:ge(0.07):logical_and(V:le(vr))
    local ks = dl.where(inside, k, m)
    local lv = (V * alpha / (a / (us * us) + b)):log()
    local bound = at_mode + (n + 1) * ((ks - m) / (n - ks + 1)):log1p()
                  + (ks + 0.5) * (logr + ((n - ks + 1) / (ks + 1)):log()) - stirling_tail(ks) - stirling_tail(n - ks)
    return k, inside:logical_and(quick:logical_or(lv:le(bound)))
  end)
end

function dl.binomial(count, prob)
  local op = "binomial"
  if not is_tensor(count) then bad_arg(op, "a tensor of counts", count) end
  if not is_tensor(prob) then bad_arg(op, "a tensor of probabilities", prob) end
  if not count:is_floating_point() or not prob:is_floating_point() then
    raise(op .. ": expected floating-point count and prob, got " .. count.dtype .. " and " .. prob.dtype)
  end
  local n, p = count:detach():double(), prob:detach():double()
  local ok, shape = pcall(dl.broadcast_shapes, n.shape, p.shape)
  if not ok then
    raise(op .. ": count " .. T.shape_str(n.shape) .. " and prob " .. T.shape_str(p.shape) .. " do not broadcast")
  end
  n, p = n:expand(shape), p:expand(shape)
  if n:numel() > 0 then
    if not n:ge(0):logical_and(n:eq(n:floor())):logical_and(n:lt(math.huge)):all() then
      raise(op .. ": counts must be whole numbers >= 0")
    end
    if not p:ge(0):logical_and(p:le(1)):all() then raise(op .. ": probabilities must lie in [0, 1] (not NaN)") end
  end
  return dl.no_grad(function()
    local flip = p:gt(0.5)
    local pp = dl.where(flip, 1 - p, p)
    local small = (n * pp):lt(10)
    local ps = dl.where(small, pp, 0)
    local u = dl.rand(shape, { dtype = "float64", device = n.device })
    local k = inversion(u, ((-ps):log1p() * n):exp(), function(j, pj) return pj * (n - j) / (j + 1) * ps / (1 - ps) end, n)
    if not small:all() then k = dl.where(small, k, btrs(dl.where(small, 100, n), dl.where(small, 0.5, pp))) end
    k = dl.where(flip, n - k, k)
    return k:to(count.dtype)
  end)
end

return {}
