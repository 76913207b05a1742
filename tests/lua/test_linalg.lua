-- dl.linalg against torch.linalg (tests/lua/ref/linalg_ref.lua, written by
-- tests/ref/gen_linalg_refs.py): values, gradients and second-order gradients in
-- float64; then shapes, options, dtypes, empty and singular inputs, and errors.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.linalg_ref")
local L = dl.linalg

local f64 = { dtype = "float64" }
local function t64(v) return dl.tensor(v, f64) end
local function mT(x) return x:transpose(-2, -1) end
local function sandwich(x, y)   -- x diag(1..k) y, as the generator's
  local k = x:size(-1)
  return (x * dl.arange(1, k + 1, f64)):matmul(y)
end
local function triu(a, k) return a:triu(k) end

-- Each case of the reference, as a function of its inputs returning its results.
local CASES = {
  solve = function(a, b) return { L.solve(a, b) } end,
  solve_vector = function(a, b) return { L.solve(a, b) } end,
  solve_broadcast = function(a, b) return { L.solve(a, b) } end,
  solve_right = function(a, b) return { L.solve(a, b, { left = false }) } end,
  solve_triangular_upper = function(a, b) return { L.solve_triangular(a, b, { upper = true }) } end,
  solve_triangular_lower_unit_right = function(a, b)
    return { L.solve_triangular(a, b, { upper = false, left = false, unitriangular = true }) }
  end,
  cholesky = function(m) return { L.cholesky(m:matmul(mT(m)) + dl.eye(4, f64)) } end,
  cholesky_upper = function(m) return { L.cholesky(m:matmul(mT(m)) + dl.eye(3, f64), { upper = true }) } end,
  qr_tall = function(a) return { L.qr(a) } end,
  qr_wide = function(a) return { L.qr(a) } end,
  qr_complete_square = function(a) return { L.qr(a, { mode = "complete" }) } end,
  eigh = function(a)
    local w, v = L.eigh(a + mT(a))
    return { w, sandwich(v, mT(v)) }
  end,
  eigh_upper = function(a)
    local w, v = L.eigh(triu(a, 0) + mT(triu(a, 1)), { UPLO = "U" })
    return { w, sandwich(v, mT(v)) }
  end,
  eigvalsh = function(a) return { L.eigvalsh(a + mT(a)) } end,
  svd_tall = function(a)
    local u, s, vh = L.svd(a, { full_matrices = false })
    return { s, sandwich(u, vh), sandwich(u, mT(u)), sandwich(mT(vh), vh) }
  end,
  svdvals = function(a) return { L.svdvals(a) } end,
  det = function(a) return { L.det(a) } end,
  slogdet = function(a)
    local _, l = L.slogdet(a)
    return { l }
  end,
  inv = function(a) return { L.inv(a) } end,
  lstsq_tall = function(a, b) return { (L.lstsq(a, b)) } end,
  lstsq_vector = function(a, b) return { (L.lstsq(a, b)) } end,
  pinv_tall = function(a) return { L.pinv(a) } end,
  pinv_wide = function(a) return { L.pinv(a) } end,
  vector_norm = function(a) return { L.vector_norm(a, 3) } end,
  cond = function(a) return { L.cond(a) } end,
}
CASES.svd_wide = CASES.svd_tall
for name, ord in pairs({ fro = "fro", nuc = "nuc", ["2"] = 2, m2 = -2, ["1"] = 1, m1 = -1, inf = math.huge,
                          minf = -math.huge }) do
  CASES["matrix_norm_" .. name] = function(a) return { L.matrix_norm(a, ord) } end
end

-- sum_k sum(f(...)_k * W_k), the scalar the reference differentiated.
local function weighted(f, ws)
  return function(...)
    local outs, total = f(...), nil
    for k, o in ipairs(outs) do
      local term = (o * ws[k]):sum()
      total = total and total + term or term
    end
    return total
  end
end

