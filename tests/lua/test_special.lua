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

H.test("gammainc and gammaincc match PyTorch float64 from a = 0.01 to 1e4 (and mpmath where PyTorch's is off)", function()
  local f64 = { dtype = "float64" }
  local function pq(a, x)
    local at, xt = dl.tensor(a, f64), dl.tensor(x, f64)
    return S.gammainc(at, xt):totable(), S.gammaincc(at, xt):totable()
  end
  -- torch.special.gammainc / gammaincc(torch.tensor(a, float64), torch.tensor(x, float64))
  local a = { 0.01, 0.01, 0.5, 2.5, 2.5, 10, 10, 100, 100, 0.1 }
  local x = { 1e-5, 1, 0.01, 1.5, 40, 9.5, 11, 1, 150, 1e4 }
  local P = { 0.8963367982671977, 0.9977837653767727, 0.11246291601828491, 0.3000141641213724, 0.9999999999999991,
              0.47817397776279236, 0.6594893575343392, 3.981280818956634e-159, 0.9999940754596646, 1 }
  local Q = { 0.10366320173280279, 0.002216234623227991, 0.887537083981715, 0.6999858358786276, 8.391825114831597e-16,
              0.5218260222372076, 0.34051064246566076, 1, 5.924540335483577e-06, 0 }
  local p, q = pq(a, x)
  for i = 1, #a do
    H.near(p[i] / P[i], 1, 1e-13)
    if Q[i] == 0 then H.eq(q[i], 0) else H.near(q[i] / Q[i], 1, 1e-13) end
  end
  -- near a = x past 20 PyTorch's asymptotic expansion is 1e-11 to 1e-9 off: mpmath.gammainc
  -- (regularized, 40 digits) there, and PyTorch's within its error
  p, q = pq({ 30, 1000, 1e4, 1e4 }, { 29, 900, 1e4, 1.01e4 })
  local MP = { 0.4508291147181239, 0.0005499022657117829, 0.5013298083399552, 0.8413487504471796 }
  local MQ = { 0.5491708852818761, 0.9994500977342882, 0.4986701916600448, 0.15865124955282037 }
  local TP = { 0.45082911438315487, 0.000549902265429622, 0.5013298083214526, 0.8413487504359474 }
  for i = 1, 4 do
    H.near(p[i] / MP[i], 1, 1e-13)
    H.near(q[i] / MQ[i], 1, 1e-13)
    H.near(p[i] / TP[i], 1, 1e-9)
  end
end)

