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
  lstsq_tall = function(a, b) return { L.lstsq(a, b) } end,
  lstsq_vector = function(a, b) return { L.lstsq(a, b) } end,
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

H.run()
