-- Selecting and writing by index, as PyTorch 1.13 does it: scatter's reduce, writes and
-- negative indices through integer index tensors, isin, unique_consecutive along a dim,
-- searchsorted's sorter, zero-size trailing dims, and the errors naming their op. The
-- expected values are torch's (the call in each comment; torch's indices 0-based).
local H = require("harness")
local dl = require("dlua")

local function L(t) return dl.tensor(t, { dtype = "int64" }) end

H.test("scatter's reduce: add and multiply, a number source, {reduce =}, in place", function()
  -- torch.zeros(3).scatter(0, tensor([0,0,1,1]), tensor([1.,2,3,4]), reduce='add')
  H.eq(dl.zeros(3):scatter(1, L({ 1, 1, 2, 2 }), dl.tensor({ 1, 2, 3, 4 }), "add"):totable(), { 3, 7, 0 })
  -- torch.full((2,3),2.).scatter(1, tensor([[0,0],[2,1]]), tensor([[3.,4,9],[5,6,9]]), reduce='multiply')
  local idx = L({ { 1, 1 }, { 3, 2 } })
  H.eq(dl.full({ 2, 3 }, 2):scatter(2, idx, dl.tensor({ { 3, 4, 9 }, { 5, 6, 9 } }), { reduce = "multiply" }):totable(),
       { { 24, 2, 2 }, { 2, 12, 10 } })
  -- torch.full((2,3),2.).scatter(1, tensor([[0,0],[2,1]]), 1.5, reduce='add')
  H.eq(dl.full({ 2, 3 }, 2):scatter(2, idx, 1.5, "add"):totable(), { { 5, 2, 2 }, { 2, 3.5, 3.5 } })
  -- torch.full((2,3),2).scatter(0, tensor([[0,0,1],[0,1,1]]), tensor([[3,4,5],[6,7,8]]), reduce='add')
  local ints = dl.full({ 2, 3 }, 2, { dtype = "int64" })
  H.eq(dl.scatter(ints, 1, L({ { 1, 1, 2 }, { 1, 2, 2 } }), L({ { 3, 4, 5 }, { 6, 7, 8 } }), "add"):totable(),
       { { 11, 6, 2 }, { 2, 9, 15 } })
  -- x = tensor([1.,2]); x.scatter_(0, tensor([1,1]), tensor([3.,4]), reduce='multiply')
  local x = dl.tensor({ 1, 2 })
  x:scatter_(1, L({ 2, 2 }), dl.tensor({ 3, 4 }), "multiply")
  H.eq(x:totable(), { 1, 24 })
  H.raises(function() dl.zeros(3):scatter(1, L({ 1 }), dl.ones(1), "mean") end,
           'scatter: reduce must be "add" or "multiply", got mean')
  H.raises(function() dl.zeros(3):scatter(1, L({ 1 }), dl.ones(1), { reduce = "add", how = 1 }) end,
           "scatter: unknown option 'how'")
end)

H.test("dl.scatter_add and x:scatter_add_", function()
  -- torch.scatter_add(torch.zeros(3), 0, tensor([0,0,2]), tensor([1.,2,3]))
  H.eq(dl.scatter_add(dl.zeros(3), 1, L({ 1, 1, 3 }), dl.tensor({ 1, 2, 3 })):totable(), { 3, 0, 3 })
  local x = dl.zeros(3)
  x:scatter_add_(1, L({ 1, 1, 3 }), dl.tensor({ 1, 2, 3 }))
  H.eq(x:totable(), { 3, 0, 3 })
end)

