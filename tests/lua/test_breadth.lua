-- The training library's second round against PyTorch (tests/lua/ref/breadth_ref.lua,
-- written by tests/ref/gen_breadth_refs.py): losses and their gradients, Adagrad,
-- OneCycleLR, WarmupCosineLR, ReduceLROnPlateau, nn.utils.clip_grad_norm_; and the
-- initialisers of dl.nn.init by their defining properties.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.breadth_ref")
local nn, F, optim = dl.nn, dl.nn.functional, dl.optim

local f64 = { dtype = "float64" }
local function t64(v) return dl.tensor(v, f64) end

-- Checks a loss case: value of the named reduction, its gradients, and the other
-- reductions when the reference has them. call(inputs..., opts) makes the loss.
local function check_loss(case, call, opts, grad_of)
  grad_of = grad_of or { 1 }
  local xs = {}
  for i, v in ipairs(case.inputs) do xs[i] = t64(v) end
  local function loss(...)
    local args, given = { unpack(xs) }, { ... }
    for k, i in ipairs(grad_of) do args[i] = given[k] end
    args[#xs + 1] = opts
    return call(unpack(args, 1, #xs + 1))
  end
  local nums, picked = {}, {}
  for k, i in ipairs(grad_of) do
    nums[k], picked[k] = k, xs[i]
  end
  local r = { dl.value_and_grad(loss, nums)(unpack(picked)) }
  H.near(r[1]:item(), case.value, 1e-12)
  for k = 1, #grad_of do H.near(r[k + 1]:totable(), case.grads[k], 1e-12) end
  if case.sum then
    local o = {}
    for k, v in pairs(opts or {}) do o[k] = v end
    o.reduction = "sum"
    local args = { unpack(xs) }
    args[#args + 1] = o
    H.near(call(unpack(args)):item(), case.sum, 1e-12)
    o.reduction = "none"
    H.near(call(unpack(args)):totable(), case.none, 1e-12)
  end
end

H.test("nll_loss: plain, with class weights and an ignored label", function()
  local c = R.losses.nll
  local labels = dl.tensor(c.labels, { dtype = "int64" })
  check_loss(c, function(x, o) return F.nll_loss(x, labels, o) end, {})
  local cw = R.losses.nll_weight_ignore
  local lab2 = dl.tensor(cw.labels, { dtype = "int64" })
  check_loss(cw, function(x, o) return F.nll_loss(x, lab2, o) end, { weight = t64(cw.weight), ignore_index = -100 })
  -- log_softmax then nll_loss is cross_entropy
  local x = t64(c.inputs[1])
  H.near(F.nll_loss(dl.log_softmax(x, 2), labels):item(), F.cross_entropy(x, labels):item(), 1e-12)
  H.raises(function() F.nll_loss(x, dl.tensor({ 1, 2, 9, 1, 1, 1 }, { dtype = "int64" })) end,
           "nll_loss: labels must be class numbers from 1 to 4")
  H.raises(function() F.nll_loss(x, labels, { weight = dl.ones(3) }) end, "nll_loss: weight must be a (4) tensor")
end)

H.test("smooth_l1_loss and huber_loss", function()
  check_loss(R.losses.smooth_l1, function(a, b, o) return F.smooth_l1_loss(a, b, o) end, {})
  check_loss(R.losses.smooth_l1_beta, function(a, b, o) return F.smooth_l1_loss(a, b, o) end, { beta = 0.5 })
  check_loss(R.losses.smooth_l1_beta0, function(a, b, o) return F.smooth_l1_loss(a, b, o) end, { beta = 0 })
  check_loss(R.losses.huber, function(a, b, o) return nn.huber_loss(a, b, o) end, {})
  check_loss(R.losses.huber_delta, function(a, b, o) return F.huber_loss(a, b, o) end, { delta = 2 })
  H.raises(function() F.huber_loss(dl.ones(2), dl.ones(3)) end, "huber_loss: input and target shapes (2,) and (3,) differ")
  H.raises(function() F.smooth_l1_loss(dl.ones(2), dl.ones(2), { beta = -1 }) end, "smooth_l1_loss: beta must be a number >= 0")
end)

H.test("kl_div: batchmean, mean, log targets; a zero target adds nothing", function()
  check_loss(R.losses.kl_batchmean, function(a, b, o) return F.kl_div(a, b, o) end, { reduction = "batchmean" })
  check_loss(R.losses.kl_mean, function(a, b, o) return nn.kl_div(a, b, o) end, {})
  check_loss(R.losses.kl_log_target, function(a, b, o) return F.kl_div(a, b, o) end,
             { reduction = "sum", log_target = true })
  H.raises(function() F.mse_loss(dl.ones(2), dl.ones(2), { reduction = "batchmean" }) end,
           "mse_loss: reduction must be \"mean\", \"sum\" or \"none\", got batchmean")
end)

H.test("cosine_embedding_loss: both inputs' gradients", function()
  local c = R.losses.cosine_embedding
  local y = dl.tensor(c.y, { dtype = "int64" })
  check_loss(c, function(a, b, o) return F.cosine_embedding_loss(a, b, y, o) end, { margin = 0.2 }, { 1, 2 })
end)

H.test("Adagrad follows PyTorch's steps", function()
  for name, c in pairs(R.adagrad) do
    local w = dl.Variable(t64(c.w0), "w")
    local opt = optim.Adagrad(c.opts)
    for i, g in ipairs(c.grads) do
      opt:apply_gradients({ { t64(g), w } })
      H.near(w:totable(), c.after[i], 1e-12, name .. " step " .. i)
    end
  end
  H.raises(function() optim.Adagrad({ lr_decay = -1 }) end, "Adagrad: lr_decay must be a number >= 0")
end)

-- Runs a reference's LBFGS steps on loss(v) (v a Variable from p0) and compares each
-- step's returned loss and parameters; returns the Variable and the optimizer.
local function check_lbfgs(c, loss, tol, what)
  local v = dl.Variable(t64(c.p0), "v")
  local opt = optim.LBFGS(c.opts)
  for i = 1, #c.losses do
    local l = opt:minimize(function() return loss(v) end, { v })
    H.near(l:item(), c.losses[i], tol, what .. " step " .. i)
    H.near(v:totable(), c.params[i], tol, what .. " step " .. i)
  end
  return v, opt
end

H.test("LBFGS follows PyTorch's iterates (Rosenbrock, least squares, strong Wolfe)", function()
  local L = R.lbfgs
  local function rosen(p) return (1 - p[1]) ^ 2 + 100 * (p[2] - p[1] ^ 2) ^ 2 end
  -- (the valley is ill-conditioned: rounding differences of the two sides' dot products
  -- grow over the 20 iterations of a step to about 1e-8)
  check_lbfgs(L.rosenbrock, rosen, 1e-6, "rosenbrock")
  local A, b = t64(L.least_squares.A), t64(L.least_squares.b)
  local _, opt2 = check_lbfgs(L.least_squares, function(w) return ((A:matmul(w) - b) ^ 2):sum() end, 1e-9,
                              "least squares")
  -- with the strong Wolfe line search: Rosenbrock's minimum in a few steps
  local pw = check_lbfgs(L.rosenbrock_wolfe, rosen, 1e-6, "strong_wolfe")
  H.near(pw:totable(), { 1, 1 }, 1e-4, "the minimum")
  H.raises(function() opt2:apply_gradients({}) end, "LBFGS: it evaluates the loss several times a step")
  H.raises(function() optim.LBFGS({ line_search_fn = "backtracking" }) end,
           "LBFGS: line_search_fn must be nil or \"strong_wolfe\", got backtracking")
end)

H.test("OneCycleLR: lr and momentum at every step, cosine and linear three-phase", function()
  local c = R.schedules.one_cycle_cos
  local opt = optim.SGD({ lr = 0.1, momentum = 0.9 })
  local s = optim.OneCycleLR(opt, 1.0, 20)
  H.near(opt.lr, c.lrs[1], 1e-12)
  H.near(opt.momentum, c.momentum[1], 1e-12)
  for i = 2, #c.lrs do
    s:step()
    H.near(opt.lr, c.lrs[i], 1e-12, "step " .. (i - 1))
    H.near(opt.momentum, c.momentum[i], 1e-12)
  end
  H.raises(function() s:step() end, "OneCycleLR: stepped 21 times, more than total_steps (20)")
  local c3 = R.schedules.one_cycle_linear_three
  local adam = optim.Adam({ lr = 0.1 })
  local s3 = optim.OneCycleLR(adam, 0.5, 15, { anneal_strategy = "linear", three_phase = true, pct_start = 0.4 })
  H.near(adam.lr, c3.lrs[1], 1e-12)
  for i = 2, #c3.lrs do
    s3:step()
    H.near(adam.lr, c3.lrs[i], 1e-12, "step " .. (i - 1))
    H.near(adam.betas[1], c3.momentum[i], 1e-12)
  end
  H.raises(function() optim.OneCycleLR(optim.SGD({}), 1, 10, { anneal_strategy = "step" }) end,
           "OneCycleLR: anneal_strategy must be cos or linear")
end)

H.test("WarmupCosineLR is the transformer schedule", function()
  local c = R.schedules.warmup_cosine
  local opt = optim.SGD({ lr = c.base })
  local s = optim.WarmupCosineLR(opt, c.warmup, c.total)
  H.near(opt.lr, c.lrs[1], 1e-15)
  for i = 2, #c.lrs do
    s:step()
    H.near(opt.lr, c.lrs[i], 1e-12, "step " .. (i - 1))
  end
end)

H.test("ReduceLROnPlateau: min with cooldown and a floor, max with an absolute threshold", function()
  for _, case in ipairs({ { R.schedules.plateau_min, { patience = 2, factor = 0.5, cooldown = 1, min_lr = 0.01 } },
                          { R.schedules.plateau_max_abs, { mode = "max", patience = 1, threshold = 0.05,
                                                           threshold_mode = "abs" } } }) do
    local c, o = case[1], case[2]
    local opt = optim.SGD({ lr = 0.1 })
    local s = optim.ReduceLROnPlateau(opt, o)
    for i, m in ipairs(c.metrics) do
      s:step(m)
      H.near(opt.lr, c.lrs[i], 1e-15, "evaluation " .. i)
    end
    local s2 = optim.ReduceLROnPlateau(optim.SGD({ lr = 0.1 }), o)
    s2:load_state_dict(s:state_dict())
    H.eq(s2.best, s.best)
  end
  H.raises(function() optim.ReduceLROnPlateau(optim.SGD({}), { factor = 2 }) end,
           "ReduceLROnPlateau: factor must be in (0, 1)")
end)

H.test("clip_grad_norm_ scales the gradients in place and returns the norm before", function()
  for name, c in pairs(R.clip) do
    local gs = {}
    for i, g in ipairs(c.grads) do gs[i] = t64(g) end
    -- as {gradient, Variable} pairs, as dl.implicit_grad gives them
    local pairs_ = {}
    for i, g in ipairs(gs) do pairs_[i] = { g, dl.Variable(dl.zeros_like(g)) } end
    local norm = nn.utils.clip_grad_norm_(pairs_, c.max_norm, c.norm_type)
    H.near(norm:item(), c.norm, 1e-12, name)
    for i, g in ipairs(gs) do H.near(g:totable(), c.clipped[i], 1e-12, name) end
  end
end)

H.test("clip_grad_value_, parameters_to_vector and vector_to_parameters", function()
  local g = { { dl.tensor({ -5, 0.2, 3 }), "a" }, dl.tensor({ { 2, -0.5 } }) }
  nn.utils.clip_grad_value_(g, 1)
  H.values(g[1][1], { -1, 0.2, 1 }, { dtype = "float32", tol = 1e-7 })
  H.values(g[2], { { 1, -0.5 } })
  local net = nn.Sequential{ nn.Linear(3, 2), nn.Linear(2, 1) }
  local v = nn.utils.parameters_to_vector(net)
  H.eq(v:numel(), 3 * 2 + 2 + 2 + 1)
  H.ok(dl.equal(v:narrow(1, 1, 6), net[1].weight:reshape(-1)))
  nn.utils.vector_to_parameters(dl.arange(11):float(), net)
  H.values(net[2].bias, { 10 })
  H.values(net[1].weight, { { 0, 1, 2 }, { 3, 4, 5 } })
  H.raises(function() nn.utils.vector_to_parameters(dl.ones(3), net) end,
           "vector_to_parameters: the vector has 3 elements for parameters of 11")
  H.raises(function() nn.utils.clip_grad_value_(g, -1) end, "clip_grad_value_: clip_value must be a number >= 0, got -1")
  -- the gradient of a sum is an expanded view: clipped all the same (torch: x.sum().backward(),
  -- clip_grad_norm_([x], 0.1) scales x.grad = ones(3, 4) by 0.1 / (sqrt(12) + 1e-6))
  local w = dl.Variable(dl.ones(3, 4))
  local gw = dl.implicit_grad(function() return w:sum() end)()
  local held = gw[1][1]
  H.near(nn.utils.clip_grad_norm_(gw, 0.1):item(), math.sqrt(12), 1e-6)
  H.near(held:totable()[2][3], 0.1 / (math.sqrt(12) + 1e-6), 1e-7)
  H.near(held:sum():item(), 12 * 0.1 / (math.sqrt(12) + 1e-6), 1e-5)   -- each element once
  local gv = dl.implicit_grad(function() return (w * 3):mean() end)()
  nn.utils.clip_grad_value_(gv, 0.1)
  -- a 0-dim gradient and an expanded view of its memory (what the engine gives for b and a of
  -- a:sum() + b) are each scaled once: torch gives 1 / sqrt(7) for both
  local gy, gx = dl.grad(function(b, a) return a:sum() + b end, { 1, 2 })(dl.tensor(1), dl.ones(2, 3))
  nn.utils.clip_grad_norm_({ gy, gx }, 1.0)
  H.near(gy:item(), 1 / math.sqrt(7), 1e-6)
  H.near(gx:totable()[2][3], 1 / math.sqrt(7), 1e-6)
  H.values(gv[1][1], { { 0.1, 0.1, 0.1, 0.1 }, { 0.1, 0.1, 0.1, 0.1 }, { 0.1, 0.1, 0.1, 0.1 } }, { tol = 1e-7 })
end)

H.test("RNN, LSTM and GRU layers: outputs, final states and gradients as PyTorch's", function()
  local made = {
    lstm_2layer_bi_batch_first = function() return nn.LSTM(3, 5, { num_layers = 2, bidirectional = true, batch_first = true }) end,
    gru_1layer = function() return nn.GRU(3, 4) end,
    rnn_relu_2layer_unbatched = function() return nn.RNN(3, 4, { num_layers = 2, nonlinearity = "relu" }) end,
  }
  for name, c in pairs(R.recurrent) do
    local net = made[name]():to("float64")
    local names = {}
    for _, p in ipairs(net:named_parameters()) do names[#names + 1] = p[1] end
    local want = 0
    for _ in pairs(c.params) do want = want + 1 end
    H.eq(#names, want, name .. ": PyTorch's parameters")
    for k, v in pairs(c.params) do dl.no_grad(function() net[k]:copy_(t64(v)) end) end
    local x = t64(c.x)
    local h0 = c.h0 and t64(c.h0) or nil
    local c0 = c.c0 and t64(c.c0) or nil
    local function total(xx)
      local y, hn, cn = net(xx, h0, c0)
      local s = (y * y):sum() + hn:sum()
      if cn then s = s + cn:sum() end
      return s, y, hn, cn
    end
    local y, hn, cn = net(x, h0, c0)
    H.near(y:totable(), c.y, 1e-12, name)
    H.near(hn:totable(), c.hn, 1e-12, name)
    if c.cn then H.near(cn:totable(), c.cn, 1e-12, name) end
    local gx = dl.grad(function(xx) return (total(xx)) end)(x)
    H.near(gx:totable(), c.gx, 1e-10, name)
    local grads = dl.implicit_grad(function() return (total(x)) end)()
    local gw
    for _, p in ipairs(grads) do if rawequal(p[2], net[c.wname]) then gw = p[1] end end
    H.near(gw:totable(), c.gw, 1e-10, name .. " " .. c.wname)
  end
  local lstm = nn.LSTM(4, 6, { dropout = 0.5, num_layers = 2 })
  H.raises(function() lstm(dl.randn(3, 2, 5)) end, "LSTM: expected input of size 4 in its last dim, got shape (3, 2, 5)")
  H.raises(function() lstm(dl.randn(3, 2, 4), dl.zeros(1, 2, 6), dl.zeros(2, 2, 6)) end,
           "LSTM: expected h0 of shape (2, 2, 6), got shape (1, 2, 6)")
  H.raises(function() nn.GRU(4, 6, { nonlinearity = "relu" }) end, "GRU: unknown option 'nonlinearity'")
  lstm:eval()
  local a = lstm(dl.ones(3, 2, 4))
  H.near(lstm(dl.ones(3, 2, 4)):totable(), a:totable(), 0, "no dropout in eval mode")
  H.ok(tostring(lstm):find("LSTM(4, 6, num_layers=2", 1, true) ~= nil, tostring(lstm))
end)

H.test("lstm_gates: the gates' formula in one op, its gradients the composition's", function()
  local F = nn.functional
  dl.manual_seed(11)
  local function composed(a, c)
    local H4 = a:size(-1)
    local hd = H4 / 4
    local i, f = dl.sigmoid(a:narrow(-1, 1, hd)), dl.sigmoid(a:narrow(-1, hd + 1, hd))
    local g, o = dl.tanh(a:narrow(-1, 2 * hd + 1, hd)), dl.sigmoid(a:narrow(-1, 3 * hd + 1, hd))
    local c2 = f * c + i * g
    return o * dl.tanh(c2), c2
  end
  for _, case in ipairs({ { { 2, 3, 40 }, { 2, 3, 10 }, "float32" }, { { 64, 1024 }, { 64, 256 }, "float32" },
                          { { 36 }, { 9 }, "float64" } }) do
    local a, c = dl.randn(case[1], case[3]) * 2, dl.randn(case[2], case[3])
    local h1, c1 = F.lstm_gates(a, c)
    local h2, c2 = composed(a, c)
    -- The same float operations in the same order: the same bits.
    H.near(h1:totable(), h2:totable(), 0, "h'")
    H.near(c1:totable(), c2:totable(), 0, "c'")
    local wh, wc = dl.randn(case[2], case[3]), dl.randn(case[2], case[3])
    local function loss(fn) return function(x, y) local h, cc = fn(x, y); return (h * wh + cc * wc):sum() end end
    local ga1, gc1 = dl.grad(loss(F.lstm_gates), { 1, 2 })(a, c)
    local ga2, gc2 = dl.grad(loss(composed), { 1, 2 })(a, c)
    local tol = case[3] == "float32" and 1e-6 or 1e-14
    H.near(ga1:totable(), ga2:totable(), tol, "the gates' gradient")
    H.near(gc1:totable(), gc2:totable(), tol, "c's gradient")
  end
  -- Only h' used (c' gets no gradient), and a half-precision input stored as itself.
  local a, c = dl.randn(4, 8), dl.randn(4, 2)
  local g = dl.grad(function(x) return (F.lstm_gates(x, c)):sum() end)(a)
  local g2 = dl.grad(function(x) return (composed(x, c)):sum() end)(a)
  H.near(g:totable(), g2:totable(), 1e-6, "h' alone")
  local h16 = F.lstm_gates(a:to("float16"), c:to("float16"))
  H.eq(h16.dtype, "float16")
  H.near(h16:float():totable(), (F.lstm_gates(a:to("float16"):float(), c:to("float16"):float())):to("float16"):float():totable(), 0, "float16")
end)

H.test("layer_norm and group_norm: values and gradients as PyTorch's; large offsets stay exact", function()
  for _, name in ipairs({ "layer_norm", "group_norm" }) do
    local c = R.norms[name]
    local x, w, b, k = t64(c.x), t64(c.w), t64(c.b), t64(c.c)
    local function f(xx, ww, bb)
      if name == "layer_norm" then return F.layer_norm(xx, { 4, 5 }, ww, bb) end
      return F.group_norm(xx, 3, ww, bb)
    end
    H.near(f(x, w, b):totable(), c.y, 1e-12, name)
    local gx, gw, gb = dl.grad(function(xx, ww, bb) return (f(xx, ww, bb) * k):sum() end, { 1, 2, 3 })(x, w, b)
    H.near(gx:totable(), c.grads[1], 1e-10, name)
    H.near(gw:totable(), c.grads[2], 1e-10, name)
    H.near(gb:totable(), c.grads[3], 1e-10, name)
  end
  -- rows far from zero: the variance is taken about the mean, not as E[x^2] - E[x]^2
  local y = dl.layer_norm(dl.tensor({ { 1e4, 1e4 + 1, 1e4 + 2 } }), 3)
  H.near(y:totable(), { { -1.2247, 0, 1.2247 } }, 1e-3)
  local ln = nn.LayerNorm({ 4, 5 })
  H.eq(#ln:parameters(), 2)
  H.raises(function() ln(dl.randn(3, 5, 4)) end, "layer_norm: the normalised shape (4, 5) is not the end of the input's shape (3, 5, 4)")
  H.raises(function() nn.GroupNorm(4, 6) end, "GroupNorm: num_channels (6) must be a multiple of num_groups (4)")
  H.raises(function() F.layer_norm(dl.randn(2, 3), 3, dl.ones(4)) end, "layer_norm: expected weight of shape (3,)")
  -- second order (the gradient of a gradient norm)
  H.ok(dl.gradcheck(function(v) return F.layer_norm(v, 3):pow(3):sum() end, { dl.randn(2, 3, f64) }))
end)

-- Sets a module's parameters from a reference's table (keys: PyTorch's names with
-- "__" for ".").
local function load_params(net, params)
  for key, v in pairs(params) do
    local obj = net
    local names = {}
    for part in (key .. "__"):gmatch("(.-)__") do
      names[#names + 1] = part:match("^%d+$") and tonumber(part) + 1 or part   -- layers.0 is layers[1]
    end
    for i = 1, #names - 1 do obj = obj[names[i]] end
    local t = obj[names[#names]]
    assert(dl.is_tensor(t), key)
    dl.no_grad(function() t:copy_(t64(v)) end)
  end
end

H.test("scaled_dot_product_attention: masks, causal, gradients; logits of 1e4", function()
  for _, name in ipairs({ "sdpa_mask", "sdpa_causal" }) do
    local c = R.attention[name]
    local q, k, v, w = t64(c.q), t64(c.k), t64(c.v), t64(c.c)
    local opts = c.mask and { mask = dl.tensor(c.mask, { dtype = "bool" }) } or { causal = true }
    local y = F.scaled_dot_product_attention(q, k, v, opts)
    H.near(y:totable(), c.y, 1e-12, name)
    local g = { dl.grad(function(a, b, cc) return (F.scaled_dot_product_attention(a, b, cc, opts) * w):sum() end,
                        { 1, 2, 3 })(q, k, v) }
    for i = 1, 3 do H.near(g[i]:totable(), c.grads[i], 1e-10, name) end
  end
  local big = dl.tensor({ { { 1e4, 0 }, { 0, 1e4 } } })
  local y, wts = F.scaled_dot_product_attention(big, big, dl.tensor({ { { 1, 2 }, { 3, 4 } } }), { scale = 1 })
  H.values(wts, { { { 1, 0 }, { 0, 1 } } })
  H.values(y, { { { 1, 2 }, { 3, 4 } } })
  H.raises(function() F.scaled_dot_product_attention(dl.ones(2, 3), dl.ones(2, 4), dl.ones(2, 3)) end,
           "scaled_dot_product_attention: q (..., L, E), k (..., S, E) and v (..., S, Ev) do not match")
end)

H.test("MultiheadAttention and TransformerEncoderLayer as PyTorch's", function()
  local c = R.attention.mha
  local mha = nn.MultiheadAttention(8, 2):to("float64")
  load_params(mha, c.params)
  local opts = { attn_mask = t64(c.attn_mask), key_padding_mask = dl.tensor(c.kpm, { dtype = "bool" }) }
  local query, key, w = t64(c.query), t64(c.key), t64(c.c)
  local y, wts = mha(query, key, key, opts)
  H.near(y:totable(), c.y, 1e-12, "mha")
  H.near(wts:totable(), c.w, 1e-12, "mha weights")
  local gq = dl.grad(function(qq) return ((mha(qq, key, key, opts)) * w):sum() end)(query)
  H.near(gq:totable(), c.gq, 1e-10, "mha query gradient")
  local grads = dl.implicit_grad(function() return ((mha(query, key, key, opts)) * w):sum() end)()
  local gw
  for _, p in ipairs(grads) do if rawequal(p[2], mha.in_proj_weight) then gw = p[1] end end
  H.near(gw:totable(), c.gw, 1e-10, "mha in_proj_weight gradient")
  for name, kw in pairs({ encoder_post = {}, encoder_pre_gelu = { norm_first = true, activation = "gelu" } }) do
    local e = R.attention[name]
    local o = { dim_feedforward = 16, dropout = 0, batch_first = true }
    for k2, v2 in pairs(kw) do o[k2] = v2 end
    local enc = nn.TransformerEncoderLayer(8, 2, o):to("float64")
    enc:eval()
    local n = 0
    for _ in pairs(e.params) do n = n + 1 end
    H.eq(#enc:parameters(), n, name .. ": PyTorch's parameters")
    load_params(enc, e.params)
    local src, cc = t64(e.src), t64(e.c)
    H.near(enc(src):totable(), e.y, 1e-12, name)
    H.near(dl.grad(function(s2) return (enc(s2) * cc):sum() end)(src):totable(), e.gs, 1e-10, name)
  end
  H.raises(function() nn.MultiheadAttention(10, 3) end, "MultiheadAttention: embed_dim (10) must be a multiple of num_heads (3)")
  -- causal self-attention: the first position's output depends on itself alone
  local enc = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, batch_first = true })
  local x = dl.randn(1, 4, 8)
  local a = enc(x, { is_causal = true })
  local x2 = x:clone()
  x2:narrow(2, 3, 2):copy_(dl.randn(1, 2, 8))
  H.near(enc(x2, { is_causal = true }):narrow(2, 1, 2):totable(), a:narrow(2, 1, 2):totable(), 1e-6)
end)

H.test("TransformerDecoderLayer, the stacks and Transformer as PyTorch's, with gradients", function()
  local function count(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end
  local mask = nn.Transformer.generate_square_subsequent_mask(4, { dtype = "float64" })
  H.values(mask, { { 0, -math.huge, -math.huge, -math.huge }, { 0, 0, -math.huge, -math.huge },
                   { 0, 0, 0, -math.huge }, { 0, 0, 0, 0 } })
  for name, kw in pairs({ decoder_post = {}, decoder_pre_gelu = { norm_first = true, activation = "gelu" } }) do
    local c = R.transformer[name]
    local o = { dim_feedforward = 16, dropout = 0, batch_first = true }
    for k, v in pairs(kw) do o[k] = v end
    local dec = nn.TransformerDecoderLayer(8, 2, o):to("float64")
    dec:eval()
    H.eq(#dec:parameters(), count(c.params), name .. ": PyTorch's parameters")
    load_params(dec, c.params)
    local opts = { tgt_mask = mask, memory_key_padding_mask = dl.tensor(c.pad, { dtype = "bool" }) }
    local tgt, mem, cc = t64(c.tgt), t64(c.mem), t64(c.c)
    H.near(dec(tgt, mem, opts):totable(), c.y, 1e-12, name)
    local gt, gm = dl.grad(function(a, b) return (dec(a, b, opts) * cc):sum() end, { 1, 2 })(tgt, mem)
    H.near(gt:totable(), c.gt, 1e-10, name .. " target gradient")
    H.near(gm:totable(), c.gm, 1e-10, name .. " memory gradient")
  end
  local c = R.transformer.transformer
  local t = nn.Transformer(8, 2, { num_encoder_layers = 2, num_decoder_layers = 2, dim_feedforward = 16, dropout = 0,
                                   batch_first = true }):to("float64")
  t:eval()
  local names = {}
  for i, p in ipairs(t:named_parameters()) do names[i] = p[1] end
  local want = {}
  for i, n in ipairs(c.names) do   -- PyTorch's names, its lists counted from 1
    want[i] = n:gsub("%.(%d+)%.", function(d) return "." .. (tonumber(d) + 1) .. "." end)
  end
  H.eq(table.concat(names, " "), table.concat(want, " "))
  load_params(t, c.params)
  local pad = dl.tensor(c.pad, { dtype = "bool" })
  local opts = { tgt_mask = mask, src_key_padding_mask = pad, memory_key_padding_mask = pad }
  local src, tgt, cc = t64(c.src), t64(c.tgt), t64(c.c)
  H.near(t(src, tgt, opts):totable(), c.y, 1e-12, "transformer")
  local gs, gt = dl.grad(function(a, b) return (t(a, b, opts) * cc):sum() end, { 1, 2 })(src, tgt)
  H.near(gs:totable(), c.gs, 1e-10, "transformer source gradient")
  H.near(gt:totable(), c.gt, 1e-10, "transformer target gradient")
  -- the stacks hold copies of the layer they are given
  local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, batch_first = true })
  local enc = nn.TransformerEncoder(layer, 3, { norm = nn.LayerNorm(8) })
  H.eq(#enc.layers, 3)
  H.ok(not rawequal(enc.layers[1].linear1.weight, layer.linear1.weight))
  H.ok(dl.equal(enc.layers[2].linear1.weight, layer.linear1.weight))
  H.shape(enc(dl.randn(2, 5, 8), { is_causal = true }), { 2, 5, 8 })
  H.raises(function() nn.TransformerEncoder({}, 2) end, "TransformerEncoder: expected a layer (a module), got table")
  H.raises(function() nn.TransformerDecoderLayer(8, 2, { activation = "tanh" }) end,
           "TransformerDecoderLayer: activation must be relu or gelu, got tanh")
end)

H.test("Module:clone copies deeply: fresh Variables, buffers, sharing and frozen state kept", function()
  local lin = nn.Linear(3, 3)
  local net = nn.Sequential{ lin, nn.BatchNorm1d(3), nn.ReLU(), lin }
  net[2]:requires_grad_(false)
  local c = net:clone()
  H.eq(tostring(c), tostring(net))
  H.ok(not rawequal(c[1].weight, net[1].weight) and dl.equal(c[1].weight, net[1].weight))
  H.ok(rawequal(c[1], c[4]))                         -- shared in the original, shared in the copy
  H.eq(c[2].weight.trainable, false)
  H.eq(c[1].weight.name, "weight")
  local x = dl.randn(5, 3)
  net:eval(); c:eval()
  H.ok(dl.equal(c(x), net(x)))
  dl.no_grad(function() c[1].weight:fill_(0) end)
  H.ok(net[1].weight:abs():sum():item() > 0)
  c[2].running_mean:fill_(7)
  H.values(net[2].running_mean, { 0, 0, 0 })
end)

H.test("index_add, index_copy, index_fill and scatter as PyTorch's, with gradients for x and the source", function()
  for i, c in ipairs(R.indexed) do
    local what = ("%s case %d"):format(c.name, i)
    local x, cc = t64(c.x), t64(c.c)
    local idx = dl.tensor(c.idx, { dtype = "int64" })
    local function f(xx, src)
      if c.name == "index_add" then return xx:index_add(c.dim, idx, src, c.extra ~= "none" and c.extra or nil) end
      if c.name == "index_copy" then return xx:index_copy(c.dim, idx, src) end
      if c.name == "index_fill" then return xx:index_fill(c.dim, idx, c.extra) end
      return xx:scatter(c.dim, idx, src or c.extra)
    end
    if c.src ~= "none" then
      local src = t64(c.src)
      H.near(f(x, src):totable(), c.y, 1e-12, what)
      local gx, gs = dl.grad(function(a, b) return (f(a, b) * cc):sum() end, { 1, 2 })(x, src)
      H.near(gx:totable(), c.gx, 1e-12, what .. " x gradient")
      H.near(gs:totable(), c.gsrc, 1e-12, what .. " source gradient")
    else
      H.near(f(x):totable(), c.y, 1e-12, what)
      H.near(dl.grad(function(a) return (f(a) * cc):sum() end)(x):totable(), c.gx, 1e-12, what .. " x gradient")
    end
  end
  local z = dl.zeros(2, 3)
  H.ok(rawequal(z:index_fill_(2, { 3 }, 1), z))
  H.values(z, { { 0, 0, 1 }, { 0, 0, 1 } })
  z:index_add_(1, { 2 }, dl.ones(1, 3))
  z:scatter_(2, dl.tensor({ { 1 }, { 1 } }, { dtype = "int64" }), 4)
  H.values(z, { { 4, 0, 1 }, { 4, 1, 2 } })
  H.values(dl.index_copy(dl.zeros(3), 1, { 3 }, dl.tensor({ 5 })), { 0, 0, 5 })
  H.raises(function() z:index_add(1, { 1 }, dl.ones(2, 3)) end,
           "index_add: expected a source of shape (2, 3) with 1 along dim 1, got (2, 3)")
  H.raises(function() z:index_fill(3, { 1 }, 0) end, "index_fill: dimension 3 is out of range for a tensor of 2 dims")
  H.raises(function() z:index_copy(1, dl.tensor({ 1.5 }), dl.ones(1, 3)) end,
           "index_copy: expected an integer index tensor, got float32")
  H.raises(function() z:scatter(1, dl.tensor({ 1 }, { dtype = "int64" }), 0) end, "scatter: expected an index of 2 dims")
  H.raises(function() dl.zeros(2, { dtype = "int64" }):index_add_(1, { 1 }, dl.ones(1)) end,
           "index_add: expected a source of dtype int64 (x's), got float32")
  -- torch: x.index_fill_(0, [0], 0.5) of an int64 x writes 0 (the value in x's dtype)
  H.values(dl.full({ 2 }, 7, { dtype = "int64" }):index_fill_(1, { 1 }, 0.5), { 0, 7 }, { dtype = "int64" })
  -- a place written twice holds one write: a value stays the value, and of a source's
  -- values the last along the dim stands, as PyTorch's (summing them gave 2 and 8)
  local i2 = dl.tensor({ { 1, 1 }, { 3, 2 } }, { dtype = "int64" })
  H.values(dl.zeros(2, 4):scatter(2, i2, 1), { { 1, 0, 0, 0 }, { 0, 1, 1, 0 } })
  H.values(dl.zeros(2, 4):scatter(2, i2, dl.tensor({ { 5, 6 }, { 7, 8 } })), { { 6, 0, 0, 0 }, { 0, 8, 7, 0 } })
  H.values(dl.zeros(5):scatter(1, dl.tensor({ 2, 2, 4 }, { dtype = "int64" }), dl.tensor({ 1, 7, 3 })), { 0, 7, 0, 3, 0 })
  H.values(dl.zeros(3, { dtype = "int64" }):scatter(1, dl.tensor({ 2 }, { dtype = "int64" }), 2.5), { 0, 2, 0 },
           { dtype = "int64" })   -- (a value in x's dtype, as PyTorch's)
end)

H.test("lerp, hypot, logaddexp, fmod, frac, square, reciprocal, cross and cdist as PyTorch's, with gradients", function()
  local fns = {
    lerp_scalar = function(x, y) return dl.lerp(x, y, 0.75) end,
    hypot = dl.hypot, hypot_big = dl.hypot, logaddexp = dl.logaddexp, logaddexp_big = dl.logaddexp,
    fmod = dl.fmod, fmod_neg = dl.fmod,
    frac = function(x, y) return x:frac() * y end,
    square_reciprocal = function(x, y) return x:square() + y:reciprocal() end,
    cross = function(x, y) return dl.cross(x:narrow(2, 1, 3), y:narrow(2, 2, 3)) end,
    cdist = function(x, y) return dl.cdist(x, y:narrow(1, 1, 2)) end,
    cdist_p1 = function(x, y) return dl.linalg.cdist(x, y, 1) end,
  }
  for name, c in pairs(R.composed.functions) do
    local fn = fns[name]
    if name == "lerp_tensor" then
      local wt = t64(R.composed.weight)
      fn = function(x, y) return x:lerp(y, wt) end
    end
    local a, b, cc = t64(c.args[1]), t64(c.args[2]), t64(c.c)
    H.near(fn(a, b):totable(), c.y, 1e-12, name)
    local ga, gb = dl.grad(function(x, y) return (fn(x, y) * cc):sum() end, { 1, 2 })(a, b)
    H.near(ga:totable(), c.grads[1], 1e-10, name .. " gradient 1")
    H.near(gb:totable(), c.grads[2], 1e-10, name .. " gradient 2")
  end
  local z = dl.tensor({ 1, 2 }, { dtype = "float64" })
  H.ok(rawequal(z:lerp_(dl.tensor({ 3, 6 }, { dtype = "float64" }), 0.5), z))
  H.values(z, { 2, 4 })
  H.values(dl.tensor({ -1.5, 1.5, -0.0 }):trunc(), { -1, 1, 0 })
  H.values(dl.logical_xor(dl.tensor({ true, false }), dl.tensor({ true, true })), { false, true })
  H.raises(function() dl.cross(dl.ones(2), dl.ones(2)) end, "cross: expected vectors of 3 along dim -1")
  H.raises(function() dl.cdist(dl.ones(2, 3), dl.ones(2, 2)) end, "cdist: expected (..., P, M) and (..., R, M)")
end)

H.test("nansum, nanmean, var_mean, std_mean, aminmax, isclose, histc, bincount, bucketize, rot90 as PyTorch's", function()
  local s = R.composed.statistics
  local x, a = t64(s.x), t64(s.a)
  H.near(x:nansum():item(), s.nansum, 1e-12)
  H.near(x:nansum(2):totable(), s.nansum1, 1e-12)
  H.near(x:nanmean():item(), s.nanmean, 1e-12)
  H.near(dl.nanmean(x, 1):totable(), s.nanmean0, 1e-12)
  local v, m = dl.var_mean(a, 2)
  H.near(v:totable(), s.var1, 1e-12)
  H.near(m:totable(), s.mean1, 1e-12)
  local sv, sm = dl.std_mean(a, 1, { unbiased = false, keepdim = true })
  H.near(sv:totable(), s.std0, 1e-12)
  H.near(sm:totable(), s.mean0, 1e-12)
  local lo, hi = a:aminmax(2)
  H.values(lo, s.amin1)
  H.values(hi, s.amax1)
  H.values(dl.isclose(a, a + t64({ 1e-6, 1e-3, 0, 2e-5 })):long(), s.isclose)
  H.values(dl.histc(t64(s.hist_x), 7), s.histc)
  H.values(dl.histc(t64(s.hist_x), 5, -1, 2), s.histc_range)
  local bx = dl.tensor(s.bins_x, { dtype = "int64" }) + 1   -- dlua counts values from 1
  H.values(dl.bincount(bx, 10), s.bincount)
  H.near(dl.bincount(bx, t64({ 0.5, 1, 2, 3, 4, 5 })):totable(), s.bincount_w, 1e-12)
  local bk = R.composed.bucketize
  H.values(dl.bucketize(t64(bk.x), t64(bk.bounds)), bk.left)
  H.values(dl.bucketize(t64(bk.x), t64(bk.bounds), { right = true }), bk.right)
  local r = R.composed.rot90
  local t = t64(r.x)
  H.values(t:rot90(), r.k1)
  H.values(dl.rot90(t, 2, { 2, 3 }), r.k2)
  H.values(t:rot90(3, { 1, 3 }), r.k3)
  H.values(t:rot90(-1), r.km1)
  H.values(dl.tril_indices(3, 3), { { 1, 2, 2, 3, 3, 3 }, { 1, 1, 2, 1, 2, 3 } })
  H.values(dl.triu_indices(2, 3, 1), { { 1, 1, 2 }, { 2, 3, 3 } })
  H.values(t64({ { 1, 2 } }):fliplr(), { { 2, 1 } })
  dl.manual_seed(4)
  local n = dl.normal(dl.full({ 20000 }, 3), 0.5)
  H.near(n:mean():item(), 3, 0.02)
  H.near(n:std():item(), 0.5, 0.02)
  H.raises(function() dl.bincount(dl.tensor({ 0 }, { dtype = "int64" })) end, "bincount: values must be 1 or more")
  H.raises(function() dl.histc(dl.ones(2), 3, 2, 1) end, "histc: max (1) is below min (2)")
  H.raises(function() dl.normal(0, 1) end, "normal: give a shape when mean and std are numbers")
  H.raises(function() t:rot90(1, { 1, 1 }) end, "rot90: the two dims must differ, got 1 twice")
end)

H.test("tensordot, kron, block_diag, cartesian_prod and combinations as PyTorch's, with gradients", function()
  local r = R.products
  local a, b = t64(r.a), t64(r.b)
  local fns = {
    tensordot1 = function(x, y) return dl.tensordot(x, y, 1) end,
    tensordot_lists = function(x, y) return dl.tensordot(x, y, { { 2, 3 }, { 2, 1 } }) end,
    kron = function(x, y) return dl.kron(x[1], y:select(3, 1)) end,
    kron_ranks = function(x, y) return dl.kron(x, y[1][1]) end,
    block_diag = function(x, y) return dl.block_diag(x[1], y[1]:narrow(1, 1, 2), x[{ 2, 1, 1 }] * dl.ones({}, f64)) end,
  }
  for name, fn in pairs(fns) do
    local c = r.cases[name]
    H.near(fn(a, b):totable(), c.y, 1e-12, name)
    local ga, gb = dl.grad(function(x, y) return (fn(x, y) * t64(c.c)):sum() end, { 1, 2 })(a, b)
    H.near(ga:totable(), c.grads[1], 1e-12, name .. " gradient 1")
    H.near(gb:totable(), c.grads[2], 1e-12, name .. " gradient 2")
  end
  local t = dl.tensor({ 1, 2, 3, 4 })
  H.values(dl.cartesian_prod(t:narrow(1, 1, 2), t:narrow(1, 2, 3), t:narrow(1, 3, 2)), r.cartesian)
  H.values(dl.combinations(t), r.comb2)
  H.values(dl.combinations(t, 3), r.comb3)
  H.values(dl.combinations(t:narrow(1, 1, 3), 2, true), r.comb_rep)
  H.raises(function() dl.tensordot(a, b, { { 1 }, { 1 } }) end, "tensordot: dim 1 of a (2) and dim 1 of b (4) differ")
  H.raises(function() dl.block_diag(dl.zeros(2, 2, 2)) end, "block_diag: expected tensors of at most 2 dims")
  H.raises(function() dl.combinations(dl.zeros(2, 2)) end, "combinations: expected a 1-D tensor")
end)

H.test("conv1d and pad (every mode) as PyTorch's, with gradients", function()
  local c = R.conv1d_pad.conv1d
  local o = { stride = 2, padding = 1, dilation = 2, groups = 2 }
  local x, w, b, k = t64(c.x), t64(c.w), t64(c.b), t64(c.c)
  H.near(F.conv1d(x, w, b, o):totable(), c.y, 1e-12)
  local g = { dl.grad(function(a, ww, bb) return (F.conv1d(a, ww, bb, o) * k):sum() end, { 1, 2, 3 })(x, w, b) }
  for i = 1, 3 do H.near(g[i]:totable(), c.grads[i], 1e-10) end
  for _, mode in ipairs({ "constant", "reflect", "replicate", "circular" }) do
    local p = R.conv1d_pad["pad_" .. mode]
    local opts = { mode = mode, value = mode == "constant" and 1.5 or nil }
    local xx, kk = t64(p.x), t64(p.c)
    H.near(F.pad(xx, p.pad, opts):totable(), p.y, 0, mode)
    H.near(dl.grad(function(a) return (F.pad(a, p.pad, opts) * kk):sum() end)(xx):totable(), p.g, 1e-12, mode)
  end
  local conv = nn.Conv1d(4, 6, 3, { padding = "same" })
  H.eq(conv(dl.randn(2, 4, 9)).shape[3], 9)
  H.eq(conv(dl.randn(4, 9)).shape[1], 6, "unbatched")
  H.raises(function() F.pad(dl.ones(2, 3), { 3, 0 }, { mode = "reflect" }) end, "pad: reflect padding of 3 is too large for a dim of size 3")
  H.raises(function() nn.Conv1d(4, 6, 3)(dl.ones(2, 5, 9)) end, "Conv1d: expected input (N, 4, L) or (4, L), got shape (2, 5, 9)")
end)

H.test("einsum: every spec of the reference as torch.einsum, with gradients", function()
  for _, c in ipairs(R.einsum) do
    local xs = {}
    for i, v in ipairs(c.inputs) do xs[i] = t64(v) end
    local y = dl.einsum(c.spec, unpack(xs))
    H.eq(y.shape, c.shape, c.spec)
    H.near(y:totable(), c.y, 1e-12, c.spec)
    local k = t64(c.c)
    local nums = {}
    for i = 1, #xs do nums[i] = i end
    local g = { dl.grad(function(...) return (dl.einsum(c.spec, ...) * k):sum() end, nums)(unpack(xs)) }
    for i = 1, #xs do H.near(g[i]:totable(), c.grads[i], 1e-10, c.spec .. " gradient " .. i) end
  end
  H.raises(function() dl.einsum("ij,jk->ik", dl.ones(2, 3), dl.ones(4, 2)) end, "einsum: label j stands for sizes 3 and 4")
  H.raises(function() dl.einsum("ij->k", dl.ones(2, 3)) end, "einsum: output label k appears in no operand")
  H.raises(function() dl.einsum("ijk", dl.ones(2, 3)) end, "einsum: operand 1 ('ijk') has 3 labels for a tensor of 2 dims")
  H.raises(function() dl.einsum("ij,jk", dl.ones(2, 3)) end, "einsum: the spec 'ij,jk' has 2 operand terms for 1 tensors")
end)

H.test("cumsum along every dim as torch.cumsum, with gradients; integers give int64", function()
  for _, c in ipairs(R.cumsum.float) do
    local x, k = t64(c.x), t64(c.c)
    H.near(x:cumsum(c.dim):totable(), c.y, 1e-12, "dim " .. c.dim)
    H.near(dl.grad(function(v) return (dl.cumsum(v, c.dim) * k):sum() end)(x):totable(), c.g, 1e-12)
  end
  local ci = R.cumsum.int
  local y = dl.tensor(ci.x, { dtype = "int32" }):cumsum(1)
  H.eq(y.dtype, "int64")
  H.values(y, ci.y, { tol = 0 })
  H.values(dl.tensor({ 1, 2, 3 }):cumsum(-1), { 1, 3, 6 })
  H.ok(dl.gradcheck(function(v) return (v:cumsum(2) ^ 2):sum() end, { dl.randn(2, 3, f64) }))
end)

H.test("tile (repeat), roll, flip, triu, tril, repeat_interleave as PyTorch's, with gradients", function()
  local calls = {
    tile = function(x, a) return x:tile(a.reps) end,
    roll = function(x, a) return x:roll(a.shifts, a.dims) end,
    flip = function(x, a) return x:flip(a.dims) end,
    triu = function(x, a) return x:triu(a.k) end,
    tril = function(x, a) return dl.tril(x, a.k) end,
    repeat_interleave = function(x, a) return x:repeat_interleave(a.repeats, a.dim) end,
  }
  for _, c in ipairs(R.arrange) do
    local x, k = t64(c.x), t64(c.c)
    local f = calls[c.op]
    H.near(f(x, c.args):totable(), c.y, 0, c.op)
    H.near(dl.grad(function(v) return (f(v, c.args) * k):sum() end)(x):totable(), c.g, 1e-12, c.op)
  end
  local x = dl.arange(1, 7):reshape(2, 3)
  H.values(x["repeat"](x, 1, 2), { { 1, 2, 3, 1, 2, 3 }, { 4, 5, 6, 4, 5, 6 } })
  H.eq(dl.ones(2, 3, { dtype = "int64" }):triu().dtype, "int64")
  H.raises(function() x["repeat"](x, 2) end, "repeat: expected at least 2 repetitions")
  H.raises(function() x:roll({ 1, 2 }, { 1 }) end, "roll: 2 shifts for 1 dims")
  H.raises(function() x:flip({ 3 }) end, "flip: dimension 3 is out of range for a tensor of 2 dims")
  H.raises(function() dl.ones(3):triu() end, "triu: expected a tensor of 2 or more dims")
  -- repeat_interleave: counts as a tensor, PyTorch's counts-only form (positions 1-based)
  local i64 = { dtype = "int64" }
  H.values(x:repeat_interleave(dl.tensor({ 2, 0 }, i64), 1), { { 1, 2, 3 }, { 1, 2, 3 } })
  H.values(dl.repeat_interleave(dl.tensor({ 2, 0, 1 }, i64)), { 1, 1, 3 }, { dtype = "int64" })
  H.values(x:repeat_interleave(0, 2), { {}, {} }, { shape = { 2, 0 } })
  H.raises(function() x:repeat_interleave({ 1, 2 }, 2) end, "repeat_interleave: 2 repeats for 3 slices along dimension 2")
  H.raises(function() x:repeat_interleave({ 1, -1, 2 }, 2) end, "repeat_interleave: repeats must be >= 0")
  H.raises(function() x:repeat_interleave(1.5) end, "repeat_interleave: repeats must be an integer >= 0, got 1.5")
  H.raises(function() x:repeat_interleave("a") end, "repeat_interleave: expected a count, a list of counts or a 1-D integer tensor")
  H.raises(function() dl.repeat_interleave(dl.ones(3)) end, "repeat_interleave: with one argument, expected a 1-D integer tensor")
end)

H.test("split, chunk and unbind as PyTorch's: views, lengths, gradients, errors", function()
  local x = dl.arange(1, 13):reshape(3, 4)
  local function lengths(list, d)
    local t = {}
    for i, p in ipairs(list) do t[i] = p:size(d) end
    return t
  end
  -- The lengths torch.split / torch.chunk give (checked against PyTorch 1.13).
  H.eq(table.concat(lengths(dl.arange(5):split(2), 1), ","), "2,2,1")
  H.eq(table.concat(lengths(dl.arange(6):chunk(4), 1), ","), "2,2,2")
  H.eq(table.concat(lengths(dl.arange(5):chunk(3), 1), ","), "2,2,1")
  H.eq(table.concat(lengths(dl.arange(5):split({ 2, 0, 3 }), 1), ","), "2,0,3")
  H.eq(table.concat(lengths(dl.zeros(0):chunk(3), 1), ","), "0,0,0")
  H.eq(table.concat(lengths(dl.zeros(0):split(2), 1), ","), "0")
  H.eq(#dl.zeros(0, 3):unbind(1), 0)
  -- Values, dims from the end, and views of x's memory.
  local a, b = unpack(x:split({ 1, 3 }, -1))
  H.values(a, { { 1 }, { 5 }, { 9 } })
  H.values(b[3], { 10, 11, 12 })
  H.values(x:chunk(2, 1)[2], { { 9, 10, 11, 12 } })
  local cols = dl.unbind(x, 2)
  H.eq(#cols, 4)
  H.values(cols[3], { 3, 7, 11 })
  H.eq(cols[1]:data_ptr(), x:data_ptr(), "views of x's memory")
  H.eq(cols[3]:data_ptr() - cols[2]:data_ptr(), cols[2]:data_ptr() - cols[1]:data_ptr())
  -- Gradients: each piece's weight lands on its part of x.
  local w = dl.randn(6, 3, { dtype = "float64" })
  local v = dl.randn(6, 3, { dtype = "float64" })
  local g = dl.grad(function(t)
    local s = 0
    for i, p in ipairs(t:unbind(1)) do s = s + (p * w[i]):sum() end
    for _, p in ipairs(t:chunk(4, 1)) do s = s + (p * p):sum() end
    return s
  end)(v)
  H.near(g:totable(), (w + v * 2):totable(), 1e-12)
  H.ok(dl.gradcheck(function(t) return (t:split({ 1, 2 }, 2)[2] ^ 2):sum() end, { v }))
  -- Errors name the op and what was wrong.
  H.raises(function() dl.arange(5):split({ 2, 2 }) end, "split: the sizes sum to 4, but dimension 1 has length 5")
  H.raises(function() dl.arange(5):split(0) end, "split: the size must be >= 1 for dimension 1 of length 5")
  H.raises(function() dl.arange(5):split({ 2, -1, 4 }) end, "split: sizes must be >= 0, got -1")
  H.raises(function() dl.arange(5):split("a") end, "split: expected a size or a list of sizes, got string")
  H.raises(function() dl.arange(5):chunk(0) end, "chunk: the number of chunks must be an integer >= 1, got 0")
  H.raises(function() x:unbind(3) end, "unbind: dimension 3 is out of range for a tensor of 2 dims")
  H.raises(function() dl.split(5, 2) end, "split: expected a tensor, got number")
end)

H.test("nn.init: bounds, moments, orthogonality and gains", function()
  local init = nn.init
  dl.manual_seed(1)
  local w = dl.Variable(dl.zeros(256, 128), "w")
  H.ok(rawequal(init.xavier_uniform_(w), w))
  local bound = math.sqrt(6 / (256 + 128))
  H.ok(w:abs():max():item() <= bound + 1e-6)
  H.near(w:std():item(), bound / math.sqrt(3), 0.01)
  init.kaiming_normal_(w, { nonlinearity = "relu" })
  H.near(w:std():item(), math.sqrt(2 / 128), 0.005)          -- fan_in = size(2)
  init.kaiming_normal_(w, { mode = "fan_out" })
  H.near(w:std():item(), math.sqrt(2 / (1 + 0.01 ^ 2)) / math.sqrt(256), 0.005)
  init.kaiming_uniform_(w, { a = math.sqrt(5) })               -- nn.Linear's default: U(-1/sqrt(fan_in), ..)
  H.ok(w:abs():max():item() <= 1 / math.sqrt(128) + 1e-6)
  init.trunc_normal_(w, 0, 1, -0.5, 0.5)
  H.ok(w:abs():max():item() <= 0.5)
  local conv = dl.zeros(8, 4, 3, 3)
  local fi, fo = init.calculate_fans(conv)
  H.eq(fi, 36)
  H.eq(fo, 72)
  init.xavier_normal_(conv, init.calculate_gain("tanh"))
  H.near(conv:std():item(), 5 / 3 * math.sqrt(2 / (36 + 72)), 0.03)
  for _, shape in ipairs({ { 6, 4 }, { 4, 6 }, { 5, 2, 3 } }) do
    local q = init.orthogonal_(dl.zeros(shape, f64), 2)
    local m = q:reshape(shape[1], -1)
    local gram = m:size(1) >= m:size(2) and m:t():matmul(m) or m:matmul(m:t())
    H.near(gram:totable(), (dl.eye(gram:size(1), f64) * 4):totable(), 1e-12)
  end
  H.near(init.calculate_gain("leaky_relu", 0.2), math.sqrt(2 / 1.04), 1e-15)
  H.values(init.constant_(dl.zeros(3), 0.5), { 0.5, 0.5, 0.5 })
  H.values(init.eye_(dl.zeros(2, 3)), { { 1, 0, 0 }, { 0, 1, 0 } })
  H.raises(function() init.xavier_uniform_(dl.zeros(5)) end, "calculate_fans: fan in and fan out need a tensor of 2 or more dims")
  H.raises(function() init.calculate_gain("softsign") end, "calculate_gain: unknown nonlinearity 'softsign'")
  H.raises(function() init.normal_(dl.zeros(3, { dtype = "int64" })) end, "normal_: expected a float tensor, got int64")
end)

H.test("gelu: one fused op, its values and first and second derivatives (exact erf form)", function()
  -- x Phi(x), Phi(x) + x phi(x) and phi(x) (2 - x^2), from Python's math.erf.
  local x = t64({ -3, -1, 0, 0.5, 1, 2.5 })
  local y = { -0.00404969409489031, -0.15865525393145707, 0.0, 0.34573123063700656, 0.8413447460685429,
              2.4844758366855597 }
  local d1 = { -0.01194564720418392, -0.08331547058768629, 0.5, 0.8674951246561629, 1.0833154705876864,
               1.037611085908145 }
  local d2 = { -0.031022938883566054, 0.24197072451914337, 0.7978845608028654, 0.6161143218375241,
               0.24197072451914337, -0.07449527709766629 }
  H.values(F.gelu(x), y, { tol = 1e-15 })
  H.values(x:gelu(), y, { tol = 1e-15 })
  local g = dl.grad(function(v) return F.gelu(v):sum() end)
  H.values(g(x), d1, { tol = 1e-15 })
  H.values(dl.grad(function(v) return g(v):sum() end)(x), d2, { tol = 1e-14 })
  H.values(F.gelu(dl.tensor({ 1, -1 })), { 0.8413447460685429, -0.15865525393145707 }, { dtype = "float32", tol = 1e-7 })
end)

H.test("diagonal, diag, trace and outer as PyTorch's, with gradients", function()
  local m = dl.arange(1, 13):reshape(3, 4):float()
  H.values(m:diagonal(), { 1, 6, 11 })
  H.values(m:diagonal(1), { 2, 7, 12 })
  H.values(m:diagonal(-1), { 5, 10 })
  H.eq(m:diagonal(4):numel(), 0)
  H.values(dl.diag(m), { 1, 6, 11 })
  H.values(m:trace(), 18)
  H.values(dl.diag(dl.tensor({ 1, 2, 3 })), { { 1, 0, 0 }, { 0, 2, 0 }, { 0, 0, 3 } })
  H.values(dl.diag(dl.tensor({ 1, 2 }), 1), { { 0, 1, 0 }, { 0, 0, 2 }, { 0, 0, 0 } })
  H.values(dl.diag(dl.tensor({ 1, 2 }), -2), { { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, { 1, 0, 0, 0 }, { 0, 2, 0, 0 } })
  local b = dl.arange(24):reshape(2, 3, 4)
  H.values(b:diagonal(0, 2, 3), { { 0, 5, 10 }, { 12, 17, 22 } })   -- torch.diagonal(b, 0, 1, 2)
  H.values(b:diagonal(1, 1, 3), { { 1, 14 }, { 5, 18 }, { 9, 22 } })  -- torch.diagonal(b, 1, 0, 2)
  H.values(dl.outer(dl.tensor({ 1, 2 }), dl.tensor({ 3, 4, 5 })), { { 3, 4, 5 }, { 6, 8, 10 } })
  H.values(dl.grad(function(x) return x:trace() * 2 + x:diagonal(1):sum() end)(dl.zeros(3, 3)),
           { { 2, 1, 0 }, { 0, 2, 1 }, { 0, 0, 2 } })
  H.values(dl.grad(function(v) return (dl.diag(v, 1) * dl.arange(16):reshape(4, 4)):sum() end)(dl.zeros(3)), { 1, 6, 11 })
  H.ok(dl.gradcheck(function(a, c) return dl.outer(a, c):pow(2):sum() end, { t64({ 1, -2 }), t64({ 0.5, 3, -1 }) }))
  H.raises(function() return m:diagonal(0, 1, 1) end, "diagonal: dim1 and dim2 must differ, got both 1")
  H.raises(function() return dl.diag(dl.zeros(2, 2, 2)) end, "diag: expected a 1-D or 2-D tensor, got shape (2, 2, 2)")
  H.raises(function() return dl.zeros(3):trace() end, "trace: expected a 2-D tensor, got shape (3,)")
  H.raises(function() return dl.outer(m, m) end, "outer: expected two 1-D tensors, got shapes (3, 4) and (3, 4)")
end)

H.test("isnan, isinf, isfinite and nan_to_num as PyTorch's; integers hold neither", function()
  local inf = math.huge
  local x = dl.tensor({ 1, 0 / 0, inf, -inf, -2, 0 })
  H.values(x:isnan(), { false, true, false, false, false, false })
  H.values(x:isinf(), { false, false, true, true, false, false })
  H.values(x:isposinf(), { false, false, true, false, false, false })
  H.values(dl.isneginf(x), { false, false, false, true, false, false })
  H.values(x:isfinite(), { true, false, false, false, true, true })
  H.values(x:nan_to_num(), { 1, 0, 3.4028234663852886e38, -3.4028234663852886e38, -2, 0 })
  H.values(x:double():nan_to_num(), { 1, 0, 1.7976931348623157e308, -1.7976931348623157e308, -2, 0 })
  H.values(dl.nan_to_num(x, -1, 9, -9), { 1, -1, 9, -9, -2, 0 })
  H.values(x:half():nan_to_num():float(), { 1, 0, 65504, -65504, -2, 0 })
  local i = dl.tensor({ 1, 2 }, { dtype = "int64" })
  H.values(i:isnan(), { false, false })
  H.values(i:isfinite(), { true, true })
  H.values(i:nan_to_num(), { 1, 2 })
  H.values(dl.grad(function(v) return (v:nan_to_num() * 3):sum() end)(x), { 3, 0, 0, 0, 3, 3 })
  H.raises(function() return x:nan_to_num("a") end, "nan_to_num: nan must be a number, got string")
  H.raises(function() return dl.isnan(3) end, "isnan: expected a tensor, got number")
end)

H.test("bernoulli and multinomial draw in proportion, repeatably, and check their weights", function()
  dl.manual_seed(11)
  local p = dl.tensor({ 0.1, 0, 0.6, 0.3 })
  local n = 20000
  local s = dl.multinomial(p, n, { replacement = true })
  H.eq(s.dtype, "int64")
  local counts = { 0, 0, 0, 0 }
  for _, c in ipairs(s:totable()) do counts[c] = counts[c] + 1 end
  H.eq(counts[2], 0)                                    -- a zero weight is never drawn
  for k, want in ipairs({ 0.1, 0, 0.6, 0.3 }) do H.near(counts[k] / n, want, 0.015) end
  local first = { 0, 0, 0, 0 }
  for _ = 1, 2000 do
    local t = dl.multinomial(p * 10, 3):totable()           -- weights need not sum to 1
    first[t[1]] = first[t[1]] + 1
    H.ok(t[1] ~= t[2] and t[2] ~= t[3] and t[1] ~= t[3] and t[1] ~= 2 and t[2] ~= 2 and t[3] ~= 2)
  end
  for k, want in ipairs({ 0.1, 0, 0.6, 0.3 }) do H.near(first[k] / 2000, want, 0.04) end
  local rows = dl.multinomial(dl.tensor({ { 0, 0, 1 }, { 1, 0, 0 } }), 4, { replacement = true })
  H.values(rows, { { 3, 3, 3, 3 }, { 1, 1, 1, 1 } })
  dl.manual_seed(5)
  local a = dl.multinomial(p, 5, { replacement = true })
  dl.manual_seed(5)
  H.ok(dl.equal(a, dl.multinomial(p, 5, { replacement = true })))
  local b = dl.bernoulli(dl.full({ 20000 }, 0.3))
  H.eq(b.dtype, "float32")
  H.near(b:mean():item(), 0.3, 0.015)
  H.values(dl.bernoulli(dl.tensor({ 0, 1, 1, 0 })), { 0, 1, 1, 0 })
  H.raises(function() dl.multinomial(p, 4) end, "multinomial: a row has fewer than 4 categories of nonzero probability")
  H.raises(function() dl.multinomial(p, 5) end, "multinomial: cannot draw 5 samples from 4 categories without replacement")
  H.raises(function() dl.multinomial(dl.tensor({ 0, 0 }), 1) end, "multinomial: a row of probabilities sums to 0")
  H.raises(function() dl.multinomial(dl.tensor({ -1, 2 }), 1) end, "multinomial: probabilities must not be negative")
  H.raises(function() dl.multinomial(p, 0) end, "multinomial: the number of samples must be an integer >= 1, got 0")
  H.raises(function() dl.bernoulli(dl.tensor({ 1.5 })) end, "bernoulli: probabilities must lie in [0, 1]")
end)

H.test("PyTorch's other spellings: clamp_min/max, movedim, swapaxes, type_as, new_*; meshgrid, logspace", function()
  local x = dl.arange(24):reshape(2, 3, 4):float()
  H.ok(dl.equal(x:clamp_min(5), x:clamp(5)) and dl.equal(x:clamp_max(5), x:clamp(nil, 5)))
  H.shape(x:movedim(1, 3), { 3, 4, 2 })
  H.shape(x:movedim({ 1, 2 }, { 3, 1 }), { 3, 4, 2 })                 -- numpy.moveaxis(x, [0, 1], [2, 0])
  H.shape(dl.movedim(x, -1, 1), { 4, 2, 3 })
  H.ok(dl.equal(x:movedim(1, 3), x:permute(2, 3, 1)))
  H.ok(dl.equal(x:swapaxes(1, 3), x:transpose(1, 3)) and dl.equal(dl.swapdims(x, 1, 2), x:transpose(1, 2)))
  H.eq(x:type_as(dl.tensor({ 1 }, { dtype = "int64" })).dtype, "int64")
  local d = dl.ones(2, { dtype = "float64" })
  H.eq(d:new_zeros({ 3 }).dtype, "float64")
  H.values(d:new_ones(2), { 1, 1 })
  H.values(d:new_full({ 2 }, 7), { 7, 7 })
  H.eq(d:new_tensor({ 0.1 })[1], 0.1)
  dl.manual_seed(2)
  local w = dl.empty(200, 50)
  H.ok(rawequal(w:normal_(1, 0.02), w))
  H.near(w:mean():item(), 1, 0.005)
  H.near(w:std():item(), 0.02, 0.002)
  w:uniform_(-3, -2)
  H.ok(w:min():item() >= -3 and w:max():item() < -2)
  H.raises(function() x:movedim({ 1, 1 }, { 2, 3 }) end, "movedim: dimension 1 repeats in source")
  H.raises(function() x:movedim(1, { 2, 3 }) end, "movedim: 1 source dims for 2 destinations")
  H.raises(function() x:movedim(4, 1) end, "movedim: dimension 4 is out of range for a tensor of 3 dims")
  local X, Y = dl.meshgrid(dl.tensor({ 1, 2, 3 }), dl.tensor({ 10, 20 }))
  H.values(X, { { 1, 1 }, { 2, 2 }, { 3, 3 } })
  H.values(Y, { { 10, 20 }, { 10, 20 }, { 10, 20 } })
  local A, B = dl.meshgrid(dl.tensor({ 1, 2, 3 }), dl.tensor({ 10, 20 }), { indexing = "xy" })
  H.values(A, { { 1, 2, 3 }, { 1, 2, 3 } })
  H.values(B, { { 10, 10, 10 }, { 20, 20, 20 } })
  local P, Q, R3 = dl.meshgrid(dl.arange(2), dl.arange(3), dl.arange(4))
  H.shape(R3, { 2, 3, 4 })
  H.eq(Q[{ 2, 3, 1 }], 2)
  H.raises(function() dl.meshgrid(dl.zeros(2, 2)) end, "meshgrid: expected 1-D tensors, got shape (2, 2) for tensor 1")
  H.raises(function() dl.meshgrid(dl.zeros(2), { indexing = "yx" }) end, "meshgrid: indexing must be")
  H.values(dl.logspace(0, 3, 4), { 1, 10, 100, 1000 })
  H.values(dl.logspace(0, 4, 3, 2, { dtype = "float64" }), { 1, 4, 16 })
  H.eq(dl.logspace(-1, 1, 3, { dtype = "float64" })[1], 0.1)
end)

H.test("divisions with rounding, alpha, xlogy ... scans, shaping, BLAS forms, matrix_exp, cov, quantile as PyTorch's", function()
  local i64 = { dtype = "int64" }
  local grid_x = t64({ 0.0, 0.3, 1.1, 1.5, 2.9 })
  local idx = dl.tensor({ { 3, 1 }, { 2, 2 }, { 4, 3 } }, i64)
  local function q(v) return t64(v) end
  local FN = {
    div_floor = function(x, y) return dl.div(x, y, { rounding_mode = "floor" }) end,
    div_trunc = function(x, y) return x:div(y, { rounding_mode = "trunc" }) end,
    div_floor_small = function(x) return dl.floor_divide(x, 0.1) end,
    add_alpha = function(x, y) return dl.add(x, y, { alpha = -2.5 }) end,
    sub_alpha = function(x, y) return x:sub(y, { alpha = 0.5 }) end,
    xlogy = dl.xlogy, logit = dl.logit, logit_eps = function(x) return x:logit(0.2) end, sinc = dl.sinc,
    deg2rad = dl.deg2rad, copysign = dl.copysign, float_power = function(x) return dl.float_power(x, 2.5) end,
    cummax = function(x) return dl.cummax(x, 2) end, cummin = function(x) return x:cummin(2) end,
    cummax_dim1 = function(x) return dl.cummax(x, 1) end,
    logcumsumexp = function(x) return dl.logcumsumexp(x, 2) end,
    diff = function(x) return dl.diff(x, 2, 2) end,
    diff_prepend = function(x, y) return x:diff(1, 1, y:narrow(1, 1, 1), y) end,
    trapezoid_x = function(y) return dl.trapezoid(y, grid_x) end,
    trapezoid_dx = function(y) return dl.trapezoid(y, { dx = 0.25 }, 1) end,
    cumulative_trapezoid = function(y) return dl.cumulative_trapezoid(y, grid_x) end,
    take_along_dim = function(x) return dl.take_along_dim(x, idx, 2) end,
    take_along_flat = function(x) return x:take_along_dim(dl.tensor({ 12, 1, 6 }, i64)) end,
    diag_embed = function(x) return dl.diag_embed(x, 1) end,
    diag_embed_dims = function(x) return dl.diag_embed(x, -2, 1, 3) end,
    diagflat = function(x) return dl.diagflat(x:narrow(1, 1, 2):narrow(2, 1, 2), -1) end,
    broadcast_to = function(x) return dl.broadcast_to(x:narrow(2, 1, 1), { 2, 3, 5 }) end,
    mv = function(x, y) return dl.mv(x, y[1]) end,
    vdot = function(x, y) return dl.vdot(x[1], y[2]) end,
    addmm = function(x, y) return dl.addmm(x:narrow(2, 1, 3), x, y:t(), { beta = 0.5, alpha = -2 }) end,
    addmv = function(x, y) return x[1]:narrow(1, 1, 3):addmv(x, y[2], { beta = 2 }) end,
    baddbmm = function(x, y) return dl.baddbmm(x, y, x:transpose(2, 3), { alpha = 0.3 }) end,
    addbmm = function(x, y) return dl.addbmm(x[1], y, x, { beta = 0 }) end,
    matrix_power = function(x) return dl.linalg.matrix_power(x, 5) end,
    matrix_power_neg = function(x) return (x + dl.eye(3, f64) * 3):matrix_power(-2) end,
    matrix_exp = dl.linalg.matrix_exp, matrix_exp_big = dl.matrix_exp,
    multi_dot = function(x, y) return dl.linalg.multi_dot({ x[1], y:t(), x, y[2] }) end,
    cov = dl.cov,
    cov_weights = function(x)
      return dl.cov(x, { correction = 0, fweights = dl.tensor({ 1, 3, 2, 1 }, i64), aweights = q({ 0.5, 1, 2, 0.1 }) })
    end,
    corrcoef = dl.corrcoef,
    quantile = function(x) return dl.quantile(x, q({ 0.1, 0.5, 0.95 }), 2) end,
    quantile_all = function(x) return x:quantile(0.3) end,
    quantile_lower = function(x) return dl.quantile(x, 0.4, 1, true, "lower") end,
    quantile_midpoint = function(x) return dl.quantile(x, 0.4, 2, false, "midpoint") end,
    quantile_nearest = function(x) return dl.quantile(x, q({ 0.5, 0.75 }), 2, false, "nearest") end,
    quantile_nan = function(x) return dl.quantile(x, 0.5, 2) end,
    nanquantile = function(x) return dl.nanquantile(x, q({ 0.2, 0.9 }), 2) end,
  }
  local seen = 0
  for _, c in ipairs(R.more_functions) do
    local fn = H.ok(FN[c.name], "no function for case " .. c.name) and FN[c.name]
    local args = {}
    for i, v in ipairs(c.args) do args[i] = t64(v) end
    local ys = { fn(unpack(args)) }
    for i, want in ipairs(c.ys) do
      H.near(ys[i]:totable(), want, 1e-10, c.name .. " output " .. i)
    end
    if #c.grads > 0 then
      local cc = t64(c.c)
      local nums = {}
      for i = 1, #args do nums[i] = i end
      local grads = { dl.grad(function(...) return (fn(...) * cc):nan_to_num():sum() end, nums)(unpack(args)) }
      for i, want in ipairs(c.grads) do H.near(grads[i]:totable(), want, 1e-9, c.name .. " gradient " .. i) end
    end
    seen = seen + 1
  end
  H.eq(seen, 48)
  -- integers stay integers; integer division by zero is an error, as PyTorch's
  local n = dl.tensor({ -7, 7, 6 }, i64)
  H.values(dl.div(n, 2, { rounding_mode = "floor" }), { -4, 3, 3 })
  H.values(dl.div(n, -2, { rounding_mode = "trunc" }), { 3, -3, -3 })
  H.eq(dl.floor_divide(n, 2).dtype, "int64")
  H.raises(function() dl.floor_divide(n, 0) end, "floor_divide: integer division by zero")
  H.raises(function() dl.div(n, 2, { rounding_mode = "round" }) end, "div: rounding_mode must be floor or trunc, got round")
  H.raises(function() dl.mul(n, 2, { alpha = 2 }) end, "mul: expected two operands, got a third (table)")
  H.raises(function() dl.add(n, 2, { beta = 2 }) end, "add: unknown option 'beta'")
  H.values(dl.signbit(dl.tensor({ -0.0, 0, -1, 2 })), { true, false, true, false })
  H.values(dl.heaviside(dl.tensor({ -1, 0, 2 }), 0.5), { 0, 0.5, 1 })
  local parts = dl.tensor_split(dl.arange(1, 8), { 2, 5, 3 })
  H.eq(#parts, 4)
  H.values(parts[2], { 3, 4, 5 }); H.eq(parts[3]:numel(), 0); H.values(parts[4], { 4, 5, 6, 7 })
  local a, b = dl.broadcast_tensors(dl.ones(3, 1), dl.ones(1, 4))
  H.shape(a, { 3, 4 }); H.shape(b, { 3, 4 })
  H.eq(table.concat(dl.broadcast_shapes({ 2, 1 }, { 5, 1, 3 }), ","), "5,2,3")
  H.shape(dl.atleast_3d(dl.ones(4)), { 1, 4, 1 }); H.shape(dl.atleast_2d(dl.tensor(3)), { 1, 1 })
  H.shape(dl.ones(2, 12):unflatten(2, { 3, -1 }), { 2, 3, 4 })
  H.raises(function() dl.broadcast_to(dl.ones(3, 2), { 3, 4 }) end, "broadcast_to: cannot broadcast shape (3, 2) to (3, 4)")
  H.raises(function() dl.quantile(dl.ones(3), 1.5) end, "quantile: q must lie in [0, 1]")
  H.raises(function() dl.linalg.matrix_exp(dl.ones(2, 3)) end, "linalg.matrix_exp: expected square matrices, got shape (2, 3)")
  H.raises(function() dl.linalg.multi_dot({ dl.ones(2, 3), dl.ones(2, 3) }) end, "linalg.multi_dot: tensors 1 and 2 do not chain")
  -- exp of a rotation generator is the rotation, and d/dt exp(tA) = A exp(tA)
  local A = t64({ { 0, -1 }, { 1, 0 } })
  H.near(dl.linalg.matrix_exp(A * 0.3):totable(), { { math.cos(0.3), -math.sin(0.3) }, { math.sin(0.3), math.cos(0.3) } },
         1e-14)
end)

H.test("lgamma, digamma, polygamma, erfinv and mvlgamma match PyTorch float64, gradients included", function()
  local FN = {
    lgamma = dl.lgamma, digamma = function(x) return x:digamma() end,
    polygamma1 = function(x) return dl.polygamma(1, x) end, polygamma2 = function(x) return x:polygamma(2) end,
    polygamma3 = function(x) return dl.polygamma(3, x) end, erfinv = dl.erfinv,
    mvlgamma3 = function(x) return dl.mvlgamma(x, 3) end,
  }
  -- PyTorch's trigamma (polygamma(1, x), digamma's derivative) sums its asymptotic series
  -- to 1/x^7 only, about 1e-10 relative from the true value (mpmath's); dlua's goes
  -- through Hurwitz's zeta. PyTorch's erfinv loses digits near 1 (5e-5 at 1 - 1e-15).
  -- Both are also checked against mpmath's values (`exact`), to 1e-14.
  local rel = function(got, want, what, tol)
    local g, w = got:totable(), want
    for i = 1, #w do
      local ok = (g[i] == w[i]) or math.abs(g[i] - w[i]) <= (tol or 1e-12) * math.max(1, math.abs(w[i]))
      H.ok(ok, ("%s element %d: got %.17g, PyTorch %.17g"):format(what, i, g[i], w[i]))
    end
  end
  for _, c in ipairs(R.special) do
    local x, cc = t64(c.x), t64(c.c)
    local y = FN[c.name](x)
    if c.exact then
      rel(y, c.exact, c.name .. " (mpmath)", 1e-14)
      local near_pytorch = {}   -- PyTorch's own, where it keeps its digits
      for i, v in ipairs(c.x) do near_pytorch[i] = (c.name ~= "erfinv" or 1 - math.abs(v) > 1e-6) and c.y[i] or nil end
      for i = 1, #c.y do
        if near_pytorch[i] then
          H.ok(math.abs(y:totable()[i] - c.y[i]) <= 1e-9 * math.max(1, math.abs(c.y[i])), c.name .. " element " .. i)
        end
      end
    else
      rel(y, c.y, c.name)
    end
    local g = dl.grad(function(v) return (FN[c.name](v) * cc):sum() end)(x)
    if c.name == "erfinv" then   -- sqrt(pi) / 2 e^(erfinv(y)^2), from mpmath's erfinv
      local want = {}
      for i, e in ipairs(c.exact) do want[i] = c.c[i] * math.sqrt(math.pi) / 2 * math.exp(e * e) end
      rel(g, want, "erfinv gradient (mpmath)", 1e-13)
    else
      rel(g, c.g, c.name .. " gradient", c.name == "digamma" and 1e-9 or nil)
    end
  end
  -- float32 is computed in double and rounded once
  local x32 = dl.tensor({ 0.5, 3, -1.5 })
  H.near(dl.lgamma(x32):totable(), { math.log(math.sqrt(math.pi)), math.log(2), 0.8600470153764810 }, 1e-6)
  H.eq(dl.erfinv(dl.tensor({ 1, -1 })):totable()[1], math.huge)
  H.ok(dl.erfinv(dl.tensor({ 1.5 })):totable()[1] ~= dl.erfinv(dl.tensor({ 1.5 })):totable()[1])   -- NaN
  H.eq(dl.digamma(dl.tensor({ 0 })):item(), -math.huge)
  H.raises(function() dl.polygamma(1.5, x32) end, "polygamma: n must be a whole number >= 0, got 1.5")
  H.raises(function() dl.mvlgamma(x32, 2) end, "mvlgamma: all elements must be greater than (p - 1) / 2 = 0.5")
end)

H.test("asin ... atanh, exp2, log2, log10 and erfc are ops of the table, as PyTorch's float64, gradients included", function()
  for _, c in ipairs(R.elementwise_math) do
    local x, cc = t64(c.x), t64(c.c)
    local f = dl[c.name]
    H.near(f(x):totable(), c.y, 1e-13, c.name)
    H.near(x[c.name](x):totable(), c.y, 1e-13, c.name .. " (method)")
    H.near(dl.grad(function(v) return (f(v) * cc):sum() end)(x):totable(), c.g, 1e-12, c.name .. " gradient")
  end
  H.eq(#R.elementwise_math, 12)
  -- float32 too, and out of the domain NaN as in C
  H.near(dl.asin(dl.tensor({ 0.5 })):item(), math.asin(0.5), 1e-7)
  local nan = dl.acosh(dl.tensor({ 0.5 })):item()
  H.ok(nan ~= nan)
  H.eq(dl.log2(dl.tensor({ 8 })):item(), 3)
end)

H.test("PyTorch's other spellings: clip, inner, dist, addcmul, addcdiv, logdet and linalg's methods", function()
  local a = t64({ { 1, 2, 3 }, { 4, 5, 6 } })
  local b = t64({ { 1, 0, -1 }, { 2, 2, 2 } })
  -- (the values are PyTorch 1.13's, from the same calls)
  H.values(dl.inner(a, b), { { -2, 12 }, { -2, 30 } })
  H.eq(a:dist(b):item(), 7)
  H.eq(type(dl.dist), "table")   -- (dl.dist is the distributed module, not torch.dist)
  H.eq(a:dist(b, 1):item(), 15)
  H.values(dl.addcmul(a, a, b, { value = 0.5 }), { { 1.5, 2, 1.5 }, { 8, 10, 12 } })
  H.values(a:addcdiv(a, b + 3, { value = 2 }), { { 1.5, 3.333333333333333, 6 }, { 5.6, 7, 8.4 } }, { tol = 1e-15 })
  local m = t64({ { 2, 1 }, { 1, 3 } })
  H.near(m:logdet():item(), 1.6094379124341005, 1e-15)
  local nan = t64({ { 0, 1 }, { 1, 0 } }):logdet():item()
  H.ok(nan ~= nan, "logdet of a negative determinant is NaN")
  H.near(m:det():item(), 5, 1e-14)
  H.near(m:inverse():matmul(m):totable(), { { 1, 0 }, { 0, 1 } }, 1e-14)
  H.values(dl.tensor({ -2, 0.5, 3 }):clip(-1, 1), { -1, 0.5, 1 })
  H.values(dl.ger(dl.tensor({ 1, 2 }), dl.tensor({ 3, 4 })), { { 3, 4 }, { 6, 8 } })
  H.values(dl.tensor({ { 3, 1 }, { 2, 4 } }):msort(), { { 2, 1 }, { 3, 4 } })
  H.eq(a:ravel():numel(), 6); H.eq(a:ndimension(), 2); H.eq(#a:tolist(), 2)
  H.values(dl.tensor({ -1, 2 }):absolute(), { 1, 2 })
  local t = dl.zeros(2)
  H.ok(rawequal(t:addcmul_(dl.ones(2), dl.full({ 2 }, 3)), t))
  H.values(t, { 3, 3 })
  H.raises(function() dl.addcmul(a, a, b, { val = 1 }) end, "addcmul: unknown option 'val'")
  H.raises(function() dl.inner(a, dl.ones(2)) end, "inner: the last dims differ")
end)

H.test("edges of the third round's functions, as PyTorch's: infinities, empty dims, dtypes kept, shapes checked", function()
  local inf = math.huge
  H.values(dl.logcumsumexp(dl.tensor({ inf, inf, 1 }), 1), { inf, inf, inf })
  local g = dl.grad(function(x) return dl.logcumsumexp(x, 1)[1] end)(dl.tensor({ -inf, 1 }))
  H.values(g, { 1, 0 })                      -- (a tie with the -inf fill gave it half)
  H.values(dl.floor_divide(dl.tensor({ 1, -1, 5, -5 }), inf), { 0, -1, 0, -1 })
  H.values(dl.fmod(dl.tensor({ -1, 2 }), inf), { -1, 2 })
  H.eq(dl.trapezoid(dl.zeros(0)):item(), 0)
  H.eq(dl.cumulative_trapezoid(dl.zeros(0)):numel(), 0)
  H.near(dl.logit(dl.tensor({ 0.3 }), -1):item(), -0.8473, 1e-4)   -- a negative eps clamps nothing
  H.raises(function() dl.quantile(dl.ones(3), 0 / 0) end, "quantile: q must lie in [0, 1]")
  H.raises(function() dl.polygamma(math.huge, dl.ones(1)) end, "polygamma: n must be a whole number >= 0, got inf")
  H.ok(dl.polygamma(dl.tensor({ 3e9 }), dl.tensor({ 1.5 })):numel() == 1)   -- (no overflow of an int)
  H.raises(function() dl.addmm(dl.ones(5, 2, 4), dl.ones(2, 3), dl.ones(3, 4)) end,
           "addmm: input of shape (5, 2, 4) does not broadcast to the product's (2, 4)")
  -- scatter of a value keeps x's dtype, and x's other elements as they were
  local i = dl.tensor({ { 2 } }, { dtype = "int64" })
  H.eq(dl.zeros(1, 3, { dtype = "bool" }):scatter(2, i, true).dtype, "bool")
  local big = dl.full({ 1, 3 }, 16777217, { dtype = "int64" }):scatter(2, i, 2.5)
  H.eq(big.dtype, "int64")
  H.eq(big[1][1], 16777217)
  H.eq(big[1][2], 2)
end)

H.test("scatter_reduce, index_put, put, take, masked_scatter, mode, renorm and vander match PyTorch float64", function()
  local i64 = { dtype = "int64" }
  local ix = dl.tensor({ { 1, 3, 1, 4, 1 }, { 2, 2, 2, 2, 3 }, { 4, 3, 4, 1, 4 } }, i64)
  local ix_dim1 = dl.tensor({ { 1, 3, 1, 1 }, { 2, 2, 2, 2 }, { 1, 3, 1, 1 } }, i64)   -- ((ix - 1) % 3) + 1, 4 columns
  local L = function(t) return dl.tensor(t, i64) end
  local FN = {
    scatter_reduce_dim1 = function(t, u) return t:scatter_reduce(1, ix_dim1, u, "amax") end,
    index_put = function(t, u) return t:index_put({ L({ 1, 3, -1 }), L({ 2, 2, 1 }) }, u[1]) end,
    index_put_acc = function(t, u) return t:index_put({ L({ 1, 3, 1, 1 }) }, u, true) end,
    index_put_mask = function(t, u) return dl.index_put(t, { dl.tensor({ true, false, true, false }) }, u[2]) end,
    put = function(t, u) return t:put(L({ { 12, 1 }, { -1, 5 } }), u:narrow(1, 1, 2):narrow(2, 1, 2)) end,
    put_acc = function(t, u) return t:put(L({ 6, 6, 1 }), u[1], true) end,
    take = function(t) return dl.take(t, L({ { 12, 1, 6 }, { -2, 4, 4 } })) end,
    masked_scatter = function(t, u) return t:masked_scatter(dl.tensor({ true, false, true }), u) end,
    mode = function(t) return t:mode(2) end,
    mode_dim1_keep = function(t) return dl.mode(t, 1, true) end,
    renorm = function(t) return t:renorm(2, 1, 1.0) end,
    renorm_p1 = function(t) return dl.renorm(t, 1, 2, 1.5) end,
    renorm_p3 = function(t) return t:renorm(3, 1, 0.8) end,
    vander = dl.vander,
    vander_increasing = function(t) return dl.vander(t, 5, true) end,
  }
  for _, reduce in ipairs({ "sum", "prod", "mean", "amax", "amin" }) do
    FN["scatter_reduce_" .. reduce] = function(t, u) return t:scatter_reduce(2, ix, u, reduce) end
    FN["scatter_reduce_" .. reduce .. "_noself"] = function(t, u)
      return dl.scatter_reduce(t, 2, ix, u, reduce, { include_self = false })
    end
  end
  H.eq(H.ref_cases(R.fourth_round, FN), 25)
  -- integers: scatter_reduce's mean divides rounding down, as PyTorch's; amax exact in int64
  local n = dl.tensor({ -7, 8, 9, 10 }, i64)
  H.values(n:scatter_reduce(1, L({ 1, 1, 2 }), L({ 1, 2, 4 }), "mean"), { -2, 6, 9, 10 }, { dtype = "int64" })
  local big = dl.full({ 2 }, 2 ^ 53, i64) + L({ 3, 1 })   -- (2^53 + 3 and 2^53 + 1: no float64 holds them)
  local r = dl.tensor({ 0, 0 }, i64):scatter_reduce(1, L({ 2, 2 }), big, "amax", { include_self = false })
  H.eq((r:narrow(1, 2, 1) - 2 ^ 53):item(), 3)
  -- the in-place forms write into x
  local x = dl.zeros(2, 3)
  H.ok(rawequal(x:index_put_({ L({ 2 }), L({ 3 }) }, 5), x))
  H.eq(x[2][3], 5)
  x:put_(L({ 1 }), dl.tensor({ 4 }))
  x:masked_scatter_(dl.tensor({ { false, true, false } }), dl.tensor({ 7, 8 }))
  H.values(x, { { 4, 7, 0 }, { 0, 8, 5 } })
  x:scatter_reduce_(2, L({ { 1, 1 } }), dl.tensor({ { 2, 3 } }), "prod")
  H.values(x, { { 24, 7, 0 }, { 0, 8, 5 } })
  -- the gradient of a tied amax is shared, also with x itself
  local g = dl.grad(function(t, u) return t:scatter_reduce(1, L({ 1, 1, 1 }), u, "amax"):sum() end, { 1, 2 })
  local gx, gu = g(dl.tensor({ 2, 1 }), dl.tensor({ 2, 2, 0 }))
  H.near(gx:totable(), { 1 / 3, 1 }, 1e-7)
  H.near(gu:totable(), { 1 / 3, 1 / 3, 0 }, 1e-7)
  -- errors name the op and what is wrong
  local m = dl.zeros(3, 4)
  H.raises(function() m:scatter_reduce(2, L({ { 1 } }), dl.ones(1, 1), "median") end,
           "scatter_reduce: reduce must be sum, prod, mean, amax or amin, got median")
  H.raises(function() m:scatter_reduce(2, L({ { 1 } }), dl.ones(1, 1), "sum", { include_self = 1 }) end,
           "scatter_reduce: expected include_self (a boolean)")
  H.raises(function() m:scatter_reduce(2, L({ { 1 } }), dl.ones(1, 1, f64), "sum") end,
           "scatter_reduce: expected a source of dtype float32 (x's), got float64")
  H.raises(function() m:scatter_reduce(2, L({ { 5 } }), dl.ones(1, 1), "amax") end, "scatter_add")
  H.raises(function() m:index_put({ L({ 4 }) }, 1) end,
           "index_put: an index is out of range for dimension 1 of size 3 (indices are 1-based, or from -3")
  H.raises(function() m:index_put({ L({ 1 }), L({ 1 }), L({ 1 }) }, 1) end, "index_put: too many indices (3) for a tensor of 2 dims")
  H.raises(function() m:index_put({ dl.tensor({ 1.5 }) }, 1) end, "index_put: expected integer index tensors or bool masks, got float32")
  H.raises(function() m:index_put({ L({ 1, 2 }) }, dl.ones(3)) end,
           "index_put: values of shape (3,) do not broadcast to the indexed shape (2, 4)")
  H.raises(function() m:index_put({ dl.tensor({ true, false }) }, 1) end,
           "index_put: the mask 1 of shape (2,) does not match the input's (3, 4) from dim 1")
  H.raises(function() m:put(L({ 1, 2 }), dl.ones(3)) end, "put: expected a source of 2 elements (the index's), got 3")
  H.raises(function() dl.take(m, L({ 13 })) end, "take: an index is out of range for dimension 1 of size 12")
  H.raises(function() m:masked_scatter(dl.ones(4, { dtype = "bool" }), dl.ones(3)) end,
           "masked_scatter: the mask selects 12 elements, but the source has only 3")
  H.raises(function() m:masked_scatter(dl.ones(4), dl.ones(12)) end, "masked_scatter: expected a bool mask, got float32")
  H.raises(function() m:mode(3) end, "mode: dimension 3 out of range")
  H.raises(function() m:renorm(0, 1, 1) end, "renorm: p must be a number > 0, got 0")
  H.raises(function() dl.vander(m) end, "vander: expected a 1-D tensor, got 2 dims")
  H.raises(function() m:put(L({ 1 }), L({ 7 })) end, "put: expected a source of dtype float32 (the input's), got int64")
  -- index_copy to a row named twice keeps the last slice, and each slice gets the gradient (PyTorch's)
  local src = dl.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, f64)
  H.values(dl.zeros(3, 2, f64):index_copy(1, { 1, 3, 1 }, src), { { 5, 6 }, { 0, 0 }, { 3, 4 } })
  H.values(dl.grad(function(s_) return dl.zeros(3, 2, f64):index_copy(1, { 1, 3, 1 }, s_):sum() end)(src),
           { { 1, 1 }, { 1, 1 }, { 1, 1 } })
  H.raises(function() m:index_put({ L({ 1 }) }, dl.ones(4, f64)) end,
           "index_put: expected values of dtype float32 (the input's), got float64")
  H.raises(function() m:masked_scatter(dl.ones(4, { dtype = "bool" }), dl.arange(1, 13, { dtype = "int64" })) end,
           "masked_scatter: expected a source of dtype float32 (the input's), got int64")
  H.raises(function() dl.tensor({ 1, -5, 3 }):renorm(2, 1, 2) end, "renorm: expected a tensor of at least 2 dims, got 1")
  H.eq(dl.vander(dl.tensor({ 2, 3 }, { dtype = "int32" })).dtype, "int64")
  H.shape(dl.vander(dl.ones(3), 0), { 3, 0 })
end)

H.test("bitwise ops, shifts, gcd and lcm on int64, int32, uint8 and bool match PyTorch", function()
  local seen = 0
  for _, c in ipairs(R.bits) do
    local opts = { dtype = c.dtype }
    local a = dl.tensor(c.a, opts)
    local y
    if c.b == nil then
      y = dl[c.name](a)
    elseif type(c.b) == "number" then
      y = a[c.name](a, c.b)
    else
      y = dl[c.name](a, dl.tensor(c.b, opts))
    end
    H.eq(y.dtype, c.dtype, c.name .. " " .. c.dtype)
    if c.dtype == "bool" then   -- (the refs hold bools as 1 and 0)
      H.values(y:long(), c.y, { dtype = "int64", tol = 0 })
    else
      H.values(y, c.y, { dtype = c.dtype, tol = 0 })
    end
    seen = seen + 1
  end
  H.eq(seen, 40)
  local i64 = { dtype = "int64" }
  local L = function(t, dt) return dl.tensor(t, dt or i64) end
  -- a number first, and in place
  H.values(dl.bitwise_or(6, L({ 5, 3 })), { 7, 7 }, { dtype = "int64" })
  local x = L({ 12, 10 })
  H.ok(rawequal(x:bitwise_xor_(6), x))
  H.values(x, { 10, 12 }, { dtype = "int64" })
  -- shifts past the width: 0 to the left, the sign's fill to the right (Note [Bits of integers])
  H.values(dl.bitwise_left_shift(L({ 5, 5, -8 }), L({ 64, -1, 60 })), { 0, 0, -2 ^ 63 }, { dtype = "int64" })
  H.values(dl.bitwise_right_shift(L({ 5, -5, -5 }), L({ 64, 70, -1 })), { 0, -1, -1 }, { dtype = "int64" })
  H.values(L({ 200, 5 }, { dtype = "uint8" }):bitwise_left_shift(L({ 1, 8 }, { dtype = "uint8" })), { 144, 0 },
           { dtype = "uint8" })
  -- gcd and lcm at the edges: zeros, signs, and the smallest int64 (its own gcd with 0)
  H.values(dl.gcd(L({ 0, -12, 7, 0 }), L({ 0, 18, -21, 5 })), { 0, 6, 7, 5 }, { dtype = "int64" })
  H.values(dl.lcm(L({ 0, -12, 7, 4 }), L({ 0, 18, -21, 6 })), { 0, 36, 21, 12 }, { dtype = "int64" })
  local smallest = dl.full({ 1 }, -2 ^ 63, i64)
  H.ok(dl.equal(dl.gcd(smallest, L({ 0 })), smallest))
  -- a whole number beside an integer tensor wraps to its width, as PyTorch's (it saturated:
  -- uint8 + (-1) added 0)
  local u = L({ 200, 3, 255 }, { dtype = "uint8" })
  H.values(u + (-1), { 199, 2, 254 }, { dtype = "uint8" })
  H.values(u + 256, { 200, 3, 255 }, { dtype = "uint8" })
  H.values(dl.bitwise_and(u, -1), { 200, 3, 255 }, { dtype = "uint8" })
  H.values(dl.bitwise_xor(u, 257), { 201, 2, 254 }, { dtype = "uint8" })
  H.values(dl.bitwise_and(L({ -5, 7 }, { dtype = "int32" }), 4294967295), { -5, 7 }, { dtype = "int32" })
  -- a number the dtype cannot hold compares as the number it is (it was clamped: uint8 == 256
  -- was true at 255); a wrapped zero divides by zero; -2^63 is an int64
  H.values(u:eq(256), { false, false, false })
  H.values(u:gt(-1), { true, true, true })
  H.values(u:lt(300), { true, true, true })
  H.values(L({ 2147483647 }, { dtype = "int32" }):eq(2 ^ 31), { false })
  H.values(u:eq(255), { false, false, true })
  H.raises(function() return u % 256 end, "remainder: integer division by zero")
  H.raises(function() dl.fmod(u, 256) end, "fmod: integer division by zero")
  H.raises(function() dl.floor_divide(u, 256) end, "floor_divide: integer division by zero")
  H.values(dl.floor_divide(u, 257), { 200, 3, 255 }, { dtype = "uint8" })
  local lowest = dl.bitwise_and(L({ 1, -1 }), -2 ^ 63)
  H.eq(lowest.dtype, "int64")
  H.eq(lowest[1], 0)
  H.eq(lowest[2], -2 ^ 63)
  H.raises(function() return u ^ -1 end, "pow: integers to negative integer powers are not allowed")
  H.raises(function() return u ^ 256 end, "pow: the exponent 256 does not fit the tensor's dtype uint8")
  H.values(L({ 2, 3 }) ^ L({ -1, 1 }), { 0, 3 }, { dtype = "int64" })   -- (a tensor exponent: as PyTorch's)
  -- promotion as PyTorch's: uint8 with bool stays uint8, int32 with int64 is int64
  H.eq(dl.bitwise_and(L({ 5 }, { dtype = "uint8" }), dl.tensor({ true })).dtype, "uint8")
  H.eq(dl.bitwise_and(L({ 5 }, { dtype = "int32" }), L({ 3 })).dtype, "int64")
  -- floats are refused, naming the op; bool where it has no meaning
  H.raises(function() dl.bitwise_and(dl.ones(2), L({ 1, 1 })) end, "bitwise_and: expected integer or bool tensors, got float32")
  H.raises(function() L({ 1 }):bitwise_or(0.5) end, "bitwise_or: expected integer or bool tensors, got float32")
  H.raises(function() dl.bitwise_not(dl.ones(2, f64)) end, "bitwise_not: expected integer or bool tensors, got float64")
  H.raises(function() dl.gcd(dl.tensor({ true }), dl.tensor({ true })) end, "gcd: not supported for bool tensors")
  H.raises(function() dl.bitwise_left_shift(dl.tensor({ true }), dl.tensor({ true })) end,
           "bitwise_left_shift: not supported for bool tensors")
  -- a mask combined the PyTorch way
  local v = dl.arange(1, 9, i64)
  H.values(v[dl.bitwise_and(v:gt(2), dl.bitwise_not(v:gt(6)))], { 3, 4, 5, 6 }, { dtype = "int64" })
end)

-- A function that loads its module on first use (core.on_first_use) is defined by that
-- module: dl.unfold was a stub whose module defined only the method, so calling it
-- failed with "attempt to call a nil value".
H.test("every function that loads on first use exists once loaded", function()
  local core, T = require("dlua.core"), require("dlua.tensor")
  local missing = {}
  for _, tbl in ipairs({ { dl, "dl." }, { T.methods, "x:" }, { dl.nn.functional, "F." }, { dl.data, "dl.data." } }) do
    local mt = getmetatable(tbl[1])
    local stubs = mt and type(rawget(mt, "__index")) == "table" and rawget(mt, "__index") or {}
    for k, v in pairs(stubs) do
      if type(v) == "function" and rawget(tbl[1], k) == nil and core.resolve_stub(v) == nil then
        missing[#missing + 1] = tbl[2] .. k
      end
    end
  end
  H.eq(missing, {})
  H.eq(dl.unfold(dl.arange(1, 6), 1, 2, 2):totable(), { { 1, 2 }, { 3, 4 } })
end)

H.test("hstack, vstack, dstack, column_stack, moveaxis and dl.* forms of the view methods, as PyTorch's", function()
  local a, b = dl.tensor({ 1, 2 }), dl.tensor({ { 3, 4 }, { 5, 6 } })
  -- torch: hstack([a, [7]]), hstack([b, b[:, :1]]), vstack([a, b]), dstack([a, a]),
  -- column_stack([a, b, [8, 9]]), column_stack([tensor(1.), [2.]])
  H.eq(dl.hstack({ a, dl.tensor({ 7 }) }):totable(), { 1, 2, 7 })
  H.eq(dl.hstack({ b, b:narrow(2, 1, 1) }):totable(), { { 3, 4, 3 }, { 5, 6, 5 } })
  H.eq(dl.vstack({ a, b }):totable(), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
  H.eq(dl.dstack({ a, a }):totable(), { { { 1, 1 }, { 2, 2 } } })
  H.eq(dl.column_stack({ a, b, dl.tensor({ 8, 9 }) }):totable(), { { 1, 3, 4, 8 }, { 2, 5, 6, 9 } })
  H.eq(dl.column_stack({ dl.tensor(1), dl.tensor({ 2 }) }):totable(), { { 1, 2 } })
  H.raises(function() dl.vstack({}) end, "vstack: expected a non-empty list of tensors")
  H.raises(function() dl.hstack(a) end, "hstack: expected a list of tensors")
  local x = dl.arange(24):reshape(2, 3, 4)
  H.shape(x:moveaxis(1, -1), { 3, 4, 2 })
  H.shape(dl.moveaxis(x, { 1, 2 }, { 3, 1 }), { 3, 4, 2 })   -- torch.moveaxis(x, (0, 1), (2, 0))
  H.shape(dl.reshape(x, { 4, 6 }), { 4, 6 }); H.shape(dl.permute(x, { 3, 1, 2 }), { 4, 2, 3 })
  H.shape(dl.t(dl.ones(2, 3)), { 3, 2 }); H.shape(dl.transpose(x, 1, 3), { 4, 3, 2 })
  H.shape(dl.flatten(x, 2), { 2, 12 }); H.shape(dl.squeeze(dl.ones(2, 1), 2), { 2 })
  H.shape(dl.unsqueeze(x, 1), { 1, 2, 3, 4 }); H.eq(dl.narrow(x, 3, 2, 2):totable()[1][1], { 1, 2 })
  H.eq(dl.select(x, 2, 3):totable()[1], { 8, 9, 10, 11 })
  H.eq(dl.index_select(dl.arange(5), 1, dl.tensor({ 5, 1 }, { dtype = "int64" })):totable(), { 4, 0 })
  H.eq(dl.gather(dl.tensor({ { 1, 2 }, { 3, 4 } }), 2, dl.tensor({ { 2, 2 }, { 1, 2 } }, { dtype = "int64" })):totable(),
       { { 2, 2 }, { 3, 4 } })
end)

-- As PyTorch 1.13's (a differential audit): masked_fill takes a 0-dim tensor value and
-- differentiates through it; flip refuses a dim named twice; meshgrid takes a list.
H.test("masked_fill's 0-dim tensor value, flip's repeated dims, meshgrid of a list", function()
  local f64 = { dtype = "float64" }
  local x, v, m = dl.tensor({ 1, 2, 3 }, f64), dl.tensor(5, f64), dl.tensor({ true, false, true })
  H.eq(x:masked_fill(m, v):totable(), { 5, 2, 5 })
  local gx, gv = dl.grad(function(a, b) return a:masked_fill(m, b):sum() end, { 1, 2 })(x, v)
  H.eq(gx:totable(), { 0, 1, 0 }); H.eq(gv:item(), 2)
  H.eq(dl.ones(2, { dtype = "int64" }):masked_fill(dl.tensor({ true, false }), dl.tensor(2.7)):totable(), { 2, 1 })
  H.raises(function() return x:masked_fill(m, dl.ones(3)) end, "masked_fill: the value must be a number or a 0-dim tensor")
  H.raises(function() return x:flip({ 1, -1 }) end, "flip: dim 1 appears more than once in the dims")
  local a, b = dl.meshgrid({ dl.arange(2), dl.arange(3) }, { indexing = "xy" })
  H.eq(a.shape, { 3, 2 }); H.eq(b.shape, { 3, 2 })
  local c = dl.meshgrid({ dl.arange(2), dl.arange(3) })
  H.eq(c.shape, { 2, 3 })
end)

H.test("multinomial, bernoulli and normal refuse NaN, inf and negative std; histc's non-finite range", function()
  local nan, inf = 0 / 0, math.huge
  -- torch.multinomial: "probability tensor contains either inf, nan or element < 0"
  H.raises(function() return dl.multinomial(dl.tensor({ 0.5, nan, 0.5 }), 1) end,
           "multinomial: probabilities must not be negative, infinite or NaN")
  H.raises(function() return dl.multinomial(dl.tensor({ 0.5, inf, 0.5 }), 2, { replacement = true }) end,
           "multinomial: probabilities must not be negative, infinite or NaN")
  -- torch.multinomial(torch.zeros(0, 3), 1): an empty (0, 1); (.., 5) without replacement: refused
  local none = dl.multinomial(dl.zeros(0, 3), 1)
  H.shape(none, { 0, 1 })
  H.eq(none.dtype, "int64")
  H.shape(dl.multinomial(dl.zeros(0, 3), 5, { replacement = true }), { 0, 5 })
  H.raises(function() return dl.multinomial(dl.zeros(0, 3), 5) end, "multinomial: cannot draw 5 samples from 3 categories")
  -- torch.bernoulli: "Expected p_in >= 0 && p_in <= 1"
  H.raises(function() return dl.bernoulli(dl.tensor({ 0.5, nan })) end, "bernoulli: probabilities must lie in [0, 1]")
  -- torch.normal: "normal expects std >= 0.0"
  H.raises(function() return dl.normal(0, -1, { 3 }) end, "normal: std must be >= 0, got -1")
  H.raises(function() return dl.normal(0, nan, 3) end, "normal: std must be >= 0")
  H.raises(function() return dl.normal(dl.zeros(3), dl.tensor({ 1, -1, 1 })) end, "normal: std must be >= 0")
  H.raises(function() return dl.normal(dl.zeros(3), 1, { 3 }) end, "normal: the shape comes from mean and std")
  H.raises(function() return dl.normal(0, 1, { 3 }, { dtype = "float65" }) end, "normal: unknown dtype 'float65'")
  local d = dl.normal(0, 1, { 3 }, { dtype = "float64" })
  H.eq(d.dtype, "float64")
  H.shape(d, { 3 })
  H.shape(dl.normal(0, 1, 2, 3), { 2, 3 })
  dl.manual_seed(5)
  local n = dl.normal(3, 0.5, 20000, "float64")
  H.eq(n.dtype, "float64")
  H.near(n:mean():item(), 3, 0.02)
  H.near(n:std():item(), 0.5, 0.02)
  -- torch.histc: "range of [nan, nan] is not finite", "range of [1, inf] is not finite"
  H.raises(function() return dl.histc(dl.tensor({ 1, nan, 3 }), 3) end, "histc: the range [")
  H.raises(function() return dl.histc(dl.tensor({ 1, inf, 3 }), 3) end, "histc: the range [1, inf] is not finite")
  H.raises(function() return dl.histc(dl.tensor({ 1, 2 }), 3, 0, inf) end, "histc: the range [0, inf] is not finite")
  -- torch.histc(torch.tensor([1., 2, 2, 3, 5]), 4, 2, 2): the data's range, [1, 2, 1, 1]
  H.values(dl.histc(dl.tensor({ 1, 2, 2, 3, 5 }), 4, 2, 2), { 1, 2, 1, 1 })
  -- torch.histc(torch.tensor([2., 2, 2]), 4, 5, 5): [0, 0, 3, 0]
  H.values(dl.histc(dl.tensor({ 2, 2, 2 }), 4, 5, 5), { 0, 0, 3, 0 })
  -- with a range given, NaN and inf outside it are left out: torch.histc([1., inf, 3], 3, 0, 4): [1, 0, 1]
  H.values(dl.histc(dl.tensor({ 1, inf, 3 }), 3, 0, 4), { 1, 0, 1 })
end)

H.run()
