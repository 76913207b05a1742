-- torch's other solves and linalg forms (cholesky_solve, triangular_solve, the _ex forms,
-- tensorinv, tensorsolve, vander, householder_product ...), the view scatters and
-- index_reduce, against PyTorch 1.13 (float64 literals), with gradients and argument checks.
local dl = require("dlua")
local H = require("harness")
local f64 = { dtype = "float64" }

local function spd() return dl.tensor({ { 4, 2, 0.4 }, { 2, 5, 1 }, { 0.4, 1, 3 } }, f64) end
local function rhs() return dl.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, f64) end

H.test("cholesky_solve, cholesky_inverse and triangular_solve match torch, upper and lower, methods", function()
  local L = dl.linalg.cholesky(spd())
  -- torch.cholesky_solve(B, L); torch.cholesky_inverse(L)
  local want = { { -0.0625, 0.125 }, { 0.3107142857142857, 0.37857142857142856 }, { 1.5714285714285714, 1.8571428571428572 } }
  H.values(dl.cholesky_solve(rhs(), L), want, { tol = 1e-12 })
  H.values(rhs():cholesky_solve(L:t(), true), want, { tol = 1e-12 })
  local inv = { { 0.3125, -0.125, 0 }, { -0.125, 0.2642857142857143, -0.07142857142857142 },
                { 0, -0.07142857142857142, 0.3571428571428571 } }
  H.values(dl.cholesky_inverse(L), inv, { tol = 1e-12 })
  H.values(L:t():cholesky_inverse(true), inv, { tol = 1e-12 })
  -- torch.triangular_solve(B, L, upper=False) / (..., transpose=True) / (B, L.T, unitriangular=True)
  local X, A = dl.triangular_solve(rhs(), L, false)
  H.values(X, { { 0.5, 1.0 }, { 1.25, 1.5 }, { 2.6295029405356662, 3.1075943842694236 } }, { tol = 1e-12 })
  H.ok(dl.equal(A, L))
  H.values((dl.triangular_solve(rhs(), L, { upper = false, transpose = true })),
           { { -0.25, 0.0 }, { 0.9023856953328032, 1.282862834399364 }, { 2.988071523335984, 3.5856858280031805 } },
           { tol = 1e-12 })
  H.values((rhs():triangular_solve(L:t(), { unitriangular = true })), { { -1.0, -0.8 }, { 1.0, 1.6 }, { 5.0, 6.0 } },
           { tol = 1e-12 })
  H.ok(dl.gradcheck(function(b, l) return dl.cholesky_solve(b, l:tril()) end, { rhs(), L }))
  H.raises(function() dl.cholesky_solve(dl.ones(3, f64), L) end, "cholesky_solve: expected a matrix")
  H.raises(function() dl.cholesky_solve(dl.ones(2, 2, f64), L) end, "cholesky_solve: B (2, 2) does not have the 3 rows")
  H.raises(function() dl.triangular_solve(rhs(), L, "up") end, "triangular_solve: expected upper (a boolean)")
end)

H.test("cholesky_ex, inv_ex and solve_ex: info per matrix as torch's, check_errors", function()
  local bad_pd = dl.tensor({ { { 1, 2 }, { 2, 1 } }, { { 1, 0 }, { 0, 1 } } }, f64)
  -- torch.linalg.cholesky_ex(...).info = [2, 0]; the good matrix's factor is the identity
  local L, info = dl.linalg.cholesky_ex(bad_pd)
  H.values(info, { 2, 0 }, { dtype = "int32" })
  H.values(L[2], { { 1, 0 }, { 0, 1 } })
  H.ok(L[1]:isnan():all())
  local sing = dl.tensor({ { { 1, 2 }, { 2, 4 } }, { { 2, 0 }, { 0, 4 } } }, f64)
  -- torch.linalg.inv_ex(...).info = [2, 0]; solve_ex(..., ones(2, 2)).info likewise
  local inv, info2 = dl.linalg.inv_ex(sing)
  H.values(info2, { 2, 0 })
  H.values(inv[2], { { 0.5, 0 }, { 0, 0.25 } })
  local x, info3 = dl.linalg.solve_ex(sing, dl.ones(2, 2, f64))
  H.values(info3, { 2, 0 })
  H.values(x[2], { 0.5, 0.25 })
  local _, ok_info = dl.linalg.solve_ex(spd(), rhs())
  H.values(ok_info, 0, { dtype = "int32" })
  H.raises(function() dl.linalg.cholesky_ex(bad_pd, { check_errors = true }) end, "linalg.cholesky_ex: the matrix is not positive-definite")
  H.raises(function() dl.linalg.solve_ex(sing, dl.ones(2, 2), { check_errors = true }) end, "linalg.solve_ex: the matrix is singular")
  H.raises(function() dl.linalg.inv_ex(sing, { check = true }) end, "linalg.inv_ex: unknown option 'check'")
  -- a B that does not fit A: the error names solve_ex with or without check_errors, A singular or not
  H.raises(function() dl.linalg.solve_ex(dl.eye(3), dl.ones(4)) end, "linalg.solve_ex: A (3, 3) and B (4, 1) do not match")
  H.raises(function() dl.linalg.solve_ex(dl.eye(3), dl.ones(4), { check_errors = true }) end, "linalg.solve_ex: A (3, 3)")
  H.raises(function() dl.linalg.solve_ex(sing, dl.ones(3)) end, "linalg.solve_ex: A (2, 2, 2)")
end)

