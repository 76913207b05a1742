-- dlua.nn.activations: the rest of PyTorch's pointwise activations, as functions of
-- dl.nn.functional and as layers of dl.nn (loaded when one is first used):
--
--   F.elu(x [, alpha = 1])        nn.ELU([alpha])          x > 0 and x or alpha (e^x - 1)
--   F.selu(x)                     nn.SELU()                1.0507 elu(x, 1.67326)
--   F.celu(x [, alpha = 1])       nn.CELU([alpha])         max(0, x) + min(0, alpha (e^(x/alpha) - 1))
--   F.hardtanh(x [, lo, hi])      nn.Hardtanh([lo, hi])    x clamped to [lo, hi] = [-1, 1]
--   F.relu6(x)                    nn.ReLU6()               x clamped to [0, 6]
--   F.hardsigmoid(x)              nn.Hardsigmoid()         relu6(x + 3) / 6
--   F.hardswish(x)                nn.Hardswish()           x relu6(x + 3) / 6
--   F.mish(x)                     nn.Mish()                x tanh(softplus(x))
--   F.softsign(x)                 nn.Softsign()            x / (1 + |x|)
--   F.prelu(x, weight)            nn.PReLU([n = 1, init = 0.25])   max(0, x) + weight min(0, x)
--   F.logsigmoid, F.softmin(x, dim), F.glu(x, dim), F.softshrink, F.hardshrink, F.tanhshrink,
--   F.threshold(x, t, v) and their layers; F.gumbel_softmax(logits [, {tau, hard, dim}])
--
-- Each is made of the engine's differentiable ops, so gradients (to any order), dl.compile,
-- dl.vmap and dl.export follow, with PyTorch 1.13's gradients at the corners: elu, selu,
-- celu and prelu take the x <= 0 side's at 0, hardtanh, relu6 and hardsigmoid pass none
-- at their bounds, and hardswish's is x / 3 + 1/2 at -3 and 1 at 3; the second
-- derivatives of elu, selu, celu and hardswish are 0 at those corners (0 and -3). At NaN,
-- elu, selu, celu, hardtanh, relu6, hardswish, threshold and hardshrink pass the gradient
-- as PyTorch's. The exponential side reads x clamped to at most 0: e^x where x is large
-- would make its (unused) gradient 0 inf = NaN.
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, shape_str = T.is_tensor, T.shape_str
local dl = T.dl
local type, tostring = type, tostring

local F, L = {}, {}

local function check(op, x)
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
end
local function number(op, what, v, default)
  if v == nil then return default end
  if type(v) ~= "number" then raise(op .. ": " .. what .. " must be a number, got " .. core.typename(v)) end
  return v
end

-- x where x > 0, else alpha (e^(x / scale) - 1): scale is alpha for celu, 1 otherwise.
-- The value is expm1's; the gradient is e^b, not expm1's own e^b - 1 + 1, which cancels
-- in float32 below -5. It is the gradient of e^u (1 + d) with u = b live only below 0 and
-- d = 0 live only at 0, so that the second derivative there is 0, as PyTorch's.
local function elu(x, alpha, scale)
  local b = x:clamp(nil, 0)
  if scale ~= 1 then b = b / scale end
  if not dl.is_grad_enabled() then return dl.where(x:le(0), b:expm1() * alpha, x) end   -- (the value alone)
  local neg, fixed = x:lt(0), b:detach()
  local u, d = dl.where(neg, b, fixed), dl.where(neg, 0, b - fixed)
  local live = u:exp() * (d + 1)
  return dl.where(x:le(0), (b:expm1():detach() + (live - live:detach())) * alpha, x)
end

function F.elu(x, alpha)
  check("elu", x)
  return elu(x, number("elu", "alpha", alpha, 1), 1)
end

local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
function F.selu(x)
  check("selu", x)
  return elu(x, SELU_ALPHA, 1) * SELU_SCALE
end

function F.celu(x, alpha)
  check("celu", x)
  alpha = number("celu", "alpha", alpha, 1)
  if alpha == 0 then raise("celu: alpha must not be 0") end
  return elu(x, alpha, alpha)
end

-- x clamped to [lo, hi], with a gradient only strictly inside (and at NaN).
local function hard_clamp(x, lo, hi)
  return dl.where(x:le(lo):logical_or(x:ge(hi)), x:clamp(lo, hi):detach(), x)
end

function F.hardtanh(x, lo, hi)
  check("hardtanh", x)
  lo, hi = number("hardtanh", "min_val", lo, -1), number("hardtanh", "max_val", hi, 1)
  if lo > hi then raise("hardtanh: min_val (" .. lo .. ") is greater than max_val (" .. hi .. ")") end
  return hard_clamp(x, lo, hi)
end

function F.relu6(x)
  check("relu6", x)
  return hard_clamp(x, 0, 6)
