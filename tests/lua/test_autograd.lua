-- The autograd API of docs/autograd.md, from a script: dl.grad and friends, Variables, tapes,
-- custom gradients, and the examples of TensorFlow's eager execution guide.
local dl = require("dlua")
local H = require("harness")

local function square(x) return x * x end

H.test("d/dx x*x at 3 is 6, then 2, then 0", function()
  H.values(dl.grad(square)(3), 6)
  H.values(dl.grad(dl.grad(square))(3), 2)
  H.values(dl.grad(dl.grad(dl.grad(square)))(3), 0)
end)

H.test("a number argument is a float scalar", function()
  local g = dl.grad(square)(3)
  H.eq(g.dtype, "float32")
  H.eq(g:dim(), 0)
end)

H.test("native control flow: abs written with if", function()
  local function abs(x)
    if x > 0 then return x else return -x end
  end
  H.values(dl.grad(abs)(2), 1)
  H.values(dl.grad(abs)(-2), -1)
end)

H.test("while loops and recursion are differentiated as run", function()
  local function pow_loop(x, n)
    local y = dl.tensor(1.0)
    local i = 0
    while i < n do y = y * x; i = i + 1 end
    return y
  end
  H.values(dl.grad(pow_loop)(2, 5), 80)   -- 5 x^4
  local function fact_poly(x, n)  -- x^n by recursion
    if n == 0 then return dl.tensor(1.0) end
    return x * fact_poly(x, n - 1)
  end
  H.values(dl.grad(fact_poly)(3, 3), 27)  -- 3 x^2
end)

H.test("argnums: several gradients", function()
  local f = function(x, y) return x ^ 2 + y ^ 2 end
  local gx, gy = dl.grad(f, { 1, 2 })(2, 3)
  H.values(gx, 4)
  H.values(gy, 6)
  H.values(dl.grad(f, 2)(2, 3), 6)
end)

H.test("nested tables of tensors get gradient tables of the same shape", function()
  local params = { w = dl.tensor({ 1, 2 }), layers = { { b = dl.tensor(3.0) } } }
  local function loss(p, x)
    return ((p.w * x):sum() + p.layers[1].b * 2)
  end
  local g = dl.grad(loss)(params, dl.tensor({ 10, 20 }))
  H.values(g.w, { 10, 20 })
  H.values(g.layers[1].b, 2)
end)

H.test("gradient tables match their arguments key by key, whatever the key order", function()
  local p, want = {}, {}
  for i = 1, 40 do
    p["k" .. i] = dl.tensor(i)
    want["k" .. i] = 2 * i
  end
  p.vec = dl.tensor({ 1, 2, 3 })
  local g = dl.grad(function(t)
    local s = (t.vec * t.vec):sum()
    for i = 1, 40 do s = s + t["k" .. i] * t["k" .. i] end
    return s
  end)(p)
  for i = 1, 40 do H.values(g["k" .. i], want["k" .. i]) end
  H.values(g.vec, { 2, 4, 6 })
end)

H.test("value_and_grad passes auxiliary outputs through", function()
  local v, g, aux1, aux2 = dl.value_and_grad(function(x) return x * x, "aux", 7 end)(4)
  H.values(v, 16)
  H.values(g, 8)
  H.eq(aux1, "aux")
  H.eq(aux2, 7)
end)

H.test("gradients with respect to tensors of any shape, with broadcasting", function()
  local w = dl.tensor({ { 1, 2 }, { 3, 4 } })
  local b = dl.tensor({ 1, 1 })
  local gw, gb = dl.grad(function(w, b) return (w + b):sum() end, { 1, 2 })(w, b)
  H.values(gw, { { 1, 1 }, { 1, 1 } })
  H.values(gb, { 2, 2 })
end)

H.test("an unused argument gets zeros", function()
  H.values(dl.grad(function(x, y) return x * 2 end, 2)(1, dl.tensor({ 1, 2 })), { 0, 0 })
end)

