-- dlua.signal: PyTorch's window functions and short-time Fourier transforms (functions of
-- dl, loaded when first used). Complex values are (real, imaginary) pairs in a last dim
-- of 2, as everywhere in dl.fft (PyTorch's return_complex = false, or view_as_real).
--
--   dl.hann_window(n [, periodic = true] [, {dtype, device}])
--   dl.hamming_window(n [, periodic [, alpha = 0.54 [, beta = 0.46]]] [, opts])
--   dl.blackman_window(n [, periodic] [, opts]), dl.bartlett_window(n [, periodic] [, opts])
--   dl.kaiser_window(n [, periodic [, beta = 12]] [, opts])
--        periodic (also an option): the first n points of the n + 1 point window, as
--        for a spectral analysis; false, the symmetric window (for filter design)
--   dl.stft(x, n_fft [, {hop_length, win_length, window, center = true, pad_mode =
--        "reflect", normalized = false, onesided = true, return_complex}])
--        x (T) or (B, T) real: (n_fft // 2 + 1, frames, 2), batched (B, ...)
--   dl.istft(z, n_fft [, {hop_length, win_length, window, center = true, normalized,
--        onesided, length, return_complex = false}])   stft's inverse, by overlap-add
--
-- Every option defaults as PyTorch 1.13's (hop_length n_fft // 4, win_length n_fft, a
-- window of ones). Both transforms are framing (unfold), dl.fft and scatter_add, so
-- their gradients are the composition's.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local is_tensor, shape_str, methods, dl = T.is_tensor, T.shape_str, T.methods, T.dl
local type, tostring, select, ipairs, unpack = type, tostring, select, ipairs, unpack
local floor, pi = math.floor, math.pi

-- ---- windows ----------------------------------------------------------------------------------

-- The arguments of a window function: n, then positional values (periodic, then the
-- window's parameters `names`), then an options table, which may name any of them.
local function window_args(op, n, names, ...)
  local count = select("#", ...)
  local args = { ... }
  local opts = {}
  if count > 0 and type(args[count]) == "table" then
    local allowed = { periodic = true, dtype = true, device = true }
    for _, k in ipairs(names) do allowed[k] = true end
    opts = options(op, args[count], allowed)
    args[count] = nil
    count = count - 1
  end
  if not core.integer(n) or n < 0 then
    raise(op .. ": window_length must be a whole number >= 0, got " .. tostring(n))
  end
  local values = { periodic = args[1] }
  for i, k in ipairs(names) do values[k] = args[i + 1] end
  for _, k in ipairs({ "periodic", unpack(names) }) do
    if opts[k] ~= nil then
      if values[k] ~= nil then raise(op .. ": " .. k .. " given both in place and as an option") end
      values[k] = opts[k]
    end
  end
  if count > #names + 1 then raise(op .. ": too many arguments (" .. count + 1 .. ")") end
  local periodic = core.boolean_arg(op, values.periodic, "periodic", true)
  for _, k in ipairs(names) do
    if values[k] ~= nil and type(values[k]) ~= "number" then bad_arg(op, k .. " (a number)", values[k]) end
  end
  local dtype = opts.dtype or dl.get_default_dtype()
  if dtype ~= "float32" and dtype ~= "float64" and dtype ~= "float16" and dtype ~= "bfloat16" then
    raise(op .. ": expected a floating-point dtype, got " .. tostring(dtype))
  end
  return periodic, values, { dtype = dtype, device = opts.device }
end

-- A window of n points from f(k, m) (k = 0 .. m - 1 as float64, m the symmetric length),
-- computed in float64 and made the asked dtype. n = 1 is a single 1 (PyTorch's).
local function window(n, periodic, opts, f)
  if n == 0 then return dl.zeros(0, opts) end
  if n == 1 then return dl.ones(1, opts) end
  local m = periodic and n + 1 or n
  local k = dl.arange(m, { dtype = "float64", device = opts.device })
  local w = f(k, m)
  if periodic then w = w:narrow(1, 1, n) end
  return w:to(opts.dtype)
end

local function cosine_sum(k, m, a) -- a[1] - a[2] cos(2 pi k / (m - 1)) + a[3] cos(4 pi k / (m - 1))
  local t = k * (2 * pi / (m - 1))
  local w = a[1] - (t:cos() * a[2])
  if a[3] then w = w + (t * 2):cos() * a[3] end
  return w
end

function dl.hamming_window(n, ...)
  local periodic, v, opts = window_args("hamming_window", n, { "alpha", "beta" }, ...)
  local alpha, beta = v.alpha or 0.54, v.beta or 0.46
  return window(n, periodic, opts, function(k, m) return cosine_sum(k, m, { alpha, beta }) end)
end

function dl.hann_window(n, ...)
  local periodic, _, opts = window_args("hann_window", n, {}, ...)
  return window(n, periodic, opts, function(k, m) return cosine_sum(k, m, { 0.5, 0.5 }) end)
end

function dl.blackman_window(n, ...)
  local periodic, _, opts = window_args("blackman_window", n, {}, ...)
  return window(n, periodic, opts, function(k, m) return cosine_sum(k, m, { 0.42, 0.5, 0.08 }) end)
end

function dl.bartlett_window(n, ...)
  local periodic, _, opts = window_args("bartlett_window", n, {}, ...)
  return window(n, periodic, opts, function(k, m) return 1 - (k * (2 / (m - 1)) - 1):abs() end)
end

-- I0(beta sqrt(1 - ((k - a) / a)^2)) / I0(beta), a = (m - 1) / 2
function dl.kaiser_window(n, ...)
  local periodic, v, opts = window_args("kaiser_window", n, { "beta" }, ...)
  local beta = v.beta or 12.0
  return window(n, periodic, opts, function(k, m)
    local a = (m - 1) / 2
    local r = (1 - ((k - a) / a):square()):clamp_min(0):sqrt()
    return dl.special.i0(r * beta) / dl.special.i0(dl.tensor(beta, { dtype = "float64" }))
  end)
end

-- ---- short-time transforms --------------------------------------------------------------------

local PAD_MODES = { reflect = true, constant = true, replicate = true, circular = true }

-- hop, win_length and the window padded (centred) to n_fft, checked.
local function framing(op, n_fft, opts, like)
  if not core.integer(n_fft) or n_fft < 1 then
    raise(op .. ": n_fft must be a whole number >= 1, got " .. tostring(n_fft))
  end
  local hop = opts.hop_length or floor(n_fft / 4)
  if not core.integer(hop) or hop < 1 then
    raise(op .. ": hop_length must be a whole number >= 1, got " .. tostring(hop))
  end
  local win_length = opts.win_length or n_fft
  if not core.integer(win_length) or win_length < 1 or win_length > n_fft then
    raise(op .. ": expected 1 <= win_length <= n_fft (" .. n_fft .. "), got " .. tostring(win_length))
  end
  local w = opts.window
  if w == nil then
    w = dl.ones(win_length, { dtype = like.dtype, device = like.device })
  else
    if not is_tensor(w) then bad_arg(op, "a window tensor", w) end
    if w:dim() ~= 1 or w:size(1) ~= win_length then
      raise(op .. ": expected a 1-D window of win_length = " .. win_length .. " points, got shape "
            .. shape_str(w.shape))
    end
    w = w:to(like.dtype)
  end
  if win_length < n_fft then
    local left = floor((n_fft - win_length) / 2)
    w = dl.nn.functional.pad(w, { left, n_fft - win_length - left })
  end
  return hop, w
end

local function flag(op, opts, name, default) return core.boolean_arg(op, opts[name], name, default) end

function dl.stft(x, n_fft, opts)
  local op = "stft"
  T.check_tensor(op, x)
  opts = options(op, opts, { hop_length = true, win_length = true, window = true, center = true, pad_mode = true,
                             normalized = true, onesided = true, return_complex = true })
  if x:dim() ~= 1 and x:dim() ~= 2 then
    raise(op .. ": expected a real signal (T) or a batch of them (B, T), got shape " .. shape_str(x.shape))
  end
  x = T.floating(x)
  local hop, w = framing(op, n_fft, opts, x)
  local center, normalized = flag(op, opts, "center", true), flag(op, opts, "normalized", false)
  local onesided = flag(op, opts, "onesided", true)
  flag(op, opts, "return_complex", false)   -- (either way the result is pairs: dlua has no complex dtype)
  local mode = opts.pad_mode or "reflect"
  if not PAD_MODES[mode] then
    raise(op .. ": pad_mode must be reflect, constant, replicate or circular, got " .. tostring(mode))
  end
  local batched = x:dim() == 2
  local s = batched and x or x:unsqueeze(1)
  if center then
    local half = floor(n_fft / 2)
    s = dl.nn.functional.pad(s:unsqueeze(2), { half, half }, { mode = mode }):squeeze(2)
  end
  local len = s:size(2)
  if len < n_fft then
    raise(op .. ": the signal (" .. len .. " samples after padding) is shorter than n_fft = " .. n_fft)
  end
  local frames = s:unfold(2, n_fft, hop) * w   -- (B, frames, n_fft)
  local z
  if onesided then
    z = dl.fft.rfft(frames, { dim = -1 })
  else
    z = dl.fft.fft(dl.fft.complex(frames), { dim = -1 })
  end
  if normalized then z = z * (1 / math.sqrt(n_fft)) end
  z = z:transpose(2, 3)   -- (B, freq, frames, 2)
  return batched and z or z:squeeze(1)
end

function dl.istft(z, n_fft, opts)
  local op = "istft"
  T.check_tensor(op, z)
  opts = options(op, opts, { hop_length = true, win_length = true, window = true, center = true, normalized = true,
                             onesided = true, length = true, return_complex = true })
  if (z:dim() ~= 3 and z:dim() ~= 4) or z.shape[z:dim()] ~= 2 then
    raise(op .. ": expected complex pairs (freq, frames, 2) or (B, freq, frames, 2), got shape " .. shape_str(z.shape))
  end
  z = T.floating(z)
  local hop, w = framing(op, n_fft, opts, z)
  local center, normalized = flag(op, opts, "center", true), flag(op, opts, "normalized", false)
  if flag(op, opts, "return_complex", false) then
    raise(op .. ": return_complex = true is not supported (dlua has no complex dtype); the result is real")
  end
  local batched = z:dim() == 4
  if not batched then z = z:unsqueeze(1) end
  local bins, count = z:size(2), z:size(3)
  local onesided = flag(op, opts, "onesided", bins ~= n_fft)
  local want = onesided and floor(n_fft / 2) + 1 or n_fft
  if bins ~= want then
    raise(op .. ": expected " .. want .. " frequency bins for n_fft = " .. n_fft .. (onesided and " (onesided)" or "")
          .. ", got " .. bins)
  end
  local length = opts.length
  if length ~= nil and (not core.integer(length) or length < 0) then
    raise(op .. ": length must be a whole number >= 0, got " .. tostring(length))
  end
  if normalized then z = z * math.sqrt(n_fft) end
  z = z:transpose(2, 3)   -- (B, frames, freq, 2)
  -- a real result is irfft of the first n_fft // 2 + 1 bins, even of a two-sided z (as
  -- PyTorch's): the others are taken to be their conjugate mirrors, whatever they hold
  if not onesided then z = z:narrow(3, 1, floor(n_fft / 2) + 1) end
  local frames = dl.fft.irfft(z, { n = n_fft, dim = -1 })
  frames = frames * w   -- (B, frames, n_fft)
  local b = frames:size(1)
  local total = n_fft + hop * (count - 1)
  -- overlap-add: frame f's sample j goes to (f - 1) hop + j
  local int = { dtype = "int64", device = z.device }
  local at = (dl.arange(count, int) * hop):view(count, 1) + dl.arange(1, n_fft + 1, int):view(1, n_fft)
  at = at:reshape(-1)
  local y = dl.zeros(b, total, { dtype = frames.dtype, device = frames.device })
              :scatter_add(2, at:view(1, -1):expand(b, count * n_fft), frames:reshape(b, -1))
  local envelope = dl.zeros(total, { dtype = frames.dtype, device = frames.device })
                     :scatter_add(1, at, w:square():view(1, n_fft):expand(count, n_fft):reshape(-1))
  local start = center and floor(n_fft / 2) or 0
  local stop = total
  if length ~= nil then stop = start + length elseif center then stop = total - floor(n_fft / 2) end
  local upto = math.min(stop, total)
  y = y:narrow(2, start + 1, upto - start)
  envelope = envelope:narrow(1, start + 1, upto - start)
  if upto > start and envelope:abs():min():item() < 1e-11 then
    raise(op .. ": window overlap add min: the window's squares overlap-added are 0 somewhere (below 1e-11); "
          .. "the signal cannot be recovered there")
  end
  y = y / envelope
  if stop > upto then y = dl.nn.functional.pad(y, { 0, stop - upto }) end
  return batched and y or y:squeeze(1)
end

methods.stft, methods.istft = dl.stft, dl.istft

return {}
