-- Properties and conversion (docs/tensors.md, "Properties and conversion").
local H = require("harness")
local dl = require("dlua")

H.test("shape, dtype, device, dim, numel, size", function()
  local x = dl.zeros(2, 3, 4)
  H.eq(x.shape, { 2, 3, 4 })
  local s = x.shape
  s[1] = 99
  H.eq(x.shape, { 2, 3, 4 }, "x.shape is a fresh table")
  H.eq(x.dtype, "float32")
  H.eq(x.device, "cpu")
  H.eq(x:dim(), 3)
  H.eq(x.ndim, 3)
  H.eq(x:numel(), 24)
  H.eq(x:size(), { 2, 3, 4 })
  H.eq(x:size(1), 2)
  H.eq(x:size(3), 4)
  H.eq(x:size(-1), 4)
  H.eq(x:size(-3), 2)
  H.eq(#x, 2)
  H.eq(x:stride(), { 12, 4, 1 })
  H.eq(x:stride(2), 4)
  local s0 = dl.tensor(5)
  H.eq(s0.shape, {})
  H.eq(s0:dim(), 0)
  H.eq(s0:numel(), 1)
  H.eq(dl.zeros(0, 3):numel(), 0)
  H.raises(function() return x:size(4) end, "size: dimension 4 out of range for a tensor of 3 dimensions")
  H.raises(function() return x:size(0) end, "size: dimension 0 out of range")
  H.raises(function() return x:size(1.5) end, "size: expected an integer dimension, got 1.5")
  H.raises(function() local _ = #s0 end, "len: a 0-dim tensor has no length")
end)

H.test("item and totable", function()
  H.eq(dl.tensor(2.5):item(), 2.5)
  H.eq(dl.tensor({ { 7 } }):item(), 7)
  H.eq(dl.tensor(true):item(), true)
  H.eq(dl.tensor({ 3 }, { dtype = "int64" }):item(), 3)
  H.eq(dl.tensor(0.1, { dtype = "float64" }):item(), 0.1)
  H.near(dl.tensor(0.1):item(), 0.1, 1e-7)
  H.raises(function() return dl.ones(2):item() end, "item: expected a tensor with one element, got shape (2,)")
  H.eq(dl.tensor({ { 1, 2 }, { 3, 4 } }):totable(), { { 1, 2 }, { 3, 4 } })
  H.eq(dl.tensor({ true, false }):totable(), { true, false })
  H.eq(dl.tensor(4):totable(), 4)
  H.eq(dl.zeros(2, 0):totable(), { {}, {} })
  -- a transposed (non-contiguous) tensor reads in its own row-major order
  H.eq(dl.tensor({ { 1, 2 }, { 3, 4 } }):t():totable(), { { 1, 3 }, { 2, 4 } })
end)

H.test("to, float, double, long, int, bool, byte, type", function()
  local x = dl.tensor({ 1.5, -2.5, 0 })
  H.values(x:to("float64"), { 1.5, -2.5, 0 }, { dtype = "float64" })
  H.values(x:double(), { 1.5, -2.5, 0 }, { dtype = "float64" })
  H.values(x:long(), { 1, -2, 0 }, { dtype = "int64" })
  H.values(x:int(), { 1, -2, 0 }, { dtype = "int32" })
  H.values(x:bool(), { true, true, false }, { dtype = "bool" })
  H.values(dl.tensor({ 3, 255 }):byte(), { 3, 255 }, { dtype = "uint8" })
  H.values(x:long():float(), { 1, -2, 0 }, { dtype = "float32" })
  H.values(x:to({ dtype = "int64" }), { 1, -2, 0 }, { dtype = "int64" })
  H.values(x:to(dl.zeros(1, { dtype = "int32" })), { 1, -2, 0 }, { dtype = "int32" })
  H.eq(x:type(), "float32")
  H.eq(x:type("float64").dtype, "float64")
  H.ok(rawequal(x:float(), x), "float() of a float32 tensor is the tensor")
  local y = x:double()
  y[1] = 100
  H.eq(x[1], 1.5, "a conversion copies")
  H.raises(function() return x:to("int7") end, "to: unknown dtype or device 'int7'")
  H.raises(function() return x:to(5) end, "to: expected an options table, got number")
end)

H.test("clone and contiguous", function()
  local x = dl.tensor({ { 1, 2 }, { 3, 4 } })
  local c = x:clone()
  c[1][1] = 9
  H.eq(x[1][1], 1, "clone copies")
  H.ok(x:is_contiguous())
  local t = x:t()
  H.ok(not t:is_contiguous())
  local tc = t:contiguous()
  H.ok(tc:is_contiguous())
  H.values(tc, { { 1, 3 }, { 2, 4 } })
  H.eq(tc:stride(), { 2, 1 })
  H.ok(rawequal(x:contiguous(), x), "contiguous() of a contiguous tensor is the tensor")
end)

H.test("data_ptr: the address of element 0", function()
  local x = dl.zeros(4, { dtype = "float64" })
  local p = x:data_ptr()
  H.eq(type(p), "number")
  H.ok(p > 0 and p % 8 == 0)
  H.eq(x:narrow(1, 2, 2):data_ptr(), p + 8, "a view starts further in the same memory")
end)

H.test("is_tensor, is_floating_point, numel aliases", function()
  H.ok(dl.is_tensor(dl.zeros(1)))
  H.ok(not dl.is_tensor(1))
  H.ok(not dl.is_tensor({}))
  H.ok(dl.zeros(1):is_floating_point())
  H.ok(not dl.zeros(1, { dtype = "int64" }):is_floating_point())
  H.eq(dl.ones(2, 2):nelement(), 4)
  H.eq(dl.numel(dl.ones(3)), 3)
end)

H.test("fields: unknown names are errors, assignments refused", function()
  local t = dl.ones(4)
  H.raises(function() t.h = 1 end, "tensor: cannot set field 'h'")
  H.raises(function() t.shape = { 2 } end, "tensor: cannot set field 'shape'")
  H.raises(function() return t.nosuch end, "tensor: no method or property 'nosuch'")
  H.raises(function() t:nosuch() end, "tensor: no method or property 'nosuch'")
  H.ok(not string.find(tostring(t), "0x"), "tostring shows no address")
  H.eq(getmetatable(t), "ffi", "the metatable is not reachable")
end)

H.test("values read back from C stay right once LuaJIT compiles the caller", function()
  -- Note [Values C writes back] in tensor.lua: two reads of one shared buffer
  -- in one expression gave the first tensor's value for both after some fifty calls.
  local f64 = { dtype = "float64" }
  local A, B = dl.randn(1, 4, 3, f64), dl.randn(4, 4, f64)
  local a, b = dl.tensor({ 1, 5, 2 }), dl.tensor({ 7, 3 })
  local one, two = dl.tensor(1), dl.tensor(2)
  local wrong = {}
  for _ = 1, 300 do
    if B:size(1) == A:size(1) then wrong.size = true end
    if B:stride(1) == A:stride(1) then wrong.stride = true end
    if one:item() == two:item() then wrong.item = true end
    if a[2] == b[1] then wrong.index = true end
    if #dl.linalg.lstsq(A, B).shape ~= 3 then wrong.lstsq = true end
  end
  for what in pairs(wrong) do H.ok(false, what .. " read a stale value") end
end)

H.run()