H.test("cumsum and cumprod convert to {dtype =} first, and keep it", function()
  -- torch.cumsum(tensor([1,2,3], dtype=int32), 0, dtype=torch.float64)
  local c = dl.tensor({ 1, 2, 3 }, { dtype = "int32" }):cumsum(1, { dtype = "float64" })
  H.eq(c.dtype, "float64"); H.eq(c:totable(), { 1, 3, 6 })
  -- torch.cumsum(tensor([1.5,2.5,3.7]), 0, dtype=torch.int32): tensor([1, 3, 6], dtype=int32)
  c = dl.cumsum(dl.tensor({ 1.5, 2.5, 3.7 }), 1, { dtype = "int32" })
  H.eq(c.dtype, "int32"); H.eq(c:totable(), { 1, 3, 6 })
  -- torch.cumsum(tensor([100,100,100], dtype=int32), 0, dtype=torch.uint8): [100, 200, 44]
  H.eq(dl.tensor({ 100, 100, 100 }, { dtype = "int32" }):cumsum(1, { dtype = "uint8" }):totable(), { 100, 200, 44 })
  -- torch.cumprod(tensor([1.5,2.5,3.7]), 0, dtype=torch.int64); of bools, dtype=torch.float32
  H.eq(dl.tensor({ 1.5, 2.5, 3.7 }):cumprod(1, { dtype = "int64" }):totable(), { 1, 2, 6 })
  c = dl.tensor({ true, true, false }):cumprod(1, { dtype = "float32" })
  H.eq(c.dtype, "float32"); H.eq(c:totable(), { 1, 1, 0 })
  -- a = tensor([1.,2,3], requires_grad=True); torch.cumprod(a, 0, dtype=torch.float64).sum().backward()
  local g = dl.grad(function(a) return a:cumprod(1, { dtype = "float64" }):sum() end)(dl.tensor({ 1, 2, 3 }))
  H.eq(g.dtype, "float32"); H.eq(g:totable(), { 9, 4, 2 })
  H.raises(function() dl.ones(2):cumsum(1, { dtype = "float65" }) end, "cumsum: unknown dtype 'float65'")
  H.raises(function() dl.ones(2):cumprod(1, { dtyp = "float64" }) end, "cumprod: unknown option 'dtyp'")
end)

H.test("x[idx] = v, x[{{}, idx}] = v, x[{{}, mask}] = v: broadcast, negative, last write stands", function()
  -- y = torch.zeros(4); y[tensor([0,-1,0])] = tensor([10.,20,30])
  local y = dl.zeros(4)
  y[L({ 1, -1, 1 })] = dl.tensor({ 10, 20, 30 })
  H.eq(y:totable(), { 30, 0, 0, 20 })
  -- x = torch.zeros(3,2); x[tensor([-1])] = 4.
  local x = dl.zeros(3, 2)
  x[L({ -1 })] = 4
  H.eq(x:totable(), { { 0, 0 }, { 0, 0 }, { 4, 4 } })
  -- x = torch.zeros(3,2); x[tensor([[0],[2]])] = tensor([[[1.,2.]]])   (leading 1s dropped)
  x = dl.zeros(3, 2)
  x[L({ { 1 }, { 3 } })] = dl.tensor({ { { 1, 2 } } })
  H.eq(x:totable(), { { 1, 2 }, { 0, 0 }, { 1, 2 } })
  -- x = torch.zeros(2,3,2); x[1, tensor([[0,-1]]), 0] = tensor([[8.,9.]])
  x = dl.zeros(2, 3, 2)
  x[{ 2, L({ { 1, -1 } }), 1 }] = dl.tensor({ { 8, 9 } })
  H.eq(x:totable(), { { { 0, 0 }, { 0, 0 }, { 0, 0 } }, { { 8, 0 }, { 0, 0 }, { 9, 0 } } })
  x = dl.zeros(2, 3)
  H.raises(function() x[L({ 1, 2 })] = dl.tensor({ 1, 2 }) end,
           "index: the subscript selects shape (2, 3), and the values' shape (2,) does not broadcast to it")
  H.raises(function() x[{ {}, L({ 4 }) }] = 1 end, "index: index 4 out of range for dimension 2 of size 3")
  H.eq(x:sum():item(), 0)
end)

