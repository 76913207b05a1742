-- Errors: messages that name the op and the shapes, raised at the script's line, and a
-- runtime that keeps working afterwards; stale and forged handles are errors, not
-- crashes.
local H = require("harness")
local dl = require("dlua")
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local C = core.C

H.test("errors point at the script's line", function()
  local a, b = dl.ones(2, 3), dl.ones(4, 5)
  local line
  H.at(H.raises(function() line = H.line() local y = dl.matmul(a, b) return y end,
    "matmul: shapes (2, 3) and (4, 5) cannot be multiplied"), line)
  H.at(H.raises(function() line = H.line() local y = a:matmul(b) return y end, "matmul: shapes (2, 3)"), line)
  H.at(H.raises(function() line = H.line() local y = a + b return y end,
    "add: shapes (2, 3) and (4, 5) cannot be broadcast"), line)
  H.at(H.raises(function() line = H.line() local y = 2 * a + {} return y end,
    "add: expected a tensor or a number, got table"), line)
  H.at(H.raises(function() line = H.line() local y = a:sum(5) return y end, "sum: dimension 5 out of range"), line)
  H.at(H.raises(function() line = H.line() local y = dl.ones(3)[7] return y end, "index: index 7 out of range"), line)
  H.at(H.raises(function() line = H.line() local y = a[3] return y end, "select: index 3 out of range"), line)
  H.at(H.raises(function() line = H.line() a[1] = "x" end, "index: expected a number"), line)
  H.at(H.raises(function() line = H.line() local y = a > 0 return y end, "ambiguous"), line)
  H.at(H.raises(function() line = H.line() local y = dl.tensor({ { 1 }, { 1, 2 } }) return y end,
    "tensor: inconsistent sizes"), line)
  H.at(H.raises(function() line = H.line() local y = dl.zeros(2, { dtype = "bad" }) return y end,
    "zeros: unknown dtype 'bad'"), line)
  H.at(H.raises(function() line = H.line() local y = a:view(7) return y end, "view: shape (7,) is invalid"), line)
  H.at(H.raises(function() line = H.line() local y = tostring(a.nope) return y end,
    "tensor: no method or property 'nope'"), line)
end)

H.test("an error inside a user function points at that function's line", function()
  local line
  local function model(x)
    line = H.line() local h = x:matmul(dl.ones(5, 2))
    return h
  end
  H.at(H.raises(function() local y = model(dl.ones(2, 3)) return y end, "matmul: shapes (2, 3) and (5, 2)"), line)
end)

H.test("argument types are checked and named", function()
  local x = dl.ones(2)
  H.raises(function() return x + {} end, "add: expected a tensor or a number, got table")
  H.raises(function() return x - "1" end, "sub: expected a tensor or a number, got string")
  H.raises(function() return x * true end, "mul: expected a tensor or a number, got boolean")
  H.raises(function() return dl.exp("x") end, "exp: expected a tensor, got string")
  H.raises(function() return dl.sum(nil) end, "sum: expected a tensor, got nil")
  H.raises(function() return x:select("a", 1) end, "select: expected an integer dimension, got string")
  H.raises(function() return x:select(1, 1.5) end, "select: expected an integer index, got 1.5")
  H.raises(function() return x:view({ 1, {} }) end, "view: expected an integer size, got table")
  H.raises(function() return dl.cat({ x, {} }) end, "cat: element 2 of the list is a table, expected a tensor")
  H.raises(function() return x:masked_fill(x:gt(0), "a") end, "masked_fill: expected a number, got string")
  H.raises(function() return dl.ones(2):matmul({}) end, "matmul: expected a tensor, got table")
  H.raises(function() return dl.softmax(x, 1.5) end, "softmax: expected an integer dimension, got 1.5")
end)

H.test("the runtime keeps working after errors", function()
  for i = 1, 200 do
    pcall(function() return dl.ones(2, 3) + dl.ones(3, 2) end)
    pcall(function() return dl.ones(2):view(3) end)
    pcall(function() return dl.tensor({ "x" }) end)
  end
  H.values(dl.ones(2, 2):matmul(dl.ones(2, 2)), { { 2, 2 }, { 2, 2 } })
end)

