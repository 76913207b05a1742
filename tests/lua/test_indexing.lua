-- Views and indexing, 1-based (docs/tensors.md, "Indexing and views").
local H = require("harness")
local dl = require("dlua")

local function m23() return dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }) end

H.test("x[i] is 1-based, negative from the end, a number for 1-D", function()
  local v = dl.tensor({ 10, 20, 30 })
  H.eq(v[1], 10)
  H.eq(v[3], 30)
  H.eq(v[-1], 30)
  H.eq(v[-3], 10)
  H.eq(type(v[2]), "number")
  H.eq(dl.tensor({ true, false })[1], true)
  H.eq(dl.tensor({ true, false })[2], false)
  H.eq(dl.tensor({ 7 }, { dtype = "int64" })[1], 7)
  local m = m23()
  H.values(m[1], { 1, 2, 3 })
  H.values(m[-1], { 4, 5, 6 })
  H.eq(m[2][3], 6)
  H.raises(function() return v[4] end, "index: index 4 out of range for dimension 1 of size 3")
  H.raises(function() return v[0] end, "index: index 0 out of range for dimension 1 of size 3")
  H.raises(function() return v[-4] end, "index: index -4 out of range")
  H.raises(function() return v[1.5] end, "index: expected an integer index, got 1.5")
  H.raises(function() return m[3] end, "select: index 3 out of range for dimension 1 of size 2")
  H.raises(function() return dl.tensor(1)[1] end, "select: cannot be applied to a 0-dim tensor")
end)

H.test("x[i] = v writes in place", function()
  local v = dl.zeros(4)
  v[1] = 5
  v[-1] = 7
  v[2] = true
  H.values(v, { 5, 1, 0, 7 })
  local m = dl.zeros(2, 3)
  m[2] = 9                              -- fills the row
  H.values(m, { { 0, 0, 0 }, { 9, 9, 9 } })
  m[1] = dl.tensor({ 1, 2, 3 })         -- copies a row
  H.values(m, { { 1, 2, 3 }, { 9, 9, 9 } })
  m[1] = dl.tensor(4)                   -- broadcasts
  H.values(m, { { 4, 4, 4 }, { 9, 9, 9 } })
  m[2][2] = -1
  H.values(m, { { 4, 4, 4 }, { 9, -1, 9 } })
  local i = dl.zeros(2, { dtype = "int64" })
  i[1] = 3.7                            -- converted as the engine converts: truncation
  H.eq(i[1], 3)
  H.raises(function() v[5] = 1 end, "index: index 5 out of range for dimension 1 of size 4")
  H.raises(function() v[1] = "x" end, "index: expected a number, a boolean or a tensor to assign, got string")
  H.raises(function() m[1] = dl.ones(4) end, "copy_: shapes (3,) and (4,) cannot be broadcast")
end)

H.test("select, narrow, slice (stop inclusive)", function()
  local m = m23()
  H.values(m:select(1, 2), { 4, 5, 6 })
  H.values(m:select(2, 1), { 1, 4 })
  H.values(m:select(-1, -1), { 3, 6 })
  H.values(m:narrow(2, 2, 2), { { 2, 3 }, { 5, 6 } })
  H.values(m:narrow(1, 1, 1), { { 1, 2, 3 } })
  H.values(m:narrow(2, 4, 0), { {}, {} })
  local r = dl.arange(1, 11)
  H.values(r:slice(1, 2, 4), { 2, 3, 4 })
  H.values(r:slice(1, 1, -1, 3), { 1, 4, 7, 10 })
  H.values(r:slice(1, -3), { 8, 9, 10 })
  H.values(r:slice(1, -3, -2), { 8, 9 })
  H.values(r:slice(1, 8, 100), { 8, 9, 10 }, { shape = { 3 } })   -- clamped, as Python slices
  H.values(r:slice(1, 5, 5), { 5 })
  H.values(r:slice(1, 6, 5), {}, { shape = { 0 } })
  H.values(m:slice(2, 2), { { 2, 3 }, { 5, 6 } })
  H.raises(function() return m:select(3, 1) end, "select: dimension 3 out of range for a tensor of 2 dimensions")
  H.raises(function() return m:select(2, 4) end, "select: index 4 out of range for dimension 2 of size 3")
  H.raises(function() return m:narrow(2, 2, 3) end, "narrow: start 2 with length 3 goes past the end of dimension 2 of size 3")
  H.raises(function() return r:slice(1, 1, 5, 0) end, "slice: step must be positive, got 0")
  H.raises(function() return m:narrow(2, "a", 1) end, "narrow: expected an integer start, got string")
end)

