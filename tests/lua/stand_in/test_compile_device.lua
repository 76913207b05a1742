-- dl.compile on a CUDA device, run on the stand-in plugin (tests/gpu/fake_plugin.cpp: the
-- CPU's kernels as the device "cuda"): what the compiled call decides by device. Its
-- arithmetic is the CPU's, so compiled and eager results agree bit for bit here.
local H = require("harness")
local dl = require("dlua")

local function same(a, b, what)
  H.eq(a.device, b.device, what .. " device")
  H.eq(a.dtype, b.dtype, what .. " dtype")
  H.ok(dl.equal(a:cpu(), b:cpu()), what .. " values")
end

H.test("the stand-in is the cuda device", function()
  H.ok(dl.cuda.is_available(), dl.cuda.status())
  H.eq(dl.ones(2):cuda().device, "cuda:0")
end)

H.test("a compiled gradient on the device is one plan, with eager's values, on the device", function()
  local function loss(x, w, b) return (dl.tanh(x:matmul(w) + b) * 2 - 1):pow(2):mean() end
  local g = dl.grad(loss, { 2, 3 })
  local cg = dl.compile(dl.grad(loss, { 2, 3 }))
  dl.manual_seed(3)
  for i = 1, 4 do
    local x = dl.randn(8, 5, { dtype = "float64" }):cuda()
    local w, b = dl.randn(5, 3, { dtype = "float64" }):cuda(), dl.randn(3, { dtype = "float64" }):cuda()
    local gw, gb = g(x, w, b)
    local cw, cb = cg(x, w, b)
    same(cw, gw, "call " .. i .. " d/dw")
    same(cb, gb, "call " .. i .. " d/db")
  end
  local text = dl.compile.explain(cg)
  H.ok(text:find("backward pass, compiled", 1, true) ~= nil, text)
  H.ok(text:find("by autograd", 1, true) == nil, text)
end)

H.test("a value_and_grad step with a constant of the pass compiles on the device too", function()
  -- The gradient of a mean starts from a constant (a full of the pass): made on the device.
  local f = function(w) return ((w * 3):exp()):mean() end
  local vg = dl.value_and_grad(f)
  local cvg = dl.compile(dl.value_and_grad(f))
  for i = 1, 3 do
    local w = dl.full({ 4, 4 }, 0.1 * i):cuda()
    local v, gw = vg(w)
    local cv, cgw = cvg(w)
    same(cv, v, "value " .. i)
    same(cgw, gw, "gradient " .. i)
  end
  local text = dl.compile.explain(cvg)
  H.ok(text:find("backward pass, compiled", 1, true) ~= nil, text)
end)

H.run()