H.test("every function equals torch.linalg: values, gradients, second order", function()
  local n = 0
  for name, ref in pairs(R.cases) do
    local f = CASES[name]
    H.ok(f ~= nil, "no Lua case for the reference case " .. name)
    local xs, ws, nums = {}, {}, {}
    for i, v in ipairs(ref.inputs) do xs[i], nums[i] = t64(v), i end
    for k, v in ipairs(ref.weights) do ws[k] = t64(v) end
    local outs = f(unpack(xs))
    H.eq(#outs, #ref.outputs, name .. ": result count")
    for k, o in ipairs(outs) do
      local want = ref.outputs[k]
      H.near(type(want) == "number" and o:item() or o:totable(), want, 1e-9, name .. ": result " .. k)
    end
    local loss = weighted(f, ws)
    local g = { dl.grad(loss, nums)(unpack(xs)) }
    for i = 1, #xs do H.near(g[i]:totable(), ref.grads[i], 1e-8, name .. ": gradient " .. i) end
    if ref.second then
      local vs = {}
      for i, v in ipairs(ref.vs) do vs[i] = t64(v) end
      local inner = function(...)
        local gi, total = { dl.grad(loss, nums)(...) }, nil
        for i = 1, #gi do
          local term = (gi[i] * vs[i]):sum()
          total = total and total + term or term
        end
        return total
      end
      local h = { dl.grad(inner, nums)(unpack(xs)) }
      for i = 1, #xs do H.near(h[i]:totable(), ref.second[i], 1e-7, name .. ": second order " .. i) end
    end
    n = n + 1
  end
  H.ok(n >= 30, "too few reference cases: " .. n)
end)

H.test("matrix_rank counts the singular values kept", function()
  local a = t64(R.rank.matrix)
  H.eq(L.matrix_rank(a):item(), R.rank.rank)
  H.eq(L.matrix_rank(a).dtype, "int64")
  H.eq(L.matrix_rank(dl.eye(3)):item(), 3)
  H.eq(L.matrix_rank(dl.zeros(3, 2)):item(), 0)
end)

H.test("shapes, options and dtypes", function()
  local a = dl.randn(2, 5, 3)
  local q, r = L.qr(a)
  H.shape(q, { 2, 5, 3 }); H.shape(r, { 2, 3, 3 })
  q, r = L.qr(a, { mode = "complete" })
  H.shape(q, { 2, 5, 5 }); H.shape(r, { 2, 5, 3 })
  H.ok(dl.allclose(q:matmul(r), a, 1e-5, 1e-5), "complete QR reproduces A")
  q, r = L.qr(a, { mode = "r" })
  H.eq(q:numel(), 0); H.shape(r, { 2, 3, 3 })
  local u, s, vh = L.svd(a)   -- full_matrices by default, as torch.linalg.svd
  H.shape(u, { 2, 5, 5 }); H.shape(s, { 2, 3 }); H.shape(vh, { 2, 3, 3 })
  u, s, vh = L.svd(a, { full_matrices = false })
  H.shape(u, { 2, 5, 3 })
  H.ok(dl.allclose((u * s:unsqueeze(-2)):matmul(vh), a, 1e-5, 1e-5), "U diag(S) Vh reproduces A")
  -- float32 stays float32, integers compute in the default float dtype
  H.eq(L.inv(dl.eye(3)).dtype, "float32")
  local ai = dl.tensor({ { 2, 0 }, { 0, 4 } }, { dtype = "int64" })
  H.eq(L.det(ai).dtype, "float32")
  H.near(L.det(ai):item(), 8, 1e-6)
  H.near(L.solve(ai, dl.tensor({ 2, 4 })):totable(), { 1, 1 }, 1e-6)
  -- float32 results agree with float64 ones to float32's precision
  local w = dl.randn(4, 4, f64)
  w = w + mT(w)
  local e64 = L.eigvalsh(w)
  H.near(L.eigvalsh(w:float()):totable(), e64:totable(), 1e-4)
end)

H.test("empty and singular matrices", function()
  local sign, logabs = L.slogdet(dl.zeros(3, 3))
  H.eq(sign:item(), 0); H.eq(logabs:item(), -math.huge)
  H.eq(L.det(dl.zeros(2, 2)):item(), 0)
  sign, logabs = L.slogdet(dl.zeros(2, 0, 0))
  H.eq(sign:totable(), { 1, 1 }); H.eq(logabs:totable(), { 0, 0 })
  H.shape(L.solve(dl.zeros(0, 3, 3), dl.zeros(0, 3, 1)), { 0, 3, 1 })
  H.shape(L.inv(dl.zeros(0, 0)), { 0, 0 })
  local q, r = L.qr(dl.zeros(3, 0), { mode = "complete" })
  H.ok(dl.equal(q, dl.eye(3)), "the complete Q of a 3 x 0 matrix is the identity")
  H.shape(r, { 3, 0 })
  local w = L.eigvalsh(dl.zeros(0, 0))
  H.shape(w, { 0 })
  -- a singular system names the matrix of the batch, 1-based
  local a = dl.stack({ dl.eye(2), dl.zeros(2, 2) })
  H.raises(function() return L.solve(a, dl.ones(2, 2, 1)) end, "linalg.solve: the matrix is singular (matrix 2 of the batch)")
  H.raises(function() return L.cholesky(dl.tensor({ { 1, 2 }, { 2, 1 } })) end,
           "linalg.cholesky: the matrix is not positive-definite: its leading minor of order 2 is not positive")
  -- the runtime stays usable
  H.near(L.solve(dl.eye(2) * 2, dl.ones(2)):totable(), { 0.5, 0.5 }, 0)
end)

H.test("det's gradient is the adjugate, singular matrices included; norms' is 0 at 0", function()
  local f64 = { dtype = "float64" }
  local gdet = dl.grad(L.det)
  -- rank 1, rank 2 of 3, rank 0, and an invertible one: adj(A)^T by hand
  H.near(gdet(dl.tensor({ { 1, 2 }, { 2, 4 } }, f64)):totable(), { { 4, -2 }, { -2, 1 } }, 1e-12)
  H.near(gdet(dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }, f64)):totable(),
         { { -3, 6, -3 }, { 6, -12, 6 }, { -3, 6, -3 } }, 1e-10)
  H.near(gdet(dl.zeros(3, 3, f64)):totable(), dl.zeros(3, 3):totable(), 0)
  local b = dl.tensor({ { 2, 1 }, { 1, 3 } }, f64)
  H.near(gdet(b):totable(), { { 3, -1 }, { -1, 2 } }, 1e-12)
  -- a batch with one singular matrix, and the second order: d/dA sum(adj(A)^T) for 2 x 2
  local batch = dl.stack({ dl.tensor({ { 1, 2 }, { 2, 4 } }, f64), b })
  H.near(dl.grad(function(x) return L.det(x):sum() end)(batch):totable(),
         { { { 4, -2 }, { -2, 1 } }, { { 3, -1 }, { -1, 2 } } }, 1e-12)
  H.near(dl.grad(function(x) return gdet(x):sum() end)(b):totable(), { { 1, -1 }, { -1, 1 } }, 1e-12)
  H.ok(dl.gradcheck(L.det, { dl.randn(3, 3, f64) }), "det gradcheck")

  -- vector and matrix norms at zero: gradient 0 at first and second order (not NaN)
  H.near(dl.grad(function(x) return x:norm() end)(dl.zeros(3, f64)):totable(), { 0, 0, 0 }, 0)
  H.near(dl.grad(function(x) return x:norm({ p = 3 }) end)(dl.zeros(2, f64)):totable(), { 0, 0 }, 0)
  H.near(dl.grad(function(x) return L.matrix_norm(x) end)(dl.zeros(2, 2, f64)):totable(),
         { { 0, 0 }, { 0, 0 } }, 0)
  H.near(dl.grad(function(x) return dl.grad(function(y) return y:norm() end)(x):sum() end)(dl.zeros(2, f64))
         :totable(), { 0, 0 }, 0)
  -- elsewhere unchanged: x / |x|, and 1 < p < 2 finite at a zero element
  H.near(dl.grad(function(x) return L.matrix_norm(x) end)(dl.tensor({ { 3, 0 }, { 0, 4 } }, f64)):totable(),
         { { 0.6, 0 }, { 0, 0.8 } }, 1e-12)
  local g = dl.grad(function(x) return x:norm({ p = 1.5 }) end)(dl.tensor({ 0, 1, -2 }, f64)):totable()
  H.eq(g[1], 0)
  H.near(g[2], (1 / (1 + 2 ^ 1.5)) ^ (1 / 3), 1e-12)
  H.ok(dl.gradcheck(function(x) return x:norm({ p = 1.5 }) end, { dl.tensor({ 0.5, 1, -2 }, f64) }), "p = 1.5")