H.test("gammainc's edges as PyTorch's, broadcasting, float32, and its derivative (in x only)", function()
  local f64 = { dtype = "float64" }
  local inf, nan = math.huge, 0 / 0
  local a = dl.tensor({ 1, 1, 1, 0, 0, -1, 2, inf, inf, nan, 1, 0, inf }, f64)
  local x = dl.tensor({ 0, inf, -1, 1, 0, 1, nan, 1, inf, 1, 1e-300, inf, 0 }, f64)
  -- torch.special.gammainc / gammaincc of the same float64 tensors
  H.values(S.gammainc(a, x), { 0, 1, nan, 1, nan, nan, nan, 0, nan, nan, 1.0000000000000237e-300, 1, 0 },
           { tol = 1e-14 })
  H.values(S.gammaincc(a, x), { 1, 0, nan, 0, nan, nan, nan, 1, nan, nan, 1, 0, 1 })
  -- torch.special.gammainc(torch.tensor([[0.5], [2.0]]), torch.tensor([1.0, 2.0, 3.0])), float32
  local p = S.gammainc(dl.tensor({ { 0.5 }, { 2 } }), dl.tensor({ 1, 2, 3 }))
  H.shape(p, { 2, 3 })
  H.eq(p.dtype, "float32")
  H.near(p:totable(), { { 0.8427008390426636, 0.9544997215270996, 0.9856941103935242 },
                        { 0.26424112915992737, 0.5939942598342896, 0.8008517026901245 } }, 1e-7)
  local q = S.gammaincc(dl.tensor({ { 0.5 }, { 2 } }), dl.tensor({ 1, 2, 3 }))
  H.near(q:totable(), { { 0.1572992354631424, 0.0455002635717392, 0.014305876567959785 },
                        { 0.735758900642395, 0.4060058891773224, 0.1991482824087143 } }, 1e-7)
  H.eq(S.gammainc(dl.tensor({ 2 }), dl.tensor({ 1 }, f64)).dtype, "float64")
  H.near(S.gammainc(1, dl.tensor(2)):item(), 1 - math.exp(-2), 1e-7)
  H.raises(function() S.gammainc(1, 2) end, "igamma: expected a tensor, got number and number")   -- (torch: a TypeError)
  -- torch.autograd.grad(torch.special.gammainc(a, x).sum(), x), float64 (gammaincc: its negative)
  local av = dl.tensor({ 0.5, 2.5, 3, 25 }, f64)
  local want = { 0.763090578768186, 0.3083606596075385, 0.14652511110987343, 0.05573456138533489 }
  local g = dl.grad(function(t) return S.gammainc(av, t):sum() end)(dl.tensor({ 0.3, 1.5, 4, 20 }, f64))
  H.near(g:totable(), want, 1e-14)
  g = dl.grad(function(t) return S.gammaincc(av, t):sum() end)(dl.tensor({ 0.3, 1.5, 4, 20 }, f64))
  H.near(g:totable(), { -want[1], -want[2], -want[3], -want[4] }, 1e-14)
  -- PyTorch: "the derivative for 'igamma: input' is not implemented"
  H.raises(function() dl.grad(function(t) return S.gammainc(t, 2):sum() end)(av) end,
           "igamma: the derivative with respect to a (its first operand) is not implemented")
  H.raises(function() dl.grad(function(t) return S.gammaincc(t, 2):sum() end)(av) end, "igammac: the derivative")
  H.raises(function() S.gammainc("a", 1) end, "igamma: expected a tensor")
end)