H.test("stale and forged handles are errors, never crashes", function()
  local x = dl.ones(3)
  local id = T.hid(x)         -- a handle (small tensors start inline)
  ffi.gc(x, nil)              -- take the finalizer off, then release by hand
  C.dl_release_id(id)
  H.raises(function() return x + 1 end, "add: invalid tensor (released, or not a dlua tensor)")
  H.raises(function() return x[1] end, "index: invalid tensor")
  H.raises(function() return x.shape end, "tensor: invalid tensor")
  H.raises(function() return tostring(x) end, "invalid tensor")
  C.dl_release_id(id)         -- a second release does nothing
  local y = dl.ones(3)        -- may reuse the slot: the old id must not reach it
  H.raises(function() return x:sum() end, "invalid tensor")
  H.values(y, { 1, 1, 1 })
  local forged = T.Tensor(2 ^ 52 + 12345)   -- a value naming no live handle
  H.raises(function() return forged * 2 end, "mul: invalid tensor")
  H.raises(function() return dl.cat({ y, forged }) end, "cat: invalid tensor")
  -- the C ABI itself, with bad ids, malformed inline values and bad op ids
  local bad = T.Tensor(0xffffffff)    -- a value naming a handle that does not exist
  local malformed = T.Tensor()        -- id 0 and an inline header that describes nothing
  local out = T.Tensor()
  H.eq(C.dl_unary(core.ops.exp.id, bad, out), -1)
  H.ok(string.find(ffi.string(C.dl_last_error()), "exp: invalid tensor", 1, true))
  H.eq(C.dl_unary(core.ops.exp.id, malformed, out), -1)
  H.ok(string.find(ffi.string(C.dl_last_error()), "exp: invalid tensor", 1, true))
  H.eq(C.dl_binary(core.ops.add.id, y, malformed, out), -1)
  H.ok(string.find(ffi.string(C.dl_last_error()), "add: invalid tensor", 1, true))
  H.eq(C.dl_unary(9999, y, out), -1)
  H.ok(string.find(ffi.string(C.dl_last_error()), "unknown op id 9999", 1, true))
  H.eq(C.dl_binary(core.ops.exp.id, y, y, out), -1)
  H.ok(string.find(ffi.string(C.dl_last_error()), "exp is not in this op family", 1, true))
  H.eq(C.dl_ndim(bad), -1)
  H.eq(C.dl_numel(malformed), -1)
  H.eq(C.dl_promote(malformed), 0ULL)
  H.ok(string.find(ffi.string(C.dl_last_error()), "invalid tensor", 1, true))
  H.eq(C.dl_deliver(0xffffffff, out), -1)
  H.eq(C.dl_valid(0), 0)
  H.eq(C.dl_valid(T.hid(y)), 1)
  local buf = ffi.new("double[4]")
  H.eq(C.dl_read(y, buf, 7), -1)
  H.ok(string.find(ffi.string(C.dl_last_error()), "read: the tensor has 3 elements, not 7", 1, true))
  H.eq(C.dl_get1(bad, 1, buf), -1)
  H.eq(C.dl_meta_get(bad, ffi.new("dl_meta")), -1)
  H.eq(C.dl_empty(nil, 9, 4, nil), 0ULL)
  H.ok(string.find(ffi.string(C.dl_last_error()), "empty: at most 8 dimensions", 1, true))
  H.eq(C.dl_to(T.hid(y), 17), 0ULL)
  H.ok(string.find(ffi.string(C.dl_last_error()), "to: unknown dtype code 17", 1, true))
  C.dl_release(bad)
  C.dl_release_id(0)
  H.values(y + 1, { 2, 2, 2 })
end)

H.test("the engine's errors carry their kind", function()
  H.eq(C.dl_empty(ffi.new("int64_t[1]", { -1 }), 1, 4, nil), 0ULL)
  H.eq(C.dl_last_error_kind(), 0, "Value")
  H.eq(C.dl_to(T.hid(dl.ones(1)), 99), 0ULL)
  H.eq(C.dl_last_error_kind(), 1, "Type")
  H.eq(C.dl_get1(dl.ones(1), 5, ffi.new("double[1]")), -1)
  H.eq(C.dl_last_error_kind(), 2, "Index")
end)

H.run()
