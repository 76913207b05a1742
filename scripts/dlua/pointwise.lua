-- dlua.pointwise: elementwise functions made of the op table's ops, as PyTorch's
-- (functions of dl and methods, loaded when first used):
--
--   dl.lerp(a, b, w)        a + w (b - a) (b - (b - a)(1 - w) from w = 1/2, as PyTorch's);
--                           a:lerp_(b, w) in place (an exponential moving average's step)
--   dl.hypot(a, b)          sqrt(a^2 + b^2) without overflow or underflow of the squares
--   dl.logaddexp(a, b)      log(e^a + e^b), exact where the exponentials overflow
--   x:trunc(), x:frac()     rounded toward zero, and what that drops (x - trunc(x))
--   x:reciprocal(), x:square()
--   dl.isclose(a, b [, rtol = 1e-5, atol = 1e-8, equal_nan = false])   elementwise allclose
--   dl.logical_xor(a, b)
--   dl.div(a, b, {rounding_mode = "floor" | "trunc"}), dl.true_divide;
--   x:round(decimals) / dl.round(x, {decimals = d}) (through dl.round's second argument) dl.add(a, b, {alpha = k}), dl.sub(a, b, {alpha = k}): a +- k b
--   dl.xlogy(x, y)          x log y, 0 where x is 0 (y not NaN)
--   dl.logit(x [, eps])     log(x / (1 - x)), x first clamped to [eps, 1 - eps]
--   dl.sinc(x)              sin(pi x) / (pi x), 1 at 0
--   dl.deg2rad, dl.rad2deg, dl.sgn (sign), dl.signbit, dl.copysign(a, b) (|a| with b's
--   sign bit, -0 included), dl.heaviside(x, values), dl.float_power(a, b) (in float64)
--   dl.mvlgamma(x, p)       the multivariate log-gamma (of the engine's lgamma)
--   dl.logaddexp2(a, b)     log2(2^a + 2^b); dl.ldexp(x, e): x 2^e (x:ldexp_ in place)
--   dl.frexp(x)             mantissa (|m| in [0.5, 1), 0 for 0) and int32 exponent, x = m 2^e
--   dl.nextafter(a, b)      the float32, float64 or bfloat16 next to a toward b (no gradient,
--                           as PyTorch; float16 has none there)
--   x:fix()                 trunc's other name
--   In place, each as x:copy_ of its result (x's dtype must hold the result's, as
--   PyTorch's): x:square_(), sinc_, xlogy_, sgn_, hypot_, copysign_, heaviside_,
--   float_power_ (x float64), mvlgamma_, logit_, frac_, deg2rad_, rad2deg_, reciprocal_,
--   trunc_, fix_, logical_xor_
--
-- Gradients are the compositions': PyTorch's where it defines one (trunc and frac as
-- floor's, 0 and 1; a rounded division's 0). (fmod and floor_divide are ops of the table.)
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, methods, dl = T.is_tensor, T.methods, T.dl
local type, ipairs, tonumber = type, ipairs, tonumber

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
function methods.lerp_(a, b, w) return T.write_into("lerp_", a, dl.lerp(a, b, w)) end

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

-- A whole number beside an integer tensor, as the engine's arithmetic takes it: modulo
-- the dtype's width (256 beside uint8 is 0).
local WIDTH = { uint8 = 2 ^ 8, int32 = 2 ^ 32 }
local function wrapped(v, like)
  local w = type(v) == "number" and v == math.floor(v) and is_tensor(like) and WIDTH[like.dtype]
  if not w then return v end
  v = v % w
  if like.dtype == "int32" and v >= 2 ^ 31 then v = v - w end
  return v
end

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

-- ---- divisions, and alpha ------------------------------------------------------------------

local function either_tensor(op, a, b)
  operand(op, a)
  operand(op, b)
  if not is_tensor(a) and not is_tensor(b) then raise(op .. ": expected a tensor, got two numbers") end
  if is_tensor(a) and is_tensor(b) then T.check_broadcast(op, a, b) end
end

-- a and b as tensors: a number takes the other's dtype where that holds it.
local function both(op, a, b)
  if is_tensor(a) and is_tensor(b) then return a, b end
  if is_tensor(a) then return a, T.scalar_tensor(op, b, a.device, a) end
  return T.scalar_tensor(op, a, b.device, b), b
end

-- r (computed from a and b detached) joined to a and b with a gradient of 0, as PyTorch's
-- rounded divisions have (differentiating the composition would give NaN where b is 0).
local function zero_gradient(r, a, b)
  local yes = dl.ones({}, { dtype = "bool", device = r.device })
  return dl.where(yes, dl.where(yes, r, a), b)
end

-- a / b rounded toward -infinity (the engine's floor_divide: PyTorch's div_floor, exact
-- for integers at any size), with a gradient of 0 for float operands.
local floor_divide = T.F.floor_divide
local function floor_div(op, a, b)
  a, b = wrapped(a, b), wrapped(b, a)
  local A, B = both(op, a, b)
  if not A:is_floating_point() and not B:is_floating_point() then
    if B:eq(0):any() then raise(op .. ": integer division by zero") end
    return floor_divide(A, B)
  end
  return zero_gradient(floor_divide(A:detach(), B:detach()), A, B)
end

local function trunc_div(op, a, b)
  a, b = wrapped(a, b), wrapped(b, a)
  local A, B = both(op, a, b)
  if A:is_floating_point() or B:is_floating_point() then
    return zero_gradient(methods.trunc(A:detach() / B:detach()), A, B)
  end
  local f = floor_div(op, A, B)
  -- trunc is one more than floor where the division is not exact and the signs differ
  local up = (A - f * B):ne(0):logical_and(A:lt(0):ne(B:lt(0)))
  return dl.where(up, f + 1, f)
end

local DIV_OPTS, ALPHA_OPTS = { rounding_mode = true }, { alpha = true }

local function options_table(name, opts)
  if type(opts) ~= "table" then
    raise(name .. ": expected an options table as the third argument, got " .. core.typename(opts))
  end
end

-- div's rounding_mode: nil, "floor" or "trunc".
local function rounding_mode(name, opts)
  options_table(name, opts)
  local mode = core.options(name, opts, DIV_OPTS).rounding_mode
  if mode ~= nil and mode ~= "floor" and mode ~= "trunc" then
    raise(name .. ": rounding_mode must be floor or trunc, got " .. tostring(mode))
  end
  return mode
end

local FLOAT_DTYPES = { float16 = true, bfloat16 = true, float32 = true, float64 = true }

-- add's and sub's b * alpha. As PyTorch's, alpha must be whole where a (op) b is of an
-- integer dtype.
local function scaled_operand(name, a, b, opts)
  options_table(name, opts)
  local alpha = core.options(name, opts, ALPHA_OPTS).alpha or 1
  if type(alpha) ~= "number" then bad_arg(name, "a number for alpha", alpha) end
  if alpha == 1 then return b end
  if alpha ~= math.floor(alpha) and not FLOAT_DTYPES[dl.result_type(a, b)] then
    raise(name .. ": alpha must be a whole number for integer tensors, got " .. alpha)
  end
  return b * alpha
end

-- div, add and sub given an options table (PyTorch's rounding_mode and alpha).
local function with_options(name, a, b, opts)
  options_table(name, opts)
  either_tensor(name, a, b)
  if name == "div" then
    local mode = rounding_mode(name, opts)
    if mode == nil then return a / b end
    if mode == "floor" then return floor_div(name, a, b) end
    return trunc_div(name, a, b)
  end
  b = scaled_operand(name, a, b, opts)
  if name == "add" then return a + b end
  return a - b
end

function dl.true_divide(a, b)
  either_tensor("true_divide", a, b)
  return a / b
end
methods.true_divide = dl.true_divide

-- ---- more elementwise functions ----------------------------------------------------------------

function dl.xlogy(x, y)
  either_tensor("xlogy", x, y)
  local X, Y = both("xlogy", x, y)
  if not X:is_floating_point() and not Y:is_floating_point() then X = X:to(dl.get_default_dtype()) end
  local zero = X:eq(0):logical_and(Y:eq(Y))
  -- where x is 0: 0, with PyTorch's gradient log y for x (y > 0 and finite; else 0, not
  -- NaN: each log reads a safe y where its branch is not taken)
  local good = Y:gt(0):logical_and(Y:lt(math.huge))
  local at_zero = X * dl.where(good, Y, 1):log()
  return dl.where(zero, at_zero, X * dl.where(zero, 1, Y):log())
end
methods.xlogy = dl.xlogy

function dl.logit(x, eps)
  check("logit", x)
  if eps ~= nil and (type(eps) ~= "number" or eps > 0.5) then
    raise("logit: eps must be a number of at most 0.5, got " .. tostring(eps))
  end
  local z = (eps and eps >= 0) and x:clamp(eps, 1 - eps) or x   -- (a negative eps clamps nothing, as PyTorch's)
  return (z / (1 - z)):log()
end
methods.logit = dl.logit

function dl.sinc(x)
  check("sinc", x)
  local zero = x:eq(0)
  local px = dl.where(zero, 1, x * math.pi)
  return dl.where(zero, 1, px:sin() / px)
end
methods.sinc = dl.sinc

function dl.deg2rad(x) check("deg2rad", x) return x * (math.pi / 180) end
function dl.rad2deg(x) check("rad2deg", x) return x * (180 / math.pi) end
function dl.sgn(x) check("sgn", x) return x:sign() end
methods.deg2rad, methods.rad2deg, methods.sgn = dl.deg2rad, dl.rad2deg, dl.sgn

-- The sign bit: true for negative numbers and -0 (1 / -0 is -infinity), and for NaN
-- with its sign bit set (told apart by a copy through float64 bits where the dtype
-- allows; else NaN reads false).
function dl.signbit(x)
  check("signbit", x)
  if not x:is_floating_point() then return x:lt(0) end
  return x:lt(0):logical_or(x:eq(0):logical_and((1 / x):lt(0)))
end
methods.signbit = dl.signbit

function dl.copysign(a, b)
  either_tensor("copysign", a, b)
  local A, B = both("copysign", a, b)
  if not A:is_floating_point() then A = A:to(B:is_floating_point() and B.dtype or dl.get_default_dtype()) end
  local mag = A:abs()
  return dl.where(dl.signbit(B), -mag, mag)
end
methods.copysign = dl.copysign

function dl.heaviside(x, values)
  check("heaviside", x)
  operand("heaviside", values)
  return dl.where(x:eq(0), values, dl.where(x:gt(0), 1, 0)):to(x.dtype)
end
methods.heaviside = dl.heaviside

function dl.float_power(a, b)
  either_tensor("float_power", a, b)
  local function wide(v) return is_tensor(v) and v:to("float64") or v end
  return dl.pow(wide(a), wide(b))
end
methods.float_power = dl.float_power

-- mvlgamma(x, p): the log of the multivariate gamma function of dimension p, sum over i <
-- p of lgamma(x - i/2) plus p (p - 1) / 4 log pi; every x must exceed (p - 1) / 2.
function dl.mvlgamma(x, p)
  check("mvlgamma", x)
  if not core.integer(p) or p < 1 then raise("mvlgamma: p must be an integer >= 1, got " .. tostring(p)) end
  if x:numel() > 0 and x:le((p - 1) / 2):any() then
    raise("mvlgamma: all elements must be greater than (p - 1) / 2 = " .. (p - 1) / 2)
  end
  local y = x:lgamma()
  for i = 1, p - 1 do y = y + (x - i / 2):lgamma() end
  return y + p * (p - 1) / 4 * math.log(math.pi)
end
methods.mvlgamma = dl.mvlgamma

-- round(x, decimals) (or {decimals = d}), as PyTorch's: x scaled by 10^d, rounded half
-- to even and scaled back (for d < 0, divided by 10^-d first); a gradient of 0.
local ROUND_OPTS = { decimals = true }
local function round_decimals(x, d)
  if type(d) == "table" then d = core.options("round", d, ROUND_OPTS).decimals or 0 end
  if not core.integer(d) then bad_arg("round", "a whole number of decimals", d) end
  if d == 0 then return x:round() end
  if not x:is_floating_point() then raise("round: decimals need a floating-point tensor, got " .. x.dtype) end
  if d > 0 then
    local p = 10 ^ d
    return (x * p):round() / p
  end
  local p = 10 ^ -d
  return (x / p):round() * p
end

-- ---- log2 of sums, powers of two, neighbours -------------------------------------------------

local LN2 = math.log(2)

function dl.logaddexp2(a, b)
  check("logaddexp2", a)
  operand("logaddexp2", b)
  T.check_broadcast("logaddexp2", a, b)
  local hi, lo = dl.maximum(a, b), dl.minimum(a, b)
  -- (equal infinities: hi itself, where hi - lo would be NaN)
  return dl.where(hi:eq(lo), hi + 1, hi + ((lo - hi) * LN2):exp():log1p() / LN2)
end
methods.logaddexp2 = dl.logaddexp2

-- x 2^e as PyTorch's (x times pow(2.0, e)): an integer e is taken as floats, so that an
-- integer x gives floats too.
function dl.ldexp(x, e)
  check("ldexp", x)
  operand("ldexp", e)
  if type(e) == "number" then
    if not x:is_floating_point() then x = x:to(dl.get_default_dtype()) end
    return x * 2 ^ e
  end
  T.check_broadcast("ldexp", x, e)
  if not e:is_floating_point() then e = e:to(dl.get_default_dtype()) end
  return x * dl.pow(2, e)
end
methods.ldexp = dl.ldexp

-- The exponents come from C's frexp on the values (exact, subnormals included); the
-- mantissa is x divided by 2^(e - 1) and then by 2 (each factor representable where
-- 2^e alone would overflow or underflow), exact too, with PyTorch's gradient 2^-e.
local FRAC_DTYPES = { float16 = true, bfloat16 = true, float32 = true, float64 = true }
function dl.frexp(x)
  check("frexp", x)
  if not FRAC_DTYPES[x.dtype] then raise("frexp: expected a floating-point tensor, got " .. x.dtype) end
  local buf, n = T.read_all(x)
  local exps, scales = {}, {}
  for i = 1, n do
    local v = buf[i - 1]
    local _, e = math.frexp(v)
    if v ~= v or v == math.huge or v == -math.huge then e = 0 end
    exps[i], scales[i] = e, 2 ^ (e - 1)
  end
  local shape, opts = x.shape, { dtype = x.dtype, device = x.device }
  local s = dl.tensor(scales, opts):reshape(shape)
  return x / s / 2, dl.tensor(exps, { dtype = "int32", device = x.device }):reshape(shape)
end
methods.frexp = dl.frexp

-- The representable number next to a toward b: a's bits (as an integer) one up or down.
local ffi = require("ffi")
local bits32, bits64 = ffi.new("union { float f; uint32_t u; }"), ffi.new("union { double f; uint64_t u; }")
local TINY = { float32 = 2 ^ -149, float64 = 2 ^ -1074, bfloat16 = 2 ^ -133 }
local function next_toward(v, w, dtype)
  if v ~= v or w ~= w then return 0 / 0 end
  if v == w then return w end
  if v == 0 then return w > 0 and TINY[dtype] or -TINY[dtype] end
  local box = dtype == "float64" and bits64 or bits32
  box.f = v
  -- (a bfloat16 is a float32's upper 16 bits: its last bit is the float32's 2^16)
  local one = dtype == "bfloat16" and 0x10000 or 1
  if (v < w) == (v > 0) then box.u = box.u + one else box.u = box.u - one end
  return tonumber(box.f)
end

function dl.nextafter(a, b)
  check("nextafter", a)
  check("nextafter", b)
  local dtype = dl.result_type(a, b)
  if not TINY[dtype] then
    raise("nextafter: expected float32, float64 or bfloat16 tensors (float16's is not in PyTorch), got " .. a.dtype
          .. " and " .. b.dtype)
  end
  a, b = dl.broadcast_tensors(a:to(dtype), b:to(dtype))
  local va, n = T.read_all(a)
  local vb = T.read_all(b)
  local out = {}
  for i = 1, n do out[i] = next_toward(va[i - 1], vb[i - 1], dtype) end
  return dl.tensor(out, { dtype = dtype, device = a.device }):reshape(a.shape)
end
methods.nextafter = dl.nextafter

methods.fix, dl.fix = methods.trunc, methods.trunc

-- ---- in place ------------------------------------------------------------------------------

-- x = y in place for the composed op `op`: x's dtype must hold y's (PyTorch's can_cast
-- rule); the write refuses an expanded x and a leaf that a gradient is taken for, and
-- bumps x's version. Under autograd f reads a copy of x, so that what f keeps for its
-- backward is not the x being overwritten.
local function into(op, x, f, ...)
  check(op, x)
  local y = f(x:requires_grad() and x:clone() or x, ...)
  if y.dtype ~= x.dtype and not dl.can_cast(y.dtype, x.dtype) then
    raise(op .. ": result dtype " .. y.dtype .. " cannot be stored in the in-place target of dtype " .. x.dtype)
  end
  return T.write_into(op, x, y)
end

for _, name in ipairs({ "square", "sinc", "xlogy", "sgn", "hypot", "copysign", "heaviside", "mvlgamma", "logit",
                        "frac", "deg2rad", "rad2deg", "reciprocal", "trunc", "logical_xor", "ldexp" }) do
  local op, f = name .. "_", methods[name]
  methods[op] = function(x, ...) return into(op, x, f, ...) end
end
methods.fix_ = methods.trunc_

function methods.float_power_(x, b)
  check("float_power_", x)
  if x.dtype ~= "float64" then
    raise("float_power_: the result is float64, which a target of dtype " .. x.dtype .. " cannot hold (x:to(\"float64\") first)")
  end
  return into("float_power_", x, dl.float_power, b)
end

return { with_options = with_options, round_decimals = round_decimals, scaled_operand = scaled_operand,
         rounding_mode = rounding_mode, into = into }
