-- dl.optim: update rules against PyTorch (tests/lua/ref/training_ref.lua, written by
-- tests/ref/gen_training_refs.py), the three ways to apply gradients, state dicts,
-- learning-rate schedules and errors.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.training_ref")

local TOL = 2e-6   -- float32 rounding over a few steps (relative, plus absolute)

local function close(got, want, tol, what)
  H.near(got:totable(), want, tol or TOL, what)
end

-- Runs a reference case: variables from w0/b0, the given gradients, the listed options.
local function run_case(c, apply)
  local opt = dl.optim[c.class](c.opts)
  local w, b = dl.Variable(dl.tensor(c.w0), "w"), dl.Variable(dl.tensor(c.b0), "b")
  for i, g in ipairs(c.grads) do
    apply(opt, w, b, dl.tensor(g[1]), dl.tensor(g[2]))
    close(w, c.after[i][1], TOL, "w after step " .. i)
    close(b, c.after[i][2], TOL, "b after step " .. i)
  end
  return opt, w, b
end

local NAMES = { "sgd", "sgd_momentum", "sgd_nesterov_wd", "sgd_dampening", "adam", "adam_wd_amsgrad",
                "adamw", "adamw_default", "rmsprop", "rmsprop_centered_momentum", "adadelta", "adadelta_wd",
                "adamax", "adamax_wd", "nadam", "nadam_wd", "radam", "radam_short" }

for _, name in ipairs(NAMES) do
  H.test(name .. " matches PyTorch step by step (apply_gradients)", function()
    run_case(R.optim[name], function(opt, w, b, gw, gb) opt:apply_gradients({ { gw, w }, { gb, b } }) end)
  end)
end

H.test("step(params, grads) is the same update", function()
  for _, name in ipairs({ "sgd_momentum", "adam", "rmsprop_centered_momentum" }) do
    run_case(R.optim[name], function(opt, w, b, gw, gb) opt:step({ w, b }, { gw, gb }) end)
  end
end)

H.test("updates are in place: the variables keep their identity", function()
  local c = R.optim.adam
  local w = dl.Variable(dl.tensor(c.w0))
  local before = w
  local opt = dl.optim.Adam{ lr = 0.01 }
  opt:apply_gradients({ { dl.ones(3, 4), w } })
  H.ok(rawequal(before, w))
  H.ok(w.is_variable)
  H.ok(dl.is_variable(w))
  -- a later gradient of w still flows to the very same Variable
  local pairs_ = dl.implicit_grad(function() return (w * w):sum() end)()
  H.ok(rawequal(pairs_[1][2], w))
end)

H.test("a nil gradient skips its variable", function()
  local w, b = dl.Variable(dl.ones(2)), dl.Variable(dl.ones(2))
  local opt = dl.optim.SGD{ lr = 0.5 }
  opt:apply_gradients({ { nil, w }, { dl.ones(2), b } })
  H.values(w, { 1, 1 })
  H.values(b, { 0.5, 0.5 })
  opt:step({ w, b }, { dl.ones(2) })   -- grads shorter than params: a hole
  H.values(w, { 0.5, 0.5 })
end)

H.test("minimize: implicit variables, or the given ones only", function()
  local w = dl.Variable(dl.tensor({ 1.0, 2.0 }), "w")
  local v = dl.Variable(dl.tensor({ 3.0 }), "v")
  local opt = dl.optim.SGD{ lr = 0.1 }
  local loss = opt:minimize(function() return (w * w):sum() + (v * v):sum() end)
  H.values(loss, 14)
  H.values(w, { 0.8, 1.6 })
  H.values(v, { 2.4 })
  opt:minimize(function() return (w * w):sum() + (v * v):sum() end, { w })
  H.values(w, { 0.64, 1.28 }, { tol = 1e-6 })
  H.values(v, { 2.4 })
  H.eq(opt.iterations, 2)
end)

H.test("minimize with a module updates its parameters", function()
  dl.manual_seed(3)
  local lin = dl.nn.Linear(3, 1)
  local x, y = dl.randn(8, 3), dl.randn(8, 1)
  local opt = dl.optim.SGD{ lr = 0.1 }
  local l0 = dl.nn.mse_loss(lin(x), y):item()
  for _ = 1, 20 do opt:minimize(function() return dl.nn.mse_loss(lin(x), y) end, lin) end
  H.ok(dl.nn.mse_loss(lin(x), y):item() < l0 * 0.8, "loss went down")
end)

H.test("state_dict: positions, counts and buffers", function()
  local opt = run_case(R.optim.adam, function(opt, w, b, gw, gb) opt:apply_gradients({ { gw, w }, { gb, b } }) end)
  local sd = opt:state_dict()
  H.eq(sd.iterations, 5)
  H.eq(sd.lr, 0.01)
  H.eq(sd["state.1.step"], 5)
  H.eq(sd["state.2.step"], 5)
  H.shape(sd["state.1.exp_avg"], { 3, 4 })
  H.shape(sd["state.2.exp_avg_sq"], { 4 })
end)

H.test("a restored optimizer continues exactly (state given before the variables are seen)", function()
  local c = R.optim.adam_wd_amsgrad
  -- run 3 steps, save, run the last 2 steps in a fresh optimizer restored from it
  local opt = dl.optim[c.class](c.opts)
  local w, b = dl.Variable(dl.tensor(c.w0)), dl.Variable(dl.tensor(c.b0))
  for i = 1, 3 do opt:apply_gradients({ { dl.tensor(c.grads[i][1]), w }, { dl.tensor(c.grads[i][2]), b } }) end
  local saved = opt:state_dict()
  local fresh = dl.optim[c.class](c.opts)
  fresh:load_state_dict(saved)
  H.eq(fresh.iterations, 3)
  -- the saved tensors were copied: changing the first optimizer does not touch them
  opt:apply_gradients({ { dl.ones(3, 4), w }, { dl.ones(4), b } })
  local w2, b2 = dl.Variable(dl.tensor(c.after[3][1])), dl.Variable(dl.tensor(c.after[3][2]))
  for i = 4, 5 do
    fresh:apply_gradients({ { dl.tensor(c.grads[i][1]), w2 }, { dl.tensor(c.grads[i][2]), b2 } })
    close(w2, c.after[i][1], TOL, "w after step " .. i)
    close(b2, c.after[i][2], TOL, "b after step " .. i)
  end
end)

H.test("a Checkpoint restores an optimizer onto a fresh model", function()
  local dir = os.tmpname()
  os.remove(dir)
  local function make()
    dl.manual_seed(11)
    local net = dl.nn.Sequential{ dl.nn.Linear(4, 5), dl.nn.ReLU(), dl.nn.Linear(5, 2) }
    return net, dl.optim.Adam{ lr = 0.05 }
  end
  local x, y = dl.randn(6, 4), dl.tensor({ 1, 2, 1, 2, 2, 1 }, { dtype = "int64" })
  local function step(net, opt) return opt:minimize(function() return dl.nn.cross_entropy(net(x), y) end) end
  local net, opt = make()
  for _ = 1, 3 do step(net, opt) end
  local ck = dl.Checkpoint{ model = net, optimizer = opt }
  ck:save(dir .. "/ckpt")
  local l1 = step(net, opt):item()
  local l2 = step(net, opt):item()
  local net2, opt2 = make()
  dl.Checkpoint{ model = net2, optimizer = opt2 }:restore(dl.latest_checkpoint(dir))
  H.near(step(net2, opt2):item(), l1, 1e-6)
  H.near(step(net2, opt2):item(), l2, 1e-6)
  H.eq(opt2.iterations, 5)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("load_state_dict checks shapes, keys and types, and changes nothing on error", function()
  local w = dl.Variable(dl.zeros(3))
  local opt = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }
  opt:apply_gradients({ { dl.ones(3), w } })
  H.raises(function() opt:load_state_dict({ ["state.1.momentum_buffer"] = dl.ones(4) }) end,
           "SGD:load_state_dict: \"state.1.momentum_buffer\" has shape (4,), but variable 1")
  H.raises(function() opt:load_state_dict({ bogus = 1 }) end, "SGD:load_state_dict: unexpected key \"bogus\"")
  H.raises(function() opt:load_state_dict({ iterations = "x" }) end, "\"iterations\" must be a number")
  H.eq(opt.iterations, 1)
  H.values(opt:state_dict()["state.1.momentum_buffer"], { 1, 1, 1 })
  -- a pending state with the wrong shape is refused when its variable comes
  local fresh = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }
  fresh:load_state_dict({ ["state.1.momentum_buffer"] = dl.ones(5) })
  H.raises(function() fresh:apply_gradients({ { dl.ones(3), w } }) end,
           "SGD: the restored state \"state.1.momentum_buffer\" has shape (5,), but variable 1")
end)

H.test("params given to the constructor fix the positions", function()
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(3))
  local opt = dl.optim.SGD{ lr = 1, momentum = 0.5, params = { a, b } }
  opt:apply_gradients({ { dl.ones(3), b }, { dl.ones(2), a } })
  H.shape(opt:state_dict()["state.1.momentum_buffer"], { 2 })
  H.shape(opt:state_dict()["state.2.momentum_buffer"], { 3 })
  local net = dl.nn.Linear(2, 2)
  local opt2 = dl.optim.Adam{ params = net }
  H.eq(#opt2._vars, 2)
end)

H.test("StepLR and CosineAnnealingLR follow PyTorch", function()
  local opt = dl.optim.SGD{ lr = 0.1 }
  local s = dl.optim.StepLR(opt, 2, 0.5)
  for i, want in ipairs(R.schedules.step) do
    s:step()
    H.near(opt.lr, want, 1e-12, "StepLR epoch " .. i)
  end
  local opt2 = dl.optim.SGD{ lr = 0.1 }
  local c = dl.optim.CosineAnnealingLR(opt2, 5, 0.001)
  for i, want in ipairs(R.schedules.cosine) do
    c:step()
    H.near(opt2.lr, want, 1e-9, "cosine epoch " .. i)
  end
  local sd = c:state_dict()
  local opt3 = dl.optim.SGD{ lr = 0.1 }
  local c3 = dl.optim.CosineAnnealingLR(opt3, 5, 0.001)
  c3:load_state_dict(sd)
  H.near(opt3.lr, opt2.lr, 1e-15)
end)

