-- dlua.distributions.derived: families made of others' draws, with closed forms for
-- their densities and moments: Weibull, Pareto, HalfCauchy, Kumaraswamy (from uniform
-- and exponential draws), FisherSnedecor and NegativeBinomial (from gamma draws), and the
-- relaxed (Gumbel-softmax, "concrete") families LogitRelaxedBernoulli, RelaxedBernoulli,
-- RelaxedOneHotCategorical and OneHotCategoricalStraightThrough, and LogisticNormal on the
-- simplex. Formulas and support as PyTorch's torch.distributions.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise = core.raise
local dl = T.dl
local type, setmetatable, select = type, setmetatable, select
local log, pi = math.log, math.pi
local D, class, constructor, with_properties = B.D, B.class, B.constructor, B.with_properties
local require_all, parameters, eps_of, tiny_of = B.require_all, B.parameters, B.eps_of, B.tiny_of
local EULER = B.EULER
local C, support = B.C, B.support

local function positive(what) return function(t) return t:gt(0), what .. " must be positive" end end
local function both_positive(a, b)
  return function(x, y) return x:gt(0), a .. " must be positive", y:gt(0), b .. " must be positive" end
end
-- Uniform draws of `self`'s extended shape in (0, 1), kept off both ends.
local function uniform(self, shape, like)
  local u = dl.rand(self:_extended(shape), { dtype = like.dtype, device = like.device })
  local e = eps_of(u)
  return u:clamp(e, 1 - e)
end

-- ---- from uniform and exponential draws ---------------------------------------------------

-- Weibull(scale, concentration): density (k / s) (x / s)^(k - 1) e^-(x / s)^k on x >= 0.
local Weibull = class("Weibull")
Weibull._params = { "scale", "concentration" }
Weibull.new = constructor(Weibull, { "scale", "concentration" }, both_positive("scale", "concentration"))
function Weibull:_get_mean() return self.scale * (1 / self.concentration + 1):lgamma():exp() end
function Weibull:_get_variance()
  local k = self.concentration
  return self.scale:pow(2) * ((2 / k + 1):lgamma():exp() - (1 / k + 1):lgamma():exp():pow(2))
end
function Weibull:rsample(shape)   -- s (-log(1 - u))^(1 / k)
  local u = uniform(self, shape, self.scale)
  return self.scale * (-(-u):log1p()):pow(1 / self.concentration)
end
local function non_negative(v) return v:ge(0) end

function Weibull:log_prob(v)
  local s, k = self.scale, self.concentration
  local z = self:_checked_value(v, non_negative, "a value lies outside [0, infinity)") / s
  return (k / s):log() + (k - 1) * z:log() - z:pow(k)
end
function Weibull:entropy()
  local k = self.concentration
  return (1 - 1 / k) * EULER + (self.scale / k):log() + 1
end
function Weibull:cdf(v) return -(-(self:_value("cdf", v) / self.scale):pow(self.concentration)):expm1() end
function Weibull:icdf(q)
  return self.scale * (-(-self:_value("icdf", q)):log1p()):pow(1 / self.concentration)