H.test("writes through index tensors carry gradients as PyTorch's index_put_", function()
  local w = dl.tensor({ 1, 2, 3, 4 })
  -- y = a * 1; y[tensor([0,-1,0])] = b; (y * w).sum().backward()
  local ga, gb = dl.grad(function(a, b)
    local y = a * 1
    y[L({ 1, -1, 1 })] = b
    return (y * w):sum()
  end, { 1, 2 })(dl.tensor({ 1, 2, 3, 4 }), dl.tensor({ 10, 20, 30 }))
  H.eq(ga:totable(), { 0, 2, 3, 0 }); H.eq(gb:totable(), { 1, 4, 1 })
  local w2 = dl.arange(1, 7):view(2, 3)
  -- y = a * 1; y[:, tensor([2,0])] = b (b of shape (2,1)); (y * arange(1.,7).view(2,3)).sum().backward()
  ga, gb = dl.grad(function(a, b)
    local y = a * 1
    y[{ {}, L({ 3, 1 }) }] = b
    return (y * w2):sum()
  end, { 1, 2 })(dl.ones(2, 3), dl.tensor({ { 5 }, { 7 } }))
  H.eq(ga:totable(), { { 0, 2, 0 }, { 0, 5, 0 } }); H.eq(gb:totable(), { { 4 }, { 10 } })
  -- the same with y[:, tensor([True,False,True])] = b, b = tensor([5.,7.])
  local y3
  ga, gb = dl.grad(function(a, b)
    local y = a * 1
    y[{ {}, dl.tensor({ true, false, true }) }] = b
    y3 = dl.stop_gradient(y)
    return (y * w2):sum()
  end, { 1, 2 })(dl.ones(2, 3), dl.tensor({ 5, 7 }))
  H.eq(y3:totable(), { { 5, 1, 7 }, { 5, 1, 7 } })
  H.eq(ga:totable(), { { 0, 2, 0 }, { 0, 5, 0 } }); H.eq(gb:totable(), { 5, 9 })
end)

H.test("negative indices in x[idx] and x[{..., idx}], range-checked", function()
  local x = dl.arange(1, 7):view(3, 2)
  -- x[tensor([-1,0])], x[:, tensor([[-1,0]])]
  H.eq(x[L({ -1, 1 })]:totable(), { { 5, 6 }, { 1, 2 } })
  H.eq(x[{ {}, L({ { -1, 1 } }) }]:totable(), { { { 2, 1 } }, { { 4, 3 } }, { { 6, 5 } } })
  H.eq(x[dl.tensor({ -2 }, { dtype = "int32" })]:totable(), { { 3, 4 } })
  -- a[tensor([-1,-1,0])].sum().backward(): tensor([1., 0., 2.])
  H.eq(dl.grad(function(a) return a[L({ -1, -1, 1 })]:sum() end)(dl.ones(3)):totable(), { 1, 0, 2 })
  H.raises(function() return x[L({ -4 })] end, "index: index -4 out of range for dimension 1 of size 3")
  H.raises(function() return x[L({ -1, 0, 1 })] end, "index: index 0 out of range for dimension 1 of size 3")
  H.raises(function() return x[{ {}, L({ 3 }) }] end, "index: index 3 out of range for dimension 2 of size 2")
end)

H.test("a zero-size trailing dim: masks, index_put, assignment", function()
  -- torch.zeros(3,0)[tensor([True,False,True])].shape: (2, 0); zeros(2,3,0)[ones(2,3,bool)]: (6, 0)
  H.eq(dl.zeros(3, 0)[dl.tensor({ true, false, true })].shape, { 2, 0 })
  H.eq(dl.zeros(2, 3, 0)[dl.ones(2, 3, { dtype = "bool" })].shape, { 6, 0 })
  -- torch.zeros(3,0).index_put((tensor([0,2]),), torch.zeros(2,0)).shape: (3, 0)
  H.eq(dl.zeros(3, 0):index_put({ L({ 1, 3 }) }, dl.zeros(2, 0)).shape, { 3, 0 })
  local y = dl.zeros(3, 0)
  y[dl.tensor({ true, false, true })] = dl.zeros(2, 0)
  H.eq(y.shape, { 3, 0 })
end)

