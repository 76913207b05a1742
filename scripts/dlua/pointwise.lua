-- dlua.pointwise: elementwise functions made of the op table's ops, as PyTorch's
-- (functions of dl and methods, loaded when first used):
--
--   dl.lerp(a, b, w)        a + w (b - a) (b - (b - a)(1 - w) from w = 1/2, as PyTorch's);
--                           a:lerp_(b, w) in place (an exponential moving average's step)
--   dl.hypot(a, b)          sqrt(a^2 + b^2) without overflow or underflow of the squares
--   dl.logaddexp(a, b)      log(e^a + e^b), exact where the exponentials overflow
--   x:trunc(), x:frac()     rounded toward zero, and what that drops (x - trunc(x))
--   dl.fmod(a, b)           C's remainder, the sign of a (where a % b takes b's)
--   x:reciprocal(), x:square()
--   dl.isclose(a, b [, rtol = 1e-5, atol = 1e-8, equal_nan = false])   elementwise allclose
--   dl.logical_xor(a, b)
--
-- Gradients are the compositions': PyTorch's where it defines one (trunc and frac as
-- floor's, 0 and 1; fmod's 1 for a).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, methods, dl = T.is_tensor, T.methods, T.dl
local type = type

local check = T.check_tensor   -- (op, x): an error naming op unless x is a tensor
local function operand(op, v)
  if type(v) ~= "number" and not is_tensor(v) then bad_arg(op, "a tensor or a number", v) end
  return v
end

function dl.lerp(a, b, w)
  check("lerp", a)
  operand("lerp", b)
  operand("lerp", w)
  T.check_broadcast("lerp", a, b)
  T.check_broadcast("lerp", a, w)
  local d = b - a
  if type(w) == "number" then
    if w < 0.5 then return a + d * w end
    return b - d * (1 - w)
  end
  return dl.where(w:lt(0.5), a + d * w, b - d * (1 - w))
end
methods.lerp = dl.lerp
function methods.lerp_(a, b, w) return a:copy_(dl.lerp(a, b, w)) end

function dl.hypot(a, b)
  check("hypot", a)
  operand("hypot", b)
  T.check_broadcast("hypot", a, b)
  local x, y = dl.abs(a), is_tensor(b) and dl.abs(b) or math.abs(b)
  local hi, lo = dl.maximum(x, y), dl.minimum(x, y)
  local r = lo / hi
  -- (0 and infinity are their own: 0/0 and inf/inf would be NaN)
  return dl.where(hi:eq(0):logical_or(hi:eq(math.huge)), hi, hi * (r * r + 1):sqrt())
end
methods.hypot = dl.hypot

function dl.logaddexp(a, b)
  check("logaddexp", a)
  operand("logaddexp", b)
  T.check_broadcast("logaddexp", a, b)
  local hi, lo = dl.maximum(a, b), dl.minimum(a, b)
  -- (equal infinities: hi itself, where hi - lo would be NaN)
  return dl.where(hi:eq(lo), hi + math.log(2), hi + (lo - hi):exp():log1p())
end
methods.logaddexp = dl.logaddexp

function methods.trunc(x)
  check("trunc", x)
  if not x:is_floating_point() then return x:clone() end
  return dl.where(x:ge(0), x:floor(), x:ceil())
end
dl.trunc = methods.trunc
function methods.frac(x)
  check("frac", x)
  return x - methods.trunc(x)
end
dl.frac = methods.frac

-- a - trunc(a / b) b, exactly: the floor remainder (exact), less b where the signs differ.
function dl.fmod(a, b)
  check("fmod", a)
  operand("fmod", b)
  T.check_broadcast("fmod", a, b)
  local r = a % b
  local fix = r:ne(0):logical_and((r:lt(0)):ne(a:lt(0)))
  return dl.where(fix, r - b, r)
end
methods.fmod = dl.fmod

function methods.reciprocal(x) check("reciprocal", x) return 1 / x end
function methods.square(x) check("square", x) return x * x end
dl.reciprocal, dl.square = methods.reciprocal, methods.square

function dl.isclose(a, b, rtol, atol, equal_nan)
  check("isclose", a)
  operand("isclose", b)
  T.check_broadcast("isclose", a, b)
  rtol, atol = rtol or 1e-5, atol or 1e-8
  if type(rtol) ~= "number" or type(atol) ~= "number" then raise("isclose: rtol and atol must be numbers") end
  local close = dl.abs(a - b):le(dl.abs(b) * rtol + atol):logical_or(a:eq(b))
  if equal_nan then
    if is_tensor(b) then close = close:logical_or(a:ne(a):logical_and(b:ne(b)))
    elseif b ~= b then close = close:logical_or(a:ne(a)) end
  end
  return close
end
methods.isclose = dl.isclose

function dl.logical_xor(a, b)
  check("logical_xor", a)
  check("logical_xor", b)
  return a:ne(0):ne(b:ne(0))
end
methods.logical_xor = dl.logical_xor

return {}
