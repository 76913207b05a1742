-- dlua.sorting: sorting, searching and selecting by mask, as PyTorch's (dims and
-- indices 1-based, as everywhere in dlua):
--
--   local v, i = x:sort(dim, descending)   -- stable; NaN sorts as the largest value
--   x:argsort(dim, descending), x:topk(k, dim, largest, sorted), x:kthvalue(k, dim, keepdim)
--   dl.unique(x, {return_inverse = true, return_counts = true}), x:mode(dim, keepdim)
--   dl.searchsorted(sorted, values, {right = false})   -- insertion points in [1, n + 1]
--   dl.isin(elements, test_elements, {invert = false})   -- membership, elements' shape
--   x:nonzero(), dl.argwhere(x), x:count_nonzero(dim)
--   x[mask], dl.masked_select(x, mask), x[mask] = v    -- mask a bool tensor
--   x[idx], x[idx] = v                                 -- idx an integer tensor: rows idx
--
-- sort, nonzero and searchsorted are ops of the engine (tensor/sorting.cpp, CPU and CUDA
-- kernels); the rest is made of them and of differentiable views and ops here, so
-- values selected from x carry x's gradient.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local C = core.C
local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local hid, is_tensor, shape_str, methods, dl = T.hid, T.is_tensor, T.shape_str, T.methods, T.dl
local type, tostring, floor = type, tostring, math.floor

local M = {}
local handles2 = T.handles2   -- fresh per call: Note [Values C writes back]

local check = T.check_tensor   -- (op, x): an error naming op unless x is a tensor
local function int_arg(op, v, what)
  if type(v) ~= "number" or v ~= floor(v) then bad_arg(op, "an integer " .. what, v) end
  return v
end
local bool_arg = core.boolean_arg
local one = T.new   -- one handle from f(...), retried once after a collection
local several = T.several   -- n handles from f(..., outs), outs the last argument

-- x:sort([dim = -1 [, descending = false]]): values and 1-based int64 indices.
function methods.sort(x, dim, descending)
  check("sort", x)
  dim = int_arg("sort", dim == nil and -1 or dim, "dimension")
  local d = bool_arg("sort", descending, "descending", false) and 1 or 0
  return several(2, C.dl_sort, hid(x), dim, d, handles2())
end

function methods.argsort(x, dim, descending)
  check("argsort", x)
  dim = int_arg("argsort", dim == nil and -1 or dim, "dimension")
  core.positive_dim("argsort", dim, math.max(x:dim(), 1), x:dim())   -- (its own name in the error)
  local _, i = methods.sort(x, dim, descending)
  return i
end

-- The size of x along dim (1-based, negative from the end), checked.
local function size_along(op, x, dim)
  local n = x:dim()
  local m = n > 0 and n or 1
  if dim < -m or dim > m or dim == 0 then
    raise(op .. ": dimension " .. tostring(dim) .. " out of range for a tensor of " .. n .. " dimensions")
  end
  return n == 0 and 1 or x:size(dim)
end

-- x:topk(k [, dim = -1 [, largest = true [, sorted = true]]]): the k largest (smallest)
-- values along dim and their indices, in order.
function methods.topk(x, k, dim, largest, sorted)
  check("topk", x)
  k = int_arg("topk", k, "k")
  dim = int_arg("topk", dim == nil and -1 or dim, "dimension")
  largest = bool_arg("topk", largest, "largest", true)
  bool_arg("topk", sorted, "sorted", true)   -- always sorted
  local n = size_along("topk", x, dim)
  if k < 0 or k > n then
    raise("topk: k = " .. k .. " is out of range for a dimension of size " .. n)
  end
  local v, i = methods.sort(x, dim, largest)
  if x:dim() == 0 then return v, i end
  return v:narrow(dim, 1, k), i:narrow(dim, 1, k)
end

