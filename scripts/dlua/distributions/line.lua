-- dlua.distributions.line: the continuous families on a line: Normal, Uniform,
-- Exponential, Laplace, LogNormal, HalfNormal, Gumbel and Cauchy (reparameterised draws,
-- log_prob, entropy, cdf and icdf), and VonMises on the circle.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local dl = T.dl
local log, pi = math.log, math.pi
local class, constructor = B.class, B.constructor
local require_all, with_properties = B.require_all, B.with_properties
local LOG_SQRT_2PI, EULER = B.LOG_SQRT_2PI, B.EULER
local eps_of, tiny_of = B.eps_of, B.tiny_of
local located = B.located
local C, support = B.C, B.support

-- ---- continuous distributions on a line --------------------------------------------------

-- Normal(loc, scale): the Gaussian of mean loc and standard deviation scale (> 0).
local Normal = class("Normal")
Normal._params = { "loc", "scale" }
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
function Normal:_get_mode() return self.loc end
support(Normal, C.real)
Normal.has_rsample = true
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
function Uniform:_get_mode() return self.high * (0 / 0) end   -- (every point is one: NaN, as PyTorch's)
support(Uniform, function(self) return C.interval(self.low, self.high) end)
Uniform.has_rsample = true
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
function Exponential:_get_mode() return dl.zeros_like(self.rate) end
support(Exponential, C.nonnegative)
Exponential.has_rsample = true
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
function Laplace:_get_mode() return self.loc end
support(Laplace, C.real)
Laplace.has_rsample = true
with_properties(Laplace)

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
function LogNormal:_get_mode() return (self.loc - self.scale:pow(2)):exp() end
-- (through the exponential, as PyTorch's: a negative value is outside the support)
function LogNormal:cdf(v)
  v = self:_value("cdf", v)
  if self._validate then require_all("LogNormal.cdf", v:ge(0), "a value is negative") end
  return Normal.cdf(self, v:log())
end
function LogNormal:icdf(q) return Normal.icdf(self, self:_value("icdf", q)):exp() end
support(LogNormal, C.positive)
LogNormal.has_rsample = true
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
  -- (-inf left of 0, outside the support, as PyTorch's with validate_args = false)
  return dl.where(v:ge(0), z * z * -0.5 - self.scale:log() - LOG_SQRT_2PI + log(2), -math.huge)
end
function HalfNormal:entropy() return (self.scale:pow(2) * (pi / 2)):log() * 0.5 + 0.5 end
function HalfNormal:cdf(v) return (self:_value("cdf", v) / (self.scale * math.sqrt(2))):erf() end
function HalfNormal:icdf(q) return dl.erfinv(self:_value("icdf", q)) * self.scale * math.sqrt(2) end
function HalfNormal:_get_mode() return dl.zeros_like(self.scale) end
support(HalfNormal, C.nonnegative)
HalfNormal.has_rsample = true
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
function Gumbel:_get_mode() return self.loc end
support(Gumbel, C.real)
Gumbel.has_rsample = true
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
function Cauchy:_get_mode() return self.loc end
support(Cauchy, C.real)
Cauchy.has_rsample = true
with_properties(Cauchy)

-- ---- on the circle ------------------------------------------------------------------------

-- VonMises(loc, concentration): angles in [-pi, pi) with density e^(k cos(x - loc)) /
-- (2 pi I_0(k)), k > 0; log I_0(k) is log(i0e(k)) + k, finite for any k. Draws by Best and
-- Fisher's rejection from a wrapped Cauchy (as PyTorch's and numpy's), not reparameterised,
-- in float64 whatever the parameters' dtype (in float32 the envelope's r is infinite for k
-- below about 3e-4 and no draw would be accepted); below k = 1e-5 the envelope's r = 1/k +
-- k (its expansion: the exact form cancels), above 1e6 the normal of variance 1/k that the
-- density tends to.
local VonMises = class("VonMises")
VonMises._params = { "loc", "concentration" }
VonMises.new = constructor(VonMises, { "loc", "concentration" },
  function(_, k) return k:gt(0), "concentration must be positive" end)
function VonMises:_get_mean() return self.loc end
function VonMises:_get_mode() return self.loc end
function VonMises:_get_variance()   -- the circular variance 1 - I_1(k) / I_0(k)
  return 1 - dl.i1e(self.concentration) / dl.i0e(self.concentration)
end
function VonMises:log_prob(v)
  local k = self.concentration
  return k * ((self:_value("log_prob", v) - self.loc):cos() - 1) - log(2 * pi) - dl.i0e(k):log()
end
function VonMises:entropy()   -- log(2 pi I_0(k)) - k I_1(k) / I_0(k)
  local k = self.concentration
  local i0e = dl.i0e(k)
  return dl.log(i0e) + log(2 * pi) + k * (1 - dl.i1e(k) / i0e)
end
local function von_mises_draws(loc, k)
  local dtype = k.dtype
  loc, k = loc:to("float64"), k:to("float64")
  local o = { dtype = "float64", device = k.device }
  local shape = k.shape
  local tiny = k:lt(1e-5)
  local kk = dl.where(tiny, 1, k)
  local tau = (kk * kk * 4 + 1):sqrt() + 1
  local rho = (tau - (tau * 2):sqrt()) / (kk * 2)
  local r = dl.where(tiny, 1 / dl.where(tiny, k, 1) + k, (rho * rho + 1) / (rho * 2))
  local w = dl.zeros(shape, o)
  local todo = k:le(1e6)
  local rounds = 0
  while todo:any() do
    rounds = rounds + 1   -- (each round accepts with probability above 0.65)
    if rounds > 1000 then core.raise("VonMises.sample: the rejection sampler accepted no draw in 1000 rounds") end
    local z = (dl.rand(shape, o) * pi):cos()
    local f = (r * z + 1) / (r + z)
    local c = k * (r - f)
    local u = dl.rand(shape, o)
    local ok = (c * (2 - c) - u):gt(0):logical_or(((c / u):log() + 1 - c):ge(0)):logical_and(todo)
    w = dl.where(ok, f, w)
    todo = todo:logical_and(ok:logical_not())
  end
  local angle = w:clamp(-1, 1):acos() * (dl.rand(shape, o):lt(0.5):to(k.dtype) * 2 - 1)
  angle = dl.where(k:gt(1e6), dl.randn(shape, o) / dl.where(k:gt(1e6), k, 1):sqrt(), angle)
  return (dl.remainder(angle + loc + pi, 2 * pi) - pi):to(dtype)
end
function VonMises:sample(shape)
  local ext = self:_extended(shape)
  return dl.no_grad(function()
    return von_mises_draws(self.loc:expand(ext):contiguous(), self.concentration:expand(ext):contiguous())
  end)
end
support(VonMises, C.real)
with_properties(VonMises)