H.test("tensorinv, tensorsolve, vander, vecdot, diagonal, matmul, householder_product match torch", function()
  local t = dl.arange(1, 17, f64):view(4, 2, 2) + dl.eye(4, f64):view(4, 2, 2)
  -- torch.linalg.tensorinv(t, 1)
  H.values(dl.linalg.tensorinv(t, 1),
           { { { -0.2222222222222222, -0.6666666666666667, -0.1111111111111104, 0.4444444444444442 }, { -0.6, 0.6, -0.2, 0 } },
             { { 0.0222222222222223, -0.1333333333333329, 0.7111111111111107, -0.4444444444444444 },
               { 0.6444444444444444, 0.1333333333333332, -0.3777777777777778, 0.1111111111111112 } } }, { tol = 1e-12 })
  local a = dl.eye(6, f64):view(2, 3, 6) + dl.arange(36, f64):view(2, 3, 6):sin() * 0.1
  local b = dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, f64)
  -- torch.linalg.tensorsolve(a, b); (a.permute(2, 0, 1), b, dims=(0,))
  local want = { 1.3777682333812415, 2.2475119104376384, 3.0975389306073327, 3.939796055483987, 4.7868489920658215,
                 5.650881415740065 }
  H.values(dl.linalg.tensorsolve(a, b), want, { tol = 1e-12 })
  H.values(dl.linalg.tensorsolve(a:permute({ 3, 1, 2 }), b, { 1 }), want, { tol = 1e-12 })
  -- torch.linalg.vander(x, N=4)
  H.values(dl.linalg.vander(dl.tensor({ { 1, -2, 0.5 }, { 0, 3, 1 } }, f64), 4),
           { { { 1, 1, 1, 1 }, { 1, -2, 4, -8 }, { 1, 0.5, 0.25, 0.125 } }, { { 1, 0, 0, 0 }, { 1, 3, 9, 27 }, { 1, 1, 1, 1 } } })
  H.values(dl.linalg.vander(dl.tensor({ 1, 2, 3 })), { { 1, 1, 1 }, { 1, 2, 4 }, { 1, 3, 9 } })
  H.ok(dl.gradcheck(function(x) return dl.linalg.vander(x, 4) end, { dl.tensor({ 0, 0.5, -2 }, f64) }))
  -- torch.linalg.vecdot([[1, 2], [3, 4]], [5, 6], dim=0) = [20, 36]
  H.values(dl.linalg.vecdot(dl.tensor({ { 1, 2 }, { 3, 4 } }), dl.tensor({ 5, 6 }), 1), { 20, 36 })
  H.values(dl.linalg.vecdot(dl.tensor({ { 1, 2 }, { 3, 4 } }), dl.tensor({ 5, 6 }), { dim = 1 }), { 20, 36 })
  -- torch.linalg.diagonal(arange(8).view(2, 2, 2), offset=1) = [[1], [5]]
  H.values(dl.linalg.diagonal(dl.arange(8):view(2, 2, 2), { offset = 1 }), { { 1 }, { 5 } })
  H.values(dl.linalg.matmul(dl.ones(2, 3), dl.ones(3)), { 3, 3 })
  local h = dl.tensor({ { 1, 2, 3 }, { 0.5, 1, 2 }, { 0.2, 0.3, 0.7 }, { 1.5, -1, 0.2 } }, f64)
  local tau = dl.tensor({ 1.2, 0.7 }, f64)
  -- torch.linalg.householder_product(h, tau)
  H.values(dl.linalg.householder_product(h, tau),
           { { -0.2, -1.3896, -0.47688 }, { -0.6, -0.3948, -0.44844 }, { -0.24, -0.48792, 0.841624 },
             { -1.8, -1.3844, -0.50532 } }, { tol = 1e-12 })
  H.ok(dl.gradcheck(dl.linalg.householder_product, { h, tau }))
  H.raises(function() dl.linalg.householder_product(h:t(), tau) end, "linalg.householder_product: expected A (..., m, n) with m >= n")
  H.raises(function() dl.linalg.tensorinv(dl.ones(2, 3), 3) end, "linalg.tensorinv: ind = 3 is beyond the 2 dims")
  H.raises(function() dl.linalg.tensorinv(dl.ones(2, 3), 1) end, "linalg.tensorinv: the product of the first ind = 1 dims (2)")
  H.raises(function() dl.linalg.tensorsolve(a, dl.ones(4)) end, "linalg.tensorsolve: A's first 1 dims and its others must each hold as many elements as B (4,) (4)")
  H.raises(function() dl.linalg.vander(dl.ones(3), 1) end, "linalg.vander: N must be greater than 1")
