-- dl.dist's benchmarks, side by side with raw MPI on the same Open MPI and mpirun flags
-- (docs/performance.md, "dl.dist"):
--
--   build/bin/dlua bench/dist.lua [--reps 5] [--out FILE] [--quick] [--ref build/bin/dlua_bench_mpi]
--
-- Each row alternates `reps` runs of dlua and of its reference (each run its own
-- mpirun job) and shows the medians and their ratio. Under mpirun this same file is the
-- worker: `dlua bench/dist.lua <case> ...` prints "ok <seconds>" from rank 0.
--   allreduce <bytes> <iters>    dist.allreduce_ of float32 (in place, as the C loop)
--   grads <iters> <n1> <n2> ...  dist.allreduce_grads (sum) of tensors of those sizes (buckets)
--   separate <iters> <n1> ...    dist.allreduce_ of each of them, one call each
--   epoch <images> <batch> [off] one epoch of the 784-256-10 MLP (Adam) on this rank's
--                                shard of the first <images> Fashion-MNIST images; "off":
--                                gradients reduced after the backward pass, not during it
--                                (also prints the exposed fraction of dist.step_stats)
--   wrap <iters> dist|dl         a value_and_grad call of a small MLP step, at size 1
local dl = require("dlua")
local dist = dl.dist

local function now()
  local ffi = require("ffi")
  pcall(ffi.cdef, "int clock_gettime(int, struct timespec*); struct timespec { long tv_sec; long tv_nsec; };")
  local ts = ffi.new("struct timespec")
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + 1e-9 * tonumber(ts.tv_nsec)
end

-- ---- the worker --------------------------------------------------------------------------------

local MLP_SIZES = { 784 * 256, 256, 256 * 10, 10 }

local function slowest(t)
  return dist.allreduce(dl.tensor({ t }, { dtype = "float64" }), { op = "max" })[1]
end

local function worker(case, a, b, c, ...)
  dist.init({ threads = 1 })
  local t
  if case == "allreduce" then
    local x = dl.zeros(math.max(1, math.floor(a / 4)))
    -- (warm-up past the first 32 collectives, which are compared across the ranks first:
    -- Note [Collectives compared across the ranks] in scripts/dlua/dist.lua)
    for _ = 1, 33 do dist.allreduce_(x) end
    dist.barrier()
    local t0 = now()
    for _ = 1, b do dist.allreduce_(x) end
    t = slowest((now() - t0) / b)
  elseif case == "grads" then
    local sizes = { b, c, ... }
    if #sizes == 0 or sizes[1] == nil then sizes = MLP_SIZES end
    local gs = {}
    for i, n in ipairs(sizes) do gs[i] = dl.zeros(tonumber(n)) end
    -- A sum, as the references: a mean adds one pass over the gradients (the 1/size).
    for _ = 1, 3 do dist.allreduce_grads(gs, { op = "sum" }) end
    dist.barrier()
    local t0 = now()
    for _ = 1, a do dist.allreduce_grads(gs, { op = "sum" }) end
    t = slowest((now() - t0) / a)
  elseif case == "separate" then   -- the same tensors, one in-place allreduce each
    local sizes = { b, c, ... }
    local gs = {}
    for i, n in ipairs(sizes) do gs[i] = dl.zeros(tonumber(n)) end
    for _ = 1, 33 do for _, g in ipairs(gs) do dist.allreduce_(g) end end   -- (past the 32 compared)
    dist.barrier()
    local t0 = now()
    for _ = 1, a do for _, g in ipairs(gs) do dist.allreduce_(g) end end
    t = slowest((now() - t0) / a)
  elseif case == "epoch" then
    local x, y = dl.data.fashion_mnist("train")
    x, y = x:narrow(1, 1, a), y:narrow(1, 1, a)
    x = ((x:reshape(-1, 784) - 0.2860) / 0.3530):contiguous()
    dl.manual_seed(1)
    local net = dl.nn.Sequential{ dl.nn.Linear(784, 256), dl.nn.ReLU(), dl.nn.Linear(256, 10) }
    dist.broadcast_parameters(net)
    local opt = dl.optim.Adam{ lr = 1e-3 }
    local step = dist.implicit_value_and_grad(function(xb, yb) return dl.nn.cross_entropy(net(xb), yb) end,
                                              { overlap = c ~= "off" and (c == "on" or nil) })
    local ds = dl.data.from_tensors(x, y)
    for xb, yb in dist.shard(ds, { seed = 0 }):batch(b):take(5):iter() do   -- warm-up
      local _, g = step(xb, yb)
      opt:apply_gradients(g)
    end
    dist.barrier()
    local t0 = now()
    for xb, yb in dist.shard(ds, { seed = 1 }):batch(b):iter() do
      local _, g = step(xb, yb)
      opt:apply_gradients(g)
    end
    t = slowest(now() - t0)
    local st = dist.step_stats()
    if dist.is_main() then print(("exposed %.4f"):format(st.exposed)) end
  elseif case == "wrap" then
    dl.manual_seed(1)
    local w1, w2 = dl.randn(32, 64), dl.randn(64, 10)
    local x = dl.randn(16, 32)
    local f = function(p, q) return (x:matmul(p):relu():matmul(q)):sum() end
    local g = b == "dist" and dist.value_and_grad(f, { 1, 2 }) or dl.value_and_grad(f, { 1, 2 })
    for _ = 1, 200 do g(w1, w2) end
    local t0 = now()
    for _ = 1, a do g(w1, w2) end
    t = (now() - t0) / a
  else
    error("bench/dist.lua: unknown case " .. tostring(case), 0)
  end
  if dist.is_main() then print(("ok %.9g"):format(t)) end
