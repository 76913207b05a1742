-- dl.dist on one process (no mpirun): every collective is the identity of one rank, the
-- gradient wrappers give dl.*'s gradients, Dataset:shard's parts, and the errors of
-- misuse. tests/dist/ runs the same API on 2 and 3 ranks under mpirun.
local dl = require("dlua")
local H = require("harness")
-- (read before the module loads: the table kept is the one it fills)
local dist = dl.dist

H.test("dl.dist's module loads on first use, into the table a script already holds", function()
  H.eq(package.loaded["dlua.dist"], nil)
  H.eq(type(dist.init), "function")
  H.ok(package.loaded["dlua.dist"] ~= nil)
  H.ok(rawequal(dl.dist, dist))
  H.eq(getmetatable(dist), nil)
end)

H.test("collectives before init are refused", function()
  H.ok(not dist.is_initialized())
  H.raises(function() dist.allreduce(dl.ones(2)) end, "dist.allreduce: dl.dist is not initialised (call dist.init() first)")
  H.raises(function() dist.rank() end, "dist.rank: dl.dist is not initialised")
  H.raises(function() dist.shard(dl.data.from_tensors(dl.ones(4)), {}) end, "dist.shard: dl.dist is not initialised")
end)

H.test("init alone: size 1, no MPI", function()
  H.raises(function() dist.init({ timeout = -1 }) end, "dist.init: timeout must be a number >= 0")
  H.raises(function() dist.init({ bogus = 1 }) end, "dist.init: unknown option 'bogus'")
  H.eq(dist.init({ timeout = 30 }), dist)
  H.eq(dist.rank(), 0)
  H.eq(dist.size(), 1)
  H.eq(dist.local_rank(), 0)
  H.ok(dist.is_main())
  H.eq(dist.backend(), "none")
  H.raises(function() dist.init() end, "dist.init: dl.dist is already initialised (rank 0 of 1)")
  -- Alone, neither the plugin nor Open MPI is mapped into the process.
  local maps = io.open("/proc/self/maps")
  if maps then
    local text = maps:read("*a")
    maps:close()
    H.ok(text:find("libdlua_dist", 1, true) == nil, "libdlua_dist.so is mapped at size 1")
    H.ok(text:find("libmpi", 1, true) == nil, "libmpi is mapped at size 1")
    H.ok(text:find("libopen-pal", 1, true) == nil, "Open MPI's libopen-pal is mapped at size 1")
  end
end)

H.test("collectives of one rank", function()
  local x = dl.tensor({ { 1, 2 }, { 3, 4 } })
  local r = dist.allreduce(x)
  H.values(r, { { 1, 2 }, { 3, 4 } })
  r:add_(1)
  H.values(x, { { 1, 2 }, { 3, 4 } }, { tol = 0 })   -- a new tensor, never the argument
  H.values(dist.allreduce(x, { op = "mean" }), { { 1, 2 }, { 3, 4 } })
  H.values(dist.allreduce(x, { op = "max" }), { { 1, 2 }, { 3, 4 } })
  H.values(dist.broadcast(x, 0), { { 1, 2 }, { 3, 4 } })
  H.values(dist.allgather(x), { { 1, 2 }, { 3, 4 } })
  H.values(dist.allreduce_async(x):wait(), { { 1, 2 }, { 3, 4 } })
  local y = x:clone()
  H.ok(rawequal(dist.allreduce_(y), y))
  H.ok(rawequal(dist.broadcast_(y, 0), y))
  H.raises(function() dist.allreduce_(x:t()) end, "dist.allreduce_: the tensor must be contiguous")
  H.ok(dist.allgather_async(x):is_done())
  dist.barrier()
  local wb = dist.barrier_async()
  H.ok(wb:is_done())
  H.eq(wb:wait(), nil)
  H.raises(function() dist.allreduce(x, { op = "median" }) end, "dist.allreduce: op must be sum, mean, max, min or prod")
  H.raises(function() dist.allreduce(dl.tensor({ 1, 2 }, { dtype = "int64" }), { op = "mean" }) end,
           "dist.allreduce: a mean of a int64 tensor")
  H.raises(function() dist.broadcast(x, 1) end, "dist.broadcast: root must be a rank from 0 to 0, got 1")
  H.raises(function() dist.allreduce(3) end, "dist.allreduce: expected a tensor, got number")
  H.raises(function() dist.allgather(dl.tensor(1)) end, "dist.allgather: cannot gather a 0-dim tensor")
  local o = { a = 1, b = { "x", true }, t = dl.ones(2) }
  H.ok(rawequal(dist.broadcast_object(o), o))
end)