end
-- (as PyTorch's formula: below a concentration of 1, where the density is unbounded at 0,
-- a negative number's power, NaN unless 1 / concentration is whole)
function Weibull:_get_mode()
  local k = self.concentration
  return self.scale * ((k - 1) / k):pow(k:reciprocal())
end
support(Weibull, C.positive)
Weibull.has_rsample = true
with_properties(Weibull)

-- Pareto(scale, alpha): density alpha scale^alpha / x^(alpha + 1) on x >= scale; the mean
-- is infinite for alpha <= 1, the variance for alpha <= 2.
local Pareto = class("Pareto")
Pareto._params = { "scale", "alpha" }
Pareto.new = constructor(Pareto, { "scale", "alpha" }, both_positive("scale", "alpha"))
function Pareto:_get_mean()
  local a = self.alpha:clamp(1)
  return a * self.scale / (a - 1)
end
function Pareto:_get_variance()
  local a = self.alpha:clamp(2)
  return self.scale:pow(2) * a / ((a - 1):pow(2) * (a - 2))
end
function Pareto:rsample(shape) return self.scale * (-(-uniform(self, shape, self.scale)):log1p() / self.alpha):exp() end
function Pareto:log_prob(v)
  v = self:_checked_value(v, function(x) return x:ge(self.scale) end, "a value lies below scale")
  return self.alpha:log() + self.alpha * self.scale:log() - (self.alpha + 1) * v:log()
end
function Pareto:entropy() return (self.scale / self.alpha):log() + 1 / self.alpha + 1 end
function Pareto:cdf(v) return 1 - (self.scale / self:_value("cdf", v)):pow(self.alpha) end
function Pareto:icdf(q) return self.scale * (-(-self:_value("icdf", q)):log1p() / self.alpha):exp() end
function Pareto:_get_mode() return self.scale end
support(Pareto, function(self) return C.greater_than_eq(self.scale) end)
Pareto.has_rsample = true
with_properties(Pareto)

-- HalfCauchy(scale): |x| of a Cauchy(0, scale); density 2 / (pi scale (1 + (x/scale)^2))
-- on x >= 0 (log_prob -infinity below); mean and variance infinite.
local HalfCauchy = class("HalfCauchy")
HalfCauchy._params = { "scale" }
HalfCauchy.new = constructor(HalfCauchy, { "scale" }, positive("scale"))
function HalfCauchy:_get_mean() return dl.full_like(self.scale, math.huge) end
function HalfCauchy:_get_variance() return dl.full_like(self.scale, math.huge) end
function HalfCauchy:rsample(shape) return self.scale * (uniform(self, shape, self.scale) * (pi / 2)):tan() end
function HalfCauchy:log_prob(v)
  v = self:_value("log_prob", v)
  local lp = -(v / self.scale):pow(2):log1p() - self.scale:log() + log(2 / pi)
  return dl.where(v:ge(0), lp, -math.huge)
end
function HalfCauchy:entropy() return (self.scale * (2 * pi)):log() end
function HalfCauchy:cdf(v) return (self:_value("cdf", v) / self.scale):atan() * (2 / pi) end
function HalfCauchy:icdf(q) return self.scale * (self:_value("icdf", q) * (pi / 2)):tan() end
function HalfCauchy:_get_mode() return dl.zeros_like(self.scale) end
support(HalfCauchy, C.nonnegative)
HalfCauchy.has_rsample = true
with_properties(HalfCauchy)

-- Kumaraswamy(concentration1 a, concentration0 b): density a b x^(a-1) (1 - x^a)^(b-1) on
-- (0, 1); moments E x^n = b B(1 + n/a, b).
local Kumaraswamy = class("Kumaraswamy")
Kumaraswamy._params = { "concentration1", "concentration0" }
Kumaraswamy.new = constructor(Kumaraswamy, { "concentration1", "concentration0" },
                              both_positive("concentration1", "concentration0"))
local function kumaraswamy_moment(a, b, n)
  return b * ((n / a + 1):lgamma() + b:lgamma() - (n / a + 1 + b):lgamma()):exp()
end
function Kumaraswamy:_get_mean() return kumaraswamy_moment(self.concentration1, self.concentration0, 1) end
function Kumaraswamy:_get_variance()
  local a, b = self.concentration1, self.concentration0
  return kumaraswamy_moment(a, b, 2) - kumaraswamy_moment(a, b, 1):pow(2)
end
function Kumaraswamy:rsample(shape)   -- (1 - u^(1/b))^(1/a)
  local u = uniform(self, shape, self.concentration1)
  local x = (-(u:log() / self.concentration0):expm1()):pow(1 / self.concentration1)
  local e = eps_of(x)
  return x:clamp(e, 1 - e)
end
function Kumaraswamy:log_prob(v)
  local a, b = self.concentration1, self.concentration0
  v = self:_checked_value(v, function(x) return x:ge(0):logical_and(x:le(1)) end, "a value lies outside [0, 1]")
  -- (xlogy: at an edge with a concentration of 1 the term is 0, not 0 * -inf)
  return a:log() + b:log() + dl.xlogy(a - 1, v) + dl.xlogy(b - 1, 1 - v:pow(a))
end
function Kumaraswamy:entropy()
  local a, b = self.concentration1, self.concentration0
  return (1 - 1 / b) + (1 - 1 / a) * ((b + 1):digamma() + EULER) - a:log() - b:log()
end
-- ((a - 1) / (a b - 1))^(1/a); NaN where a concentration is below 1 (as PyTorch's; its
-- 1.13 formula, (1 - b)^(1/b) / (1 - a b), is NaN for every b > 1)
function Kumaraswamy:_get_mode()
  local a, b = self.concentration1, self.concentration0
  local m = ((a - 1) / (a * b - 1)):pow(a:reciprocal())
  return dl.where(a:lt(1):logical_or(b:lt(1)), 0 / 0, m)
end
-- (through its transforms of a uniform draw, as PyTorch's: F(x) = 1 - (1 - x^a)^b)
function Kumaraswamy:cdf(v)
  v = self:_value("cdf", v)
  if self._validate then require_all("Kumaraswamy.cdf", v:ge(0):logical_and(v:le(1)), "a value lies outside [0, 1]") end
  return 1 - (1 - v:pow(self.concentration1)):pow(self.concentration0):clamp(0, 1)
end
function Kumaraswamy:icdf(q)
  local a, b = self.concentration1, self.concentration0
  return (1 - (1 - self:_value("icdf", q)):pow(b:reciprocal())):pow(a:reciprocal())
end
support(Kumaraswamy, C.unit_interval)
Kumaraswamy.has_rsample = true
with_properties(Kumaraswamy)

-- ---- from gamma draws -------------------------------------------------------------------------

-- FisherSnedecor(df1, df2): the ratio of two chi-squares over their degrees of freedom;
-- the mean is NaN for df2 <= 2, the variance for df2 <= 4 (as PyTorch's).
local FisherSnedecor = class("FisherSnedecor")
FisherSnedecor._params = { "df1", "df2" }
FisherSnedecor.new = constructor(FisherSnedecor, { "df1", "df2" }, both_positive("df1", "df2"))
function FisherSnedecor:_get_mean()
  local d2 = dl.where(self.df2:gt(2), self.df2, 0 / 0)
  return d2 / (d2 - 2)
end
function FisherSnedecor:_get_variance()
  local d1, d2 = self.df1, dl.where(self.df2:gt(4), self.df2, 0 / 0)
  return d2:pow(2) * 2 * (d1 + d2 - 2) / (d1 * (d2 - 2):pow(2) * (d2 - 4))
end
function FisherSnedecor:rsample(shape)
  local ext = self:_extended(shape)
  local x1 = D.Gamma(self.df1 * 0.5, self.df1):rsample(shape)
  local x2 = D.Gamma(self.df2 * 0.5, self.df2):rsample(shape)
  local tiny = tiny_of(x1)
  return (x1:expand(ext) / x2:expand(ext):clamp(tiny)):clamp(tiny)
end
function FisherSnedecor:log_prob(v)
  v = self:_checked_value(v, function(x) return x:gt(0) end, "a value lies outside (0, infinity)")
  local h1, h2, ratio = self.df1 * 0.5, self.df2 * 0.5, self.df1 / self.df2
  return (h1 + h2):lgamma() - h1:lgamma() - h2:lgamma() + h1 * ratio:log() + (h1 - 1) * v:log()
         - (h1 + h2) * (ratio * v):log1p()
end
function FisherSnedecor:_get_mode()
  local d1, d2 = self.df1, self.df2
  return dl.where(d1:gt(2), (d1 - 2) / d1 * d2 / (d2 + 2), 0 / 0)
end
support(FisherSnedecor, C.positive)
FisherSnedecor.has_rsample = true
with_properties(FisherSnedecor)

-- NegativeBinomial(total_count, {probs =} or {logits =}): the successes (probability p
-- each) before total_count failures, 0, 1, 2 ...; total_count > 0 need not be whole.
-- Draws: Poisson(Gamma(total_count, rate (1 - p) / p)).
local NegativeBinomial = class("NegativeBinomial")
function NegativeBinomial.new(total_count, ...)
  local op = "NegativeBinomial"
  local which, t, validate = B.probs_or_logits(op, { ... }, select("#", ...))
  if which == "probs" and validate then require_all(op, t:lt(1), "probs must lie in [0, 1)") end
  local r = parameters(op, { "total_count" }, { total_count })[1]
  -- (a number takes the device of the tensor beside it)
  if type(total_count) == "number" then r = r:to(t.device) elseif type((...)[which]) == "number" then t = t:to(r.device) end
  if validate then require_all(op, r:gt(0), "total_count must be positive") end
  -- (the wider float dtype of the two, as PyTorch's promotion)
  local dtype = (r.dtype == "float64" or t.dtype == "float64") and "float64" or t.dtype
  local rb, tb = dl.broadcast_tensors(r:to(dtype), t:to(dtype))
  return B.with_probs(op, setmetatable({ total_count = rb, batch_shape = tb.shape, event_shape = {}, _like = tb,
                                         _validate = validate, _params = { "total_count", which } }, NegativeBinomial),
                      which, tb, validate)
end
NegativeBinomial._get_probs, NegativeBinomial._get_logits = D.Bernoulli._get_probs, D.Bernoulli._get_logits
function NegativeBinomial:_get_mean() return self.total_count * self.logits:exp() end
function NegativeBinomial:_get_variance() return self.mean / dl.sigmoid(-self.logits) end
function NegativeBinomial:sample(shape)
  return dl.no_grad(function()
    local rate = D.Gamma(self.total_count, (-self.logits):exp()):sample(shape)
    return D.Poisson(rate, { validate_args = false }):sample()
  end)
end
function NegativeBinomial:log_prob(v)
  v = self:_count_value(v)
  local r, l = self.total_count, self.logits
  local norm = (r + v):lgamma() - (v + 1):lgamma() - r:lgamma()
  norm = dl.where((r + v):eq(0), 0, norm)
  return -(r * dl.softplus(l)) - v * dl.softplus(-l) + norm   -- r log(1 - p) + v log p
end
function NegativeBinomial:_get_mode() return ((self.total_count - 1) * self.logits:exp()):floor():clamp_min(0) end
support(NegativeBinomial, C.nonnegative_integer)
with_properties(NegativeBinomial)

-- ContinuousBernoulli({probs =} or {logits =}): density C(p) p^x (1 - p)^(1 - x) on [0, 1]
-- (Loaiza-Ganem and Cunningham, 2019), C(p) = 2 atanh(1 - 2p) / (1 - 2p). Near p = 1/2,
-- where that form is 0 / 0, PyTorch's Taylor expansions in (p - 1/2) for p in (0.499,
-- 0.501) (the probabilities are first kept off 0 and 1).
local ContinuousBernoulli = class("ContinuousBernoulli")
local CB_LOW, CB_HIGH = 0.499, 0.501
function ContinuousBernoulli.new(...)
  local op = "ContinuousBernoulli"
  local which, t, validate = B.probs_or_logits(op, { ... }, select("#", ...))
  local self = B.with_probs(op, setmetatable({ batch_shape = t.shape, event_shape = {}, _like = t, _validate = validate,
                                               _params = { which } }, ContinuousBernoulli), which, t, validate)
  if which == "probs" then self._probs = t:clamp(eps_of(t), 1 - eps_of(t)) end
  return self
end
ContinuousBernoulli._get_probs, ContinuousBernoulli._get_logits = D.Bernoulli._get_probs, D.Bernoulli._get_logits
-- whether p is outside the unstable region, and p with the region's values moved off it
local function cb_cut(self)
  local p = self.probs
  local outside = p:le(CB_LOW):logical_or(p:ge(CB_HIGH))
  return outside, dl.where(outside, p, CB_LOW), p
end
local function cb_log_norm(self)
  local outside, cut, p = cb_cut(self)
  local below = dl.where(cut:le(0.5), cut, 0)
  local above = dl.where(cut:ge(0.5), cut, 1)
  local exact = ((-cut):log1p() - cut:log()):abs():log()
    - dl.where(cut:le(0.5), (below * -2):log1p(), (above * 2 - 1):log())
  local x = (p - 0.5):pow(2)
  return dl.where(outside, exact, (x * (104 / 45) + 4 / 3) * x + log(2))
end
function ContinuousBernoulli:_get_mean()
  local outside, cut, p = cb_cut(self)
  local exact = cut / (cut * 2 - 1) + 1 / ((-cut):log1p() - cut:log())
  local x = p - 0.5
  return dl.where(outside, exact, (x:pow(2) * (16 / 45) + 1 / 3) * x + 0.5)
end
function ContinuousBernoulli:_get_variance()
  local outside, cut, p = cb_cut(self)
  local exact = cut * (cut - 1) / (1 - cut * 2):pow(2) + 1 / ((-cut):log1p() - cut:log()):pow(2)
  local x = (p - 0.5):pow(2)
  return dl.where(outside, exact, 1 / 12 - (1 / 15 - x * (128 / 945)) * x)
end
function ContinuousBernoulli:log_prob(v)
  v = self:_checked_value(v, function(x) return x:ge(0):logical_and(x:le(1)) end, "a value lies outside [0, 1]")
  local l = self.logits
  -- -binary_cross_entropy_with_logits(l, v) = v l - softplus(l)
  return v * l - dl.softplus(l) + cb_log_norm(self)
end
function ContinuousBernoulli:cdf(v)
  v = self:_value("cdf", v)
  local outside, cut = cb_cut(self)
  local c = (cut:pow(v) * (1 - cut):pow(1 - v) + cut - 1) / (cut * 2 - 1)
  return dl.where(v:le(0), 0, dl.where(v:ge(1), 1, dl.where(outside, c, v)))
end
function ContinuousBernoulli:icdf(q)
  q = self:_value("icdf", q)
  local outside, cut = cb_cut(self)
  local x = ((-cut + q * (cut * 2 - 1)):log1p() - (-cut):log1p()) / (cut:log() - (-cut):log1p())
  return dl.where(outside, x, q)
end
function ContinuousBernoulli:rsample(shape)
  return self:icdf(uniform(self, shape, self.probs))
end
function ContinuousBernoulli:entropy()
  local p = self.probs
  local l0, l1 = (-p):log1p(), p:log()
  return self.mean * (l0 - l1) - cb_log_norm(self) - l0
end
support(ContinuousBernoulli, C.unit_interval)
ContinuousBernoulli.has_rsample = true
with_properties(ContinuousBernoulli)

-- ---- relaxed (Gumbel-softmax) families ------------------------------------------------------

-- The temperature and a Bernoulli or Categorical of the {probs =} or {logits =} options.
local function temperature_of(op, temperature, like, validate)
  if type(temperature) == "number" then temperature = dl.tensor(temperature, { dtype = like.dtype, device = like.device }) end
  local t = parameters(op, { "temperature" }, { temperature })[1]
  if validate then require_all(op, t:gt(0), "temperature must be positive") end
  return t:to(like.dtype)
end

-- LogitRelaxedBernoulli(temperature, {probs =} or {logits =}): the logit of a relaxed
-- Bernoulli draw, (logits + log u - log(1 - u)) / temperature.
local LogitRelaxedBernoulli = class("LogitRelaxedBernoulli")
local function logit_relaxed(op, temperature, ...)
  local which, p, validate = B.probs_or_logits(op, { ... }, select("#", ...))
  local trial = B.with_probs(op, setmetatable({}, D.Bernoulli), which, p, validate)
  local t = temperature_of(op, temperature, p, validate)
  local ok, tb, lb = pcall(dl.broadcast_tensors, t, trial.logits)
  if not ok then
    raise(op .. ": temperature of shape " .. T.shape_str(t.shape) .. " and " .. which .. " of shape "
          .. T.shape_str(p.shape) .. " do not broadcast")
  end
  return setmetatable({ temperature = tb, _logits = lb, batch_shape = lb.shape, event_shape = {}, _like = lb,
                        _validate = validate, _params = { "temperature", "logits" } }, LogitRelaxedBernoulli)
end
function LogitRelaxedBernoulli.new(...) return logit_relaxed("LogitRelaxedBernoulli", ...) end
function LogitRelaxedBernoulli:_get_probs() return self._logits:sigmoid() end
function LogitRelaxedBernoulli:_get_logits() return self._logits end
function LogitRelaxedBernoulli:rsample(shape)
  local u = uniform(self, shape, self._logits)
  return (self._logits + u:log() - (-u):log1p()) / self.temperature
end
function LogitRelaxedBernoulli:log_prob(v)
  local diff = self._logits - self:_value("log_prob", v) * self.temperature
  return self.temperature:log() + diff - dl.softplus(diff) * 2
end
support(LogitRelaxedBernoulli, C.real)
LogitRelaxedBernoulli.has_rsample = true
with_properties(LogitRelaxedBernoulli)

-- A relaxed family: the draws of its base (made by base(name, temperature, ...)) through
-- `transform`, kept off the support's ends; probs and logits are the base's.
local function relaxed_family(name, base, transform)
  local cls = class(name, D.TransformedDistribution)
  function cls.new(temperature, ...)
    local b = base(name, temperature, ...)
    local self = D.TransformedDistribution.new(b, transform())
    self.temperature = b.temperature
    return setmetatable(self, cls)
  end
  function cls:__repr() return name .. "(temperature: " .. tostring(self.temperature) .. ")" end
  function cls:_get_probs() return self.base_dist.probs end
  function cls:_get_logits() return self.base_dist.logits end
  function cls:rsample(shape)
    local y = D.TransformedDistribution.rsample(self, shape)
    local e = eps_of(y)
    return y:clamp(e, 1 - e)
  end
  with_properties(cls)
  return cls
end

-- RelaxedBernoulli(temperature, {probs =} or {logits =}): the sigmoid of
-- LogitRelaxedBernoulli's draw, in (0, 1).
support(relaxed_family("RelaxedBernoulli", logit_relaxed, D.transforms.SigmoidTransform), C.unit_interval)

-- ExpRelaxedCategorical(temperature, {probs =} or {logits =}): the log of a relaxed
-- one-hot draw, log softmax((logits + Gumbel noise) / temperature) (event_shape {K}).
local ExpRelaxed = class("ExpRelaxedCategorical")
local function exp_relaxed(op, temperature, ...)
  B.probs_or_logits(op, { ... }, select("#", ...))   -- (its errors name op, not Categorical)
  local cat = D.Categorical(...)
  local t = temperature_of(op, temperature, cat._like, cat._validate)
  local ok, shape = pcall(dl.broadcast_shapes, t.shape, cat.batch_shape)
  local same = ok and #shape == #cat.batch_shape
  for i = 1, same and #shape or 0 do same = same and shape[i] == cat.batch_shape[i] end
  if not same then
    raise(op .. ": temperature of shape " .. T.shape_str(t.shape) .. " does not broadcast to the batch "
          .. T.shape_str(cat.batch_shape))
  end
  return setmetatable({ temperature = t, _categorical = cat, batch_shape = cat.batch_shape,
                        event_shape = { cat._num_events }, _like = cat._like, _validate = cat._validate,
                        _params = { "temperature" } }, ExpRelaxed)
end
function ExpRelaxed.new(...) return exp_relaxed("ExpRelaxedCategorical", ...) end
function ExpRelaxed:_get_probs() return self._categorical.probs end
function ExpRelaxed:_get_logits() return self._categorical.logits end
-- the temperature with a trailing dim of 1, against (..., K)
local function per_event(self) return self.temperature:unsqueeze(-1) end
function ExpRelaxed:rsample(shape)
  local logits = self._categorical.logits
  local u = uniform(self, shape, logits)
  local scores = (logits - (-u:log()):log()) / per_event(self)
  return scores - scores:logsumexp(-1, true)
end
function ExpRelaxed:log_prob(v)
  local k = self._categorical._num_events
  local t = self.temperature
  local score = self._categorical.logits - self:_value("log_prob", v) * per_event(self)
  score = (score - score:logsumexp(-1, true)):sum(-1)
  -- log Gamma(K) + (K - 1) log temperature
  local lg = 0
  for i = 2, k - 1 do lg = lg + log(i) end
  return score + t:log() * (k - 1) + lg
end
support(ExpRelaxed, C.real_vector)
ExpRelaxed.has_rsample = true
with_properties(ExpRelaxed)

-- RelaxedOneHotCategorical(temperature, {probs =} or {logits =}): the Gumbel-softmax
-- draw, softmax((logits + Gumbel noise) / temperature), on the simplex.
support(relaxed_family("RelaxedOneHotCategorical", exp_relaxed, D.transforms.ExpTransform), C.simplex)

-- OneHotCategoricalStraightThrough: OneHotCategorical whose rsample is the one-hot draw
-- with the gradient of its probabilities (draw + probs - stop_gradient(probs)).
local StraightThrough = class("OneHotCategoricalStraightThrough", D.OneHotCategorical)
function StraightThrough.new(...)
  return setmetatable(D.OneHotCategorical.new(...), StraightThrough)
end
function StraightThrough:rsample(shape)
  local draw = self:sample(shape)
  local p = self.probs
  return draw + (p - dl.stop_gradient(p))
end
StraightThrough.has_rsample = true
with_properties(StraightThrough)

-- ---- on the simplex ---------------------------------------------------------------------------

-- LogisticNormal(loc, scale): a Normal's draw x (K values) taken to the simplex of K + 1 by
-- stick breaking (StickBreakingTransform in transformed.lua); event_shape {K + 1}.
local LogisticNormal = class("LogisticNormal")
LogisticNormal._params = { "loc", "scale" }
function LogisticNormal.new(...)
  local base = D.Normal(...)
  if #base.batch_shape == 0 then raise("LogisticNormal: loc and scale must have a last dim (K, the simplex's K + 1)") end
  local batch = {}
  for i = 1, #base.batch_shape - 1 do batch[i] = base.batch_shape[i] end
  local k = base.batch_shape[#base.batch_shape]
  return setmetatable({ loc = base.loc, scale = base.scale, base_dist = base, batch_shape = batch,
                        event_shape = { k + 1 }, _like = base._like, _validate = base._validate }, LogisticNormal)
end
local stick = D.transforms.StickBreakingTransform()
function LogisticNormal:rsample(shape) return stick(self.base_dist:rsample(shape)) end
function LogisticNormal:log_prob(y)
  y = self:_checked_value(y, function(v) return v:ge(0):all(-1):logical_and((v:sum(-1) - 1):abs():lt(1e-6)) end,
                         "a value is not on the simplex (non-negative, summing to 1)")   -- (PyTorch's simplex constraint)
  local x = stick:inv(y)
  return self.base_dist:log_prob(x):sum(-1) - stick:log_abs_det_jacobian(x, y)
end
support(LogisticNormal, C.simplex)
LogisticNormal.has_rsample = true
with_properties(LogisticNormal)

return D
