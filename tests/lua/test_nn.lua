-- dl.nn: modules (tracking, names, state dicts, train/eval, to, printing), layers and
-- losses against PyTorch (tests/lua/ref/training_ref.lua, from
-- tests/ref/gen_training_refs.py), and every error message.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.training_ref")
local nn = dl.nn

local TOL = 2e-6

local function close(got, want, tol, what)
  H.near(got:totable(), want, tol or TOL, what)
end

local function set(v, values) v:assign(dl.tensor(values)) end

local function names(list)
  local out = {}
  for i, p in ipairs(list) do out[i] = p[1] end
  return out
end

-- ---- modules ----------------------------------------------------------------------------------

local MLP = nn.Module:extend("MLP")
function MLP:init(n_in, hidden, n_out)
  self.fc1 = nn.Linear(n_in, hidden)
  self.act = nn.ReLU()
  self.fc2 = nn.Linear(hidden, n_out)
end
function MLP:forward(x) return self.fc2(self.act(self.fc1(x))) end

H.test("a subclass: forward through net(x), parameters in assignment order", function()
  local net = MLP(4, 8, 3)
  H.shape(net(dl.randn(5, 4)), { 5, 3 })
  H.eq(names(net:named_parameters()), { "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" })
  local ps = net:parameters()
  H.eq(#ps, 4)
  H.ok(rawequal(ps[1], net.fc1.weight))
  H.shape(ps[3], { 3, 8 })
  H.eq(net:num_parameters(), 4 * 8 + 8 + 8 * 3 + 3)
end)

H.test("Sequential, nested modules and plain tables filled later get dotted names", function()
  local Net = nn.Module:extend("Net")
  function Net:init()
    self.embed = nn.Embedding(10, 4)
    self.layers = {}
    for i = 1, 2 do self.layers[i] = nn.Linear(4, 4) end
    self.head = nn.Sequential{ nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2, { bias = false }) }
    self.scale = dl.Variable(dl.ones(1), "scale")
    self.note = "not tracked"
    self.plain = dl.ones(2)   -- a plain tensor is an ordinary field
  end
  local net = Net()
  H.eq(names(net:named_parameters()), { "embed.weight", "layers.1.weight", "layers.1.bias", "layers.2.weight",
       "layers.2.bias", "head.1.weight", "head.1.bias", "head.3.weight", "scale" })
  H.eq(net.note, "not tracked")
  H.eq(#net.head, 3)
  H.ok(rawequal(net.head, net:named_children()[4][2]))
  H.ok(rawequal(net.head[3], net.head:named_children()[3][2]))
  H.eq(names(net:named_children()), { "embed", "layers.1", "layers.2", "head" })
  H.eq(#net:modules(), 8)
end)

H.test("reassigning keeps the position, other values untrack, shared modules count once", function()
  local Net = nn.Module:extend("Net")
  function Net:init()
    self.a = nn.Linear(2, 2)
    self.b = nn.Linear(2, 2)
    self.a = nn.Linear(2, 3)      -- replaced in place
    self.shared = self.b          -- the same module twice
  end
  local net = Net()
  H.eq(names(net:named_parameters()), { "a.weight", "a.bias", "b.weight", "b.bias" })
  H.shape(net.a.weight, { 3, 2 })
  net.b = nil
  H.eq(names(net:named_parameters()), { "a.weight", "a.bias", "shared.weight", "shared.bias" })
  net.shared = 5
  H.eq(net.shared, 5)
  H.eq(#net:parameters(), 2)
  net.shared = nn.Linear(1, 1)    -- a field that held a number becomes a member again
  H.eq(#net:parameters(), 4)
end)

H.test("buffers are in the state dict but not in the parameters", function()
  local bn = nn.BatchNorm1d(3)
  H.eq(names(bn:named_parameters()), { "weight", "bias" })
  H.eq(names(bn:named_buffers()), { "running_mean", "running_var", "num_batches_tracked" })
  local keys = {}
  for k in pairs(bn:state_dict()) do keys[#keys + 1] = k end
  table.sort(keys)
  H.eq(keys, { "bias", "num_batches_tracked", "running_mean", "running_var", "weight" })
end)

H.test("state_dict round trip: identical predictions, also through a file", function()
  dl.manual_seed(1)
  local a = nn.Sequential{ nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.GlobalAvgPool2d(), nn.Linear(4, 3) }
  a(dl.randn(4, 1, 6, 6))   -- moves the running statistics
  a:eval()
  local b = nn.Sequential{ nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.GlobalAvgPool2d(), nn.Linear(4, 3) }
  b:eval()
  local x = dl.randn(2, 1, 6, 6)
  H.ok(not dl.equal(a(x), b(x)))
  b:load_state_dict(a:state_dict())
  H.ok(dl.equal(a(x), b(x)))
  H.eq(b[2].num_batches_tracked:item(), 1)
  local path = os.tmpname() .. ".safetensors"
  dl.save(path, a:state_dict())
  local c = nn.Sequential{ nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.GlobalAvgPool2d(), nn.Linear(4, 3) }
  c:eval()
  c:load_state_dict((dl.load(path)))
  H.ok(dl.equal(a(x), c(x)))
  os.remove(path)
end)

H.test("load_state_dict: clear errors naming the key, and nothing changes", function()
  local net = MLP(4, 8, 3)
  local before = net.fc1.weight:clone()
  local sd = MLP(4, 8, 3):state_dict()
  sd["fc2.bias"] = nil
  H.raises(function() net:load_state_dict(sd) end, "load_state_dict: missing key \"fc2.bias\" in the state dict")
  sd = MLP(4, 8, 3):state_dict()
  sd["fc2.weight"] = dl.zeros(3, 9)
  H.raises(function() net:load_state_dict(sd) end,
           "load_state_dict: \"fc2.weight\" has shape (3, 9) in the state dict, (3, 8) in the model")
  sd = MLP(4, 8, 3):state_dict()
  sd["fc1.bias"] = dl.zeros(8, { dtype = "float64" })
  H.raises(function() net:load_state_dict(sd) end,
           "load_state_dict: \"fc1.bias\" has dtype float64 in the state dict, float32 in the model")
  sd = MLP(4, 8, 3):state_dict()
  sd["fc3.weight"] = dl.zeros(1)
  H.raises(function() net:load_state_dict(sd) end, "load_state_dict: unexpected key \"fc3.weight\" in the state dict")
  H.ok(dl.equal(net.fc1.weight, before), "all or nothing")
  local missing, unexpected = net:load_state_dict(sd, false)
  H.eq(missing, {})
  H.eq(unexpected, { "fc3.weight" })
  H.ok(dl.equal(net.fc1.weight, sd["fc1.weight"]))
  sd["fc1.weight"] = "x"
  H.raises(function() net:load_state_dict(sd) end, "\"fc1.weight\" is a string in the state dict, expected a tensor")
end)

H.test("train() and eval() are recursive; Dropout is the identity in eval", function()
  local net = nn.Sequential{ nn.Linear(100, 100), nn.Dropout(0.5) }
  H.ok(net.training and net[2].training)
  net:eval()
  H.ok(not net.training and not net[2].training)
  local x = dl.randn(8, 100)
  H.ok(dl.equal(net(x), net[1](x)))
  net:train()
  local y = net[2](dl.ones(1000))
  local zeros = y:eq(0):sum():item()
  H.ok(zeros > 400 and zeros < 600, "about half dropped: " .. zeros)
  H.ok(dl.allclose(y:sum() / (1000 - zeros), dl.tensor(2.0)), "the rest scaled by 2")
end)

H.test("BatchNorm: batch statistics in training, running ones in eval", function()
  local bn = nn.BatchNorm1d(2)
  local x = dl.tensor({ { 1, 10 }, { 3, 30 } })
  H.values(bn(x), { { -1, -1 }, { 1, 1 } }, { tol = 1e-4 })
  H.values(bn.running_mean, { 0.2, 2.0 }, { tol = 1e-6 })
  bn:eval()
  H.values(bn(dl.tensor({ { 0.2, 2.0 } })), { { 0, 0 } }, { tol = 1e-6 })
end)

H.test("net:to(dtype) replaces the parameters, keeping names and structure", function()
  local net = MLP(4, 8, 3)
  local x = dl.randn(2, 4)
  local y32 = net(x)
  local w = net.fc1.weight
  net:to("float64")
  H.eq(net.fc1.weight.dtype, "float64")
  H.ok(net.fc1.weight.is_variable)
  H.eq(net.fc1.weight.name, w.name)
  H.eq(names(net:named_parameters()), { "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" })
  H.ok(dl.allclose(net(x:double()):float(), y32, 1e-5, 1e-6))
  local same = net.fc2.weight
  net:to("float64")
  H.ok(rawequal(same, net.fc2.weight), "nothing to change: the same Variable")
  local bn = nn.BatchNorm1d(2):to("float64")
  H.eq(bn.running_mean.dtype, "float64")
  net:to("cpu")
  H.ok(rawequal(same, net.fc2.weight))
end)

H.test("tostring is PyTorch's module repr", function()
  local net = MLP(784, 256, 10)
  H.eq(tostring(net), table.concat({
    "MLP(",
    "  (fc1): Linear(in_features=784, out_features=256, bias=true)",
    "  (act): ReLU()",
    "  (fc2): Linear(in_features=256, out_features=10, bias=true)",
    ")" }, "\n"))
  local seq = nn.Sequential{ nn.Conv2d(1, 16, 3, { padding = 1 }), nn.MaxPool2d(2), nn.Sequential{ nn.Flatten() } }
  H.eq(tostring(seq), table.concat({
    "Sequential(",
    "  (1): Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=true)",
    "  (2): MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))",
    "  (3): Sequential(",
    "    (1): Flatten(start_dim=2, end_dim=-1)",
    "  )",
    ")" }, "\n"))
  H.eq(tostring(nn.BatchNorm2d(8)), "BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)")
  H.eq(tostring(nn.LSTMCell(3, 4)), "LSTMCell(3, 4, bias=true)")
  H.eq(tostring(nn.Dense(10, { activation = "relu" })), "Dense(units=10, activation=\"relu\", use_bias=true)")
  H.eq(tostring(MLP), "class MLP")
end)

H.test("initialisation: PyTorch's bounds, reproducible with manual_seed", function()
  dl.manual_seed(5)
  local a = nn.Linear(100, 50)
  dl.manual_seed(5)
  local b = nn.Linear(100, 50)
  H.ok(dl.equal(a.weight, b.weight) and dl.equal(a.bias, b.bias))
  local bound = 1 / math.sqrt(100)
  H.ok(a.weight:abs():max():item() <= bound)
  H.ok(a.weight:abs():max():item() > 0.9 * bound)
  H.near(a.weight:std():item(), bound / math.sqrt(3), 0.05)
  local c = nn.Conv2d(4, 8, 3)
  H.ok(c.weight:abs():max():item() <= 1 / 6)
  local e = nn.Embedding(1000, 10)
  H.near(e.weight:std():item(), 1, 0.05)
  local cell = nn.LSTMCell(3, 25)
  H.ok(cell.weight_hh:abs():max():item() <= 0.2)
  local d = nn.Dense(20)
  d(dl.zeros(1, 30))
  H.ok(d.kernel:abs():max():item() <= math.sqrt(6 / 50))
  H.values(d.bias, dl.zeros(20):totable())
end)

H.test("the TensorFlow guide's MNISTModel: Dense layers sized by the first call", function()
  local MNISTModel = nn.Module:extend("MNISTModel")
  function MNISTModel:init()
    self.layer1 = nn.Dense(10)
    self.layer2 = nn.Dense(10)
  end
  function MNISTModel:forward(input) return self.layer2(self.layer1(input)) end
  local model = MNISTModel()
  H.eq(#model:parameters(), 0)
  local batch = dl.zeros(1, 1, 784)
  H.eq(batch.shape, { 1, 1, 784 })
  local result = model(batch)
  H.values(result, { { dl.zeros(10):totable() } })
  H.eq(names(model:named_parameters()), { "layer1.kernel", "layer1.bias", "layer2.kernel", "layer2.bias" })
  H.shape(model.layer1.kernel, { 784, 10 })
  -- a fresh model takes its shapes from a state dict
  local fresh = MNISTModel()
  fresh:load_state_dict(model:state_dict())
  H.shape(fresh.layer2.kernel, { 10, 10 })
  H.raises(function() model(dl.zeros(2, 100)) end, "Dense: expected input with 784 features, got shape (2, 100)")
end)

H.test("a Checkpoint restores a model of Dense layers before its first call", function()
  local function make()
    return nn.Sequential{ nn.Dense(8, { activation = "relu" }), nn.Dense(3) }
  end
  dl.manual_seed(2)
  local a = make()
  local x = dl.randn(4, 5)
  local y = a(x)
  local dir = os.tmpname()
  os.remove(dir)
  dl.Checkpoint{ model = a }:save(dir .. "/m")
  local b = make()
  dl.Checkpoint{ model = b }:restore(dl.latest_checkpoint(dir))
  H.ok(dl.equal(b(x), y))
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("the guide's custom Linear model with Variables, trained by apply_gradients", function()
  local Linear = nn.Module:extend("Linear")
  function Linear:init()
    self.w = dl.Variable(5, "weight")
    self.b = dl.Variable(10, "bias")
  end
  function Linear:forward(x) return x * self.w + self.b end
  dl.manual_seed(0)
  local inputs = dl.randn(2000)
  local outputs = inputs * 3 + 2 + dl.randn(2000)
  local model = Linear()
  local function loss(m, x, y) local e = m(x) - y; return (e * e):mean() end
  local opt = dl.optim.SGD{ lr = 0.01 }
  for _ = 1, 300 do
    local tape = dl.GradientTape()
    local l = tape:record(function() return loss(model, inputs, outputs) end)
    local g = tape:gradient(l, { model.w, model.b })
    opt:apply_gradients({ { g[1], model.w }, { g[2], model.b } })
  end
  H.near(model.w:item(), 3, 0.1)
  H.near(model.b:item(), 2, 0.1)
  H.eq(names(model:named_parameters()), { "w", "b" })
end)

-- ---- layers against PyTorch -----------------------------------------------------------------------

H.test("Linear forward matches PyTorch", function()
  local r = R.layers.linear
  local lin = nn.Linear(4, 3)
  set(lin.weight, r.weight); set(lin.bias, r.bias)
  close(lin(dl.tensor(r.x)), r.y)
  H.shape(lin(dl.randn(2, 5, 4)), { 2, 5, 3 })
  H.shape(nn.Linear(4, 3, { bias = false })(dl.randn(4)), { 3 })
end)

H.test("Conv2d forward and gradients match PyTorch", function()
  local r = R.layers.conv
  local conv = nn.Conv2d(2, 3, 3, { stride = 2, padding = 1 })
  set(conv.weight, r.weight); set(conv.bias, r.bias)
  local x = dl.tensor(r.x)
  close(conv(x), r.y, 1e-5)
  local gx, gw = dl.grad(function(xx, ww)
    local y = nn.functional.conv2d(xx, ww, conv.bias, conv._opts)
    return y:sum() + (y * y):sum() * 0.5
  end, { 1, 2 })(x, conv.weight)
  close(gx, r.gx, 1e-5)
  close(gw, r.gw, 1e-5)
  local g = R.layers.conv_groups
  local c2 = nn.Conv2d(4, 4, 3, { padding = 2, dilation = 2, groups = 2, bias = false })
  set(c2.weight, g.weight)
  close(c2(dl.tensor(g.x)), g.y, 1e-5)
  H.shape(nn.Conv2d(3, 8, 5, { padding = "same" })(dl.randn(1, 3, 9, 9)), { 1, 8, 9, 9 })
  H.shape(nn.Conv2d(3, 8, 3)(dl.randn(3, 9, 9)), { 8, 7, 7 })
end)

H.test("ConvTranspose2d, ConvTranspose1d and their gradients match PyTorch", function()
  local r = R.layers.conv_transpose
  local conv = nn.ConvTranspose2d(4, 2, 3, { stride = 2, padding = 1, output_padding = 1 })
  H.shape(conv.weight, { 4, 2, 3, 3 })                -- (in, out / groups, kH, kW), as PyTorch
  set(conv.weight, r.weight); set(conv.bias, r.bias)
  local x = dl.tensor(r.x)
  close(conv(x), r.y, 1e-5)
  local gx, gw, gb = dl.grad(function(xx, ww, bb)
    local y = nn.functional.conv_transpose2d(xx, ww, bb, conv._opts)
    return y:sum() + (y * y):sum() * 0.5
  end, { 1, 2, 3 })(x, conv.weight, conv.bias)
  close(gx, r.gx, 1e-5)
  close(gw, r.gw, 1e-5)
  close(gb, r.gb, 1e-5)
  local g = R.layers.conv_transpose_groups
  local c2 = nn.ConvTranspose2d(4, 6, { 2, 3 }, { stride = { 1, 2 }, padding = { 0, 1 }, dilation = { 2, 1 },
                                                  groups = 2, bias = false })
  set(c2.weight, g.weight)
  close(c2(dl.tensor(g.x)), g.y, 1e-5)                -- one image, (C, H, W)
  local o = R.layers.conv_transpose1d
  local c1 = nn.ConvTranspose1d(3, 2, 4, { stride = 3, padding = 1, output_padding = 2 })
  set(c1.weight, o.weight); set(c1.bias, o.bias)
  close(c1(dl.tensor(o.x)), o.y, 1e-5)
  H.eq(tostring(conv), "ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
                       .. "output_padding=(1, 1), bias=true)")
  -- the gradient of conv2d for its input is the transposed convolution with the same weight
  local w, ximg = dl.randn(4, 2, 3, 3), dl.randn(1, 4, 5, 5)
  local up = nn.functional.conv_transpose2d(ximg, w, { stride = 2, padding = 1 })
  local back = dl.grad(function(z) return (nn.functional.conv2d(z, w, { stride = 2, padding = 1 }) * ximg):sum() end)(
    dl.zeros(up.shape))
  H.near(back:totable(), up:totable(), 1e-5)
  -- first and second order by finite differences, in float64, bias included
  local f64 = { dtype = "float64" }
  H.ok(dl.gradcheck(function(xx, ww, bb)
    return (nn.functional.conv_transpose2d(xx, ww, bb, { stride = 2, padding = 1, output_padding = 1 }) ^ 2):sum()
  end, { dl.randn(1, 2, 3, 3, f64), dl.randn(2, 3, 2, 2, f64), dl.randn(3, f64) }))
end)

H.test("the activations of dlua.nn.activations match PyTorch, gradients at their corners included", function()
  local r = R.layers.activations
  local F = nn.functional
  local x, g = dl.tensor(r.x), dl.tensor(r.g)
  local fns = {
    elu = function(v) return F.elu(v, 0.7) end, selu = F.selu, celu = function(v) return F.celu(v, 1.5) end,
    hardtanh = function(v) return F.hardtanh(v, -2, 3) end, relu6 = F.relu6, hardsigmoid = F.hardsigmoid,
    hardswish = F.hardswish, mish = F.mish, softsign = F.softsign,
  }
  for name, fn in pairs(fns) do
    close(fn(x), r.acts[name].y, 1e-6, name)
    close(dl.grad(function(v) return (fn(v) * g):sum() end)(x), r.acts[name].gx, 1e-6, name .. "'s gradient")
  end
  local p = r.prelu
  local layer = nn.PReLU(3)
  H.values(layer.weight, { 0.25, 0.25, 0.25 })
  set(layer.weight, p.weight)
  close(layer(dl.tensor(p.x)), p.y)
  local gx, gw = dl.grad(function(v, w) return (F.prelu(v, w) * dl.tensor(p.g)):sum() end, { 1, 2 })(
    dl.tensor(p.x), layer.weight)
  close(gx, p.gx)
  close(gw, p.gw, 1e-5)
  -- the layers, and their forms in a model
  local net = nn.Sequential{ nn.Linear(4, 4), nn.ELU(0.7), nn.SELU(), nn.CELU(1.5), nn.Hardtanh(-2, 3), nn.ReLU6(),
                             nn.Hardsigmoid(), nn.Hardswish(), nn.Mish(), nn.Softsign(), nn.PReLU() }
  H.shape(net(dl.randn(2, 4)), { 2, 4 })
  H.eq(#net:parameters(), 3)
  H.eq(tostring(nn.Hardtanh(-2, 3)), "Hardtanh(min_val=-2, max_val=3)")
  H.eq(tostring(nn.ELU()), "ELU(alpha=1)")
  H.ok(dl.gradcheck(function(v) return F.selu(v):pow(2):sum() + F.mish(v):sum() end, { dl.randn(5, { dtype = "float64" }) }))
  H.raises(function() F.elu(dl.tensor({ 1, 2 }, { dtype = "int64" })) end, "elu: expected a floating-point tensor, got int64")
  H.raises(function() F.hardtanh(x, 2, 1) end, "hardtanh: min_val (2) is greater than max_val (1)")
  H.raises(function() F.prelu(dl.randn(2, 4), dl.ones(3)) end, "prelu: a weight of 3 values needs 3 channels (dim 2), got input of shape (2, 4)")
  H.raises(function() nn.PReLU(0) end, "PReLU: num_parameters must be a positive integer, got 0")
  H.raises(function() F.celu(x, 0) end, "celu: alpha must not be 0")
end)

H.test("interpolate, Upsample and the adaptive average pools match PyTorch, gradients included", function()
  local r = R.layers.resample
  local F = nn.functional
  local x4, x3 = dl.tensor(r.x4), dl.tensor(r.x3)
  for i, c in ipairs(r.interpolate) do
    local x = c.dims == 2 and x4 or x3
    local what = ("interpolate case %d (%s)"):format(i, c.opts.mode or "nearest")
    close(F.interpolate(x, c.opts), c.y, 1e-5, what)
    close(dl.grad(function(v) return (F.interpolate(v, c.opts) * dl.tensor(c.g)):sum() end)(x), c.gx, 1e-5, what)
  end
  for i, c in ipairs(r.adaptive) do
    local x = c.dims == 2 and x4 or x3
    local fn = c.dims == 2 and F.adaptive_avg_pool2d or F.adaptive_avg_pool1d
    close(fn(x, c.size), c.y, 1e-5, "adaptive pool " .. i)
    close(dl.grad(function(v) return (fn(v, c.size) * dl.tensor(c.g)):sum() end)(x), c.gx, 1e-5, "adaptive pool " .. i)
  end
  for i, c in ipairs(R.layers.resample_edges) do   -- where PyTorch's kernels take shortcuts of their own
    close(F.interpolate(dl.tensor(c.x), c.opts), c.y, 1e-6, "edge case " .. i)
  end
  local up = nn.Upsample({ scale_factor = 2, mode = "bilinear" })
  H.shape(up(x4), { 2, 3, 10, 14 })
  H.eq(tostring(up), "Upsample(scale_factor=2, mode=\"bilinear\")")
  H.shape(nn.AdaptiveAvgPool2d({ 1, 1 })(x4), { 2, 3, 1, 1 })
  H.shape(nn.AdaptiveAvgPool1d(2)(x3[1]), { 3, 2 })
  H.ok(dl.allclose(nn.AdaptiveAvgPool2d(1)(x4):flatten(2), nn.GlobalAvgPool2d()(x4), 1e-6, 1e-6))
  H.ok(dl.equal(F.interpolate(x4:double(), { size = { 5, 7 }, mode = "bilinear" }), x4:double()))
  H.raises(function() F.interpolate(x4, { size = 3, scale_factor = 2 }) end, "interpolate: give one of size and scale_factor")
  H.raises(function() F.interpolate(x4, { size = 3, mode = "cubic" }) end,
           "interpolate: mode must be nearest, nearest-exact, linear, bilinear, bicubic, trilinear or area, got cubic")
  H.raises(function() F.interpolate(x3, { size = 3, mode = "bicubic" }) end,
           "interpolate: mode bicubic takes (N, C, H, W) input, got shape (2, 3, 7)")
  H.raises(function() F.interpolate(x3, { size = 3, mode = "bilinear" }) end,
           "interpolate: mode bilinear takes (N, C, H, W) input, got shape (2, 3, 7)")
  H.raises(function() F.interpolate(x4, { size = { 3 } }) end, "interpolate: size must be a number or a list of 2, got table")
  H.raises(function() F.interpolate(x4, { scale_factor = 0 }) end, "interpolate: scale_factor must be positive numbers, got 0")
  H.raises(function() F.interpolate(x4, { size = 3, align_corners = true }) end,
           "interpolate: align_corners is only for the linear and bicubic modes")
  H.raises(function() F.interpolate(x4, { size = 3, mode = "area", align_corners = false }) end,
           "interpolate: align_corners is only for the linear and bicubic modes")
  H.raises(function() F.interpolate(x4:long(), { size = 3 }) end, "interpolate: expected a floating-point tensor, got int64")
  H.raises(function() F.adaptive_avg_pool2d(x3[1][1], 2) end,
           "adaptive_avg_pool2d: expected input (N, C, H, W) or (C, H, W), got shape (7,)")
  H.raises(function() F.adaptive_avg_pool2d(x4, 0) end, "adaptive_avg_pool2d: output size must be integers >= 1, got 0")
end)

H.test("interpolate's bicubic and area modes match PyTorch, float32 and float64, gradients included", function()
  local r = R.layers.resize_more
  local F = nn.functional
  for i, c in ipairs(r.cases) do
    local x = dl.tensor(r.x4, { dtype = c.dtype })
    if c.dims == 1 then x = x:select(3, 1) end
    local what = ("case %d (%s, %s)"):format(i, c.opts.mode, c.dtype)
    local tol = c.dtype == "float64" and 1e-12 or 1e-5
    close(F.interpolate(x, c.opts), c.y, tol, what)
    local g = dl.tensor(c.g, { dtype = c.dtype })
    close(dl.grad(function(v) return (F.interpolate(v, c.opts) * g):sum() end)(x), c.gx, tol, what)
  end
  -- an unchanged size is the input itself (the taps' weights are exactly 0, 1, 0, 0)
  local x = dl.tensor(r.x4)
  H.ok(dl.equal(F.interpolate(x, { size = { 5, 7 }, mode = "bicubic" }), x))
  H.eq(tostring(nn.Upsample({ scale_factor = 2, mode = "bicubic", align_corners = true })),
       "Upsample(scale_factor=2, mode=\"bicubic\", align_corners=true)")
end)

H.test("the loss modules match PyTorch's, class weights, ignore_index and label smoothing included", function()
  local r = R.layers.criteria
  local f64 = { dtype = "float64" }
  local logits, labels, w = dl.tensor(r.logits, f64), dl.tensor(r.labels, { dtype = "int64" }), dl.tensor(r.weight, f64)
  for i, c in ipairs(r.ce) do
    local opts = {}
    for k, v in pairs(c.opts) do opts[k] = v end
    if c.weighted then opts.weight = w end
    local crit = nn.CrossEntropyLoss(opts)
    local what = "cross_entropy case " .. i
    close(crit(logits, labels), c.loss, 1e-12, what)
    close(dl.grad(function(v) return crit(v, labels):sum() end)(logits), c.g, 1e-12, what)
    close(nn.functional.cross_entropy(logits, labels, opts), c.loss, 1e-12, what)
  end
  local b = r.bce
  local bce = nn.BCEWithLogitsLoss({ weight = dl.tensor(b.weight, f64), pos_weight = dl.tensor(b.pos_weight, f64) })
  local x, t = dl.tensor(b.x, f64), dl.tensor(b.t, f64)
  close(bce(x, t), b.loss, 1e-12)
  close(dl.grad(function(v) return bce(v, t) end)(x), b.g, 1e-12)
  -- a tensor option is a buffer: in the state dict, and moved by :to()
  local crit = nn.CrossEntropyLoss({ weight = w, ignore_index = 2 })
  H.ok(crit:state_dict().weight ~= nil)
  H.eq(crit:to("float32").weight.dtype, "float32")
  H.eq(tostring(crit), "CrossEntropyLoss(ignore_index=2)")
  H.eq(tostring(nn.MSELoss({ reduction = "sum" })), "MSELoss(reduction=\"sum\")")
  -- every loss module is its function with the module's options
  local a, c2, y = dl.randn(4, 3), dl.randn(4, 3), dl.tensor({ 1, -1, 1, -1 })
  H.ok(dl.equal(nn.SmoothL1Loss({ beta = 0.5 })(a, c2), nn.functional.smooth_l1_loss(a, c2, { beta = 0.5 })))
  H.ok(dl.equal(nn.HuberLoss({ delta = 2, reduction = "none" })(a, c2),
                nn.functional.huber_loss(a, c2, { delta = 2, reduction = "none" })))
  H.ok(dl.equal(nn.CosineEmbeddingLoss({ margin = 0.2 })(a, c2, y), nn.functional.cosine_embedding_loss(a, c2, y, { margin = 0.2 })))
  H.ok(dl.equal(nn.GaussianNLLLoss()(a, c2, a:abs()), nn.functional.gaussian_nll_loss(a, c2, a:abs())))
  H.ok(dl.equal(nn.TripletMarginLoss({ swap = true })(a, c2, -a), nn.functional.triplet_margin_loss(a, c2, -a, { swap = true })))
  H.ok(dl.equal(nn.L1Loss()(a, c2), nn.functional.l1_loss(a, c2)))
  -- an option the loss does not take is an error, not dropped
  H.raises(function() nn.MSELoss({ weight = w }) end, "MSELoss: unknown option 'weight'")
  H.raises(function() nn.functional.mse_loss(a, c2, { weight = w }) end, "mse_loss: unknown option 'weight'")
  H.raises(function() nn.functional.l1_loss(a, c2, { margin = 1 }) end, "l1_loss: unknown option 'margin'")
  H.raises(function() nn.CrossEntropyLoss({ reduction = "avg" }) end,
           "CrossEntropyLoss: reduction must be mean, sum or none, got avg")
  H.raises(function() nn.NLLLoss({ weight = { 1, 2 } }) end, "NLLLoss: expected weight as a tensor")
  H.raises(function() nn.functional.cross_entropy(dl.randn(2, 3, 4), dl.ones(2, 3):long(), { weight = dl.ones(3) }) end,
           "cross_entropy: expected logits (N, C), (C) or (N, C, d1, ...) and labels without the C, got shapes (2, 3, 4) and (2, 3)")
end)

H.test("margin losses, pdist, rrelu, local response norm, power-average pools and unpooling match PyTorch", function()
  local r = R.layers.criteria_more
  local F = nn.functional
  local f64 = { dtype = "float64" }
  local i64 = { dtype = "int64" }
  local y, w, ml_y = dl.tensor(r.y, i64), dl.tensor(r.w, f64), dl.tensor(r.ml_y, i64)
  local p, n = dl.tensor(r.p, f64), dl.tensor(r.n, f64)
  local cosine = function(s, t) return 1 - F.cosine_similarity(s, t) end
  local fns = {
    multi_margin = function(v) return F.multi_margin_loss(v, y) end,
    multi_margin_p2 = function(v)
      return nn.MultiMarginLoss({ p = 2, margin = 0.7, weight = w, reduction = "none" })(v, y)
    end,
    multilabel_margin = function(v) return nn.MultiLabelMarginLoss({ reduction = "sum" })(v, ml_y) end,
    triplet_distance = function(v) return F.triplet_margin_with_distance_loss(v, p, n, { margin = 0.5, swap = true }) end,
    triplet_cosine = function(v)
      return nn.TripletMarginWithDistanceLoss({ distance_function = cosine, reduction = "none" })(v, p, n)
    end,
    pdist = F.pdist, pdist_p1 = function(v) return F.pdist(v, 1) end,
    rrelu_eval = function(v) return F.rrelu(v, 0.1, 0.3, false) end,
    lrn = function(v) return nn.LocalResponseNorm(3, 0.01, 0.8, 1.5)(v) end,
    lrn_seq = function(v) return F.local_response_norm(v, 2) end,
    lp_pool2d = function(v) return nn.LPPool2d(2, 2)(v:abs()) end,
    lp_pool2d_p3 = function(v) return F.lp_pool2d(v:abs() + 0.1, 3, { 2, 3 }, 1, true) end,
    lp_pool1d = function(v) return nn.LPPool1d(1.5, 3, 2)(v:abs()) end,
  }
  local seen = 0
  for name, c in pairs(r.cases) do
    local fn = fns[name]
    H.ok(fn ~= nil, "no function for " .. name)
    local x, cc = dl.tensor(c.x, f64), dl.tensor(c.c, f64)
    close(fn(x), c.y, 1e-12, name)
    close(dl.grad(function(v) return (fn(v) * cc):sum() end)(x), c.g, 1e-10, name .. " gradient")
    seen = seen + 1
  end
  H.eq(seen, 13)
  -- unpooling puts max_pool2d's maxima back at their 1-based positions
  local u = r.unpool
  local pooled, idx = dl.tensor(u.pooled, f64), dl.tensor(u.idx, i64)
  close(F.max_unpool2d(pooled, idx, 2, { output_size = { 4, 5 } }), u.y, 0)
  local cc = dl.tensor(u.c, f64)
  close(dl.grad(function(v) return (nn.MaxUnpool2d(2)(v, idx, { 4, 5 }) * cc):sum() end)(pooled), u.g, 0)
  local img = dl.tensor(r.img, f64)
  local v2, i2 = F.max_pool2d(img, 2, { return_indices = true })
  H.ok(dl.equal(i2, idx) and dl.equal(v2, pooled), "max_pool2d's indices are the ones unpooled")
  local u1 = r.unpool1
  close(F.max_unpool1d(dl.tensor(u1.pooled, f64), dl.tensor(u1.idx, i64), 3, { stride = 2, padding = 1, output_size = { 8 } }),
        u1.y, 0)
  -- alpha dropout keeps SELU's statistics: mean 0 and variance 1 in, about the same out
  dl.manual_seed(3)
  local z = dl.randn(200000, f64)
  local d = F.alpha_dropout(z, 0.2, true)
  H.near(d:mean():item(), 0, 0.01)
  H.near(d:var():item(), 1, 0.02)
  H.ok(dl.equal(F.alpha_dropout(z, 0.2, false), z))
  local ch = F.feature_alpha_dropout(dl.ones(4, 6, 3), 0.5, true)
  H.ok(dl.equal(ch:amax(3), ch:amin(3)), "feature_alpha_dropout drops whole channels")
  H.eq(tostring(nn.UpsamplingBilinear2d({ scale_factor = 2 })),
       "UpsamplingBilinear2d(scale_factor=2, mode=\"bilinear\", align_corners=true)")
  H.raises(function() F.multi_margin_loss(dl.ones(2, 3), dl.tensor({ 1, 4 }, i64)) end,
           "multi_margin_loss: targets must be class numbers from 1 to 3")
  H.raises(function() F.multilabel_margin_loss(dl.ones(2, 3), dl.ones(2, 2):long()) end,
           "multilabel_margin_loss: expected input (N, C) and target of its shape")
  H.raises(function() F.max_unpool2d(pooled, idx * 100, 2) end, "max_unpool2d: indices must lie in 1..16")
  H.raises(function() F.lp_pool2d(img, 0, 2) end, "lp_pool2d: norm_type must be a non-zero number, got 0")
  H.raises(function() F.max_unpool2d(pooled, idx:narrow(4, 1, 1), 2) end,
           "max_unpool2d: expected int64 indices of the input's shape (2, 6, 2, 2)")
  H.ok(dl.equal(F.alpha_dropout(z, 0.2), z), "the F form does not drop unless training is given, as PyTorch's")
end)

H.test("padding layers, ChannelShuffle and Softmax2d match PyTorch's", function()
  local r = R.layers.criteria
  local img, seq = dl.tensor(r.img), dl.tensor(r.seq)
  local pads = {
    zero = nn.ZeroPad2d({ 1, 2, -1, 1 })(img), const2 = nn.ConstantPad2d(2, 3.5)(img),
    const1 = nn.ConstantPad1d({ 0, 3 }, -1)(seq), reflect2 = nn.ReflectionPad2d({ 1, 2, 3, 0 })(img),
    reflect1 = nn.ReflectionPad1d(2)(seq), replicate2 = nn.ReplicationPad2d({ 2, 0, 1, 3 })(img),
    replicate1 = nn.ReplicationPad1d({ 3, 1 })(seq),
  }
  for name, y in pairs(pads) do close(y, r.pads[name], 0, name) end
  local chan = dl.tensor(r.chan)
  close(nn.ChannelShuffle(3)(chan), r.shuffle, 0)
  close(nn.Softmax2d()(chan), r.softmax2d, 1e-6)
  H.eq(tostring(nn.ConstantPad2d(1, 0.5)), "ConstantPad2d(padding=(1, 1, 1, 1), value=0.5)")
  H.raises(function() nn.ZeroPad2d({ 1, 2 }) end, "ZeroPad2d: padding must be a number or a list of 4, got table")
  H.raises(function() nn.ConstantPad1d(1) end, "ConstantPad1d: expected a fill value (a number)")
  H.raises(function() nn.ReflectionPad2d(1)(dl.ones(3, 3)) end,
           "ReflectionPad2d: expected an input of at least 3 dims, got shape (3, 3)")
  H.raises(function() nn.ChannelShuffle(4)(chan) end,
           "ChannelShuffle: expected (N, C, ...) with C divisible by 4, got shape (2, 6, 2, 2)")
end)

H.test("a transposed convolution's output_padding may reach past the stride, below the dilation, as PyTorch's", function()
  local F = nn.functional
  local f64 = { dtype = "float64" }
  for i, c in ipairs(R.layers.resize_more.convs) do
    local what = "case " .. i
    local make = c.dims == 2 and nn.ConvTranspose2d or nn.ConvTranspose1d
    local conv = make(c.cin, c.cout, c.k, c.opts):double()
    conv.weight:assign(dl.tensor(c.weight, f64)); conv.bias:assign(dl.tensor(c.bias, f64))
    local x, g = dl.tensor(c.x, f64), dl.tensor(c.g, f64)
    close(conv(x), c.y, 1e-12, what)
    local fn = c.dims == 2 and F.conv_transpose2d or F.conv_transpose1d
    local gx, gw, gb = dl.grad(function(xx, ww, bb) return (fn(xx, ww, bb, c.opts) * g):sum() end, { 1, 2, 3 })(
      x, conv.weight, conv.bias)
    close(gx, c.gx, 1e-12, what); close(gw, c.gw, 1e-12, what); close(gb, c.gb, 1e-12, what)
  end
  local x, w = dl.randn(1, 2, 3, 3), dl.randn(2, 2, 2, 2)
  H.raises(function() F.conv_transpose2d(x, w, { stride = 2, dilation = 2, output_padding = 2 }) end,
           "conv_transpose2d: output_padding must be smaller than the stride or the dilation, got output_padding (2, 2), "
           .. "stride (2, 2) and dilation (2, 2)")
  H.raises(function() F.conv_transpose2d(x, w, dl.zeros(3), { dilation = 2, output_padding = 1 }) end,
           "conv_transpose2d: expected a bias of shape (2,) for a weight of shape (2, 2, 2, 2), got (3,)")
end)

H.test("l1_loss, binary_cross_entropy, normalize and cosine_similarity match PyTorch, with gradients", function()
  local r = R.layers.extra_losses
  local F = nn.functional
  local a, b, p, t, w = dl.tensor(r.a), dl.tensor(r.b), dl.tensor(r.p), dl.tensor(r.t), dl.tensor(r.w)
  local cases = {
    l1 = { function(x, y) return nn.l1_loss(x, y) end, { a, b } },
    l1_sum = { function(x, y) return F.l1_loss(x, y, { reduction = "sum" }) end, { a, b } },
    bce = { function(q) return nn.binary_cross_entropy(q, t) end, { p } },
    bce_weighted = { function(q) return F.binary_cross_entropy(q, t, { weight = w, reduction = "sum" }) end, { p } },
    normalize = { function(x) return (F.normalize(x) * b):sum() end, { a } },
    normalize_p1_dim1 = { function(x) return (F.normalize(x, { p = 1, dim = 1 }) * b):sum() end, { a } },
    cosine = { function(x, y) return (F.cosine_similarity(x, y) * dl.arange(4)):sum() end, { a, b } },
    cosine_dim1 = { function(x, y) return F.cosine_similarity(x, y, { dim = 1 }):sum() end, { a, b } },
  }
  for name, c in pairs(cases) do
    local fn, args = c[1], c[2]
    local nums = {}
    for i = 1, #args do nums[i] = i end
    local got = { dl.value_and_grad(fn, nums)(unpack(args)) }
    H.near(got[1]:item(), r[name].y, 2e-6, name)
    for i = 1, #args do
      local g, want = got[1 + i]:totable(), r[name].grads[i]
      if name:find("^bce") then
        -- where p is 0 or 1 the log is clamped at -100 and passes no gradient; PyTorch's
        -- formula divides by max(p (1 - p), 1e-12) there instead
        g[1][1], g[1][2], g[2][3], want[1][1], want[1][2], want[2][3] = 0, 0, 0, 0, 0, 0
      end
      H.near(g, want, 2e-6, name .. " gradient " .. i)
    end
  end
  H.raises(function() nn.binary_cross_entropy(a, t) end, "binary_cross_entropy: probs must lie in [0, 1] (on logits, use bce_with_logits)")
  H.raises(function() nn.l1_loss(a, t:narrow(1, 1, 2)) end, "l1_loss: input and target")
  H.raises(function() F.normalize(a, { axis = 1 }) end, "normalize: unknown option 'axis'")
end)

H.test("frozen parameters get no implicit gradient and no update; unfreezing brings them back", function()
  dl.manual_seed(3)
  local net = nn.Sequential{ nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2) }
  H.ok(rawequal(net[1]:requires_grad_(false), net[1]))
  H.eq(net[1].weight.trainable, false)
  H.eq(net[3].bias.trainable, true)
  H.eq(#net:parameters(), 4)
  H.eq(#net:trainable_parameters(), 2)
  H.ok(rawequal(net:trainable_parameters()[1], net[3].weight))
  local x, y = dl.randn(16, 4), dl.randn(16, 2)
  local loss = function() return nn.mse_loss(net(x), y) end
  local before1, before3 = net[1].weight:clone(), net[3].weight:clone()
  local _, gv = dl.implicit_value_and_grad(loss)()
  H.eq(#gv, 2)
  H.ok(rawequal(gv[1][2], net[3].weight) or rawequal(gv[2][2], net[3].weight))
  local opt = dl.optim.Adam{ lr = 0.05 }
  opt:apply_gradients(gv)
  opt:minimize(loss)                                   -- implicit
  opt:minimize(loss, net)                              -- a module: its trainable parameters
  local step = dl.compile(function() return opt:minimize(loss) end)
  for _ = 1, 3 do step() end
  H.ok(dl.equal(net[1].weight, before1))
  H.ok(not dl.equal(net[3].weight, before3))
  -- asked for by name, a frozen variable's gradient is still given (as TensorFlow's tape)
  local tape = dl.GradientTape()
  local l = tape:record(loss)
  H.ok(tape:gradient(l, net[1].weight):abs():sum():item() > 0)
  H.ok(net:state_dict()["1.weight"] ~= nil)
  net:requires_grad_()
  H.eq(#net:trainable_parameters(), 4)
  opt:minimize(loss)
  H.ok(not dl.equal(net[1].weight, before1))
  H.raises(function() dl.randn(2):requires_grad_(false) end,
           "requires_grad_: only a Variable (a parameter) can be frozen or unfrozen")
  H.raises(function() net[1].weight:requires_grad_("no") end, "requires_grad_: expected a boolean, got string")
end)

H.test("max_pool1d, avg_pool1d, their layers, Unflatten and median match PyTorch", function()
  local r = R.layers.pool1d_median
  local F = nn.functional
  local x = dl.tensor(r.x)
  for i, c in ipairs(r.pools) do
    local fn = c.kind == "max" and F.max_pool1d or F.avg_pool1d
    local what = "pool case " .. i
    close(fn(x, c.k, c.opts), c.y, 1e-6, what)
    close(dl.grad(function(v) return (fn(v, c.k, c.opts) * dl.tensor(c.g)):sum() end)(x), c.gx, 1e-6, what)
    if c.kind == "max" then
      local o = {}
      for k, v in pairs(c.opts) do o[k] = v end
      o.return_indices = true
      local _, idx = fn(x, c.k, o)
      H.values(idx, c.idx)
    end
  end
  close(nn.MaxPool1d(2)(x), r.pools[1].y)
  H.eq(tostring(nn.AvgPool1d(3, { stride = 2 })), "AvgPool1d(kernel_size=3, stride=2, padding=0)")
  H.shape(nn.Unflatten(3, { 3, 3 })(x), { 2, 3, 3, 3 })
  H.shape(nn.Unflatten(-1, { 1, 9 })(x[1]), { 3, 1, 9 })
  local m, m2 = dl.tensor(r.m), dl.tensor(r.m2)
  local v, i = m:median(2)
  close(v, r.values)
  H.values(i, r.indices)                                 -- a NaN row gives the NaN and its index
  close(m2:median(), r.all)
  local v1, i1 = dl.median(m2, 1)
  close(v1, r.dim1)
  H.values(i1, r.dim1_idx)
  H.shape(m2:median(2, true), { 4, 1 })
  H.raises(function() F.max_pool1d(x[1][1], 2) end, "max_pool1d: expected input (N, C, L) or (C, L), got shape (9,)")
  H.raises(function() nn.Unflatten(2, { 2, 2 })(x) end, "reshape")
  H.ok(dl.zeros(0):median():item() ~= dl.zeros(0):median():item())   -- NaN, as torch.median of an empty tensor
  H.ok(dl.zeros(0):nanmedian():item() ~= dl.zeros(0):nanmedian():item())
  H.raises(function() dl.zeros(0, { dtype = "int64" }):median() end, "median: the tensor is empty")
end)

H.test("InstanceNorm2d, adaptive max pools, pixel shuffles and the ranking losses match PyTorch", function()
  local r = R.layers.spatial
  local F = nn.functional
  local x = dl.tensor(r.instance.x)
  local inorm = nn.InstanceNorm2d(3, { affine = true, track_running_stats = true })
  set(inorm.weight, r.instance.weight); set(inorm.bias, r.instance.bias)
  close(inorm(x), r.instance.y, 1e-5)
  close(inorm.running_mean, r.instance.running_mean, 1e-6)
  close(inorm.running_var, r.instance.running_var, 1e-6)
  inorm:eval()
  close(inorm(x), r.instance.y_eval, 1e-5)
  inorm:train()
  close(dl.grad(function(v) return (inorm(v) * dl.tensor(r.instance.c)):sum() end)(x), r.instance.gx, 1e-5)
  local fns = {
    amax2d = function(v) return F.adaptive_max_pool2d(v, { 2, 3 }) end,
    amax2d_4 = function(v) return nn.AdaptiveMaxPool2d(4)(v) end,
    amax1d = function(v) return F.adaptive_max_pool1d(v:reshape(2, 3, 35), 6) end,
    shuffle = function(v) return nn.PixelShuffle(2)(v:narrow(3, 1, 4):reshape(2, 12, 1, 7)) end,
    unshuffle = function(v) return F.pixel_unshuffle(v:narrow(3, 1, 4):narrow(4, 1, 6), 2) end,
  }
  for name, fn in pairs(fns) do
    close(fn(x), r[name].y, 1e-6, name)
    close(dl.grad(function(v) return (fn(v) * dl.tensor(r[name].c)):sum() end)(x), r[name].gx, 1e-6, name)
  end
  local losses = {
    triplet = function(a, p, n) return nn.triplet_margin_loss(a, p, n, { margin = 0.5 }) end,
    triplet_swap_p1 = function(a, p, n) return F.triplet_margin_loss(a, p, n, { p = 1, swap = true }) end,
    pairwise = function(a, p, n) return (F.pairwise_distance(a, p) * n:select(2, 1)):sum() end,
    ranking = function(a, b) return nn.margin_ranking_loss(a, b, dl.tensor(r.ranking.target), { margin = 0.3 }) end,
  }
  for name, fn in pairs(losses) do
    local c = r[name]
    local args = { dl.tensor(c.args[1]), dl.tensor(c.args[2]), dl.tensor(c.args[3]) }
    local got = { dl.value_and_grad(function(a, b) return fn(a, b, args[3]) end, { 1, 2 })(args[1], args[2]) }
    H.near(got[1]:item(), c.y, 2e-6, name)
    close(got[2], c.grads[1], 2e-6, name)
    close(got[3], c.grads[2], 2e-6, name)
  end
  -- channel dropout: whole channels, the others scaled by 1 / (1 - p); nothing in eval
  dl.manual_seed(3)
  local d = nn.Dropout2d(0.5)
  local y = d(dl.ones(8, 16, 3, 3))
  local per_channel = y:sum({ 3, 4 })
  H.ok(per_channel:eq(0):logical_or(per_channel:eq(18)):all())
  H.near(per_channel:eq(0):float():mean():item(), 0.5, 0.15)
  d:eval()
  H.ok(dl.equal(d(x), x))
  H.shape(nn.Dropout1d(0.2)(dl.ones(4, 5)), { 4, 5 })
  H.raises(function() nn.InstanceNorm2d(3)(dl.zeros(2, 4, 5, 5)) end,
           "InstanceNorm2d: expected input (N, 3, ...) of 4 dims or (3, ...) of 3, got shape (2, 4, 5, 5)")
  H.raises(function() F.pixel_shuffle(dl.zeros(1, 3, 2, 2), 2) end, "pixel_shuffle: expected input (..., C r^2, H, W) with r = 2")
  H.raises(function() F.adaptive_max_pool2d(dl.zeros(3), 2) end, "adaptive_max_pool2d: expected input of 4 dims")
end)

H.test("Tensor unfold, F.unfold and F.fold match PyTorch, with gradients", function()
  local r = R.layers.folds
  local F = nn.functional
  local x = dl.tensor(r.x)
  local fns = {
    tensor_unfold = function(v) return v:unfold(4, 3, 2) end,
    tensor_unfold_dim1 = function(v) return v:unfold(2, 2, 1) end,
    unfold = function(v) return F.unfold(v, 2) end,
    unfold_geometry = function(v) return F.unfold(v, { 2, 3 }, { dilation = { 2, 1 }, padding = { 1, 2 }, stride = { 2, 3 } }) end,
    fold = function(v) return F.fold(F.unfold(v, 3, { padding = 1 }), { 5, 6 }, 3, { padding = 1 }) end,
    fold_geometry = function(v) return F.fold(v:reshape(2, 10, 9), { 5, 7 }, { 1, 2 }, { dilation = { 1, 2 }, stride = 2 }) end,
  }
  for _, c in ipairs(r.cases) do
    local fn = fns[c.name]
    close(fn(x), c.y, 1e-6, c.name)
    close(dl.grad(function(v) return (fn(v) * dl.tensor(c.c)):sum() end)(x), c.gx, 1e-6, c.name .. " gradient")
  end
  H.raises(function() x:unfold(4, 9, 1) end, "unfold: a window of 9 is longer than dim 4 (6)")
  H.raises(function() F.unfold(x[1][1], 2) end, "unfold: expected input (N, C, H, W) or (C, H, W), got shape (5, 6)")
  H.raises(function() F.fold(dl.zeros(1, 4, 5), { 3, 3 }, 2) end, "fold: expected (N, C 4, 4) for an output of 3x3")
end)

H.test("affine_grid and grid_sample match PyTorch: every mode (bicubic too), padding mode and align_corners", function()
  local r = R.layers.grid_sample
  local F = nn.functional
  local f64 = { dtype = "float64" }
  local x, theta = dl.tensor(r.x, f64), dl.tensor(r.theta, f64)
  local cases = { unpack(r.cases) }
  for _, c in ipairs(R.layers.resize_more.grid_bicubic) do cases[#cases + 1] = c end
  for _, c in ipairs(cases) do
    local what = c.mode .. " " .. c.padding_mode .. (c.align_corners and " aligned" or "")
    local opts = { mode = c.mode, padding_mode = c.padding_mode, align_corners = c.align_corners }
    local function f(v, t) return F.grid_sample(v, F.affine_grid(t, { 2, 3, 4, 7 }, c.align_corners), opts) end
    close(F.affine_grid(theta, { 2, 3, 4, 7 }, c.align_corners), c.grid, 1e-12, what .. " grid")
    close(f(x, theta), c.y, 1e-12, what)
    local gx, gt = dl.grad(function(v, t) return (f(v, t) * dl.tensor(c.c, f64)):sum() end, { 1, 2 })(x, theta)
    close(gx, c.gx, 1e-12, what .. " x gradient")
    close(gt, c.gtheta, 1e-10, what .. " theta gradient")
  end
  H.raises(function() F.grid_sample(x, dl.zeros(2, 4, 4, 3)) end, "grid_sample: expected x (N, C, H, W) and grid (N, Ho, Wo, 2)")
  H.raises(function() F.grid_sample(x, dl.zeros(2, 4, 4, 2), { mode = "cubic" }) end,
           "grid_sample: mode must be bilinear, nearest or bicubic, got cubic")
  H.raises(function() F.affine_grid(dl.zeros(2, 3, 3), { 2, 3, 4, 4 }) end, "affine_grid: expected theta of shape (2, 2, 3)")
end)

H.test("logsigmoid, softmin, glu, the shrinkages, threshold and five more losses match PyTorch", function()
  local r = R.layers.more
  local F = nn.functional
  local x = dl.tensor(r.x)
  local fns = {
    logsigmoid = F.logsigmoid, softmin = function(v) return F.softmin(v:reshape(4, 4), 2) end,
    glu = function(v) return nn.GLU(2)(v:reshape(4, 4)) end, softshrink = function(v) return F.softshrink(v, 0.3) end,
    hardshrink = function(v) return nn.Hardshrink(0.3)(v) end, tanhshrink = F.tanhshrink,
    threshold = function(v) return nn.Threshold(0.2, -5)(v) end,
  }
  for name, fn in pairs(fns) do
    local c = r.acts[name]
    close(fn(x), c.y, 1e-6, name)
    close(dl.grad(function(v) return (fn(v) * dl.tensor(c.c)):sum() end)(x), c.g, 1e-6, name .. " gradient")
  end
  local inp, tgt, var = dl.tensor(r.inp), dl.tensor(r.tgt), dl.tensor(r.var)
  local ylab, ybin, w = dl.tensor(r.ylab), dl.tensor(r.ybin), dl.tensor(r.w)
  local losses = {
    poisson = function(a) return nn.poisson_nll_loss(a, tgt) end,
    poisson_full_lin = function(a) return F.poisson_nll_loss(a:abs() + 0.1, tgt, { log_input = false, full = true }) end,
    gaussian = function(a) return nn.gaussian_nll_loss(a, tgt, var) end,
    gaussian_full_sum = function(a) return F.gaussian_nll_loss(a, tgt, var, { full = true, reduction = "sum" }) end,
    soft_margin = function(a) return nn.soft_margin_loss(a, ylab) end,
    multilabel = function(a) return nn.multilabel_soft_margin_loss(a, ybin, { weight = w }) end,
    hinge = function(a) return nn.hinge_embedding_loss(a, ylab, { margin = 0.7 }) end,
  }
  for name, fn in pairs(losses) do
    local c = r.losses[name]
    local v, g = dl.value_and_grad(fn)(inp)
    H.near(v:item(), c.y, 1e-5, name)
    close(g, c.g, 1e-5, name .. " gradient")
  end
  dl.manual_seed(2)
  local soft = F.gumbel_softmax(dl.randn(4, 6), { tau = 0.5 })
  H.near(soft:sum(2):totable(), { 1, 1, 1, 1 }, 1e-6)
  local logits = dl.randn(4, 6)
  local hard = F.gumbel_softmax(logits, { hard = true })
  H.ok(hard:sum(2):eq(1):all() and hard:eq(0):logical_or(hard:eq(1)):all())
  local g = dl.grad(function(l) return (F.gumbel_softmax(l, { hard = true }) * dl.arange(6)):sum() end)(logits)
  H.ok(g:abs():sum():item() > 0)                       -- the soft sample's gradient passes
  H.raises(function() F.glu(dl.ones(3)) end, "glu: dim 1 must have an even size, got 3")
  H.raises(function() nn.gaussian_nll_loss(inp, tgt, -var) end, "gaussian_nll_loss: var has negative entries")
end)

H.test("Embedding.from_pretrained (frozen by default), Module:half and bfloat16, Unfold and Fold layers", function()
  local w = dl.randn(5, 3)
  local e = nn.Embedding.from_pretrained(w)
  local idx = dl.tensor({ 2, 5 }, { dtype = "int64" })
  H.ok(dl.equal(e(idx), w:index_select(1, idx)))
  H.eq(e.weight.trainable, false)
  H.ok(not rawequal(e.weight, w))
  local opt = dl.optim.SGD{ lr = 1 }
  opt:minimize(function() return e(idx):sum() end)
  H.ok(dl.equal(e.weight, w))                        -- frozen: not updated
  local e2 = nn.Embedding.from_pretrained(w, { freeze = false, padding_idx = 1 })
  H.eq(e2.weight.trainable, true)
  H.ok(dl.equal(e2.weight[1], w[1]))                 -- the given row is kept, as PyTorch's
  H.raises(function() nn.Embedding.from_pretrained(dl.ones(3)) end,
           "Embedding.from_pretrained: expected weights of 2 dims (n, d), got shape (3,)")
  H.eq(nn.Linear(2, 2):half().weight.dtype, "float16")
  H.eq(nn.Linear(2, 2):bfloat16().bias.dtype, "bfloat16")
  local x = dl.randn(1, 2, 4, 4)
  H.ok(dl.equal(nn.Fold({ 4, 4 }, 2, { stride = 2 })(nn.Unfold(2, { stride = 2 })(x)), x))
end)

H.test("EmbeddingBag (every mode, offsets, weights, padding) and Bilinear match PyTorch, with gradients", function()
  local r = R.layers.bags
  local F = nn.functional
  local w = dl.tensor(r.weight)
  local i64 = function(v) return dl.tensor(v, { dtype = "int64" }) end
  local flat, offs = i64(r.flat), i64(r.offsets)
  local calls = {
    mean2d = function(v) return F.embedding_bag(i64(r.input2), v) end,
    sum_offsets = function(v) return F.embedding_bag(flat, v, { mode = "sum", offsets = offs }) end,
    max_offsets = function(v) return F.embedding_bag(flat, v, { mode = "max", offsets = { 1, 3, 6 } }) end,
    weighted = function(v)
      return F.embedding_bag(flat, v, { mode = "sum", offsets = offs, per_sample_weights = dl.tensor(r.psw) })
    end,
    padding = function(v) return F.embedding_bag(flat, v, { padding_idx = 4, offsets = offs }) end,
  }
  for _, c in ipairs(r.cases) do
    local fn = calls[c.name]
    close(fn(w), c.y, 1e-6, c.name)
    close(dl.grad(function(v) return (fn(v) * dl.tensor(c.c)):sum() end)(w), c.gw, 1e-6, c.name .. " gradient")
  end
  local bag = nn.EmbeddingBag(7, 3, { mode = "sum" })
  set(bag.weight, r.weight)
  close(bag(flat, { offsets = offs }), r.cases[2].y)
  local b = r.bilinear
  local x1, x2, bw, bb = dl.tensor(b.x1), dl.tensor(b.x2), dl.tensor(b.w), dl.tensor(b.b)
  local lin = nn.Bilinear(3, 5, 2)
  set(lin.weight, b.w); set(lin.bias, b.b)
  close(lin(x1, x2), b.y, 1e-5)
  local g = { dl.grad(function(a1, a2, ww, bb2) return (F.bilinear(a1, a2, ww, bb2) * dl.tensor(b.c)):sum() end,
                      { 1, 2, 3, 4 })(x1, x2, bw, bb) }
  for i = 1, 4 do close(g[i], b.grads[i], 1e-5, "bilinear gradient " .. i) end
  H.raises(function() F.embedding_bag(flat, w) end, "embedding_bag: a 1-D input needs offsets")
  H.raises(function() F.embedding_bag(flat, w, { offsets = { 2, 4 } }) end, "embedding_bag: the first offset must be 1")
  H.raises(function() F.embedding_bag(flat, w, { offsets = offs, mode = "max", per_sample_weights = dl.ones(7) }) end,
           "embedding_bag: per_sample_weights go with mode sum")
end)

H.test("cross_entropy with label_smoothing matches PyTorch (ignore_index, sum)", function()
  local r = R.layers.smoothing
  local logits, labels = dl.tensor(r.logits), dl.tensor(r.labels, { dtype = "int64" })
  for name, opts in pairs({ mean = {}, ignore = { ignore_index = 2 }, sum = { reduction = "sum" } }) do
    opts.label_smoothing = 0.15
    local v, g = dl.value_and_grad(function(l) return nn.cross_entropy(l, labels, opts) end)(logits)
    H.near(v:item(), r.cases[name].y, 2e-6, name)
    close(g, r.cases[name].g, 2e-6, name .. " gradient")
  end
  H.raises(function() nn.cross_entropy(logits, labels, { label_smoothing = 2 }) end,
           "cross_entropy: label_smoothing must be in [0, 1], got 2")
end)

H.test("ctc_loss matches PyTorch: lengths, repeats, an empty target, an impossible alignment, the blank", function()
  local r = R.layers.ctc
  local f64 = { dtype = "float64" }
  local logits = dl.tensor(r.logits, f64)
  local in_len, tg_len = dl.tensor(r.in_len, { dtype = "int64" }), dl.tensor(r.tg_len, { dtype = "int64" })
  for i, c in ipairs(r.cases) do
    local what = ("ctc case %d (%s)"):format(i, c.reduction)
    local opts = { blank = c.blank, reduction = c.reduction, zero_infinity = c.zero_infinity }
    local tg = dl.tensor(c.targets, { dtype = "int64" })
    local function loss(l) return nn.ctc_loss(l:log_softmax(3), tg, in_len, tg_len, opts) end
    local got = loss(logits)
    if c.reduction == "none" then
      local t, want = got:totable(), c.loss
      for k = 1, #want do
        if want[k] == math.huge then H.eq(t[k], math.huge, what) else H.near(t[k], want[k], 1e-10, what) end
      end
    else
      H.near(got:item(), c.loss, 1e-10, what)
    end
    if c.g ~= "none" then
      local g = dl.grad(function(l) return loss(l):sum() end)(logits)
      H.near(g:totable(), c.g, 1e-10, what .. " gradient")
    end
  end
  H.raises(function() nn.ctc_loss(logits, dl.ones(3, 2, { dtype = "int64" }), { 1, 1, 1, 1 }, { 1, 1, 1, 1 }) end,
           "ctc_loss: expected targets (N, S) with N = 4")
  H.raises(function() nn.ctc_loss(logits, dl.ones(4, 2, { dtype = "int64" }), { 9, 1, 1, 1 }, { 1, 1, 1, 1 }) end,
           "ctc_loss: lengths must lie in 0..7 (inputs) and 0..2 (targets)")
  H.raises(function() nn.ctc_loss(logits, dl.ones(4, 2, { dtype = "int64" }), { 1, 1, 1, 1 }, { 1, 1, 1, 1 }, { blank = 9 }) end,
           "ctc_loss: blank must be a class number from 1 to 5, got 9")
end)

H.test("ModuleList and ModuleDict track their modules as PyTorch's", function()
  local list = nn.ModuleList{ nn.Linear(2, 3), nn.ReLU() }
  list:append(nn.Linear(3, 1))
  H.eq(#list, 3)
  local x = dl.randn(4, 2)
  for _, m in ipairs(list) do x = m(x) end
  H.shape(x, { 4, 1 })
  H.eq(#list:parameters(), 4)
  H.ok(list:state_dict()["3.bias"] ~= nil)
  H.raises(function() list(x) end, "ModuleList: it has no forward")
  local dict = nn.ModuleDict{ enc = nn.Linear(2, 3), dec = nn.Linear(3, 2) }
  H.shape(dict.dec(dict.enc(dl.randn(1, 2))), { 1, 2 })
  H.eq(dict:items()[1][1], "dec")
  H.ok(dict:state_dict()["enc.weight"] ~= nil)
  H.raises(function() nn.ModuleDict{ a = 3 } end, "ModuleDict: a is a number, expected a module")
end)

H.test("ParameterList and ParameterDict track their Variables as PyTorch's", function()
  local Net = nn.Module:extend("ParamNet")
  function Net:init()
    self.ws = nn.ParameterList({ dl.ones(2), dl.Variable(dl.zeros(3)) })
    self.d = nn.ParameterDict({ scale = dl.tensor({ 2.0 }), bias = dl.zeros(1) })
  end
  function Net:forward(x) return x * self.ws[1]:sum() * self.d.scale + self.d.bias + self.ws[2]:sum() end
  local net = Net()
  net.ws:append(dl.ones(4))
  H.eq(#net.ws, 3)
  local names = {}
  for _, item in ipairs(net:named_parameters()) do names[#names + 1] = item[1] end
  H.eq(table.concat(names, " "), "ws.1 ws.2 ws.3 d.bias d.scale")
  H.ok(dl.is_variable(net.ws[1]) and dl.is_variable(net.d.scale))
  -- gradients reach them, an optimizer moves them, and the state dict round-trips
  local tape = dl.GradientTape()
  local y = tape:record(function() return net(dl.ones(1)):sum() end)
  H.near(tape:gradient(y, net.ws[1]):totable(), { 2, 2 }, 1e-6)   -- d/d ws[1] = x * scale
  dl.optim.SGD({ lr = 0.5 }):minimize(function() return net(dl.ones(1)):sum() end, net:parameters())
  H.near(net.d.scale:totable(), { 1 }, 1e-6)                       -- 2 - 0.5 * sum(ws[1]) = 1
  local copy = Net()
  copy.ws:append(dl.zeros(4))
  copy:load_state_dict(net:state_dict())
  H.ok(dl.equal(copy.d.scale, net.d.scale) and dl.equal(copy.ws[3], net.ws[3]))
  H.eq(net.d:items()[1][1], "bias")
  H.eq(tostring(nn.ParameterDict({ w = dl.ones(2) })), "ParameterDict((w): Variable float32 (2,))")
  H.raises(function() net.ws(dl.ones(1)) end, "ParameterList: it has no forward")
  -- assignments make Variables too, and a name of the container's own is refused
  net.ws[2] = dl.full({ 3 }, 7)
  H.eq(#net:parameters(), 5)
  H.ok(dl.is_variable(net.ws[2]))
  net.ws[4] = dl.ones(1)
  H.ok(dl.is_variable(net.ws[4]))
  H.eq(#net:parameters(), 6)
  net.d.extra = dl.zeros(2)
  H.ok(dl.is_variable(net.d.extra))
  H.eq(#net:parameters(), 7)
  H.raises(function() net.ws[9] = dl.ones(1) end, "ParameterList: index 9 is out of range 1..5")
  H.raises(function() nn.ParameterDict({ parameters = dl.ones(1) }) end,
           "ParameterDict: 'parameters' names the container's own method or field")
  H.raises(function() net.d.training = dl.ones(1) end, "ParameterDict: 'training' names the container's own")
  net.d:eval()
  H.eq(net.d.training, false)
  -- to() reaches a ParameterList's entries; a buffer of a ParameterDict stays a buffer
  local moved = net:to("float64")
  H.eq(moved.ws[1].dtype, "float64")
  H.eq(moved.d.scale.dtype, "float64")
  local pd = nn.ParameterDict({ w = dl.ones(1) })
  pd:register_buffer("stat", dl.zeros(1))
  pd.stat = dl.ones(1)
  H.ok(not dl.is_variable(pd.stat))
  H.eq(#pd:parameters(), 1)
  H.raises(function() nn.ParameterList({ 3 }) end, "ParameterList: 1 is a number, expected a tensor or a Variable")
  H.raises(function() nn.ParameterDict({ w = "x" }) end, "ParameterDict: w is a string, expected a tensor or a Variable")
  H.raises(function() nn.ParameterDict({ dl.ones(1) }) end, "ParameterDict: keys must be strings, got number")
end)

H.test("pools and Flatten match PyTorch", function()
  local r = R.layers.pool
  local x = dl.tensor(r.x)
  close(nn.MaxPool2d(2)(x), r.max)
  close(nn.AvgPool2d(3, { stride = 2, padding = 1 })(x), r.avg)
  close(nn.MaxPool2d(3, { stride = 2, padding = 1 })(x), r.max_s)
  close(nn.GlobalAvgPool2d()(x), r.gap)
  H.shape(nn.GlobalAvgPool2d({ keepdim = true })(x), { 2, 3, 1, 1 })
  H.shape(nn.Flatten()(x), { 2, 108 })
end)

H.test("BatchNorm2d and BatchNorm1d match PyTorch (training, running statistics, eval)", function()
  local r = R.layers.bn2d
  local bn = nn.BatchNorm2d(3)
  set(bn.weight, r.weight); set(bn.bias, r.bias)
  close(bn(dl.tensor(r.x1)), r.y1, 1e-5)
  bn(dl.tensor(r.x2))
  close(bn.running_mean, r.running_mean)
  close(bn.running_var, r.running_var, 1e-5)
  bn:eval()
  close(bn(dl.tensor(r.x3)), r.y3, 1e-5)
  H.eq(bn.num_batches_tracked:item(), 2)
  local r1 = R.layers.bn1d
  local bn1 = nn.BatchNorm1d(3, { momentum = 0.3 })
  close(bn1(dl.tensor(r1.x)), r1.y, 1e-5)
  close(bn1.running_mean, r1.running_mean)
  close(bn1.running_var, r1.running_var, 1e-5)
end)

local function load_cell(cell, r)
  set(cell.weight_ih, r.weight_ih); set(cell.weight_hh, r.weight_hh)
  set(cell.bias_ih, r.bias_ih); set(cell.bias_hh, r.bias_hh)
end

H.test("LSTMCell, RNNCell and GRUCell match PyTorch", function()
  local r = R.layers.lstm
  local cell = nn.LSTMCell(3, 4)
  load_cell(cell, r)
  local x = dl.tensor(r.x)
  local h, c = cell(x, dl.tensor(r.h), dl.tensor(r.c))
  close(h, r.h2); close(c, r.c2)
  h, c = cell(x, { dl.tensor(r.h), dl.tensor(r.c) })
  close(h, r.h2)
  h, c = cell(x)
  close(h, r.h0); close(c, r.c0)
  for _, name in ipairs({ "rnn_tanh", "rnn_relu" }) do
    local rr = R.layers[name]
    local rnn = nn.RNNCell(3, 4, { nonlinearity = name == "rnn_relu" and "relu" or "tanh" })
    load_cell(rnn, rr)
    close(rnn(dl.tensor(rr.x), dl.tensor(rr.h)), rr.h2, TOL, name)
  end
  local rg = R.layers.gru
  local gru = nn.GRUCell(3, 4)
  load_cell(gru, rg)
  close(gru(dl.tensor(rg.x), dl.tensor(rg.h)), rg.h2)
  H.shape(gru(dl.randn(3)), { 4 })
end)

H.test("Embedding forward and gradient match PyTorch (padding row gets none)", function()
  local r = R.layers.embedding
  local emb = nn.Embedding(5, 3, { padding_idx = r.padding_idx })
  H.values(emb.weight[r.padding_idx], { 0, 0, 0 })
  set(emb.weight, r.weight)
  local idx = dl.tensor(r.idx, { dtype = "int64" })
  close(emb(idx), r.y)
  local g = dl.implicit_grad(function() local y = emb(idx); return (y * y):sum() end)()
  close(g[1][1], r.gw)
end)

-- ---- losses ------------------------------------------------------------------------------------------

H.test("cross_entropy matches PyTorch: values and gradient", function()
  local r = R.losses.cross_entropy
  local logits, labels = dl.tensor(r.logits), dl.tensor(r.labels, { dtype = "int64" })
  close(nn.cross_entropy(logits, labels), r.mean)
  close(nn.cross_entropy(logits, labels, { reduction = "sum" }), r.sum)
  close(nn.cross_entropy(logits, labels, { reduction = "none" }), r.none)
  close(dl.grad(function(l) return nn.cross_entropy(l, labels) end)(logits), r.grad)
  -- an ignore index that no label has changes nothing, down to the most negative int64
  -- (its shift to 0-based wrapped around as undefined behaviour: tests/fuzz, fuzz_ops)
  close(nn.cross_entropy(logits, labels, { ignore_index = -2 ^ 63 }), r.mean)
  close(nn.cross_entropy(logits, labels, { ignore_index = 1000 }), r.mean)
end)

H.test("softmax_cross_entropy_with_logits(labels, logits): TF's argument order", function()
  for _, name in ipairs({ "softmax_xent_onehot", "softmax_xent_soft" }) do
    local r = R.losses[name]
    local labels, logits = dl.tensor(r.labels), dl.tensor(r.logits)
    close(nn.softmax_cross_entropy_with_logits(labels, logits), r.mean, TOL, name)
    close(nn.softmax_cross_entropy_with_logits(labels, logits, { reduction = "none" }), r.none, TOL, name)
    close(dl.grad(function(l) return nn.softmax_cross_entropy_with_logits(labels, l) end)(logits), r.grad, TOL, name)
  end
  local r = R.losses.cross_entropy
  local onehot = nn.one_hot(dl.tensor(r.labels, { dtype = "int64" }), 5)
  close(onehot, R.losses.softmax_xent_onehot.labels)
end)

H.test("mse_loss and bce_with_logits match PyTorch, bce stable at extreme logits", function()
  local m = R.losses.mse
  local a, b = dl.tensor(m.input), dl.tensor(m.target)
  close(nn.mse_loss(a, b), m.mean)
  close(nn.mse_loss(a, b, { reduction = "sum" }), m.sum)
  close(dl.grad(function(x) return nn.mse_loss(x, b) end)(a), m.grad)
  local r = R.losses.bce
  local x, y = dl.tensor(r.logits), dl.tensor(r.targets)
  close(nn.bce_with_logits(x, y), r.mean)
  close(nn.bce_with_logits(x, y, { reduction = "none" }), r.none, 1e-6)
  close(nn.bce_with_logits(x, y, { reduction = "none", pos_weight = 2.5 }), r.pos_weight_none, 1e-6)
  close(dl.grad(function(l) return nn.bce_with_logits(l, y) end)(x), r.grad)
end)

H.test("an MLP trained end to end matches PyTorch (Adam; SGD with Nesterov momentum)", function()
  for _, name in ipairs({ "adam", "sgd" }) do
    local r = R.mlp[name]
    local net = nn.Sequential{ nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3) }
    local sd = {}
    for k, v in pairs(r.init) do sd[k:gsub("^(%d+)", function(i) return tostring(i + 1) end)] = dl.tensor(v) end
    net:load_state_dict(sd)
    local x, y = dl.tensor(r.x), dl.tensor(r.y, { dtype = "int64" })
    local opt = name == "adam" and dl.optim.Adam{ lr = 0.01 } or dl.optim.SGD{ lr = 0.1, momentum = 0.9, nesterov = true }
    for i = 1, #r.losses do
      local loss = opt:minimize(function() return nn.cross_entropy(net(x), y) end)
      H.near(loss:item(), r.losses[i], 1e-6, name .. " loss " .. i)
    end
    for k, v in pairs(r.final) do
      close(net:state_dict()[k:gsub("^(%d+)", function(i) return tostring(i + 1) end)], v, 1e-5, name .. " " .. k)
    end
  end
end)

-- ---- errors ------------------------------------------------------------------------------------------

H.test("errors name the layer, what it expected and the shape it got, at the caller's line", function()
  local lin = nn.Linear(784, 10)
  local line = H.line() + 1
  local msg = H.raises(function() local y = lin(dl.zeros(64, 100)) return y end,
                       "Linear: expected input with 784 features, got shape (64, 100)")
  H.at(msg, line)
  H.raises(function() return lin(dl.tensor(1)) end, "Linear: expected input with 784 features, got shape ()")
  H.raises(function() return lin("x") end, "Linear: expected a tensor, got string")
  H.raises(function() nn.Conv2d(3, 8, 3)(dl.zeros(1, 4, 8, 8)) end,
           "Conv2d: expected input (N, 3, H, W) or (3, H, W), got shape (1, 4, 8, 8)")
  H.raises(function() nn.BatchNorm2d(3)(dl.zeros(2, 3)) end,
           "BatchNorm2d: expected input (N, C, H, W) with C = 3, got shape (2, 3)")
  H.raises(function() nn.BatchNorm1d(3)(dl.zeros(2, 4)) end,
           "BatchNorm1d: expected input (N, C) or (N, C, L) with C = 3, got shape (2, 4)")
  H.raises(function() nn.LSTMCell(3, 4)(dl.zeros(2, 5)) end, "LSTMCell: expected input (N, 3) or (3), got shape (2, 5)")
  H.raises(function() nn.RNNCell(3, 4)(dl.zeros(2, 3), dl.zeros(2, 5)) end,
           "RNNCell: expected a hidden state of shape (2, 4), got shape (2, 5)")
  H.raises(function() nn.Embedding(5, 2)(dl.tensor({ 6 }, { dtype = "int64" })) end, "embedding: index 6 is out of range")
  H.raises(function() nn.cross_entropy(dl.zeros(2, 3), dl.tensor({ 1, 4 }, { dtype = "int64" })) end,
           "cross_entropy: class label 4 is out of range for 3 classes")
  H.raises(function() nn.mse_loss(dl.zeros(2), dl.zeros(3)) end, "mse_loss: input and target shapes (2,) and (3,) differ")
  H.raises(function() nn.cross_entropy(dl.zeros(2, 3), dl.zeros(2, { dtype = "int64" }), { reduction = "avg" }) end,
           "cross_entropy: reduction must be \"mean\", \"sum\" or \"none\", got avg")
end)

H.test("errors in building modules", function()
  H.raises(function() nn.Linear(-1, 3) end, "Linear: in_features must be an integer >= 0, got -1")
  H.raises(function() nn.Linear(2, 3, { bias = false, biass = 1 }) end, "Linear: unknown option 'biass'")
  H.raises(function() nn.Conv2d(3, 8, 3, { groups = 2 }) end, "Conv2d: in_channels (3) and out_channels (8) must be divisible by groups (2)")
  H.raises(function() nn.ConvTranspose2d(4, 2, 3)(dl.zeros(1, 3, 5, 5)) end,
           "ConvTranspose2d: expected input (N, 4, H, W) or (4, H, W), got shape (1, 3, 5, 5)")
  H.raises(function() nn.ConvTranspose1d(4, 2, 3)(dl.zeros(4)) end,
           "ConvTranspose1d: expected input (N, 4, L) or (4, L), got shape (4,)")
  H.raises(function() nn.ConvTranspose2d(4, 3, 3, { groups = 2 }) end,
           "ConvTranspose2d: in_channels (4) and out_channels (3) must be divisible by groups (2)")
  H.raises(function() nn.ConvTranspose2d(4, 2, 3, { stride = 2, output_padding = 2 })(dl.zeros(1, 4, 3, 3)) end,
           "conv_transpose2d: output_padding must be smaller than the stride or the dilation, got output_padding "
           .. "(2, 2), stride (2, 2) and dilation (1, 1)")
  H.raises(function() nn.ConvTranspose2d(4, 2, 3, { kernel = 2 }) end, "ConvTranspose2d: unknown option 'kernel'")
  H.raises(function() nn.functional.conv_transpose2d(dl.zeros(1, 4, 3, 3), dl.zeros(4, 2, 3, 3), { groups = 1.5 }) end,
           "conv_transpose2d: groups must be a positive integer, got 1.5")
  H.raises(function() nn.functional.conv2d(dl.zeros(1, 4, 3, 3), dl.zeros(2, 4, 3, 3), { groups = 0 }) end,
           "conv2d: groups must be a positive integer, got 0")
  H.raises(function() nn.Conv2d(3, 8, { 3 }) end, "Conv2d: kernel size must be a number or a pair {h, w}")
  H.raises(function() nn.Conv2d(3, 8, 4, { padding = "same", stride = 2 })(dl.zeros(1, 3, 8, 8)) end,
           "conv2d: padding \"same\" needs stride 1, got stride 2, 2")
  H.raises(function() nn.Dropout(1.5) end, "Dropout: probability must be between 0 and 1, got 1.5")
  H.raises(function() nn.Dense(10, { activation = "relu6" }) end, "Dense: unknown activation \"relu6\"")
  H.raises(function() nn.RNNCell(2, 2, { nonlinearity = "sigmoid" }) end, "RNNCell: nonlinearity must be \"tanh\" or \"relu\"")
  H.raises(function() nn.Sequential{ nn.ReLU(), 5 } end, "Sequential: step 2 is a number, expected a module or a function")
  H.raises(function() nn.Embedding(5, 2, { padding_idx = 6 }) end, "Embedding: padding_idx must be in 1..5 or -5..-1, got 6")
  local NoForward = nn.Module:extend("NoForward")
  H.raises(function() NoForward()(1) end, "NoForward: forward is not defined")
  H.raises(function() nn.Module:extend("bad name") end, "Module:extend: expected a class name (an identifier)")
  H.raises(function() nn.Linear(2, 2):to(5) end, "to: expected a device or dtype name")
end)

-- ---- fixes from the differential audit against PyTorch 1.13 ------------------------------------

H.test("Module:to converts the floating-point tensors only: integer buffers keep their dtype", function()
  local bn = nn.BatchNorm1d(3)
  bn:double()
  H.eq(bn.num_batches_tracked.dtype, "int64")   -- torch: bn.double().num_batches_tracked.dtype == torch.int64
  H.eq(bn.running_mean.dtype, "float64")
  H.eq(bn.weight.dtype, "float64")
  local sd = {}
  for k, v in pairs(nn.BatchNorm1d(3):state_dict()) do sd[k] = v:double() end
  sd.num_batches_tracked = dl.tensor(5, { dtype = "int64" })
  bn:load_state_dict(sd)
  H.eq(bn.num_batches_tracked:item(), 5)
  bn:half()
  H.eq(bn.num_batches_tracked.dtype, "int64")
  H.eq(bn.running_var.dtype, "float16")
  bn:to({ dtype = "float32", device = "cpu" })
  H.eq(bn.num_batches_tracked.dtype, "int64")
  H.eq(bn.weight.dtype, "float32")
  -- torch: "nn.Module.to only accepts floating point or complex dtypes"
  H.raises(function() bn:to("int64") end, "to: a module converts to a floating-point dtype only, got int64")
end)

H.test("BatchNorm momentum = false is PyTorch's momentum=None: a cumulative average", function()
  local bn = nn.BatchNorm1d(3, { momentum = false }):double()
  local a = dl.arange(0, 12, { dtype = "float64" }):reshape(4, 3)
  for _, x in ipairs({ a * 0.5, a:cos() * 3, a:sin() + 1 }) do bn(x) end
  -- torch.nn.BatchNorm1d(3, momentum=None).double() on the same three batches
  H.near(bn.running_mean:totable(), { 1.1209137982998691, 1.2168418506786272, 1.3432553526268156 }, 1e-12)
  H.near(bn.running_var:totable(), { 5.008974909170616, 3.4538067021539676, 1.9199303026586543 }, 1e-12)
  H.eq(bn.num_batches_tracked:item(), 3)
  H.raises(function() nn.BatchNorm2d(3, { momentum = "none" }) end,
           "BatchNorm2d: momentum must be a number, or false for a cumulative average, got string")
end)

H.test("TransformerDecoderLayer and TransformerDecoder: memory_is_causal masks the memory causally", function()
  dl.manual_seed(7)
  local layer = nn.TransformerDecoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, batch_first = true })
  local tgt, memory = dl.randn(2, 3, 8), dl.randn(2, 5, 8)
  local causal = dl.tensor({ { 0, -math.huge, -math.huge, -math.huge, -math.huge },
                             { 0, 0, -math.huge, -math.huge, -math.huge },
                             { 0, 0, 0, -math.huge, -math.huge } })
  local want = layer(tgt, memory, { memory_mask = causal })
  H.near(layer(tgt, memory, { memory_is_causal = true }):totable(), want:totable(), 1e-6)
  H.ok((layer(tgt, memory) - want):abs():max():item() > 1e-3, "the mask changes the result")
  local stack = nn.TransformerDecoder(layer, 2)
  H.near(stack(tgt, memory, { memory_is_causal = true }):totable(),
         stack(tgt, memory, { memory_mask = causal }):totable(), 1e-6)
  -- sequence first: the lengths come from dim 1
  local seq_first = nn.TransformerDecoderLayer(8, 2, { dim_feedforward = 16, dropout = 0 })
  seq_first:load_state_dict(layer:state_dict())
  H.near(seq_first(tgt:transpose(1, 2), memory:transpose(1, 2), { memory_is_causal = true }):transpose(1, 2):totable(),
         want:totable(), 1e-6)
end)

H.test("MultiheadAttention and scaled_dot_product_attention check the shapes of their inputs and masks", function()
  local m = nn.MultiheadAttention(8, 2, { batch_first = true })
  local q, k = dl.randn(2, 3, 8), dl.randn(2, 5, 8)
  H.raises(function() m(q, dl.randn(4, 5, 8), dl.randn(4, 5, 8)) end,
           "MultiheadAttention: expected query, key and value of shapes (N, L, E), (N, S, E) and (N, S, E) (one batch "
           .. "size, key and value of one length), got shapes (2, 3, 8), (4, 5, 8) and (4, 5, 8)")
  H.raises(function() m(q, k, dl.randn(2, 4, 8)) end, "got shapes (2, 3, 8), (2, 5, 8) and (2, 4, 8)")
  H.raises(function() nn.MultiheadAttention(8, 2)(dl.randn(3, 2, 8), dl.randn(5, 4, 8), dl.randn(5, 4, 8)) end,
           "MultiheadAttention: expected query, key and value of shapes (L, N, E), (S, N, E) and (S, N, E)")
  H.raises(function() m(dl.randn(3, 8), k, k) end,
           "MultiheadAttention: expected query, key and value of 3 dims (or all 2, unbatched), got shapes (3, 8), (2, 5, 8)")
  for _, c in ipairs({ { { 3, 4 }, "(3, 4)" }, { { 2, 3, 5 }, "(2, 3, 5)" }, { { 5 }, "(5,)" }, { { 1, 4, 3, 5 }, "(1, 4, 3, 5)" } }) do
    H.raises(function() m(q, k, k, { attn_mask = dl.zeros(c[1]) }) end,
             "MultiheadAttention: expected attn_mask of shape (3, 5) or (4, 3, 5), got shape " .. c[2])
  end
  H.shape(m(q, k, k, { attn_mask = dl.zeros(4, 3, 5) }), { 2, 3, 8 })
  H.shape(m(dl.randn(3, 8), dl.randn(5, 8), dl.randn(5, 8), { attn_mask = dl.zeros(2, 3, 5) }), { 3, 8 })
  H.raises(function() m(dl.randn(3, 8), dl.randn(5, 8), dl.randn(5, 8), { attn_mask = dl.zeros(4, 3, 5) }) end,
           "expected attn_mask of shape (3, 5) or (2, 3, 5), got shape (4, 3, 5)")
  H.raises(function() m(q, k, k, { key_padding_mask = dl.zeros(2, 4, { dtype = "bool" }) }) end,
           "MultiheadAttention: expected key_padding_mask of shape (2, 5), got shape (2, 4)")
  H.raises(function() m(dl.randn(3, 8), dl.randn(5, 8), dl.randn(5, 8), { key_padding_mask = dl.zeros(1, 5, { dtype = "bool" }) }) end,
           "MultiheadAttention: expected key_padding_mask of shape (5,), got shape (1, 5)")
  H.raises(function() m(q, k, k, { key_padding_mask = true }) end, "MultiheadAttention: expected a tensor, got boolean")
  local sdpa = nn.functional.scaled_dot_product_attention
  H.raises(function() sdpa(dl.randn(2, 3, 4), dl.randn(2, 5, 4), dl.randn(2, 5, 4), { mask = dl.ones(3, 4, { dtype = "bool" }) }) end,
           "scaled_dot_product_attention: expected a mask that broadcasts against the scores' shape (2, 3, 5) (..., L, S), "
           .. "got shape (3, 4)")
  H.shape(sdpa(dl.randn(2, 3, 4), dl.randn(2, 5, 4), dl.randn(2, 5, 4), { mask = dl.ones(2, 1, 5, { dtype = "bool" }) }),
          { 2, 3, 4 })
  local enc = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, batch_first = true })
  H.raises(function() enc(dl.randn(2, 3, 8), { src_mask = dl.zeros(4, 4) }) end,
           "MultiheadAttention: expected attn_mask of shape (3, 3) or (4, 3, 3), got shape (4, 4)")
end)

H.test("RNN layers: unbatched states are 2-D, LSTM takes h0 and c0 together, dtypes are checked", function()
  local lstm = nn.LSTM(3, 4, { num_layers = 2 })
  H.raises(function() lstm(dl.randn(5, 3), dl.zeros(2, 1, 4), dl.zeros(2, 1, 4)) end,
           "LSTM: expected h0 of shape (2, 4) for unbatched input, got shape (2, 1, 4)")
  local out, h, c = lstm(dl.randn(5, 3), dl.zeros(2, 4), dl.zeros(2, 4))
  H.shape(out, { 5, 4 })
  H.shape(h, { 2, 4 })
  H.shape(c, { 2, 4 })
  H.raises(function() nn.GRU(3, 4)(dl.randn(5, 1, 3), dl.zeros(1, 4)) end,
           "GRU: expected h0 of shape (1, 1, 4), got shape (1, 4)")
  H.raises(function() lstm(dl.randn(5, 1, 3), dl.zeros(2, 1, 4)) end,
           "LSTM: expected both h0 and c0, or neither (zeros), got h0 only")
  H.raises(function() lstm(dl.randn(5, 1, 3), nil, dl.zeros(2, 1, 4)) end, "got c0 only")
  local h64 = dl.zeros(2, 1, 4, { dtype = "float64" })
  H.raises(function() lstm(dl.randn(5, 1, 3), h64, h64) end, "LSTM: expected h0 of the input's dtype float32, got float64")
  H.raises(function() lstm(dl.randn(5, 1, 3), dl.zeros(2, 1, 4), h64) end, "LSTM: expected c0 of the input's dtype float32")
  H.raises(function() nn.GRU(3, 4)(dl.ones(5, 1, 3, { dtype = "int64" })) end, "GRU: expected a floating-point input, got int64")
  H.raises(function() nn.GRUCell(3, 4)(dl.ones(2, 3, { dtype = "int64" })) end, "GRUCell: expected a floating-point input, got int64")
  H.raises(function() nn.RNNCell(3, 4)(dl.ones(2, 3), h64:view(2, 4)) end,
           "RNNCell: expected a hidden state of the input's dtype float32, got float64")
end)

H.test("conv1d, conv2d and conv3d padding \"same\" with an even kernel pad the extra element at the end", function()
  local F = nn.functional
  local x = dl.arange(0, 10, { dtype = "float64" }):reshape(1, 1, 10)
  local w = dl.tensor({ { { 1, 2, -1, 3 } } }, { dtype = "float64" })
  local tape = dl.GradientTape()
  tape:watch(x)
  tape:watch(w)
  local y
  local loss = tape:record(function()
    y = F.conv1d(x, w, { padding = "same", dilation = 3 })
    return (y * dl.arange(0, 10, { dtype = "float64" })):sum()
  end)
  local g = tape:gradient(loss, { x, w })
  local gx, gw = g[1], g[2]
  -- torch.nn.functional.conv1d(x, w, padding="same", dilation=3), and the gradients of (y * arange(10)).sum()
  H.near(y:totable()[1][1], { 13, 15, 19, 23, 27, 2, 4, 6, 18, 21 }, 1e-12)
  H.near(gx:totable()[1][1], { 6, 9, 12, 14, 16, 18, 13, 17, 21, 5 }, 1e-12)
  H.near(gw:totable()[1][1], { 115, 240, 196, 80 }, 1e-12)
  H.shape(nn.Conv1d(1, 2, { 3 }, { padding = "same" })(dl.randn(1, 1, 6)), { 1, 2, 6 })
  -- torch: F.conv2d(arange(20.).reshape(1, 1, 4, 5), w (1, 1, 2, 4) of ones with w[0, 0, 0, 0] = 2, padding="same")
  local w2 = dl.ones(1, 1, 2, 4)
  w2[{ 1, 1, 1, 1 }] = 2
  H.near(F.conv2d(dl.arange(0, 20):reshape(1, 1, 4, 5), w2, { padding = "same" }):totable()[1][1],
         { { 21, 32, 41, 35, 27 }, { 51, 77, 86, 70, 52 }, { 81, 122, 131, 105, 77 }, { 48, 81, 86, 71, 55 } }, 1e-5)
  -- torch: F.conv3d(arange(120.).reshape(1, 2, 3, 4, 5) / 10, arange(144.).reshape(3, 2, 2, 3, 4).cos(), padding="same")
  local y3 = F.conv3d(dl.arange(0, 120, { dtype = "float64" }):reshape(1, 2, 3, 4, 5) / 10,
                      dl.arange(0, 144, { dtype = "float64" }):reshape(3, 2, 2, 3, 4):cos(), { padding = "same" })
  H.shape(y3, { 1, 3, 3, 4, 5 })
  H.near(y3:totable()[1][2][3][1], { -3.2274160385131836, 6.915722846984863, 6.927506446838379, 17.357872009277344,
                                     19.205665588378906 }, 1e-6)
  -- the errors speak of conv1d and its 1-D shapes
  H.raises(function() F.conv1d(x, w, { padding = "same", stride = 2 }) end, "conv1d: padding \"same\" needs stride 1, got stride 2")
  H.raises(function() F.conv1d(x, w, { padding = "full" }) end,
           "conv1d: padding must be a number, \"same\" or \"valid\", got \"full\"")
  H.raises(function() F.conv1d(dl.randn(1, 1, 2), dl.ones(1, 1, 4)) end,
           "conv1d: the kernel of size 4 (dilation 1) is longer than the padded input (2) of an input of shape (1, 1, 2)")
  H.raises(function() F.conv1d(dl.randn(1, 2, 5), dl.ones(1, 1, 3)) end,
           "conv1d: input of shape (1, 2, 5) and weight of shape (1, 1, 3) do not match with groups = 1")
  H.raises(function() F.conv1d(x, w, { stride = 1.5 }) end, "conv1d: stride must be an integer >= 1, got 1.5")
  H.raises(function() F.conv2d(dl.randn(1, 1, 4, 4), w2, { padding = "full" }) end,
           "conv2d: padding must be sizes, \"same\" or \"valid\", got \"full\"")
end)

H.test("pad: reflect and replicate pad before cropping, as PyTorch's; value only with constant", function()
  local F = nn.functional
  local a = dl.arange(0, 5):view(1, 1, 5)
  -- torch.nn.functional.pad(torch.arange(5.).view(1, 1, 5), ..., mode=...)
  H.eq(F.pad(a, { -3, 4 }, { mode = "reflect" }):totable()[1][1], { 3, 4, 3, 2, 1, 0 })
  H.eq(F.pad(a, { 4, -3 }, { mode = "reflect" }):totable()[1][1], { 4, 3, 2, 1, 0, 1 })
  H.eq(F.pad(a, { -4, 3 }, { mode = "reflect" }):totable()[1][1], { 4, 3, 2, 1 })
  H.eq(F.pad(a, { -5, 2 }, { mode = "replicate" }):totable()[1][1], { 4, 4 })
  H.eq(F.pad(a, { -3, 4 }, { mode = "replicate" }):totable()[1][1], { 3, 4, 4, 4, 4, 4 })
  H.eq(F.pad(a, { 2, -3 }, { mode = "circular" }):totable()[1][1], { 0, 1, 0, 1 })
  -- torch: F.pad(torch.arange(12.).view(1, 1, 3, 4), (-1, 2, 2, -1), mode="reflect")
  H.eq(F.pad(dl.arange(0, 12):view(1, 1, 3, 4), { -1, 2, 2, -1 }, { mode = "reflect" }):totable()[1][1],
       { { 9, 10, 11, 10, 9 }, { 5, 6, 7, 6, 5 }, { 1, 2, 3, 2, 1 }, { 5, 6, 7, 6, 5 } })
  H.shape(F.pad(a, { -2, -3 }), { 1, 1, 0 })
  H.raises(function() F.pad(a, { -1, 5 }, { mode = "reflect" }) end, "pad: reflect padding of 5 is too large for a dim of size 5")
  H.raises(function() F.pad(dl.randn(1, 2, 3), { -2, -2 }) end,
           "pad: padding (-2, -2) of dim 3 (size 3) would leave a negative size -1")
  H.raises(function() F.pad(a, { -2, -3 }, { mode = "replicate" }) end, "pad: padding (-2, -3) of dim 3 (size 5) would leave it empty")
  H.raises(function() F.pad(dl.randn(1, 2, 3), { 1, 1 }, { mode = "reflect", value = 2 }) end,
           "pad: mode reflect takes no value (it is for mode constant), got value 2")
  H.shape(F.pad(dl.randn(1, 2, 3), { 1, 1 }, { mode = "reflect", value = 0 }), { 1, 2, 5 })
end)

H.test("F.embedding takes options: padding_idx, max_norm (rows renormalised in place) and norm_type", function()
  local F = nn.functional
  local w = dl.Variable(dl.arange(0, 15, { dtype = "float64" }):reshape(5, 3) / 4 - 1)
  local idx = dl.tensor({ { 1, 4 }, { 4, 5 } }, { dtype = "int64" })
  local y
  local grads = dl.implicit_grad(function() y = F.embedding(idx, w, { max_norm = 1.5 }) return y:sum() end)()
  -- torch: w = arange(15.).reshape(5, 3) / 4 - 1; F.embedding(tensor([[0, 3], [3, 4]]), w, max_norm=1.5)
  local r4, r5 = { 0.7150969146614681, 0.8581162975937616, 1.0011356805260552 },
                 { 0.7666518584080917, 0.8624833407091032, 0.9583148230101146 }
  H.near(y:totable(), { { { -1, -0.75, -0.5 }, r4 }, { r4, r5 } }, 1e-12)
  H.near(w:totable(), { { -1, -0.75, -0.5 }, { -0.25, 0, 0.25 }, { 0.5, 0.75, 1 }, r4, r5 }, 1e-12)
  H.near(grads[1][1]:totable(), { { 1, 1, 1 }, { 0, 0, 0 }, { 0, 0, 0 }, { 2, 2, 2 }, { 1, 1, 1 } }, 0)
  local w2 = dl.arange(0, 15, { dtype = "float64" }):reshape(5, 3) / 4 - 1
  F.embedding(idx, w2, { max_norm = 1, norm_type = 1, padding_idx = 4 })
  -- torch: F.embedding(idx, w2, max_norm=1, norm_type=1, padding_idx=3) leaves w2
  H.near(w2:totable(), { { -0.4444444246913589, -0.3333333185185192, -0.22222221234567946 }, { -0.25, 0, 0.25 },
                         { 0.5, 0.75, 1 }, { 0.2777777716049384, 0.33333332592592607, 0.38888888024691376 },
                         { 0.2962962919067216, 0.3333333283950618, 0.37037036488340197 } }, 1e-12)
  H.raises(function() F.embedding(idx, w2, { maxnorm = 1 }) end, "embedding: unknown option 'maxnorm'")
  H.raises(function() F.embedding(idx, w2, { max_norm = "1" }) end, "embedding: expected a non-negative max_norm, got string")
  H.raises(function() F.embedding(idx, w2, { padding_idx = 9 }) end, "embedding: padding_idx must be in 1..5 or -5..-1, got 9")
  H.eq(F.embedding(idx, w2, 4):totable(), F.embedding(idx, w2, { padding_idx = 4 }):totable())
end)

H.test("load_state_dict says when a state dict's names count from 0, as PyTorch's", function()
  local enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16 }), 2)
  local sd = {}
  for k, v in pairs(enc:state_dict()) do
    sd[(k:gsub("^layers%.(%d+)", function(i) return "layers." .. (tonumber(i) - 1) end))] = v
  end
  H.raises(function() enc:load_state_dict(sd) end,
           "load_state_dict: missing key \"layers.2.linear1.bias\" in the state dict (PyTorch's containers count "
           .. "from 0, dlua's from 1: the state dict's \"layers.0.linear1.bias\" is the model's \"layers.1.linear1.bias\"; "
           .. "add 1 to every index in the names)")
  sd.other = dl.zeros(1)
  local msg = H.raises(function() enc:load_state_dict(sd) end, "load_state_dict: missing key \"layers.2.linear1.bias\"")
  H.ok(not msg:find("count from 0", 1, true), msg)
end)

H.run()
