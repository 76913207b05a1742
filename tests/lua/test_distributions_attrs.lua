-- dl.distributions' attributes beside the densities: mode, support, has_rsample,
-- has_enumerate_support, enumerate_support, perplexity, expand, and the cdf and icdf of
-- the families PyTorch makes by transforms; values against torch.distributions 1.13 in
-- float64 (each literal's torch call in a comment; 0-based categories there, 1-based here).
local dl = require("dlua")
local H = require("harness")
local D = dl.distributions
local T = D.transforms

local NAN = 0 / 0
local f64 = { dtype = "float64" }
local function t(v) return dl.tensor(v, f64) end

H.test("mode: the families whose mode is a parameter or 0, and Uniform's NaN", function()
  local loc, scale = t({ 1, -2, 3 }), t({ 1, 2, 0.5 })
  for _, d in ipairs({ D.Normal(loc, scale), D.Laplace(loc, scale), D.Gumbel(loc, scale), D.Cauchy(loc, scale),
                       D.StudentT(t({ 1, 2, 3 }), loc, scale), D.VonMises(loc, scale) }) do
    H.values(d.mode, { 1, -2, 3 }, { dtype = "float64" })   -- torch: .mode == loc
  end
  -- torch: Exponential([0.5, 2.]).mode, HalfNormal([1., 2.]).mode, HalfCauchy(...), Geometric([0.2, 0.9])
  H.values(D.Exponential(t({ 0.5, 2 })).mode, { 0, 0 })
  H.values(D.HalfNormal(t({ 1, 2 })).mode, { 0, 0 })
  H.values(D.HalfCauchy(t({ 1, 2 })).mode, { 0, 0 })
  H.values(D.Geometric({ probs = t({ 0.2, 0.9 }) }).mode, { 0, 0 })
  H.values(D.Uniform(t({ 0, 1 }), t({ 2, 3 })).mode, { NAN, NAN })   -- Uniform([0., 1.], [2., 3.]).mode
  H.values(D.Pareto(t({ 1, 2 }), t({ 2, 0.5 })).mode, { 1, 2 })      -- Pareto([1., 2.], [2., .5]).mode
end)

H.test("mode: LogNormal, Gamma, Chi2, Weibull and FisherSnedecor (NaN where df1 <= 2)", function()
  -- LogNormal([0., 1., -.5], [1., .5, 2.]).mode
  H.values(D.LogNormal(t({ 0, 1, -0.5 }), t({ 1, 0.5, 2 })).mode,
           { 0.36787944117144233, 2.117000016612675, 0.011108996538242306 }, { tol = 1e-12 })
  H.values(D.Gamma(t({ 0.5, 1, 3.5 }), t({ 2, 1, 0.5 })).mode, { 0, 0, 5 })   -- Gamma([.5, 1., 3.5], [2., 1., .5]).mode
  H.values(D.Chi2(t({ 1, 2, 5 })).mode, { 0, 0, 3 })                           -- Chi2([1., 2., 5.]).mode
  -- Weibull([1., 2., 3.], [.5, 1., 3.]).mode ((-1)^2 at concentration 0.5)
  H.values(D.Weibull(t({ 1, 2, 3 }), t({ 0.5, 1, 3 })).mode, { 1, 0, 2.620741394208897 }, { tol = 1e-12 })
  -- FisherSnedecor([1., 2., 5.], [3., 4., 6.]).mode
  H.values(D.FisherSnedecor(t({ 1, 2, 5 }), t({ 3, 4, 6 })).mode, { NAN, NAN, 0.45 }, { tol = 1e-12 })
end)

H.test("mode: Beta and Dirichlet, their corners and NaNs as PyTorch's", function()
  -- Beta([.5, 2., 1., .5, 3.], [.5, 3., 1., 2., .7]).mode
  H.values(D.Beta(t({ 0.5, 2, 1, 0.5, 3 }), t({ 0.5, 3, 1, 2, 0.7 })).mode, { 1, 1 / 3, NAN, 0, 1 }, { tol = 1e-12 })
  -- Dirichlet([[.5, .2, .3], [1., 2., 3.], [1., 1., .5], [.3, .9, .6], [2., .5, 1.]]).mode
  local c = t({ { 0.5, 0.2, 0.3 }, { 1, 2, 3 }, { 1, 1, 0.5 }, { 0.3, 0.9, 0.6 }, { 2, 0.5, 1 } })
  H.values(D.Dirichlet(c).mode, { { 1, 0, 0 }, { 0, 1 / 3, 2 / 3 }, { NAN, NAN, NAN }, { 1, 0, 0 }, { 1, 0, 0 } },
           { tol = 1e-12, dtype = "float64" })
end)

H.test("mode: the discrete families (Bernoulli's NaN at 1/2, Categorical's argmax, the floors)", function()
  H.values(D.Bernoulli({ probs = t({ 0.2, 0.5, 0.7, 1 }) }).mode, { 0, NAN, 1, 1 })   -- Bernoulli([.2, .5, .7, 1.]).mode
  H.values(D.Bernoulli({ logits = t({ -1, 0, 2 }) }).mode, { 0, NAN, 1 })              -- Bernoulli(logits=[-1., 0., 2.]).mode
  local p = t({ { 0.2, 0.5, 0.3 }, { 0.6, 0.2, 0.2 }, { 0.1, 0.1, 0.8 } })
  H.values(D.Categorical({ probs = p }).mode, { 2, 1, 3 }, { dtype = "int64" })        -- Categorical(p).mode + 1
  -- OneHotCategorical(p[:2]).mode
  H.values(D.OneHotCategorical({ probs = p:narrow(1, 1, 2) }).mode, { { 0, 1, 0 }, { 1, 0, 0 } }, { dtype = "float64" })
  H.values(D.Poisson(t({ 0.5, 3, 7.9 })).mode, { 0, 3, 7 })                            -- Poisson([.5, 3., 7.9]).mode
  -- Binomial([5., 10., 4., 3.], [.2, .5, .99, 1.]).mode (clamped at total_count)
  H.values(D.Binomial(t({ 5, 10, 4, 3 }), { probs = t({ 0.2, 0.5, 0.99, 1 }) }).mode, { 1, 5, 4, 3 })
  -- NegativeBinomial([1., 5., 10.], [.3, .5, .8]).mode
  H.values(D.NegativeBinomial(t({ 1, 5, 10 }), { probs = t({ 0.3, 0.5, 0.8 }) }).mode, { 0, 4, 36 })
end)

H.test("mode: the multivariate families, Independent and Kumaraswamy; none where PyTorch has none", function()
  local loc = t({ { 1, 2 }, { 3, 4 } })
  H.values(D.MultivariateNormal(loc, { covariance_matrix = dl.eye(2, f64) }).mode, { { 1, 2 }, { 3, 4 } })
  H.values(D.LowRankMultivariateNormal(loc, dl.ones(2, 2, 1, f64), dl.ones(2, 2, f64)).mode, { { 1, 2 }, { 3, 4 } })
  -- Independent(Gamma([[.5, 2.], [3., 4.]], [1., 2.]), 1).mode
  H.values(D.Independent(D.Gamma(t({ { 0.5, 2 }, { 3, 4 } }), t({ 1, 2 })), 1).mode, { { 0, 0.5 }, { 2, 1.5 } })
  -- Wishart([2.5, 5.], covariance_matrix=[[2., .5], [.5, 1.]]).mode
  H.values(D.Wishart(t({ 2.5, 5 }), { covariance_matrix = t({ { 2, 0.5 }, { 0.5, 1 } }) }).mode,
           { { { NAN, NAN }, { NAN, NAN } }, { { 4, 1 }, { 1, 2 } } })
  -- Kumaraswamy(a, b): ((a - 1) / (a b - 1))^(1/a), the density's maximum (a numpy grid
  -- search gives 0.4472136 and 0.7368065); torch 1.13's formula is NaN for every b > 1,
  -- its NaN where a concentration is below 1 kept
  H.values(D.Kumaraswamy(t({ 2, 3, 0.5, 2 }), t({ 3, 2, 2, 0.9 })).mode,
           { 0.4472135954999579, 0.7368062997280773, NAN, NAN }, { tol = 1e-12 })
  -- torch raises NotImplementedError for these
  H.raises(function() return D.TransformedDistribution(D.Normal(0, 1), { T.ExpTransform() }).mode end,
           "TransformedDistribution.mode: not defined")
  H.raises(function() return D.MixtureSameFamily(D.Categorical({ logits = dl.zeros(2) }), D.Normal(dl.zeros(2), 1)).mode end,
           "MixtureSameFamily.mode: not defined")
  H.raises(function() return D.Multinomial(3, { probs = dl.ones(3) }).mode end, "Multinomial.mode: not defined")
  H.raises(function() return D.ContinuousBernoulli({ probs = 0.3 }).mode end, "ContinuousBernoulli.mode: not defined")
  H.raises(function() return D.LKJCholesky(3).mode end, "LKJCholesky.mode: not defined")
  H.raises(function() return D.RelaxedBernoulli(1, { probs = 0.3 }).mode end, "RelaxedBernoulli.mode: not defined")
end)

