-- The GPU smoke check of tools/gpu_bundle.sh: a conv net trained on the CPU and on CUDA
-- from one seed (losses agree step by step), dl.compile on CUDA against eager, second
-- derivatives, dl.linalg gradients, sorting, masks, unique and cumprod against the CPU.
--   dlua tools/gpu_smoke.lua
local dl = require("dlua")
assert(dl.cuda.is_available(), dl.cuda.status())
print(dl.cuda.status())
local nn = dl.nn
local function run(device, steps)
  dl.manual_seed(7)
  local model = nn.Sequential{
    nn.Conv2d(1, 8, 3, { padding = 1, bias = false }), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, { padding = 1 }), nn.ReLU(), nn.AvgPool2d(2),
    nn.Flatten(), nn.Linear(16 * 7 * 7, 32), nn.Tanh(), nn.Linear(32, 10),
  }
  model:to(device)
  local opt = dl.optim.Adam{ lr = 1e-3 }
  dl.manual_seed(8)
  local x = dl.randn(64, 1, 28, 28):to(device)
  local y = dl.randint(1, 11, {64}):to(device)
  local step = dl.implicit_value_and_grad(function() return nn.cross_entropy(model(x), y) end)
  local losses = {}
  for i = 1, steps do
    local loss, grads = step()
    opt:apply_gradients(grads)
    losses[i] = loss:item()
  end
  return losses
end
local t0 = os.clock()
local cpu = run("cpu", 20)
local gpu = run("cuda", 20)
for i = 1, #cpu do
  print(string.format("step %2d cpu %.6f cuda %.6f", i, cpu[i], gpu[i]))
  assert(math.abs(cpu[i] - gpu[i]) < 1e-3 * math.max(1, math.abs(cpu[i])), "losses differ at step " .. i)
end
assert(gpu[20] < gpu[1], "the loss did not fall on cuda")
-- compiled pointwise chain on cuda equals eager
local f = function(a, b) return ((a * b + 1):tanh() * a - b:sigmoid()):relu():sum(2) end
local cf = dl.compile(f)
for k = 1, 4 do
  local a, b = dl.randn(300, 500, {device = "cuda"}), dl.randn(300, 500, {device = "cuda"})
  local e, c = f(a, b), cf(a, b)
  assert(dl.allclose(e:cpu(), c:cpu(), 1e-5, 1e-6), "compiled differs from eager on cuda")
end
print(dl.compile.explain(cf))
-- what dl.compile defers besides pointwise chains, on cuda against eager: a row's
-- statistic read per element (Rows), softmax steps, views of deferred values, and a
-- compiled gradient with respect to two tensors
local function rows(x, w)
  local c = x - x:mean(-1, true)
  local y = dl.softmax(c * w, 2):t():reshape(-1)
  return (y * y):sum()
end
local crows = dl.compile(rows)
local cgrad = dl.compile(dl.grad(rows, { 1, 2 }))
local egrad = dl.grad(rows, { 1, 2 })
for k = 1, 4 do
  local x, w = dl.randn(64, 300, {device = "cuda"}), dl.randn(300, {device = "cuda"})
  assert(dl.allclose(rows(x, w):cpu(), crows(x, w):cpu(), 1e-5, 1e-6), "compiled rows differ on cuda")
  local ex, ew = egrad(x, w)
  local cx, cw = cgrad(x, w)
  assert(cx.device == "cuda:0" and cw.device == "cuda:0", "compiled gradients left the device")
  assert(dl.allclose(ex:cpu(), cx:cpu(), 1e-5, 1e-6) and dl.allclose(ew:cpu(), cw:cpu(), 1e-5, 1e-6),
         "compiled gradients differ on cuda")
end
-- one plan on the device, forward and backward (not autograd's pass op by op)
local gtext = dl.compile.explain(cgrad)
assert(gtext:find("backward pass, compiled", 1, true), "the gradient on cuda was not compiled:\n" .. gtext)
print(gtext)
-- a classifier's training step compiled (implicit gradients, cross_entropy as a step) on
-- cuda against the same step eagerly, from one seed
local function classifier(compiled)
  dl.manual_seed(5)
  local net = nn.Sequential{ nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5) }
  net:to("cuda")
  local opt = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }
  local vg = dl.implicit_value_and_grad(function(x, y) return nn.cross_entropy(net(x), y) end)
  local step = function(x, y) local l, g = vg(x, y) opt:apply_gradients(g) return l end
  local f = compiled and dl.compile(step) or step
  dl.manual_seed(6)
  local losses = {}
  for i = 1, 5 do
    local x = dl.randn(64, 20):to("cuda")
    local y = dl.randint(1, 6, { 64 }, { dtype = "int64" }):to("cuda")
    losses[i] = f(x, y):item()
  end
  return losses, f
