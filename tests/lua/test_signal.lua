-- Window functions, dl.stft and dl.istft against PyTorch 1.13 (float64 literals), their
-- round trip, gradients, and the checks of their arguments.
local dl = require("dlua")
local H = require("harness")
local f64 = { dtype = "float64" }

H.test("windows match PyTorch: periodic and symmetric, alpha, beta, dtypes", function()
  -- torch.hann_window(5, dtype=float64)
  H.values(dl.hann_window(5, f64), { 0.0, 0.3454915028125263, 0.9045084971874737, 0.9045084971874737, 0.3454915028125264 },
           { dtype = "float64", tol = 1e-12 })
  -- torch.hamming_window(6, True, 0.5, 0.3, dtype=float64)
  H.values(dl.hamming_window(6, true, 0.5, 0.3, f64), { 0.2, 0.35, 0.65, 0.8, 0.65, 0.35 }, { tol = 1e-12 })
  H.values(dl.hamming_window(6, { alpha = 0.5, beta = 0.3, dtype = "float64" }), { 0.2, 0.35, 0.65, 0.8, 0.65, 0.35 },
           { tol = 1e-12 })
  -- torch.blackman_window(5, False, dtype=float64)
  H.values(dl.blackman_window(5, false, f64), { 0.0, 0.34, 1.0, 0.34, 0.0 }, { tol = 1e-12 })
  -- torch.bartlett_window(6, False, dtype=float64)
  H.values(dl.bartlett_window(6, { periodic = false, dtype = "float64" }), { 0.0, 0.4, 0.8, 0.8, 0.4, 0.0 }, { tol = 1e-12 })
  -- torch.kaiser_window(6, True, 5.0, dtype=float64); torch.kaiser_window(5, False, dtype=float64)
  H.values(dl.kaiser_window(6, true, 5.0, f64), { 0.036710892271286676, 0.3282019573723212, 0.7753221044454067, 1.0,
                                                  0.7753221044454067, 0.3282019573723212 }, { tol = 1e-12 })
  H.values(dl.kaiser_window(5, false, f64), { 5.2773441320097665e-05, 0.2156727447589671, 1.0, 0.2156727447589671,
                                              5.2773441320097665e-05 }, { tol = 1e-10 })
  H.values(dl.hann_window(1), { 1 }, { dtype = "float32" })
  H.shape(dl.kaiser_window(0), { 0 })
  H.raises(function() dl.hann_window(-1) end, "hann_window: window_length must be a whole number >= 0")
  H.raises(function() dl.hann_window(4, { dtype = "int64" }) end, "hann_window: expected a floating-point dtype")
  H.raises(function() dl.kaiser_window(4, true, "x") end, "kaiser_window: expected beta (a number)")
  H.raises(function() dl.hann_window(4, { gamma = 1 }) end, "hann_window: unknown option 'gamma'")
end)

local signal = { 0.5, -1.2, 3.0, 0.7, 2.2, -0.4, 1.1, 0.0, -2.5, 1.8, 0.3 }

H.test("stft matches PyTorch: centred reflect, win_length, constant pad, normalized, two-sided, batches", function()
  local x = dl.tensor(signal, f64)
  -- torch.view_as_real(torch.stft(x, 4, hop_length=2, window=torch.hann_window(4, dtype=float64), return_complex=True))
  local z = dl.stft(x, 4, { hop_length = 2, window = dl.hann_window(4, f64) })
  H.values(z, { { { -0.7, 0.0 }, { 2.75, 0.0 }, { 2.35, 0.0 }, { 0.9, 0.0 }, { -1.6, 0.0 }, { 2.1, 0.0 } },
                { { -0.5, 0.0 }, { -3.0, 0.95 }, { -2.2, -0.55 }, { -1.1, 0.2 }, { 2.5, 0.9 }, { -0.3, 0.0 } },
                { { 1.7, 0.0 }, { 3.25, 0.0 }, { 2.05, 0.0 }, { 1.3, 0.0 }, { -3.4, 0.0 }, { -1.5, 0.0 } } },
           { tol = 1e-12 })
  -- torch.stft(torch.stack([x, 2 x]), 6, hop_length=2, win_length=4, window=torch.hann_window(4), center=True,
  -- pad_mode='constant', normalized=True, return_complex=True): shape (2, 4, 6); [1, :, 2] (frame 3 of the second)
  local zb = dl.stft(dl.stack({ x, x * 2 }), 6, { hop_length = 2, win_length = 4, window = dl.hann_window(4, f64),
                                                  pad_mode = "constant", normalized = true })
  H.shape(zb, { 2, 4, 6, 2 })
  H.values(zb[2]:select(2, 3), { { 1.9187669651801564, 0.0 }, { -1.8575297216105768, -0.3889087296526012 },
                                 { 1.7350552344714185, 0.3889087296526012 }, { -1.673817990901839, 0.0 } }, { tol = 1e-12 })
  -- torch.stft(x, 4, hop_length=1, win_length=3, center=False, onesided=False, normalized=True,
  -- return_complex=True): shape (4, 8); [:, 3]
  local z2 = x:stft(4, { hop_length = 1, win_length = 3, center = false, onesided = false, normalized = true })
  H.shape(z2, { 4, 8, 2 })
  H.values(z2:select(2, 4), { { 1.25, 0.0 }, { 0.55, -1.1 }, { -0.95, 0.0 }, { 0.55, 1.1 } }, { tol = 1e-12 })
end)

