-- dl.vjp, dl.jvp, dl.jacobian, dl.hessian and dl.checkpoint (scripts/dlua/transforms.lua):
-- values against closed forms and finite differences (float64), composition with
-- dl.grad, and the errors.
local dl = require("dlua")
local H = require("harness")

local f64 = { dtype = "float64" }

-- Central differences of f (one float64 tensor in, one out) at x: the Jacobian, of
-- shape y.shape .. x.shape, flattened to (numel y, numel x).
local function numeric_jacobian(f, x, eps)
  eps = eps or 1e-6
  local n = x:numel()
  local cols = {}
  for j = 1, n do
    local d = dl.zeros(n, f64)
    d[j] = eps
    local hi = f(x + d:reshape(x.shape)):reshape(-1)
    local lo = f(x - d:reshape(x.shape)):reshape(-1)
    cols[j] = (hi - lo) / (2 * eps)
  end
  return dl.stack(cols, 2)
end

local function g(x) return dl.tanh(x * x):sum(1) * dl.sin(x[1]) end   -- (3, 2) -> (2)

H.test("jacobian: a linear map is its matrix; a nonlinear one matches finite differences", function()
  dl.manual_seed(1)
  local A = dl.randn(4, 3, f64)
  local J = dl.jacobian(function(x) return A:matmul(x) end)(dl.randn(3, f64))
  H.shape(J, { 4, 3 })
  H.near(J:totable(), A:totable(), 1e-12)
  local x = dl.randn(3, 2, f64)
  local Jg = dl.jacobian(g)(x)
  H.shape(Jg, { 2, 3, 2 })
  H.near(Jg:reshape(2, 6):totable(), numeric_jacobian(g, x):totable(), 1e-7)
  -- several argnums: one Jacobian each; other arguments pass through
  local W = dl.randn(2, 3, f64)
  local Jx, Jw = dl.jacobian(function(x2, w, k) return w:matmul(x2) * k end, { 1, 2 })(dl.ones(3, f64), W, 2)
  H.near(Jx:totable(), (W * 2):totable(), 1e-12)
  H.shape(Jw, { 2, 2, 3 })
  H.near(Jw[1][1]:totable(), { 2, 2, 2 }, 1e-12)
  H.near(Jw[1][2]:totable(), { 0, 0, 0 }, 1e-12)
  -- a scalar function's Jacobian is its gradient
  local x3 = dl.randn(5, f64)
  H.near(dl.jacobian(function(v) return (v ^ 3):sum() end)(x3):totable(), (x3 * x3 * 3):totable(), 1e-12)
end)

H.test("hessian: of a quadratic form A + A^T, of a nonlinear function symmetric and as differences", function()
  dl.manual_seed(2)
  local A = dl.randn(3, 3, f64)
  local Hq = dl.hessian(function(x) return x:matmul(A:matmul(x)) end)(dl.randn(3, f64))
  H.near(Hq:totable(), (A + A:t()):totable(), 1e-12)
  local function rosen(v) return (1 - v[1]) ^ 2 + 100 * (v[2] - v[1] ^ 2) ^ 2 end
  local p = dl.tensor({ 0.5, -0.3 }, f64)
  local Hr = dl.hessian(rosen)(p)
  local x1, x2 = 0.5, -0.3
  H.near(Hr:totable(), { { 2 - 400 * (x2 - x1 * x1) + 800 * x1 * x1, -400 * x1 }, { -400 * x1, 200 } }, 1e-9)
  local x = dl.randn(2, 2, f64)
  local function s(v) return dl.exp(v):sum() * dl.sin(v):sum() end
  local Hs = dl.hessian(s)(x)
  H.shape(Hs, { 2, 2, 2, 2 })
  local flat = Hs:reshape(4, 4)
  H.near(flat:totable(), flat:t():totable(), 1e-12)
  H.near(flat:totable(), numeric_jacobian(dl.grad(s), x):totable(), 1e-6)
end)