H.test("polygamma left of 0 keeps its digits near the poles (reflection), and is 0 at +inf", function()
  local f64 = { dtype = "float64" }
  local inf = math.huge
  local x = { -1e-10, -0.5, -1.5, -2.0000001, -1e-5, -3.7, -0.999999, -100.3 }
  local function rel(n, want, tol)
    local got = S.polygamma(n, dl.tensor(x, f64)):totable()
    for i = 1, #x do H.near(got[i] / want[i], 1, tol, "polygamma(" .. n .. ", " .. x[i] .. ")") end
  end
  -- torch.polygamma(n, torch.tensor(x, dtype=torch.float64)), n = 2 and 3 (within 4e-15 of mpmath's)
  rel(2, { 1.9999999999999998e+30, -0.82879664423432, -0.23620405164172825, 2.0000000098194733e+21,
           1999999999999997.2, -68.89345468867353, -1.999999999827466e+18, 68.8374452979615 }, 1e-14)
  rel(3, { 5.999999999999999e+40, 193.40909103400242, 194.59427621918758, 6.000000039277894e+28,
           5.999999999999997e+20, 768.9946494408655, 5.999999999309864e+24, 769.0209123808436 }, 1e-14)
  -- n = 1: mpmath.polygamma(1, x) at 40 digits (PyTorch's trigamma is 1e-12 to 2e-9 off left of 0;
  -- at -1e-10 its 9.999999999999998e+19)
  rel(1, { 1e+20, 8.934802200544679, 9.379246644989124, 100000000327318.67, 10000000001.644957,
           14.84242186412428, 999999999945.1335, 15.06949314924401 }, 1e-14)
  -- torch.polygamma(1, inf) is 0 (2 and 3: NaN in PyTorch 1.13, their limit 0 here); -inf has none
  H.values(S.polygamma(1, dl.tensor({ inf, -inf }, f64)), { 0, 0 / 0 })
  H.values(S.polygamma(2, dl.tensor({ inf, 1e10 }, f64)), { 0, -1.0000000001e-20 }, { tol = 1e-30 })
  H.eq(S.polygamma(1, dl.tensor({ inf })):item(), 0)
  H.eq(S.polygamma(1, dl.tensor({ 0 }, f64)):item(), inf)   -- (the poles: the engine's)
  -- float32: torch.polygamma(1, torch.tensor([-1e-3, -2.5]))
  local p32 = S.polygamma(1, dl.tensor({ -1e-3, -2.5 }))
  H.eq(p32.dtype, "float32")
  H.near(p32:totable(), { 1000001.5625, 9.539247512817383 }, 1e-6)
  -- torch.autograd.grad(torch.polygamma(2, x).sum(), x), float64
  local g = dl.grad(function(v) return S.polygamma(2, v):sum() end)(dl.tensor({ -0.5, -1e-10, -2.3 }, f64)):totable()
  H.near(g[1] / 193.40909103400242, 1, 1e-14)
  H.near(g[2] / 5.999999999999999e+40, 1, 1e-14)
  H.near(g[3] / 768.9350646661426, 1, 1e-14)
  H.eq(S.polygamma(0, dl.tensor({ 1 }, f64)):item(), dl.digamma(dl.tensor({ 1 }, f64)):item())
  H.raises(function() S.polygamma(-1, dl.tensor({ 1.0 })) end, "polygamma: n must be a whole number >= 0")
end)

H.test("log_ndtr stays finite in float32's left tail (computed in double)", function()
  -- torch.special.log_ndtr(torch.tensor([-15., -25., -30., -13., -40.])) (float32)
  local got = S.log_ndtr(dl.tensor({ -15, -25, -30, -13, -40 })):totable()
  local want = { -116.13138580322266, -316.639404296875, -454.3212585449219, -87.98973083496094, -804.6084594726562 }
  for i = 1, 5 do H.near(got[i] / want[i], 1, 2e-7) end
  -- torch.autograd.grad(torch.special.log_ndtr(x).sum(), x), float32 (PyTorch's 1e-6 off the
  -- double's 15.066114, 25.039610, 30.033495)
  local g = dl.grad(function(v) return S.log_ndtr(v):sum() end)(dl.tensor({ -15, -25, -30 })):totable()
  local gw = { 15.06610107421875, 25.039779663085938, 30.03369903564453 }
  for i = 1, 3 do H.near(g[i] / gw[i], 1, 1e-5) end
  H.eq(S.log_ndtr(dl.tensor({ -20 })).dtype, "float32")
end)

H.test("the incomplete gammas at a huge a (Temme's expansion), a denormal a, and polygamma's high orders left of 0", function()
  local f64 = { dtype = "float64" }
  -- mpmath (40 digits): gammainc(a, x, inf, regularized=True) and 1 minus it; torch 1.13 is 1e-5 off at a = 1e9
  local a = dl.tensor({ 1e9, 1e9, 1e12 }, f64)
  local x = dl.tensor({ 1e9, 1e9 - 3 * 31622.776601683792, 1e12 + 2e6 }, f64)
  local P, Q = dl.igamma(a, x):totable(), dl.igammac(a, x):totable()
  for i, want in ipairs({ 0.5000042052208701, 0.0013495243297381703, 0.9772498140608813 }) do
    H.near(P[i] / want, 1, 1e-10, "P " .. i)
  end
  for i, want in ipairs({ 0.4999957947791299, 0.9986504756702619, 0.022750185939118726 }) do
    H.near(Q[i] / want, 1, 1e-10, "Q " .. i)
  end
  -- a denormal a: P stays within [0, 1]
  local p = dl.igamma(dl.tensor({ 1e-320 }, f64), dl.tensor({ 0.5 }, f64)):item()
  H.ok(p >= 0 and p <= 1, "P = " .. p)
  -- mpmath (400 digits): polygamma(42, -0.5), polygamma(42, -10.5); orders past 40 reflect too
  local v = dl.polygamma(42, dl.tensor({ -0.5, -10.5 }, f64)):totable()
  H.near(v[1] / -3.7649054672585512e43, 1, 1e-12)
  H.near(v[2] / -354810.97945938316, 1, 1e-12)
end)

H.run()
