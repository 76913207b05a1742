-- dlua.distributions.transformed: distributions made of others, as torch.distributions':
--
--   local T = dl.distributions.transforms
--   local squashed = D.TransformedDistribution(D.Normal(mu, sigma), {T.TanhTransform(),
--                                              T.AffineTransform(0, 2)})   -- a bounded policy
--   local mix = D.MixtureSameFamily(D.Categorical({logits = w}), D.Normal(mus, sigmas))
--
-- A transform t maps x to t(x), back with t:inv(y), and t:log_abs_det_jacobian(x, y) is
-- log |dy/dx| elementwise: ExpTransform, AffineTransform(loc, scale), SigmoidTransform,
-- TanhTransform, PowerTransform(exponent), and ComposeTransform({t1, t2, ...}).
-- TransformedDistribution(base, t or {t1, t2, ...}) draws base's samples through them
-- (rsample when base has it) and scores y by base's log_prob at the preimage less the
-- log-Jacobians (summed over base's event dims). MixtureSameFamily(mixture, components):
-- components' batch's last dim is the mixture's categories.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, dl = T.is_tensor, T.dl
local type, ipairs, setmetatable, getmetatable, tostring = type, ipairs, setmetatable, getmetatable, tostring
local D, class, with_properties, concat, sum_last = B.D, B.class, B.with_properties, B.concat, B.sum_last
local eps_of = B.eps_of

-- ---- transforms -----------------------------------------------------------------------------

local transforms = {}
D.transforms = transforms

local Transform = {}
Transform.__index = Transform
Transform.__call = function(self, x) return self:forward(x) end
Transform.__tostring = function(self) return self.__name .. "()" end
Transform.sign = 1   -- (+1: increasing, -1: decreasing)

local function transform(name, fields)
  local cls = setmetatable({ __name = name }, { __index = Transform })
  cls.__index, cls.__call, cls.__tostring = cls, Transform.__call, Transform.__tostring
  for k, v in pairs(fields) do cls[k] = v end
  transforms[name] = function(...) return cls.new and cls.new(...) or setmetatable({}, cls) end
  return cls
end

local function is_transform(v)
  local mt = getmetatable(v)
  return type(v) == "table" and mt ~= nil and getmetatable(mt) ~= nil and getmetatable(mt).__index == Transform
end

transform("ExpTransform", {
  forward = function(_, x) return x:exp() end,
  inv = function(_, y) return y:log() end,
  log_abs_det_jacobian = function(_, x) return x end,
})

local Affine = transform("AffineTransform", {
  forward = function(self, x) return x * self.scale + self.loc end,
  inv = function(self, y) return (y - self.loc) / self.scale end,
  log_abs_det_jacobian = function(self, x) return (x * 0 + self.scale):abs():log() end,
})
function Affine.new(loc, scale)
  for what, v in pairs({ loc = loc, scale = scale }) do
    if type(v) ~= "number" and not is_tensor(v) then bad_arg("AffineTransform", what .. " (a number or a tensor)", v) end
  end
  local sign = 1
  if type(scale) == "number" then
    if scale == 0 then raise("AffineTransform: scale must not be 0") end
    sign = scale > 0 and 1 or -1
  else
    sign = nil   -- (a tensor's signs may differ: cdf needs one)
  end
  return setmetatable({ loc = loc, scale = scale, sign = sign }, Affine)
end
Affine.__tostring = function(self) return "AffineTransform(" .. tostring(self.loc) .. ", " .. tostring(self.scale) .. ")" end

transform("SigmoidTransform", {
  forward = function(_, x) return x:sigmoid() end,
  inv = function(_, y)
    local e = eps_of(y)
    y = y:clamp(e, 1 - e)
    return y:log() - (-y):log1p()
  end,
  log_abs_det_jacobian = function(_, x) return -dl.softplus(-x) - dl.softplus(x) end,
})

transform("TanhTransform", {
  forward = function(_, x) return x:tanh() end,
  inv = function(_, y)
    local e = eps_of(y)
    return y:clamp(-1 + e, 1 - e):atanh()
  end,
  -- log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2 x)), stable for large |x|
  log_abs_det_jacobian = function(_, x) return (-x - dl.softplus(x * -2) + math.log(2)) * 2 end,
})

