-- dlua.shaping: broadcasting, splitting and placing along diagonals, as PyTorch's
-- (functions of dl and methods, loaded when first used; dims 1-based):
--
--   dl.broadcast_shapes(s1, s2, ...)    the shape the shapes broadcast to
--   dl.broadcast_to(x, shape)           x expanded to shape (-1 keeps a dim)
--   dl.broadcast_tensors(t1, t2, ...)   the tensors expanded to their common shape, returned
--                                       as values (as dl.meshgrid's)
--   dl.take_along_dim(x, idx [, dim])   gather with idx broadcast against x off dim (on
--                                       the flattened x without dim); idx 1-based
--   dl.tensor_split(x, n | {i1, i2, ...} [, dim = 1])   n parts (the first size % n one
--                                       longer), or parts split where i1, i2 ... elements
--                                       of dim have passed (PyTorch's boundaries); n a
--                                       0-dim, the points a 1-D integer tensor too
--   dl.atleast_1d(x), atleast_2d, atleast_3d   (PyTorch's placement of the new dims)
--   dl.hstack(list), vstack, dstack, column_stack   the tensors joined along dim 2 (1 for
--                                       1-D), 1, 3; column_stack's 1-D ones as columns
--   dl.diag_embed(x [, offset = 0 [, dim1 = -2 [, dim2 = -1]]])   each last-dim vector
--                                       on a diagonal of a new square pair of dims
--   dl.diagflat(x [, offset])           x flattened onto a diagonal
--   x:unflatten(dim, sizes)             dim split into sizes (one may be -1)
--   dl.hsplit(x, n | {i1, ...}), vsplit, dsplit   tensor_split along dim 2 (1 for 1-D), 1,
--                                       3; n must divide the dim
--   x:split_with_sizes(sizes [, dim = 1])   split into pieces of those lengths (summing to dim's)
--   x:sum_to_size(sizes | s1, s2, ...)  x summed to a shape that expands to x's
--   x:fill_diagonal_(v [, wrap = false])   v on the main diagonal (all dims equal past 2),
--                                       in a tall matrix again every cols + 1 rows with wrap
--
-- Made of expand, gather, narrow, index_add and reshape: differentiable.
--
-- And the view changes in place, PyTorch's: x:t_(), x:transpose_(a, b) (swapaxes_,
-- swapdims_), x:squeeze_([dim]), x:unsqueeze_(dim), x:resize_(sizes), x:resize_as_(y) and
-- x:set_(y). Note [Views changed in place].
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, methods, dl, shape_str = T.is_tensor, T.methods, T.dl, T.shape_str
local check = T.check_tensor
local type, tostring, ipairs, select, floor = type, tostring, ipairs, select, math.floor

local function shape_list(op, s)
  if is_tensor(s) then return s.shape end
  if type(s) ~= "table" then bad_arg(op, "a shape (a list of sizes)", s) end
  for _, n in ipairs(s) do
    if not core.integer(n) then raise(op .. ": a shape's sizes must be integers, got " .. tostring(n)) end
  end
  return s
end

-- The broadcast of a list of shapes (lists of sizes), or an error naming op.
local function broadcast(op, shapes)
  local nd = 0
  for _, s in ipairs(shapes) do nd = math.max(nd, #s) end
  local out = {}
  for i = 1, nd do
    local size = 1
    for _, s in ipairs(shapes) do
      local n = s[#s - nd + i] or 1
      if n ~= 1 then
        if size ~= 1 and size ~= n then
          local parts = {}
          for j, t in ipairs(shapes) do parts[j] = shape_str(t) end
          raise(op .. ": shapes " .. table.concat(parts, ", ") .. " do not broadcast (dim " .. i .. ")")
        end
        size = n
      end
    end
    out[i] = size
  end
  return out
end

function dl.broadcast_shapes(...)
  local shapes = {}
  for i = 1, select("#", ...) do shapes[i] = shape_list("broadcast_shapes", (select(i, ...))) end
  return broadcast("broadcast_shapes", shapes)
end

function dl.broadcast_to(x, shape)
  local op = "broadcast_to"
  check(op, x)
  shape = shape_list(op, shape)
  if #shape < x:dim() then
    raise(op .. ": cannot broadcast shape " .. shape_str(x.shape) .. " to fewer dims " .. shape_str(shape))
  end
  local want, lead = {}, #shape - x:dim()
  for i, n in ipairs(shape) do
    local have = i > lead and x:size(i - lead) or 1
    want[i] = n == -1 and have or n
    if n == -1 and i <= lead then raise(op .. ": -1 cannot size a new dim (dim " .. i .. ")") end
    if have ~= 1 and have ~= want[i] then
      raise(op .. ": cannot broadcast shape " .. shape_str(x.shape) .. " to " .. shape_str(shape))
    end
  end
  return x:expand(want)
end
methods.broadcast_to = dl.broadcast_to

function dl.broadcast_tensors(...)
  local ts, shapes = { ... }, {}
  for i = 1, select("#", ...) do
    check("broadcast_tensors", ts[i])
    shapes[i] = ts[i].shape
  end
  local shape = broadcast("broadcast_tensors", shapes)
  local out = {}
  for i, t in ipairs(ts) do out[i] = t:expand(shape) end
  return unpack(out)
end

function dl.take_along_dim(x, idx, dim)
  local op = "take_along_dim"
  check(op, x)
  check(op, idx)
  if idx.dtype ~= "int64" and idx.dtype ~= "int32" then raise(op .. ": expected int64 indices, got " .. idx.dtype) end
  if dim == nil then return x:reshape(-1):gather(1, idx:reshape(-1):long()) end
  local d = core.positive_dim(op, dim, x:dim())
  if idx:dim() ~= x:dim() then
    raise(op .. ": indices of " .. idx:dim() .. " dims for an input of " .. x:dim() .. " (shapes "
          .. shape_str(idx.shape) .. " and " .. shape_str(x.shape) .. ")")
  end
  local xs, is = x.shape, idx.shape
  local n = xs[d]
  xs[d], is[d] = 1, 1
  local common = broadcast(op, { xs, is })
  local xe, ie = {}, {}
  for i, size in ipairs(common) do xe[i], ie[i] = size, size end
  xe[d], ie[d] = n, idx:size(d)
  return x:expand(xe):gather(d, idx:long():expand(ie))
end
methods.take_along_dim = dl.take_along_dim

function dl.tensor_split(x, parts, dim)
  local op = "tensor_split"
  check(op, x)
  if x:dim() == 0 then raise(op .. ": expected a tensor of at least 1 dim, got a 0-dim one") end
  local d = core.positive_dim(op, dim == nil and 1 or dim, x:dim())
  local n = x:size(d)
  local bounds = {}
  if is_tensor(parts) then   -- (PyTorch's tensor_indices_or_sections)
    if (parts.dtype ~= "int64" and parts.dtype ~= "int32") or parts:dim() > 1 then
      raise(op .. ": a tensor of sections or split points must be a 0-dim or 1-D integer tensor, got "
            .. parts.dtype .. " of shape " .. shape_str(parts.shape))
    end
    parts = parts:dim() == 0 and parts:item() or parts:totable()
  end
  if type(parts) == "number" then
    if not core.integer(parts) or parts < 1 then raise(op .. ": sections must be an integer >= 1, got " .. tostring(parts)) end
    local base, extra = floor(n / parts), n % parts
    local at = 0
    for i = 1, parts - 1 do
      at = at + base + (i <= extra and 1 or 0)
      bounds[i] = at
    end
  elseif type(parts) == "table" and not is_tensor(parts) then
    for i, b in ipairs(parts) do
      if not core.integer(b) then raise(op .. ": split points must be integers, got " .. tostring(b)) end
      bounds[i] = b
    end
  else
    bad_arg(op, "a number of sections or a list of split points (or a tensor of them)", parts)
  end
  local out, prev = {}, 0
  bounds[#bounds + 1] = n
  for i, b in ipairs(bounds) do   -- part i is x[prev:b] as a Python slice
    if b < 0 then b = math.max(0, n + b) end   -- (a negative point counts from the end)
    b = math.min(b, n)
    out[i] = x:narrow(d, prev + 1, math.max(b, prev) - prev)
    prev = b
  end
  return out
end
methods.tensor_split = dl.tensor_split

-- tensor_split along a fixed dim, as numpy's: a number of sections must divide it.
local function split_along(op, min_dims, dim_of)
  return function(x, parts)
    check(op, x)
    if x:dim() < min_dims then
      raise(op .. ": expected a tensor of at least " .. min_dims .. " dims, got shape " .. shape_str(x.shape))
    end
    local d = dim_of(x)
    if type(parts) == "number" then
      if not core.integer(parts) or parts < 1 then
        raise(op .. ": the number of sections must be an integer >= 1, got " .. tostring(parts))
      end
      if x:size(d) % parts ~= 0 then
        raise(op .. ": dim " .. d .. " of size " .. x:size(d) .. " does not divide into " .. parts .. " equal sections")
      end
    end
    return dl.tensor_split(x, parts, d)
  end
end
dl.hsplit = split_along("hsplit", 1, function(x) return x:dim() == 1 and 1 or 2 end)
dl.vsplit = split_along("vsplit", 2, function() return 1 end)
dl.dsplit = split_along("dsplit", 3, function() return 3 end)
methods.hsplit, methods.vsplit, methods.dsplit = dl.hsplit, dl.vsplit, dl.dsplit

function methods.split_with_sizes(x, sizes, dim)
  local op = "split_with_sizes"
  check(op, x)
  if type(sizes) ~= "table" then bad_arg(op, "a list of sizes", sizes) end
  local d = core.positive_dim(op, dim == nil and 1 or dim, x:dim())
  local total = 0
  for _, k in ipairs(sizes) do
    if not core.integer(k) or k < 0 then raise(op .. ": sizes must be integers >= 0, got " .. tostring(k)) end
    total = total + k
  end
  if total ~= x:size(d) then
    raise(op .. ": the sizes " .. shape_str(sizes) .. " sum to " .. total .. ", but dim " .. d .. " has size "
          .. x:size(d))
  end
  return x:split(sizes, d)
end

function dl.atleast_1d(x)
  check("atleast_1d", x)
  return x:dim() == 0 and x:reshape(1) or x
end
function dl.atleast_2d(x)
  check("atleast_2d", x)
  if x:dim() == 0 then return x:reshape(1, 1) end
  if x:dim() == 1 then return x:unsqueeze(1) end
  return x
end
function dl.atleast_3d(x)
  check("atleast_3d", x)
  if x:dim() == 0 then return x:reshape(1, 1, 1) end
  if x:dim() == 1 then return x:reshape(1, x:size(1), 1) end
  if x:dim() == 2 then return x:unsqueeze(3) end
  return x
end
methods.atleast_1d, methods.atleast_2d, methods.atleast_3d = dl.atleast_1d, dl.atleast_2d, dl.atleast_3d

-- The tensors of a list through `lift` (atleast_1d ...), checked: at least one.
local function lifted(op, list, lift)
  if type(list) ~= "table" or is_tensor(list) then bad_arg(op, "a list of tensors", list) end
  if #list == 0 then raise(op .. ": expected a non-empty list of tensors") end
  local out = {}
  for i, t in ipairs(list) do
    if not is_tensor(t) then bad_arg(op, "a list of tensors (item " .. i .. ")", t) end
    out[i] = lift(t)
  end
  return out
end

-- PyTorch's rules: hstack joins along dim 1 when the first is 1-D (or 0-D), else along
-- dim 2; vstack along dim 1 of at least 2-D, dstack along dim 3 of at least 3-D;
-- column_stack makes 0-D and 1-D tensors columns, then hstacks.
function dl.hstack(list)
  local ts = lifted("hstack", list, dl.atleast_1d)
  return dl.cat(ts, ts[1]:dim() == 1 and 1 or 2)
end
function dl.vstack(list) return dl.cat(lifted("vstack", list, dl.atleast_2d), 1) end
dl.row_stack = dl.vstack   -- (PyTorch's alias)
function dl.dstack(list) return dl.cat(lifted("dstack", list, dl.atleast_3d), 3) end
function dl.column_stack(list)
  return dl.hstack(lifted("column_stack", list, function(t)
    return t:dim() <= 1 and t:reshape(t:numel(), 1) or t
  end))
end

function dl.diag_embed(x, offset, dim1, dim2)
  local op = "diag_embed"
  check(op, x)
  offset = offset or 0
  if not core.integer(offset) then raise(op .. ": offset must be an integer, got " .. tostring(offset)) end
  if x:dim() == 0 then raise(op .. ": expected a tensor of at least 1 dim, got a 0-dim one") end
  local nd = x:dim() + 1
  local d1 = core.positive_dim(op, dim1 == nil and -2 or dim1, nd)
  local d2 = core.positive_dim(op, dim2 == nil and -1 or dim2, nd)
  if d1 == d2 then raise(op .. ": dim1 and dim2 must differ, got " .. d1 .. " twice") end
  local n = x:size(x:dim())
  local m = n + math.abs(offset)
  -- element i of the last dim goes to (i + max(0, -offset), i + max(0, offset)) of m x m
  local r0, c0 = math.max(0, -offset), math.max(0, offset)
  local flat = dl.arange(n, { dtype = "int64", device = x.device }) * (m + 1) + (r0 * m + c0 + 1)
  local shape = x.shape
  shape[#shape] = m * m
  local y = dl.zeros(shape, { dtype = x.dtype, device = x.device }):index_add(x:dim(), flat, x)
  shape[#shape] = m
  shape[#shape + 1] = m
  y = y:reshape(shape)   -- (..., m, m): the pair as dims nd - 1 and nd
  if d1 == nd - 1 and d2 == nd then return y end
  -- move the pair to (d1, d2)
  local order, rest = {}, {}
  for i = 1, nd - 2 do rest[#rest + 1] = i end
  local k = 1
  for i = 1, nd do
    if i == d1 then order[i] = nd - 1
    elseif i == d2 then order[i] = nd
    else order[i] = rest[k]; k = k + 1 end
  end
  return y:permute(order)
end
methods.diag_embed = dl.diag_embed

function dl.diagflat(x, offset)
  check("diagflat", x)
  return dl.diag_embed(x:reshape(-1), offset)
end
methods.diagflat = dl.diagflat

function methods.unflatten(x, dim, sizes)
  local op = "unflatten"
  check(op, x)
  local d = core.positive_dim(op, dim, x:dim())
  if type(sizes) ~= "table" or #sizes == 0 then bad_arg(op, "a list of sizes", sizes) end
  local shape = {}
  for i = 1, d - 1 do shape[#shape + 1] = x:size(i) end
  local known, free = 1, nil
  for i, n in ipairs(sizes) do
    if not core.integer(n) or (n < 0 and n ~= -1) then raise(op .. ": sizes must be integers >= 0 or -1, got " .. tostring(n)) end
    if n == -1 then
      if free then raise(op .. ": only one size may be -1") end
      free = i
    else
      known = known * n
    end
    shape[#shape + 1] = n
  end
  local len = x:size(d)
  if free then
    if known == 0 or len % known ~= 0 then
      raise(op .. ": sizes " .. shape_str(sizes) .. " do not divide dim " .. d .. " of size " .. len)
    end
    shape[d - 1 + free] = len / known
  elseif known ~= len then
    raise(op .. ": sizes " .. shape_str(sizes) .. " do not make dim " .. d .. " of size " .. len)
  end
  for i = d + 1, x:dim() do shape[#shape + 1] = x:size(i) end
  return x:reshape(shape)
end
dl.unflatten = methods.unflatten

-- Note [Views changed in place]
-- x:t_() makes x itself its transpose: the handle x's value names is rebound to the
-- view (dl_set_, bindings/handles.h's handle_replace), so every Lua value of x, in any
-- table or closure, sees it, as every Python name of a PyTorch tensor does. The view
-- keeps x's storage and, inside a gradient, its history (the view's own derivative
-- follows), so x:t_() on a recorded value is differentiable. As PyTorch's for a leaf
-- that requires a gradient, a trainable Variable refuses: its optimizer's state and its
-- gradient have its shape (a frozen one may change). resize_ keeps the elements in x's
-- order: shrinking a contiguous x is a view of its start (the storage shared, as
-- PyTorch's); growing copies into new storage whose new elements are 0 (PyTorch's are
-- uninitialised), and refuses a value with a gradient history (as PyTorch's "cannot
-- resize variables that require grad").
local C = core.C
local function rebind(op, x, v)
  if x.trainable then
    raise(op .. ": a Variable that requires a gradient cannot change its view in place (its optimizer "
          .. "state and gradient have its shape); use the result of " .. op:sub(1, -2) .. " instead")
  end
  if C.dl_set_(T.hid(x), T.hid(v)) ~= 0 then core.raise_last() end
  return x
end

function methods.t_(x)
  check("t_", x)
  return rebind("t_", x, x:t())
end
function methods.transpose_(x, a, b)
  check("transpose_", x)
  return rebind("transpose_", x, x:transpose(a, b))
end
methods.swapaxes_, methods.swapdims_ = methods.transpose_, methods.transpose_
function methods.squeeze_(x, d)
  check("squeeze_", x)
  return rebind("squeeze_", x, x:squeeze(d))
end
function methods.unsqueeze_(x, d)
  check("unsqueeze_", x)
  return rebind("unsqueeze_", x, x:unsqueeze(d))
end

-- x:set_(y): x becomes y's view of y's storage (y's dtype, device, shape and strides);
-- a write through either shows in both.
function methods.set_(x, y)
  check("set_", x)
  check("set_", y)
  return rebind("set_", x, y)
end

local function numel_of(sizes)
  local n = 1
  for _, s in ipairs(sizes) do n = n * s end
  return n
end
function methods.resize_(x, ...)
  check("resize_", x)
  local first = ...
  local sizes = type(first) == "table" and shape_list("resize_", first) or { ... }
  for _, s in ipairs(sizes) do
    if not core.integer(s) or s < 0 then
      raise("resize_: sizes must be whole numbers >= 0, got " .. shape_str(sizes))
    end
  end
  local n, have = numel_of(sizes), x:numel()
  local v
  if n <= have and x:is_contiguous() then
    v = x:reshape(-1):narrow(1, 1, n):view(sizes)
  else
    if x:requires_grad() then
      raise("resize_: x has a gradient history; a resize that copies cannot be differentiated")
    end
    v = dl.zeros(sizes, { dtype = x.dtype, device = x.device })
    local k = math.min(n, have)
    if k > 0 then v:view(-1):narrow(1, 1, k):copy_(x:reshape(-1):narrow(1, 1, k)) end
  end
  return rebind("resize_", x, v)
end
function methods.resize_as_(x, y)
  check("resize_as_", x)
  check("resize_as_", y)
  return methods.resize_(x, y.shape)
end

function methods.sum_to_size(x, ...)
  local op = "sum_to_size"
  check(op, x)
  local first = ...
  local sizes = shape_list(op, (type(first) == "table" or is_tensor(first)) and first or { ... })
  local n, nd = #sizes, x:dim()
  local ok = n <= nd
  for i = 1, n do
    local want = sizes[i]
    ok = ok and (want == x:size(nd - n + i) or want == 1)
  end
  if not ok then
    raise(op .. ": size " .. shape_str(sizes) .. " is not expandable to size " .. shape_str(x.shape))
  end
  local dims = {}
  for d = 1, nd - n do dims[#dims + 1] = d end
  for i = 1, n do
    if sizes[i] == 1 and x:size(nd - n + i) ~= 1 then dims[#dims + 1] = nd - n + i end
  end
  if #dims == 0 then return x end
  return x:sum(dims, true):reshape(sizes)
end

-- The positions (i, i, ...); with wrap, in a matrix of more rows than columns + 1,
-- also each (i, j) with i - j a positive multiple of cols + 1 (PyTorch's restart of the
-- diagonal in the flat row-major order).
function methods.fill_diagonal_(x, v, wrap)
  local op = "fill_diagonal_"
  check(op, x)
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then bad_arg(op, "a number for the fill value", v) end
  if wrap ~= nil and type(wrap) ~= "boolean" then bad_arg(op, "a boolean for wrap", wrap) end
  local nd = x:dim()
  if nd < 2 then raise(op .. ": expected a tensor of at least 2 dims, got shape " .. shape_str(x.shape)) end
  if nd > 2 then
    for d = 2, nd do
      if x:size(d) ~= x:size(1) then raise(op .. ": all dims must be of equal length past 2 dims, got shape "
                                           .. shape_str(x.shape)) end
    end
  end
  local o = { dtype = "int64", device = x.device }
  local function index(d)
    local s = {}
    for k = 1, nd do s[k] = 1 end
    s[d] = x:size(d)
    return dl.arange(x:size(d), o):view(s)
  end
  local i, mask = index(1), nil
  for d = 2, nd do
    local same = i:eq(index(d))
    mask = mask and mask:logical_and(same) or same
  end
  if wrap and nd == 2 then
    local gap = i - index(2)
    mask = mask:logical_or(gap:ge(0):logical_and((gap % (x:size(2) + 1)):eq(0)))
  end
  return require("dlua.pointwise").into(op, x, function(t) return t:masked_fill(mask, v) end)
end

return {}
