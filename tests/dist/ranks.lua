-- dl.dist on several ranks: run by tests/dist/run.py under `mpirun -np N` (2 and 3).
-- Every rank checks the same things; a failure on one rank ends the job (MPI_Abort).
local dl = require("dlua")
local H = require("harness")
local dist = dl.dist
dist.init({ timeout = 60 })
local r, n = dist.rank(), dist.size()

H.test("size and ranks", function()
  H.ok(n >= 2, "run under mpirun -np 2 or more")
  H.eq(dist.backend(), "mpi")
  H.eq(dist.is_main(), r == 0)
  H.eq(dl.get_num_threads(), 1)   -- two cores shared by the ranks of this machine
end)

H.test("collectives", function()
  local x = dl.tensor({ r + 1, 10 * (r + 1) }, { dtype = "float64" })
  local sum = n * (n + 1) / 2
  H.values(dist.allreduce(x), { sum, 10 * sum })
  H.values(dist.allreduce(x, { op = "mean" }), { sum / n, 10 * sum / n })
  H.values(dist.allreduce(x, { op = "max" }), { n, 10 * n })
  H.values(dist.allreduce(x, { op = "min" }), { 1, 10 })
  H.values(dist.allreduce(dl.tensor({ r + 2 }, { dtype = "int64" }), { op = "prod" }), { n == 2 and 6 or 24 })
  H.values(dist.broadcast(x, n - 1), { n, 10 * n })
  -- allgather: first dims differ between ranks
  local g = dist.allgather(dl.full({ r + 1, 2 }, r))
  local want = {}
  for k = 0, n - 1 do for _ = 1, k + 1 do want[#want + 1] = { k, k } end end
  H.values(g, want)
  local w1, w2 = dist.allreduce_async(x), dist.broadcast_async(x, 0)
  H.values(w2:wait(), { 1, 10 })
  H.values(w1:wait(), { sum, 10 * sum })
  H.values(w1:wait(), { sum, 10 * sum })   -- a second wait returns the result again
  -- an allgather and a barrier in flight together, waited for in the other order
  local wg, wb = dist.allgather_async(dl.full({ 1, 2 }, r)), dist.barrier_async()
  H.eq(wb:wait(), nil)
  local gathered = wg:wait()
  H.shape(gathered, { n, 2 })
  H.eq(gathered[n][1], n - 1)
  H.ok(wb:is_done() and wg:is_done())
  dist.barrier()
  local y = x:clone()
  H.ok(rawequal(dist.allreduce_(y, { op = "mean" }), y))
  H.values(y, { sum / n, 10 * sum / n })
  local z = dl.full({ 2 }, r)
  dist.broadcast_(z, 1)
  H.values(z, { 1, 1 })
  -- larger than a bucket, and empty
  local big = dl.full({ 300000 }, r + 1)
  H.eq(dist.allreduce(big)[300000], sum)
  H.eq(dist.allreduce(dl.empty(0)):numel(), 0)
  -- half tensors: reduced through float32 copies, moved as 16-bit words
  for _, dt in ipairs({ "float16", "bfloat16" }) do
    local hx = x:to(dt)
    local red = dist.allreduce(hx)
    H.eq(red.dtype, dt)
    H.values(red, { sum, 10 * sum })
    local hy = hx:clone()
    dist.allreduce_(hy, { op = "max" })
    H.values(hy, { n, 10 * n })
    H.values(dist.broadcast(hx, n - 1), { n, 10 * n })
    H.eq(dist.allgather(hx).dtype, dt)
  end
end)

H.test("gradients of the split batch equal one process's on the whole batch (float64)", function()
  dl.manual_seed(11)   -- the same data on every rank
  local X, Y = dl.randn(6 * n, 5, { dtype = "float64" }), dl.randn(6 * n, 2, { dtype = "float64" })
  local W1, W2 = dl.randn(5, 8, { dtype = "float64" }), dl.randn(8, 2, { dtype = "float64" })
  local function loss(w1, w2, x, y) return ((x:matmul(w1):tanh():matmul(w2) - y) ^ 2):mean() end
  local full1, full2 = dl.grad(loss, { 1, 2 })(W1, W2, X, Y)
  local xs, ys = X:narrow(1, 6 * r + 1, 6), Y:narrow(1, 6 * r + 1, 6)
  local l, g1, g2 = dist.value_and_grad(loss, { 1, 2 })(W1, W2, xs, ys)
  H.near(g1:totable(), full1:totable(), 1e-12)
  H.near(g2:totable(), full2:totable(), 1e-12)
  H.ok(dl.is_tensor(l))
  -- small buckets: the same numbers through many reductions
  local h1, h2 = dist.grad(loss, { 1, 2 }, { bucket_mb = 1e-4, first_bucket_mb = 1e-5 })(W1, W2, xs, ys)
  H.near(h1:totable(), full1:totable(), 1e-12)
  H.near(h2:totable(), full2:totable(), 1e-12)
  -- implicit gradients over Variables, and a parameter one rank does not use
  local a = dl.Variable(W1:clone(), "a")
  local b = dl.Variable(W2:clone(), "b")
  local c = dl.Variable(dl.ones(2, { dtype = "float64" }), "c")
  local step = dist.implicit_value_and_grad(function(x, y)
    local out = x:matmul(a):tanh():matmul(b)
    if r == 0 then out = out + c end
    return ((out - y) ^ 2):mean()
  end, { parameters = { a, b, c } })
  local _, pairs_ = step(xs, ys)
  H.eq(#pairs_, 3)
  H.ok(rawequal(pairs_[3][2], c))
  -- c's gradient: rank 0's own, averaged with the others' zeros
  local _, own = dl.implicit_value_and_grad(function(x, y)
    return ((x:matmul(a):tanh():matmul(b) + c - y) ^ 2):mean()
  end)(X:narrow(1, 1, 6), Y:narrow(1, 1, 6))
  local cg
  for _, p in ipairs(own) do if rawequal(p[2], c) then cg = p[1] end end
  H.near(pairs_[3][1]:totable(), (cg / n):totable(), 1e-12)
  -- the same tensor twice, reduced in place as buckets of their own: summed once each
  -- (a mean of equal values would not show a second reduction)
  local same = dl.full({ 50 }, r + 1, { dtype = "float64" })
  local twice = dist.allreduce_grads({ same, same }, { op = "sum", bucket_mb = 1e-6, first_bucket_mb = 1e-6 })
  for i = 1, 2 do H.near(twice[i]:totable(), dl.full({ 50 }, n * (n + 1) / 2):totable(), 1e-12) end
  -- without the list, ranks that used different Variables get an error, not a hang
  local bad = dist.implicit_grad(function(x)
    local out = x:matmul(a):sum()
    if r == 0 then out = out + c:sum() end
    return out
  end)
  H.raises(function() bad(xs) end, "the ranks' gradients differ")
end)

H.test("gradients are reduced while the backward pass runs (overlap), as after it", function()
  local f64 = { dtype = "float64" }
  dl.manual_seed(21)
  -- float32 and float64 parameters, direct (>= 64 KiB) and bucketed ones, data that
  -- differs between ranks
  local W1, B1 = dl.randn(30, 600, f64), dl.randn(600)
  local W2, B2 = dl.randn(600, 3), dl.randn(3, f64)
  local x = dl.randn(4, 30, f64) * (r + 1)
  local function loss(w1, b1, w2, b2, xx)
    local h = (xx:matmul(w1) + b1:to("float64")):tanh()
    return (h:to("float32"):matmul(w2):to("float64") + b2):pow(2):sum()
  end
  local before = dist.step_stats()
  -- (overlap = true: on this test's machine the ranks may have no spare core, where
  -- the default is to reduce after the pass)
  for _, opts in ipairs({ { op = "sum", overlap = true },
                          { op = "sum", overlap = true, bucket_mb = 1e-3, first_bucket_mb = 1e-4 },
                          { op = "mean", overlap = true, first_bucket_mb = 0 } }) do
    local want = { dist.grad(loss, { 1, 2, 3, 4 }, { op = opts.op, overlap = false })(W1, B1, W2, B2, x) }
    local got = { dist.grad(loss, { 1, 2, 3, 4 }, opts)(W1, B1, W2, B2, x) }
    for i = 1, 4 do
      H.eq(got[i].dtype, want[i].dtype)
      H.near(got[i]:totable(), want[i]:totable(), want[i].dtype == "float32" and 1e-4 or 1e-12)
    end
    -- the reference itself: the sum of the ranks' own gradients
    if opts.op == "sum" then
      local own = dl.grad(loss, 1)(W1, B1, W2, B2, x)
      H.near(got[1]:totable(), dist.allreduce(own):totable(), 1e-12)
    end
  end
  local after = dist.step_stats()
  H.eq(after.overlapped - before.overlapped, 3, "three passes reduced while they ran")
  H.eq(after.steps - before.steps, 6)
  H.ok(after.buckets > before.buckets + 6, "small buckets: many reductions")
  H.ok(after.comm_s > before.comm_s and after.exposed_s >= before.exposed_s and after.exposed >= 0)
end)

H.test("overlap: one gradient for two inputs, a parameter unused everywhere, a collective mid-pass", function()
  local f64 = { dtype = "float64" }
  dl.manual_seed(22)
  local V = dl.randn(2000, 100, f64)         -- 1.6 MB: reduced where it is
  local A, B = dl.randn(7, 2000, f64), dl.randn(7, 2000, f64)   -- 112 KB each: so are they
  local U = dl.randn(5, f64)                 -- not used by the loss: zeros, at once
  local x = dl.full({ 7, 1 }, r + 1, f64)
  -- A and B get the same gradient tensor from the addition: each must be summed once
  local function loss(a, b, v, u, xx) return ((a + b) * xx):matmul(v):tanh():sum() end
  local got = { dist.grad(loss, { 1, 2, 3, 4 }, { op = "sum", overlap = true })(A, B, V, U, x) }
  local want = { dl.grad(loss, { 1, 2, 3, 4 })(A, B, V, U, x) }
  for i = 1, 4 do H.near(got[i]:totable(), dist.allreduce(want[i]):totable(), 1e-10) end
  H.values(got[4], { 0, 0, 0, 0, 0 }, { tol = 0 })
  H.ok(not rawequal(got[1], got[2]))
  -- the backward of dist.allreduce makes a collective from Lua while buckets are in
  -- flight: it waits for them (MPI_THREAD_SERIALIZED), and the results are exact
  local W = dl.randn(50, 100, f64)
  local function across(v, w, xx)
    local h = dist.allreduce(xx:matmul(A):matmul(v))   -- v's gradient comes after the collective
    return (h:matmul(w:t())):tanh():sum()
  end
  local opts = { op = "sum", overlap = true, bucket_mb = 1e-3, first_bucket_mb = 1e-4 }
  local g1 = { dist.grad(across, { 1, 2 }, opts)(V, W, x:expand(7, 7)) }
  opts.overlap = false
  local g2 = { dist.grad(across, { 1, 2 }, opts)(V, W, x:expand(7, 7)) }
  for i = 1, 2 do H.near(g1[i]:totable(), g2[i]:totable(), 1e-12) end
end)

H.test("a tensor written by a collective is stale for a gradient recorded before", function()
  local w = dl.tensor({ 1, 2 }, { dtype = "float64" })
  local tape = dl.GradientTape()
  tape:watch(w)
  local y = tape:record(function() return (w * w):sum() end)
  dist.broadcast_(w, 0)
  H.raises(function() tape:gradient(y, w) end, "modified by an in-place operation")
end)

H.test("collectives inside dl.compile read the deferred values", function()
  local f = dl.compile(function(x) return dist.allreduce((x * 2 + 1):tanh() * (r + 1)) end)
  local x = dl.full({ 1000 }, 0.5)
  for _ = 1, 3 do   -- the first call captures, the later ones replay
    local want = (x * 2 + 1):tanh() * (n * (n + 1) / 2)
    H.near(f(x):totable(), want:totable(), 1e-6)
  end
end)

H.test("dist.implicit_value_and_grad inside dl.compile: averaged as outside it", function()
  -- (the reduction's hook waits for autograd's pass, so the compiled call runs that one)
  local f64 = { dtype = "float64" }
  dl.manual_seed(31)
  local a = dl.Variable(dl.randn(5, 8, f64), "ca")
  local b = dl.Variable(dl.randn(8, 2, f64), "cb")
  local x, y = dl.randn(6, 5, f64) * (r + 1), dl.randn(6, 2, f64)
  local loss = function(xx, yy) return ((xx:matmul(a):tanh():matmul(b) - yy) ^ 2):mean() end
  for _, opts in ipairs({ { overlap = false }, { overlap = true } }) do
    local eager = dist.implicit_value_and_grad(loss, opts)
    local compiled = dl.compile(dist.implicit_value_and_grad(loss, opts))
    for _ = 1, 3 do
      local lw, want = eager(x, y)
      local lg, got = compiled(x, y)
      H.near(lg:item(), lw:item(), 1e-12)
      H.eq(#got, #want)
      for i = 1, #want do
        H.ok(rawequal(got[i][2], want[i][2]))
        H.near(got[i][1]:totable(), want[i][1]:totable(), 1e-12)
      end
    end
  end
end)

H.test("GradientTape and the gradient of allgather", function()
  local x = dl.tensor({ 1, 2 }, { dtype = "float64" }) * (r + 1)
  local tape = dist.GradientTape(dl.GradientTape())
  tape:watch(x)
  local y = tape:record(function() return (x * x):sum() end)
  local g = tape:gradient(y, x)            -- mean over ranks of 2 x = 2 (1, 2) (n + 1) / 2
  H.values(g, { (n + 1), 2 * (n + 1) }, { tol = 1e-12 })
  -- Every rank's loss is the sum of the gathered values times (rank + 1): d/dx of the
  -- total is the sum over ranks of (rank + 1).
  local gx = dl.grad(function(v) return (dist.allgather(v) * (r + 1)):sum() end)(dl.ones(2, { dtype = "float64" }))
  local total = n * (n + 1) / 2
  H.values(gx, { total, total }, { tol = 1e-12 })
end)

H.test("parameters, optimizer state and objects from rank 0", function()
  dl.manual_seed(100 + r)   -- different weights on every rank
  local net = dl.nn.Sequential{ dl.nn.Linear(4, 3), dl.nn.ReLU(), dl.nn.Linear(3, 2) }
  dist.broadcast_parameters(net)
  local w = net:parameters()[1]
  local w0 = dist.broadcast(w, 0)
  H.values(w, w0:totable(), { tol = 0 })
  H.values(dist.allreduce(w, { op = "max" }), w:totable(), { tol = 0 })
  local opt = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }
  local grads = dl.implicit_grad(function() return net(dl.full({ 1, 4 }, r + 1)):sum() end)()
  opt:apply_gradients(grads)
  dist.broadcast_optimizer_state(opt)
  local sd = opt:state_dict()
  local keys = {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  table.sort(keys)   -- the same order on every rank
  H.ok(#keys > 2)
  for _, k in ipairs(keys) do
    local v = sd[k]
    if dl.is_tensor(v) then H.values(v, dist.broadcast(v, 0):totable(), { tol = 0 }) end
  end
  local big = dl.tensor({ 9007199254740993, -7 }, { dtype = "int64" })   -- 2^53 + 1: not a double
  local o = dist.broadcast_object(r == 0 and { epoch = 3, name = "run|x:1", flags = { true, false },
                                              t = dl.tensor({ 1.5, -2 }), big = big, s = dl.tensor(7.5) } or nil)
  H.eq(o.epoch, 3)
  H.ok(dl.equal(o.big, big), "int64 sent exactly")
  H.eq(o.s.ndim, 0)
  H.eq(o.s:item(), 7.5)
  H.eq(o.name, "run|x:1")
  H.eq(o.flags, { true, false })
  H.values(o.t, { 1.5, -2 })
  -- a mismatch names the first difference
  local other = r == 0 and dl.nn.Linear(4, 3) or dl.nn.Linear(5, 3)
  H.raises(function() dist.broadcast_parameters(other) end, "rank 0 has 'weight' float32 (3, 4)")
end)

H.test("optimizer state to a rank that has none", function()
  dl.manual_seed(5)
  local v = dl.Variable(dl.randn(3, 2), "v")
  local opt = dl.optim.Adam{ lr = 0.1 }
  if r == 0 then opt:apply_gradients({ { dl.ones(3, 2), v } }) end   -- only rank 0 has stepped
  dist.broadcast_optimizer_state(opt)
  local sd = opt:state_dict()
  H.eq(sd.iterations, 1)
  local keys = {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  table.sort(keys)
  H.ok(#keys >= 4, "buffers came: " .. table.concat(keys, " "))
  for _, k in ipairs(keys) do
    if dl.is_tensor(sd[k]) then H.values(sd[k], dist.broadcast(sd[k], 0):totable(), { tol = 0 }) end
  end
end)

H.test("dist.iter checks that the ranks have as many batches", function()
  local ds = dl.data.from_tensors(dl.arange(1, 11))
  local count = 0
  for _ in dist.iter(ds:batch(3)) do count = count + 1 end
  H.eq(count, 4)
  local filtered = ds:filter(function(x) return x:item() > 2 end)   -- size unknown before iterating
  count = 0
  for _ in dist.iter(filtered) do count = count + 1 end
  H.eq(count, 8)
  local uneven = dl.data.from_tensors(dl.arange(1, 11 + r)):batch(3)
  H.raises(function() for _ in dist.iter(uneven:take(3 + r)) do end end, "the ranks' data sets differ in length")
end)

H.test("shards of one pass are disjoint and cover the data", function()
  local N = 23
  local ds = dl.data.from_tensors(dl.arange(1, N + 1, { dtype = "int64" }))
  local mine = {}
  for v in dist.shard(ds, { seed = 5, even = "drop" }):iter() do mine[#mine + 1] = v:item() end
  H.eq(#mine, math.floor(N / n))
  local all = dist.allgather(dl.tensor(mine, { dtype = "int64" })):totable()
  local seen = {}
  for _, v in ipairs(all) do
    H.ok(not seen[v], "element " .. v .. " in two shards")
    seen[v] = true
  end
  local padded = 0
  for _ in dist.shard(ds, { seed = 5 }):batch(4):iter() do padded = padded + 1 end
  H.eq(padded, math.ceil(math.ceil(N / n) / 4))
end)

-- A failed check leaves the ranks at different collectives: end the job at once.
local ok, err = pcall(H.run)
if not ok then error(err, 0) end
