-- dlua.nn.resample: resizing images and sequences, as PyTorch's (loaded when first used):
--
--   F.interpolate(x, {size = {h, w} | scale_factor = s, mode = "nearest", align_corners = false})
--   nn.Upsample({size =, scale_factor =, mode =, align_corners =})
--   F.adaptive_avg_pool2d(x, {h, w} | n), nn.AdaptiveAvgPool2d(...); F.adaptive_avg_pool1d(x, n);
--   F.adaptive_avg_pool3d(x, {d, h, w} | n), nn.AdaptiveAvgPool3d(...)
--   F.affine_grid(theta, size [, align_corners]), F.grid_sample(x, grid [, {mode,
--   padding_mode, align_corners}])   sampling at coordinates (spatial transformers)
--
-- x is (N, C, L), (N, C, H, W) or (N, C, D, H, W). Modes: "nearest" (PyTorch's legacy
-- nearest: source floor(dst scale)), "nearest-exact" (floor((dst + 1/2) scale)),
-- "linear" (3-D), "bilinear" and "bicubic" (4-D; Keys' cubic, A = -0.75, the edge
-- repeated), "trilinear" (5-D; each dim in turn, as separable as PyTorch's), each with
-- align_corners, and "area" (the adaptive average pool to the output size). Each output
-- index and weight is computed as PyTorch's kernels compute it, in float for float32 and
-- half tensors and in double for float64 (scale = 1 / scale_factor when one is given,
-- in / out otherwise), so the sources picked are the same: a scale_factor of 1.09 on 5
-- elements picks 0, 0, 1, 2, 3, as PyTorch's, and the linear modes (not bicubic) leave a
-- dim whose size is kept as it is. The resizing itself is made of index_select, products
-- and sums (and an adaptive pool of products with averaging matrices), so gradients,
-- dl.compile, dl.vmap and dl.export follow.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
core.own_source()

local raise, bad_arg, options, typename = core.raise, core.bad_arg, core.options, core.typename
local is_tensor, shape_str = T.is_tensor, T.shape_str
local dl = T.dl
local type, tostring, floor, ceil, min = type, tostring, math.floor, math.ceil, math.min
local fmt = Module.format_args

local F, L = {}, {}

-- Rounding to float32, for the index arithmetic of float tensors.
local f32cell = ffi.new("float[1]")
local function f32(v)
  f32cell[0] = v
  return f32cell[0]
end
local function exact(v) return v end

-- The source position of output index dst along a dim of `n_in` -> `n_out` (PyTorch's
-- area_pixel_compute_source_index and nearest_idx), `r` rounding to the compute type.
local function scale_of(r, n_in, n_out, factor, align_corners)
  if align_corners then return n_out > 1 and r(r(n_in - 1) / r(n_out - 1)) or 0 end
  if factor then return r(1 / factor) end
  return r(r(n_in) / r(n_out))
end

-- Keys' cubic convolution weights of the four taps around a source position t past its
-- floor (PyTorch's get_cubic_upsample_coefficients, A = -0.75), each step rounded by r.
local CUBIC_A = -0.75
local function near_weight(r, x)   -- |x| <= 1
  return r(r(r(r(r((CUBIC_A + 2) * x) - (CUBIC_A + 3)) * x) * x) + 1)
end
local function far_weight(r, x)    -- 1 <= |x| <= 2
  return r(r(r(r(r(r(CUBIC_A * x) - 5 * CUBIC_A) * x) + 8 * CUBIC_A) * x) - 4 * CUBIC_A)
end

-- The four taps' weights for distances t (a number or a tensor) past the floor.
local function cubic_weights(t, r)
  r = r or exact
  local t2 = r(1 - t)
  return { far_weight(r, r(t + 1)), near_weight(r, t), near_weight(r, t2), far_weight(r, r(t2 + 1)) }
end

-- The bicubic plan: four taps from floor(src) - 1 to floor(src) + 2, each clamped into the
-- input (its edge repeated); the source is not clamped at 0 as the linear modes' is.
local function cubic_plan(r, n_in, n_out, s, align_corners, dtype, device)
  local idx, w = { {}, {}, {}, {} }, { {}, {}, {}, {} }
  for d = 0, n_out - 1 do
    local src = align_corners and r(s * d) or r(r(s * r(d + 0.5)) - 0.5)
    local lo = min(floor(src), n_in - 1)
    local ws = cubic_weights(min(math.max(r(src - lo), 0), 1), r)
    for k = 1, 4 do
      idx[k][d + 1] = math.max(0, min(lo + k - 2, n_in - 1)) + 1
      w[k][d + 1] = ws[k]
    end
  end
  local ints, reals = { dtype = "int64", device = device }, { dtype = dtype, device = device }
  for k = 1, 4 do idx[k], w[k] = dl.tensor(idx[k], ints), dl.tensor(w[k], reals) end
  return idx, w
end

-- (index tensors, weight tensors) along one dim for mode `mode`: out[i] = sum over k of
-- x[idx[k][i]] w[k][i] (one term for the nearest modes).
local function plan(mode, r, n_in, n_out, factor, align_corners, dtype, device)
  local i0, i1, w0, w1 = {}, {}, {}, {}
  if mode == "nearest" or mode == "nearest-exact" then
    local s = scale_of(r, n_in, n_out, factor, false)
    for d = 0, n_out - 1 do
      local src
      if mode == "nearest" then src = min(floor(r(d * s)), n_in - 1)
      else src = min(floor(r(r(d + 0.5) * s)), n_in - 1) end
      i0[d + 1] = src + 1
    end
    return { dl.tensor(i0, { dtype = "int64", device = device }) }, nil
  end
  local s = scale_of(r, n_in, n_out, factor, align_corners)
  if mode == "bicubic" then return cubic_plan(r, n_in, n_out, s, align_corners, dtype, device) end
  for d = 0, n_out - 1 do
    local src = align_corners and r(s * d) or r(r(s * r(d + 0.5)) - 0.5)
    if src < 0 then src = 0 end
    local lo = floor(src)
    local hi = lo < n_in - 1 and lo + 1 or lo
    local l1 = r(src - lo)
    i0[d + 1], i1[d + 1], w0[d + 1], w1[d + 1] = lo + 1, hi + 1, r(1 - l1), l1
  end
  local ints, reals = { dtype = "int64", device = device }, { dtype = dtype, device = device }
  return { dl.tensor(i0, ints), dl.tensor(i1, ints) }, { dl.tensor(w0, reals), dl.tensor(w1, reals) }
end

-- x resized along dim d (of x:dim() dims) by a plan.
local function along(x, d, idx, w)
  if not w then return x:index_select(d, idx[1]) end
  local shape = { idx[1]:numel() }
  for _ = d + 1, x:dim() do shape[#shape + 1] = 1 end
  local y = x:index_select(d, idx[1]) * w[1]:view(shape)
  for k = 2, #idx do y = y + x:index_select(d, idx[k]) * w[k]:view(shape) end
  return y
end

-- Each mode's spatial dims (0: any), and whether align_corners applies.
local MODES = { nearest = 0, ["nearest-exact"] = 0, area = 0, linear = 1, bilinear = 2, bicubic = 2, trilinear = 3 }
local LINEAR = { linear = true, bilinear = true, trilinear = true }
local ALIGNED = { linear = true, bilinear = true, bicubic = true, trilinear = true }
local MODE_NAMES = "nearest, nearest-exact, linear, bilinear, bicubic, trilinear or area"
local SHAPES = { "(N, C, L)", "(N, C, H, W)", "(N, C, D, H, W)" }

-- Sizes per spatial dim (a number or a list), each an integer >= 1.
local function per_dim(op, what, v, n, integer)
  local out = {}
  if type(v) == "number" then
    for i = 1, n do out[i] = v end
  elseif type(v) == "table" and #v == n then
    for i = 1, n do out[i] = v[i] end
  else
    raise(op .. ": " .. what .. " must be a number or a list of " .. n .. ", got " .. typename(v))
  end
  for i = 1, n do
    local e = out[i]
    if type(e) ~= "number" or e <= 0 or e == math.huge or (integer and e ~= floor(e)) then
      raise(op .. ": " .. what .. " must be " .. (integer and "integers >= 1" or "positive numbers") .. ", got "
            .. tostring(e))
    end
  end
  return out
end

local adaptive   -- (op, x, size, spatial): the adaptive average pool, below

local INTERPOLATE_OPTS = { size = true, scale_factor = true, mode = true, align_corners = true }

function F.interpolate(x, opts)
  local op = "interpolate"
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
  opts = options(op, opts, INTERPOLATE_OPTS)
  local mode = opts.mode or "nearest"
  if MODES[mode] == nil then raise(op .. ": mode must be " .. MODE_NAMES .. ", got " .. tostring(mode)) end
  local nd = x:dim()
  if nd < 3 or nd > 5 then
    raise(op .. ": expected input (N, C, L), (N, C, H, W) or (N, C, D, H, W), got shape " .. shape_str(x))
  end
  local spatial = nd - 2
  if MODES[mode] > 0 and MODES[mode] ~= spatial then
    raise(op .. ": mode " .. mode .. " takes " .. SHAPES[MODES[mode]] .. " input, got shape " .. shape_str(x))
  end
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
  local align = opts.align_corners
  if align ~= nil and not ALIGNED[mode] then raise(op .. ": align_corners is only for the linear and bicubic modes") end
  if (opts.size == nil) == (opts.scale_factor == nil) then raise(op .. ": give one of size and scale_factor") end
  local sizes, factors = {}, nil
  if opts.size ~= nil then
    sizes = per_dim(op, "size", opts.size, spatial, true)
  else
    factors = per_dim(op, "scale_factor", opts.scale_factor, spatial, false)
    for i = 1, spatial do sizes[i] = floor(x:size(2 + i) * factors[i]) end
  end
  for i = 1, spatial do   -- (the index lists are Lua tables: a size is kept reasonable)
    if sizes[i] < 1 or sizes[i] > 2 ^ 24 then
      raise(op .. ": the output size " .. sizes[i] .. " of dim " .. (2 + i) .. " must lie in 1.." .. 2 ^ 24)
    end
  end
  -- "area" is the adaptive average pool to the output size (PyTorch's, whatever the scale)
  if mode == "area" then return adaptive("interpolate", x, sizes, spatial) end
  local r = x.dtype == "float64" and exact or f32
  local y = x
  for i = spatial, 1, -1 do
    local d = 2 + i
    -- (PyTorch's linear kernels leave a dim whose size is kept as it is, whatever the scale)
    if not LINEAR[mode] or sizes[i] ~= x:size(d) then
      local idx, w = plan(mode, r, x:size(d), sizes[i], factors and factors[i], align and true or false, x.dtype,
                          x.device)
      y = along(y, d, idx, w)
    end
  end
  if rawequal(y, x) then return x:clone() end   -- (a result of its own, as PyTorch's)
  return y
end

-- The averaging matrix (n_out, n_in) of an adaptive pool: row i averages the inputs from
-- floor(i n_in / n_out) to ceil((i + 1) n_in / n_out), exclusive.
local function averaging(n_in, n_out, dtype, device)
  local lo, hi = {}, {}
  for i = 0, n_out - 1 do lo[i + 1], hi[i + 1] = floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out) end
  local o = { dtype = dtype, device = device }
  local starts, ends = dl.tensor(lo, o):view(n_out, 1), dl.tensor(hi, o):view(n_out, 1)
  local j = dl.arange(n_in, o):view(1, n_in)
  local inside = j:ge(starts):logical_and(j:lt(ends))
  return dl.where(inside, 1 / (ends - starts), 0)
end

function adaptive(op, x, size, spatial)
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
  if x:dim() ~= spatial + 1 and x:dim() ~= spatial + 2 then
    raise(op .. ": expected input " .. SHAPES[spatial] .. " or " .. SHAPES[spatial]:gsub("N, ", "")
          .. ", got shape " .. shape_str(x))
  end
  if not x:is_floating_point() then raise(op .. ": expected a floating-point tensor, got " .. x.dtype) end
  local list = {}
  if type(size) == "table" then
    for i = 1, spatial do list[i] = size[i] == nil and x:size(x:dim() - spatial + i) or size[i] end
  else
    list = per_dim(op, "output size", size, spatial, true)
  end
  list = per_dim(op, "output size", list, spatial, true)
  local y = x
  for i = 1, spatial do
    local d = x:dim() - spatial + i
    local n_in = x:size(d)
    if n_in == 0 then raise(op .. ": input of shape " .. shape_str(x) .. " is empty along dim " .. d) end
    if list[i] ~= n_in then
      local P = averaging(n_in, list[i], x.dtype, x.device)
      y = y:transpose(d, y:dim()):matmul(P:t()):transpose(d, y:dim())
    end
  end
  return y
end

function F.adaptive_avg_pool3d(x, size) return adaptive("adaptive_avg_pool3d", x, size, 3) end
function F.adaptive_avg_pool2d(x, size) return adaptive("adaptive_avg_pool2d", x, size, 2) end
function F.adaptive_avg_pool1d(x, size) return adaptive("adaptive_avg_pool1d", x, size, 1) end

-- ---- sampling at coordinates ------------------------------------------------------------------

-- F.affine_grid(theta (N, 2, 3), size {N, C, H, W} [, align_corners = false]): the sampling
-- grid (N, H, W, 2) of the affine maps theta, in [-1, 1] coordinates (x, y), as PyTorch's.
function F.affine_grid(theta, size, align_corners)
  local op = "affine_grid"
  if not is_tensor(theta) then bad_arg(op, "a tensor", theta) end
  if type(size) ~= "table" or #size ~= 4 then bad_arg(op, "a size {N, C, H, W}", size) end
  local N, H, W = size[1], size[3], size[4]
  if theta:dim() ~= 3 or theta:size(1) ~= N or theta:size(2) ~= 2 or theta:size(3) ~= 3 then
    raise(op .. ": expected theta of shape (" .. N .. ", 2, 3), got " .. shape_str(theta.shape))
  end
  local o = { dtype = theta.dtype, device = theta.device }
  local function axis(n)   -- the n centres in [-1, 1]
    if n == 1 then return dl.zeros(1, o) end
    local v = dl.linspace(-1, 1, n, o)
    if not align_corners then v = v * ((n - 1) / n) end
    return v
  end
  local xs = axis(W):view(1, W, 1):expand(H, W, 1)
  local ys = axis(H):view(H, 1, 1):expand(H, W, 1)
  local base = dl.cat({ xs, ys, dl.ones(H, W, 1, o) }, 3):reshape(1, H * W, 3)
  return base:matmul(theta:transpose(2, 3)):reshape(N, H, W, 2)
end

-- Source pixel coordinates of grid values g in [-1, 1] along a dim of n pixels.
local function unnormalized(g, n, align_corners)
  if align_corners then return (g + 1) * ((n - 1) / 2) end
  return ((g + 1) * n - 1) / 2
end

-- Coordinates reflected into [lo2 / 2, hi2 / 2] (PyTorch's reflect_coordinates).
local function reflected(c, lo2, hi2)
  if lo2 == hi2 then return c * 0 end
  local lo, span = lo2 / 2, (hi2 - lo2) / 2
  local a = (c - lo):abs()
  local extra = dl.fmod(a, span)
  local flips = (a / span):floor()
  return dl.where(dl.fmod(flips, 2):eq(0), extra + lo, (extra * -1) + (span + lo))
end

-- A pixel coordinate c along a dim of n pixels moved in by a padding mode (PyTorch's
-- compute_coordinates): clipped to the edge ("border"), reflected, or kept ("zeros").
local function padded(c, n, align_corners, padding)
  if padding == "border" then return c:clamp(0, n - 1) end
  if padding == "reflection" then
    c = align_corners and reflected(c, 0, 2 * (n - 1)) or reflected(c, -1, 2 * n - 1)
    return c:clamp(0, n - 1)
  end
  return c
end

local GRID_OPTS = { mode = true, padding_mode = true, align_corners = true }

-- F.grid_sample(x (N, C, H, W), grid (N, Ho, Wo, 2) [, {mode = "bilinear" | "nearest" |
-- "bicubic", padding_mode = "zeros" | "border" | "reflection", align_corners = false}]): x
-- sampled at the grid's (x, y) points in [-1, 1], as PyTorch's; differentiable for x and
-- grid.
function F.grid_sample(x, grid, opts)
  local op = "grid_sample"
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
  if not is_tensor(grid) then bad_arg(op, "a grid tensor", grid) end
  opts = options(op, opts, GRID_OPTS)
  local mode, padding = opts.mode or "bilinear", opts.padding_mode or "zeros"
  if mode ~= "bilinear" and mode ~= "nearest" and mode ~= "bicubic" then
    raise(op .. ": mode must be bilinear, nearest or bicubic, got " .. tostring(mode))
  end
  if padding ~= "zeros" and padding ~= "border" and padding ~= "reflection" then
    raise(op .. ": padding_mode must be zeros, border or reflection, got " .. tostring(padding))
  end
  if x:dim() ~= 4 or grid:dim() ~= 4 or grid:size(4) ~= 2 or grid:size(1) ~= x:size(1) then
    raise(op .. ": expected x (N, C, H, W) and grid (N, Ho, Wo, 2), got shapes " .. shape_str(x.shape) .. " and "
          .. shape_str(grid.shape))
  end
  local N, C, H, W = x:size(1), x:size(2), x:size(3), x:size(4)
  local Ho, Wo = grid:size(2), grid:size(3)
  local align = opts.align_corners == true
  -- the sampling points in pixels, before the padding mode moves them
  local ux = unnormalized(grid:select(4, 1):reshape(N, 1, Ho * Wo), W, align)
  local uy = unnormalized(grid:select(4, 2):reshape(N, 1, Ho * Wo), H, align)
  local flat = x:reshape(N, C, H * W)
  -- the value at integer pixel (px, py) times w, 0 where that pixel is outside x
  local function tap(px, py, w)
    local inside = px:ge(0):logical_and(px:le(W - 1)):logical_and(py:ge(0)):logical_and(py:le(H - 1))
    local at = (py:clamp(0, H - 1) * W + px:clamp(0, W - 1)):long() + 1
    local v = flat:gather(3, at:expand(N, C, Ho * Wo))
    return v * dl.where(inside, w, 0)
  end
  local y
  if mode == "bicubic" then
    -- sixteen taps around the point, each moved in by the padding mode on its own (the
    -- point itself is not), weighted by the cubic convolution of its distance
    local x0, y0 = ux:detach():floor(), uy:detach():floor()
    local wx, wy = cubic_weights(ux - x0), cubic_weights(uy - y0)
    for j = 1, 4 do
      local py = padded(y0 + (j - 2), H, align, padding)
      for i = 1, 4 do
        local t = tap(padded(x0 + (i - 2), W, align, padding), py, wx[i] * wy[j])
        y = y and y + t or t
      end
    end
  elseif mode == "nearest" then
    local ix, iy = padded(ux, W, align, padding), padded(uy, H, align, padding)
    local px, py = ix:detach():round(), iy:detach():round()   -- (half to even, as nearbyint)
    y = tap(px, py, dl.ones({}, { dtype = x.dtype, device = x.device }))
  else
    local ix, iy = padded(ux, W, align, padding), padded(uy, H, align, padding)
    local x0, y0 = ix:detach():floor(), iy:detach():floor()
    local fx, fy = ix - x0, iy - y0
    y = tap(x0, y0, (1 - fx) * (1 - fy)) + tap(x0 + 1, y0, fx * (1 - fy)) + tap(x0, y0 + 1, (1 - fx) * fy)
        + tap(x0 + 1, y0 + 1, fx * fy)
  end
  return y:reshape(N, C, Ho, Wo)
end

-- ---- the layers -----------------------------------------------------------------------------

local Upsample = Module:extend("Upsample")
L.Upsample = Upsample
function Upsample:init(opts)
  opts = options("Upsample", opts, INTERPOLATE_OPTS)
  self.size, self.scale_factor, self.mode, self.align_corners = opts.size, opts.scale_factor, opts.mode or "nearest",
    opts.align_corners
  if MODES[self.mode] == nil then raise("Upsample: mode must be " .. MODE_NAMES .. ", got " .. tostring(self.mode)) end
  if (self.size == nil) == (self.scale_factor == nil) then raise("Upsample: give one of size and scale_factor") end
end
function Upsample:forward(x)
  return F.interpolate(x, { size = self.size, scale_factor = self.scale_factor, mode = self.mode,
                            align_corners = self.align_corners })
end
function Upsample:extra_repr()
  return fmt("size", self.size, "scale_factor", self.scale_factor, "mode", self.mode, "align_corners",
             self.align_corners)
end

-- UpsamplingNearest2d and UpsamplingBilinear2d({size = | scale_factor =}): PyTorch's older
-- names, Upsample in nearest mode and in bilinear mode with align_corners.
for name, mode in pairs({ UpsamplingNearest2d = "nearest", UpsamplingBilinear2d = "bilinear" }) do
  local cls = Upsample:extend(name)
  function cls:init(opts)
    opts = options(name, opts, { size = true, scale_factor = true })
    Upsample.init(self, { size = opts.size, scale_factor = opts.scale_factor, mode = mode,
                          align_corners = mode == "bilinear" or nil })
  end
  L[name] = cls
end

local sized_layer = require("dlua.nn.layers").sized_layer
sized_layer("AdaptiveAvgPool1d", F.adaptive_avg_pool1d, L)
sized_layer("AdaptiveAvgPool2d", F.adaptive_avg_pool2d, L)
sized_layer("AdaptiveAvgPool3d", F.adaptive_avg_pool3d, L)

return { functional = F, layers = L }
