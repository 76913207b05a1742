-- dlua.distributions: probability distributions, as torch.distributions (dl.distributions,
-- loaded when first read):
--
--   local D = dl.distributions
--   local pi = D.Normal(mu, sigma)              -- parameters: tensors or numbers, broadcast
--   local a = pi:rsample()                      -- differentiable in mu and sigma
--   local loss = -(pi:log_prob(a) * advantage):sum()
--   D.kl_divergence(D.Normal(mu, sigma), D.Normal(0, 1))
--
-- Normal, Uniform, Exponential, Laplace, LogNormal, HalfNormal, Gumbel, Cauchy, VonMises, StudentT,
-- Gamma, Chi2, Beta, Dirichlet, Bernoulli({probs =} or {logits =}), Geometric,
-- Categorical({probs =} or {logits =}; categories 1..K, as dlua's indices),
-- OneHotCategorical, Poisson, Binomial(n, {probs =}), Multinomial(n, {probs =}),
-- MultivariateNormal(loc, {covariance_matrix =, scale_tril = or precision_matrix =}),
-- Independent(base, n), TransformedDistribution(base, transforms) (their transforms in
-- dl.distributions.transforms) and MixtureSameFamily(mixture, components); Weibull(scale,
-- concentration), Pareto(scale, alpha), HalfCauchy(scale), Kumaraswamy(c1, c0),
-- FisherSnedecor(df1, df2), NegativeBinomial(total_count, {probs =} or {logits =}),
-- ContinuousBernoulli({probs =} or {logits =}), LowRankMultivariateNormal(loc, cov_factor,
-- cov_diag), Wishart(df, {covariance_matrix =, scale_tril = or precision_matrix =}),
-- LKJCholesky(dim [, concentration]), LogisticNormal(loc, scale), and the
-- relaxed families LogitRelaxedBernoulli, RelaxedBernoulli, RelaxedOneHotCategorical
-- (temperature, {probs =} or {logits =}; Gumbel-softmax) and
-- OneHotCategoricalStraightThrough. Each has
-- batch_shape and event_shape, sample([shape]) (no gradient), rsample([shape]) where the
-- distribution can be reparameterised, log_prob, entropy, perplexity, mean, variance,
-- stddev and (where PyTorch has one) mode, support (a constraint of
-- dl.distributions.constraints), has_rsample, has_enumerate_support and expand(batch_shape);
-- the continuous ones on a line also cdf and icdf; the finite discrete ones enumerate_support. Samples come from the generator
-- dl.manual_seed seeds, on the parameters' device and in their dtype. As PyTorch's
-- (validate_args on by default), parameters and the values given to log_prob are checked
-- against their support; {validate_args = false} as a last argument skips those checks
-- (each costs a reduction).
--
-- The families live by kind in dlua/distributions/: line.lua (Normal ... Cauchy, VonMises),
-- discrete.lua, multivariate.lua, gamma.lua (Gamma, Chi2, Beta, Dirichlet, StudentT),
-- transformed.lua (TransformedDistribution and the transforms, MixtureSameFamily),
-- derived.lua (the families made of others' draws, and the relaxed ones) and kl.lua;
-- base.lua holds what they share.
local B = require("dlua.distributions.base")
require("dlua.distributions.line")
require("dlua.distributions.discrete")
require("dlua.distributions.multivariate")
require("dlua.distributions.gamma")
require("dlua.distributions.transformed")
require("dlua.distributions.derived")
require("dlua.distributions.kl")

return B.D
