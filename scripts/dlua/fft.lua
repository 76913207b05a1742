-- dlua.fft: dl.fft, torch.fft's discrete Fourier transforms (loaded when first read).
--
-- dlua has no complex dtype: a complex tensor is a real one whose last dim holds (real,
-- imaginary), PyTorch's view_as_real layout (Note [Complex values as pairs] in
-- tensor/fft.h), so everything else (gradients, dl.compile, devices, files) works on it.
-- Dims and sizes count the complex dims, without the pair: dim = -1 is the last one.
--
--   dl.fft.fft(z [, n, dim, norm]), ifft      complex pairs in, complex pairs out
--   dl.fft.rfft(x [, n, dim, norm])           a real x in, its n // 2 + 1 bins out
--   dl.fft.irfft(z [, n, dim, norm])          those bins in, n real values out
--   dl.fft.hfft(z [, n, dim, norm]), ihfft    a Hermitian signal's transforms
--   dl.fft.fft2, ifft2, rfft2, irfft2(z [, s, dims, norm])       over the last two dims
--   dl.fft.fftn, ifftn, rfftn, irfftn(z [, s, dims, norm])       over dims (default all)
--   dl.fft.fftfreq(n [, d, opts]), rfftfreq   the bins' frequencies
--   dl.fft.fftshift(x [, dims] [, {pairs = true}]), ifftshift   zero frequency to the
--                                             middle and back (pairs: the pair dim stays)
--   dl.fft.complex(re [, im]), real, imag, abs, angle, conj, mul    the pair layout
--
-- A trailing table may give the options by name: dl.fft.rfft(x, {n = 64, norm = "ortho"}).
-- norm as PyTorch's: "backward" (the default: the inverse divides by n), "ortho" (both by
-- sqrt n) or "forward" (the forward divides by n). Every transform is differentiable:
-- the engine's transforms (fft_c2c for pairs, fft_r2c and fft_c2r for real signals) have
-- their adjoints as derivatives, the rest is padding, slicing and conjugation.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local C, dl, check, shape_str = core.C, T.dl, T.check_tensor, T.shape_str
local type, tostring, ipairs = type, tostring, ipairs
local floor, sqrt = math.floor, math.sqrt

local F = dl.fft   -- (filled here: the table a script may already hold)

local NORMS = { backward = true, ortho = true, forward = true }

local floating = T.floating

-- z checked as complex pairs (integers made the default float dtype).
local function pairs_of(op, z)
  check(op, z)
  if z:dim() < 2 or z.shape[z:dim()] ~= 2 then
    raise(op .. ": expected complex values as (real, imaginary) pairs in a last dim of 2 (dl.fft.complex(x) "
          .. "makes them from a real x; dl.fft.rfft takes a real x), got shape " .. shape_str(z.shape))
  end
  return floating(z)
end

-- (x, a, b, c) or (x, {opts}): the named options of a transform (a table of sizes, s,
-- is a list: it has an element 1; the options have names).
local function options(op, a, b, c, names)
  if type(a) == "table" and not T.is_tensor(a) and a[1] == nil then
    core.options(op, a, { [names[1]] = true, [names[2]] = true, norm = true })
    return a[names[1]], a[names[2]], a.norm
  end
  return a, b, c
end

local function check_norm(op, norm)
  if norm ~= nil and not NORMS[norm] then
    raise(op .. ": norm must be \"backward\", \"ortho\" or \"forward\", got " .. tostring(norm))
  end
  return norm or "backward"
end

-- A complex dim (1-based, negative from the end) of a tensor whose `rank` dims count, as
-- a positive dim of the tensor.
local function dim_of(op, d, rank)
  if not core.integer(d) or d == 0 or d < -rank or d > rank then
    raise(op .. ": dim " .. tostring(d) .. " out of range for " .. rank .. " dims")
  end
  return d < 0 and rank + 1 + d or d
end

local function length_of(op, n, default)
  if n == nil then return default end
  if not core.integer(n) or n < 1 then raise(op .. ": n must be a whole number >= 1, got " .. tostring(n)) end
  return n
end

-- x cut to, or padded with zeros to, n along dim d.
local function resized(x, d, n)
  local m = x.shape[d]
  if n == m then return x end
  if n < m then return x:narrow(d, 1, n) end
  local pad = x.shape
  pad[d] = n - m
  return dl.cat({ x, dl.zeros(pad, { dtype = x.dtype, device = x.device }) }, d)