H.test("dl.isin and x:isin, as torch.isin", function()
  -- torch.isin(tensor([[1,2],[3,4]]), tensor([2,3,9]))
  H.eq(dl.isin(L({ { 1, 2 }, { 3, 4 } }), L({ 2, 3, 9 })):totable(), { { false, true }, { true, false } })
  -- torch.isin(tensor([1.,nan,2.5]), tensor([nan,1.]), invert=True)
  H.eq(dl.tensor({ 1, 0 / 0, 2.5 }):isin(dl.tensor({ 0 / 0, 1 }), { invert = true }):totable(), { false, true, true })
  -- torch.isin(tensor([1,2,3]), tensor([1.5,2.0])); torch.isin(tensor([1.5,2.0]), tensor([1,2,3]))
  H.eq(dl.isin(L({ 1, 2, 3 }), dl.tensor({ 1.5, 2 })):totable(), { false, true, false })
  H.eq(dl.isin(dl.tensor({ 1.5, 2 }), L({ 1, 2, 3 })):totable(), { false, true })
  -- torch.isin(2, tensor([1,2,3])): tensor(True); torch.isin(tensor([1,2,3]), 2.0)
  local s = dl.isin(2, L({ 1, 2, 3 }))
  H.eq(s:dim(), 0); H.eq(s:item(), true)
  H.eq(dl.isin(L({ 1, 2, 3 }), 2.0):totable(), { false, true, false })
  -- torch.isin(tensor([1,2,3], dtype=uint8), tensor([-1,2])); against an empty test set
  H.eq(dl.isin(dl.tensor({ 1, 2, 3 }, { dtype = "uint8" }), L({ -1, 2 })):totable(), { false, true, false })
  H.eq(dl.isin(L({ 1, 2, 3 }), dl.zeros(0, { dtype = "int64" })):totable(), { false, false, false })
  -- torch.isin(tensor([1,2,2,3]), tensor([2,3]), assume_unique=True)
  H.eq(dl.isin(L({ 1, 2, 2, 3 }), L({ 2, 3 }), { assume_unique = true }):totable(), { false, true, true, true })
  H.raises(function() dl.isin(dl.tensor({ true }), dl.tensor({ true })) end, "isin: bool tensors are not supported")
  H.raises(function() dl.isin(L({ 1 }), L({ 1 }), { inverted = true }) end, "isin: unknown option 'inverted'")
end)

H.test("unique_consecutive along a dim", function()
  local x = L({ { 1, 1, 2, 2, 1 }, { 3, 3, 4, 5, 3 } })
  -- torch.unique_consecutive(x, dim=1, return_inverse=True, return_counts=True)
  local v, inv, counts = dl.unique_consecutive(x, { dim = 2, return_inverse = true, return_counts = true })
  H.eq(v:totable(), { { 1, 2, 2, 1 }, { 3, 4, 5, 3 } })
  H.eq(inv:totable(), { 1, 1, 2, 3, 4 }); H.eq(counts:totable(), { 2, 1, 1, 1 })
  H.eq(x:unique_consecutive({ dim = -1 }):totable(), { { 1, 2, 2, 1 }, { 3, 4, 5, 3 } })
  -- y = tensor([[[1.,1],[2,2]],[[1,1],[2,2]],[[0,1],[2,2]]]); unique_consecutive(y, dim=0, ...)
  local y = dl.tensor({ { { 1, 1 }, { 2, 2 } }, { { 1, 1 }, { 2, 2 } }, { { 0, 1 }, { 2, 2 } } })
  v, inv, counts = dl.unique_consecutive(y, { dim = 1, return_inverse = true, return_counts = true })
  H.eq(v:totable(), { { { 1, 1 }, { 2, 2 } }, { { 0, 1 }, { 2, 2 } } })
  H.eq(inv:totable(), { 1, 1, 2 }); H.eq(counts:totable(), { 2, 1 })
  -- rows holding NaN differ from each other: tensor([[nan,1],[nan,1]]) keeps both
  H.eq(dl.unique_consecutive(dl.tensor({ { 0 / 0, 1 }, { 0 / 0, 1 } }), { dim = 1 }):size(1), 2)
  -- torch.unique_consecutive(torch.zeros(3,0), dim=1): (3, 0), empty inverse and counts
  v, inv = dl.unique_consecutive(dl.zeros(3, 0), { dim = 2, return_inverse = true })
  H.eq(v.shape, { 3, 0 }); H.eq(inv:numel(), 0)
  H.raises(function() dl.unique_consecutive(dl.zeros(3, 0), { dim = 1 }) end,
           "unique_consecutive: the slices along dim 1 of shape (3, 0) are empty")
  H.raises(function() dl.unique_consecutive(dl.tensor(3), { dim = 1 }) end,
           "unique_consecutive: dimension 1 is out of range for a tensor of 0 dims")
end)

