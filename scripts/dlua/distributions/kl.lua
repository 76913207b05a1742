-- dlua.distributions.kl: kl_divergence(p, q) and its rules, for the pairs PyTorch 1.13 has.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise = core.raise
local dl = T.dl
local type, getmetatable, tostring = type, getmetatable, tostring
local D = B.D
local concat = B.concat
local EULER = B.EULER
local half_log_det, sum_last, log_beta, KL, rule = B.half_log_det, B.sum_last, B.log_beta, B.KL, B.rule

local Normal, Uniform, Exponential, Laplace, LogNormal, HalfNormal, Gumbel =
  D.Normal, D.Uniform, D.Exponential, D.Laplace, D.LogNormal, D.HalfNormal, D.Gumbel
local Bernoulli, Categorical, Poisson, Geometric, OneHotCategorical =
  D.Bernoulli, D.Categorical, D.Poisson, D.Geometric, D.OneHotCategorical
local Gamma, Beta, Dirichlet, MultivariateNormal, Independent = D.Gamma, D.Beta, D.Dirichlet, D.MultivariateNormal,
  D.Independent
local Distribution = B.Distribution

rule(Normal, Normal, function(p, q)
  local ratio = (p.scale / q.scale):pow(2)
  local t = ((p.loc - q.loc) / q.scale):pow(2)
  return (ratio + t - 1 - ratio:log()) * 0.5
end)
rule(Bernoulli, Bernoulli, function(p, q)
  -- (q's logits are clamped finite where q.probs is 0 or 1: the infinities are set, as PyTorch's)
  local pp, qp = p.probs, q.probs
  local t1 = dl.where(pp:eq(0), 0,
                      dl.where(qp:eq(0), math.huge, pp * (dl.softplus(-q.logits) - dl.softplus(-p.logits))))
  local t2 = dl.where(pp:eq(1), 0,
                      dl.where(qp:eq(1), math.huge, (1 - pp) * (dl.softplus(q.logits) - dl.softplus(p.logits))))
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

rule(D.Cauchy, D.Cauchy, function(p, q)
  return ((p.scale + q.scale):pow(2) + (p.loc - q.loc):pow(2)):log() - (p.scale * q.scale * 4):log()
end)
rule(D.Pareto, D.Pareto, function(p, q)
  local ratio = q.alpha / p.alpha
  local kl = q.alpha * (p.scale / q.scale):log() - ratio:log() + ratio - 1
  return dl.where(p.scale:lt(q.scale), math.huge, kl)
end)
rule(D.Binomial, D.Binomial, function(p, q)
  if p.total_count:lt(q.total_count):any() then
    raise("kl_divergence: Binomials where q's total_count exceeds p's are not implemented (as PyTorch's)")
  end
  local kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs):log1p() - (-q.probs):log1p())
  return dl.where(p.total_count:gt(q.total_count), math.huge, kl)
end)

-- The ContinuousBernoulli's log normaliser C(p) (density C(p) p^x (1 - p)^(1 - x)), from its
-- log_prob at 0: log(1 - p) + log C.
local CB = D.ContinuousBernoulli
local function cb_log_norm_plus_log1m(d) return d:log_prob(dl.zeros_like(d.probs)) end
rule(CB, CB, function(p, q)
  return p.mean * (p.logits - q.logits) + cb_log_norm_plus_log1m(p) - cb_log_norm_plus_log1m(q)
end)

