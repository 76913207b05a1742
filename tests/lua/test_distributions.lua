-- dl.distributions: log_prob, entropy, cdf, icdf, moments and kl_divergence against
-- torch.distributions in float64 (tests/ref/gen_breadth_refs.py, gen_distributions),
-- with gradients; samples by their statistics; the reparameterised gradients; errors.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.breadth_ref")
local D = dl.distributions

local f64 = { dtype = "float64" }
local i64 = { dtype = "int64" }

H.test("every distribution's densities, entropies, moments and KL divergences match PyTorch float64", function()
  local bits = dl.tensor({ { 1, 0, 1, 1 }, { 0, 0, 1, 0 }, { 1, 1, 0, 0 } }, f64)
  local cats = dl.tensor({ 1, 5, 3 }, i64)
  local k = 3
  local function sym(a) return a:matmul(a:transpose(-1, -2)) + dl.eye(k, f64) end
  local FN = {
    normal_log_prob = function(m, s, x) return D.Normal(m, s):log_prob(x) end,
    normal_entropy = function(m, s) return D.Normal(m, s):entropy() end,
    normal_cdf = function(m, s, x) return D.Normal(m, s):cdf(x) end,
    normal_icdf = function(m, s, q) return D.Normal(m, s):icdf(q) end,
    uniform_log_prob = function(a, w, x) return D.Uniform(a, a + w):log_prob(x) end,
    uniform_entropy = function(a, w) return D.Uniform(a, a + w):entropy() end,
    uniform_cdf = function(a, w, x) return D.Uniform(a, a + w):cdf(x) end,
    uniform_moments = function(a, w) local u = D.Uniform(a, a + w); return u.variance + u.mean end,
    exponential_log_prob = function(r, x) return D.Exponential(r):log_prob(x) end,
    exponential_cdf_icdf = function(r, x, q) return D.Exponential(r):cdf(x) + D.Exponential(r):icdf(q) end,
    exponential_entropy = function(r) return D.Exponential(r):entropy() end,
    laplace_log_prob = function(m, s, x) return D.Laplace(m, s):log_prob(x) end,
    laplace_cdf_icdf = function(m, s, x, q) return D.Laplace(m, s):cdf(x) + D.Laplace(m, s):icdf(q) end,
    laplace_entropy = function(m, s) return D.Laplace(m, s):entropy() + D.Laplace(m, s).variance end,
    bernoulli_log_prob = function(p) return D.Bernoulli({ probs = p }):log_prob(bits) end,
    bernoulli_logits = function(l) local b = D.Bernoulli({ logits = l }); return b:log_prob(bits) + b:entropy() end,
    bernoulli_entropy = function(p) return D.Bernoulli({ probs = p }):entropy() end,
    categorical_log_prob = function(l) return D.Categorical({ logits = l }):log_prob(cats) end,
    categorical_probs = function(p) local c = D.Categorical({ probs = p }); return c:log_prob(cats) + c:entropy() end,
    categorical_entropy = function(l) return D.Categorical({ logits = l }):entropy() end,
    mvn_log_prob = function(m, a, x) return D.MultivariateNormal(m, { covariance_matrix = sym(a) }):log_prob(x) end,
    mvn_entropy = function(a) return D.MultivariateNormal(dl.zeros(2, k, f64), { covariance_matrix = sym(a) }):entropy() end,
    independent = function(m, s, x) return D.Independent(D.Normal(m, s), 1):log_prob(x) end,
    kl_normal = function(m, s) return D.kl_divergence(D.Normal(m, s), D.Normal(m:flip({ 1 }), s * 0.5 + 0.3)) end,
    kl_bernoulli = function(p) return D.kl_divergence(D.Bernoulli({ probs = p }), D.Bernoulli({ probs = p:flip({ 2 }) })) end,
    kl_categorical = function(l)
      return D.kl_divergence(D.Categorical({ logits = l }), D.Categorical({ logits = l:flip({ 1 }) }))
    end,
    kl_uniform = function(a, w) return D.kl_divergence(D.Uniform(a + w * 0.1, a + w * 0.6), D.Uniform(a, a + w)) end,
    kl_exponential = function(r) return D.kl_divergence(D.Exponential(r), D.Exponential(r:flip({ 1 }))) end,
    kl_laplace = function(m, s) return D.kl_divergence(D.Laplace(m, s), D.Laplace(m * 0.5, s:flip({ 2 }))) end,
    kl_independent = function(m, s)
      return D.kl_divergence(D.Independent(D.Normal(m, s), 1), D.Independent(D.Normal(m * 2, s), 1))
    end,
  }
  FN.mvn_scale_tril = function(m, t, x) return D.MultivariateNormal(m, { scale_tril = t }):log_prob(x) end
  FN.mvn_precision = function(m, a, x) return D.MultivariateNormal(m, { precision_matrix = sym(a) }):log_prob(x) end
  FN.kl_mvn = function(m, a, b)
    return D.kl_divergence(D.MultivariateNormal(m, { covariance_matrix = sym(a) }),
                           D.MultivariateNormal(m:flip({ 1 }), { covariance_matrix = sym(b) }))
  end
  H.eq(H.ref_cases(R.distributions, FN, 1e-10, 1e-9), 33)
  -- KL of two Gaussians in closed form, against a Monte Carlo estimate of E_p[log p - log q]
  dl.manual_seed(7)
  local p = D.MultivariateNormal(dl.tensor({ 0, 1, -1 }, f64), { covariance_matrix = sym(dl.randn(3, 3, f64)) })
  local q = D.MultivariateNormal(dl.zeros(3, f64), { covariance_matrix = sym(dl.randn(3, 3, f64)) })
  local xs = p:sample({ 200000 })
  local mc = (p:log_prob(xs) - q:log_prob(xs)):mean():item()
  local exact = D.kl_divergence(p, q):item()
  H.near(mc, exact, 0.02 * math.max(1, exact))
end)

H.test("the gamma family, heavy tails, counts and one-hot draws match PyTorch float64", function()
  local onehot = dl.nn.one_hot(dl.tensor({ 3, 1, 5 }, i64), 5):double()
  local function add(...)
    local t = { ... }
    local y = t[1]
    for i = 2, #t do y = y + t[i] end
    return y
  end
  local FN = {
    gamma_log_prob = function(a, r, x) return D.Gamma(a, r):log_prob(x) end,
    gamma_entropy = function(a, r) local g = D.Gamma(a, r); return g:entropy() + g.variance end,
    chi2_log_prob = function(d, x) local c = D.Chi2(d); return c:log_prob(x) + c:entropy() end,
    beta_log_prob = function(a, b, x) return D.Beta(a, b):log_prob(x) end,
    beta_entropy = function(a, b) local d = D.Beta(a, b); return add(d:entropy(), d.variance, d.mean) end,
    dirichlet_log_prob = function(c, x) return D.Dirichlet(c):log_prob(x) end,
    dirichlet_entropy = function(c) local d = D.Dirichlet(c); return d:entropy() + d.variance:sum(-1) end,
    lognormal = function(m, s, x) local d = D.LogNormal(m, s); return add(d:log_prob(x), d:entropy(), d.mean) end,
    halfnormal = function(s, x, q)
      local d = D.HalfNormal(s)
      return add(d:log_prob(x), d:entropy(), d:cdf(x), d:icdf(q))
    end,
    gumbel = function(m, s, x) local d = D.Gumbel(m, s); return add(d:log_prob(x), d:entropy(), d.mean, d:cdf(x)) end,
    cauchy = function(m, s, x, q) local d = D.Cauchy(m, s); return add(d:log_prob(x), d:entropy(), d:cdf(x), d:icdf(q)) end,
    student_t = function(df, m, s, x) local d = D.StudentT(df, m, s); return d:log_prob(x) + d:entropy() end,
    one_hot_categorical = function(l)
      local d = D.OneHotCategorical({ logits = l })
      return d:log_prob(onehot) + d:entropy()
    end,
    kl_gamma = function(a, r) return D.kl_divergence(D.Gamma(a, r), D.Gamma(r, a)) end,
    kl_beta = function(a, b) return D.kl_divergence(D.Beta(a, b), D.Beta(b, a + 1)) end,
    kl_dirichlet = function(c) return D.kl_divergence(D.Dirichlet(c), D.Dirichlet(c:flip({ 1 }))) end,
    kl_poisson = function(r, q) return D.kl_divergence(D.Poisson(r), D.Poisson(q)) end,
    kl_gumbel = function(m, s) return D.kl_divergence(D.Gumbel(m, s), D.Gumbel(m * 0.5, s:flip({ 2 }))) end,
    kl_lognormal = function(m, s) return D.kl_divergence(D.LogNormal(m, s), D.LogNormal(m:flip({ 1 }), s)) end,
    kl_halfnormal = function(s) return D.kl_divergence(D.HalfNormal(s), D.HalfNormal(s:flip({ 2 }))) end,
  }
  -- the count cases score fixed counts the generator drew: its inputs hold them
  local counts
  for _, c in ipairs(R.distributions2) do
    if c.counts then counts = dl.tensor(c.counts, f64) end
  end
  FN.poisson = function(r) return D.Poisson(r):log_prob(counts) end
  FN.geometric = function(p)
    local d = D.Geometric({ probs = p })
    return add(d:log_prob(counts), d:entropy(), d.mean)
  end
  H.eq(H.ref_cases(R.distributions2, FN, 1e-10, 1e-9), 22)
  -- a family made from another has its rules (Chi2 is a Gamma); PyTorch 1.13's values
  H.near(D.kl_divergence(D.Chi2(dl.tensor(3, f64)), D.Chi2(dl.tensor(4, f64))):item(), 0.10253725064595712, 1e-12)
  H.near(D.kl_divergence(D.Geometric({ probs = dl.tensor(0.3, f64) }), D.Geometric({ probs = dl.tensor(0.6, f64) })):item(),
         0.6126229912893745, 1e-12)
  -- a category of probability 0 scores 0 where the one-hot value is 0
  H.near(D.OneHotCategorical({ logits = dl.tensor({ 0, 0, -math.huge }, f64) }):log_prob(dl.tensor({ 1, 0, 0 }, f64)):item(),
         -0.6931471805599453, 1e-12)
end)

