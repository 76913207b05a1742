-- dlua.indexed: writing into a tensor at indices along a dim, as PyTorch's (methods and
-- dl.* functions, loaded when first used; dims and indices 1-based):
--
--   x:index_add(dim, idx, src [, alpha])  x with src's slices added at idx along dim
--   x:index_copy(dim, idx, src)           x with src's slices put at idx
--   x:index_fill(dim, idx, v)             x with the slices at idx filled with v
--   x:scatter(dim, idx, src or v)         x with src[i][j] put at (idx[i][j], j) (dim 1;
--                                         likewise for others), scatter_add without the sum
--
-- each also in place (x:index_add_ ...). They are made of scatter_add and where, so
-- gradients (for x and src) follow. Where an index repeats, index_add adds every slice
-- (as PyTorch's); index_copy and scatter add the values that land together, where
-- PyTorch keeps one of them (which one unspecified): give those distinct indices.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, shape_str, methods, dl = T.is_tensor, T.shape_str, T.methods, T.dl
local type = type

local check = T.check_tensor   -- (op, x): an error naming op unless x is a tensor

local function dim_of(op, x, d) return core.positive_dim(op, d, x:dim()) end

-- A 1-D integer index tensor (a Lua list becomes one, on x's device).
local function index_list(op, idx, x)
  if type(idx) == "table" and not is_tensor(idx) then idx = dl.tensor(idx, { dtype = "int64", device = x.device }) end
  check(op, idx)
  if idx:is_floating_point() or idx.dtype == "bool" then
    raise(op .. ": expected an integer index tensor, got " .. idx.dtype)
  end
  if idx:dim() ~= 1 then raise(op .. ": expected a 1-D index, got shape " .. shape_str(idx.shape)) end
  return idx
end

-- idx (k) viewed along dim d of an n-dim tensor and expanded to `shape`.
local function along(idx, d, n, shape)
  local view = {}
  for k = 1, n do view[k] = k == d and idx:numel() or 1 end
  return idx:view(view):expand(shape)
end

-- src checked against x: x's shape but for dim d, which is idx's length.
local function check_src(op, x, d, idx, src)
  check(op, src)
  local ok = src:dim() == x:dim() and src:size(d) == idx:numel()
  for k = 1, x:dim() do
    if k ~= d and ok then ok = src:size(k) == x:size(k) end
  end
  if not ok then
    raise(op .. ": expected a source of shape " .. shape_str(x.shape) .. " with " .. idx:numel() .. " along dim " .. d
          .. ", got " .. shape_str(src.shape))
  end
end

-- A bool tensor broadcast against x: true at the slices idx of dim d.
local function slices(x, d, idx)
  local hit = dl.zeros(x:size(d), { device = x.device }):scatter_add(1, idx, dl.ones(idx:numel(), { device = x.device }))
  local view = {}
  for k = 1, x:dim() do view[k] = k == d and x:size(d) or 1 end
  return hit:gt(0):view(view)
end

-- x checked, and its dim and index list for op (each index within the dim's size).
local function operands(op, x, dim, idx)
  check(op, x)
  local d = dim_of(op, x, dim)
  idx = index_list(op, idx, x)
  if idx:numel() > 0 and (idx:min():item() < 1 or idx:max():item() > x:size(d)) then
    raise(op .. ": an index is out of range for dimension " .. d .. " of size " .. x:size(d) .. " (indices are 1-based)")
  end
  return d, idx
end

function methods.index_add(x, dim, idx, src, alpha)
  local op = "index_add"
  local d
  d, idx = operands(op, x, dim, idx)
  check_src(op, x, d, idx, src)
  if src.dtype ~= x.dtype then raise(op .. ": expected a source of dtype " .. x.dtype .. " (x's), got " .. src.dtype) end
  if alpha ~= nil and alpha ~= 1 then src = src * alpha end
  return x:scatter_add(d, along(idx, d, x:dim(), src.shape), src)
end

function methods.index_copy(x, dim, idx, src)
  local op = "index_copy"
  local d
  d, idx = operands(op, x, dim, idx)
  check_src(op, x, d, idx, src)
  local placed = dl.zeros_like(x):scatter_add(d, along(idx, d, x:dim(), src.shape), src:to(x.dtype))
  return dl.where(slices(x, d, idx), placed, x)
end

function methods.index_fill(x, dim, idx, v)
  local op = "index_fill"
  local d
  d, idx = operands(op, x, dim, idx)
  if type(v) ~= "number" and type(v) ~= "boolean" and not (is_tensor(v) and v:numel() == 1) then
    bad_arg(op, "a number or a one-element tensor", v)
  end
  if is_tensor(v) then v = v:reshape({}):to(x.dtype) end
  return dl.where(slices(x, d, idx), v, x)
end

function methods.scatter(x, dim, idx, src)
  local op = "scatter"
  check(op, x)
  local d = dim_of(op, x, dim)
  check(op, idx)
  if idx:dim() ~= x:dim() then
    raise(op .. ": expected an index of " .. x:dim() .. " dims, got shape " .. shape_str(idx.shape))
  end
  local shape = idx.shape
  local hits = dl.zeros(x.shape, { device = x.device }):scatter_add(d, idx, dl.ones(shape, { device = x.device }))
  if type(src) == "number" or type(src) == "boolean" then
    -- (a value written twice is still the value; in x's dtype, as PyTorch's value=, made
    -- so before the selection, which would otherwise promote x's untouched elements)
    local v = dl.full({}, type(src) == "boolean" and (src and 1 or 0) or src, { dtype = x.dtype, device = x.device })
    return dl.where(hits:gt(0), v, x)
  else
    check(op, src)
    for k = 1, idx:dim() do   -- (only the part of src that idx covers is read)
      if src:size(k) < shape[k] then
        raise(op .. ": the source of shape " .. shape_str(src.shape) .. " is smaller than the index of shape "
              .. shape_str(shape))
      end
      src = src:narrow(k, 1, shape[k])
    end
  end
  src = src:to(x.dtype)
  if hits:numel() > 0 and hits:amax():item() > 1 then
    -- Several writes to one place: the last along dim d stands, as PyTorch's loop leaves
    -- it (summing them gave 2 v for a value written twice). A stable sort of the index
    -- puts each place's writes together in order; the last of each run is kept.
    local n = idx:size(d)
    local sorted, perm = idx:sort(d)
    local last = sorted:narrow(d, 1, n - 1):ne(sorted:narrow(d, 2, n - 1))
    local tail = last.shape
    tail[d] = 1
    last = dl.cat({ last, dl.ones(tail, { dtype = "bool", device = x.device }) }, d):to("int64")
    local keep = dl.zeros(shape, { dtype = "int64", device = x.device }):scatter_add(d, perm, last)   -- (perm: no repeats)
    src = dl.where(keep:gt(0), src, 0)
  end
  local placed = dl.zeros_like(x):scatter_add(d, idx, src)
  return dl.where(hits:gt(0), placed, x)
end

-- The in-place forms: the result copied into x (recorded for gradients as a copy).
for _, name in ipairs({ "index_add", "index_copy", "index_fill", "scatter" }) do
  local f = methods[name]
  methods[name .. "_"] = function(x, ...)
    local y = f(x, ...)
    if y.dtype ~= x.dtype then
      raise(name .. "_: result dtype " .. y.dtype .. " cannot be stored in the in-place target of dtype " .. x.dtype)
    end
    return x:copy_(y)
  end
  dl[name] = f
end

return {}
