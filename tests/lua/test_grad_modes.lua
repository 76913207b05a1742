-- Recording modes and the rules that keep a gradient from being silently wrong: a
-- gradient taken inside dl.no_grad is taken (dl.enable_grad records again), a watched
-- argument is not written in place while recorded, and dl.vmap refuses to lose the
-- gradient of a weight its function closes over.
local dl = require("dlua")
local H = require("harness")

local f64 = { dtype = "float64" }

H.test("a gradient taken inside no_grad is taken, by every transform", function()
  local x = dl.tensor({ 1, 2 }, f64)
  local function sq(a) return (a * a):sum() end
  dl.no_grad(function()
    H.eq(dl.is_grad_enabled(), false)
    H.eq(dl.grad(sq)(x):totable(), { 2, 4 })
    local v, g = dl.value_and_grad(sq)(x)
    H.eq(v:item(), 5); H.eq(g:totable(), { 2, 4 })
    H.eq(dl.jacobian(function(a) return a * a end)(x):totable(), { { 2, 0 }, { 0, 4 } })
    local tape = dl.GradientTape()
    tape:watch(x)
    local y = tape:record(function() return sq(x) end)
    H.eq(tape:gradient(y, x):totable(), { 2, 4 })
    local w = dl.Variable(dl.tensor({ 3 }, f64))
    local grads = dl.implicit_grad(function() return (w * w):sum() end)()
    H.eq(#grads, 1); H.eq(grads[1][1]:totable(), { 6 })
    H.eq(dl.is_grad_enabled(), false)   -- (and no_grad holds again after each)
  end)
end)

H.test("enable_grad records again inside no_grad, nested either way", function()
  local x = dl.tensor({ 3 }, f64)
  local g = dl.grad(function(a)
    return dl.no_grad(function()
      H.eq(dl.is_grad_enabled(), false)
      return dl.enable_grad(function()
        H.eq(dl.is_grad_enabled(), true)
        return (a * a):sum()
      end)
    end)
  end)(x)
  H.eq(g:totable(), { 6 })
  -- inside no_grad alone, the result is a constant: its gradient is none
  local c = dl.grad(function(a) return (a * dl.no_grad(function() return a * a end)):sum() end)(x)
  H.eq(c:totable(), { 9 })
  H.raises(function() dl.enable_grad(5) end, "enable_grad: expected a function, got number")
  H.eq(select(2, pcall(dl.enable_grad, function() error("inner", 0) end)), "inner")
  H.eq(dl.is_grad_enabled(), false)
end)

-- torch: "a leaf Variable that requires grad is being used in an in-place operation"
H.test("a watched argument written in place while recorded is an error, not a wrong gradient", function()
  local x0 = dl.tensor({ 0.5, 1.5, -0.3 }, f64)
  H.raises(function() return dl.grad(function(x) x:mul_(2); return (x * x):sum() end)(x0) end,
           "mul_: a tensor that a gradient is taken with respect to cannot be modified in place")
  H.raises(function() return dl.grad(function(x) local y = x * x; x:add_(1); return y:sum() end)(x0) end,
           "add_: a tensor that a gradient is taken with respect to cannot be modified in place")
  H.raises(function() return dl.grad(function(x) x[1] = 5; return x:sum() end)(x0) end,
           "cannot be modified in place")
  local big = dl.ones(100, f64)   -- (a tensor held by a handle, not inline)
  H.raises(function() return dl.grad(function(x) x:mul_(2); return x:sum() end)(big) end, "cannot be modified in place")
  H.eq(big:sum():item(), 100); H.eq(x0:totable(), { 0.5, 1.5, -0.3 })
  -- a copy may be written, and the gradient is the copy's function's
  local g = dl.grad(function(x) local c = x:clone(); c:mul_(2); return (c * c):sum() end)(x0)
  H.eq(g:totable(), { 4, 12, -2.4 })
  -- a tape's watched tensor while that tape records (the gradient would be the new value's)
  local w2 = dl.tensor({ 1, 2 }, f64)
  local tw = dl.GradientTape()
  H.raises(function() tw:record(function() tw:watch(w2); w2:mul_(2); return (w2 * w2):sum() end) end,
           "mul_: a tensor that a gradient is taken with respect to cannot be modified in place")
  -- but not once the tape is done (a later gradient may write it, as the TF guide's
  -- training loops update what they watched)
  local y, x = dl.tensor({ 1, 2, 3 }, f64), dl.tensor({ 1, 1, 1 }, f64)
  for _ = 1, 2 do
    local t = dl.GradientTape()
    local l = t:record(function() t:watch(y); return (y * y):sum() end)
    y:sub_(t:gradient(l, y) * 0.1)
  end
  local gx = dl.grad(function(a) y:mul_(0.5); return (a * y):sum() end)(x)
  H.near(gx:totable(), { 0.32, 0.64, 0.96 }, 1e-12)
end)

H.test("vmap refuses to drop the gradient of a tensor its function closes over", function()
  local A = dl.randn(4, 3, f64)
  H.raises(function()
    return dl.grad(function(w) return dl.vmap(function(a) return (a * w):sum() end)(A):sum() end)(dl.ones(3, f64))
  end, "vmap: the mapped function reads a tensor that requires grad")
  local net = dl.nn.Linear(3, 2)
  H.raises(function() return dl.implicit_grad(function() return dl.vmap(function(r) return net(r) end)(A:float()):sum() end)() end,
           "vmap: the mapped function reads a tensor that requires grad")
  -- a frozen-or-not Variable is read as a constant under dl.grad, where no Variable's
  -- gradient is taken; only an implicit gradient (which collects them) refuses it
  local g = dl.grad(function(r) return dl.vmap(function(a) return net(a) end)(r:float()):sum() end)
  H.raises(function() return g(A) end, "vmap: argument 1 requires grad")
  local head = dl.nn.Linear(2, 1)
  local grads = dl.implicit_grad(function()
    return head(dl.no_grad(function() return dl.vmap(function(r) return net(r) end)(A:float()) end)):sum()
  end)()
  H.eq(#grads, 2)
  -- a frozen module (requires_grad_(false)) is left out of implicit gradients, so reading it
  -- in the mapped function loses nothing: the head's gradients come (it was refused)
  local frozen = dl.nn.Linear(3, 2)
  frozen:requires_grad_(false)
  local v = dl.Variable(dl.ones(2))
  local fg = dl.implicit_grad(function() return (dl.vmap(function(r) return frozen(r) end)(A:float()) * v):sum() end)()
  H.eq(#fg, 1)
  H.near(fg[1][1]:totable(), dl.no_grad(function() return frozen(A:float()):sum(1):totable() end), 1e-5)
  frozen:requires_grad_(true)   -- unfrozen, refused again
  H.raises(function() dl.implicit_grad(function() return (dl.vmap(function(r) return frozen(r) end)(A:float()) * v):sum() end)() end,
           "vmap: the mapped function reads a tensor that requires grad")
  -- outside a gradient, a closed-over weight is read as a constant
  local s = dl.vmap(function(a) return (a * dl.ones(3, f64)):sum() end)(A)
  H.eq(s:totable(), A:sum(2):totable())
  -- and the per-example gradient, the weights as arguments, works
  local per = dl.vmap(dl.grad(function(a, w) return (a * w):sum() end, 2), { in_dims = { 1, false } })(A, dl.ones(3, f64))
  H.eq(per:totable(), A:totable())
end)

H.run()
