-- The composed functions and layers (subscripts, interpolate and the adaptive pools,
-- transposed convolutions, the activations, index_add and its kin, sampling, the
-- statistics, the transformers ...) on a CUDA device, run on the stand-in plugin
-- (tests/gpu/fake_plugin.cpp: the CPU's kernels as the device "cuda"): each keeps its
-- result on the device of its operands (the index and weight tensors they make
-- included) and gives the CPU's values.
local H = require("harness")
local dl = require("dlua")
local nn, F = dl.nn, dl.nn.functional

local function on(t) return t:cuda() end
local i64 = function(v) return dl.tensor(v, { dtype = "int64" }) end

-- Each case: a function of a device argument ("cuda" or "cpu") that makes its inputs on
-- that device and returns its result.
local CASES = {
  interpolate = function(d) return F.interpolate(dl.arange(70):reshape(1, 2, 5, 7):float():to(d), { scale_factor = 2, mode = "bilinear" }) end,
  interpolate_nearest = function(d) return F.interpolate(dl.arange(35):reshape(1, 1, 5, 7):float():to(d), { size = { 3, 4 } }) end,
  adaptive_pool = function(d) return F.adaptive_avg_pool2d(dl.arange(35):reshape(1, 1, 5, 7):float():to(d), { 2, 3 }) end,
  interpolate_bicubic = function(d)
    return F.interpolate(dl.arange(35):reshape(1, 1, 5, 7):float():to(d), { size = { 8, 4 }, mode = "bicubic" })
  end,
  conv_transpose = function(d)
    return F.conv_transpose2d(dl.arange(18):reshape(1, 2, 3, 3):float():to(d), dl.ones(2, 3, 2, 2):to(d), { stride = 2 })
  end,
  conv_transpose_cropped = function(d)   -- output_padding past the stride
    return F.conv_transpose2d(dl.arange(18):reshape(1, 2, 3, 3):float():to(d), dl.ones(2, 3, 2, 2):to(d),
                              dl.ones(3):to(d), { padding = 1, dilation = 2, output_padding = 1 })
  end,
  elu = function(d) return F.elu(dl.linspace(-3, 3, 7):to(d)) end,
  hardswish = function(d) return F.hardswish(dl.linspace(-4, 4, 9):to(d)) end,
  prelu = function(d) return F.prelu(dl.linspace(-3, 3, 6):reshape(1, 2, 3):to(d), dl.tensor({ 0.1, 0.2 }):to(d)) end,
  subscript = function(d) return dl.arange(24):reshape(2, 3, 4):to(d)[{ {}, 2, { 1, 3 } }] end,
  subscript_index = function(d) return dl.arange(12):reshape(3, 4):to(d)[{ {}, i64({ 1, 4 }):to(d) }] end,
  diag = function(d) return dl.diag(dl.tensor({ 1, 2, 3 }):to(d), 1) end,
  nan_to_num = function(d) return dl.tensor({ 1, 0 / 0, math.huge }):to(d):nan_to_num() end,
  index_add = function(d) return dl.zeros(3, 2):to(d):index_add(1, { 1, 3, 1 }, dl.ones(3, 2):to(d)) end,
  index_fill = function(d) return dl.zeros(3, 2):to(d):index_fill(2, { 2 }, 4) end,
  scatter = function(d) return dl.zeros(2, 3):to(d):scatter(2, i64({ { 3 }, { 1 } }):to(d), 5) end,
  median = function(d) return (dl.tensor({ { 3, 1, 2 }, { 0, 5, 4 } }):to(d):median(2)) end,
  max_pool1d = function(d) return F.max_pool1d(dl.arange(16):reshape(1, 2, 8):float():to(d), 3, { stride = 2 }) end,
  fmod = function(d) return dl.fmod(dl.linspace(-5, 5, 11):to(d), 3) end,
  bincount = function(d) return dl.bincount(i64({ 1, 3, 3 }):to(d)) end,
  histc = function(d) return dl.histc(dl.linspace(0, 1, 9):to(d), 4) end,
  cdist = function(d) return dl.cdist(dl.arange(6):reshape(3, 2):float():to(d), dl.ones(2, 2):to(d)) end,
  cross = function(d) return dl.cross(dl.tensor({ 1, 2, 3 }):to(d), dl.tensor({ 0, 1, 0 }):to(d)) end,
  cosine = function(d) return F.cosine_similarity(dl.arange(6):reshape(2, 3):float():to(d), dl.ones(2, 3):to(d)) end,
  rot90 = function(d) return dl.arange(6):reshape(2, 3):to(d):rot90() end,
  adaptive_max = function(d) return F.adaptive_max_pool2d(dl.arange(35):reshape(1, 1, 5, 7):float():to(d), { 2, 3 }) end,
  instance_norm = function(d) return F.instance_norm(dl.arange(24):reshape(1, 2, 3, 4):float():to(d)) end,
  pixel_shuffle = function(d) return F.pixel_shuffle(dl.arange(16):reshape(1, 4, 2, 2):to(d), 2) end,
  grid_sample = function(d)
    local theta = dl.tensor({ { { 0.9, -0.2, 0.1 }, { 0.3, 1.1, -0.2 } } }):to(d)
    local grid = F.affine_grid(theta, { 1, 2, 3, 4 })
    return F.grid_sample(dl.arange(24):reshape(1, 2, 3, 4):float():to(d), grid, { padding_mode = "reflection" })
  end,
  unfold = function(d) return F.unfold(dl.arange(32):reshape(1, 2, 4, 4):float():to(d), 2, { stride = 2 }) end,
  ctc = function(d)
    local lp = dl.linspace(-2, 2, 5 * 2 * 4):reshape(5, 2, 4):to(d):log_softmax(3)
    return dl.nn.ctc_loss(lp, i64({ { 2, 3 }, { 4, 4 } }):to(d), { 5, 4 }, { 2, 1 }, { reduction = "none" })
  end,
  triplet = function(d)
    local a = dl.arange(6):reshape(2, 3):float():to(d)
    return dl.nn.triplet_margin_loss(a, a * 2, a * -1)
  end,
  cummax = function(d) return (dl.cummax(dl.tensor({ { 1, 3, 2 }, { 4, 0, 5 } }):to(d), 2)) end,
  cummin_index = function(d) return select(2, dl.cummin(dl.tensor({ 3, 1, 2, 1 }):to(d), 1)) end,
  logcumsumexp = function(d) return dl.logcumsumexp(dl.linspace(-2, 2, 6):to(d), 1) end,
  quantile = function(d) return dl.quantile(dl.arange(10):reshape(2, 5):float():to(d), 0.3, 2) end,
  diag_embed = function(d) return dl.diag_embed(dl.arange(4):reshape(2, 2):to(d), 1) end,
  take_along_dim = function(d) return dl.take_along_dim(dl.arange(6):reshape(2, 3):to(d), i64({ { 3 }, { 1 } }):to(d), 2) end,
  floor_divide = function(d) return dl.div(dl.linspace(-3, 3, 7):to(d), 2, { rounding_mode = "floor" }) end,
  matrix_exp = function(d) return dl.linalg.matrix_exp(dl.tensor({ { 0, 1 }, { 0, 0 } }):to(d)) end,
  cov = function(d) return dl.cov(dl.tensor({ { 1, 2, 4 }, { 0, 1, 1 } }):to(d)) end,
  scatter_reduce = function(d)
    return dl.zeros(2, 3):to(d):scatter_reduce(2, i64({ { 1, 1, 3 }, { 2, 2, 2 } }):to(d), dl.arange(6):reshape(2, 3):float():to(d), "amax")
  end,
  scatter_reduce_prod = function(d)
    return dl.ones(3):to(d):scatter_reduce(1, i64({ 3, 3, 1 }):to(d), dl.tensor({ 2, 5, 7 }):to(d), "prod", { include_self = false })
  end,
  scatter_twice = function(d) return dl.zeros(3):to(d):scatter(1, i64({ 2, 2 }):to(d), dl.tensor({ 4, 9 }):to(d)) end,
  index_put = function(d) return dl.zeros(2, 3):to(d):index_put({ i64({ 1, -1 }):to(d), { 3, 1 } }, 7) end,
  take = function(d) return dl.take(dl.arange(6):reshape(2, 3):to(d), { 6, -6 }) end,
  masked_scatter = function(d) return dl.zeros(2, 2):to(d):masked_scatter(dl.tensor({ true, false }):to(d), dl.arange(4):float():to(d)) end,
  mode = function(d) return (dl.tensor({ 2, 1, 2, 1, 3 }):to(d):mode()) end,
  vander = function(d) return dl.vander(dl.tensor({ 2, 0 }):to(d), 3) end,
  conv3d = function(d)
    return F.conv3d(dl.arange(96):reshape(1, 2, 3, 4, 4):float():to(d), dl.ones(2, 1, 2, 2, 2):to(d), { groups = 2, padding = 1 })
  end,
  normal_log_prob = function(d)
    return dl.distributions.Normal(dl.tensor({ 0, 1 }):to(d), 2):log_prob(dl.tensor({ 0.5, 3 }):to(d))
  end,
  categorical_entropy = function(d) return dl.distributions.Categorical({ logits = dl.tensor({ 1, 2, 3 }):to(d) }):entropy() end,
  mvn_log_prob = function(d)
    return dl.distributions.MultivariateNormal(dl.zeros(2):to(d), { covariance_matrix = dl.tensor({ { 2, 0.5 }, { 0.5, 1 } }):to(d) })
      :log_prob(dl.ones(2):to(d))
  end,
  kl_bernoulli = function(d)
    local B = dl.distributions.Bernoulli
    return dl.distributions.kl_divergence(B({ probs = dl.tensor({ 0.2, 0.9 }):to(d) }), B({ logits = dl.tensor({ 0, 1 }):to(d) }))
  end,
  log_ndtr = function(d) return dl.special.log_ndtr(dl.tensor({ -40, 0, 3 }):to(d)) end,
  ndtri = function(d) return dl.special.ndtri(dl.tensor({ 1e-30, 0.5, 0.9 }):to(d)) end,
  bessel = function(d)
    local S, x = dl.special, dl.tensor({ 0.5, 3, 22, 40 }):to(d)
    return dl.stack({ S.i0(x), S.i0e(x), S.i1(x), S.i1e(x), S.bessel_j0(x), S.bessel_j1(x), S.bessel_y0(x),
                      S.bessel_y1(x), S.modified_bessel_k0(x), S.modified_bessel_k1(x), S.scaled_modified_bessel_k0(x),
                      S.scaled_modified_bessel_k1(x), S.spherical_bessel_j0(x), S.zeta(x + 1.5, x) })
  end,
  rarer_log_probs = function(d)
    local D, x = dl.distributions, dl.tensor({ 0.3, 0.8 }):to(d)
    return D.Weibull(dl.tensor({ 1, 2 }):to(d), 1.5):log_prob(x) + D.Kumaraswamy(2, dl.tensor({ 3, 1 }):to(d)):log_prob(x)
      + D.RelaxedBernoulli(0.5, { probs = dl.tensor({ 0.2, 0.7 }):to(d) }):log_prob(x)
      + D.NegativeBinomial(dl.tensor({ 2, 5 }):to(d), { logits = 0.3 }):log_prob(dl.tensor({ 1, 4 }):to(d))
  end,
  von_mises_log_prob = function(d)
    return dl.distributions.VonMises(dl.tensor({ 0.5, -2 }):to(d), 3):log_prob(dl.tensor({ 0.3, 3 }):to(d))
  end,
  fft = function(d)
    local x = dl.tensor({ { 1, 2, 0.5, -1, 3 }, { 0, 1, 0, 0, 2 } }):to(d)
    return dl.fft.irfft(dl.fft.mul(dl.fft.rfft(x, 8), dl.fft.rfft(x:flip({ 2 }), 8)), 8) + dl.fft.fftfreq(8):to(d)
  end,
  fft_grad = function(d)
    return dl.grad(function(z) return dl.fft.abs(dl.fft.fft2(z)):sum() end)(dl.arange(12):float():view(2, 3, 2):to(d))
  end,
  bessel_grad = function(d)
    return dl.grad(function(t) return (dl.special.bessel_y1(t) * dl.special.i1e(t)):sum() end)(dl.tensor({ 0.5, 3, 30 }):to(d))
  end,
  mixture_log_prob = function(d)
    local D = dl.distributions
    return D.MixtureSameFamily(D.Categorical({ logits = dl.tensor({ 0, 1 }):to(d) }), D.Normal(dl.tensor({ -1, 2 }):to(d), 1))
      :log_prob(dl.tensor({ 0.5, -3 }):to(d):view(2, 1))
  end,
  binomial_log_prob = function(d)
    return dl.distributions.Binomial(5, { probs = dl.tensor({ 0.3, 0.6 }):to(d) }):log_prob(dl.tensor({ 2, 5 }):to(d))
  end,
  squashed_log_prob = function(d)
    local D = dl.distributions
    return D.TransformedDistribution(D.Normal(dl.zeros(2):to(d), 1), { D.transforms.TanhTransform() })
      :log_prob(dl.tensor({ 0.3, -0.9 }):to(d))
  end,
  conv_transpose3d = function(d)
    return F.conv_transpose3d(dl.arange(48):reshape(1, 2, 2, 3, 4):float():to(d), dl.ones(2, 1, 2, 2, 2):to(d),
                              { stride = 2, output_padding = 1 })
  end,
  max_pool3d_indices = function(d)
    return select(2, F.max_pool3d(dl.arange(96):reshape(1, 2, 3, 4, 4):float():to(d), 2, { return_indices = true }))
  end,
  avg_pool3d = function(d) return F.avg_pool3d(dl.arange(96):reshape(1, 2, 3, 4, 4):float():to(d), { 2, 3, 3 }, { padding = 1 }) end,
  trilinear = function(d)
    return F.interpolate(dl.arange(24):reshape(1, 1, 2, 3, 4):float():to(d), { size = { 3, 5, 2 }, mode = "trilinear" })
  end,
}

H.test("each function's result is on its operands' device, with the CPU's values", function()
  for name, f in pairs(CASES) do
    local got, want = f("cuda"), f("cpu")
    H.eq(got.device, "cuda:0", name .. " device")
    H.ok(dl.equal(got:cpu(), want), name .. " values")
  end
end)

H.test("distributions draw on their parameters' device", function()
  local D = dl.distributions
  H.eq(D.Normal(dl.zeros(2):cuda(), 1):rsample({ 3 }).device, "cuda:0")
  H.eq(D.Categorical({ probs = dl.ones(2, 3):cuda() }):sample({ 4 }).device, "cuda:0")
  H.eq(D.Bernoulli({ probs = dl.tensor({ 0.5 }):cuda() }):sample().device, "cuda:0")
  H.eq(D.MultivariateNormal(dl.zeros(2):cuda(), { scale_tril = dl.eye(2):cuda() }):sample().device, "cuda:0")
  H.eq(D.Uniform(dl.zeros(1):cuda(), 1):sample().device, "cuda:0")
  H.eq(D.VonMises(dl.zeros(2):cuda(), dl.tensor({ 1e-7, 3 }):cuda()):sample({ 4 }).device, "cuda:0")
  H.eq(D.Weibull(dl.ones(2):cuda(), 1.5):rsample().device, "cuda:0")
  H.eq(D.NegativeBinomial(dl.ones(2):cuda(), { probs = 0.3 }):sample().device, "cuda:0")
  H.eq(D.RelaxedOneHotCategorical(0.5, { logits = dl.zeros(3):cuda() }):rsample().device, "cuda:0")
  H.eq(D.FisherSnedecor(dl.ones(1):cuda() * 3, 5):rsample().device, "cuda:0")
  H.eq(D.Gamma(dl.ones(3):cuda(), 2):rsample().device, "cuda:0")
  H.eq(D.Dirichlet(dl.ones(3):cuda()):sample().device, "cuda:0")
  H.eq(D.Poisson(dl.tensor({ 2, 30 }):cuda()):sample().device, "cuda:0")
  H.eq(D.Binomial(4, { probs = dl.tensor({ 0.5 }):cuda() }):sample().device, "cuda:0")
  H.eq(D.Multinomial(4, { probs = dl.ones(3):cuda() }):sample().device, "cuda:0")
end)

H.test("layers and random draws on the device: transformers, PReLU, a clone, multinomial", function()
  dl.manual_seed(1)
  local t = nn.Transformer(8, 2, { num_encoder_layers = 1, num_decoder_layers = 1, dim_feedforward = 16,
                                   batch_first = true }):cuda()
  H.eq(t(on(dl.randn(2, 5, 8)), on(dl.randn(2, 3, 8))).device, "cuda:0")
  H.eq(nn.PReLU(3):cuda():clone().weight.device, "cuda:0")
  H.eq(nn.Upsample({ size = { 4, 4 } })(on(dl.randn(1, 1, 2, 2))).device, "cuda:0")
  local draws = dl.multinomial(on(dl.tensor({ 0.2, 0, 0.8 })), 50, { replacement = true })
  H.eq(draws.device, "cuda:0")
  H.ok(not draws:eq(2):any())
  H.eq(dl.multinomial(on(dl.tensor({ 1, 1, 1 })), 3).device, "cuda:0")
  H.eq(dl.bernoulli(on(dl.full({ 4 }, 0.5))).device, "cuda:0")
  H.eq(dl.normal(on(dl.zeros(3)), 1).device, "cuda:0")
  H.eq(nn.Dropout2d(0.5)(on(dl.ones(2, 3, 4, 4))).device, "cuda:0")
  local inorm = nn.InstanceNorm2d(2, { track_running_stats = true }):cuda()
  inorm(on(dl.randn(2, 2, 3, 3)))
  H.eq(inorm.running_mean.device, "cuda:0")
end)

H.run()
