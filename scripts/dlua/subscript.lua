-- dlua.subscript: a table as the key of a tensor, torch7's subscripts over several dims
-- at once (dlua.tensor's __index and __newindex send table keys here). Entry i of the
-- table addresses dim i of x; dims past the last entry are kept whole:
--
--   x[{2, 3}]            the element, as x[2][3] (a Lua number)
--   x[{{}, 2}]           column 2: a view, the dim dropped, as x:select(2, 2)
--   x[{{2, 4}}]          rows 2 to 4, inclusive: a view, as x:slice(1, 2, 4)
--   x[{{1, -1, 2}, {}}]  every second row (a step); negative bounds count from the end
--   x[{{2}}]             row 2 with its dim kept (torch7's {i}), as x:narrow(1, 2, 1)
--   x[{{}, idx}]         the columns idx, an integer or bool tensor: a copy (index_select);
--                        negative indices count from the end (-1 is the last)
--   x[{{}, 2}] = 0       fills the view; `= t` copies t into it, broadcast
--   x[{{}, idx}] = t     t broadcast to x[{{}, idx}]'s shape, written to the columns idx
--
-- Everything but a tensor entry is a view through select, narrow and slice, so a
-- subscript reads and writes x's memory, carries x's gradient and is deferred inside
-- dl.compile as those are; a tensor entry's write is an index_copy_ into that view.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, typename = core.raise, core.bad_arg, core.typename
local is_tensor, shape_str = T.is_tensor, T.shape_str
local type, tostring, next, floor = type, tostring, next, math.floor
local format = string.format

local M = {}

-- The number of entries of `key`, after checking that it is a list (keys 1 to n) no
-- longer than x has dims.
local function entries(x, key)
  local n = #key
  for k in next, key do
    if type(k) ~= "number" or k < 1 or k > n or k ~= floor(k) then
      raise("index: a subscript table is a list of entries, one per dim; it has the key " .. tostring(k))
    end
  end
  local nd = x:dim()
  if n > nd then
    raise(format("index: %d entries for a tensor of %d dims (shape %s)", n, nd, shape_str(x)))
  end
  return n
end

-- Entry i's integer e, checked against size (that of x's dim i), as a positive index.
local function position(i, e, size)
  if e ~= floor(e) or e == math.huge or e == -math.huge then
    raise(format("index: entry %d must be an integer, got %s", i, tostring(e)))
  end
  if e == 0 or e > size or e < -size then
    raise(format("index: entry %d: index %d out of range for dimension %d of size %d", i, e, i, size))
  end
  return e < 0 and size + 1 + e or e
end

-- A range entry {}, {i}, {a, b} or {a, b, step} of dim d of v (x's dim i): v narrowed.
local function range(v, d, i, e)
  local a, b, step = e[1], e[2], e[3]
  for k in next, e do
    if type(k) ~= "number" or k < 1 or k > 3 or k ~= floor(k) or type(e[k]) ~= "number" then
      raise(format("index: entry %d must be {}, {i}, {first, last} or {first, last, step} of integers", i))
    end
  end
  if a == nil then
    if b ~= nil then raise(format("index: entry %d has a last bound but no first", i)) end
    return v
  end
  if b == nil then
    if step ~= nil then raise(format("index: entry %d has a step but no last bound", i)) end
    return v:narrow(d, position(i, a, v:size(d)), 1)   -- {i}: the dim kept
  end
  if a ~= floor(a) or b ~= floor(b) or a == math.huge or a == -math.huge or b == math.huge or b == -math.huge then
    raise(format("index: entry %d's bounds must be integers, got %s and %s", i, tostring(a), tostring(b)))
  end
  if step ~= nil and (step ~= floor(step) or step < 1) then
    raise(format("index: entry %d's step must be a positive integer, got %s", i, tostring(step)))
  end
  return v:slice(d, a, b, step)
end

-- An error naming the first index of the integer tensor t out of range for dim i of
-- size `size`, if t has one.
local function check_range(i, size, t)
  if t:numel() == 0 then return end
  local lo, hi = t:min():item(), t:max():item()
  local bad = (hi > size and hi) or (lo < -size and lo) or (lo == 0 and 0) or nil
  if bad == nil and lo < 0 and hi >= 0 and t:eq(0):any() then bad = 0 end
  if bad then
    raise(format("index: index %d out of range for dimension %d of size %d (1-based, or negative from the end)",
                 bad, i, size))
  end
end

-- The positions `t` names along dim d of v, x's dim i: t an integer tensor of any shape
-- (negative indices count from the end) made positive, or a bool mask as long as the
-- dim (its true positions, 1-D). With `checked`, the indices are checked first; without,
-- those out of range stay out of range (0 or below, or past the end) for the op that
-- reads them to refuse, which a read needs no wait for.
local function positions(v, d, i, t, checked)
  local size = v:size(d)
  if t.dtype == "bool" then
    if t:dim() ~= 1 or t:size(1) ~= size then
      raise(format("index: entry %d is a bool mask of shape %s for dim %d of size %d", i, shape_str(t), i, size))
    end
    return t:nonzero():view(-1)
  end
  if t:is_floating_point() then
    raise(format("index: entry %d must be an integer or bool tensor, got %s", i, t.dtype))
  end
  if checked then check_range(i, size, t) end
  return T.dl.where(t:lt(0), t + (size + 1), t)
end

-- What v[..., t (at dim d), ...] reads: v's dims with t's in place of dim d.
local function taken_shape(v, d, t)
  local shape = {}
  for k = 1, d - 1 do shape[#shape + 1] = v:size(k) end
  for _, s in ipairs(t.shape) do shape[#shape + 1] = s end
  for k = d + 1, v:dim() do shape[#shape + 1] = v:size(k) end
  return shape
end

-- The entries at `t` along dim d of v, x's dim i: a copy, t's dims in place of dim d.
function M.take(v, d, i, t)
  if t.dtype ~= "bool" and not t:is_floating_point() then
    -- Indices within 1 .. size go straight to index_select; negative ones, or an error to
    -- report, take the way below (a read stays three ops shorter without them).
    local ok, r = pcall(v.index_select, v, d, t:dim() == 1 and t or t:reshape(-1))
    if ok then return t:dim() == 1 and r or r:view(taken_shape(v, d, t)) end
  end
  local at = positions(v, d, i, t)
  local ok, r = pcall(v.index_select, v, d, at:dim() == 1 and at or at:reshape(-1))
  if not ok then
    if t.dtype ~= "bool" then check_range(i, v:size(d), t) end   -- (the index named as given)
    error(r, 0)
  end
  return at:dim() == 1 and r or r:view(taken_shape(v, d, at))
end
local take = M.take

-- v[..., t (at dim d), ...] = value, in place (v a view of x, t x's entry i): a number
-- fills those entries; a tensor is broadcast to what the subscript reads (leading dims
-- of 1 dropped, as PyTorch's) and copied there. Of an entry named twice the last write
-- stands, and each write gets the place's gradient (index_copy's).
-- A few places written outside any gradient go row by row (a select and a fill or copy
-- each: the work of the rows written), not through index_fill_ and index_copy_, whose
-- out-of-place result and copy back cost the whole tensor (docs/performance.md,
-- "Assignment through an index tensor").
local FEW_ROWS = 32

local function put_rows(v, d, at, value)
  local rows = at:totable()
  for k = 1, #rows do
    local row = v:select(d, rows[k])
    if type(value) == "number" then row:fill_(value) else T.write_into("index", row, value:select(d, k)) end
  end
end

-- (not into an expanded view, which the in-place ops refuse: a row of it looks dense)
local function by_rows(v, t, value)
  return t:numel() <= FEW_ROWS and v.device == "cpu" and not T.overlapping(v) and not v:requires_grad()
         and not (is_tensor(value) and value:requires_grad())
end

function M.put(v, d, i, t, value)
  t = positions(v, d, i, t, true)
  local tv = type(value)
  if tv == "boolean" then value, tv = value and 1 or 0, "number" end
  if tv == "number" then
    if by_rows(v, t, value) then
      T.check_fits("index", value, T.dtype_code("index", v.dtype))
      return put_rows(v, d, t:reshape(-1), value)
    end
    v:index_fill_(d, t:reshape(-1), value)
    return
  end
  if not is_tensor(value) then bad_arg("index", "a number, a boolean or a tensor to assign", value) end
  local want = taken_shape(v, d, t)
  while value:dim() > #want and value:size(1) == 1 do value = value:squeeze(1) end
  local ok, spread = pcall(value.expand, value, want)
  if not ok then
    raise(format("index: the subscript selects shape %s, and the values' shape %s does not broadcast to it",
                 shape_str(want), shape_str(value)))
  end
  local rows = v.shape
  rows[d] = t:numel()
  -- (the values copied first: they may be x's own rows, which the writes would change)
  if by_rows(v, t, value) then return put_rows(v, d, t:reshape(-1), spread:reshape(rows):clone()) end
  v:index_copy_(d, t:reshape(-1), spread:to(v.dtype):reshape(rows))
end

-- x's subscript by entries 1 to last of key. An assignment keeps a tensor entry's dim
-- whole and returns, after the view, where the entry goes: its dim in the view, the
-- entry's number and the tensor.
local function apply(x, key, last, assigning)
  local v, d, took = x, 1, false
  local put_d, put_i, put_t
  for i = 1, last do
    local e = key[i]
    local te = type(e)
    if te == "number" then
      v = v:select(d, position(i, e, v:size(d)))
    elseif te == "table" then
      v = range(v, d, i, e)
      d = d + 1
    elseif is_tensor(e) then
      if took then raise("index: at most one tensor entry in a subscript table") end
      took = true
      if assigning then
        put_d, put_i, put_t = d, i, e
        d = d + 1
      else
        local before = v:dim()
        v = take(v, d, i, e)
        d = d + 1 + v:dim() - before
      end
    else
      raise(format("index: entry %d must be an integer, a range table or an index tensor, got a %s", i,
                   typename(e)))
    end
  end
  return v, put_d, put_i, put_t
end

-- Whether every entry is a number and there is one per dim: the subscript is an element.
local function element(x, key, n)
  if n == 0 or n ~= x:dim() then return false end
  for i = 1, n do
    if type(key[i]) ~= "number" then return false end
  end
  return true
end

function M.get(x, key)
  local n = entries(x, key)
  if element(x, key, n) then
    local v = apply(x, key, n - 1, false)
    return v[position(n, key[n], v:size(1))]   -- x[i] on a 1-D tensor: a number
  end
  return apply(x, key, n, false)
end

function M.set(x, key, value)
  local n = entries(x, key)
  if element(x, key, n) then
    local v = apply(x, key, n - 1, true)
    v[position(n, key[n], v:size(1))] = value
    return
  end
  local v, d, i, t = apply(x, key, n, true)
  if t then return M.put(v, d, i, t, value) end
  local tv = type(value)
  if tv == "boolean" then value, tv = value and 1 or 0, "number" end
  if tv == "number" then
    v:fill_(value)
  elseif is_tensor(value) then
    T.write_into("index", v, value)
  else
    bad_arg("index", "a number, a boolean or a tensor to assign", value)
  end
end

return M
