-- Small recorded values kept in arenas (Note [Recorded values in arenas] in
-- bindings/arenas.cpp): they carry their history while the gradient is taken, the arena
-- is discarded once it has been (the graph goes back with no collection), and a value
-- that outlives its arena is a plain constant with the values it had.
local H = require("harness")
local dl = require("dlua")
local ffi = require("ffi")
local core = require("dlua.core")
local C = core.C

local function in_arena(x) return x.id == 0 and x.inl_arena ~= 0 end
local function kept() return C.dl_arena_values() end

H.test("recorded small values carry their history while the gradient is taken", function()
  local seen
  local g = dl.grad(function(x)
    local y = x * x            -- kept in the arena
    local z = (y + 1):tanh()   -- so are these
    seen = { in_arena(y), in_arena(z), y:requires_grad(), kept() > 0 }
    return (z * y):sum()
  end)(dl.tensor({ 0.5, -1, 2 }, { dtype = "float64" }))
  H.ok(seen[1] and seen[2], "the results are inline, in the arena")
  H.ok(seen[3], "and require a gradient")
  H.ok(seen[4])
  -- d/dx tanh(x^2 + 1) x^2 = (1 - tanh^2) 2x x^2 + tanh 2x
  local want = {}
  for i, x in ipairs({ 0.5, -1, 2 }) do
    local t = math.tanh(x * x + 1)
    want[i] = (1 - t * t) * 2 * x * x * x + t * 2 * x
  end
  H.values(g, want, { tol = 1e-12 })
  H.eq(kept(), 0, "the arena is discarded once the gradient is taken")
end)

H.test("a value that outlives its arena is a constant with its values", function()
  local escaped
  local g = dl.grad(function(x)
    escaped = x * 3
    return (escaped * x):sum()
  end)(dl.tensor({ 1, 2 }))
  H.values(g, { 6, 12 })
  H.ok(escaped.id == 0 and escaped.inl_arena ~= 0, "the value still names its arena")
  H.values(escaped, { 3, 6 })
  H.values(escaped * 1, { 3, 6 })
  H.eq(escaped.inl_arena, 0ULL, "until an op reads it and finds the arena gone")
  H.ok(not dl.grad(function(x) return (escaped * x):sum() end)(dl.ones(2)):requires_grad())
  H.values(dl.grad(function(x) return (escaped * x):sum() end)(dl.ones(2)), { 3, 6 },
           { msg = "a later gradient sees a constant" })
  H.values(escaped + 1, { 4, 7 })
  -- made a handle, it is a plain tensor with those values
  escaped:add_(1)
  H.values(escaped, { 4, 7 })
end)

H.test("every value recorded under a discarded arena is a constant, whatever its size", function()
  local w = dl.Variable({ 1, 2 })
  local small, big, promoted, view
  local pairs_ = dl.implicit_grad(function()
    small = w * 2
    big = w:expand(10, 2) * 2       -- 20 floats: a handle
    promoted = w * 3
    view = promoted:view(2, 1)      -- promotes: a handle sharing the kept tensor
    H.ok(small.id == 0 and big.id ~= 0 and promoted.id ~= 0)
    H.ok(big:requires_grad() and view:requires_grad())
    return small:sum() + big:sum() + view:sum()
  end)()
  H.values(pairs_[1][1], { 25, 25 })
  -- a later gradient through an old value does not reach w
  for name, v in pairs({ small = small, big = big, promoted = promoted, view = view }) do
    local tape = dl.GradientTape()
    local y = tape:record(function() return (v * 1):sum() end)
    H.ok(not y:requires_grad(), name)
    H.values(tape:gradient(y, w), { 0, 0 }, { msg = name })
  end
  H.values(big:sum(), 60)
end)

H.test("a discarded arena drops only the history made under it", function()
  -- A Variable handed back as a handle inside a gradient (an implicit gradient nested
  -- in another, a reshape to its own shape) keeps its leaf after the arenas are gone.
  local w = dl.Variable({ 1, 2 })
  for round = 1, 2 do
    local inner
    dl.grad(function(x)
      inner = dl.implicit_grad(function() return (w:reshape(2) * w * x):sum() end)()
      return x * 1
    end)(dl.tensor(1.0))
    H.values(inner[1][1], { 2, 4 }, { msg = "round " .. round })
    H.values(dl.implicit_grad(function() return (w * w):sum() end)()[1][1], { 2, 4 })
  end
  -- A value of a persistent tape made a handle in another scope keeps its history
  -- while the persistent tape lives.
  local x = dl.tensor({ 1, 2 })
  local p = dl.GradientTape({ persistent = true })
  p:watch(x)
  local y = p:record(function() return x * 3 end)
  dl.grad(function(v) return (y:view(2, 1):sum() + v):sum() end)(dl.tensor(0.0))
  local z = p:record(function() return (y * x):sum() end)
  H.values(p:gradient(z, x), { 6, 12 })
  H.values(p:gradient(y, x, dl.ones(2)), { 3, 3 })
  p, y, z = nil, nil, nil
  collectgarbage("collect")
  collectgarbage("collect")
  H.eq(kept(), 0, "the persistent tape let go when collected")
end)

