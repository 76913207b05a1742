-- dlua.nn.functional: the stateless forms of the layers and the losses, as
-- dl.nn.functional (PyTorch's torch.nn.functional); the losses are also in dl.nn.
--
--   local F = dl.nn.functional
--   local y = F.conv2d(x, w, b, {stride = 2, padding = 1})
--   local loss = dl.nn.cross_entropy(logits, labels)      -- labels 1-based, int64
--
-- The fused ops (conv2d, pools, dropout, batch_norm, embedding, cross_entropy) are the
-- engine's (bindings/capi.h, "neural networks"); they are recorded for gradients there.
-- A (h, w) pair is given as one number or a table {h, w}.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local hid = T.hid
core.own_source()

local C = core.C
local raise, raise_last, bad_arg, retry, options = core.raise, core.raise_last, core.bad_arg,
  require("dlua.lifetime").retry,
  core.options
local wrap, is_tensor, shape_str = T.wrap, T.is_tensor, T.shape_str
local result, value = T.result, T.value
local dl = T.dl
local type, tostring, pairs, ipairs, floor = type, tostring, pairs, ipairs, math.floor

local F = {}

local handles2 = T.handles2   -- fresh per call: Note [Values C writes back]

local function check_tensor(op, x)
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
end

-- An (h, w) pair of non-negative integers from a number or {h, w}.
local function pair(op, what, v, min)
  local h, w
  if type(v) == "number" then h, w = v, v
  elseif type(v) == "table" and #v == 2 then h, w = v[1], v[2]
  else raise(op .. ": " .. what .. " must be a number or a pair {h, w}, got " .. core.typename(v)) end
  if type(h) ~= "number" or type(w) ~= "number" or h ~= floor(h) or w ~= floor(w) or h < min or w < min then
    raise(op .. ": " .. what .. " must be integers >= " .. min .. ", got " .. tostring(h) .. ", " .. tostring(w))
  end
  return h, w
end
F._pair = pair   -- (internal: the layers read their sizes through it)

-- A convolution's groups: a positive integer (1 when absent).
local function groups_arg(op, groups)
  if groups == nil then return 1 end
  if type(groups) ~= "number" or groups ~= floor(groups) or groups < 1 then
    raise(op .. ": groups must be a positive integer, got " .. tostring(groups))
  end
  return groups
end

-- ---- convolution and pooling ------------------------------------------------------------------

local CONV_OPTS = { stride = true, padding = true, dilation = true, groups = true }

-- Padding "valid" (none) or "same" (output as large as the input; stride 1), or sizes:
-- the padding on both sides of each dim, and with "same" what an even (dilated) kernel
-- needs on the far side only (one more, at the end, as PyTorch's).
local function conv_padding(op, padding, kh, kw, dh, dw, sh, sw)
  if padding == nil or padding == "valid" then return 0, 0, 0, 0 end
  if padding == "same" then
    if sh ~= 1 or sw ~= 1 then raise(op .. ": padding \"same\" needs stride 1, got stride " .. sh .. ", " .. sw) end
    local eh, ew = dh * (kh - 1), dw * (kw - 1)
    return floor(eh / 2), floor(ew / 2), eh % 2, ew % 2
  end
  if type(padding) == "string" then
    raise(op .. ": padding must be sizes, \"same\" or \"valid\", got \"" .. padding .. "\"")
  end
  local ph, pw = pair(op, "padding", padding, 0)
  return ph, pw, 0, 0
end

-- conv2d(x, weight [, bias] [, {stride, padding, dilation, groups}]): x (N, C, H, W) or
-- (C, H, W), weight (O, C / groups, kH, kW).
function F.conv2d(x, w, b, opts)
  if type(b) == "table" and not is_tensor(b) then b, opts = nil, b end
  check_tensor("conv2d", x)
  check_tensor("conv2d", w)
  if b ~= nil then check_tensor("conv2d", b) end
  opts = options("conv2d", opts, CONV_OPTS)
  local sh, sw = pair("conv2d", "stride", opts.stride or 1, 1)
  local dh, dw = pair("conv2d", "dilation", opts.dilation or 1, 1)
  local groups = groups_arg("conv2d", opts.groups)
  local ws = w.shape
  local ph, pw, eh, ew = conv_padding("conv2d", opts.padding, ws[3] or 1, ws[4] or 1, dh, dw, sh, sw)
  if eh + ew > 0 then x = F.pad(x, { 0, ew, 0, eh }) end
  local bid = b and hid(b) or 0
  local id = C.dl_conv2d(hid(x), hid(w), bid, sh, sw, ph, pw, dh, dw, groups)
  if id == 0 and retry() then id = C.dl_conv2d(hid(x), hid(w), bid, sh, sw, ph, pw, dh, dw, groups) end
  return wrap(id)
end

-- (each pool its own options: count_include_pad given to a max pool is an error, not
-- dropped)
local MAX_POOL_OPTS = { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true }
local AVG_POOL_OPTS = { stride = true, padding = true, ceil_mode = true, count_include_pad = true,
                        divisor_override = true }
-- The maxima without their indices (the engine makes those only for a gradient).
local has_values_only = pcall(function() return C.dl_max_pool2d_values end)

-- max_pool2d(x, k [, {stride, padding, dilation, ceil_mode, return_indices}]): with
-- return_indices, also the 1-based position of each maximum within its (H, W) plane.
-- conv1d(x (N, C, L) or (C, L), w (O, C / groups, K) [, b (O)] [, {stride, padding,
-- dilation, groups}]): the 2-D convolution on a height of 1 (the same kernels and
-- gradients); padding a number or "same" / "valid", the sizes numbers or {n}.
local function single(op, what, v, min)
  if type(v) == "table" and #v == 1 then v = v[1] end
  if type(v) == "string" and what == "padding" then return v end
  if type(v) ~= "number" then raise(op .. ": " .. what .. " must be a number, got " .. core.typename(v)) end
  if v ~= floor(v) or v < min then raise(op .. ": " .. what .. " must be an integer >= " .. min .. ", got " .. v) end
  return v
end

function F.conv1d(x, w, b, opts)
  local op = "conv1d"
  if type(b) == "table" and not is_tensor(b) then b, opts = nil, b end
  check_tensor(op, x)
  check_tensor(op, w)
  if b ~= nil then check_tensor(op, b) end
  opts = options(op, opts, CONV_OPTS)
  if (x:dim() ~= 3 and x:dim() ~= 2) or w:dim() ~= 3 then
    raise(op .. ": expected input (N, C, L) or (C, L) and weight (O, C/groups, K), got shapes "
          .. shape_str(x.shape) .. " and " .. shape_str(w.shape))
  end
  local s = single(op, "stride", opts.stride or 1, 1)
  local d = single(op, "dilation", opts.dilation or 1, 1)
  local groups = groups_arg(op, opts.groups)
  local C, Lin, K = x:size(-2), x:size(-1), w:size(3)
  if C ~= w:size(2) * groups or w:size(1) % groups ~= 0 then
    raise(op .. ": input of shape " .. shape_str(x.shape) .. " and weight of shape " .. shape_str(w.shape)
          .. " do not match with groups = " .. groups .. " (C = weight's dim 2 x groups, O divisible by groups)")
  end
  local p, extra = single(op, "padding", opts.padding or 0, 0), 0
  if p == "valid" then p = 0
  elseif p == "same" then
    if s ~= 1 then raise(op .. ": padding \"same\" needs stride 1, got stride " .. s) end
    local span = d * (K - 1)
    p, extra = floor(span / 2), span % 2   -- (an even kernel's extra element at the end, as PyTorch's)
  elseif type(p) == "string" then
    raise(op .. ": padding must be a number, \"same\" or \"valid\", got \"" .. p .. "\"")
  end
  if Lin + 2 * p + extra < d * (K - 1) + 1 then
    raise(op .. ": the kernel of size " .. K .. " (dilation " .. d .. ") is longer than the padded input ("
          .. (Lin + 2 * p + extra) .. ") of an input of shape " .. shape_str(x.shape))
  end
  if extra > 0 then x = F.pad(x, { 0, extra }) end
  local y = F.conv2d(x:unsqueeze(x:dim()), w:unsqueeze(3), b,
                     { stride = { 1, s }, dilation = { 1, d }, padding = { 0, p }, groups = groups })
  return y:squeeze(y:dim() - 1)
end

local CONVT_OPTS = { stride = true, padding = true, output_padding = true, dilation = true, groups = true }

-- conv_transpose2d(x, weight [, bias] [, {stride, padding, output_padding, dilation,
-- groups}]): PyTorch's F.conv_transpose2d, the gradient of conv2d for its input (each
-- input pixel spreads the kernel over the output). x (N, C, H, W) or (C, H, W), weight
-- (C, O / groups, kH, kW); the output is (H - 1) stride - 2 padding + dilation (kH - 1) +
-- output_padding + 1 high (and as wide), output_padding smaller than the stride or the
-- dilation. (The engine's op takes it below the stride, where the output is conv2d's
-- input gradient for a conv2d of that output; past the stride, the unpadded output is
-- cropped and padded with zeros to the same rows, and the bias added.)
function F.conv_transpose2d(x, w, b, opts)
  local op = "conv_transpose2d"
  if type(b) == "table" and not is_tensor(b) then b, opts = nil, b end
  check_tensor(op, x)
  check_tensor(op, w)
  if b ~= nil then check_tensor(op, b) end
  opts = options(op, opts, CONVT_OPTS)
  local sh, sw = pair(op, "stride", opts.stride or 1, 1)
  local ph, pw = pair(op, "padding", opts.padding or 0, 0)
  local oh, ow = pair(op, "output_padding", opts.output_padding or 0, 0)
  local dh, dw = pair(op, "dilation", opts.dilation or 1, 1)
  local groups = groups_arg(op, opts.groups)
  if oh >= sh or ow >= sw then
    if oh >= math.max(sh, dh) or ow >= math.max(sw, dw) then
      raise(("%s: output_padding must be smaller than the stride or the dilation, got output_padding (%d, %d), "
             .. "stride (%d, %d) and dilation (%d, %d)"):format(op, oh, ow, sh, sw, dh, dw))
    end
    local y = F.conv_transpose2d(x, w, nil, { stride = { sh, sw }, dilation = { dh, dw }, groups = groups })
    y = F.pad(y, { -pw, ow - pw, -ph, oh - ph })
    if b == nil then return y end
    local o = y:size(y:dim() - 2)
    if b:dim() ~= 1 or b:numel() ~= o then
      raise(op .. ": expected a bias of shape (" .. o .. ",) for a weight of shape " .. shape_str(w.shape) .. ", got "
            .. shape_str(b.shape))
    end
    return y + b:view(o, 1, 1)
  end
  local bid = b and hid(b) or 0
  local id = C.dl_conv_transpose2d(hid(x), hid(w), bid, sh, sw, ph, pw, oh, ow, dh, dw, groups)
  if id == 0 and retry() then id = C.dl_conv_transpose2d(hid(x), hid(w), bid, sh, sw, ph, pw, oh, ow, dh, dw, groups) end
  return wrap(id)
end

-- conv_transpose1d(x (N, C, L) or (C, L), w (C, O / groups, K) [, b (O)] [, {stride,
-- padding, output_padding, dilation, groups}]): conv_transpose2d on a height of 1.
function F.conv_transpose1d(x, w, b, opts)
  local op = "conv_transpose1d"
  if type(b) == "table" and not is_tensor(b) then b, opts = nil, b end
  check_tensor(op, x)
  check_tensor(op, w)
  opts = options(op, opts, CONVT_OPTS)
  if (x:dim() ~= 3 and x:dim() ~= 2) or w:dim() ~= 3 then
    raise(op .. ": expected input (N, C, L) or (C, L) and weight (C, O/groups, K), got shapes "
          .. shape_str(x.shape) .. " and " .. shape_str(w.shape))
  end
  local function one(what, default, min)
    local v = opts[what]
    if v == nil then return default end
    if type(v) == "string" then raise(op .. ": " .. what .. " must be a number, got string") end
    return single(op, what, v, min)
  end
  local o2 = { stride = { 1, one("stride", 1, 1) }, padding = { 0, one("padding", 0, 0) },
               output_padding = { 0, one("output_padding", 0, 0) }, dilation = { 1, one("dilation", 1, 1) },
               groups = opts.groups }
  local y = F.conv_transpose2d(x:unsqueeze(x:dim()), w:unsqueeze(3), b, o2)
  return y:squeeze(y:dim() - 1)
end

-- pad(x, pad [, {mode = "constant", value = 0}]): PyTorch's F.pad. pad lists (before,
-- after) counts for the last dim, then the one before it, and so on; a negative count
-- crops. Modes: "constant", "reflect" (mirrored without the edge), "replicate" (the
-- edge repeated), "circular" (wrapped around). As PyTorch's, reflect and replicate pad
-- the uncropped dim and crop after (a reflection may reach into the cropped part),
-- circular wraps the cropped one. The result is a new tensor even where nothing is padded
-- (pad all zeros, or crops only), as PyTorch's: never x, nor a view of it.
local PAD_MODES = { constant = true, reflect = true, replicate = true, circular = true }
function F.pad(x, pad, opts)
  local op = "pad"
  check_tensor(op, x)
  opts = options(op, opts, { mode = true, value = true })
  local mode = opts.mode or "constant"
  if not PAD_MODES[mode] then raise(op .. ": mode must be constant, reflect, replicate or circular, got " .. tostring(mode)) end
  if mode ~= "constant" and opts.value ~= nil and opts.value ~= 0 then
    raise(op .. ": mode " .. mode .. " takes no value (it is for mode constant), got value " .. tostring(opts.value))
  end
  if type(pad) ~= "table" or #pad % 2 ~= 0 or #pad / 2 > x:dim() then
    raise(op .. ": pad must list (before, after) pairs for at most " .. x:dim() .. " dims, got " .. core.typename(pad))
  end
  local y, copied = x, false
  for k = 1, #pad / 2 do
    local d = y:dim() - k + 1
    local before, after = pad[2 * k - 1], pad[2 * k]
    if type(before) ~= "number" or type(after) ~= "number" or before ~= floor(before) or after ~= floor(after) then
      raise(op .. ": pad counts must be integers")
    end
    local size = y:size(d) + before + after
    if size < 0 or (size == 0 and mode ~= "constant") then
      raise(op .. ": padding (" .. before .. ", " .. after .. ") of dim " .. d .. " (size " .. y:size(d)
            .. ") would leave " .. (size < 0 and "a negative size " .. size or "it empty"))
    end
    local crop_before, crop_after = math.min(before, 0), math.min(after, 0)
    before, after = math.max(before, 0), math.max(after, 0)
    local function crop()
      if crop_before < 0 then y = y:narrow(d, 1 - crop_before, y:size(d) + crop_before) end
      if crop_after < 0 then y = y:narrow(d, 1, y:size(d) + crop_after) end
    end
    if mode == "circular" then crop() end
    local n = y:size(d)
    if mode ~= "constant" and (before > 0 or after > 0) then
      local most = mode == "reflect" and n - 1 or (mode == "circular" and n or math.huge)
      if n == 0 or before > most or after > most then
        raise(op .. ": " .. mode .. " padding of " .. math.max(before, after) .. " is too large for a dim of size " .. n)
      end
    end
    local parts = {}
    local function block(count, at_start)
      if count == 0 then return end
      local shape = y.shape
      shape[d] = count
      if mode == "constant" then
        parts[#parts + 1] = dl.full(shape, opts.value or 0, { dtype = y.dtype, device = y.device })
      elseif mode == "replicate" then
        parts[#parts + 1] = y:narrow(d, at_start and 1 or n, 1):expand(shape)
      elseif mode == "circular" then
        parts[#parts + 1] = at_start and y:narrow(d, n - count + 1, count) or y:narrow(d, 1, count)
      else   -- reflect: the elements next to the edge, mirrored
        local idx = at_start and dl.arange(count + 1, 1, -1, { dtype = "int64", device = y.device })
          or dl.arange(n - 1, n - count - 1, -1, { dtype = "int64", device = y.device })
        parts[#parts + 1] = y:index_select(d, idx)
      end
    end
    block(before, true)
    parts[#parts + 1] = y
    block(after, false)
    if #parts > 1 then y, copied = dl.cat(parts, d), true end
    if mode ~= "circular" then crop() end
  end
  if not copied then y = y:is_contiguous() and y:clone() or y:contiguous() end
  return y
end

-- An average pool's divisor_override: a non-zero integer, as PyTorch's.
local function divisor_arg(op, v)
  if not core.integer(v) or v == 0 then raise(op .. ": divisor_override must be a non-zero integer, got " .. tostring(v)) end
  return v
end
F._divisor_arg = divisor_arg

-- A pool's stride: 0 for the engine's default (the kernel's) when absent; a stride of 0
-- given is refused, as PyTorch's.
local function pool_stride(op, v)
  if v == nil then return 0, 0 end
  return pair(op, "stride", v, 1)
end

-- The windows of a pool along a dim of n (PyTorch's pooling_output_shape), and the
-- padding at its end that makes the last window fit exactly (negative: a crop).
local function pool_windows(n, k, s, p, d, ceil_mode)
  local span = n + 2 * p - d * (k - 1) - 1
  local out = (ceil_mode and math.ceil(span / s) or floor(span / s)) + 1
  if ceil_mode and (out - 1) * s >= n + p then out = out - 1 end   -- (the last starts inside)
  return out, (out - 1) * s + d * (k - 1) + 1 - n - p
end

-- A 2-D pool's windows (oh, ow) and end paddings, checked as the engine's kernels check,
-- for the pools made here of other ops (dilation, divisor_override).
local function pool_geometry(op, x, k, s, p, d, ceil_mode)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    raise(op .. ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape " .. shape_str(x.shape))
  end
  if p[1] > k[1] / 2 or p[2] > k[2] / 2 then
    raise(("%s: padding must be between 0 and half the kernel size, got padding (%d, %d) for kernel_size (%d, %d)")
          :format(op, p[1], p[2], k[1], k[2]))
  end
  local oh, eh = pool_windows(x:size(-2), k[1], s[1], p[1], d[1], ceil_mode)
  local ow, ew = pool_windows(x:size(-1), k[2], s[2], p[2], d[2], ceil_mode)
  if oh < 1 or ow < 1 then
    raise(("%s: the output size (%d, %d) is too small: kernel_size (%d, %d) with dilation (%d, %d) is larger than "
           .. "the padded input of an input of shape %s"):format(op, oh, ow, k[1], k[2], d[1], d[2], shape_str(x.shape)))
  end
  return oh, ow, eh, ew
end

-- A dilated max pool (the engine's kernel has no dilation): unfold's windows of x padded
-- with -inf (and at the end as far as ceil_mode's last window reads), their maxima (the
-- first of equal ones, as PyTorch's), and with indices the flat 1-based position of each
-- in its (H, W) plane.
local function dilated_max_pool2d(op, x, k, s, p, d, ceil_mode, with_indices)
  local oh, ow, eh, ew = pool_geometry(op, x, k, s, p, d, ceil_mode)
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  if not x:is_floating_point() then x = x:float() end   -- (as the engine's kernel)
  local N, C, W, K = x:size(1), x:size(2), x:size(4), k[1] * k[2]
  local padded = F.pad(x, { p[2], ew, p[1], eh }, { value = -math.huge })
  local cols = require("dlua.nn.spatial").functional.unfold(padded, k, { dilation = d, stride = s })
  local values, at = cols:reshape(N, C, K, oh * ow):max(3)
  local y, i = values:view(N, C, oh, ow), nil
  if with_indices then
    local o = { dtype = "int64", device = x.device }
    local pos = dl.arange(k[1], o):view(k[1], 1, 1, 1) * (d[1] * W) + dl.arange(k[2], o):view(1, k[2], 1, 1) * d[2]
      + dl.arange(oh, o):view(1, 1, oh, 1) * (s[1] * W) + dl.arange(ow, o):view(1, 1, 1, ow) * s[2]
      + (1 - p[1] * W - p[2])
    i = pos:view(1, 1, K, oh * ow):expand(N, C, K, oh * ow):gather(3, at:unsqueeze(3)):view(N, C, oh, ow)
    if unbatched then i = i:squeeze(1) end
  end
  if unbatched then y = y:squeeze(1) end
  return y, i
end

function F.max_pool2d(x, k, opts)
  check_tensor("max_pool2d", x)
  opts = options("max_pool2d", opts, MAX_POOL_OPTS)
  local kh, kw = pair("max_pool2d", "kernel size", k, 1)
  local sh, sw = pool_stride("max_pool2d", opts.stride)
  local ph, pw = pair("max_pool2d", "padding", opts.padding or 0, 0)
  local dh, dw = pair("max_pool2d", "dilation", opts.dilation or 1, 1)
  if dh ~= 1 or dw ~= 1 then
    local y, i = dilated_max_pool2d("max_pool2d", x, { kh, kw }, { sh > 0 and sh or kh, sw > 0 and sw or kw },
                                    { ph, pw }, { dh, dw }, opts.ceil_mode, opts.return_indices)
    if opts.return_indices then return y, i end
    return y
  end
  local ceil = opts.ceil_mode and 1 or 0
  if not opts.return_indices and has_values_only then
    local id = C.dl_max_pool2d_values(hid(x), kh, kw, sh, sw, ph, pw, ceil)
    if id == 0 and retry() then id = C.dl_max_pool2d_values(hid(x), kh, kw, sh, sw, ph, pw, ceil) end
    return wrap(id)
  end
  local out2 = handles2()
  local st = C.dl_max_pool2d(hid(x), kh, kw, sh, sw, ph, pw, ceil, out2)
  if st ~= 0 and retry() then st = C.dl_max_pool2d(hid(x), kh, kw, sh, sw, ph, pw, ceil, out2) end
  if st ~= 0 then raise_last() end
  local values, indices = out2[0], out2[1]
  if opts.return_indices then return wrap(values), wrap(indices) end
  C.dl_release_id(indices)
  return wrap(values)
end

-- avg_pool2d(x, k [, {stride, padding, ceil_mode, count_include_pad = true,
-- divisor_override}]): with divisor_override, each window's sum (padding adds zeros)
-- divided by it instead, as PyTorch's: the engine's mean over windows that fit the
-- input padded with zeros, times the window's size.
function F.avg_pool2d(x, k, opts)
  check_tensor("avg_pool2d", x)
  opts = options("avg_pool2d", opts, AVG_POOL_OPTS)
  local kh, kw = pair("avg_pool2d", "kernel size", k, 1)
  local sh, sw = pool_stride("avg_pool2d", opts.stride)
  local ph, pw = pair("avg_pool2d", "padding", opts.padding or 0, 0)
  if opts.divisor_override ~= nil then
    local div = divisor_arg("avg_pool2d", opts.divisor_override)
    local kk, ss = { kh, kw }, { sh > 0 and sh or kh, sw > 0 and sw or kw }
    local _, _, eh, ew = pool_geometry("avg_pool2d", x, kk, ss, { ph, pw }, { 1, 1 }, opts.ceil_mode)
    return F.avg_pool2d(F.pad(x, { pw, ew, ph, eh }), kk, { stride = ss }) * (kh * kw / div)
  end
  local ceil = opts.ceil_mode and 1 or 0
  local cip = opts.count_include_pad == false and 0 or 1
  local id = C.dl_avg_pool2d(hid(x), kh, kw, sh, sw, ph, pw, ceil, cip)
  if id == 0 and retry() then id = C.dl_avg_pool2d(hid(x), kh, kw, sh, sw, ph, pw, ceil, cip) end
  return wrap(id)
end

-- max_pool1d / avg_pool1d(x (N, C, L) or (C, L), k [, {stride, padding, ceil_mode,
-- dilation and return_indices (max) or count_include_pad and divisor_override (avg)}]):
-- the 2-D pools over a height of 1 (indices are then positions along L).
local function pool1d(op, pool2d, allowed)
  return function(x, k, opts)
    check_tensor(op, x)
    if x:dim() ~= 2 and x:dim() ~= 3 then
      raise(op .. ": expected input (N, C, L) or (C, L), got shape " .. shape_str(x.shape))
    end
    opts = options(op, opts, allowed)
    local o2 = {}
    for key, v in pairs(opts) do o2[key] = v end
    local kk = single(op, "kernel size", k, 1)
    o2.stride = { 1, single(op, "stride", opts.stride or kk, 1) }
    o2.padding = { 0, single(op, "padding", opts.padding or 0, 0) }
    if opts.dilation ~= nil then o2.dilation = { 1, single(op, "dilation", opts.dilation, 1) } end
    if opts.divisor_override ~= nil then divisor_arg(op, opts.divisor_override) end
    local y, i = pool2d(x:unsqueeze(x:dim()), { 1, kk }, o2)
    if i then return y:squeeze(y:dim() - 1), i:squeeze(i:dim() - 1) end
    return y:squeeze(y:dim() - 1)
  end
end
F.max_pool1d = pool1d("max_pool1d", F.max_pool2d, MAX_POOL_OPTS)
F.avg_pool1d = pool1d("avg_pool1d", F.avg_pool2d, AVG_POOL_OPTS)

-- The mean over H and W: (N, C, H, W) -> (N, C) (or (N, C, 1, 1) with keepdim).
function F.global_avg_pool2d(x, keepdim)
  check_tensor("global_avg_pool2d", x)
  return wrap(C.dl_global_avg_pool2d(hid(x), keepdim and 1 or 0))
end

-- ---- dropout, normalisation, embedding -------------------------------------------------------

function F.dropout(x, p, training)
  check_tensor("dropout", x)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or p < 0 or p > 1 then
    raise("dropout: probability must be between 0 and 1, got " .. tostring(p))
  end
  if training == nil then training = true end
  local id = C.dl_dropout(hid(x), p, training and 1 or 0)
  if id == 0 and retry() then id = C.dl_dropout(hid(x), p, training and 1 or 0) end
  return wrap(id)
end

-- batch_norm(x, running_mean, running_var [, weight, bias, training, momentum, eps]) in
-- PyTorch's argument order; the running statistics (or nil) are updated in place when
-- training.
function F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
  check_tensor("batch_norm", x)
  local function id_of(v, what)
    if v == nil then return 0 end
    if not is_tensor(v) then bad_arg("batch_norm", "a tensor for " .. what, v) end
    return hid(v)
  end
  local rmi, rvi, wi, bi = id_of(rm, "running_mean"), id_of(rv, "running_var"), id_of(w, "weight"), id_of(b, "bias")
  local tr = training and 1 or 0
  momentum = momentum == nil and 0.1 or momentum
  eps = eps == nil and 1e-5 or eps
  local id = C.dl_batch_norm(hid(x), wi, bi, rmi, rvi, tr, momentum, eps)
  if id == 0 and retry() then id = C.dl_batch_norm(hid(x), wi, bi, rmi, rvi, tr, momentum, eps) end
  return wrap(id)
end

-- layer_norm(x, normalized_shape [, weight, bias, eps = 1e-5]), PyTorch's: each row of x
-- over its last dims (normalized_shape: their sizes, or the last dim's size) normalised
-- to zero mean and unit variance, then times weight and plus bias (of normalized_shape).
function F.layer_norm(x, normalized_shape, weight, bias, eps)
  local op = "layer_norm"
  check_tensor(op, x)
  local ns = type(normalized_shape) == "number" and { normalized_shape } or normalized_shape
  if type(ns) ~= "table" or #ns == 0 then bad_arg(op, "the normalised shape (a number or a list)", normalized_shape) end
  local shape = x.shape
  local ok = #ns <= #shape
  for i = 1, #ns do ok = ok and shape[#shape - #ns + i] == ns[i] end
  if not ok then
    raise(op .. ": the normalised shape " .. shape_str(ns) .. " is not the end of the input's shape " .. shape_str(shape))
  end
  for _, t in ipairs({ weight or false, bias or false }) do
    if t and not is_tensor(t) then bad_arg(op, "a tensor for weight and bias", t) end
  end
  eps = eps == nil and 1e-5 or eps
  local wi, bi = weight and hid(weight) or 0, bias and hid(bias) or 0
  local id = C.dl_layer_norm(hid(x), #ns, wi, bi, eps)
  if id == 0 and retry() then id = C.dl_layer_norm(hid(x), #ns, wi, bi, eps) end
  return wrap(id)
end

-- lstm_gates(gates, c): an LSTM step's pointwise half in one op (its backward is one
-- too). gates (..., 4H): the pre-activations x W_ih^T + b_ih + h W_hh^T + b_hh in
-- PyTorch's gate order i, f, g, o; c (..., H): the cell state. Returns h' = o tanh(c')
-- and c' = f c + i g, with i, f, o sigmoids and g a tanh of their pre-activations.
function F.lstm_gates(gates, c)
  check_tensor("lstm_gates", gates)
  check_tensor("lstm_gates", c)
  return T.several(2, C.dl_lstm_gates, hid(gates), hid(c), handles2())
end

-- group_norm(x, num_groups [, weight, bias, eps = 1e-5]): x (N, C, ...) with its C
-- channels in num_groups groups, each group of each sample normalised over its channels
-- and the remaining dims, then times weight and plus bias (per channel, (C)).
function F.group_norm(x, num_groups, weight, bias, eps)
  local op = "group_norm"
  check_tensor(op, x)
  local shape = x.shape
  if #shape < 2 then raise(op .. ": expected an input (N, C, ...), got shape " .. shape_str(shape)) end
  local N, Cn = shape[1], shape[2]
  if type(num_groups) ~= "number" or num_groups < 1 or num_groups ~= floor(num_groups) or Cn % num_groups ~= 0 then
    raise(op .. ": num_groups must be a whole divisor of the " .. Cn .. " channels, got " .. tostring(num_groups))
  end
  local y = F.layer_norm(x:reshape(N, num_groups, -1), x:numel() / (N * num_groups), nil, nil, eps)
  y = y:reshape(shape)
  local per_channel = { Cn }
  for _ = 3, #shape do per_channel[#per_channel + 1] = 1 end
  if weight ~= nil then y = y * weight:reshape(per_channel) end
  if bias ~= nil then y = y + bias:reshape(per_channel) end
  return y
end

local function lookup(weight, indices, padding_idx)
  local id = C.dl_embedding(hid(weight), hid(indices), padding_idx)
  if id == 0 and retry() then id = C.dl_embedding(hid(weight), hid(indices), padding_idx) end
  return wrap(id)
end

-- embedding(indices, weight (V, D) [, padding_idx | {padding_idx, max_norm, norm_type =
-- 2}]): the rows of weight at 1-based integer indices of any shape; the padding_idx row
-- (1-based, or from the end if negative) gets no gradient. With max_norm, as PyTorch's,
-- the rows looked up are first renormalised in place (outside the gradient) to a
-- norm_type norm of at most max_norm.
function F.embedding(indices, weight, opts)
  local op = "embedding"
  check_tensor(op, indices)
  check_tensor(op, weight)
  if type(opts) == "number" then opts = { padding_idx = opts } end
  opts = options(op, opts, { padding_idx = true, max_norm = true, norm_type = true })
  local pad, V = opts.padding_idx, weight:size(1)
  if pad ~= nil then
    if type(pad) ~= "number" or pad ~= floor(pad) or pad == 0 or pad > V or pad < -V then
      raise(op .. ": padding_idx must be in 1.." .. V .. " or -" .. V .. "..-1, got " .. tostring(pad))
    end
    if pad < 0 then pad = V + 1 + pad end
  end
  local max_norm, p = opts.max_norm, opts.norm_type or 2
  if max_norm ~= nil then
    if type(max_norm) ~= "number" or max_norm < 0 then bad_arg(op, "a non-negative max_norm", max_norm) end
    if type(p) ~= "number" then bad_arg(op, "a number norm_type", p) end
    dl.no_grad(function()
      local at = dl.unique(indices:reshape(-1))
      local rows = lookup(weight, at, 0)
      local norm = dl.linalg.vector_norm(rows, p, 2, true)
      local scale = dl.where(norm:gt(max_norm), max_norm / (norm + 1e-7), dl.ones_like(norm))
      weight:index_copy_(1, at, rows * scale)
    end)
  end
  return lookup(weight, indices, pad or 0)
end

-- y = x W^T + b, W (out, in) as PyTorch's Linear.
function F.linear(x, w, b)
  local y = x:matmul(w:t())
  if b ~= nil then y = y + b end
  return y
end

-- ---- activations ------------------------------------------------------------------------------

F.relu, F.tanh, F.sigmoid = dl.relu, dl.tanh, dl.sigmoid

-- PyTorch refuses integer inputs to these (dl.softmax computes them in float32).
local function check_float(op, x)
  check_tensor(op, x)
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
end

function F.softmax(x, ...)
  check_float("softmax", x)
  return dl.softmax(x, ...)
end
function F.log_softmax(x, ...)
  check_float("log_softmax", x)
  return dl.log_softmax(x, ...)
end

-- leaky_relu(x [, negative_slope = 0.01 | {negative_slope}]).
function F.leaky_relu(x, slope)
  check_float("leaky_relu", x)
  if type(slope) == "table" then slope = options("leaky_relu", slope, { negative_slope = true }).negative_slope end
  if slope ~= nil and type(slope) ~= "number" then bad_arg("leaky_relu", "a number (negative_slope)", slope) end
  return dl.where(x:gt(0), x, x * (slope or 0.01))
end

-- gelu(x [, approximate = "none" | {approximate}]): x Phi(x), one fused op (its gradient
-- another); "tanh" is PyTorch's approximation 0.5 x (1 + tanh(z)), z = sqrt(2 / pi) (x +
-- 0.044715 x^3), taken as x sigmoid(2 z): the same, without 1 + tanh's cancellation below 0.
function F.gelu(x, approximate)
  if type(approximate) == "table" then
    approximate = options("gelu", approximate, { approximate = true }).approximate
  end
  if approximate == nil or approximate == "none" then return dl.gelu(x) end
  if approximate ~= "tanh" then
    raise("gelu: approximate must be \"none\" or \"tanh\", got " .. (type(approximate) == "string"
          and ("\"" .. approximate .. "\"") or core.typename(approximate)))
  end
  check_float("gelu", x)
  return x * dl.sigmoid((x + x * x * x * 0.044715) * math.sqrt(8 / math.pi))
end

-- softplus(x [, beta = 1, threshold = 20 | {beta, threshold}]): log(1 + e^(beta x)) / beta,
-- and x itself where beta x > threshold, as PyTorch's (value and gradient).
function F.softplus(x, beta, threshold)
  if type(beta) == "table" then
    local o = options("softplus", beta, { beta = true, threshold = true })
    beta, threshold = o.beta, o.threshold
  end
  for _, v in ipairs({ { "beta", beta }, { "threshold", threshold } }) do
    if v[2] ~= nil and type(v[2]) ~= "number" then bad_arg("softplus", "a number (" .. v[1] .. ")", v[2]) end
  end
  check_float("softplus", x)
  beta, threshold = beta or 1, threshold or 20
  if beta == 0 then raise("softplus: beta must not be 0") end
  local bx = beta == 1 and x or x * beta
  local soft = dl.softplus(bx)
  return dl.where(bx:gt(threshold), x, beta == 1 and soft or soft / beta)
end

function F.silu(x) return x * dl.sigmoid(x) end

-- ---- losses -------------------------------------------------------------------------------------

local REDUCTIONS = { none = 0, mean = 1, sum = 2 }
-- Every loss's options (each loss reads its own): the reduction, and the few that
-- PyTorch's losses take.
-- Each loss's options besides reduction (an option another loss takes is still unknown
-- here: a weight given to a loss without weights must not be dropped in silence).
local LOSS_OPTIONS = {}
for op, names in pairs({
  cross_entropy = { "ignore_index", "weight", "label_smoothing" }, nll_loss = { "ignore_index", "weight" },
  softmax_cross_entropy_with_logits = {}, mse_loss = {}, l1_loss = {}, soft_margin_loss = {},
  bce_with_logits = { "pos_weight", "weight" }, binary_cross_entropy = { "weight" },
  multilabel_soft_margin_loss = { "weight" }, smooth_l1_loss = { "beta" }, huber_loss = { "delta" },
  kl_div = { "log_target" }, cosine_embedding_loss = { "margin" }, margin_ranking_loss = { "margin" },
  hinge_embedding_loss = { "margin" }, triplet_margin_loss = { "margin", "p", "eps", "swap" },
  poisson_nll_loss = { "log_input", "full", "eps" }, gaussian_nll_loss = { "full", "eps" },
}) do
  local set = { reduction = true }
  for _, name in ipairs(names) do set[name] = true end
  LOSS_OPTIONS[op] = set
end

local function reduction_of(op, opts)
  local r = "mean"
  if opts ~= nil then
    if type(opts) == "string" then r = opts
    elseif type(opts) == "table" then
      local known = LOSS_OPTIONS[op]
      for k in pairs(opts) do
        if not known[k] then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
      end
      r = opts.reduction or "mean"
    else
      bad_arg(op, "an options table", opts)
    end
  end
  if REDUCTIONS[r] == nil and not (r == "batchmean" and op == "kl_div") then
    raise(op .. ": reduction must be \"mean\", \"sum\" or \"none\"" .. (op == "kl_div" and " or \"batchmean\"" or "")
          .. ", got " .. tostring(r))
  end
  return r
end

-- A loss option that must be a number (>= lo when given), or its default.
local function number_option(op, opts, key, default, lo)
  local v = type(opts) == "table" and opts[key] or nil
  if v == nil then return default end
  if type(v) ~= "number" or (lo and v < lo) then
    raise(op .. ": " .. key .. " must be a number" .. (lo and (" >= " .. lo) or "") .. ", got " .. tostring(v))
  end
  return v
end

local function reduce(loss, r)
  if r == "mean" then return loss:mean() end
  if r == "sum" then return loss:sum() end
  return loss
end

local function same_shape(op, a, b, what)
  local sa, sb = a.shape, b.shape
  local ok = #sa == #sb
  for i = 1, #sa do ok = ok and sa[i] == sb[i] end
  if not ok then
    raise(op .. ": " .. what .. " shapes " .. shape_str(sa) .. " and " .. shape_str(sb) .. " differ")
  end
end

-- cross_entropy with class weights or label smoothing e (in [0, 1]), PyTorch's: composed
-- from log_softmax and nll_loss, so its gradient is theirs. Smoothing mixes (1 - e) the
-- loss with e / C times the sum over classes of -w_c log softmax_c (w = 1 without
-- weights), 0 for an ignored label; its mean divides by the weights of the labels kept
-- (without weights, by their count), as nll_loss's.
-- A mean's num / den; where keep (the labels not ignored, or nil) holds none, NaN with a
-- gradient of 0 (not 0 / 0), as PyTorch's. (Kept labels whose weights sum to 0 give a NaN
-- gradient, as there.)
local function mean_over(num, den, keep)
  if keep == nil then return num / den end
  local none = keep:sum():eq(0)
  return dl.where(none, 0 / 0, num / dl.where(none, 1, den))
end

-- The class weights of a loss over C classes (nil when not given), as dtype.
local function class_weight(op, opts, C, dtype)
  local w = type(opts) == "table" and opts.weight or nil
  if w == nil then return nil end
  if not is_tensor(w) or w:dim() ~= 1 or w:size(1) ~= C then
    raise(op .. ": weight must be a (" .. C .. ") tensor, one per class, got "
          .. (is_tensor(w) and ("shape " .. shape_str(w.shape)) or core.typename(w)))
  end
  return w:to(dtype)
end

-- PyTorch's other input forms of a loss over classes, as its (N, C) form: (N, C, d1, ...)
-- with labels (N, d1, ...) becomes (N d1 ..., C) and (N d1 ...), the classes moved last;
-- unbatched (C) with a label of no dims, (1, C) and (1). Also returns the labels' shape,
-- which a per-label loss (reduction "none") takes back.
local function classes_last(op, input, labels, what)
  local d = input:dim()
  if d == 1 then
    if labels:dim() ~= 0 then
      raise(op .. ": expected a label of no dims for unbatched " .. what .. " " .. shape_str(input.shape)
            .. ", got shape " .. shape_str(labels.shape))
    end
    return input:unsqueeze(1), labels:reshape(1), labels.shape
  end
  local want = { input:size(1) }
  for i = 3, d do want[#want + 1] = input:size(i) end
  local got = labels.shape
  local ok = d >= 2 and #got == #want
  for i = 1, #want do ok = ok and got[i] == want[i] end
  if not ok then
    raise(op .. ": expected " .. what .. " (N, C), (C) or (N, C, d1, ...) and labels without the C, got shapes "
          .. shape_str(input.shape) .. " and " .. shape_str(got))
  end
  local perm = { 1 }
  for i = 3, d do perm[#perm + 1] = i end
  perm[#perm + 1] = 2
  return input:permute(perm):reshape(-1, input:size(2)), labels:reshape(-1), got
end

-- fn(input, labels, opts) on classes_last's (N, C) form, its per-label loss in labels' shape.
local function over_classes(op, fn, input, labels, opts, what)
  local r = reduction_of(op, opts)
  local x, y, shape = classes_last(op, input, labels, what)
  local loss = fn(x, y, opts)
  if r == "none" then loss = loss:reshape(shape) end
  return loss
end

local function label_smoothing(opts)
  local eps = type(opts) == "table" and opts.label_smoothing or 0
  if type(eps) ~= "number" or eps < 0 or eps > 1 then
    raise("cross_entropy: label_smoothing must be in [0, 1], got " .. tostring(eps))
  end
  return eps
end

-- cross_entropy with class weights or label smoothing e (in [0, 1]), PyTorch's: composed
-- from log_softmax and nll_loss, so its gradient is theirs. Smoothing mixes (1 - e) the
-- loss with e / C times the sum over classes of -w_c log softmax_c (w = 1 without
-- weights), 0 for an ignored label; its mean divides by the weights of the labels kept
-- (without weights, by their count), as nll_loss's.
local function composed_cross_entropy(logits, labels, opts, eps)
  local op = "cross_entropy"
  local r = reduction_of(op, opts)
  local ign = opts.ignore_index
  local w = class_weight(op, opts, logits:size(2), logits.dtype)
  local logp = dl.log_softmax(logits, 2)
  local nll = F.nll_loss(logp, labels, { reduction = r, ignore_index = ign, weight = w })
  if eps == 0 then return nll end
  local smooth = -(w ~= nil and logp * w or logp):sum(2)
  local keep = ign ~= nil and labels:ne(ign) or nil
  if keep then smooth = dl.where(keep, smooth, 0) end
  if r == "mean" then
    if w ~= nil then
      local kept = labels:long()
      if keep then kept = kept:masked_select(keep) end
      smooth = mean_over(smooth:sum(), w:gather(1, kept):sum(), keep)
    elseif keep then
      smooth = mean_over(smooth:sum(), keep:sum():to(logp.dtype), keep)
    else
      smooth = smooth:mean()
    end
  else
    smooth = reduce(smooth, r)
  end
  return nll * (1 - eps) + smooth * (eps / logits:size(2))
end

-- cross_entropy on probability targets t of the logits' shape (the classes along dim 2,
-- dim 1 when unbatched): -sum_c w_c t_c log softmax_c, with label smoothing e on t (1 - e)
-- + e / C; the mean is over the rows (the weights do not divide it), as PyTorch's.
local function probability_cross_entropy(logits, probs, opts)
  local op = "cross_entropy"
  local sl, sp = logits.shape, probs.shape
  local ok = #sl == #sp
  for i = 1, #sl do ok = ok and sl[i] == sp[i] end
  if not ok then
    raise(op .. ": expected integer class labels, or probability targets of the logits' shape " .. shape_str(sl)
          .. ", got " .. probs.dtype .. " labels of shape " .. shape_str(sp))
  end
  local r = reduction_of(op, opts)
  if type(opts) == "table" and opts.ignore_index ~= nil then
    raise(op .. ": ignore_index is not supported for probability targets (floating-point labels)")
  end
  if logits:dim() == 0 then raise(op .. ": expected logits (N, C, ...) or (C), got a scalar") end
  local cd = logits:dim() == 1 and 1 or 2
  local C_, eps = logits:size(cd), label_smoothing(opts)
  local t = eps ~= 0 and probs * (1 - eps) + eps / C_ or probs
  local logp = dl.log_softmax(logits, cd)
  local w = class_weight(op, opts, C_, logits.dtype)
  if w ~= nil then
    local shape = {}
    for i = 1, logits:dim() do shape[i] = i == cd and C_ or 1 end
    logp = logp * w:view(shape)
  end
  return reduce(-(logp * t):sum(cd), r)
end

-- cross_entropy(logits (N, C), labels (N) int64 1-based [, {reduction, ignore_index,
-- weight, label_smoothing}]). weight (C) weighs each class, the mean dividing by the
-- weights of the labels kept, as nll_loss; label_smoothing as composed_cross_entropy.
-- Also PyTorch's other forms: logits (N, C, d1, ...) with labels (N, d1, ...), unbatched
-- (C) with a label of no dims, and probability targets (floating-point, the logits' shape).
function F.cross_entropy(logits, labels, opts)
  check_tensor("cross_entropy", logits)
  check_tensor("cross_entropy", labels)
  if not logits:is_floating_point() then
    raise("cross_entropy: expected floating-point logits, got " .. logits.dtype)
  end
  if labels:is_floating_point() then return probability_cross_entropy(logits, labels, opts) end
  if logits:dim() ~= 2 then
    return over_classes("cross_entropy", F.cross_entropy, logits, labels, opts, "logits")
  end
  local eps = label_smoothing(opts)
  if eps ~= 0 or (type(opts) == "table" and opts.weight ~= nil) then
    return composed_cross_entropy(logits, labels, opts, eps)
  end
  local r = REDUCTIONS[reduction_of("cross_entropy", opts)]
  local ign = type(opts) == "table" and opts.ignore_index or nil
  local out = result()
  local st = C.dl_cross_entropy_value(logits, labels, r, ign and 1 or 0, ign or 0, out)
  if st < 0 and retry() then st = C.dl_cross_entropy_value(logits, labels, r, ign and 1 or 0, ign or 0, out) end
  return value(st, out)
end

-- TF's softmax_cross_entropy_with_logits(labels, logits): labels are probabilities
-- (one-hot rows) over the last dim; the per-row losses are averaged unless
-- {reduction = "none"} (TF's own result) or "sum".
function F.softmax_cross_entropy_with_logits(labels, logits, opts)
  check_tensor("softmax_cross_entropy_with_logits", labels)
  check_tensor("softmax_cross_entropy_with_logits", logits)
  same_shape("softmax_cross_entropy_with_logits", labels, logits, "labels and logits")
  local r = reduction_of("softmax_cross_entropy_with_logits", opts)
  local loss = -(labels * dl.log_softmax(logits, -1)):sum(-1)
  return reduce(loss, r)
end

function F.mse_loss(input, target, opts)
  check_tensor("mse_loss", input)
  if not is_tensor(target) and type(target) ~= "number" then bad_arg("mse_loss", "a target tensor", target) end
  if is_tensor(target) then same_shape("mse_loss", input, target, "input and target") end
  local d = input - target
  return reduce(d * d, reduction_of("mse_loss", opts))
end

-- Binary cross-entropy on logits, stable for any logit: softplus(x) - x y, whose
-- gradient sigmoid(x) - y is exact everywhere. With pos_weight (PyTorch's), the
-- positive term is weighted: (1 - y) softplus(x) + pw y softplus(-x) (no cancellation
-- between a large x and a large softplus). A weight (a
-- tensor that broadcasts, or a number) scales each element's loss. Also
-- F.binary_cross_entropy_with_logits, PyTorch's name.
function F.bce_with_logits(logits, targets, opts)
  check_tensor("bce_with_logits", logits)
  check_tensor("bce_with_logits", targets)
  same_shape("bce_with_logits", logits, targets, "logits and targets")
  local r = reduction_of("bce_with_logits", opts)
  local pw = type(opts) == "table" and opts.pos_weight or nil
  local loss
  if pw == nil then
    loss = dl.softplus(logits) - logits * targets
  else
    loss = (1 - targets) * dl.softplus(logits) + targets * pw * dl.softplus(-logits)
  end
  local w = type(opts) == "table" and opts.weight or nil
  if w ~= nil then
    if not is_tensor(w) and type(w) ~= "number" then bad_arg("bce_with_logits", "a weight tensor", w) end
    loss = loss * w
  end
  return reduce(loss, r)
end
F.binary_cross_entropy_with_logits = F.bce_with_logits

-- nll_loss(log_probs (N, C), labels (N) int64 1-based [, {reduction, ignore_index,
-- weight}]): -log_probs[i, labels[i]], weighted by weight[labels[i]] (a (C) tensor);
-- the mean divides by the weights' sum over the labels not ignored, as PyTorch's. Also
-- (N, C, d1, ...) with labels (N, d1, ...) and unbatched (C) with a label of no dims.
function F.nll_loss(log_probs, labels, opts)
  local op = "nll_loss"
  check_tensor(op, log_probs)
  check_tensor(op, labels)
  local r = reduction_of(op, opts)
  if log_probs:dim() ~= 2 and log_probs:dim() > 0 then
    return over_classes(op, F.nll_loss, log_probs, labels, opts, "log_probs")
  end
  if log_probs:dim() ~= 2 or labels:dim() ~= 1 or labels:size(1) ~= log_probs:size(1) then
    raise(op .. ": expected log_probs (N, C) and labels (N), got " .. shape_str(log_probs.shape) .. " and "
          .. shape_str(labels.shape))
  end
  local ign = type(opts) == "table" and opts.ignore_index or nil
  local w = class_weight(op, opts, log_probs:size(2), log_probs.dtype)
  local idx = labels:long()
  local keep = nil
  if ign ~= nil then
    keep = idx:ne(ign)
    idx = dl.where(keep, idx, 1)
  end
  local C_ = log_probs:size(2)
  if idx:numel() > 0 and (idx:min():item() < 1 or idx:max():item() > C_) then
    raise(op .. ": labels must be class numbers from 1 to " .. C_ .. " (or ignore_index)")
  end
  local loss = -log_probs:gather(2, idx:unsqueeze(2)):squeeze(2)
  local wt = w ~= nil and w:gather(1, idx) or nil
  if keep ~= nil then
    local k = keep:to(log_probs.dtype)
    wt = wt and wt * k or k
  end
  if wt ~= nil then loss = loss * wt end
  if r == "mean" then return wt and mean_over(loss:sum(), wt:sum(), keep) or loss:mean() end
  return reduce(loss, r)
end

-- The reduction of a loss of two tensors of one shape (`names` says which, in errors),
-- after checking them.
local function paired(op, a, b, opts, names)
  check_tensor(op, a)
  check_tensor(op, b)
  same_shape(op, a, b, names or "input and target")
  return reduction_of(op, opts)
end

-- The checked operands of an elementwise loss of input and target: its reduction,
-- the option `key` (a number >= 0, default 1) and |input - target|.
local function distance_loss(op, input, target, opts, key)
  return paired(op, input, target, opts), number_option(op, opts, key, 1, 0), (input - target):abs()
end

-- smooth_l1_loss(input, target [, {reduction, beta = 1}]): 0.5 d^2 / beta where
-- |d| < beta, else |d| - 0.5 beta (PyTorch's; beta = 0 is the L1 loss).
function F.smooth_l1_loss(input, target, opts)
  local r, beta, a = distance_loss("smooth_l1_loss", input, target, opts, "beta")
  if beta == 0 then return reduce(a, r) end
  return reduce(dl.where(a:lt(beta), a * a * (0.5 / beta), a - 0.5 * beta), r)
end

-- huber_loss(input, target [, {reduction, delta = 1}]): 0.5 d^2 where |d| <= delta,
-- else delta (|d| - 0.5 delta).
function F.huber_loss(input, target, opts)
  local r, delta, a = distance_loss("huber_loss", input, target, opts, "delta")
  if delta <= 0 then raise("huber_loss: delta must be > 0, got " .. delta) end
  return reduce(dl.where(a:le(delta), a * a * 0.5, (a - 0.5 * delta) * delta), r)
end

-- kl_div(input, target [, {reduction, log_target}]): PyTorch's: input holds
-- log-probabilities, target probabilities (log-probabilities with log_target);
-- pointwise target (log target - input), 0 where target is 0. reduction "batchmean"
-- divides the sum by the batch size (the KL divergence); "mean" by the element count.
function F.kl_div(input, target, opts)
  local op = "kl_div"
  local r = paired(op, input, target, opts)
  local lt = type(opts) == "table" and opts.log_target or false
  local loss
  if lt then
    loss = dl.exp(target) * (target - input)
  else
    local pos = target:gt(0)
    local safe = dl.where(pos, target, 1)
    loss = dl.where(pos, target * (dl.log(safe) - input), 0)
  end
  if r == "batchmean" then return loss:sum() / (input:dim() > 0 and input:size(1) or 1) end
  return reduce(loss, r)
end

-- cosine_embedding_loss(x1, x2, y [, {reduction, margin = 0}]): x1, x2 (N, D) or (D),
-- y of 1 or -1 per row: 1 - cos where y = 1, max(0, cos - margin) where y = -1 (0 for
-- any other y, as PyTorch's).
function F.cosine_embedding_loss(x1, x2, y, opts)
  local op = "cosine_embedding_loss"
  check_tensor(op, x1)
  check_tensor(op, x2)
  check_tensor(op, y)
  same_shape(op, x1, x2, "x1 and x2")
  local r = reduction_of(op, opts)
  local margin = number_option(op, opts, "margin", 0)
  local d = x1:dim()
  local eps = 1e-12   -- (PyTorch's EPSILON in its cosine_embedding_loss)
  local dot = (x1 * x2):sum(d)
  local n1, n2 = (x1 * x1):sum(d) + eps, (x2 * x2):sum(d) + eps
  local cos = dot / (n1 * n2):sqrt()
  local yy = y:to(x1.dtype)
  local loss = dl.where(yy:eq(1), 1 - cos, 0) + dl.where(yy:eq(-1), (cos - margin):clamp(0), 0)
  return reduce(loss, r)
end

-- l1_loss(input, target [, {reduction}]): |input - target|.
function F.l1_loss(input, target, opts)
  local r = paired("l1_loss", input, target, opts)
  return reduce((input - target):abs(), r)
end

-- binary_cross_entropy(probs, targets [, {reduction, weight}]): -(y log p + (1 - y)
-- log(1 - p)) with each log at least -100, as PyTorch's; probs must lie in [0, 1]. (On
-- logits, bce_with_logits is the stable form.) The gradient is PyTorch's (p - y) / max(p (1
-- - p), 1e-12): where p (1 - p) is below 1e-12 it is that slope, held constant (the logs'
-- own gradients are infinite at 0 and 1, and 0 below e^-100 where the clamp holds).
function F.binary_cross_entropy(probs, targets, opts)
  local op = "binary_cross_entropy"
  local r = paired(op, probs, targets, opts, "probs and targets")
  if probs:numel() > 0 and (probs:min():item() < 0 or probs:max():item() > 1) then
    raise(op .. ": probs must lie in [0, 1] (on logits, use bce_with_logits)")
  end
  local inside = (probs * (1 - probs)):gt(1e-12)
  local p = dl.where(inside, probs, 0.5)
  local loss = -(targets * p:log() + (1 - targets) * (1 - p):log())
  local q = probs:detach()
  local edge = -(targets * q:log():clamp(-100) + (1 - targets) * (1 - q):log():clamp(-100))
  loss = dl.where(inside, loss, edge + (q - targets) / (q * (1 - q)):clamp(1e-12) * (probs - q))
  local w = type(opts) == "table" and opts.weight or nil
  if w ~= nil then
    check_tensor(op, w)
    loss = loss * w
  end
  return reduce(loss, r)
end

-- normalize(x [, {p = 2, dim = 2, eps = 1e-12}]): x divided by its p-norm along dim (at
-- least eps), as PyTorch's F.normalize.
function F.normalize(x, opts)
  local op = "normalize"
  check_tensor(op, x)
  opts = options(op, opts, { p = true, dim = true, eps = true })
  local dim = opts.dim or (x:dim() >= 2 and 2 or 1)
  local norm = dl.linalg.vector_norm(x, opts.p or 2, dim, true)
  return x / norm:clamp(number_option(op, opts, "eps", 1e-12, 0))
end

-- cosine_similarity(a, b [, {dim = 2, eps = 1e-8}]): the cosine of the angle between a and
-- b along dim (broadcast), each norm at least eps.
function F.cosine_similarity(a, b, opts)
  local op = "cosine_similarity"
  check_tensor(op, a)
  check_tensor(op, b)
  opts = options(op, opts, { dim = true, eps = true })
  T.check_broadcast(op, a, b)
  local dim = opts.dim or (math.max(a:dim(), b:dim()) >= 2 and 2 or 1)
  local eps = number_option(op, opts, "eps", 1e-8, 0)
  local na = dl.linalg.vector_norm(a, 2, dim, true):clamp(eps)
  local nb = dl.linalg.vector_norm(b, 2, dim, true):clamp(eps)
  return ((a / na) * (b / nb)):sum(dim)
end

-- pairwise_distance(a, b [, {p = 2, eps = 1e-6, keepdim}]): the p-norm of a - b + eps over
-- the last dim (broadcast), as PyTorch's.
function F.pairwise_distance(a, b, opts)
  local op = "pairwise_distance"
  check_tensor(op, a)
  check_tensor(op, b)
  opts = options(op, opts, { p = true, eps = true, keepdim = true })
  T.check_broadcast(op, a, b)
  local eps = number_option(op, opts, "eps", 1e-6, 0)
  return dl.linalg.vector_norm(a - b + eps, opts.p or 2, -1, opts.keepdim and true or false)
end

-- margin_ranking_loss(x1, x2, y [, {reduction, margin = 0}]): max(0, -y (x1 - x2) + margin),
-- y 1 where x1 should rank higher, -1 where x2 should.
function F.margin_ranking_loss(x1, x2, y, opts)
  local op = "margin_ranking_loss"
  local r = paired(op, x1, x2, opts, "x1 and x2")
  check_tensor(op, y)
  local margin = number_option(op, opts, "margin", 0)
  return reduce((-y * (x1 - x2) + margin):clamp(0), r)
end

-- triplet_margin_loss(anchor, positive, negative [, {reduction, margin = 1, p = 2, eps =
-- 1e-6, swap = false}]): max(d(a, p) - d(a, n) + margin, 0) with d pairwise_distance; with
-- swap, d(a, n) is the smaller of it and d(p, n).
function F.triplet_margin_loss(anchor, positive, negative, opts)
  local op = "triplet_margin_loss"
  local r = paired(op, anchor, positive, opts, "anchor and positive")
  check_tensor(op, negative)
  if negative:dim() ~= anchor:dim() then
    raise(op .. ": anchor, positive and negative must have the same number of dims, got shapes "
          .. shape_str(anchor.shape) .. " and " .. shape_str(negative.shape))
  end
  T.check_broadcast(op, anchor, negative)
  local margin = number_option(op, opts, "margin", 1)
  local dist = { p = type(opts) == "table" and opts.p or 2, eps = number_option(op, opts, "eps", 1e-6, 0) }
  local dp, dn = F.pairwise_distance(anchor, positive, dist), F.pairwise_distance(anchor, negative, dist)
  if type(opts) == "table" and opts.swap then dn = dl.minimum(dn, F.pairwise_distance(positive, negative, dist)) end
  return reduce((dp - dn + margin):clamp(0), r)
end

-- poisson_nll_loss(input, target [, {reduction, log_input = true, full = false, eps =
-- 1e-8}]): e^input - target input (log_input), else input - target log(input + eps); full
-- adds Stirling's target log target - target + log(2 pi target) / 2 where target > 1.
function F.poisson_nll_loss(input, target, opts)
  local op = "poisson_nll_loss"
  local r = paired(op, input, target, opts, "input and target")
  local log_input = not (type(opts) == "table" and opts.log_input == false)
  local loss
  if log_input then loss = input:exp() - target * input
  else loss = input - target * (input + number_option(op, opts, "eps", 1e-8, 0)):log() end
  if type(opts) == "table" and opts.full then
    local stirling = target * target:log() - target + (target * (2 * math.pi)):log() * 0.5
    loss = loss + dl.where(target:gt(1), stirling, 0)
  end
  return reduce(loss, r)
end

-- gaussian_nll_loss(input, target, var [, {reduction, full = false, eps = 1e-6}]): (log v +
-- (input - target)^2 / v) / 2 with v = var at least eps (the floor passes var's gradient
-- through, as PyTorch's in-place clamp); full adds log(2 pi) / 2. var has input's shape,
-- or one variance per row: input's shape without its last dim, or with a last dim of 1.
function F.gaussian_nll_loss(input, target, var, opts)
  local op = "gaussian_nll_loss"
  check_tensor(op, input)
  check_tensor(op, target)
  check_tensor(op, var)
  local r = reduction_of(op, opts)
  local eps = number_option(op, opts, "eps", 1e-6, 0)
  local si, sv = input.shape, var.shape
  local same = #si == #sv
  for i = 1, #si do same = same and si[i] == sv[i] end
  if not same then
    local ok = #sv == #si - 1   -- (PyTorch's three cases, in its order)
    for i = 1, #sv do ok = ok and sv[i] == si[i] end
    if ok then
      var = var:unsqueeze(-1)
    else
      ok = #sv == #si and #si > 0 and sv[#sv] == 1
      for i = 1, #si - 1 do ok = ok and sv[i] == si[i] end
      if not ok then
        raise(op .. ": var is of incorrect size: expected " .. shape_str(si)
              .. ", that without its last dim, or with a last dim of 1, got " .. shape_str(sv))
      end
    end
  end
  if var:numel() > 0 and var:min():item() < 0 then raise(op .. ": var has negative entries") end
  local v = var + (var:clamp(eps) - var):detach()
  local loss = (v:log() + (input - target) ^ 2 / v) * 0.5
  if type(opts) == "table" and opts.full then loss = loss + 0.5 * math.log(2 * math.pi) end
  return reduce(loss, r)
end

-- soft_margin_loss(input, y [, {reduction}]): log(1 + e^(-y input)), y 1 or -1.
function F.soft_margin_loss(input, y, opts)
  local r = paired("soft_margin_loss", input, y, opts, "input and y")
  return reduce(dl.softplus(-(y * input)), r)
end

-- multilabel_soft_margin_loss(input (N, C), y (N, C) of 0 and 1 [, {reduction, weight}]):
-- -(y log sigmoid(x) + (1 - y) log sigmoid(-x)), weighted per class, averaged over the
-- classes of each row.
function F.multilabel_soft_margin_loss(input, y, opts)
  local op = "multilabel_soft_margin_loss"
  local r = paired(op, input, y, opts, "input and y")
  local loss = -(y * -dl.softplus(-input) + (1 - y) * -dl.softplus(input))
  local w = type(opts) == "table" and opts.weight or nil
  if w ~= nil then
    check_tensor(op, w)
    loss = loss * w
  end
  return reduce(loss:mean(-1), r)
end

-- hinge_embedding_loss(input, y [, {reduction, margin = 1}]): input where y = 1,
-- max(0, margin - input) where y = -1; as PyTorch's, any other y takes both terms.
function F.hinge_embedding_loss(input, y, opts)
  local op = "hinge_embedding_loss"
  local r = paired(op, input, y, opts, "input and y")
  local margin = number_option(op, opts, "margin", 1)
  local loss = dl.where(y:ne(-1), input, 0) + dl.where(y:ne(1), (margin - input):clamp(0), 0)
  return reduce(loss, r)
end

-- The per-class probabilities of one-hot rows: labels (N) 1-based -> (N, C) float.
function F.one_hot(labels, num_classes, dtype)
  check_tensor("one_hot", labels)
  if type(num_classes) ~= "number" then bad_arg("one_hot", "the number of classes", num_classes) end
  local shape = labels.shape
  shape[#shape + 1] = num_classes
  local out = dl.zeros(shape, { dtype = dtype or "float32", device = labels.device })
  local idx = labels:long():unsqueeze(-1)
  return out:scatter_add(-1, idx, dl.ones(idx.shape, { dtype = dtype or "float32", device = labels.device }))
end

return F