end

function F.hardsigmoid(x)
  check("hardsigmoid", x)
  local s = x + 3
  return dl.where(s:gt(0):logical_and(s:lt(6)), s, s:clamp(0, 6):detach()) / 6
end

-- x (x + 3) / 6 on [-3, 3), 0 below and x above; x is held fixed at -3 so that the second
-- derivative there is 0 (the first -1/2), as PyTorch's. (At 3 the derivative is 1, as
-- PyTorch's vectorised kernel gives it; its scalar loop, for short tensors, gives 3/2.)
function F.hardswish(x)
  check("hardswish", x)
  local factor = dl.where(x:lt(-3), 0, dl.where(x:lt(3), x + 3, 6))
  return dl.where(x:eq(-3), x:detach(), x) * factor / 6
end

function F.mish(x)
  check("mish", x)
  return x * dl.softplus(x):tanh()
end

function F.softsign(x)
  check("softsign", x)
  return x / (x:abs() + 1)
end

-- weight: one value, or one per channel (dim 2 of x; x's only dim when it has one).
function F.prelu(x, weight)
  check("prelu", x)
  if not is_tensor(weight) then bad_arg("prelu", "a weight tensor", weight) end
  local n = weight:numel()
  if weight:dim() > 1 then raise("prelu: expected a weight of one dim, got shape " .. shape_str(weight)) end
  if n ~= 1 then
    local c = x:dim() >= 2 and x:size(2) or (x:dim() == 1 and 1 or 0)
    if n ~= c then
      raise("prelu: a weight of " .. n .. " values needs " .. n .. " channels (dim 2), got input of shape "
            .. shape_str(x))
    end
    local shape = { n }
    for _ = 3, x:dim() do shape[#shape + 1] = 1 end
    weight = weight:view(shape)
  elseif weight:dim() == 1 then
    weight = weight:view({})
  end
  return dl.where(x:gt(0), x, x * weight)
end

-- log sigmoid(x) = -softplus(-x); softmin(x, dim) = softmax(-x, dim).
function F.logsigmoid(x)
  check("logsigmoid", x)
  return -dl.softplus(-x)
end
function F.softmin(x, dim)
  check("softmin", x)
  return dl.softmax(-x, dim or -1)
end

-- glu(x [, dim = -1]): a sigmoid(b) for x's two halves a, b along dim.
function F.glu(x, dim)
  check("glu", x)
  dim = core.positive_dim("glu", dim or -1, x:dim())
  local n = x:size(dim)
  if n % 2 ~= 0 then raise("glu: dim " .. dim .. " must have an even size, got " .. n) end
  return x:narrow(dim, 1, n / 2) * dl.sigmoid(x:narrow(dim, n / 2 + 1, n / 2))
end

-- The shrinkages: softshrink(x, l) = x -+ l outside [-l, l], else 0; hardshrink(x, l) = x
-- outside [-l, l], else 0; tanhshrink(x) = x - tanh(x); threshold(x, t, v) = x where
-- x > t, else v.
function F.softshrink(x, l)
  check("softshrink", x)
  l = number("softshrink", "lambd", l, 0.5)
  if l < 0 then raise("softshrink: lambd must be >= 0, got " .. l) end
  return dl.where(x:gt(l), x - l, dl.where(x:lt(-l), x + l, 0))
end
function F.hardshrink(x, l)
  check("hardshrink", x)
  l = number("hardshrink", "lambd", l, 0.5)
  return dl.where(x:abs():le(l), 0, x)
end
function F.tanhshrink(x)
  check("tanhshrink", x)
  return x - dl.tanh(x)
end
function F.threshold(x, t, v)
  check("threshold", x)
  t, v = number("threshold", "threshold", t, nil), number("threshold", "value", v, nil)
  if t == nil or v == nil then raise("threshold: expected a threshold and a value") end
  return dl.where(x:le(t), v, x)
end

-- rrelu(x [, lower = 1/8, upper = 1/3, training = false]): leaky ReLU with a random slope
-- per element, uniform in [lower, upper], while training; the mean slope otherwise.
function F.rrelu(x, lower, upper, training)
  check("rrelu", x)
  lower, upper = number("rrelu", "lower", lower, 1 / 8), number("rrelu", "upper", upper, 1 / 3)
  if lower > upper then raise("rrelu: lower (" .. lower .. ") must not exceed upper (" .. upper .. ")") end
  local slope
  if training then
    slope = dl.rand(x.shape, { dtype = x.dtype, device = x.device }) * (upper - lower) + lower
  else
    slope = (lower + upper) / 2
  end
  return dl.where(x:gt(0), x, x * slope)
end

-- gumbel_softmax(logits [, {tau = 1, hard = false, dim = -1}]): a sample of the
-- Gumbel-softmax (concrete) distribution; with hard, one-hot in the forward pass and the
-- soft sample's gradient (straight-through), as PyTorch's.
function F.gumbel_softmax(logits, opts)
  check("gumbel_softmax", logits)
  opts = core.options("gumbel_softmax", opts, { tau = true, hard = true, dim = true })
  local tau = number("gumbel_softmax", "tau", opts.tau, 1)
  local dim = opts.dim or -1
  local u = dl.rand_like(logits):clamp(1e-20)
  local y = dl.softmax((logits - (-u:log()):log()) / tau, dim)
  if not opts.hard then return y end
  local _, idx = y:max(dim, true)
  local hard = dl.zeros_like(y):scatter_add(dim, idx, dl.ones(idx.shape, { dtype = y.dtype, device = y.device }))
  return hard - y:detach() + y
end

-- ---- the layers -----------------------------------------------------------------------------

local fmt = Module.format_args

local activation = require("dlua.nn.layers").activation
activation("SELU", F.selu, L)
activation("ReLU6", F.relu6, L)
activation("Hardsigmoid", F.hardsigmoid, L)
activation("Hardswish", F.hardswish, L)
activation("Mish", F.mish, L)
activation("Softsign", F.softsign, L)
activation("LogSigmoid", F.logsigmoid, L)
activation("Tanhshrink", F.tanhshrink, L)

-- Layers of one option each: Softmin(dim), GLU(dim), Softshrink(lambd), Hardshrink(lambd).
for _, spec in ipairs({ { "Softmin", F.softmin, "dim", -1 }, { "GLU", F.glu, "dim", -1 },
                        { "Softshrink", F.softshrink, "lambd", 0.5 }, { "Hardshrink", F.hardshrink, "lambd", 0.5 } }) do
  local name, fn, key, default = spec[1], spec[2], spec[3], spec[4]
  local cls = Module:extend(name)
  function cls:init(v) self[key] = number(name, key, v, default) end
  function cls:forward(x) return fn(x, self[key]) end
  function cls:extra_repr() return fmt(key, self[key]) end
  L[name] = cls
end

-- RReLU(lower, upper): F.rrelu, random slopes in training mode.
local RReLU = Module:extend("RReLU")
L.RReLU = RReLU
function RReLU:init(lower, upper)
  self.lower, self.upper = number("RReLU", "lower", lower, 1 / 8), number("RReLU", "upper", upper, 1 / 3)
end
function RReLU:forward(x) return F.rrelu(x, self.lower, self.upper, self.training) end
function RReLU:extra_repr() return fmt("lower", self.lower, "upper", self.upper) end

-- Threshold(threshold, value).
local Threshold = Module:extend("Threshold")
L.Threshold = Threshold
function Threshold:init(t, v)
  self.threshold, self.value = number("Threshold", "threshold", t, nil), number("Threshold", "value", v, nil)
  if self.threshold == nil or self.value == nil then raise("Threshold: expected a threshold and a value") end
end
function Threshold:forward(x) return F.threshold(x, self.threshold, self.value) end
function Threshold:extra_repr() return fmt("threshold", self.threshold, "value", self.value) end

for name, fn in pairs({ ELU = F.elu, CELU = F.celu }) do
  local cls = Module:extend(name)
  function cls:init(alpha) self.alpha = number(name, "alpha", alpha, 1) end
  function cls:forward(x) return fn(x, self.alpha) end
  function cls:extra_repr() return fmt("alpha", self.alpha) end
  L[name] = cls
end

local Hardtanh = Module:extend("Hardtanh")
L.Hardtanh = Hardtanh
function Hardtanh:init(lo, hi)
  self.min_val, self.max_val = number("Hardtanh", "min_val", lo, -1), number("Hardtanh", "max_val", hi, 1)
  if self.min_val > self.max_val then
    raise("Hardtanh: min_val (" .. self.min_val .. ") is greater than max_val (" .. self.max_val .. ")")
  end
end
function Hardtanh:forward(x) return F.hardtanh(x, self.min_val, self.max_val) end
function Hardtanh:extra_repr() return fmt("min_val", self.min_val, "max_val", self.max_val) end

-- PReLU([num_parameters = 1, init = 0.25]): a learned slope for x < 0, one or one per channel.
local PReLU = Module:extend("PReLU")
L.PReLU = PReLU
function PReLU:init(n, init)
  n = number("PReLU", "num_parameters", n, 1)
  if n < 1 or n ~= math.floor(n) then raise("PReLU: num_parameters must be a positive integer, got " .. tostring(n)) end
  self.num_parameters = n
  self.weight = dl.Variable(dl.full({ n }, number("PReLU", "init", init, 0.25)), "weight")
end
function PReLU:forward(x) return F.prelu(x, self.weight) end
function PReLU:extra_repr() return fmt("num_parameters", self.num_parameters) end

return { functional = F, layers = L }
