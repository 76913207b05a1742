-- Layout and copying of the rearranging ops (tile, repeat, flip, roll, rot90, F.pad),
-- einsum's repeated and broadcast labels, repeat_interleave's options and tensor_split's
-- tensor arguments, each checked against PyTorch 1.13's values.
local H = require("harness")
local dl = require("dlua")

local F = dl.nn.functional
local f64 = { dtype = "float64" }
local i64 = { dtype = "int64" }

-- y is a tensor of its own: not x, not on x's storage, and writing it leaves x as it was.
local function fresh(x, y, what)
  H.ok(not rawequal(x, y), what .. ": returned its input")
  H.ok(y:data_ptr() ~= x:data_ptr(), what .. ": shares its input's storage")
  local before = x:clone()
  y:fill_(-7)
  H.ok(dl.equal(x, before), what .. ": a write to the result changed the input")
end

local function values_of(list)
  local out = {}
  for i, t in ipairs(list) do out[i] = t:totable() end
  return out
end

H.test("tile and repeat return new contiguous tensors", function()
  local x = dl.tensor({ { 1, 2, 3, 4 } })
  local y = x:tile({ 2, 1 })
  H.eq(y:stride(), { 4, 1 })   -- torch: x.tile((2, 1)).stride() == (4, 1)
  H.values(y, { { 1, 2, 3, 4 }, { 1, 2, 3, 4 } })
  fresh(x, y, "tile({2, 1})")
  local v = dl.tensor({ 1, 2, 3 })
  local r = v["repeat"](v, 3, 1)
  H.eq(r:stride(), { 3, 1 })   -- torch: tensor([1, 2, 3]).repeat(3, 1).stride() == (3, 1)
  r:add_(1)
  H.values(r, { { 2, 3, 4 }, { 2, 3, 4 }, { 2, 3, 4 } })
  H.values(v, { 1, 2, 3 })
  -- all reps 1: still a copy (torch: x.repeat(1, 1).data_ptr() != x.data_ptr())
  fresh(x, x["repeat"](x, 1, 1), "repeat(1, 1)")
  fresh(x, x:tile({ 1 }), "tile({1})")
  local t = dl.arange(6):reshape(2, 3):t()
  local c = t["repeat"](t, 1, 1)
  H.eq(c:stride(), { 2, 1 })   -- torch: arange(6.).reshape(2, 3).t().repeat(1, 1).stride() == (2, 1)
  fresh(t, c, "repeat(1, 1) of a transpose")
end)

H.test("tile and repeat gradients", function()
  local x = dl.tensor({ { 1, 2, 3 } }, f64)
  local w = dl.arange(12, f64):reshape(2, 6)
  local w1 = dl.tensor({ { 2, -1, 0.5 } }, f64)
  -- torch: (x.tile((2, 2)) * arange(12).reshape(2, 6)).sum().backward() -> [[18, 22, 26]]
  H.values(dl.grad(function(a) return (a:tile({ 2, 2 }) * w):sum() end)(x), { { 18, 22, 26 } })
  -- torch: (x.repeat(1, 1) * w1).sum() and (x.tile((1,)) * w1).sum() -> [[2, -1, 0.5]]
  H.values(dl.grad(function(a) return (a["repeat"](a, 1, 1) * w1):sum() end)(x), { { 2, -1, 0.5 } })
  H.values(dl.grad(function(a) return (a:tile({ 1 }) * w1):sum() end)(x), { { 2, -1, 0.5 } })
end)

H.test("flip takes dims as arguments", function()
  local x = dl.arange(6):reshape(2, 3)
  -- torch: arange(6.).reshape(2, 3).flip(0, 1) and .flip(-1, 0)
  H.values(x:flip(1, 2), { { 5, 4, 3 }, { 2, 1, 0 } })
  H.values(x:flip(-1, 1), { { 5, 4, 3 }, { 2, 1, 0 } })
  H.values(dl.flip(x, 2), { { 2, 1, 0 }, { 5, 4, 3 } })
  H.raises(function() return x:flip(1, 1) end, "flip: dim 1 appears more than once in the dims")
end)

