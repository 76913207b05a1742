-- dlua.arrange: rearranging a tensor's elements, as PyTorch's (dims 1-based):
--
--   x:tile({2, 3})       -- copies side by side (PyTorch's x.repeat(2, 3); `repeat` is a
--                        -- Lua keyword, so x["repeat"](x, 2, 3) names it too)
--   x:roll(1, 2)         -- elements shifted along dim 2, wrapping around
--   x:flip({1})          -- dim 1 reversed
--   x:triu(k), x:tril(k) -- the upper / lower triangle of the last two dims
--   x:repeat_interleave(2, 1)  -- each row twice, in place: rows 1, 1, 2, 2, ...
--   x:split(2, 1), x:chunk(3, 1), x:unbind(1)  -- lists of views along dim 1
--   x:diagonal(k, d1, d2), dl.diag(v or m, k), m:trace(), dl.outer(a, b)
--   x:unfold(dim, size, step)  -- sliding windows as a new last dim
--   dl.vander(x [, N [, increasing]])  -- the Vandermonde matrix of a vector's powers
--
-- Each is made of the engine's differentiable views and ops (expand and reshape, narrow
-- and cat, index_select, where), so gradients of any order come with it.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, methods, dl = T.is_tensor, T.methods, T.dl
local type, tostring, ipairs, select, next, floor = type, tostring, ipairs, select, next, math.floor
local unpack = unpack or table.unpack

local check = T.check_tensor   -- (op, x): an error naming op unless x is a tensor

-- A dim argument (1-based, negative from the end) as a positive dim of x.
local function dim_of(op, x, d) return core.positive_dim(op, d, x:dim()) end

local function int_list(op, v, what)
  local list = type(v) == "number" and { v } or v
  if type(list) ~= "table" then bad_arg(op, what, v) end
  for i, k in ipairs(list) do
    if type(k) ~= "number" or k ~= floor(k) then raise(op .. ": " .. what .. " must be integers, got " .. tostring(k)) end
    list[i] = k
  end
  return list
end