H.test("ExponentialLR, MultiStepLR, LambdaLR, LinearLR, warm restarts and SequentialLR follow PyTorch", function()
  local O = dl.optim
  local makers = {
    exponential = function(o) return O.ExponentialLR(o, 0.9) end,
    multistep = function(o) return O.MultiStepLR(o, { 2, 5, 6 }, 0.5) end,
    lambda = function(o) return O.LambdaLR(o, function(e) return 1 / (1 + e) end) end,
    linear = function(o) return O.LinearLR(o, 0.25, 1, 4) end,
    restarts = function(o) return O.CosineAnnealingWarmRestarts(o, 3, 1, 0.01) end,
    restarts_mult = function(o) return O.CosineAnnealingWarmRestarts(o, 2, 2) end,
    sequential = function(o)
      return O.SequentialLR(o, { O.LinearLR(o, 0.1, 1, 3), O.CosineAnnealingLR(o, 6) }, { 3 })
    end,
  }
  for name, make in pairs(makers) do
    local opt = O.SGD{ lr = 0.1 }
    local s = make(opt)
    for i, want in ipairs(R.schedules[name]) do
      s:step()
      H.near(opt.lr, want, 1e-12, name .. " epoch " .. i)
    end
  end
  local opt = O.SGD{ lr = 0.1 }
  H.raises(function() O.MultiStepLR(opt, { 3, 2 }) end, "MultiStepLR: milestones must be nondecreasing integers >= 1, got 2 at 2")
  H.raises(function() O.ExponentialLR(opt) end, "ExponentialLR: gamma must be a number > 0, got nil")
  H.raises(function() O.LinearLR(opt, 0) end, "LinearLR: start_factor must be in (0, 1], got 0")
  H.raises(function() O.SequentialLR(opt, { O.StepLR(opt, 2) }, { 3 }) end, "SequentialLR: expected 0 milestones for 1 schedules")
  H.raises(function() O.SequentialLR(opt, { O.StepLR(O.SGD{ lr = 1 }, 2), O.StepLR(opt, 2) }, { 3 }) end,
           "SequentialLR: schedule 1 drives another optimizer")
  H.raises(function() O.LambdaLR(opt, function() return "x" end):step() end, "LambdaLR: the function returned string")
end)