H.test("copy ops return a new tensor where nothing moves", function()
  -- torch: each result's data_ptr differs from a's, for a of shape (1, 3)
  local a = dl.tensor({ { 1, 2, 3 } })
  fresh(a, a:flip({ 1 }), "flip of a size-1 dim")
  fresh(a, a:flip({}), "flip of no dims")
  fresh(a, a:flipud(), "flipud of (1, 3)")
  fresh(a, a:roll(0, 2), "roll by 0")
  fresh(a, a:roll(3, 2), "roll by the size")
  fresh(a, a:roll(3), "roll flattened by the size")
  fresh(a, a:rot90(0, { 1, 2 }), "rot90 k = 0")
  fresh(a, a:rot90(4, { 1, 2 }), "rot90 k = 4")
  for _, mode in ipairs({ "constant", "reflect", "replicate", "circular" }) do
    fresh(a, F.pad(a, { 0, 0 }, { mode = mode }), "pad {0, 0} " .. mode)
  end
  -- torch: F.pad(arange(12.).reshape(1, 3, 4), (-1, 0)) is a new contiguous (1, 3, 3)
  local b = dl.arange(12):reshape(1, 3, 4)
  local p = F.pad(b, { -1, 0 })
  H.ok(p:is_contiguous(), "a crop is contiguous")
  H.values(p, { { { 1, 2, 3 }, { 5, 6, 7 }, { 9, 10, 11 } } })
  fresh(b, p, "pad cropping only")
  -- rot90 of (3, 1) turns through a flip of its size-1 dim: torch gives [[1, 2, 3]], a copy
  local c = dl.tensor({ { 1 }, { 2 }, { 3 } })
  local r = c:rot90(1)
  H.values(r, { { 1, 2, 3 } })
  r:add_(10)
  H.values(c, { { 1 }, { 2 }, { 3 } })
end)

H.test("copy ops where nothing moves keep the gradient", function()
  local x = dl.tensor({ { 1, 2, 3 } }, f64)
  local w = dl.tensor({ { 2, -1, 0.5 } }, f64)
  local want = { { 2, -1, 0.5 } }   -- torch: (op(x) * w).sum().backward() for each op below
  for name, f in pairs({
    flip = function(a) return a:flip({ 1 }) end,
    roll = function(a) return a:roll(3, 2) end,
    pad = function(a) return F.pad(a, { 0, 0 }, { mode = "reflect" }) end,
    rot90 = function(a) return a:rot90(4, { 1, 2 }) end,
  }) do
    H.near(dl.grad(function(a) return (f(a) * w):sum() end)(x):totable(), want, 1e-12, name)
  end
end)

H.test("einsum with two repeated labels in one operand", function()
  local x = dl.arange(36, f64):reshape(2, 2, 3, 3)
  -- torch: einsum("iijj->ij", x), einsum("iijj", x) of arange(36.).reshape(2, 2, 3, 3)
  H.values(dl.einsum("iijj->ij", x), { { 0, 4, 8 }, { 27, 31, 35 } })
  H.values(dl.einsum("iijj", x), 105)
  -- torch: einsum("ijij->ji", arange(36.).reshape(2, 3, 2, 3) * 0.5)
  H.values(dl.einsum("ijij->ji", dl.arange(36, f64):reshape(2, 3, 2, 3) * 0.5),
           { { 0, 10.5 }, { 3.5, 14 }, { 7, 17.5 } })
  -- torch: einsum("d,ecec,eeb->bce", a, b, c) and its gradients of .sum()
  local a = dl.tensor({ 1, 2 }, f64)
  local b = dl.arange(16, f64):reshape(2, 2, 2, 2)
  local c = dl.arange(8, f64):reshape(2, 2, 2) - 3
  H.values(dl.einsum("d,ecec,eeb->bce", a, b, c), { { { 0, 90 }, { -45, 135 } }, { { 0, 120 }, { -30, 180 } } })
  local ga, gb, gc = dl.grad(function(p, q, r) return dl.einsum("d,ecec,eeb->bce", p, q, r):sum() end, { 1, 2, 3 })(a, b, c)
  H.values(ga, { 150, 150 })
  H.values(gb, { { { { -15, 0 }, { 0, 0 } }, { { 0, -15 }, { 0, 0 } } }, { { { 0, 0 }, { 21, 0 } }, { { 0, 0 }, { 0, 21 } } } })
  H.values(gc, { { { 15, 15 }, { 0, 0 } }, { { 0, 0 }, { 75, 75 } } })
end)

