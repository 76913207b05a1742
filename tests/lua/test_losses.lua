-- Losses and activations at their edges, as PyTorch 1.13's (what a differential audit
-- found): cross_entropy's K-dim, unbatched and probability-target forms, gelu's and
-- softplus's options, all-ignored means, binary_cross_entropy at 0 and 1, gaussian_nll's
-- variance shapes, kinks and NaN, ctc_loss's concatenated targets; and layer options
-- PyTorch's users expect (LSTM proj_size, MultiheadAttention kdim and vdim, Embedding
-- max_norm). Expected values are torch's, as literals.
local dl = require("dlua")
local H = require("harness")
local nn = dl.nn
local F = dl.nn.functional
-- ---- losses and activations: fixes from the differential audit against PyTorch 1.13 ---------

local f64 = { dtype = "float64" }
local function t64(v) return dl.tensor(v, f64) end
-- each value within tol of want's, relative to it (for values far below 1)
local function rel(got, want, tol, what)
  for i, w in ipairs(want) do
    H.ok(math.abs(got[i] - w) <= tol * math.abs(w), (what or "") .. " [" .. i .. "]: " .. got[i] .. " vs " .. w)
  end
end

H.test("cross_entropy and nll_loss take PyTorch's K-dim, unbatched and probability-target forms", function()
  local x = t64({ { { -1.682941969615793, -1.4347121817990456 }, { -1.1292849467900707, -0.778836684617301 },
                    { -0.3973386615901223, 0.0 } },
                  { { 0.3973386615901223, 0.7788366846173008 }, { 1.129284946790071, 1.4347121817990456 },
                    { 1.682941969615793, 1.8640781719344528 } } })
  local t = dl.tensor({ { 1, 3 }, { 2, 2 } }, { dtype = "int64" })
  local w = t64({ 0.5, 1, 2 })
  -- torch: F.cross_entropy(x, t, reduction='none'), x (2, 3, 2), t 0-based
  H.values(nn.cross_entropy(x, t, { reduction = "none" }),
           { { 1.8494704452170607, 0.5289347591992617 }, { 1.1695599578509093, 1.1168681934627902 } }, { tol = 1e-12 })
  -- torch: F.cross_entropy(x, t, weight=w, ignore_index=0, label_smoothing=0.1) and its gradient
  local function ce(v) return nn.cross_entropy(v, t, { weight = w, ignore_index = 1, label_smoothing = 0.1 }) end
  H.values(ce(x), 0.8364488742484233, { tol = 1e-12 })
  H.values(dl.grad(ce)(x), { { { 0, 0.06308229261556732 }, { 0, 0.12124389228037126 }, { 0, -0.18432618489593858 } },
                             { { 0.03379147345357025, 0.0390076816175067 }, { -0.15441368209518483, -0.15014375942685743 },
                               { 0.12062220864161463, 0.11113607780935077 } } }, { tol = 1e-12 })
  -- torch: F.nll_loss(x, t, reduction='none'), F.nll_loss(x, t, weight=w)
  H.values(nn.nll_loss(x, t, { reduction = "none" }),
           { { 1.682941969615793, 0 }, { -1.129284946790071, -1.4347121817990456 } }, { tol = 1e-12 })
  H.values(nn.nll_loss(x, t, { weight = w }), -0.38278358750693786, { tol = 1e-12 })
  -- unbatched: torch F.cross_entropy(x[0, :, 0], tensor(2)), a loss of no dims for 'none'
  local x1 = x:select(1, 1):select(2, 1)
  H.values(nn.cross_entropy(x1, dl.tensor(3, { dtype = "int64" })), 0.56386713719139, { tol = 1e-12 })
  H.shape(nn.cross_entropy(x1, dl.tensor(3, { dtype = "int64" }), { reduction = "none" }), {})
  -- probability targets: torch F.cross_entropy(x2, p, weight=w, label_smoothing=0.2), p softmax rows
  local x2 = x:select(3, 1)
  local p = t64({ { 0.09003057317038045, 0.2447284710547976, 0.6652409557748218 },
                  { 0.5465493872661796, 0.12195165230972885, 0.3314989604240915 } })
  local function cep(v) return nn.cross_entropy(v, p, { weight = w, label_smoothing = 0.2 }) end
  H.values(cep(x2), 1.1118257597679788, { tol = 1e-12 })
  H.values(dl.grad(cep)(x2), { { 0.08563912685392713, 0.07807025481407615, -0.1637093816680032 },
                               { -0.045337568330960594, 0.08554437428522951, -0.04020680595426891 } }, { tol = 1e-12 })
  H.values(nn.cross_entropy(x2, p, { reduction = "none" }), { 0.8587388351539005, 1.3860680240404732 }, { tol = 1e-12 })
  H.values(nn.cross_entropy(x2:select(1, 1), p:select(1, 1)), 0.8587388351539005, { tol = 1e-12 })
  -- torch: F.cross_entropy(x, stack([p, p.flip(0)], 2), reduction='sum')
  H.values(nn.cross_entropy(x, dl.stack({ p, p:flip(1) }, 3), { reduction = "sum" }), 4.543148301575328, { tol = 1e-12 })
  H.raises(function() nn.cross_entropy(x2, p, { ignore_index = 1 }) end,
           "cross_entropy: ignore_index is not supported for probability targets")
  H.raises(function() nn.cross_entropy(x2, p:select(2, 1)) end,
           "cross_entropy: expected integer class labels, or probability targets of the logits' shape (2, 3), got float64")
  H.raises(function() nn.nll_loss(x, dl.ones(2, 3):long()) end,
           "nll_loss: expected log_probs (N, C), (C) or (N, C, d1, ...) and labels without the C, got shapes (2, 3, 2) and (2, 3)")
end)

