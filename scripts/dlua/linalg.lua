-- dlua.linalg: dl.linalg, linear algebra as PyTorch's torch.linalg. Matrices are the
-- last two dims of a tensor and the leading dims a batch; float32 and float64 (integers
-- become the default float dtype). Every function is differentiable, to any order.
--
--   local x = dl.linalg.solve(A, b)             -- A x = b (b a vector or a matrix)
--   local L = dl.linalg.cholesky(A)             -- A = L L^T
--   local Q, R = dl.linalg.qr(A)                -- reduced QR
--   local w, V = dl.linalg.eigh(A)              -- symmetric eigenproblem, w ascending
--   local U, S, Vh = dl.linalg.svd(A, {full_matrices = false})
--   local sign, logabsdet = dl.linalg.slogdet(A)
--   dl.linalg.inv, det, lstsq, pinv, norm, matrix_norm, vector_norm, matrix_rank, cond,
--   solve_triangular, eigvalsh, svdvals
--
-- The factorizations are the engine's ops (LAPACK on the CPU: tensor/cpu/lapack.cpp,
-- with their derivatives in autograd/linalg.cpp); the rest are made of them here.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local C = core.C
local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local hid, is_tensor, shape_str = T.hid, T.is_tensor, T.shape_str
local dl = T.dl
local type, tostring, math_huge = type, tostring, math.huge

local L = dl.linalg
setmetatable(L, nil)

-- Result handles a C call writes back: fresh per call (Note [Values C writes back]).
local handles3 = ffi.typeof("uint64_t[3]")

local function check(op, x, what)
  if not is_tensor(x) then bad_arg("linalg." .. op, what or "a tensor", x) end
end
local function check_matrix(op, x)
  check(op, x)
  if x:dim() < 2 then
    raise("linalg." .. op .. ": expected a matrix or a batch of matrices, got shape " .. shape_str(x))
  end
end

local one = T.new   -- one handle from f(...), retried once after a collection
local several = T.several   -- n handles from f(..., outs), outs the last argument

local function mT(x) return x:transpose(-2, -1) end
local function flag(v) return v and 1 or 0 end
local function eye_like(n, x) return dl.eye(n, { dtype = x.dtype, device = x.device }) end
-- The float dtype a decomposition returns for x.
local function float_dtype(x)
  local d = x.dtype
  if d == "float32" or d == "float64" or d == "float16" or d == "bfloat16" then return d end
  return dl.get_default_dtype()
end

-- PyTorch's rule for B in A X = B: a vector (..., n) when it has one dim, or one dim less
-- than A and A's leading sizes; a matrix (..., n, k) otherwise.
local function is_vector_rhs(a, b)
  if b:dim() == 1 then return true end
  if b:dim() ~= a:dim() - 1 then return false end
  for i = 1, b:dim() do
    if b:size(i) ~= a:size(i) then return false end
  end
  return true
end

-- ---- solves ---------------------------------------------------------------------------------

-- solve(A, B [, {left = true}]): X with A X = B (or X A = B with left = false).
function L.solve(a, b, opts)
  check("solve", a, "a tensor A")
  check("solve", b, "a tensor B")
  opts = options("linalg.solve", opts, { left = true })
  local left = opts.left ~= false
  if not left then return mT(L.solve(mT(a), mT(b))) end
  if is_vector_rhs(a, b) then
    return one(C.dl_linalg_solve, hid(a), hid(b:unsqueeze(-1))):squeeze(-1)
  end
  return one(C.dl_linalg_solve, hid(a), hid(b))
end

-- solve_triangular(A, B, {upper = bool [, left = true, unitriangular = false]}).
function L.solve_triangular(a, b, opts)
  check("solve_triangular", a, "a tensor A")
  check("solve_triangular", b, "a tensor B")
  opts = options("linalg.solve_triangular", opts, { upper = true, left = true, unitriangular = true })
  if type(opts.upper) ~= "boolean" then
    raise("linalg.solve_triangular: expected the option upper (true or false), got " .. tostring(opts.upper))
  end
  local upper, unit = opts.upper, opts.unitriangular == true
  if opts.left == false then   -- X A = B is A^T X^T = B^T
    return mT(one(C.dl_solve_triangular, hid(mT(a)), hid(mT(b)), flag(not upper), flag(unit)))
  end
  return one(C.dl_solve_triangular, hid(a), hid(b), flag(upper), flag(unit))
