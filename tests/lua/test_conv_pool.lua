-- Convolution and pooling options as PyTorch 1.13's (what a differential audit found
-- missing or ignored): ConvTranspose's output_size, adaptive max pools' indices, max
-- pools' dilation, divisor_override, padding_mode, unbatched unfold/fold. Expected values
-- are torch's, as literals.
local dl = require("dlua")
local H = require("harness")
local nn = dl.nn
-- ---- convolution and pooling options (PyTorch 1.13's) -------------------------------------

local F = dl.nn.functional

H.test("ConvTranspose1d/2d/3d forward(x, output_size) picks the output_padding, as PyTorch's", function()
  local m = nn.ConvTranspose1d(1, 1, 3, { stride = 2, padding = 1, bias = false })
  m.weight = dl.Variable(dl.tensor({ { { 1, 2, 3 } } }, { dtype = "float64" }), "weight")
  local x = dl.tensor({ { { 1, 2, 3 } } }, { dtype = "float64" })
  -- torch: m(x), m(x, [6]), m(x, [1, 1, 6]) with that weight
  H.values(m(x), { { { 2, 5, 4, 9, 6 } } })
  H.values(m(x, { 6 }), { { { 2, 5, 4, 9, 6, 9 } } })
  H.values(m(x, { 1, 1, 6 }), { { { 2, 5, 4, 9, 6, 9 } } })
  H.values(m(x[1], { 1, 6 }), { { 2, 5, 4, 9, 6, 9 } })
  local m2 = nn.ConvTranspose2d(2, 3, 3, { stride = 2, padding = 1 })
  H.shape(m2(dl.randn(1, 2, 5, 5), { 10, 10 }), { 1, 3, 10, 10 })
  H.shape(m2(dl.randn(1, 2, 5, 5), { 1, 3, 9, 10 }), { 1, 3, 9, 10 })
  H.shape(nn.ConvTranspose3d(2, 3, 2, { stride = 3 })(dl.randn(2, 3, 3, 3), { 8, 9, 10 }), { 3, 8, 9, 10 })
  H.raises(function() m2(dl.randn(1, 2, 5, 5), { 11, 10 }) end,
           "ConvTranspose2d: requested an output size of (11, 10), but valid sizes range from (9, 9) to (10, 10)")
  H.raises(function() m2(dl.randn(1, 2, 5, 5), { 2, 10, 10 }) end,
           "ConvTranspose2d: for an input of 4 dims, output_size must have 2 or 4 sizes, got 3")
  H.raises(function() nn.ConvTranspose2d(2, 3, 3, { padding_mode = "reflect" }) end,
           "ConvTranspose2d: padding_mode must be \"zeros\"")
end)

H.test("adaptive max pools give indices with return_indices, as PyTorch's", function()
  local x = dl.tensor({ { { { 1, 5, 5, 2 }, { 5, 0, 3, 3 }, { 4, 1, 3, 2 } } } }, { dtype = "float64" })
  -- torch: F.adaptive_max_pool2d(x, (2, 3), True), indices + 1 (the first of equal maxima)
  local y, i = F.adaptive_max_pool2d(x, { 2, 3 }, { return_indices = true })
  H.values(y, { { { { 5, 5, 5 }, { 5, 3, 3 } } } })
  H.values(i, { { { { 2, 2, 3 }, { 5, 7, 7 } } } }, { dtype = "int64" })
  local y2, i2 = nn.AdaptiveMaxPool2d({ 2, 3 }, true)(x)
  H.eq(y2:totable(), y:totable()); H.eq(i2:totable(), i:totable())
  H.eq(select("#", nn.AdaptiveMaxPool2d({ 2, 3 })(x)), 1)
  -- torch: F.adaptive_max_pool1d(tensor([[3., 1, 3, 7, 7, 0, 2]]), 3, True)
  local y1, i1 = nn.AdaptiveMaxPool1d(3, { return_indices = true })(dl.tensor({ { 3, 1, 3, 7, 7, 0, 2 } }))
  H.values(y1, { { 3, 7, 7 } }); H.values(i1, { { 1, 4, 5 } })
  -- torch: F.adaptive_max_pool3d(arange(24).sin().reshape(1, 1, 2, 3, 4), (1, 2, 2), True)
  local x3 = dl.arange(24, { dtype = "float64" }):sin():reshape(1, 1, 2, 3, 4)
  local _, i3 = F.adaptive_max_pool3d(x3, { 1, 2, 2 }, { return_indices = true })
  H.values(i3, { { { { { 2, 15 }, { 9, 8 } } } } })
  H.raises(function() nn.AdaptiveAvgPool2d(3, true) end, "AdaptiveAvgPool2d: expected an options table, got boolean")
  H.raises(function() F.adaptive_max_pool2d(x, 2, { return_index = true }) end, "adaptive_max_pool2d: unknown option 'return_index'")
end)

H.test("max pools take dilation (and MaxPool2d/1d return_indices), as PyTorch's", function()
  local x = dl.tensor({ { { { 1, 9, 2, 4, 0 }, { 3, 3, 8, 1, 6 }, { 7, 2, 5, 5, 1 }, { 0, 4, 6, 2, 9 } } } },
                      { dtype = "float64" })
  -- torch: F.max_pool2d(x, 2, 2, 1, dilation=2, ceil_mode=True, return_indices=True), indices + 1
  local o = { stride = 2, padding = 1, dilation = 2, ceil_mode = true, return_indices = true }
  local y, i = F.max_pool2d(x, 2, o)
  H.values(y, { { { { 3, 3, 1 }, { 4, 4, 2 }, { 4, 4, 2 } } } })
  H.values(i, { { { { 7, 7, 9 }, { 17, 17, 19 }, { 17, 17, 19 } } } })
  local ym, im = nn.MaxPool2d(2, o)(x)
  H.eq(ym:totable(), y:totable()); H.eq(im:totable(), i:totable())
  -- torch: x.grad of (max_pool2d(x, 2, 2, 1, 2, True) * arange(1, 10).reshape(1, 1, 3, 3)).sum()
  local g = dl.grad(function(t)
    return (F.max_pool2d(t, 2, { stride = 2, padding = 1, dilation = 2, ceil_mode = true })
            * dl.arange(1, 10, { dtype = "float64" }):reshape(1, 1, 3, 3)):sum()
  end)(x)
  H.values(g, { { { { 0, 0, 0, 0, 0 }, { 0, 3, 0, 3, 0 }, { 0, 0, 0, 0, 0 }, { 0, 24, 0, 15, 0 } } } })
  -- torch: F.max_pool1d(tensor([[3., 1, 4, 1, 5, 9, 2, 6]]), 3, 1, dilation=2, return_indices=True)
  local v1 = dl.tensor({ { 3, 1, 4, 1, 5, 9, 2, 6 } })
  local y1, i1 = nn.MaxPool1d(3, { stride = 1, dilation = 2, return_indices = true })(v1)
  H.values(y1, { { 5, 9, 5, 9 } }); H.values(i1, { { 5, 6, 5, 6 } })
  -- torch: F.max_pool3d(arange(24).sin().reshape(1, 1, 2, 3, 4), 2, 1, dilation=(1, 2, 2), return_indices=True)
  local x3 = dl.arange(24, { dtype = "float64" }):sin():reshape(1, 1, 2, 3, 4)
  local y3, i3 = nn.MaxPool3d(2, { stride = 1, dilation = { 1, 2, 2 }, return_indices = true })(x3)
  H.values(y3, { { { { { 0.9906073556948704, 0.8414709848078965 } } } } }, { tol = 1e-12 })
  H.values(i3, { { { { { 15, 2 } } } } })
  H.raises(function() F.max_pool2d(x, 2, { padding = 2, dilation = 2 }) end,
           "max_pool2d: padding must be between 0 and half the kernel size")
end)

H.test("avg pools take divisor_override; pools refuse a stride of 0, as PyTorch's", function()
  local x = dl.arange(1, 13, { dtype = "float64" }):reshape(1, 1, 3, 4)
  -- torch: F.avg_pool2d(x, 2, 1, 1, ceil_mode=True, divisor_override=3)
  H.values(F.avg_pool2d(x, 2, { stride = 1, padding = 1, ceil_mode = true, divisor_override = 3 }),
           { { { { 1 / 3, 1, 5 / 3, 7 / 3, 4 / 3 }, { 2, 14 / 3, 6, 22 / 3, 4 }, { 14 / 3, 10, 34 / 3, 38 / 3, 20 / 3 },
               { 3, 19 / 3, 7, 23 / 3, 4 } } } }, { tol = 1e-12 })
  H.values(nn.AvgPool2d(2, { stride = 1, padding = 1, ceil_mode = true, divisor_override = 3 })(x),
           F.avg_pool2d(x, 2, { stride = 1, padding = 1, ceil_mode = true, divisor_override = 3 }):totable(), { tol = 0 })
  -- torch: F.avg_pool2d(arange(1., 6.).reshape(1, 1, 5), (1, 2), divisor_override=4)
  H.values(nn.AvgPool1d(2, { divisor_override = 4 })(dl.arange(1, 6, { dtype = "float64" }):reshape(1, 5)), { { 0.75, 1.75 } })
  -- torch: F.avg_pool3d(arange(1., 9.).reshape(1, 1, 2, 2, 2), 2, divisor_override=2)
  H.values(F.avg_pool3d(dl.arange(1, 9, { dtype = "float64" }):reshape(1, 1, 2, 2, 2), 2, { divisor_override = 2 }),
           { { { { { 18 } } } } })
  H.raises(function() F.avg_pool2d(x, 2, { divisor_override = 0 }) end,
           "avg_pool2d: divisor_override must be a non-zero integer, got 0")
  H.raises(function() F.max_pool2d(x, 2, { stride = 0 }) end, "max_pool2d: stride must be integers >= 1, got 0, 0")
  H.raises(function() F.avg_pool2d(x, 2, { stride = { 1, 0 } }) end, "avg_pool2d: stride must be integers >= 1, got 1, 0")
end)

H.test("Conv1d/2d/3d take padding_mode, as PyTorch's", function()
  local x = dl.arange(1, 13, { dtype = "float64" }):reshape(1, 1, 3, 4)
  -- torch: nn.Conv2d(1, 1, 3, padding=1, padding_mode=mode, bias=False), weight arange(1, 10)
  local want = {
    reflect = { { 195, 216, 261, 270 }, { 327, 348, 393, 402 }, { 315, 336, 381, 390 } },
    replicate = { { 159, 192, 237, 264 }, { 315, 348, 393, 420 }, { 399, 432, 477, 504 } },
    circular = { { 243, 240, 285, 258 }, { 351, 348, 393, 366 }, { 243, 240, 285, 258 } },
  }
  for mode, w in pairs(want) do
    local c = nn.Conv2d(1, 1, 3, { padding = 1, padding_mode = mode, bias = false })
    c.weight = dl.Variable(dl.arange(1, 10, { dtype = "float64" }):reshape(1, 1, 3, 3), "weight")
    H.values(c(x), { { w } })
  end
  -- torch: nn.Conv1d(1, 1, 4, padding='same', padding_mode='circular', bias=False), weight 1, 10, 100, 1000
  local c1 = nn.Conv1d(1, 1, 4, { padding = "same", padding_mode = "circular", bias = false })
  c1.weight = dl.Variable(dl.tensor({ { { 1, 10, 100, 1000 } } }, { dtype = "float64" }), "weight")
  H.values(c1(dl.arange(1, 6, { dtype = "float64" }):reshape(1, 1, 5)), { { { 3215, 4321, 5432, 1543, 2154 } } })
  -- torch: nn.Conv3d(1, 1, 2, padding=1, padding_mode='replicate', bias=False), weight ones
  local c3 = nn.Conv3d(1, 1, 2, { padding = 1, padding_mode = "replicate", bias = false })
  c3.weight = dl.Variable(dl.ones(1, 1, 2, 2, 2, { dtype = "float64" }), "weight")
  local y3 = c3(dl.arange(1, 9, { dtype = "float64" }):reshape(1, 1, 2, 2, 2))
  H.values(y3[1][1][1], { { 8, 12, 16 }, { 16, 20, 24 }, { 24, 28, 32 } })
  H.values(y3[1][1][3], { { 40, 44, 48 }, { 48, 52, 56 }, { 56, 60, 64 } })
  H.raises(function() nn.Conv2d(1, 1, 3, { padding_mode = "mirror" }) end,
           "Conv2d: padding_mode must be zeros, reflect, replicate or circular, got \"mirror\"")
  H.raises(function() nn.Conv2d(1, 1, 3, { padding = "same", stride = 2, padding_mode = "reflect" }) end,
           "Conv2d: padding \"same\" needs stride 1, got stride (2, 2)")
end)

H.test("F.unfold and F.fold take unbatched input, as PyTorch's", function()
  -- torch: F.unfold(arange(1., 13.).reshape(1, 3, 4), 2, stride=2); F.fold(arange(1., 9.).reshape(4, 2), (2, 3), 2)
  H.values(F.unfold(dl.arange(1, 13, { dtype = "float64" }):reshape(1, 3, 4), 2, { stride = 2 }),
           { { 1, 3 }, { 2, 4 }, { 5, 7 }, { 6, 8 } })
  H.values(F.fold(dl.arange(1, 9, { dtype = "float64" }):reshape(4, 2), { 2, 3 }, 2), { { { 1, 5, 4 }, { 5, 13, 8 } } })
  H.raises(function() F.unfold(dl.zeros(3, 4), 2) end, "unfold: expected input (N, C, H, W) or (C, H, W), got shape (3, 4)")
end)

H.run()