H.test("searchsorted's sorter and out_int32; bucketize's out_int32", function()
  local s, vals = dl.tensor({ 5, 1, 3 }), dl.tensor({ 0, 3, 6 })
  -- torch.searchsorted(tensor([5.,1,3]), tensor([0.,3,6]), sorter=tensor([1,2,0])): [0, 1, 3]
  H.eq(dl.searchsorted(s, vals, { sorter = L({ 2, 3, 1 }) }):totable(), { 1, 2, 4 })
  H.eq(dl.searchsorted(s, vals, { sorter = s:argsort() }):totable(), { 1, 2, 4 })
  -- ... right=True, out_int32=True: tensor([0, 2, 3], dtype=int32)
  local p = dl.searchsorted(s, vals, { sorter = L({ 2, 3, 1 }), right = true, out_int32 = true })
  H.eq(p.dtype, "int32"); H.eq(p:totable(), { 1, 3, 4 })
  -- s2 = tensor([[3.,1,2],[6,5,4]]); searchsorted(s2, tensor([[2.5],[5.]]), sorter=s2.argsort(-1))
  local s2 = dl.tensor({ { 3, 1, 2 }, { 6, 5, 4 } })
  H.eq(dl.searchsorted(s2, dl.tensor({ { 2.5 }, { 5 } }), { sorter = s2:argsort() }):totable(), { { 3 }, { 2 } })
  -- torch.bucketize(tensor([0.,3,6]), tensor([1.,3,5]), out_int32=True): tensor([0, 1, 3], dtype=int32)
  p = dl.bucketize(vals, dl.tensor({ 1, 3, 5 }), { out_int32 = true })
  H.eq(p.dtype, "int32"); H.eq(p:totable(), { 1, 2, 4 })
  H.raises(function() dl.searchsorted(s, vals, { sorter = L({ 1, 2 }) }) end,
           "searchsorted: the sorter's shape (2,) must be the sorted sequence's (3,)")
  H.raises(function() dl.searchsorted(s, vals, { sorter = dl.tensor({ 2, 3, 1 }, { dtype = "int32" }) }) end,
           "searchsorted: the sorter must be int64")
  H.raises(function() dl.searchsorted(s, vals, { sorter = L({ 0, 1, 2 }) }) end,
           "searchsorted: a sorter index is out of range for the last dim of size 3")
  H.raises(function() dl.searchsorted(s, vals, { out_int32 = 1 }) end, "searchsorted: expected out_int32 (a boolean)")
  H.raises(function() dl.bucketize(vals, s, { sorter = L({ 2, 3, 1 }) }) end, "bucketize: unknown option 'sorter'")
end)

H.test("a mask assignment refuses values that do not broadcast (PyTorch's rule)", function()
  local x = dl.zeros(2, 3)
  -- x[tensor([True,True])] = tensor([1.,2,3,4,5,6]): shape mismatch in torch
  H.raises(function() x[dl.tensor({ true, true })] = dl.arange(1, 7) end,
           "index: the mask's selection has shape (2, 3), and the values' shape (6,) does not broadcast to it")
  H.raises(function() x[dl.tensor({ true, true })] = dl.arange(1, 7):view(3, 2) end,
           "index: the mask's selection has shape (2, 3), and the values' shape (3, 2) does not broadcast to it")
  H.eq(x:sum():item(), 0)
  -- x[tensor([True,True])] = tensor([[[1.,2,3]]]): one row for every row picked
  x[dl.tensor({ true, true })] = dl.tensor({ { { 1, 2, 3 } } })
  H.eq(x:totable(), { { 1, 2, 3 }, { 1, 2, 3 } })
end)

