-- dlua.scans: running maxima, log-sums and differences along a dim, as PyTorch's
-- (functions of dl and methods, loaded when first used):
--
--   dl.cummax(x, dim), dl.cummin(x, dim)   the running maximum (minimum) and the 1-based
--                          index where it was reached (the latest of equal values; a NaN
--                          is the maximum from where it appears, as PyTorch's)
--   dl.logcumsumexp(x, dim)   log of the running sum of exp(x), without overflow
--   dl.diff(x [, n = 1 [, dim = -1 [, prepend [, append]]]])   the n-th forward difference
--                          (logical_xor for bool), prepend and append joined first
--   dl.trapezoid(y [, x | dx | {x =, dx =}] [, dim = -1]), dl.cumulative_trapezoid   the
--                          trapezoidal rule's integral along dim (and its running sums)
--
-- The scans run in ceil(log2 n) steps over the whole dim (Hillis and Steele's): each
-- step combines every element with the one 2^k before it, so they are made of the
-- engine's ops and differentiable (a running maximum's gradient goes to the element it
-- took, as PyTorch's).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, methods, dl = T.is_tensor, T.methods, T.dl
local check = T.check_tensor
local type, huge = type, math.huge

-- x shifted `k` places later along dim d, `fill` (a number or a tensor like one slice)
-- coming in at the start.
local function shifted(x, d, k, fill)
  local n = x:size(d)
  local shape = x.shape
  shape[d] = math.min(k, n)
  local head = is_tensor(fill) and fill:expand(shape)
               or dl.full(shape, fill, { dtype = x.dtype, device = x.device })
  if k >= n then return head end
  return dl.cat({ head, x:narrow(d, 1, n - k) }, d)
end

-- The running maximum (sign 1) or minimum (sign -1) and its index: segments combine
-- left to right, the right one kept where its value is NaN, or where it is not beaten
-- by a left value that is NaN or strictly better.
local function running_extreme(op, x, dim, sign)
  check(op, x)
  if dim == nil then raise(op .. ": expected the dim to run along (as dl." .. op .. "(x, 1))") end
  if x.dtype == "bool" then   -- (as PyTorch's: false < true)
    local v, i = running_extreme(op, x:to("uint8"), dim, sign)
    return v:to("bool"), i
  end
  local d = core.positive_dim(op, dim, math.max(x:dim(), 1), x:dim())   -- (a 0-dim x takes 1 or -1)
  if x:dim() == 0 then return x:clone(), dl.ones({}, { dtype = "int64", device = x.device }) end
  local n = x:size(d)
  local shape = {}
  for i = 1, x:dim() do shape[i] = i == d and n or 1 end
  local idx = dl.arange(1, n + 1, { dtype = "int64", device = x.device }):view(shape):expand(x.shape)
  local v = x
  local float = x:is_floating_point()
  local k = 1
  while k < n do
    -- (the first k have nothing before them: their shifted index is 0)
    local lv, li = shifted(v, d, k, 0), shifted(idx, d, k, 0)
    local better = sign > 0 and lv:gt(v) or lv:lt(v)
    if float then better = v:eq(v):logical_and(lv:ne(lv):logical_or(better)) end
    better = better:logical_and(li:ne(0))
    v, idx = dl.where(better, lv, v), dl.where(better, li, idx)
    k = k * 2
  end
  return v, idx
end

function dl.cummax(x, dim) return running_extreme("cummax", x, dim, 1) end
function dl.cummin(x, dim) return running_extreme("cummin", x, dim, -1) end
methods.cummax, methods.cummin = dl.cummax, dl.cummin

function dl.logcumsumexp(x, dim)
  local op = "logcumsumexp"
  check(op, x)
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
  if dim == nil then raise(op .. ": expected the dim to run along (as dl." .. op .. "(x, 1))") end
  local d = core.positive_dim(op, dim, math.max(x:dim(), 1), x:dim())   -- (a 0-dim x takes 1 or -1)
  if x:dim() == 0 then return x:clone() end
  local n, y, k = x:size(d), x, 1
  while k < n do
    local prev = shifted(y, d, k, -huge)
    -- (a tie goes to the element itself, not half to the shifted one: the first
    -- elements' -inf fill must take no gradient)
    local own = y:ge(prev)
    local hi, lo = dl.where(own, y, prev), dl.where(own, prev, y)
    -- hi alone where lo adds nothing (-inf) or where both are +inf: lo - hi would be NaN
    -- there (PyTorch's _log_add_exp_helper)
    local alone = lo:eq(-huge):logical_or(lo:eq(huge))
    local gap = dl.where(alone, -huge, lo - hi)
    y = dl.where(alone, hi, hi + gap:exp():log1p())
    k = k * 2
  end
  return y
end
methods.logcumsumexp = dl.logcumsumexp

function dl.diff(x, n, dim, prepend, append)
  local op = "diff"
  check(op, x)
  n = n == nil and 1 or n
  if not core.integer(n) or n < 0 then raise(op .. ": n must be an integer >= 0, got " .. tostring(n)) end
  if x:dim() == 0 then raise(op .. ": expected a tensor of at least 1 dim, got a 0-dim one") end
  local d = core.positive_dim(op, dim == nil and -1 or dim, x:dim())
  local parts = {}
  local given = { prepend, x, append }
  for i = 1, 3 do
    local extra = given[i]
    if extra ~= nil then
      if not is_tensor(extra) then bad_arg(op, "a tensor to prepend or append", extra) end
      local fits = extra:dim() == x:dim()
      for k = 1, x:dim() do fits = fits and (k == d or extra:size(k) == x:size(k)) end
      if not fits then
        raise(op .. ": the tensor to " .. (i == 1 and "prepend" or "append") .. " has shape "
              .. T.shape_str(extra.shape) .. "; it must match the input's " .. T.shape_str(x.shape)
              .. " but along dim " .. d)
      end
      parts[#parts + 1] = extra
    end
  end
  local y = #parts > 1 and dl.cat(parts, d) or x
  for _ = 1, n do
    local len = y:size(d)
    if len == 0 then break end
    local hi, lo = y:narrow(d, 2, len - 1), y:narrow(d, 1, len - 1)
    y = y.dtype == "bool" and hi:ne(lo) or hi - lo
  end
  return y
end
methods.diff = dl.diff

-- The trapezoids' areas along dim d: (y[i] + y[i + 1]) / 2 times the spacing, a number
-- dx or the differences of the sample points x (1-D along d, or y's shape).
local function trapezoids(op, y, spacing, dim)
  check(op, y)
  if type(spacing) == "number" then spacing = { dx = spacing }
  elseif spacing == nil then spacing = {}
  elseif is_tensor(spacing) then spacing = { x = spacing } end
  local opts = core.options(op, spacing, { x = true, dx = true })
  if opts.x ~= nil and opts.dx ~= nil then raise(op .. ": give x or dx, not both") end
  local d = core.positive_dim(op, dim == nil and -1 or dim, y:dim())
  local n = y:size(d)
  if n == 0 then return y, d end   -- (no trapezoids: a sum of 0, an empty running sum)
  local mid = (y:narrow(d, 2, n - 1) + y:narrow(d, 1, n - 1)) * 0.5
  if opts.x == nil then
    local dx = opts.dx == nil and 1 or opts.dx
    if type(dx) ~= "number" then bad_arg(op, "a number for dx", dx) end
    return mid * dx, d
  end
  local x = opts.x
  check(op, x)
  local gaps
  if x:dim() == 1 then
    if x:size(1) ~= n then
      raise(op .. ": x has " .. x:size(1) .. " points, y " .. n .. " along dim " .. d)
    end
    local shape = {}
    for i = 1, y:dim() do shape[i] = i == d and n - 1 or 1 end
    gaps = dl.diff(x):view(shape)
  else
    gaps = dl.diff(x, 1, d)
  end
  return mid * gaps, d
end

function dl.trapezoid(y, spacing, dim)
  local areas, d = trapezoids("trapezoid", y, spacing, dim)
  return areas:sum(d)
end
function dl.cumulative_trapezoid(y, spacing, dim)
  local areas, d = trapezoids("cumulative_trapezoid", y, spacing, dim)
  return areas:cumsum(d)
end

return {}
