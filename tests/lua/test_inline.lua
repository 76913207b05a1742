-- Small tensors held inline in their Lua value (Note [Small tensors inline] in
-- bindings/value.cpp): which tensors are, that they behave exactly as handles do (values,
-- aliasing, in-place writes, gradients), and that the ops' fast path on them computes
-- the very values of the general path.
local H = require("harness")
local dl = require("dlua")
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local C = core.C

local function inline(x) return x.id == 0 end
local function live_handles() return dl.memory_stats().tensors end

H.test("small plain results live inline, the rest are handles", function()
  local a, b = dl.rand(16), dl.rand(16)
  H.ok(inline(a) and inline(b), "dl.rand(16) is inline")
  H.ok(inline(a + b) and inline(a * 2) and inline(-a) and inline(a:exp()) and inline(a:lt(b)))
  H.ok(inline(a:sum()) and inline(dl.tensor(3)) and inline(dl.zeros(2, 2, "float64")))
  H.ok(inline(dl.ones(64, "bool")), "64 bools fit")
  H.ok(not inline(dl.ones(17)), "17 float32 are 68 bytes: a handle")
  H.ok(not inline(dl.ones(9, "float64")))
  H.ok(not inline(dl.zeros(0, 300)), "a size above 255 does not fit the header")
  H.ok(inline(dl.zeros(0, 3)), "an empty tensor fits")
  -- a view shares its base's storage: never inline
  local big = dl.arange(0, 100)
  H.ok(not inline(big:narrow(1, 1, 4)))
  -- small results that carry a gradient's history are inline too, on the tape
  dl.grad(function(x)
    local y = x * 2
    H.ok(inline(y) and y.inl_arena ~= 0, "a recorded result is inline, in an arena")
    H.ok(inline(dl.ones(3) * 2) and (dl.ones(3) * 2).inl_arena == 0, "an unrecorded one is plain")
    H.ok(not inline(dl.ones(17) * x:sum()), "a large recorded result is a handle")
    return y:sum()
  end)(dl.ones(3))
end)

H.test("inline tensors take no handle and no finalizer", function()
  collectgarbage("collect")
  local before = live_handles()
  local a, b = dl.rand(16), dl.rand(16)
  local c
  for _ = 1, 1000 do c = a + b end
  H.eq(live_handles(), before, "handles made by 1000 small adds")
  H.values(c, (a + b):totable())
end)

H.test("aliasing survives promotion: views and in-place writes see one tensor", function()
  local x = dl.tensor({ 1, 2, 3, 4 })
  H.ok(inline(x))
  local v = x:view(2, 2)        -- x becomes a handle here, in place
  H.ok(not inline(x))
  v:add_(10)
  H.values(x, { 11, 12, 13, 14 })
  x[1] = 0
  H.values(v, { { 0, 12 }, { 13, 14 } })
  -- every Lua reference to the value is the same object, so all see the promotion
  local y = dl.tensor({ 1, 2 })
  local alias = y
  y:mul_(3)
  H.values(alias, { 3, 6 })
  local t = { y }
  t[1]:add_(1)
  H.values(y, { 4, 7 })
  -- an inline value stays what it was when a result computed from it changes
  local s = dl.tensor({ 1, 2 })
  local r = s + 0
  r:add_(5)
  H.values(s, { 1, 2 })
  H.values(r, { 6, 7 })
end)

H.test("a promoted tensor's handle is released by the collector", function()
  collectgarbage("collect")
  local before = live_handles()
  do
    local xs = {}
    for i = 1, 100 do
      xs[i] = dl.ones(4)
      xs[i]:add_(i)             -- promotes
    end
    H.eq(live_handles(), before + 100)
    H.eq(xs[100][1], 101)
  end
  collectgarbage("collect")
  collectgarbage("collect")
  H.eq(live_handles(), before)
end)

