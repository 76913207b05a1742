-- dlua.products: products and combinations of whole tensors, as PyTorch's (functions of
-- dl, loaded when first used):
--
--   dl.tensordot(a, b, dims)        sum over a's last dims and b's first (dims a count), or
--                                   over the listed dims ({{a dims}, {b dims}})
--   dl.kron(a, b)                   the Kronecker product
--   dl.block_diag(t1, t2, ...)      matrices along the diagonal of a larger one
--   dl.cartesian_prod(t1, t2, ...)  every combination of the 1-D tensors' elements, a row each
--   dl.combinations(t [, r = 2 [, with_replacement]])   the r-element combinations, as rows
--   dl.mv(A, v), dl.vdot(a, b)
--   dl.addmm(input, m1, m2 [, {beta = 1, alpha = 1}]), addmv, baddbmm, addbmm   BLAS's
--                                   beta input + alpha product (input unread where beta = 0)
--
-- Made of permute, reshape, matmul, mul, cat, meshgrid and index_select: differentiable.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local shape_str, dl = T.shape_str, T.dl
local check = T.check_tensor
local type, ipairs, floor = type, ipairs, math.floor

-- The product of the sizes of x's dims in `dims`.
local function volume(x, dims)
  local v = 1
  for _, d in ipairs(dims) do v = v * x:size(d) end
  return v
end