end)

H.test("NaN in a matrix is an error, not garbage; lstsq's batches", function()
  local a = dl.tensor({ { 1, 0 / 0 }, { 2, 3 } }, f64)
  H.raises(function() return L.svdvals(a) end, "linalg.svd: the matrix holds NaN or infinity")
  local w = L.eigvalsh(a:t())                           -- eigh reads the lower triangle: NaN propagates
  H.ok(w[1] ~= w[1] and w[2] ~= w[2], "eigenvalues of a matrix with NaN are NaN")
  H.raises(function() return L.matrix_rank(a) end, "linalg.svd: the matrix holds NaN or infinity")
  -- Infinity too: LAPACK's SVD iterated without end on it (tests/fuzz, fuzz_breadth)
  local inf = dl.tensor({ { 1, 1 / 0 }, { 2, 3 } }, f64)
  H.raises(function() return L.svd(inf) end, "linalg.svd: the matrix holds NaN or infinity")
  H.raises(function() return L.svd(inf:float(), { full_matrices = false }) end, "holds NaN or infinity")
  w = L.eigvalsh(inf:t())
  H.ok(w[1] ~= w[1] and w[2] ~= w[2], "eigenvalues of a matrix with infinity are NaN")
  H.eq(L.eigvalsh(inf).shape, { 2 })                    -- the upper triangle is not read
  local A, B = dl.randn(1, 4, 3, f64), dl.randn(4, 4, f64)   -- B a batch of matrices, not of vectors
  H.eq(L.lstsq(A, B).shape, { 1, 3, 4 })
  H.eq(L.lstsq(dl.randn(2, 6, 3, f64), dl.randn(6, 2, f64)).shape, { 2, 3, 2 })
  H.eq(L.lstsq(dl.randn(2, 6, 3, f64), dl.randn(2, 6, f64)).shape, { 2, 3 })
end)

