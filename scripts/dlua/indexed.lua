-- dlua.indexed: writing into a tensor at indices along a dim, as PyTorch's (methods and
-- dl.* functions, loaded when first used; dims and indices 1-based):
--
--   x:index_add(dim, idx, src [, alpha])  x with src's slices added at idx along dim
--   x:index_copy(dim, idx, src)           x with src's slices put at idx
--   x:index_fill(dim, idx, v)             x with the slices at idx filled with v
--   x:scatter(dim, idx, src or v [, reduce])   x with src[i][j] put at (idx[i][j], j) (dim 1;
--                                         likewise for others), scatter_add without the sum;
--                                         reduce "add" or "multiply" combines them with x's
--   x:scatter_add(dim, idx, src)          (the engine's) also as dl.scatter_add, x:scatter_add_
--   x:scatter_reduce(dim, idx, src, reduce [, {include_self = true}])   src's values
--                                         combined into x at those places by sum, prod,
--                                         mean, amax or amin
--   x:index_put(indices, values [, accumulate])   x[i1, i2, ...] = values for a list of
--                                         index tensors (or bool masks) over x's leading dims
--   x:put(idx, src [, accumulate])        the same for flat (row-major) indices
--   x:masked_scatter(mask, src)           src's leading values placed where mask is true
--   dl.take(x, idx)                       x's elements at flat indices, in idx's shape
--
-- each writer also in place (x:index_add_ ...). They are made of scatter_add and where,
-- so gradients (for x and src) follow. Where an index repeats, index_add, scatter_add
-- and an accumulating index_put or put add every value (as PyTorch's); scatter,
-- index_copy, index_put and put keep the last write along the dim (PyTorch's CPU loop)
-- and give every write the place's gradient. Indices are 1-based; take, put and
-- index_put also take negative ones (-1 the last).
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, shape_str, methods, dl = T.is_tensor, T.shape_str, T.methods, T.dl
local type, unpack, pcall = type, unpack, pcall

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
  -- (scatter's: of slices copied to one place the last stands, and each gets its gradient)
  return methods.scatter(x, d, along(idx, d, x:dim(), src.shape), src:to(x.dtype))
end

function methods.index_fill(x, dim, idx, v)
  local op = "index_fill"
  local d
  d, idx = operands(op, x, dim, idx)
  if type(v) ~= "number" and type(v) ~= "boolean" and not (is_tensor(v) and v:numel() == 1) then
    bad_arg(op, "a number or a one-element tensor", v)
  end
  -- The value in x's dtype (uint8's 2.5 is 2, -1 is 255; 300 is refused), as PyTorch's.
  if is_tensor(v) then
    v = v:reshape({}):to(x.dtype)
  else
    if type(v) == "boolean" then v = v and 1 or 0 end
    T.check_fits(op, v, core.dtype_codes[x.dtype])
    v = dl.full({}, v, { dtype = x.dtype, device = x.device })
  end
  return dl.where(slices(x, d, idx), v, x)
end

-- The part of src that idx covers (only that part is read).
local function covered(op, idx, src)
  check(op, src)
  if src:dim() ~= idx:dim() then
    raise(op .. ": expected a source of " .. idx:dim() .. " dims (the index's), got shape " .. shape_str(src.shape))
  end
  for k = 1, idx:dim() do
    if src:size(k) < idx:size(k) then
      raise(op .. ": the source of shape " .. shape_str(src.shape) .. " is smaller than the index of shape "
            .. shape_str(idx.shape))
    end
    src = src:narrow(k, 1, idx:size(k))
  end
  return src
end

-- For each write of idx (scattering along dim d), its rank among the writes to the
-- same place: 1 for the first along d, 2 for the second ... (int64, idx's shape): a
-- stable sort puts each place's writes together, in order.
local function write_ranks(idx, d)
  local sorted, perm = idx:sort(d)
  return dl.zeros(idx.shape, { dtype = "int64", device = idx.device })
    :scatter_add(d, perm, require("dlua.sorting").run_offsets(sorted, d) + 1)
end

-- Where values are placed by adding them to a blank: -0, not 0, which is the sum's
-- identity for every value (0 + -0 is +0: a -0 placed on zeros lost its sign).
local function blank(x) return dl.full_like(x, -0.0) end

-- idx checked as the index of a scatter along dim d of x: an integer tensor of x's dims,
-- no larger than x but along d.
local function scatter_index(op, x, d, idx)
  check(op, idx)
  if idx:is_floating_point() or idx.dtype == "bool" then
    raise(op .. ": expected an integer index tensor, got " .. idx.dtype)
  end
  if idx:dim() ~= x:dim() then
    raise(op .. ": expected an index of " .. x:dim() .. " dims, got shape " .. shape_str(idx.shape))
  end
  for k = 1, x:dim() do
    if k ~= d and idx:size(k) > x:size(k) then
      raise(op .. ": the index of shape " .. shape_str(idx.shape) .. " is larger than the input of shape "
            .. shape_str(x.shape) .. " in dim " .. k)
    end
  end
end

-- f(...) for scatter, whose range check is the engine's scatter_add's: its error named op.
local function as_scatter(op, f, ...)
  local ok, r = pcall(f, ...)
  if not ok then error((tostring(r):gsub("scatter_add:", op .. ":", 1)), 0) end
  return r
end

-- scatter's reduce: PyTorch's names for scatter_reduce's sum and prod.
local SCATTER_REDUCE = { add = "sum", multiply = "prod" }

-- x:scatter(dim, idx, src or v [, reduce | {reduce =}]): without reduce, each write
-- replaces; with "add" or "multiply", the writes are combined with x's value there.
function methods.scatter(x, dim, idx, src, reduce)
  local op = "scatter"
  check(op, x)
  local d = dim_of(op, x, dim)
  scatter_index(op, x, d, idx)
  if type(reduce) == "table" and not is_tensor(reduce) then
    reduce = core.options(op, reduce, { reduce = true }).reduce
  end
  if reduce ~= nil then
    local how = SCATTER_REDUCE[reduce]
    if how == nil then raise(op .. ": reduce must be \"add\" or \"multiply\", got " .. tostring(reduce)) end
    if type(src) == "number" or type(src) == "boolean" then
      local v = type(src) == "boolean" and (src and 1 or 0) or src
      src = dl.full(idx.shape, v, { dtype = x.dtype, device = x.device })
    else
      src = covered(op, idx, src):to(x.dtype)
    end
    return as_scatter(op, methods.scatter_reduce, x, d, idx, src, how)
  end
  local shape = idx.shape
  local hits = as_scatter(op, methods.scatter_add, dl.zeros(x.shape, { device = x.device }), d, idx,
                          dl.ones(shape, { device = x.device }))
  if type(src) == "number" or type(src) == "boolean" then
    -- (a value written twice is still the value; in x's dtype, as PyTorch's value=, made
    -- so before the selection, which would otherwise promote x's untouched elements)
    local v = dl.full({}, type(src) == "boolean" and (src and 1 or 0) or src, { dtype = x.dtype, device = x.device })
    return dl.where(hits:gt(0), v, x)
  end
  src = covered(op, idx, src):to(x.dtype)
  if hits:numel() > 0 and hits:amax():item() > 1 then
    -- Several writes to one place: the last along dim d stands, as PyTorch's loop leaves
    -- it (summing them gave 2 v for a value written twice), and every write of a place
    -- gets that place's gradient, as PyTorch's (src's gradient is the result's gathered).
    local last = write_ranks(idx, d):eq(hits:gather(d, idx):to("int64"))
    local hit = hits:gt(0)
    return dl.custom_gradient(function(a, b)
      local nothing = dl.full({}, -0.0, { dtype = b.dtype, device = b.device })   -- (b's dtype kept)
      return dl.where(hit, blank(a):scatter_add(d, idx, dl.where(last, b, nothing)), a),
             function(g) return { dl.where(hit, 0, g), g:gather(d, idx) } end
    end)(x, src)
  end
  local placed = blank(x):scatter_add(d, idx, src)
  return dl.where(hits:gt(0), placed, x)
end

-- prod, amax and amin of scatter_reduce: the writes combined round by round (round k takes
-- every place's k-th write, at most one per place), in PyTorch's order.
-- amax's and amin's combination of a place's value so far (a) and the next write (b):
-- a NaN from either, and a kept on a tie (0 against -0), as PyTorch's loop keeps it.
local function keep_unless(better)
  return function(a, b) return dl.where(better(b, a):logical_or(b:ne(b)), b, a) end
end
local PICK = { amax = keep_unless(dl.gt), amin = keep_unless(dl.lt), prod = dl.mul }

local function scatter_rounds(x, d, idx, src, reduce, include_self)
  local ranks = write_ranks(idx, d)
  local rounds = ranks:amax():item()
  local pick = PICK[reduce]
  local nothing = dl.full({}, -0.0, { dtype = src.dtype, device = src.device })   -- (src's dtype kept)
  local result = x
  for k = 1, rounds do
    local mine = ranks:eq(k)
    local placed = blank(x):scatter_add(d, idx, dl.where(mine, src, nothing))
    local hit = dl.zeros(x.shape, { device = x.device }):scatter_add(d, idx, mine:to("float32")):gt(0)
    result = dl.where(hit, (k == 1 and not include_self) and placed or pick(result, placed), result)
  end
  return result
end

local REDUCE = { sum = true, prod = true, mean = true, amax = true, amin = true }

-- x:scatter_reduce(dim, idx, src, reduce [, {include_self = true}]): as PyTorch's. The
-- places idx names (as scatter's) get x's value (unless include_self is false) combined
-- with every src value written there; the others keep x's. mean divides by the number
-- of values combined (floor division for integers). Gradients as PyTorch's: prod's by
-- the product rule (zeros included), amax's and amin's shared evenly among the values
-- equal to the result.
function methods.scatter_reduce(x, dim, idx, src, reduce, opts)
  local op = "scatter_reduce"
  check(op, x)
  local d = dim_of(op, x, dim)
  scatter_index(op, x, d, idx)
  src = covered(op, idx, src)
  if src.dtype ~= x.dtype then raise(op .. ": expected a source of dtype " .. x.dtype .. " (x's), got " .. src.dtype) end
  if not REDUCE[reduce] then
    raise(op .. ": reduce must be sum, prod, mean, amax or amin, got " .. tostring(reduce))
  end
  opts = core.options(op, opts, { include_self = true })
  local include_self = opts.include_self
  if include_self == nil then include_self = true end
  if type(include_self) ~= "boolean" then bad_arg(op, "include_self (a boolean)", include_self) end
  if idx:numel() == 0 then return x * 1 end
  local counts = dl.zeros(x.shape, { device = x.device }):scatter_add(d, idx, dl.ones(idx.shape, { device = x.device }))
  local hit = counts:gt(0)
  if reduce == "sum" or reduce == "mean" then
    local total = (include_self and x or dl.zeros_like(x)):scatter_add(d, idx, src)
    if reduce == "sum" then return include_self and total or dl.where(hit, total, x) end
    local n = (include_self and counts + 1 or counts:clamp_min(1)):to(x.dtype)
    return dl.where(hit, x:is_floating_point() and total / n or dl.floor_divide(total, n), x)
  end
  if reduce == "prod" or not x:is_floating_point() then return scatter_rounds(x, d, idx, src, reduce, include_self) end
  return dl.custom_gradient(function(a, b)
    local r = dl.stop_gradient(scatter_rounds(a, d, idx, b, reduce, include_self))
    return r, function(g)
      local at = r:gather(d, idx)
      local a_is = a:eq(r)
      if not include_self then a_is = a_is:logical_and(hit:logical_not()) end
      local b_is = b:eq(at)
      local share = g / a_is:to(g.dtype):scatter_add(d, idx, b_is:to(g.dtype))
      return { dl.where(a_is, share, 0), dl.where(b_is, share:gather(d, idx), 0) }
    end
  end)(x, src)
end

-- Integer index tensors (or bool masks) over x's leading dims, checked, broadcast
-- together and made 1-based and positive; a Lua list of numbers is one index.
local function leading_indices(op, x, indices)
  if is_tensor(indices) or type(indices) ~= "table" then bad_arg(op, "a list of index tensors", indices) end
  local list = {}
  for i, idx in ipairs(indices) do
    if type(idx) == "table" and not is_tensor(idx) then idx = dl.tensor(idx, { dtype = "int64", device = x.device }) end
    if not is_tensor(idx) then bad_arg(op, "index " .. i .. " as a tensor", idx) end
    if idx.dtype == "bool" then   -- a mask over the next dims: its positions, one index per dim
      local at = #list
      for k = 1, idx:dim() do
        if at + k > x:dim() or idx:size(k) ~= x:size(at + k) then
          raise(op .. ": the mask " .. i .. " of shape " .. shape_str(idx.shape) .. " does not match the input's "
                .. shape_str(x.shape) .. " from dim " .. at + 1)
        end
      end
      local pos = idx:nonzero()
      for k = 1, idx:dim() do list[#list + 1] = pos:select(2, k) end
    elseif idx:is_floating_point() then
      raise(op .. ": expected integer index tensors or bool masks, got " .. idx.dtype .. " for index " .. i)
    else
      list[#list + 1] = idx
    end
  end
  if #list == 0 then raise(op .. ": expected at least one index") end
  if #list > x:dim() then
    raise(op .. ": too many indices (" .. #list .. ") for a tensor of " .. x:dim() .. " dims")
  end
  if #list > 1 then list = { dl.broadcast_tensors(unpack(list)) } end
  for k, idx in ipairs(list) do
    local n = x:size(k)
    if idx:numel() > 0 and (idx:min():item() < -n or idx:max():item() > n or idx:eq(0):any()) then
      raise(op .. ": an index is out of range for dimension " .. k .. " of size " .. n
            .. " (indices are 1-based, or from -" .. n .. " counting from the end)")
    end
    list[k] = dl.where(idx:lt(0), idx + (n + 1), idx):to("int64")
  end
  return list
end

-- x:index_put(indices, values [, accumulate = false]): PyTorch's index_put_, out of place.
function methods.index_put(x, indices, values, accumulate)
  local op = "index_put"
  check(op, x)
  local list = leading_indices(op, x, indices)
  if accumulate ~= nil and type(accumulate) ~= "boolean" then bad_arg(op, "accumulate (a boolean)", accumulate) end
  -- the places as 1-based rows of x with its indexed dims flattened into one
  local row, rest = list[1] - 1, {}
  for k = 2, #list do row = row * x:size(k) + (list[k] - 1) end
  row = row + 1
  local n, width = row:numel(), 1
  for k = #list + 1, x:dim() do rest[#rest + 1] = x:size(k); width = width * x:size(k) end
  local want = row.shape
  for _, m in ipairs(rest) do want[#want + 1] = m end
  if type(values) == "number" or type(values) == "boolean" then
    values = dl.full({}, type(values) == "boolean" and (values and 1 or 0) or values, { dtype = x.dtype, device = x.device })
  end
  check(op, values)
  if values.dtype ~= x.dtype then
    raise(op .. ": expected values of dtype " .. x.dtype .. " (the input's), got " .. values.dtype)
  end
  local ok, spread = pcall(values.expand, values, want)
  if not ok then
    raise(op .. ": values of shape " .. shape_str(values.shape) .. " do not broadcast to the indexed shape "
          .. shape_str(want))
  end
  spread = spread:to(x.dtype):reshape({ n, width })
  local lead = 1   -- (not -1: with a zero-size dim past the indexed ones, any count fits)
  for k = 1, #list do lead = lead * x:size(k) end
  local rows = x:reshape({ lead, width })
  local placed
  if accumulate then
    placed = rows:index_add(1, row:reshape(-1), spread)
  else
    placed = methods.scatter(rows, 1, row:reshape({ n, 1 }):expand({ n, width }), spread)
  end
  return placed:view(x.shape)
end

-- x:put(idx, src [, accumulate = false]): src's elements at the flat (row-major) indices idx.
function methods.put(x, idx, src, accumulate)
  local op = "put"
  check(op, x)
  check(op, idx)
  check(op, src)
  if idx:numel() ~= src:numel() then
    raise(op .. ": expected a source of " .. idx:numel() .. " elements (the index's), got " .. src:numel())
  end
  if src.dtype ~= x.dtype then raise(op .. ": expected a source of dtype " .. x.dtype .. " (the input's), got " .. src.dtype) end
  return methods.index_put(x:reshape(-1), { idx:reshape(-1) }, src:reshape(-1), accumulate):view(x.shape)
end

-- dl.take(x, idx): x's elements at the flat (row-major) indices idx, in idx's shape.
function dl.take(x, idx)
  local op = "take"
  check(op, x)
  local list = leading_indices(op, x:reshape(-1), { idx })
  return x:reshape(-1):index_select(1, list[1]:reshape(-1)):view(list[1].shape)
end
methods.take = dl.take

-- x:masked_scatter(mask, src): x with the elements where mask (broadcast to x's shape)
-- is true replaced by src's first elements, in row-major order.
function methods.masked_scatter(x, mask, src)
  local op = "masked_scatter"
  check(op, x)
  check(op, mask)
  check(op, src)
  if mask.dtype ~= "bool" then raise(op .. ": expected a bool mask, got " .. mask.dtype) end
  local ok, m = pcall(mask.expand, mask, x.shape)
  if not ok then
    raise(op .. ": the mask of shape " .. shape_str(mask.shape) .. " does not broadcast to the input's " .. shape_str(x.shape))
  end
  local pos = m:reshape(-1):nonzero():view(-1)
  local count = pos:numel()
  if src:numel() < count then
    raise(op .. ": the mask selects " .. count .. " elements, but the source has only " .. src:numel())
  end
  if src.dtype ~= x.dtype then raise(op .. ": expected a source of dtype " .. x.dtype .. " (the input's), got " .. src.dtype) end
  local values = src:reshape(-1):narrow(1, 1, count)
  local placed = blank(x):reshape(-1):scatter_add(1, pos, values):view(x.shape)
  return dl.where(m, placed, x)
end

-- The in-place forms: the result copied into x (recorded for gradients as a copy).
for _, name in ipairs({ "index_add", "index_copy", "index_fill", "scatter", "scatter_add", "scatter_reduce", "index_put",
                        "put", "masked_scatter" }) do
  local f = methods[name]
  methods[name .. "_"] = function(x, ...)
    local y = f(x, ...)
    if y.dtype ~= x.dtype then
      raise(name .. "_: result dtype " .. y.dtype .. " cannot be stored in the in-place target of dtype " .. x.dtype)
    end
    return T.write_into(name .. "_", x, y)
  end
  dl[name] = f
end

-- ---- the view scatters ------------------------------------------------------------------------

-- x's copy with `view(copy)` (a view of it: a select, slice or diagonal) replaced by src,
-- which must have the view's shape. The write is an in-place copy into the copy's view,
-- recorded as such: x's gradient is the incoming one outside the view, src's the view's.
local function view_scatter(op, x, src, view)
  check(op, x)
  check(op, src)
  local y = x:clone()
  local part = view(y)
  if not dl.equal(dl.tensor(part.shape, { dtype = "int64" }), dl.tensor(src.shape, { dtype = "int64" })) then
    raise(op .. ": expected src of shape " .. shape_str(part.shape) .. " (the part of the input it replaces), got "
          .. shape_str(src.shape))
  end
  T.write_into(op, part, src)
  return y
end

-- x:select_scatter(src, dim, index): x with x:select(dim, index) replaced by src.
function methods.select_scatter(x, src, dim, index)
  local op = "select_scatter"
  return view_scatter(op, x, src, function(y)
    local d = dim_of(op, y, dim)
    local n = y:size(d)
    if not core.integer(index) or index == 0 or index > n or index < -n then
      raise(op .. ": index " .. tostring(index) .. " is out of range for dim " .. d .. " of size " .. n
            .. " (1-based; negative from the end)")
    end
    return y:select(d, index < 0 and n + 1 + index or index)
  end)
end

-- x:slice_scatter(src [, {dim = 1, start = 1, stop = -1, step = 1}]): x with
-- x:slice(dim, start, stop, step) replaced by src (stop inclusive, negative from the end,
-- as x:slice's; end_ is stop by torch's name).
function methods.slice_scatter(x, src, opts)
  local op = "slice_scatter"
  opts = core.options(op, opts, { dim = true, start = true, stop = true, end_ = true, step = true })
  if opts.stop ~= nil and opts.end_ ~= nil then raise(op .. ": give stop or end_, not both") end
  local stop = opts.stop
  if stop == nil then stop = opts.end_ end
  return view_scatter(op, x, src, function(y)
    local d = dim_of(op, y, opts.dim or 1)
    return y:slice(d, opts.start or 1, stop or -1, opts.step or 1)
  end)
end

-- x:diagonal_scatter(src [, {offset = 0, dim1 = 1, dim2 = 2}]): x with
-- x:diagonal(offset, dim1, dim2) replaced by src. The write goes through x permuted so
-- that dim1 and dim2 are the last two, in that order: only there (in a fresh copy) is
-- the diagonal a view for any dims, rather than a copy the write would miss.
function methods.diagonal_scatter(x, src, opts)
  local op = "diagonal_scatter"
  opts = core.options(op, opts, { offset = true, dim1 = true, dim2 = true })
  check(op, x)
  if x:dim() < 2 then raise(op .. ": expected a tensor of 2 or more dims, got shape " .. shape_str(x.shape)) end
  local d1, d2 = dim_of(op, x, opts.dim1 or 1), dim_of(op, x, opts.dim2 or 2)
  if d1 == d2 then raise(op .. ": dim1 and dim2 must differ, got both " .. d1) end
  local order, back = {}, {}
  for d = 1, x:dim() do if d ~= d1 and d ~= d2 then order[#order + 1] = d end end
  order[#order + 1], order[#order + 2] = d1, d2
  for k, d in ipairs(order) do back[d] = k end
  local offset = opts.offset or 0
  return view_scatter(op, x:permute(order), src, function(y) return y:diagonal(offset, -2, -1) end)
    :permute(back):contiguous()
end

dl.select_scatter, dl.slice_scatter, dl.diagonal_scatter =
  methods.select_scatter, methods.slice_scatter, methods.diagonal_scatter

-- x:index_reduce(dim, idx, src, reduce [, {include_self = true}]): src's slices combined
-- into x's slices idx by prod, mean, amax or amin (scatter_reduce's, with idx along dim).
local INDEX_REDUCE = { prod = true, mean = true, amax = true, amin = true }
function methods.index_reduce(x, dim, idx, src, reduce, opts)
  local op = "index_reduce"
  local d
  d, idx = operands(op, x, dim, idx)
  check_src(op, x, d, idx, src)
  if not INDEX_REDUCE[reduce] then
    raise(op .. ": reduce must be prod, mean, amax or amin, got " .. tostring(reduce))
  end
  if src.dtype ~= x.dtype then raise(op .. ": expected a source of dtype " .. x.dtype .. " (x's), got " .. src.dtype) end
  return methods.scatter_reduce(x, d, along(idx, d, x:dim(), src.shape), src, reduce, opts)
end
dl.index_reduce = methods.index_reduce
function methods.index_reduce_(x, ...)
  local y = methods.index_reduce(x, ...)
  return T.write_into("index_reduce_", x, y)
end

return {}
