-- dlua.nn.volumetric: convolution and pooling over volumes (N, C, D, H, W), as PyTorch's
-- (functions of dl.nn.functional and layers of dl.nn, loaded when first used):
--
--   F.conv3d(x, w [, b] [, {stride, padding, dilation, groups}]), nn.Conv3d(in, out, k [, opts])
--   F.conv_transpose3d(x, w [, b] [, {stride, padding, output_padding, dilation, groups}]),
--        nn.ConvTranspose3d(in, out, k [, opts])
--   F.max_pool3d(x, k [, {stride, padding, dilation, ceil_mode, return_indices}]), nn.MaxPool3d
--   F.avg_pool3d(x, k [, {stride, padding, ceil_mode, count_include_pad, divisor_override}]),
--        nn.AvgPool3d
--
-- Sizes are a number or a triple {d, h, w}; an input may also be unbatched (C, D, H, W).
-- Each is made of the engine's 2-D kernels, so gradients, dl.compile and dl.export follow:
-- conv3d is one conv2d over the depth positions of the output, with the kernel's depth
-- taps moved into the channels (the input's depth windows gathered once, each a copy);
-- the pools are separable, a 2-D pool over (H, W) and a 1-D pool over D, which gives
-- PyTorch's windows, padding and divisors per axis (the 3-D divisor is the product of
-- the axes', with count_include_pad or without). The nn.Dropout3d, nn.InstanceNorm3d,
-- nn.AdaptiveAvgPool3d/MaxPool3d, nn.BatchNorm3d and F.interpolate's "trilinear" live
-- beside their 1-D and 2-D forms.
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local F0 = require("dlua.nn.functional")
core.own_source()

local raise, options, typename = core.raise, core.options, core.typename
local shape_str = T.shape_str
local check = T.check_tensor
local dl = T.dl
local type, tostring, floor, sqrt = type, tostring, math.floor, math.sqrt
local fmt = Module.format_args

local F, L = {}, {}

-- A (d, h, w) triple of integers >= min from a number or {d, h, w}.
local function triple(op, what, v, min)
  local t
  if type(v) == "number" then t = { v, v, v }
  elseif type(v) == "table" and #v == 3 then t = { v[1], v[2], v[3] }
  else raise(op .. ": " .. what .. " must be a number or a triple {d, h, w}, got " .. typename(v)) end
  for i = 1, 3 do
    local e = t[i]
    if type(e) ~= "number" or e ~= floor(e) or e < min then
      raise(op .. ": " .. what .. " must be integers >= " .. min .. ", got " .. tostring(e))
    end
  end
  return t
end

-- x as (N, C, D, H, W), and whether it came unbatched.
local function batched(op, x, what)
  check(op, x)
  local n = x:dim()
  if n == 4 then return x:unsqueeze(1), true end
  if n ~= 5 then raise(op .. ": expected input " .. (what or "(N, C, D, H, W) or (C, D, H, W)") .. ", got shape " .. shape_str(x.shape)) end
  return x, false
end

-- The number of windows along an axis of n (PyTorch's pooling_output_shape).
local function windows(n, k, s, p, d, ceil_mode)
  local span = n + 2 * p - d * (k - 1) - 1
  local out = (ceil_mode and math.ceil(span / s) or floor(span / s)) + 1
  if ceil_mode and (out - 1) * s >= n + p then out = out - 1 end   -- (the last starts inside)
  return out
end

-- ---- convolution ---------------------------------------------------------------------------

local CONV_OPTS = { stride = true, padding = true, dilation = true, groups = true }
local CONVT_OPTS = { stride = true, padding = true, output_padding = true, dilation = true, groups = true }

-- A 3-D convolution's operands, checked: x batched (and whether it was not), the weight
-- (5 dims, `layout` naming them), the bias, the options, stride, dilation and groups.
local function conv_operands(op, x, w, b, opts, allowed, layout)
  if type(b) == "table" and not T.is_tensor(b) then b, opts = nil, b end
  local unbatched
  x, unbatched = batched(op, x)
  check(op, w)
  if b ~= nil then check(op, b) end
  opts = options(op, opts, allowed)
  if w:dim() ~= 5 then raise(op .. ": expected a weight " .. layout .. ", got shape " .. shape_str(w.shape)) end
  local groups = opts.groups or 1
  if type(groups) ~= "number" or groups ~= floor(groups) or groups < 1 then
    raise(op .. ": groups must be a positive integer, got " .. tostring(groups))
  end
  return x, w, b, opts, unbatched, triple(op, "stride", opts.stride or 1, 1), triple(op, "dilation", opts.dilation or 1, 1),
         groups
end

-- conv3d(x (N, C, D, H, W) or (C, D, H, W), w (O, C / groups, kD, kH, kW) [, b (O)] [,
-- {stride, padding (a triple, "same" or "valid"), dilation, groups}]).
function F.conv3d(x, w, b, opts)
  local op = "conv3d"
  local unbatched, s, dil, groups
  x, w, b, opts, unbatched, s, dil, groups = conv_operands(op, x, w, b, opts, CONV_OPTS, "(O, C/groups, kD, kH, kW)")
  local N, C, D = x:size(1), x:size(2), x:size(3)
  local O, Cg, kd = w:size(1), w:size(2), w:size(3)
  if C ~= Cg * groups or O % groups ~= 0 then
    raise(op .. ": input of shape " .. shape_str(x.shape) .. " and weight of shape " .. shape_str(w.shape)
          .. " do not match with groups = " .. groups .. " (C = weight's dim 2 x groups, O divisible by groups)")
  end
  local p = opts.padding or 0
  if p == "valid" then p = { 0, 0, 0 }
  elseif p == "same" then
    if s[1] ~= 1 or s[2] ~= 1 or s[3] ~= 1 then raise(op .. ": padding \"same\" needs stride 1") end
    p = {}
    local extra = {}   -- an even (dilated) kernel's one more at the end, as PyTorch's
    for i = 1, 3 do
      local span = dil[i] * (w:size(2 + i) - 1)
      p[i], extra[i] = floor(span / 2), span % 2
    end
    if extra[1] + extra[2] + extra[3] > 0 then x = F0.pad(x, { 0, extra[3], 0, extra[2], 0, extra[1] }) end
    D = x:size(3)
  else p = triple(op, "padding", p, 0) end
  local Do = floor((D + 2 * p[1] - dil[1] * (kd - 1) - 1) / s[1]) + 1
  if Do < 1 then
    raise(op .. ": the kernel of depth " .. kd .. " (dilation " .. dil[1] .. ") is larger than the padded input's depth "
          .. (D + 2 * p[1]))
  end
  -- every output depth's kD input slices, gathered once: (N, C, kD, Do, H, W)
  if p[1] > 0 then x = F0.pad(x, { 0, 0, 0, 0, p[1], p[1] }) end
  local at = {}
  for k = 0, kd - 1 do
    for t = 0, Do - 1 do at[#at + 1] = k * dil[1] + t * s[1] + 1 end
  end
  local H, W = x:size(4), x:size(5)
  local cols = x:index_select(3, dl.tensor(at, { dtype = "int64", device = x.device }))
    :view(N, groups, Cg, kd, Do, H, W):permute(1, 5, 2, 4, 3, 6, 7)   -- (N, Do, groups, kD, C/groups, H, W)
    :reshape(N * Do, groups * kd * Cg, H, W)
  local w2 = w:permute(1, 3, 2, 4, 5):reshape(O, kd * Cg, w:size(4), w:size(5))
  local y = F0.conv2d(cols, w2, b, { stride = { s[2], s[3] }, padding = { p[2], p[3] },
                                     dilation = { dil[2], dil[3] }, groups = groups })
  y = y:view(N, Do, O, y:size(3), y:size(4)):permute(1, 3, 2, 4, 5):contiguous()
  return unbatched and y:squeeze(1) or y
end

-- conv_transpose3d(x (N, C, D, H, W) or (C, D, H, W), w (C, O / groups, kD, kH, kW) [, b
-- (O)] [, {stride, padding, output_padding, dilation, groups}]): conv3d's gradient for
-- its input, as PyTorch's F.conv_transpose3d; the output is (D - 1) stride - 2 padding +
-- dilation (kD - 1) + output_padding + 1 deep (likewise high and wide). One
-- conv_transpose2d spreads every input depth slice over (H, W) for all the kernel's
-- depth taps at once (the taps in its output channels); index_add then sums each tap's
-- slices into the output depths they reach.
function F.conv_transpose3d(x, w, b, opts)
  local op = "conv_transpose3d"
  local unbatched, s, dil, groups
  x, w, b, opts, unbatched, s, dil, groups = conv_operands(op, x, w, b, opts, CONVT_OPTS, "(C, O/groups, kD, kH, kW)")
  local p = triple(op, "padding", opts.padding or 0, 0)
  local op_ = triple(op, "output_padding", opts.output_padding or 0, 0)
  for i = 1, 3 do
    if op_[i] >= s[i] and op_[i] >= dil[i] then
      raise(op .. ": output_padding " .. op_[i] .. " must be smaller than the stride " .. s[i] .. " or the dilation "
            .. dil[i])
    end
  end
  local N, C, D, H, W = x:size(1), x:size(2), x:size(3), x:size(4), x:size(5)
  local Og, kd = w:size(2), w:size(3)
  if w:size(1) ~= C or C % groups ~= 0 then
    raise(op .. ": input of shape " .. shape_str(x.shape) .. " and weight of shape " .. shape_str(w.shape)
          .. " do not match with groups = " .. groups .. " (the weight's dim 1 is C, divisible by groups)")
  end
  local O = Og * groups
  local Dout = (D - 1) * s[1] - 2 * p[1] + dil[1] * (kd - 1) + op_[1] + 1
  if Dout < 1 then raise(op .. ": the output's depth would be " .. Dout) end
  local w2 = w:permute(1, 3, 2, 4, 5):reshape(C, kd * Og, w:size(4), w:size(5))
  local planes = F0.conv_transpose2d(x:permute(1, 3, 2, 4, 5):reshape(N * D, C, H, W), w2, nil,
    { stride = { s[2], s[3] }, padding = { p[2], p[3] }, output_padding = { op_[2], op_[3] },
      dilation = { dil[2], dil[3] }, groups = groups })
  local Ho, Wo = planes:size(3), planes:size(4)
  local taps = planes:view(N, D, groups, kd, Og, Ho, Wo):permute(1, 3, 5, 4, 2, 6, 7):reshape(N, O, kd * D, Ho, Wo)
  local at = {}
  for k = 0, kd - 1 do
    for t = 0, D - 1 do at[#at + 1] = t * s[1] + k * dil[1] + 1 end
  end
  local full = (D - 1) * s[1] + dil[1] * (kd - 1) + 1
  local y = dl.zeros({ N, O, full, Ho, Wo }, { dtype = taps.dtype, device = taps.device })
    :index_add(3, dl.tensor(at, { dtype = "int64", device = x.device }), taps)
  -- the depth padding cropped, and output_padding's extra depths (zeros past the last tap)
  local keep = math.min(Dout, full - p[1])
  y = y:narrow(3, p[1] + 1, keep)
  if keep < Dout then
    y = dl.cat({ y, dl.zeros({ N, O, Dout - keep, Ho, Wo }, { dtype = y.dtype, device = y.device }) }, 3)
  end
  if b ~= nil then y = y + b:view(1, O, 1, 1, 1) end
  return unbatched and y:squeeze(1) or y
end

-- ---- pooling -------------------------------------------------------------------------------

local MAX_OPTS = { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true }
local AVG_OPTS = { stride = true, padding = true, ceil_mode = true, count_include_pad = true, divisor_override = true }

-- The sizes of a 3-D pool, checked: kernel, stride (the kernel's by default), padding
-- (at most half the kernel, as PyTorch's), dilation.
local function pool_sizes(op, x, k, opts)
  k = triple(op, "kernel size", k, 1)
  local s = triple(op, "stride", opts.stride or k, 1)
  local p = triple(op, "padding", opts.padding or 0, 0)
  local d = triple(op, "dilation", opts.dilation or 1, 1)
  for i = 1, 3 do
    if p[i] > k[i] / 2 then
      raise(op .. ": padding " .. p[i] .. " must be at most half the kernel size " .. k[i])
    end
    local n = x:size(2 + i)
    if windows(n, k[i], s[i], p[i], d[i], opts.ceil_mode) < 1 then
      local dilated = (d[1] ~= 1 or d[2] ~= 1 or d[3] ~= 1) and " (dilation " .. shape_str(d) .. ")" or ""
      raise(op .. ": the kernel " .. shape_str(k) .. dilated .. " does not fit the input of shape " .. shape_str(x.shape))
    end
  end
  return k, s, p, d
end

-- A 2-D pool over (H, W) of every depth slice, then a 1-D pool over D: (N, C, Do, Ho, Wo),
-- and (with indices) the 1-based positions of each 2-D result within its (H, W) plane and
-- of the 1-D result along D. (A dilated max is as separable; with divisor_override the
-- 2-D pool sums and the 1-D one divides.)
local function separable(x, k, s, p, d, opts, pool2d, pool1d, with_indices)
  local N, C, D, H, W = x:size(1), x:size(2), x:size(3), x:size(4), x:size(5)
  local div = opts.divisor_override
  local o2 = { stride = { s[2], s[3] }, padding = { p[2], p[3] }, ceil_mode = opts.ceil_mode,
               count_include_pad = opts.count_include_pad, return_indices = with_indices or nil,
               dilation = opts.dilation and { d[2], d[3] }, divisor_override = div and 1 }
  local planes, hw = pool2d(x:reshape(N, C * D, H, W), { k[2], k[3] }, o2)
  local Ho, Wo = planes:size(3), planes:size(4)
  local function depth_last(t) return t:view(N, C, D, Ho, Wo):permute(1, 2, 4, 5, 3):reshape(N, C * Ho * Wo, D) end
  local o1 = { stride = s[1], padding = p[1], ceil_mode = opts.ceil_mode, count_include_pad = opts.count_include_pad,
               return_indices = with_indices or nil, dilation = opts.dilation and d[1], divisor_override = div }
  local y, d = pool1d(depth_last(planes), k[1], o1)
  local Do = y:size(3)
  local function back(t) return t:view(N, C, Ho, Wo, Do):permute(1, 2, 5, 3, 4):contiguous() end
  if not with_indices then return back(y) end
  -- the flat position in (D, H, W): the depth picked, and the 2-D pool's pick at it
  local at = depth_last(hw):gather(3, d)
  return back(y), back((d - 1) * (H * W) + at)
end

-- max_pool3d(x, k [, {stride = k, padding, dilation, ceil_mode, return_indices}]): with
-- return_indices, also each maximum's 1-based position within its (D, H, W) volume.
-- avg_pool3d(x, k [, {stride = k, padding, ceil_mode, count_include_pad = true,
-- divisor_override}]).
local function pool3d(op, allowed, pool2d, pool1d, max)
  return function(x, k, opts)
    local unbatched
    x, unbatched = batched(op, x)
    opts = options(op, opts, allowed)
    if not max and not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
    local kk, s, p, d = pool_sizes(op, x, k, opts)
    if opts.divisor_override ~= nil then F0._divisor_arg(op, opts.divisor_override) end
    local y, i = separable(x, kk, s, p, d, opts, pool2d, pool1d, max and opts.return_indices)
    if unbatched then y, i = y:squeeze(1), i and i:squeeze(1) end
    if i then return y, i end
    return y
  end
end
F.max_pool3d = pool3d("max_pool3d", MAX_OPTS, F0.max_pool2d, F0.max_pool1d, true)
F.avg_pool3d = pool3d("avg_pool3d", AVG_OPTS, F0.avg_pool2d, F0.avg_pool1d, false)

-- ---- layers --------------------------------------------------------------------------------

local layers = require("dlua.nn.layers")

-- Conv3d(in_channels, out_channels, k [, {stride, padding, dilation, groups, bias,
-- padding_mode = "zeros"}]): weight (out, in / groups, kD, kH, kW) and bias initialised
-- as PyTorch's (U(-1/sqrt(fan_in), 1/sqrt(fan_in))); padding_mode as Conv2d's.
local Conv3d = Module:extend("Conv3d")
L.Conv3d = Conv3d
function Conv3d:init(in_channels, out_channels, k, opts)
  local name = "Conv3d"
  opts = options(name, opts, { stride = true, padding = true, dilation = true, groups = true, bias = true,
                               padding_mode = true })
  local groups = layers.conv_groups(name, in_channels, out_channels, opts.groups)
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
  self.kernel_size = triple(name, "kernel size", k, 1)
  self.stride = triple(name, "stride", opts.stride or 1, 1)
  self.dilation = triple(name, "dilation", opts.dilation or 1, 1)
  local pad = opts.padding or 0
  self.padding = type(pad) == "string" and pad or triple(name, "padding", pad, 0)
  self._opts = { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = groups }
  self.padding_mode, self._pad = layers.conv_padding_mode(name, opts.padding_mode, self.padding, self.kernel_size,
                                                          self.dilation, self.stride)
  if self._pad then self._opts.padding = 0 end
  local kd, kh, kw = self.kernel_size[1], self.kernel_size[2], self.kernel_size[3]
  local bound = 1 / sqrt(in_channels / groups * kd * kh * kw)
  self.weight = dl.Variable(layers.uniform({ out_channels, in_channels / groups, kd, kh, kw }, bound), "weight")
  if opts.bias ~= false then self.bias = dl.Variable(layers.uniform({ out_channels }, bound), "bias") end
end
function Conv3d:forward(x)
  check("Conv3d", x)
  local n = x:dim()
  if (n ~= 5 and n ~= 4) or x:size(n - 3) ~= self.in_channels then
    raise("Conv3d: expected input (N, " .. self.in_channels .. ", D, H, W) or (" .. self.in_channels
          .. ", D, H, W), got shape " .. shape_str(x.shape))
  end
  if self._pad then x = F0.pad(x, self._pad, { mode = self.padding_mode }) end
  return F.conv3d(x, self.weight, self.bias, self._opts)
end
function Conv3d:extra_repr()
  local function shown(t, default)
    if type(t) ~= "table" then return t end
    for _, v in ipairs(t) do if v ~= default then return t end end
    return nil
  end
  return fmt("", self.in_channels, "", self.out_channels, "kernel_size", self.kernel_size, "stride", self.stride,
             "padding", shown(self.padding, 0), "output_padding", shown(self.output_padding, 0),
             "dilation", shown(self.dilation, 1),
             "groups", self.groups ~= 1 and self.groups or nil, "bias", self.bias ~= nil,
             "padding_mode", self.padding_mode ~= nil and self.padding_mode ~= "zeros" and self.padding_mode or nil)
end

-- ConvTranspose3d(in_channels, out_channels, k [, {stride, padding, output_padding,
-- dilation, groups, bias, padding_mode = "zeros"}]): weight (in, out / groups, kD, kH,
-- kW), PyTorch's initialisation (its fan-in is out / groups kD kH kW); forward(x [,
-- output_size]) as ConvTranspose2d's.
local ConvTranspose3d = Module:extend("ConvTranspose3d")
L.ConvTranspose3d = ConvTranspose3d
function ConvTranspose3d:init(in_channels, out_channels, k, opts)
  local name = "ConvTranspose3d"
  opts = options(name, opts, { stride = true, padding = true, output_padding = true, dilation = true, groups = true,
                               bias = true, padding_mode = true })
  layers.transposed_padding_mode(name, opts.padding_mode)
  local groups = layers.conv_groups(name, in_channels, out_channels, opts.groups)
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
  self.kernel_size = triple(name, "kernel size", k, 1)
  self.stride = triple(name, "stride", opts.stride or 1, 1)
  self.padding = triple(name, "padding", opts.padding or 0, 0)
  self.output_padding = triple(name, "output_padding", opts.output_padding or 0, 0)
  self.dilation = triple(name, "dilation", opts.dilation or 1, 1)
  self._opts = { stride = self.stride, padding = self.padding, output_padding = self.output_padding,
                 dilation = self.dilation, groups = groups }
  local kd, kh, kw = self.kernel_size[1], self.kernel_size[2], self.kernel_size[3]
  local bound = 1 / sqrt(out_channels / groups * kd * kh * kw)
  self.weight = dl.Variable(layers.uniform({ in_channels, out_channels / groups, kd, kh, kw }, bound), "weight")
  if opts.bias ~= false then self.bias = dl.Variable(layers.uniform({ out_channels }, bound), "bias") end
end
function ConvTranspose3d:forward(x, output_size)
  check("ConvTranspose3d", x)
  local n = x:dim()
  if (n ~= 5 and n ~= 4) or x:size(n - 3) ~= self.in_channels then
    raise("ConvTranspose3d: expected input (N, " .. self.in_channels .. ", D, H, W) or (" .. self.in_channels
          .. ", D, H, W), got shape " .. shape_str(x.shape))
  end
  local opts = self._opts
  if output_size ~= nil then
    opts = { stride = opts.stride, padding = opts.padding, dilation = opts.dilation, groups = opts.groups,
             output_padding = layers.transposed_output_padding("ConvTranspose3d", self, x, output_size, 3) }
  end
  return F.conv_transpose3d(x, self.weight, self.bias, opts)
end
ConvTranspose3d.extra_repr = Conv3d.extra_repr

-- MaxPool3d(k [, {stride = k, padding, dilation, ceil_mode, return_indices}]) and AvgPool3d
-- (count_include_pad and divisor_override instead of dilation and return_indices).
for _, name in ipairs({ "MaxPool3d", "AvgPool3d" }) do
  local cls = Module:extend(name)
  local max = name == "MaxPool3d"
  local fn = max and F.max_pool3d or F.avg_pool3d
  local allowed = max and MAX_OPTS or AVG_OPTS
  function cls:init(k, opts)
    opts = options(name, opts, allowed)
    self.kernel_size = triple(name, "kernel size", k, 1)
    self.stride = triple(name, "stride", opts.stride or k, 1)
    self.padding = triple(name, "padding", opts.padding or 0, 0)
    self.ceil_mode = opts.ceil_mode and true or false
    if opts.dilation ~= nil then self.dilation = triple(name, "dilation", opts.dilation, 1) end
    if opts.divisor_override ~= nil then self.divisor_override = F0._divisor_arg(name, opts.divisor_override) end
    self.return_indices = opts.return_indices and true or nil
    self._opts = { stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode,
                   count_include_pad = opts.count_include_pad, return_indices = self.return_indices,
                   dilation = self.dilation, divisor_override = self.divisor_override }
  end
  function cls:forward(x) return fn(x, self.kernel_size, self._opts) end
  function cls:extra_repr()
    return fmt("kernel_size", self.kernel_size, "stride", self.stride, "padding", self.padding,
               "dilation", self.dilation, "ceil_mode", self.ceil_mode or nil, "divisor_override", self.divisor_override,
               "return_indices", self.return_indices)
  end
  L[name] = cls
end

return { functional = F, layers = L }