end
local ce = classifier(false)
local cc, cf = classifier(true)
for i = 1, #ce do
  assert(math.abs(ce[i] - cc[i]) < 1e-5 * math.max(1, math.abs(ce[i])), "compiled classifier step differs on cuda at " .. i)
end
print("cuda compiled classifier step ok", ce[#ce], cc[#cc])
print(dl.compile.explain(cf):match("^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*"))
local g1 = dl.grad(function(x) return (x * x * x):sum() end)
local g2 = dl.grad(function(x) return g1(x):sum() end)
local xg = dl.tensor({1, 2, 3}, {device = "cuda"})
assert(dl.allclose(g2(xg):cpu(), dl.tensor({6, 12, 18})))
-- dl.linalg on cuda, gradients included, against the cpu
dl.manual_seed(3)
local A = dl.randn(4, 5, 5, {dtype = "float64"}) + dl.eye(5, {dtype = "float64"}) * 6
local B = dl.randn(4, 5, 2, {dtype = "float64"})
local function loss(a, b)
  local x = dl.linalg.solve(a, b)
  local L = dl.linalg.cholesky(a:matmul(a:transpose(-2, -1)))
  local w = dl.linalg.eigvalsh(a + a:transpose(-2, -1))
  local s = dl.linalg.svdvals(a)
  local _, ld = dl.linalg.slogdet(a)
  local q, r = dl.linalg.qr(a)
  return (x * x):sum() + L:sum() + w:sum() + (s * s):sum() + ld:sum() + r:abs():sum() + dl.linalg.inv(a):sum()
end
local gc = dl.grad(loss)(A, B)
local gg = dl.grad(loss)(A:cuda(), B:cuda())
print("linalg grad max diff", (gc - gg:cpu()):abs():amax():item())
assert(dl.allclose(gc, gg:cpu(), 1e-9, 1e-9), "linalg gradients differ on cuda")
print("cuda training ok", os.clock() - t0)
-- sorting and selection from Lua on cuda equal the cpu's
local xs = dl.randn(50, 300)
local xg = xs:cuda()
local v1, i1 = xs:sort(2, true); local v2, i2 = xg:sort(2, true)
assert(dl.equal(v1, v2:cpu()) and dl.equal(i1, i2:cpu()), "sort differs on cuda")
assert(dl.equal(xs[xs:gt(0.5)], xg[xg:gt(0.5)]:cpu()), "masked select differs on cuda")
local u1, inv1, c1 = dl.unique(xs:mul(3):round(), {return_inverse = true, return_counts = true})
local u2, inv2, c2 = dl.unique(xg:mul(3):round(), {return_inverse = true, return_counts = true})
assert(dl.equal(u1, u2:cpu()) and dl.equal(inv1, inv2:cpu()) and dl.equal(c1, c2:cpu()), "unique differs on cuda")
local tv1 = xs:topk(5, 1); local tv2 = xg:topk(5, 1)
assert(dl.equal(tv1, tv2:cpu()))
local gq = dl.grad(function(a) return (a:topk(3) * 2):sum() + a[a:gt(1)]:sum() end)
assert(dl.equal(gq(xs), gq(xg):cpu()), "sort gradients differ on cuda")
print("cuda sorting ok")
local cp = dl.tensor({{2, 0, 5, 1.5}, {0.5, 3, 0, 0}})
local gcpu = dl.grad(function(v) return (v:cumprod(2) * dl.tensor({1, 2, 3, 4})):sum() end)(cp)
local ggpu = dl.grad(function(v) return (v:cumprod(2) * dl.tensor({1, 2, 3, 4}):cuda()):sum() end)(cp:cuda())
assert(dl.allclose(gcpu, ggpu:cpu()), "cumprod gradients differ on cuda")
print("cuda cumprod ok")
-- float16 and bfloat16 on cuda: conversions round as the CPU's, half products (cuBLAS,
-- float32 accumulation) and autocast, its gradient included
local raw = (dl.randn(5, 1000) * dl.tensor({ { 1e-6 }, { 1e-3 }, { 1 }, { 300 }, { 7e4 } })):reshape(5000)
for _, d in ipairs({ "float16", "bfloat16" }) do
  local h, hg = raw:to(d), raw:cuda():to(d)
  assert(hg.dtype == d and dl.equal(h:float(), hg:cpu():float()), d .. " conversion differs on cuda")
  assert(dl.equal(hg:float():cpu(), h:float()), d .. " widening differs on cuda")
  local a, b = dl.randn(3, 48, 40):to(d), dl.randn(3, 40, 24):to(d)
  local want = a:float():matmul(b:float())
  local got = a:cuda():matmul(b:cuda())
  assert(got.dtype == d, d .. " product dtype")
  local tol = d == "float16" and 2e-2 or 1e-1
  assert(dl.allclose(got:cpu():float(), want, tol, tol), d .. " product differs on cuda")
end
local fa, fb = dl.randn(32, 64), dl.randn(64, 16)
local ga = dl.grad(function(x) return dl.autocast(function() return x:matmul(fb:cuda()) end):float():pow(2):sum() end)(fa:cuda())
local gc = dl.grad(function(x) return x:matmul(fb):pow(2):sum() end)(fa)
assert(ga.dtype == "float32" and dl.allclose(ga:cpu(), gc, 5e-2, 5e-1), "autocast gradient differs")
print("cuda half ok, autocast gradient max diff", (ga:cpu() - gc):abs():amax():item())
-- sequence layers: GELU, layer norm, attention, LSTM and per-example gradients against the cpu
local function both(build, x, what)
  local function run(device)
    dl.manual_seed(11)
    local m = build():to(device)
    local xd = x:to(device)
    local function f(v) local y = m(v) return y end
    return f(xd), dl.grad(function(v) local y = f(v) return (y * y):sum() end)(xd)
  end
  local oc, gc = run("cpu")
  local og, gg = run("cuda")
  local d1, d2 = (oc - og:cpu()):abs():amax():item(), (gc - gg:cpu()):abs():amax():item()
  print(string.format("%-20s out %.2e  input grad %.2e", what, d1, d2))
  assert(d1 < 1e-4 and d2 < 1e-3, what .. " differs on cuda")
end
local F = dl.nn.functional
both(function() return nn.Sequential{ nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32) } end, dl.randn(8, 16), "gelu + layer_norm")
both(function() return nn.TransformerEncoderLayer(32, 4, { dim_feedforward = 64, dropout = 0, batch_first = true, activation = "gelu" }) end,
     dl.randn(2, 10, 32), "transformer layer")
