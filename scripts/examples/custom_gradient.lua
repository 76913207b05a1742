-- Custom gradients, as in TensorFlow's eager execution texts: a numerically stable
-- log(1 + e^x), gradient clipping in the backward pass, and clipping the gradients of a
-- model by their global norm before an optimizer step.
--
--   dlua scripts/examples/custom_gradient.lua
local dl = require("dlua")

local function check(cond, what)
  if not cond then error("check failed: " .. what, 2) end
  print("ok: " .. what)
end

-- ---- log1pexp -------------------------------------------------------------------------------
-- The plain formula: fine at 0, but at x = 100 exp overflows and the gradient is nan.
local function log1pexp_naive(x) return dl.log(1 + dl.exp(x)) end
local grad_naive = dl.grad(log1pexp_naive)
print("naive gradient at 0:   " .. tostring(grad_naive(0)))
print("naive gradient at 100: " .. tostring(grad_naive(100)))
check(grad_naive(0):item() == 0.5, "the naive gradient at 0 is 0.5")
local g100 = grad_naive(100):item()
check(g100 ~= g100, "the naive gradient at 100 is nan")

-- With a custom gradient that reuses e = exp(x) from the forward pass: dy (1 - 1 / (1 + e)).
local log1pexp = dl.custom_gradient(function(x)
  local e = dl.exp(x)
  local function grad_fn(dy) return dy * (1 - 1 / (1 + e)) end
  return dl.log(1 + e), grad_fn
end)
local grad_log1pexp = dl.grad(log1pexp)
print("custom gradient at 0:   " .. tostring(grad_log1pexp(0)))
print("custom gradient at 100: " .. tostring(grad_log1pexp(100)))
check(grad_log1pexp(0):item() == 0.5, "the custom gradient at 0 is 0.5")
check(grad_log1pexp(100):item() == 1, "the custom gradient at 100 is 1")

-- The same through a GradientTape, as the R guide writes it.
local x = dl.tensor(100.0)
local tape = dl.GradientTape()
tape:watch(x)
local value = tape:record(function() return log1pexp(x) end)
check(tape:gradient(value, x):item() == 1, "the tape gives the custom gradient too")

-- ---- clipping the gradient in the backward pass ----------------------------------------------
-- The identity forward; backward, the incoming gradient rescaled to norm at most `norm`
-- (TensorFlow's clip_by_norm).
local function clip_by_norm(t, norm)
  local n = t:norm():item()
  if n <= norm then return t end
  return t * (norm / n)
end

local function clip_gradient_by_norm(x, norm)
  return dl.custom_gradient(function(v)
    local function grad_fn(dresult) return clip_by_norm(dresult, norm) end
    return v * 1, grad_fn
  end)(x)
end

local w = dl.tensor({ 3.0, 4.0 })
local plain = dl.grad(function(v) return (v * v):sum() end)(w)              -- 2 w = (6, 8), norm 10
local clipped = dl.grad(function(v) return (clip_gradient_by_norm(v, 1) ^ 2):sum() end)(w)
print("gradient: " .. tostring(plain) .. ", clipped to norm 1: " .. tostring(clipped))
check(math.abs(clipped:norm():item() - 1) < 1e-6, "the clipped gradient has norm 1")
check(dl.allclose(clipped, plain / 10), "and the direction of the plain one")

-- ---- clipping a model's gradients by their global norm ------------------------------------------
dl.manual_seed(0)
local net = dl.nn.Sequential{ dl.nn.Linear(4, 16), dl.nn.Tanh(), dl.nn.Linear(16, 1) }
local opt = dl.optim.SGD{ lr = 0.1 }
local xs = dl.randn(64, 4)
local ys = (xs * dl.tensor({ 1, -2, 3, 0.5 })):sum(2, true) * 10   -- large targets: large gradients
local step = dl.implicit_value_and_grad(function() return dl.nn.mse_loss(net(xs), ys) end)
local first, last
for i = 1, 200 do
  local loss, grads = step()
  local clipped_grads, norm = dl.optim.clip_by_global_norm(grads, 5)
  opt:apply_gradients(clipped_grads)
  if i == 1 then
    first = loss:item()
    print(("step 1: loss %.2f, gradient norm %.2f (clipped to 5)"):format(first, norm))
  end
  last = loss:item()
end
print(("step 200: loss %.2f"):format(last))
check(last < first / 4, "training with clipped gradients makes progress")