H.test("support: torch's constraint of each family, checking values", function()
  local cases = {
    { D.Normal(0, 1), "real" }, { D.Exponential(1), "nonnegative" }, { D.LogNormal(0, 1), "positive" },
    { D.Gamma(1, 1), "nonnegative" }, { D.Chi2(2), "nonnegative" }, { D.Beta(1, 1), "unit_interval" },
    { D.Dirichlet(dl.ones(3)), "simplex" }, { D.Bernoulli({ probs = 0.3 }), "boolean" },
    { D.Geometric({ probs = 0.3 }), "nonnegative_integer" }, { D.Poisson(1), "nonnegative_integer" },
    { D.Categorical({ probs = dl.ones(3) }), "integer_interval(1, 3)" },
    { D.OneHotCategorical({ probs = dl.ones(3) }), "one_hot" }, { D.Binomial(5, { probs = 0.3 }), "integer_interval(0, 5)" },
    { D.Multinomial(5, { probs = dl.ones(3) }), "multinomial(5)" },
    { D.MultivariateNormal(dl.zeros(2), { covariance_matrix = dl.eye(2) }), "independent(real, 1)" },
    { D.Wishart(3, { covariance_matrix = dl.eye(2) }), "positive_definite" }, { D.LKJCholesky(3), "corr_cholesky" },
    { D.Independent(D.Normal(dl.zeros(2), 1), 1), "independent(real, 1)" },
    { D.TransformedDistribution(D.Normal(0, 1), { T.ExpTransform() }), "positive" },
    { D.TransformedDistribution(D.Normal(dl.zeros(3), 1), { T.StickBreakingTransform() }), "simplex" },
    { D.TransformedDistribution(D.Normal(0, 1), { T.TanhTransform() }), "interval(-1, 1)" },
    { D.Uniform(0, 2), "interval(0, 2)" }, { D.Pareto(1, 2), "greater_than_eq(1)" }, { D.Weibull(1, 2), "positive" },
    { D.HalfCauchy(1), "nonnegative" }, { D.Kumaraswamy(1, 2), "unit_interval" }, { D.FisherSnedecor(1, 2), "positive" },
    { D.NegativeBinomial(3, { probs = 0.3 }), "nonnegative_integer" }, { D.ContinuousBernoulli({ probs = 0.3 }), "unit_interval" },
    { D.LogisticNormal(dl.zeros(2), 1), "simplex" }, { D.RelaxedBernoulli(1, { probs = 0.3 }), "unit_interval" },
    { D.LogitRelaxedBernoulli(1, { probs = 0.3 }), "real" },
    { D.RelaxedOneHotCategorical(1, { probs = dl.ones(3) }), "simplex" },
    { D.MixtureSameFamily(D.Categorical({ logits = dl.zeros(2) }), D.Normal(dl.zeros(2), 1)), "real" },
    { D.VonMises(0, 1), "real" },
  }
  for _, c in ipairs(cases) do H.eq(tostring(c[1].support), c[2], c[1].__name) end
  -- a constraint's check is over the batch; event_dim and is_discrete as torch's
  H.values(D.Categorical({ probs = dl.ones(2, 3) }).support:check(dl.tensor({ 0, 1, 3, 4, 2.5 })),
           { false, true, true, false, false })
  local s = D.Dirichlet(dl.ones(3)).support
  H.eq({ s.event_dim, s.is_discrete }, { 1, false })
  H.values(s:check(dl.tensor({ { 0.2, 0.3, 0.5 }, { 0.5, 0.6, -0.1 } })), { true, false })
  local b = D.Binomial(t({ 2, 3 }), { probs = t({ 0.5, 0.5 }) }).support
  H.eq(b.is_discrete, true)
  H.values(b.upper_bound, { 2, 3 })
  H.values(b:check(t({ 3, 3 })), { false, true })
  H.values(D.Uniform(t({ 0, 1 }), t({ 2, 3 })).support:check(t({ 2, 0.5 })), { true, false })
  H.values(D.Independent(D.Normal(dl.zeros(2, 2), 1), 1).support:check(dl.tensor({ { 1, 0 / 0 }, { 1, 2 } })), { false, true })
  H.values(D.LKJCholesky(2).support:check(dl.tensor({ { { 1, 0 }, { 0.6, 0.8 } }, { { 1, 0 }, { 0.6, 0.9 } } })),
           { true, false })
  -- symmetric and positive-definite per matrix (torch 1.13 gives true, true, false: where one matrix of the
  -- batch is not symmetric it returns the symmetry check alone, so the indefinite second passes)
  H.values(D.Wishart(3, { covariance_matrix = dl.eye(2) }).support:check(
             dl.tensor({ { { 2, 0.5 }, { 0.5, 1 } }, { { 1, 2 }, { 2, 1 } }, { { 1, 0.5 }, { 0.4, 1 } } })), { true, false, false })
  H.raises(function() return D.Normal(0, 1).support:check(3) end, "check: expected a tensor")
  -- torch: nonnegative_integer.check(inf) is False (inf % 1 is NaN); independent(c, 2) of a vector raises
  H.values(D.Poisson(1).support:check(dl.tensor({ math.huge, 2, 2.5, -1 })), { false, true, false, false })
  H.raises(function() return D.Independent(D.Exponential(dl.ones(2, 3)), 2).support:check(dl.ones(3)) end,
           "expected a value of at least 2 dims, got shape (3,)")
  -- the ends, as torch 1.13's: Exponential's support is nonnegative, Uniform's a closed interval, positive
  -- excludes 0
  H.values(D.Exponential(1).support:check(dl.tensor({ 0, 1e-300 }, { dtype = "float64" })), { true, true })
  H.values(D.Uniform(0, 1).support:check(dl.tensor({ 0, 1, 1.5 })), { true, true, false })
  H.values(D.constraints.interval(0, 1):check(dl.tensor({ 0, 1, -0.1 })), { true, true, false })
  H.values(D.constraints.positive:check(dl.tensor({ 0, 1e-30 })), { false, true })
  H.values(D.constraints.simplex:check(dl.tensor({ { 0.5, 0.5 }, { 0.5, 0.6 } })), { true, false })
  H.values(D.constraints.one_hot:check(dl.tensor({ { 0, 1 }, { 1, 1 } })), { true, false })
end)