end

-- The divisor of a transform of length n under norm, forward or inverse.
local function scale(y, norm, n, inverse)
  if norm == "ortho" then return y * (1 / sqrt(n)) end
  if (norm == "forward") ~= inverse then return y * (1 / n) end
  return y
end

-- engine(t) with t's dim d moved to `last`, where the engine's transforms run, and the
-- result's moved back
local function along(t, d, last, engine)
  if d == last then return engine(t) end
  return engine(t:transpose(d, last)):transpose(d, last)
end

-- The transform of pairs z along its tensor dim d (not the pair dim), of length n.
local function c2c(z, d, n, inverse, norm)
  z = resized(z, d, n)
  local y = along(z, d, z:dim() - 1, function(v) return T.new(C.dl_fft_c2c, T.hid(v), inverse and 1 or 0) end)
  return scale(y, norm, n, inverse)
end

-- ---- the pair layout ---------------------------------------------------------------------------

function F.complex(re, im)
  check("fft.complex", re)
  re = floating(re)
  if im == nil then
    im = dl.zeros_like(re)
  else
    check("fft.complex", im)
    if not dl.equal(dl.tensor(re.shape), dl.tensor(im.shape)) then
      raise("fft.complex: the real parts have shape " .. shape_str(re.shape) .. ", the imaginary "
            .. shape_str(im.shape))
    end
  end
  return dl.stack({ re, im:to(re.dtype) }, -1)
end
function F.real(z) return pairs_of("fft.real", z):select(-1, 1) end
function F.imag(z) return pairs_of("fft.imag", z):select(-1, 2) end
function F.conj(z)
  z = pairs_of("fft.conj", z)
  return dl.stack({ z:select(-1, 1), -z:select(-1, 2) }, -1)
