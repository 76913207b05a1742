-- Sorting and selection against PyTorch (tests/lua/ref/sorting_ref.lua, written by
-- tests/ref/gen_sorting_refs.py; indices 1-based), then ties, NaN, empty inputs, masks
-- and errors.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.sorting_ref")

local f64 = { dtype = "float64" }
local function t64(v) return dl.tensor(v, f64) end

H.test("sort equals torch.sort (stable), values and indices", function()
  for _, name in ipairs({ "x", "ties" }) do
    local x = t64(R[name])
    for dim = 1, 2 do
      for _, desc in ipairs({ false, true }) do
        local ref = R[("sort_%s_%d_%s"):format(name, dim, desc and "desc" or "asc")]
        local v, i = x:sort(dim, desc)
        H.eq(v:totable(), ref.values, name .. " values")
        H.eq(i:totable(), ref.indices, name .. " indices")
        H.eq(i.dtype, "int64")
        H.ok(dl.equal(x:argsort(dim, desc), i), "argsort")
      end
    end
  end
  local g = dl.grad(function(a) return (dl.sort(a, 2, true) * t64(R.sort_weights)):sum() end)(t64(R.x))
  H.near(g:totable(), R.sort_grad, 1e-15)
end)

H.test("topk and kthvalue equal PyTorch's", function()
  local x = t64(R.x)
  local v, i = x:topk(3, 2)
  H.eq(v:totable(), R.topk.values); H.eq(i:totable(), R.topk.indices)
  v, i = x:topk(2, 1, false)
  H.eq(v:totable(), R.topk_smallest_dim1.values); H.eq(i:totable(), R.topk_smallest_dim1.indices)
  local g = dl.grad(function(a) return (a:topk(3, 2) * t64(R.topk_weights)):sum() end)(x)
  H.near(g:totable(), R.topk_grad, 1e-15)
  v, i = x:kthvalue(2, 2)
  H.eq(v:totable(), R.kthvalue.values); H.eq(i:totable(), R.kthvalue.indices)
  H.shape(x:kthvalue(2, 2, true), { 4, 1 })
end)

H.test("unique, searchsorted, nonzero and masked_select equal PyTorch's", function()
  local u, inv, cnt = dl.unique(t64(R.unique_input), { return_inverse = true, return_counts = true })
  H.eq(u:totable(), R.unique.values); H.eq(inv:totable(), R.unique.inverse); H.eq(cnt:totable(), R.unique.counts)
  H.eq(dl.searchsorted(t64(R.ss_seq), t64(R.ss_values)):totable(), R.ss_left)
  H.eq(dl.searchsorted(t64(R.ss_seq), t64(R.ss_values), { right = true }):totable(), R.ss_right)
  H.eq(dl.searchsorted(t64(R.ss1_seq), t64(R.ss1_values)):totable(), R.ss1_left)
  H.eq(dl.searchsorted(t64(R.ss1_seq), t64(R.ss1_values), { side = "right" }):totable(), R.ss1_right)
  local x, mask = t64(R.x), t64(R.mask):gt(0.5)
  H.eq(x[mask]:totable(), R.masked_select)
  H.eq(dl.masked_select(x, mask):totable(), R.masked_select)
  H.eq(mask:nonzero():totable(), R.nonzero)
  local g = dl.grad(function(a) return (a[mask] * t64(R.masked_weights)):sum() end)(x)
  H.eq(g:totable(), R.masked_grad)
end)

