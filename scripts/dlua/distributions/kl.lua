-- dlua.distributions.kl: kl_divergence(p, q) and its rules for each family.
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