H.test("gradients that have no unique value are refused by name", function()
  local a = dl.randn(5, 3)
  H.raises(function()
    return dl.grad(function(x) local q = L.qr(x, { mode = "complete" }); return q:sum() end)(a)
  end, "linalg.qr: the complete decomposition of a matrix with more rows than columns has no unique gradient")
  H.raises(function()
    return dl.grad(function(x) local u = L.svd(x); return u:sum() end)(a)
  end, "linalg.svd: the singular vectors of full_matrices = true are not unique")
  -- the singular values of a full SVD are differentiable
  local g = dl.grad(function(x) local _, s = L.svd(x); return s:sum() end)(a)
  H.shape(g, { 5, 3 })
end)

H.test("solves, factorizations and norms check their arguments", function()
  H.raises(function() return L.solve(dl.ones(2, 3), dl.ones(2)) end, "linalg.solve: expected square matrices, got shape (2, 3)")
  H.raises(function() return L.solve(dl.eye(3), dl.ones(2, 2)) end, "linalg.solve: A (3, 3) and B (2, 2) do not match")
  H.raises(function() return L.solve(dl.eye(2), dl.ones(2), { right = true }) end, "linalg.solve: unknown option 'right'")
  H.raises(function() return L.solve_triangular(dl.eye(2), dl.ones(2, 1)) end, "linalg.solve_triangular: expected the option upper")
  H.raises(function() return L.inv(dl.ones(2, 3)) end, "linalg.inv: expected square matrices, got shape (2, 3)")
  H.raises(function() return L.matrix_norm(dl.eye(2), 3) end, "linalg.matrix_norm: ord must be")
  H.raises(function() return L.lstsq(dl.ones(3, 2), dl.ones(4)) end, "linalg.lstsq: A (3, 2) and B (4,) do not match")
  H.raises(function() return L.eigh(dl.eye(2), { UPLO = "X" }) end, "linalg.eigh: UPLO must be")
  H.raises(function() return L.cholesky("A") end, "linalg.cholesky: expected a tensor, got string")
end)

H.test("dl.export captures the decompositions and runs them back bit for bit", function()
  local dir = os.getenv("TMPDIR") or "/tmp"
  local path = dir .. "/dlua_linalg_" .. tostring(os.time()) .. "_" .. tostring(math.random(1e6)) .. ".dlg"
  local f = function(a, b)
    local x = L.solve(a, b)
    local q, r = L.qr(a)
    local w = L.eigvalsh(a + mT(a))
    local s = L.svdvals(a)
    local _, ld = L.slogdet(a)
    return x + r:sum() + w:sum() + s:sum() + ld + L.cholesky(a:matmul(mT(a))):sum()
      + L.solve_triangular(r, q:t():matmul(b), { upper = true })
  end
  local a, b = dl.randn(4, 4) + dl.eye(4) * 4, dl.randn(4, 2)
  dl.export(f, { a, b }, { path = path })
  local g = dl.export.load(path)
  H.ok(dl.equal(g(a, b), f(a, b)), "the loaded graph equals eager execution")
  local a2, b2 = dl.randn(4, 4) + dl.eye(4) * 4, dl.randn(4, 2)
  H.ok(dl.equal(g(a2, b2), f(a2, b2)), "and on other inputs")
  os.remove(path)
end)

