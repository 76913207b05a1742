-- kl_divergence for the pairs PyTorch 1.13 registers beyond one family's own (kl.lua): the
-- same-family pairs added, and every pair of two families, batched and broadcast, against
-- torch.distributions.kl_divergence in float64 (values written out below).
local dl = require("dlua")
local H = require("harness")
local D = dl.distributions
local T = D.transforms

local f64 = { dtype = "float64" }
local inf, nan = math.huge, 0 / 0

local function check(cases, tol)
  for _, c in ipairs(cases) do
    local p, q = c[3]()
    local got = D.kl_divergence(p, q)
    H.shape(got, c[4])
    H.eq(got.dtype, "float64")
    local flat = got:reshape({ -1 }):totable()
    for i, w in ipairs(c[5]) do
      local g = flat[i]
      local ok = (w ~= w and g ~= g) or g == w or math.abs(g - w) <= tol * math.max(1, math.abs(w))
      H.ok(ok, c[1] .. " || " .. c[2] .. " [" .. i .. "]: got " .. tostring(g) .. ", PyTorch " .. tostring(w))
    end
  end
  return #cases
end

local SAME = {  -- torch.distributions.kl_divergence(p, q), float64
  { "Binomial", "Binomial", function() return D.Binomial(dl.tensor({ 5, 5, 8 }, f64), { probs = dl.tensor({ 0.2, 0.5, 0.9 }, f64) }),
                         D.Binomial(dl.tensor({ { 5 }, { 3 } }, f64), { probs = dl.tensor({ { 0.3 }, { 0.6 } }, f64) }) end,
    { 2, 3 }, { 0.12866046238992596, 0.4358834678619447, inf, inf, inf, inf } },
  { "ContinuousBernoulli", "ContinuousBernoulli", function() return D.ContinuousBernoulli({ probs = dl.tensor({ 0.2, 0.5, 0.85 }, f64) }),
                         D.ContinuousBernoulli({ logits = dl.tensor({ { 0.4 }, { -2 } }, f64) }) end,
    { 2, 3 }, { 0.1278665782441265, 0.006657800285226945, 0.06817777742484266, 0.013882188596851308, 0.16143936157119565, 0.5536416056534049 } },
  { "Pareto", "Pareto", function() return D.Pareto(dl.tensor({ 1, 2, 0.5 }, f64), dl.tensor({ 2.5, 3.5, 4 }, f64)),
                         D.Pareto(dl.tensor({ { 0.8 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 2, 3 }, { 0.4455409507373054, 1.650305386769865, inf, inf, 0.8743397543254581, inf } },
  { "Cauchy", "Cauchy", function() return D.Cauchy(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)),
                         D.Cauchy(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 0.036266177984394465, 0.08861265835660381, 0.6540400973141778, 0.06551460711062662, 0.1568941657730092, 0.6747498154202294 } },
  { "LowRankMultivariateNormal", "LowRankMultivariateNormal", function() return D.LowRankMultivariateNormal(dl.tensor({ { 0.2, -0.1, 0.4 }, { 1, 0, -0.5 } }, f64), dl.tensor({ { { 1, 0 }, { 0.5, 0.2 }, { -0.3, 0.7 } }, { { 0.4, 0.3 }, { 0.1, -0.6 }, { 0.9, 0 } } }, f64), dl.tensor({ { 1, 0.5, 2 }, { 0.3, 1.2, 0.8 } }, f64)),
                         D.LowRankMultivariateNormal(dl.tensor({ { 0.5, 0.5, -0.2 } }, f64), dl.tensor({ { { 0.6 }, { -0.2 }, { 0.3 } } }, f64), dl.tensor({ { 0.7, 1.5, 1.1 } }, f64)) end,
    { 2 }, { 0.9821938606071097, 0.4163247547745308 } },
  { "MultivariateNormal", "LowRankMultivariateNormal", function() return D.MultivariateNormal(dl.tensor({ { 0.5, 0.5, -0.2 } }, f64), { covariance_matrix = dl.tensor({ { 2, 0.3, -0.4 }, { 0.3, 1, 0.2 }, { -0.4, 0.2, 1.5 } }, f64) }),
                         D.LowRankMultivariateNormal(dl.tensor({ { 0.2, -0.1, 0.4 }, { 1, 0, -0.5 } }, f64), dl.tensor({ { { 1, 0 }, { 0.5, 0.2 }, { -0.3, 0.7 } }, { { 0.4, 0.3 }, { 0.1, -0.6 }, { 0.9, 0 } } }, f64), dl.tensor({ { 1, 0.5, 2 }, { 0.3, 1.2, 0.8 } }, f64)) end,
    { 2 }, { 0.44180539508124705, 1.8361956459962414 } },
  { "LowRankMultivariateNormal", "MultivariateNormal", function() return D.LowRankMultivariateNormal(dl.tensor({ { 0.2, -0.1, 0.4 }, { 1, 0, -0.5 } }, f64), dl.tensor({ { { 1, 0 }, { 0.5, 0.2 }, { -0.3, 0.7 } }, { { 0.4, 0.3 }, { 0.1, -0.6 }, { 0.9, 0 } } }, f64), dl.tensor({ { 1, 0.5, 2 }, { 0.3, 1.2, 0.8 } }, f64)),
                         D.MultivariateNormal(dl.tensor({ { 0.5, 0.5, -0.2 } }, f64), { covariance_matrix = dl.tensor({ { 2, 0.3, -0.4 }, { 0.3, 1, 0.2 }, { -0.4, 0.2, 1.5 } }, f64) }) end,
    { 2 }, { 0.5312585647700865, 0.8358169004714422 } },
  { "Wishart", "Wishart", function() return D.Wishart(dl.tensor({ 3, 4.5 }, f64), { covariance_matrix = dl.eye(2, f64) }),
                         D.Wishart(dl.tensor(5, f64), { covariance_matrix = dl.tensor({ { 1.5, 0.4 }, { 0.4, 0.8 } }, f64) }) end,
    { 2 }, { 1.3615502742220156, 0.6132208679031006 } },  -- (each df alone: PyTorch's batched Bregman is wrong)
  { "TransformedDistribution", "TransformedDistribution", function() return D.TransformedDistribution(D.Normal(dl.tensor({ 0.1, -0.4 }, f64), dl.tensor({ 0.8, 1.3 }, f64)), { T.AffineTransform(dl.tensor(1, f64), dl.tensor(2, f64)), T.ExpTransform() }),
                         D.TransformedDistribution(D.Normal(dl.tensor({ 0.3, 0 }, f64), dl.tensor({ 1.1, 0.5 }, f64)), { T.AffineTransform(dl.tensor(1, f64), dl.tensor(2, f64)), T.ExpTransform() }) end,
    { 2 }, { 0.09944546665572468, 2.2444885549725635 } },
  { "LogisticNormal", "LogisticNormal", function() return D.LogisticNormal(dl.tensor({ 0.1, -0.4 }, f64), dl.tensor({ 0.8, 1.3 }, f64)),
                         D.LogisticNormal(dl.tensor({ { 0.3, 0 }, { 1, 2 } }, f64), dl.tensor({ { 1.1, 0.5 }, { 0.4, 2 } }, f64)) end,
    { 2 }, { 2.343934021628288, 4.200135735532509 } },
}

local CASES = {  -- torch.distributions.kl_divergence(p, q), float64
  { "Bernoulli", "Poisson", function() return D.Bernoulli({ probs = dl.tensor({ 0.2, 0.5, 0.85 }, f64) }), D.Poisson(dl.tensor({ { 1.5 }, { 0.3 } }, f64)) end,
    { 2, 3 }, { 0.9185045548401793, 0.6041202653859724, 0.7326455703020693, 0.04039213732699931, 0.2088392216030227, 0.9006677958710547 } },
  { "Beta", "ContinuousBernoulli", function() return D.Beta(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 2, 3 }, { 0.10793779046249541, 1.0492044367028128, 0.6172350990520041, 0.41604610333056935, 0.5408257204704905, 0.2913513065953872 } },
  { "Beta", "Exponential", function() return D.Beta(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)) end,
    { 2, 3 }, { 0.7099448295043214, 1.628422506648986, 1.201546784732184, 0.17547227944834803, 1.6721317747748308, 1.1160252836272595 } },
  { "Beta", "Gamma", function() return D.Beta(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Gamma(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 2, 3 }, { 1.076708417987331, 1.5981845078461228, 1.1976399847081785, 2.7886649039899503, 1.4137986658954629, 1.0834899101966864 } },
  { "Beta", "Normal", function() return D.Beta(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 1.2746553630999358, 1.9017236541761233, 1.514139549732757, 1.1074615361136422, 2.625772817154411, 1.9779691343096477 } },
  { "Beta", "Pareto", function() return D.Beta(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Beta", "Uniform", function() return D.Beta(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)):expand({ 2, 3 }), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)):expand({ 2, 3 }) end,
    { 2, 3 }, { 0.23225582364465708, 0.7652789553347761, 0.4245570795718203, 1.6185501847645476, 2.151573316454667, 1.810851440691711 } },
  { "ContinuousBernoulli", "Exponential", function() return D.ContinuousBernoulli({ probs = dl.tensor({ 0.2, 0.5, 0.85 }, f64) }), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)) end,
    { 2, 3 }, { 0.6099693538064874, 0.6231435513142097, 0.8500046619251223, 0.15929564646571026, 0.3068528194400547, 0.699055063522264 } },
  { "ContinuousBernoulli", "Normal", function() return D.ContinuousBernoulli({ probs = dl.tensor({ 0.2, 0.5, 0.85 }, f64) }), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 1.1252269252916103, 1.0652129003368214, 1.2078444025131612, 1.0701641470350158, 1.2044092057349784, 1.5997914877559152 } },
  { "ContinuousBernoulli", "Pareto", function() return D.ContinuousBernoulli({ probs = dl.tensor({ 0.2, 0.5, 0.85 }, f64) }), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "ContinuousBernoulli", "Uniform", function() return D.ContinuousBernoulli({ probs = dl.tensor({ 0.2, 0.5, 0.85 }, f64) }), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)) end,
    { 2, 3 }, { inf, inf, inf, 1.4627088139232496, 1.3862943611198906, 1.5029280494166053 } },
  { "Exponential", "Beta", function() return D.Exponential(dl.tensor({ 0.5, 1.5, 3 }, f64)), D.Beta(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Exponential", "ContinuousBernoulli", function() return D.Exponential(dl.tensor({ 0.5, 1.5, 3 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Exponential", "Gamma", function() return D.Exponential(dl.tensor({ 0.5, 1.5, 3 }, f64)), D.Gamma(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 2, 3 }, { 0.10086722558984462, 0.32906320085838736, 0.9301545355863166, 0.802764887590365, 1.1652684202613606, 2.511376628607863 } },
  { "Exponential", "Gumbel", function() return D.Exponential(dl.tensor({ 0.5, 1.5, 3 }, f64)), D.Gumbel(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 0.4137130779180682, 0.6519743682152628, 1.232292582249426, 1.6280472417039131, 0.6784934969531499, 0.937302824874158 } },
  { "Exponential", "Normal", function() return D.Exponential(dl.tensor({ 0.5, 1.5, 3 }, f64)), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 2.1682089704655807, 0.6589241057819921, 1.1592338207771993, 10.992743506656515, 1.4740718447073402, 1.0561079141561744 } },
  { "Exponential", "Pareto", function() return D.Exponential(dl.tensor({ 0.5, 1.5, 3 }, f64)), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Exponential", "Uniform", function() return D.Exponential(dl.tensor({ 0.5, 1.5, 3 }, f64)), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gamma", "Beta", function() return D.Gamma(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Beta(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gamma", "ContinuousBernoulli", function() return D.Gamma(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Gamma", "Exponential", function() return D.Gamma(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)) end,
    { 2, 3 }, { 0.4070818123334213, 1.1527807058527317, 0.6236024032900629, 0.05079108045926628, 5.0364899739785765, 2.4073116714159077 } },
  { "Gamma", "Gumbel", function() return D.Gamma(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Gumbel(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 1.0002107754786373, 1.3539724355731, 0.7118125524861516, 0.8355856699049726, 4.256970002933266, 2.219809994612549 } },
  { "Gamma", "Normal", function() return D.Gamma(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 0.9648903716406978, 7.70669578490289, 1.650864589778239, 1.268100553173943, 33.748861175088315, 8.907877316970092 } },
  { "Gamma", "Pareto", function() return D.Gamma(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gamma", "Uniform", function() return D.Gamma(dl.tensor({ 0.7, 2, 4.5 }, f64), dl.tensor({ 1.5, 0.5, 2 }, f64)), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gumbel", "Beta", function() return D.Gumbel(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Beta(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gumbel", "ContinuousBernoulli", function() return D.Gumbel(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Gumbel", "Exponential", function() return D.Gumbel(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gumbel", "Gamma", function() return D.Gumbel(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Gamma(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gumbel", "Normal", function() return D.Gumbel(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 0.217633232554429, 0.16469428608151615, 0.6265497846400669, 0.9378115291210234, 1.8974315958652639, 1.8889840836808252 } },
  { "Gumbel", "Pareto", function() return D.Gumbel(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Gumbel", "Uniform", function() return D.Gumbel(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Laplace", "Beta", function() return D.Laplace(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Beta(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Laplace", "ContinuousBernoulli", function() return D.Laplace(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Laplace", "Exponential", function() return D.Laplace(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Laplace", "Gamma", function() return D.Laplace(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Gamma(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Laplace", "Normal", function() return D.Laplace(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 0.13358004877702645, 0.37455168322323984, 0.4357393717612239, 0.4480135748669498, 1.994655549074412, 1.200700905197336 } },
  { "Laplace", "Pareto", function() return D.Laplace(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Laplace", "Uniform", function() return D.Laplace(dl.tensor({ 0.2, -0.3, 0.7 }, f64), dl.tensor({ 0.6, 1.1, 0.4 }, f64)), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Normal", "Beta", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.Beta(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Normal", "ContinuousBernoulli", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Normal", "Exponential", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Normal", "Gamma", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.Gamma(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Normal", "Gumbel", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.Gumbel(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 0.2801874678547256, 1.576540678762484, 1.3027528257592977, 0.26872000983416866, 12.067736621921, 1.019032585470832 } },
  { "Normal", "Laplace", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.Laplace(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 0.1909819395262875, 0.18359996479430352, 1.1285366298568178, 0.12430992522893292, 0.2501869624244173, 1.290087078426843 } },
  { "Normal", "Pareto", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Normal", "Uniform", function() return D.Normal(dl.tensor({ 0.1, -0.4, 0.35 }, f64), dl.tensor({ 0.8, 1.3, 0.2 }, f64)), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Pareto", "Beta", function() return D.Pareto(dl.tensor({ 1, 2, 0.5 }, f64), dl.tensor({ 2.5, 3.5, 4 }, f64)), D.Beta(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Pareto", "ContinuousBernoulli", function() return D.Pareto(dl.tensor({ 1, 2, 0.5 }, f64), dl.tensor({ 2.5, 3.5, 4 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Pareto", "Exponential", function() return D.Pareto(dl.tensor({ 1, 2, 0.5 }, f64), dl.tensor({ 2.5, 3.5, 4 }, f64)):expand({ 2, 3 }), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)):expand({ 2, 3 }) end,
    { 2, 3 }, { 1.072767616521698, 1.737045053535347, 1.5859184263273791, 2.1564768846475433, 4.180754321661191, 1.4696276944532238 } },
  { "Pareto", "Gamma", function() return D.Pareto(dl.tensor({ 1, 2, 0.5 }, f64), dl.tensor({ 2.5, 3.5, 4 }, f64)):expand({ 2, 3 }), D.Gamma(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)):expand({ 2, 3 }) end,
    { 2, 3 }, { 0.9250845927214688, 1.5290369231861813, 1.591179556695133, 0.7107324980079561, 1.8039536691398106, 1.5101776689335278 } },
  { "Pareto", "Normal", function() return D.Pareto(dl.tensor({ 1, 2, 0.5 }, f64), dl.tensor({ 2.5, 3.5, 4 }, f64)):expand({ 2, 3 }), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)):expand({ 2, 3 }) end,
    { 2, 3 }, { 2.2206220895112514, 3.4878747331364712, 1.9222026513830484, 7.850329567238763, 14.2560884857339, 2.357924821488888 } },
  { "Pareto", "Uniform", function() return D.Pareto(dl.tensor({ 1, 2, 0.5 }, f64), dl.tensor({ 2.5, 3.5, 4 }, f64)), D.Uniform(dl.tensor({ { 0 }, { -1 } }, f64), dl.tensor({ { 1 }, { 3 } }, f64)) end,
    { 3 }, { inf, inf, inf } },
  { "Poisson", "Bernoulli", function() return D.Poisson(dl.tensor({ 0.5, 2, 4 }, f64)), D.Bernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Poisson", "Binomial", function() return D.Poisson(dl.tensor({ 0.5, 2, 4 }, f64)), D.Binomial(dl.tensor({ { 5 }, { 3 } }, f64), { probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 3 }, { inf, inf, inf } },
  { "Uniform", "Beta", function() return D.Uniform(dl.tensor({ 0.1, 0.25, 0.4 }, f64), dl.tensor({ 0.6, 0.9, 0.75 }, f64)):expand({ 2, 3 }), D.Beta(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)):expand({ 2, 3 }) end,
    { 2, 3 }, { 0.8544816287038266, 0.37807527589743356, 0.993308659588607, 0.852488736723092, 0.1358610960722939, 0.5574099351819017 } },
  { "Uniform", "ContinuousBernoulli", function() return D.Uniform(dl.tensor({ 0.1, 0.25, 0.4 }, f64), dl.tensor({ 0.6, 0.9, 0.75 }, f64)), D.ContinuousBernoulli({ probs = dl.tensor({ { 0.3 }, { 0.7 } }, f64) }) end,
    { 2, 3 }, { 0.5957886247537403, 0.5240663788733697, 1.1431055872795934, 0.8499779828699012, 0.39697169981528924, 1.016010908221513 } },
  { "Uniform", "Exponential", function() return D.Uniform(dl.tensor({ 0.1, 0.25, 0.4 }, f64), dl.tensor({ 0.6, 0.9, 0.75 }, f64)):expand({ 2, 3 }), D.Exponential(dl.tensor({ { 0.8 }, { 2 } }, f64)):expand({ 2, 3 }) end,
    { 2, 3 }, { 1.196290731874155, 1.1139264674066638, 1.7329656758128875, 0.7, 0.8876357355325089, 1.5066749439387324 } },
  { "Uniform", "Gamma", function() return D.Uniform(dl.tensor({ 0.1, 0.25, 0.4 }, f64), dl.tensor({ 0.6, 0.9, 0.75 }, f64)):expand({ 2, 3 }), D.Gamma(dl.tensor({ { 1.3 }, { 3 } }, f64), dl.tensor({ { 0.9 }, { 2.2 } }, f64)):expand({ 2, 3 }) end,
    { 2, 3 }, { 1.382683160383373, 1.1608848725453393, 1.7668976381367116, 2.0958697398678394, 1.2489453195967302, 1.7811415759039473 } },
  { "Uniform", "Gumbel", function() return D.Uniform(dl.tensor({ 0.1, 0.25, 0.4 }, f64), dl.tensor({ 0.6, 0.9, 0.75 }, f64)), D.Gumbel(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 1.7977224795635425, 1.5662741298214975, 2.1772224779023275, 1.5105084493769092, 1.5000733189881954, 2.109388510699125 } },
  { "Uniform", "Normal", function() return D.Uniform(dl.tensor({ 0.1, 0.25, 0.4 }, f64), dl.tensor({ 0.6, 0.9, 0.75 }, f64)), D.Normal(dl.tensor({ { 0.3 }, { -0.2 } }, f64), dl.tensor({ { 1.1 }, { 0.6 } }, f64)) end,
    { 2, 3 }, { 1.71703776684718, 1.4908305271730773, 2.099539157066904, 1.5503341640727015, 1.721997677382988, 2.3063146635669893 } },
  { "Uniform", "Pareto", function() return D.Uniform(dl.tensor({ 0.1, 0.25, 0.4 }, f64), dl.tensor({ 0.6, 0.9, 0.75 }, f64)), D.Pareto(dl.tensor({ { 0.05 }, { 1.5 } }, f64), dl.tensor({ { 1.5 }, { 3 } }, f64)) end,
    { 2, 3 }, { 1.9000961579818179, 2.987182088268849, 3.714774986798831, inf, inf, inf } },
}

H.test("the same-family pairs PyTorch has (Binomial, ContinuousBernoulli, Pareto, Cauchy, the low-rank normals, Wishart, transformed, LogisticNormal)", function()
  H.eq(check(SAME, 1e-12), 10)
end)

H.test("every pair of two families PyTorch 1.13 has, broadcast (infinite ones of p's shape, as PyTorch's)", function()
  H.eq(check(CASES, 1e-12), 62)
end)

H.test("the cross-family rules have gradients (PyTorch's torch.autograd.grad, float64)", function()
  -- torch.autograd.grad(kl_divergence(Normal(loc, 0.8), Gumbel(0.3, 1.1)).sum(), loc) at loc = 0.1
  local g = dl.grad(function(m) return D.kl_divergence(D.Normal(m, dl.tensor(0.8, f64)), D.Gumbel(dl.tensor(0.3, f64), dl.tensor(1.1, f64))):sum() end)(dl.tensor({ 0.1 }, f64))
  H.near(g:item(), -0.5113549561445867, 1e-13)
  -- ... and of kl_divergence(Uniform(0.1, high), Normal(0.3, 1.1)) in high at 0.6
  g = dl.grad(function(h) return D.kl_divergence(D.Uniform(dl.tensor(0.1, f64), h), D.Normal(dl.tensor(0.3, f64), dl.tensor(1.1, f64))):sum() end)(dl.tensor({ 0.6 }, f64))
  H.near(g:item(), -1.9449035812672175, 1e-13)
  -- ... and of kl_divergence(Gamma(conc, 2.0), Exponential(0.8)) in conc at 1.5 (PyTorch's trigamma(1.5)
  -- is 4e-10 off mpmath's, dlua's within 1e-15: its gradient too)
  g = dl.grad(function(c) return D.kl_divergence(D.Gamma(c, dl.tensor(2, f64)), D.Exponential(dl.tensor(0.8, f64))):sum() end)(dl.tensor({ 1.5 }, f64))
  H.near(g:item(), -0.13259889951416404, 1e-9)
end)

H.test("the rules' refusals name what differs", function()
  -- (PyTorch: NotImplementedError for Binomials of q.total_count > p.total_count)
  H.raises(function() D.kl_divergence(D.Binomial(3, { probs = 0.5 }), D.Binomial(5, { probs = 0.5 })) end,
           "kl_divergence: Binomials where q's total_count exceeds p's are not implemented")
  H.raises(function()
    D.kl_divergence(D.TransformedDistribution(D.Normal(0, 1), { T.ExpTransform() }),
                    D.TransformedDistribution(D.Normal(0, 1), { T.AffineTransform(0, 2) }))
  end, "kl_divergence: TransformedDistributions of different transforms")
  H.raises(function()
    D.kl_divergence(D.LowRankMultivariateNormal(dl.zeros(2), dl.ones(2, 1), dl.ones(2)),
                    D.MultivariateNormal(dl.zeros(3), { covariance_matrix = dl.eye(3) }))
  end, "kl_divergence: the two LowRankMultivariateNormal and MultivariateNormal have events of 2 and 3")
  H.raises(function() D.kl_divergence(D.Normal(0, 1), D.Cauchy(0, 1)) end, "kl_divergence: no rule for Normal and Cauchy")
end)

H.run()
