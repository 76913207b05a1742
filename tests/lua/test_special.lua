-- dl.special: torch.special's functions against PyTorch float64 (tests/ref/gen_breadth_refs.py,
-- gen_special_functions), their tails and gradients, and the other names.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.breadth_ref")
local S = dl.special

H.test("ndtr, log_ndtr, ndtri, erfcx, entr and xlog1py match PyTorch float64, tails and gradients", function()
  local FN = { ndtr = S.ndtr, log_ndtr = S.log_ndtr, ndtri = S.ndtri, erfcx = S.erfcx, entr = S.entr, xlog1py = S.xlog1py }
  H.eq(H.ref_cases(R.special_functions, FN, 1e-12, 1e-9), 6)
  -- inverse pairs and limits
  local p = dl.tensor({ 1e-300, 1e-50, 0.01, 0.5, 0.9 }, { dtype = "float64" })
  H.near(S.ndtr(S.ndtri(p)):totable(), p:totable(), 1e-12)
  H.values(S.ndtri(dl.tensor({ 0, 1 }, { dtype = "float64" })), { -math.huge, math.huge })
  local bad = S.ndtri(dl.tensor({ -0.1, 1.5 })):totable()
  H.ok(bad[1] ~= bad[1] and bad[2] ~= bad[2])
  H.eq(S.entr(dl.tensor({ -1.0 })):item(), -math.huge)
  H.eq(S.xlog1py(dl.tensor({ 0.0 }), dl.tensor({ -1.0 })):item(), 0)   -- (0 log 0, as PyTorch's)
  H.eq(S.expit, dl.sigmoid)
  H.near(S.gammaln(dl.tensor({ 5.0 })):item(), math.log(24), 1e-6)
  H.near(S.multigammaln(dl.tensor({ 2.5 }), 2):item(), dl.mvlgamma(dl.tensor({ 2.5 }), 2):item(), 1e-6)
  H.raises(function() S.ndtr("x") end, "special.ndtr: expected a tensor")
end)

H.test("the Bessel functions and zeta match PyTorch float64 (J and Y: mpmath) across their expansions, gradients included", function()
  local FN = {}
  for _, c in ipairs(R.bessel) do
    if c.name == "zeta" then
      local x = dl.tensor(c.x, { dtype = "float64" })
      FN.zeta = function(q) return S.zeta(x, q) end
    else
      FN[c.name] = S[c.name]
    end
  end
  H.eq(H.ref_cases(R.bessel, FN, 1e-13, 1e-11), 14)
  local inf, nan = math.huge, 0 / 0
  local f64 = { dtype = "float64" }
  -- limits, signs and domains (the mathematical limits at infinity, where PyTorch 1.13 has NaN)
  local x = dl.tensor({ -inf, -2, -0.0, 0, inf, nan }, f64)
  H.values(S.i0(x), { inf, 2.2795853023360673, 1, 1, inf, nan })
  H.values(S.i1(x), { -inf, -1.5906368546373291, 0, 0, inf, nan }, { tol = 1e-15 })
  H.values(S.i0e(x), { 0, 0.30850832255367105, 1, 1, 0, nan }, { tol = 1e-15 })
  H.values(S.bessel_j0(x), { 0, 0.22389077914123567, 1, 1, 0, nan }, { tol = 1e-15 })
  H.values(S.bessel_j1(x), { 0, -0.57672480775687339, 0, 0, 0, nan }, { tol = 1e-15 })
  H.values(S.bessel_y0(x), { nan, nan, -inf, -inf, 0, nan })
  H.values(S.modified_bessel_k1(x), { nan, nan, inf, inf, 0, nan })
  H.values(S.scaled_modified_bessel_k0(x), { nan, nan, inf, inf, 0, nan })
  H.values(S.spherical_bessel_j0(x), { 0, 0.45464871341284085, 1, 1, 0, nan }, { tol = 1e-15 })
  -- I_0 is finite up to its own overflow although e^x is not (709.8): I_0(712) = 2.5e307
  H.near(S.i0(dl.tensor({ 712 }, f64)):item() / 2.4684110577627523e307, 1, 1e-13)
  H.eq(S.modified_bessel_i0, S.i0)
  -- zeta's edges: 1 and below, poles at whole q <= 0, negative q for whole x only
  H.values(S.zeta(dl.tensor({ 1, 0.5, 2, 2.5, 3 }, f64), dl.tensor({ 1, 1, -2, -0.5, -1.5 }, f64)),
           { inf, nan, inf, nan, 0.11810202582086413 }, { tol = 1e-14 })
  H.near(S.zeta(2, dl.tensor({ 1.0 }, f64)):item(), math.pi ^ 2 / 6, 1e-15)
  -- derivatives at 0, where J_1 / x and I_1 / x tend to 1/2, and to the second order
  local z = dl.tensor({ 0 }, f64)
  local d = function(f) return dl.grad(function(t) return f(t):sum() end)(z):item() end
  H.eq(d(S.bessel_j1), 0.5)
  H.eq(d(S.i1), 0.5)
  H.eq(d(S.i1e), 0.5)
  H.eq(d(S.spherical_bessel_j0), 0)
  local t = dl.tensor({ 1.7 }, f64)
  local dd = dl.grad(dl.grad(function(v) return S.bessel_j0(v):sum() end))(t):item()
  H.near(dd, -S.bessel_j0(t):item() + S.bessel_j1(t):item() / 1.7, 1e-14)   -- J_0'' = -J_0 + J_1 / x
  -- float32 and integers: computed in double, rounded once; integers made the default float
  H.near(S.bessel_y1(dl.tensor({ 3.5 })):item(), 0.41018841788751, 1e-7)
  H.eq(S.i0(dl.tensor({ 1, 2 })).dtype, "float32")
  -- zeta has no derivative in x: asking for one is an error, and the runtime goes on
  H.raises(function() dl.grad(function(v) return S.zeta(v, 2):sum() end)(dl.tensor({ 3.0 }, f64)) end,
           "zeta: the derivative with respect to x (its first operand) is not implemented")
  H.near(dl.grad(function(q) return S.zeta(3, q):sum() end)(dl.tensor({ 2.0 }, f64)):item(),
         -3 * S.zeta(4, dl.tensor({ 2.0 }, f64)):item(), 1e-15)
end)

H.test("zeta far from its start: large x, q past 9, negative q folded (no loop of |q| rounds); derivatives near 0", function()
  local f64 = { dtype = "float64" }
  local function z(x, q) return dl.special.zeta(dl.tensor({ x }, f64), dl.tensor({ q }, f64)):item() end
  -- against mpmath at 40 digits
  H.near(z(50, 10) / 1.0086304954352791e-50, 1, 1e-14)
  H.near(z(100, 10) / 1.0000725777946107e-100, 1, 1e-14)
  H.near(z(20, 9) / 9.406868115795127e-20, 1, 1e-14)
  H.near(z(30, 9) / 2.465177526634085e-29, 1, 1e-14)
  H.near(z(4, -7.25) / 259.75686586723407, 1, 1e-14)
  H.near(z(3, -2.5) / 0.0541020258208637, 1, 1e-13)
  H.near(z(1.5, 0.3) / 8.237761671459724, 1, 1e-14)
  -- q = 0.5 - 1e8: 2 zeta(2, 1/2) - zeta(2, 1e8 + 1/2) = pi^2 - 1e-8, at once
  H.near(z(2, -1e8 + 0.5), math.pi ^ 2 - 1e-8, 1e-12)
  H.ok(z(2.5, -3.5) ~= z(2.5, -3.5))   -- (a fractional x of a negative q: NaN)
  H.near(dl.polygamma(40, dl.tensor({ 12 }, f64)):item() / -4808.71134922841, 1, 1e-13)
  H.near(dl.polygamma(3, dl.tensor({ -2.5 }, f64)):item() / 194.74787621918762, 1, 1e-13)
  -- derivatives near 0 of every order come from the series there: sin(x)/x's are -x/3
  -- and -1/3, J_1''' is -3/8 and I_1''' 3/8 (at 1e-8 and at 0)
  local S = dl.special
  local function d(f, k, x)
    local g = f
    for _ = 1, k do
      local h = g
      g = function(t) return dl.grad(function(u) return h(u):sum() end)(t) end
    end
    return g(dl.tensor({ x }, f64)):item()
  end
  for _, x in ipairs({ 0, 1e-8, 5e-4 }) do
    H.near(d(S.spherical_bessel_j0, 1, x), -x / 3 + x ^ 3 / 30, 1e-15)
    H.near(d(S.spherical_bessel_j0, 2, x), -1 / 3 + x * x / 10, 1e-9)
    H.near(d(S.bessel_j1, 3, x), -3 / 8, 1e-6)
    H.near(d(S.i1, 3, x), 3 / 8, 1e-6)
    H.near(d(S.bessel_j1, 1, x), 0.5, 1e-7)
  end
end)

H.test("log_ndtr, ndtri and erfcx have second derivatives (their backward differentiates again)", function()
  local f64 = { dtype = "float64" }
  local function d2(f, x)
    return dl.grad(dl.grad(function(v) return f(v):sum() end))(dl.tensor({ x }, f64)):item()
  end
  -- torch.autograd.grad twice (create_graph=True) of torch.special.*, float64
  H.near(d2(S.log_ndtr, 0.3), -0.56612783821825308, 1e-13)
  H.near(d2(S.log_ndtr, -2), -0.88572089958591782, 1e-12)
  H.near(d2(S.log_ndtr, 3), -0.013333211541740808, 1e-14)
  H.near(d2(S.ndtri, 0.3), -4.3378264936389526, 1e-12)
  H.near(d2(S.ndtri, 0.9), 41.609270291997753, 1e-11)
  H.near(d2(S.ndtri, 1e-5) / -2126167979.9193513, 1, 1e-12)
  H.near(d2(S.erfcx, 0.3), 1.0566269293223591, 1e-13)
  H.near(d2(S.erfcx, -1), 32.31063881876473, 1e-12)
  H.near(d2(S.erfcx, 5), 0.0080813778178739082, 1e-14)
  -- and a third: log_ndtr'''(0.3), 0.25146931297074593 in torch (three torch.autograd.grad)
  local d3 = dl.grad(dl.grad(dl.grad(function(v) return S.log_ndtr(v):sum() end)))(dl.tensor({ 0.3 }, f64)):item()
  H.near(d3, 0.25146931297074593, 1e-12)
end)

H.test("log_ndtr keeps its digits in the right tail (log1p of erfc), float64 and float32", function()
  local function rel(x, want, dtype)
    return S.log_ndtr(dl.tensor({ x }, { dtype = dtype })):item() / want - 1
  end
  -- torch.special.log_ndtr(torch.tensor([x], dtype=...))
  H.near(rel(5, -2.8665161296376331e-07, "float64"), 0, 1e-13)
  H.near(rel(8.5, -9.4795348222032529e-18, "float64"), 0, 1e-13)
  H.near(rel(10, -7.6198530241604975e-24, "float64"), 0, 1e-13)
  H.near(rel(5, -2.86651613e-07, "float32"), 0, 1e-5)
  H.near(rel(6, -9.86589255e-10, "float32"), 0, 1e-5)
  H.eq(S.log_ndtr(dl.tensor({ 0 }, { dtype = "float64" })):item(), -math.log(2))
end)

H.run()