local Power = transform("PowerTransform", {
  forward = function(self, x) return x:pow(self.exponent) end,
  inv = function(self, y) return y:pow(1 / self.exponent) end,
  log_abs_det_jacobian = function(self, x, y) return (y * self.exponent / x):abs():log() end,
})
function Power.new(exponent)
  if type(exponent) ~= "number" or exponent == 0 then bad_arg("PowerTransform", "a non-zero exponent", exponent) end
  return setmetatable({ exponent = exponent, sign = exponent > 0 and 1 or -1 }, Power)
end
Power.__tostring = function(self) return "PowerTransform(" .. self.exponent .. ")" end

local Compose = transform("ComposeTransform", {
  forward = function(self, x)
    for _, t in ipairs(self.parts) do x = t(x) end
    return x
  end,
  inv = function(self, y)
    for i = #self.parts, 1, -1 do y = self.parts[i]:inv(y) end
    return y
  end,
  log_abs_det_jacobian = function(self, x)
    local total
    for _, t in ipairs(self.parts) do
      local y = t(x)
      local j = t:log_abs_det_jacobian(x, y)
      total = total and total + j or j
      x = y
    end
    return total
  end,
})

-- A list of transforms (or one), checked.
local function transform_list(op, ts)
  if is_transform(ts) then return { ts } end
  if type(ts) ~= "table" or #ts == 0 then bad_arg(op, "a transform or a list of them", ts) end
  for i, t in ipairs(ts) do
    if not is_transform(t) then bad_arg(op, "transform " .. i .. " (from dl.distributions.transforms)", t) end
  end
  return ts
end

function Compose.new(ts)
  local parts = transform_list("ComposeTransform", ts)
  local sign = 1
  for _, t in ipairs(parts) do sign = t.sign and sign and sign * t.sign or nil end
  return setmetatable({ parts = parts, sign = sign }, Compose)
end
Compose.__tostring = function(self)
  local names = {}
  for i, t in ipairs(self.parts) do names[i] = tostring(t) end
  return "ComposeTransform(" .. table.concat(names, ", ") .. ")"
end

-- ---- TransformedDistribution ----------------------------------------------------------------

local Transformed = class("TransformedDistribution")
function Transformed.new(base, ts)
  local op = "TransformedDistribution"
  if type(base) ~= "table" or getmetatable(base) == nil or base.log_prob == nil then bad_arg(op, "a distribution", base) end
  local chain = transforms.ComposeTransform(transform_list(op, ts))
  return setmetatable({ base_dist = base, transforms = chain.parts, _chain = chain, batch_shape = base.batch_shape,
                        event_shape = base.event_shape, _like = base._like, _validate = base._validate }, Transformed)
end
function Transformed:__repr() return "TransformedDistribution(" .. tostring(self.base_dist) .. ", " .. tostring(self._chain) .. ")" end
function Transformed:rsample(shape) return self._chain(self.base_dist:rsample(shape)) end
function Transformed:sample(shape)
  return dl.no_grad(function() return self._chain(self.base_dist:sample(shape)) end)
end
function Transformed:log_prob(y)
  y = self:_value("log_prob", y)
  local n = #self.event_shape
  local lp
  for i = #self.transforms, 1, -1 do
    local t = self.transforms[i]
    local x = t:inv(y)
    local j = sum_last(t:log_abs_det_jacobian(x, y), n)
    lp = lp and lp - j or -j
    y = x
  end
  return lp + self.base_dist:log_prob(y)