end
-- z with (1, 0) in place of (0, 0), and where it was (0, 0): so that |z| and its angle
-- have the gradient 0 there (as PyTorch's of a complex 0), not NaN
local function off_zero(z)
  local re, im = z:select(-1, 1), z:select(-1, 2)
  local zero = re:eq(0):logical_and(im:eq(0))
  return dl.where(zero, 1, re), im, zero
end
-- |z| without overflow or underflow of its squares
function F.abs(z)
  local re, im, zero = off_zero(pairs_of("fft.abs", z))
  return dl.where(zero, 0, dl.hypot(re, im))
end
function F.angle(z)
  local re, im, zero = off_zero(pairs_of("fft.angle", z))
  return dl.where(zero, 0, dl.atan2(im, re))
end
-- a b, broadcasting
function F.mul(a, b)
  a, b = pairs_of("fft.mul", a), pairs_of("fft.mul", b)
  local ar, ai, br, bi = a:select(-1, 1), a:select(-1, 2), b:select(-1, 1), b:select(-1, 2)
  return dl.stack({ ar * br - ai * bi, ar * bi + ai * br }, -1)
end

-- ---- one dim ----------------------------------------------------------------------------------

-- The engine's transforms of real signals along the last dim, with x's dim d moved there
-- and back: rfft's bins (fft_r2c, weight 1) and irfft's values (fft_c2r, weight 2: each
-- bin strictly between 0 and n / 2 stands for itself and its mirrored conjugate; the
-- imaginary parts of bin 0, and n / 2 for an even n, are not read, as PyTorch's).
local function r2c(x, d, n, norm)
  x = resized(x, d, n)
  local z = along(x, d, x:dim(), function(v) return T.new(C.dl_fft_r2c, T.hid(v), 1) end)
  return scale(z, norm, n, false)
end
local function c2r(z, d, n, norm)
  z = resized(z, d, floor(n / 2) + 1)
  local x = along(z, d, z:dim() - 1, function(v) return T.new(C.dl_fft_c2r, T.hid(v), n, 2) end)
  return scale(x, norm, n, true)
end

-- The arguments of a one-dim transform of a real x, or of pairs z when `complex`: the
-- tensor, its dim (positive, of the tensor), the length (n, or `default(size)`) and norm.
local function one_dim_args(op, x, a, b, c, complex, default)
  if complex then x = pairs_of(op, x) else check(op, x); x = floating(x) end
  local n, dim, norm = options(op, a, b, c, { "n", "dim" })
  norm = check_norm(op, norm)
  local rank = complex and x:dim() - 1 or x:dim()
  if rank == 0 then raise(op .. ": expected at least 1 dim, got a 0-dim tensor") end
  local d = dim_of(op, dim or -1, rank)
  return x, d, length_of(op, n, nil) or default(op, x.shape[d]), norm
end
local function same(_, size) return size end
local function doubled(op, size)   -- irfft's default length from m bins
  if size < 2 then raise(op .. ": the default n = 2 (m - 1) is 0 for a dim of " .. size .. " bin; give n") end
  return 2 * (size - 1)
end

local function one_dim(op, inverse)
  return function(z, a, b, c)
    local d, n, norm
    z, d, n, norm = one_dim_args(op, z, a, b, c, true, same)
    return c2c(z, d, n, inverse, norm)
  end
end
F.fft = one_dim("fft.fft", false)
F.ifft = one_dim("fft.ifft", true)

function F.rfft(x, a, b, c)
  local d, n, norm
  x, d, n, norm = one_dim_args("fft.rfft", x, a, b, c, false, same)
  return r2c(x, d, n, norm)
end
function F.irfft(z, a, b, c)
  local d, n, norm
  z, d, n, norm = one_dim_args("fft.irfft", z, a, b, c, true, doubled)
  return c2r(z, d, n, norm)
end

-- hfft and ihfft: the transforms of a signal whose spectrum is real (a Hermitian
-- signal), through irfft and rfft of the other sign and scaling
local SWAPPED = { backward = "forward", forward = "backward", ortho = "ortho" }
function F.hfft(z, a, b, c)
  local d, n, norm
  z, d, n, norm = one_dim_args("fft.hfft", z, a, b, c, true, doubled)
  return c2r(F.conj(z), d, n, SWAPPED[norm])
end
function F.ihfft(x, a, b, c)
  local d, n, norm
  x, d, n, norm = one_dim_args("fft.ihfft", x, a, b, c, false, same)
  return F.conj(r2c(x, d, n, SWAPPED[norm]))
end

-- ---- several dims -----------------------------------------------------------------------------

-- The dims (positive, of a tensor whose `rank` dims count) and their lengths from s and
-- dims: dims default to the last #s (or `default` of them, nil: all), s to their sizes.
local function dims_and_sizes(op, x, rank, s, dims, default)
  if s ~= nil and (type(s) ~= "table" or T.is_tensor(s)) then bad_arg(op, "a list of sizes s", s) end
  if dims ~= nil and (type(dims) ~= "table" or T.is_tensor(dims)) then bad_arg(op, "a list of dims", dims) end
  local ds = {}
  if dims then
    for i, d in ipairs(dims) do ds[i] = dim_of(op, d, rank) end
  else
    local k = s and #s or default or rank
    if k > rank then raise(op .. ": " .. k .. " dims asked of a tensor of " .. rank) end
    for i = 1, k do ds[i] = rank - k + i end
  end
  if s and #s ~= #ds then raise(op .. ": s has " .. #s .. " sizes for " .. #ds .. " dims") end
  local seen = {}
  for _, d in ipairs(ds) do
    if seen[d] then raise(op .. ": dim " .. d .. " given twice") end
    seen[d] = true
  end
  local ns = {}
  for i, d in ipairs(ds) do ns[i] = s and length_of(op, s[i], nil) or false end
  return ds, ns
end

local function c2c_n(op, inverse, default)
  return function(z, a, b, c)
    z = pairs_of(op, z)
    local s, dims, norm = options(op, a, b, c, { "s", "dim" })
    norm = check_norm(op, norm)
    local ds, ns = dims_and_sizes(op, z, z:dim() - 1, s, dims, default)
    for i, d in ipairs(ds) do z = c2c(z, d, ns[i] or z.shape[d], inverse, norm) end
    return z
  end
end
F.fft2, F.ifft2 = c2c_n("fft.fft2", false, 2), c2c_n("fft.ifft2", true, 2)
F.fftn, F.ifftn = c2c_n("fft.fftn", false, nil), c2c_n("fft.ifftn", true, nil)

local function r2c_n(op, default)
  return function(x, a, b, c)
    check(op, x)
    x = floating(x)
    local s, dims, norm = options(op, a, b, c, { "s", "dim" })
    norm = check_norm(op, norm)
    local ds, ns = dims_and_sizes(op, x, x:dim(), s, dims, default)
    if #ds == 0 then raise(op .. ": no dims to transform") end
    local last = ds[#ds]
    local z = r2c(x, last, ns[#ds] or x.shape[last], norm)
    for i = 1, #ds - 1 do z = c2c(z, ds[i], ns[i] or z.shape[ds[i]], false, norm) end
    return z
  end
end
F.rfft2, F.rfftn = r2c_n("fft.rfft2", 2), r2c_n("fft.rfftn", nil)

local function c2r_n(op, default)
  return function(z, a, b, c)
    z = pairs_of(op, z)
    local s, dims, norm = options(op, a, b, c, { "s", "dim" })
    norm = check_norm(op, norm)
    local ds, ns = dims_and_sizes(op, z, z:dim() - 1, s, dims, default)
    if #ds == 0 then raise(op .. ": no dims to transform") end
    for i = 1, #ds - 1 do z = c2c(z, ds[i], ns[i] or z.shape[ds[i]], true, norm) end
    local last = ds[#ds]
    return c2r(z, last, ns[#ds] or doubled(op, z.shape[last]), norm)
  end
end
F.irfft2, F.irfftn = c2r_n("fft.irfft2", 2), c2r_n("fft.irfftn", nil)

-- ---- frequencies and shifts -------------------------------------------------------------------

-- 0, 1, ..., count - 1 as floats (opts: dtype, device), over d n, after checking n and d.
local function bins(op, n, d, opts, count)
  if type(d) == "table" then d, opts = nil, d end
  if not core.integer(n) or n < 1 then raise(op .. ": n must be a whole number >= 1, got " .. tostring(n)) end
  d = d or 1
  if type(d) ~= "number" or d == 0 then bad_arg(op, "a non-zero spacing d", d) end
  if opts ~= nil and opts.dtype ~= nil and opts.dtype ~= "float32" and opts.dtype ~= "float64" then
    raise(op .. ": dtype must be float32 or float64, got " .. tostring(opts.dtype))
  end
  return floating(dl.arange(count(n), opts)), d * n
end

-- The sample frequencies of an n-point transform with spacing d: 0, 1, ..., then the
-- negative ones, over d n (PyTorch's order); rfftfreq's, the n // 2 + 1 non-negative ones.
function F.fftfreq(n, d, opts)
  local k, span = bins("fft.fftfreq", n, d, opts, function(m) return m end)
  return dl.where(k:lt(floor((n - 1) / 2) + 1), k, k - n) / span
end
function F.rfftfreq(n, d, opts)
  local k, span = bins("fft.rfftfreq", n, d, opts, function(m) return floor(m / 2) + 1 end)
  return k / span
end

-- x rolled by half of each of dims (default: every dim, as PyTorch's). With {pairs =
-- true}, x is complex pairs: dims count the complex dims and the pair dim never moves.
-- Without it, a last dim of 2 and no dims is an error: pairs or a real dim of 2 cannot
-- be told apart, and shifting the pairs would swap the real and imaginary parts.
local function shift(op, sign)
  return function(x, dims, opts)
    check(op, x)
    if type(dims) == "table" and dims[1] == nil and opts == nil then dims, opts = nil, dims end
    local pairs_given = false
    if opts ~= nil then pairs_given = core.options(op, opts, { pairs = true }).pairs == true end
    if pairs_given then x = pairs_of(op, x) end
    local rank = pairs_given and x:dim() - 1 or x:dim()
    if type(dims) == "number" then dims = { dims } end
    if dims == nil then
      if not pairs_given and x:dim() > 0 and x.shape[x:dim()] == 2 then
        raise(op .. ": x's last dim is 2: give {pairs = true} for complex pairs (the pair dim is not shifted), "
              .. "or the dims to shift")
      end
      dims = {}
      for i = 1, rank do dims[i] = i end
    elseif type(dims) ~= "table" then
      bad_arg(op, "a dim or a list of dims", dims)
    end
    local shifts, ds = {}, {}
    for i, d in ipairs(dims) do
      ds[i] = dim_of(op, d, rank)
      local size = x.shape[ds[i]]
      shifts[i] = sign > 0 and floor(size / 2) or -floor(size / 2)
    end
    if #ds == 0 then return x end
    return x:roll(shifts, ds)
  end
end
F.fftshift, F.ifftshift = shift("fft.fftshift", 1), shift("fft.ifftshift", -1)

return F
