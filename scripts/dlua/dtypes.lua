-- dlua.dtypes: questions about dtypes, as PyTorch's torch.result_type, promote_types,
-- can_cast, finfo and iinfo (the rules themselves are the engine's, tensor/dtype.h and
-- tensor/pointwise.cpp, so these answer what the ops do).
--
--   dl.result_type(x, 2.5)              -- "float32" for an int64 x: the dtype of x + 2.5
--   dl.promote_types("int32", "uint8")  -- "int32"
--   dl.can_cast("float64", "int32")     -- false: an in-place op refuses that write
--   dl.finfo("float16").eps             -- 0.0009765625
--   dl.iinfo("uint8").max               -- 255
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local C = core.C
local raise, raise_last, typename = core.raise, core.raise_last, core.typename
local dtype_codes, dtype_names = core.dtype_codes, core.dtype_names
local is_tensor, hid = T.is_tensor, T.hid
local dl = T.dl
local type = type

local function code_of(op, name)
  if type(name) ~= "string" then raise(op .. ": expected a dtype name, got " .. typename(name)) end
  local code = dtype_codes[name]
  if code == nil then raise(op .. ": unknown dtype '" .. name .. "'") end
  return code
end

local function named(code)
  if code < 0 then raise_last() end
  return dtype_names[code]
end

-- result_type(a, b): a and b tensors, numbers or booleans, at least one a tensor. A
-- dimensioned tensor decides over a 0-dim one, which decides over a number, unless the
-- lower one is of a higher kind (bool < integer < float); a whole number is an integer.
function dl.result_type(a, b)
  if not is_tensor(a) then a, b = b, a end
  if not is_tensor(a) then
    raise("result_type: expected at least one tensor, got " .. typename(b) .. " and " .. typename(a))
  end
  if is_tensor(b) then return named(C.dl_result_type(hid(a), hid(b), 0)) end
  if type(b) == "boolean" then return a.dtype end
  if type(b) ~= "number" then raise("result_type: expected a tensor, a number or a boolean, got " .. typename(b)) end
  return named(C.dl_result_type(hid(a), 0, b))
end

function dl.promote_types(a, b)
  return named(C.dl_promote_types(code_of("promote_types", a), code_of("promote_types", b)))
end

function dl.can_cast(from, to)
  local r = C.dl_can_cast(code_of("can_cast", from), code_of("can_cast", to))
  if r < 0 then raise_last() end
  return r == 1
end

-- The limits of each float dtype (IEEE 754 binary16, bfloat16, binary32, binary64), with
-- PyTorch's field names; resolution is 10^-(decimal digits), as numpy's.
local FINFO = {
  float16 = { bits = 16, eps = 2 ^ -10, max = 65504, tiny = 2 ^ -14, resolution = 1e-3 },
  bfloat16 = { bits = 16, eps = 2 ^ -7, max = (2 - 2 ^ -7) * 2 ^ 127, tiny = 2 ^ -126, resolution = 1e-2 },
  float32 = { bits = 32, eps = 2 ^ -23, max = (2 - 2 ^ -23) * 2 ^ 127, tiny = 2 ^ -126, resolution = 1e-6 },
  float64 = { bits = 64, eps = 2 ^ -52, max = (2 - 2 ^ -52) * 2 ^ 1023, tiny = 2 ^ -1022, resolution = 1e-15 },
}
-- Integer limits; int64's as int64 cdata (2^63 - 1 has no double), which compare with
-- Lua numbers and print exactly.
local IINFO = {
  uint8 = { bits = 8, min = 0, max = 255 },
  int32 = { bits = 32, min = -2 ^ 31, max = 2 ^ 31 - 1 },
  int64 = { bits = 64, min = -0x7fffffffffffffffLL - 1, max = 0x7fffffffffffffffLL },
}

local function dtype_arg(op, d)
  if d == nil then return dl.get_default_dtype() end
  if is_tensor(d) then return d.dtype end
  code_of(op, d)
  return dtype_names[dtype_codes[d]]   -- aliases ("float", "long") to their names
end

-- finfo([dtype | tensor]): bits, eps, max, min (= -max), tiny (smallest normal; also
-- smallest_normal), resolution, dtype; the default float dtype when none is given.
function dl.finfo(d)
  local name = dtype_arg("finfo", d)
  local f = FINFO[name]
  if f == nil then raise("finfo: expected a floating-point dtype, got " .. name .. " (dl.iinfo is for integers)") end
  return { bits = f.bits, eps = f.eps, max = f.max, min = -f.max, tiny = f.tiny, smallest_normal = f.tiny,
           resolution = f.resolution, dtype = name }
end

-- iinfo(dtype | tensor): bits, min, max, dtype of an integer dtype.
function dl.iinfo(d)
  if d == nil then raise("iinfo: expected an integer dtype") end
  local name = dtype_arg("iinfo", d)
  local i = IINFO[name]
  if i == nil then raise("iinfo: expected an integer dtype, got " .. name .. " (dl.finfo is for floats)") end
  return { bits = i.bits, min = i.min, max = i.max, dtype = name }
end

return dl