H.test("has_rsample and has_enumerate_support as torch's; enumerate_support's shapes", function()
  local yes = { D.Normal(0, 1), D.Gamma(1, 1), D.Dirichlet(dl.ones(2)), D.Wishart(3, { covariance_matrix = dl.eye(2) }),
                D.Independent(D.Normal(dl.zeros(2), 1), 1), D.RelaxedBernoulli(1, { probs = 0.3 }),
                D.TransformedDistribution(D.Normal(0, 1), { T.ExpTransform() }), D.Kumaraswamy(1, 2),
                D.OneHotCategoricalStraightThrough({ probs = dl.ones(3) }), D.LogisticNormal(dl.zeros(2), 1) }
  for _, d in ipairs(yes) do H.eq(d.has_rsample, true, d.__name) end
  local no = { D.VonMises(0, 1), D.Bernoulli({ probs = 0.3 }), D.Poisson(1), D.Binomial(3, { probs = 0.3 }),
               D.Multinomial(3, { probs = dl.ones(2) }), D.LKJCholesky(2), D.NegativeBinomial(2, { probs = 0.3 }),
               D.Independent(D.Poisson(dl.ones(2)), 1), D.MixtureSameFamily(D.Categorical({ logits = dl.zeros(2) }),
                                                                             D.Normal(dl.zeros(2), 1)) }
  for _, d in ipairs(no) do H.eq(d.has_rsample, false, d.__name) end
  for _, d in ipairs({ D.Bernoulli({ probs = 0.3 }), D.Categorical({ probs = dl.ones(3) }), D.Binomial(3, { probs = 0.3 }),
                       D.OneHotCategorical({ probs = dl.ones(3) }), D.Independent(D.Bernoulli({ probs = dl.ones(2) * 0.5 }), 0) }) do
    H.eq(d.has_enumerate_support, true, d.__name)
  end
  for _, d in ipairs({ D.Normal(0, 1), D.Geometric({ probs = 0.3 }), D.Poisson(1), D.Multinomial(3, { probs = dl.ones(2) }),
                       D.Independent(D.Bernoulli({ probs = dl.ones(2) * 0.5 }), 1) }) do
    H.eq(d.has_enumerate_support, false, d.__name)
  end
  -- Bernoulli(probs (2, 3)).enumerate_support(): (2, 2, 3), float64; expand=False: (2, 1, 1)
  local b = D.Bernoulli({ probs = t({ { 0.2, 0.5, 0.7 }, { 0.1, 0.2, 0.3 } }) })
  H.shape(b:enumerate_support(), { 2, 2, 3 })
  H.values(b:enumerate_support({ expand = false }), { { { 0 } }, { { 1 } } }, { dtype = "float64" })
  -- Categorical(ones(2, 4)).enumerate_support(): (4, 2), values 0..3 (here 1..4), int64
  local c = D.Categorical({ probs = dl.ones(2, 4) })
  H.values(c:enumerate_support(), { { 1, 1 }, { 2, 2 }, { 3, 3 }, { 4, 4 } }, { dtype = "int64" })
  H.shape(c:enumerate_support({ expand = false }), { 4, 1 })
  -- OneHotCategorical(ones(2, 3)).enumerate_support(): (3, 2, 3); expand=False (3, 1, 3)
  local o = D.OneHotCategorical({ probs = dl.ones(2, 3) })
  H.shape(o:enumerate_support(), { 3, 2, 3 })
  H.values(o:enumerate_support({ expand = false }), { { { 1, 0, 0 } }, { { 0, 1, 0 } }, { { 0, 0, 1 } } })
  -- Binomial(3, [.2, .5]).enumerate_support(): (4, 2), 0..3
  local bi = D.Binomial(3, { probs = t({ 0.2, 0.5 }) })
  H.values(bi:enumerate_support(), { { 0, 0 }, { 1, 1 }, { 2, 2 }, { 3, 3 } }, { dtype = "float64" })
  H.shape(bi:enumerate_support({ expand = false }), { 4, 1 })
  -- the values score under log_prob across the batch
  H.shape(c:log_prob(c:enumerate_support()), { 4, 2 })
  H.raises(function() D.Binomial(t({ 2, 3 }), { probs = t({ 0.2, 0.5 }) }):enumerate_support() end,
           "Binomial.enumerate_support: needs one total_count for the whole batch, got 2 to 3")
  H.raises(function() D.Normal(0, 1):enumerate_support() end, "Normal.enumerate_support: not defined")
  H.raises(function() b:enumerate_support({ expnad = false }) end, "Bernoulli.enumerate_support: unknown option 'expnad'")
  H.raises(function() b:enumerate_support({ expand = 1 }) end, "Bernoulli.enumerate_support")
  H.raises(function() D.Independent(D.Bernoulli({ probs = dl.ones(2) * 0.5 }), 1):enumerate_support() end,
           "Independent.enumerate_support: not defined where batch dims are taken into the event")
end)

