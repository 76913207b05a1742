-- dlua.distributions: probability distributions, as torch.distributions (dl.distributions,
-- loaded when first read):
--
--   local D = dl.distributions
--   local pi = D.Normal(mu, sigma)              -- parameters: tensors or numbers, broadcast
--   local a = pi:rsample()                      -- differentiable in mu and sigma
--   local loss = -(pi:log_prob(a) * advantage):sum()
--   D.kl_divergence(D.Normal(mu, sigma), D.Normal(0, 1))
--
-- Normal, Uniform, Exponential, Laplace, Bernoulli({probs =} or {logits =}),
-- Categorical({probs =} or {logits =}; categories 1..K, as dlua's indices),
-- MultivariateNormal(loc, {covariance_matrix =, scale_tril = or precision_matrix =}) and
-- Independent(base, n). Each has batch_shape and event_shape, sample([shape]) (no
-- gradient), rsample([shape]) where the distribution can be reparameterised, log_prob,
-- entropy, and mean, variance and stddev; the continuous ones on a line also cdf and
-- icdf. Samples come from the generator dl.manual_seed seeds, on the parameters' device
-- and in their dtype. As PyTorch's (validate_args on by default), parameters and the
-- values given to log_prob are checked against their support; {validate_args = false}
-- as a last argument skips those checks (each costs a reduction).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, shape_str, dl = T.is_tensor, T.shape_str, T.dl
local type, ipairs, setmetatable, getmetatable, tostring = type, ipairs, setmetatable, getmetatable, tostring
local unpack, log, pi = unpack or table.unpack, math.log, math.pi

local D = dl.distributions   -- (filled here: the table a script may already hold)
local LOG_SQRT_2PI = 0.5 * log(2 * pi)

-- ---- the common part ------------------------------------------------------------------------

local Distribution = {}
Distribution.__index = Distribution
D.Distribution = Distribution

-- A class: Name(...) makes an instance through its new; instances print as PyTorch's.
local function class(name, parent)
  local cls = { __name = name }
  cls.__index = cls
  cls.__tostring = function(self) return self:__repr() end
  setmetatable(cls, { __index = parent or Distribution, __call = function(c, ...) return c.new(...) end })
  D[name] = cls
  return cls
end

function Distribution:__repr()
  local parts = {}
  for _, k in ipairs(self._params) do
    local v = self[k]
    parts[#parts + 1] = k .. ": " .. (is_tensor(v) and (v:numel() == 1 and tostring(v:item()) or shape_str(v.shape))
                                      or tostring(v))
  end
  return self.__name .. "(" .. table.concat(parts, ", ") .. ")"
end

-- The trailing options table (validate_args), if the last argument is one.
local function take_options(op, args, n)
  local last = args[n]
  if type(last) == "table" and not is_tensor(last) and getmetatable(last) == nil then
    for k in pairs(last) do
      if k ~= "validate_args" then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
    end
    return last.validate_args ~= false, n - 1
  end
  return true, n
end

-- The parameters as tensors of one floating dtype and device, broadcast together: a
-- number takes the dtype and device of the tensors beside it.
local function parameters(op, names, values)
  local like
  for i = 1, #names do
    local v = values[i]
    if is_tensor(v) then
      like = like or v
    elseif type(v) ~= "number" then
      bad_arg(op, names[i] .. " (a tensor or a number)", v)
    end
  end
  local out = {}
  for i = 1, #names do
    local v = values[i]
    if type(v) == "number" then
      v = dl.tensor(v, like and { dtype = like:is_floating_point() and like.dtype or nil, device = like.device } or nil)
    elseif not v:is_floating_point() then
      v = v:to(dl.get_default_dtype())
    end
    out[i] = v
  end
  if #out > 1 then
    local ok, err = pcall(function() out = { dl.broadcast_tensors(unpack(out)) } end)
    if not ok then raise(op .. ": the parameters' shapes do not broadcast (" .. tostring(err):gsub("^.-: ", "") .. ")") end
  end
  return out
end

-- Raises "op: what" unless every element of the bool tensor holds.
local function require_all(op, holds, what)
  if not holds:all() then raise(op .. ": " .. what) end
end

local function concat(...)
  local out = {}
  for _, list in ipairs({ ... }) do
    for _, v in ipairs(list) do out[#out + 1] = v end
  end
  return out
end

-- The shape of `shape` draws: shape .. batch_shape .. event_shape.
function Distribution:_extended(shape)
  if shape ~= nil and (type(shape) ~= "table" or is_tensor(shape)) then
    if type(shape) == "number" then shape = { shape } else bad_arg(self.__name .. ".sample", "a shape (a list)", shape) end
  end
  return concat(shape or {}, self.batch_shape, self.event_shape)
end

function Distribution:rsample()
  raise(self.__name .. ".rsample: the distribution cannot be reparameterised (use sample)")
end

-- A draw without gradient: rsample's value, unrecorded.
function Distribution:sample(shape)
  return dl.no_grad(function() return self:rsample(shape) end)
end

-- value checked as log_prob's argument: a tensor (a number becomes one of the
-- parameters' dtype), within the support when validation is on.
function Distribution:_value(op, v)
  if type(v) == "number" then v = dl.tensor(v, { dtype = self._like.dtype, device = self._like.device }) end
  if not is_tensor(v) then bad_arg(self.__name .. "." .. op, "a tensor", v) end
  return v
end

local function unsupported(name, what)
  return function() raise(name .. "." .. what .. ": not defined for this distribution") end
end
Distribution.entropy = function(self) unsupported(self.__name, "entropy")() end
Distribution.cdf = function(self) unsupported(self.__name, "cdf")() end
Distribution.icdf = function(self) unsupported(self.__name, "icdf")() end

-- The properties read as fields (d.mean, d.variance, d.stddev), computed when read.
local PROPERTIES = { mean = true, variance = true, stddev = true, probs = true, logits = true,
                     covariance_matrix = true }
local function with_properties(cls)
  cls.__index = function(self, k)
    if PROPERTIES[k] then
      local raw = rawget(self, "_" .. k)
      if raw ~= nil then return raw end
      local f = cls["_get_" .. k] or (k == "stddev" and function(s) return s.variance:sqrt() end)
      if f then return f(self) end
      raise(cls.__name .. "." .. k .. ": not defined for this distribution")
    end
    return cls[k]
  end
end

-- The constructor of a family whose parameters (`names`) are tensors or numbers; when
-- validation is on, check(params...) gives a bool tensor that must hold everywhere and
-- what it means.
local function constructor(cls, names, check)
  return function(...)
    local op, args = cls.__name, { ... }
    local validate, n = take_options(op, args, select("#", ...))
    if n ~= #names then raise(op .. ": expected " .. table.concat(names, " and ")) end
    local p = parameters(op, names, args)
    if validate then
      local holds, what = check(unpack(p))
      require_all(op, holds, what)
    end
    local self = { batch_shape = p[1].shape, event_shape = {}, _like = p[1], _validate = validate }
    for i, k in ipairs(names) do self[k] = p[i] end
    return setmetatable(self, cls)
  end
end

-- ---- continuous distributions on a line --------------------------------------------------

-- Normal(loc, scale): the Gaussian of mean loc and standard deviation scale (> 0).
local Normal = class("Normal")
Normal._params = { "loc", "scale" }
Normal.new = constructor(Normal, { "loc", "scale" },
  function(_, scale) return scale:gt(0), "scale must be positive" end)
function Normal:_get_mean() return self.loc end
function Normal:_get_variance() return self.scale * self.scale end
function Normal:_get_stddev() return self.scale end
function Normal:rsample(shape)
  local eps = dl.randn(self:_extended(shape), { dtype = self.loc.dtype, device = self.loc.device })
  return self.loc + eps * self.scale
end
function Normal:log_prob(v)
  v = self:_value("log_prob", v)
  local z = (v - self.loc) / self.scale
  return z * z * -0.5 - self.scale:log() - LOG_SQRT_2PI
end
function Normal:entropy() return self.scale:log() + (0.5 + LOG_SQRT_2PI) end
function Normal:cdf(v)
  v = self:_value("cdf", v)
  return ((v - self.loc) / (self.scale * math.sqrt(2))):erf():add(1):mul(0.5)
end
function Normal:icdf(q)
  q = self:_value("icdf", q)
  return self.loc + self.scale * dl.erfinv(q * 2 - 1) * math.sqrt(2)
end
with_properties(Normal)

-- Uniform(low, high): uniform on [low, high) (low < high).
local Uniform = class("Uniform")
Uniform._params = { "low", "high" }
Uniform.new = constructor(Uniform, { "low", "high" },
  function(low, high) return low:lt(high), "low must be below high" end)
function Uniform:_get_mean() return (self.low + self.high) / 2 end
function Uniform:_get_variance() return (self.high - self.low):pow(2) / 12 end
function Uniform:rsample(shape)
  local u = dl.rand(self:_extended(shape), { dtype = self.low.dtype, device = self.low.device })
  return self.low + u * (self.high - self.low)
end
function Uniform:log_prob(v)
  v = self:_value("log_prob", v)
  local inside = self.low:le(v):logical_and(self.high:gt(v))
  if self._validate then require_all("Uniform.log_prob", inside, "a value lies outside [low, high)") end
  return inside:to(self.low.dtype):log() - (self.high - self.low):log()
end
function Uniform:entropy() return (self.high - self.low):log() end
function Uniform:cdf(v)
  v = self:_value("cdf", v)
  return ((v - self.low) / (self.high - self.low)):clamp(0, 1)
end
function Uniform:icdf(q)
  q = self:_value("icdf", q)
  return q * (self.high - self.low) + self.low
end
with_properties(Uniform)

-- Exponential(rate): the waiting time of a Poisson process of that rate (> 0).
local Exponential = class("Exponential")
Exponential._params = { "rate" }
Exponential.new = constructor(Exponential, { "rate" },
  function(rate) return rate:gt(0), "rate must be positive" end)
function Exponential:_get_mean() return self.rate:reciprocal() end
function Exponential:_get_variance() return self.rate:pow(-2) end
function Exponential:rsample(shape)
  local u = dl.rand(self:_extended(shape), { dtype = self.rate.dtype, device = self.rate.device })
  return -(-u):log1p() / self.rate
end
function Exponential:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("Exponential.log_prob", v:ge(0), "a value is negative") end
  return self.rate:log() - self.rate * v
end
function Exponential:entropy() return 1 - self.rate:log() end
function Exponential:cdf(v) return 1 - (-self.rate * self:_value("cdf", v)):exp() end
function Exponential:icdf(q) return -(-self:_value("icdf", q)):log1p() / self.rate end
with_properties(Exponential)

-- Laplace(loc, scale): the double exponential about loc.
local Laplace = class("Laplace")
Laplace._params = { "loc", "scale" }
Laplace.new = constructor(Laplace, { "loc", "scale" },
  function(_, scale) return scale:gt(0), "scale must be positive" end)
function Laplace:_get_mean() return self.loc end
function Laplace:_get_variance() return self.scale * self.scale * 2 end
function Laplace:rsample(shape)
  -- u uniform on (-1, 1): the inverse cdf (PyTorch's, its lower end nudged off -1)
  local u = dl.rand(self:_extended(shape), { dtype = self.loc.dtype, device = self.loc.device }) * 2 - 1
  local tiny = self.loc.dtype == "float64" and 2.220446049250313e-16 or 1.1920928955078125e-07
  u = u:clamp(tiny - 1, 1)
  return self.loc - self.scale * u:sign() * (-u:abs()):log1p()
end
function Laplace:log_prob(v)
  v = self:_value("log_prob", v)
  return -(self.scale * 2):log() - (v - self.loc):abs() / self.scale
end
function Laplace:entropy() return (self.scale * 2):log() + 1 end
function Laplace:cdf(v)
  local d = self:_value("cdf", v) - self.loc
  return 0.5 - d:sign() * (-d:abs() / self.scale):expm1() * 0.5
end
function Laplace:icdf(q)
  local t = self:_value("icdf", q) - 0.5
  return self.loc - self.scale * t:sign() * (t:abs() * -2):log1p()
end
with_properties(Laplace)

-- ---- discrete distributions ------------------------------------------------------------------

-- probs or logits from an options table {probs =} or {logits =} (exactly one).
local function probs_or_logits(op, args, n)
  local spec = args[1]
  if n ~= 1 or type(spec) ~= "table" or is_tensor(spec) then
    raise(op .. ": expected {probs = p} or {logits = l}")
  end
  local validate = spec.validate_args ~= false
  for k in pairs(spec) do
    if k ~= "probs" and k ~= "logits" and k ~= "validate_args" then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
  end
  if (spec.probs == nil) == (spec.logits == nil) then raise(op .. ": give one of probs and logits") end
  local which = spec.probs ~= nil and "probs" or "logits"
  return which, parameters(op, { which }, { spec[which] })[1], validate
end

-- The float epsilon of a dtype (PyTorch's clamp_probs: probabilities kept off 0 and 1).
local function eps_of(t) return t.dtype == "float64" and 2.220446049250313e-16 or 1.1920928955078125e-07 end

-- Bernoulli({probs = p} or {logits = l}): 1 with probability p.
local Bernoulli = class("Bernoulli")
function Bernoulli.new(...)
  local which, t, validate = probs_or_logits("Bernoulli", { ... }, select("#", ...))
  local self = setmetatable({ batch_shape = t.shape, event_shape = {}, _like = t, _validate = validate,
                              _params = { which } }, Bernoulli)
  if which == "probs" then
    if validate then require_all("Bernoulli", t:ge(0):logical_and(t:le(1)), "probs must lie in [0, 1]") end
    self._probs = t
  else
    self._logits = t
  end
  return self
end
function Bernoulli:_get_probs() return self._logits:sigmoid() end
function Bernoulli:_get_logits()
  local p = self._probs:clamp(eps_of(self._probs), 1 - eps_of(self._probs))
  return p:log() - (-p):log1p()
end
function Bernoulli:_get_mean() return self.probs end
function Bernoulli:_get_variance() return self.probs * (1 - self.probs) end
function Bernoulli:sample(shape)
  return dl.no_grad(function() return dl.bernoulli(self.probs:expand(self:_extended(shape))) end)
end
function Bernoulli:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("Bernoulli.log_prob", v:eq(0):logical_or(v:eq(1)), "a value is neither 0 nor 1") end
  local l, y = dl.broadcast_tensors(self.logits, v:to(self.logits.dtype))
  return -dl.nn.bce_with_logits(l, y, { reduction = "none" })
end
function Bernoulli:entropy()
  return dl.nn.bce_with_logits(self.logits, self.probs, { reduction = "none" })
end
with_properties(Bernoulli)

-- Categorical({probs = p} or {logits = l}): category k (1..K) with probability p[k] (the
-- last dim: K categories; p need not sum to 1, logits need not be normalised).
local Categorical = class("Categorical")
function Categorical.new(...)
  local which, t, validate = probs_or_logits("Categorical", { ... }, select("#", ...))
  if t:dim() < 1 then raise("Categorical: " .. which .. " must have at least one dim (the categories)") end
  local batch = t.shape
  batch[#batch] = nil
  local self = setmetatable({ batch_shape = batch, event_shape = {}, _like = t, _validate = validate,
                              _params = { which }, _num_events = t:size(-1) }, Categorical)
  if which == "probs" then
    if validate then
      require_all("Categorical", t:ge(0), "probs must be non-negative")
      require_all("Categorical", t:sum(-1):gt(0), "probs must not all be zero")
    end
    self._probs = t / t:sum(-1, true)
  else
    self._logits = t - t:logsumexp(-1, true)
  end
  return self
end
function Categorical:_get_probs() return self._logits:softmax(-1) end
function Categorical:_get_logits()
  local p = self._probs:clamp(eps_of(self._probs), 1 - eps_of(self._probs))
  return p:log()
end
function Categorical:sample(shape)
  return dl.no_grad(function()
    local out = self:_extended(shape)
    local rows = self.probs:reshape(-1, self._num_events)
    local per_row = 1
    for i = 1, #out - #self.batch_shape do per_row = per_row * out[i] end
    -- (n draws per row of the batch, then the sample dims moved in front)
    local draws = dl.multinomial(rows, math.max(per_row, 1), { replacement = true })
    draws = draws:t():reshape(concat({ per_row }, self.batch_shape))
    return draws:reshape(out)
  end)
end
function Categorical:log_prob(v)
  v = self:_value("log_prob", v)
  if v:is_floating_point() then
    if self._validate then require_all("Categorical.log_prob", v:eq(v:floor()), "a value is not a whole number") end
    v = v:to("int64")
  end
  if self._validate then
    require_all("Categorical.log_prob", v:ge(1):logical_and(v:le(self._num_events)),
                "a value is not a category 1.." .. self._num_events)
  end
  local logits = self.logits
  local vv, l = dl.broadcast_tensors(v:unsqueeze(-1), logits)
  return l:gather(-1, vv:narrow(-1, 1, 1)):squeeze(-1)
end
function Categorical:entropy()
  local logits = self.logits
  local floor_ = logits.dtype == "float64" and -1.7976931348623157e308 or -3.4028234663852886e38
  return -(logits:clamp_min(floor_) * self.probs):sum(-1)
end
with_properties(Categorical)

-- ---- multivariate -------------------------------------------------------------------------------

-- MultivariateNormal(loc, {covariance_matrix = S | scale_tril = L | precision_matrix = P}):
-- the Gaussian of mean loc (..., k), through the lower Cholesky factor L of its covariance.
local MultivariateNormal = class("MultivariateNormal")
MultivariateNormal._params = { "loc" }
function MultivariateNormal.new(loc, spec, ...)
  local op = "MultivariateNormal"
  if select("#", ...) > 0 then raise(op .. ": expected loc and one options table") end
  if type(spec) ~= "table" or is_tensor(spec) then
    raise(op .. ": expected {covariance_matrix =}, {scale_tril =} or {precision_matrix =} after loc")
  end
  local given = 0
  for k in pairs(spec) do
    if k == "covariance_matrix" or k == "scale_tril" or k == "precision_matrix" then given = given + 1
    elseif k ~= "validate_args" then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
  end
  if given ~= 1 then raise(op .. ": give exactly one of covariance_matrix, scale_tril and precision_matrix") end
  loc = parameters(op, { "loc" }, { loc })[1]
  if loc:dim() < 1 then raise(op .. ": loc must have at least one dim (the event)") end
  local k = loc:size(-1)
  local m = spec.covariance_matrix or spec.scale_tril or spec.precision_matrix
  m = parameters(op, { "the matrix" }, { m })[1]
  if m:dim() < 2 or m:size(-1) ~= k or m:size(-2) ~= k then
    raise(op .. ": expected a (..., " .. k .. ", " .. k .. ") matrix for loc of shape " .. shape_str(loc.shape)
          .. ", got shape " .. shape_str(m.shape))
  end
  local L
  local ok, err = pcall(function()
    if spec.scale_tril then L = m:tril()
    elseif spec.covariance_matrix then L = dl.linalg.cholesky(m)
    else L = dl.linalg.cholesky(dl.linalg.inv(m)) end
  end)
  if not ok then raise(op .. ": the matrix is not positive definite (" .. tostring(err):gsub("^.-: ", "") .. ")") end
  if spec.validate_args ~= false and spec.scale_tril then
    require_all(op, L:diagonal(0, -2, -1):gt(0), "scale_tril must have a positive diagonal")
  end
  local lb, Lb = loc.shape, L.shape
  lb[#lb] = nil
  Lb[#Lb] = nil
  Lb[#Lb] = nil
  local batch = dl.broadcast_shapes(lb, Lb)
  return setmetatable({ loc = loc:expand(concat(batch, { k })), scale_tril = L:expand(concat(batch, { k, k })),
                        batch_shape = batch, event_shape = { k }, _like = loc, _validate = spec.validate_args ~= false },
                      MultivariateNormal)
end
function MultivariateNormal:_get_mean() return self.loc end
function MultivariateNormal:_get_covariance_matrix() return self.scale_tril:matmul(self.scale_tril:transpose(-2, -1)) end
function MultivariateNormal:_get_variance() return self.scale_tril:pow(2):sum(-1) end
function MultivariateNormal:rsample(shape)
  local eps = dl.randn(self:_extended(shape), { dtype = self.loc.dtype, device = self.loc.device })
  return self.loc + self.scale_tril:matmul(eps:unsqueeze(-1)):squeeze(-1)
end
local function half_log_det(L) return L:diagonal(0, -2, -1):log():sum(-1) end
function MultivariateNormal:log_prob(v)
  v = self:_value("log_prob", v)
  local diff = v - self.loc
  local L = self.scale_tril
  local k = self.event_shape[1]
  local batch = diff.shape
  batch[#batch] = nil
  local z = dl.linalg.solve_triangular(L:expand(concat(batch, { k, k })), diff:unsqueeze(-1), { upper = false })
    :squeeze(-1)
  return (z * z):sum(-1) * -0.5 - half_log_det(L) - k * LOG_SQRT_2PI
end
function MultivariateNormal:entropy()
  local k = self.event_shape[1]
  return half_log_det(self.scale_tril) + k * (0.5 + LOG_SQRT_2PI)
end
with_properties(MultivariateNormal)

-- Independent(base, n): base's last n batch dims taken as one event (log_prob and entropy
-- summed over them), as a diagonal Gaussian over pixels is Independent(Normal(mu, sigma), 3).
local Independent = class("Independent")
function Independent.new(base, n)
  local op = "Independent"
  if type(base) ~= "table" or getmetatable(base) == nil or base.log_prob == nil then
    bad_arg(op, "a distribution", base)
  end
  if type(n) ~= "number" or n ~= math.floor(n) or n < 0 or n > #base.batch_shape then
    raise(op .. ": n must be an integer from 0 to " .. #base.batch_shape .. " (the base's batch dims), got " .. tostring(n))
  end
  local nb = #base.batch_shape - n
  local batch, moved = {}, {}
  for i = 1, nb do batch[i] = base.batch_shape[i] end
  for i = nb + 1, #base.batch_shape do moved[#moved + 1] = base.batch_shape[i] end
  return setmetatable({ base_dist = base, reinterpreted_batch_ndims = n, batch_shape = batch,
                        event_shape = concat(moved, base.event_shape), _like = base._like }, Independent)
end
function Independent:__repr()
  return "Independent(" .. tostring(self.base_dist) .. ", " .. self.reinterpreted_batch_ndims .. ")"
end
local function sum_last(t, n)
  for _ = 1, n do t = t:sum(-1) end
  return t
end
function Independent:_get_mean() return self.base_dist.mean end
function Independent:_get_variance() return self.base_dist.variance end
function Independent:rsample(shape) return self.base_dist:rsample(shape) end
function Independent:sample(shape) return self.base_dist:sample(shape) end
function Independent:log_prob(v) return sum_last(self.base_dist:log_prob(v), self.reinterpreted_batch_ndims) end
function Independent:entropy() return sum_last(self.base_dist:entropy(), self.reinterpreted_batch_ndims) end
with_properties(Independent)

-- ---- KL divergence ---------------------------------------------------------------------------

local KL = {}   -- KL[p's class][q's class] = function(p, q)
local function rule(P, Q, f)
  KL[P] = KL[P] or {}
  KL[P][Q] = f
end

rule(Normal, Normal, function(p, q)
  local ratio = (p.scale / q.scale):pow(2)
  local t = ((p.loc - q.loc) / q.scale):pow(2)
  return (ratio + t - 1 - ratio:log()) * 0.5
end)
rule(Bernoulli, Bernoulli, function(p, q)
  local pp = p.probs
  local t1 = dl.where(pp:eq(0), 0, pp * (dl.softplus(-q.logits) - dl.softplus(-p.logits)))
  local t2 = dl.where(pp:eq(1), 0, (1 - pp) * (dl.softplus(q.logits) - dl.softplus(p.logits)))
  return t1 + t2
end)
rule(Categorical, Categorical, function(p, q)
  local t = p.probs * (p.logits - q.logits)
  t = dl.where(q.probs:eq(0), math.huge, t)
  t = dl.where(p.probs:eq(0), 0, t)
  return t:sum(-1)
end)
rule(Uniform, Uniform, function(p, q)
  local inside = q.low:le(p.low):logical_and(q.high:ge(p.high))
  return dl.where(inside, ((q.high - q.low) / (p.high - p.low)):log(), math.huge)
end)
rule(Exponential, Exponential, function(p, q)
  local ratio = q.rate / p.rate
  return ratio - 1 - ratio:log()
end)
rule(Laplace, Laplace, function(p, q)
  local ratio = p.scale / q.scale
  local gap = (p.loc - q.loc):abs()
  return -ratio:log() + gap / q.scale + ratio * (-gap / p.scale):exp() - 1
end)
rule(MultivariateNormal, MultivariateNormal, function(p, q)
  local k = p.event_shape[1]
  if q.event_shape[1] ~= k then
    raise("kl_divergence: the two MultivariateNormals have events of " .. k .. " and " .. q.event_shape[1])
  end
  local Lp, Lq = p.scale_tril, q.scale_tril
  local batch = dl.broadcast_shapes(p.batch_shape, q.batch_shape)
  local lq = Lq:expand(concat(batch, { k, k }))
  local A = dl.linalg.solve_triangular(lq, Lp:expand(concat(batch, { k, k })), { upper = false })
  local b = dl.linalg.solve_triangular(lq, (q.loc - p.loc):expand(concat(batch, { k })):unsqueeze(-1),
                                       { upper = false }):squeeze(-1)
  return half_log_det(Lq) - half_log_det(Lp) + ((A * A):sum({ -2, -1 }) + (b * b):sum(-1) - k) * 0.5
end)
rule(Independent, Independent, function(p, q)
  if p.reinterpreted_batch_ndims ~= q.reinterpreted_batch_ndims then
    raise("kl_divergence: the Independents reinterpret " .. p.reinterpreted_batch_ndims .. " and "
          .. q.reinterpreted_batch_ndims .. " dims")
  end
  return sum_last(D.kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
end)

-- kl_divergence(p, q): KL(p || q) per batch element, for the pairs of the rules above.
function D.kl_divergence(p, q)
  local P, Q = getmetatable(p), getmetatable(q)
  local f = P and KL[P] and KL[P][Q]
  if not f then
    raise("kl_divergence: no rule for " .. tostring(P and P.__name or type(p)) .. " and "
          .. tostring(Q and Q.__name or type(q)) .. " (known: pairs of one kind)")
  end
  return f(p, q)
end

return D