H.test("a loop of small collectives compiles (no closure made or closed on their way)", function()
  -- A collective that makes a closure over its locals closes them at every return,
  -- which LuaJIT does not compile (UCLO): the loop ran interpreted, a few microseconds of
  -- a small allreduce's latency under mpirun. At size 1 the same returns are taken.
  if not (jit and jit.status and jit.status()) then print("        skipped: the JIT is off") return end
  local util, vmdef = require("jit.util"), require("jit.vmdef")
  local function bytecode(name) return (vmdef.bcnames:find(string.format("%-6s", name), 1, true) - 1) / 6 end
  local UCLO, FNEW = bytecode("UCLO"), bytecode("FNEW")
  for _, case in ipairs({
    { "allreduce_", function(x) return dist.allreduce_(x) end },
    { "allreduce_ mean", function(x) return dist.allreduce_(x, { op = "mean" }) end },
    { "broadcast_", function(x) return dist.broadcast_(x, 0) end },
  }) do
    local x = dl.ones(4)
    local body = case[2]
    local function loop()
      for _ = 1, 3000 do body(x) end
    end
    -- The loop must compile (traces stop) and no trace may abort on a closure (FNEW, or
    -- UCLO at a return). Whether the loop's own trace closes on itself or links into
    -- one that an inner loop rooted first (the options check iterates its table: a
    -- trace of its own) depends on which hot counter fills first, which varies from run
    -- to run, so the link type is not checked.
    local stopped, closures = 0, {}
    local function on_trace(what, tr, func, pc, otr, oex)
      if what == "stop" then stopped = stopped + 1 end
      if what == "abort" and vmdef.traceerr[otr] == "NYI: bytecode %d" and (oex == UCLO or oex == FNEW) then
        closures[#closures + 1] = util.funcinfo(func, pc).loc
      end
    end
    jit.attach(on_trace, "trace")
    local ok, err = pcall(loop)
    jit.attach(on_trace)
    H.ok(ok, err)
    H.ok(stopped > 0, case[1] .. ": the loop did not compile")
    H.eq(#closures, 0, case[1] .. ": traces aborted on a closure at " .. table.concat(closures, ", "))
  end
end)

H.test("allreduce is differentiable", function()
  local g = dl.grad(function(w) return (dist.allreduce(w) * dist.allreduce(w)):sum() end)(dl.tensor({ 1, 2 }))
  H.values(g, { 2, 4 })
end)

H.test("gradient wrappers equal dl's at size 1", function()
  local f = function(w, x) return (x:matmul(w):tanh() ^ 2):mean() end
  dl.manual_seed(3)
  local w, x = dl.randn(4, 3, { dtype = "float64" }), dl.randn(5, 4, { dtype = "float64" })
  H.values(dist.grad(f)(w, x), dl.grad(f)(w, x):totable(), { tol = 0 })
  local y1, g1 = dist.value_and_grad(f)(w, x)
  local y2, g2 = dl.value_and_grad(f)(w, x)
  H.values(y1, y2:totable(), { tol = 0 })
  H.values(g1, g2:totable(), { tol = 0 })
  local gw, gx = dist.grad(f, { 1, 2 })(w, x)
  H.values(gw, dl.grad(f)(w, x):totable(), { tol = 0 })
  H.values(gx, dl.grad(f, 2)(w, x):totable(), { tol = 0 })
  local v = dl.Variable(dl.ones(3, { dtype = "float64" }), "v")
  local loss = function(k) return (v * k):sum() end
  local y, pairs_ = dist.implicit_value_and_grad(loss)(2)
  H.values(y, 6)
  H.eq(#pairs_, 1)
  H.ok(rawequal(pairs_[1][2], v))
  H.values(pairs_[1][1], { 2, 2, 2 })
  local local_pairs = dist.implicit_grad(loss, { sync = false })(3)
  H.values(dist.allreduce_grads(local_pairs)[1][1], { 3, 3, 3 })
  H.raises(function() dist.grad(f, { op = "median" }) end, "dist.grad: op must be mean or sum")
  -- has_aux, as dl.grad's: the auxiliary values after the gradients
  local ga, aux = dist.grad(function(u) return (u * u):sum(), "aux" end, 1, { has_aux = true })(w)
  H.values(ga, (w * 2):totable()); H.eq(aux, "aux")
  H.raises(function() dist.implicit_grad(f, { has_aux = true }) end, "dist.implicit_grad: unknown option 'has_aux'")
  -- only the outermost gradient communicates
  H.raises(function() dl.grad(function(v) return dist.grad(function(u) return (u * u):sum() end)(v):sum() end)(w) end,
           "dist.grad: a gradient averaged over the ranks cannot be taken inside another gradient")
  H.raises(function() dl.grad(function(v) local _, g = dist.value_and_grad(function(u) return u:sum() end)(v); return g:sum() end)(w) end,
           "use dl.value_and_grad inside")
  H.raises(function() dist.grad(f, nil, { bogus = true }) end, "dist.grad: unknown option 'bogus'")
  H.values(dist.grad(f, 1, { overlap = false })(w, x), dl.grad(f)(w, x):totable(), { tol = 0 })
  -- one rank reduces nothing
  local st = dist.step_stats()
  H.eq(st.steps, 0)
  H.eq(st.comm_s, 0)
  H.eq(st.exposed, 0)
end)

H.test("broadcast of parameters and optimizer state at size 1", function()
  local net = dl.nn.Linear(3, 2)
  local before = net.weight:clone()
  dist.broadcast_parameters(net)
  H.values(net.weight, before:totable(), { tol = 0 })
  local opt = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }
  dist.broadcast_optimizer_state(opt)
  H.raises(function() dist.broadcast_parameters(3) end, "dist.broadcast_parameters: expected a module or a table of tensors")
end)

H.test("Dataset:shard: parts partition the data, equal lengths", function()
  local N = 10
  local ds = dl.data.from_tensors(dl.arange(1, N + 1, { dtype = "int64" }))
  local function items(d)
    local out = {}
    for v in d:iter() do out[#out + 1] = v:item() end
    return out
  end
  H.eq(items(ds:shard(3, 1)), { 1, 4, 7, 10 })
  H.eq(items(ds:shard(3, 2)), { 2, 5, 8, 1 })    -- padded from the start
  H.eq(items(ds:shard(3, 3)), { 3, 6, 9, 2 })
  H.eq(items(ds:shard(3, 3, { even = "drop" })), { 3, 6, 9 })
  H.eq(ds:shard(3, 2):size(), 4)
  H.eq(ds:shard(3, 2, { even = "drop" }):size(), 3)
  -- With a seed, the parts of one pass are disjoint and cover the data set, and are the
  -- same in every process that uses the seed.
  local seen = {}
  for i = 1, 2 do
    for _, v in ipairs(items(ds:shard(2, i, { seed = 7 }))) do
      H.ok(not seen[v], "element " .. v .. " twice")
      seen[v] = true
    end
  end
  for v = 1, N do H.ok(seen[v], "element " .. v .. " missing") end
  H.eq(items(ds:shard(2, 1, { seed = 7 })), items(ds:shard(2, 1, { seed = 7 })))
  -- A shard's second pass is shuffled anew, like shuffle(seed).
  local d = ds:shard(2, 1, { seed = 7 })
  local a, b = items(d), items(d)
  H.ok(table.concat(a, ",") ~= table.concat(b, ","), "the second pass reshuffles")
  -- Batches over a shard of rows, and a shard of a mapped data set (elements in memory).
  local batches = {}
  for v in ds:shard(2, 2):batch(2):iter() do batches[#batches + 1] = v:totable() end
  H.eq(batches, { { 2, 4 }, { 6, 8 }, { 10 } })
  local mapped = ds:map(function(v) return v * 10 end)
  H.eq(items(mapped:shard(4, 4)), { 40, 80, 20 })
  H.eq(tostring(ds:shard(3, 1)), "Dataset: from_tensors((10,)):shard(3, 1)")
  H.eq(items(dist.shard(ds, { seed = 7 })), items(ds:shard(1, 1, { seed = 7 })))
  local n = 0
  for _ in dist.iter(ds:filter(function(v) return v:item() % 2 == 0 end)) do n = n + 1 end
  H.eq(n, 5)
  H.raises(function() dist.iter(3) end, "dist.iter: expected a data set, got number")
  H.raises(function() ds:shard(2, 3) end, "shard: the part must be an integer from 1 to 2, got 3")
  H.raises(function() ds:shard(0, 1) end, "shard: the number of parts must be an integer >= 1")
  H.raises(function() ds:shard(2, 1, { even = "round" }) end, "shard: even must be 'pad' or 'drop'")
  H.raises(function() ds:shard(2, 1, { seed = 1.5 }) end, "shard: the seed must be an integer")
end)

H.test("the CUDA plugin's NCCL backend, where it was built", function()
  local ffi = require("ffi")
  local path = ffi.string(require("dlua.core").C.dl_engine_dir()) .. "libdlua_cuda.so"
  local ok, lib = pcall(ffi.load, path)
  if not ok then print("        skipped: no CUDA plugin in this build") return end
  pcall(ffi.cdef, "const char* dln_cdef(void);")
  if not pcall(function() return lib.dln_cdef end) then print("        skipped: the CUDA plugin has no NCCL backend") return end
  ffi.cdef(ffi.string(lib.dln_cdef()))
  H.ok(lib.dln_version() >= 21000, "NCCL 2.10 or later (ncclAvg)")
  H.eq(lib.dln_initialized(), 0)
  -- a collective before the communicator: an error naming it, no device touched
  H.eq(lib.dln_allreduce(nil, 4, 4, 0, "dist.allreduce"), -1)
  H.eq(ffi.string(lib.dln_error()), "dist.allreduce: the NCCL backend is not initialised")
end)

H.test("set_num_threads", function()
  local n = dl.get_num_threads()
  H.ok(n >= 1)
  dl.set_num_threads(1)
  H.eq(dl.get_num_threads(), 1)
  H.eq(dl.ones(300, 300):matmul(dl.ones(300, 300))[1][1], 300)
  dl.set_num_threads(n)
  H.eq(dl.get_num_threads(), n)
  H.raises(function() dl.set_num_threads(0) end, "set_num_threads: expected an integer >= 1, got 0")
end)

H.run()
