-- dl.fft against PyTorch's torch.fft (float64, tests/ref/gen_breadth_refs.py gen_fft), the
-- pair layout's helpers, a convolution by transforms, and the checks of the arguments.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.breadth_ref")
local F = dl.fft
local f64 = { dtype = "float64" }

H.test("every transform matches PyTorch float64, n and s padding and cutting, dims, norms, gradients", function()
  local FN = {
    fft = function(z) return F.fft(z) end,
    fft_pad_ortho = function(z) return F.fft(z, 10, -1, "ortho") end,
    fft_cut_dim1 = function(z) return F.fft(z, { n = 3, dim = 1 }) end,
    ifft = function(z) return F.ifft(z) end,
    ifft_forward = function(z) return F.ifft(z, { n = 7, norm = "forward" }) end,
    rfft = function(x) return F.rfft(x) end,
    rfft_pad_ortho = function(x) return F.rfft(x, 12, nil, "ortho") end,
    rfft_dim1 = function(x) return F.rfft(x, nil, 1) end,
    irfft = function(z) return F.irfft(z) end,
    irfft_odd = function(z) return F.irfft(z, 9) end,
    irfft_forward = function(z) return F.irfft(z, { n = 6, norm = "forward" }) end,
    hfft = function(z) return F.hfft(z) end,
    ihfft = function(x) return F.ihfft(x, 7) end,
    fft2 = function(z) return F.fft2(z) end,
    ifft2_s = function(z) return F.ifft2(z, { 3, 8 }, nil, "ortho") end,
    fftn_dims = function(z) return F.fftn(z, { dim = { 1, 3 } }) end,
    fftn_all = function(z) return F.fftn(z) end,
    rfft2 = function(x) return F.rfft2(x) end,
    rfftn_s = function(x) return F.rfftn(x, { 5, 4, 7 }) end,
    irfft2 = function(z) return F.irfft2(z) end,
    irfftn_s = function(z) return F.irfftn(z, { s = { 3, 5, 7 }, norm = "ortho" }) end,
    fftshift = function(x) return F.fftshift(x) end,
    ifftshift_dim = function(x) return F.ifftshift(x, { 2, 3 }) end,
  }
  local cases, freqs = {}, nil
  for _, c in ipairs(R.fft) do
    if c.name == "freqs" then freqs = c else cases[#cases + 1] = c end
  end
  H.eq(H.ref_cases(cases, FN, 1e-12, 1e-11), 23)
  H.near(F.fftfreq(8, f64):totable(), freqs.ys[1], 1e-15)
  H.near(F.fftfreq(7, 0.5, f64):totable(), freqs.ys[2], 1e-15)
  H.near(F.rfftfreq(9, 0.1, f64):totable(), freqs.ys[3], 1e-15)
end)

H.test("the pair layout: complex, real, imag, abs, angle, conj, mul; round trips; float32", function()
  local re, im = dl.tensor({ 3, 0, -1 }, f64), dl.tensor({ 4, 0, 1 }, f64)
  local z = F.complex(re, im)
  H.shape(z, { 3, 2 })
  H.ok(dl.equal(F.real(z), re) and dl.equal(F.imag(z), im))
  H.near(F.abs(z):totable(), { 5, 0, math.sqrt(2) }, 1e-15)
  H.near(F.angle(z):totable(), { math.atan2(4, 3), 0, 3 * math.pi / 4 }, 1e-15)
  H.ok(dl.equal(F.conj(z), F.complex(re, -im)))
  H.near(F.mul(z, F.conj(z)):totable(), { { 25, 0 }, { 0, 0 }, { 2, 0 } }, 1e-15)
  -- |z|'s gradient is 0 at 0 (not NaN), as PyTorch's
  local g = dl.grad(function(t) return F.abs(t):sum() end)(z)
  H.near(g:totable(), { { 0.6, 0.8 }, { 0, 0 }, { -1 / math.sqrt(2), 1 / math.sqrt(2) } }, 1e-15)
  -- round trips at every kind of length, float64 and float32
  dl.manual_seed(4)
  for _, n in ipairs({ 1, 2, 7, 16, 30, 97 }) do
    local w = dl.randn(3, n, 2, f64)
    H.ok(dl.allclose(F.ifft(F.fft(w)), w, 1e-12, 1e-12), "fft round trip n = " .. n)
    local x = dl.randn(2, n, f64)
    H.ok(dl.allclose(F.irfft(F.rfft(x), n), x, 1e-12, 1e-12), "rfft round trip n = " .. n)
    local x32 = dl.randn(2, n)
    local back = F.irfft(F.rfft(x32), n)
    H.eq(back.dtype, "float32")
    H.ok(dl.allclose(back, x32, 1e-5, 1e-5), "float32 round trip n = " .. n)
  end
  -- Parseval: sum |x|^2 = sum |X|^2 / n
  local x = dl.randn(1000, f64)
  H.near((F.abs(F.fft(F.complex(x))):pow(2):sum() / 1000):item(), x:pow(2):sum():item(), 1e-10)
  -- integers are made the default float dtype
  H.eq(F.rfft(dl.tensor({ 1, 2, 3, 4 })).dtype, "float32")
  H.values(F.rfft(dl.tensor({ 1, 2, 3, 4 })), { { 10, 0 }, { -2, 2 }, { -2, 0 } })
end)

H.test("a convolution by transforms equals the direct one, and trains through dl.grad and dl.compile", function()
  dl.manual_seed(5)
  local signal, kernel = dl.randn(50, f64), dl.randn(7, f64)
  local n = 64   -- >= 50 + 7 - 1: the circular convolution is the linear one
  local function fftconv(s, k)
    return F.irfft(F.mul(F.rfft(s, n), F.rfft(k, n)), n):narrow(1, 1, 56)
  end
  local direct = dl.nn.functional.conv1d(signal:view(1, 1, 50), kernel:flip({ 1 }):view(1, 1, 7), { padding = 6 }):view(56)
  H.ok(dl.allclose(fftconv(signal, kernel), direct, 1e-11, 1e-11))
  -- gradients against the direct convolution's
  local w = dl.randn(56, f64)
  local g1 = dl.grad(function(k) return (fftconv(signal, k) * w):sum() end)(kernel)
  local g2 = dl.grad(function(k)
    return (dl.nn.functional.conv1d(signal:view(1, 1, 50), k:flip({ 1 }):view(1, 1, 7), { padding = 6 }):view(56) * w):sum()
  end)(kernel)
  H.ok(dl.allclose(g1, g2, 1e-11, 1e-11))
  -- second order: the transform is linear, so d2/dk2 of a quadratic in it is constant
  local h = dl.grad(function(k) return dl.grad(function(q) return fftconv(signal, q):pow(2):sum() end)(k):sum() end)(kernel)
  H.shape(h, { 7 })
  -- compiled: the same as eager, call after call
  local c = dl.compile(fftconv)
  for _ = 1, 3 do H.ok(dl.equal(c(signal, kernel), fftconv(signal, kernel))) end
end)

H.test("bad arguments are errors naming the function; the runtime stays usable", function()
  H.raises(function() F.fft(dl.ones(3, 4)) end, "fft.fft: expected complex values as (real, imaginary) pairs in a last dim of 2")
  H.raises(function() F.ifft(dl.ones(3)) end, "fft.ifft: expected complex values")
  H.raises(function() F.fft(dl.ones(3, 2), 0) end, "fft.fft: n must be a whole number >= 1, got 0")
  H.raises(function() F.fft(dl.ones(3, 2), nil, 2) end, "fft.fft: dim 2 out of range for 1 dims")
  H.raises(function() F.rfft(dl.ones(4), nil, nil, "both") end, "fft.rfft: norm must be \"backward\", \"ortho\" or \"forward\"")
  H.raises(function() F.rfft(dl.ones(4), { bogus = 1 }) end, "fft.rfft: unknown option 'bogus'")
  H.raises(function() F.fftn(dl.ones(3, 3, 2), { 2, 2 }, { 1 }) end, "fft.fftn: s has 2 sizes for 1 dims")
  H.raises(function() F.fftn(dl.ones(3, 3, 2), nil, { 1, -2 }) end, "fft.fftn: dim 1 given twice")
  H.raises(function() F.fftfreq(0) end, "fft.fftfreq: n must be a whole number >= 1, got 0")
  H.raises(function() F.rfft("x") end, "fft.rfft: expected a tensor")
  H.raises(function() F.fft(dl.zeros(0, 2)) end, "fft: a transform of length 0")
  H.values(F.rfft(dl.tensor({ 1, 1 })), { { 2, 0 }, { 0, 0 } })
end)

H.test("edges: the angle and |z| of 0 have gradient 0; shifts of pairs; irfft of one bin; dtypes", function()
  local z = dl.tensor({ { 0, 0 }, { 1, 1 }, { 1e-30, 0 }, { 3e30, 4e30 } }, f64)
  local g = dl.grad(function(v) return (F.angle(v) + F.abs(v)):sum() end)(z)
  H.ok(g:eq(g):all(), "no NaN")
  H.values(g:narrow(1, 1, 1), { { 0, 0 } })
  H.near(F.abs(dl.tensor({ { 3e30, 4e30 } })):item() / 5e30, 1, 1e-6)   -- (float32: the squares would overflow)
  H.near(F.abs(dl.tensor({ { 3e-30, 4e-30 } })):item() / 5e-30, 1, 1e-6)
  -- fftshift of complex pairs keeps the pairs; without a word a last dim of 2 is refused
  local c = F.complex(dl.tensor({ 1, 2, 3, 4 }), dl.tensor({ 5, 6, 7, 8 }))
  H.values(F.fftshift(c, { pairs = true }), { { 3, 7 }, { 4, 8 }, { 1, 5 }, { 2, 6 } })
  H.values(F.ifftshift(F.fftshift(c, { pairs = true }), { pairs = true }), c:totable())
  H.values(F.fftshift(c, { 1 }), { { 3, 7 }, { 4, 8 }, { 1, 5 }, { 2, 6 } })
  H.raises(function() F.fftshift(c) end, "fft.fftshift: x's last dim is 2: give {pairs = true}")
  H.raises(function() F.fftshift(c, { pairs = true, bogus = 2 }) end, "fft.fftshift: unknown option")
  H.raises(function() F.irfft(dl.ones(3, 1, 2)) end, "fft.irfft: the default n = 2 (m - 1) is 0 for a dim of 1 bin")
  H.eq(F.irfft(dl.ones(3, 1, 2), 1).shape[2], 1)
  H.raises(function() F.complex(dl.ones(3), dl.ones(2)) end, "fft.complex: the real parts have shape (3,), the imaginary (2,)")
  H.raises(function() F.fftfreq(4, { dtype = "int64" }) end, "fft.fftfreq: dtype must be float32 or float64")
end)

H.run()
