-- dlua.nn.spatial: layers over the channels and positions of images and sequences, as
-- PyTorch's (functions of dl.nn.functional and layers of dl.nn, loaded when first used):
--
--   F.dropout2d(x, p, training), nn.Dropout2d(p); F.dropout1d, nn.Dropout1d
--        whole channels zeroed with probability p (the rest scaled by 1 / (1 - p))
--   F.instance_norm(x [, {running_mean, running_var, weight, bias, use_input_stats,
--        momentum, eps}]), nn.InstanceNorm2d(C [, {eps, momentum, affine,
--        track_running_stats}]), nn.InstanceNorm1d: each (sample, channel) normalised
--        over its positions
--   F.adaptive_max_pool2d(x, size), nn.AdaptiveMaxPool2d(size); 1d: the maximum of each of
--        a grid of windows of the input, whatever its size
--   F.pixel_shuffle(x, r), nn.PixelShuffle(r): (N, C r^2, H, W) -> (N, C, H r, W r);
--        F.pixel_unshuffle, nn.PixelUnshuffle the other way
--
-- All are made of the engine's differentiable ops (dropout's mask, group_norm, narrow
-- and amax, views and permutes).
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local F0 = require("dlua.nn.functional")
core.own_source()

local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local shape_str = T.shape_str
local check = T.check_tensor
local dl = T.dl
local type, tostring, ipairs, floor, ceil = type, tostring, ipairs, math.floor, math.ceil
local fmt = Module.format_args

local F, L = {}, {}

local int_arg = require("dlua.nn.layers").int_arg   -- (op, v, what [, min = 1])

-- ---- channel dropout ------------------------------------------------------------------------

-- x's number of dims, checked: (N, C, ...) or (C, ...) with `spatial` dims of positions.
local function dims_checked(op, x, spatial)
  check(op, x)
  local nd = x:dim()
  if nd ~= spatial + 2 and nd ~= spatial + 1 then
    raise(op .. ": expected input of " .. (spatial + 2) .. " dims (N, C, ...) or " .. (spatial + 1)
          .. ", got shape " .. shape_str(x.shape))
  end
  return nd
end