H.test("pinv's gradient is the closed form where singular values repeat", function()
  local W = t64({ { 1, 2 }, { 3, 4 } })
  local Q = t64({ { 0.6, -0.8 }, { 0.8, 0.6 } })
  local function gp(a, w) return dl.grad(function(x) return (L.pinv(x) * w):sum() end)(a) end
  -- torch.autograd.grad((torch.linalg.pinv(A) * W).sum(), A) for each A
  H.near(dl.grad(function(x) return L.pinv(x):sum() end)(dl.eye(2, f64)):totable(), { { -1, -1 }, { -1, -1 } }, 1e-14)
  H.near(gp(Q, W):totable(), { { 2.68, -0.24 }, { -4.76, -0.32 } }, 1e-14)
  H.near(gp(dl.zeros(2, 3, f64), dl.arange(0, 6, f64):reshape(3, 2)):totable(), dl.zeros(2, 3):totable(), 0)
  H.near(gp(t64({ { 2, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 } }), dl.arange(0, 9, f64):reshape(3, 3)):totable(),
         { { 0, 0.75, 1.5 }, { 0.25, 0, 0 }, { 0.5, 0, 0 } }, 1e-14)
  H.near(gp(dl.stack({ dl.eye(2, f64), Q }), W):totable(),
         { { { -1, -2 }, { -3, -4 } }, { { 2.68, -0.24 }, { -4.76, -0.32 } } }, 1e-14)
  -- second order at 2 I: d/dA sum(grad(sum(pinv(A) * W)) * V), torch's double backward
  local V = t64({ { 1, -1 }, { 0.5, 2 } })
  H.near(dl.grad(function(a) return (gp(a, W) * V):sum() end)(dl.eye(2, f64) * 2):totable(),
         { { 0.1875, 1.0625 }, { 0.5, 1.9375 } }, 1e-14)
  H.ok(dl.gradcheck(function(a) return L.pinv(a) end, { dl.randn(3, 2, f64) }), "pinv gradcheck, second order too")
end)

H.test("pinv and matrix_rank: hermitian reads the lower triangle, atol and rtol as torch", function()
  local A = t64({ { 2, 9, 9 }, { 1, 3, 9 }, { 0.5, 1, -1 } })   -- the upper triangle is not read
  -- torch.linalg.pinv(A, hermitian=True) and its gradient against W = arange(9)
  H.near(L.pinv(A, { hermitian = true }):totable(),
         { { 0.5925925925925933, -0.2222222222222227, 0.07407407407407404 },
           { -0.2222222222222227, 0.33333333333333354, 0.22222222222222215 },
           { 0.07407407407407404, 0.22222222222222215, -0.7407407407407406 } }, 1e-14)
  local W = dl.arange(0, 9, f64):reshape(3, 3)
  H.near(dl.grad(function(x) return (L.pinv(x, { hermitian = true }) * W):sum() end)(A):totable(),
         { { -0.2008840115836018, 0.7076665142508822, 5.457094955037345 },
           { -2.7437890565462633, -2.0905349794238677, 19.062490474013106 },
           { 1.6460905349794253, -1.5311690291114097, -16.64715744551134 } }, 1e-12)
  H.near(L.pinv(t64({ { 1, 0 }, { 0, -2 } }), { hermitian = true }):totable(), { { 1, 0 }, { 0, -0.5 } }, 1e-15)
  H.eq(L.matrix_rank(t64({ { 0, 7 }, { 0, 0 } }), { hermitian = true }):item(), 0)   -- torch: 0 (and 1 without)
  H.eq(L.matrix_rank(t64({ { 0, 7 }, { 0, 0 } })):item(), 1)
  -- the cutoff is max(atol, rtol * sigma_max), rtol 0 when only an atol > 0 is given
  local D = t64({ { 1, 0 }, { 0, 1e-17 } })
  H.eq(L.matrix_rank(D):item(), 1)
  H.eq(L.matrix_rank(D, { atol = 1e-20 }):item(), 2)
  H.eq(L.matrix_rank(D, { atol = 0 }):item(), 1)
  H.near(L.pinv(D, { atol = 1e-20 }):totable(), { { 1, 0 }, { 0, 1e17 } }, 1e-15 * 1e17)
  local S = t64({ { 4, 0, 0 }, { 0, 1e-3, 0 }, { 0, 0, 0 } })
  H.eq(L.matrix_rank(S, { atol = 1e-2 }):item(), 1)
  H.eq(L.matrix_rank(S, { atol = 1e-4 }):item(), 2)
  H.eq(L.matrix_rank(S, { atol = 1e-4, rtol = 1e-2 }):item(), 1)
  H.eq(L.matrix_rank(S, { tol = 1e-2, hermitian = true }):item(), 1)
  H.near(L.pinv(S, { atol = 1e-2 }):totable(), { { 0.25, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 } }, 1e-15)
  H.raises(function() return L.pinv(S, { atol = "x" }) end, "linalg.pinv: expected a number atol, got string")
  H.raises(function() return L.matrix_rank(S, { tol = 1, rtol = 1 }) end, "linalg.matrix_rank: tol is an atol alone")
  H.raises(function() return L.pinv(dl.ones(2, 3), { hermitian = true }) end, "linalg.pinv: expected square matrices")
  H.raises(function() return L.pinv(S, { rcond = 1 }) end, "linalg.pinv: unknown option 'rcond'")
end)