H.test("einsum broadcasts labelled dims of size 1", function()
  local p = dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, f64)
  local q = dl.tensor({ { 0.5, -1, 2 } }, f64)
  -- torch: einsum("ij,ij->", p, q) with p (2, 3), q (1, 3), and its gradients
  H.values(dl.einsum("ij,ij->", p, q), 13.5)
  local gp, gq = dl.grad(function(a, b) return dl.einsum("ij,ij->", a, b) end, { 1, 2 })(p, q)
  H.values(gp, { { 0.5, -1, 2 }, { 0.5, -1, 2 } })
  H.values(gq, { { 5, 7, 9 } })
  -- torch: einsum("ij,ij->ij", u (2, 1), v (1, 3)), and the gradients of (that * w).sum()
  local u = dl.tensor({ { 1 }, { 2 } }, f64)
  local v = dl.tensor({ { 3, 4, 5 } }, f64)
  local w = dl.tensor({ { 1, -1, 2 }, { 0.5, 3, -2 } }, f64)
  H.values(dl.einsum("ij,ij->ij", u, v), { { 3, 4, 5 }, { 6, 8, 10 } })
  local gu, gv = dl.grad(function(a, b) return (dl.einsum("ij,ij->ij", a, b) * w):sum() end, { 1, 2 })(u, v)
  H.values(gu, { { 9 }, { 3.5 } })
  H.values(gv, { { 2, 5, -2 } })
  -- torch: einsum("ij,jk->ik", ones(2, 1), arange(6.).reshape(3, 2)): j broadcast, then summed
  H.values(dl.einsum("ij,jk->ik", dl.ones(2, 1, f64), dl.arange(6, f64):reshape(3, 2)), { { 6, 9 }, { 6, 9 } })
  H.raises(function() return dl.einsum("ij,ij->", dl.ones(2, 3), dl.ones(2, 2)) end,
           "einsum: label j stands for sizes 3 and 2 (operand 2)")
end)

H.test("repeat_interleave options", function()
  local x = dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  local want = { { 1, 1, 2, 2, 3, 3 }, { 4, 4, 5, 5, 6, 6 } }   -- torch: repeat_interleave(x, 2, dim=1)
  H.values(dl.repeat_interleave(x, 2, { dim = 2 }), want)
  H.values(x:repeat_interleave(2, 2), want)
  H.values(x:repeat_interleave(2, 2, { output_size = 6 }), want)
  -- torch: repeat_interleave(x, tensor([1, 2, 0]), dim=1, output_size=3)
  H.values(x:repeat_interleave(dl.tensor({ 1, 2, 0 }, i64), { dim = 2, output_size = 3 }), { { 1, 2, 2 }, { 4, 5, 5 } })
  -- torch: repeat_interleave(tensor([1, 2]), output_size=3) -> [0, 1, 1] (1-based here)
  H.values(dl.repeat_interleave(dl.tensor({ 1, 2 }, i64), { output_size = 3 }), { 1, 2, 2 })
  -- torch raises on every mismatched output_size ("allocated size does not match required size")
  H.raises(function() return x:repeat_interleave(2, 2, { output_size = 5 }) end,
           "repeat_interleave: output_size 5 does not match the repeats, which make 6 elements along dimension 2")
  H.raises(function() return x:repeat_interleave(2, { output_size = 11 }) end, "output_size 11 does not match")
  H.raises(function() return dl.repeat_interleave(dl.tensor({ 1, 2 }, i64), { output_size = 2 }) end,
           "output_size 2 does not match the repeats, which make 3 elements")
  H.raises(function() return x:repeat_interleave(2, 1, { dim = 2 }) end, "repeat_interleave: dim given twice")
  H.raises(function() return x:repeat_interleave(2, { dims = 2 }) end, "repeat_interleave: unknown option 'dims'")
  local msg = H.raises(function() return x:repeat_interleave(2, { output_size = 1.5 }) end,
                       "repeat_interleave: output_size must be an integer >= 0, got 1.5")
  H.ok(not msg:find("table: "), "no table address in " .. msg)
end)