H.test("transformed distributions, mixtures, Binomial and Multinomial match PyTorch float64", function()
  local TT = D.transforms
  local k = dl.tensor({ { 0, 3, 7, 10 }, { 5, 2, 1, 9 }, { 4, 6, 0, 8 } }, f64)
  local counts = dl.tensor({ { 2, 0, 5, 3 }, { 1, 1, 1, 7 }, { 0, 0, 0, 10 } }, f64)
  local function squashed(m, s) return D.TransformedDistribution(D.Normal(m, s), { TT.TanhTransform(), TT.AffineTransform(0.5, 2) }) end
  local function shifted(m, s) return D.TransformedDistribution(D.Normal(m, s), { TT.ExpTransform(), TT.AffineTransform(1, 3) }) end
  local function mixture(w, m, s) return D.MixtureSameFamily(D.Categorical({ logits = w }), D.Normal(m, s)) end
  local FN = {
    tanh_affine = function(m, s, y) return squashed(m, s):log_prob(y) end,
    exp = function(m, s, y) return D.TransformedDistribution(D.Normal(m, s), TT.ExpTransform()):log_prob(y) end,
    sigmoid = function(m, s, y) return D.TransformedDistribution(D.Normal(m, s), { TT.SigmoidTransform() }):log_prob(y) end,
    power = function(r, y) return D.TransformedDistribution(D.Exponential(r), { TT.PowerTransform(0.5) }):log_prob(y) end,
    transformed_cdf = function(m, s, y, q) return shifted(m, s):cdf(y) + shifted(m, s):icdf(q) end,
    mixture = function(w, m, s, x) return mixture(w, m, s):log_prob(x) end,
    mixture_moments = function(w, m, s) local d = mixture(w, m, s); return d.mean + d.variance end,
    mixture_vector = function(w, m, s, x)
      return D.MixtureSameFamily(D.Categorical({ logits = w }), D.Independent(D.Normal(m, s), 1)):log_prob(x)
    end,
    binomial = function(p) local b = D.Binomial(10, { probs = p }); return b:log_prob(k) + b:entropy() + b.variance end,
    binomial_logits = function(l) return D.Binomial(10, { logits = l }):log_prob(k) end,
    multinomial = function(l) return D.Multinomial(10, { logits = l }):log_prob(counts) end,
  }
  H.eq(H.ref_cases(R.distributions3, FN, 1e-10, 1e-9), 11)
  -- draws: a squashed Gaussian stays in its interval and is reparameterised; a mixture's
  -- and the counts' draws have the moments they should
  dl.manual_seed(5)
  local n = 40000
  local policy = squashed(dl.zeros(2, f64), dl.ones(2, f64))
  local a = policy:rsample({ n })
  H.ok(a:gt(-1.5):all() and a:lt(2.5):all())
  local g = dl.grad(function(m) return squashed(m, dl.ones(2, f64)):rsample({ 100 }):sum() end)(dl.zeros(2, f64))
  H.ok(g:gt(0):all())
  local mix = mixture(dl.tensor({ 0, 1 }, f64), dl.tensor({ -2, 3 }, f64), dl.tensor({ 0.5, 1 }, f64))
  local x = mix:sample({ n })
  H.shape(x, { n })
  H.near(x:mean():item(), mix.mean:item(), 0.05)
  H.near(x:var():item(), mix.variance:item(), 0.15)
  local b = D.Binomial(dl.tensor({ 5, 20 }, f64), { probs = dl.tensor({ 0.3, 0.6 }, f64) }):sample({ n })
  H.near(b:mean(1):totable(), { 1.5, 12 }, 0.05)
  H.ok(b:select(2, 1):le(5):all())
  local m = D.Multinomial(7, { probs = dl.tensor({ 0.2, 0.3, 0.5 }, f64) }):sample({ n })
  H.shape(m, { n, 3 })
  H.ok(m:sum(2):eq(7):all())
  H.near(m:mean(1):totable(), { 1.4, 2.1, 3.5 }, 0.05)
  H.eq(tostring(TT.AffineTransform(0.5, 2)), "AffineTransform(0.5, 2)")
  H.raises(function() D.TransformedDistribution(D.Normal(0, 1), { 3 }) end,
           "TransformedDistribution: expected transform 1 (from dl.distributions.transforms)")
  H.raises(function() D.MixtureSameFamily(D.Categorical({ logits = dl.zeros(3) }), D.Normal(dl.zeros(4), 1)) end,
           "MixtureSameFamily: the components' batch must end in the mixture's 3 categories, got batch shape (4,)")
  H.raises(function() D.Binomial(2.5, { probs = 0.5 }) end, "Binomial: total_count must be a whole number >= 0, got 2.5")
  H.raises(function() D.Binomial(3, { probs = 0.5 }):log_prob(4) end, "Binomial.log_prob: a value is not a count 0..total_count")
  H.raises(function() D.Multinomial(3, { probs = dl.ones(2) }):log_prob(dl.tensor({ 1, 1 })) end,
           "Multinomial.log_prob: a value is not a vector of counts summing to total_count")
end)