both(function() return nn.LSTM(8, 16, { num_layers = 2, batch_first = true }) end, dl.randn(4, 10, 8), "lstm")
local q, k, v = dl.randn(2, 4, 10, 8), dl.randn(2, 4, 10, 8), dl.randn(2, 4, 10, 8)
local ac = F.scaled_dot_product_attention(q, k * 1e3, v, { causal = true })
local ag = F.scaled_dot_product_attention(q:cuda(), (k * 1e3):cuda(), v:cuda(), { causal = true })
assert(dl.allclose(ac, ag:cpu(), 1e-4, 1e-4), "attention with large logits differs on cuda")
local w = dl.randn(4, 3, { dtype = "float64" })
local xs = dl.randn(8, 4, { dtype = "float64" })
local function ploss(w, x) return dl.tanh(x:matmul(w)):sum() end
local pc = dl.vmap(dl.grad(ploss), { in_dims = { false, 1 } })(w, xs)
local pg = dl.vmap(dl.grad(ploss), { in_dims = { false, 1 } })(w:cuda(), xs:cuda())
assert(pg.device == "cuda:0" and dl.allclose(pc, pg:cpu(), 1e-12, 1e-12), "vmap differs on cuda")
print("cuda sequence layers ok")
-- dl.fft on cuda against the cpu: complex and real transforms along a middle dim (the
-- device's direct sums up to 16, cuFFT past it), several dims, and gradients through
-- rfft/irfft
local fft = dl.fft
for _, n in ipairs({ 15, 37, 256 }) do
  local sig = dl.randn(3, n, 5, { dtype = "float64" })
  local sg = sig:cuda()
  local function same(what, a, b)
    local d = (a - b:cpu()):abs():amax():item()
    assert(b.device == "cuda:0" and d < 1e-9, string.format("%s n %d differs on cuda by %g", what, n, d))
  end
  same("fft", fft.fft(fft.complex(sig, sig * 0.5), nil, 2), fft.fft(fft.complex(sg, sg * 0.5), nil, 2))
  same("rfft", fft.rfft(sig, nil, 2), fft.rfft(sg, nil, 2))
  same("irfft", fft.irfft(fft.rfft(sig, nil, 2), n, 2), fft.irfft(fft.rfft(sg, nil, 2), n, 2))
  same("rfftn", fft.rfftn(sig), fft.rfftn(sg))
  local function spectral(v) return (fft.abs(fft.rfft(v, nil, 2)):pow(2) * 0.1):sum() + fft.irfft(fft.rfft(v:tanh(), nil, 2), n, 2):sin():sum() end
  same("spectral gradient", dl.grad(spectral)(sig), dl.grad(spectral)(sg))
end
print("cuda fft ok")
-- special functions and distributions with tensor parameters on cuda: log densities,
-- entropies and reparameterised draws stay on the device, equal to the cpu's for one value
local Dist = dl.distributions
local conc, rate = dl.rand(4, 3, { dtype = "float64" }) + 0.5, dl.rand(4, 3, { dtype = "float64" }) + 0.2
local val = dl.rand(4, 3, { dtype = "float64" }) + 0.1
local function dens(c, r, v)
  local g = Dist.Gamma(c, r)
  local b = Dist.Beta(c, r + 1)
  local s = Dist.StudentT(c + 2, r, c)
  local mv = Dist.MultivariateNormal(r, { scale_tril = dl.diag_embed(c) + dl.tril(v:unsqueeze(-1) * v:unsqueeze(-2), -1) })
  return g:log_prob(v):sum() + b:log_prob(v / 1.2):sum() + s:log_prob(v):sum() + g:entropy():sum() + mv:log_prob(v):sum()
    + dl.special.digamma(c):sum() + dl.special.zeta(dl.stop_gradient(r) + 1.5, c + 0.5):sum() + dl.special.polygamma(2, c):sum()
end
local dcc, dcr = dl.grad(dens, { 1, 2 })(conc, rate, val)
local dg1, dg2 = dl.grad(dens, { 1, 2 })(conc:cuda(), rate:cuda(), val:cuda())
print("distribution gradients max diff", (dcc - dg1:cpu()):abs():amax():item(), (dcr - dg2:cpu()):abs():amax():item())
assert(dl.allclose(dcc, dg1:cpu(), 1e-9, 1e-9) and dl.allclose(dcr, dg2:cpu(), 1e-9, 1e-9), "distribution gradients differ on cuda")
local draw = Dist.Gamma(conc:cuda(), rate:cuda()):rsample({ 100 })
assert(draw.device == "cuda:0" and draw.shape[1] == 100 and draw:min():item() > 0, "gamma draws on cuda")
local dd = Dist.Dirichlet(conc:cuda()):rsample()
assert(dd.device == "cuda:0" and dl.allclose(dd:sum(-1):cpu(), dl.ones(4, { dtype = "float64" })), "dirichlet draws on cuda")
local bits = dl.tensor({ 12, -7, 1023 }, { dtype = "int32" })
assert(dl.equal(bits:bitwise_xor(5):bitwise_left_shift(2), bits:cuda():bitwise_xor(5):bitwise_left_shift(2):cpu()), "bitwise ops differ on cuda")
-- where, clamp and masked_fill select their gradients (an infinite one selected away is 0)
local wv, xv = dl.tensor({ math.huge, 2, math.huge }), dl.tensor({ -1, 0.5, 3 })
local function selects(v, w)
  return (dl.where(v:gt(0), v, 0) * w):sum() + (v:clamp(0, 1) * w):sum() + (v:masked_fill(v:lt(0), 5) * w):sum()
end
assert(dl.equal(dl.grad(selects)(xv, wv), dl.grad(selects)(xv:cuda(), wv:cuda()):cpu()), "select gradients differ on cuda")
print("cuda special functions and distributions ok")
