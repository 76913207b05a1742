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
