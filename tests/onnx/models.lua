-- Exports the models tests/onnx/check_onnx.py checks: each as <dir>/<name>.onnx, with
-- its inputs and dlua's outputs in <dir>/<name>.io.safetensors (input1.., output1..).
--   dlua tests/onnx/models.lua <dir>
local dl = require("dlua")
local nn = dl.nn
local dir = assert(arg[1], "usage: models.lua <dir>")

local function save(name, f, args, run_args, opts)
  opts = opts or {}
  opts.path = dir .. "/" .. name .. ".onnx"
  dl.export.onnx(f, args, opts)
  local io = {}
  for i, a in ipairs(run_args) do io["input" .. i] = a end
  local outs = { f(unpack(run_args)) }
  for i, o in ipairs(outs) do io["output" .. i] = o end
  dl.save(dir .. "/" .. name .. ".io.safetensors", io)
  print("exported " .. name)
end

dl.manual_seed(1)
-- The MLP of the guides, with a free batch size, run at another batch than exported.
local mlp = nn.Sequential{ nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10) }
save("mlp", function(x) return dl.softmax(mlp(x), 2) end, { dl.randn(1, 28, 28) }, { dl.randn(5, 28, 28) },
     { dynamic = { [1] = { 1, "batch" } }, names = mlp })

-- A conv net: batch norm (eval), both pools, padding and stride.
local cnn = nn.Sequential{
  nn.Conv2d(1, 8, 3, { padding = 1 }), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(8, 8, 3, { stride = 2, bias = false }), nn.ReLU(), nn.AvgPool2d(2),
  nn.Flatten(), nn.Linear(8 * 3 * 3, 10),
}
for _ = 1, 3 do cnn(dl.randn(4, 1, 28, 28)) end   -- running statistics that are not 0 and 1
cnn:eval()
save("cnn", function(x) return cnn(x) end, { dl.randn(2, 1, 28, 28) }, { dl.randn(3, 1, 28, 28) },
     { dynamic = { [1] = { 1, "batch" } } })

-- A decoder: transposed convolutions up from a small image (stride, padding, output
-- padding, dilation, groups, with and without a bias).
local decoder = nn.Sequential{
  nn.ConvTranspose2d(4, 6, 3, { stride = 2, padding = 1, output_padding = 1 }), nn.ReLU(),
  nn.ConvTranspose2d(6, 4, { 2, 3 }, { stride = { 1, 2 }, dilation = { 2, 1 }, groups = 2, bias = false }),
  nn.ConvTranspose2d(4, 2, 2, { padding = 1, output_padding = 1, dilation = 2 }),   -- (cropped and padded)
}
save("decoder", function(x) return decoder(x) end, { dl.randn(1, 4, 5, 5) }, { dl.randn(3, 4, 5, 5) },
     { dynamic = { [1] = { 1, "batch" } } })

