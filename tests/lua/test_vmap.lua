-- dl.vmap (scripts/dlua/vmap.lua, export/vmap.cpp): every batching rule against the
-- same function run one example at a time and stacked, in float64; per-example
-- gradients; the dims options; the errors.
local dl = require("dlua")
local H = require("harness")
local V = require("dlua.vmap")
local nn, F = dl.nn, dl.nn.functional

local f64 = { dtype = "float64" }
dl.manual_seed(7)

local function pack(...) return { n = select("#", ...), ... } end

-- f's results on example b: each mapped argument sliced at index b of its dim.
local function one(f, args, in_dims, b)
  local a = {}
  for i = 1, args.n do
    local d = type(in_dims) == "table" and in_dims[i] or (type(in_dims) == "number" and in_dims) or nil
    a[i] = d and args[i]:select(d, b) or args[i]
  end
  return pack(f(unpack(a, 1, args.n)))
end

-- dl.vmap(f) against the loop, result by result; with rules = true, no op may have
-- fallen back to the per-example loop.
local function check(name, f, args, opts)
  opts = opts or {}
  local in_dims = opts.in_dims or 1
  args = pack(unpack(args))
  local got = pack(dl.vmap(f, { in_dims = in_dims, out_dims = opts.out_dims })(unpack(args, 1, args.n)))
  if opts.rules ~= false then
    H.eq(V.looped(), {}, name .. ": ops that ran once per example")
  end
  local batch
  for i = 1, args.n do
    local d = type(in_dims) == "table" and in_dims[i] or (type(in_dims) == "number" and in_dims) or nil
    if d and dl.is_tensor(args[i]) then batch = args[i].shape[d < 0 and #args[i].shape + 1 + d or d] end
  end
  local each = {}
  for b = 1, batch do each[b] = one(f, args, in_dims, b) end
  H.eq(got.n, each[1].n, name .. ": number of results")
  for k = 1, got.n do
    local od = opts.out_dims and (type(opts.out_dims) == "table" and opts.out_dims[k] or opts.out_dims) or 1
    local list = {}
    for b = 1, batch do list[b] = each[b][k] end
    local want = dl.stack(list, od)
    H.shape(got[k], want.shape)
    H.eq(got[k].dtype, want.dtype, name .. ": dtype")
    local diff = (got[k]:to("float64") - want:to("float64")):abs():max():item()
    H.ok(diff <= (opts.tol or 1e-12), name .. ": result " .. k .. " differs by " .. diff)
  end
  return got
end

local function randn(...)
  local shape = { ... }
  shape[#shape + 1] = f64
  return dl.randn(unpack(shape))
end

H.test("pointwise ops: shared operands of any rank broadcast against the examples", function()
  local x, w = dl.randn(5, 3, f64), dl.randn(4, 3, f64)
  check("exp * w", function(a, b) return dl.exp(a) * b + 1 end, { x, w }, { in_dims = { 1, false } })
  check("two mapped, ranks 1 and 2", function(a, b) return a - b end, { x, dl.randn(5, 2, 3, f64) })
  check("where and compare", function(a, b) return dl.where(a:gt(0), a, b * 2) end, { x, dl.randn(5, 3, f64) })
  check("clamp, pow, a scalar first", function(a) return 2 - dl.clamp(a, -0.5, 0.5) ^ 2 end, { x })
  check("a 0-dim shared operand", function(a, s) return a * s end, { x, dl.tensor(3, f64) }, { in_dims = { 1, false } })
end)

H.test("reductions move their dims; a reduction over everything is per example", function()
  local x = dl.randn(4, 3, 5, f64)
  check("sum", function(a) return a:sum() end, { x })
  check("sum dim 2 keepdim", function(a) return a:sum(2, true) end, { x })
  check("mean dim -1", function(a) return a:mean(-1) end, { x })
  check("var, std, norm", function(a) return a:var(1), a:std(), a:norm() end, { x })
  check("max with indices", function(a) return a:max(2) end, { x })
  check("argmax of all, and along a dim", function(a) return dl.argmax(a), dl.argmax(a, 1) end, { x })
  check("logsumexp", function(a) return dl.logsumexp(a, 2) end, { x })
end)

H.test("matmul: vectors, matrices and stacks, mapped or shared on either side", function()
  local B = 6
  check("vector @ shared matrix", function(v, m) return v:matmul(m) end, { randn(B, 4), randn(4, 3) }, { in_dims = { 1, false } })
  check("shared matrix @ vector", function(m, v) return m:matmul(v) end, { randn(3, 4), randn(B, 4) }, { in_dims = { false, 1 } })
  check("vector . vector", function(a, b) return a:matmul(b) end, { randn(B, 4), randn(B, 4) })
  check("matrix @ vector, both mapped", function(a, b) return a:matmul(b) end, { randn(B, 3, 4), randn(B, 4) })
  check("stack @ shared matrix", function(a, b) return a:matmul(b) end, { randn(B, 2, 3, 4), randn(4, 5) }, { in_dims = { 1, false } })
  check("shared stack @ matrix", function(a, b) return a:matmul(b) end, { randn(2, 3, 4), randn(B, 4, 5) }, { in_dims = { false, 1 } })
  check("matrix @ stack, both mapped", function(a, b) return a:matmul(b) end, { randn(B, 3, 4), randn(B, 2, 4, 5) })
  check("shared vector @ matrix", function(a, b) return a:matmul(b) end, { randn(4), randn(B, 4, 5) }, { in_dims = { false, 1 } })
end)

H.test("shape functions and selection", function()
  local x = randn(3, 4, 6)
  check("reshape, view, flatten", function(a) return a:reshape(2, 12), a:contiguous():view(24), a:flatten() end, { x })
  check("transpose, permute, t", function(a) return a:transpose(1, 2), a:permute(2, 1), a:t() end, { x })
  check("squeeze and unsqueeze", function(a) return a:unsqueeze(2):squeeze(2), a:unsqueeze(-1) end, { x })
  check("squeeze with a batch of 1", function(a) return a:squeeze() end, { randn(1, 1, 4) })
  check("expand", function(a) return a:unsqueeze(1):expand(5, 4, 6) end, { x })
  check("narrow, select, x[i]", function(a) return a:narrow(2, 2, 3), a:select(1, 2), a[3] end, { x })
  check("cat and stack with a shared tensor", function(a, s) return dl.cat({ a, s }, 1), dl.stack({ a, s }, 2) end,
        { x, randn(4, 6) }, { in_dims = { 1, false } })
  check("index_select and gather", function(a, g) return a:index_select(2, dl.tensor({ 3, 1 }, "int64")), a:gather(2, g) end,
        { x, dl.randint(1, 7, { 3, 4, 2 }, { dtype = "int64" }) })
  check("index_select of a shared table by mapped indices (an embedding per example)",
        function(ids, w) return w:index_select(1, ids), dl.nn.functional.embedding(ids, w) end,
        { dl.randint(1, 6, { 4, 3 }, { dtype = "int64" }), randn(5, 2) }, { in_dims = { 1, false } })
  check("per-example gradients of an embedding table",
        dl.grad(function(w, ids) return (dl.nn.functional.embedding(ids, w) ^ 2):sum() end),
        { randn(5, 2), dl.randint(1, 6, { 4, 3 }, { dtype = "int64" }) }, { in_dims = { false, 1 } })
  check("index_select along a later dim", function(ids, w) return w:index_select(-1, ids) end,
        { dl.randint(1, 6, { 4, 2 }, { dtype = "int64" }), randn(3, 5) }, { in_dims = { 1, false } })
  check("scatter_add through a gather's gradient", dl.grad(function(a) return (a:gather(1, dl.tensor({ 2, 2, 1 }, "int64")) ^ 2):sum() end),
        { randn(5, 4) })
end)

H.test("softmax, scans and sort along a dim", function()
  local x = randn(4, 3, 5)
  check("softmax, log_softmax", function(a) return dl.softmax(a, 2), dl.log_softmax(a, -1) end, { x })
  check("cumsum, cumprod", function(a) return a:cumsum(1), a:cumprod(2) end, { x })
  check("sort descending", function(a) return dl.sort(a, 2, true) end, { x })
end)

H.test("conv2d and the pools fold the batch into theirs; layer_norm and cross_entropy", function()
  local w, b = randn(4, 2, 3, 3), randn(4)
  check("conv2d on (N, C, H, W)", function(a) return F.conv2d(a, w, b, { padding = 1 }) end, { randn(3, 2, 2, 6, 6) })
  check("conv2d on (C, H, W)", function(a) return F.conv2d(a, w, nil, { stride = 2 }) end, { randn(3, 2, 7, 7) })
  check("pools", function(a) return F.max_pool2d(a, 2), F.avg_pool2d(a, 2) end, { randn(3, 2, 2, 6, 6) })
  check("layer_norm", function(a) return F.layer_norm(a, { 5 }, dl.ones(5, f64), dl.zeros(5, f64)) end, { randn(3, 4, 5) })
  local c0 = randn(2, 3)
  check("lstm_gates, c shared", function(a) return F.lstm_gates(a, c0) end, { randn(4, 2, 12) })
  check("lstm_gates, both mapped", function(a, c) return F.lstm_gates(a, c) end, { randn(4, 12), randn(4, 3) })
  -- Its gradient is the formula's ops when an observer sees them (dl.vmap's capture).
  check("grad of lstm_gates", dl.grad(function(a, c)
    local h, c2 = F.lstm_gates(a, c)
    return (h * h):sum() + c2:sum()
  end, { 1, 2 }), { randn(4, 2, 12), randn(4, 2, 3) })
  local y = dl.randint(1, 5, { 3, 6 }, { dtype = "int64" })
  check("cross_entropy, mean", function(l, t) return nn.cross_entropy(l, t) end, { randn(3, 6, 4), y })
  check("cross_entropy, sum and none", function(l, t)
    return nn.cross_entropy(l, t, { reduction = "sum" }), nn.cross_entropy(l, t, { reduction = "none" })
  end, { randn(3, 6, 4), y })
  check("cross_entropy of one row", function(l, t) return nn.cross_entropy(l:unsqueeze(1), t:unsqueeze(1)) end,
        { randn(3, 4), dl.tensor({ 1, 4, 2 }, "int64") })
  -- its gradient's one-hot rows (one_hot) batched with the labels
  check("grad of cross_entropy", dl.grad(function(l, t) return nn.cross_entropy(l, t) end), { randn(3, 6, 4), y })
end)

H.test("linear algebra over a batch of matrices", function()
  local function spd(n)
    local a = randn(n, 3, 3)
    return a:matmul(a:transpose(2, 3)) + dl.eye(3, f64) * 3
  end
  check("solve with a vector", function(a, v) return dl.linalg.solve(a, v) end, { spd(4), randn(4, 3) }, { tol = 1e-10 })
  check("cholesky, det, eigvalsh", function(a) return dl.linalg.cholesky(a), dl.linalg.det(a), dl.linalg.eigvalsh(a) end,
        { spd(4) }, { tol = 1e-10 })
end)

H.test("per-example gradients: dl.vmap(dl.grad(loss)) equals a gradient per example", function()
  local net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
  net:to("float64")
  local w1, b1, w2, b2 = net[1].weight, net[1].bias, net[3].weight, net[3].bias
  local function loss(a1, c1, a2, c2, x, y)
    local h = dl.tanh(F.linear(x, a1, c1))
    return nn.cross_entropy(F.linear(h, a2, c2):unsqueeze(1), y:unsqueeze(1))
  end
  local xs, ys = randn(10, 6), dl.randint(1, 4, { 10 }, { dtype = "int64" })
  local grads = check("MLP", dl.grad(loss, { 1, 2, 3, 4 }), { w1, b1, w2, b2, xs, ys },
                      { in_dims = { false, false, false, false, 1, 1 } })
  H.shape(grads[1], { 10, 8, 6 })
  -- Their mean is the batch's gradient.
  local gb = dl.grad(function(a1) return nn.cross_entropy(F.linear(dl.tanh(F.linear(xs, a1, b1)), w2, b2), ys) end)(w1)
  H.ok((grads[1]:mean(1) - gb):abs():max():item() < 1e-12, "the mean of the per-example gradients")
end)

H.test("per-example gradients through narrow, select, slices and transforms (embed's rule)", function()
  -- (their gradients put each example's into zeros: one op of the capture, batched by its
  -- rule; the engine's in-place region adds are for unobserved backward passes only)
  local w = randn(4)
  local function loss(x)
    local head = x:narrow(1, 2, 4)
    local first = x:select(1, 1)
    local odd = x[{ { 1, 9, 2 } }]
    return (head * w):sum() * first + odd:pow(2):sum()
  end
  local g = check("narrow, select, slice", dl.grad(loss), { randn(5, 10) })
  H.shape(g[1], { 5, 10 })
  check("second order through narrow", dl.grad(function(x) return dl.grad(loss)(x):pow(2):sum() end), { randn(3, 10) })
  check("transforms", dl.grad(function(x) return dl.fft.abs(dl.fft.rfft(x, 16)):sum() end), { randn(4, 12) })
  check("complex pairs", function(z) return dl.fft.ifft(dl.fft.fft(z, 12)) end, { randn(3, 10, 2) })
end)

H.test("in_dims and out_dims: any dim, negative dims, shared results broadcast", function()
  local x = randn(3, 7, 2)   -- examples along dim 2
  check("in_dims 2", function(a) return a * 2 end, { x }, { in_dims = 2 })
  check("in_dims -2, out_dims 2", function(a) return a:sum(1, true) end, { x }, { in_dims = -2, out_dims = 2 })
  check("out_dims per result", function(a) return a, a:sum() end, { x }, { in_dims = 2, out_dims = { -1, 1 } })
  local r = pack(dl.vmap(function(a, s) return a + 1, s * 2 end, { in_dims = { 1, false } })(randn(4, 2), randn(3)))
  H.shape(r[2], { 4, 3 })   -- a result that depends on no example is the same for each
  check("numbers pass through", function(a, k) return a * k end, { randn(4, 2), 3 }, { in_dims = { 1, false } })
end)

H.test("an op without a rule runs once per example, and says so", function()
  local seq = dl.tensor({ 1, 3, 5, 7 }, f64)
  check("searchsorted of mapped values", function(v) return dl.searchsorted(seq, v) end, { randn(5, 3) * 4 },
        { rules = false })
  H.eq(V.looped(), { "searchsorted" })
end)

H.test("errors: reading a value, sizes, grad history, options", function()
  local x = randn(4, 3)
  H.raises(function() dl.vmap(function(a) if a:sum():item() > 0 then return a end return -a end)(x) end,
           "vmap: item reads a tensor's value into Lua")
  H.raises(function() dl.vmap(function(a, b) return a + b end)(x, randn(5, 3)) end,
           "vmap: argument 2 has 5 examples along dim 1, an earlier one 4")
  H.raises(function() dl.vmap(function(a) return a end, { in_dims = false })(x) end, "no argument is mapped over")
  H.raises(function() dl.vmap(function(a) return a end, { in_dims = 3 })(x) end, "in_dims[1] is dim 3")
  H.raises(function() dl.vmap(function(a) return a end, { in_dim = 1 }) end, "unknown option 'in_dim'")
  H.raises(function() dl.vmap(function(a) return 1 end)(x) end, "result 1 is a number")
  H.raises(function() dl.vmap(function(a, k) return a * k end, { in_dims = { 1, 1 } })(x, 2) end,
           "in_dims[2] maps argument 2, a number")
  H.raises(function() dl.vmap(function(a) return a * dl.rand(3) end)(x) end, "vmap: rand made a tensor")
  H.raises(function() dl.vmap(function(a) return dl.vmap(function(b) return b * 2 end)(a:reshape(3, 1)) end)(x) end,
           "vmap: inside another dl.vmap's function")
  H.raises(function() dl.vmap(function(a) a:add_(1) return a end)(x) end, "vmap: an in-place write")
  H.raises(function()
    dl.grad(function(w) return dl.vmap(function(a, v) return a * v end, { in_dims = { 1, false } })(x, w):sum() end)(randn(3))
  end, "argument 2 requires grad")
  -- The runtime stays usable: the next call works.
  check("after the errors", function(a) return a * 2 end, { x })
end)

H.test("a list of in_dims has an entry for each tensor argument (functorch's structure check)", function()
  local x = randn(4, 3)
  -- functorch.vmap(f, in_dims=(0,))(x, y): "in_dims is not compatible with the structure of inputs"
  H.raises(function() dl.vmap(function(a, b) return a + b end, { in_dims = { 1 } })(x, randn(4, 3)) end,
           "vmap: in_dims has no entry for argument 2, a tensor: give its dim, or false to share it")
  H.raises(function() dl.vmap(function(a) return a end, { in_dims = { 1, 1 } })(x) end,
           "vmap: in_dims has 2 entries for 1 argument(s)")
  -- A trailing argument that is no tensor needs no entry.
  local r = dl.vmap(function(a, k) return a * k end, { in_dims = { 1 } })(x, 2)
  H.ok((r - x * 2):abs():max():item() == 0, "a number passed through")
end)

H.run()