end

if arg and arg[1] and not arg[1]:match("^%-%-") then
  local args = {}
  for i = 2, #arg do args[#args + 1] = tonumber(arg[i]) or arg[i] end
  worker(arg[1], unpack(args))
  return
end

-- ---- the driver ------------------------------------------------------------------------------------

local opts = { reps = 5, out = nil, quick = false }
do
  local i = 1
  while arg and arg[i] do
    if arg[i] == "--reps" then opts.reps = tonumber(arg[i + 1]); i = i + 2
    elseif arg[i] == "--out" then opts.out = arg[i + 1]; i = i + 2
    elseif arg[i] == "--quick" then opts.quick = true; opts.reps = 1; i = i + 1
    elseif arg[i] == "--ref" then opts.ref = arg[i + 1]; i = i + 2
    else error("bench/dist.lua: unknown option " .. arg[i], 0) end
  end
end

local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
local dlua = arg[-1] or "dlua"
local ref = opts.ref or (here .. "/../build/bin/dlua_bench_mpi")
local FLAGS = "--allow-run-as-root --oversubscribe --mca btl self,vader"

-- One job: under mpirun with np ranks, or (np = 0) a plain process, ended after
-- JOB_LIMIT_S seconds (a job takes a few: one that hangs is an error, not a bench that
-- never ends). Its time, and the exposed fraction when the worker printed one.
local JOB_LIMIT_S = 300
local function run(np, cmd)
  local job = np == 0 and cmd or ("mpirun %s -np %d %s"):format(FLAGS, np, cmd)
  local p = io.popen(("timeout -k 10 %d %s 2>&1"):format(JOB_LIMIT_S, job))
  local out = p:read("*a")
  p:close()
  local t = out:match("ok ([%d%.e%-+]+)")
  if not t then error("bench/dist.lua: " .. cmd .. " failed (or ran past " .. JOB_LIMIT_S .. " s):\n" .. out, 0) end
  return tonumber(t), tonumber(out:match("exposed ([%d%.e%-+]+)"))
end

local function median(xs)
  local c = { unpack(xs) }
  table.sort(c)
  local n = #c
  return n % 2 == 1 and c[(n + 1) / 2] or (c[n / 2] + c[n / 2 + 1]) / 2
end