-- x (N, C, ...) or, with one spatial dim fewer, (C, ...): one draw per channel.
local function channel_dropout(op, spatial)
  return function(x, p, training)
    local nd = dims_checked(op, x, spatial)
    if training == false or p == 0 then return x end
    local shape = {}
    for d = 1, nd - spatial do shape[d] = x:size(d) end
    for _ = 1, spatial do shape[#shape + 1] = 1 end
    return x * F0.dropout(dl.ones(shape, { dtype = x.dtype, device = x.device }), p, true)
  end
end
F.dropout2d = channel_dropout("dropout2d", 2)
F.dropout1d = channel_dropout("dropout1d", 1)

for _, spec in ipairs({ { "Dropout2d", F.dropout2d }, { "Dropout1d", F.dropout1d } }) do
  local name, fn = spec[1], spec[2]
  local cls = Module:extend(name)
  function cls:init(p)
    p = p == nil and 0.5 or p
    if type(p) ~= "number" or p < 0 or p > 1 then raise(name .. ": p must be between 0 and 1, got " .. tostring(p)) end
    self.p = p
  end
  function cls:forward(x) return fn(x, self.p, self.training) end
  function cls:extra_repr() return fmt("p", self.p) end
  L[name] = cls
end

-- ---- instance norm --------------------------------------------------------------------------

local INSTANCE = { running_mean = true, running_var = true, weight = true, bias = true, use_input_stats = true,
                   momentum = true, eps = true }

-- Normalised by each sample's own statistics (group_norm with a group per channel); with
-- running statistics and use_input_stats, they are updated in place by the batch's mean
-- of the per-instance means and unbiased variances; without use_input_stats, they are
-- used instead.
function F.instance_norm(x, opts)
  local op = "instance_norm"
  check(op, x)
  opts = options(op, opts, INSTANCE)
  if x:dim() < 3 then raise(op .. ": expected input (N, C, ...) with positions, got shape " .. shape_str(x.shape)) end
  local eps = opts.eps or 1e-5
  local rm, rv, w, b = opts.running_mean, opts.running_var, opts.weight, opts.bias
  local C = x:size(2)
  local bshape = { 1, C }
  for _ = 3, x:dim() do bshape[#bshape + 1] = 1 end
  if opts.use_input_stats == false then
    if rm == nil or rv == nil then raise(op .. ": use_input_stats = false needs running_mean and running_var") end
    local y = (x - rm:view(bshape)) / (rv:view(bshape) + eps):sqrt()
    if w then y = y * w:view(bshape) end
    if b then y = y + b:view(bshape) end
    return y
  end
  if rm ~= nil and rv ~= nil then
    local m = opts.momentum == nil and 0.1 or opts.momentum
    dl.no_grad(function()
      local flat = x:reshape(x:size(1), C, -1)
      local mean = flat:mean(3):mean(1)
      local var = flat:var(3):mean(1)
      rm:mul_(1 - m):add_(mean * m)
      rv:mul_(1 - m):add_(var * m)
    end)
  end
  return F0.group_norm(x, C, w, b, eps)
end

for dims, name in ipairs({ "InstanceNorm1d", "InstanceNorm2d" }) do
  local cls = Module:extend(name)
  function cls:init(num_features, opts)
    opts = options(name, opts, { eps = true, momentum = true, affine = true, track_running_stats = true })
    self.num_features = int_arg(name, num_features, "num_features")
    self.eps = opts.eps or 1e-5
    self.momentum = opts.momentum == nil and 0.1 or opts.momentum
    self.affine = opts.affine == true
    self.track_running_stats = opts.track_running_stats == true
    if self.affine then
      self.weight = dl.Variable(dl.ones(num_features), "weight")
      self.bias = dl.Variable(dl.zeros(num_features), "bias")
    end
    if self.track_running_stats then
      self:register_buffer("running_mean", dl.zeros(num_features))
      self:register_buffer("running_var", dl.ones(num_features))
    end
  end
  function cls:forward(x)
    check(name, x)
    local nd = x:dim()
    local unbatched = nd == dims + 1
    if (nd ~= dims + 2 and not unbatched) or x:size(unbatched and 1 or 2) ~= self.num_features then
      raise(name .. ": expected input (N, " .. self.num_features .. ", ...) of " .. (dims + 2) .. " dims or ("
            .. self.num_features .. ", ...) of " .. (dims + 1) .. ", got shape " .. shape_str(x.shape))
    end
    if unbatched then x = x:unsqueeze(1) end
    local y = F.instance_norm(x, {
      running_mean = self.running_mean, running_var = self.running_var, weight = self.weight, bias = self.bias,
      use_input_stats = self.training or not self.track_running_stats, momentum = self.momentum, eps = self.eps })
    return unbatched and y:squeeze(1) or y
  end
  function cls:extra_repr()
    return fmt("", self.num_features, "eps", self.eps, "momentum", self.momentum, "affine", self.affine,
               "track_running_stats", self.track_running_stats)
  end
  L[name] = cls
end

-- ---- adaptive max pooling -------------------------------------------------------------------

-- The maxima of the windows floor(i n / m) .. ceil((i + 1) n / m) along dim d, m windows.
local function windows_max(x, d, m)
  local n = x:size(d)
  if m == n then return x end
  local parts = {}
  for i = 0, m - 1 do
    local lo, hi = floor(i * n / m), ceil((i + 1) * n / m)
    parts[i + 1] = x:narrow(d, lo + 1, hi - lo):amax(d, true)
  end
  return dl.cat(parts, d)
end

local function adaptive_max(op, spatial)
  return function(x, size)
    local nd = dims_checked(op, x, spatial)
    local sizes = type(size) == "table" and size or {}
    if type(size) == "number" then for i = 1, spatial do sizes[i] = size end end
    local y = x
    for i = 1, spatial do
      local d = nd - spatial + i
      local m = sizes[i] == nil and x:size(d) or int_arg(op, sizes[i], "output size")
      if x:size(d) == 0 then raise(op .. ": input of shape " .. shape_str(x.shape) .. " is empty along dim " .. d) end
      y = windows_max(y, d, m)
    end
    return y
  end
end
F.adaptive_max_pool2d = adaptive_max("adaptive_max_pool2d", 2)
F.adaptive_max_pool1d = adaptive_max("adaptive_max_pool1d", 1)

local layers = require("dlua.nn.layers")
layers.sized_layer("AdaptiveMaxPool1d", F.adaptive_max_pool1d, L)
layers.sized_layer("AdaptiveMaxPool2d", F.adaptive_max_pool2d, L)

-- ---- pixel shuffle --------------------------------------------------------------------------

-- x (..., C, H, W) with C, H, W split into `split` (five sizes), their dims put in `order`
-- (a permutation of 1..5), and merged into `out` (three sizes); leading dims kept.
local function rearranged(x, split, order, out)
  local lead = {}
  for d = 1, x:dim() - 3 do lead[d] = x:size(d) end
  local k = #lead
  local s, o, r = { unpack(lead) }, {}, { unpack(lead) }
  for i = 1, 5 do s[k + i] = split[i] end
  for d = 1, k do o[d] = d end
  for i = 1, 5 do o[k + i] = k + order[i] end
  for i = 1, 3 do r[k + i] = out[i] end
  return x:reshape(s):permute(o):reshape(r)
end

function F.pixel_shuffle(x, r)
  local op = "pixel_shuffle"
  check(op, x)
  r = int_arg(op, r, "upscale_factor")
  if x:dim() < 3 or x:size(-3) % (r * r) ~= 0 then
    raise(op .. ": expected input (..., C r^2, H, W) with r = " .. r .. ", got shape " .. shape_str(x.shape))
  end
  local c, h, w = x:size(-3) / (r * r), x:size(-2), x:size(-1)
  return rearranged(x, { c, r, r, h, w }, { 1, 4, 2, 5, 3 }, { c, h * r, w * r })   -- C, H, r, W, r
end

function F.pixel_unshuffle(x, r)
  local op = "pixel_unshuffle"
  check(op, x)
  r = int_arg(op, r, "downscale_factor")
  if x:dim() < 3 or x:size(-2) % r ~= 0 or x:size(-1) % r ~= 0 then
    raise(op .. ": expected input (..., C, H, W) with H and W multiples of " .. r .. ", got shape " .. shape_str(x.shape))
  end
  local c, h, w = x:size(-3), x:size(-2) / r, x:size(-1) / r
  return rearranged(x, { c, h, r, w, r }, { 1, 3, 5, 2, 4 }, { c * r * r, h, w })   -- C, r, r, H, W
end

for _, spec in ipairs({ { "PixelShuffle", F.pixel_shuffle, "upscale_factor" },
                        { "PixelUnshuffle", F.pixel_unshuffle, "downscale_factor" } }) do
  local name, fn, what = spec[1], spec[2], spec[3]
  local cls = Module:extend(name)
  function cls:init(r) self[what] = int_arg(name, r, what) end
  function cls:forward(x) return fn(x, self[what]) end
  function cls:extra_repr() return fmt(what, self[what]) end
  L[name] = cls
end

return { functional = F, layers = L }