H.test("tensor_split takes a tensor of points or sections", function()
  local x = dl.arange(1, 8, i64)
  -- torch: tensor_split(arange(1, 8), tensor([2, 5])) and tensor_split(arange(1, 8), tensor(3))
  H.eq(values_of(dl.tensor_split(x, dl.tensor({ 2, 5 }, i64))), { { 1, 2 }, { 3, 4, 5 }, { 6, 7 } })
  H.eq(values_of(dl.tensor_split(x, dl.tensor(3, i64))), { { 1, 2, 3 }, { 4, 5 }, { 6, 7 } })
  -- torch: tensor_split(arange(12).reshape(2, 6), tensor([1, 4]), dim=1)
  H.eq(values_of(dl.tensor_split(dl.arange(12, i64):reshape(2, 6), dl.tensor({ 1, 4 }, i64), 2)),
       { { { 0 }, { 6 } }, { { 1, 2, 3 }, { 7, 8, 9 } }, { { 4, 5 }, { 10, 11 } } })
  H.eq(values_of(x:tensor_split(dl.zeros(0, i64))), { { 1, 2, 3, 4, 5, 6, 7 } })
  H.raises(function() return dl.tensor_split(x, dl.tensor({ 2 })) end,
           "tensor_split: a tensor of sections or split points must be a 0-dim or 1-D integer tensor, got float32")
end)

H.test("cat skips a leading empty 1-D tensor; concat, row_stack; meshgrid of 0-dim tensors; narrow from a tensor", function()
  local x = dl.tensor({ { 1, 2 }, { 3, 4 } })
  -- torch.cat([torch.zeros(0), x], 1) is x (the legacy empty tensor is skipped wherever it is)
  H.values(dl.cat({ dl.zeros(0), x }, 2), { { 1, 2 }, { 3, 4 } })
  H.eq(dl.cat({ dl.zeros(0), dl.zeros(0) }, 2).shape, { 0 })   -- torch: all skipped, (0,) whatever the dim
  H.values(dl.concat({ x, x }, 1), { { 1, 2 }, { 3, 4 }, { 1, 2 }, { 3, 4 } })
  H.values(dl.row_stack({ dl.tensor({ 1, 2 }), dl.tensor({ 3, 4 }) }), { { 1, 2 }, { 3, 4 } })
  -- torch.meshgrid(torch.tensor(5.), torch.tensor([1., 2.]), indexing="ij"): shapes (1, 2)
  local a, b = dl.meshgrid(dl.tensor(5), dl.tensor({ 1, 2 }))
  H.values(a, { { 5, 5 } })
  H.values(b, { { 1, 2 } })
  H.values(x:narrow(1, dl.tensor(2, { dtype = "int64" }), 1), { { 3, 4 } })
  H.raises(function() x:narrow(1, dl.tensor(1.5), 1) end, "narrow: start must be an integer or a 0-dim integer tensor")
end)

H.run()
