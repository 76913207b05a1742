-- dl.config(): versions, threads and OpenBLAS's kernels (Note [Choosing OpenBLAS's core]
-- in tensor/cpu/openblas.cpp), in this process and in fresh ones with and without a
-- core named in OPENBLAS_CORETYPE.
local dl = require("dlua")
local H = require("harness")

H.test("dl.config() tells versions, threads and the BLAS core", function()
  local c = dl.config()
  H.eq(c.version, dl._VERSION)
  H.eq(c.luajit, jit.version)
  H.eq(c.threads, dl.get_num_threads())
  H.eq(c.default_dtype, dl.get_default_dtype())
  H.ok(#c.blas.core > 0 and #c.blas.detected > 0, "core names")
  H.ok(c.blas.threads >= 1, "BLAS threads")
  H.ok(c.blas.config:find("OpenBLAS", 1, true), c.blas.config)
  H.ok(c.blas.config:find(c.blas.core, 1, true), "the build line names the running core")
  local text = tostring(c)
  H.ok(text:find("BLAS: OpenBLAS core " .. c.blas.core, 1, true), text)
  H.eq(c.cuda, nil)   -- the plugin is loaded only when asked for
  H.raises(function() dl.config(5) end, "config: expected an options table")
end)

-- The flags of /proc/cpuinfo's first processor, as a set.
local function cpu_flags()
  local f = io.open("/proc/cpuinfo")
  local flags = {}
  if not f then return flags end
  for line in f:lines() do
    local list = line:match("^flags%s*:%s*(.*)$")
    if list then
      for w in list:gmatch("%S+") do flags[w] = true end
      break
    end
  end
  f:close()
  return flags
end

-- dl.config().blas of a new process of this program with `env` in front.
local function blas_of(env)
  local code = "local dl = require('dlua'); local b = dl.config().blas; " ..
               "io.write(b.core, ' ', b.detected, ' ', b.chosen_by)"
  local p = io.popen(env .. " '" .. arg[-1] .. "' -e \"" .. code .. "\" 2>&1")
  local out = p:read("*a")
  p:close()
  local core, detected, by = out:match("^(%S+) (%S+) (%S+)$")
  H.ok(core, "unexpected output: " .. out)
  return core, detected, by
end

local PRE_AVX = { prescott = true, katmai = true, core2 = true, penryn = true, dunnington = true,
                  nehalem = true, atom = true, nano = true, opteron = true, opteron_sse3 = true,
                  barcelona = true, bobcat = true }

H.test("a new process never runs a pre-AVX fallback core on an AVX2 CPU", function()
  local core, detected, by = blas_of("env -u OPENBLAS_CORETYPE")
  if cpu_flags().avx2 and cpu_flags().fma then
    H.ok(not PRE_AVX[core:lower()], "core " .. core .. " (detected " .. detected .. ")")
  end
  H.ok(by == "openblas" or by == "dlua", by)
  if by == "dlua" then H.ok(PRE_AVX[detected:lower()], "dlua replaced only a fallback") end
end)

H.test("a core named in OPENBLAS_CORETYPE stands", function()
  local core, _, by = blas_of("OPENBLAS_CORETYPE=Prescott")
  H.eq(core, "Prescott")
  H.eq(by, "OPENBLAS_CORETYPE")
end)

H.test("OpenBLAS loads at the first product or query, with the threads set before it", function()
  -- Note [Loading OpenBLAS on first use] in tensor/cpu/openblas.cpp. A fresh process
  -- tells whether the library is mapped at its start, after pointwise work, products
  -- with a vector operand (Note [Small products without OpenBLAS]) and small products of
  -- matrices, and after
  -- its first product (arg "product") or dl.config() (arg "config": the thread count
  -- asked for before the load holds after it).
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write([[
local dl = require("dlua")
local function mapped()
  for l in io.lines("/proc/self/maps") do
    if l:find("libopenblas", 1, true) then return "yes" end
  end
  return "no"
end
local seen = { mapped() }
-- Attention-sized products per head, shared out between the threads (before the count
-- is set to 1 below).
local heads = dl.matmul(dl.randn(4, 128, 64), dl.randn(4, 64, 64))
dl.set_num_threads(1)
local x = (dl.randn(64, 64) * 2 + 1):relu():sum(1)
-- Products with a vector operand (a small model on one example) need no OpenBLAS, nor
-- small products of matrices (Note [Small products of matrices]), a gradient's included,
-- where the engine's own loop runs: not on an x86-64 CPU without AVX2 and FMA (arg
-- "blas-products"), where every product of matrices is OpenBLAS's.
local v = dl.matmul(dl.matmul(dl.randn(1, 784), dl.randn(784, 256)), dl.randn(256, 1))
local d = dl.matmul(dl.randn(30), dl.randn(30))
if arg[2] ~= "blas-products" then
  local w = dl.randn(16, 4)
  local gw = dl.grad(function(ww) return dl.matmul(dl.randn(32, 16), ww):tanh():sum() end)(w)
  local m64 = dl.matmul(dl.randn(8, 8, "float64"), dl.randn(8, 8, "float64"))
end
seen[2] = mapped()
if arg[1] == "product" then
  local y = dl.linalg.solve(dl.eye(3) * 2, dl.ones(3))
  seen[3] = y[1]
else
  seen[3] = dl.config().blas.threads
end
seen[4] = mapped()
io.write(table.concat(seen, " "))
]])
  f:close()
  -- The own loop's builds (tensor/cpu/small_gemm.cpp): AVX2 with FMA, or AVX-512, on
  -- x86-64; any other architecture runs its portable loop.
  local flags = cpu_flags()
  local own_loop = jit.arch ~= "x64" or (flags.avx2 and flags.fma) or false
  local function run(mode)
    mode = mode .. (own_loop and "" or " blas-products")
    local p = io.popen("env -u OPENBLAS_NUM_THREADS '" .. arg[-1] .. "' " .. path .. " " .. mode .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return out
  end
  H.eq(run("product"), "no no 0.5 yes", "at start, after pointwise work and small products, the solve, after it")
  H.eq(run("config"), "no no 1 yes", "at start, after pointwise work and small products, BLAS threads, after")
  os.remove(path)
end)

H.test("dlua --config prints the same lines", function()
  if not arg[-1]:match("dlua$") then return end   -- stock luajit has no such option
  local p = io.popen("'" .. arg[-1] .. "' --config 2>&1")
  local out = p:read("*a")
  p:close()
  H.ok(out:find("BLAS: OpenBLAS core " .. dl.config().blas.core, 1, true), out)
  H.ok(out:find("CPU threads: ", 1, true), out)
end)

H.run()