end)

H.test("select_scatter, slice_scatter, diagonal_scatter match torch, with gradients for x and src", function()
  local x = dl.arange(12, f64):view(3, 4)
  -- torch.select_scatter(x, [-1, -2, -3], 1, -1)
  H.values(dl.select_scatter(x, dl.tensor({ -1, -2, -3 }, f64), 2, -1), { { 0, 1, 2, -1 }, { 4, 5, 6, -2 }, { 8, 9, 10, -3 } })
  -- x.slice_scatter(zeros(3, 2), 1, 0, None, 2); x.slice_scatter(zeros(1, 4), 0, 1, 2)
  H.values(x:slice_scatter(dl.zeros(3, 2, f64), { dim = 2, step = 2 }), { { 0, 1, 0, 3 }, { 0, 5, 0, 7 }, { 0, 9, 0, 11 } })
  H.values(x:slice_scatter(dl.zeros(1, 4, f64), { start = 2, end_ = 2 }), { { 0, 1, 2, 3 }, { 0, 0, 0, 0 }, { 8, 9, 10, 11 } })
  H.values(dl.slice_scatter(x, dl.zeros(1, 4, f64), { start = 2, stop = 2 }), { { 0, 1, 2, 3 }, { 0, 0, 0, 0 }, { 8, 9, 10, 11 } })
  -- x.diagonal_scatter([7, 8, 9], 1)
  H.values(x:diagonal_scatter(dl.tensor({ 7, 8, 9 }, f64), { offset = 1 }), { { 0, 7, 2, 3 }, { 4, 5, 8, 7 }, { 8, 9, 10, 9 } })
  H.values(x, { { 0, 1, 2, 3 }, { 4, 5, 6, 7 }, { 8, 9, 10, 11 } })   -- (x itself unchanged)
  local w = dl.arange(12, f64):view(3, 4)
  local gx, gs = dl.grad(function(a, b) return (dl.diagonal_scatter(a, b, { offset = 1 }) * w):sum() end, { 1, 2 })(
    x, dl.ones(3, f64))
  H.values(gx, { { 0, 0, 2, 3 }, { 4, 5, 0, 7 }, { 8, 9, 10, 0 } })
  H.values(gs, { 1, 6, 11 })
  H.ok(dl.gradcheck(function(a, b) return a:select_scatter(b, 1, 2) end, { x, dl.ones(4, f64) }))
  H.ok(dl.gradcheck(function(a, b) return a:slice_scatter(b, { dim = 2, start = 2, stop = 3 }) end, { x, dl.ones(3, 2, f64) }))
  H.raises(function() dl.select_scatter(x, dl.ones(4, f64), 2, 1) end, "select_scatter: expected src of shape (3,)")
  H.raises(function() dl.select_scatter(x, dl.ones(3, f64), 2, 5) end, "select_scatter: index 5 is out of range for dim 2")
  H.raises(function() x:slice_scatter(dl.ones(3, 4), { stop = 1, end_ = 1 }) end, "slice_scatter: give stop or end_, not both")
  H.raises(function() x:diagonal_scatter(dl.ones(3, 4), { off = 1 }) end, "diagonal_scatter: unknown option 'off'")
end)