-- x:kthvalue(k [, dim = -1 [, keepdim = false]]): the k-th smallest value along dim and
-- its index.
function methods.kthvalue(x, k, dim, keepdim)
  check("kthvalue", x)
  k = int_arg("kthvalue", k, "k")
  dim = int_arg("kthvalue", dim == nil and -1 or dim, "dimension")
  keepdim = bool_arg("kthvalue", keepdim, "keepdim", false)
  local n = size_along("kthvalue", x, dim)
  if k < 1 or k > n then
    raise("kthvalue: k = " .. k .. " is out of range for a dimension of size " .. n)
  end
  local v, i = methods.sort(x, dim, false)
  if x:dim() == 0 then return v, i end
  v, i = v:narrow(dim, k, 1), i:narrow(dim, k, 1)
  if not keepdim then v, i = v:squeeze(dim), i:squeeze(dim) end
  return v, i
end

-- x:nonzero([{as_tuple = true}]): int64 (count, x:dim()), the 1-based positions of the
-- non-zero elements in row-major order; with as_tuple, a list of x:dim() int64 (count)
-- tensors, one a dim (of a 0-dim x: one tensor, {1} where x is non-zero), as PyTorch's.
function methods.nonzero(x, opts)
  check("nonzero", x)
  opts = options("nonzero", opts, { as_tuple = true })
  local pos = one(C.dl_nonzero, hid(x))
  if not opts.as_tuple then return pos end
  if x:dim() == 0 then return { dl.ones(pos:size(1), { dtype = "int64", device = x.device }) } end
  local list = {}
  for d = 1, x:dim() do list[d] = pos:select(2, d):contiguous() end
  return list
end

-- x:count_nonzero([dim | {dims}]): the number of non-zero elements (along dims).
function methods.count_nonzero(x, dim)
  check("count_nonzero", x)
  local nz = x:ne(0)
  if dim == nil then return nz:sum() end
  for _, d in ipairs(type(dim) == "table" and dim or { dim }) do   -- (checked here to be named so)
    core.positive_dim("count_nonzero", d, math.max(x:dim(), 1), x:dim())
  end
  return nz:sum(dim)
end