H.test("lstsq: least-norm solution of a rank-deficient A, and torch's further results", function()
  local A, B = t64({ { 1, 2 }, { 2, 4 }, { 3, 6 } }), t64({ { 1 }, { 2 }, { 4 } })
  -- torch.linalg.lstsq(A, B) (gelsy): solution [0.2429, 0.4857], rank 1
  local x, res, rank, sv = L.lstsq(A, B)
  H.near(x:totable(), { { 0.24285714285714277 }, { 0.48571428571428554 } }, 1e-14)
  H.eq(rank:item(), 1); H.eq(rank.dtype, "int64")
  H.shape(res, { 0 }); H.shape(sv, { 0 })
  H.near(L.lstsq(A, t64({ 1, 2, 4 })):totable(), { 0.24285714285714277, 0.48571428571428554 }, 1e-14)
  x, res, rank, sv = L.lstsq(A, B, { driver = "gelsd" })
  H.near(sv:totable(), { 8.366600265340756, 0 }, 1e-14)
  H.shape(res, { 0 })   -- not of full rank: no residuals
  -- full rank: torch's residuals |A X - B|^2 per column (not for gelsy), rank, singular values
  local A2 = t64({ { 1, 2 }, { 3, 4.5 }, { 3, 6 } })
  x, res, rank, sv = L.lstsq(A2, B, { driver = "gelss" })
  H.near(x:totable(), { { -1.2333333333333334 }, { 1.2666666666666666 } }, 1e-13)
  H.near(res:totable(), { 0.10000000000000026 }, 1e-13)
  H.eq(rank:item(), 2)
  H.near(sv:totable(), { 8.886228888918065, 0.5337940930340022 }, 1e-13)
  x, res, rank = L.lstsq(A2, t64({ 1, 2, 4 }), { driver = "gels" })
  H.near(x:totable(), { -1.2333333333333334, 1.2666666666666666 }, 1e-13)
  H.near(res:totable(), { 0.10000000000000026 }, 1e-13)
  H.shape(rank, { 0 })
  H.shape(select(2, L.lstsq(A2, B)), { 0 })
  -- a batch with one rank-deficient matrix
  x, res, rank = L.lstsq(dl.stack({ A2, A }), dl.stack({ B, B }))
  H.near(x:totable(), { { { -1.2333333333333334 }, { 1.2666666666666666 } }, { { 0.24285714285714277 }, { 0.48571428571428554 } } },
         1e-13)
  H.eq(rank:totable(), { 2, 1 })
  -- torch.autograd.grad((lstsq(A, B).solution * [[1], [-2]]).sum(), (A, B)) at the rank-1 A
  local gA, gB = dl.grad(function(a, b) return (L.lstsq(a, b) * t64({ { 1 }, { -2 } })):sum() end, { 1, 2 })(A, B)
  H.near(gA:totable(), { { 0.04, 0.010612244897959186 }, { 0.08, 0.021224489795918365 },
                         { 0.11142857142857138, 0.014693877551020404 } }, 1e-14)
  H.near(gB:totable(), { { -0.04285714285714288 }, { -0.08571428571428573 }, { -0.12857142857142856 } }, 1e-14)
  H.raises(function() return L.lstsq(A, B, { method = "qr" }) end, "linalg.lstsq: unknown option 'method'")
  H.raises(function() return L.lstsq(A, B, { driver = "gelsx" }) end, "linalg.lstsq: driver must be")
  H.raises(function() return L.lstsq(A, B, { rcond = -1 }) end, "linalg.lstsq: rcond must be a number >= 0")
end)