H.test("gelu's tanh approximation and softplus's beta and threshold are taken, as functions and layers", function()
  local F = nn.functional
  local xg = t64({ -5, -1, 0.5, 3 })
  -- torch: F.gelu(x, approximate='tanh'), its first and second derivatives
  local want = { -2.2917961972623857e-07, -0.15880800939172324, 0.34571400982514394, 2.996362607918227 }
  for _, f in ipairs({ function(v) return F.gelu(v, { approximate = "tanh" }) end, function(v) return F.gelu(v, "tanh") end,
                       nn.GELU("tanh"), nn.GELU({ approximate = "tanh" }) }) do
    H.values(f(xg), want, { tol = 1e-12 })
  end
  local d1 = dl.grad(function(v) return F.gelu(v, "tanh"):sum() end)
  H.values(d1(xg), { -1.5463619879596227e-06, -0.08296408384578252, 0.8673699035346424, 1.0115841666309695 }, { tol = 1e-12 })
  H.values(dl.grad(function(v) return d1(v):sum() end)(xg),
           { -9.934132224893722e-06, 0.24214819798377296, 0.615506895115985, -0.03176765888607492 }, { tol = 1e-12 })
  H.values(F.gelu(xg, "none"), F.gelu(xg):totable(), { tol = 0 })
  -- torch: F.softplus(x, 2, 10): x itself where 2 x > 10
  local xs = t64({ -3, 1, 4.9, 5.1 })
  want = { 0.0012378425688652247, 1.0634640055214863, 4.900027725031025, 5.1 }
  for _, f in ipairs({ function(v) return F.softplus(v, 2, 10) end, function(v) return F.softplus(v, { beta = 2, threshold = 10 }) end,
                       nn.Softplus(2, 10), nn.Softplus({ beta = 2, threshold = 10 }) }) do
    H.values(f(xs), want, { tol = 1e-12 })
  end
  H.values(dl.grad(function(v) return F.softplus(v, 2, 10):sum() end)(xs),
           { 0.0024726231566347748, 0.8807970779778824, 0.9999445514752772, 1 }, { tol = 1e-12 })
  -- torch: F.softplus(tensor([25., -1.])): the default threshold 20 too
  H.values(dl.grad(function(v) return F.softplus(v):sum() end)(t64({ 25, -1 })), { 1, 0.2689414213699951 }, { tol = 1e-12 })
  H.eq(tostring(nn.GELU("tanh")), 'GELU(approximate="tanh")')
  H.eq(tostring(nn.Softplus(2)), "Softplus(beta=2, threshold=20)")
  H.raises(function() nn.GELU("tan") end, 'GELU: approximate must be "none" or "tanh", got "tan"')
  H.raises(function() F.gelu(xg, { approx = "tanh" }) end, "gelu: unknown option 'approx'")
  H.raises(function() nn.Softplus({ beta = 2, thresh = 1 }) end, "Softplus: unknown option 'thresh'")
  H.raises(function() F.softplus(xg, "2") end, "softplus: expected a number (beta), got string")
  -- the other activation layers take no arguments (PyTorch's inplace would be dropped)
  H.raises(function() nn.ReLU(true) end, "ReLU: takes no arguments, got boolean")
  H.raises(function() nn.SELU(true) end, "SELU: takes no arguments, got boolean")
  H.eq(nn.Identity(54, { unused = 0.1 })(xg):totable(), xg:totable())
  H.values(nn.LeakyReLU({ negative_slope = 0.2 })(t64({ -1, 2 })), { -0.2, 2 }, { tol = 0 })
  H.raises(function() nn.LeakyReLU({ slope = 0.2 }) end, "LeakyReLU: unknown option 'slope'")
  -- integer inputs are refused as PyTorch's, naming the op
  local ints = dl.tensor({ { 1, 2 } }, { dtype = "int64" })
  H.raises(function() F.leaky_relu(ints) end, "leaky_relu: expected a floating-point tensor, got int64")
  H.raises(function() F.softmax(ints, 2) end, "softmax: expected a floating-point tensor, got int64")
  H.raises(function() nn.cross_entropy(ints, dl.tensor({ 1 }, { dtype = "int64" })) end,
           "cross_entropy: expected floating-point logits, got int64")
  H.raises(function() nn.cross_entropy(dl.randn(2, 3), dl.tensor({ 1, 2 }, { dtype = "int64" }), { weight = dl.ones(4) }) end,
           "cross_entropy: weight must be a (3) tensor, one per class, got shape (4,)")
end)

H.test("a mean over labels all ignored is NaN with a gradient of 0, as PyTorch's", function()
  local x = t64({ { 0.3, -1.2, 2.0 }, { 1.5, 0.1, -0.4 } })
  local y = dl.tensor({ 2, 2 }, { dtype = "int64" })
  local zero = { { 0, 0, 0 }, { 0, 0, 0 } }
  -- torch: F.cross_entropy(x, [1, 1], ignore_index=1, weight=...) / label_smoothing=0.1, F.nll_loss(...): nan, grad 0
  for name, f in pairs({
    weight = function(v) return nn.cross_entropy(v, y, { ignore_index = 2, weight = t64({ 1, 2, 3 }) }) end,
    label_smoothing = function(v) return nn.cross_entropy(v, y, { ignore_index = 2, label_smoothing = 0.1 }) end,
    nll_loss = function(v) return nn.nll_loss(v, y, { ignore_index = 2 }) end }) do
    local l = f(x):item()
    H.ok(l ~= l, name .. ": the loss is NaN")
    H.eq(dl.grad(f)(x):totable(), zero, name)
  end
  -- torch: F.cross_entropy(x, [0, 0], weight=[0, 2, 3]): kept labels of weight 0, a NaN gradient
  local g = dl.grad(function(v) return nn.cross_entropy(v, dl.tensor({ 1, 1 }, { dtype = "int64" }), { weight = t64({ 0, 2, 3 }) }) end)(x)
  local g11 = g:totable()[1][1]
  H.ok(g11 ~= g11, "a NaN gradient")
end)

H.test("binary_cross_entropy's gradient is PyTorch's at p = 0 and 1 and below e^-100", function()
  local p, y = t64({ 0, 1, 1e-13, 1e-50, 0.3 }), t64({ 1, 0, 1, 1, 0.8 })
  local function bce(v) return nn.binary_cross_entropy(v, y, { reduction = "none" }) end
  -- torch: F.binary_cross_entropy(p, y, reduction='none') and its gradient ((p - y) / max(p (1 - p), 1e-12),
  -- the 1e-12 a float32 there)
  H.values(bce(p), { 100, 100, 29.933606208922594, 100, 1.0345132322484956 }, { tol = 1e-12 })
  H.values(dl.grad(function(v) return bce(v):sum() end)(p),
           { -1000000003995.8029, 1000000003995.8029, -1000000003995.7028, -1000000003995.8029, -2.380952380952381 },
           { tol = 1e-8 })
  -- inside, the second derivative is still the logs' (torch: 9.297052154106472 at p = 0.3, y = 0.8, with
  -- 1e-12 added to p and 1 - p)
  local d1 = dl.grad(function(v) return nn.binary_cross_entropy(v, y:narrow(1, 5, 1), { reduction = "sum" }) end)
  H.values(dl.grad(function(v) return d1(v):sum() end)(p:narrow(1, 5, 1)), { 9.297052154106472 }, { tol = 1e-10 })
end)