H.test("log(1 + exp(x)): 0.5 at 0, nan at 100; stable with a custom gradient", function()
  local function softplus(x) return dl.log(1 + dl.exp(x)) end
  H.values(dl.grad(softplus)(0), 0.5)
  H.values(dl.grad(softplus)(100), 0 / 0)
  local log1pexp = dl.custom_gradient(function(x)
    local e = dl.exp(x)
    return dl.log(1 + e), function(dy) return dy * (1 - 1 / (1 + e)) end
  end)
  H.values(dl.grad(log1pexp)(0), 0.5)
  H.values(dl.grad(log1pexp)(100), 1)
end)

H.test("a custom gradient's backward is itself differentiable", function()
  local log1pexp = dl.custom_gradient(function(x)
    local e = dl.exp(x)
    return dl.log(1 + e), function(dy) return dy * (1 - 1 / (1 + e)) end
  end)
  H.values(dl.grad(dl.grad(log1pexp))(0), 0.25, { tol = 1e-6 })
end)

H.test("custom gradient for clipping", function()
  local clip = dl.custom_gradient(function(x)
    return x * 1, function(dy) return dl.clamp(dy, -0.5, 0.5) end
  end)
  H.values(dl.grad(function(x) return clip(x) * 10 end)(1), 0.5)
end)

H.test("perturbation confusion: nested gradients stay separate", function()
  -- d/dx [x * (d/dy (x + y))] = 1
  H.values(dl.grad(function(x) return x * dl.grad(function(y) return x + y end)(1) end)(1), 1)
  -- d/dx [(d/dy x*y)(y = x)] = 1, not 2
  H.values(dl.grad(function(x) return dl.grad(function(y) return x * y end)(x) end)(3), 1)
end)

H.test("Variables: identity, names, assign", function()
  local v = dl.Variable(dl.tensor({ 1, 2 }), "weights")
  H.eq(v.name, "weights")
  H.ok(v.is_variable)
  local t = {}
  t[v] = "found"
  H.eq(t[v], "found")
  v:assign(dl.tensor({ 5, 6 }))
  H.values(v, { 5, 6 })
  v:assign_add(1)
  H.values(v, { 6, 7 })
  v:assign_sub(dl.tensor({ 1, 1 }))
  H.values(v, { 5, 6 })
  local s = dl.Variable(3)
  H.eq(s.dtype, "float32")
  H.ok(s.name ~= nil)
end)