H.test("views share storage", function()
  local x = dl.zeros(2, 3)
  local row = x[2]
  row[3] = 5
  H.eq(x[2][3], 5, "a row view writes into x")
  x:select(2, 1):fill_(1)
  H.values(x, { { 1, 0, 0 }, { 1, 0, 5 } })
  local v = x:view(6)
  v[2] = 7
  H.eq(x[1][2], 7, "view")
  local t = x:t()
  t[3][1] = 8
  H.eq(x[1][3], 8, "transpose")
  x:narrow(2, 2, 2):zero_()
  H.values(x, { { 1, 0, 0 }, { 1, 0, 0 } })
  local sl = dl.arange(6):slice(1, 1, -1, 2)
  H.values(sl, { 0, 2, 4 })
  local base = dl.zeros(6)
  base:slice(1, 2, 6, 2):fill_(1)
  H.values(base, { 0, 1, 0, 1, 0, 1 })
  local u = dl.zeros(3)
  u:unsqueeze(1)[1][2] = 4
  H.eq(u[2], 4, "unsqueeze")
  local e = dl.zeros(1, 3)
  H.values(e:expand(2, 3), { { 0, 0, 0 }, { 0, 0, 0 } })
  e[1][1] = 2
  H.values(e:expand(2, 3), { { 2, 0, 0 }, { 2, 0, 0 } }, nil)
end)