H.test("errors name the op called", function()
  H.raises(function() dl.tensor({ 1, 2 }):count_nonzero(3) end,
           "count_nonzero: dimension 3 is out of range for a tensor of 1 dims")
  H.raises(function() dl.tensor({ 1, 2 }):count_nonzero({ 1, 2 }) end,
           "count_nonzero: dimension 2 is out of range for a tensor of 1 dims")
  -- torch.count_nonzero(tensor(3.), dim=0): tensor(1)
  H.eq(dl.tensor(3):count_nonzero(1):item(), 1)
  H.raises(function() dl.diff(dl.tensor({ 1, 2 }), 1, 1, dl.zeros(2, 2)) end,
           "diff: the tensor to prepend has shape (2, 2); it must match the input's (2,) but along dim 1")
  H.raises(function() dl.diff(dl.zeros(2, 2), 1, 2, nil, dl.zeros(1, 2)) end,
           "diff: the tensor to append has shape (1, 2); it must match the input's (2, 2) but along dim 2")
  -- torch.diff(tensor([[1.,2],[3,5]]), dim=1, prepend=torch.zeros(2,1))
  H.eq(dl.diff(dl.tensor({ { 1, 2 }, { 3, 5 } }), 1, 2, dl.zeros(2, 1)):totable(), { { 1, 1 }, { 3, 2 } })
  H.raises(function() dl.zeros(2, 2):scatter(1, L({ { 1, 2, 1 } }), dl.ones(1, 3)) end,
           "scatter: the index of shape (1, 3) is larger than the input of shape (2, 2) in dim 2")
  H.raises(function() dl.zeros(2, 2):scatter(1, L({ { 5 } }), dl.ones(1, 1)) end,
           "scatter: index 5 out of range for dimension 1 of size 2")
  H.raises(function() dl.zeros(2, 2):scatter(1, L({ { 5 } }), 1, "add") end,
           "scatter: index 5 out of range for dimension 1 of size 2")
  -- the range is the engine's to check as it scatters (no wait on the indices first):
  -- so a number scattered in dl.vmap works, as it did
  H.eq(dl.vmap(function(r) return r:scatter(1, L({ 1 }), 0) end)(dl.ones(2, 3)):totable(), { { 0, 1, 1 }, { 0, 1, 1 } })
  -- index 0 beside negative ones (the largest index 0) is named as out of range
  H.raises(function() local x = dl.zeros(3); x[L({ -1, 0 })] = 5 end, "index: index 0 out of range for dimension 1")
  H.raises(function() return dl.zeros(3)[L({ -1, 0 })] end, "index: index 0 out of range for dimension 1")
  H.raises(function() dl.cummax(dl.ones(3)) end, "cummax: expected the dim to run along")
  H.raises(function() dl.ones(3):cummin() end, "cummin: expected the dim to run along")
  H.raises(function() dl.logcumsumexp(dl.ones(3)) end, "logcumsumexp: expected the dim to run along")
end)

H.test("x[idx] = v by rows (a few places, no gradient) equals the index_copy way, duplicates and negatives too", function()
  dl.manual_seed(3)
  for _, n in ipairs({ 4, 40 }) do   -- (40: past the few places written row by row)
    local a = dl.randn(50, 5, { dtype = "float64" })
    local b = a:clone()
    local I = dl.randint(-50, 51, { n }, { dtype = "int64" })
    I = dl.where(I:eq(0), 1, I)
    I[1], I[2] = 7, 7                                   -- a place written twice: the last stands
    local V = dl.randn(n, 5, { dtype = "float64" })
    a[I] = V
    local pos = dl.where(I:lt(0), I + 51, I)
    H.ok(dl.equal(a, b:index_copy(1, pos, V)), "n = " .. n)
    local c = b:clone()
    c[{ {}, dl.tensor({ 2, -1 }, { dtype = "int64" }) }] = 0.5
    H.eq(c[{ {}, 5 }]:sum():item(), 25)
    H.eq(c[{ {}, 1 }]:sum():item(), b[{ {}, 1 }]:sum():item())
  end
end)

H.test("x[idx] = v by rows: values that are x's own rows are read before any write; an expanded target is refused", function()
  local x = dl.arange(0, 12, { dtype = "float32" }):reshape({ 4, 3 })
  x[L({ 2, 3 })] = x[{ { 1, 2 } }]   -- a shift: rows 2 and 3 get the old rows 1 and 2
  H.values(x, { { 0, 1, 2 }, { 0, 1, 2 }, { 3, 4, 5 }, { 9, 10, 11 } })
  local y = dl.arange(0, 12, { dtype = "float32" }):reshape({ 4, 3 })
  y[L({ 4, 3, 2, 1 })] = y           -- reversed in place
  H.values(y, { { 9, 10, 11 }, { 6, 7, 8 }, { 3, 4, 5 }, { 0, 1, 2 } })
  local b = dl.zeros(5)
  local e = b:view(1, 5):expand(4, 5)
  H.raises(function() e[L({ 2 })] = 1 end, "the in-place target has elements sharing memory")
  H.values(b, { 0, 0, 0, 0, 0 })
end)

H.run()