end

function L.inv(a)
  check_matrix("inv", a)
  local n = a:size(-1)
  if a:size(-2) ~= n then raise("linalg.inv: expected square matrices, got shape " .. shape_str(a)) end
  return one(C.dl_linalg_solve, hid(a), hid(eye_like(n, a):to(float_dtype(a)):expand_as(a)))
end

-- ---- factorizations ---------------------------------------------------------------------------

-- cholesky(A [, {upper = false}]): L lower with A = L L^T (or U = L^T with upper).
function L.cholesky(a, opts)
  check("cholesky", a)
  opts = options("linalg.cholesky", opts, { upper = true })
  local l = one(C.dl_cholesky, hid(a))
  if opts.upper then return mT(l) end
  return l
end

-- qr(A [, {mode = "reduced" | "complete" | "r"}]): Q, R.
function L.qr(a, opts)
  check("qr", a)
  opts = options("linalg.qr", opts, { mode = true })
  local mode = opts.mode or "reduced"
  if mode ~= "reduced" and mode ~= "complete" and mode ~= "r" then
    raise("linalg.qr: mode must be \"reduced\", \"complete\" or \"r\", got " .. tostring(mode))
  end
  local q, r = several(2, C.dl_qr, hid(a), flag(mode == "complete"), handles3())
  if mode == "r" then return dl.empty(0, { dtype = q.dtype, device = q.device }), r end
  return q, r
end

-- eigh(A [, {UPLO = "L"}]): eigenvalues (ascending) and eigenvectors (columns) of a
-- symmetric A, from its lower (or upper) triangle.
function L.eigh(a, opts)
  check("eigh", a)
  opts = options("linalg.eigh", opts, { UPLO = true })
  local uplo = opts.UPLO or "L"
  if uplo ~= "L" and uplo ~= "U" then raise("linalg.eigh: UPLO must be \"L\" or \"U\", got " .. tostring(uplo)) end
  if uplo == "U" then
    check_matrix("eigh", a)
    a = mT(a)
  end
  return several(2, C.dl_eigh, hid(a), handles3())
end

function L.eigvalsh(a, opts)
  local w = L.eigh(a, opts)
  return w
end

-- svd(A [, {full_matrices = true}]): U, S (descending), Vh with A = U diag(S) Vh.
function L.svd(a, opts)
  check("svd", a)
  opts = options("linalg.svd", opts, { full_matrices = true })
  return several(3, C.dl_svd, hid(a), flag(opts.full_matrices ~= false), handles3())
end

function L.svdvals(a)
  check("svdvals", a)
  local _, s = several(3, C.dl_svd, hid(a), 0, handles3())
  return s
end

-- slogdet(A): sign and log|det A|; the sign is 0 and the log -inf for a singular A.
function L.slogdet(a)
  check("slogdet", a)
  return several(2, C.dl_slogdet, hid(a), handles3())
end

-- The products of all of s's values but one, along the last dim, with no division (a
-- zero stays exact): prefix products times suffix products.
local function products_of_others(s)
  local n = s:size(-1)
  local one = dl.ones_like(s:narrow(-1, 1, 1))
  local before = dl.cat({ one, s:cumprod(-1):narrow(-1, 1, n - 1) }, -1)
  local after = dl.cat({ s:flip(-1):cumprod(-1):narrow(-1, 1, n - 1):flip(-1), one }, -1)
  return before * after
end

