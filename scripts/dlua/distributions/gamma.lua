-- dlua.distributions.gamma: the families drawn from gamma variates: Gamma, Chi2, Beta,
-- Dirichlet and StudentT, with the implicit gradient of a gamma draw for rsample.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise = core.raise
local dl = T.dl
local setmetatable, tostring = setmetatable, tostring
local log, pi = math.log, math.pi
local D, class, constructor, parameters, take_options = B.D, B.class, B.constructor, B.parameters, B.take_options
local require_all, with_properties = B.require_all, B.with_properties
local eps_of, tiny_of = B.eps_of, B.tiny_of
local log_beta = B.log_beta
local C, support = B.C, B.support

-- ---- more continuous families -------------------------------------------------------------

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

-- A Gamma(alpha, 1) draw's slope dlog(x)/dalpha, for rsample's implicit gradient: the
-- engine's _standard_gamma_log_grad (Note [Gamma draws' slopes] in tensor/gamma_inc.h),
-- in float64 whatever the draws' dtype.
local function gamma_log_slope(alpha, logx)
  return dl._standard_gamma_log_grad(alpha:to("float64"), logx:to("float64")):to(logx.dtype)
end

-- (for tests, as torch._standard_gamma_grad: dx/dalpha at given alpha and draws x)
-- (0 at x = 0, its limit, where the slope of log x is infinite)
function D._standard_gamma_grad(alpha, x) return dl.where(x:eq(0), 0, gamma_log_slope(alpha, x:log()) * x) end

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
-- gradients for both (Note [Gamma draws' slopes] in tensor/gamma_inc.h).
local Gamma = class("Gamma")
Gamma._params = { "concentration", "rate" }
Gamma.new = constructor(Gamma, { "concentration", "rate" },
  function(a, r) return a:gt(0):logical_and(r:gt(0)), "concentration and rate must be positive" end)
function Gamma:_get_mean() return self.concentration / self.rate end
function Gamma:_get_variance() return self.concentration / self.rate:pow(2) end
function Gamma:rsample(shape)
  local x = (gamma_rsample_log(self.concentration:expand(self:_extended(shape))) - self.rate:log()):exp()
  return kept_within(x, tiny_of(x))
end
function Gamma:log_prob(v)
  v = self:_value("log_prob", v)
  -- (the support is closed, as PyTorch 1.13's: at 0 the density's limit, -inf or inf)
  if self._validate then require_all("Gamma.log_prob", v:ge(0), "a value is negative") end
  local a, r = self.concentration, self.rate
  return dl.xlogy(a, r) + dl.xlogy(a - 1, v) - r * v - a:lgamma()
end
function Gamma:entropy()
  local a = self.concentration
  return a - self.rate:log() + a:lgamma() + (1 - a) * a:digamma()
end
function Gamma:_get_mode() return ((self.concentration - 1) / self.rate):clamp_min(0) end
support(Gamma, C.nonnegative)
Gamma.has_rsample = true
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
function Beta:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("Beta.log_prob", v:ge(0):logical_and(v:le(1)), "a value lies outside [0, 1]") end
  local a, b = self.concentration1, self.concentration0
  return dl.xlogy(a - 1, v) + dl.xlogy(b - 1, 1 - v) - log_beta(a, b)
end
function Beta:entropy()
  local a, b = self.concentration1, self.concentration0
  local t = a + b
  return log_beta(a, b) - (a - 1) * a:digamma() - (b - 1) * b:digamma() + (t - 2) * t:digamma()
end
function Beta:_get_mode()
  return D.Dirichlet.mode_of(dl.stack({ self.concentration1, self.concentration0 }, -1)):select(-1, 1)
end
support(Beta, C.unit_interval)
Beta.has_rsample = true
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
-- (c - 1) normalised where some concentration is at least 1 (NaN where those are all 1
-- and the rest below); where all are below 1, a corner: the first, as PyTorch's argmax
-- of NaNs
function Dirichlet.mode_of(c)
  local m = (c - 1):clamp_min(0)
  m = m / m:sum(-1, true)
  local corner = dl.nn.one_hot(m:argmax(-1), c:size(-1)):to(m.dtype)
  return dl.where(c:lt(1):all(-1, true), corner, m)
end
function Dirichlet:_get_mode() return Dirichlet.mode_of(self.concentration) end
support(Dirichlet, C.simplex)
Dirichlet.has_rsample = true
with_properties(Dirichlet)

-- StudentT(df, loc = 0, scale = 1): a Normal over the square root of an independent
-- Chi2(df) / df.
local StudentT = class("StudentT")
StudentT._params = { "df", "loc", "scale" }
function StudentT.new(...)
  local args = { ... }
  local validate, n = take_options("StudentT", args, select("#", ...))
  if n < 1 or n > 3 then raise("StudentT: expected df [, loc [, scale]]") end
  -- (args[n + 1] is the options table take_options has read)
  local loc, scale = n >= 2 and args[2] or 0, n >= 3 and args[3] or 1
  local p = parameters("StudentT", { "df", "loc", "scale" }, { args[1], loc, scale })
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
function StudentT:_get_mode() return self.loc end
support(StudentT, C.real)
StudentT.has_rsample = true
with_properties(StudentT)