H.test("gaussian_nll_loss takes one variance per row, as PyTorch's, and refuses a var of another size", function()
  local i, t = t64({ { 0, 1, 2 }, { 3, 4, 5 }, { 1, 1, 1 } }), t64({ { 1, 1, 1 }, { 2, 2, 2 }, { 0, 0, 0 } })
  local v = t64({ 1, 2, 4 })
  -- torch: F.gaussian_nll_loss(i, t, v, reduction='none'), v (3) for input (3, 3): v per row
  H.values(nn.gaussian_nll_loss(i, t, v, { reduction = "none" }),
           { { 0.5, 0, 0.5 }, { 0.5965735902799727, 1.3465735902799727, 2.5965735902799727 },
             { 0.8181471805599453, 0.8181471805599453, 0.8181471805599453 } }, { tol = 1e-12 })
  -- torch: F.gaussian_nll_loss(i, t, v.unsqueeze(1))
  H.values(nn.gaussian_nll_loss(i, t, v:unsqueeze(2)), 0.8882402569466393, { tol = 1e-12 })
  H.raises(function() nn.gaussian_nll_loss(i, t, dl.ones(2, f64)) end, "gaussian_nll_loss: var is of incorrect size")
  H.raises(function() nn.gaussian_nll_loss(i, t, dl.ones(3, 2, f64)) end, "gaussian_nll_loss: var is of incorrect size")
end)

H.test("elu, selu and celu gradients keep float32 accuracy far below 0", function()
  local F = nn.functional
  local x = dl.tensor({ -10, -20, -3 })
  -- torch (float64): the gradients of F.elu(x), F.selu(x), F.celu(x, 0.5)
  rel(dl.grad(function(v) return F.elu(v):sum() end)(x):totable(),
      { 4.5399929762484854e-05, 2.061153622438558e-09, 0.049787068367863944 }, 1e-6, "elu")
  rel(dl.grad(function(v) return F.selu(v):sum() end)(x):totable(),
      { 7.981758658994182e-05, 3.6237128249944113e-09, 0.08753061208026487 }, 1e-6, "selu")
  rel(dl.grad(function(v) return F.celu(v, 0.5):sum() end)(x):totable(),
      { 2.061153622438558e-09, 4.248354255291589e-18, 0.0024787521766663585 }, 1e-6, "celu")
end)