H.test("istft inverts stft (length, batches, two-sided) and carries gradients", function()
  local x = dl.tensor(signal, f64)
  local w = dl.hann_window(4, f64)
  local z = dl.stft(x, 4, { hop_length = 2, window = w })
  H.near(dl.istft(z, 4, { hop_length = 2, window = w, length = 11 }):totable(), signal, 1e-12)
  -- without length: centred, the signal up to the last whole hop (torch's 10 samples here)
  H.shape(dl.istft(z, 4, { hop_length = 2, window = w }), { 10 })
  local xb = dl.stack({ x, -x }):narrow(2, 1, 10)
  local zb = dl.stft(xb, 6, { hop_length = 3, window = dl.hann_window(6, false, f64), onesided = false })
  H.near(dl.istft(zb, 6, { hop_length = 3, window = dl.hann_window(6, false, f64), length = 10 }):totable(), xb:totable(),
         1e-12)
  -- a length past the frames is padded with zeros: torch.istft(z, 4, hop_length=2, window=w, length=14)[11:]
  local long = dl.istft(z, 4, { hop_length = 2, window = w, length = 14 })
  H.near(long:narrow(1, 11, 4):totable(), { 0.3, 1.8, 0, 0 }, 1e-12)
  H.ok(dl.gradcheck(function(s) return dl.fft.abs(dl.stft(s, 4, { hop_length = 1, window = w })) end,
                    { dl.tensor(signal, f64):narrow(1, 1, 7) }))
  H.ok(dl.gradcheck(function(c) return dl.istft(c, 4, { hop_length = 2, window = w }) end, { z }))
end)

H.test("two-sided istft keeps the first n_fft // 2 + 1 bins (irfft), as torch's, with their gradients", function()
  local one = dl.zeros(4, 1, 2, f64)
  one[2][1][1] = 1   -- bin 1 = 1, its mirror (bin 3) 0: not conjugate-symmetric
  -- torch.istft(view_as_complex(one), 4, hop_length=1, window=torch.ones(4), center=False, onesided=False)
  H.values(dl.istft(one, 4, { hop_length = 1, window = dl.ones(4, f64), center = false, onesided = false }),
           { 0.5, 0, -0.5, 0 }, { tol = 1e-12 })
  local z = (dl.arange(24, f64):view(4, 3, 2) % 5 - 2) / 2
  local w = dl.hann_window(4, f64) + 0.5
  local function inv(c) return dl.istft(c, 4, { hop_length = 1, window = w, center = false, onesided = false }) end
  -- z = (arange(24).view(4, 3, 2) % 5 - 2) / 2; y = torch.istft(view_as_complex(z), 4, hop_length=1,
  -- window=hann_window(4) + 0.5, center=False, onesided=False); (y * arange(1, 7)).sum().backward()
  H.values(inv(z), { -1.0, 0.0, -0.26785714285714285, 0.08823529411764706, 0.36538461538461536, 0.125 }, { tol = 1e-12 })
  local g = dl.grad(function(c) return (inv(c) * dl.arange(1, 7, f64)):sum() end)(z)
  H.values(g, { { { 1.4567226890756302, 0 }, { 1.151842275371687, 0 }, { 2.419360051712993, 0 } },
                { { 0.3571428571428572, -0.3294117647058824 }, { -0.3058823529411764, 0.3406593406593407 },
                  { -0.9395604395604397, 2.5294117647058822 } },
                { { 0.1861344537815126, 0 }, { -0.045959922430510614, 0 }, { -1.0512281835811248, 0 } },
                { { 0, 0 }, { 0, 0 }, { 0, 0 } } }, { tol = 1e-12 })
end)

H.test("stft and istft check their arguments", function()
  local x = dl.tensor(signal, f64)
  H.raises(function() dl.stft(x, 0) end, "stft: n_fft must be a whole number >= 1")
  H.raises(function() dl.stft(x, 4, { win_length = 5 }) end, "stft: expected 1 <= win_length <= n_fft (4)")
  H.raises(function() dl.stft(x, 4, { window = dl.ones(3) }) end, "stft: expected a 1-D window of win_length = 4")
  H.raises(function() dl.stft(x, 4, { pad_mode = "edge" }) end, "stft: pad_mode must be reflect")
  H.raises(function() dl.stft(x, 4, { hop = 1 }) end, "stft: unknown option 'hop'")
  H.raises(function() dl.stft(x:view(1, 1, 11), 4) end, "stft: expected a real signal (T) or a batch of them (B, T)")
  H.raises(function() dl.stft(x, 16, { center = false }) end, "stft: the signal (11 samples after padding) is shorter")
  local z = dl.stft(x, 4, { hop_length = 2 })
  H.raises(function() dl.istft(x, 4) end, "istft: expected complex pairs (freq, frames, 2)")
  H.raises(function() dl.istft(z, 6) end, "istft: expected 4 frequency bins for n_fft = 6 (onesided), got 3")
  H.raises(function() dl.istft(z, 4, { hop_length = 2, return_complex = true }) end, "istft: return_complex = true")
  -- torch.istft raises "window overlap add min" here too: the padded window's zeros at the end
  local zb = dl.stft(x, 6, { hop_length = 2, win_length = 4, window = dl.hann_window(4, f64) })
  H.raises(function() dl.istft(zb, 6, { hop_length = 2, win_length = 4, window = dl.hann_window(4, f64), length = 13 }) end,
           "istft: window overlap add min")
end)

H.run()
