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
--   local X, residuals, rank, S = dl.linalg.lstsq(A, B)
--   dl.linalg.inv, det, pinv, norm, matrix_norm, vector_norm, matrix_rank, cond,
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
local function eps_of(dtype) return dtype == "float64" and 2.220446049250313e-16 or 1.1920928955078125e-07 end
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
  if not left then
    if is_vector_rhs(a, b) then   -- X A = B has no vector form (torch's rule)
      raise("linalg.solve: with left = false B must be matrices (..., k, n) for X A = B, got B "
            .. shape_str(b) .. " (vectors) for A " .. shape_str(a))
    end
    return mT(L.solve(mT(a), mT(b)))
  end
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

-- A square matrix or a batch of them, checked.
local function check_square(op, a)
  check_matrix(op, a)
  if a:size(-1) ~= a:size(-2) then
    raise("linalg." .. op .. ": expected square matrices, got shape " .. shape_str(a.shape))
  end
end

-- A's inverse as a solve against the identity, its errors (a singular matrix) naming
-- op, the function called, not linalg.solve.
local function inverse(op, a)
  local ok, r = pcall(one, C.dl_linalg_solve, hid(a), hid(eye_like(a:size(-1), a):to(float_dtype(a)):expand_as(a)))
  if ok then return r end
  local msg = tostring(r)
  local at = msg:find("linalg.solve: ", 1, true)
  if not at then error(r, 0) end
  raise("linalg." .. op .. ": " .. msg:sub(at + #"linalg.solve: "))
end

function L.inv(a)
  check_square("inv", a)
  return inverse("inv", a)
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
-- The gradient's ops are recorded, so it differentiates again. While they are (a higher
-- order to come), a det tiny beside Hadamard's bound, the product of the rows' norms,
-- takes the SVD way too: det(A) A^-T through an A^-1 that rounding dominates has a
-- derivative wrong by O(1), the adjugate through the SVD has not.
local det = dl.custom_gradient(function(a)
  local sign, logabs = L.slogdet(a)
  local d = sign * logabs:exp()
  local function grad_fn(g)
    local gm = (g * d):unsqueeze(-1):unsqueeze(-1)
    local ill = false
    if dl.is_grad_enabled() then
      local bound = a:detach():norm({ -1 }, false, { p = 2 }):prod(-1)
      ill = d:detach():abs():le(bound * 1e-8):any()
    end
    if not ill and not d:eq(0):any() then
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
  check_square("det", a)
  if a:size(-1) == 0 then return (L.slogdet(a)) end   -- det of 0 x 0 is 1
  return det(a)
end

-- ---- least squares and the pseudo-inverse -----------------------------------------------------

-- Which of the singular values s (..., k) count as nonzero: those above max(atol,
-- rtol * the largest), torch.linalg's rule. rtol is eps * max(m, n) unless given, or 0
-- when only an atol > 0 is; tol, matrix_rank's older form, is an atol alone.
local function kept(op, s, m, n, opts)
  local atol, rtol = opts.atol, opts.rtol
  if opts.tol ~= nil then
    if atol ~= nil or rtol ~= nil then raise("linalg." .. op .. ": tol is an atol alone: give tol, or atol and rtol") end
    if type(opts.tol) ~= "number" then bad_arg("linalg." .. op, "a number tol", opts.tol) end
    atol, rtol = opts.tol, 0
  end
  if atol ~= nil and type(atol) ~= "number" then bad_arg("linalg." .. op, "a number atol", atol) end
  if rtol ~= nil and type(rtol) ~= "number" then bad_arg("linalg." .. op, "a number rtol", rtol) end
  if rtol == nil then rtol = (atol or 0) > 0 and 0 or eps_of(s.dtype) * math.max(m, n) end
  if s:size(-1) == 0 then return s:gt(0) end
  local cut = s:amax(-1, true) * rtol
  if atol ~= nil then cut = cut:clamp(atol) end
  return s:gt(cut)
end

-- The pseudo-inverse of a (no history), the singular values (a hermitian A's
-- eigenvalues' magnitudes, from its lower triangle as torch's) and which were kept.
local function pinv_parts(op, a, opts)
  local m, n = a:size(-2), a:size(-1)
  if opts.hermitian then
    local w, v = L.eigh(a)
    local s = w:abs()
    local keep = kept(op, s, m, n, opts)
    local inv = dl.where(keep, 1 / dl.where(keep, w, dl.ones_like(w)), dl.zeros_like(w))
    return (v * inv:unsqueeze(-2)):matmul(mT(v)), s, keep
  end
  local u, s, vh = L.svd(a, { full_matrices = false })
  local keep = kept(op, s, m, n, opts)
  local inv = dl.where(keep, 1 / dl.where(keep, s, dl.ones_like(s)), dl.zeros_like(s))
  return (mT(vh) * inv:unsqueeze(-2)):matmul(mT(u)), s, keep
end

-- The gradient of P = A+ is the closed form of its derivative where the rank stays
-- (Golub and Pereyra, 1973; torch's pinv_backward, term for term), not the SVD's, which
-- is NaN wherever singular values repeat (the identity, an orthogonal or a zero A).
-- Recorded for a higher order, P is made by this op again, so that its derivative is
-- this formula too. Further results: the singular values and the mask of those kept.
local pinv_op
pinv_op = dl.custom_gradient(function(a, opts, op)
  local p, s, keep = pinv_parts(op, a:detach(), opts)
  return p, function(g)
    local pa = dl.is_grad_enabled() and pinv_op(a, opts, op) or p
    local ph, gh = mT(pa), mT(g)
    if a:size(-2) <= a:size(-1) then
      local k = gh:matmul(pa)
      local kph = k:matmul(ph)
      return -mT(pa:matmul(k)) + kph - a:matmul(pa):matmul(kph) + ph:matmul(pa):matmul(gh - k:matmul(a))
    end
    local k = pa:matmul(gh)
    local phk = ph:matmul(k)
    return -mT(k:matmul(pa)) + (gh - a:matmul(k)):matmul(pa):matmul(ph) + phk - phk:matmul(pa):matmul(a)
  end, s, keep
end)

-- pinv(A [, {atol, rtol = eps * max(m, n), hermitian = false}]): the pseudo-inverse,
-- through the SVD (through eigh of the lower triangle with hermitian), the singular
-- values at or below max(atol, rtol * the largest) taken as zero.
function L.pinv(a, opts)
  check_matrix("pinv", a)
  opts = options("linalg.pinv", opts, { atol = true, rtol = true, hermitian = true, tol = true })
  if opts.hermitian then check_square("pinv", a) end
  return (pinv_op(T.floating(a), opts, "pinv"))
end

-- matrix_rank(A [, {atol, rtol, hermitian}]) (or {tol}, an atol alone): the number of
-- singular values kept, as pinv keeps them (int64).
function L.matrix_rank(a, opts)
  check_matrix("matrix_rank", a)
  opts = options("linalg.matrix_rank", opts, { atol = true, rtol = true, hermitian = true, tol = true })
  local s
  if opts.hermitian then
    check_square("matrix_rank", a)
    s = L.eigvalsh(a):abs()
  else
    s = L.svdvals(a)
  end
  return kept("matrix_rank", s, a:size(-2), a:size(-1), opts):sum(-1)
end

local DRIVERS = { gels = true, gelsy = true, gelsd = true, gelss = true }

-- lstsq(A, B [, {driver = "gelsy", rcond = eps * max(m, n)}]): as torch.linalg.lstsq,
-- the X minimising |A X - B| (of least norm where A has not full rank), the residuals,
-- the rank and the singular values, the last three empty where torch's driver gives
-- none. "gels" takes A of full rank and solves through QR; the others through the
-- pseudo-inverse, singular values up to rcond times the largest counting as zero:
-- gelsd's and gelss's answer, and gelsy's wherever the rank is clear (an rcond that
-- cuts singular values well above rounding truncates as the SVD does, not as gelsy's
-- pivoted QR). The gradient is torch's: X's through the pseudo-inverse.
function L.lstsq(a, b, opts)
  local op = "linalg.lstsq"
  check_matrix("lstsq", a)
  check("lstsq", b, "a tensor B")
  opts = options(op, opts, { driver = true, rcond = true })
  local driver = opts.driver or "gelsy"
  if not DRIVERS[driver] then
    raise(op .. ": driver must be \"gels\", \"gelsy\", \"gelsd\" or \"gelss\", got " .. tostring(driver))
  end
  local rcond = opts.rcond
  if rcond ~= nil and (type(rcond) ~= "number" or not (rcond >= 0)) then
    raise(op .. ": rcond must be a number >= 0, got " .. tostring(rcond))
  end
  local m, n = a:size(-2), a:size(-1)
  local vector = is_vector_rhs(a, b)
  local bm = vector and b:unsqueeze(-1) or b
  if bm:size(-2) ~= m then
    raise(op .. ": A " .. shape_str(a) .. " and B " .. shape_str(b) .. " do not match (B needs as many rows as A)")
  end
  local fdt = float_dtype(a)
  local none = dl.empty(0, { dtype = fdt, device = a.device })
  local x, rank, s
  if driver == "gels" then
    if m >= n then
      local q, r = L.qr(a)
      x = L.solve_triangular(r, mT(q):matmul(bm), { upper = true })
    else
      local q, r = L.qr(mT(a))   -- A = R^T Q^T: X = Q R^-T B
      x = q:matmul(L.solve_triangular(mT(r), bm, { upper = false }))
    end
    rank = dl.empty(0, { dtype = "int64", device = a.device })
  else
    local p, keep
    p, s, keep = pinv_op(T.floating(a), { rtol = rcond }, "lstsq")
    x = p:matmul(bm)
    rank = keep:sum(-1)
  end
  local residuals = none
  if m > n and driver ~= "gelsy" and (driver == "gels" or rank:eq(n):all()) then
    residuals = (a:matmul(x) - bm):pow(2):sum(-2)
  end
  if vector then x = x:squeeze(-1) end
  return x, residuals, rank, (driver == "gelsd" or driver == "gelss") and s or none
end

-- ---- norms --------------------------------------------------------------------------------

local function count_of(dim)
  if type(dim) == "table" and not is_tensor(dim) then return #dim .. " dims" end
  return tostring(dim)
end

-- The two dims, positive and distinct, a matrix norm reduces: dim a table of two, or
-- nil for the last two.
local function matrix_dims(op, a, dim)
  local nd = a:dim()
  if nd < 2 then raise(op .. ": expected a matrix or a batch of matrices, got shape " .. shape_str(a)) end
  if dim == nil then return nd - 1, nd end
  if type(dim) ~= "table" or is_tensor(dim) or #dim ~= 2 then
    raise(op .. ": dim must be a table of 2 dims for a matrix norm, got " .. count_of(dim))
  end
  local d1, d2 = core.positive_dim(op, dim[1], nd), core.positive_dim(op, dim[2], nd)
  if d1 == d2 then
    raise(op .. ": dim must name 2 different dims, got {" .. tostring(dim[1]) .. ", " .. tostring(dim[2]) .. "}")
  end
  return d1, d2
end

-- torch.linalg.matrix_norm: the matrices are dims d1 (rows) and d2 (columns).
local function matrix_norm(op, a, ord, dim, keepdim)
  ord = ord == nil and "fro" or ord
  local sums = ord == 1 or ord == -1 or ord == math_huge or ord == -math_huge
  if ord ~= "fro" and ord ~= "nuc" and ord ~= 2 and ord ~= -2 and not sums then
    raise(op .. ": ord must be \"fro\", \"nuc\", 1, -1, 2, -2, math.huge or -math.huge, got " .. tostring(ord))
  end
  local d1, d2 = matrix_dims(op, a, dim)
  if ord == "fro" then
    return a:norm({ d1, d2 }, keepdim, { p = 2 })   -- the norm's gradient is 0 at 0, not NaN
  end
  if sums then   -- the largest (smallest) column sum, or row sum for infinity
    local across, pick = d1, d2
    if ord == math_huge or ord == -math_huge then across, pick = d2, d1 end
    local s = a:abs():sum(across, true)
    local r = ord > 0 and s:amax(pick, true) or s:amin(pick, true)
    if not keepdim then r = r:squeeze(math.max(d1, d2)):squeeze(math.min(d1, d2)) end
    return r
  end
  -- through the singular values of the matrices moved to the last two dims
  local perm, back = {}, {}
  for i = 1, a:dim() do if i ~= d1 and i ~= d2 then perm[#perm + 1] = i end end
  perm[#perm + 1], perm[#perm + 2] = d1, d2
  for i, p in ipairs(perm) do back[p] = i end
  local s = L.svdvals(a:permute(perm))
  local r
  if ord == "nuc" then r = s:sum(-1) elseif ord == 2 then r = s:amax(-1) else r = s:amin(-1) end
  if keepdim then r = r:unsqueeze(-1):unsqueeze(-1):permute(back) end
  return r
end

-- matrix_norm(A [, ord = "fro" [, dim = {-2, -1} [, keepdim = false]]]): "fro", "nuc",
-- 1, -1, 2, -2, inf, -inf of the matrices over the two dims (A, ord, keepdim, the older
-- form, still reads).
function L.matrix_norm(a, ord, dim, keepdim)
  check("matrix_norm", a)
  if type(dim) == "boolean" and keepdim == nil then dim, keepdim = nil, dim end
  return matrix_norm("linalg.matrix_norm", a, ord, dim, keepdim == true)
end

-- vector_norm(x [, ord = 2 [, dim [, keepdim]]]): over every element, or over dim.
function L.vector_norm(x, ord, dim, keepdim)
  check("vector_norm", x)
  ord = ord == nil and 2 or ord
  if type(ord) ~= "number" then bad_arg("linalg.vector_norm", "a number ord", ord) end
  if dim == nil then
    local r = x:norm({ p = ord })
    if keepdim and x:dim() > 0 then   -- every dim kept, of size 1
      local ones = {}
      for i = 1, x:dim() do ones[i] = 1 end
      r = r:reshape(ones)
    end
    return r
  end
  return x:norm(dim, keepdim == true, { p = ord })
end

-- norm(A [, ord [, dim [, keepdim]]]) as torch.linalg.norm: a matrix norm for a string
-- ord, or a number ord over two dims (dim a table of two, or A 2-D without dim); else
-- the vector norm (2 without ord) over dim or every element. An ord without dim needs A
-- 1-D or 2-D.
function L.norm(a, ord, dim, keepdim)
  local op = "linalg.norm"
  check("norm", a)
  if ord ~= nil and type(ord) ~= "number" and type(ord) ~= "string" then bad_arg(op, "a number or string ord", ord) end
  local ndims
  if dim ~= nil then
    if type(dim) == "number" then
      ndims = 1
    elseif type(dim) == "table" and not is_tensor(dim) and (#dim == 1 or #dim == 2) then
      ndims = #dim
    else
      raise(op .. ": dim must be a dim or a table of 1 or 2 dims, got " .. count_of(dim))
    end
  elseif ord ~= nil and a:dim() ~= 1 and a:dim() ~= 2 then
    raise(op .. ": ord without dim needs A 1-D or 2-D, got shape " .. shape_str(a)
          .. " (dim says which dims to reduce)")
  end
  if type(ord) == "string" then
    if ndims == 1 then raise(op .. ": ord \"" .. ord .. "\" is a matrix norm: dim must be a table of 2 dims, got 1") end
    return matrix_norm(op, a, ord, dim, keepdim == true)
  end
  if ord ~= nil and (ndims == 2 or (ndims == nil and a:dim() == 2)) then
    return matrix_norm(op, a, ord, dim, keepdim == true)
  end
  return L.vector_norm(a, ord, dim, keepdim)
end

local COND_ORDS = { [2] = true, [-2] = true, [1] = true, [-1] = true, [math_huge] = true, [-math_huge] = true,
                    fro = true, nuc = true }

-- cond(A [, p]) as torch.linalg.cond: for p nil, 2 or -2 the largest singular value over
-- the smallest (the smallest over the largest for -2); for "fro", "nuc", 1, -1, inf or
-- -inf (square A), |A|_p |A^-1|_p, infinity where A is singular. 0 for an empty A.
function L.cond(a, p)
  local op = "linalg.cond"
  check_matrix("cond", a)
  if p ~= nil and not COND_ORDS[p] then
    raise(op .. ": p must be nil, 2, -2, 1, -1, math.huge, -math.huge, \"fro\" or \"nuc\", got " .. tostring(p))
  end
  a = T.floating(a)
  if a:numel() == 0 then
    local batch = a.shape
    batch[#batch], batch[#batch - 1] = nil, nil
    return dl.zeros(batch, { dtype = a.dtype, device = a.device })
  end
  if p == nil or p == 2 or p == -2 then
    local s = L.svdvals(a)
    if p == -2 then return s:amin(-1) / s:amax(-1) end
    return s:amax(-1) / s:amin(-1)
  end
  check_square("cond", a)
  local singular = L.slogdet(a:detach()):eq(0)   -- an exactly zero pivot, as inv's
  local safe = dl.where(singular:unsqueeze(-1):unsqueeze(-1), eye_like(a:size(-1), a), a)
  local r = matrix_norm(op, a, p) * matrix_norm(op, inverse("cond", safe), p)
  return dl.where(singular, math_huge, r)
end

-- cross(a, b [, dim = -1]): the cross product of 3-vectors along dim (broadcast), as
-- torch.linalg.cross; also dl.cross.
function L.cross(a, b, dim)
  local op = "linalg.cross"
  check("cross", a)
  check("cross", b)
  dim = dim or -1
  local n = math.max(a:dim(), b:dim())
  local d = core.positive_dim(op, dim, n)
  local function at(x, i)   -- component i along d (x broadcast to n dims first)
    local view = x.shape
    for _ = #view + 1, n do table.insert(view, 1, 1) end
    return x:reshape(view):narrow(d, i, 1)
  end
  local function length(x)   -- x's size along d, its dims aligned from the right
    local i = d - (n - x:dim())
    return i >= 1 and x:size(i) or 1
  end
  local la, lb = length(a), length(b)
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

-- matrix_power(A, n): A multiplied n times by repeated squaring (identity for n = 0,
-- A's inverse's power for n < 0).
function L.matrix_power(a, n)
  local op = "matrix_power"
  check_square(op, a)
  if not core.integer(n) then raise("linalg." .. op .. ": n must be an integer, got " .. tostring(n)) end
  if n < 0 then a, n = inverse(op, a), -n end
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

-- ---- more of torch's solves and forms ------------------------------------------------------------

-- cholesky_solve(B, L [, upper = false]): X with A X = B, A = L L^T (U^T U with upper),
-- by two triangular solves; B (..., n, k), batches broadcast.
function L.cholesky_solve(b, l, upper)
  local op = "cholesky_solve"
  check_matrix(op, b)
  check_square(op, l)
  core.boolean_arg(op, upper, "upper")
  if l:size(-1) ~= b:size(-2) then
    raise(op .. ": B " .. shape_str(b.shape) .. " does not have the " .. l:size(-1) .. " rows of the factor "
          .. shape_str(l.shape))
  end
  if upper then l = mT(l) end
  local y = L.solve_triangular(l, b, { upper = false })
  return L.solve_triangular(mT(l), y, { upper = true })
end

-- cholesky_inverse(L [, upper = false]): (L L^T)^-1 (or (U^T U)^-1).
function L.cholesky_inverse(l, upper)
  check_square("cholesky_inverse", l)
  core.boolean_arg("cholesky_inverse", upper, "upper")
  return L.cholesky_solve(eye_like(l:size(-1), l):to(float_dtype(l)):expand_as(l), l, upper)
end

-- triangular_solve(B, A [, upper = true, transpose = false, unitriangular = false] or
-- {upper, transpose, unitriangular}): torch's older form, B first; returns X with A X = B
-- (A^T X = B with transpose) and a copy of A.
function L.triangular_solve(b, a, upper, transpose, unitriangular)
  local op = "triangular_solve"
  check_matrix(op, b)
  check_square(op, a)
  if type(upper) == "table" then
    local o = options(op, upper, { upper = true, transpose = true, unitriangular = true })
    upper, transpose, unitriangular = o.upper, o.transpose, o.unitriangular
  end
  if upper == nil then upper = true end
  for name, v in pairs({ upper = upper, transpose = transpose, unitriangular = unitriangular }) do
    core.boolean_arg(op, v, name)
  end
  local m = a
  if transpose then m, upper = mT(a), not upper end
  return L.solve_triangular(m, b, { upper = upper, unitriangular = unitriangular == true }), a:clone()
end

for _, name in ipairs({ "cholesky_solve", "cholesky_inverse", "triangular_solve" }) do
  dl[name], T.methods[name] = L[name], L[name]
end

-- Note [Factorization infos]
-- The _ex forms return torch's info with the result: per matrix (int32, the batch's
-- shape), 0 on success, else the order of the leading minor that is not positive
-- (cholesky) or the index of LU's zero pivot (inv, solve). The engine's errors name it
-- ("order 2", "U(2, 2)"), so a failed batch is retried matrix by matrix to read it; the
-- failed matrices' results are NaN (torch's are LAPACK's partial work) and the others'
-- are the batch's, gradients included.
local function with_info(op, a, f, check_errors, finish)
  if check_errors ~= nil and type(check_errors) ~= "boolean" then
    bad_arg("linalg." .. op, "check_errors (a boolean)", check_errors)
  end
  -- (every error names op, also those of the functions it is made of)
  local function fail(err) error((tostring(err):gsub("linalg%.[%w_]+:", "linalg." .. op .. ":", 1)), 0) end
  local batch = a.shape
  batch[#batch], batch[#batch - 1] = nil, nil
  local ok, r = pcall(finish or f, a)
  if ok then return r, dl.zeros(batch, { dtype = "int32", device = a.device }) end
  if check_errors then fail(r) end
  local n = a:size(-1)
  local flat = a:reshape(-1, n, n)
  local infos, fixed = {}, {}
  local eye = eye_like(n, a):to(a.dtype)
  for i = 1, flat:size(1) do
    local ok_i, err = pcall(f, flat[i])
    if ok_i then
      infos[i], fixed[i] = 0, flat[i]
    else
      local msg = tostring(err)
      local k = msg:match("order (%d+)") or msg:match("U%((%d+),")
      if not k then fail(err) end
      infos[i], fixed[i] = tonumber(k), eye
    end
  end
  local info = dl.tensor(infos, { dtype = "int32" }):to(a.device):view(batch)
  local good = dl.stack(fixed):view(a.shape)
  ok, r = pcall(finish or f, good)
  if not ok then fail(r) end
  local bad = info:ne(0)
  for _ = 1, r:dim() - #batch do bad = bad:unsqueeze(-1) end
  return dl.where(bad, 0 / 0, r), info
end

-- cholesky_ex(A [, {upper = false, check_errors = false}]): L, info.
function L.cholesky_ex(a, opts)
  check_square("cholesky_ex", a)
  opts = options("linalg.cholesky_ex", opts, { upper = true, check_errors = true })
  return with_info("cholesky_ex", a, function(m) return L.cholesky(m, { upper = opts.upper }) end, opts.check_errors)
end

-- inv_ex(A [, {check_errors = false}]): the inverse, info.
function L.inv_ex(a, opts)
  check_square("inv_ex", a)
  opts = options("linalg.inv_ex", opts, { check_errors = true })
  return with_info("inv_ex", a, function(m) return inverse("inv", m) end, opts.check_errors)
end

-- solve_ex(A, B [, {left = true, check_errors = false}]): X, info (inv's test of A, then
-- the solve with the singular matrices swapped for the identity).
function L.solve_ex(a, b, opts)
  check_square("solve_ex", a)
  check("solve_ex", b, "a tensor B")
  opts = options("linalg.solve_ex", opts, { left = true, check_errors = true })
  return with_info("solve_ex", a, function(m) return inverse("solve", m) end, opts.check_errors,
                   function(good) return L.solve(good, b, { left = opts.left }) end)
end

-- tensorinv(A [, ind = 2]): the inverse of A seen as a matrix of its first ind dims by the
-- rest, shaped A.shape[ind + 1 ..] .. A.shape[1 .. ind].
function L.tensorinv(a, ind)
  local op = "tensorinv"
  check(op, a)
  ind = ind or 2
  if not core.integer(ind) or ind < 1 then
    raise("linalg." .. op .. ": ind must be a whole number >= 1, got " .. tostring(ind))
  end
  local shape = a.shape
  if ind > #shape then raise("linalg." .. op .. ": ind = " .. ind .. " is beyond the " .. #shape .. " dims of A") end
  local rows, cols, out = 1, 1, {}
  for i = 1, #shape do
    if i <= ind then rows = rows * shape[i] else cols = cols * shape[i]; out[#out + 1] = shape[i] end
  end
  for i = 1, ind do out[#out + 1] = shape[i] end
  if rows ~= cols then
    raise("linalg." .. op .. ": the product of the first ind = " .. ind .. " dims (" .. rows
          .. ") must equal that of the others (" .. cols .. "), got shape " .. shape_str(shape))
  end
  return inverse(op, a:reshape(rows, cols)):reshape(out)
end

-- tensorsolve(A, B [, dims]): X with tensordot(A, X, X's dims) = B; dims of A (1-based)
-- are moved to its end first.
function L.tensorsolve(a, b, dims)
  local op = "tensorsolve"
  check(op, a, "a tensor A")
  check(op, b, "a tensor B")
  if dims ~= nil then
    if type(dims) == "number" then dims = { dims } end
    if type(dims) ~= "table" or is_tensor(dims) then bad_arg("linalg." .. op, "a list of dims", dims) end
    local moved, set = {}, {}
    for i, d in ipairs(dims) do
      d = core.positive_dim("linalg." .. op, d, a:dim())
      set[d], moved[i] = true, d
    end
    local order = {}
    for d = 1, a:dim() do if not set[d] then order[#order + 1] = d end end
    for _, d in ipairs(moved) do order[#order + 1] = d end
    a = a:permute(order)
  end
  local nb = b:dim()
  local shape = a.shape
  local rows, cols, out = b:numel(), 1, {}
  for i = nb + 1, #shape do cols = cols * shape[i]; out[#out + 1] = shape[i] end
  local lead = 1
  for i = 1, math.min(nb, #shape) do lead = lead * shape[i] end
  if nb > #shape or lead ~= rows or rows ~= cols then
    raise("linalg." .. op .. ": A's first " .. nb .. " dims and its others must each hold as many elements as B "
          .. shape_str(b.shape) .. " (" .. rows .. "), got A " .. shape_str(shape))
  end
  local ok, x = pcall(L.solve, a:reshape(rows, cols), b:reshape(rows))
  if not ok then error((tostring(x):gsub("linalg%.solve:", "linalg." .. op .. ":", 1)), 0) end
  return x:reshape(out)
end

-- vander(x [, N = x's last size]): (..., n, N), row i the powers x_i^0 .. x_i^(N-1)
-- (increasing, unlike dl.vander's default), as products (differentiable at 0).
function L.vander(x, n)
  local op = "vander"
  check(op, x)
  if x:dim() < 1 then raise("linalg." .. op .. ": expected x of at least 1 dim, got a 0-dim tensor") end
  n = n or x:size(-1)
  if not core.integer(n) or n < 2 then raise("linalg." .. op .. ": N must be greater than 1, got " .. tostring(n)) end
  local col = x:unsqueeze(-1)
  local shape = col.shape
  shape[#shape] = n - 1
  return dl.cat({ dl.ones_like(col), col:expand(shape):cumprod(-1) }, -1)
end

-- vecdot(x, y [, {dim = -1}] or dim): the sum of x y over dim, broadcast.
function L.vecdot(x, y, dim)
  check("vecdot", x)
  check("vecdot", y)
  if type(dim) == "table" then dim = options("linalg.vecdot", dim, { dim = true }).dim end
  return (x * y):sum(dim or -1)
end

-- diagonal(A [, {offset = 0, dim1 = -2, dim2 = -1}]): torch.linalg's defaults (the last two dims).
function L.diagonal(a, opts)
  check("diagonal", a)
  opts = options("linalg.diagonal", opts, { offset = true, dim1 = true, dim2 = true })
  return a:diagonal(opts.offset or 0, opts.dim1 or -2, opts.dim2 or -1)
end

function L.matmul(a, b)
  check("matmul", a)
  check("matmul", b)
  return a:matmul(b)
end

-- householder_product(A (..., m, n), tau (..., k)): the first n columns of H_1 ... H_k,
-- H_i = I - tau_i v_i v_i^T, v_i column i of A below the diagonal with a 1 on it (LAPACK's
-- orgqr), k <= n <= m.
function L.householder_product(a, tau)
  local op = "householder_product"
  check_matrix(op, a)
  check(op, tau, "a tensor tau")
  local m, n = a:size(-2), a:size(-1)
  local k = tau:dim() >= 1 and tau:size(-1) or -1
  if n > m or k < 0 or k > n or tau:dim() ~= a:dim() - 1 then
    raise("linalg." .. op .. ": expected A (..., m, n) with m >= n and tau (..., k) with k <= n, got "
          .. shape_str(a.shape) .. " and " .. shape_str(tau.shape))
  end
  local rows = dl.arange(1, m + 1, { device = a.device }):view(m, 1)
  local q = eye_like(m, a):to(a.dtype)
  for i = 1, k do
    local v = dl.where(rows:gt(i), a:narrow(-1, i, 1), rows:eq(i):to(a.dtype))   -- (..., m, 1)
    local t = tau:narrow(-1, i, 1):unsqueeze(-1)                                 -- (..., 1, 1)
    q = q - q:matmul(v):matmul(mT(v)) * t
  end
  if k == 0 then
    local shape = a.shape
    shape[#shape] = m
    q = q:expand(shape):clone()
  end
  return q:narrow(-1, 1, n)
end

-- dl.pdist and dl.bilinear: nn.functional's, by torch's top-level names.
dl.pdist = function(...) return dl.nn.functional.pdist(...) end
dl.bilinear = function(...) return dl.nn.functional.bilinear(...) end

return L