H.test("a GradientTape recorded inside another keeps its values until it lets go", function()
  local x = dl.tensor({ 1, 2 })
  local outer, inner = dl.GradientTape(), dl.GradientTape()
  outer:watch(x)
  inner:watch(x)
  local yi
  local yo = outer:record(function()
    yi = inner:record(function() return (x * x):sum() end)
    return (x * 5):sum()
  end)
  H.values(outer:gradient(yo, x), { 5, 5 })
  H.ok(in_arena(yi), "the inner arena's value is still in a live arena")
  H.values(inner:gradient(yi, x), { 2, 4 })
  H.eq(kept(), 0)
end)

H.test("the watched alias of an inline argument is in the arena, of a handle a handle", function()
  local seen
  H.values(dl.grad(function(w) seen = w; return (w * w):sum() end)(dl.tensor({ 1, 2 })), { 2, 4 })
  H.ok(in_arena(seen))
  local v = dl.Variable({ 1, 2 })
  H.values(dl.grad(function(w) seen = w; return (w * w):sum() end)(v), { 2, 4 })
  H.ok(seen.id ~= 0, "a Variable's alias shares its memory: a handle")
  v:assign(dl.tensor({ 5, 6 }))
  H.values(seen, { 5, 6 }, { msg = "and sees the Variable's new values" })
  -- a value kept on an outer arena can be promoted and written to: a handle too
  local inner
  H.near(dl.grad(function(x)
    return dl.grad(function(u) inner = u; return u * u * u end)(x)
  end)(dl.tensor(2.0)):item(), 12)
  H.ok(inner.id ~= 0, "the alias of an outer arena's value is a handle")
end)

H.test("promotion keeps the history: views, in-place writes, indexing", function()
  local g = dl.grad(function(x)
    local y = x * 2
    H.ok(in_arena(y))
    local v = y:view(2, 2)          -- y becomes a handle sharing the kept tensor
    H.ok(y.id ~= 0 and v:requires_grad())
    local z = x + 0
    z:mul_(3)                        -- in place on a recorded value
    local e = z[2]                   -- a view while recorded
    return v:sum() + z:sum() + e * 10
  end)(dl.tensor({ 1, 2, 3, 4 }, { dtype = "float64" }))
  H.values(g, { 5, 35, 5, 5 })
end)

H.test("nested gradients: the inner arena is adopted by the outer one", function()
  local f = function(x) return x ^ 3 end
  local d1 = dl.grad(f)
  local d2 = dl.grad(d1)
  local d3 = dl.grad(d2)
  local x = dl.tensor(2.0, { dtype = "float64" })
  H.near(d1(x):item(), 12)
  H.near(d2(x):item(), 12)
  H.near(d3(x):item(), 6)
  H.eq(kept(), 0)
  -- an inner value kept for the outer gradient
  local inner_in_arena
  local h = dl.grad(function(x)
    local gx = dl.grad(function(u) return u * u * x end)(x)   -- 2 x^2, recorded
    inner_in_arena = in_arena(gx)
    return gx
  end)(x)
  H.ok(inner_in_arena)
  H.near(h:item(), 8)
  H.eq(kept(), 0)
end)

H.test("value_and_grad, implicit_grad and argnums discard their arenas", function()
  local v, g = dl.value_and_grad(function(x) return (x * x):sum() end)(dl.tensor({ 1, 2 }))
  H.values(v, 5)
  H.values(g, { 2, 4 })
  H.ok(not v:requires_grad())
  local w = dl.Variable({ 1, 2 })
  local pairs_ = dl.implicit_grad(function() return (w * w * 2):sum() end)()
  H.values(pairs_[1][1], { 4, 8 })
  local ga, gb = dl.grad(function(a, b) return (a * b):sum() end, { 1, 2 })(dl.ones(2), dl.tensor({ 3, 4 }))
  H.values(ga, { 3, 4 })
  H.values(gb, { 1, 1 })
  H.eq(kept(), 0)
end)

H.test("an error leaves the arena pending until the next gradient", function()
  H.raises(function()
    dl.grad(function(x)
      local y = x * 2
      error("boom")
      return y
    end)(dl.ones(2))
  end, "boom")
  H.ok(kept() > 0, "pending")
  H.values(dl.grad(function(x) return (x * x):sum() end)(dl.ones(2)), { 2, 2 })
  H.eq(kept(), 0, "discarded when the next outermost gradient starts")
end)

H.test("a GradientTape holds its arenas until its gradient, or while persistent", function()
  local x = dl.tensor({ 1, 2 })
  local tape = dl.GradientTape()
  tape:watch(x)
  local y = tape:record(function() return (x * x):sum() end)
  H.ok(in_arena(y) and kept() > 0)
  H.values(tape:gradient(y, x), { 2, 4 })
  H.eq(kept(), 0, "a non-persistent tape lets go after its gradient")

  local p = dl.GradientTape({ persistent = true })
  p:watch(x)
  local a = p:record(function() return x * 3 end)
  local b = p:record(function() return (a * x):sum() end)   -- reads a, from the first record
  H.values(p:gradient(b, x), { 6, 12 })
  H.values(p:gradient(b, x), { 6, 12 })
  H.ok(kept() > 0)
  p = nil
  collectgarbage("collect")
  collectgarbage("collect")
  H.eq(kept(), 0, "a collected persistent tape lets go")
end)