H.test("activations and margin losses at their kinks and at NaN, as PyTorch's", function()
  local F = nn.functional
  local function d1(f, v) return dl.grad(function(z) return f(z):sum() end)(t64(v)):totable() end
  local function d2(f, v)
    return dl.grad(function(x) return dl.grad(function(z) return f(z):sum() end)(x):sum() end)(t64(v)):totable()
  end
  -- torch: F.rrelu(x, 0.1, 0.3, training=False)'s gradient at 0 is the mean slope
  H.eq(d1(function(v) return F.rrelu(v, 0.1, 0.3) end, { 0, -1, 1 }), { 0.2, 0.2, 1 })
  -- torch: second derivatives 0 at the corners; first derivatives 1, 1.7580993408473766 (selu) and -1/2 (hardswish at -3)
  H.eq(d2(F.elu, { 0 }), { 0 })
  H.eq(d2(F.selu, { 0 }), { 0 })
  H.eq(d2(function(v) return F.celu(v, 2) end, { 0 }), { 0 })
  H.near(d1(F.selu, { 0 }), { 1.7580993408473766 }, 1e-15)
  H.near(d2(F.hardswish, { -3, -1, 3 }), { 0, 1 / 3, 0 }, 1e-15)
  H.near(d1(F.hardswish, { -3, -1 }), { -0.5, 1 / 6 }, 1e-15)
  -- the values alone (nothing recorded) are the recorded path's
  local xs = dl.tensor({ -30, -3, -1, 0, 3, 30 })
  H.eq(dl.no_grad(F.elu, xs):totable(), F.elu(xs):totable())
  H.eq(dl.no_grad(F.hardswish, xs):totable(), F.hardswish(xs):totable())
  -- torch: F.multi_margin_loss(x, [0]) and F.multilabel_margin_loss(x, [[0, -1, -1]]) at a margin of exactly 0
  H.eq(d1(function(v) return F.multi_margin_loss(v, dl.tensor({ 1 }, { dtype = "int64" })) end, { { 1, 0, -5 } }), { { 0, 0, 0 } })
  H.eq(d1(function(v) return F.multilabel_margin_loss(v, dl.tensor({ { 1, 0, 0 } }, { dtype = "int64" })) end, { { 1, 0, -5 } }),
       { { 0, 0, 0 } })
  -- torch: NaN stays NaN (threshold, hardshrink) and passes the incoming gradient
  local nan = 0 / 0
  local function isnan(t) local v = t:totable()[1] return v ~= v end
  H.ok(isnan(F.threshold(t64({ nan }), 1, -7)) and isnan(F.hardshrink(t64({ nan }), 1)))
  for name, f in pairs({ threshold = function(v) return F.threshold(v, 1, -7) end, hardshrink = function(v) return F.hardshrink(v, 1) end,
                         relu6 = F.relu6, hardtanh = F.hardtanh, elu = F.elu, hardswish = F.hardswish }) do
    H.eq(d1(f, { nan, 0.25 })[1], 1, name)
  end
  H.near(d1(F.selu, { nan })[1], 1.0507009873554805, 1e-15)
end)

H.test("embedding losses take y = 1 and -1 only, bce_with_logits' pos_weight form keeps small gradients", function()
  local F = nn.functional
  local a, b = t64({ { 1, 2 }, { 0.5, -1 }, { 2, 2 } }), t64({ { 2, 1 }, { 1, 1 }, { -1, 0.5 } })
  -- torch: F.cosine_embedding_loss(a, b, [0, 2, -1], reduction='none'); hinge_embedding_loss with y 0 and 2
  H.values(F.cosine_embedding_loss(a, b, t64({ 0, 2, -1 }), { reduction = "none" }), { 0, 0, 0 }, { tol = 0 })
  H.values(F.hinge_embedding_loss(t64({ 0.3, -0.5, 2, 0.4 }), t64({ 0, 2, 1, -1 }), { reduction = "none" }),
           { 1, 1, 2, 0.6 }, { tol = 1e-15 })
  -- torch (float32): the gradient of F.binary_cross_entropy_with_logits(x, 0, pos_weight=2, reduction='sum')
  local g = dl.grad(function(v) return F.bce_with_logits(v, dl.zeros(2), { pos_weight = 2, reduction = "sum" }) end)(dl.tensor({ -30, -3 }))
  rel(g:totable(), { 9.357623589846195e-14, 0.04742587357759476 }, 1e-6, "bce_with_logits")
  H.raises(function() F.triplet_margin_loss(dl.randn(2, 3), dl.randn(2, 3), dl.randn(2, 4)) end,
           "triplet_margin_loss: shapes (2, 3) and (2, 4) cannot be broadcast")
  H.raises(function() F.triplet_margin_loss(dl.randn(2, 3), dl.randn(2, 3), dl.randn(3)) end,
           "triplet_margin_loss: anchor, positive and negative must have the same number of dims")
end)