H.test("norms take dim as torch.linalg's: matrix_norm, norm, vector_norm's keepdim", function()
  local X = dl.arange(0, 24, f64):reshape(2, 3, 4):sin()
  -- torch.linalg.matrix_norm(X, ord, dim) with dims (0, 2), (2, 0), (2, 1)
  H.near(L.matrix_norm(X, "fro", { 1, 3 }):totable(), { 1.850253530941197, 1.8962090266902203, 2.1666194346883176 }, 1e-14)
  local m2 = L.matrix_norm(X, 2, { 1, 3 }, true)
  H.shape(m2, { 1, 3, 1 })
  H.near(m2:reshape(3):totable(), { 1.7512615822460829, 1.8056098716835478, 2.1091328158759945 }, 1e-14)
  H.near(L.matrix_norm(X, "nuc", { 3, 1 }):totable(), { 2.3483553766446796, 2.384731330602481, 2.604913553464823 }, 1e-14)
  H.near(L.matrix_norm(X, 1, { 1, 3 }):totable(), { 1.8999047825205522, 1.9203217665426953, 1.9023034973510096 }, 1e-14)
  local mi = L.matrix_norm(X, math.huge, { 1, 3 }, true)
  H.shape(mi, { 1, 3, 1 })
  H.near(mi:reshape(3):totable(), { 2.597635150679063, 2.6521288668887815, 2.9454880493052116 }, 1e-14)
  H.near(L.matrix_norm(X, -1, { 3, 2 }):totable(), { 1.8918884196934453, 2.150165264979251 }, 1e-14)
  H.near(dl.grad(function(x) return L.matrix_norm(x, "nuc", { 1, 3 }):sum() end)(X)[2][2]:totable(),
         { 0.08762046987851385, -0.6181311217043537, -0.7555758106499582, -0.19834758380036882 }, 1e-12)
  -- torch.linalg.norm: a string ord or two dims make a matrix norm; one dim a vector norm
  H.near(L.norm(X, "fro", { 1, 3 }):totable(), { 1.850253530941197, 1.8962090266902203, 2.1666194346883176 }, 1e-14)
  H.near(L.norm(X, 2, { -2, -1 }):totable(), { 1.9920929726995404, 1.7758582943913068 }, 1e-14)
  H.near(L.norm(X, nil, { -2, -1 }):totable(), { 2.4497777545489385, 2.3899530392348978 }, 1e-14)
  H.near(L.norm(X, 3, 2)[1]:totable(), { 1.1191873136810049, 1.1566927409141887, 0.9777240268640913, 1.087561545030937 }, 1e-14)
  H.near(L.norm(X[1], 1):item(), 2.2125137447127914, 1e-14)
  H.near(L.norm(X[1], math.huge):item(), 2.9454880493052116, 1e-14)
  H.near(L.matrix_norm(X[1], "fro", true):totable(), { { 2.4497777545489385 } }, 1e-14)   -- (A, ord, keepdim)
  -- keepdim without dim keeps every dim (torch: shape (1, 1))
  local v = L.vector_norm(X[1], 2, nil, true)
  H.shape(v, { 1, 1 }); H.near(v:item(), 2.4497777545489385, 1e-14)
  H.shape(L.norm(X[1], nil, nil, true), { 1, 1 })
  H.shape(L.vector_norm(X[1], math.huge, nil, true), { 1, 1 })
  H.raises(function() return L.norm(X, 2) end, "linalg.norm: ord without dim needs A 1-D or 2-D, got shape (2, 3, 4)")
  H.raises(function() return L.norm(X, "fro", 1) end, "linalg.norm: ord \"fro\" is a matrix norm: dim must be a table of 2 dims")
  H.raises(function() return L.norm(X, "fro", { 1 }) end, "dim must be a table of 2 dims")
  H.raises(function() return L.norm(X, nil, { 1, 2, 3 }) end, "linalg.norm: dim must be a dim or a table of 1 or 2 dims, got 3 dims")
  H.raises(function() return L.matrix_norm(X, "fro", { 2, 2 }) end, "linalg.matrix_norm: dim must name 2 different dims")
  H.raises(function() return L.matrix_norm(X, "fro", 1) end, "linalg.matrix_norm: dim must be a table of 2 dims")
  H.raises(function() return L.matrix_norm(X, "fro", { 1, 4 }) end, "linalg.matrix_norm: dimension 4 is out of range")
  H.raises(function() return L.matrix_norm(dl.ones(4), "fro") end, "linalg.matrix_norm: expected a matrix")
end)

H.test("cond takes p as torch.linalg.cond", function()
  local C = t64({ { 2, 1 }, { 0, 3 } })
  -- torch.linalg.cond(C, p)
  local want = { fro = 2.333333333333333, nuc = 4.333333333333333, [1] = 2, [-1] = 1, [math.huge] = 2,
                 [-math.huge] = 1, [2] = 1.7675918792439975, [-2] = 0.5657414540893353 }
  for p, v in pairs(want) do H.near(L.cond(C, p):item(), v, 1e-14, "cond p = " .. tostring(p)) end
  H.near(L.cond(C):item(), 1.7675918792439975, 1e-14)
  local sing = t64({ { 1, 2 }, { 2, 4 } })
  H.eq(L.cond(sing, "fro"):item(), math.huge)
  H.eq(L.cond(dl.stack({ C, sing }), 1):totable(), { 2, math.huge })
  H.eq(L.cond(dl.ones(3, 0, 0), "fro"):totable(), { 0, 0, 0 })
  -- differentiable: |A|_F |A^-1|_F
  local g = dl.grad(function(a) return L.cond(a, "fro") end)(C)
  local g2 = dl.grad(function(a) return L.matrix_norm(a) * L.matrix_norm(L.inv(a)) end)(C)
  H.near(g:totable(), g2:totable(), 1e-14)
  H.raises(function() return L.cond(C, 3) end, "linalg.cond: p must be nil, 2, -2, 1, -1")
  H.raises(function() return L.cond(dl.ones(2, 3), "fro") end, "linalg.cond: expected square matrices, got shape (2, 3)")
end)