-- The inverse and hyperbolic functions, the other bases' exponentials and logarithms, erfc
-- (inputs in every function's domain: x in (-1, 1)).
save("trig", function(x)
  local a = x:asin() + x:acos() + x:atan() + x:atanh() + (x * 3):sinh() + x:cosh() + (x * 5):asinh()
  local b = (x:abs() + 1):acosh() + x:exp2() + (x:abs() + 0.1):log2() + (x:abs() + 0.1):log10() + (x * 2):erfc()
  return a * b
end, { dl.rand(4, 3) * 1.8 - 0.9 }, { dl.rand(2, 3) * 1.8 - 0.9 })

-- Resizing: bilinear, nearest and bicubic upsampling, an adaptive average pool (Gather,
-- MatMul).
local resize = nn.Sequential{
  nn.Upsample({ scale_factor = 2, mode = "bilinear" }), nn.Upsample({ size = { 13, 9 } }),
  nn.Upsample({ size = { 15, 11 }, mode = "bicubic", align_corners = true }), nn.AdaptiveAvgPool2d({ 3, 2 }),
}
save("resize", function(x) return resize(x) end, { dl.randn(2, 3, 5, 7) }, { dl.randn(2, 3, 5, 7) })

-- Many lowerings at once: pointwise ops with numbers first and last, compares, casts,
-- reductions, views with a free size, cat, narrow, select, gather, cumsum, argmax,
-- where, clamp, layer_norm, log_softmax, gelu.
local ln = nn.LayerNorm(6)
local idx = dl.tensor({ 3, 1, 2 }, { dtype = "int64" })
local function many(x, y)
  local a = ((x * 2 - 1):tanh() + (1 - y):abs():sqrt()) / (y:exp() + 1)
  local b = dl.where(x:gt(y), a, -a):clamp(-0.5, 0.7) + x:sigmoid() * y:relu() + x:gelu()
  local c = dl.cat({ b, b:narrow(2, 2, 3) }, 2)                         -- (n, 9)
  local d = ln(c:narrow(2, 1, 6)) + c:sum(2, true) - c:mean(2, true)   -- (n, 6)
  local e = d:view(-1, 2, 3):transpose(2, 3):reshape(-1, 6)             -- a free batch through views
  local f = e:log_softmax(2) + e:amax(2, true) + (e:ge(0):float() * 0.25) + e:cumsum(2) * 0.1
  local g = f:index_select(2, idx) + f:select(2, 1):unsqueeze(2) + f:gather(2, dl.ones(x:size(1), 3, { dtype = "int64" }))
  return g + g:argmax(2, true):float() + dl.maximum(g, 0.1) - dl.minimum(g, x:narrow(2, 1, 3)) + x:narrow(2, 1, 3):pow(2)
end
save("many", many, { dl.randn(2, 6), dl.randn(2, 6) }, { dl.randn(4, 6), dl.randn(4, 6) },
     { dynamic = { [1] = { 1, "n" }, [2] = { 1, "n" } } })

-- atan2 and the remainder, which ONNX has no operator for (lowered from Atan, Mod and
-- Where): every quadrant, a zero divisor's row, both signs of divisor, and integers.
local function quadrants(x, y)
  local i = (x * 7):to("int64")
  return dl.atan2(x, y), dl.atan2(x * 0, y * 0) + dl.atan2(x, y * 0), x % 0.75, (x * 3) % y, 2.5 % y,
         i % 4, i % -3
end
local qx = dl.tensor({ { 1, -1, 1, -1, 0, 2.5 }, { 0.5, -0.25, -3, 4, -0.5, 0 } })
local qy = dl.tensor({ { 1, 1, -1, -1, 2, -0.5 }, { -2, 0.75, 0.5, -1.5, -0.25, 3 } })
save("quadrants", quadrants, { qx, qy }, { qx * 1.5, qy })
-- atan2 at the infinities and the zeros of both signs, every pairing.
local specials = { math.huge, -math.huge, 0, -0.0, 1.5, -2 }
local ia, ib = {}, {}
for _, u in ipairs(specials) do
  for _, v in ipairs(specials) do ia[#ia + 1], ib[#ib + 1] = u, v end
end
save("atan2_corners", function(x, y) return dl.atan2(x, y) end, { dl.tensor(ia), dl.tensor(ib) }, { dl.tensor(ia), dl.tensor(ib) })

-- A two-layer LSTM (the gates' fused op lowered to Split, Sigmoid, Tanh, Mul and Add), a
-- free batch size.
local lstm = nn.LSTM(5, 7, { num_layers = 2, batch_first = true })
lstm:eval()
save("lstm", function(x) local y, h, c = lstm(x); return y, h, c end, { dl.randn(2, 4, 5) }, { dl.randn(3, 4, 5) },
     { dynamic = { [1] = { 1, "batch" } } })

-- Fourier transforms (ONNX's DFT over the same pairs): a power spectrum, a convolution by
-- transforms, an inverse of another length and a gradient, with a free batch size.
save("spectra", function(x, k)
  local F = dl.fft
  local spectrum = F.abs(F.rfft(x, 16)):pow(2)
  local smooth = F.irfft(F.mul(F.rfft(x, 16), F.rfft(k, 16)), 16)
  -- the gradients run both ops with their other weights (each the other's adjoint), and
  -- an odd length
  local grad = dl.grad(function(y) return F.irfft(F.rfft(y), 11):pow(2):sum() + F.irfft(F.rfft(y)):pow(3):sum() end)(x)
  return spectrum, smooth, F.ifft(F.fft(F.complex(x), 12), 7), grad
end, { dl.randn(2, 10), dl.randn(3) }, { dl.randn(4, 10), dl.randn(3) }, { dynamic = { [1] = { 1, "batch" } } })

-- Loops (dl.while_loop as ONNX's Loop): Newton's square root, its count of steps an input
-- and the value read from outside the loop, and the guides' fizzbuzz (a dl.cond inside,
-- int64 state), each run where the loop turns another number of times than exported.
save("newton", function(x, steps)
  local _, y = dl.while_loop(function(i, y) return i:lt(steps) end,
                             function(i, y) return i + 1, (y + x / y) * 0.5 end, { dl.zeros(1, "int64"), x * 0 + 1 })
  return y
end, { dl.tensor({ 2, 9, 0.25 }), dl.tensor({ 3 }, "int64") }, { dl.tensor({ 2, 9, 0.25 }), dl.tensor({ 7 }, "int64") })
local function fizzbuzz(n)
  local positions = dl.arange(1, 31, 1, "int64")
  local function step(i, codes)
    local code = dl.cond((i % 15):eq(0), function() return dl.full({ 1 }, 3, "int64") end, function()
      return dl.where((i % 3):eq(0), dl.full({ 1 }, 1, "int64"), dl.where((i % 5):eq(0), dl.full({ 1 }, 2, "int64"), 0 * i))
    end)
    return i + 1, dl.where(positions:eq(i), code, codes)
  end
  local _, codes = dl.while_loop(function(i) return i:le(n) end, step, { dl.ones(1, "int64"), dl.zeros(30, "int64") })
  return codes
end
save("fizzbuzz", fizzbuzz, { dl.tensor({ 15 }, "int64") }, { dl.tensor({ 30 }, "int64") })
-- A loop in a loop's body whose condition reads a value the outer body made.
save("inner_bound", function(n, x)
  local _, acc = dl.while_loop(function(i) return i:lt(n) end, function(i, acc)
    local bound = i * 2 + 1
    local _, a = dl.while_loop(function(j) return j:lt(bound) end, function(j, a) return j + 1, a + x end,
                               { dl.zeros_like(i), acc })
    return i + 1, a
  end, { dl.zeros(1, "int64"), x * 0 })
  return acc
end, { dl.tensor({ 3 }, "int64"), dl.tensor({ 1, -2, 0.5 }) }, { dl.tensor({ 5 }, "int64"), dl.tensor({ 2, 1, 3 }) })
-- A loop in a loop's body: their names kept apart.
save("nested_loops", function(x, n)
  local _, acc = dl.while_loop(function(i) return i:lt(n) end, function(i, acc)
    local _, inner = dl.while_loop(function(j) return j:lt(2) end,
                                   function(j, a) return j + 1, a * 0.5 + x end, { dl.zeros(1, "int64"), acc })
    return i + 1, inner
  end, { dl.zeros(1, "int64"), x })
  return acc
end, { dl.tensor({ 1, -2 }), dl.tensor({ 2 }, "int64") }, { dl.tensor({ 3, 0.5 }), dl.tensor({ 4 }, "int64") })
