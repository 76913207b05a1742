-- dlua.subscript: a table as the key of a tensor, torch7's subscripts over several dims
-- at once (dlua.tensor's __index and __newindex send table keys here). Entry i of the
-- table addresses dim i of x; dims past the last entry are kept whole:
--
--   x[{2, 3}]            the element, as x[2][3] (a Lua number)
--   x[{{}, 2}]           column 2: a view, the dim dropped, as x:select(2, 2)
--   x[{{2, 4}}]          rows 2 to 4, inclusive: a view, as x:slice(1, 2, 4)
--   x[{{1, -1, 2}, {}}]  every second row (a step); negative bounds count from the end
--   x[{{2}}]             row 2 with its dim kept (torch7's {i}), as x:narrow(1, 2, 1)
--   x[{{}, idx}]         the columns idx, an integer or bool tensor: a copy (index_select)
--   x[{{}, 2}] = 0       fills the view; `= t` copies t into it, broadcast
--
-- Everything but a tensor entry is a view through select, narrow and slice, so a
-- subscript reads and writes x's memory, carries x's gradient and is deferred inside
-- dl.compile as those are.
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

-- The entries at `t` (an integer tensor of any shape, or a bool tensor as long as the
-- dim) along dim d of v, x's dim i: a copy, t's dims in place of dim d.
local function take(v, d, i, t)
  if t.dtype == "bool" then
    if t:dim() ~= 1 or t:size(1) ~= v:size(d) then
      raise(format("index: entry %d is a bool mask of shape %s for dim %d of size %d", i, shape_str(t), i, v:size(d)))
    end
    return v:index_select(d, t:nonzero():view(-1))
  end
  if t:is_floating_point() then
    raise(format("index: entry %d must be an integer or bool tensor, got %s", i, t.dtype))
  end
  if t:dim() == 1 then return v:index_select(d, t) end
  local shape = {}
  for k = 1, d - 1 do shape[#shape + 1] = v:size(k) end
  for _, s in ipairs(t.shape) do shape[#shape + 1] = s end
  for k = d + 1, v:dim() do shape[#shape + 1] = v:size(k) end
  return v:index_select(d, t:reshape(-1)):view(shape)
end

-- x's subscript by entries 1 to last of key; an assignment takes no tensor entry.
local function apply(x, key, last, assigning)
  local v, d, took = x, 1, false
  for i = 1, last do
    local e = key[i]
    local te = type(e)
    if te == "number" then
      v = v:select(d, position(i, e, v:size(d)))
    elseif te == "table" then
      v = range(v, d, i, e)
      d = d + 1
    elseif is_tensor(e) then
      if assigning then
        raise(format("index: entry %d is a tensor; an assignment takes numbers and ranges only "
                     .. "(x[mask] = v assigns through a bool mask)", i))
      end
      if took then raise("index: at most one tensor entry in a subscript table") end
      took = true
      local before = v:dim()
      v = take(v, d, i, e)
      d = d + 1 + v:dim() - before
    else
      raise(format("index: entry %d must be an integer, a range table or an index tensor, got a %s", i,
                   typename(e)))
    end
  end
  return v
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
  local v = apply(x, key, n, true)
  local tv = type(value)
  if tv == "boolean" then value, tv = value and 1 or 0, "number" end
  if tv == "number" then
    v:fill_(value)
  elseif is_tensor(value) then
    v:copy_(value)
  else
    bad_arg("index", "a number, a boolean or a tensor to assign", value)
  end
end

return M
