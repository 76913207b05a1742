-- Losses and activations at their edges, as PyTorch 1.13's (what a differential audit
-- found): cross_entropy's K-dim, unbatched and probability-target forms, gelu's and
-- softplus's options, all-ignored means, binary_cross_entropy at 0 and 1, gaussian_nll's
-- variance shapes, kinks and NaN. Expected values are torch's, as literals.
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

H.run()