H.test("cumprod equals torch.cumprod: values, gradients through zeros, second order", function()
  local c = R.cumprod
  local x = t64(c.x)
  H.near(x:cumprod(2):totable(), c.y, 1e-15)
  H.near(dl.cumprod(x, 1):totable(), c.dim1, 1e-15)
  local f = function(a) return (a:cumprod(2) * t64(c.w)):sum() end
  H.near(dl.grad(f)(x):totable(), c.grad, 1e-14)
  local inner = function(a) return (dl.grad(f)(a) * t64(c.v)):sum() end
  H.near(dl.grad(inner)(x):totable(), c.second, 1e-13)
  H.eq(dl.tensor({ 2, 3, 4 }, { dtype = "int64" }):cumprod(1):totable(), { 2, 6, 24 })
  H.eq(dl.tensor({ 2, 3, 4 }, { dtype = "int64" }):cumprod(1).dtype, "int64")
  -- Integer scans wrap around as integer arithmetic does (PyTorch's too): 2^62 * 4 is
  -- 2^64, which is 0; 2^62 + 2^62 is 2^63, which is -2^63.
  H.eq(dl.tensor({ 2 ^ 62, 4, 3 }, { dtype = "int64" }):cumprod(1):totable(), { 2 ^ 62, 0, 0 })
  H.eq(dl.tensor({ 2 ^ 62, 2 ^ 62, 2 ^ 62, 2 ^ 62 }, { dtype = "int64" }):cumsum(1):totable(),
       { 2 ^ 62, -2 ^ 63, -2 ^ 62, 0 })
end)

H.test("ties, NaN, signed zeros, integers and bools", function()
  local v, i = dl.tensor({ 2, 0 / 0, -0.0, 1, 0.0, 0 / 0, 2 }):sort()
  H.eq(i:totable(), { 3, 5, 4, 1, 7, 2, 6 })   -- stable; -0.0 == 0.0; NaNs last
  H.ok(v[7] ~= v[7], "NaN last")
  _, i = dl.tensor({ 2, 0 / 0, 1, 2 }):sort(1, true)
  H.eq(i:totable(), { 2, 1, 4, 3 })             -- NaN first when descending, ties stable
  v = dl.tensor({ 3, 1, 2 }, { dtype = "int64" }):sort()
  H.eq(v.dtype, "int64"); H.eq(v:totable(), { 1, 2, 3 })
  v, i = dl.tensor({ true, false, true }):sort()
  H.eq(v:totable(), { false, true, true }); H.eq(i:totable(), { 2, 1, 3 })
  H.eq(dl.tensor(5):sort():item(), 5)
  H.shape(dl.zeros(0, 3):sort(1), { 0, 3 })
  H.shape(dl.zeros(3, 3):nonzero(), { 0, 2 })
  H.shape(dl.zeros(0):nonzero(), { 0, 1 })
  local u = dl.unique(dl.zeros(0))
  H.eq(u:numel(), 0)
  H.eq(dl.tensor({ 1, 2, 3 }):count_nonzero():item(), 3)
  H.eq(dl.searchsorted(dl.zeros(0), dl.tensor({ 1, 2 })):totable(), { 1, 1 })
end)

H.test("x[mask] = v and x[idx]", function()
  local x = dl.arange(1, 7):view(2, 3)
  x[x:gt(4)] = 0
  H.eq(x:totable(), { { 1, 2, 3 }, { 4, 0, 0 } })
  x[x:eq(0)] = dl.tensor({ 8, 9 })
  H.eq(x:totable(), { { 1, 2, 3 }, { 4, 8, 9 } })
  x[x:lt(3)] = dl.tensor(5)
  H.eq(x:totable(), { { 5, 5, 3 }, { 4, 8, 9 } })
  x[dl.tensor({ true, false })] = -1                  -- a mask over the leading dim: rows
  H.eq(x:totable(), { { -1, -1, -1 }, { 4, 8, 9 } })
  H.eq(x[dl.tensor({ 2, 1, 2 }, { dtype = "int64" })]:totable(), { { 4, 8, 9 }, { -1, -1, -1 }, { 4, 8, 9 } })
  H.raises(function() x[x:gt(0)] = dl.tensor({ 1, 2 }) end,
           "index: the mask's selection has shape (3,), and the values' shape (2,) does not broadcast to it")
  H.raises(function() return x[dl.tensor({ 0.5 })] end, "index: expected a bool mask or an integer index tensor")
  -- a masked write is recorded: the gradient flows to the values written and around them
  local g1, g2 = dl.grad(function(a, b)
    local y = a * 1
    y[a:gt(0)] = b
    return (y * dl.tensor({ 1, 2, 3 })):sum()
  end, { 1, 2 })(dl.tensor({ 1, -1, 2 }), dl.tensor({ 10, 20 }))
  H.eq(g1:totable(), { 0, 2, 0 }); H.eq(g2:totable(), { 1, 3 })
end)

H.test("masks over leading dims, key shapes, empty inputs (PyTorch's rules)", function()
  local x = dl.arange(0, 9):view(3, 3)
  local rows = dl.tensor({ true, false, true })
  H.eq(x[rows]:totable(), { { 0, 1, 2 }, { 6, 7, 8 } })           -- a 1-D mask picks rows
  local y = x:clone()
  y[rows] = 0
  H.eq(y:totable(), { { 0, 0, 0 }, { 3, 4, 5 }, { 0, 0, 0 } })
  y[rows] = dl.tensor({ { 1, 1, 1 }, { 2, 2, 2 } })
  H.eq(y:totable(), { { 1, 1, 1 }, { 3, 4, 5 }, { 2, 2, 2 } })
  H.raises(function() return x[dl.tensor({ true, false })] end, "index: the mask's shape (2,) must be the leading dims")
  local key = dl.tensor({ { { 1, 2 } }, { { 3, 3 } } }, { dtype = "int64" })   -- (2, 1, 2)
  H.eq(x[key].shape, { 2, 1, 2, 3 })
  H.eq(x[dl.zeros(0, 2, { dtype = "int64" })].shape, { 0, 2, 3 })
  H.eq(dl.searchsorted(dl.zeros(2, 0), dl.zeros(2, 3)):totable(), { { 1, 1, 1 }, { 1, 1, 1 } })
  H.eq(dl.searchsorted(dl.tensor({ 1, 2, 3 }, { dtype = "int64" }), 2.5):item(), 3)
  local u, c = dl.unique(dl.zeros(0), { return_counts = true })
  H.eq(u:numel(), 0); H.eq(c:numel(), 0)
end)

-- What a differential run against PyTorch 1.13 found (each as torch does it).
H.test("against PyTorch: row values, signed zeros, as_tuple, sides, 0-dim dims, op names", function()
  local y = dl.zeros(3, 2)
  y[dl.tensor({ true, false, true })] = dl.tensor({ 1, 2 })   -- one row's values for every row picked
  H.eq(y:totable(), { { 1, 2 }, { 0, 0 }, { 1, 2 } })
  y[dl.tensor({ false, true, false })] = dl.tensor({ { { 7, 8 } } })   -- leading 1s broadcast away
  H.eq(y:totable(), { { 1, 2 }, { 7, 8 }, { 1, 2 } })
  -- scatter_reduce's amax and amin keep the value so far on a tie of 0 and -0, as PyTorch's
  local z = dl.tensor({ 5.0 }):scatter_reduce(1, dl.tensor({ 1, 1 }, { dtype = "int64" }), dl.tensor({ 0.0, -0.0 }),
                                              "amax", { include_self = false })
  H.eq(1 / z:item(), math.huge)
  local zn = dl.tensor({ 5.0 }):scatter_reduce(1, dl.tensor({ 1, 1 }, { dtype = "int64" }), dl.tensor({ -0.0, 0.0 }),
                                               "amin", { include_self = false })
  H.eq(1 / zn:item(), -math.huge)
  -- bool tensors: writes to one place twice, and the reductions that combine them
  local bx = dl.tensor({ false, false })
  local twice = dl.tensor({ 2, 2 }, { dtype = "int64" })
  H.eq(bx:scatter(1, twice, dl.tensor({ true, false })):totable(), { false, false })
  H.eq(bx:scatter_reduce(1, twice, dl.tensor({ true, false }), "amax"):totable(), { false, true })
  -- -0 written through a mask, scatter, masked_scatter and index_copy keeps its sign
  local function signs(t) local out = {} for i, v in ipairs(t:totable()) do out[i] = 1 / v end return out end
  local x = dl.tensor({ 1, 2, 3 })
  x[x:gt(1)] = dl.tensor({ -0.0, -0.0 })
  H.eq(signs(x), { 1, -math.huge, -math.huge })
  H.eq(signs(dl.ones(2):scatter(1, dl.tensor({ 2 }, { dtype = "int64" }), dl.tensor({ -0.0 }))), { 1, -math.huge })
  H.eq(signs(dl.ones(2):masked_scatter(dl.tensor({ true, false }), dl.tensor({ -0.0 }))), { -math.huge, 1 })
  H.eq(signs(dl.ones(2):index_copy(1, dl.tensor({ 1 }, { dtype = "int64" }), dl.tensor({ -0.0 }))), { -math.huge, 1 })
  -- a 0-dim mask: all of x under a new leading dim of 1, or none of it
  local t5 = dl.tensor(5)
  H.eq(t5[dl.tensor(true)]:totable(), { 5 }); H.eq(t5[dl.tensor(false)].shape, { 0 })
  local sq = dl.tensor({ { 1, 2 }, { 3, 4 } })
  H.eq(sq[dl.tensor(true)].shape, { 1, 2, 2 }); H.eq(sq[dl.tensor(false)].shape, { 0, 2, 2 })
  sq[dl.tensor(false)] = 0
  H.eq(sq:totable(), { { 1, 2 }, { 3, 4 } })
  sq[dl.tensor(true)] = dl.tensor({ 7, 8 })
  H.eq(sq:totable(), { { 7, 8 }, { 7, 8 } })
  t5[dl.tensor(true)] = 9
  H.eq(t5:item(), 9)
  -- maximum and minimum give the first operand on a tie (0 and -0), as PyTorch's
  H.eq(1 / dl.maximum(dl.tensor(0.0), dl.tensor(-0.0)):item(), math.huge)
  H.eq(1 / dl.maximum(dl.tensor(-0.0), dl.tensor(0.0)):item(), -math.huge)
  H.eq(1 / dl.minimum(dl.tensor(0.0), dl.tensor(-0.0)):item(), math.huge)
  H.eq(1 / dl.minimum(dl.tensor(-0.0), dl.tensor(0.0)):item(), -math.huge)
  -- nonzero's as_tuple: one index tensor a dim
  local nz = dl.tensor({ { 0, 1, 0 }, { 2, 0, 3 } }):nonzero({ as_tuple = true })
  H.eq(#nz, 2); H.eq(nz[1]:totable(), { 1, 2, 2 }); H.eq(nz[2]:totable(), { 2, 1, 3 })
  H.eq(dl.tensor(5):nonzero({ as_tuple = true })[1]:totable(), { 1 })
  H.raises(function() return dl.tensor({ 1 }):nonzero(true) end, "nonzero: expected an options table")
  -- searchsorted's side
  H.raises(function() return dl.searchsorted(dl.tensor({ 1, 2 }), dl.tensor({ 1 }), { side = "up" }) end,
           'searchsorted: side must be "left" or "right", got up')
  H.raises(function() return dl.searchsorted(dl.tensor({ 1, 2 }), dl.tensor({ 1 }), { side = "left", right = true }) end,
           "ask for opposite sides")
  H.eq(dl.bucketize(3, dl.tensor({ 1, 3, 5 })):item(), 2)
  H.eq(dl.bucketize(3, dl.tensor({ 1, 3, 5 }), { right = true }):item(), 3)
  -- a 0-dim tensor takes dim 1 or -1, no other
  local s = dl.tensor(4)
  H.eq(s:cumsum(1):item(), 4); H.eq(s:cumprod(-1):item(), 4); H.eq(s:flip({ 1 }):item(), 4)
  H.raises(function() return s:cumsum(7) end, "cumsum: dimension 7 out of range for a tensor of 0 dimensions")
  H.raises(function() return s:sort(-9) end, "sort: dimension -9 out of range")
  H.raises(function() return s:argsort(3) end, "argsort: dimension 3 is out of range for a tensor of 0 dims")
  H.raises(function() return dl.logcumsumexp(s, 3) end, "logcumsumexp: dimension 3 is out of range for a tensor of 0 dims")
  H.raises(function() return dl.cummax(s, "x") end, "cummax: dimension x is out of range")
  H.raises(function() return s:flip({ 2 }) end, "flip: dimension 2 is out of range for a tensor of 0 dims")
  -- errors name the op called
  local m = dl.ones(2, 3)
  H.raises(function() return m:argsort(4) end, "argsort: dimension 4")
  H.raises(function() return dl.masked_select(m, dl.tensor({ true, false })) end,
           "masked_select: the mask of shape (2,) and the input of shape (2, 3) do not broadcast")
  H.raises(function() return m["repeat"](m, 1.5, 2) end, "repeat: the repetitions")
  -- unique_consecutive: runs of equal neighbours
  local u, inv, c = dl.unique_consecutive(dl.tensor({ 1, 1, 2, 2, 3, 1, 1, 2 }), { return_inverse = true, return_counts = true })
  H.eq(u:totable(), { 1, 2, 3, 1, 2 }); H.eq(inv:totable(), { 1, 1, 2, 2, 3, 4, 4, 5 }); H.eq(c:totable(), { 2, 2, 1, 2, 1 })
  H.eq(dl.tensor({ { 5, 5 }, { 5, 6 } }):unique_consecutive({ return_inverse = true })
    and select(2, dl.unique_consecutive(dl.tensor({ { 5, 5 }, { 5, 6 } }), { return_inverse = true })).shape, { 2, 2 })
  H.eq(dl.unique_consecutive(dl.zeros(0)):numel(), 0)
  -- unique's dim: distinct slices in lexicographic order (torch.unique(x, dim=0) and dim=1,
  -- indices + 1)
  local m2 = dl.tensor({ { 1, 2 }, { 3, 4 }, { 1, 2 }, { 0, 9 } })
  local ur, ir, cr = dl.unique(m2, { dim = 1, return_inverse = true, return_counts = true })
  H.eq(ur:totable(), { { 0, 9 }, { 1, 2 }, { 3, 4 } }); H.eq(ir:totable(), { 2, 3, 2, 1 }); H.eq(cr:totable(), { 1, 2, 1 })
  local uc, ic, cc = dl.unique(m2, { dim = 2, return_inverse = true, return_counts = true })
  H.eq(uc:totable(), m2:totable()); H.eq(ic:totable(), { 1, 2 }); H.eq(cc:totable(), { 1, 1 })
  H.eq(dl.unique(dl.tensor({ { { 1, 1 }, { 2, 2 } }, { { 1, 1 }, { 2, 2 } }, { { 0, 1 }, { 2, 2 } } }), { dim = 1 }):totable(),
       { { { 0, 1 }, { 2, 2 } }, { { 1, 1 }, { 2, 2 } } })
  H.eq(dl.unique(dl.zeros(0, 2), { dim = 1 }).shape, { 0, 2 })
  -- a slice's elements compare in the order of x transposed (dim with the first), as
  -- PyTorch's: in (2, 1) order here, where (1, 2) order would put the third slice first
  local x3 = dl.tensor({ { { 0, 1, 1 }, { 1, 1, 0 } }, { { 1, 0, 1 }, { 0, 1, 1 } } })
  H.eq(dl.unique(x3, { dim = 3 }):totable(), x3:totable())
  -- cummax of bools (false < true), as PyTorch's
  local bv, bi = dl.cummax(dl.tensor({ false, true, false }), 1)
  H.eq(bv.dtype, "bool"); H.eq(bv:totable(), { false, true, true }); H.eq(bi:totable(), { 1, 2, 2 })
end)

H.test("arguments are checked", function()
  local x = dl.randn(2, 3)
  H.raises(function() return x:topk(4) end, "topk: k = 4 is out of range for a dimension of size 3")
  H.raises(function() return x:kthvalue(0, 1) end, "kthvalue: k = 0 is out of range")
  H.raises(function() return x:sort(3) end, "sort: dimension 3 out of range")
  H.raises(function() return dl.masked_select(x, x) end, "masked_select: expected a bool mask, got float32")
  H.raises(function() return dl.searchsorted(dl.ones(2, 3), dl.ones(3, 1)) end, "searchsorted: the leading dims")
  H.raises(function() return dl.unique(x, { dim = 3 }) end, "unique: dimension 3 is out of range")
  H.raises(function() return dl.unique(dl.zeros(3, 0), { dim = 1 }) end, "unique: the slices along dim 1 of shape (3, 0) are empty")
end)

H.test("dl.export captures sort and searchsorted", function()
  local path = (os.getenv("TMPDIR") or "/tmp") .. "/dlua_sort_" .. os.time() .. "_" .. math.random(1e6) .. ".dlg"
  local f = function(x)
    local v = x:sort(2, true)
    return dl.searchsorted(v:flip({ 2 }), x) + v:topk(2):sum()
  end
  local x = dl.randn(3, 5)
  dl.export(f, { x }, { path = path })
  local g = dl.export.load(path)
  local y = dl.randn(3, 5)
  H.ok(dl.equal(g(y), f(y)), "the loaded graph equals eager execution")
  os.remove(path)
end)

H.run()