H.test("lr as a function of the step", function()
  local w = dl.Variable(dl.zeros(1))
  local seen = {}
  local opt = dl.optim.SGD{ lr = function(step) seen[#seen + 1] = step; return 0.5 ^ step end }
  for _ = 1, 3 do opt:apply_gradients({ { dl.ones(1), w } }) end
  H.eq(seen, { 0, 1, 2 })
  H.values(w, { -1.75 })
end)

H.test("clip_by_global_norm scales every gradient by max_norm / max(norm, max_norm)", function()
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(1))
  local clipped, norm = dl.optim.clip_by_global_norm({ { dl.tensor({ 3, 0 }), a }, { dl.tensor({ 4 }), b }, { nil, b } }, 1)
  H.near(norm, 5, 1e-12)
  H.values(clipped[1][1], { 0.6, 0 })
  H.values(clipped[2][1], { 0.8 })
  H.ok(rawequal(clipped[1][2], a) and clipped[3][1] == nil and rawequal(clipped[3][2], b))
  local same, n2 = dl.optim.clip_by_global_norm({ dl.tensor({ 0.3, 0.4 }) }, 1)
  H.near(n2, 0.5, 1e-7)
  H.values(same[1], { 0.3, 0.4 })
  H.raises(function() dl.optim.clip_by_global_norm({ dl.ones(1) }, 0) end, "clip_by_global_norm: max_norm must be a number > 0")
end)

H.test("errors name the optimizer and the problem", function()
  H.raises(function() dl.optim.SGD{ lr = 0.1, momentom = 0.9 } end, "SGD: unknown option 'momentom'")
  H.raises(function() dl.optim.SGD{ lr = -1 } end, "SGD: lr must be >= 0, got -1")
  H.raises(function() dl.optim.SGD{ lr = "x" } end, "SGD: lr must be a number or a function of the step, got string")
  H.raises(function() dl.optim.SGD{ lr = 0.1, nesterov = true } end, "SGD: nesterov momentum needs momentum > 0")
  H.raises(function() dl.optim.Adam{ betas = { 0.9, 1.5 } } end, "Adam: betas must be two numbers in [0, 1)")
  H.raises(function() dl.optim.RMSprop{ alpha = -1 } end, "RMSprop: alpha must be a number >= 0, got -1")
  local w = dl.Variable(dl.zeros(2, 3), "w")
  local opt = dl.optim.Adam{}
  local line = H.line() + 1
  local msg = H.raises(function() opt:apply_gradients({ { dl.ones(3), w } }) end,
                       "Adam: gradient of shape (3,) for a variable of shape (2, 3) (w)")
  H.at(msg, line)
  H.raises(function() opt:apply_gradients({ dl.ones(3) }) end, "Adam: expected {gradient, variable} pairs")
  H.raises(function() opt:step({ w }, { dl.ones(2, 3), dl.ones(2) }) end, "step: 1 variables but 2 gradients")
  H.raises(function() opt:minimize(42) end, "minimize: expected a loss function, got number")
  H.raises(function() dl.optim.StepLR({}, 2) end, "StepLR: expected an optimizer")
  H.raises(function() dl.optim.StepLR(dl.optim.SGD{}, 0) end, "StepLR: step_size must be an integer >= 1")
end)

H.test("printing an optimizer shows its options", function()
  H.eq(tostring(dl.optim.SGD{ lr = 0.1, momentum = 0.9 }),
       "SGD{dampening=0, lr=0.1, maximize=false, momentum=0.9, nesterov=false, weight_decay=0}")
end)

H.test("schedules stepped back to back compose as PyTorch's", function()
  local O = dl.optim
  -- each: the schedules, made in order and stepped in order, and {epoch, torch's lr} from
  -- torch.optim.lr_scheduler (1.13) driving one SGD(lr = 0.1)
  local cases = {
    { "LinearLR(0.1, 1, 10), CosineAnnealingLR(100)",
      function(o) return { O.LinearLR(o, 0.1, 1, 10), O.CosineAnnealingLR(o, 100) } end,
      { { 1, 0.018995312323474452 }, { 2, 0.02797237419799581 }, { 5, 0.054661429366366296 },
        { 10, 0.09755282581475774 }, { 11, 0.09704403844771134 }, { 50, 0.050000000000000065 }, { 100, 0.0 },
        { 101, 2.467198171342e-05 }, { 120, 0.009549150281252607 } } },
    { "StepLR(10, 0.5), ExponentialLR(0.98)",
      function(o) return { O.StepLR(o, 10, 0.5), O.ExponentialLR(o, 0.98) } end,
      { { 1, 0.098 }, { 9, 0.08337477621301498 }, { 10, 0.040853640344377336 }, { 11, 0.04003656753748979 },
        { 20, 0.016690199293877356 }, { 25, 0.015086618244472416 } } },
    { "MultiStepLR({3, 6}, 0.5), LinearLR(0.5, 1, 4)",
      function(o) return { O.MultiStepLR(o, { 3, 6 }, 0.5), O.LinearLR(o, 0.5, 1, 4) } end,
      { { 1, 0.0625 }, { 2, 0.075 }, { 3, 0.043750000000000004 }, { 4, 0.05 }, { 6, 0.025 }, { 8, 0.025 } } },
    { "SequentialLR({LinearLR(0.5, 1, 2), StepLR(2, 0.5)}, {3}), ExponentialLR(0.9)",
      function(o)
        return { O.SequentialLR(o, { O.LinearLR(o, 0.5, 1, 2), O.StepLR(o, 2, 0.5) }, { 3 }), O.ExponentialLR(o, 0.9) }
      end,
      { { 1, 0.06750000000000002 }, { 2, 0.08100000000000003 }, { 3, 0.09000000000000001 }, { 4, 0.08100000000000002 },
        { 5, 0.03645000000000001 }, { 7, 0.014762250000000005 } } },
    { "ChainedScheduler({ConstantLR(0.1, 2), ExponentialLR(0.9)})",
      function(o) return { O.ChainedScheduler(o, { O.ConstantLR(o, 0.1, 2), O.ExponentialLR(o, 0.9) }) } end,
      { { 0, 0.010000000000000002 }, { 1, 0.009000000000000003 }, { 2, 0.08100000000000003 },
        { 3, 0.07290000000000003 }, { 5, 0.059049000000000025 } } },
    { "ConstantLR(0.25, 3) alone",
      function(o) return { O.ConstantLR(o, 0.25, 3) } end,
      { { 0, 0.025 }, { 2, 0.025 }, { 3, 0.1 }, { 5, 0.1 } } },
  }
  for _, c in ipairs(cases) do
    local opt = O.SGD{ lr = 0.1 }
    local scheds = c[2](opt)
    local at = 1
    for epoch = 0, c[3][#c[3]][1] do
      if epoch > 0 then for _, s in ipairs(scheds) do s:step() end end
      local want = c[3][at]
      if want[1] == epoch then
        H.near(opt.lr, want[2], 1e-15, c[1] .. " epoch " .. epoch)
        at = at + 1
      end
    end
  end
  -- lr changed by hand: the schedule goes on from it (torch: StepLR(2, 0.5), lr halved after epoch 3)
  local opt = O.SGD{ lr = 0.1 }
  local s = O.StepLR(opt, 2, 0.5)
  local lrs = {}
  for i = 1, 6 do
    s:step()
    if i == 3 then opt.lr = opt.lr * 0.5 end
    lrs[i] = opt.lr
  end
  H.near(lrs, { 0.1, 0.05, 0.025, 0.0125, 0.0125, 0.00625 }, 1e-15)
  -- with ReduceLROnPlateau (torch: StepLR(2, 0.1), then ReduceLROnPlateau(patience 0, factor 0.5) on 1.0)
  opt = O.SGD{ lr = 0.1 }
  s = O.StepLR(opt, 2, 0.1)
  local plateau = O.ReduceLROnPlateau(opt, { patience = 0, factor = 0.5 })
  lrs = {}
  for i = 1, 5 do s:step(); plateau:step(1.0); lrs[i] = opt.lr end
  H.near(lrs, { 0.1, 0.005000000000000001, 0.0025000000000000005, 0.00012500000000000003, 6.250000000000001e-05 }, 1e-15)
  -- get_last_lr is each schedule's own; a chained schedule's state leaves lr to the optimizer's
  opt = O.SGD{ lr = 0.1 }
  local a, b = O.StepLR(opt, 1, 0.5), O.ExponentialLR(opt, 0.5)
  a:step(); b:step(); a:step(); b:step()
  H.near(a:get_last_lr(), 0.0125, 1e-15)
  H.near(b:get_last_lr(), 0.00625, 1e-15)
  local sd = a:state_dict()
  H.eq(sd.chained, true)
  opt.lr = 0.5
  a:load_state_dict(sd)
  H.eq(opt.lr, 0.5)
  a:step()
  H.near(opt.lr, 0.25, 1e-15)
  H.raises(function() O.ChainedScheduler(opt, { O.ReduceLROnPlateau(opt) }) end,
           "ChainedScheduler: expected a schedule stepped without a metric at 1")
  H.raises(function() O.ChainedScheduler(opt, { O.StepLR(O.SGD{}, 2) }) end,
           "ChainedScheduler: schedule 1 drives another optimizer")
  H.raises(function() O.ConstantLR(opt, 1.5) end, "ConstantLR: factor must be in (0, 1], got 1.5")
end)

H.test("CosineAnnealingWarmRestarts: periods counted exactly, and step(epoch) with fractions", function()
  local O = dl.optim
  -- torch: CosineAnnealingWarmRestarts(SGD(lr = 0.1), 1, 3) stepped 121 and 124 times
  local opt = O.SGD{ lr = 0.1 }
  local s = O.CosineAnnealingWarmRestarts(opt, 1, 3)
  for _ = 1, 121 do s:step() end
  H.near(opt.lr, 0.1, 1e-15, "a restart at 121 = 1 + 3 + 9 + 27 + 81")
  for _ = 1, 3 do s:step() end
  H.near(opt.lr, 0.09996239762521152, 1e-15)
  -- torch: CosineAnnealingWarmRestarts(SGD(lr = 0.1), 10, 2, 0.001), step(epoch) for each, then step()
  opt = O.SGD{ lr = 0.1 }
  s = O.CosineAnnealingWarmRestarts(opt, 10, 2, 0.001)
  local want = { { 0.5, 0.09939057285945932 }, { 3.25, 0.07636367895343947 }, { 9.9, 0.0010244252618962857 },
                 { 10, 0.1 }, { 12.5, 0.0962320368593087 }, { 29.75, 0.0010381627060842165 },
                 { 31, 0.09984740801978985 } }
  for _, w in ipairs(want) do
    s:step(w[1])
    H.near(opt.lr, w[2], 1e-15, "epoch " .. w[1])
  end
  s:step()
  H.eq(s.last_epoch, 32)
  H.near(opt.lr, 0.09939057285945932, 1e-15)
  -- a fractional position survives state_dict
  s:step(12.5)
  local opt2 = O.SGD{ lr = 0.1 }
  local s2 = O.CosineAnnealingWarmRestarts(opt2, 10, 2, 0.001)
  s2:load_state_dict(s:state_dict())
  H.near(opt2.lr, 0.0962320368593087, 1e-15)
  H.raises(function() s:step(-1) end, "CosineAnnealingWarmRestarts:step: epoch must be a finite number >= 0, got -1")
  H.raises(function() s:step(math.huge) end, "epoch must be a finite number >= 0, got inf")
  -- the others count the epochs themselves
  H.raises(function() O.StepLR(opt, 2):step(3) end, "StepLR:step takes no epoch (it counts them itself), got 3")
  H.raises(function() O.OneCycleLR(O.SGD{ momentum = 0.9 }, 1, 10):step(2) end, "OneCycleLR:step takes no epoch")
  H.raises(function() O.ChainedScheduler(opt, { O.StepLR(opt, 2) }):step(1) end, "ChainedScheduler:step takes no epoch")
  local plateau = O.ReduceLROnPlateau(opt)
  plateau:step(1.0, 7)
  H.eq(plateau.last_epoch, 7)
end)

H.test("OneCycleLR refuses a phase without steps (PyTorch divides by zero)", function()
  local O = dl.optim
  -- torch: OneCycleLR(opt, 0.5, total_steps=10, pct_start=0.1) raises ZeroDivisionError when made
  H.raises(function() O.OneCycleLR(O.SGD{ momentum = 0.9 }, 0.5, 10, { pct_start = 0.1 }) end,
           "OneCycleLR: phase 1 of the cycle has no steps (pct_start = 0.1 of total_steps = 10)")
  -- pct_start = 1: the falling phase is empty, reached at the 10th step (torch raises there too)
  local opt = O.SGD{ lr = 0.1, momentum = 0.9 }
  local s = O.OneCycleLR(opt, 0.5, 10, { pct_start = 1 })
  for _ = 1, 9 do s:step() end
  H.near(opt.lr, 0.5, 1e-15)
  H.raises(function() s:step() end, "OneCycleLR: phase 2 of the cycle has no steps")
end)

H.test("options of optimizers and schedules are checked when made", function()
  local O = dl.optim
  local sgd = O.SGD{ momentum = 0.9 }
  H.raises(function() O.OneCycleLR(sgd, 1, 10, { div_factor = "x" }) end, "OneCycleLR: div_factor must be a number > 0, got x")
  H.raises(function() O.OneCycleLR(sgd, 1, 10, { div_factor = 0 }) end, "OneCycleLR: div_factor must be a number > 0, got 0")
  H.raises(function() O.OneCycleLR(sgd, 1, 10, { final_div_factor = -1 }) end,
           "OneCycleLR: final_div_factor must be a number > 0, got -1")
  H.raises(function() O.OneCycleLR(sgd, 1, 10, { base_momentum = "x" }) end,
           "OneCycleLR: base_momentum must be a number >= 0, got x")
  H.raises(function() O.OneCycleLR(sgd, 1, 10, { three_phase = "yes" }) end, "OneCycleLR: three_phase must be a boolean, got yes")
  H.raises(function() O.OneCycleLR(sgd, 1, 10, { cycle_momentum = 1 }) end, "OneCycleLR: cycle_momentum must be a boolean, got 1")
  H.raises(function() O.ReduceLROnPlateau(sgd, { patience = "x" }) end, "ReduceLROnPlateau: patience must be an integer >= 0, got x")
  H.raises(function() O.ReduceLROnPlateau(sgd, { threshold = "x" }) end, "ReduceLROnPlateau: threshold must be a number >= 0, got x")
  H.raises(function() O.ReduceLROnPlateau(sgd, { cooldown = 1.5 }) end, "ReduceLROnPlateau: cooldown must be an integer >= 0, got 1.5")
  H.raises(function() O.ReduceLROnPlateau(sgd, { min_lr = -1 }) end, "ReduceLROnPlateau: min_lr must be a number >= 0, got -1")
  H.raises(function() O.Adam{ betas = { 0.9, 1.5 } } end, "Adam: betas must be two numbers in [0, 1), got {0.9, 1.5}")
  H.raises(function() O.NAdam{ betas = { 0.9 } } end, "NAdam: betas must be two numbers in [0, 1), got {0.9}")
  H.raises(function() O.Adadelta{ rho = 1.5 } end, "Adadelta: rho must be in [0, 1], got 1.5")
  O.Adadelta{ rho = 1 }
end)

H.test("NAdam keeps mu_product as PyTorch's float32 tensor does", function()
  -- torch: NAdam([x], lr=0.01, betas=(0.8, 0.95), momentum_decay=0.01), float64 x = [1, -2],
  -- 20 steps of the gradient [0.5 (t % 3 - 1), 1.5], t = 0..19
  local x = dl.Variable(dl.tensor({ 1.0, -2.0 }, { dtype = "float64" }))
  local opt = dl.optim.NAdam{ lr = 0.01, betas = { 0.8, 0.95 }, momentum_decay = 0.01 }
  for t = 0, 9 do opt:step({ x }, { dl.tensor({ 0.5 * (t % 3 - 1), 1.5 }, { dtype = "float64" }) }) end
  -- restored from its state dict halfway, it goes on the same
  local fresh = dl.optim.NAdam{ lr = 0.01, betas = { 0.8, 0.95 }, momentum_decay = 0.01 }
  fresh:load_state_dict(opt:state_dict())
  for t = 10, 19 do fresh:step({ x }, { dl.tensor({ 0.5 * (t % 3 - 1), 1.5 }, { dtype = "float64" }) }) end
  H.near(x:totable(), { 1.0118192254375233, -2.1901291750701186 }, 1e-15)
end)

H.test("LBFGS updates trainable parameters only, and takes params as its variables", function()
  dl.manual_seed(5)
  local lin = dl.nn.Linear(3, 1)
  lin.bias:requires_grad_(false)
  local x, y = dl.randn(16, 3), dl.randn(16, 1)
  local b0, w0 = lin.bias:clone(), lin.weight:clone()
  local opt = dl.optim.LBFGS{ max_iter = 5 }
  opt:minimize(function() return dl.nn.mse_loss(lin(x), y) end, lin)
  H.eq(lin.bias:totable(), b0:totable())
  H.ok((lin.weight - w0):abs():max():item() > 1e-3, "the weight moved")
  -- params: the variables minimize takes by default
  local function quad(v) return function() return ((v - dl.tensor({ 1.0, 2.0 })) ^ 2):sum() end end
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(2))
  dl.optim.LBFGS{ params = { a } }:minimize(quad(a))
  dl.optim.LBFGS{}:minimize(quad(b), { b })
  H.values(a, { 1, 2 }, { tol = 1e-5 })
  H.eq(a:totable(), b:totable())
  H.raises(function() dl.optim.LBFGS{}:minimize(quad(a)) end,
           "LBFGS:minimize: expected a list of variables (or params given to LBFGS), got nil")
  H.raises(function() dl.optim.LBFGS{ params = { 1 } } end, "LBFGS: params[1] is a number, expected a Variable")
end)

H.test("clip_grad_norm_: NaN and infinite norms as PyTorch's, p < 1, error_if_nonfinite", function()
  local U = dl.nn.utils
  local nan, inf = 0 / 0, math.huge
  local function grads(vals)
    local l = {}
    for i, v in ipairs(vals) do l[i] = dl.tensor(v) end
    return l
  end
  -- torch.nn.utils.clip_grad_norm_ (float32 grads [1, nan], [4, -2], max_norm 1): the norm is
  -- nan for norm_type inf and 2, and every gradient is multiplied by nan
  for _, p in ipairs({ inf, 2 }) do
    local g = grads({ { 1, nan }, { 4, -2 } })
    H.values(U.clip_grad_norm_(g, 1, p), nan)
    H.values(g[1], { nan, nan })
    H.values(g[2], { nan, nan })
  end
  -- an infinite norm: clip_coef 0 (and inf * 0 = nan)
  local g = grads({ { 1, inf }, { 4, -2 } })
  H.values(U.clip_grad_norm_(g, 1), inf)
  H.values(g[1], { 0, nan })
  H.values(g[2], { 0, 0 })
  -- norm_type 0.5: torch gives 9 for three ones; float64 [1, -2], [0.5, 3] clipped to 1.5
  H.values(U.clip_grad_norm_(grads({ { 1, 1, 1 } }), 100, 0.5), 9)
  local g64 = { dl.tensor({ 1, -2 }, { dtype = "float64" }), dl.tensor({ 0.5, 3 }, { dtype = "float64" }) }
  H.near(U.clip_grad_norm_(g64, 1.5, 0.5):item(), 23.55521153060657, 1e-14)
  H.near(g64[1]:totable(), { 0.06368017261788525, -0.1273603452357705 }, 1e-15)
  H.near(g64[2]:totable(), { 0.031840086308942625, 0.19104051785365575 }, 1e-15)
  -- error_if_nonfinite: an error, the gradients untouched
  g = grads({ { 1, nan } })
  H.raises(function() U.clip_grad_norm_(g, 1, { error_if_nonfinite = true }) end,
           "clip_grad_norm_: the total norm of order 2 of the gradients is nan, so they cannot be clipped")
  H.values(g[1], { 1, nan })
  H.raises(function() U.clip_grad_norm_(grads({ { 1, inf } }), 1, 1, { error_if_nonfinite = true }) end,
           "the total norm of order 1 of the gradients is inf")
  H.values(U.clip_grad_norm_(grads({ { 3, 4 } }), 10, { error_if_nonfinite = true }), 5)
  H.raises(function() U.clip_grad_norm_(grads({ { 1 } }), 1, 2, true) end, "clip_grad_norm_: expected an options table, got boolean")
  H.raises(function() U.clip_grad_norm_(grads({ { 1 } }), 1, 2, {}, 3) end, "clip_grad_norm_: too many arguments")
  H.raises(function() U.clip_grad_norm_(grads({ { 1 } }), 1, 2, { error_if_nonfinte = true }) end,
           "clip_grad_norm_: unknown option 'error_if_nonfinte'")
  H.raises(function() U.clip_grad_norm_(grads({ { 1 } }), 1, 0) end, "clip_grad_norm_: norm_type must be a number > 0 or math.huge, got 0")
end)

H.test("the REPL's help lists every option of each optimizer", function()
  local root = debug.getinfo(1, "S").source:match("^@(.-)tests/lua/[^/]*$") or ""
  local help = assert(loadfile(root .. "repl/help.lua"))()
  for _, name in ipairs({ "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
                          "Rprop", "ASGD" }) do
    local entry = help["dl.optim." .. name] or help[help._also["dl.optim." .. name]]
    H.ok(type(entry) == "table", "an entry for dl.optim." .. name)
    local sig = entry[1]:match("%f[%w]" .. name .. "(%b{})")
    H.ok(sig ~= nil, name .. " in " .. entry[1])
    for key in tostring(dl.optim[name]{}):gmatch("([%w_]+)=") do
      H.ok(sig:find("%f[%w_]" .. key .. "%f[^%w_]") ~= nil, name .. "'s help names " .. key .. ": " .. sig)
    end
  end
end)

H.test("load_state_dict refuses another optimizer type's state, and takes states without a class", function()
  local adam = dl.optim.Adam{ lr = 0.5 }
  local w = dl.Variable(dl.ones(3))
  adam:apply_gradients({ { dl.ones(3), w } })
  local sd = adam:state_dict()
  H.eq(sd.class, "Adam")
  local sgd = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }
  sgd:apply_gradients({ { dl.ones(3), w } })
  H.raises(function() sgd:load_state_dict(sd) end, "SGD:load_state_dict: the state is an Adam's, this optimizer is an SGD")
  H.eq(sgd.lr, 0.1)
  H.eq(sgd.iterations, 1)
  H.raises(function() dl.optim.Adam{}:load_state_dict({ class = 3 }) end, "Adam:load_state_dict: \"class\" must be a string")
  -- a state saved without "class" loads as before
  sd.class = nil
  local adam2 = dl.optim.Adam{ lr = 0.5 }
  adam2:load_state_dict(sd)
  H.eq(adam2.iterations, 1)
  H.eq(adam2:state_dict().class, "Adam")
  H.eq(dl.optim.LBFGS{}:state_dict().class, "LBFGS")
end)

-- ---- param groups, maximize, Rprop, ASGD, CyclicLR, PolynomialLR ----------------------------------

local F64 = { dtype = "float64" }

-- Two variables, w (2x3) and b (3), float64, and three steps of fixed gradients (the
-- torch runs below set p.grad to the same).
local function two_vars()
  return dl.Variable(dl.tensor({ { 0.5, -1.0, 2.0 }, { 1.5, 0.25, -0.75 } }, F64), "w"),
         dl.Variable(dl.tensor({ 0.1, -0.2, 0.3 }, F64), "b")
end
local function grads_at(k)   -- k = 0, 1, 2
  return dl.tensor({ { 0.2, -0.1, 0.4 }, { -0.3, 0.5, 0.05 } }, F64) * ((k + 1) * (-1) ^ k),
         dl.tensor({ 0.3, -0.6, 0.1 }, F64) * (1 + 0.5 * k)
end

H.test("param groups: each group's options, as PyTorch's (SGD with momentum, AdamW)", function()
  -- torch: SGD([{params: [w], lr: 0.1}, {params: [b], lr: 0.01, weight_decay: 0.1, nesterov: True}],
  -- lr=0.05, momentum=0.9), float64, three steps
  local w, b = two_vars()
  local opt = dl.optim.SGD{ params = { { params = { w }, lr = 0.1 },
                                       { params = b, lr = 0.01, weight_decay = 0.1, nesterov = true } },
                            lr = 0.05, momentum = 0.9 }
  local want = {
    { { 0.48, -0.99, 1.96, 1.53, 0.2, -0.755 }, { 0.09411, -0.18822, 0.29752999999999996 } },
    { { 0.502, -1.001, 2.004, 1.497, 0.255, -0.7495 }, { 0.082870191, -0.165740382, 0.29306169299999996 } },
    { { 0.4618, -0.9808999999999999, 1.9236, 1.5573000000000001, 0.1545, -0.7595500000000001 },
      { 0.0653316085371, -0.1306632170742, 0.28630117648329995 } } }
  for k = 0, 2 do
    local gw, gb = grads_at(k)
    opt:apply_gradients({ { gw, w }, { gb, b } })
    H.near(w:reshape(-1):totable(), want[k + 1][1], 1e-14, "w after step " .. k + 1)
    H.near(b:totable(), want[k + 1][2], 1e-14, "b after step " .. k + 1)
  end
  H.eq(#opt.param_groups, 2)
  H.eq(opt.param_groups[1].momentum, 0.9)
  H.eq(opt.param_groups[2].nesterov, true)
  H.ok(rawequal(opt.param_groups[2].params[1], b))
  -- torch: AdamW([{params: [w]}, {params: [b], lr: 0.1, weight_decay: 0, amsgrad: True, betas: (0.8, 0.9)}],
  -- lr=0.01), float64, three steps; the groups from a module and from named_parameters()
  w, b = two_vars()
  opt = dl.optim.AdamW{ params = { { params = { { "w", w } } },
                                   { params = { b }, lr = 0.1, weight_decay = 0, amsgrad = true, betas = { 0.8, 0.9 } } },
                        lr = 0.01 }
  for k = 0, 2 do
    local gw, gb = grads_at(k)
    opt:step({ w, b }, { gw, gb })
  end
  H.near(w:reshape(-1):totable(), { 0.4900802737269915, -0.9899302891900704, 1.989630318493702, 1.5093197864255348,
                                    0.2401552659490941, -0.7595447623810218 }, 1e-14)
  H.near(b:totable(), { -0.1983338800228599, 0.09833388401403514, 0.0016661359418400495 }, 1e-14)
  -- a module as a group's params
  local net = dl.nn.Sequential{ dl.nn.Linear(2, 3), dl.nn.Linear(3, 1) }
  local o2 = dl.optim.SGD{ params = { { params = net[1], lr = 1e-4 }, { params = net[2] } }, lr = 1e-2 }
  H.eq(#o2.param_groups[1].params, 2)
  H.eq(o2.param_groups[2].lr, 1e-2)
end)

H.test("param groups: lr changed between steps, schedules per group, state dicts round-trip", function()
  local O = dl.optim
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(2))
  local opt = O.SGD{ params = { { params = { a } }, { params = { b }, lr = 0.02 } }, lr = 0.1 }
  -- torch: StepLR(2, 0.5) on SGD([{params: [w]}, {params: [b], lr: 0.02}], lr=0.1),
  -- param_groups[0]["lr"] halved by hand after epoch 3
  local s = O.StepLR(opt, 2, 0.5)
  local want = { { 0.1, 0.02 }, { 0.05, 0.01 }, { 0.025, 0.01 }, { 0.0125, 0.005 }, { 0.0125, 0.005 }, { 0.00625, 0.0025 } }
  for e = 1, 6 do
    opt:apply_gradients({ { dl.ones(2), a }, { dl.ones(2), b } })
    local got = s:step()
    if e == 3 then opt.param_groups[1].lr = opt.param_groups[1].lr * 0.5 end
    H.near({ opt.param_groups[1].lr, opt.param_groups[2].lr }, want[e], 1e-15, "epoch " .. e)
    H.eq(type(got), "table")
  end
  H.eq(#s:get_last_lr(), 2)
  -- a step reads each group's lr afresh
  opt.param_groups[2].lr = 1
  local before = b:totable()[1]
  opt:apply_gradients({ { dl.ones(2), b } })
  H.near(b:totable()[1], before - 1, 1e-6)
  -- the optimizer's state dict carries each group's options; the schedule's each base lr
  local sd = opt:state_dict()
  H.eq(sd["param_groups.1.lr"], 0.00625)
  H.eq(sd["param_groups.2.lr"], 1)
  H.eq(sd["param_groups.2.nesterov"], false)
  H.eq(sd.lr, nil)
  local a2, b2 = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(2))
  local opt2 = O.SGD{ params = { { params = { a2 } }, { params = { b2 }, lr = 0.02 } }, lr = 0.1 }
  local s2 = O.StepLR(opt2, 2, 0.5)
  local group2 = opt2.param_groups[2]
  opt2:load_state_dict(sd)
  H.ok(rawequal(opt2.param_groups[2], group2), "the group tables stay")
  H.eq(opt2.param_groups[1].lr, 0.00625)
  H.eq(opt2.param_groups[2].lr, 1)
  local ssd = s:state_dict()
  H.eq(ssd["base_lr.2"], 0.02)
  s2:load_state_dict(ssd)
  H.eq(s2.last_epoch, 6)
  -- Adam's betas go as two numbers
  local o3 = O.Adam{ params = { { params = { a } }, { params = { b }, betas = { 0.5, 0.6 } } } }
  local sd3 = o3:state_dict()
  H.eq(sd3["param_groups.2.betas.1"], 0.5)
  sd3["param_groups.2.betas.2"] = 0.7
  o3:load_state_dict(sd3)
  H.eq(o3.param_groups[2].betas, { 0.5, 0.7 })
  H.eq(o3.param_groups[1].betas, { 0.9, 0.999 })
  -- all or nothing: a bad group entry changes nothing
  H.raises(function() o3:load_state_dict({ ["param_groups.2.betas.1"] = 0.1, ["param_groups.1.eps"] = -1 }) end,
           "Adam:load_state_dict: param group 1: eps must be a number >= 0, got -1")
  H.eq(o3.param_groups[2].betas, { 0.5, 0.7 })
  H.raises(function() o3:load_state_dict({ ["param_groups.3.lr"] = 0.1 }) end,
           "Adam:load_state_dict: loaded state dict has a different number of parameter groups (3, this optimizer has 2)")
  H.raises(function() o3:load_state_dict({ ["param_groups.1.amsgrad"] = 1, ["param_groups.2.eps"] = 1e-8 }) end,
           "Adam:load_state_dict: \"param_groups.1.amsgrad\" must be a boolean, got number")
  H.raises(function() o3:load_state_dict({ ["param_groups.1.params"] = 1, ["param_groups.2.eps"] = 1e-8 }) end,
           "Adam:load_state_dict: unexpected key \"param_groups.1.params\"")
  H.raises(function() o3:load_state_dict({ ["param_groups.1.eps.1"] = 1, ["param_groups.2.eps"] = 1e-8 }) end,
           "Adam:load_state_dict: unexpected key \"param_groups.1.eps.1\"")
  -- an optimizer made without groups is its one group: it takes a state of one group, but
  -- no key that is not one of its options
  local plain = O.Adam{}
  plain:load_state_dict({ ["param_groups.1.lr"] = 0.25, ["param_groups.1.betas.1"] = 0.5 })
  H.eq({ plain.lr, plain.betas[1], plain.betas[2] }, { 0.25, 0.5, 0.999 })
  H.raises(function() plain:load_state_dict({ ["param_groups.1.momentum"] = 1 }) end,
           "Adam:load_state_dict: unexpected key \"param_groups.1.momentum\"")
end)

H.test("param groups: errors name the optimizer, the group and the option", function()
  local O = dl.optim
  local a, b = dl.Variable(dl.zeros(2), "a"), dl.Variable(dl.zeros(3), "b")
  H.raises(function() O.SGD{ params = { { params = { a } }, { params = { b, a } } } } end,
           "SGD: a variable (a) is in param groups 1 and 2")
  H.raises(function() O.SGD{ params = { a }, momentom = 0.9 } end, "SGD: unknown option 'momentom'")
  H.raises(function() O.SGD{ params = { { params = { a } }, { params = { b }, momentum = -1 } } } end,
           "SGD: param group 2: momentum must be a number >= 0, got -1")
  H.raises(function() O.SGD{ params = { { params = { a }, lr = -1 } } } end, "SGD: param group 1: lr must be >= 0, got -1")
  H.raises(function() O.SGD{ params = { { params = { a }, nesterov = true } } } end,
           "SGD: param group 1: nesterov momentum needs momentum > 0")
  H.raises(function() O.Adam{ params = { { params = { a }, betas = { 0.9 } } } } end,
           "Adam: param group 1: betas must be two numbers in [0, 1), got {0.9}")
  H.raises(function() O.SGD{ params = { { lr = 0.1 } } } end, "SGD: param group 1 has no params")
  H.raises(function() O.SGD{ params = { { params = { a } }, b } } end,
           "SGD: params mixes param groups with other values (params[2] is a tensor)")
  H.raises(function() O.SGD{ params = { { params = { a, 3 } } } } end,
           "SGD: param group 1: params[2] is a number, expected a Variable")
  -- a variable outside every group: PyTorch's step would pass it by
  local opt = O.SGD{ params = { { params = { a } } } }
  H.raises(function() opt:apply_gradients({ { dl.ones(3), b } }) end,
           "SGD: a variable (b) of shape (3,) is in none of the param groups")
  H.raises(function() O.StepLR(O.SGD{ params = { { params = { a }, lr = function() return 1 end } } }, 2) end,
           "StepLR: the lr of param group 1 must be a number, got function")
end)

H.test("maximize: the gradient negated first, as PyTorch 1.13's", function()
  -- torch: each optimizer([x], maximize=True, ...), float64 x = [1, -2, 0.5], the three gradients below
  local gs = { { 0.5, 1.5, -0.25 }, { -0.3, 0.7, 0.9 }, { 0.2, -0.4, 0.6 } }
  local cases = {
    { "SGD", { lr = 0.1, momentum = 0.9, weight_decay = 0.1 }, { 1.041284, -1.395643, 0.635487 } },
    { "Adam", { lr = 0.1, weight_decay = 0.1, amsgrad = true },
      { 1.0985349490044733, -1.7412770001628657, 0.5132801428782241 } },
    { "AdamW", { lr = 0.1 }, { 1.1506765184100576, -1.7478504567096023, 0.5219313894358217 } },
    { "Adagrad", { lr = 0.1, weight_decay = 0.1 }, { 1.0451448504671135, -1.8647350434394212, 0.5461500708909425 } },
    { "RMSprop", { lr = 0.01, momentum = 0.5, centered = true },
      { 1.13114400424935, -1.783679396987269, 0.5236511298813353 } },
    { "Adadelta", { lr = 1.0, weight_decay = 0.1 }, { 1.0009367650968741, -1.9952131812569835, 0.5043800546109075 } },
    { "Adamax", { lr = 0.1 }, { 1.1405780441473086, -1.7923796180274087, 0.48903123985387353 } },
    { "Rprop", { lr = 0.1 }, { 1.1500000000000001, -1.7799999999999998, 0.45 } },
  }
  for _, c in ipairs(cases) do
    local x = dl.Variable(dl.tensor({ 1.0, -2.0, 0.5 }, F64))
    c[2].maximize = true
    local opt = dl.optim[c[1]](c[2])
    for _, g in ipairs(gs) do opt:step({ x }, { dl.tensor(g, F64) }) end
    H.near(x:totable(), c[3], 1e-14, c[1])
  end
  H.raises(function() dl.optim.SGD{ maximize = 1 } end, "SGD: maximize must be a boolean, got number")
  -- (torch 1.13's NAdam and RAdam have no maximize)
  H.raises(function() dl.optim.NAdam{ maximize = true } end, "NAdam: unknown option 'maximize'")
end)

-- the gradients of the Rprop and ASGD runs: sign changes, zeros
local GR = { { 0.5, -1.0, 0.0, 2.0 }, { 0.4, 1.0, 0.3, 2.0 }, { -0.2, 0.5, 0.3, 0.0 }, { 0.1, 0.5, -0.3, 1.0 },
             { 0.1, -0.5, -0.3, 1.0 } }

H.test("Rprop follows PyTorch 1.13 step by step", function()
  -- torch: Rprop([x]) and Rprop([x], lr=0.05, etas=(0.3, 1.5), step_sizes=(0.01, 0.1)), float64
  -- x = [1, 2, -3, 0.5]; x and state["step_size"] after each step
  local runs = {
    { {}, { { 0.99, 2.01, -3.0, 0.49 }, { 0.01, 0.01, 0.01, 0.01 } },
      { { 0.978, 2.01, -3.01, 0.478 }, { 0.012, 0.005, 0.01, 0.012 } },
      { { 0.978, 2.005, -3.022, 0.478 }, { 0.006, 0.005, 0.012, 0.012 } },
      { { 0.972, 1.9989999999999999, -3.022, 0.46599999999999997 }, { 0.006, 0.006, 0.006, 0.012 } },
      { { 0.9648, 1.9989999999999999, -3.016, 0.45159999999999995 }, { 0.0072, 0.003, 0.006, 0.0144 } } },
    { { lr = 0.05, etas = { 0.3, 1.5 }, step_sizes = { 0.01, 0.1 } },
      { { 0.95, 2.05, -3.0, 0.45 }, { 0.05, 0.05, 0.05, 0.05 } },
      { { 0.875, 2.05, -3.05, 0.375 }, { 0.07500000000000001, 0.015, 0.05, 0.07500000000000001 } },
      { { 0.875, 2.0349999999999997, -3.125, 0.375 },
        { 0.022500000000000003, 0.015, 0.07500000000000001, 0.07500000000000001 } },
      { { 0.8525, 2.0124999999999997, -3.125, 0.3 },
        { 0.022500000000000003, 0.0225, 0.022500000000000003, 0.07500000000000001 } },
      { { 0.8187500000000001, 2.0124999999999997, -3.1025, 0.19999999999999998 },
        { 0.03375, 0.01, 0.022500000000000003, 0.1 } } },
  }
  for r, run in ipairs(runs) do
    local x = dl.Variable(dl.tensor({ 1.0, 2.0, -3.0, 0.5 }, F64))
    local opt = dl.optim.Rprop(run[1])
    for k, g in ipairs(GR) do
      opt:step({ x }, { dl.tensor(g, F64) })
      H.near(x:totable(), run[k + 1][1], 1e-15, "run " .. r .. " x after step " .. k)
      H.near(opt:state_dict()["state.1.step_size"]:totable(), run[k + 1][2], 1e-15, "run " .. r .. " step sizes " .. k)
    end
    H.eq(opt:state_dict()["state.1.step"], 5)
  end
  -- torch: Rprop([x], lr=0.03, etas=(0.3, 1.7)), float32; restored halfway from its state dict
  local x = dl.Variable(dl.tensor({ 1.0, 2.0, -3.0, 0.5 }))
  local opt = dl.optim.Rprop{ lr = 0.03, etas = { 0.3, 1.7 } }
  for k = 1, 2 do opt:step({ x }, { dl.tensor(GR[k]) }) end
  local fresh = dl.optim.Rprop{ lr = 0.03, etas = { 0.3, 1.7 } }
  fresh:load_state_dict(opt:state_dict())
  for k = 3, 5 do fresh:step({ x }, { dl.tensor(GR[k]) }) end
  H.near(x:totable(), { 0.8776900768280029, 2.005699872970581, -3.065699815750122, 0.28130000829696655 }, 1e-7)
  -- torch: Rprop(..., lr=0.05, etas=(0.3, 1.5), step_sizes=(0.01, 0.1), maximize=True), float64
  x = dl.Variable(dl.tensor({ 1.0, 2.0, -3.0, 0.5 }, F64))
  opt = dl.optim.Rprop{ lr = 0.05, etas = { 0.3, 1.5 }, step_sizes = { 0.01, 0.1 }, maximize = true }
  for _, g in ipairs(GR) do opt:step({ x }, { dl.tensor(g, F64) }) end
  H.near(x:totable(), { 1.18125, 1.9874999999999998, -2.8975, 0.7999999999999999 }, 1e-15)
  H.raises(function() dl.optim.Rprop{ etas = { 0.5, 0.9 } } end,
           "Rprop: etas must be two numbers, 0 < etas[1] < 1 < etas[2], got {0.5, 0.9}")
  H.raises(function() dl.optim.Rprop{ step_sizes = { 1, 0.1 } } end,
           "Rprop: step_sizes must be two numbers, 0 <= min <= max, got {1, 0.1}")
  H.raises(function() dl.optim.Rprop{ lr = 0.1, eta = 1 } end, "Rprop: unknown option 'eta'")
end)

H.test("ASGD follows PyTorch 1.13 step by step (eta and mu in float32)", function()
  -- torch: ASGD([x], lr=0.1, lambd=0.01, alpha=0.75, t0=2, weight_decay=0.1) and
  -- ASGD([x], lr=0.1, t0=1, maximize=True), float64 x = [1, 2, -3, 0.5], five steps: x, and
  -- state ax, eta, mu
  local runs = {
    { { lr = 0.1, lambd = 0.01, alpha = 0.75, t0 = 2, weight_decay = 0.1 },
      { 0.8594631333570918, 1.8432342872557927, -2.8376144193426662, -0.10994652986037043 },
      { 0.8692686393995674, 1.8282521965568894, -2.8684681751409915, -0.060152811067522564 },
      0.09962663054466248, 0.3333333432674408 },
    { { lr = 0.1, t0 = 1, maximize = true },
      { 1.0899465779276567, 2.0498983755401756, -2.9998503066626405, 1.099953252701789 },
      { 1.0799576190858553, 2.0665852483681317, -2.9698807302812624, 0.9999656705485411 },
      0.09999625384807587, 0.25 },
  }
  for r, run in ipairs(runs) do
    local x = dl.Variable(dl.tensor({ 1.0, 2.0, -3.0, 0.5 }, F64))
    local opt = dl.optim.ASGD(run[1])
    for _, g in ipairs(GR) do opt:step({ x }, { dl.tensor(g, F64) }) end
    local sd = opt:state_dict()
    H.near(x:totable(), run[2], 1e-15, "run " .. r .. " x")
    H.near(sd["state.1.ax"]:totable(), run[3], 1e-15, "run " .. r .. " ax")
    H.eq(sd["state.1.eta"], run[4])
    H.eq(sd["state.1.mu"], run[5])
  end
  -- torch: ASGD([x], lr=0.05, lambd=0.1, t0=1), float32, restored after two steps
  local x = dl.Variable(dl.tensor({ 1.0, 2.0, -3.0, 0.5 }))
  local opt = dl.optim.ASGD{ lr = 0.05, lambd = 0.1, t0 = 1 }
  for k = 1, 2 do opt:step({ x }, { dl.tensor(GR[k]) }) end
  local fresh = dl.optim.ASGD{ lr = 0.05, lambd = 0.1, t0 = 1 }
  fresh:load_state_dict(opt:state_dict())
  for k = 3, 5 do fresh:step({ x }, { dl.tensor(GR[k]) }) end
  H.near(x:totable(), { 0.9312721490859985, 1.9262601137161255, -2.9262170791625977, 0.1930617094039917 }, 1e-7)
  H.near(fresh:state_dict()["state.1.ax"]:totable(),
         { 0.94086092710495, 1.9275624752044678, -2.9556405544281006, 0.2436702698469162 }, 1e-7)
  H.raises(function() dl.optim.ASGD{ t0 = -1 } end, "ASGD: t0 must be a number >= 0, got -1")
end)

-- Steps a schedule made by make(opt) on SGD(lr = 0.1) (with groups: lr 0.1 and 0.02) and
-- compares each epoch's lrs (and momenta) with torch's.
local function check_schedule(what, make, want, opts)
  opts = opts or {}
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(2))
  local O = dl.optim
  local o = opts.optimizer or "SGD"
  local opt
  if opts.groups then
    opt = O[o]{ params = { { params = { a } }, { params = { b }, lr = 0.02 } }, lr = 0.1, momentum = opts.momentum }
  else
    opt = O[o]{ lr = 0.1, momentum = opts.momentum }
  end
  local s = make(opt)
  for e, w in ipairs(want) do
    if e > 1 then s:step() end
    for i, g in ipairs(opt.param_groups) do
      H.near(g.lr, w[i], opts.tol or 1e-15, what .. " epoch " .. (e - 1) .. " group " .. i)
      if w.mom then H.near(g.momentum, w.mom[i], 1e-15, what .. " momentum, epoch " .. (e - 1) .. " group " .. i) end
    end
  end
  return s, opt
end

H.test("MultiStepLR counts a repeated milestone twice, as PyTorch's Counter", function()
  local O = dl.optim
  -- torch: MultiStepLR(opt, [2, 2, 4], 0.5) alone, and chained with ExponentialLR(0.9); epochs 0..5
  check_schedule("MultiStepLR", function(o) return O.MultiStepLR(o, { 2, 2, 4 }, 0.5) end,
                 { { 0.1 }, { 0.1 }, { 0.025 }, { 0.025 }, { 0.0125 }, { 0.0125 } })
  check_schedule("MultiStepLR + ExponentialLR", function(o)
    return O.ChainedScheduler(o, { O.MultiStepLR(o, { 2, 2, 4 }, 0.5), O.ExponentialLR(o, 0.9) })
  end, { { 0.1 }, { 0.09000000000000001 }, { 0.020250000000000004 }, { 0.018225000000000005 },
         { 0.008201250000000002 }, { 0.007381125000000002 } })
end)

H.test("PolynomialLR follows PyTorch's", function()
  local O = dl.optim
  -- torch: PolynomialLR(opt, 4, 2.0); PolynomialLR(opt) on two groups; epochs 0..6
  check_schedule("PolynomialLR(4, 2)", function(o) return O.PolynomialLR(o, 4, 2) end,
                 { { 0.1 }, { 0.05625 }, { 0.024999999999999998 }, { 0.0062499999999999995 }, { 0 }, { 0 }, { 0 } })
  check_schedule("PolynomialLR() with groups", function(o) return O.PolynomialLR(o) end,
                 { { 0.1, 0.02 }, { 0.08000000000000002, 0.016 }, { 0.060000000000000005, 0.011999999999999999 },
                   { 0.04000000000000001, 0.008 }, { 0.02, 0.003999999999999999 }, { 0, 0 }, { 0, 0 } },
                 { groups = true })
  H.raises(function() O.PolynomialLR(O.SGD{}, 0) end, "PolynomialLR: total_iters must be an integer >= 1, got 0")
  H.raises(function() O.PolynomialLR(O.SGD{}, 3, -1) end, "PolynomialLR: power must be a number >= 0, got -1")
end)

H.test("CyclicLR follows PyTorch's: triangular, triangular2, exp_range, momentum, groups", function()
  local O = dl.optim
  -- torch: CyclicLR(SGD(lr=0.1, momentum=0.9), 0.01, 0.1, step_size_up=3, step_size_down=2): lr and momentum, epochs 0..11
  local lr = { 0.01, 0.039999999999999994, 0.06999999999999999, 0.09999999999999999, 0.055, 0.01, 0.04000000000000003,
               0.06999999999999999, 0.09999999999999999, 0.05500000000000005, 0.01, 0.04000000000000003 }
  local mom = { 0.9, 0.8666666666666667, 0.8333333333333334, 0.8, 0.8500000000000001, 0.9, 0.8666666666666667,
                0.8333333333333334, 0.8, 0.85, 0.9, 0.8666666666666667 }
  local want = {}
  for e = 1, #lr do want[e] = { lr[e], mom = { mom[e] } } end
  check_schedule("triangular", function(o) return O.CyclicLR(o, 0.01, 0.1, { step_size_up = 3, step_size_down = 2 }) end,
                 want, { momentum = 0.9 })
  -- torch: CyclicLR(SGD(lr=0.1), 0.01, 0.1, step_size_up=2, mode="triangular2", cycle_momentum=False), epochs 0..10
  lr = { 0.01, 0.05500000000000001, 0.1, 0.05500000000000001, 0.01, 0.0325, 0.05500000000000001, 0.0325, 0.01, 0.02125,
         0.0325 }
  want = {}
  for e = 1, #lr do want[e] = { lr[e] } end
  check_schedule("triangular2", function(o)
    return O.CyclicLR(o, 0.01, 0.1, { step_size_up = 2, mode = "triangular2", cycle_momentum = false })
  end, want)
  -- torch: CyclicLR on two groups (SGD momentum 0.9), [0.01, 0.001], [0.1, 0.05], step_size_up=2,
  -- mode="exp_range", gamma=0.9, base_momentum=[0.8, 0.7], max_momentum=0.95; epochs 0..7
  want = {
    { 0.01, 0.001, mom = { 0.95, 0.95 } },
    { 0.05050000000000001, 0.02305, mom = { 0.8825, 0.8374999999999999 } },
    { 0.0829, 0.040690000000000004, mom = { 0.8285, 0.7474999999999999 } },
    { 0.04280500000000001, 0.018860500000000002, mom = { 0.8953249999999999, 0.8588749999999999 } },
    { 0.01, 0.001, mom = { 0.95, 0.95 } },
    { 0.03657205000000001, 0.015467005000000002, mom = { 0.90571325, 0.87618875 } },
    { 0.05782969000000001, 0.027040609000000004, mom = { 0.87028385, 0.8171397499999999 } },
    { 0.03152336050000001, 0.012718274050000002, mom = { 0.9141277325, 0.8902128874999999 } } }
  local s = check_schedule("exp_range", function(o)
    return O.CyclicLR(o, { 0.01, 0.001 }, { 0.1, 0.05 }, { step_size_up = 2, mode = "exp_range", gamma = 0.9,
                                                          base_momentum = { 0.8, 0.7 }, max_momentum = 0.95 })
  end, want, { groups = true, momentum = 0.9 })
  H.eq(s.last_epoch, 7)
  -- torch 1.13 refuses cycle_momentum with an optimizer without momentum (Adam: ValueError)
  H.raises(function() O.CyclicLR(O.Adam{}, 0.01, 0.1) end,
           "CyclicLR: cycle_momentum needs an optimizer with a momentum option (SGD, RMSprop)")
  O.CyclicLR(O.Adam{}, 0.01, 0.1, { cycle_momentum = false })
  H.raises(function() O.CyclicLR(O.SGD{}, 0.01, 0.1, { mode = "sine" }) end,
           "CyclicLR: mode must be triangular, triangular2 or exp_range (or give scale_fn), got sine")
  H.raises(function() O.CyclicLR(O.SGD{}, 0.01, 0.1, { step_size_up = 0 }) end,
           "CyclicLR: step_size_up must be a number > 0, got 0")
  H.raises(function() O.CyclicLR(O.SGD{}, { 0.01, 0.02 }, 0.1) end,
           "CyclicLR: expected 1 values for base_lr (one per param group), got 2")
  H.raises(function() O.CyclicLR(O.SGD{}, 0.01, 0.1, { step_up = 2 }) end, "CyclicLR: unknown option 'step_up'")
  -- a scale_fn of the cycle: triangular's, given by hand
  local opt = O.SGD{ momentum = 0.9 }
  local c = O.CyclicLR(opt, 0.01, 0.1, { step_size_up = 2, scale_fn = function() return 1 end })
  c:step()
  H.near(opt.lr, 0.05500000000000001, 1e-15)
end)

H.test("OneCycleLR, ReduceLROnPlateau and LambdaLR take one value per param group", function()
  local O = dl.optim
  -- torch: OneCycleLR(Adam([{params: [w]}, {params: [b], lr: 0.02}], lr=0.1), [0.5, 0.1], 10), epochs 0..6
  check_schedule("OneCycleLR", function(o) return O.OneCycleLR(o, { 0.5, 0.1 }, 10) end,
                 { { 0.020000000000000018, 0.0040000000000000036 }, { 0.26, 0.052000000000000005 }, { 0.5, 0.1 },
                   { 0.47524231600673683, 0.09504846320134738 }, { 0.40587282697488153, 0.0811745653949763 },
                   { 0.30563101096814466, 0.06112620219362893 }, { 0.19437098903185537, 0.03887419780637107 } },
                 { groups = true, optimizer = "Adam" })
  -- torch: ReduceLROnPlateau(SGD([{params: [w]}, {params: [b], lr: 0.02}], lr=0.1), factor=0.5,
  -- patience=0, min_lr=[0.06, 0]), step(1.0) four times
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(2))
  local opt = O.SGD{ params = { { params = { a } }, { params = { b }, lr = 0.02 } }, lr = 0.1 }
  local p = O.ReduceLROnPlateau(opt, { factor = 0.5, patience = 0, min_lr = { 0.06, 0 } })
  local got = {}
  for i = 1, 4 do got[i] = p:step(1.0) end
  H.eq(got, { { 0.1, 0.02 }, { 0.06, 0.01 }, { 0.06, 0.005 }, { 0.06, 0.0025 } })
  -- LambdaLR: a function per group
  opt = O.SGD{ params = { { params = { a } }, { params = { b }, lr = 0.02 } }, lr = 0.1 }
  local l = O.LambdaLR(opt, { function(e) return 0.5 ^ e end, function(e) return 1 + e end })
  H.eq(l:step(), { 0.05, 0.04 })
  H.raises(function() O.LambdaLR(opt, { function() return 1 end }) end,
           "LambdaLR: expected 2 values for lr_lambda (one per param group), got 1")
end)

-- ---- param groups as the source of truth, and restoring with schedules ---------------------------

H.test("a param group with an lr function loads a state dict and restores from a Checkpoint", function()
  local O = dl.optim
  local a, b = dl.Variable(dl.tensor({ 0.3, -0.7, 1.2 })), dl.Variable(dl.tensor({ -0.4, 0.9 }))
  local function f() return 0.1 end
  local o = O.SGD{ params = { { params = { a }, lr = f }, { params = { b } } }, lr = 0.1 }
  o:load_state_dict(o:state_dict())
  H.ok(rawequal(o.param_groups[1].lr, f), "the function stays")
  o = O.SGD{ params = { { params = { a } }, { params = { b }, lr = 0.2 } }, lr = f }
  o:load_state_dict(o:state_dict())
  H.ok(rawequal(o.param_groups[1].lr, f) and o.param_groups[2].lr == 0.2)
  local c = dl.Variable(dl.tensor({ 1.0 }))
  local function make()
    return O.SGD{ params = { { params = { c }, lr = function(t) return 0.1 / (t + 1) end } }, lr = 0.1, momentum = 0.9 }
  end
  local opt = make()
  opt:step({ c }, { dl.tensor({ 1 }) })
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "'")
  local file = dl.Checkpoint{ optimizer = opt, c = c }:save(dir .. "/ckpt")
  local opt2 = make()
  dl.Checkpoint{ optimizer = opt2, c = c }:restore(file)
  H.eq(opt2.iterations, 1)
  H.near(opt2:state_dict()["state.1.momentum_buffer"]:totable(), { 1 }, 0)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("CyclicLR's and OneCycleLR's momentum restore with an optimizer made without groups", function()
  local O = dl.optim
  -- torch: SGD([a], lr=0.1, momentum=0.9) with CyclicLR(opt, 0.01, 0.1, step_size_up=4), float64, gradients of
  -- ones; three steps, state dicts into a new pair, two more steps: momentum 0.825 and the same a as the first run
  local function cyclic(a)
    local opt = O.SGD{ params = { a }, lr = 0.1, momentum = 0.9 }
    return opt, O.CyclicLR(opt, 0.01, 0.1, { step_size_up = 4 })
  end
  local a = dl.Variable(dl.tensor({ 0.3, -0.7, 1.2 }, F64))
  local opt, s = cyclic(a)
  for _ = 1, 3 do opt:step({ a }, { dl.ones(3, F64) }); s:step() end
  local a2 = dl.Variable(a:clone())
  local opt2, s2 = cyclic(a2)
  opt2:load_state_dict(opt:state_dict())
  s2:load_state_dict(s:state_dict())
  H.near(opt2.momentum, 0.8250000000000001, 1e-15)
  H.near(opt2.lr, 0.0775, 1e-15)
  for _, run in ipairs({ { opt, s, a }, { opt2, s2, a2 } }) do
    for _ = 1, 2 do run[1]:step({ run[3] }, { dl.ones(3, F64) }); run[2]:step() end
    H.near(run[3]:totable(), { -0.5081191406250001, -1.508119140625, 0.3918808593749998 }, 1e-15)
  end
  -- torch: Adam([b], lr=0.1) with OneCycleLR(opt, 0.5, 10), gradient [1, -2]: betas[0] after three steps,
  -- and b after two more, restored or not
  local function one_cycle(b)
    local opt = O.Adam{ params = { b }, lr = 0.1 }
    return opt, O.OneCycleLR(opt, 0.5, 10)
  end
  local b = dl.Variable(dl.tensor({ 0.3, -0.7 }, F64))
  opt, s = one_cycle(b)
  local g = dl.tensor({ 1, -2 }, F64)
  for _ = 1, 3 do opt:step({ b }, { g }); s:step() end
  local b2 = dl.Variable(b:clone())
  opt2, s2 = one_cycle(b2)
  s2:load_state_dict(s:state_dict())   -- (either order)
  opt2:load_state_dict(opt:state_dict())
  H.near(opt2.betas[1], 0.854951556604879, 1e-15)
  H.eq(opt2.betas[2], 0.999)
  for _, run in ipairs({ { opt, s, b }, { opt2, s2, b2 } }) do
    for _ = 1, 2 do run[1]:step({ run[3] }, { g }); run[2]:step() end
    H.near(run[3]:totable(), { -1.028778398540854, 0.628778405184746 }, 1e-14)
  end
  -- an optimizer that no schedule moved keeps its state dict as it was
  local keys = {}
  for k in pairs(O.SGD{ lr = 0.1, momentum = 0.9 }:state_dict()) do keys[#keys + 1] = k end
  table.sort(keys)
  H.eq(keys, { "class", "iterations", "lr" })
end)

H.test("a schedule's state leaves the optimizer's restored lr, set by hand after its last step", function()
  local O = dl.optim
  -- torch: StepLR(SGD([{params: [a]}], lr=0.1), 2, 0.5) stepped 3 times, then param_groups[0]["lr"] = 0.03;
  -- the optimizer's and the schedule's state dicts into a new pair: lr 0.03, then 0.015 and 0.015 in both runs
  for _, grouped in ipairs({ true, false }) do
    for _, schedule_first in ipairs({ false, true }) do
      local a = dl.Variable(dl.zeros(1))
      local function make()
        local o = grouped and O.SGD{ params = { { params = { a } } }, lr = 0.1 } or O.SGD{ params = { a }, lr = 0.1 }
        return o, O.StepLR(o, 2, 0.5)
      end
      local o, s = make()
      s:step(); s:step(); s:step()
      o.param_groups[1].lr = 0.03
      local o2, s2 = make()
      if schedule_first then s2:load_state_dict(s:state_dict()) end
      o2:load_state_dict(o:state_dict())
      if not schedule_first then s2:load_state_dict(s:state_dict()) end
      local what = (grouped and "groups" or "no groups") .. (schedule_first and ", schedule first" or "")
      H.eq(o2.param_groups[1].lr, 0.03, what)
      for _, want in ipairs({ 0.015, 0.015 }) do
        s:step(); s2:step()
        H.near({ o.param_groups[1].lr, o2.param_groups[1].lr }, { want, want }, 1e-15, what)
      end
    end
  end
end)

H.test("param groups hold their own betas, etas and step sizes", function()
  local O = dl.optim
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(2))
  local opt = O.Adam{ params = { { params = { a } }, { params = { b } } }, lr = 0.1 }
  H.ok(not rawequal(opt.param_groups[1].betas, opt.param_groups[2].betas), "two tables")
  H.ok(not rawequal(opt.param_groups[1].betas, opt.betas), "not the optimizer's")
  opt.param_groups[1].betas[1] = 0.5
  H.eq(opt.param_groups[2].betas, { 0.9, 0.999 })
  H.eq(O.Adam{}.betas, { 0.9, 0.999 })
  local mine = { 0.8, 0.9 }
  local adam = O.Adam{ betas = mine }
  adam.betas[1] = 0.1
  H.eq(mine, { 0.8, 0.9 })
  local rp = O.Rprop{ params = { { params = { a } }, { params = { b }, etas = { 0.4, 1.3 } } } }
  rp.param_groups[1].etas[1], rp.param_groups[1].step_sizes[2] = 0.3, 10
  H.eq({ O.Rprop{}.etas, O.Rprop{}.step_sizes, rp.etas, rp.param_groups[2].etas },
       { { 0.5, 1.2 }, { 1e-6, 50 }, { 0.5, 1.2 }, { 0.4, 1.3 } })
end)

H.test("load_state_dict refuses another number of param groups, changing nothing", function()
  local O = dl.optim
  local a, b = dl.Variable(dl.zeros(3)), dl.Variable(dl.zeros(2))
  local one = O.SGD{ params = { { params = { a } } }, lr = 0.1, momentum = 0.9 }
  local two = O.SGD{ params = { { params = { a }, lr = 0.5 }, { params = { b }, lr = 0.7 } }, lr = 0.1, momentum = 0.9 }
  local plain = O.SGD{ params = { a, b }, lr = 0.3, momentum = 0.9 }
  one:step({ a }, { dl.ones(3) })
  plain:step({ a, b }, { dl.ones(3), dl.ones(2) })
  -- torch: ValueError("loaded state dict has a different number of parameter groups")
  H.raises(function() two:load_state_dict(one:state_dict()) end,
           "SGD:load_state_dict: loaded state dict has a different number of parameter groups (1, this optimizer has 2)")
  H.raises(function() two:load_state_dict(plain:state_dict()) end,
           "SGD:load_state_dict: loaded state dict has a different number of parameter groups (1, this optimizer has 2)")
  H.raises(function() plain:load_state_dict(two:state_dict()) end,
           "SGD:load_state_dict: loaded state dict has a different number of parameter groups (2, this optimizer has 1)")
  H.eq({ two.param_groups[1].lr, two.param_groups[2].lr, two.iterations, two.lr }, { 0.5, 0.7, 0, 0.1 })
  H.eq({ plain.lr, plain.iterations }, { 0.3, 1 })
  -- one group, with or without groups, is the same to PyTorch: each takes the other's state
  local p1 = O.SGD{ params = { a }, lr = 0.2, momentum = 0.9 }
  p1:load_state_dict(one:state_dict())
  H.eq({ p1.lr, p1.iterations }, { 0.1, 1 })
  local g1 = O.SGD{ params = { { params = { a } } }, lr = 0.2, momentum = 0.9 }
  g1:load_state_dict(p1:state_dict())
  H.eq({ g1.param_groups[1].lr, g1.iterations }, { 0.1, 1 })
  H.near(g1:state_dict()["state.1.momentum_buffer"]:totable(), { 1, 1, 1 }, 0)
  H.raises(function() g1:load_state_dict({ lr = 0.1, ["param_groups.1.lr"] = 0.1 }) end,
           "SGD:load_state_dict: the state has both \"lr\" (no param groups) and \"param_groups.1.lr\"")
end)

H.test("opt.param_groups is what a step reads: params edited, groups added", function()
  local O = dl.optim
  local function vars()
    return dl.Variable(dl.tensor({ 1, 2 }, F64), "x"), dl.Variable(dl.tensor({ 3 }, F64), "y"),
           dl.Variable(dl.tensor({ -1, 0.5 }, F64), "z")
  end
  -- torch: SGD([{params: [x]}], lr=0.1, momentum=0.9); add_param_group({params: [y], lr: 0.5});
  -- param_groups[0]["params"].append(z); two steps (x.grad ones, y.grad 1, z.grad [1, -1]);
  -- param_groups[0]["params"].remove(x); a step with z.grad only
  local x, y, z = vars()
  local opt = O.SGD{ params = { { params = { x } } }, lr = 0.1, momentum = 0.9 }
  local added = opt:add_param_group{ params = { y }, lr = 0.5 }
  H.ok(rawequal(opt.param_groups[2], added))
  H.eq({ added.lr, added.momentum, added.dampening, added.weight_decay, added.nesterov, added.maximize },
       { 0.5, 0.9, 0, 0, false, false })
  H.raises(function() opt:add_param_group{ params = { x } } end,
           "SGD:add_param_group: a variable (x) is already in param group 1")
  H.raises(function() opt:add_param_group{ params = { z }, momentum = -1 } end,
           "SGD:add_param_group: the group: momentum must be a number >= 0, got -1")
  H.raises(function() opt:add_param_group(z) end, "SGD:add_param_group: expected a param group")
  H.eq(#opt.param_groups, 2)
  table.insert(opt.param_groups[1].params, z)
  local dz = dl.tensor({ 1, -1 }, F64)
  for _ = 1, 2 do opt:step({ x, y, z }, { dl.ones(2, F64), dl.ones(1, F64), dz }) end
  H.near(x:totable(), { 0.7100000000000001, 1.71 }, 1e-15)
  H.near(y:totable(), { 1.55 }, 1e-15)
  H.near(z:totable(), { -1.29, 0.7899999999999999 }, 1e-15)
  table.remove(opt.param_groups[1].params, 1)
  H.raises(function() opt:step({ x }, { dl.ones(2, F64) }) end,
           "SGD: a variable (x) of shape (2,) is in none of the param groups")
  opt:step({ z }, { dz })
  H.near(z:totable(), { -1.561, 1.061 }, 1e-15)
  H.near(x:totable(), { 0.7100000000000001, 1.71 }, 1e-15)
  -- the state numbers the groups' variables as they are now: it restores into groups made so
  local sd = opt:state_dict()
  H.near(sd["state.1.momentum_buffer"]:totable(), { 2.71, -2.71 }, 1e-15)   -- z's
  H.near(sd["state.2.momentum_buffer"]:totable(), { 1.9 }, 1e-15)            -- y's
  H.eq(sd["state.3.momentum_buffer"], nil)
  local _, y2, z2 = vars()
  local fresh = O.SGD{ params = { { params = { z2 } }, { params = { y2 }, lr = 0.5 } }, lr = 0.1, momentum = 0.9 }
  fresh:load_state_dict(sd)
  y2:assign(y)
  z2:assign(z)
  opt:step({ y, z }, { dl.ones(1, F64), dz })
  fresh:step({ y2, z2 }, { dl.ones(1, F64), dz })
  H.eq({ y2:totable(), z2:totable() }, { y:totable(), z:totable() })
  H.raises(function() O.SGD{ params = { { params = { z2 } } }, momentum = 0.9 }:load_state_dict(sd) end,
           "loaded state dict has a different number of parameter groups (2, this optimizer has 1)")
  local small = O.SGD{ params = { { params = { z2 } }, { params = {} } }, momentum = 0.9 }
  H.raises(function() small:load_state_dict(sd) end,
           "SGD:load_state_dict: \"state.2.momentum_buffer\": the state has a variable 2, the param groups hold 1")
  -- a group put in the list by hand takes the options it leaves out; a variable in two groups is refused
  local w = dl.Variable(dl.zeros(2, F64), "w")
  opt.param_groups[3] = { params = { w }, lr = 0.2 }
  opt:step({ w }, { dl.ones(2, F64) })
  H.eq({ opt.param_groups[3].momentum, opt.param_groups[3].nesterov }, { 0.9, false })
  H.near(w:totable(), { -0.2, -0.2 }, 1e-15)
  table.insert(opt.param_groups[2].params, w)
  H.raises(function() opt:step({ w }, { dl.ones(2, F64) }) end, "SGD: a variable (w) is in param groups 2 and 3")
  opt.param_groups[2].params[2] = 3
  H.raises(function() opt:step({ w }, { dl.ones(2, F64) }) end,
           "SGD: param group 2: params[2] is a number, expected a Variable")
end)

H.test("add_param_group on an optimizer made without groups, and a schedule made before it", function()
  local O = dl.optim
  local x, y = dl.Variable(dl.zeros(2), "x"), dl.Variable(dl.zeros(1), "y")
  local opt = O.SGD{ params = { x }, lr = 0.1, momentum = 0.9 }
  local s = O.StepLR(opt, 2)
  opt:add_param_group{ params = { y }, lr = 0.5 }
  H.eq(#opt.param_groups, 2)
  H.eq({ opt.param_groups[1].lr, opt.param_groups[1].momentum, opt.param_groups[2].lr }, { 0.1, 0.9, 0.5 })
  H.ok(rawequal(opt.param_groups[1].params[1], x))
  opt:step({ x, y }, { dl.ones(2), dl.ones(1) })
  H.near({ x:totable()[1], y:totable()[1] }, { -0.1, -0.5 }, 1e-7)
  H.raises(function() opt:step({ dl.Variable(dl.zeros(3), "v") }, { dl.ones(3) }) end,
           "SGD: a variable (v) of shape (3,) is in none of the param groups")
  H.raises(function() s:step() end,
           "StepLR: the optimizer has 2 param groups, this schedule was made for 1 (make schedules after add_param_group)")
  H.eq(#O.StepLR(opt, 2):step(), 2)
  H.raises(function() O.LBFGS{}:add_param_group{ params = { x } } end, "LBFGS:add_param_group: LBFGS takes no param groups")
end)

H.test("a param group keeps keys of its own, as PyTorch's (in the state dict when plain values)", function()
  local O = dl.optim
  local a, b = dl.Variable(dl.zeros(2)), dl.Variable(dl.zeros(2))
  local tags = { "frozen later" }
  local function make()
    return O.SGD{ params = { { params = { a }, name = "body", tags = tags }, { params = { b }, name = "head", rank = 2 } },
                  lr = 0.1 }
  end
  local opt = make()
  H.eq({ opt.param_groups[1].name, opt.param_groups[2].name, opt.param_groups[2].rank }, { "body", "head", 2 })
  H.ok(rawequal(opt.param_groups[1].tags, tags))
  local sd = opt:state_dict()
  H.eq({ sd["param_groups.1.name"], sd["param_groups.2.rank"], sd["param_groups.1.tags.1"], sd["param_groups.1.tags"] },
       { "body", 2, nil, nil })
  opt.param_groups[1].name = "trunk"
  local other = make()
  other:load_state_dict(opt:state_dict())
  H.eq(other.param_groups[1].name, "trunk")
  H.raises(function() other:load_state_dict({ ["param_groups.1.name"] = {}, ["param_groups.2.lr"] = 1 }) end,
           "SGD:load_state_dict: \"param_groups.1.name\" must be a number, a boolean or a string, got table")
  -- the options of the optimizer itself are still checked by name
  H.raises(function() O.SGD{ momentom = 0.9 } end, "SGD: unknown option 'momentom'")
end)

H.run()