-- x:tile(reps): reps (a list, or numbers) copies along each dim; with fewer reps than
-- dims the leading dims are copied once, with more x gains leading dims of size 1.
-- (op: the name errors give, "repeat" when called by it)
local function tiled(op, x, reps, ...)
  check(op, x)
  if type(reps) == "number" then reps = { reps, ... } end
  reps = int_list(op, reps, "the repetitions (a list)")
  for _, r in ipairs(reps) do
    if r < 0 then raise(op .. ": repetitions must be >= 0, got " .. r) end
  end
  local n = math.max(#reps, x:dim())
  local r, s = {}, {}
  for i = 1, n do
    r[i] = reps[i - (n - #reps)] or 1
    s[i] = x.shape[i - (n - x:dim())] or 1
  end
  -- (s1, ..., sn) viewed as (1, s1, ..., 1, sn), expanded to (r1, s1, ..., rn, sn),
  -- copied: as PyTorch's, the result is a new contiguous tensor, never a view of x (an
  -- expanded view would alias its copies, and with all reps 1 be x's storage itself)
  local split, grown, out = {}, {}, {}
  for i = 1, n do
    split[#split + 1], split[#split + 2] = 1, s[i]
    grown[#grown + 1], grown[#grown + 2] = r[i], s[i]
    out[i] = r[i] * s[i]
  end
  local y = x:reshape(split):expand(grown)
  y = y:is_contiguous() and y:clone() or y:contiguous()
  return y:reshape(out)
end
function methods.tile(x, reps, ...) return tiled("tile", x, reps, ...) end
dl.tile = methods.tile
methods["repeat"] = function(x, ...)
  check("repeat", x)
  local reps = select("#", ...) == 1 and type((...)) == "table" and (...) or { ... }
  if #reps < x:dim() then
    raise("repeat: expected at least " .. x:dim() .. " repetitions (one per dim), got " .. #reps)
  end
  return tiled("repeat", x, reps)
end

-- The 1-based positions 1 (counts[1] times), 2 (counts[2] times), ... of an int64
-- counts tensor with no negative entry, on its device: each output position p (0-based)
-- is the first i whose running count passes p.
local function positions_of(op, counts)
  if counts:numel() > 0 and counts:amin():item() < 0 then raise(op .. ": repeats must be >= 0") end
  local total = counts:numel() > 0 and counts:sum():item() or 0
  local at = { dtype = "int64", device = counts.device }
  if total == 0 then return dl.zeros(0, at) end
  return dl.searchsorted(counts:cumsum(1), dl.arange(0, total, at), { right = true })
end

-- x:repeat_interleave(repeats [, dim] [, {dim =, output_size =}]): each slice along dim
-- repeated in place, as PyTorch's: repeats a count, or one count per slice (a list or an
-- integer tensor; a single count serves every slice); without dim, over the flattened
-- tensor. output_size, PyTorch's hint of the result's length along dim, must be it.
-- dl.repeat_interleave(counts [, {output_size =}]): the positions 1, 1, ..., 2, ..., each
-- i counts[i] times.
local RI_OPTS = { dim = true, output_size = true }
local function is_options(v) return type(v) == "table" and v[1] == nil and next(v) ~= nil end

function methods.repeat_interleave(x, repeats, dim, opts)
  local op = "repeat_interleave"
  check(op, x)
  if opts == nil and type(dim) == "table" then dim, opts = nil, dim end
  if opts == nil and dim == nil and is_options(repeats) then repeats, opts = nil, repeats end
  opts = core.options(op, opts, RI_OPTS)
  if opts.dim ~= nil then
    if dim ~= nil then raise(op .. ": dim given twice, as an argument (" .. tostring(dim) .. ") and as an option") end
    dim = opts.dim
  end
  local size = opts.output_size
  if size ~= nil and not (core.integer(size) and size >= 0) then
    raise(op .. ": output_size must be an integer >= 0, got " .. tostring(size))
  end
  local function sized(index, along)
    if size ~= nil and index:numel() ~= size then
      raise(op .. ": output_size " .. size .. " does not match the repeats, which make " .. index:numel()
            .. " elements" .. (along or ""))
    end
    return index
  end
  if repeats == nil then
    if dim ~= nil then raise(op .. ": dim needs repeats (with one argument, x is the counts)") end
    if x.dtype ~= "int64" and x.dtype ~= "int32" or x:dim() ~= 1 then
      raise(op .. ": with one argument, expected a 1-D integer tensor of counts, got " .. x.dtype .. " " .. x:dim() .. "-D")
    end
    return sized(positions_of(op, x:to("int64")))
  end
  if dim == nil then return methods.repeat_interleave(x:reshape(-1), repeats, 1, { output_size = size }) end
  dim = dim_of(op, x, dim)
  local n = x:size(dim)
  local at = { dtype = "int64", device = x.device }
  local index
  if type(repeats) == "number" then
    if repeats ~= floor(repeats) or repeats < 0 then
      raise(op .. ": repeats must be an integer >= 0, got " .. tostring(repeats))
    end
    index = dl.arange(1, n + 1, at):unsqueeze(2):expand(n, repeats):reshape(n * repeats)
  else
    local counts
    if type(repeats) == "table" then
      counts = dl.tensor(int_list(op, { unpack(repeats) }, "the repeats"), at)
    elseif is_tensor(repeats) and (repeats.dtype == "int64" or repeats.dtype == "int32") and repeats:dim() <= 1 then
      counts = repeats:reshape(-1):to(at.dtype):to(x.device)
    else
      bad_arg(op, "a count, a list of counts or a 1-D integer tensor", repeats)
    end
    if counts:numel() == 1 then counts = counts:expand(n) end
    if counts:numel() ~= n then
      raise(op .. ": " .. counts:numel() .. " repeats for " .. n .. " slices along dimension " .. dim)
    end
    index = positions_of(op, counts)
  end
  return x:index_select(dim, sized(index, " along dimension " .. dim))
end
dl.repeat_interleave = methods.repeat_interleave

-- x:roll(shifts [, dims]): elements moved `shifts` places along each of `dims`,
-- wrapping around, in a new tensor (as PyTorch's, also where nothing moves); without
-- dims, over the flattened tensor, its shape kept.
function methods.roll(x, shifts, dims)
  local op = "roll"
  check(op, x)
  shifts = int_list(op, shifts, "the shifts")
  if dims == nil then
    if #shifts ~= 1 then raise(op .. ": without dims, expected one shift, got " .. #shifts) end
    return methods.roll(x:reshape(-1), shifts, { 1 }):reshape(x.shape)
  end
  dims = int_list(op, dims, "the dims")
  if #dims ~= #shifts then raise(op .. ": " .. #shifts .. " shifts for " .. #dims .. " dims") end
  local y = x
  for i, d in ipairs(dims) do
    d = dim_of(op, y, d)
    local n = y:size(d)
    local s = n > 0 and shifts[i] % n or 0
    if s ~= 0 then y = dl.cat({ y:narrow(d, n - s + 1, s), y:narrow(d, 1, n - s) }, d) end
  end
  return rawequal(y, x) and x:clone() or y
end
dl.roll = methods.roll

-- x:flip(dims), x:flip(d1, d2, ...): the order along each of `dims` reversed, in a new
-- tensor (as PyTorch's, also where nothing moves: a size-1 dim, no dims).
function methods.flip(x, dims, ...)
  local op = "flip"
  check(op, x)
  if type(dims) == "number" then dims = { dims, ... } end
  dims = int_list(op, dims, "the dims (a list)")
  if x:dim() == 0 then   -- (its one place: dim 1 or -1, as PyTorch's)
    for _, d in ipairs(dims) do core.positive_dim(op, d, 1, 0) end
    return x:clone()
  end
  local y, seen = x, {}
  for _, d in ipairs(dims) do
    d = dim_of(op, y, d)
    if seen[d] then raise(op .. ": dim " .. d .. " appears more than once in the dims") end
    seen[d] = true
    local n = y:size(d)
    if n > 1 then y = y:index_select(d, dl.arange(n, 0, -1, { dtype = "int64", device = y.device })) end
  end
  return rawequal(y, x) and x:clone() or y
end
dl.flip = methods.flip

-- The elements (i, j) of the last two dims with j - i >= k (triu) or <= k (tril); the
-- others zero.
local function triangle(op, x, k, upper)
  check(op, x)
  k = k or 0
  if type(k) ~= "number" or k ~= floor(k) then raise(op .. ": the diagonal must be an integer, got " .. tostring(k)) end
  if x:dim() < 2 then raise(op .. ": expected a tensor of 2 or more dims, got shape " .. T.shape_str(x.shape)) end
  local rows, cols = x:size(-2), x:size(-1)
  local i = dl.arange(1, rows + 1, { dtype = "int64", device = x.device }):reshape(rows, 1)
  local j = dl.arange(1, cols + 1, { dtype = "int64", device = x.device }):reshape(1, cols)
  local d = j - i
  local keep = upper and d:ge(k) or d:le(k)
  return dl.where(keep, x, dl.zeros({}, { dtype = x.dtype, device = x.device }))
end
function methods.triu(x, k) return triangle("triu", x, k, true) end
function methods.tril(x, k) return triangle("tril", x, k, false) end
dl.triu, dl.tril = methods.triu, methods.tril

-- x:diagonal([offset = 0, dim1 = 1, dim2 = 2]): the elements (i, i + offset) of dims dim1
-- and dim2, as the last dim of the result (the other dims first, in order), as PyTorch's.
-- A strided slice of the two dims flattened together (a view where x's layout allows).
function methods.diagonal(x, offset, d1, d2)
  local op = "diagonal"
  check(op, x)
  offset = offset or 0
  if not core.integer(offset) then
    raise(op .. ": the offset must be an integer, got " .. tostring(offset))
  end
  if x:dim() < 2 then raise(op .. ": expected a tensor of 2 or more dims, got shape " .. T.shape_str(x.shape)) end
  d1, d2 = dim_of(op, x, d1 or 1), dim_of(op, x, d2 or 2)
  if d1 == d2 then raise(op .. ": dim1 and dim2 must differ, got both " .. d1) end
  local order = {}
  for d = 1, x:dim() do if d ~= d1 and d ~= d2 then order[#order + 1] = d end end
  order[#order + 1], order[#order + 2] = d1, d2
  local m = x:permute(order)
  local rows, cols = x:size(d1), x:size(d2)
  local len, first
  if offset >= 0 then len, first = math.max(0, math.min(rows, cols - offset)), offset
  else len, first = math.max(0, math.min(rows + offset, cols)), -offset * cols end
  local lead = m.shape
  lead[#lead], lead[#lead - 1] = nil, nil
  local flat_shape = { unpack(lead) }
  flat_shape[#flat_shape + 1] = rows * cols
  local flat = m:reshape(flat_shape)
  if len == 0 then return flat:narrow(#flat_shape, 1, 0) end
  return flat:slice(#flat_shape, first + 1, first + (len - 1) * (cols + 1) + 1, cols + 1)
end
dl.diagonal = methods.diagonal

-- dl.diag(v [, k]): a 1-D v on the k-th diagonal of a square matrix (zeros elsewhere);
-- dl.diag(m [, k]): the k-th diagonal of a matrix, as a 1-D tensor (a view).
function methods.diag(x, k)
  local op = "diag"
  check(op, x)
  k = k or 0
  if not core.integer(k) then raise(op .. ": the diagonal must be an integer, got " .. tostring(k)) end
  if x:dim() == 2 then return methods.diagonal(x, k) end
  if x:dim() ~= 1 then raise(op .. ": expected a 1-D or 2-D tensor, got shape " .. T.shape_str(x.shape)) end
  local n = x:size(1)
  local size = n + math.abs(k)
  local pad = dl.zeros(math.abs(k), { dtype = x.dtype, device = x.device })
  -- Row i holds x[i] where k >= 0, column j holds x[j] where k < 0.
  local along = k >= 0 and dl.cat({ x, pad }, 1):unsqueeze(2) or dl.cat({ x, pad }, 1):unsqueeze(1)
  local i = dl.arange(1, size + 1, { dtype = "int64", device = x.device }):reshape(size, 1)
  local j = dl.arange(1, size + 1, { dtype = "int64", device = x.device }):reshape(1, size)
  return dl.where((j - i):eq(k), along, dl.zeros({}, { dtype = x.dtype, device = x.device }))
end
dl.diag = methods.diag

-- The sum of a matrix's main diagonal.
function methods.trace(x)
  check("trace", x)
  if x:dim() ~= 2 then raise("trace: expected a 2-D tensor, got shape " .. T.shape_str(x.shape)) end
  return methods.diagonal(x):sum()
end
dl.trace = methods.trace

-- dl.outer(a, b): a[i] b[j] for 1-D a and b.
function dl.outer(a, b)
  check("outer", a)
  check("outer", b)
  if a:dim() ~= 1 or b:dim() ~= 1 then
    raise("outer: expected two 1-D tensors, got shapes " .. T.shape_str(a.shape) .. " and " .. T.shape_str(b.shape))
  end
  return a:unsqueeze(2) * b:unsqueeze(1)
end
methods.outer = dl.outer

-- x:fliplr(), x:flipud(): dims 2 and 1 reversed; x:rot90([k = 1, dims = {1, 2}]): turned
-- by k quarter turns from the first of dims toward the second, as PyTorch's.
function methods.fliplr(x)
  check("fliplr", x)
  if x:dim() < 2 then raise("fliplr: expected a tensor of 2 or more dims, got shape " .. T.shape_str(x.shape)) end
  return methods.flip(x, { 2 })
end
function methods.flipud(x)
  check("flipud", x)
  if x:dim() < 1 then raise("flipud: expected a tensor of 1 or more dims, got shape ()") end
  return methods.flip(x, { 1 })
end
function methods.rot90(x, k, dims)
  local op = "rot90"
  check(op, x)
  k = k or 1
  if not core.integer(k) then raise(op .. ": k must be an integer, got " .. tostring(k)) end
  dims = dims or { 1, 2 }
  if type(dims) ~= "table" or #dims ~= 2 then bad_arg(op, "two dims", dims) end
  local a, b = dim_of(op, x, dims[1]), dim_of(op, x, dims[2])
  if a == b then raise(op .. ": the two dims must differ, got " .. a .. " twice") end
  k = k % 4
  if k == 1 then return methods.flip(x, { b }):transpose(a, b) end
  if k == 2 then return methods.flip(x, { a, b }) end
  if k == 3 then return methods.flip(x, { a }):transpose(a, b) end
  return x:clone()
end
dl.fliplr, dl.flipud, dl.rot90 = methods.fliplr, methods.flipud, methods.rot90

-- x:unfold(dim, size, step): the windows of `size` elements every `step` along dim, as a
-- new last dim (dim becomes the window count), as PyTorch's Tensor.unfold (a copy here,
-- not a view: the windows overlap).
function methods.unfold(x, dim, size, step)
  local op = "unfold"
  check(op, x)
  local d = x:dim() == 0 and 1 or dim_of(op, x, dim)
  for _, v in ipairs({ size, step }) do
    if not core.integer(v) or v < 1 then raise(op .. ": size and step must be integers >= 1") end
  end
  local n = x:dim() == 0 and 1 or x:size(d)
  if size > n then raise(op .. ": a window of " .. size .. " is longer than dim " .. d .. " (" .. n .. ")") end
  local count = floor((n - size) / step) + 1
  local o = { dtype = "int64", device = x.device }
  local idx = dl.arange(count, o):view(count, 1) * step + dl.arange(1, size + 1, o):view(1, size)
  local picked = x:index_select(d, idx:reshape(-1))
  local shape = x.shape
  shape[d] = count
  table.insert(shape, d + 1, size)
  local y = picked:reshape(shape)
  local order = {}
  for k = 1, #shape do if k ~= d + 1 then order[#order + 1] = k end end
  order[#order + 1] = d + 1
  return y:permute(order)
end
dl.unfold = methods.unfold

-- dl.tril_indices(rows, cols [, offset = 0]) and triu_indices: the (row, column) pairs of
-- the lower / upper triangle, row by row, as a (2, count) int64 tensor (1-based).
local function triangle_indices(op, rows, cols, offset, upper)
  for _, v in ipairs({ rows, cols, offset or 0 }) do
    if not core.integer(v) then raise(op .. ": expected integers, got " .. tostring(v)) end
  end
  if rows < 0 or cols < 0 then raise(op .. ": the sizes must be >= 0, got " .. rows .. " and " .. cols) end
  offset = offset or 0
  if rows == 0 or cols == 0 then return dl.zeros(2, 0, { dtype = "int64" }) end
  local o = { dtype = "int64" }
  local d = dl.arange(1, cols + 1, o):view(1, cols) - dl.arange(1, rows + 1, o):view(rows, 1)
  local keep = upper and d:ge(offset) or d:le(offset)
  return keep:nonzero():t():contiguous()   -- (row by row, as nonzero lists them)
end
function dl.tril_indices(rows, cols, offset) return triangle_indices("tril_indices", rows, cols, offset, false) end
function dl.triu_indices(rows, cols, offset) return triangle_indices("triu_indices", rows, cols, offset, true) end

-- ---- pieces along a dim: lists of views ----------------------------------------------------
-- As PyTorch's (dim 1 by default). Each piece is a narrow or select view of x, so a
-- recurrence over x:unbind(1) costs no copy, and its backward adds each piece's gradient
-- into its part of x's (Note [Slice gradients added in place] in autograd/engine.cpp).

-- x:split(size [, dim]): pieces `size` long (the last shorter when size does not divide
-- the length); x:split({s1, s2, ...} [, dim]): pieces of those lengths, summing to it.
function methods.split(x, sizes, dim)
  local op = "split"
  check(op, x)
  dim = dim_of(op, x, dim == nil and 1 or dim)
  local n = x:size(dim)
  local out = {}
  if type(sizes) == "number" then
    if sizes ~= floor(sizes) or sizes < 0 then
      raise(op .. ": the size must be an integer >= 1, got " .. tostring(sizes))
    end
    if n == 0 then return { x } end
    if sizes == 0 then raise(op .. ": the size must be >= 1 for dimension " .. dim .. " of length " .. n) end
    for start = 1, n, sizes do out[#out + 1] = x:narrow(dim, start, math.min(sizes, n - start + 1)) end
    return out
  end
  if type(sizes) ~= "table" then bad_arg(op, "a size or a list of sizes", sizes) end
  local list, total = int_list(op, { unpack(sizes) }, "the sizes"), 0
  for _, k in ipairs(list) do
    if k < 0 then raise(op .. ": sizes must be >= 0, got " .. k) end
    total = total + k
  end
  if total ~= n then
    raise(op .. ": the sizes sum to " .. total .. ", but dimension " .. dim .. " has length " .. n)
  end
  local start = 1
  for i, k in ipairs(list) do
    out[i] = x:narrow(dim, start, k)
    start = start + k
  end
  return out
end
dl.split = methods.split

-- x:chunk(chunks [, dim]): at most `chunks` pieces of ceil(length / chunks) (fewer when
-- that covers the length sooner, as PyTorch's: 6 in 4 chunks is 2, 2, 2).
function methods.chunk(x, chunks, dim)
  local op = "chunk"
  check(op, x)
  if type(chunks) ~= "number" or chunks ~= floor(chunks) or chunks < 1 then
    raise(op .. ": the number of chunks must be an integer >= 1, got " .. tostring(chunks))
  end
  dim = dim_of(op, x, dim == nil and 1 or dim)
  local n = x:size(dim)
  if n == 0 then
    local out = {}
    for i = 1, chunks do out[i] = x end
    return out
  end
  return methods.split(x, math.ceil(n / chunks), dim)
end
dl.chunk = methods.chunk

-- x:unbind([dim]): the slices along dim, each without it (x:select(dim, i) for every i).
function methods.unbind(x, dim)
  local op = "unbind"
  check(op, x)
  dim = dim_of(op, x, dim == nil and 1 or dim)
  local out = {}
  for i = 1, x:size(dim) do out[i] = x:select(dim, i) end
  return out
end
dl.unbind = methods.unbind


-- dl.vander(x [, N = #x [, increasing = false]]): the n x N matrix of the powers of the
-- 1-D x, x^(N-1) ... x^0 in each row (x^0 ... x^(N-1) with increasing), as torch.vander:
-- a running product, so that its gradient at x = 0 is exact.
function dl.vander(x, N, increasing)
  local op = "vander"
  check(op, x)
  if x:dim() ~= 1 then raise(op .. ": expected a 1-D tensor, got " .. x:dim() .. " dims") end
  local n = x:size(1)
  if N == nil then N = n end
  if type(N) ~= "number" or N ~= floor(N) or N < 0 then bad_arg(op, "N (an integer >= 0)", N) end
  if increasing ~= nil and type(increasing) ~= "boolean" then bad_arg(op, "increasing (a boolean)", increasing) end
  if not x:is_floating_point() then x = x:to("int64") end   -- (integers as int64, as PyTorch's)
  if N == 0 then return dl.zeros({ n, 0 }, { dtype = x.dtype, device = x.device }) end
  local ones = dl.ones({ n, 1 }, { dtype = x.dtype, device = x.device })
  local powers = N == 1 and ones or dl.cat({ ones, x:view(n, 1):expand(n, N - 1) }, 2):cumprod(2)
  if increasing then return powers end
  return powers:flip({ 2 })
end

return dl
