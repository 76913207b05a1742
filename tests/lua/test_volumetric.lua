-- Volumes (N, C, D, H, W): conv3d, the 3-D pools, adaptive pools, trilinear, nearest and
-- area interpolation, batch and instance normalisation, against PyTorch float64
-- (tests/ref/gen_breadth_refs.py, gen_volumetric), and their layers and errors.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.breadth_ref")
local F, nn = dl.nn.functional, dl.nn
local f64 = { dtype = "float64" }

H.test("conv3d, the 3-D pools and resizing, batch and instance norm match PyTorch float64, gradients included", function()
  local FN = {
    conv3d = function(x, w, b)
      return F.conv3d(x, w, b, { stride = { 2, 1, 2 }, padding = { 1, 0, 1 }, dilation = { 1, 2, 1 }, groups = 2 })
    end,
    conv3d_plain = F.conv3d,
    conv3d_same = function(x, w) return F.conv3d(x, w, { padding = "same" }) end,
    conv_transpose3d = function(x, w, b)
      return F.conv_transpose3d(x, w, b, { stride = { 2, 1, 3 }, padding = { 1, 0, 2 }, output_padding = { 1, 0, 2 },
                                           dilation = { 1, 2, 1 }, groups = 2 })
    end,
    conv_transpose3d_plain = function(x, w) return F.conv_transpose3d(x, w, { stride = 2 }) end,
    conv_transpose3d_pad = function(x, w)
      return F.conv_transpose3d(x, w, { padding = 2, output_padding = 1, dilation = 2 })
    end,
    max_pool3d = function(x) return F.max_pool3d(x, 2, { return_indices = true }) end,
    max_pool3d_pad = function(x)
      return F.max_pool3d(x, { 3, 2, 3 }, { stride = 2, padding = { 1, 1, 0 }, ceil_mode = true, return_indices = true })
    end,
    avg_pool3d = function(x) return F.avg_pool3d(x, { 3, 2, 2 }, { stride = 2, padding = 1 }) end,
    avg_pool3d_exclude = function(x)
      return F.avg_pool3d(x, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
    end,
    adaptive_avg_pool3d = function(x) return F.adaptive_avg_pool3d(x, { 2, 4, 3 }) end,
    adaptive_max_pool3d = function(x) return F.adaptive_max_pool3d(x, { 3, 2, 5 }) end,
    trilinear = function(x) return F.interpolate(x, { scale_factor = { 2, 1.5, 0.5 }, mode = "trilinear" }) end,
    trilinear_aligned = function(x)
      return F.interpolate(x, { size = { 3, 9, 4 }, mode = "trilinear", align_corners = true })
    end,
    nearest3d = function(x) return F.interpolate(x, { size = { 7, 4, 9 } }) end,
    area3d = function(x) return F.interpolate(x, { size = { 2, 3, 5 }, mode = "area" }) end,
    batch_norm3d = function(x) return F.batch_norm(x, nil, nil, nil, nil, true) end,
    instance_norm3d = F.instance_norm,
  }
  H.eq(H.ref_cases(R.volumetric, FN), 18)
end)

H.test("the 3-D layers: shapes, unbatched input, printing, BatchNorm3d's running statistics", function()
  dl.manual_seed(3)
  local x = dl.randn(2, 4, 5, 6, 7)
  local conv = nn.Conv3d(4, 8, 3, { padding = "same" })
  H.shape(conv(x), { 2, 8, 5, 6, 7 })
  H.shape(conv.weight, { 8, 4, 3, 3, 3 })
  H.ok(conv.weight:abs():max():item() <= 1 / math.sqrt(4 * 27))   -- PyTorch's initial bound
  H.shape(conv(x[1]), { 8, 5, 6, 7 })                              -- unbatched
  H.ok(dl.allclose(conv(x[1]), conv(x)[1], 1e-5, 1e-5))
  H.eq(tostring(nn.Conv3d(4, 8, { 3, 1, 1 }, { stride = 2 })),
       "Conv3d(4, 8, kernel_size=(3, 1, 1), stride=(2, 2, 2), bias=true)")
  local up = nn.ConvTranspose3d(4, 2, { 2, 3, 3 }, { stride = 2, padding = { 0, 1, 1 }, output_padding = 1 })
  H.shape(up(x), { 2, 2, 11, 12, 14 })
  H.shape(up.weight, { 4, 2, 2, 3, 3 })
  H.eq(tostring(up), "ConvTranspose3d(4, 2, kernel_size=(2, 3, 3), stride=(2, 2, 2), padding=(0, 1, 1), "
       .. "output_padding=(1, 1, 1), bias=true)")
  -- the transposed convolution is conv3d's adjoint: <conv3d(a, w), b> = <a, conv_transpose3d(b, w)>
  local a, w = dl.randn(1, 2, 4, 5, 6, f64), dl.randn(3, 2, 2, 3, 2, f64)
  local cb = dl.randn(F.conv3d(a, w, { stride = 2, padding = 1 }).shape, f64)
  H.near((F.conv3d(a, w, { stride = 2, padding = 1 }) * cb):sum():item(),
         (a * F.conv_transpose3d(cb, w, { stride = 2, padding = 1 })):sum():item(), 1e-10)
  H.shape(nn.MaxPool3d(2)(x), { 2, 4, 2, 3, 3 })
  H.shape(nn.AvgPool3d({ 1, 2, 2 })(x), { 2, 4, 5, 3, 3 })
  H.shape(nn.AdaptiveAvgPool3d(1)(x), { 2, 4, 1, 1, 1 })
  H.shape(nn.AdaptiveMaxPool3d({ 2, 3, 4 })(x), { 2, 4, 2, 3, 4 })
  -- a tie's gradient goes to one element, as PyTorch's
  local g = dl.grad(function(t) return F.adaptive_max_pool3d(t, 1):sum() end)(dl.zeros(1, 1, 2, 2, 2))
  H.eq(g:sum():item(), 1)
  H.eq(g:max():item(), 1)
  local v, i = F.max_pool3d(x[1], 2, { return_indices = true })   -- unbatched, 1-based flat positions
  H.shape(i, { 4, 2, 3, 3 })
  H.ok(dl.equal(x[1]:reshape(4, -1):gather(2, i:reshape(4, -1)), v:reshape(4, -1)))
  local bn = nn.BatchNorm3d(4)
  local y = bn(x)
  H.near(y:mean({ 1, 3, 4, 5 }):totable(), { 0, 0, 0, 0 }, 1e-5)
  H.near(bn.running_mean:totable(), (x:mean({ 1, 3, 4, 5 }) * 0.1):totable(), 1e-6)
  H.shape(nn.InstanceNorm3d(4)(x), { 2, 4, 5, 6, 7 })
  local drop = nn.Dropout3d(0.5)
  local z = drop(dl.ones(3, 8, 2, 2, 2))
  -- whole channels are zeroed or doubled
  H.ok(z:amax({ 3, 4, 5 }):eq(z:amin({ 3, 4, 5 })):all())
  drop:eval()
  H.ok(dl.equal(drop(x), x))
end)

H.test("the 3-D forms check their inputs, naming the op", function()
  local x = dl.ones(1, 2, 4, 4, 4)
  H.raises(function() F.conv3d(dl.ones(2, 4, 4), dl.ones(1, 2, 1, 1, 1)) end,
           "conv3d: expected input (N, C, D, H, W) or (C, D, H, W), got shape (2, 4, 4)")
  H.raises(function() F.conv3d(x, dl.ones(1, 2, 1, 1)) end, "conv3d: expected a weight (O, C/groups, kD, kH, kW)")
  H.raises(function() F.conv3d(x, dl.ones(2, 2, 1, 1, 1), { groups = 2 }) end, "conv3d: input of shape (1, 2, 4, 4, 4)")
  H.raises(function() F.conv3d(x, dl.ones(1, 2, 6, 1, 1)) end, "conv3d: the kernel of depth 6")
  H.raises(function() F.conv3d(x, dl.ones(1, 2, 2, 1, 1), { padding = "same", stride = 2 }) end,
           "conv3d: padding \"same\" needs stride 1")
  H.raises(function() F.conv3d(x, dl.ones(1, 2, 1, 1, 1), { stride = { 1, 2 } }) end,
           "conv3d: stride must be a number or a triple {d, h, w}")
  H.raises(function() F.conv3d(x, dl.ones(1, 2, 1, 1, 1), { bogus = 1 }) end, "conv3d: unknown option 'bogus'")
  H.raises(function() F.max_pool3d(x, 2, { count_include_pad = false }) end, "max_pool3d: unknown option 'count_include_pad'")
  H.raises(function() F.avg_pool3d(x, 2, { padding = 2 }) end, "avg_pool3d: padding 2 must be at most half the kernel size 2")
  H.raises(function() F.max_pool3d(x, 5) end, "max_pool3d: the kernel (5, 5, 5) does not fit the input of shape (1, 2, 4, 4, 4)")
  H.raises(function() F.interpolate(x, { size = 2, mode = "bilinear" }) end,
           "interpolate: mode bilinear takes (N, C, H, W) input, got shape (1, 2, 4, 4, 4)")
  H.raises(function() F.interpolate(dl.ones(1, 2, 4, 4), { size = 2, mode = "trilinear" }) end,
           "interpolate: mode trilinear takes (N, C, D, H, W) input")
  H.raises(function() F.adaptive_avg_pool3d(dl.ones(4, 4), 2) end,
           "adaptive_avg_pool3d: expected input (N, C, D, H, W) or (C, D, H, W), got shape (4, 4)")
  H.raises(function() nn.BatchNorm3d(2)(dl.ones(1, 2, 4, 4)) end, "BatchNorm3d: expected input (N, C, D, H, W) with C = 2")
  H.raises(function() nn.Conv3d(3, 4, 2)(x) end, "Conv3d: expected input (N, 3, D, H, W) or (3, D, H, W)")
  H.raises(function() F.conv_transpose3d(x, dl.ones(2, 1, 1, 1, 1), { output_padding = 1 }) end,
           "conv_transpose3d: output_padding 1 must be smaller than the stride 1 or the dilation 1")
  H.raises(function() F.conv_transpose3d(x, dl.ones(3, 1, 1, 1, 1)) end, "conv_transpose3d: input of shape (1, 2, 4, 4, 4)")
end)

H.run()