H.test("vjp: back(dy) is dy^T J, may be called again, and leaves integer arguments alone", function()
  dl.manual_seed(3)
  local x = dl.randn(3, 2, f64)
  local y, back = dl.vjp(g, x)
  H.near(y:totable(), g(x):totable(), 1e-15)
  local J = numeric_jacobian(g, x)
  for _, dy in ipairs({ dl.tensor({ 1, 0 }, f64), dl.tensor({ 0.5, -2 }, f64) }) do
    local dx = back(dy)
    H.shape(dx, { 3, 2 })
    H.near(dx:reshape(-1):totable(), dy:matmul(J):totable(), 1e-7)
  end
  -- a list of outputs takes a list of cotangents; labels get no gradient
  local w = dl.randn(2, f64)
  local ys, back2 = dl.vjp(function(v, labels) return { v * 2, (v * labels:to("float64")):sum() } end,
                           w, dl.tensor({ 1, 3 }, { dtype = "int64" }))
  H.eq(#ys, 2)
  local dw, dlabels = back2({ dl.ones(2, f64), dl.tensor(10, f64) })
  H.near(dw:totable(), { 12, 32 }, 1e-12)
  H.eq(dlabels, nil)
  H.raises(function() back2({ dl.ones(3, f64), dl.tensor(1, f64) }) end, "vjp: cotangent 1 has shape (3,), the output has (2,)")
  H.raises(function() dl.vjp(42) end, "vjp: expected a function, got number")
end)

H.test("jvp: J t by the double-backward trick", function()
  dl.manual_seed(4)
  local x, t = dl.randn(3, 2, f64), dl.randn(3, 2, f64)
  local y, jt = dl.jvp(g, { x }, { t })
  H.near(y:totable(), g(x):totable(), 1e-15)
  H.near(jt:totable(), numeric_jacobian(g, x):matmul(t:reshape(-1)):totable(), 1e-7)
  -- two primals: the sum of both directional derivatives
  local a, b = dl.randn(3, f64), dl.randn(3, f64)
  local _, both = dl.jvp(function(u, v) return u * v end, { a, b }, { dl.ones(3, f64), dl.zeros(3, f64) })
  H.near(both:totable(), b:totable(), 1e-12)
  H.raises(function() dl.jvp(g, { x }, { dl.ones(2, f64) }) end, "jvp: tangent 1 has shape (2,), its primal has (3, 2)")
end)

H.test("the transforms compose with dl.grad", function()
  -- d/dx of the trace of the Hessian of sum(x^4) = d/dx sum(12 x^2) = 24 x
  local x = dl.tensor({ 1, -2, 0.5 }, f64)
  local d = dl.grad(function(v)
    local Hm = dl.hessian(function(u) return (u ^ 4):sum() end)(v)
    local tr = 0
    for i = 1, 3 do tr = tr + Hm[i][i] end
    return tr
  end)(x)
  H.near(d:totable(), (x * 24):totable(), 1e-10)
  -- a gradient through a vjp: d/dx <back(1), x> for y = x^3 -> d/dx 3 x^3 = 9 x^2
  local d2 = dl.grad(function(v)
    local _, back = dl.vjp(function(u) return u ^ 3 end, v)
    return (back(dl.ones(3, f64)) * v):sum()
  end)(x)
  H.near(d2:totable(), (x * x * 9):totable(), 1e-10)
end)

H.test("checkpoint: the same value and gradients, f run again in the backward pass, dropout's mask kept", function()
  dl.manual_seed(5)
  local W1, W2 = dl.randn(4, 8, f64), dl.randn(8, 1, f64)
  local X = dl.randn(5, 4, f64)
  local calls = 0
  local function block(x, w)
    calls = calls + 1
    return dl.tanh(x:matmul(w))
  end
  local function plain(w1, w2) return block(X, w1):matmul(w2):sum() end
  local function ckpt(w1, w2) return dl.checkpoint(block, X, w1):matmul(w2):sum() end
  local v1, a1, b1 = dl.value_and_grad(plain, { 1, 2 })(W1, W2)
  calls = 0
  local v2, a2, b2 = dl.value_and_grad(ckpt, { 1, 2 })(W1, W2)
  H.eq(calls, 2, "once forward, once again in the backward pass")
  H.near(v2:item(), v1:item(), 1e-12)
  H.near(a2:totable(), a1:totable(), 1e-12)
  H.near(b2:totable(), b1:totable(), 1e-12)
  -- second order through a checkpoint
  local x = dl.tensor(0.7, f64)
  local d2 = dl.grad(dl.grad(function(v) return dl.checkpoint(function(u) return u ^ 3 end, v) end))(x)
  H.near(d2:item(), 6 * 0.7, 1e-12)
  -- a random op inside draws the same numbers when run again
  local function noisy(v) return v * dl.rand(v.shape, f64) end
  local v = dl.ones(6, f64)
  local grad_ck = dl.grad(function(u) return dl.checkpoint(noisy, u):sum() end)
  dl.manual_seed(9)
  local gck = grad_ck(v)
  dl.manual_seed(9)
  local mask = dl.rand(6, f64)
  H.near(gck:totable(), mask:totable(), 1e-15)
  -- outside a gradient it is the function
  H.near(dl.checkpoint(block, X, W1):totable(), block(X, W1):totable(), 0)
end)

H.run()
