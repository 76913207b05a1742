-- GPU benchmark: dlua's CUDA plugin against PyTorch on the same device, in one run.
--   dlua bench/gpu.lua [--python python3] [--reps 7] [--only name,name]
-- Each case is timed as the median of `reps` repetitions, each of `iters` calls between
-- two device synchronisations (so launch overhead and kernel time both count, as a
-- training loop sees them). PyTorch's side is bench/torch_gpu.py, the same cases with
-- the same shapes, run after ours as a separate process. float32 products are full
-- precision on both sides (no TF32). The table's ratio is dlua's time over PyTorch's:
-- below 1 is faster. Needs a GPU; prints why not and exits 0 without one.
local dl = require("dlua")
local ffi = require("ffi")
local core = require("dlua.core")
local F = dl.nn.functional

local opts = { python = "python3", reps = 7, only = nil }
do
  local i = 1
  while arg[i] do
    local a, v = arg[i], arg[i + 1]
    if a == "--python" then opts.python = v
    elseif a == "--reps" then opts.reps = assert(tonumber(v), "--reps takes a number")
    elseif a == "--only" then opts.only = v
    else error("bench/gpu.lua: unknown option " .. a) end
    i = i + 2
  end
end
if not dl.cuda.is_available() then
  print("bench/gpu.lua: skipped: " .. dl.cuda.status())
  os.exit(0)
end

local function now() return core.C.dl_monotonic_time() end

-- The median time of a call in ms, and the Lua collector's full collections per call
-- (each one paced by the bytes allocated, device memory included).
local function timed(fn, iters)
  fn()
  dl.cuda.synchronize()
  local times = {}
  local c0 = dl.memory_stats().gc_collections
  for r = 1, opts.reps do
    local t0 = now()
    for _ = 1, iters do fn() end
    dl.cuda.synchronize()
    times[r] = (now() - t0) / iters * 1e3
  end
  table.sort(times)
  return times[math.floor((#times + 1) / 2)], (dl.memory_stats().gc_collections - c0) / (iters * opts.reps)
end

local dev = { device = "cuda" }
local cases, order = {}, {}
local function case(name, iters, make) cases[name] = { iters = iters, make = make }; order[#order + 1] = name end

local function mm(dtype, n)
  return function()
    local a, b = dl.randn(n, n, dev):to(dtype), dl.randn(n, n, dev):to(dtype)
    return function() return a:matmul(b) end
  end
end
case("matmul_f32_4096", 20, mm("float32", 4096))
case("matmul_f16_4096", 50, mm("float16", 4096))
case("matmul_f32_256", 2000, mm("float32", 256))
local big
local function big_ab()
  big = big or { dl.randn(4096, 4096, dev), dl.randn(4096, 4096, dev) }
  return big[1], big[2]
end
case("pointwise_chain_16M", 50, function()
  local a, b = big_ab()
  return function() return ((a * b + 1):tanh() * a - b:sigmoid()):relu() end
end)
case("pointwise_chain_16M_compiled", 50, function()
  local a, b = big_ab()
  local f = dl.compile(function(x, y) return ((x * y + 1):tanh() * x - y:sigmoid()):relu() end)
  return function() return f(a, b) end
end)
case("sum_16M", 200, function() local a = big_ab() return function() return a:sum() end end)
case("sum_rows_4096x4096", 200, function() local a = big_ab() return function() return a:sum(2) end end)
case("sum_cols_4096x4096", 200, function() local a = big_ab() return function() return a:sum(1) end end)
case("softmax_4096x4096", 50, function() local a = big_ab() return function() return dl.softmax(a, 2) end end)
case("rfft_irfft_4096x1024", 200, function()
  local x = dl.randn(4096, 1024, dev)
  return function() return dl.fft.irfft(dl.fft.rfft(x), 1024) end
end)
case("small_op_64x64", 5000, function()
  local s = dl.randn(64, 64, dev)
  return function() return s * 2 + 1 end
end)

local function train_step(net, x, y, compiled)
  net:to("cuda")
  local opt = dl.optim.SGD{ lr = 0.01 }
  local step = dl.implicit_value_and_grad(function() return dl.nn.cross_entropy(net(x), y) end)
  local function train()
    local _, grads = step()
    opt:apply_gradients(grads)
  end
  return compiled and dl.compile(train) or train
end
local function mlp(batch, compiled)
  return function()
    local nn = dl.nn
    local net = nn.Sequential{ nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10) }
    return train_step(net, dl.randn(batch, 784, dev), dl.randint(1, 11, { batch }):cuda(), compiled)
  end
end
case("mlp_step_b64", 500, mlp(64))
case("mlp_step_b4096", 200, mlp(4096))
-- (the step compiled: one plan for forward, backward and the update; PyTorch's row is
-- its eager step, as for the compiled chain)
case("mlp_step_b64_compiled", 500, mlp(64, true))
case("conv_step_b128", 200, function()
  local nn = dl.nn
  local net = nn.Sequential{
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 7 * 7, 10),
  }
  return train_step(net, dl.randn(128, 1, 28, 28, dev), dl.randint(1, 11, { 128 }):cuda())
end)

-- The device raises its clocks under load: products for half a second first, so that a
-- few rows (--only) are timed at the clocks a full run reaches (on an H200 the softmax
-- row read 62 us timed alone and 37 us after a product). torch_gpu.py does the same.
do
  local a = dl.randn(4096, 4096, dev)
  local t0 = now()
  repeat
    a:matmul(a)
    dl.cuda.synchronize()
  until now() - t0 > 0.5
end

local wanted
if opts.only then
  wanted = {}
  for name in opts.only:gmatch("[^,]+") do wanted[name] = true end
end
dl.manual_seed(1)
local ours = {}
for _, name in ipairs(order) do
  if not wanted or wanted[name] then
    local c = cases[name]
    local gc
    ours[name], gc = timed(c.make(), c.iters)
    io.stderr:write(string.format("dlua  %-30s %.4f ms, %.2f collections a call\n", name, ours[name], gc))
    collectgarbage()
  end
end
big = nil
collectgarbage()
dl.cuda.empty_cache()

local script = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/torch_gpu.py"
local cmd = string.format("%s %s --reps %d%s", opts.python, script, opts.reps, opts.only and (" --only " .. opts.only) or "")
local theirs = {}
local p = assert(io.popen(cmd))
for line in p:lines() do
  local name, ms = line:match("^(%S+) (%S+)$")
  if name then theirs[name] = tonumber(ms) end
end
p:close()

print(string.format("\n%s, %s; median of %d repetitions\n", dl.cuda.get_device_name(0), os.date("!%Y-%m-%d %H:%M UTC"), opts.reps))
print("| case | dlua ms | PyTorch ms | dlua / PyTorch |")
print("|---|---:|---:|---:|")
for _, name in ipairs(order) do
  if ours[name] then
    local t = theirs[name] or theirs[name:gsub("_compiled$", "")]
    print(string.format("| %s | %.4f | %s | %s |", name, ours[name], t and string.format("%.4f", t) or "-",
                        t and string.format("%.2f", ours[name] / t) or "-"))
  end
end