H.test("det's second order at a numerically singular matrix", function()
  local A = t64({ { 1.4100000000000001, 3.02, -1.0 }, { 2.1900000000000004, -3.1799999999999997, 7.08 },
                  { 1.6700000000000002, -0.010000000000000009, 2.75 } })   -- det -4.04e-15
  local V = dl.arange(0, 9, f64):reshape(3, 3)
  -- torch: grad((grad(det(A), A, create_graph=True)[0] * V).sum(), A)
  H.near(dl.grad(function(a) return (dl.grad(L.det)(a) * V):sum() end)(A):totable(),
         { { -63.95, 25.06, 27.70 }, { -33.93, 13.94, 9.92 }, { 32.54, -5.67, -5.61 } }, 1e-9)
  -- first order unchanged
  H.near(dl.grad(L.det)(A):totable(), { { -8.6742, 5.8011, 5.2887 }, { -8.295, 5.5475, 5.0575 },
                                          { 18.2016, -12.1728, -11.0976 } }, 1e-10)
  -- and at the identity (torch's the same)
  H.near(dl.grad(function(a) return (dl.grad(L.det)(a) * V):sum() end)(dl.eye(3, f64)):totable(),
         { { 12, -3, -6 }, { -1, 8, -7 }, { -2, -5, 4 } }, 1e-12)
end)

H.test("errors name the function called", function()
  H.raises(function() return L.inv(dl.zeros(2, 2)) end, "linalg.inv: the matrix is singular")
  H.raises(function() return L.inv(dl.stack({ dl.eye(2), dl.zeros(2, 2) })) end,
           "linalg.inv: the matrix is singular (matrix 2 of the batch)")
  H.raises(function() return L.matrix_power(dl.zeros(2, 2), -2) end, "linalg.matrix_power: the matrix is singular")
  H.raises(function() return L.det(dl.ones(2, 3)) end, "linalg.det: expected square matrices, got shape (2, 3)")
  H.raises(function() return L.det(dl.ones(3)) end, "linalg.det: expected a matrix or a batch of matrices, got shape (3,)")
  H.raises(function() return L.solve(dl.eye(2), dl.ones(2), { left = false }) end,
           "linalg.solve: with left = false B must be matrices (..., k, n) for X A = B, got B (2,)")
  H.raises(function() return L.cross(dl.ones(4), dl.ones(4)) end, "linalg.cross: expected vectors of 3 along dim -1")
  H.raises(function() return L.cross(dl.ones(3), dl.ones(2, 3), 3) end, "linalg.cross: dimension 3 is out of range")
  H.raises(function() return L.cross(dl.ones(3, 2), dl.ones(2, 3), 1) end, "linalg.cross: expected vectors of 3 along dim 1")
  -- dims counted on the broadcast shape: a (3,) against b (2, 3) along dim 2
  H.near(L.cross(t64({ 1, 0, 0 }), t64({ { 0, 1, 0 }, { 0, 0, 1 } }), 2):totable(), { { 0, 0, 1 }, { 0, -1, 0 } }, 0)
  H.raises(function() return dl.einsum("...ij,...jk->...ik", dl.ones(2, 3, 3), dl.ones(4, 3, 3)) end,
           "einsum: the dims of '...' do not broadcast: operand 2's dim 1 has size 4 where an earlier operand's has 2")
end)

-- A p-norm with p < 1: |x|^(p-1) is infinite at 0, where the gradient is 0 (PyTorch's
-- torch.linalg.vector_norm(x, 0.5) and (x, -1) backward).
H.test("vector_norm's gradient for p < 1 is 0 at zero entries", function()
  local f64 = { dtype = "float64" }
  local function g(p, v) return dl.grad(function(x) return dl.linalg.vector_norm(x, p) end)(dl.tensor(v, f64)):totable() end
  local half = g(0.5, { 0, 1, 2 })
  H.eq(half[1], 0); H.near(half[2], 2.414213562373095, 1e-12); H.near(half[3], 1.7071067811865472, 1e-12)
  H.eq(g(0.5, { 0, 0, 0 }), { 0, 0, 0 })
  H.eq(g(-1, { 0, 1, 2 }), { 0, 0, 0 })
end)

H.run()