-- dl.searchsorted(sorted, values [, {right = false, sorter, out_int32 = false}]): for
-- each value, the 1-based position in [1, n + 1] at which inserting it keeps the last dim
-- of `sorted` ascending (before equal elements; after them with right = true). With
-- sorter (1-based int64 indices that sort `sorted` along its last dim, as argsort's),
-- `sorted` may be in any order: the positions are in the sorted order. out_int32: int32
-- positions, not int64.
function M.searchsorted(seq, values, opts)
  check("searchsorted", seq)
  opts = options("searchsorted", opts, { right = true, side = true, sorter = true, out_int32 = true })
  local int32 = bool_arg("searchsorted", opts.out_int32, "out_int32", false)
  local side = opts.side
  if side ~= nil and side ~= "left" and side ~= "right" then
    raise("searchsorted: side must be \"left\" or \"right\", got " .. tostring(side))
  end
  if side ~= nil and opts.right ~= nil and (side == "right") ~= (opts.right == true) then
    raise("searchsorted: side = \"" .. side .. "\" and right = " .. tostring(opts.right) .. " ask for opposite sides")
  end
  local right = opts.right == true or side == "right"
  if type(values) == "number" then   -- a fraction against integers compares as float64
    local dt = (values == floor(values) or seq:is_floating_point()) and seq.dtype or "float64"
    values = dl.tensor(values, { dtype = dt, device = seq.device })
  end
  check("searchsorted", values)
  local sorter = opts.sorter
  if sorter ~= nil then
    check("searchsorted", sorter)
    if sorter.dtype ~= "int64" then
      raise("searchsorted: the sorter must be int64 (as argsort gives), got " .. sorter.dtype)
    end
    if shape_str(sorter) ~= shape_str(seq) then
      raise("searchsorted: the sorter's shape " .. shape_str(sorter) .. " must be the sorted sequence's "
            .. shape_str(seq))
    end
    local d = math.max(seq:dim(), 1)
    local n = seq:dim() == 0 and 1 or seq:size(d)
    if sorter:numel() > 0 and (sorter:min():item() < 1 or sorter:max():item() > n) then
      raise("searchsorted: a sorter index is out of range for the last dim of size " .. n
            .. " (indices are 1-based)")
    end
    seq = seq:dim() == 0 and seq or seq:gather(d, sorter)
  end
  local pos = one(C.dl_searchsorted, hid(seq), hid(values), right and 1 or 0)
  return int32 and pos:to("int32") or pos
end

-- dl.masked_select(x, mask): the elements of x where mask (broadcast with x) is true, as
-- a 1-D tensor in row-major order; differentiable in x.
function M.masked_select(x, mask)
  check("masked_select", x)
  check("masked_select", mask)
  if mask.dtype ~= "bool" then
    raise("masked_select: expected a bool mask, got " .. mask.dtype .. " (compare first, as x:gt(0))")
  end
  local xs, ms = x, mask
  if shape_str(x) ~= shape_str(mask) then
    local ok, probe = pcall(dl.where, mask, x, x)   -- the broadcast shape
    if not ok then
      raise("masked_select: the mask of shape " .. shape_str(mask) .. " and the input of shape " .. shape_str(x)
            .. " do not broadcast together")
    end
    xs, ms = x:expand_as(probe), mask:expand_as(probe)
  end
  local flat = xs:reshape(-1)
  local pos = ms:reshape(-1):nonzero():view(-1)
  return flat:index_select(1, pos)
end

-- A bool mask for x[mask]: its shape must be x's leading dims (PyTorch's rule); it
-- returns the 1-based flat positions of the selected leading entries and the number
-- of leading dims.
local function mask_positions(x, mask)
  local k = mask:dim()
  local ok = k >= 1 and k <= x:dim()
  for d = 1, k do ok = ok and mask:size(d) == x:size(d) end
  if not ok then
    raise("index: the mask's shape " .. shape_str(mask) .. " must be the leading dims of the tensor's " .. shape_str(x))
  end
  return mask:reshape(-1):nonzero():view(-1), k
end

-- x with its first k dims flattened into one.
local function lead_flat(x, k)
  local shape = { 1 }   -- (not -1: with a zero-size trailing dim, any count would fit)
  for d = 1, k do shape[1] = shape[1] * x:size(d) end
  for d = k + 1, x:dim() do shape[#shape + 1] = x:size(d) end
  return x:reshape(shape)
end

-- A tensor key that is no mask checked: integers, and a dim of x to pick rows along.
local function rows_key(x, key)
  if key:is_floating_point() then
    raise("index: expected a bool mask or an integer index tensor, got " .. key.dtype)
  end
  if x:dim() == 0 then raise("index: a 0-dim tensor has no rows to pick with an integer index tensor") end
end

-- x[key] for a tensor key: a bool mask over x's leading dims selects those entries (a
-- tensor (count, the remaining dims...)); an integer tensor picks rows, in the key's
-- shape (negative indices count from the end: -1 is the last row).
function M.index(x, key)
  if key.dtype == "bool" then
    -- a 0-dim mask selects all of x (as a new leading dim of 1) or none of it
    if key:dim() == 0 then return M.index(x:unsqueeze(1), key:reshape(1)) end
    local pos, k = mask_positions(x, key)
    return lead_flat(x, k):index_select(1, pos)
  end
  rows_key(x, key)
  return require("dlua.subscript").take(x, 1, 1, key)
end