function dl.tensordot(a, b, dims)
  local op = "tensordot"
  check(op, a)
  check(op, b)
  local da, db = {}, {}
  if type(dims) == "number" then
    if not core.integer(dims) or dims < 0 or dims > a:dim() or dims > b:dim() then
      raise(op .. ": dims must be a count of at most " .. math.min(a:dim(), b:dim()) .. ", got " .. dims)
    end
    for i = 1, dims do da[i], db[i] = a:dim() - dims + i, i end
  elseif type(dims) == "table" and type(dims[1]) == "table" and type(dims[2]) == "table" and #dims[1] == #dims[2] then
    for i, d in ipairs(dims[1]) do da[i] = core.positive_dim(op, d, a:dim()) end
    for i, d in ipairs(dims[2]) do db[i] = core.positive_dim(op, d, b:dim()) end
  else
    bad_arg(op, "a count or two lists of dims of one length", dims)
  end
  for i = 1, #da do
    if a:size(da[i]) ~= b:size(db[i]) then
      raise(op .. ": dim " .. da[i] .. " of a (" .. a:size(da[i]) .. ") and dim " .. db[i] .. " of b (" .. b:size(db[i])
            .. ") differ")
    end
  end
  local in_a, in_b = {}, {}
  for _, d in ipairs(da) do in_a[d] = true end
  for _, d in ipairs(db) do in_b[d] = true end
  local free_a, free_b, out = {}, {}, {}
  for d = 1, a:dim() do if not in_a[d] then free_a[#free_a + 1] = d; out[#out + 1] = a:size(d) end end
  for d = 1, b:dim() do if not in_b[d] then free_b[#free_b + 1] = d; out[#out + 1] = b:size(d) end end
  local pa, pb = {}, {}
  for _, d in ipairs(free_a) do pa[#pa + 1] = d end
  for _, d in ipairs(da) do pa[#pa + 1] = d end
  for _, d in ipairs(db) do pb[#pb + 1] = d end
  for _, d in ipairs(free_b) do pb[#pb + 1] = d end
  local k = volume(a, da)
  local am = a:permute(pa):reshape(volume(a, free_a), k)
  local bm = b:permute(pb):reshape(k, volume(b, free_b))
  return am:matmul(bm):reshape(out)
end

function dl.kron(a, b)
  check("kron", a)
  check("kron", b)
  local n = math.max(a:dim(), b:dim())
  local sa, sb = a.shape, b.shape
  while #sa < n do table.insert(sa, 1, 1) end
  while #sb < n do table.insert(sb, 1, 1) end
  -- a (i1, 1, i2, 1, ...) times b (1, j1, 1, j2, ...), merged pairwise
  local va, vb, out = {}, {}, {}
  for i = 1, n do
    va[2 * i - 1], va[2 * i] = sa[i], 1
    vb[2 * i - 1], vb[2 * i] = 1, sb[i]
    out[i] = sa[i] * sb[i]
  end
  return (a:reshape(va) * b:reshape(vb)):reshape(out)
end

function dl.block_diag(...)
  local n = select("#", ...)
  local blocks, rows, cols = {}, 0, 0
  for i = 1, n do
    local t = select(i, ...)
    check("block_diag", t)
    if t:dim() > 2 then raise("block_diag: expected tensors of at most 2 dims, got shape " .. shape_str(t.shape) .. " for " .. i) end
    if t:dim() == 0 then t = t:reshape(1, 1) elseif t:dim() == 1 then t = t:reshape(1, -1) end
    blocks[i] = t
    rows, cols = rows + t:size(1), cols + t:size(2)
  end
  if n == 0 then return dl.zeros(0, 0) end
  local dtype = blocks[1].dtype
  for i = 2, n do dtype = (blocks[i] * dl.zeros({}, { dtype = dtype })).dtype end
  local out_rows, at = {}, 0
  for i, t in ipairs(blocks) do
    local left = dl.zeros(t:size(1), at, { dtype = dtype, device = t.device })
    local right = dl.zeros(t:size(1), cols - at - t:size(2), { dtype = dtype, device = t.device })
    out_rows[i] = dl.cat({ left, t:to(dtype), right }, 2)
    at = at + t:size(2)
  end
  return dl.cat(out_rows, 1)
end

function dl.cartesian_prod(...)
  local n = select("#", ...)
  if n == 0 then raise("cartesian_prod: expected at least one tensor") end
  for i = 1, n do
    local t = select(i, ...)
    check("cartesian_prod", t)
    if t:dim() ~= 1 then raise("cartesian_prod: expected 1-D tensors, got shape " .. shape_str(t.shape) .. " for " .. i) end
  end
  if n == 1 then return (select(1, ...)):clone() end
  local grids = { dl.meshgrid(...) }
  for i, g in ipairs(grids) do grids[i] = g:reshape(-1) end
  return dl.stack(grids, 2)
end

function dl.combinations(t, r, with_replacement)
  local op = "combinations"
  check(op, t)
  if t:dim() ~= 1 then raise(op .. ": expected a 1-D tensor, got shape " .. shape_str(t.shape)) end
  r = r or 2
  if not core.integer(r) or r < 0 then raise(op .. ": r must be an integer >= 0, got " .. tostring(r)) end
  local n = t:numel()
  local rows = {}
  local pick = {}
  local function walk(depth, from)
    if depth > r then
      rows[#rows + 1] = { unpack(pick) }
      return
    end
    for i = from, n do
      pick[depth] = i
      walk(depth + 1, with_replacement and i or i + 1)
    end
  end
  if r > 0 then walk(1, 1) end
  if #rows == 0 then return dl.zeros(0, { dtype = t.dtype, device = t.device }) end
  local idx = dl.tensor(rows, { dtype = "int64", device = t.device })
  return t:index_select(1, idx:reshape(-1)):reshape(#rows, r)
end

-- ---- BLAS's forms ------------------------------------------------------------------------------

-- mv(A, v): A (n, m) times v (m).
function dl.mv(a, v)
  local op = "mv"
  check(op, a)
  check(op, v)
  if a:dim() ~= 2 or v:dim() ~= 1 then
    raise(op .. ": expected a matrix and a vector, got shapes " .. shape_str(a.shape) .. " and " .. shape_str(v.shape))
  end
  return a:matmul(v)
end

-- vdot(a, b): the dot product of two vectors of one length (real: no conjugate).
function dl.vdot(a, b)
  local op = "vdot"
  check(op, a)
  check(op, b)
  if a:dim() ~= 1 or b:dim() ~= 1 or a:size(1) ~= b:size(1) then
    raise(op .. ": expected two vectors of one length, got shapes " .. shape_str(a.shape) .. " and " .. shape_str(b.shape))
  end
  return (a * b):sum()
end

local SCALE_OPTS = { beta = true, alpha = true }

-- beta input + alpha product, for the add* forms; input is not read where beta is 0 (its
-- NaN does not reach the result), as PyTorch's.
local function scaled_sum(op, input, product, opts)
  opts = core.options(op, opts, SCALE_OPTS)
  local beta, alpha = opts.beta or 1, opts.alpha or 1
  if type(beta) ~= "number" or type(alpha) ~= "number" then raise(op .. ": beta and alpha must be numbers") end
  -- input broadcasts to the product's shape (never beyond it)
  local ps, is = product.shape, input.shape
  local fits = #is <= #ps
  for i = 1, #is do
    local n, m = is[#is - i + 1], ps[#ps - i + 1]
    fits = fits and (n == 1 or n == m)
  end
  if not fits then
    raise(op .. ": input of shape " .. shape_str(input.shape) .. " does not broadcast to the product's "
          .. shape_str(product.shape))
  end
  local p = alpha == 1 and product or product * alpha
  if beta == 0 then return p end
  return (beta == 1 and input or input * beta) + p
end

-- The shapes of a product's operands, checked.
local function operands(op, a, b, da, db)
  check(op, a)
  check(op, b)
  if a:dim() ~= da or b:dim() ~= db then
    raise(op .. ": expected operands of " .. da .. " and " .. db .. " dims, got shapes " .. shape_str(a.shape)
          .. " and " .. shape_str(b.shape))
  end
end

-- The add* forms: their operands' dims and the product (addbmm sums the batch's).
local function product(a, b) return a:matmul(b) end
for name, form in pairs({
  addmm = { 2, 2, product }, addmv = { 2, 1, product }, baddbmm = { 3, 3, product },
  addbmm = { 3, 3, function(a, b) return a:matmul(b):sum(1) end },
}) do
  dl[name] = function(input, a, b, opts)
    check(name, input)
    operands(name, a, b, form[1], form[2])
    return scaled_sum(name, input, form[3](a, b), opts)
  end
end
for _, name in ipairs({ "mv", "vdot", "addmm", "addmv", "baddbmm", "addbmm" }) do T.methods[name] = dl[name] end

return {}