H.test("perplexity is exp(entropy)", function()
  -- Normal([0., 1.], [1., 2.]).perplexity(); Categorical([[.2, .5, .3], [.6, .2, .2]]).perplexity()
  H.values(D.Normal(t({ 0, 1 }), t({ 1, 2 })):perplexity(), { 4.132731354122493, 8.265462708244986 }, { tol = 1e-12 })
  H.values(D.Categorical({ probs = t({ { 0.2, 0.5, 0.3 }, { 0.6, 0.2, 0.2 } }) }):perplexity(),
           { 2.800094072853832, 2.586409289858933 }, { tol = 1e-12 })
  H.raises(function() D.LKJCholesky(3):perplexity() end, "LKJCholesky.entropy: not defined")
end)

-- Every family at batch shape {3}, expanded to {2, 3}: torch's shapes, sample (4, 2, 3,
-- *event) and log_prob (4, 2, 3).
local function families()
  local p3 = dl.tensor({ 0.2, 0.5, 0.7 })
  local pos = dl.tensor({ 1.5, 2, 3 })
  local k3 = dl.ones(3, 4)
  return {
    D.Normal(dl.zeros(3), 1), D.Uniform(dl.zeros(3), pos), D.Exponential(pos), D.Laplace(dl.zeros(3), pos),
    D.LogNormal(dl.zeros(3), pos), D.HalfNormal(pos), D.Gumbel(dl.zeros(3), pos), D.Cauchy(dl.zeros(3), pos),
    D.VonMises(dl.zeros(3), pos), D.StudentT(pos), D.Gamma(pos, 1), D.Chi2(pos), D.Beta(pos, 2),
    D.Dirichlet(dl.ones(3, 2)), D.Bernoulli({ probs = p3 }), D.Geometric({ probs = p3 }),
    D.Categorical({ probs = k3 }), D.OneHotCategorical({ probs = k3 }), D.Poisson(pos), D.Binomial(5, { probs = p3 }),
    D.Multinomial(5, { probs = k3 }), D.MultivariateNormal(dl.zeros(3, 2), { covariance_matrix = dl.eye(2) }),
    D.LowRankMultivariateNormal(dl.zeros(3, 2), dl.ones(3, 2, 1), dl.ones(3, 2)),
    D.Wishart(dl.tensor({ 3, 4, 5 }), { covariance_matrix = dl.eye(2) }), D.LKJCholesky(3, pos),
    D.Independent(D.Normal(dl.zeros(3, 2), 1), 1),
    D.TransformedDistribution(D.Normal(dl.zeros(3), 1), { T.ExpTransform(), T.AffineTransform(1, 2) }),
    D.MixtureSameFamily(D.Categorical({ logits = dl.zeros(3, 2) }), D.Normal(dl.zeros(3, 2), 1)),
    D.Weibull(pos, 2), D.Pareto(pos, 2), D.HalfCauchy(pos), D.Kumaraswamy(pos, 2), D.FisherSnedecor(pos, 3),
    D.NegativeBinomial(3, { probs = p3 }), D.ContinuousBernoulli({ probs = p3 }),
    D.LogitRelaxedBernoulli(0.5, { probs = p3 }), D.RelaxedBernoulli(0.5, { probs = p3 }),
    D.ExpRelaxedCategorical(0.5, { probs = k3 }), D.RelaxedOneHotCategorical(0.5, { probs = k3 }),
    D.OneHotCategoricalStraightThrough({ probs = k3 }), D.LogisticNormal(dl.zeros(3, 2), 1),
  }