H.test("ctc_loss takes the targets concatenated (1-D, sum(target_lengths)) as PyTorch does", function()
  local logits = (dl.sin(dl.arange(0, 72, f64) * 0.7) * 2):reshape(6, 3, 4)
  local flat = dl.tensor({ 2, 3, 3, 4, 2, 4 }, { dtype = "int64" })
  local padded = dl.tensor({ { 2, 3, 3 }, { 4, 1, 1 }, { 2, 4, 1 } }, { dtype = "int64" })
  local in_len, tg_len = { 6, 4, 5 }, { 3, 1, 2 }
  local function loss(l, tg, red) return F.ctc_loss(l:log_softmax(3), tg, in_len, tg_len, { reduction = red }) end
  -- torch: logits = (sin(arange(72.) * 0.7) * 2).reshape(6, 3, 4); F.ctc_loss(logits.log_softmax(2),
  -- tensor([1, 2, 2, 3, 1, 3]), [6, 4, 5], [3, 1, 2], reduction=...), and its gradient (of .sum())
  H.near(loss(logits, flat, "none"):totable(), {5.595790927350488, 2.0982402680522028, 3.8973910886505774}, 1e-12, "none")
  H.near(loss(logits, padded, "none"):totable(), {5.595790927350488, 2.0982402680522028, 3.8973910886505774}, 1e-12, "none, padded")
  H.near(loss(logits, flat, "sum"):item(), 11.591422284053268, 1e-12, "sum")
  H.near(loss(logits, flat, "mean"):item(), 1.970733151609218, 1e-12, "mean")
  local g = dl.grad(function(l) return loss(l, flat, "mean") end)(logits)
  H.near(g:totable(), {{{-0.006313747634727043, -0.07529199165872597, 0.04576593132420354, 0.03583980796924947},
           {-0.07523385608677557, 0.05976896812145757, 0.021092162143601687, -0.0056272741782836784},
           {-0.01916000182128391, -0.12959276766225003, 0.05060702137861054, 0.0981457481049234}},
           {{0.006295656115630906, -0.010045493747487899, 0.0013796774249602698, 0.002370160206896723},
           {0.0039264117674287025, 0.01821023130180153, 0.0670543788270434, -0.08919102189627365},
           {0.0021157436706182573, -0.025620916431422704, 0.020401833092168097, 0.0031033396686363504}},
           {{-0.020835528617132296, -0.0034334210382331257, -0.047353154770881756, 0.07162210442624717},
           {-0.15004354741399406, 0.13265964391957402, 0.0970828992867695, -0.07969899579234947},
           {-0.014593646440207686, 0.006179359586143697, 0.022343891954025304, -0.013929605099961315}},
           {{-0.003100015398238976, 0.025170057975654508, -0.054921022581890605, 0.03285098000447507},
           {-0.09162093418174821, 0.05919105415132283, 0.022231635571221136, 0.010198244459204251},
           {0.0012934773156887, 0.014969183426292366, 0.05289124016846151, -0.06915390091044259}},
           {{-0.03252900137545012, 0.025045145845574355, 0.005043894614767738, 0.002439960915108026}, {0.0, 0.0,
           0.0, 0.0}, {-0.07242256344100204, 0.058213474311051935, 0.018633178490684004,
           -0.0044240893607339045}}, {{0.008009584670330954, 0.00857569858359581, -0.09036906166859943,
           0.07378377841467265}, {0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}}}, 1e-12, "mean gradient")
  -- torch: the same with targets tensor([1, 2, 2, 3]) and target_lengths [0, 3, 1], and
  -- tensor([]) and [0, 0, 0]
  H.near(F.ctc_loss(logits:log_softmax(3), flat:narrow(1, 1, 4), in_len, { 0, 3, 1 }, { reduction = "none" }):totable(),
         { 11.131749445836373, 7.572883939614243, 5.14998606693025 }, 1e-12, "an empty first target")
  local none = F.ctc_loss(logits:log_softmax(3), dl.tensor({}, { dtype = "int64" }), in_len, { 0, 0, 0 },
                          { reduction = "none" })
  H.near(none:totable(), { 11.131749445836373, 5.880021943631993, 9.743000316969155 }, 1e-12, "all empty")
  H.raises(function() loss(logits, flat:narrow(1, 1, 5), "sum") end,
           "ctc_loss: expected concatenated targets of sum(target_lengths) = 6 elements, got shape (5,)")
  H.raises(function() loss(logits, dl.ones(1, 6, { dtype = "int64" }), "sum") end,
           "ctc_loss: expected targets (N, S) with N = 3, or 1-D (sum(target_lengths)), got shape (1, 6)")
end)

-- ---- layer options --------------------------------------------------------------------------

-- Every parameter of m (in named_parameters order, i from 0) set to sin(0.37 k + i) / 2,
-- k its elements' row-major positions, the same in the torch scripts of the tests below.
local function sine_parameters(m)
  for i, np in ipairs(m:named_parameters()) do
    local p = np[2]
    p:assign(dl.sin(dl.arange(0, p:numel(), { dtype = p.dtype }):reshape(p.shape) * 0.37 + (i - 1)) * 0.5)
  end
end

local function grad_of(grads, v)
  for _, gv in ipairs(grads) do if rawequal(gv[2], v) then return gv[1] end end
end