-- The LowRankMultivariateNormals' (covariance W W^T + D, C = I + W^T D^-1 W = L_C L_C^T):
-- log det = 2 log det L_C + sum log D; x^T S^-1 x = x^T D^-1 x - |L_C^-1 W^T D^-1 x|^2.
local LowRank = D.LowRankMultivariateNormal
local function batch_of(t, event_dims)
  local b = t.shape
  for _ = 1, event_dims do b[#b] = nil end
  return b
end
-- L^-1 X for L lower triangular, their batches broadcast
local function solve_lower(L, X)
  local batch = dl.broadcast_shapes(batch_of(L, 2), batch_of(X, 2))
  return dl.linalg.solve_triangular(L:expand(concat(batch, { L:size(-2), L:size(-1) })),
                                    X:expand(concat(batch, { X:size(-2), X:size(-1) })), { upper = false })
end
local function trace_xxt(X) return (X * X):sum({ -2, -1 }) end
local function low_rank_log_det(d) return half_log_det(d._cap_tril) * 2 + d.cov_diag:log():sum(-1) end
local function low_rank_mahalanobis(d, x)
  local y = d.cov_factor:transpose(-1, -2):matmul((x / d.cov_diag):unsqueeze(-1))
  return (x * x / d.cov_diag):sum(-1) - trace_xxt(solve_lower(d._cap_tril, y))
end
local function mahalanobis(L, x) return trace_xxt(solve_lower(L, x:unsqueeze(-1))) end
local function same_events(p, q)
  if p.event_shape[1] ~= q.event_shape[1] then
    raise("kl_divergence: the two " .. p.__name .. " and " .. q.__name .. " have events of " .. p.event_shape[1]
          .. " and " .. q.event_shape[1])
  end
  return p.event_shape[1]
end
-- A = L_C^-1 W^T D^-1 of q, so that S_q^-1 = D^-1 - A^T A
local function low_rank_a(q) return solve_lower(q._cap_tril, q.cov_factor:transpose(-1, -2) / q.cov_diag:unsqueeze(-2)) end
rule(LowRank, LowRank, function(p, q)
  local n = same_events(p, q)
  local A = low_rank_a(q)
  local t2 = (p.cov_diag / q.cov_diag):sum(-1) + trace_xxt(p.cov_factor * q.cov_diag:rsqrt():unsqueeze(-1))
             - trace_xxt(A * p.cov_diag:sqrt():unsqueeze(-2)) - trace_xxt(A:matmul(p.cov_factor))
  return (low_rank_log_det(q) - low_rank_log_det(p) + t2 + low_rank_mahalanobis(q, q.loc - p.loc) - n) * 0.5
end)
rule(MultivariateNormal, LowRank, function(p, q)
  local n = same_events(p, q)
  local A = low_rank_a(q)
  local t2 = trace_xxt(p.scale_tril * q.cov_diag:rsqrt():unsqueeze(-1)) - trace_xxt(A:matmul(p.scale_tril))
  return (low_rank_log_det(q) - half_log_det(p.scale_tril) * 2 + t2 + low_rank_mahalanobis(q, q.loc - p.loc) - n) * 0.5
end)
rule(LowRank, MultivariateNormal, function(p, q)
  local n = same_events(p, q)
  local t2 = trace_xxt(solve_lower(q.scale_tril, p.cov_factor)) + trace_xxt(solve_lower(q.scale_tril, dl.diag_embed(p.cov_diag:sqrt())))
  return (half_log_det(q.scale_tril) * 2 - low_rank_log_det(p) + t2 + mahalanobis(q.scale_tril, q.loc - p.loc) - n) * 0.5
end)

-- Wishart(n, S): PyTorch's Bregman divergence of the log normaliser, in closed form:
-- n_q/2 log(|S_q| / |S_p|) + n_p/2 (tr(S_q^-1 S_p) - k) + log Gamma_k(n_q/2) - log Gamma_k(n_p/2)
-- + (n_p - n_q)/2 psi_k(n_p/2), psi_k(a) = sum_i psi(a - (i - 1)/2)
rule(D.Wishart, D.Wishart, function(p, q)
  local k = same_events(p, q)
  local ap, aq = p.df * 0.5, q.df * 0.5
  local psi = dl.zeros_like(ap)
  for i = 1, k do psi = psi + (ap - (i - 1) * 0.5):digamma() end
  return aq * (half_log_det(q.scale_tril) - half_log_det(p.scale_tril)) * 2 + ap * (trace_xxt(solve_lower(q.scale_tril, p.scale_tril)) - k)
         + dl.mvlgamma(aq, k) - dl.mvlgamma(ap, k) + (ap - aq) * psi
end)

-- Transformed by the same transforms (each of one kind and equal parameters), as PyTorch's:
-- the bases' divergence
local function same_value(a, b)
  if rawequal(a, b) then return true end
  if T.is_tensor(a) and T.is_tensor(b) then
    local ok, eq = pcall(function() return a:eq(b):all() end)   -- (false where they do not broadcast)
    return ok and eq == true
  end
  return type(a) == "number" and a == b
end
local function same_transform(a, b)
  if rawequal(a, b) then return true end
  if getmetatable(a) ~= getmetatable(b) or type(a) ~= "table" then return false end
  for key, v in pairs(a) do
    if type(v) ~= "function" and not same_value(v, b[key]) then
      if not (type(v) == "table" and same_transform(v, b[key])) then return false end
    end
  end
  return true
end
rule(D.TransformedDistribution, D.TransformedDistribution, function(p, q)
  local same = #p.transforms == #q.transforms and #p.event_shape == #q.event_shape
  for i = 1, #p.transforms do same = same and same_transform(p.transforms[i], q.transforms[i]) end
  for i = 1, #p.event_shape do same = same and p.event_shape[i] == q.event_shape[i] end
  if not same then
    raise("kl_divergence: TransformedDistributions of different transforms or events have no rule (as PyTorch's)")
  end
  return D.kl_divergence(p.base_dist, q.base_dist)
end)
rule(D.LogisticNormal, D.LogisticNormal, function(p, q) return D.kl_divergence(p.base_dist, q.base_dist):sum(-1) end)

-- ---- pairs of two families (as PyTorch's; infinite where p has mass that q has not) -------

local inf = math.huge
local function infinite(field) return function(p) return dl.full_like(p[field], inf) end end
local function xlogx(t) return t * t:log() end   -- (NaN at 0, as PyTorch's _x_log_x)
local function beta_mean(p) return p.concentration1 / (p.concentration1 + p.concentration0) end
local SQRT_2PI = math.sqrt(2 * math.pi)
local LOG_2PI = math.log(2 * math.pi)

rule(Bernoulli, Poisson, function(p, q) return -p:entropy() - (p.probs * q.rate:log() - q.rate) end)
rule(Beta, CB, function(p, q)
  return -p:entropy() - p.mean * q.logits - cb_log_norm_plus_log1m(q)
end)
rule(Beta, D.Pareto, infinite("concentration1"))
rule(Beta, Exponential, function(p, q) return -p:entropy() - q.rate:log() + q.rate * beta_mean(p) end)
rule(Beta, Gamma, function(p, q)
  local c1, c0 = p.concentration1, p.concentration0
  return -p:entropy() + q.concentration:lgamma() - q.concentration * q.rate:log()
         - (q.concentration - 1) * (c1:digamma() - (c1 + c0):digamma()) + q.rate * c1 / (c1 + c0)
end)
rule(Beta, Normal, function(p, q)
  local m, var = beta_mean(p), q.scale:pow(2)
  local t3 = (m * (1 - m) / (p.concentration1 + p.concentration0 + 1) + m:pow(2)) * 0.5
  return -p:entropy() + (var * (2 * math.pi)):log() * 0.5 + (t3 - q.loc * m + q.loc:pow(2) * 0.5) / var
end)
rule(Beta, Uniform, function(p, q)
  return dl.where(q.low:gt(0):logical_or(q.high:lt(1)), inf, -p:entropy() + (q.high - q.low):log())
end)
rule(CB, D.Pareto, infinite("probs"))
rule(CB, Exponential, function(p, q) return -p:entropy() - q.rate:log() + q.rate * p.mean end)
rule(CB, Normal, function(p, q)
  local t2 = (LOG_2PI + (q.loc / q.scale):pow(2)) * 0.5 + q.scale:log()
  return -p:entropy() + t2 + (p.variance + p.mean:pow(2) - q.loc * p.mean * 2) / (q.scale:pow(2) * 2)
end)
-- (infinite where q.low >= 0 or q.high <= 1, as PyTorch's, Uniform(0, 1) included)
rule(CB, Uniform, function(p, q)
  return dl.where(q.low:ge(0):logical_or(q.high:le(1)), inf, -p:entropy() + (q.high - q.low):log())
end)
for _, Q in ipairs({ Beta, CB, D.Pareto, Uniform }) do rule(Exponential, Q, infinite("rate")) end
rule(Exponential, Gamma, function(p, q)
  local ratio = q.rate / p.rate
  return -q.concentration * ratio:log() + ratio + q.concentration:lgamma() + q.concentration * EULER - (1 + EULER)
end)
rule(Exponential, Gumbel, function(p, q)
  local prod, ratio = p.rate * q.scale, q.loc / q.scale
  return prod:log() - 1 - ratio + ratio:exp() * prod / (prod + 1) + prod:reciprocal()
end)
rule(Exponential, Normal, function(p, q)
  local var, r2 = q.scale:pow(2), p.rate:pow(2)
  return (r2 * var * (2 * math.pi)):log() * 0.5 - 1 + (r2:reciprocal() - q.loc / p.rate + q.loc:pow(2) * 0.5) / var
end)
for _, Q in ipairs({ Beta, CB, D.Pareto, Uniform }) do rule(Gamma, Q, infinite("concentration")) end
rule(Gamma, Exponential, function(p, q)
  return -p:entropy() - q.rate:log() + q.rate * p.concentration / p.rate
end)
rule(Gamma, Gumbel, function(p, q)
  local a = p.concentration
  local prod, ratio = p.rate * q.scale, q.loc / q.scale
  return (a - 1) * a:digamma() - a:lgamma() - a + prod:log() + a / prod
         + ratio:exp() * (1 + prod:reciprocal()):pow(-a) - ratio
end)
rule(Gamma, Normal, function(p, q)
  local a, var, b2 = p.concentration, q.scale:pow(2), p.rate:pow(2)
  local t1 = (b2 * var * (2 * math.pi)):log() * 0.5 - a - a:lgamma()
  return t1 + (a - 1) * a:digamma() + ((a:pow(2) + a) * 0.5 / b2 - q.loc * a / p.rate + q.loc:pow(2) * 0.5) / var
end)
for _, Q in ipairs({ Beta, CB, Exponential, Gamma, D.Pareto, Uniform }) do rule(Gumbel, Q, infinite("loc")) end
rule(Gumbel, Normal, function(p, q)
  local ratio = p.scale / q.scale
  return -(ratio / SQRT_2PI):log() + (ratio * (math.pi * 0.5)):pow(2) / 3
         + ((p.loc + p.scale * EULER - q.loc) / q.scale):pow(2) * 0.5 - (EULER + 1)
end)
for _, Q in ipairs({ Beta, CB, Exponential, Gamma, D.Pareto, Uniform }) do rule(Laplace, Q, infinite("loc")) end
rule(Laplace, Normal, function(p, q)
  local var = q.scale:pow(2)
  local r = p.scale:pow(2) / var
  return -(r * (2 / math.pi)):log() * 0.5 + r + (p.loc:pow(2) * 0.5 - p.loc * q.loc + q.loc:pow(2) * 0.5) / var - 1
end)
for _, Q in ipairs({ Beta, CB, Exponential, Gamma, D.Pareto, Uniform }) do rule(Normal, Q, infinite("loc")) end
rule(Normal, Gumbel, function(p, q)
  local m, v, l = p.loc / q.scale, (p.scale / q.scale):pow(2), q.loc / q.scale
  return -v:log() * 0.5 + m - l + (-m + v * 0.5 + l):exp() - 0.5 * (1 + LOG_2PI)
end)
rule(Normal, Laplace, function(p, q)
  local diff = p.loc - q.loc
  local z = diff / p.scale
  local t2 = p.scale * (z:pow(2) * -0.5):exp() * math.sqrt(2 / math.pi)
  return -(p.scale / q.scale):log() + (t2 + diff * (z * math.sqrt(0.5)):erf()) / q.scale
         - 0.5 * (1 + math.log(0.5 * math.pi))
end)
for _, Q in ipairs({ Beta, CB, Uniform }) do rule(D.Pareto, Q, infinite("scale")) end
rule(D.Pareto, Exponential, function(p, q)
  local prod = p.scale * q.rate
  local kl = (p.alpha / prod):log() - p.alpha:reciprocal() + p.alpha * prod / (p.alpha - 1) - 1
  return dl.where(p.alpha:le(1), inf, kl)
end)
rule(D.Pareto, Gamma, function(p, q)
  local common = p.scale:log() + p.alpha:reciprocal()
  local kl = p.alpha:log() - common + q.concentration:lgamma() - q.concentration * q.rate:log()
             + (1 - q.concentration) * common + q.rate * p.alpha * p.scale / (p.alpha - 1) - 1
  return dl.where(p.alpha:le(1), inf, kl)
end)
rule(D.Pareto, Normal, function(p, q)
  local var = q.scale:pow(2) * 2
  local common = p.scale / (p.alpha - 1)
  local kl = (q.scale * p.alpha / p.scale * SQRT_2PI):log() - p.alpha:reciprocal()
             + (p.alpha * common:pow(2) / (p.alpha - 2) + (p.alpha * common - q.loc):pow(2)) / var - 1
  return dl.where(p.alpha:le(2), inf, kl)
end)
rule(Poisson, Bernoulli, infinite("rate"))
rule(Poisson, D.Binomial, infinite("rate"))
rule(Uniform, Beta, function(p, q)
  local w = p.high - p.low
  local t2 = (q.concentration1 - 1) * (xlogx(p.high) - xlogx(p.low) - w) / w
  local t3 = (q.concentration0 - 1) * (xlogx(1 - p.high) - xlogx(1 - p.low) + w) / w
  local kl = t3 + log_beta(q.concentration1, q.concentration0) - w:log() - t2
  return dl.where(p.high:gt(1):logical_or(p.low:lt(0)), inf, kl)
end)
-- (infinite where p.high >= 1 or p.low <= 0, as PyTorch's)
rule(Uniform, CB, function(p, q)
  local kl = -p:entropy() - p.mean * q.logits - cb_log_norm_plus_log1m(q)
  return dl.where(p.high:ge(1):logical_or(p.low:le(0)), inf, kl)
end)
rule(Uniform, Exponential, function(p, q)
  local kl = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate):log()
  return dl.where(p.low:lt(0), inf, kl)
end)
rule(Uniform, Gamma, function(p, q)
  local w = p.high - p.low
  local kl = -w:log() + q.concentration:lgamma() - q.concentration * q.rate:log()
             + (1 - q.concentration) * (xlogx(p.high) - xlogx(p.low) - w) / w + q.rate * (p.high + p.low) / 2
  return dl.where(p.low:lt(0), inf, kl)
end)
rule(Uniform, Gumbel, function(p, q)
  local common = q.scale / (p.high - p.low)
  local hi, lo = (p.high - q.loc) / q.scale, (p.low - q.loc) / q.scale
  return common:log() + (hi + lo) * 0.5 - common * ((-hi):exp() - (-lo):exp())
end)
rule(Uniform, Normal, function(p, q)
  local w = p.high - p.low
  return (q.scale / w * SQRT_2PI):log() + (w:pow(2) / 12 + ((p.high + p.low - q.loc * 2) / 2):pow(2)) * 0.5 / q.scale:pow(2)
end)
rule(Uniform, D.Pareto, function(p, q)
  local w = p.high - p.low
  local kl = (xlogx(p.high) - xlogx(p.low) - w) / w * (q.alpha + 1) - (q.alpha * q.scale:pow(q.alpha) * w):log()
  return dl.where(p.low:lt(q.scale), inf, kl)
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
          .. tostring(Q and Q.__name or type(q)) .. " (PyTorch has none either)")
  end
  return f(p, q)
end