-- NaN-aware exact equality of two tables of numbers.
local function same_bits(a, b, what)
  H.eq(#a, #b, what)
  for i = 1, #a do
    local x, y = a[i], b[i]
    if type(x) == "table" then
      same_bits(x, y, what)
    elseif not (x == y or (x ~= x and y ~= y)) then
      error(what .. ": element " .. i .. ": " .. tostring(x) .. " vs " .. tostring(y), 2)
    end
  end
end

-- The fast path (small contiguous operands) against the general one (the same values
-- as a transposed view, which the fast path does not take), for every op of the
-- pointwise families, in float32 and float64: the same functors, so the same bits.
H.test("every pointwise op computes the general path's values on small tensors", function()
  local vals = { -2.5, -1, -0.5, -0.0, 0, 0.25, 0.5, 1, 1.5, 2, 3, 7.5, 1e-3, -1e3, 0 / 0, 1 / 0 }
  local cases = 0
  for _, dt in ipairs({ "float32", "float64" }) do
    local n = dt == "float32" and 4 or 2          -- 16 float32 or 8 float64: inline
    local flat_a, flat_b = {}, {}
    for i = 1, 4 * n do
      flat_a[i] = vals[i]
      flat_b[i] = vals[(i * 7) % 16 + 1]
    end
    local A = dl.tensor(flat_a, dt):view(n, 4):t()   -- (4, n) views: the general path
    local B = dl.tensor(flat_b, dt):view(n, 4):t()
    local a, b = A:contiguous(), B:contiguous()      -- the same values, inline
    H.ok(inline(a) and inline(b) and not A:is_contiguous())
    local s0 = dl.tensor(1.5, dt)                     -- a 0-d operand
    for _, op in ipairs(core.op_list) do
      local f, name = T.F[op.name], dt .. " " .. op.name
      if op.family == "unary" then
        local ok, fast = pcall(f, a)
        if ok then
          H.ok(inline(fast), name)
          same_bits(fast:totable(), f(A):totable(), name)
          cases = cases + 1
        end
      elseif (op.family == "binary" and bit.band(op.flags, core.FLAG_INT_ONLY) == 0) or op.family == "compare" then
        local pairs_ = {
          { a, b, A, B }, { a, 2.5, A, 2.5 }, { 2.5, a, 2.5, A }, { a, s0, A, s0 }, { s0, a, s0, A },
          { a, -3, A, -3 },
        }
        for k, p in ipairs(pairs_) do
          local fast = f(p[1], p[2])
          H.ok(inline(fast), name .. " case " .. k)
          same_bits(fast:totable(), f(p[3], p[4]):totable(), name .. " case " .. k)
          cases = cases + 1
        end
      end
    end
  end
  H.ok(cases > 200, "cases: " .. cases)
end)

H.test("mixed dtypes, integers and broadcasting take the general path, same results", function()
  local f32, f64 = dl.tensor({ 1, 2 }), dl.tensor({ 0.5, 0.25 }, "float64")
  H.values(f32 + f64, { 1.5, 2.25 }, { dtype = "float64" })
  local i = dl.tensor({ 7, 8 }, "int64")
  H.values(i / 2, { 3.5, 4 }, { dtype = "float32" })
  H.values(i + 1, { 8, 9 }, { dtype = "int64" })
  H.values(dl.tensor({ { 1 }, { 2 } }) + dl.tensor({ 10, 20 }), { { 11, 21 }, { 12, 22 } })
  H.values(dl.tensor({ 1 }) + dl.tensor({ 10, 20 }), { 11, 21 })
  H.ok(inline(dl.tensor({ 1 }) + dl.tensor({ 10, 20 })))
  H.raises(function() return dl.tensor({ 1, 2 }) + dl.tensor({ 1, 2, 3 }) end,
    "add: shapes (2,) and (3,) cannot be broadcast")
  H.raises(function() return i % 0 end, "remainder: integer division by zero")
end)

H.test("gradients through inline values", function()
  local w = dl.tensor({ 1, 2, 3 })                 -- a constant, inline
  local g = dl.grad(function(x) return (x * w + x:sin()):sum() end)
  local x = dl.tensor({ 0.1, 0.2, 0.3 })
  H.ok(inline(x) and inline(w))
  H.values(g(x), { 1 + math.cos(0.1), 2 + math.cos(0.2), 3 + math.cos(0.3) }, { tol = 1e-6 })
  local d2 = dl.grad(dl.grad(function(t) return t ^ 3 end))
  H.values(d2(dl.tensor(2.0)), 12)
  -- GradientTape.watch makes the watched value itself differentiable
  local v = dl.tensor({ 3.0 })
  local tape = dl.GradientTape()
  tape:watch(v)
  local y = tape:record(function() return (v * v):sum() end)
  H.values(tape:gradient(y, v), { 6 })
end)

H.test("reading inline tensors: metadata, elements, formatting", function()
  local x = dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "float64")
  H.ok(inline(x))
  H.eq(x.shape, { 2, 3 })
  H.eq(x.dtype, "float64")
  H.eq(x:numel(), 6)
  H.eq(x:dim(), 2)
  H.eq(dl.tensor({ 5, 6 })[2], 6)
  H.eq(dl.tensor(4):item(), 4)
  H.eq(dl.tensor({ true, false })[1], true)
  H.eq(x:totable(), { { 1, 2, 3 }, { 4, 5, 6 } })
  H.ok(inline(x), "reading promotes nothing")
  H.eq(x[2][3], 6)
  H.ok(not inline(x), "x[2] is a view of x, as in PyTorch: x became a handle")
  H.ok(tostring(dl.tensor({ 1.5 })):find("1.5000", 1, true))
  -- a script cannot reach past the value: its fields are scalars, read-only
  H.raises(function() x.inl_v0 = 1 end, "constant")
  H.ok(ffi.istype("uint64_t", x.inl_v0))
end)

H.test("the C ABI's value entry points", function()
  local out = T.Tensor()
  local a = dl.tensor({ 1, 2 })
  H.eq(C.dl_binary_scalar(core.ops.mul.id, a, 3, 0, out), 0)
  H.values(out, { 3, 6 })
  local id = C.dl_promote(out)
  H.ok(id ~= 0 and out.id == id and C.dl_valid(id) == 1)
  H.values(out, { 3, 6 })
  H.eq(C.dl_promote(out), id, "promoting a handle gives its id")
  C.dl_release(out)
  H.eq(C.dl_valid(id), 0)
  -- a handle delivered inline is released
  local big = dl.ones(8)
  local hid = C.dl_alias(T.hid(big))
  local r = T.Tensor()
  H.eq(C.dl_deliver(hid, r), 1, "an alias shares its storage: stays a handle")
  C.dl_release(r)
  local before = C.dl_live_handles()
  local own = C.dl_ones(ffi.new("int64_t[1]", 3), 1, 4, nil)
  H.eq(C.dl_deliver(own, r), 0, "a tensor nothing else refers to goes inline")
  H.eq(C.dl_valid(own), 0, "and its handle is released")
  H.eq(C.dl_live_handles(), before)
  H.values(r, { 1, 1, 1 })
end)

H.run()