end

H.test("expand: every family to a larger batch, its draws and scores of torch's shapes", function()
  dl.manual_seed(0)
  for _, d in ipairs(families()) do
    local name = d.__name
    H.eq(d.batch_shape, { 3 }, name)
    local e = d:expand({ 2, 3 })
    H.eq(getmetatable(e), getmetatable(d), name)
    H.eq(e.batch_shape, { 2, 3 }, name)
    H.eq(e.event_shape, d.event_shape, name)
    local want = { 4, 2, 3 }
    for _, n in ipairs(d.event_shape) do want[#want + 1] = n end
    local x = e:sample({ 4 })
    H.eq(x.shape, want, name .. ".sample")
    H.eq(e:log_prob(x).shape, { 4, 2, 3 }, name .. ".log_prob")
    if e.has_rsample then H.eq(e:rsample().shape, { unpack(want, 2) }, name .. ".rsample") end
    H.eq(d.batch_shape, { 3 }, name .. " (left as it was)")
  end
end)

H.test("expand: the same parameters (views), the same values; a dim of 1 grows", function()
  local d = D.Gamma(t({ { 1 }, { 2 } }), t({ 1, 2, 3 }))   -- batch (2, 3)
  local e = d:expand({ 4, 2, 3 })
  H.values(e.mean:select(1, 3), d.mean:totable(), { tol = 1e-12 })
  H.values(e:log_prob(t(0.7)):select(1, 2), d:log_prob(t(0.7)):totable(), { tol = 1e-12 })
  local one = D.Normal(dl.zeros(1, 3, f64), 1):expand({ 5, 3 })   -- (1, 3) to (5, 3)
  H.eq(one.loc.shape, { 5, 3 })
  H.eq(one:entropy().shape, { 5, 3 })
  local m = D.MultivariateNormal(t({ 1, 2 }), { covariance_matrix = t({ { 2, 0.5 }, { 0.5, 1 } }) }):expand({ 3 })
  -- MultivariateNormal([1., 2.], [[2., .5], [.5, 1.]]).log_prob([0., 0.])
  H.values(m:log_prob(t({ 0, 0 })), { -4.117684960377058, -4.117684960377058, -4.117684960377058 }, { tol = 1e-12 })
  H.values(D.Categorical({ probs = t({ 0.2, 0.8 }) }):expand({ 2 }).probs, { { 0.2, 0.8 }, { 0.2, 0.8 } })
  -- a transform that broadcasts the base: the base expanded to the full batch
  local td = D.TransformedDistribution(D.Normal(dl.zeros(3), 1), { T.AffineTransform(dl.zeros(2, 1), 1) })
  H.eq(td:expand({ 2, 3 }):sample({ 5 }).shape, { 5, 2, 3 })
  H.raises(function() D.Normal(dl.zeros(3), 1):expand({ 2, 4 }) end,
           "Normal.expand: cannot expand the batch shape (3,) to (2, 4)")
  H.raises(function() D.Normal(dl.zeros(3), 1):expand({ 3, 2 }) end, "Normal.expand: cannot expand the batch shape")
  H.raises(function() D.Normal(dl.zeros(3), 1):expand({ 1.5 }) end, "Normal.expand")
  H.raises(function() D.Poisson(dl.ones(2)):expand("x") end, "Poisson.expand")
end)

H.test("LogNormal and Kumaraswamy have cdf and icdf; the transformed families' agree with torch", function()
  -- LogNormal([0., 1.], [1., .5]).cdf([.5, 3.]) and .icdf([.1, .8])
  local l = D.LogNormal(t({ 0, 1 }), t({ 1, 0.5 }))
  H.values(l:cdf(t({ 0.5, 3 })), { 0.24410859578558275, 0.5781741008028732 }, { tol = 1e-12 })
  H.values(l:icdf(t({ 0.1, 0.8 })), { 0.2776062418520097, 4.140475419145248 }, { tol = 1e-12 })
  H.values(D.LogNormal(0, 1):cdf(dl.tensor(0)), 0)
  H.raises(function() l:cdf(t({ -1, 3 })) end, "LogNormal.cdf: a value is negative")
  H.ok(D.LogNormal(0, 1, { validate_args = false }):cdf(dl.tensor(-1)):isnan():item())
  -- Kumaraswamy([.5, 2., 3.], [1.5, .7, 2.]).cdf([.2, .5, .9]) and .icdf(same)
  local k = D.Kumaraswamy(t({ 0.5, 2, 3 }), t({ 1.5, 0.7, 2 }))
  H.values(k:cdf(t({ 0.2, 0.5, 0.9 })), { 0.5890054813015937, 0.1823962318229867, 0.926559 }, { tol = 1e-12 })
  H.values(k:icdf(t({ 0.2, 0.5, 0.9 })), { 0.019106461352537622, 0.7927808194676275, 0.8809890025666968 }, { tol = 1e-12 })
  H.raises(function() k:cdf(t({ 0.2, 1.5, 0.3 })) end, "Kumaraswamy.cdf: a value lies outside [0, 1]")
  -- Gumbel([0., 1.], [2., .5]), Weibull([1., 2.], [.5, 3.]), Pareto([1., 2.], [2., .5]),
  -- HalfCauchy([1., 2.]), HalfNormal([1., 2.]): cdf at x, icdf at [.3, .9]
  local cases = {
    { D.Gumbel(t({ 0, 1 }), t({ 2, 0.5 })), { 1, 0.3 }, { 0.5452392118926052, 0.017332014008764496 },
      { -0.3712535177247315, 2.1251836636562214 } },
    { D.Weibull(t({ 1, 2 }), t({ 0.5, 3 })), { 0.7, 1.5 }, { 0.5668451642379317, 0.3441839887284984 },
      { 0.12721701563369794, 2.6410009569073707 } },
    { D.Pareto(t({ 1, 2 }), t({ 2, 0.5 })), { 1.5, 3 }, { 0.5555555555555556, 0.18350341907227397 },
      { 1.1952286093343938, 200.00000000000009 } },
    { D.HalfCauchy(t({ 1, 2 })), { 1.5, 3 }, { 0.6256659163780025, 0.6256659163780025 },
      { 0.5095254494944289, 12.627503029350063 } },
    { D.HalfNormal(t({ 1, 2 })), { 1.5, 3 }, { 0.8663855974622838, 0.8663855974622838 },
      { 0.3853204664075677, 3.2897072539029444 } },
  }
  for _, c in ipairs(cases) do
    H.values(c[1]:cdf(t(c[2])), c[3], { tol = 1e-10 })
    H.values(c[1]:icdf(t({ 0.3, 0.9 })), c[4], { tol = 1e-10 })
  end
  -- torch raises NotImplementedError: no cdf through stick breaking, none for the relaxed base
  H.raises(function() D.LogisticNormal(dl.zeros(2), 1):cdf(dl.tensor({ 0.2, 0.3, 0.5 })) end, "LogisticNormal.cdf: not defined")
  H.raises(function() D.RelaxedBernoulli(1, { probs = 0.3 }):cdf(dl.tensor(0.2)) end, "cdf: not defined")
end)

H.test("Binomial.sample: mean and variance of both regimes (inversion, BTRS) and of p > 1/2", function()
  dl.manual_seed(7)
  -- (n q < 10: inversion; above: BTRS; p > 1/2 through 1 - p)
  local n = t({ 1e6, 50, 7, 20, 40, 0, 5, 5, 1e9 })
  local p = t({ 0.3, 0.1, 0.9, 0.6, 0.5, 0.5, 0, 1, 0.999 })
  local d = D.Binomial(n, { probs = p })
  local x = d:sample({ 20000 })
  H.eq(x.shape, { 20000, 9 })
  H.ok(x:ge(0):logical_and(x:le(n)):logical_and(x:eq(x:floor())):all(), "whole counts in 0..n")
  local mean, var = x:mean(1):totable(), x:var(1):totable()
  local want_mean, want_var = d.mean:totable(), d.variance:totable()
  for i = 1, 9 do
    -- (six standard errors of the mean; 10% (the variance's error is about 1%) plus 0.05)
    H.near(mean[i], want_mean[i], 6 * math.sqrt(want_var[i] / 20000) / (1 + math.abs(want_mean[i])), "mean " .. i)
    H.ok(math.abs(var[i] - want_var[i]) <= 0.1 * want_var[i] + 0.05, "variance " .. i .. ": " .. var[i] .. " vs " .. want_var[i])
  end
  H.eq(D.Binomial(10, { probs = dl.tensor({ 0.3 }) }):sample({ 2 }).dtype, "float32")
end)

H.test("Binomial.sample draws a bounded count of uniforms whatever total_count", function()
  dl.manual_seed(1)
  local rand, calls = dl.rand, 0
  dl.rand = function(...)
    calls = calls + 1
    if calls > 500 then error("too many uniform draws") end
    return rand(...)
  end
  local ok, err = pcall(function() return D.Binomial(t({ 1e6, 30 }), { probs = t({ 0.3, 0.2 }) }):sample({ 1000 }) end)
  dl.rand = rand
  H.ok(ok, tostring(err))
  H.ok(calls < 200, calls .. " calls of dl.rand")
end)

H.run()
