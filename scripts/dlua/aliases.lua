-- dlua.aliases: PyTorch's other spellings of what dlua already has, for code moved over
-- from it (methods, and dl.* where PyTorch has the function; loaded when first used):
--
--   x:clamp_min(lo), x:clamp_max(hi)        x:clamp(lo), x:clamp(nil, hi); or a tensor
--                                           bound (broadcast, as torch's)
--   x:swapaxes(a, b), x:swapdims(a, b)      x:transpose(a, b)
--   x:movedim(from, to), x:moveaxis         dims (a number or a list) moved to positions
--   dl.gather(x, dim, idx), index_select, narrow, select, permute, flatten, squeeze,
--   unsqueeze, transpose, reshape, t        the methods of those names
--   x:type_as(y)                            x:to(y.dtype)
--   x:new_zeros(shape), x:new_ones(shape), x:new_full(shape, v), x:new_tensor(data)
--                                           x's dtype and device
--   x:uniform_([a, b]), x:normal_([mean, std])   dl.nn.init.uniform_(x, a, b), normal_
--   x:clip(lo, hi), x:clip_(lo, hi)        x:clamp, x:clamp_
--   x:absolute(), x:negative(), x:positive()   abs, neg, x itself
--   x:ravel(), x:msort(), x:tolist(), x:ndimension(), x:new_empty(shape)
--   dl.ger(a, b) and dl.inner(a, b)         outer, and the sum over both last dims' product
--   a:dist(b [, p = 2])                     the p-norm of a - b (a method: dl.dist is dl.dist)
--   dl.addcmul(t, a, b [, {value = 1}]), dl.addcdiv: t + value a b, t + value a / b (and _)
--   x:det(), x:inverse(), x:pinverse(), x:slogdet(), x:logdet(), x:cholesky(), x:qr(), x:svd()
--                                           dl.linalg's functions
--   dl.multiply, dl.subtract, dl.divide (and methods)   mul, sub (alpha), div (rounding_mode)
--   dl.fmax(a, b), dl.fmin(a, b)            maximum and minimum that ignore a NaN (NaN only
--                                           where both are)
--   x:eq_(y), ne_, lt_, le_, gt_, ge_       the comparison written into x (1 and 0 of its dtype)
--   dl.greater, greater_equal, less, less_equal, not_equal (and methods, and their _)
--                                           gt, ge, lt, le, ne
--   x:logical_and_(y), x:logical_or_(y)     in place, as the comparisons
--   dl.arccos, arcsin, arctan, arccosh, arcsinh, arctanh, arctan2 (and _)   acos ... atan2
--   x:multiply_, divide_, subtract_, true_divide_, negative_, absolute_   mul_, div_, sub_,
--                                           div_, neg_, abs_
--   x:clamp_min_(lo), x:clamp_max_(hi); dl.clamp_min(x, lo), dl.clamp_max(x, hi)
--   x:nan_to_num_(...), x:tril_(k), x:triu_(k), x:cumsum_(dim), x:cumprod_(dim)   in place
--   dl.concatenate(list, dim)               cat
--   dl.rsub(a, b [, {alpha = 1}])           b - alpha a
--   dl.scalar_tensor(v [, opts])            a 0-dim tensor (float32 unless opts.dtype)
--   dl.fill(x, v)                           a tensor of x's shape, dtype and device, all v
--   x:element_size(), x:is_signed(), x:is_nonzero() (dl.is_nonzero), x:is_same_size(y),
--   x:is_complex()                          bytes per element, a dtype with negative values,
--                                           the one element's truth, equal shapes, false
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local methods, dl = T.methods, T.dl
local type, ipairs, pairs = type, ipairs, pairs

local check = T.check_tensor   -- (op, x): an error naming op unless x is a tensor

-- A tensor bound as torch's clamp_min(Tensor): broadcast, both promoted to their result
-- type, a NaN on either side kept; the gradient goes to x where it stands (ties too), else
-- to the bound.
local function one_bound(op, x, v, keep)
  check(op, x)
  if T.is_tensor(v) then
    if not pcall(dl.broadcast_shapes, x.shape, v.shape) then
      raise(op .. ": x " .. T.shape_str(x.shape) .. " and the bound " .. T.shape_str(v.shape) .. " do not broadcast")
    end
    local dtype = dl.result_type(x, v)
    local a, b = x:to(dtype), v:to(dtype)
    return dl.where(keep(a, b):logical_or(a:isnan()), a, b)
  end
  if type(v) ~= "number" then bad_arg(op, "a bound (a number or a tensor)", v) end
  if op == "clamp_min" then return x:clamp(v, nil) end
  return x:clamp(nil, v)
end
function methods.clamp_min(x, lo) return one_bound("clamp_min", x, lo, function(a, b) return a:ge(b) end) end
function methods.clamp_max(x, hi) return one_bound("clamp_max", x, hi, function(a, b) return a:le(b) end) end
function methods.swapaxes(x, a, b) check("swapaxes", x) return x:transpose(a, b) end
methods.swapdims = methods.swapaxes

-- The dims of `from` (a number or a list) go to the positions of `to` (as many), the
-- others keep their order in the places left, as numpy's moveaxis.
function methods.movedim(x, from, to)
  local op = "movedim"
  check(op, x)
  local n = x:dim()
  local function list(v, what)
    local l = type(v) == "number" and { v } or v
    if type(l) ~= "table" then bad_arg(op, what .. " (a dim or a list of dims)", v) end
    local out, seen = {}, {}
    for i, d in ipairs(l) do
      d = core.positive_dim(op, d, n)
      if seen[d] then raise(op .. ": dimension " .. d .. " repeats in " .. what) end
      seen[d], out[i] = true, d
    end
    return out
  end
  local src, dst = list(from, "source"), list(to, "destination")
  if #src ~= #dst then
    raise(op .. ": " .. #src .. " source dims for " .. #dst .. " destinations")
  end
  local order, placed, moved = {}, {}, {}
  for i, d in ipairs(dst) do order[d], moved[src[i]] = src[i], true end
  local rest = {}
  for d = 1, n do if not moved[d] then rest[#rest + 1] = d end end
  local k = 1
  for pos = 1, n do
    if order[pos] == nil then
      order[pos] = rest[k]
      k = k + 1
    end
    placed[pos] = order[pos]
  end
  return x:permute(placed)
end
methods.moveaxis = methods.movedim
dl.movedim, dl.moveaxis, dl.swapaxes, dl.swapdims = methods.movedim, methods.movedim, methods.swapaxes, methods.swapdims

-- The view and indexing methods as functions of dl too, as torch.reshape(x, shape) ...
for _, name in ipairs({ "gather", "index_select", "narrow", "select", "permute", "flatten", "squeeze", "unsqueeze",
                        "transpose", "reshape", "t" }) do
  dl[name] = methods[name]
end

function methods.type_as(x, y)
  check("type_as", x)
  check("type_as", y)
  return x:to(y.dtype)
end

local function like(x) return { dtype = x.dtype, device = x.device } end
function methods.new_zeros(x, shape) check("new_zeros", x) return dl.zeros(shape, like(x)) end
function methods.new_ones(x, shape) check("new_ones", x) return dl.ones(shape, like(x)) end
function methods.new_full(x, shape, v) check("new_full", x) return dl.full(shape, v, like(x)) end
function methods.new_tensor(x, data) check("new_tensor", x) return dl.tensor(data, like(x)) end

function methods.uniform_(x, a, b) check("uniform_", x) return dl.nn.init.uniform_(x, a, b) end
function methods.normal_(x, mean, std) check("normal_", x) return dl.nn.init.normal_(x, mean, std) end

function methods.clip(x, lo, hi) check("clip", x) return x:clamp(lo, hi) end
function methods.clip_(x, lo, hi) check("clip_", x) return x:clamp_(lo, hi) end
function methods.absolute(x) check("absolute", x) return x:abs() end
function methods.negative(x) check("negative", x) return x:neg() end
function methods.positive(x) check("positive", x) return x end
function methods.ravel(x) check("ravel", x) return x:reshape(-1) end
function methods.msort(x) check("msort", x) return (x:sort(1)) end
function methods.tolist(x) check("tolist", x) return x:totable() end
function methods.ndimension(x) check("ndimension", x) return x:dim() end
function methods.new_empty(x, shape) check("new_empty", x) return dl.empty(shape, like(x)) end
dl.clip, dl.absolute, dl.negative, dl.positive, dl.ravel, dl.msort =
  methods.clip, methods.absolute, methods.negative, methods.positive, methods.ravel, methods.msort

function dl.ger(a, b) return dl.outer(a, b) end
function dl.inner(a, b)
  check("inner", a)
  check("inner", b)
  if a:dim() == 0 or b:dim() == 0 then return a * b end
  if a:size(-1) ~= b:size(-1) then
    raise("inner: the last dims differ: " .. T.shape_str(a.shape) .. " and " .. T.shape_str(b.shape))
  end
  return dl.tensordot(a, b, { { a:dim() }, { b:dim() } })
end
-- (a method only: dl.dist is the distributed module)
function methods.dist(a, b, p)
  check("dist", a)
  T.check_broadcast("dist", a, b)
  return dl.linalg.vector_norm(a - b, p or 2)
end
methods.ger, methods.inner = dl.ger, dl.inner

-- t + value a b, t + value a / b (PyTorch's addcmul and addcdiv; optimizers' updates).
local VALUE_OPTS = { value = true }
local function addc(op, combine)
  return function(t, a, b, opts)
    check(op, t)
    opts = core.options(op, opts, VALUE_OPTS)
    local value = opts.value or 1
    if type(value) ~= "number" then bad_arg(op, "a number for value", value) end
    T.check_broadcast(op, a, b)
    local term = combine(a, b)
    return t + (value == 1 and term or term * value)
  end
end
dl.addcmul = addc("addcmul", function(a, b) return a * b end)
dl.addcdiv = addc("addcdiv", function(a, b) return a / b end)
methods.addcmul, methods.addcdiv = dl.addcmul, dl.addcdiv
function methods.addcmul_(t, a, b, opts) return T.write_into("addcmul_", t, dl.addcmul(t, a, b, opts)) end
function methods.addcdiv_(t, a, b, opts) return T.write_into("addcdiv_", t, dl.addcdiv(t, a, b, opts)) end

-- dl.linalg's functions as methods, PyTorch's names (inverse for inv).
for name, fn in pairs({ det = "det", inverse = "inv", pinverse = "pinv", slogdet = "slogdet", cholesky = "cholesky",
                        qr = "qr", svd = "svd" }) do
  methods[name] = function(x, ...) return dl.linalg[fn](x, ...) end
end
function methods.logdet(x)
  local sign, logabs = dl.linalg.slogdet(x)
  return dl.where(sign:lt(0), 0 / 0, dl.where(sign:eq(0), -math.huge, logabs))
end
dl.logdet = methods.logdet

dl.multiply, methods.multiply = dl.mul, methods.mul
dl.subtract, methods.subtract = dl.sub, methods.sub
dl.divide, methods.divide = dl.div, methods.div

-- maximum and minimum that take the other operand where one is NaN (NaN only where both
-- are), as PyTorch's fmax and fmin.
local function nan_ignoring(name, pick)
  return function(a, b)
    check(name, a)
    if not T.is_tensor(b) and type(b) ~= "number" then bad_arg(name, "a tensor or a number", b) end
    local m = pick(a, b)
    return dl.where(a:ne(a), b, dl.where(m:ne(m), a, m))
  end
end
dl.fmax = nan_ignoring("fmax", dl.maximum)
dl.fmin = nan_ignoring("fmin", dl.minimum)
methods.fmax, methods.fmin = dl.fmax, dl.fmin

-- ---- comparisons and other spellings, in place ----------------------------------------------

local into = require("dlua.pointwise").into

for _, name in ipairs({ "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or" }) do
  local op, f = name .. "_", methods[name]
  methods[op] = function(x, y) return into(op, x, f, y) end
end
for other, name in pairs({ greater = "gt", greater_equal = "ge", less = "lt", less_equal = "le", not_equal = "ne" }) do
  dl[other], methods[other], methods[other .. "_"] = dl[name], methods[name], methods[name .. "_"]
end
for _, name in ipairs({ "cos", "sin", "tan", "cosh", "sinh", "tanh", "tan2" }) do
  local arc, a = "arc" .. name, "a" .. name
  dl[arc], methods[arc], dl[arc .. "_"], methods[arc .. "_"] = dl[a], methods[a], methods[a .. "_"], methods[a .. "_"]
end
methods.multiply_, methods.divide_, methods.subtract_ = methods.mul_, methods.div_, methods.sub_
methods.true_divide_, methods.negative_, methods.absolute_ = methods.div_, methods.neg_, methods.abs_

dl.clamp_min, dl.clamp_max = methods.clamp_min, methods.clamp_max
function methods.clamp_min_(x, lo) return into("clamp_min_", x, methods.clamp_min, lo) end
function methods.clamp_max_(x, hi) return into("clamp_max_", x, methods.clamp_max, hi) end
for _, name in ipairs({ "nan_to_num", "tril", "triu", "cumsum", "cumprod" }) do
  local op = name .. "_"
  methods[op] = function(x, ...) return into(op, x, methods[name], ...) end
end

dl.concatenate = dl.cat

function dl.rsub(a, b, opts)
  check("rsub", a)
  opts = core.options("rsub", opts, { alpha = true })
  local alpha = opts.alpha or 1
  if type(alpha) ~= "number" then bad_arg("rsub", "a number for alpha", alpha) end
  if type(b) ~= "number" and not T.is_tensor(b) then bad_arg("rsub", "a tensor or a number", b) end
  if T.is_tensor(b) then T.check_broadcast("rsub", a, b) end
  return b - (alpha == 1 and a or a * alpha)
end

local SCALAR_OPTS = { dtype = true, device = true }
function dl.scalar_tensor(v, opts)
  opts = core.options("scalar_tensor", opts, SCALAR_OPTS)
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then bad_arg("scalar_tensor", "a number", v) end
  return dl.full({}, v, { dtype = opts.dtype or dl.get_default_dtype(), device = opts.device })
end

function dl.fill(x, v)
  check("fill", x)
  if T.is_tensor(v) then
    if v:dim() ~= 0 then raise("fill: the value must be a number or a 0-dim tensor, got shape " .. T.shape_str(v.shape)) end
    return v:to(x.dtype):to(x.device):expand(x.shape):contiguous()
  end
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then bad_arg("fill", "a number or a 0-dim tensor", v) end
  return dl.full(x.shape, v, like(x))
end

-- ---- questions -----------------------------------------------------------------------------

local ELEMENT_SIZE = { bool = 1, uint8 = 1, int32 = 4, int64 = 8, float16 = 2, bfloat16 = 2, float32 = 4, float64 = 8 }
function methods.element_size(x) check("element_size", x) return ELEMENT_SIZE[x.dtype] end
function methods.is_signed(x) check("is_signed", x) return x.dtype ~= "uint8" and x.dtype ~= "bool" end
function methods.is_complex(x) check("is_complex", x) return false end
function methods.is_same_size(x, y)
  check("is_same_size", x)
  check("is_same_size", y)
  if x:dim() ~= y:dim() then return false end
  for d = 1, x:dim() do
    if x:size(d) ~= y:size(d) then return false end
  end
  return true
end
function methods.is_nonzero(x)
  check("is_nonzero", x)
  local n = x:numel()
  if n ~= 1 then
    raise("is_nonzero: the truth of a tensor of " .. (n == 0 and "no values" or n .. " values")
          .. " is ambiguous (shape " .. T.shape_str(x.shape) .. "); it takes one element")
  end
  local v = x:item()
  return v ~= 0 and v ~= false
end
dl.is_nonzero = methods.is_nonzero

return {}