-- x[mask] = v: v a number, or a tensor that broadcasts to x[mask]'s shape (count, the
-- remaining dims...): one element, one per true element of mask (in row-major order), or
-- one entry of the remaining dims for every selected one (PyTorch's index_put_). x[idx]
-- = v, idx an integer tensor: v broadcast to x[idx]'s shape, written to those rows (of
-- a row named twice, the last write stands). In place; recorded for gradients as a copy
-- into x.
function M.newindex(x, key, v)
  if key.dtype ~= "bool" then
    rows_key(x, key)
    return require("dlua.subscript").put(x, 1, 1, key, v)
  end
  if key:dim() == 0 then return M.newindex(x:unsqueeze(1), key:reshape(1), v) end   -- (a view of x)
  local pos, k = mask_positions(x, key)
  local mshape = key.shape
  for _ = k + 1, x:dim() do mshape[#mshape + 1] = 1 end
  local mask = key:view(mshape):expand_as(x)
  if type(v) == "number" or type(v) == "boolean" then
    x:masked_fill_(mask, v)
    return
  end
  if not is_tensor(v) then bad_arg("index", "a number or a tensor to assign", v) end
  if v:numel() == 1 then
    T.write_into("index", x, dl.where(mask, v:reshape({}):to(x.dtype), x))
    return
  end
  local want = { pos:numel() }
  for d = k + 1, x:dim() do want[#want + 1] = x:size(d) end
  while v:dim() > #want and v:size(1) == 1 do v = v:squeeze(1) end   -- (leading 1s broadcast away)
  local ok, spread = pcall(v.expand, v, want)
  if not ok then
    raise("index: the mask's selection has shape " .. shape_str(want) .. ", and the values' shape " .. shape_str(v)
          .. " does not broadcast to it")
  end
  -- copied over the selected rows (not added to zeros, which would turn -0 into +0)
  T.write_into("index", x, lead_flat(x, k):index_copy(1, pos, spread:to(x.dtype)):view(x.shape))
end

-- The k-th smallest of the 1-D tensor flat (NaN last) as a 0-dim tensor whose gradient
-- is shared evenly by the elements equal to it (the NaN ones when it is NaN), as
-- PyTorch's median and nanmedian over all elements.
local function shared_kth(flat, k)
  local function f(a)
    local v = methods.kthvalue(a, k, 1)
    local hit = a:eq(v):logical_or(a:ne(a):logical_and(v:ne(v)))
    local w = hit:to(a.dtype) / hit:sum():to(a.dtype)
    return v, function(dy) return dy * w end
  end
  if dl.custom_gradient and dl.is_grad_enabled() then return dl.custom_gradient(f)(flat) end
  return (f(flat))
end

-- x:median(): the lower median of all elements (a 0-dim tensor; NaN when x has one);
-- x:median(dim [, keepdim]): along dim, values and indices, as PyTorch's (the lower of
-- the two middle values for an even count; NaN where the slice holds one).
function methods.median(x, dim, keepdim)
  check("median", x)
  if dim == nil then
    local flat = x:reshape(-1)
    local n = flat:numel()
    if n == 0 then   -- NaN, as PyTorch's (an integer tensor has none to give)
      if not x:is_floating_point() then raise("median: the tensor is empty (an integer tensor has no NaN to give)") end
      return dl.full({}, 0 / 0, { dtype = x.dtype, device = x.device })
    end
    if not x:is_floating_point() then return (methods.kthvalue(flat, floor((n + 1) / 2), 1)) end
    return shared_kth(flat, flat:ne(flat):any() and n or floor((n + 1) / 2))   -- (NaN sorts last)
  end
  dim = int_arg("median", dim, "dimension")
  local n = size_along("median", x, dim)
  if n == 0 then raise("median: dimension " .. dim .. " is empty") end
  local v, i = methods.kthvalue(x, floor((n + 1) / 2), dim, keepdim)
  if x:is_floating_point() then
    local nan = x:ne(x)
    local has = nan:any(dim, keepdim and true or false)
    v = dl.where(has, 0 / 0, v)
    i = dl.where(has, nan:long():argmax(dim, keepdim and true or false), i)   -- the first NaN's
  end
  return v, i
end
dl.median = methods.median

-- x:nanmedian([dim [, keepdim]]): the median of the values that are not NaN, as
-- torch.nanmedian (NaN only where all are); along dim, values and indices (of a slice of
-- NaN only: its first NaN's).
function methods.nanmedian(x, dim, keepdim)
  check("nanmedian", x)
  if not x:is_floating_point() then return methods.median(x, dim, keepdim) end
  if dim == nil then
    local flat = x:reshape(-1)
    if flat:numel() == 0 then return dl.full({}, 0 / 0, { dtype = x.dtype, device = x.device }) end
    local count = flat:eq(flat):sum():item()
    return shared_kth(flat, math.max(floor((count + 1) / 2), 1))
  end
  dim = int_arg("nanmedian", dim, "dimension")
  local n = size_along("nanmedian", x, dim)
  if n == 0 then raise("nanmedian: dimension " .. dim .. " is empty") end
  keepdim = bool_arg("nanmedian", keepdim, "keepdim", false)
  if x:dim() == 0 then return methods.median(x, dim, keepdim) end
  local d = core.positive_dim("nanmedian", dim, x:dim())
  local sorted, perm = x:sort(d)   -- stable, NaN last
  -- the lower middle of each slice's count of values (1 for a slice of NaN only)
  local k = ((x:eq(x):sum(d, true):double() + 1) / 2):floor():clamp(1):long()
  local v, i = sorted:gather(d, k), perm:gather(d, k)
  if not keepdim then v, i = v:squeeze(d), i:squeeze(d) end
  return v, i
end
dl.nanmedian = methods.nanmedian

-- For a tensor sorted along dim d, each element's place in its run of equal values: 0
-- for a run's first, 1 for the next ... (int64, its shape). Each NaN is a run of its own.
function M.run_offsets(sorted, d)
  local n = sorted:size(d)
  local view = {}
  for k = 1, sorted:dim() do view[k] = k == d and n or 1 end
  local pos = dl.arange(1, n + 1, { dtype = "int64", device = sorted.device }):view(view):expand(sorted.shape)
  local head = sorted.shape
  head[d] = 1
  local starts = dl.cat({ dl.ones(head, { dtype = "bool", device = sorted.device }),
                          sorted:narrow(d, 2, n - 1):ne(sorted:narrow(d, 1, n - 1)) }, d)
  return pos - dl.cummax(dl.where(starts, pos, 0), d)
end

-- x:mode([dim = -1 [, keepdim]]): along dim, the value that occurs most often (the
-- smallest of those that tie) and the index of its last occurrence, as PyTorch's; each
-- NaN counts as a value of its own. The values carry x's gradient.
function methods.mode(x, dim, keepdim)
  check("mode", x)
  dim = int_arg("mode", dim == nil and -1 or dim, "dimension")
  local n = size_along("mode", x, dim)
  if n == 0 then raise("mode: dimension " .. dim .. " is empty") end
  keepdim = bool_arg("mode", keepdim, "keepdim", false)
  if x:dim() == 0 then return x * 1, dl.tensor(1, { dtype = "int64", device = x.device }) end
  local d = core.positive_dim("mode", dim, x:dim())
  -- sorted (stably), each value's run counted up as it goes: the smallest value whose
  -- run reaches the largest count ends first, at its last occurrence in x
  local sorted, perm = x:sort(d)
  local count = M.run_offsets(dl.stop_gradient(sorted), d)
  local at = count:eq(count:amax(d, true)):to("int64"):argmax(d, true)
  local v, i = sorted:gather(d, at), perm:gather(d, at)
  if not keepdim then v, i = v:squeeze(d), i:squeeze(d) end
  return v, i
end
dl.mode = methods.mode

-- dl.bucketize(x, boundaries [, {right = false}]): for each element the 1-based bucket
-- of the sorted 1-D boundaries it falls in (boundaries[i - 1] < v <= boundaries[i]; with
-- right, boundaries[i - 1] <= v < boundaries[i]), as torch.bucketize: searchsorted with
-- the arguments the other way round.
function dl.bucketize(x, boundaries, opts)
  if type(x) ~= "number" then check("bucketize", x) end   -- (a number gives a 0-dim result)
  check("bucketize", boundaries)
  if boundaries:dim() ~= 1 then
    raise("bucketize: expected 1-D boundaries, got shape " .. shape_str(boundaries.shape))
  end
  opts = options("bucketize", opts, { right = true, out_int32 = true })
  return dl.searchsorted(boundaries, x, { right = bool_arg("bucketize", opts.right, "right", false),
                                          out_int32 = bool_arg("bucketize", opts.out_int32, "out_int32", false) })
end

-- The runs of equal neighbours along dim 1 of vals (1-D: elements; 2-D: rows, equal
-- when every column is), and the results unique and unique_consecutive give: the run
-- values (a row each), and as asked, each element's 1-based run (placed at `at`, or in
-- order, then viewed as `shape`) and each run's length.
local function runs(vals, opts, at, shape)
  local n, device = vals:size(1), vals.device
  local starts
  if n == 0 then
    starts = dl.zeros(0, { dtype = "bool", device = device })
  else
    local first = dl.ones(1, { dtype = "bool", device = device })
    local differ = n > 1 and vals:narrow(1, 2, n - 1):ne(vals:narrow(1, 1, n - 1))
    if differ and vals:dim() == 2 then differ = differ:any(2) end
    starts = n == 1 and first or dl.cat({ first, differ })
  end
  local first_at = starts:nonzero():view(-1)   -- where each run starts, 1-based
  local results = { vals:index_select(1, first_at) }
  if opts.return_inverse then
    local group = starts:cumsum(1)   -- int64, 1-based
    if at then group = dl.zeros(n, { dtype = "int64", device = device }):scatter_add(1, at, group) end
    results[#results + 1] = group:view(shape)
  end
  if opts.return_counts then
    if n == 0 then
      results[#results + 1] = dl.zeros(0, { dtype = "int64", device = device })
    else
      local ends = dl.cat({ first_at:narrow(1, 2, first_at:numel() - 1),
                            dl.tensor({ n + 1 }, { dtype = "int64", device = device }) })
      results[#results + 1] = ends - first_at
    end
  end
  return results
end

-- dl.unique(x [, {sorted = true, return_inverse = false, return_counts = false, dim}]):
-- the distinct values of x (flattened) in ascending order; with return_inverse, for each
-- element of x the 1-based index of its value among them (x's shape); with
-- return_counts, how often each occurs. Each NaN is distinct, as in PyTorch. With dim,
-- the distinct slices along dim, in lexicographic order, and the inverse and counts per
-- slice (torch.unique's dim).
function M.unique(x, opts)
  check("unique", x)
  opts = options("unique", opts, { sorted = true, return_inverse = true, return_counts = true, dim = true })
  if opts.dim == nil then
    local vals, idx = x:reshape(-1):sort()
    return unpack(runs(vals, opts, idx, x:dim() == 0 and {} or x.shape))
  end
  if x:dim() == 0 then raise("unique: a 0-dim tensor has no dim to take slices along") end
  local d = core.positive_dim("unique", opts.dim, x:dim())
  local n = x:size(d)
  local moved = x:transpose(d, 1)   -- (PyTorch's: a slice's elements in the transpose's order)
  local rest = moved.shape
  table.remove(rest, 1)
  local width = 1
  for _, m in ipairs(rest) do width = width * m end
  if width == 0 and n > 0 then   -- (PyTorch's refusal: its slices would all be empty)
    raise("unique: the slices along dim " .. opts.dim .. " of shape " .. shape_str(x) .. " are empty")
  end
  local rows = moved:reshape(n, width)
  -- rows in lexicographic order: stable sorts by each column, the last first
  local order = dl.arange(1, n + 1, { dtype = "int64", device = x.device })
  for j = width, 1, -1 do
    local _, o = rows:select(2, j):index_select(1, order):sort(1)
    order = order:index_select(1, o)
  end
  local results = runs(rows:index_select(1, order), opts, order, { n })
  local count = results[1]:size(1)
  local shape = { count }
  for _, m in ipairs(rest) do shape[#shape + 1] = m end
  results[1] = results[1]:reshape(shape):transpose(1, d)
  return unpack(results)
end

-- dl.unique_consecutive(x [, {return_inverse = false, return_counts = false, dim}]): x
-- (flattened) with each run of equal neighbours made one element, as
-- torch.unique_consecutive; with return_inverse, each element's 1-based run (x's shape),
-- with return_counts, each run's length. With dim, the runs of equal slices along dim
-- (the inverse and counts per slice).
function M.unique_consecutive(x, opts)
  local op = "unique_consecutive"
  check(op, x)
  opts = options(op, opts, { return_inverse = true, return_counts = true, dim = true })
  if opts.dim == nil then return unpack(runs(x:reshape(-1), opts, nil, x:dim() == 0 and {} or x.shape)) end
  local d = core.positive_dim(op, opts.dim, x:dim())
  local n = x:size(d)
  local moved = x:transpose(d, 1)
  local rest = moved.shape
  table.remove(rest, 1)
  local width = 1
  for _, m in ipairs(rest) do width = width * m end
  if width == 0 and n > 0 then   -- (PyTorch's refusal, as unique's)
    raise(op .. ": the slices along dim " .. opts.dim .. " of shape " .. shape_str(x) .. " are empty")
  end
  local results = runs(moved:reshape(n, width), opts, nil, { n })
  local shape = { results[1]:size(1) }
  for _, m in ipairs(rest) do shape[#shape + 1] = m end
  results[1] = results[1]:reshape(shape):transpose(1, d)
  return unpack(results)
end
methods.unique_consecutive, dl.unique_consecutive = M.unique_consecutive, M.unique_consecutive

-- dl.isin(elements, test_elements [, {assume_unique = false, invert = false}]): a bool
-- tensor of elements' shape, true where the element equals one of test_elements (false
-- with invert), as torch.isin; either may be a number. Both are compared in their common
-- dtype (an integer 2 is in {2.0}); NaN is in nothing.
function M.isin(elements, test, opts)
  local op = "isin"
  opts = options(op, opts, { assume_unique = true, invert = true })
  bool_arg(op, opts.assume_unique, "assume_unique", false)   -- (a hint: sorting needs none)
  local invert = bool_arg(op, opts.invert, "invert", false)
  if type(elements) == "number" and is_tensor(test) then
    elements = dl.tensor(elements, { dtype = dl.result_type(test, elements), device = test.device })
  elseif type(test) == "number" and is_tensor(elements) then
    test = dl.tensor({ test }, { dtype = dl.result_type(elements, test), device = elements.device })
  end
  check(op, elements)
  check(op, test)
  if elements.dtype == "bool" or test.dtype == "bool" then
    raise(op .. ": bool tensors are not supported (as in PyTorch); compare them as x:to(\"uint8\")")
  end
  local dtype = dl.promote_types(elements.dtype, test.dtype)
  local flat = elements:reshape(-1):to(dtype)
  local sorted = test:reshape(-1):to(dtype):sort()
  local n = sorted:numel()
  local hit
  if n == 0 or flat:numel() == 0 then
    hit = dl.zeros(flat:numel(), { dtype = "bool", device = elements.device })
  else   -- each element against the test value at its insertion point (the first not below it)
    hit = sorted:index_select(1, M.searchsorted(sorted, flat):clamp(1, n)):eq(flat)
  end
  if invert then hit = hit:logical_not() end
  return hit:view(elements.shape)
end
methods.isin, dl.isin = M.isin, M.isin

dl.searchsorted, dl.masked_select, dl.unique = M.searchsorted, M.masked_select, M.unique
methods.masked_select, methods.unique = M.masked_select, M.unique
dl.sort, dl.argsort, dl.topk, dl.kthvalue = methods.sort, methods.argsort, methods.topk, methods.kthvalue
dl.nonzero, dl.argwhere, dl.count_nonzero = methods.nonzero, methods.nonzero, methods.count_nonzero
methods.argwhere = methods.nonzero

return M
