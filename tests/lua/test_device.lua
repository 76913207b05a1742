-- Devices (docs/gpu.md): dl.device(name [, f]), dl.cuda, moving tensors. Runs on
-- every machine: without a GPU it checks that CUDA is cleanly unavailable; with one, that
-- tensors move, ops run there and agree with the CPU, and errors name the devices.
local H = require("harness")
local dl = require("dlua")

local has_cuda = dl.cuda.is_available()

H.test("dl.cuda answers without a GPU too", function()
  H.eq(type(has_cuda), "boolean")
  H.eq(type(dl.cuda.device_count()), "number")
  H.ok(#dl.cuda.status() > 0, "status says something")
  H.eq(dl.cuda.device_count() > 0, has_cuda)
  dl.cuda.synchronize()      -- nothing to wait for, and no error either way
  dl.cuda.empty_cache()
end)

H.test("dl.device names and default devices", function()
  H.eq(dl.device("cuda"), "cuda:0")
  H.eq(dl.device("gpu"), "cuda:0")
  H.eq(dl.device("cpu"), "cpu")
  H.eq(dl.get_default_device(), "cpu")
  local a, b = dl.device("cpu", function() return dl.zeros(2).device, 7 end)
  H.eq(a, "cpu")
  H.eq(b, 7)
  H.raises(function() return dl.device("tpu", function() end) end, "device: unknown device 'tpu'")
  H.raises(function() return dl.device("cpu", 5) end, "device: expected a function, got number")
  -- An error inside f comes out unchanged, and the default is restored.
  H.raises(function() dl.device("cpu", function() error("inside", 0) end) end, "inside")
  H.eq(dl.get_default_device(), "cpu")
end)

if not has_cuda then
  H.test("without CUDA: clear errors, the CPU unchanged", function()
    H.raises(function() return dl.device("cuda", function() return 1 end) end, "device: cuda is not available")
    H.eq(dl.get_default_device(), "cpu")
    H.raises(function() return dl.ones(2):cuda() end, "to: cuda is not available")
    H.raises(function() return dl.randn(2, { device = "cuda:0" }) end, "randn: cuda is not available")
    H.raises(function() return dl.cuda.memory_stats() end, "cuda.memory_stats: cuda is not available")
    H.raises(function() return dl.cuda.get_device_name() end, "cuda is not available")
    H.values(dl.ones(2) + 1, { 2, 2 })
  end)
  H.run()
  return
end

local function same(cpu, gpu, tol)
  H.eq(gpu.device, "cuda:0")
  H.eq(gpu.dtype, cpu.dtype)
  H.ok(dl.allclose(gpu:cpu(), cpu, tol or 1e-5, tol or 1e-6), "cuda result differs from the cpu's")
end

H.test("tensors move and come back unchanged, every dtype", function()
  for _, dt in ipairs({ "bool", "uint8", "int32", "int64", "float32", "float64" }) do
    local x = dl.tensor({ { 0, 1, 2 }, { 3, 4, 5 } }, { dtype = dt })
    local g = x:cuda()
    H.eq(g.device, "cuda:0")
    H.ok(dl.equal(g:cpu(), x), dt .. " round trip")
    H.ok(dl.equal(x:to("cuda:0"):to("cpu"), x), dt .. " round trip through :to")
    H.ok(dl.equal(x:t():cuda():cpu(), x:t()), dt .. " strided round trip")
  end
  local big = dl.randn(1000, 700)          -- past the pinned staging threshold
  H.ok(dl.equal(big:cuda():cpu(), big))
  H.eq(tostring(dl.tensor({ 1, 2 }):cuda()):find("device=cuda:0", 1, true) ~= nil, true)
  H.eq(dl.tensor({ 5, 6 }):cuda()[2], 6)
end)

H.test("creation inside dl.device('cuda', f) happens on the GPU", function()
  local x = dl.ones(3)
  dl.device("cuda", function()
    for _, t in ipairs({ dl.zeros(2), dl.ones(2, 2), dl.full({ 2 }, 3), dl.empty(2), dl.rand(2), dl.randn(2),
                         dl.randint(0, 5, 3), dl.arange(4), dl.linspace(0, 1, 3), dl.eye(2), dl.tensor({ 1, 2 }) }) do
      H.eq(t.device, "cuda:0")
    end
    H.eq(dl.zeros_like(x).device, "cpu")     -- like-functions follow their tensor
    H.eq(dl.get_default_device(), "cuda:0")
  end)
  H.eq(dl.get_default_device(), "cpu")
end)

H.test("ops on the GPU agree with the CPU", function()
  local a, b = dl.randn(5, 4), dl.randn(4, 3)
  local ga, gb = a:cuda(), b:cuda()
  same(a:matmul(b), ga:matmul(gb), 1e-4)
  same((a * 2 - 1):exp():sum(1), (ga * 2 - 1):exp():sum(1), 1e-4)
  same(a:softmax(2), ga:softmax(2))
  same((a:max(2)), (ga:max(2)))
  same(select(2, a:max(2)), select(2, ga:max(2)))
  same(a:argmax(), ga:argmax())
  same(dl.where(a:gt(0), a, 0), dl.where(ga:gt(0), ga, 0))
  same(a:index_select(1, dl.tensor({ 2, 1 }, { dtype = "int64" })),
       ga:index_select(1, dl.tensor({ 2, 1 }, { dtype = "int64" }):cuda()))
  dl.manual_seed(3)
  local r = dl.rand(10)
  dl.manual_seed(3)
  H.ok(dl.equal(dl.rand(10, { device = "cuda" }):cpu(), r), "the same random stream")
end)

H.test("errors name the devices and the bad values", function()
  H.raises(function() return dl.ones(2) + dl.ones(2):cuda() end, "add: expected tensors on the same device, got cpu and cuda:0")
  H.raises(function() return dl.ones(2):cuda():gather(1, dl.tensor({ 3 }, { dtype = "int64" }):cuda()) end,
           "gather: index")
  local n = dl.cuda.device_count()
  H.raises(function() return dl.ones(1, { device = "cuda:" .. n }) end, "cuda:" .. n .. " is not available")
  H.values(dl.ones(2):cuda():cpu() + 1, { 2, 2 })   -- still usable
end)

H.test("gradients flow across devices, and a model trains on the GPU", function()
  local x = dl.tensor({ 1, 2, 3 })
  local g = dl.grad(function(v) return (v:cuda() * v:cuda()):sum() end)(x)
  H.eq(g.device, "cpu")
  H.values(g, { 2, 4, 6 })
  dl.manual_seed(0)
  local net = dl.nn.Sequential{ dl.nn.Linear(4, 8), dl.nn.ReLU(), dl.nn.Linear(8, 1) }
  net:to("cuda")
  local opt = dl.optim.SGD{ lr = 0.05 }
  local xs = dl.randn(32, 4, { device = "cuda" })
  local ys = xs:sum(2, true)
  local step = dl.implicit_value_and_grad(function() return dl.nn.mse_loss(net(xs), ys) end)
  local first, last
  for i = 1, 60 do
    local loss, grads = step()
    opt:apply_gradients(grads)
    if i == 1 then first = loss:item() end
    last = loss:item()
  end
  H.ok(last < first, "the loss goes down")
end)

H.test("device memory statistics", function()
  local s = dl.cuda.memory_stats()
  for _, k in ipairs({ "in_use", "cached", "peak", "free", "total" }) do H.eq(type(s[k]), "number") end
  H.ok(s.total > 0 and s.free <= s.total)
  H.ok(#dl.cuda.get_device_name() > 0)
end)

H.run()