H.test("LSTM proj_size: weight_hr projects h to proj_size, outputs and gradients match PyTorch", function()
  local m = nn.LSTM(3, 4, { num_layers = 2, proj_size = 2, bidirectional = true, batch_first = true }):to("float64")
  local got = {}
  for i, np in ipairs(m:named_parameters()) do got[i] = np[1] .. "(" .. table.concat(np[2].shape, ", ") .. ")" end
  H.eq(got[5], "weight_hr_l0(2, 4)")
  H.eq(got[7], "weight_hh_l0_reverse(16, 2)")
  H.eq(got[11], "weight_ih_l1(16, 4)")
  H.eq(#got, 20)
  H.eq(tostring(m), "LSTM(3, 4, proj_size=2, num_layers=2, batch_first=true, bidirectional=true, dropout=0)")
  sine_parameters(m)
  local xs = {}
  for b = 0, 1 do
    xs[b + 1] = {}
    for i = 0, 3 do
      xs[b + 1][i + 1] = {}
      for j = 0, 2 do
        xs[b + 1][i + 1][j + 1] = b == 0 and 0.1 * (i * 3 + j) - 0.5 or 0.05 * (i * 3 + j) * (-1) ^ j
      end
    end
  end
  local x = dl.Variable(dl.tensor(xs, { dtype = "float64" }))
  local h0, c0 = dl.full({ 4, 2, 2 }, 0.1, { dtype = "float64" }), dl.full({ 4, 2, 4 }, -0.2, { dtype = "float64" })
  local out, hn, cn
  local grads = dl.implicit_grad(function()
    out, hn, cn = m(x, h0, c0)
    return out:sum() + (hn * hn):sum() + cn:sum()
  end)()
  -- torch: m = nn.LSTM(3, 4, num_layers=2, proj_size=2, bidirectional=True, batch_first=True).double(),
  -- the same parameters; o, (h, c) = m(x, (h0, c0)); (o.sum() + (h * h).sum() + c.sum()).backward()
  H.near(out:totable(), {{{-0.15315085321669347, 0.08853361494971267, 0.15772822987391996, 0.20885041333459783},
           {-0.1596012886156286, 0.11294560969103982, 0.1300487080441131, 0.1834032870303211},
           {-0.16725903677996778, 0.12195622149296297, 0.08579069740434454, 0.13705832942113835},
           {-0.1671948788294343, 0.11992964440883899, 0.013982273298769415, 0.03655033407180423}},
           {{-0.14891883137972606, 0.07819797528321194, 0.15280054390063003, 0.2108372144716105},
           {-0.1558279466343429, 0.10019415586033396, 0.12964584081809633, 0.18557321059357457},
           {-0.16548580157034282, 0.11353322548042366, 0.08729383378489113, 0.13601542010352818},
           {-0.17132914833274465, 0.12185070725308844, 0.014147208894120251, 0.03419520543083182}}}, 1e-12, "out")
  H.near(hn:totable(), {{{0.3461151019301533, 0.19746498795186843}, {0.1888131914473166, 0.15977886952766565}},
           {{-0.046490938512485765, 0.37383216260272023}, {0.046030424792742226, 0.5154692380613497}},
           {{-0.1671948788294343, 0.11992964440883899}, {-0.17132914833274465, 0.12185070725308844}},
           {{0.15772822987391996, 0.20885041333459783}, {0.15280054390063003, 0.2108372144716105}}}, 1e-12, "h_n")
  H.near(cn:totable(), {{{-0.3744496962715608, -0.5778804197494269, -0.3283274916759036, 0.16200007279746514},
           {-0.44272897786268445, -0.3272388260044889, -0.08857953127459947, 0.151648502070833}},
           {{-1.224010671201578, -1.0717091309641025, -0.45717436533446654, -0.0734156953226359},
           {-0.97341623332464, -0.8542061482056506, -0.6778844690786672, -0.48458562814376693}},
           {{-0.03833469582862938, -0.5566239147615663, -0.4990063346768356, -0.47906811449104647},
           {-0.0319949490945381, -0.5422565535744407, -0.4848322879867311, -0.5254089198386755}},
           {{0.41227019982345936, 0.21143494335056306, 0.1990383095379303, 0.5846443100098629},
           {0.4467618499957765, 0.1651965209603194, 0.136915776805853, 0.6495650083389011}}}, 1e-12, "c_n")
  H.near(grad_of(grads, x):totable(), {{{0.020053527882356013, -0.11278615700328565, -0.23036076464231384}, {0.21184640564908727,
           0.14714121136339364, 0.06252114439029102}, {0.11049721894779953, 0.10483709838182101,
           0.084987768362924}, {-0.09623911510902396, -0.18116416227242965, -0.24156948995176655}},
           {{0.16009174567702325, 0.03568185842400163, -0.09355740097554373}, {0.1762595522912646,
           0.13723899780312224, 0.07964378877957001}, {0.10782416951176507, 0.1083902453373281,
           0.09428620993811081}, {-0.17952540754187643, -0.27489151765871556, -0.33305235043485293}}}, 1e-12, "x.grad")
  H.near(grad_of(grads, m.weight_hr_l1_reverse):totable(), {{1.1214929653268626, 0.29906389467817984, 0.17426318021469128, 0.892937296660675},
           {1.187389881426399, 0.31839585036398355, 0.1868078486399761, 0.9476278650449924}}, 1e-12, "weight_hr_l1_reverse.grad")
  H.near(grad_of(grads, m.weight_hh_l0):totable(), {{-0.027857730073801164, -0.02452760741259083}, {-0.032830551184790974, -0.028561309656074008},
           {-0.025710656476629085, -0.022054955486249025}, {0.027981497558838202, 0.026796620862053203},
           {-0.024474029421025088, -0.021449866812765256}, {-0.018606102738541245, -0.01611532596277659},
           {-0.005756390439659759, -0.0044370326609120304}, {0.013568122358117564, 0.012684866542299009},
           {0.17470579809361267, 0.15126733322395491}, {0.15523503847072795, 0.1381135877324265},
           {0.1716072980876179, 0.15946746782197602}, {0.13425468089491097, 0.13036352642900992},
           {0.017022303875036577, 0.01613269941211223}, {0.016493831995216538, 0.015225097706530175},
           {0.007693107279966726, 0.006794854202499325}, {-0.0036181708949141133, -0.0032558307894104297}}, 1e-12, "weight_hh_l0.grad")
  local h2, c2 = select(2, m(x:narrow(1, 1, 1):squeeze(1)))
  H.shape(h2, { 4, 2 })
  H.shape(c2, { 4, 4 })
  H.raises(function() m(x, c0, c0) end, "LSTM: expected h0 of shape (4, 2, 2), got shape (4, 2, 4)")
  H.raises(function() nn.LSTM(3, 4, { proj_size = 4 }) end, "LSTM: proj_size must be smaller than hidden_size (4), got 4")
  H.raises(function() nn.LSTM(3, 4, { proj_size = -1 }) end, "LSTM: proj_size must be an integer >= 0, got -1")
  H.raises(function() nn.GRU(3, 4, { proj_size = 2 }) end, "GRU: proj_size is only supported for LSTM, not RNN or GRU")
  H.eq(tostring(nn.LSTM(3, 4, { proj_size = 0 })):find("proj_size"), nil)
end)

H.test("MultiheadAttention kdim and vdim: separate q, k and v projections, as PyTorch's", function()
  local m = nn.MultiheadAttention(4, 2, { kdim = 3, vdim = 5, batch_first = true }):to("float64")
  local got = {}
  for i, np in ipairs(m:named_parameters()) do got[i] = np[1] .. "(" .. table.concat(np[2].shape, ", ") .. ")" end
  H.eq(table.concat(got, " "), "q_proj_weight(4, 4) k_proj_weight(4, 3) v_proj_weight(4, 5) in_proj_bias(12) "
       .. "out_proj.weight(4, 4) out_proj.bias(4)")
  sine_parameters(m)
  local function fill(n, L, d, f)
    local t = {}
    for b = 1, n do
      t[b] = {}
      for i = 0, L - 1 do
        t[b][i + 1] = {}
        for j = 0, d - 1 do t[b][i + 1][j + 1] = f(b, i, j) end
      end
    end
    return dl.Variable(dl.tensor(t, { dtype = "float64" }))
  end
  local q = fill(2, 3, 4, function(b, i, j) return b == 1 and 0.1 * (i * 4 + j) - 0.7 or 0.2 * ((i + j) % 3) - 0.1 end)
  local k = fill(2, 2, 3, function(b, i, j) return b == 1 and 0.15 * (i * 3 + j) - 0.5 or 0.1 * (i - j) end)
  local v = fill(2, 2, 5, function(b, i, j) return b == 1 and 0.05 * (i * 5 + j) - 0.2 or 0.3 * ((i * j) % 2) - 0.1 end)
  local kpm = dl.tensor({ { false, false }, { false, true } })
  local out, w
  local grads = dl.implicit_grad(function()
    out, w = m(q, k, v, { key_padding_mask = kpm })
    return (out * out):sum()
  end)()
  -- torch: m = nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True).double(), the same parameters;
  -- o, w = m(q, k, v, key_padding_mask=kpm); (o * o).sum().backward()
  H.near(out:totable(), {{{-0.6973723690801266, -0.2721476728912791, -0.01811215031028346, -0.16615960162862775},
           {-0.707323034697085, -0.26229276717540073, -0.006374364072922412, -0.1738859390529935},
           {-0.7164800737834676, -0.2525064514505135, 0.004557357302052478, -0.18168986090736042}},
           {{-0.6564973318116587, -0.3397665368339737, -0.07124941205498175, -0.1081768213698871},
           {-0.6564973318116587, -0.3397665368339737, -0.07124941205498175, -0.1081768213698871},
           {-0.6564973318116587, -0.3397665368339737, -0.07124941205498175, -0.1081768213698871}}}, 1e-12, "out")
  H.near(w:totable(), {{{0.5903650902954132, 0.4096349097045868}, {0.5003739307823347, 0.4996260692176653},
           {0.4104426545718314, 0.5895573454281686}}, {{1.0, 0.0}, {1.0, 0.0}, {1.0, 0.0}}}, 1e-12, "weights")
  H.near(grad_of(grads, q):totable(), {{{0.008779054657251378, 0.00815165353393249, 0.00642096434593128, 0.0038212277558137032},
           {0.009112326165092699, 0.008360842545123542, 0.006477758109157374, 0.0037179395016537706},
           {0.008720789623166171, 0.007859673907074365, 0.005934788199057132, 0.0032066567496475407}}, {{0.0,
           0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}}}, 1e-12, "q.grad")
  H.near(grad_of(grads, k):totable(), {{{-0.03243175312940799, -0.03592357034877529, -0.034553300846522625}, {0.03243175312940799,
           0.035923570348775295, 0.03455330084652264}}, {{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}}}, 1e-12, "k.grad")
  H.near(grad_of(grads, v):totable(), {{{0.20248768323605726, 0.1642279747854496, 0.10374078037588813, 0.029212758012451545,
           -0.04926907410472767}, {0.21172355291308426, 0.21709989164202204, 0.19309277849884346,
           0.1429514636250197, 0.07346233876518049}}, {{0.36490484539287216, 0.27652989528965416,
           0.15072792111936262, 0.004525629922208674, -0.14228918405422697}, {0.0, 0.0, 0.0, 0.0, 0.0}}}, 1e-12, "v.grad")
  H.near(grad_of(grads, m.k_proj_weight):totable(), {{-0.0006326803604479592, -0.00063268036044796, -0.0006326803604479608}, {0.021193893047512444,
           0.02119389304751244, 0.021193893047512444}, {-0.02148062290415876, -0.021480622904158767,
           -0.02148062290415877}, {-0.010618501068229582, -0.010618501068229584, -0.010618501068229588}}, 1e-12, "k_proj_weight.grad")
  H.near(grad_of(grads, m.v_proj_weight):totable(), {{-0.32300303625196236, -0.23678252607169886, -0.1505620158914353, -0.06434150571117181,
           0.021879004469091662}, {-0.3550755123243457, -0.25456531058735193, -0.15405510885035817,
           -0.053544907113364404, 0.046965294623629306}, {-0.31190304093101623, -0.2107067319277229,
           -0.10951042292442961, -0.008314113921136346, 0.0928821950821569}, {-0.25350189389740596,
           -0.16531592331806266, -0.07712995273871939, 0.011056017840623905, 0.09924198841996712}}, 1e-12, "v_proj_weight.grad")
  H.near(grad_of(grads, m.in_proj_bias):totable(), {-0.0781901189913275, -0.04902296267924655, -0.0500018893078695, -0.11532754419620639,
           -5.204170427930421e-18, -6.938893903907228e-18, -2.0816681711721685e-17, -1.0408340855860843e-17,
           3.54413014746926, 3.9209904941576843, 3.7671631716597926, 3.103467986439087}, 1e-12, "in_proj_bias.grad")
  H.raises(function() m(q, v, v) end, "MultiheadAttention: expected a query with 4 features, a key with 3 (kdim) and a "
           .. "value with 5 (vdim), got shapes (2, 3, 4), (2, 2, 5) and (2, 2, 5)")
  local same = nn.MultiheadAttention(4, 2, { kdim = 4, vdim = 4 })
  H.eq(same:named_parameters()[1][1], "in_proj_weight")
  H.eq(same.q_proj_weight, nil)
  H.ok(tostring(m):find("4, 2, kdim=3, vdim=5, batch_first=true, dropout=0", 1, true), tostring(m))
end)

