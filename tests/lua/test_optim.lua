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
  H.raises(function() O.MultiStepLR(opt, { 3, 2 }) end, "MultiStepLR: milestones must be increasing integers >= 1, got 2 at 2")
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
       "SGD{dampening=0, lr=0.1, momentum=0.9, nesterov=false, weight_decay=0}")
end)

H.run()
