-- dlua.distributions: probability distributions, as torch.distributions (dl.distributions,
-- loaded when first read):
--
--   local D = dl.distributions
--   local pi = D.Normal(mu, sigma)              -- parameters: tensors or numbers, broadcast
--   local a = pi:rsample()                      -- differentiable in mu and sigma
--   local loss = -(pi:log_prob(a) * advantage):sum()
--   D.kl_divergence(D.Normal(mu, sigma), D.Normal(0, 1))
--
-- Normal, Uniform, Exponential, Laplace, LogNormal, HalfNormal, Gumbel, Cauchy, StudentT,
-- Gamma, Chi2, Beta, Dirichlet, Bernoulli({probs =} or {logits =}), Geometric,
-- Categorical({probs =} or {logits =}; categories 1..K, as dlua's indices),
-- OneHotCategorical, Poisson, MultivariateNormal(loc, {covariance_matrix =, scale_tril =
-- or precision_matrix =}) and Independent(base, n). Each has batch_shape and event_shape, sample([shape]) (no
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
-- validation is on, check(params...) gives bool tensors that must hold everywhere, each
-- followed by what it means.
local function constructor(cls, names, check)
  return function(...)
    local op, args = cls.__name, { ... }
    local validate, n = take_options(op, args, select("#", ...))
    if n ~= #names then raise(op .. ": expected " .. table.concat(names, " and ")) end
    local p = parameters(op, names, args)
    if validate then
      local checks = { check(unpack(p)) }
      for i = 1, #checks, 2 do require_all(op, checks[i], checks[i + 1]) end
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
-- (a location must be a number: NaN is refused, as PyTorch's Real constraint)
local function located(loc, scale) return loc:eq(loc), "loc must not be NaN", scale:gt(0), "scale must be positive" end
Normal.new = constructor(Normal, { "loc", "scale" }, located)
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
  if self._validate then
    require_all("Uniform.log_prob", self.low:le(v):logical_and(self.high:ge(v)), "a value lies outside [low, high]")
  end
  local inside = self.low:le(v):logical_and(self.high:gt(v))   -- (high itself: -inf, as PyTorch's)
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
Laplace.new = constructor(Laplace, { "loc", "scale" }, located)
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
  local t = parameters(op, { which }, { spec[which] })[1]
  if validate and which == "logits" then require_all(op, t:eq(t):logical_or(t:eq(-math.huge)), "logits must not be NaN") end
  return which, t, validate
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
-- Categories (1-based, int64) of `shape` .. batch draws from the rows of probs (batch .. K).
local function categorical_draws(probs, batch, shape)
  return dl.no_grad(function()
    local out = concat(shape or {}, batch)
    local rows = probs:reshape(-1, probs:size(-1))
    local per_row = 1
    for i = 1, #out - #batch do per_row = per_row * out[i] end
    -- (n draws per row of the batch, then the sample dims moved in front)
    local draws = dl.multinomial(rows, math.max(per_row, 1), { replacement = true })
    return draws:t():reshape(concat({ per_row }, batch)):reshape(out)
  end)
end
function Categorical:sample(shape)
  self:_extended(shape)   -- (checks the shape)
  return categorical_draws(self.probs, self.batch_shape, shape)
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
  if spec.validate_args ~= false then
    if spec.scale_tril then
      require_all(op, m:tril():eq(m), "scale_tril must be lower triangular")
    else
      require_all(op, (m - m:transpose(-1, -2)):abs():le(m:abs():amax({ -2, -1 }, true) * 1e-6),
                  (spec.covariance_matrix and "covariance_matrix" or "precision_matrix") .. " must be symmetric")
    end
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

-- ---- more continuous families -------------------------------------------------------------

local EULER = 0.57721566490153286061

-- The smallest positive normal number of t's dtype (draws kept off 0, as PyTorch's).
local function tiny_of(t) return t.dtype == "float64" and 2.2250738585072014e-308 or 1.1754943508222875e-38 end

-- The logarithms of Gamma(alpha, 1) draws of alpha's shape (alpha > 0): Marsaglia and
-- Tsang's method, all elements at once, the rejected drawn again until none is left;
-- alpha < 1 through alpha + 1 and a uniform's 1/alpha-th power, added as a logarithm (a
-- draw of Gamma(0.01) is often below float32's smallest number, and a ratio of two such
-- draws, as Beta's, must not become 0/0 or 1). An infinite alpha gives infinity, a NaN
-- alpha NaN, as PyTorch's; neither is drawn.
local MAX_ROUNDS = 1000   -- (each round accepts at least 95% of what is left)
local function standard_gamma_log(alpha)
  local o = { dtype = alpha.dtype, device = alpha.device }
  local shape = alpha.shape
  local finite = alpha:lt(math.huge)   -- (false for NaN too)
  local safe = dl.where(finite, alpha, 1)
  local small = safe:lt(1)
  local a = dl.where(small, safe + 1, safe)
  local d = a - 1 / 3
  local c = (d * 9):rsqrt()
  local out = dl.zeros(shape, o)
  local todo = finite
  local rounds = 0
  while todo:any() do
    rounds = rounds + 1
    if rounds > MAX_ROUNDS then raise("Gamma: the sampler did not converge (alpha " .. tostring(alpha) .. ")") end
    local x = dl.randn(shape, o)
    local v = (c * x + 1):pow(3)
    local u = dl.rand(shape, o)
    local lv = v:clamp_min(tiny_of(v)):log()
    local ok = v:gt(0):logical_and(u:log():lt(x * x * 0.5 + d - d * v + d * lv))
    local take = ok:logical_and(todo)
    out = dl.where(take, d:log() + lv, out)
    todo = todo:logical_and(ok:logical_not())
  end
  local boost = dl.rand(shape, o):clamp_min(tiny_of(out)):log() / safe
  out = dl.where(small, out + boost, out)
  return dl.where(finite, out, alpha)   -- (inf stays inf: log(inf); NaN stays NaN)
end

-- Note [Gamma draws' gradients]
-- A Gamma(alpha, 1) draw x = F^-1(u; alpha) moves with alpha while the uniform u behind
-- it stays: dx/dalpha = -(dP/dalpha)(alpha, x) / p(x; alpha), P the regularised lower
-- incomplete gamma and p the density (implicit reparameterisation, as PyTorch's
-- rsample; its derivative is an approximation of this, good to about 1e-3). From P's
-- series e^-x sum_n x^(alpha + n) / Gamma(alpha + n + 1), for log x:
--   dlog(x)/dalpha = sum_n q_n (psi(alpha + n + 1) - log x),
--   q_0 = 1 / alpha,  q_n = q_(n-1) x / (alpha + n)
-- summed in float64 until the terms are negligible (about x + a few sqrt(x) of them);
-- it holds where x itself is below the dtype's range. From alpha = 1000, Wilson and
-- Hilferty's normal cube root x = alpha (1 - 1/(9 alpha) + z / (3 sqrt(alpha)))^3, z
-- fixed, is within 1e-6 and costs one step.
local function gamma_log_slope(alpha, logx)
  local a, lx = alpha:to("float64"), logx:to("float64")
  local big = a:ge(1000):logical_or(a:ne(a)):logical_or(lx:ge(math.huge))
  local sa = dl.where(big, 1, a)
  local slx = dl.where(big, 0, lx)
  local sx = slx:exp()
  local q = sa:reciprocal()
  local psi = sa:digamma() + q   -- psi(alpha + 1)
  local sum = q * (psi - slx)
  local n = 0
  while true do
    n = n + 1
    local j = sa + n
    q = q * sx / j
    psi = psi + j:reciprocal()
    sum = sum + q * (psi - slx)
    if n % 8 == 0 and q:le(sum:abs() * 1e-17 + 1e-300):logical_and(sx:lt(j)):all() then break end
  end
  if big:any() then
    local x = lx:exp()
    local t = (x / a):pow(1 / 3)
    local root = a:sqrt()
    local z = (t - 1 + (a * 9):reciprocal()) * root * 3
    sum = dl.where(big, (t:pow(3) + t * t * ((a * 3):reciprocal() - z / (root * 2))) / x, sum)
  end
  return sum:to(logx.dtype)
end

-- (for tests, as torch._standard_gamma_grad: dx/dalpha at given alpha and draws x)
function D._standard_gamma_grad(alpha, x) return gamma_log_slope(alpha, x:log()) * x end

-- The logarithms of Gamma(alpha, 1) draws, with the gradient of Note [Gamma draws'
-- gradients] for alpha.
local function gamma_rsample_log(alpha)
  return dl.custom_gradient(function(a)
    local plain = dl.stop_gradient(a)
    local lx = standard_gamma_log(plain)
    return lx, function(g) return g * gamma_log_slope(plain, lx) end
  end)(alpha)
end

-- x's values kept within [lo, hi] without touching its gradient (PyTorch clamps its
-- draws in place, outside the graph).
local function kept_within(x, lo, hi)
  local carried = x - dl.stop_gradient(x)   -- (0, with x's gradient)
  local y = dl.where(x:lt(lo), carried + lo, x)
  if hi then y = dl.where(x:gt(hi), carried + hi, y) end
  return y
end

-- Gamma(concentration, rate): shape concentration (> 0), rate (> 0); rsample carries
-- gradients for both (Note [Gamma draws' gradients]).
local Gamma = class("Gamma")
Gamma._params = { "concentration", "rate" }
Gamma.new = constructor(Gamma, { "concentration", "rate" },
  function(a, r) return a:gt(0):logical_and(r:gt(0)), "concentration and rate must be positive" end)
function Gamma:_get_mean() return self.concentration / self.rate end
function Gamma:_get_variance() return self.concentration / self.rate:pow(2) end
function Gamma:rsample(shape)
  local x = gamma_rsample_log(self.concentration:expand(self:_extended(shape))):exp() / self.rate
  return kept_within(x, tiny_of(x))
end
function Gamma:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("Gamma.log_prob", v:gt(0), "a value is not positive") end
  local a, r = self.concentration, self.rate
  return dl.xlogy(a, r) + dl.xlogy(a - 1, v) - r * v - a:lgamma()
end
function Gamma:entropy()
  local a = self.concentration
  return a - self.rate:log() + a:lgamma() + (1 - a) * a:digamma()
end
with_properties(Gamma)

-- Chi2(df): Gamma(df / 2, 1 / 2).
local Chi2 = class("Chi2", Gamma)
Chi2._params = { "df" }
function Chi2.new(df, opts)
  local args = opts == nil and { df } or { df, opts }
  local validate, n = take_options("Chi2", args, #args)
  if n ~= 1 then raise("Chi2: expected df") end
  local p = parameters("Chi2", { "df" }, args)
  if validate then require_all("Chi2", p[1]:gt(0), "df must be positive") end
  return setmetatable({ df = p[1], concentration = p[1] * 0.5, rate = dl.full_like(p[1], 0.5),
                        batch_shape = p[1].shape, event_shape = {}, _like = p[1], _validate = validate }, Chi2)
end
with_properties(Chi2)

-- Beta(concentration1, concentration0): on (0, 1), from two gamma draws x / (x + y).
local Beta = class("Beta")
Beta._params = { "concentration1", "concentration0" }
Beta.new = constructor(Beta, { "concentration1", "concentration0" },
  function(a, b) return a:gt(0):logical_and(b:gt(0)), "the concentrations must be positive" end)
function Beta:_get_mean() return self.concentration1 / (self.concentration1 + self.concentration0) end
function Beta:_get_variance()
  local a, b = self.concentration1, self.concentration0
  local t = a + b
  return a * b / (t * t * (t + 1))
end
function Beta:rsample(shape)
  local out = self:_extended(shape)
  local x = gamma_rsample_log(self.concentration1:expand(out))
  local y = gamma_rsample_log(self.concentration0:expand(out))
  local b = (x - y):sigmoid()
  return kept_within(b, tiny_of(b), 1 - eps_of(b))
end
local function log_beta(a, b) return a:lgamma() + b:lgamma() - (a + b):lgamma() end
function Beta:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("Beta.log_prob", v:gt(0):logical_and(v:lt(1)), "a value lies outside (0, 1)") end
  local a, b = self.concentration1, self.concentration0
  return dl.xlogy(a - 1, v) + dl.xlogy(b - 1, 1 - v) - log_beta(a, b)
end
function Beta:entropy()
  local a, b = self.concentration1, self.concentration0
  local t = a + b
  return log_beta(a, b) - (a - 1) * a:digamma() - (b - 1) * b:digamma() + (t - 2) * t:digamma()
end
with_properties(Beta)

-- Dirichlet(concentration (..., K)): points of the simplex, from K gamma draws normalised.
local Dirichlet = class("Dirichlet")
Dirichlet._params = { "concentration" }
function Dirichlet.new(...)
  local args = { ... }
  local validate, n = take_options("Dirichlet", args, select("#", ...))
  if n ~= 1 then raise("Dirichlet: expected a concentration") end
  local c = parameters("Dirichlet", { "concentration" }, args)[1]
  if c:dim() < 1 then raise("Dirichlet: concentration must have at least one dim (the categories)") end
  if validate then require_all("Dirichlet", c:gt(0), "concentration must be positive") end
  local batch = c.shape
  local k = batch[#batch]
  batch[#batch] = nil
  return setmetatable({ concentration = c, batch_shape = batch, event_shape = { k }, _like = c, _validate = validate },
                      Dirichlet)
end
function Dirichlet:_get_mean() return self.concentration / self.concentration:sum(-1, true) end
function Dirichlet:_get_variance()
  local c = self.concentration
  local t = c:sum(-1, true)
  return c * (t - c) / (t * t * (t + 1))
end
function Dirichlet:rsample(shape)
  local g = gamma_rsample_log(self.concentration:expand(self:_extended(shape))):softmax(-1)
  return kept_within(g, tiny_of(g), 1 - eps_of(g))
end
function Dirichlet:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then
    require_all("Dirichlet.log_prob", v:ge(0):logical_and((v:sum(-1, true) - 1):abs():lt(1e-5 * v:size(-1))),
                "a value is not a point of the simplex (non-negative, summing to 1)")
  end
  local c = self.concentration
  return dl.xlogy(c - 1, v):sum(-1) + c:sum(-1):lgamma() - c:lgamma():sum(-1)
end
function Dirichlet:entropy()
  local c = self.concentration
  local k, t = c:size(-1), c:sum(-1)
  return c:lgamma():sum(-1) - t:lgamma() - ((c - 1) * c:digamma()):sum(-1) + (t - k) * t:digamma()
end
with_properties(Dirichlet)

-- LogNormal(loc, scale): exp of a Normal(loc, scale) draw.
local LogNormal = class("LogNormal")
LogNormal._params = { "loc", "scale" }
LogNormal.new = constructor(LogNormal, { "loc", "scale" }, located)
function LogNormal:_get_mean() return (self.loc + self.scale:pow(2) * 0.5):exp() end
function LogNormal:_get_variance()
  local s2 = self.scale:pow(2)
  return s2:expm1() * (self.loc * 2 + s2):exp()
end
function LogNormal:rsample(shape) return Normal.rsample(self, shape):exp() end
function LogNormal:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("LogNormal.log_prob", v:gt(0), "a value is not positive") end
  local lv = v:log()
  return Normal.log_prob(self, lv) - lv
end
function LogNormal:entropy() return Normal.entropy(self) + self.loc end
with_properties(LogNormal)

-- HalfNormal(scale): |x| of a Normal(0, scale) draw.
local HalfNormal = class("HalfNormal")
HalfNormal._params = { "scale" }
HalfNormal.new = constructor(HalfNormal, { "scale" }, function(scale) return scale:gt(0), "scale must be positive" end)
function HalfNormal:_get_mean() return self.scale * math.sqrt(2 / pi) end
function HalfNormal:_get_variance() return self.scale:pow(2) * (1 - 2 / pi) end
function HalfNormal:rsample(shape)
  return (dl.randn(self:_extended(shape), { dtype = self.scale.dtype, device = self.scale.device }) * self.scale):abs()
end
function HalfNormal:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("HalfNormal.log_prob", v:ge(0), "a value is negative") end
  local z = v / self.scale
  return z * z * -0.5 - self.scale:log() - LOG_SQRT_2PI + log(2)
end
function HalfNormal:entropy() return (self.scale:pow(2) * (pi / 2)):log() * 0.5 + 0.5 end
function HalfNormal:cdf(v) return (self:_value("cdf", v) / (self.scale * math.sqrt(2))):erf() end
function HalfNormal:icdf(q) return dl.erfinv(self:_value("icdf", q)) * self.scale * math.sqrt(2) end
with_properties(HalfNormal)

-- Gumbel(loc, scale): the law of a maximum; loc - scale log(-log u).
local Gumbel = class("Gumbel")
Gumbel._params = { "loc", "scale" }
Gumbel.new = constructor(Gumbel, { "loc", "scale" }, located)
function Gumbel:_get_mean() return self.loc + self.scale * EULER end
function Gumbel:_get_variance() return self.scale:pow(2) * (pi * pi / 6) end
function Gumbel:rsample(shape)
  local u = dl.rand(self:_extended(shape), { dtype = self.loc.dtype, device = self.loc.device })
  local t = tiny_of(u)
  return self.loc - self.scale * (-(u:clamp(t, 1 - eps_of(u)):log())):log()
end
function Gumbel:log_prob(v)
  local z = (self:_value("log_prob", v) - self.loc) / self.scale
  return -(z + (-z):exp()) - self.scale:log()
end
function Gumbel:entropy() return self.scale:log() + (1 + EULER) end
function Gumbel:cdf(v) return (-(-(self:_value("cdf", v) - self.loc) / self.scale):exp()):exp() end
function Gumbel:icdf(q) return self.loc - self.scale * (-(self:_value("icdf", q):log())):log() end
with_properties(Gumbel)

-- Cauchy(loc, scale): heavy tails; no mean or variance (NaN and infinity, as PyTorch's).
local Cauchy = class("Cauchy")
Cauchy._params = { "loc", "scale" }
Cauchy.new = constructor(Cauchy, { "loc", "scale" }, located)
function Cauchy:_get_mean() return dl.full_like(self.loc, 0 / 0) end
function Cauchy:_get_variance() return dl.full_like(self.loc, math.huge) end
function Cauchy:rsample(shape)
  local u = dl.rand(self:_extended(shape), { dtype = self.loc.dtype, device = self.loc.device })
  return self.loc + self.scale * ((u - 0.5) * pi):tan()
end
function Cauchy:log_prob(v)
  local z = (self:_value("log_prob", v) - self.loc) / self.scale
  return -(z * z):log1p() - self.scale:log() - log(pi)
end
function Cauchy:entropy() return (self.scale * (4 * pi)):log() end
function Cauchy:cdf(v) return ((self:_value("cdf", v) - self.loc) / self.scale):atan() / pi + 0.5 end
function Cauchy:icdf(q) return self.loc + self.scale * ((self:_value("icdf", q) - 0.5) * pi):tan() end
with_properties(Cauchy)

-- StudentT(df, loc = 0, scale = 1): a Normal over the square root of an independent
-- Chi2(df) / df.
local StudentT = class("StudentT")
StudentT._params = { "df", "loc", "scale" }
function StudentT.new(...)
  local args = { ... }
  local validate, n = take_options("StudentT", args, select("#", ...))
  if n < 1 or n > 3 then raise("StudentT: expected df [, loc [, scale]]") end
  local p = parameters("StudentT", { "df", "loc", "scale" }, { args[1], args[2] or 0, args[3] or 1 })
  if validate then require_all("StudentT", p[1]:gt(0):logical_and(p[3]:gt(0)), "df and scale must be positive") end
  return setmetatable({ df = p[1], loc = p[2], scale = p[3], batch_shape = p[1].shape, event_shape = {}, _like = p[1],
                        _validate = validate }, StudentT)
end
function StudentT:_get_mean() return dl.where(self.df:gt(1), self.loc, 0 / 0) end
function StudentT:_get_variance()
  local df = self.df
  local v = self.scale:pow(2) * df / (df - 2)
  return dl.where(df:gt(2), v, dl.where(df:gt(1), math.huge, 0 / 0))
end
function StudentT:rsample(shape)
  local out = self:_extended(shape)
  local z = dl.randn(out, { dtype = self.df.dtype, device = self.df.device })
  local chi2 = gamma_rsample_log((self.df * 0.5):expand(out)):exp() * 2
  return self.loc + self.scale * z * (self.df / chi2):sqrt()
end
function StudentT:log_prob(v)
  local df = self.df
  local y = (self:_value("log_prob", v) - self.loc) / self.scale
  local Z = self.scale:log() + df:log() * 0.5 + log(pi) * 0.5 + (df * 0.5):lgamma() - ((df + 1) * 0.5):lgamma()
  return -((df + 1) * 0.5) * (y * y / df):log1p() - Z
end
function StudentT:entropy()
  local df = self.df
  local half, half1 = df * 0.5, (df + 1) * 0.5
  local lbeta = half:lgamma() + 0.5 * log(pi) - half1:lgamma()
  return self.scale:log() + half1 * (half1:digamma() - half:digamma()) + df:log() * 0.5 + lbeta
end
with_properties(StudentT)

-- ---- more discrete families ---------------------------------------------------------------

-- Poisson(rate): counts 0, 1, 2 ... of mean rate (>= 0). Draws: the product of uniforms
-- below e^-rate where rate < 10; Hormann's transformed rejection (PTRS) above.
local Poisson = class("Poisson")
Poisson._params = { "rate" }
Poisson.new = constructor(Poisson, { "rate" }, function(rate) return rate:ge(0), "rate must not be negative" end)
function Poisson:_get_mean() return self.rate end
function Poisson:_get_variance() return self.rate end
local function poisson_draws(lam)
  local o = { dtype = lam.dtype, device = lam.device }
  local shape = lam.shape
  local small = lam:lt(10)
  -- small rates: count the uniforms whose running product stays above e^-rate
  local limit = (-lam):exp()
  local prod, k = dl.ones(shape, o), dl.zeros(shape, o)
  local live = small
  while live:any() do
    prod = prod * dl.rand(shape, o)
    local more = prod:gt(limit):logical_and(live)
    k = k + more:to(lam.dtype)
    live = more
  end
  -- large rates: PTRS (as numpy's)
  local big = small:logical_not()
  if big:any() then
    local l = dl.where(big, lam, 10)
    local slam, loglam = l:sqrt(), l:log()
    local b = slam * 2.53 + 0.931
    local a = b * 0.02483 - 0.059
    local invalpha = 1.1239 + 1.1328 / (b - 3.4)
    local vr = 0.9277 - 3.6224 / (b - 2)
    local out = dl.zeros(shape, o)
    local todo = big
    while todo:any() do
      local u = dl.rand(shape, o) - 0.5
      local v = dl.rand(shape, o)
      local us = 0.5 - u:abs()
      local kk = ((a * 2 / us + b) * u + l + 0.43):floor()
      local quick = us:ge(0.07):logical_and(v:le(vr))
      local bad = kk:lt(0):logical_or(us:lt(0.013):logical_and(v:gt(us)))
      local slow = (v:log() + invalpha:log() - (a / (us * us) + b):log())
        :le(-l + kk * loglam - (kk + 1):lgamma())
      local ok = quick:logical_or(bad:logical_not():logical_and(slow)):logical_and(todo)
      out = dl.where(ok, kk, out)
      todo = todo:logical_and(ok:logical_not())
    end
    k = dl.where(big, out, k)
  end
  return k
end
function Poisson:sample(shape)
  require_all("Poisson.sample", self.rate:lt(math.huge), "the rate must be finite (not infinity or NaN)")
  return dl.no_grad(function() return poisson_draws(self.rate:expand(self:_extended(shape)):contiguous()) end)
end
function Poisson:log_prob(v)
  v = self:_value("log_prob", v)
  if not v:is_floating_point() then v = v:to(self.rate.dtype) end
  if self._validate then
    require_all("Poisson.log_prob", v:ge(0):logical_and(v:eq(v:floor())), "a value is not a count 0, 1, 2 ...")
  end
  return dl.xlogy(v, self.rate) - self.rate - (v + 1):lgamma()
end
with_properties(Poisson)

-- Geometric({probs = p} or {logits = l}): the failures before the first success, 0, 1 ...
local Geometric = class("Geometric")
function Geometric.new(...)
  local self = Bernoulli.new(...)
  local p = self.probs
  if self._validate then require_all("Geometric", p:gt(0), "probs must be positive") end
  return setmetatable(self, Geometric)
end
Geometric._get_probs, Geometric._get_logits = Bernoulli._get_probs, Bernoulli._get_logits
function Geometric:_get_mean() return 1 / self.probs - 1 end
function Geometric:_get_variance() return (1 / self.probs - 1) / self.probs end
function Geometric:sample(shape)
  return dl.no_grad(function()
    local p = self.probs:expand(self:_extended(shape))
    local u = dl.rand(p.shape, { dtype = p.dtype, device = p.device }):clamp_min(tiny_of(p))
    return (u:log() / (-p):log1p()):floor()
  end)
end
function Geometric:log_prob(v)
  v = self:_value("log_prob", v)
  if not v:is_floating_point() then v = v:to(self.probs.dtype) end
  if self._validate then
    require_all("Geometric.log_prob", v:ge(0):logical_and(v:eq(v:floor())), "a value is not a count 0, 1, 2 ...")
  end
  local p = self.probs
  return dl.where(v:eq(0), 0, v * (-p):log1p()) + p:log()
end
function Geometric:entropy()
  return dl.nn.bce_with_logits(self.logits, self.probs, { reduction = "none" }) / self.probs
end
with_properties(Geometric)

-- OneHotCategorical({probs =} or {logits =}): Categorical's draws as one-hot vectors
-- (event_shape {K}); log_prob of one-hot values.
local OneHotCategorical = class("OneHotCategorical")
function OneHotCategorical.new(...)
  local self = Categorical.new(...)
  self.event_shape = { self._num_events }
  return setmetatable(self, OneHotCategorical)
end
OneHotCategorical._get_probs, OneHotCategorical._get_logits = Categorical._get_probs, Categorical._get_logits
function OneHotCategorical:_get_mean() return self.probs end
function OneHotCategorical:_get_variance() return self.probs * (1 - self.probs) end
function OneHotCategorical:sample(shape)
  self:_extended(shape)
  local draws = categorical_draws(self.probs, self.batch_shape, shape)
  return dl.nn.one_hot(draws, self._num_events):to(self.probs.dtype)
end
function OneHotCategorical:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then
    local bits = v:eq(0):logical_or(v:eq(1))
    require_all("OneHotCategorical.log_prob", bits:logical_and(v:sum(-1, true):eq(1)), "a value is not a one-hot vector")
  end
  return dl.where(v:eq(0), 0, v * self.logits):sum(-1)   -- (a -inf logit where v is 0 counts 0)
end
OneHotCategorical.entropy = Categorical.entropy
with_properties(OneHotCategorical)

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

rule(Gamma, Gamma, function(p, q)
  local a1, r1, a2, r2 = p.concentration, p.rate, q.concentration, q.rate
  return a2 * (r1 / r2):log() + a2:lgamma() - a1:lgamma() + (a1 - a2) * a1:digamma() + (r2 - r1) * (a1 / r1)
end)
rule(Beta, Beta, function(p, q)
  local a1, b1, a2, b2 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
  local t1 = a1 + b1
  return log_beta(a2, b2) - log_beta(a1, b1) + (a1 - a2) * a1:digamma() + (b1 - b2) * b1:digamma()
         + (a2 - a1 + b2 - b1) * t1:digamma()
end)
rule(Dirichlet, Dirichlet, function(p, q)
  local c1, c2 = p.concentration, q.concentration
  local s1 = c1:sum(-1)
  return s1:lgamma() - c2:sum(-1):lgamma() - (c1:lgamma() - c2:lgamma()):sum(-1)
         + ((c1 - c2) * (c1:digamma() - s1:unsqueeze(-1):digamma())):sum(-1)
end)
rule(Poisson, Poisson, function(p, q)
  return dl.xlogy(p.rate, p.rate / q.rate) - p.rate + q.rate
end)
rule(Gumbel, Gumbel, function(p, q)
  local ct1 = p.scale / q.scale
  local ct2 = q.loc / q.scale
  local ct3 = p.loc / q.scale
  return -ct1:log() - ct2 + ct3 + ct1 * EULER + (ct2 - ct3 + (ct1 + 1):lgamma()):exp() - (1 + EULER)
end)
rule(LogNormal, LogNormal, KL[Normal][Normal])
rule(HalfNormal, HalfNormal, function(p, q)
  local ratio = (p.scale / q.scale):pow(2)
  return (ratio - 1 - ratio:log()) * 0.5
end)
rule(OneHotCategorical, OneHotCategorical, KL[Categorical][Categorical])
rule(Geometric, Geometric, function(p, q)
  return -p:entropy() - (-q.probs):log1p() / p.probs - q.logits
end)

-- kl_divergence(p, q): KL(p || q) per batch element, for the pairs of the rules above.
-- (a family's rules hold for the families made from it: Chi2's are Gamma's)
local function parent_of(cls) return getmetatable(cls) and getmetatable(cls).__index ~= Distribution
                                      and getmetatable(cls).__index or nil end
local function rule_for(P, Q)
  local p = P
  while p do
    local q = Q
    while q do
      if KL[p] and KL[p][q] then return KL[p][q] end
      q = parent_of(q)
    end
    p = parent_of(p)
  end
end

function D.kl_divergence(p, q)
  local P, Q = getmetatable(p), getmetatable(q)
  local f = P and Q and rule_for(P, Q)
  if not f then
    raise("kl_divergence: no rule for " .. tostring(P and P.__name or type(p)) .. " and "
          .. tostring(Q and Q.__name or type(q)) .. " (known: pairs of one kind)")
  end
  return f(p, q)
end

return D