-- det's gradient is the transposed adjugate: det(A) A^-T where every matrix of the batch
-- is invertible. A singular matrix has a finite one too (nonzero at rank n - 1), which
-- slogdet's A^-T cannot give; there it comes from the SVD A = U S Vh as
-- det(U) det(Vh) U diag(prod_{j ~= i} s_j) Vh (PyTorch's det_backward does the same).
-- The gradient's ops are recorded, so it differentiates again.
local det = dl.custom_gradient(function(a)
  local sign, logabs = L.slogdet(a)
  local d = sign * logabs:exp()
  local function grad_fn(g)
    local gm = (g * d):unsqueeze(-1):unsqueeze(-1)
    if not d:eq(0):any() then
      return gm * mT(L.inv(a))
    end
    local u, s, vh = L.svd(a, { full_matrices = false })
    local su, sv = L.slogdet(u), L.slogdet(vh)
    local adj = (u * products_of_others(s):unsqueeze(-2)):matmul(vh)
    return (g * su * sv):unsqueeze(-1):unsqueeze(-1) * adj
  end
  return d, grad_fn
end)

function L.det(a)
  check("det", a)
  if a:size(-1) == 0 then return (L.slogdet(a)) end   -- det of 0 x 0 is 1
  return det(a)
end

-- ---- least squares and the pseudo-inverse -----------------------------------------------------

-- lstsq(A, B): the X that minimises |A X - B| (A (..., m, n) of full rank; the
-- minimum-norm solution when m < n), through the QR decomposition of A (or of A^T).
function L.lstsq(a, b)
  check_matrix("lstsq", a)
  check("lstsq", b, "a tensor B")
  local m, n = a:size(-2), a:size(-1)
  if is_vector_rhs(a, b) then
    if b:size(-1) ~= m then
      raise("linalg.lstsq: A " .. shape_str(a) .. " and B " .. shape_str(b) .. " do not match (B needs as many rows as A)")
    end
    return L.lstsq(a, b:unsqueeze(-1)):squeeze(-1)
  end
  if b:size(-2) ~= m then
    raise("linalg.lstsq: A " .. shape_str(a) .. " and B " .. shape_str(b) .. " do not match (B needs as many rows as A)")
  end
  if m >= n then
    local q, r = L.qr(a)
    return L.solve_triangular(r, mT(q):matmul(b), { upper = true })
  end
  local q, r = L.qr(mT(a))   -- A = R^T Q^T: X = Q R^-T B
  return q:matmul(L.solve_triangular(mT(r), b, { upper = false }))
end

-- The singular values of s (..., k) above rtol * the largest of each matrix.
local function kept(op, s, m, n, opts)
  opts = options("linalg." .. op, opts, { rtol = true, hermitian = true, tol = true })
  local cut
  if opts.tol ~= nil then
    cut = opts.tol
  else
    local eps = s.dtype == "float64" and 2.220446049250313e-16 or 1.1920928955078125e-07
    local rtol = opts.rtol or eps * math.max(m, n)
    if s:size(-1) == 0 then return s:gt(0) end
    cut = s:amax(-1, true) * rtol
  end
  return s:gt(cut)
end

-- pinv(A [, {rtol = eps * max(m, n), hermitian = false}]): the pseudo-inverse, through
-- the SVD (singular values at or below rtol times the largest are taken as zero).
function L.pinv(a, opts)
  check_matrix("pinv", a)
  local m, n = a:size(-2), a:size(-1)
  local u, s, vh = L.svd(a, { full_matrices = false })
  local keep = kept("pinv", s, m, n, opts)
  local inv = dl.where(keep, 1 / dl.where(keep, s, dl.ones_like(s)), dl.zeros_like(s))
  return (mT(vh) * inv:unsqueeze(-2)):matmul(mT(u))
end

-- matrix_rank(A [, {rtol =, tol =}]): the number of singular values kept (int64).
function L.matrix_rank(a, opts)
  check_matrix("matrix_rank", a)
  return kept("matrix_rank", L.svdvals(a), a:size(-2), a:size(-1), opts):sum(-1)
end

-- ---- norms --------------------------------------------------------------------------------

-- matrix_norm(A [, ord = "fro" [, keepdim = false]]): "fro", "nuc", 1, -1, 2, -2, inf, -inf
-- over the last two dims.
function L.matrix_norm(a, ord, keepdim)
  check_matrix("matrix_norm", a)
  ord = ord == nil and "fro" or ord
  local r
  if ord == "fro" then
    r = a:norm({ -2, -1 }, false, { p = 2 })   -- the norm's gradient is 0 at 0, not NaN
  elseif ord == "nuc" then
    r = L.svdvals(a):sum(-1)
  elseif ord == 2 then
    r = L.svdvals(a):amax(-1)
  elseif ord == -2 then
    r = L.svdvals(a):amin(-1)
  elseif ord == 1 then
    r = a:abs():sum(-2):amax(-1)
  elseif ord == -1 then
    r = a:abs():sum(-2):amin(-1)
  elseif ord == math_huge then
    r = a:abs():sum(-1):amax(-1)
  elseif ord == -math_huge then
    r = a:abs():sum(-1):amin(-1)
  else
    raise("linalg.matrix_norm: ord must be \"fro\", \"nuc\", 1, -1, 2, -2, math.huge or -math.huge, got "
          .. tostring(ord))
  end
  if keepdim then r = r:unsqueeze(-1):unsqueeze(-1) end
  return r
end

-- vector_norm(x [, ord = 2 [, dim [, keepdim]]]): over every element, or over dim.
function L.vector_norm(x, ord, dim, keepdim)
  check("vector_norm", x)
  ord = ord == nil and 2 or ord
  if type(ord) ~= "number" then bad_arg("linalg.vector_norm", "a number ord", ord) end
  if dim == nil then return x:norm({ p = ord }) end
  return x:norm(dim, keepdim == true, { p = ord })
end

-- norm(A [, ord [, dim [, keepdim]]]): a matrix norm when ord is a string, or when A is
-- 2-D and ord is given; otherwise the vector 2-norm of every element (or ord, dim).
function L.norm(a, ord, dim, keepdim)
  check("norm", a)
  if type(ord) == "string" or (ord ~= nil and dim == nil and a:dim() == 2) then
    return L.matrix_norm(a, ord, keepdim)
  end
  return L.vector_norm(a, ord, dim, keepdim)
end

-- cond(A): the 2-norm condition number, the largest singular value over the smallest.
function L.cond(a)
  check_matrix("cond", a)
  local s = L.svdvals(a)
  return s:amax(-1) / s:amin(-1)
end

-- cross(a, b [, dim = -1]): the cross product of 3-vectors along dim (broadcast), as
-- torch.linalg.cross; also dl.cross.
function L.cross(a, b, dim)
  local op = "cross"
  check(op, a)
  check(op, b)
  dim = dim or -1
  local n = math.max(a:dim(), b:dim())
  local d = core.positive_dim(op, dim, n)
  local function at(x, i)   -- component i along d (x broadcast to n dims first)
    local view = x.shape
    for _ = #view + 1, n do table.insert(view, 1, 1) end
    return x:reshape(view):narrow(d, i, 1)
  end
  local la, lb = a:size(dim), b:size(dim)
  if la ~= 3 or lb ~= 3 then
    raise(op .. ": expected vectors of 3 along dim " .. tostring(dim) .. ", got shapes " .. shape_str(a.shape)
          .. " and " .. shape_str(b.shape))
  end
  local a1, a2, a3, b1, b2, b3 = at(a, 1), at(a, 2), at(a, 3), at(b, 1), at(b, 2), at(b, 3)
  return dl.cat({ a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1 }, d)
end
dl.cross = L.cross

-- cdist(a, b [, p = 2]): the p-norm distance between every row of a (..., P, M) and
-- every row of b (..., R, M), (..., P, R); computed from the differences, not from the
-- products (PyTorch's exact form, without its cancellation for close rows).
function L.cdist(a, b, p)
  local op = "cdist"
  check(op, a)
  check(op, b)
  if a:dim() < 2 or b:dim() < 2 or a:size(-1) ~= b:size(-1) then
    raise(op .. ": expected (..., P, M) and (..., R, M), got shapes " .. shape_str(a.shape) .. " and "
          .. shape_str(b.shape))
  end
  local diff = a:unsqueeze(-2) - b:unsqueeze(-3)
  return L.vector_norm(diff, p or 2, -1)
end
dl.cdist = L.cdist

-- A square matrix or a batch of them, checked.
local function check_square(op, a)
  check_matrix(op, a)
  if a:size(-1) ~= a:size(-2) then
    raise("linalg." .. op .. ": expected square matrices, got shape " .. shape_str(a.shape))
  end
end

-- matrix_power(A, n): A multiplied n times by repeated squaring (identity for n = 0,
-- A's inverse's power for n < 0).
function L.matrix_power(a, n)
  local op = "matrix_power"
  check_square(op, a)
  if not core.integer(n) then raise("linalg." .. op .. ": n must be an integer, got " .. tostring(n)) end
  if n < 0 then a, n = L.inv(a), -n end
  if n == 0 then return eye_like(a:size(-1), a):expand(a.shape):clone() end
  local result, base = nil, a
  while n > 0 do
    if n % 2 == 1 then result = result and result:matmul(base) or base end
    n = math.floor(n / 2)
    if n > 0 then base = base:matmul(base) end
  end
  return result
end
T.methods.matrix_power = L.matrix_power
dl.matrix_power = L.matrix_power

-- Note [The matrix exponential]
-- matrix_exp(A) by scaling and squaring (Higham, "The scaling and squaring method for
-- the matrix exponential revisited", 2005): A / 2^s has a 1-norm of at most theta_13, where
-- the [13/13] Pade approximant r(X) = q(X)^-1 p(X) is exact to double precision; then r
-- is squared s times. s comes from the largest 1-norm of the batch (more squarings than
-- a matrix needs cost a little accuracy, none of its correctness). Made of matmul and
-- solve, so its gradient is the composition's (the derivative of the approximant, equal
-- to exp's to the same precision).
local PADE13 = { 64764752532480000, 32382376266240000, 7771770303897600, 1187353796428800, 129060195264000,
                 10559470521600, 670442572800, 33522128640, 1323241920, 40840800, 960960, 16380, 182, 1 }
local THETA13 = 5.371920351148152

function L.matrix_exp(a)
  local op = "matrix_exp"
  check_square(op, a)
  a = T.floating(a)
  local n = a:size(-1)
  if a:numel() == 0 then return a:clone() end
  local norm = a:detach():abs():sum(-2):amax():item()   -- the largest 1-norm (max column sum)
  local s = 0
  if norm > THETA13 then s = math.ceil(math.log(norm / THETA13) / math.log(2)) end
  if norm ~= norm or norm == math_huge then s = 0 end   -- (NaN or infinity: propagated as they are)
  local x = s > 0 and a * (0.5 ^ s) or a
  local b = PADE13
  local I = eye_like(n, x)
  local x2 = x:matmul(x)
  local x4 = x2:matmul(x2)
  local x6 = x4:matmul(x2)
  local u = x:matmul(x6:matmul(x6 * b[14] + x4 * b[12] + x2 * b[10]) + x6 * b[8] + x4 * b[6] + x2 * b[4] + I * b[2])
  local v = x6:matmul(x6 * b[13] + x4 * b[11] + x2 * b[9]) + x6 * b[7] + x4 * b[5] + x2 * b[3] + I * b[1]
  local r = L.solve(v - u, v + u)
  for _ = 1, s do r = r:matmul(r) end
  return r
end
T.methods.matrix_exp = L.matrix_exp
dl.matrix_exp = L.matrix_exp

-- multi_dot({A, B, C, ...}): the product of the list in the cheapest order (first and last
-- may be vectors, as PyTorch's), by the classic dynamic program over the chain.
function L.multi_dot(list)
  local op = "multi_dot"
  if type(list) ~= "table" or is_tensor(list) or #list < 2 then bad_arg("linalg." .. op, "a list of 2 or more tensors", list) end
  local ts, k = {}, #list
  for i, t in ipairs(list) do
    check(op, t)
    local ok = t:dim() == 2 or ((i == 1 or i == k) and t:dim() == 1)
    if not ok then
      raise("linalg." .. op .. ": tensor " .. i .. " must be a matrix" .. ((i == 1 or i == k) and " or a vector" or "")
            .. ", got shape " .. shape_str(t.shape))
    end
    ts[i] = t
  end
  local first_vec, last_vec = ts[1]:dim() == 1, ts[k]:dim() == 1
  if first_vec then ts[1] = ts[1]:unsqueeze(1) end
  if last_vec then ts[k] = ts[k]:unsqueeze(2) end
  local dims = { ts[1]:size(1) }
  for i = 1, k do
    if i > 1 and ts[i]:size(1) ~= ts[i - 1]:size(2) then
      raise("linalg." .. op .. ": tensors " .. (i - 1) .. " and " .. i .. " do not chain (shapes "
            .. shape_str(ts[i - 1].shape) .. " and " .. shape_str(ts[i].shape) .. ")")
    end
    dims[i + 1] = ts[i]:size(2)
  end
  local cost, split = {}, {}
  for i = 1, k do cost[i], split[i] = { [i] = 0 }, {} end
  for len = 2, k do
    for i = 1, k - len + 1 do
      local j = i + len - 1
      for m = i, j - 1 do
        local c = cost[i][m] + cost[m + 1][j] + dims[i] * dims[m + 1] * dims[j + 1]
        if cost[i][j] == nil or c < cost[i][j] then cost[i][j], split[i][j] = c, m end
      end
    end
  end
  local function product(i, j)
    if i == j then return ts[i] end
    local m = split[i][j]
    return product(i, m):matmul(product(m + 1, j))
  end
  local y = product(1, k)
  if first_vec then y = y:squeeze(1) end
  if last_vec then y = y:squeeze(-1) end
  return y
end

return L