local function measure(ours, theirs)
  local a, b = {}, {}
  for _ = 1, opts.reps do
    a[#a + 1] = ours()
    b[#b + 1] = theirs()
  end
  return median(a), median(b)
end

local lines = {}
local function out(s) lines[#lines + 1] = s; print(s) end
out("| case | unit | dlua | reference | reference's | ours/theirs | target | met | reps |")
out("|---|---|---|---|---|---|---|---|---|")
local function row(label, unit, ours, theirs, refname, scale, target, better_high)
  local ratio = ours / theirs
  local met = better_high and ratio >= target or (not better_high and ratio <= target)
  out(("| %s | %s | %.4g | %s | %.4g | %.3f | %s %.2f | %s | %d |"):format(label, unit, ours * scale, refname,
      theirs * scale, ratio, better_high and ">=" or "<=", target, met and "yes" or "**no**", opts.reps))
end

local big = opts.quick and { 1 } or { 1, 4, 16, 64 }
for _, mib in ipairs(big) do
  local bytes = mib * 1048576
  local iters = math.max(5, math.floor(200 / mib))
  if opts.quick then iters = 3 end
  local ta, tr = measure(function() return run(2, ("%s %s/dist.lua allreduce %d %d"):format(dlua, here, bytes, iters)) end,
                         function() return run(2, ("%s allreduce %d %d"):format(ref, bytes, iters)) end)
  -- bus bandwidth (nccl-tests): size / time * 2 (n - 1) / n, which is size / time at n = 2
  row(("allreduce float32 %d MiB, 2 ranks, bus bandwidth"):format(mib), "GB/s", 1 / ta, 1 / tr,
      "MPI_Allreduce loop (C)", bytes / 1e9, 0.9, true)
end
for _, bytes in ipairs(opts.quick and { 4 } or { 4, 64, 1024, 4096 }) do
  local iters = opts.quick and 100 or 20000
  local ta, tr = measure(function() return run(2, ("%s %s/dist.lua allreduce %d %d"):format(dlua, here, bytes, iters)) end,
                         function() return run(2, ("%s allreduce %d %d"):format(ref, bytes, iters)) end)
  out(("| allreduce latency, %d B, 2 ranks | us | %.2f | MPI_Allreduce loop (C) | %.2f | +%.2f us | <= +5 us | %s | %d |")
      :format(bytes, ta * 1e6, tr * 1e6, (ta - tr) * 1e6, (ta - tr) * 1e6 <= 5 and "yes" or "**no**", opts.reps))
end
do
  local iters = opts.quick and 10 or 500
  local sizes = table.concat(MLP_SIZES, " ")
  local ta, tr = measure(function() return run(2, ("%s %s/dist.lua grads %d %s"):format(dlua, here, iters, sizes)) end,
                         function() return run(2, ("%s concat %d %s"):format(ref, iters, sizes)) end)
  row("MLP 784-256-10 gradient sync (4 tensors), 2 ranks", "us", ta, tr, "one MPI_Allreduce of the concatenation",
      1e6, 1.1, false)
  local ts = measure(function() return run(2, ("%s %s/dist.lua separate %d %s"):format(dlua, here, iters, sizes)) end,
                     function() return 0 end)
  out(("| the same, 4 separate in-place allreduces instead of one bucket | us | %.1f | the bucketed sync | %.1f | %.3f | (report) | - | %d |")
      :format(ts * 1e6, ta * 1e6, ts / ta, opts.reps))
end
if not opts.quick then
  local images, batch = 60000, 64
  local t1, t2 = measure(function() return run(1, ("%s %s/dist.lua epoch %d %d"):format(dlua, here, images / 2, batch)) end,
                         function() return run(2, ("%s %s/dist.lua epoch %d %d"):format(dlua, here, images, batch)) end)
  out(("| Fashion-MNIST MLP epoch, weak scaling: 2 ranks x 1 thread on 60,000 images vs 1 rank x 1 thread on 30,000 | s | %.3f | 1 rank | %.3f | efficiency %.2f | >= 0.80 | %s | %d |")
      :format(t2, t1, t1 / t2, t1 / t2 >= 0.8 and "yes" or "**no**", opts.reps))  -- Overlap on and off, and the fraction of the communication each left exposed.
  local exp_on, exp_off = {}, {}
  local ton, toff = measure(function()
    local t, e = run(2, ("%s %s/dist.lua epoch %d %d on"):format(dlua, here, images, batch))
    exp_on[#exp_on + 1] = e
    return t
  end, function()
    local t, e = run(2, ("%s %s/dist.lua epoch %d %d off"):format(dlua, here, images, batch))
    exp_off[#exp_off + 1] = e
    return t
  end)
  row(("the same 2-rank epoch, gradients reduced during the backward pass vs after it (exposed communication %.2f vs %.2f)")
      :format(median(exp_on), median(exp_off)), "s", ton, toff, "overlap off", 1, 1.0, false)
  -- PyTorch DDP (Gloo) on the same ranks, data and model, where Debian's python3-torch is.
  local py = "/usr/bin/python3"
  local probe = io.popen(py .. " -c 'import torch.distributed as d; print(d.is_gloo_available())' 2>/dev/null")
  local has_gloo = probe and probe:read("*a"):match("True")
  if probe then probe:close() end
  if has_gloo then
    local td, tp = measure(function() return run(2, ("%s %s/dist.lua epoch %d %d"):format(dlua, here, images, batch)) end,
                           function() return run(2, ("%s %s/torch_ddp.py epoch %d %d 1"):format(py, here, images, batch)) end)
    row("Fashion-MNIST MLP epoch, 2 ranks x 1 thread, 60,000 images, batch 64 per rank", "s", td, tp,
        "PyTorch DDP, Gloo", 1, 1.0, false)
  else
    out("| Fashion-MNIST MLP epoch against PyTorch DDP (Gloo) | s | - | python3-torch is not installed | - | - | <= 1.00 | - | 0 |")
  end
end
do
  local iters = opts.quick and 100 or 5000
  local ta, tr = measure(function() return run(0, ("%s %s/dist.lua wrap %d dist"):format(dlua, here, iters)) end,
                         function() return run(0, ("%s %s/dist.lua wrap %d dl"):format(dlua, here, iters)) end)
  row("dist.value_and_grad at size 1 (a small MLP's step)", "us", ta, tr, "dl.value_and_grad", 1e6, 1.02, false)
end
if opts.out then
  local f = assert(io.open(opts.out, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
