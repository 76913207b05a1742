-- dlua.nonfinite: finding and replacing NaN and infinities, as PyTorch's (functions of dl
-- and methods, loaded when first used):
--
--   x:isnan(), x:isinf(), x:isposinf(), x:isneginf(), x:isfinite()   -- bool tensors
--   x:nan_to_num([nan = 0, posinf, neginf])   -- infinities become the dtype's extremes
--
-- Integer and bool tensors hold neither: their tests are constant. Made of comparisons
-- and where(), so nan_to_num passes the gradient of the finite elements (0 to the rest).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, methods, dl = T.is_tensor, T.methods, T.dl
local type, huge = type, math.huge

local function check(op, x)
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
  return x:is_floating_point()
end

-- A bool tensor of x's shape, all `value`.
local function constant(x, value)
  return dl.full(x.shape, value, { dtype = "bool", device = x.device })
end

function methods.isnan(x)
  if not check("isnan", x) then return constant(x, false) end
  return x:ne(x)
end

function methods.isinf(x)
  if not check("isinf", x) then return constant(x, false) end
  return x:abs():eq(huge)
end

function methods.isposinf(x)
  if not check("isposinf", x) then return constant(x, false) end
  return x:eq(huge)
end

function methods.isneginf(x)
  if not check("isneginf", x) then return constant(x, false) end
  return x:eq(-huge)
end

-- x - x is 0 exactly for every finite x, and NaN for NaN and both infinities.
function methods.isfinite(x)
  if not check("isfinite", x) then return constant(x, true) end
  return (x - x):eq(0)
end

-- The largest finite value of each floating dtype.
local LARGEST = { float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308, float16 = 65504,
                  bfloat16 = 3.3895313892515355e38 }

local function replacement(op, what, v, default)
  if v == nil then return default end
  if type(v) ~= "number" then raise(op .. ": " .. what .. " must be a number, got " .. core.typename(v)) end
  return v
end

function methods.nan_to_num(x, nan, posinf, neginf)
  if not check("nan_to_num", x) then return x:clone() end
  local big = LARGEST[x.dtype]
  nan = replacement("nan_to_num", "nan", nan, 0)
  posinf = replacement("nan_to_num", "posinf", posinf, big)
  neginf = replacement("nan_to_num", "neginf", neginf, -big)
  local y = dl.where(x:ne(x), nan, x)
  y = dl.where(x:eq(huge), posinf, y)
  return dl.where(x:eq(-huge), neginf, y)
end

for _, name in ipairs({ "isnan", "isinf", "isposinf", "isneginf", "isfinite", "nan_to_num" }) do
  dl[name] = methods[name]
end

return {}