H.test("the graph goes back without a collection", function()
  local x = dl.rand(16)
  local g = dl.grad(function(v)
    local y = v
    for _ = 1, 50 do y = (y * 1.01 + 0.1):tanh() end
    return y:sum()
  end)
  g(x)
  collectgarbage("collect")
  collectgarbage("stop")
  local before = dl.memory_stats()
  for _ = 1, 20 do g(x) end
  local after = dl.memory_stats()
  collectgarbage("restart")
  -- each call leaves its watched alias (a handle) to the collector, not its 150 results
  H.ok(after.tensors - before.tensors <= 2 * 20, "handles left: " .. (after.tensors - before.tensors))
  H.ok(after.in_use - before.in_use < 20 * 4096, "bytes left: " .. (after.in_use - before.in_use))
  H.eq(kept(), 0)
end)

H.test("forged arena references read as plain values", function()
  local y
  dl.grad(function(x)
    y = x * 2
    -- a copy of y's bytes naming a slot past the arena's end, and one naming no arena
    local bytes = ffi.new("uint8_t[?]", ffi.sizeof("struct dl_tensor"))
    ffi.copy(bytes, y, ffi.sizeof("struct dl_tensor"))
    local slot = ffi.cast("uint32_t*", bytes + 12)
    slot[0] = slot[0] + 1000
    local forged = ffi.cast("struct dl_tensor*", bytes)
    local r = dl.tensor(0) + 0
    H.ok(C.dl_binary_scalar(C.dl_op_id("add"), forged, 1, 0, r) == 0)
    H.values(r, { 3, 5 })
    return y:sum()
  end)(dl.tensor({ 1, 2 }))
end)

H.test("a forged inline header whose sizes multiply past 2^63 is refused", function()
  -- 8 dims of 255: the product of the sizes overflowed int64 while the header was checked
  local bytes = ffi.new("uint8_t[?]", ffi.sizeof("struct dl_tensor"))
  bytes[8], bytes[9] = 4, 8                     -- float32, 8 dims
  for i = 16, 23 do bytes[i] = 255 end          -- every size 255
  local forged = ffi.cast("struct dl_tensor*", bytes)
  local out = ffi.new("double[1]")
  H.eq(C.dl_item(forged, out), -1)
  H.ok(ffi.string(C.dl_last_error()):find("invalid", 1, true), ffi.string(C.dl_last_error()))
  H.eq((dl.tensor({ 1, 2 }) + 1):totable(), { 2, 3 })   -- the runtime stays usable
  -- while an empty value whose sizes pass 64 before its 0 is held inline and valid
  local e = dl.zeros(100, 0)
  H.eq(e.shape, { 100, 0 }); H.eq((e + 1).shape, { 100, 0 }); H.eq(dl.zeros(2, 200, 0):sum():item(), 0)
end)

-- Note [Inline operands of pointwise ops] in bindings/value.cpp: an inline operand of a
-- recorded pointwise op may be an earlier equal copy; one that differs in a byte, its
-- dtype or its shape never is, nor is a value written to since.
H.test("inline operands of recorded ops: equal values share a copy, others never", function()
  local f64 = { dtype = "float64" }
  local cases = {   -- x, w: d/dx sum(x w w w) = w^3
    { { 1, 2, 3, 4 }, { 0.5, 2, 3, 4 } },
    { { 1, 2, 3, 4 }, { 0.5, 2, 3, 5 } },               -- one element differs
    { { { 1, 2 }, { 3, 4 } }, { { 0.5, 2 }, { 3, 4 } } },  -- the first's bytes, another shape
    { { { 1, 2, 3, 4 } }, { { 0.5, 2, 3, 4 } } },          -- and another of as many dims
  }
  local function f(x, w) return (x * w * w * w):sum() end
  for round = 1, 2 do   -- the second round finds every copy the first made
    for _, c in ipairs(cases) do
      local x, w = dl.tensor(c[1], f64), dl.tensor(c[2], f64)
      local g = dl.grad(f)(x, w)
      H.eq(g:dim(), x:dim())
      local want = {}
      for i, v in ipairs(w:reshape(4):totable()) do want[i] = v ^ 3 end
      H.values(g:reshape(4), want, { tol = 1e-12 })
    end
    local x, w = dl.tensor({ 1, 2, 3, 4 }, f64), dl.tensor({ 1, 1, 1, 1 }, f64)
    H.values(dl.grad(function(x) return (x * w):sum() end)(x), { 1, 1, 1, 1 })
    w:add_(1)   -- promoted and written: the product reads 2s now
    H.values(dl.grad(function(x) return (x * w):sum() end)(x), { 2, 2, 2, 2 })
  end
end)

H.run()
