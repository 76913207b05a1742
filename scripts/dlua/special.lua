-- dlua.special: dl.special, torch.special's functions (loaded when first read):
--
--   dl.special.ndtr(x)       the standard normal's cdf, 0.5 erfc(-x / sqrt 2)
--   dl.special.log_ndtr(x)   its logarithm, exact in both tails (-804.6 at -40, -7.6e-24 at
--                            10; computed in double, so that float32 keeps them too)
--   dl.special.ndtri(p)      its inverse, exact for p down to the smallest doubles
--   dl.special.erfcx(x)      exp(x^2) erfc(x), without overflow for large x
--   dl.special.entr(x)       -x log x (0 at 0, -inf below)
--   dl.special.xlog1py(x, y) x log1p(y), 0 where x is 0
--
-- the engine's Bessel functions of orders 0 and 1 and Hurwitz's zeta (tensor/bessel.h,
-- Note [Bessel functions]; also dl.i0, x:bessel_j0() ...), with derivatives (zeta's in q):
--
--   i0 i0e i1 i1e                 I_0, I_1, and e^-|x| times them
--   bessel_j0 bessel_j1           J_0, J_1
--   bessel_y0 bessel_y1           Y_0, Y_1 (x > 0)
--   modified_bessel_i0 .._i1      I_0, I_1 (i0 and i1 by torch.special's other names)
--   modified_bessel_k0 .._k1      K_0, K_1 (x > 0); scaled_modified_bessel_k0/k1: e^x K
--   spherical_bessel_j0           sin(x) / x
--   zeta(x, q)                    sum over k >= 0 of (q + k)^-x, x > 1
--
-- and torch.special's other names for dlua's functions: gammainc and gammaincc (the
-- regularized incomplete gammas dl.igamma and dl.igammac), expit, logit, gammaln, psi,
-- digamma, polygamma, multigammaln, erf, erfc, erfinv, exp2, expm1, log1p, sinc, round,
-- xlogy, logsumexp, softmax, log_softmax. Gradients are exact everywhere (the tails'
-- formulas carry their own derivatives).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local dl = T.dl
local check = T.check_tensor
local sqrt, log, pi = math.sqrt, math.log, math.pi

local S = dl.special   -- (filled here: the table a script may already hold)

local SQRT2, LOG_SQRT_2PI = sqrt(2), 0.5 * log(2 * pi)

-- x as a floating tensor (a number becomes one; integers the default float dtype).
local function floating(op, x)
  if type(x) == "number" then x = dl.tensor(x) end
  check(op, x)
  return T.floating(x)
end

function S.ndtr(x)
  x = floating("special.ndtr", x)
  return (-x / SQRT2):erfc() * 0.5
end

-- log Phi(x): log(erfc(-x / sqrt 2) / 2) while erfc holds it (to about -37), and right of
-- 0 log1p(-erfc(x / sqrt 2) / 2), which keeps the digits of Phi's distance to 1; below, the
-- asymptotic series -x^2/2 - log(-x) - log sqrt(2 pi) + log(1 - 1/x^2 + 3/x^4 - ...),
-- whose terms are below 1e-20 there. Its derivative phi(x) / Phi(x) = exp(log phi -
-- log Phi) in both regions.
local function log_ndtr_value(x)
  local far = x:lt(-30)
  local near = dl.where(far, 0, x)
  local right = near:gt(0)
  local direct = dl.where(right, ((near / SQRT2):erfc() * -0.5):log1p(), ((-near / SQRT2):erfc() * 0.5):log())
  local t = dl.where(far, x, -30)
  local r = (t * t):reciprocal()
  local series = ((((r * -945 + 105) * r - 15) * r + 3) * r - 1) * r + 1
  local tail = t * t * -0.5 - (-t):log() - LOG_SQRT_2PI + series:log()
  return dl.where(far, tail, direct)
end
function S.log_ndtr(x)
  x = floating("special.log_ndtr", x)
  return dl.custom_gradient(function(v)
    -- (in double: float32's erfc underflows from about -13, where log Phi is only -88)
    local y = dl.stop_gradient(log_ndtr_value(v:double()):to(v.dtype))
    -- (the backward calls S.log_ndtr again, not y, so that it has derivatives too)
    return y, function(g) return g * (v * v * -0.5 - LOG_SQRT_2PI - S.log_ndtr(v)):exp() end
  end)(x)
end

-- Phi^-1(p): sqrt 2 erfinv(2 p - 1) where 2 p - 1 keeps p's digits (p >= 1e-3); below,
-- Newton's steps on log_ndtr(x) = log p from -sqrt(-2 log p), which reach every double.
-- Its derivative 1 / phi(x) = sqrt(2 pi) exp(x^2 / 2).
local function ndtri_value(p)
  local low = p:lt(1e-3)
  local mid = dl.erfinv(p * 2 - 1) * SQRT2
  local q = dl.where(low, p, 0.5)
  local target = q:log()
  local x = dl.where(low, -(target * -2):sqrt(), 0)
  for _ = 1, 8 do
    local lp = log_ndtr_value(x)
    local slope = (x * x * -0.5 - LOG_SQRT_2PI - lp):exp()   -- d log Phi / dx
    x = x - (lp - target) / slope
  end
  x = dl.where(low, x, mid)
  return dl.where(p:eq(0), -math.huge, dl.where(p:lt(0):logical_or(p:gt(1)), 0 / 0, x))
end
function S.ndtri(p)
  p = floating("special.ndtri", p)
  return dl.custom_gradient(function(v)
    local x = dl.stop_gradient(ndtri_value(v))
    return x, function(g)
      local xv = S.ndtri(v)
      return g * (xv * xv * 0.5):exp() * sqrt(2 * pi)
    end
  end)(p)
end

-- exp(x^2) erfc(x): directly up to 25, then the asymptotic series 1 / (x sqrt pi) (1 -
-- 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8)). Its derivative 2 x erfcx(x) - 2 / sqrt pi.
local function erfcx_value(x)
  local far = x:gt(25)
  local near = dl.where(far, 0, x)
  local direct = (near * near):exp() * near:erfc()
  local t = dl.where(far, x, 25)
  local r = (t * t * 2):reciprocal()
  local series = (((r * -105 + 15) * r - 3) * r + 1) * r * -1 + 1
  return dl.where(far, series / (t * sqrt(pi)), direct)
end
function S.erfcx(x)
  x = floating("special.erfcx", x)
  return dl.custom_gradient(function(v)
    local y = dl.stop_gradient(erfcx_value(v))
    return y, function(g) return g * (v * S.erfcx(v) * 2 - 2 / sqrt(pi)) end
  end)(x)
end

-- -x log x; its derivative -(log x + 1) is +inf at 0, as PyTorch's (xlogy's own gradient
-- there is 0), and NaN below 0, where the value is -inf.
function S.entr(x)
  x = floating("special.entr", x)
  return dl.custom_gradient(function(v)
    local y = dl.stop_gradient(dl.where(v:lt(0), -math.huge, -dl.xlogy(v, v)))
    return y, function(g)
      local d = -(v:log() + 1)   -- (+inf at 0, NaN below: log's own)
      return g * d
    end
  end)(x)
end

function S.xlog1py(x, y)
  x = floating("special.xlog1py", x)
  y = type(y) == "number" and dl.tensor(y, { dtype = x.dtype, device = x.device }) or floating("special.xlog1py", y)
  -- where x is 0: 0, with the gradient log1p(y) for x where that is finite (else 0, as
  -- PyTorch's; each log1p reads a safe y where its branch is not taken), as dl.xlogy
  local zero = x:eq(0):logical_and(y:eq(y))
  local good = y:gt(-1):logical_and(y:lt(math.huge))
  local at_zero = x * dl.where(good, y, 0):log1p()
  return dl.where(zero, at_zero, x * dl.where(zero, 0, y):log1p())
end

-- torch.special's other names for dlua's own functions
S.expit = dl.sigmoid
S.logit = function(...) return dl.logit(...) end
S.gammaln = dl.lgamma
S.psi, S.digamma = dl.digamma, dl.digamma
S.polygamma = function(...) return dl.polygamma(...) end
S.gammainc = function(...) return dl.igamma(...) end
S.gammaincc = function(...) return dl.igammac(...) end
S.multigammaln = function(...) return dl.mvlgamma(...) end
S.erf, S.erfc, S.erfinv = dl.erf, dl.erfc, dl.erfinv
S.exp2, S.expm1, S.log1p, S.round = dl.exp2, dl.expm1, dl.log1p, dl.round
S.sinc = function(...) return dl.sinc(...) end
S.xlogy = function(...) return dl.xlogy(...) end
S.logsumexp, S.softmax, S.log_softmax = dl.logsumexp, dl.softmax, dl.log_softmax

for _, name in ipairs({ "i0", "i0e", "i1", "i1e", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
                        "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
                        "scaled_modified_bessel_k1", "spherical_bessel_j0", "zeta" }) do
  S[name] = dl[name]
end
S.modified_bessel_i0, S.modified_bessel_i1 = dl.i0, dl.i1

return S