H.test("gamma draws carry their implicit gradient: exact against mpmath, and in expectation", function()
  local a, x, want, theirs = {}, {}, {}, {}
  for i, r in ipairs(R.gamma_slopes) do a[i], x[i], want[i], theirs[i] = r.alpha, r.x, r.slope, r.torch end
  local got = D._standard_gamma_grad(dl.tensor(a, f64), dl.tensor(x, f64)):totable()
  local worst, torch_worst = 0, 0
  for i = 1, #want do
    worst = math.max(worst, math.abs(got[i] - want[i]) / math.abs(want[i]))
    torch_worst = math.max(torch_worst, math.abs(theirs[i] - want[i]) / math.abs(want[i]))
  end
  H.ok(worst < 1e-6, "the slope is " .. worst .. " off mpmath's")   -- (PyTorch's approximation: torch_worst, ~6e-5)
  H.ok(torch_worst > worst)
  -- E[x] = alpha / rate, so the mean gradient of a draw is 1 / rate for alpha and -alpha / rate^2 for rate
  dl.manual_seed(11)
  local n = 40000
  local ga, gr = dl.grad(function(al, ra) return D.Gamma(al, ra):rsample({ n }):sum() / n end, { 1, 2 })(
    dl.tensor(2.5, f64), dl.tensor(2, f64))
  H.near(ga:item(), 0.5, 0.02)
  H.near(gr:item(), -2.5 / 4, 0.02)
  -- Beta's mean a / (a + b): d/da = b / (a + b)^2; Dirichlet's likewise per coordinate
  local gb = dl.grad(function(al) return D.Beta(al, 5):rsample({ n }):mean() end)(dl.tensor(2, f64))
  H.near(gb:item(), 5 / 49, 0.01)
  local gd = dl.grad(function(c) return D.Dirichlet(c):rsample({ n }):select(2, 1):mean() end)(dl.tensor({ 1, 2, 3 }, f64))
  H.near(gd:totable(), { 5 / 36, -1 / 36, -1 / 36 }, 0.01)
  -- small and huge alpha: the boost below 1 and the cube root from 1000
  H.near(dl.grad(function(al) return D.Gamma(al, 1):rsample({ n }):mean() end)(dl.tensor(0.3, f64)):item(), 1, 0.05)
  H.near(dl.grad(function(al) return D.Gamma(al, 1):rsample({ 2000 }):mean() end)(dl.tensor(5000, f64)):item(), 1, 0.01)
  H.ok(not D.Gamma(2, 1):sample({ 3 }):requires_grad())
end)

H.test("samples: shapes, devices and dtypes, statistics; rsample carries gradients", function()
  dl.manual_seed(1)
  local n = 40000
  local normal = D.Normal(dl.tensor({ -1, 2 }, f64), dl.tensor({ 0.5, 3 }, f64))
  local s = normal:sample({ n })
  H.shape(s, { n, 2 })
  H.eq(s.dtype, "float64")
  H.near(s:mean(1):totable(), { -1, 2 }, 4 * 3 / math.sqrt(n))
  H.near(s:std(1):totable(), { 0.5, 3 }, 0.05)
  H.shape(normal:sample(), { 2 })
  H.shape(normal:sample({ 2, 3 }), { 2, 3, 2 })
  -- the reparameterised draw: loc + eps scale, so d/dscale of its sum is eps's sum
  local loc, scale = dl.tensor({ 0.5 }, f64), dl.tensor({ 2 }, f64)
  dl.manual_seed(2)
  local draw = D.Normal(loc, scale):rsample({ 5 })
  dl.manual_seed(2)
  local gl, gs = dl.grad(function(m, sd) return D.Normal(m, sd):rsample({ 5 }):sum() end, { 1, 2 })(loc, scale)
  H.near(gl:totable(), { 5 }, 1e-12)
  H.near(gs:totable(), { ((draw - 0.5) / 2):sum():item() }, 1e-12)
  H.ok(not D.Normal(loc, scale):sample({ 3 }):requires_grad())
  -- uniform, exponential and laplace draws: their moments
  local u = D.Uniform(-1, 3):sample({ n })
  H.ok(u:min():item() >= -1 and u:max():item() < 3)
  H.near(u:mean():item(), 1, 0.05)
  H.near(D.Exponential(4):sample({ n }):mean():item(), 0.25, 0.01)
  local lap = D.Laplace(1, 2):sample({ n })
  H.near(lap:mean():item(), 1, 0.1)
  H.near(lap:var():item(), 8, 0.5)
  -- discrete draws: frequencies, 1-based categories
  local cat = D.Categorical({ probs = dl.tensor({ { 0.1, 0.0, 0.9 }, { 1, 1, 2 } }) })
  local draws = cat:sample({ 20000 })
  H.shape(draws, { 20000, 2 })
  H.eq(draws.dtype, "int64")
  H.ok(not draws:select(2, 1):eq(2):any())                     -- a zero weight is never drawn
  H.near(draws:select(2, 1):eq(3):double():mean():item(), 0.9, 0.01)
  H.near(draws:select(2, 2):eq(3):double():mean():item(), 0.5, 0.015)
  H.shape(D.Categorical({ logits = dl.zeros(4) }):sample(), {})
  local bern = D.Bernoulli({ probs = dl.tensor({ 0.2, 0.7 }) }):sample({ 20000 })
  H.near(bern:mean(1):totable(), { 0.2, 0.7 }, 0.015)
  local mvn = D.MultivariateNormal(dl.tensor({ 1, -1 }, f64), { covariance_matrix = dl.tensor({ { 2, 0.6 }, { 0.6, 1 } }, f64) })
  local m = mvn:sample({ n })
  H.shape(m, { n, 2 })
  local c = m - m:mean(1, true)
  H.near((c:t():matmul(c) / (n - 1)):totable(), { { 2, 0.6 }, { 0.6, 1 } }, 0.08)
  -- the families drawn by rejection or from gamma draws: their first two moments
  local function moments(d, mean, var, tol)
    local x = d:sample({ n }):double()
    H.near(x:mean():item(), mean, tol * math.sqrt(var / n) * 5 + 1e-12, d.__name .. " mean")
    H.near(x:var():item(), var, tol * var * 0.06, d.__name .. " variance")
  end
  moments(D.Gamma(2.5, 2), 1.25, 0.625, 1)
  moments(D.Gamma(0.3, 1), 0.3, 0.3, 1)                              -- (alpha < 1: the boost)
  moments(D.Chi2(3), 3, 6, 1)
  moments(D.Beta(2, 5), 2 / 7, 10 / 392, 1)
  moments(D.Poisson(3.5), 3.5, 3.5, 1)
  moments(D.Poisson(120), 120, 120, 1)                               -- (PTRS)
  moments(D.Geometric({ probs = 0.3 }), 0.7 / 0.3, 0.7 / 0.09, 1)
  moments(D.LogNormal(0, 0.5), math.exp(0.125), (math.exp(0.25) - 1) * math.exp(0.25), 1)
  moments(D.HalfNormal(2), 2 * math.sqrt(2 / math.pi), 4 * (1 - 2 / math.pi), 1)
  moments(D.Gumbel(1, 2), 1 + 2 * 0.57721566490153, 4 * math.pi ^ 2 / 6, 1)
  moments(D.StudentT(6), 0, 1.5, 2)
  local dir = D.Dirichlet(dl.tensor({ 1, 2, 3 }, f64)):sample({ n })
  H.near(dir:mean(1):totable(), { 1 / 6, 2 / 6, 3 / 6 }, 0.01)
  H.near(dir:sum(2):totable()[1], 1, 1e-12)
  local hot = D.OneHotCategorical({ probs = dl.tensor({ 0.2, 0.8 }) }):sample({ n })
  H.shape(hot, { n, 2 })
  H.near(hot:mean(1):totable(), { 0.2, 0.8 }, 0.015)
  H.ok(D.Poisson(dl.tensor({ 0.0 })):sample({ 10 }):eq(0):all())
  -- infinite and NaN concentrations are not drawn (the sampler would never accept them)
  H.eq(D.Gamma(math.huge, 1):sample():item(), math.huge)
  local nan = D.Gamma(0 / 0, 1, { validate_args = false }):sample():item()
  H.ok(nan ~= nan)
  -- tiny concentrations drawn in log space: Beta(0.01, 0.01) piles up near 0 and 1, not at
  -- 0.5 (two underflowed draws) nor at exactly 1, in float32 too
  local b = D.Beta(dl.full({ 100000 }, 0.01), dl.full({ 100000 }, 0.01)):sample()
  H.ok(b:gt(0.4):logical_and(b:lt(0.6)):sum():item() < 1000)
  H.eq(b:eq(1):sum():item(), 0)
  local g = D.Gamma(dl.full({ 1000 }, 0.01), 1e30)
  H.ok(g:log_prob(g:sample()):isfinite():all())
  local ind = D.Independent(D.Normal(dl.zeros(3, 4), 1), 1)
  H.eq(#ind.batch_shape, 1)
  H.eq(ind.event_shape[1], 4)
  H.shape(ind:log_prob(dl.zeros(3, 4)), { 3 })
  H.eq(tostring(D.Normal(0, 1)), "Normal(loc: 0, scale: 1)")
  H.eq(tostring(ind), "Independent(Normal(loc: (3, 4), scale: (3, 4)), 1)")
end)

H.test("a policy-gradient step and a VAE's loss train through the distributions", function()
  dl.manual_seed(3)
  -- REINFORCE on a two-armed bandit: the arm paying 1 ends up preferred
  local logits = dl.Variable(dl.zeros(2))
  local opt = dl.optim.Adam({ lr = 0.1 })
  for _ = 1, 60 do
    local g = dl.grad(function(l)
      local policy = D.Categorical({ logits = l })
      local a = policy:sample({ 16 })
      local reward = a:eq(2):double():float()
      return -(policy:log_prob(a) * (reward - reward:mean())):mean()
    end)(logits)
    opt:apply_gradients({ { g, logits } })
  end
  H.ok(D.Categorical({ logits = logits }).probs[2] > 0.9)
  -- a Gaussian posterior pulled towards the prior by KL, towards the data by the likelihood
  local mu, log_sigma = dl.Variable(dl.tensor({ 3.0 })), dl.Variable(dl.tensor({ 1.0 }))
  local opt2 = dl.optim.Adam({ lr = 0.05 })
  for _ = 1, 300 do
    local gm, gs = dl.grad(function(m, ls)
      local q = D.Normal(m, ls:exp())
      local z = q:rsample({ 32 })
      local nll = -D.Normal(z, 1):log_prob(dl.tensor({ 1.0 })):mean()
      return nll + D.kl_divergence(q, D.Normal(0, 1)):sum()
    end, { 1, 2 })(mu, log_sigma)
    opt2:apply_gradients({ { gm, mu }, { gs, log_sigma } })
  end
  -- the exact posterior of z ~ N(0, 1), x | z ~ N(z, 1) at x = 1: N(1/2, 1/2)
  H.near(mu:item(), 0.5, 0.1)
  H.near(log_sigma:exp():item(), math.sqrt(0.5), 0.1)
end)

H.test("the distributions check their parameters and values, naming the distribution", function()
  H.raises(function() D.Normal(0, -1) end, "Normal: scale must be positive")
  H.raises(function() D.Normal(0) end, "Normal: expected loc and scale")
  H.raises(function() D.Normal("a", 1) end, "Normal: expected loc (a tensor or a number), got string")
  H.raises(function() D.Normal(dl.zeros(2), dl.ones(3)) end, "Normal: the parameters' shapes do not broadcast")
  H.raises(function() D.Normal(0, 1, { bogus = true }) end, "Normal: unknown option 'bogus'")
  H.ok(D.Normal(0, -1, { validate_args = false }))
  H.raises(function() D.Uniform(1, 0) end, "Uniform: low must be below high")
  H.raises(function() D.Uniform(0, 1):log_prob(2) end, "Uniform.log_prob: a value lies outside [low, high]")
  H.eq(D.Uniform(0, 1):log_prob(1):item(), -math.huge)                -- (high itself, as PyTorch's)
  H.raises(function() D.Normal(0 / 0, 1) end, "Normal: loc must not be NaN")
  H.raises(function() D.Bernoulli({ logits = dl.tensor({ 0 / 0 }) }) end, "Bernoulli: logits must not be NaN")
  H.raises(function() D.MultivariateNormal(dl.zeros(2), { scale_tril = dl.tensor({ { 1, 5 }, { 0, 1 } }) }) end,
           "MultivariateNormal: scale_tril must be lower triangular")
  H.raises(function() D.MultivariateNormal(dl.zeros(2), { covariance_matrix = dl.tensor({ { 2, 1 }, { 0, 2 } }) }) end,
           "MultivariateNormal: covariance_matrix must be symmetric")
  H.raises(function() D.Poisson(dl.tensor({ math.huge })):sample() end, "Poisson.sample: the rate must be finite")
  H.raises(function() D.Exponential(0) end, "Exponential: rate must be positive")
  H.raises(function() D.Bernoulli({ probs = dl.tensor({ 1.5 }) }) end, "Bernoulli: probs must lie in [0, 1]")
  H.raises(function() D.Bernoulli({ probs = 0.5, logits = 0 }) end, "Bernoulli: give one of probs and logits")
  H.raises(function() D.Bernoulli(0.5) end, "Bernoulli: expected {probs = p} or {logits = l}")
  H.raises(function() D.Bernoulli({ probs = 0.5 }):log_prob(dl.tensor({ 0.5 })) end,
           "Bernoulli.log_prob: a value is neither 0 nor 1")
  H.raises(function() D.Categorical({ probs = dl.tensor({ 0, 0 }) }) end, "Categorical: probs must not all be zero")
  H.raises(function() D.Categorical({ logits = dl.zeros(3) }):log_prob(dl.tensor({ 4 }, i64)) end,
           "Categorical.log_prob: a value is not a category 1..3")
  H.raises(function() D.Categorical({ logits = dl.tensor(1.0) }) end, "Categorical: logits must have at least one dim")
  H.raises(function() D.MultivariateNormal(dl.zeros(2), { covariance_matrix = dl.eye(3) }) end,
           "MultivariateNormal: expected a (..., 2, 2) matrix for loc of shape (2,), got shape (3, 3)")
  H.raises(function() D.MultivariateNormal(dl.zeros(2), { covariance_matrix = -dl.eye(2) }) end,
           "MultivariateNormal: the matrix is not positive definite")
  H.raises(function() D.MultivariateNormal(dl.zeros(2), { covariance_matrix = dl.eye(2), scale_tril = dl.eye(2) }) end,
           "MultivariateNormal: give exactly one of covariance_matrix, scale_tril and precision_matrix")
  H.raises(function() D.Independent(D.Normal(0, 1), 1) end, "Independent: n must be an integer from 0 to 0")
  H.raises(function() D.kl_divergence(D.Normal(0, 1), D.Cauchy(0, 1)) end, "kl_divergence: no rule for Normal and Cauchy")
  H.raises(function() D.Bernoulli({ probs = 0.5 }):rsample() end, "Bernoulli.rsample: the distribution cannot be reparameterised")
  H.raises(function() D.Gamma(0, 1) end, "Gamma: concentration and rate must be positive")
  H.raises(function() D.Beta(1, 1):log_prob(1.5) end, "Beta.log_prob: a value lies outside [0, 1]")
  -- the supports are closed, as PyTorch 1.13's: Beta(2, 2).log_prob(1) and Gamma(2, 1).log_prob(0) are -inf,
  -- Gamma(0.5, 1).log_prob(0) is inf
  H.eq(D.Beta(2, 2):log_prob(1):item(), -math.huge)
  H.eq(D.Gamma(2, 1):log_prob(0):item(), -math.huge)
  H.eq(D.Gamma(0.5, 1):log_prob(0):item(), math.huge)
  H.raises(function() D.Gamma(2, 1):log_prob(-1) end, "Gamma.log_prob: a value is negative")
  H.raises(function() D.Dirichlet(dl.ones(3)):log_prob(dl.ones(3)) end, "Dirichlet.log_prob: a value is not a point of the simplex")
  H.raises(function() D.Poisson(1):log_prob(0.5) end, "Poisson.log_prob: a value is not a count 0, 1, 2 ...")
  H.raises(function() D.Poisson(-1) end, "Poisson: rate must not be negative")
  H.raises(function() D.StudentT(1, 0, 1, 2) end, "StudentT: expected df [, loc [, scale]]")
  H.raises(function() D.OneHotCategorical({ logits = dl.zeros(3) }):log_prob(dl.tensor({ 1, 1, 0 })) end,
           "OneHotCategorical.log_prob: a value is not a one-hot vector")
  H.raises(function() D.kl_divergence(D.Cauchy(0, 1), D.Normal(0, 1)) end, "kl_divergence: no rule for Cauchy and Normal")
  H.raises(function() return D.Categorical({ logits = dl.zeros(2) }).mean end, "Categorical.mean: not defined")
end)

H.test("VonMises: log_prob and variance match PyTorch float64; draws on the circle with its moments; entropy by quadrature", function()
  local FN = {
    log_prob = function(m, k, v) return D.VonMises(m, k):log_prob(v) end,
    variance = function(k) return D.VonMises(0, k).variance end,
  }
  -- (PyTorch 1.13 takes log I_0 and I_1 / I_0 from polynomial fits good to about 1e-7;
  -- dlua's are exact (i0e, i1e), checked to 1e-12 by the quadratures below)
  H.eq(H.ref_cases(R.von_mises, FN, 1e-6, 1e-6), 2)
  local d = D.VonMises(dl.tensor({ 2.5, -3, 0 }, f64), dl.tensor({ 0.5, 8, 3e6 }, f64))
  H.eq(tostring(D.VonMises(1, 2)), "VonMises(loc: 1, concentration: 2)")
  H.ok(rawequal(d.mean, d.loc))
  H.ok(rawequal(d.mode, d.loc))
  H.raises(function() D.VonMises(0, 1):rsample() end, "VonMises.rsample: the distribution cannot be reparameterised")
  H.raises(function() D.VonMises(0, 0) end, "VonMises: concentration must be positive")
  -- draws: in [-pi, pi), about loc: E cos(x - loc) = I_1(k) / I_0(k) = 1 - variance, E sin(x - loc) = 0
  dl.manual_seed(5)
  local n = 40000
  local x = d:sample({ n })
  H.shape(x, { n, 3 })
  H.ok(x:min():item() >= -math.pi and x:max():item() < math.pi)
  local c, s = (x - d.loc):cos():mean(1), (x - d.loc):sin():mean(1)
  H.near(c:totable(), (1 - d.variance):totable(), 0.01)
  H.near(s:totable(), { 0, 0, 0 }, 0.015)
  -- k = 3e6 draws from the normal limit: spread 1 / sqrt(k)
  H.near(((x:select(2, 3) - 0):std():item()) * math.sqrt(3e6), 1, 0.03)
  -- k near 0: uniform on the circle (E cos = 0)
  H.near(D.VonMises(1, 1e-7):sample({ n }):cos():mean():item(), 0, 0.02)
  H.eq(D.VonMises(dl.tensor({ 0.5 }), 2):sample({ 3 }).dtype, "float32")
  -- over the circle (the trapezoidal rule, exact for a periodic integrand): the density
  -- integrates to 1, E cos(x - loc) is 1 - variance, and the entropy is -E log p
  local m = 2000
  local h = 2 * math.pi / m
  local grid = dl.arange(m, { dtype = "float64" }) * h - math.pi
  for _, k in ipairs({ 0.01, 1.5, 40, 700 }) do
    local vm = D.VonMises(0.4, dl.tensor(k, f64))
    local lp = vm:log_prob(grid)
    local p = lp:exp()
    H.near(p:sum():item() * h, 1, 1e-12)
    H.near((p * (grid - 0.4):cos()):sum():item() * h, 1 - vm.variance:item(), 1e-12)
    H.near(vm:entropy():item(), -(p * lp):sum():item() * h, 1e-10)
  end
end)

H.test("Weibull, Pareto, HalfCauchy, Kumaraswamy, FisherSnedecor, NegativeBinomial and the relaxed families match PyTorch float64", function()
  local counts
  for _, c in ipairs(R.distributions4) do counts = dl.tensor(c.counts, f64) end
  local ERC = D.ExpRelaxedCategorical
  local FN = {
    weibull = function(s, k, v) return D.Weibull(s, k):log_prob(v) end,
    weibull_moments = function(s, k) local d = D.Weibull(s, k); return d.mean + d.variance end,
    weibull_entropy = function(s, k) return D.Weibull(s, k):entropy() end,
    weibull_cdf = function(s, k, v, q) local d = D.Weibull(s, k); return d:cdf(v) + d:icdf(q) end,
    pareto = function(s, a, v) return D.Pareto(s, a):log_prob(v) end,
    pareto_moments = function(s, a) local d = D.Pareto(s, a + 2); return d.mean + d.variance end,
    pareto_entropy = function(s, a) return D.Pareto(s, a):entropy() end,
    pareto_cdf = function(s, a, v, q) local d = D.Pareto(s, a); return d:cdf(v) + d:icdf(q) end,
    half_cauchy = function(s, v) return D.HalfCauchy(s):log_prob(v) end,
    half_cauchy_more = function(s, v, q) local d = D.HalfCauchy(s); return d:entropy() + d:cdf(v) + d:icdf(q) end,
    kumaraswamy = function(a, b, v) return D.Kumaraswamy(a, b):log_prob(v) end,
    kumaraswamy_moments = function(a, b) local d = D.Kumaraswamy(a, b); return d.mean + d.variance + d:entropy() end,
    fisher_snedecor = function(a, b, v) return D.FisherSnedecor(a, b):log_prob(v) end,
    fisher_snedecor_moments = function(a, b) local d = D.FisherSnedecor(a, b + 4); return d.mean + d.variance end,
    negative_binomial = function(r, p) return D.NegativeBinomial(r, { probs = p }):log_prob(counts) end,
    negative_binomial_logits = function(r, l) return D.NegativeBinomial(r, { logits = l }):log_prob(counts) end,
    negative_binomial_moments = function(r, l) local d = D.NegativeBinomial(r, { logits = l }); return d.mean + d.variance end,
    logit_relaxed_bernoulli = function(t, l, v) return D.LogitRelaxedBernoulli(t, { logits = l }):log_prob(v) end,
    relaxed_bernoulli = function(t, p, v) return D.RelaxedBernoulli(t, { probs = p }):log_prob(v) end,
    exp_relaxed_categorical = function(t, l, v) return ERC(t, { logits = l }):log_prob(v:log()) end,
    relaxed_one_hot = function(t, l, v) return D.RelaxedOneHotCategorical(t, { logits = l }):log_prob(v) end,
  }
  H.eq(H.ref_cases(R.distributions4, FN, 1e-11, 1e-9), 21)
  -- supports and limits
  H.eq(D.HalfCauchy(1):log_prob(-0.5):item(), -math.huge)
  H.eq(D.Pareto(1, 0.5).mean:item(), math.huge)
  H.ok(D.FisherSnedecor(3, 2).mean:item() ~= D.FisherSnedecor(3, 2).mean:item())   -- NaN for df2 <= 2
  H.raises(function() D.Pareto(2, 1):log_prob(1) end, "Pareto.log_prob: a value lies below scale")
  H.raises(function() D.Weibull(1, -1) end, "Weibull: concentration must be positive")
  H.raises(function() D.NegativeBinomial(2, { probs = 1 }) end, "NegativeBinomial: probs must lie in [0, 1)")
  H.raises(function() D.RelaxedBernoulli(0, { probs = 0.5 }) end, "RelaxedBernoulli: temperature must be positive")
  H.raises(function() D.NegativeBinomial(2, { probs = 0.3 }):log_prob(1.5) end, "a value is not a count")
  -- draws: moments and supports; reparameterised where PyTorch's are
  dl.manual_seed(11)
  local n = 40000
  local function sample_mean(d, tol)
    local x = d:sample({ n })
    H.near(x:mean(1):totable(), d.mean:totable(), tol)
    return x
  end
  sample_mean(D.Weibull(dl.tensor({ 1, 2 }, f64), dl.tensor({ 1.5, 3 }, f64)), 0.03)
  H.ok(sample_mean(D.Pareto(dl.tensor({ 1, 2 }, f64), dl.tensor({ 4, 6 }, f64)), 0.03):min():item() >= 1)
  local k = sample_mean(D.Kumaraswamy(dl.tensor({ 2, 0.5 }, f64), dl.tensor({ 3, 0.7 }, f64)), 0.01)
  H.ok(k:min():item() > 0 and k:max():item() < 1)
  sample_mean(D.FisherSnedecor(dl.tensor({ 5 }, f64), dl.tensor({ 12 }, f64)), 0.03)
  local nb = sample_mean(D.NegativeBinomial(dl.tensor({ 2.5, 7 }, f64), { probs = dl.tensor({ 0.3, 0.6 }, f64) }), 0.1)
  H.ok(dl.equal(nb, nb:floor()))
  H.near(D.HalfCauchy(2):sample({ n }):median():item(), 2, 0.1)   -- (the median of |Cauchy(0, s)| is s)
  local g = dl.grad(function(s, c) return D.Weibull(s, c):rsample({ 8 }):sum() end, { 1, 2 })(dl.tensor(1.5, f64), dl.tensor(2.0, f64))
  H.ok(g:item() > 0)
  -- Gumbel-softmax: draws on the simplex, sharper as the temperature falls, with gradients
  local logits = dl.tensor({ 1, 0, -1 }, f64)
  local soft = D.RelaxedOneHotCategorical(5, { logits = logits }):rsample({ 2000 })
  local sharp = D.RelaxedOneHotCategorical(0.05, { logits = logits }):rsample({ 2000 })
  H.near(soft:sum(-1):totable(), dl.ones(2000):totable(), 1e-12)
  H.ok(sharp:max(-1):mean():item() > 0.95 and soft:max(-1):mean():item() < 0.6)
  -- the argmax of a relaxed draw is a Categorical draw: frequencies are the softmax
  local freq = dl.nn.functional.one_hot(sharp:argmax(-1), 3):to("float64"):mean(1)
  H.near(freq:totable(), logits:softmax(1):totable(), 0.03)
  local gl = dl.grad(function(l) return (D.RelaxedOneHotCategorical(0.5, { logits = l }):rsample({ 4 }) * dl.tensor({ 1, 2, 3 }, f64)):sum() end)(logits)
  H.ok(gl:abs():sum():item() > 0)
  local rb = D.RelaxedBernoulli(0.3, { probs = dl.tensor({ 0.2, 0.9 }, f64) }):rsample({ n })
  H.near(rb:gt(0.5):to("float64"):mean(1):totable(), { 0.2, 0.9 }, 0.02)
  -- straight-through: one-hot values, the gradient of the probabilities
  local st = D.OneHotCategoricalStraightThrough({ logits = logits })
  local draw = st:rsample({ 5 })
  H.ok(dl.equal(draw:sum(-1), dl.ones(5, { dtype = "float64" })))
  local gs = dl.grad(function(l) return (D.OneHotCategoricalStraightThrough({ logits = l }):rsample() * dl.tensor({ 1, 2, 3 }, f64)):sum() end)(logits)
  local p = logits:softmax(1)
  local want = p * (dl.tensor({ 1, 2, 3 }, f64) - (p * dl.tensor({ 1, 2, 3 }, f64)):sum())
  H.near(gs:totable(), want:totable(), 1e-12)
end)

H.test("ContinuousBernoulli (inside and outside its unstable region) and LowRankMultivariateNormal match PyTorch float64", function()
  local CB, LR = D.ContinuousBernoulli, D.LowRankMultivariateNormal
  local FN = {
    cb = function(p, v) return CB({ probs = p }):log_prob(v) end,
    cb_logits = function(l, v) return CB({ logits = l }):log_prob(v) end,
    cb_moments = function(p) local d = CB({ probs = p }); return d.mean + d.variance + d:entropy() end,
    cb_logits_moments = function(l) local d = CB({ logits = l }); return d.mean + d.variance end,
    cb_cdf = function(p, v, q) local d = CB({ probs = p }); return d:cdf(v) + d:icdf(q) end,
    low_rank = function(m, w, d, x) return LR(m, w, d):log_prob(x) end,
    low_rank_more = function(m, w, d)
      local dist = LR(m, w, d)
      return dist:entropy():sum() + dist.variance:sum() + dist.covariance_matrix:sum()
    end,
  }
  H.eq(H.ref_cases(R.distributions5, FN, 1e-10, 1e-8), 7)
  -- the low-rank Gaussian is the full one of its covariance
  dl.manual_seed(8)
  local loc, w, d = dl.randn(3, f64), dl.randn(3, 2, f64), dl.rand(3, f64) + 0.2
  local low = LR(loc, w, d)
  local full = D.MultivariateNormal(loc, { covariance_matrix = low.covariance_matrix })
  local x = dl.randn(6, 3, f64)
  H.near(low:log_prob(x):totable(), full:log_prob(x):totable(), 1e-12)
  H.near(low:entropy():item(), full:entropy():item(), 1e-12)
  local draws = low:rsample({ 40000 })
  H.near(draws:mean(1):totable(), loc:totable(), 0.05)
  H.near(draws:var(1):totable(), low.variance:totable(), 0.1)
  H.raises(function() LR(loc, dl.randn(4, 2), d) end, "LowRankMultivariateNormal: cov_factor must be (..., 3, rank)")
  H.raises(function() LR(loc, w, -d) end, "LowRankMultivariateNormal: cov_diag must be positive")
  -- continuous Bernoulli draws lie in [0, 1] with its mean; reparameterised
  local cb = CB({ probs = dl.tensor({ 0.1, 0.5, 0.8 }, f64) })
  local s = cb:rsample({ 40000 })
  H.ok(s:min():item() >= 0 and s:max():item() <= 1)
  H.near(s:mean(1):totable(), cb.mean:totable(), 0.01)
  H.ok(dl.grad(function(p) return CB({ probs = p }):rsample({ 5 }):sum() end)(dl.tensor({ 0.3 }, f64)):abs():item() > 0)
  H.raises(function() CB({ probs = 0.3 }):log_prob(1.5) end, "ContinuousBernoulli.log_prob: a value lies outside [0, 1]")
end)

H.test("edges: float32 VonMises at small concentrations, errors naming the family, dtypes, supports", function()
  -- float32 concentrations where the envelope's r overflowed: draws, near uniform
  dl.manual_seed(12)
  for _, k in ipairs({ 1e-4, 3e-4, 2e-5 }) do
    local x = D.VonMises(0, k):sample({ 2000 })
    H.eq(x.dtype, "float32")
    H.near(x:cos():mean():item(), 0, 0.08)
  end
  H.raises(function() D.RelaxedOneHotCategorical(0.5) end, "RelaxedOneHotCategorical: expected {probs = p} or {logits = l}")
  H.raises(function() D.RelaxedOneHotCategorical(dl.ones(3), { logits = dl.zeros(2, 4) }) end,
           "RelaxedOneHotCategorical: temperature of shape (3,) does not broadcast to the batch (2,)")
  H.raises(function() D.LogitRelaxedBernoulli(dl.ones(3), { probs = dl.ones(2) * 0.5 }) end,
           "LogitRelaxedBernoulli: temperature of shape (3,) and probs of shape (2,) do not broadcast")
  H.eq(D.NegativeBinomial(dl.tensor({ 2 }, f64), { probs = dl.tensor({ 0.5 }) }).mean.dtype, "float64")
  H.raises(function() D.Weibull(1, 2):log_prob(-1) end, "Weibull.log_prob: a value lies outside [0, infinity)")
  H.raises(function() D.Kumaraswamy(1, 2):log_prob(1.5) end, "Kumaraswamy.log_prob: a value lies outside [0, 1]")
  H.raises(function() D.FisherSnedecor(1, 2):log_prob(0) end, "FisherSnedecor.log_prob: a value lies outside (0, infinity)")
  -- a large logit gap: the relaxed Bernoulli's density stays finite in float32
  local lp = D.LogitRelaxedBernoulli(0.1, { logits = dl.tensor({ 95 }) }):log_prob(dl.tensor({ -10 }))
  H.ok(lp:item() > -math.huge and lp:item() == lp:item())
end)

H.test("LogisticNormal: log_prob on the simplex matches PyTorch float64; draws on the simplex, reparameterised", function()
  local FN = { logistic_normal = function(m, s, y) return D.LogisticNormal(m, s):log_prob(y) end }
  H.eq(H.ref_cases(R.logistic_normal, FN, 1e-11, 1e-9), 1)
  local d = D.LogisticNormal(dl.tensor({ 0.3, -1, 0.5 }, f64), dl.tensor({ 1, 0.5, 2 }, f64))
  H.eq(#d.batch_shape, 0)
  H.eq(d.event_shape[1], 4)
  dl.manual_seed(13)
  local y = d:rsample({ 1000 })
  H.shape(y, { 1000, 4 })
  H.ok(y:min():item() > 0)
  H.near(y:sum(-1):totable(), dl.ones(1000):totable(), 1e-12)
  -- the first stick is sigmoid(x_1 - log K): its logit plus log K is Normal(0.3, 1)
  local x1 = dl.logit(y:select(2, 1)) + math.log(3)
  H.near(x1:mean():item(), 0.3, 0.1)
  H.near(x1:std():item(), 1, 0.07)
  local g = dl.grad(function(m) return D.LogisticNormal(m, 1):rsample({ 3 }):select(-1, 1):sum() end)(dl.zeros(3, f64))
  H.ok(g:abs():sum():item() > 0)
  H.raises(function() d:log_prob(dl.tensor({ 0.5, 0.5, 0.5, -0.5 }, f64)) end,
           "LogisticNormal.log_prob: a value is not on the simplex")
  H.raises(function() D.LogisticNormal(0, 1) end, "LogisticNormal: loc and scale must have a last dim")
end)

H.test("Wishart and LKJCholesky match PyTorch float64; their draws have the right moments and support", function()
  local W, LKJ = D.Wishart, D.LKJCholesky
  local FN = {
    wishart_cov = function(d, s, v) return W(d, { covariance_matrix = s }):log_prob(v) end,
    wishart_tril = function(d, l, v) return W(d, { scale_tril = l }):log_prob(v) end,
    wishart_prec = function(d, q, v) return W(d, { precision_matrix = q }):log_prob(v) end,
    wishart_more = function(d, s)
      local w = W(d, { covariance_matrix = s })
      local mode = w.mode
      return w:entropy():sum() + w.mean:sum() + w.variance:sum() + dl.where(mode:isnan(), 0, mode):sum()
    end,
    lkj = function(e, v) return LKJ(4, e):log_prob(v) end,
    lkj_dim2 = function(e, v) return LKJ(2, e):log_prob(v) end,
  }
  H.eq(H.ref_cases(R.distributions6, FN, 1e-10, 1e-8), 6)
  -- Wishart draws: mean df S and variance df (S_ij^2 + S_ii S_jj), batched, with gradients
  dl.manual_seed(12)
  local S = dl.tensor({ { 2, 0.5, 0 }, { 0.5, 1, -0.3 }, { 0, -0.3, 1.5 } }, f64)
  local w = W(dl.tensor({ 4.5, 9 }, f64), { covariance_matrix = S })
  H.shape(w:sample(), { 2, 3, 3 })
  local n = 20000
  local x = w:sample({ n })
  local z = (x:mean(1) - w.mean) / (w.variance / n):sqrt()   -- each mean's error in its standard errors
  H.ok(z:abs():max():item() < 5, "the draws' means are df S")
  H.near((x:var(1) / w.variance):totable(), dl.ones(2, 3, 3, { dtype = "float64" }):totable(), 0.1)
  H.ok(dl.equal(x, x:transpose(-1, -2)), "draws are symmetric")
  H.ok(dl.linalg.eigvalsh(x):gt(0):all(), "draws are positive definite")
  local g = dl.grad(function(df, s) return W(df, { covariance_matrix = s }):rsample({ 4 }):sum() end, { 1, 2 })(dl.tensor(5.0, f64), S)
  H.ok(g:item() > 0, "the draws grow with df")
  -- LKJCholesky draws: lower triangular factors of correlation matrices (unit diagonal),
  -- and with concentration 1 in dim 2 the correlation is uniform on (-1, 1)
  local L = LKJ(3, dl.tensor({ 0.5, 4 }, f64)):sample({ 3000 })
  H.shape(L, { 3000, 2, 3, 3 })
  H.ok(dl.equal(L, L:tril()) and L:diagonal(0, -2, -1):gt(0):all())
  local C = L:matmul(L:transpose(-1, -2))
  H.near(C:diagonal(0, -2, -1):max():item(), 1, 1e-12)
  H.near(C:diagonal(0, -2, -1):min():item(), 1, 1e-12)
  -- a larger concentration draws correlations nearer 0: Var(C_12) = 1 / (2 eta + dim - 1) ... for dim 3
  local c12 = C:select(-2, 1):select(-1, 2)
  H.near(c12:var(1):totable(), { 1 / (2 * 0.5 + 2), 1 / (2 * 4 + 2) }, 0.03)
  local r = LKJ(2):sample({ 20000 }):select(-2, 2):select(-1, 1)
  H.near(r:var():item(), 1 / 3, 0.02)
  -- errors name the family and what is wrong
  -- a number df takes the matrix's dtype
  H.eq(W(5, { covariance_matrix = S }).df.dtype, "float64")
  H.eq(W(5, { covariance_matrix = S }):log_prob(S * 2).dtype, "float64")
  H.raises(function() W(2, { covariance_matrix = S }) end, "Wishart: df must be greater than p - 1 = 2")
  H.raises(function() W(4, { covariance_matrix = -S }) end, "Wishart: the matrix is not positive definite")
  H.raises(function() W(4, { covariance_matrix = S }):log_prob(-S) end, "Wishart.log_prob: a value is not positive definite")
  H.raises(function() W(4, { covariance_matrix = S }):log_prob(dl.eye(2)) end, "Wishart.log_prob: expected (..., 3, 3) matrices")
  H.raises(function() LKJ(1) end, "LKJCholesky: dim must be a whole number >= 2")
  H.raises(function() LKJ(3, 0) end, "LKJCholesky: concentration must be positive")
  H.raises(function() LKJ(3):log_prob(dl.eye(3) * 2) end, "LKJCholesky.log_prob: a value's rows do not have length 1")
  H.raises(function() return LKJ(3).mean end, "LKJCholesky.mean: not defined")
end)

H.test("transforms that change an event's size or rank match PyTorch float64; TransformedDistribution's shapes follow them", function()
  local TT, TD = D.transforms, D.TransformedDistribution
  local sb, lc = TT.StickBreakingTransform(), TT.LowerCholeskyTransform()
  local function fwd_ladj(t, a)
    local y = t(a)
    return y:sum() + t:log_abs_det_jacobian(a, y):sum()
  end
  local FN = {
    stick = function(a) return fwd_ladj(sb, a) + sb:inv(sb(a)):sum() end,
    lower_cholesky = function(a) return lc(a):sum() + lc:inv(lc(a)):sum() end,
    softmax_abs = function(a)
      return (TT.SoftmaxTransform()(a) * 3):sum() + TT.SoftmaxTransform():inv(a:softmax(-1)):sum() + TT.AbsTransform()(a):sum()
    end,
    td_stick = function(mu, s, v) return TD(D.Normal(mu, s), { sb }):log_prob(v) end,
    td_stick_affine = function(mu, s, v) return TD(D.Normal(mu, s), { sb, TT.AffineTransform(0, 2) }):log_prob(v) end,
    td_independent = function(mu, s, v) return TD(D.Normal(mu, s), { TT.IndependentTransform(TT.ExpTransform(), 1) }):log_prob(v) end,
    td_reshape = function(mu, v) return TD(D.Normal(mu, 1.5), { TT.ReshapeTransform({ 2, 3 }, { 6 }) }):log_prob(v) end,
    corr_cholesky = function(a)
      local cc = TT.CorrCholeskyTransform()
      return fwd_ladj(cc, a) + cc:inv(cc(a)):sum()
    end,
    td_corr = function(mu, v) return TD(D.Normal(mu, 0.8), { TT.CorrCholeskyTransform() }):log_prob(v) end,
  }
  H.eq(H.ref_cases(R.transforms, FN, 1e-10, 1e-8), 9)
  -- CorrCholeskyTransform's factors are of correlation matrices, and inv undoes it
  local cc = TT.CorrCholeskyTransform()
  local v = dl.randn(5, 10, f64) * 2
  local L = cc(v)
  H.shape(L, { 5, 5, 5 })
  H.near((L * L):sum(-1):totable(), dl.ones(5, 5, { dtype = "float64" }):totable(), 1e-12)
  H.near(cc:inv(L):totable(), v:totable(), 1e-8)
  H.raises(function() cc(dl.zeros(4)) end, "CorrCholeskyTransform: 4 values are not D (D - 1) / 2 for any D")
  -- shapes: the base's batch dims taken into the event as the transforms need
  local base = D.Normal(dl.zeros(5, 2, 3, f64), 1)
  local st = TD(base, { sb })
  H.eq(st.batch_shape, { 5, 2 })
  H.eq(st.event_shape, { 4 })
  H.shape(st:sample({ 7 }), { 7, 5, 2, 4 })
  H.near(st:sample():sum(-1):totable(), dl.ones(5, 2, { dtype = "float64" }):totable(), 1e-12)
  local rs = TD(base, { TT.ReshapeTransform({ 2, 3 }, { 3, 2 }) })
  H.eq(rs.batch_shape, { 5 })
  H.eq(rs.event_shape, { 3, 2 })
  H.shape(rs:rsample(), { 5, 3, 2 })
  local comp = TT.ComposeTransform({ TT.ExpTransform(), TT.IndependentTransform(TT.AffineTransform(0, 2), 2) })
  H.eq({ comp.domain_event_dim, comp.codomain_event_dim }, { 2, 2 })
  -- LogisticNormal is the Normal through stick breaking
  local m, s = dl.randn(2, 3, f64), dl.rand(3, f64) + 0.5
  local y = dl.randn(4, 2, 4, f64):softmax(-1)
  H.near(D.LogisticNormal(m, s):log_prob(y):totable(), TD(D.Normal(m, s), { sb }):log_prob(y):totable(), 1e-12)
  -- what has no density through it says so; bad arguments are named
  H.raises(function() TD(D.Normal(0, 1), { TT.AbsTransform() }):log_prob(dl.tensor(1.0)) end,
           "AbsTransform.log_abs_det_jacobian: |x| is not one to one")
  H.raises(function() TD(D.Normal(0, 1), { sb }) end, "TransformedDistribution: the transforms take events of 1 dims")
  H.raises(function() TT.ReshapeTransform({ 2, 3 }, { 5 }) end, "ReshapeTransform: (2, 3) and (5,) hold different counts")
  H.raises(function() TT.ReshapeTransform({ 2, 3 }, { 6 })(dl.zeros(3, 2)) end, "ReshapeTransform: expected a shape ending in (2, 3)")
  H.raises(function() TT.IndependentTransform(3, 1) end, "IndependentTransform: expected a transform")
  H.raises(function() TD(D.Normal(0, 1), { TT.AbsTransform() }):cdf(dl.tensor(0.5)) end,
           "TransformedDistribution.cdf: the transforms' direction is not known")
  -- a tensor scale's directions hold elementwise (it had been taken for increasing)
  local base = D.Normal(dl.tensor(0.3, f64), 1)
  local mixed = TD(base, { TT.AffineTransform(1, dl.tensor({ 1, -2 }, f64)) })
  local at = dl.tensor({ -1, 0.5 }, f64)
  H.near(mixed:cdf(at):totable(), { base:cdf(dl.tensor(-2, f64)):item(), 1 - base:cdf(dl.tensor(0.25, f64)):item() }, 1e-12)
  H.near(mixed:icdf(mixed:cdf(at)):totable(), at:totable(), 1e-10)
  H.near(TD(base, { TT.AffineTransform(1, dl.tensor(2.0, f64)) }):cdf(dl.tensor(2, f64)):item(), base:cdf(dl.tensor(0.5, f64)):item(), 1e-12)
  -- tensor parameters broadcast the batch: the base draws the leading dims they add
  local wide = TD(D.Normal(dl.tensor(0.0, f64), 1), { TT.AffineTransform(dl.tensor({ 1, 2, 3 }, f64), 2) })
  H.eq(wide.batch_shape, { 3 })
  H.shape(wide:rsample({ 7 }), { 7, 3 })
  local grid = TD(D.Normal(dl.zeros(3, f64), 1), { TT.AffineTransform(dl.zeros(2, 1, f64), 2) })
  H.eq(grid.batch_shape, { 2, 3 })
  local draws = grid:sample({ 4000 })
  H.shape(draws, { 4000, 2, 3 })
  H.ok(math.abs(dl.corrcoef(draws:reshape(4000, 6):t()):select(1, 1):select(1, 4):item()) < 0.1, "the added dims draw independently")
  H.raises(function() TD(D.Normal(dl.zeros(1), 1), { TT.AffineTransform(dl.zeros(3), 1) }):sample() end,
           "TransformedDistribution.sample: the transforms broadcast the base's shape to (3,)")
  -- an affine map of event_dim 1: one Jacobian per event
  local ev = TD(D.Normal(dl.zeros(4, 3, f64), 1), { TT.AffineTransform(0, 2, 1) })
  H.eq({ ev.batch_shape, ev.event_shape }, { { 4 }, { 3 } })
  local y3 = dl.randn(4, 3, f64)
  H.near(ev:log_prob(y3):totable(), (D.Normal(0, 1):log_prob(y3 / 2):sum(-1) - 3 * math.log(2)):totable(), 1e-12)
  -- an empty list is the identity, as PyTorch's
  H.near(TD(base, {}):log_prob(at):totable(), base:log_prob(at):totable(), 1e-15)
end)

H.test("CatTransform, StackTransform and CumulativeDistributionTransform match PyTorch float64", function()
  local TT, TD = D.transforms, D.TransformedDistribution
  local exp, aff, sig, tanh = TT.ExpTransform(), TT.AffineTransform(1, 2), TT.SigmoidTransform(), TT.TanhTransform()
  local function all_three(t, a)
    local y = t(a)
    return y:sum() + t:log_abs_det_jacobian(a, y):sum() + t:inv(y):sum()
  end
  local function ladj(t, a) return t:log_abs_det_jacobian(a, t(a)) end
  local cat_last = TT.CatTransform({ exp, aff, sig }, -1, { 1, 2, 1 })
  local cat_first = TT.CatTransform({ exp, tanh }, 1, { 2, 1 })
  local ind = { TT.IndependentTransform(exp, 1), TT.IndependentTransform(TT.AffineTransform(0, 3), 1) }
  local cat_event = TT.CatTransform(ind, -1, { 1, 3 })
  local cat_rows = TT.CatTransform(ind, 1, { 1, 2 })
  local stack = TT.StackTransform({ exp, TT.AffineTransform(0.5, 2), sig }, 2)
  local function cdf(m, sd) return TT.CumulativeDistributionTransform(D.Normal(m, sd)) end
  local FN = {
    cat_last = function(a) return all_three(cat_last, a) end,
    cat_last_ladj = function(a) return ladj(cat_last, a) end,
    cat_first_ladj = function(a) return ladj(cat_first, a) + cat_first:inv(cat_first(a)) end,
    cat_event_ladj = function(a) return ladj(cat_event, a) end,
    cat_rows_ladj = function(a) return ladj(cat_rows, a) end,
    stack = function(a) return stack(a) + ladj(stack, a) + stack:inv(stack(a)) end,
    cdf = function(m, sd, a) return all_three(cdf(m, sd), a) + ladj(cdf(m, sd), a) end,
    td_cdf = function(m, sd, v) return TD(D.Normal(0.5, 1.5), { cdf(m, sd) }):log_prob(v) end,
  }
  H.eq(H.ref_cases(R.transforms2, FN, 1e-10, 1e-8), 8)
  -- event dims: the largest part's; a part that changes the event's rank is refused
  H.eq(cat_event.domain_event_dim, 1)
  H.eq(cat_last.domain_event_dim, 0)
  H.eq(stack.domain_event_dim, 0)
  H.eq(TT.StackTransform({ exp, exp }, -1).domain_event_dim, 1)   -- PyTorch's: dim -1 inside the event
  H.eq(TT.StackTransform(ind, -1).codomain_event_dim, 1)
  H.eq(cdf(0, 1).sign, 1)
  H.eq(tostring(stack), "StackTransform({ExpTransform(), AffineTransform(0.5, 2), SigmoidTransform()}, 2)")
  H.eq(tostring(cat_first), "CatTransform({ExpTransform(), TanhTransform()}, 1)")
  H.eq(tostring(TT.ComposeTransform({ exp, TT.AffineTransform(0.5, 2) })), "ComposeTransform(ExpTransform(), AffineTransform(0.5, 2))")
  -- a composition with them, and their shapes
  local x = dl.randn(3, 4, f64)
  local chain = TT.ComposeTransform({ cat_last, TT.AffineTransform(0, 2) })
  H.near(chain:inv(chain(x)):totable(), x:totable(), 1e-12)
  H.raises(function() cat_last(dl.randn(3, 5)) end, "CatTransform: expected 4 elements along dim -1, got 5")
  H.raises(function() stack(dl.randn(4, 2)) end, "StackTransform: expected 3 slices along dim 2 (one a transform), got 2")
  H.raises(function() TT.CatTransform({ exp }, 3)(dl.randn(2, 2)) end, "CatTransform: dim 3 is out of range for a tensor of 2 dims")
  H.raises(function() TT.CatTransform({ exp, aff }, 1, { 1 }) end, "CatTransform: expected a length for each of the 2 transforms")
  H.raises(function() TT.CatTransform({}) end, "CatTransform: expected at least one transform")
  H.raises(function() TT.StackTransform({ exp, TT.ReshapeTransform({ 6 }, { 2, 3 }) }) end,
           "StackTransform: transform 2 (ReshapeTransform(")
  H.raises(function() TT.CumulativeDistributionTransform(3) end, "CumulativeDistributionTransform: expected a distribution")
end)

H.test("StudentT takes validate_args after df or loc; KL of Bernoullis with q.probs 0 or 1 is inf; SigmoidTransform.inv clamps at tiny", function()
  -- the options table after one or two parameters is not read as loc or scale
  local t = D.StudentT(3, { validate_args = false })
  H.values(t.loc, 0)
  H.values(t.scale, 1)
  t = D.StudentT(3, 2, { validate_args = false })
  H.values(t.loc, 2)
  H.values(t.scale, 1)
  H.values(D.StudentT(3, 2, 5, { validate_args = false }).scale, 5)
  H.raises(function() D.StudentT(-1, 0) end, "StudentT: df and scale must be positive")
  -- torch.distributions.kl_divergence(Bernoulli(probs=p), Bernoulli(probs=q)), float64
  local inf = math.huge
  local p = D.Bernoulli({ probs = dl.tensor({ 0.3, 0.3, 0, 1, 0, 1, 0.5 }, f64) })
  local q = D.Bernoulli({ probs = dl.tensor({ 0, 1, 0, 1, 1, 0, 0.2 }, f64) })
  local kl = D.kl_divergence(p, q):totable()
  for i, want in ipairs({ inf, inf, 0, 0, inf, inf }) do H.eq(kl[i], want) end   -- (H.values' tol scales with inf)
  H.near(kl[7], 0.22314355131420974, 1e-15)
  -- TransformedDistribution(Normal(0, 1), [SigmoidTransform()]).log_prob(...), torch
  local function lp(dtype, y)
    local d = D.TransformedDistribution(D.Normal(dl.tensor(0, { dtype = dtype }), 1), { D.transforms.SigmoidTransform() })
    return d:log_prob(dl.tensor({ y }, { dtype = dtype })):item()
  end
  H.near(lp("float64", 1e-9), -194.92254614991012, 1e-11)
  H.near(lp("float64", 1e-20), -1015.2468587690034, 1e-10)
  H.near(lp("float32", 1e-9), -194.92256164550781, 1e-4)
end)

H.test("the gamma draws' slope far right of the mean: a continued fraction, finite (no runaway series)", function()
  local function slope(a, x) return D._standard_gamma_grad(dl.tensor({ a }, f64), dl.tensor({ x }, f64)):item() end
  local far = slope(999, 3007)
  -- mpmath (50 digits): diff(gammainc(a, x, inf, regularized=True), a) / the density
  H.near(far, 1.6504358866202962, 1e-12)
  H.near(slope(0.3, 40), 7.0941805065082564, 1e-12)
  H.near(slope(100, 160), 1.2554191648515343, 1e-12)
  H.near(slope(999, 1200), 1.094642450718077, 1e-12)
  H.near(slope(3000, 3300), 1.0484702073580172, 1e-12)
  H.near(slope(1e6, 1e6 + 2), 1.0000011666661834, 1e-12)
  -- past the doubles' convergents: x (log x - psi(a)) / (x + 1 - a) (mpmath; torch 1.13: 683.93, its
  -- approximation), and 0 at x = 0 (torch's 0), where the slope of log x is infinite
  H.near(slope(999, 1e300), 683.869273703565894, 1e-12)
  H.eq(slope(2, 0), 0)
  -- whole concentrations, where the fraction ends but its slope in alpha does not (mpmath, 80 digits)
  H.near(slope(1, 2.5), 1.7970322333, 1e-9)
  H.near(slope(1, 4), 2.1698556759, 1e-9)
  H.near(slope(2, 3.5), 1.4187780520, 1e-9)
  H.near(slope(3, 4.5), 1.2858613014, 1e-9)
end)

H.test("HalfNormal's log density is -inf left of 0 without validation; Multinomial names itself in its checks", function()
  -- torch: HalfNormal(1., validate_args=False).log_prob(tensor([-1., 0.5])) is [-inf, -0.3508]
  local lp = D.HalfNormal(1, { validate_args = false }):log_prob(dl.tensor({ -1, 0.5 })):totable()
  H.eq(lp[1], -math.huge)
  H.near(lp[2], -0.3507913526447274, 1e-6)
  H.raises(function() D.Multinomial(3, { probs = dl.tensor({ -1, 2 }) }) end, "Multinomial: probs must be non-negative")
end)

H.test("Kumaraswamy at its edges with a concentration of 1; a float16 SigmoidTransform keeps float16's tiny", function()
  -- the density's limit: Kumaraswamy(1, 2) at 0 is log 2 (1 - x)^1 -> log 2 (PyTorch 1.13 gives NaN there)
  H.near(D.Kumaraswamy(1, 2):log_prob(0):item(), math.log(2), 1e-6)
  H.near(D.Kumaraswamy(2, 1):log_prob(1):item(), math.log(2), 1e-6)
  -- torch.finfo(torch.float16).tiny = 6.1035e-05: logit(tiny) = -9.7040 (float32's tiny rounded to 0: -inf)
  local t = D.transforms.SigmoidTransform()
  local y = t:inv(dl.tensor({ 0 }, { dtype = "float16" }))
  H.near(y:float():item(), -9.7040, 2e-3)
end)

H.run()