H.test("diagonal_scatter with dims out of order or apart, and offsets, matches torch", function()
  local x = dl.arange(24, f64):view(2, 3, 4)
  -- torch.diagonal_scatter(x, [[-1, -2], [-3, -4], [-5, -6]], 0, 0, 2)
  H.values(x:diagonal_scatter(dl.tensor({ { -1, -2 }, { -3, -4 }, { -5, -6 } }, f64), { dim1 = 1, dim2 = 3 }),
           { { { -1, 1, 2, 3 }, { -3, 5, 6, 7 }, { -5, 9, 10, 11 } }, { { 12, -2, 14, 15 }, { 16, -4, 18, 19 }, { 20, -6, 22, 23 } } })
  local s = dl.tensor({ { -1, -2 }, { -3, -4 } }, f64)
  -- torch.diagonal_scatter(x, s, 1, 2, 1)
  H.values(x:diagonal_scatter(s, { offset = 1, dim1 = 3, dim2 = 2 }),
           { { { 0, 1, 2, 3 }, { -1, 5, 6, 7 }, { 8, -2, 10, 11 } }, { { 12, 13, 14, 15 }, { -3, 17, 18, 19 }, { 20, -4, 22, 23 } } })
  -- torch.diagonal_scatter(x, s, -2, -1, -2)
  H.values(dl.diagonal_scatter(x, s, { offset = -2, dim1 = -1, dim2 = -2 }),
           { { { 0, 1, -1, 3 }, { 4, 5, 6, -2 }, { 8, 9, 10, 11 } }, { { 12, 13, -3, 15 }, { 16, 17, 18, -4 }, { 20, 21, 22, 23 } } })
  H.ok(dl.equal(x, dl.arange(24, f64):view(2, 3, 4)))   -- (x itself unchanged)
  -- (torch.diagonal_scatter(x, s, 1, 2, 1) * arange(24).view(2, 3, 4)).sum().backward()
  local gx, gs = dl.grad(function(a, b)
    return (a:diagonal_scatter(b, { offset = 1, dim1 = 3, dim2 = 2 }) * dl.arange(24, f64):view(2, 3, 4)):sum()
  end, { 1, 2 })(x, dl.ones(2, 2, f64))
  H.values(gx, { { { 0, 1, 2, 3 }, { 0, 5, 6, 7 }, { 8, 0, 10, 11 } }, { { 12, 13, 14, 15 }, { 0, 17, 18, 19 }, { 20, 0, 22, 23 } } })
  H.values(gs, { { 4, 9 }, { 16, 21 } })
  H.ok(dl.gradcheck(function(a, b) return a:diagonal_scatter(b, { dim1 = 3, dim2 = 1 }) end, { x, dl.ones(3, 2, f64) }))
  H.raises(function() x:diagonal_scatter(s, { dim1 = 2, dim2 = -2 }) end, "diagonal_scatter: dim1 and dim2 must differ")
  H.raises(function() x:diagonal_scatter(dl.ones(3), { dim1 = 3, dim2 = 2 }) end, "diagonal_scatter: expected src of shape (2, 3)")
end)

H.test("index_reduce matches torch: prod, mean, amax, include_self, in place", function()
  local x = dl.arange(12, f64):view(3, 4)
  local src = dl.tensor({ { 2, 3, 4, 5 }, { 1, 1, 1, 1 }, { 6, 0.5, 2, -1 } }, f64)
  local idx = dl.tensor({ 1, 3, 1 }, { dtype = "int64" })
  -- x.index_reduce(0, [0, 2, 0], src, 'prod' | 'mean' | 'amax', include_self=...)
  H.values(x:index_reduce(1, idx, src, "prod"), { { 0, 1.5, 16, -15 }, { 4, 5, 6, 7 }, { 8, 9, 10, 11 } })
  H.values(x:index_reduce(1, idx, src, "mean", { include_self = false }), { { 4, 1.75, 3, 2 }, { 4, 5, 6, 7 }, { 1, 1, 1, 1 } })
  H.values(dl.index_reduce(x, 1, idx, src, "mean"),
           { { 2.6666666666666665, 1.5, 2.6666666666666665, 2.3333333333333335 }, { 4, 5, 6, 7 }, { 4.5, 5, 5.5, 6 } },
           { tol = 1e-12 })
  local y = x:clone()
  y:index_reduce_(1, idx, src, "amax")
  H.values(y, { { 6, 3, 4, 5 }, { 4, 5, 6, 7 }, { 8, 9, 10, 11 } })
  H.raises(function() x:index_reduce(1, idx, src, "sum") end, "index_reduce: reduce must be prod, mean, amax or amin")
  H.raises(function() x:index_reduce(1, idx, src:narrow(1, 1, 2), "prod") end, "index_reduce: expected a source of shape")
end)

H.test("dl.pdist and dl.bilinear: nn.functional's, by torch's top-level names", function()
  local x = dl.tensor({ { 0, 1, 2 }, { 3, 1, 0 }, { 1, 1, 1 } }, f64)
  -- torch.pdist(x); torch.pdist(x, 1)
  H.values(dl.pdist(x), { 3.605551275463989, 1.4142135623730951, 2.23606797749979 }, { tol = 1e-12 })
  H.values(dl.pdist(x, 1), { 5, 2, 3 })
  -- torch.bilinear([[1, 2]], [[3, -1, 0.5]], arange(12).view(2, 2, 3) / 10, [1, -1])
  H.values(dl.bilinear(dl.tensor({ { 1, 2 } }, f64), dl.tensor({ { 3, -1, 0.5 } }, f64), dl.arange(12, f64):view(2, 2, 3) / 10,
                       dl.tensor({ 1, -1 }, f64)), { { 2.5, 5 } }, { tol = 1e-12 })
  H.raises(function() dl.pdist(dl.ones(3)) end, "pdist")
end)

H.run()
