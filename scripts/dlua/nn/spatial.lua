-- dlua.nn.spatial: layers over the channels and positions of images and sequences, as
-- PyTorch's (functions of dl.nn.functional and layers of dl.nn, loaded when first used):
--
--   F.dropout2d(x, p, training), nn.Dropout2d(p); F.dropout1d, nn.Dropout1d; 3d
--        whole channels zeroed with probability p (the rest scaled by 1 / (1 - p))
--   F.instance_norm(x [, {running_mean, running_var, weight, bias, use_input_stats,
--        momentum, eps}]), nn.InstanceNorm2d(C [, {eps, momentum, affine,
--        track_running_stats}]), nn.InstanceNorm1d, 3d: each (sample, channel) normalised
--        over its positions
--   F.adaptive_max_pool2d(x, size [, {return_indices}]), nn.AdaptiveMaxPool2d(size [, opts]);
--        1d, 3d: the maximum of each of a grid of windows of the input, whatever its size
--        (and where it is)
--   F.pixel_shuffle(x, r), nn.PixelShuffle(r): (N, C r^2, H, W) -> (N, C, H r, W r);
--        F.pixel_unshuffle, nn.PixelUnshuffle the other way
--   F.unfold(x, k [, {dilation, padding, stride}]) (im2col) and F.fold (col2im, its adjoint),
--        nn.Unfold, nn.Fold; batched or not
--   F.embedding_bag, nn.EmbeddingBag (sum, mean or max per bag); F.bilinear, nn.Bilinear
--   F.alpha_dropout, F.feature_alpha_dropout, nn.AlphaDropout, nn.FeatureAlphaDropout (SELU's
--        statistics kept); F.local_response_norm, nn.LocalResponseNorm
--   F.lp_pool3d/2d/1d, nn.LPPool3d/2d/1d (power-average pooling); F.max_unpool3d/2d/1d,
--        nn.MaxUnpool3d/2d/1d (max_pool's return_indices put back)
--
-- All are made of the engine's differentiable ops (dropout's mask, group_norm, narrow
-- and amax, views and permutes, index_select and scatter_add).
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local F0 = require("dlua.nn.functional")
core.own_source()

local raise, options = core.raise, core.options
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
F.dropout3d = channel_dropout("dropout3d", 3)
F.dropout2d = channel_dropout("dropout2d", 2)
F.dropout1d = channel_dropout("dropout1d", 1)