end
-- cdf and icdf through increasing (or decreasing) transforms, as PyTorch's.
function Transformed:cdf(y)
  local sign = self._chain.sign
  if sign == nil then raise("TransformedDistribution.cdf: the transforms' direction is not known (a tensor scale)") end
  local x = self._chain:inv(self:_value("cdf", y))
  local c = self.base_dist:cdf(x)
  return sign == 1 and c or 1 - c
end
function Transformed:icdf(q)
  local sign = self._chain.sign
  if sign == nil then raise("TransformedDistribution.icdf: the transforms' direction is not known (a tensor scale)") end
  q = self:_value("icdf", q)
  return self._chain(self.base_dist:icdf(sign == 1 and q or 1 - q))
end
with_properties(Transformed)

-- ---- MixtureSameFamily ------------------------------------------------------------------------

-- MixtureSameFamily(mixture (a Categorical over K), components (batch (..., K))).
local Mixture = class("MixtureSameFamily")
function Mixture.new(mixture, components)
  local op = "MixtureSameFamily"
  if getmetatable(mixture) ~= D.Categorical then bad_arg(op, "a Categorical as the mixture", mixture) end
  if type(components) ~= "table" or getmetatable(components) == nil or components.log_prob == nil then
    bad_arg(op, "a distribution as the components", components)
  end
  local cb = components.batch_shape
  local k = mixture._num_events
  if #cb < 1 or cb[#cb] ~= k then
    raise(op .. ": the components' batch must end in the mixture's " .. k .. " categories, got batch shape "
          .. T.shape_str(cb))
  end
  local batch = {}
  for i = 1, #cb - 1 do batch[i] = cb[i] end
  local mb = mixture.batch_shape
  local same = #mb == #batch
  for i = 1, #batch do same = same and mb[i] == batch[i] end
  if not same then
    raise(op .. ": the mixture's batch " .. T.shape_str(mb) .. " must be the components' " .. T.shape_str(batch))
  end
  return setmetatable({ mixture_distribution = mixture, component_distribution = components, batch_shape = batch,
                        event_shape = components.event_shape, _like = components._like }, Mixture)
end
function Mixture:__repr()
  return "MixtureSameFamily(" .. tostring(self.mixture_distribution) .. ", " .. tostring(self.component_distribution) .. ")"
end
-- The mixture's weights with a dim of 1 for each of the components' event dims.
local function weights(self, t)
  local w = t
  for _ = 1, #self.event_shape do w = w:unsqueeze(-1) end
  return w
end
function Mixture:_get_mean()
  local m = self.component_distribution.mean
  return (weights(self, self.mixture_distribution.probs) * m):sum(-1 - #self.event_shape)
end
function Mixture:_get_variance()
  local d = -1 - #self.event_shape
  local p = weights(self, self.mixture_distribution.probs)
  local c = self.component_distribution
  local mean = (p * c.mean):sum(d, true)
  return (p * c.variance):sum(d) + (p * (c.mean - mean):pow(2)):sum(d)
end
function Mixture:log_prob(v)
  v = self:_value("log_prob", v)
  local x = v:unsqueeze(-1 - #self.event_shape)
  local lp = self.component_distribution:log_prob(x)
  return (lp + self.mixture_distribution.logits):logsumexp(-1)
end
function Mixture:sample(shape)
  return dl.no_grad(function()
    local which = self.mixture_distribution:sample(shape)               -- shape .. batch, 1..K
    local all = self.component_distribution:sample(shape)               -- shape .. batch .. K .. event
    local idx = which
    for _ = 1, #self.event_shape + 1 do idx = idx:unsqueeze(-1) end
    local want = all.shape
    want[#want - #self.event_shape] = 1
    idx = idx:expand(want)
    return all:gather(-1 - #self.event_shape, idx):squeeze(-1 - #self.event_shape)
  end)
end
with_properties(Mixture)

return transforms
