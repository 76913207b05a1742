-- float16 and bfloat16 tensors (Note [Half-precision storage] in tensor/half.h): names,
-- creation, conversion values (PyTorch's), printing, promotion, ops computed in float32
-- and stored back, gradients, training, and files.
local dl = require("dlua")
local H = require("harness")

H.test("names, creation and conversion values", function()
  H.eq(dl.float16, "float16"); H.eq(dl.bfloat16, "bfloat16")
  H.eq(dl.zeros(2, { dtype = "half" }).dtype, "float16")
  H.eq(dl.ones(2):half().dtype, "float16")
  H.eq(dl.ones(2):bfloat16().dtype, "bfloat16")
  H.eq(dl.ones(2):to("bfloat16").dtype, "bfloat16")
  H.eq(dl.randn(3, { dtype = "float16" }).dtype, "float16")
  H.eq(dl.arange(0, 5, 1, { dtype = "bfloat16" }):totable(), { 0, 1, 2, 3, 4 })
  H.ok(dl.ones(1):half():is_floating_point(), "is_floating_point")
  -- the values PyTorch gives: nearest, ties to even; overflow to inf; subnormals kept
  local h = dl.tensor({ 0.1, 65504, 65520, 1e-7, -2.5, 1 / 3 }, { dtype = "float16" }):totable()
  H.eq(h, { 0.0999755859375, 65504, math.huge, 1.1920928955078125e-07, -2.5, 0.333251953125 })
  local b = dl.tensor({ 0.1, 3e38, 1 / 3 }):bfloat16():totable()
  H.eq(b, { 0.10009765625, 3.00405527047391e+38, 0.333984375 })
  local x = dl.tensor({ 1.5, 2 }, { dtype = "float16" })
  H.eq(x[2], 2)
  x[1] = 0.1
  H.eq(x:totable(), { 0.0999755859375, 2 })
  H.eq(x:sum():item(), 2.099609375)
  H.ok(tostring(x):find("dtype=float16", 1, true), tostring(x))
  H.eq(x:float().dtype, "float32")
  H.raises(function() dl.set_default_dtype("bfloat16") end, "set_default_dtype: expected float32 or float64, got bfloat16")
end)

H.test("ops compute in float32 and store the half dtype", function()
  dl.manual_seed(3)
  local a32, b32 = dl.randn(8, 5), dl.randn(5, 3)
  for _, dt in ipairs({ "float16", "bfloat16" }) do
    local a, b = a32:to(dt), b32:to(dt)
    local af, bf = a:float(), b:float()
    local function same(got, want32, what)
      H.eq(got.dtype, dt, what)
      H.ok(dl.equal(got:float(), want32:to(dt):float()), what)
    end
    same(a:matmul(b), af:matmul(bf), "matmul")
    same(dl.tanh(a), dl.tanh(af), "unary")
    same(a * 3, af * 3, "scalar")
    same(a - a:flip(1), af - af:flip(1), "binary")
    same((a * 3) + 1, (a * 3):float() + 1, "each op rounds its own result")
    same(a:sum(2), af:sum(2), "sum")
    same(dl.softmax(a, 2), dl.softmax(af, 2), "softmax")
    same(a:sort(2), af:sort(2), "sort")
    same(dl.cat({ a, a }, 1), dl.cat({ af, af }, 1), "cat")
    same(a:t():contiguous(), af:t(), "transpose copy")
    H.eq((a + dl.ones(5)).dtype, "float32", "with a float32 tensor: float32")
    H.eq((a + b32:sum()).dtype, dt, "with a 0-dim float32 tensor: its own dtype (PyTorch's rule)")
    H.eq((a + 1).dtype, dt, "with a number: its own dtype")
    H.eq(a:gt(0).dtype, "bool")
    H.eq(a:argmax(2).dtype, "int64")
  end
  H.eq((dl.ones(2):half() + dl.ones(2):bfloat16()).dtype, "float32")
  H.eq((dl.ones(2, { dtype = "int64" }) * dl.ones(2):half()).dtype, "float16")
end)

H.test("gradients and a model trained in bfloat16 and float16", function()
  local g = dl.grad(function(w) return (w * w):sum() end)(dl.tensor({ 1, 2, 3 }):half())
  H.eq(g.dtype, "float16")
  H.eq(g:totable(), { 2, 4, 6 })
  for _, dt in ipairs({ "bfloat16", "float16" }) do
    dl.manual_seed(1)
    local net = dl.nn.Sequential(dl.nn.Linear(4, 16), dl.nn.Tanh(), dl.nn.Linear(16, 2))
    net:to(dt)
    local opt = dl.optim.Adam{ lr = 0.02 }
    local x = dl.randn(64, 4):to(dt)
    local y = x:float():sum(2):gt(0):long() + 1
    local step = dl.implicit_value_and_grad(function() return dl.nn.cross_entropy(net(x), y) end)
    local first, last
    for i = 1, 60 do
      local loss, grads = step()
      if i == 1 then first = loss:item() end
      last = loss:item()
      opt:apply_gradients(grads)
    end
    H.eq(net[1].weight.dtype, dt)
    H.ok(last < first / 5, dt .. ": loss " .. first .. " -> " .. last)
  end
end)

H.test("dl.compile gives eager's half results", function()
  local f = dl.compile(function(x) return dl.tanh(x * 2 + 1):sum() end)
  local g = dl.compile(dl.grad(function(x) return (x * x):sum() end))
  for _, dt in ipairs({ "float16", "bfloat16" }) do
    local x = dl.randn(100):to(dt)
    local want, gwant = dl.tanh(x * 2 + 1):sum(), dl.grad(function(v) return (v * v):sum() end)(x)
    for _ = 1, 3 do
      local r, gr = f(x), g(x)
      H.eq(r.dtype, dt); H.ok(dl.equal(r, want), "value")
      H.eq(gr.dtype, dt); H.ok(dl.equal(gr, gwant), "gradient")
    end
  end
end)

H.test("files keep the half dtypes, bit for bit", function()
  local path = (os.getenv("TMPDIR") or "/tmp") .. "/dlua_half_" .. os.time() .. ".safetensors"
  local h = dl.randn(4, 3):half()
  local b = dl.randn(5):bfloat16()
  dl.save(path, { h = h, b = b })
  local back = dl.load(path)
  H.eq(back.h.dtype, "float16"); H.eq(back.b.dtype, "bfloat16")
  H.ok(dl.equal(back.h, h) and dl.equal(back.b, b), "values")
  os.remove(path)
end)

H.test("dl.autocast: results, options, and the mode restored after an error", function()
  local a, b = dl.randn(3, 4), dl.randn(4, 2)
  -- on the CPU products stay float32 (it computes in float32 anyway)
  local y, n = dl.autocast(function() return a:matmul(b), 5 end)
  H.eq(y.dtype, "float32"); H.eq(n, 5)
  H.eq(select("#", dl.autocast(function() return 1, nil, 3 end)), 3)
  H.raises(function() dl.autocast(function() error("boom") end) end, "boom")
  H.raises(function() dl.autocast(function() end, { dtype = "int64" }) end,
           "autocast: expected dtype float16 or bfloat16, got int64")
  H.raises(function() dl.autocast(function() end, { dtype = "float8" }) end, "autocast: unknown dtype 'float8'")
  H.raises(function() dl.autocast(function() end, { dtyp = "float16" }) end, "autocast: unknown option 'dtyp'")
  H.raises(function() dl.autocast(5) end, "autocast: expected a function, got number")
  if dl.cuda.is_available() then
    local ca, cb = a:cuda(), b:cuda()
    local z = dl.autocast(function() return ca:matmul(cb) end)
    H.eq(z.dtype, "float16")
    H.ok(dl.allclose(z:float():cpu(), a:half():float():matmul(b:half():float()), 1e-2, 1e-2), "half GEMM")
    H.eq(ca:matmul(cb).dtype, "float32", "off again after the call")
  end
end)

H.run()