-- alpha_dropout(x, p, training): dropout that keeps SELU's zero mean and unit variance
-- (PyTorch's): a dropped element becomes -alpha' (SELU's negative saturation), then all are
-- scaled by a and shifted by b so that mean and variance stay. feature_alpha_dropout
-- drops whole channels.
local ALPHA_PRIME = 1.7580993408473766   -- SELU's scale times its alpha
local function alpha_dropout(op, spatial)
  return function(x, p, training)
    check(op, x)
    p = p == nil and 0.5 or p
    if type(p) ~= "number" or p < 0 or p > 1 then raise(op .. ": p must be between 0 and 1, got " .. tostring(p)) end
    if not training or p == 0 then return x end   -- (training false unless given, as PyTorch's F form)
    if p == 1 then return x * 0 end
    local shape = x.shape
    if spatial then
      if x:dim() < 2 then raise(op .. ": expected input (N, C, ...), got shape " .. shape_str(x.shape)) end
      for d = 3, #shape do shape[d] = 1 end
    end
    local keep = dl.rand(shape, { dtype = x.dtype, device = x.device }):ge(p):to(x.dtype)
    local a = 1 / math.sqrt((ALPHA_PRIME * ALPHA_PRIME * p + 1) * (1 - p))
    local b = (keep - 1) * (ALPHA_PRIME * a) + ALPHA_PRIME * a * p
    return x * (keep * a) + b
  end
end
F.alpha_dropout = alpha_dropout("alpha_dropout", false)
F.feature_alpha_dropout = alpha_dropout("feature_alpha_dropout", true)

for _, spec in ipairs({ { "Dropout3d", F.dropout3d }, { "Dropout2d", F.dropout2d }, { "Dropout1d", F.dropout1d },
                        { "AlphaDropout", F.alpha_dropout }, { "FeatureAlphaDropout", F.feature_alpha_dropout } }) do
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

-- local_response_norm(x (N, C, ...), size [, alpha = 1e-4, beta = 0.75, k = 1]): x divided
-- by (k + alpha / size times the sum of x^2 over `size` neighbouring channels)^beta, the
-- window from size // 2 before to (size - 1) // 2 after, zeros past the ends (AlexNet's).
function F.local_response_norm(x, size, alpha, beta, k)
  local op = "local_response_norm"
  check(op, x)
  if x:dim() < 3 then raise(op .. ": expected input (N, C, ...) of 3 or more dims, got shape " .. shape_str(x.shape)) end
  size = int_arg(op, size, "size")
  alpha, beta, k = alpha or 1e-4, beta or 0.75, k or 1
  local C = x:size(2)
  local pads = {}   -- (F.pad's counts run from the last dim: zeros for the positions)
  for _ = 3, x:dim() do pads[#pads + 1] = 0; pads[#pads + 1] = 0 end
  pads[#pads + 1], pads[#pads + 2] = floor(size / 2), floor((size - 1) / 2)
  local sq = F0.pad(x * x, pads)
  local sum = sq:narrow(2, 1, C)
  for j = 2, size do sum = sum + sq:narrow(2, j, C) end
  return x / (sum * (alpha / size) + k) ^ beta
end

local LocalResponseNorm = Module:extend("LocalResponseNorm")
L.LocalResponseNorm = LocalResponseNorm
function LocalResponseNorm:init(size, alpha, beta, k)
  self.size = int_arg("LocalResponseNorm", size, "size")
  self.alpha, self.beta, self.k = alpha or 1e-4, beta or 0.75, k or 1
end
function LocalResponseNorm:forward(x) return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k) end
function LocalResponseNorm:extra_repr()
  return fmt("", self.size, "alpha", self.alpha, "beta", self.beta, "k", self.k)
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

for dims, name in ipairs({ "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d" }) do
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
-- With `at` (the flat 0-based positions of y's elements within the later dims, of
-- `inner` elements), also the flat 0-based positions of the maxima within dim d and
-- those: the later dims are reduced first, so the first of equal maxima in the window's
-- row-major order is picked, as PyTorch's.
local function windows_max(x, d, m, at, inner)
  local n = x:size(d)
  if m == n and not at then return x end
  local parts, where = {}, {}
  for i = 0, m - 1 do
    local lo, hi = floor(i * n / m), ceil((i + 1) * n / m)
    local v, j = x:narrow(d, lo + 1, hi - lo):max(d, true)   -- (a tie's gradient to one element, as PyTorch's)
    parts[i + 1] = v
    if at then
      local within = at:narrow(d, lo + 1, hi - lo):gather(d, j)
      where[i + 1] = (j + (lo - 1)) * inner + within
    end
  end
  return dl.cat(parts, d), at and dl.cat(where, d)
end

-- adaptive_max_pool2d(x, size [, {return_indices}]) (or return_indices as the third
-- argument, PyTorch's order): with return_indices, also each maximum's flat 1-based
-- position within its plane, as max_pool2d's.
local function adaptive_max(op, spatial)
  return function(x, size, opts)
    local nd = dims_checked(op, x, spatial)
    if type(opts) == "boolean" then opts = { return_indices = opts } end
    opts = options(op, opts, { return_indices = true })
    local sizes = type(size) == "table" and size or {}
    if type(size) == "number" then for i = 1, spatial do sizes[i] = size end end
    local y, at, inner = x, nil, 1
    if opts.return_indices then at = dl.zeros(x.shape, { dtype = "int64", device = x.device }) end
    for i = spatial, 1, -1 do
      local d = nd - spatial + i
      local m = sizes[i] == nil and x:size(d) or int_arg(op, sizes[i], "output size")
      if x:size(d) == 0 then raise(op .. ": input of shape " .. shape_str(x.shape) .. " is empty along dim " .. d) end
      y, at = windows_max(y, d, m, at, inner)
      inner = inner * x:size(d)
    end
    if at then return y, at + 1 end
    return y
  end
end
F.adaptive_max_pool3d = adaptive_max("adaptive_max_pool3d", 3)
F.adaptive_max_pool2d = adaptive_max("adaptive_max_pool2d", 2)
F.adaptive_max_pool1d = adaptive_max("adaptive_max_pool1d", 1)

local layers = require("dlua.nn.layers")
for _, name in ipairs({ "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d" }) do
  layers.sized_layer(name, F[name:gsub("^AdaptiveMaxPool(%d)d$", "adaptive_max_pool%1d")], L, { return_indices = true })
end

-- ---- power-average and unpooling --------------------------------------------------------------

-- lp_pool2d(x, p, k [, stride = k, ceil_mode]): (sum of x^p over each window)^(1/p), as
-- PyTorch's (an average pool of x^p times the window's size; a negative sum gives 0).
-- lp_pool1d over (N, C, L).
local function lp_pool(op, pool, area)
  return function(x, p, k, stride, ceil_mode)
    check(op, x)
    if type(p) ~= "number" or p == 0 then raise(op .. ": norm_type must be a non-zero number, got " .. tostring(p)) end
    local y = pool(x ^ p, k, { stride = stride, ceil_mode = ceil_mode })
    return (y:sign() * y:abs():relu() * area(op, k)) ^ (1 / p)
  end
end
-- `spatial` sizes (integers >= min) from a number or a list of that many.
local function sizes_of(op, what, v, spatial, min)
  if type(v) == "number" then
    local out = {}
    for i = 1, spatial do out[i] = int_arg(op, v, what, min) end
    return out
  end
  if type(v) ~= "table" or #v ~= spatial then
    raise(op .. ": " .. what .. " must be a number or a list of " .. spatial .. ", got " .. core.typename(v))
  end
  local out = {}
  for i = 1, spatial do out[i] = int_arg(op, v[i], what, min) end
  return out
end
local function window_size(spatial)
  return function(op, k)
    local n = 1
    for _, e in ipairs(sizes_of(op, "kernel size", k, spatial, 1)) do n = n * e end
    return n
  end
end
local function avg_pool3d(...) return require("dlua.nn.volumetric").functional.avg_pool3d(...) end
F.lp_pool3d = lp_pool("lp_pool3d", avg_pool3d, window_size(3))
F.lp_pool2d = lp_pool("lp_pool2d", F0.avg_pool2d, window_size(2))
F.lp_pool1d = lp_pool("lp_pool1d", F0.avg_pool1d, window_size(1))

-- max_unpool2d(x, indices, k [, {stride = k, padding = 0, output_size}]): each value put back
-- at its 1-based position within its (H, W) plane (max_pool2d's return_indices), zeros
-- elsewhere; the output (H - 1) stride - 2 padding + k high (and as wide), or
-- output_size. max_unpool1d over (N, C, L).
local UNPOOL_OPTS = { stride = true, padding = true, output_size = true }
local function max_unpool(op, spatial)
  return function(x, indices, k, opts)
    local nd = dims_checked(op, x, spatial)
    check(op, indices)
    opts = core.options(op, opts, UNPOOL_OPTS)
    local same = indices.dtype == "int64" and #indices.shape == nd
    for i = 1, nd do same = same and indices:size(i) == x:size(i) end
    if not same then
      raise(op .. ": expected int64 indices of the input's shape " .. shape_str(x.shape) .. ", got " .. indices.dtype
            .. " " .. shape_str(indices.shape))
    end
    local ks = sizes_of(op, "kernel size", k, spatial, 1)
    local ss = sizes_of(op, "stride", opts.stride or ks, spatial, 1)
    local ps = sizes_of(op, "padding", opts.padding or 0, spatial, 0)
    local out = {}
    for i = 1, spatial do
      out[i] = (x:size(nd - spatial + i) - 1) * ss[i] - 2 * ps[i] + ks[i]
    end
    if opts.output_size ~= nil then
      local want = opts.output_size
      if type(want) ~= "table" or #want < spatial then core.bad_arg(op, "an output_size of " .. spatial .. " sizes", want) end
      for i = 1, spatial do out[i] = int_arg(op, want[#want - spatial + i], "output size") end
    end
    local plane = 1
    for i = 1, spatial do plane = plane * out[i] end
    local lead = {}
    for d = 1, nd - spatial do lead[d] = x:size(d) end
    local flat_shape = { unpack(lead) }
    flat_shape[#flat_shape + 1] = -1
    local idx = indices:reshape(flat_shape)
    if idx:numel() > 0 and (idx:min():item() < 1 or idx:max():item() > plane) then
      raise(op .. ": indices must lie in 1.." .. plane .. " (the output plane), got "
            .. idx:min():item() .. ".." .. idx:max():item())
    end
    local zeros_shape = { unpack(lead) }
    zeros_shape[#zeros_shape + 1] = plane
    local y = dl.zeros(zeros_shape, { dtype = x.dtype, device = x.device }):scatter(#zeros_shape, idx, x:reshape(flat_shape))
    local shape = { unpack(lead) }
    for i = 1, spatial do shape[#shape + 1] = out[i] end
    return y:reshape(shape)
  end
end
F.max_unpool3d = max_unpool("max_unpool3d", 3)
F.max_unpool2d = max_unpool("max_unpool2d", 2)
F.max_unpool1d = max_unpool("max_unpool1d", 1)

for _, spec in ipairs({ { "LPPool3d", F.lp_pool3d }, { "LPPool2d", F.lp_pool2d }, { "LPPool1d", F.lp_pool1d } }) do
  local name, fn = spec[1], spec[2]
  local cls = Module:extend(name)
  function cls:init(p, k, stride, ceil_mode)
    self.norm_type, self.kernel_size, self.stride, self.ceil_mode = p, k, stride, ceil_mode and true or nil
    if type(p) ~= "number" or p == 0 then raise(name .. ": norm_type must be a non-zero number, got " .. tostring(p)) end
  end
  function cls:forward(x) return fn(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode) end
  function cls:extra_repr()
    return fmt("norm_type", self.norm_type, "kernel_size", self.kernel_size, "stride", self.stride, "ceil_mode",
               self.ceil_mode)
  end
  L[name] = cls
end
for _, spec in ipairs({ { "MaxUnpool3d", F.max_unpool3d }, { "MaxUnpool2d", F.max_unpool2d },
                        { "MaxUnpool1d", F.max_unpool1d } }) do
  local name, fn = spec[1], spec[2]
  local cls = Module:extend(name)
  function cls:init(k, opts)
    self.kernel_size = k
    self._opts = core.options(name, opts, { stride = true, padding = true })
  end
  function cls:forward(x, indices, output_size)
    local o = { stride = self._opts.stride, padding = self._opts.padding, output_size = output_size }
    return fn(x, indices, self.kernel_size, o)
  end
  function cls:extra_repr()
    return fmt("kernel_size", self.kernel_size, "stride", self._opts.stride, "padding", self._opts.padding)
  end
  L[name] = cls
end

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

-- ---- unfold and fold (im2col and col2im) ----------------------------------------------------

local FOLD_OPTS = { dilation = true, padding = true, stride = true }
local pair = F0._pair

-- The (h, w) geometry of unfold/fold: kernel, dilation, padding, stride pairs.
local function fold_geometry(op, k, opts)
  opts = options(op, opts, FOLD_OPTS)
  local kh, kw = pair(op, "kernel_size", k, 1)
  local dh, dw = pair(op, "dilation", opts.dilation or 1, 1)
  local ph, pw = pair(op, "padding", opts.padding or 0, 0)
  local sh, sw = pair(op, "stride", opts.stride or 1, 1)
  return { kh, kw }, { dh, dw }, { ph, pw }, { sh, sw }
end

-- The block counts along H and W of an H x W image, and its padded sizes.
local function fold_sizes(H, W, k, d, p, s)
  local Hp, Wp = H + 2 * p[1], W + 2 * p[2]
  local oh = floor((Hp - (d[1] * (k[1] - 1) + 1)) / s[1]) + 1
  local ow = floor((Wp - (d[2] * (k[2] - 1) + 1)) / s[2]) + 1
  return oh, ow, Hp, Wp
end

-- The flat 1-based positions in the padded image that the columns read, kernel offset
-- (a, b) by offset and then block (i, j) by block (PyTorch's order of rows and columns):
-- row i s + a d, column j s + b d.
local function positions(k, d, s, oh, ow, Wp, device)
  local o = { dtype = "int64", device = device }
  local a = dl.arange(k[1], o):view(k[1], 1, 1, 1) * (d[1] * Wp)
  local b = dl.arange(k[2], o):view(1, k[2], 1, 1) * d[2]
  local i = dl.arange(oh, o):view(1, 1, oh, 1) * (s[1] * Wp)
  local j = dl.arange(ow, o):view(1, 1, 1, ow) * s[2]
  return (a + b + i + j + 1):reshape(-1)
end

-- F.unfold(x (N, C, H, W), k [, {dilation, padding, stride}]): the sliding blocks of x as
-- columns, (N, C kh kw, L), as PyTorch's (im2col); x (C, H, W) gives (C kh kw, L).
function F.unfold(x, k, opts)
  local op = "unfold"
  check(op, x)
  if x:dim() == 3 then return F.unfold(x:unsqueeze(1), k, opts):squeeze(1) end
  if x:dim() ~= 4 then raise(op .. ": expected input (N, C, H, W) or (C, H, W), got shape " .. shape_str(x.shape)) end
  local kk, d, p, s = fold_geometry(op, k, opts)
  local N, C, H, W = x:size(1), x:size(2), x:size(3), x:size(4)
  local oh, ow, Hp, Wp = fold_sizes(H, W, kk, d, p, s)
  if oh < 1 or ow < 1 then raise(op .. ": the blocks do not fit an input of shape " .. shape_str(x.shape)) end
  local padded = (p[1] > 0 or p[2] > 0) and F0.pad(x, { p[2], p[2], p[1], p[1] }) or x
  local cols = padded:reshape(N, C, Hp * Wp):index_select(3, positions(kk, d, s, oh, ow, Wp, x.device))
  return cols:reshape(N, C * kk[1] * kk[2], oh * ow)
end

-- F.fold(cols (N, C kh kw, L), output_size, k [, opts]): the adjoint of unfold, summing
-- each block's values into an (N, C, H, W) image where blocks overlap (col2im); cols
-- (C kh kw, L) gives (C, H, W).
function F.fold(cols, output_size, k, opts)
  local op = "fold"
  check(op, cols)
  if cols:dim() == 2 then return F.fold(cols:unsqueeze(1), output_size, k, opts):squeeze(1) end
  if cols:dim() ~= 3 then
    raise(op .. ": expected input (N, C kh kw, L) or (C kh kw, L), got shape " .. shape_str(cols.shape))
  end
  local H, W = pair(op, "output_size", output_size, 1)
  local kk, d, p, s = fold_geometry(op, k, opts)
  local oh, ow, Hp, Wp = fold_sizes(H, W, kk, d, p, s)
  local N, CK, L = cols:size(1), cols:size(2), cols:size(3)
  if CK % (kk[1] * kk[2]) ~= 0 or L ~= oh * ow then
    raise(op .. ": expected (N, C " .. kk[1] * kk[2] .. ", " .. oh * ow .. ") for an output of " .. H .. "x" .. W
          .. ", got shape " .. shape_str(cols.shape))
  end
  local C = CK / (kk[1] * kk[2])
  local img = dl.zeros(N, C, Hp * Wp, { dtype = cols.dtype, device = cols.device })
  local pos = positions(kk, d, s, oh, ow, Wp, cols.device)
  local flat = cols:reshape(N, C, kk[1] * kk[2] * L)
  img = img:scatter_add(3, pos:view(1, 1, -1):expand(N, C, pos:numel()), flat)
  img = img:reshape(N, C, Hp, Wp)
  return img:narrow(3, p[1] + 1, H):narrow(4, p[2] + 1, W)
end

-- nn.Unfold(k [, opts]) and nn.Fold(output_size, k [, opts]): F.unfold and F.fold as layers.
local Unfold = Module:extend("Unfold")
L.Unfold = Unfold
function Unfold:init(k, opts) self.kernel_size, self._opts = k, opts end
function Unfold:forward(x) return F.unfold(x, self.kernel_size, self._opts) end
function Unfold:extra_repr() return fmt("kernel_size", self.kernel_size) end
local Fold = Module:extend("Fold")
L.Fold = Fold
function Fold:init(size, k, opts) self.output_size, self.kernel_size, self._opts = size, k, opts end
function Fold:forward(x) return F.fold(x, self.output_size, self.kernel_size, self._opts) end
function Fold:extra_repr() return fmt("output_size", self.output_size, "kernel_size", self.kernel_size) end

-- ---- EmbeddingBag, Bilinear -------------------------------------------------------------------

local BAG_OPTS = { offsets = true, mode = true, per_sample_weights = true, padding_idx = true }

-- F.embedding_bag(input, weight [, {offsets, mode = "mean", per_sample_weights,
-- padding_idx}]): the rows of weight at input summed, averaged or maxed per bag, as
-- PyTorch's: input (B, n) is B bags of n; or 1-D with offsets (1-based starts of bags).
-- per_sample_weights scale the rows (mode "sum"); padding_idx rows are left out (an empty
-- bag gives zeros).
function F.embedding_bag(input, weight, opts)
  local op = "embedding_bag"
  check(op, input)
  check(op, weight)
  opts = options(op, opts, BAG_OPTS)
  local mode = opts.mode or "mean"
  if mode ~= "sum" and mode ~= "mean" and mode ~= "max" then
    raise(op .. ": mode must be sum, mean or max, got " .. tostring(mode))
  end
  local idx, bag
  local flat = input:reshape(-1):long()
  local n = flat:numel()
  local B
  if input:dim() == 2 then
    if opts.offsets ~= nil then raise(op .. ": offsets go with a 1-D input, got shape " .. shape_str(input.shape)) end
    B = input:size(1)
    bag = dl.arange(1, B + 1, { dtype = "int64", device = input.device }):view(B, 1):expand(input.shape):reshape(-1)
  elseif input:dim() == 1 then
    local off = opts.offsets
    if off == nil then raise(op .. ": a 1-D input needs offsets (the start of each bag)") end
    if type(off) == "table" and not T.is_tensor(off) then off = dl.tensor(off, { dtype = "int64", device = input.device }) end
    check(op, off)
    B = off:numel()
    -- the bag of each position: how many offsets are at or before it
    local pos = dl.arange(1, n + 1, { dtype = "int64", device = input.device })
    bag = dl.searchsorted(off:long(), pos, { right = true }) - 1
    if n > 0 and bag:min():item() < 1 then raise(op .. ": the first offset must be 1") end
  else
    raise(op .. ": expected input of 1 (with offsets) or 2 dims, got shape " .. shape_str(input.shape))
  end
  if n > 0 and (flat:min():item() < 1 or flat:max():item() > weight:size(1)) then
    raise(op .. ": an index is out of range for the " .. weight:size(1) .. " embeddings (indices are 1-based)")
  end
  local rows = F0.embedding(flat, weight)
  local keep = nil
  if opts.padding_idx ~= nil then keep = flat:ne(opts.padding_idx) end
  local w = opts.per_sample_weights
  if w ~= nil then
    if mode ~= "sum" then raise(op .. ": per_sample_weights go with mode sum") end
    check(op, w)
    rows = rows * w:reshape(-1, 1)
  end
  local D = weight:size(2)
  if mode == "max" then
    local parts = {}
    for b = 1, B do
      local m = bag:eq(b)
      if keep then m = m:logical_and(keep) end
      local sel = m:nonzero():view(-1)
      parts[b] = sel:numel() > 0 and rows:index_select(1, sel):amax(1) or dl.zeros(D, { dtype = weight.dtype, device = weight.device })
    end
    return dl.stack(parts, 1)
  end
  if keep then rows = rows * keep:to(rows.dtype):view(-1, 1) end
  local out = dl.zeros(B, D, { dtype = rows.dtype, device = rows.device }):index_add(1, bag, rows)
  if mode == "mean" then
    local ones = keep and keep:to(rows.dtype) or dl.ones(n, { dtype = rows.dtype, device = rows.device })
    local count = dl.zeros(B, { dtype = rows.dtype, device = rows.device }):index_add(1, bag, ones)
    out = out / count:clamp(1):view(B, 1)
  end
  return out
end

-- nn.EmbeddingBag(n, d [, {mode = "mean", padding_idx}]): an embedding table (N(0, 1)),
-- forward(input [, {offsets, per_sample_weights}]).
local EmbeddingBag = Module:extend("EmbeddingBag")
L.EmbeddingBag = EmbeddingBag
function EmbeddingBag:init(n, d, opts)
  opts = options("EmbeddingBag", opts, { mode = true, padding_idx = true })
  self.num_embeddings, self.embedding_dim = int_arg("EmbeddingBag", n, "num_embeddings"),
    int_arg("EmbeddingBag", d, "embedding_dim")
  self.mode, self.padding_idx = opts.mode or "mean", opts.padding_idx
  self.weight = dl.Variable(dl.randn(n, d), "weight")
end
function EmbeddingBag:forward(input, opts)
  opts = options("EmbeddingBag", opts, { offsets = true, per_sample_weights = true })
  return F.embedding_bag(input, self.weight, { offsets = opts.offsets, per_sample_weights = opts.per_sample_weights,
                                               mode = self.mode, padding_idx = self.padding_idx })
end
function EmbeddingBag:extra_repr() return fmt("", self.num_embeddings, "", self.embedding_dim, "mode", self.mode) end

-- F.bilinear(x1, x2, weight (out, in1, in2) [, bias]): y_o = x1 W_o x2 + b_o;
-- nn.Bilinear(in1, in2, out [, {bias = true}]) with PyTorch's initialisation.
function F.bilinear(x1, x2, w, b)
  local op = "bilinear"
  check(op, x1)
  check(op, x2)
  check(op, w)
  if w:dim() ~= 3 or x1:size(-1) ~= w:size(2) or x2:size(-1) ~= w:size(3) then
    raise(op .. ": expected x1 (..., " .. (w:dim() == 3 and w:size(2) or "in1") .. "), x2 (..., in2) and a weight (out, in1, in2), got "
          .. shape_str(x1.shape) .. ", " .. shape_str(x2.shape) .. " and " .. shape_str(w.shape))
  end
  local y = dl.einsum("...i,oij,...j->...o", x1, w, x2)
  if b ~= nil then y = y + b end
  return y
end

local Bilinear = Module:extend("Bilinear")
L.Bilinear = Bilinear
function Bilinear:init(in1, in2, out, opts)
  opts = options("Bilinear", opts, { bias = true })
  self.in1_features, self.in2_features, self.out_features = int_arg("Bilinear", in1, "in1_features"),
    int_arg("Bilinear", in2, "in2_features"), int_arg("Bilinear", out, "out_features")
  local bound = 1 / math.sqrt(in1)
  self.weight = dl.Variable((dl.rand(out, in1, in2) * 2 - 1) * bound, "weight")
  if opts.bias ~= false then self.bias = dl.Variable((dl.rand(out) * 2 - 1) * bound, "bias") end
end
function Bilinear:forward(x1, x2) return F.bilinear(x1, x2, self.weight, self.bias) end
function Bilinear:extra_repr()
  return fmt("in1_features", self.in1_features, "in2_features", self.in2_features, "out_features", self.out_features,
             "bias", self.bias ~= nil)
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