H.test("view, reshape, flatten, t, transpose, permute", function()
  local x = dl.arange(1, 7)
  H.values(x:view(2, 3), { { 1, 2, 3 }, { 4, 5, 6 } })
  H.values(x:view({ 3, 2 }), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
  H.values(x:view(-1, 2), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
  H.values(x:reshape(3, -1), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
  H.values(x:view(2, 3):t():reshape(6), { 1, 4, 2, 5, 3, 6 }, nil)
  H.values(x:view(2, 3):t():flatten(), { 1, 4, 2, 5, 3, 6 })
  H.eq(dl.zeros(2, 3, 4):flatten(2):size(), { 2, 12 })
  H.eq(dl.zeros(2, 3, 4):flatten(1, 2):size(), { 6, 4 })
  H.eq(dl.zeros(2, 3, 4):transpose(1, 3):size(), { 4, 3, 2 })
  H.eq(dl.zeros(2, 3, 4):transpose(-1, -2):size(), { 2, 4, 3 })
  H.eq(dl.zeros(2, 3, 4):permute(3, 1, 2):size(), { 4, 2, 3 })
  H.eq(dl.zeros(2, 3, 4):permute({ 2, 3, 1 }):size(), { 3, 4, 2 })
  H.values(x:view(2, 3):permute(2, 1), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
  H.values(dl.tensor({ 1, 2 }):t(), { 1, 2 }, nil)
  H.eq(x:view(2, 3):view_as(dl.zeros(3, 2)):size(), { 3, 2 })
  H.eq(x:reshape_as(dl.zeros(6, 1)):size(), { 6, 1 })
  H.raises(function() return x:view(4, 2) end, "view: shape (4, 2) is invalid")
  H.raises(function() return x:view(2, 3):t():view(6) end, "view: shape (6,) is not compatible")
  H.raises(function() return x:view(2.5, 2) end, "view: expected an integer size, got 2.5")
  H.raises(function() return dl.zeros(2, 2, 2):t() end, "t: expected a tensor with at most 2 dimensions, got shape (2, 2, 2)")
  H.raises(function() return dl.zeros(2, 3):permute(1, 1) end, "permute: dim 1 appears twice")
  H.raises(function() return dl.zeros(2, 3):permute(1) end, "permute: expected 2 dims for a tensor of shape (2, 3), got 1")
  H.raises(function() return dl.zeros(2, 3):transpose(1, 3) end, "transpose: dimension 3 out of range")
end)

H.test("expand, squeeze, unsqueeze", function()
  local c = dl.tensor({ { 1 }, { 2 } })
  H.values(c:expand(2, 3), { { 1, 1, 1 }, { 2, 2, 2 } })
  H.values(c:expand(-1, 2), { { 1, 1 }, { 2, 2 } })
  H.values(c:expand({ 2, 2, 2 }), { { { 1, 1 }, { 2, 2 } }, { { 1, 1 }, { 2, 2 } } })
  H.values(c:expand_as(dl.zeros(2, 2)), { { 1, 1 }, { 2, 2 } })
  H.eq(dl.zeros(1, 3, 1):squeeze():size(), { 3 })
  H.eq(dl.zeros(1, 3, 1):squeeze(1):size(), { 3, 1 })
  H.eq(dl.zeros(1, 3, 1):squeeze(-1):size(), { 1, 3 })
  H.eq(dl.zeros(1, 3, 1):squeeze(2):size(), { 1, 3, 1 })
  H.eq(dl.zeros(3):unsqueeze(1):size(), { 1, 3 })
  H.eq(dl.zeros(3):unsqueeze(2):size(), { 3, 1 })
  H.eq(dl.zeros(3):unsqueeze(-1):size(), { 3, 1 })
  H.eq(dl.zeros(2, 3):unsqueeze(2):size(), { 2, 1, 3 })
  H.raises(function() return c:expand(3, 3) end, "expand: the size 3 must match the existing size 2")
  H.raises(function() return dl.zeros(3):unsqueeze(3) end, "unsqueeze: dimension 3 out of range for a tensor of 2 dimensions")
end)

H.test("cat and stack", function()
  local a, b = dl.tensor({ { 1, 2 } }), dl.tensor({ { 3, 4 } })
  H.values(dl.cat({ a, b }), { { 1, 2 }, { 3, 4 } })
  H.values(dl.cat({ a, b }, 1), { { 1, 2 }, { 3, 4 } })
  H.values(dl.cat({ a, b }, 2), { { 1, 2, 3, 4 } })
  H.values(dl.cat({ a, b }, -1), { { 1, 2, 3, 4 } })
  H.values(dl.cat({ dl.tensor({ 1 }), dl.tensor({ 2, 3 }, { dtype = "float64" }) }), { 1, 2, 3 }, { dtype = "float64" })
  H.values(dl.stack({ dl.tensor({ 1, 2 }), dl.tensor({ 3, 4 }) }), { { 1, 2 }, { 3, 4 } })
  H.values(dl.stack({ dl.tensor({ 1, 2 }), dl.tensor({ 3, 4 }) }, 2), { { 1, 3 }, { 2, 4 } })
  H.values(dl.stack({ dl.tensor(1), dl.tensor(2) }), { 1, 2 })
  H.raises(function() return dl.cat({}) end, "cat: expected a non-empty list of tensors")
  H.raises(function() return dl.cat({ a, 5 }) end, "cat: element 2 of the list is a number, expected a tensor")
  H.raises(function() return dl.cat(a) end, "cat: expected a list of tensors, got tensor")
  H.raises(function() return dl.cat({ a, dl.ones(1, 3) }, 1) end, "cat:")
  H.raises(function() return dl.stack({ dl.ones(2), dl.ones(3) }) end, "stack:")
  H.raises(function() return dl.cat({ a, b }, 3) end, "cat: dimension 3 out of range for a tensor of 2 dimensions")
end)

H.test("index_select and gather take 1-based indices", function()
  local m = dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  H.values(m:index_select(2, dl.tensor({ 3, 1 }, { dtype = "int64" })), { { 3, 1 }, { 6, 4 } })
  H.values(m:index_select(1, { 2, 2, 1 }), { { 4, 5, 6 }, { 4, 5, 6 }, { 1, 2, 3 } })
  H.values(m:index_select(-1, dl.tensor({ 2 }, { dtype = "int32" })), { { 2 }, { 5 } })
  local idx = dl.tensor({ { 3, 1 }, { 2, 2 } }, { dtype = "int64" })
  H.values(m:gather(2, idx), { { 3, 1 }, { 5, 5 } })
  H.values(m:gather(1, dl.tensor({ { 2, 1, 2 } }, { dtype = "int64" })), { { 4, 2, 6 } })
  H.values(dl.zeros(2, 3):scatter_add(2, idx, dl.ones(2, 2)), { { 1, 0, 1 }, { 0, 2, 0 } })
  H.raises(function() return m:index_select(2, { 4 }) end,
    "index_select: index 4 out of range for dimension 2 of size 3 (indices are 1-based)")
  H.raises(function() return m:index_select(2, { 0 }) end, "index_select: index 0 out of range for dimension 2 of size 3")
  H.raises(function() return m:index_select(2, dl.tensor({ 1 })) end,
    "index_select: expected an int64 or int32 index tensor, got float32")
  H.raises(function() return m:gather(2, dl.tensor({ { 4 } }, { dtype = "int64" })) end,
    "gather: index 4 out of range for dimension 2 of size 3")
  H.raises(function() return m:index_select(2, "x") end, "index_select: expected an index tensor or a list of indices, got string")
end)

H.test("where and masked_fill", function()
  local x = dl.tensor({ -1, 2, -3, 4 })
  local pos = x:gt(0)
  H.values(dl.where(pos, x, dl.zeros(4)), { 0, 2, 0, 4 })
  H.values(dl.where(pos, x, 0), { 0, 2, 0, 4 }, { dtype = "float32" })
  H.values(dl.where(pos, 1, -1), { -1, 1, -1, 1 }, { dtype = "int64" })
  H.values(dl.where(pos, 0.5, x), { -1, 0.5, -3, 0.5 }, { dtype = "float32" })
  H.values(dl.where(dl.tensor({ { true }, { false } }), dl.tensor({ 1, 2 }), dl.tensor({ 3, 4 })), { { 1, 2 }, { 3, 4 } })
  H.values(x:where(pos, -x), { 1, 2, 3, 4 })                      -- x where pos, else -x
  H.values(x:masked_fill(x:lt(0), 0), { 0, 2, 0, 4 })
  H.values(dl.masked_fill(x, x:lt(0), 9), { 9, 2, 9, 4 })
  local y = x:clone()
  H.ok(rawequal(y:masked_fill_(y:gt(0), -5), y))
  H.values(y, { -1, -5, -3, -5 })
  -- A number beside a tensor takes its dtype where that holds it (PyTorch's wrapped numbers):
  -- 0.1 in float64 is float64's 0.1, not float32's, and 1e300 is not infinity.
  local d = dl.tensor({ 1, 2 }, { dtype = "float64" })
  H.eq(dl.where(d:gt(1), 0.1, d)[2], 0.1)
  H.eq(dl.where(d:gt(1), d, 1e300)[1], 1e300)
  H.ok(dl.allclose(dl.tensor({ 0.1 }, { dtype = "float64" }), 0.1, 0, 0))
  local i32 = dl.tensor({ 1, 2 }, { dtype = "int32" })
  H.eq(dl.where(i32:gt(1), 5, i32).dtype, "int32")
  H.eq(dl.where(i32:gt(1), 0.5, i32).dtype, "float32")
  H.eq(dl.where(dl.tensor({ 1, 2 }, { dtype = "float16" }):gt(1), 7, 0).dtype, "int64")
  H.raises(function() return x:masked_fill(x, 0) end, "masked_fill: expected a bool mask, got float32")
  H.raises(function() return dl.where(pos, x, "a") end, "where: expected a tensor or a number, got string")
  H.raises(function() return dl.where(pos, x, dl.zeros(3)) end, "where: shapes")
end)

H.test("x[{...}] subscripts several dims at once: elements, views, ranges, steps", function()
  local m = dl.arange(1, 13):reshape(3, 4)            -- {{1..4}, {5..8}, {9..12}}
  H.eq(m[{2, 3}], 7)
  H.eq(m[{-1, -1}], 12)
  H.eq(type(m[{1, 1}]), "number")
  H.values(m[{{}, 2}], { 2, 6, 10 })                  -- a column, the dim dropped
  H.values(m[{2}], { 5, 6, 7, 8 })                    -- fewer entries: the rest whole
  H.values(m[{{2, 3}}], { { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })   -- last bound inclusive
  H.values(m[{{2}}], { { 5, 6, 7, 8 } })              -- {i}: the dim kept
  H.values(m[{{1, -1, 2}, {-2, -1}}], { { 3, 4 }, { 11, 12 } })
  H.values(m[{{}, {1, 4, 3}}], { { 1, 4 }, { 5, 8 }, { 9, 12 } })
  H.eq(m[{{3, 2}}]:size(1), 0)                        -- an empty range, as slice
  H.ok(rawequal(m[{}], m))
  H.ok(dl.equal(m[{{}, 2}], m:select(2, 2)))
  H.ok(dl.equal(m[{{2, 3}, {2, 4, 2}}], m:slice(1, 2, 3):slice(2, 2, 4, 2)))
  local col = m[{{}, 3}]                              -- a view: writes reach m
  col[1] = 30
  H.eq(m[{1, 3}], 30)
  local cube = dl.arange(24):reshape(2, 3, 4)
  H.values(cube[{2, {}, -1}], { 15, 19, 23 })
  H.eq(cube[{2, 3, 4}], 23)
end)

H.test("x[{...}] takes one index tensor along a dim (a copy, as index_select)", function()
  local m = dl.arange(1, 13):reshape(3, 4)
  local i64 = function(t) return dl.tensor(t, { dtype = "int64" }) end
  H.values(m[{{}, i64({ 4, 1 })}], { { 4, 1 }, { 8, 5 }, { 12, 9 } })
  H.values(m[{{}, dl.tensor({ true, false, false, true })}], { { 1, 4 }, { 5, 8 }, { 9, 12 } })
  H.values(m[{i64({ 3 }), {2, 3}}], { { 10, 11 } })
  local picked = m[{{}, i64({ { 1, 2 }, { 3, 4 } })}]   -- the index's dims in place of dim 2
  H.eq(table.concat(picked.shape, ","), "3,2,2")
  H.values(picked[3], { { 9, 10 }, { 11, 12 } })
  picked[{1, 1, 1}] = 0                               -- a copy: m unchanged
  H.eq(m[{1, 1}], 1)
end)

H.test("x[{...}] = v fills or copies into the subscript, in place", function()
  local m = dl.zeros(3, 4)
  m[{{}, 2}] = 5
  m[{1, 1}] = -1
  m[{{2, 3}, {3, 4}}] = dl.tensor({ 7, 8 })           -- broadcast over the rows
  m[{3, 4}] = true
  m[{{1}, {3, 4}}] = dl.tensor({ { 1, 2 } })
  H.values(m, { { -1, 5, 1, 2 }, { 0, 5, 7, 8 }, { 0, 5, 7, 1 } })
  m[{}] = 0
  H.values(m:sum(), 0)
end)

H.test("x[{...}] carries the gradient, and compiles as eagerly", function()
  local x = dl.arange(12):reshape(3, 4):float()
  local g = dl.grad(function(x)
    return (x[{{}, 2}] * 3):sum() + x[{1, 1}] * 2 + x[{{2, 3}, {1, 4, 3}}]:sum()
  end)(x)
  H.values(g, { { 2, 3, 0, 0 }, { 1, 3, 0, 1 }, { 1, 3, 0, 1 } })
  local y = dl.randn(64, 80)
  local function f(x)
    local z = x * 2 + 1
    local r = z[{{2, 40, 3}, 2}] + z[{1, {2, 14}}]
    z[{{}, 5}] = 0
    return r, z[{{5, 9}, {}}]:sum(), z[{3, 5}]
  end
  for _, opts in ipairs({ {}, { defer_small = true } }) do
    local cf = dl.compile(f, opts)
    for _ = 1, 3 do
      local a, b, c = cf(y)
      local ea, eb, ec = f(y)
      H.ok(dl.equal(a, ea) and dl.equal(b, eb) and c == ec)
    end
  end
end)

H.test("a bad subscript table names the entry and what was wrong", function()
  local m = dl.zeros(3, 4)
  H.raises(function() return m[{1, 2, 3}] end, "index: 3 entries for a tensor of 2 dims (shape (3, 4))")
  H.raises(function() return m[{5}] end, "index: entry 1: index 5 out of range for dimension 1 of size 3")
  H.raises(function() return m[{{}, 0}] end, "index: entry 2: index 0 out of range for dimension 2 of size 4")
  H.raises(function() return m[{1.5}] end, "index: entry 1 must be an integer, got 1.5")
  H.raises(function() return m[{math.huge}] end, "index: entry 1 must be an integer, got inf")
  H.raises(function() return m[{{1, math.huge}}] end, "index: entry 1's bounds must be integers, got 1 and inf")
  H.raises(function() return m[{{1, 2, 3, 4}}] end, "index: entry 1 must be {}, {i}, {first, last} or {first, last, step}")
  H.raises(function() return m[{{1, 2, 0}}] end, "index: entry 1's step must be a positive integer, got 0")
  H.raises(function() return m[{{1, nil, 2}}] end, "index: entry 1 has a step but no last bound")
  H.raises(function() return m[{"a"}] end, "index: entry 1 must be an integer, a range table or an index tensor, got a string")
  H.raises(function() return m[{[2] = 1}] end, "index: a subscript table is a list of entries, one per dim; it has the key 2")
  H.raises(function() return m[{{}, dl.tensor({ 1.0 })}] end, "index: entry 2 must be an integer or bool tensor, got float32")
  H.raises(function() return m[{{}, dl.tensor({ true })}] end, "index: entry 2 is a bool mask of shape (1,) for dim 2 of size 4")
  local i1 = dl.tensor({ 1 }, { dtype = "int64" })
  H.raises(function() return m[{i1, i1}] end, "index: at most one tensor entry in a subscript table")
  H.raises(function() m[{i1, i1}] = 1 end, "index: at most one tensor entry in a subscript table")
  H.raises(function() m[{1}] = "x" end, "index: expected a number, a boolean or a tensor to assign, got string")
  H.raises(function() return m[true] end, "tensor: no method or property 'true'")
  H.values(m:sum(), 0)                                -- and m is as it was
end)

H.test("an empty view whose offset is past any memory still reads and computes", function()
  -- Strides of 2^62 and 2^31 (a (0, 2^31, 2^31) tensor), narrowed at the ends of both
  -- large dims: its offset, 2^62 + 2^31 elements, is more bytes than int64 holds. Found
  -- by fuzz_breadth (tests/fuzz/regressions/breadth/empty-view-offset-bytes-overflow).
  local z = dl.zeros(0, 2 ^ 31, 2 ^ 31):narrow(2, 2 ^ 31 + 1, 0):narrow(3, 2 ^ 31 + 1, 0)
  H.eq(z:numel(), 0)
  H.values(z:sum(), 0)
  H.eq(#(z + 1).shape, 3)
  H.eq(z:clone():numel(), 0)
  H.eq(tostring(z:contiguous()), "tensor([], shape=(0, 0, 0), dtype=float32)")
end)

H.test("views changed in place: t_, transpose_, squeeze_, unsqueeze_, set_, resize_ (every reference sees them)", function()
  local x = dl.arange(6):view(2, 3)
  local alias, held = x, { x }
  local flat = x:view(-1)
  H.ok(rawequal(x:t_(), x))
  H.shape(alias, { 3, 2 })
  H.shape(held[1], { 3, 2 })
  H.values(x, { { 0, 3 }, { 1, 4 }, { 2, 5 } })
  flat[2] = 10                                   -- the storage is still shared
  H.eq(x[2][1], 10)
  x:unsqueeze_(1)
  H.shape(x, { 1, 3, 2 })
  x:transpose_(-1, -2):swapaxes_(1, 2)
  H.shape(x, { 2, 1, 3 })
  x:squeeze_(2)
  H.shape(x, { 2, 3 })
  x:unsqueeze_(-1):unsqueeze_(1):squeeze_()
  H.shape(x, { 2, 3 })
  -- a small value held inline becomes a handle first, then changes
  local s = dl.tensor({ 1, 2 })
  local s2 = s
  s:unsqueeze_(2)
  H.shape(s2, { 2, 1 })
  -- set_: x takes y's storage, dtype and view
  local y = dl.zeros(4, { dtype = "float64" })
  local z = dl.ones(2)
  z:set_(y)
  H.eq(z.dtype, "float64")
  y:fill_(7)
  H.values(z, { 7, 7, 7, 7 })
  -- resize_: shrinking a contiguous tensor is a view of its start; growing keeps the
  -- elements in order and fills with 0
  local r = dl.arange(6, { dtype = "float64" })
  local orig = r:view(-1)
  r:resize_(2, 2)
  H.values(r, { { 0, 1 }, { 2, 3 } })
  r[1][1] = 9
  H.eq(orig[1], 9)
  r:resize_({ 3, 2 })
  H.values(r, { { 9, 1 }, { 2, 3 }, { 0, 0 } })
  r:resize_as_(dl.zeros(1, 2))
  H.values(r, { { 9, 1 } })
  r:resize_(0)
  H.eq(r:numel(), 0)
  -- inside a gradient: the view's derivative follows, to the second order
  local w = dl.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, { dtype = "float64" })
  local f = function(a)
    local b = a * a
    b:t_()
    return (b * w):sum()
  end
  local a = dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float64" })
  H.values(dl.grad(f)(a), (a * w:t() * 2):totable())
  H.values(dl.grad(function(v) return dl.grad(f)(v):sum() end)(a), (w:t() * 2):totable())
  -- a trainable Variable refuses (its optimizer state has its shape); a frozen one may change
  local p = dl.Variable(dl.ones(2, 3))
  H.raises(function() p:t_() end, "t_: a Variable that requires a gradient cannot change its view in place")
  H.shape(p, { 2, 3 })
  p:requires_grad_(false)
  p:t_()
  H.shape(p, { 3, 2 })
  -- a resize that copies cannot be differentiated
  H.raises(function() dl.grad(function(v) local u = v * 1; u:resize_(9); return u:sum() end)(dl.ones(2)) end,
           "resize_: x has a gradient history")
  H.raises(function() dl.ones(2):resize_(-1) end, "resize_: sizes must be whole numbers >= 0")
  H.raises(function() dl.ones(2):set_(3) end, "set_: expected a tensor")
  H.raises(function() dl.ones(2, 2, 2):t_() end, "t: ")
  -- compiled: the same as eager, call after call
  local c = dl.compile(function(v) local u = v + 1; u:t_(); u:unsqueeze_(1); return u * 2 end)
  local v = dl.rand(2, 3)
  for _ = 1, 3 do H.ok(dl.equal(c(v), (v + 1):t():unsqueeze(1) * 2)) end
end)

H.run()