H.test("implicit_grad returns {grad, variable} pairs in first-use order", function()
  local a = dl.Variable(dl.tensor({ 1, 2 }), "a")
  local b = dl.Variable(2.0, "b")
  local unused = dl.Variable(1.0, "unused")
  local grads = dl.implicit_grad(function(x) return (b * x + a * a):sum() end)(dl.tensor({ 3, 4 }))
  H.eq(#grads, 2)
  H.ok(rawequal(grads[1][2], b))
  H.ok(rawequal(grads[2][2], a))
  H.values(grads[1][1], 7)
  H.values(grads[2][1], { 2, 4 })
  local value, pairs_ = dl.implicit_value_and_grad(function() return b * b end)()
  H.values(value, 4)
  H.values(pairs_[1][1], 4)
  H.ok(unused ~= nil)
end)

H.test("Variables are not recorded outside a gradient", function()
  local v = dl.Variable(2.0)
  local y = v * v
  H.eq(y:requires_grad(), false)
end)

H.test("modifying a Variable while taking its gradient is an error", function()
  local v = dl.Variable(2.0)
  H.raises(function()
    dl.implicit_grad(function() v:add_(1); return v * v end)()
  end, "Variable cannot be modified in place")
end)

H.test("GradientTape: watch, record, gradient, and the single-use error", function()
  local x = dl.tensor(3.0)
  local tape = dl.GradientTape()
  tape:watch(x)
  local y = tape:record(function() return x * x end)
  H.values(tape:gradient(y, x), 6)
  H.raises(function() tape:gradient(y, x) end, "can only be called once on a non-persistent tape")
end)

H.test("GradientTape: persistent tapes and structured sources", function()
  local x = dl.tensor(3.0)
  local tape = dl.GradientTape({ persistent = true })
  tape:watch(x)
  local y, z = tape:record(function() local y = x * x; return y, y * y end)
  H.values(tape:gradient(z, x), 108)   -- 4 x^3
  H.values(tape:gradient(y, x), 6)
  local g = tape:gradient(y, { first = x, list = { x } })
  H.values(g.first, 6)
  H.values(g.list[1], 6)
end)

H.test("GradientTape: variables are watched automatically; nested tapes", function()
  local v = dl.Variable(3.0)
  local outer = dl.GradientTape()
  local inner_grad
  local y = outer:record(function()
    local inner = dl.GradientTape()
    local z = inner:record(function() return v * v * v end)
    inner_grad = inner:gradient(z, v)    -- 3 v^2, recorded by the outer tape
    return inner_grad
  end)
  H.values(inner_grad, 27)
  H.values(outer:gradient(y, v), 18)     -- 6 v
  -- watch_accessed_variables = false (TensorFlow's): only what was watched has a gradient
  local x = dl.tensor(2.0)
  local tape = dl.GradientTape({ watch_accessed_variables = false })
  tape:watch(x)
  local r = tape:record(function() return x * x * v end)
  local g = tape:gradient(r, { x = x, v = v })
  H.values(g.x, 12)                      -- 2 x v
  H.eq(g.v, nil)
  local t2 = dl.GradientTape({ watch_accessed_variables = false })
  t2:watch(v)
  H.values(t2:gradient(t2:record(function() return v * v end), v), 6)
  H.raises(function() dl.GradientTape({ persistant = true }) end, "GradientTape: unknown option 'persistant'")
  H.raises(function() dl.gradcheck(function(t) return t:sum() end, { dl.ones(2) }, { tol = 1 }) end,
           "gradcheck: unknown option 'tol'")
end)

H.test("stop_gradient, detach and no_grad", function()
  H.values(dl.grad(function(x) return x * dl.stop_gradient(x) end)(3), 3)
  H.values(dl.grad(function(x) return x * x:detach() end)(3), 3)
  H.values(dl.grad(function(x) return x * dl.no_grad(function() return x * 2 end) end)(3), 6)
  local r1, r2 = dl.no_grad(function(a, b) return a + b, "second" end, 1, 2)
  H.eq(r1, 3)
  H.eq(r2, "second")
end)

H.test("gradients through views, indexing and assignment", function()
  local g = dl.grad(function(x) return x[2] * 3 + x:narrow(1, 1, 1):sum() end)(dl.tensor({ 1, 2, 3 }))
  H.values(g, { 1, 3, 0 })
  local g2 = dl.grad(function(x)
    local y = dl.zeros(3)
    y[2] = x * 5              -- assignment into a tensor that needs no gradient
    return (y * y):sum()
  end)(2)
  H.values(g2, 100)
  local g3 = dl.grad(function(x)
    local y = x * 1
    y[1] = 0                  -- overwritten elements get no gradient
    return y:sum()
  end)(dl.tensor({ 1, 2, 3 }))
  H.values(g3, { 0, 1, 1 })
end)

H.test("an in-place change of a value needed by backward is an error", function()
  H.raises(function()
    dl.grad(function(x)
      local y = x:exp()
      local s = y:sum()
      dl.no_grad(function() y:add_(1) end)
      return s
    end)(dl.tensor({ 1, 2 }))
  end, "exp: a tensor needed to compute its gradient was modified by an in-place operation")
end)

H.test("errors: integer arguments, non-tensor results, bad arguments", function()
  H.raises(function() dl.grad(square)(dl.tensor({ 1, 2 }, { dtype = "int64" })) end,
           "cannot differentiate with respect to a tensor of dtype int64")
  H.raises(function() dl.grad(function(x) return "nope" end)(1) end,
           "grad: the function must return a tensor, got string")
  H.raises(function() dl.grad(function(x) return x * dl.ones(2) end)(1) end,
           "grad: the function must return a single-element tensor")
  H.raises(function() dl.grad(square, 3)(1) end, "grad: argnum 3 out of range for 1 argument(s)")
  H.raises(function() dl.grad(42) end, "grad: expected a function, got number")
  local line = H.line() + 1
  local ok, err = pcall(function() dl.grad(function(x) return x:matmul(dl.ones(2, 2)) end)(1) end)
  H.ok(not ok)
  H.ok(err:find("matmul", 1, true) ~= nil, err)
  -- the runtime is usable afterwards
  H.values(dl.grad(square)(5), 10)
  H.ok(line > 0)
end)

H.test("gradcheck passes for smooth functions and catches a wrong custom gradient", function()
  H.ok(dl.gradcheck(function(a, b) return (a * b):sin():sum() + (a / b):sum() end,
                    { dl.tensor({ 0.5, 1.5 }), dl.tensor({ 1.2, 0.7 }) }))
  local wrong = dl.custom_gradient(function(x)
    return x * x, function(dy) return dy * x end  -- should be 2 x dy
  end)
  H.raises(function() dl.gradcheck(function(x) return wrong(x):sum() end, { dl.tensor({ 1, 2 }) }) end,
           "gradcheck: first derivative")
end)

H.test("relu's gradient is 0 where x <= 0 even when the incoming gradient is not finite", function()
  -- PyTorch's threshold_backward: (relu(x) * inf):sum() has gradient (0, inf) at (-1, 2),
  -- not (nan, inf) as a product with a 0/1 mask would give.
  local g = dl.grad(function(x) return (x:relu() * math.huge):sum() end)(dl.tensor({ -1, 0, 2 }))
  H.eq(g:totable(), { 0, 0, math.huge })
  local v = dl.tensor({ -1, 2 })
  local tape = dl.GradientTape()
  tape:watch(v)
  local y = tape:record(function() return v:relu() end)
  H.eq(tape:gradient(y, v, dl.tensor({ 0 / 0, 1 })):totable(), { 0, 1 })
end)


H.test("where, clamp and masked_fill pass no gradient where they select away, even an infinite one", function()
  -- PyTorch's where, clamp and masked_fill gradients select; a product with a 0/1 mask
  -- would give nan where the incoming gradient is infinite
  local w = dl.tensor({ math.huge, 2, math.huge })
  local x = dl.tensor({ -1, 0.5, 3 })
  local g = dl.grad(function(v) return (dl.where(v:gt(0), v, 0) * w):sum() end)(x)
  H.eq(g:totable(), { 0, 2, math.huge })
  g = dl.grad(function(v) return (v:clamp(0, 1) * w):sum() end)(x)
  H.eq(g:totable(), { 0, 2, 0 })
  g = dl.grad(function(v) return (v:masked_fill(v:lt(0), 5) * w):sum() end)(x)
  H.eq(g:totable(), { 0, 2, math.huge })
  -- and the gradient of a gradient through them
  local gg = dl.grad(function(v) return dl.grad(function(u) return (dl.where(u:gt(0), u * u, -u)):sum() end)(v):sum() end)(x)
  H.eq(gg:totable(), { 0, 2, 2 })
end)

-- Note [One tensor in, one gradient out] (scripts/dlua/autograd.lua): dl.grad(f) called
-- with one to three arguments, the first a tensor or a number, takes a path of its own;
-- with a table first, or four arguments, the general one. The two must agree: values,
-- extra arguments passed through (nil ones included), nesting, custom gradients (which
-- leave a task to drive from Lua), errors, and the gradient scope closed afterwards.
H.test("dl.grad's one-argument path and the general path agree", function()
  local function f(x, a, b, c)
    local y = x * x * (a or 1)
    if b then y = y + x * b end
    if c then y = y + c end
    return y:sum()
  end
  local x = dl.tensor({ 1, 2, 3 })
  local g = dl.grad(f)
  local want = function(a, b) return { 2 * (a or 1) * 1 + (b or 0), 2 * (a or 1) * 2 + (b or 0), 2 * (a or 1) * 3 + (b or 0) } end
  H.values(g(x), want())
  H.values(g(x, 2), want(2))
  H.values(g(x, nil, 5), want(nil, 5))
  H.values(g(x, 2, 5), want(2, 5))
  H.values(g(x, 2, 5, 7), want(2, 5))          -- four arguments: the general path
  H.values(dl.grad(function(t) return (t[1] * t[1]):sum() end)({ x })[1], { 2, 4, 6 })
  -- the count of arguments the function sees is the caller's
  local seen
  dl.grad(function(y, ...) seen = select("#", ...); return y end)(1, nil, nil)
  H.eq(seen, 2)
  -- nesting, and numbers
  H.values(dl.grad(dl.grad(function(t) return t ^ 3 end))(2), 12)
  H.values(dl.grad(function(t, k) return t * k end)(3, dl.tensor(4)), 4)
  -- a custom gradient in the graph, with a gradient taken inside its backward
  local scaled = dl.custom_gradient(function(t)
    return t * 3, function(up) return up * dl.grad(function(s) return s * s end)(dl.tensor(2.5)) end
  end)
  H.values(dl.grad(function(t) return scaled(t) end)(dl.tensor(2)), 5)   -- the custom backward's 5, not 3
  H.values(dl.grad(function(t, k) return scaled(t) * k end)(dl.tensor(2), 2), 10)
  -- errors, the same as the general path's, and the scope closed after each
  H.raises(function() g("a") end, "grad: cannot differentiate with respect to a string")
  H.raises(function() dl.grad(function() return "nope" end)(1) end,
           "grad: the function must return a tensor, got string")
  H.raises(function() dl.grad(function() error("inside f") end)(1) end, "inside f")
  H.raises(function() dl.grad(function(t) return t * dl.ones(2) end)(1) end,
           "grad: the function must return a single-element tensor")
  H.ok(not dl.is_grad_enabled(), "no gradient scope left open")
  H.values(g(x), want())
end)

local function f64(t) return dl.tensor(t, { dtype = "float64" }) end

-- Gradients of the same function through two paths agree within tol.
local function same_grads(a, b, tol)
  H.eq(#a, #b, "number of gradients")
  for i = 1, #a do
    H.ok(rawequal(a[i][2], b[i][2]), "the same Variable at " .. i)
    H.ok((a[i][1] - b[i][1]):abs():max():item() <= tol, "gradient " .. i .. " differs")
  end
end

H.test("checkpoint gives the gradients it gives without: modules, Variables, tables, several results", function()
  -- torch.utils.checkpoint gives the same gradients as the plain call.
  dl.manual_seed(0)
  local net = dl.nn.Sequential(dl.nn.Linear(3, 4), dl.nn.Tanh(), dl.nn.Linear(4, 2))
  local x = dl.randn(5, 3)
  local plain = dl.implicit_grad(function() return net(x):pow(2):sum() end)()
  same_grads(plain, dl.implicit_grad(function() return dl.checkpoint(net, x):pow(2):sum() end)(), 1e-6)
  same_grads(plain, dl.implicit_grad(function()
    return dl.checkpoint(function(u) return net(u) end, x):pow(2):sum()
  end)(), 1e-6)
  local tape = dl.GradientTape()
  local l = tape:record(function() return dl.checkpoint(net, x):pow(2):sum() end)
  local gs = tape:gradient(l, net:parameters())
  for i, p in ipairs(plain) do H.ok((gs[i] - p[1]):abs():max():item() <= 1e-6, "tape gradient " .. i) end
  -- A Variable in a closure, tensors in a table argument, a number and a label.
  local w = dl.Variable(f64({ { 1, 2 }, { 3, 4 } }), "w")
  local u = f64({ { 0.5, -1 } })
  local function f(v) return dl.tanh(v:matmul(w)) end
  same_grads(dl.implicit_grad(function() return f(u):sum() end)(),
             dl.implicit_grad(function() return dl.checkpoint(f, u):sum() end)(), 1e-12)
  local p = { w = f64({ { 1, 2 }, { 3, 4 } }) }
  local function g(q) return dl.tanh(u:matmul(q.w)):sum() * 3 end
  local want = dl.grad(g)(p)
  local got = dl.grad(function(q)
    return dl.checkpoint(function(v, qq, k, tag)
      assert(tag == "tag")
      return dl.tanh(v:matmul(qq.w)):sum() * k
    end, u, q, 3, "tag")
  end)(p)
  H.ok((got.w - want.w):abs():max():item() < 1e-12, "a tensor in a table argument")
  -- Several results: torch.utils.checkpoint(lambda a: (a*2, a*3), a), then (p+q).sum() -> [5., 5.].
  local ga = dl.grad(function(a)
    local r1, r2 = dl.checkpoint(function(b) return b * 2, b * 3 end, a)
    return (r1 + r2):sum()
  end)(f64({ 1, 2 }))
  H.values(ga, { 5, 5 })
  -- Second order through the rerun, with a Variable.
  local v = dl.Variable(f64({ 0.5, -2 }))
  local h = function(a) return (a:sin() * v * a):sum() end
  local H1 = dl.hessian(function(a) return dl.checkpoint(h, a) end)(f64({ 1, 2 }))
  H.ok((H1 - dl.hessian(h)(f64({ 1, 2 }))):abs():max():item() < 1e-12, "the Hessian through checkpoint")
end)

H.test("checkpoint: a tensor that needs a gradient read from a closure is an error, not a zero", function()
  local W = f64({ { 1, 2 }, { 3, 4 } })
  local x = f64({ { 0.5, -1 } })
  H.raises(function()
    dl.grad(function(M) return dl.checkpoint(function(u) return u:matmul(M) end, x):sum() end)(W)
  end, "checkpoint: the function reads 'M', a tensor that needs a gradient, from its closure")
  H.raises(function()
    dl.grad(function(M)
      local function inner(u) return u:matmul(M) end
      return dl.checkpoint(function(u) return inner(u) end, x):sum()
    end)(W)
  end, "checkpoint: the function reads a tensor that needs a gradient and is neither an argument nor a Variable")
  -- As an argument it is differentiated.
  local g = dl.grad(function(M) return dl.checkpoint(function(u, m) return u:matmul(m) end, x, M):sum() end)(W)
  H.values(g, { { 0.5, 0.5 }, { -1, -1 } })
end)

H.test("hessian with argnums {1, 2} is the block Hessian; jacobian of several results", function()
  local x, y = f64({ 1, 2 }), f64({ 3, 4 })
  local h = function(a, b) return (a:sin() * b:pow(2)):sum() + (a * a):sum() * b[1] end
  -- torch.autograd.functional.hessian(h, (x, y)) -> ((Hxx, Hxy), (Hyx, Hyy))
  local rx, ry = dl.hessian(h, { 1, 2 })(x, y)
  H.values(rx[1], { { -1.5732388632710688, 0 }, { 0, -8.548758829210907 } }, { tol = 1e-12 })
  H.values(rx[2], { { 5.241813835208839, 0 }, { 4, -3.3291746923771393 } }, { tol = 1e-12 })
  H.values(ry[1], { { 5.241813835208839, 4 }, { 0, -3.3291746923771393 } }, { tol = 1e-12 })
  H.values(ry[2], { { 1.682941969615793, 0 }, { 0, 1.8185948536513634 } }, { tol = 1e-12 })
  H.values(dl.hessian(h, 2)(x, y), { { 1.682941969615793, 0 }, { 0, 1.8185948536513634 } }, { tol = 1e-12 })
  -- torch.autograd.functional.jacobian(lambda a, b: (a*b, (a+b).sum()), (x, y))
  local jp, jq = dl.jacobian(function(a, b) return a * b, (a + b):sum() end, { 1, 2 })(x, y)
  H.values(jp[1], { { 3, 0 }, { 0, 4 } })
  H.values(jp[2], { { 1, 0 }, { 0, 2 } })
  H.values(jq[1], { 1, 1 })
  H.values(jq[2], { 1, 1 })
  local jl = dl.jacobian(function(a) return { a * 2, a:sum() } end)(x)
  H.values(jl[1], { { 2, 0 }, { 0, 2 } })
  H.values(jl[2], { 1, 1 })
  H.raises(function() dl.jacobian(function(a) return a end, 1, { vectorize = true }) end,
           "jacobian: unknown option 'vectorize'")
  H.raises(function() dl.hessian(function(a) return a:sum() end, 1, { strict = true }) end,
           "hessian: unknown option 'strict'")
end)

H.test("custom_gradient: gradients as separate results or numbers; shapes checked", function()
  local mul = dl.custom_gradient(function(a, b) return a * b, function(dy) return dy * b, dy * a end end)
  local ga, gb = dl.grad(function(a, b) return mul(a, b):sum() end, { 1, 2 })(f64({ 1, 2 }), f64({ 3, 4 }))
  H.values(ga, { 3, 4 })
  H.values(gb, { 1, 2 })
  local five = dl.custom_gradient(function(a) return a * 2, function() return 5 end end)
  H.values(dl.grad(function(a) return five(a):sum() end)(f64({ 1, 2, 3 })), { 5, 5, 5 })
  local bad = dl.custom_gradient(function(a) return a * 2, function() return dl.ones(2) end end)
  H.raises(function() dl.grad(function(a) return bad(a):sum() end)(dl.ones(3)) end,
           "custom_gradient: gradient 1 has shape (2,), expected its input's shape (3,)")
  local many = dl.custom_gradient(function(a) return a * 2, function(dy) return dy, dy end end)
  H.raises(function() dl.grad(function(a) return many(a):sum() end)(dl.ones(3)) end,
           "custom_gradient: the gradient function returned 2 gradients for 1 input(s)")
  -- The R guide's clip_gradient_by_norm: a list with nil for the norm.
  local clip = dl.custom_gradient(function(x, norm)
    return x * 1, function(dy) return { dy:clamp(-norm:item(), norm:item()), nil } end
  end)
  H.values(dl.grad(function(a) return (clip(a, 0.5) * 10):sum() end)(f64({ 1, 2 })), { 0.5, 0.5 })
end)

H.test("custom_gradient: a Variable, a captured tensor or a tensor in a table argument is an error", function()
  local x = f64({ 1, 2 })
  local v = dl.Variable(f64({ 2, 3 }), "v")
  local usev = dl.custom_gradient(function(a) return a * v, function(dy) return dy * v end end)
  H.raises(function() dl.implicit_grad(function() return usev(dl.Variable(x)):sum() end)() end,
           "custom_gradient: the function uses the Variable 'v', which is not an argument")
  -- under dl.grad, where no Variable's gradient is taken, the Variable is a constant (a
  -- custom gradient's own probe of the Variables it used is no implicit gradient)
  H.eq(dl.grad(function(a) return usev(a):sum() end)(x):totable(), { 2, 3 })
  local outer = dl.custom_gradient(function(a) return usev(a), function(dy) return dy end end)
  H.eq(dl.grad(function(a) return outer(a):sum() end)(x):totable(), { 1, 1 })
  H.raises(function()
    dl.grad(function(a, W)
      local c = dl.custom_gradient(function(u) return u * W, function(dy) return dy * W end end)
      return c(a):sum()
    end, { 1, 2 })(x, f64({ 5, 7 }))
  end, "custom_gradient: the function reads 'W', a tensor that needs a gradient, from its closure")
  local tin = dl.custom_gradient(function(t) return t.a * t.b, function(dy) return { dy * 100 } end end)
  H.raises(function() dl.grad(function(t) return tin(t):sum() end)({ a = x, b = f64({ 3, 4 }) }) end,
           "custom_gradient: argument 1 is a table holding a tensor that needs a gradient")
  -- As an argument, a Variable gets the custom gradient; a constant may be captured.
  local usew = dl.custom_gradient(function(a, w) return a * w, function(dy) return dy * w, dy * a * 10 end end)
  local g = dl.implicit_grad(function() return usew(x, v):sum() end)()
  H.eq(#g, 1)
  H.values(g[1][1], { 10, 20 })
  local K = f64({ 5, 7 })
  local ck = dl.custom_gradient(function(u) return u * K, function(dy) return dy * K end end)
  H.values(dl.grad(function(a) return ck(a):sum() end)(x), { 5, 7 })
end)

H.test("GradientTape: unconnected_gradients = 'none' gives nil, 'zero' (the default) zeros", function()
  -- tf.GradientTape.gradient(y, [x, z], unconnected_gradients=tf.UnconnectedGradients.NONE) -> [2x, None]
  local x, z = f64({ 1, 2 }), f64({ 3, 5 })
  local tape = dl.GradientTape({ persistent = true })
  tape:watch(x); tape:watch(z)
  local y, d = tape:record(function() return (x * x):sum(), dl.relu(-x):sum() end)
  local g = tape:gradient(y, { x, z }, nil, { unconnected_gradients = "none" })
  H.values(g[1], { 2, 4 })
  H.ok(g[2] == nil, "an unconnected source gets nil")
  H.values(tape:gradient(y, z), { 0, 0 })
  H.values(tape:gradient(y, z, nil, { unconnected_gradients = "zero" }), { 0, 0 })
  -- Reached with a zero gradient (a dead relu) is not unconnected.
  H.values(tape:gradient(d, x, nil, { unconnected_gradients = "none" }), { 0, 0 })
  H.raises(function() tape:gradient(y, x, nil, { unconnected_gradients = "nil" }) end,
           "GradientTape.gradient: unconnected_gradients must be \"zero\" or \"none\"")
  H.raises(function() tape:gradient(y, x, nil, { unconected = "none" }) end,
           "GradientTape.gradient: unknown option 'unconected'")
end)

H.test("targets of more than one element: tapes and implicit gradients sum them, dl.grad refuses", function()
  -- tf.GradientTape().gradient(x * x, x) -> 2x (the sum's gradient)
  local x = f64({ 1, 2 })
  local tape = dl.GradientTape()
  tape:watch(x)
  local y = tape:record(function() return x * x end)
  H.values(tape:gradient(y, x), { 2, 4 })
  -- The announcement's MNIST loop: implicit_gradients of a per-example
  -- softmax_cross_entropy_with_logits. torch: autograd.grad(loss.sum(), W) with
  -- loss = -(Y * log_softmax(X @ W, -1)).sum(-1).
  local W = dl.Variable(f64({ { 0.1, -0.2 }, { 0.3, 0.4 }, { -0.5, 0.6 } }), "W")
  local X = f64({ { 1, 2, 3 }, { -1, 0.5, 2 } })
  local Y = f64({ { 1, 0 }, { 0, 1 } })
  local function loss_function(x, y)
    return dl.nn.functional.softmax_cross_entropy_with_logits(y, x:matmul(W), { reduction = "none" })
  end
  local grads = dl.implicit_grad(loss_function)(X, Y)
  H.eq(#grads, 1)
  H.values(grads[1][1], { { -1.0332607625647534, 1.0332607625647534 }, { -1.8854553117257125, 1.8854553117257125 },
                         { -2.7376498608866715, 2.7376498608866715 } }, { tol = 1e-12 })
  dl.optim.SGD({ lr = 0.001 }):apply_gradients(grads)
  H.raises(function() dl.grad(function(a) return a * 2 end)(x) end,
           "grad: the function must return a single-element tensor, got shape (2,): dl.grad differentiates a scalar function")
  H.raises(function() dl.grad(function(a, b) return a * b end, { 1, 2 })(x, x) end,
           "grad: the function must return a single-element tensor")
end)

H.test("dl.grad refuses a second result unless has_aux; options and argnums are checked", function()
  local x = f64({ 1, 2 })
  -- functorch.grad: "Expected f(*args) to return a Tensor, got tuple"; has_aux=True returns (grad, aux).
  H.raises(function() dl.grad(function(a) return (a * 2):sum(), "aux" end)(x) end,
           "grad: the function returned 2 results; it must return one tensor")
  H.raises(function() dl.grad(function(a, b) return (a * b):sum(), "aux" end, 2)(x, x) end,
           "grad: the function returned 2 results")
  local g, aux = dl.grad(function(a) return (a * 2):sum(), "aux" end, 1, { has_aux = true })(x)
  H.values(g, { 2, 2 })
  H.eq(aux, "aux")
  local v, g2, aux2 = dl.value_and_grad(function(a) return (a * a):sum(), 7 end, 1, { has_aux = true })(x)
  H.values(v, 5)
  H.values(g2, { 2, 4 })
  H.eq(aux2, 7)
  H.raises(function() dl.grad(function(a) return a:sum() end, 1, { vectorize = true }) end,
           "grad: unknown option 'vectorize'")
  H.raises(function() dl.grad(function(a, b) return (a * b):sum() end, 1.5) end,
           "grad: argnums must be argument positions (whole numbers from 1), got 1.5")
  H.raises(function() dl.grad(function(a, b) return (a * b):sum() end, { 1, 0 }) end,
           "grad: argnums must be argument positions (whole numbers from 1), got 0")
  H.raises(function() dl.jacobian(function(a) return a end, 2.5) end, "jacobian: argnums must be argument positions")
end)

H.run()