H.test("Embedding and Embedding.from_pretrained take max_norm and norm_type: looked-up rows renormalised in place", function()
  local w = dl.arange(0, 15, { dtype = "float64" }):reshape(5, 3) / 4 - 1
  local idx = dl.tensor({ { 1, 4 }, { 4, 5 }, { 2, 2 } }, { dtype = "int64" })
  local e = nn.Embedding(5, 3, { max_norm = 1.5, padding_idx = 2 }):to("float64")
  e.weight:assign(w)
  H.eq(tostring(e), "Embedding(5, 3, padding_idx=2, max_norm=1.5)")
  local y
  local g = dl.implicit_grad(function() y = e(idx) return (y * y):sum() end)()
  -- torch: e = nn.Embedding(5, 3, max_norm=1.5, padding_idx=1).double(), weight w; y = e(idx - 1);
  -- (y * y).sum().backward()
  H.near(y:totable(), {{{-1.0, -0.75, -0.5}, {0.7150969146614681, 0.8581162975937616, 1.0011356805260552}},
           {{0.7150969146614681, 0.8581162975937616, 1.0011356805260552}, {0.7666518584080917,
           0.8624833407091032, 0.9583148230101146}}, {{-0.25, 0.0, 0.25}, {-0.25, 0.0, 0.25}}}, 1e-12, "y")
  H.near(e.weight:totable(), {{-1.0, -0.75, -0.5}, {-0.25, 0.0, 0.25}, {0.5, 0.75, 1.0}, {0.7150969146614681, 0.8581162975937616,
           1.0011356805260552}, {0.7666518584080917, 0.8624833407091032, 0.9583148230101146}}, 1e-12, "weight")
  H.near(g[1][1]:totable(), {{-2.0, -1.5, -1.0}, {0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}, {2.8603876586458723, 3.4324651903750465,
           4.004542722104221}, {1.5333037168161834, 1.7249666814182063, 1.9166296460202292}}, 1e-12, "weight.grad")
  local e2 = nn.Embedding.from_pretrained(w, { max_norm = 1, norm_type = 1, padding_idx = 3 })
  H.eq(tostring(e2), "Embedding(5, 3, padding_idx=3, max_norm=1, norm_type=1)")
  H.eq(e2.weight.trainable, false)
  local y2 = e2(idx)
  -- torch: e2 = nn.Embedding.from_pretrained(w, max_norm=1, norm_type=1, padding_idx=2); y2 = e2(idx - 1)
  H.near(e2.weight:totable(), {{-0.4444444246913589, -0.3333333185185192, -0.22222221234567946}, {-0.25, 0.0, 0.25}, {0.5, 0.75,
           1.0}, {0.2777777716049384, 0.33333332592592607, 0.38888888024691376}, {0.2962962919067216,
           0.3333333283950618, 0.37037036488340197}}, 1e-12, "from_pretrained weight")
  H.near(y2:totable(), {{{-0.4444444246913589, -0.3333333185185192, -0.22222221234567946}, {0.2777777716049384,
           0.33333332592592607, 0.38888888024691376}}, {{0.2777777716049384, 0.33333332592592607,
           0.38888888024691376}, {0.2962962919067216, 0.3333333283950618, 0.37037036488340197}}, {{-0.25, 0.0,
           0.25}, {-0.25, 0.0, 0.25}}}, 1e-12, "from_pretrained y")
  H.near(w:totable()[1], { -1, -0.75, -0.5 }, 0, "the weights given are copied, not renormalised")
  H.raises(function() nn.Embedding(5, 3, { max_norm = -1 }) end, "Embedding: max_norm must be a number >= 0, got -1")
  H.raises(function() nn.Embedding.from_pretrained(w, { norm_type = "2" }) end,
           "Embedding.from_pretrained: norm_type must be a number, got 2")
  -- torch: "Only Tensors of floating point and complex dtype can require gradients" (int64 weights)
  H.raises(function() nn.Embedding.from_pretrained(dl.ones(2, 2, { dtype = "int64" })) end,
           "Embedding.from_pretrained: expected floating-point weights, got int64")
end)

H.run()
