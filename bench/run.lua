-- dlua's benchmark suite: every case side by side with its reference, in one run.
--
--   bench/run.sh [build-dir] [options]          (builds what it needs, then runs this)
--   <build>/bin/dlua bench/run.lua [options]
--     --rows a,b,...  only these rows (ids in the table below; a prefix such as "matmul"
--                     selects all the matmul rows)
--     --reps N        alternating repetitions per row (default 5; fewer for the slow rows)
--     --quick         a few short iterations of each row: checks that the harness runs,
--                     measures nothing worth reading (the smoke test uses it)
--     --out FILE      also write the table (Markdown) to FILE
--     --python PATH   the Python with torch (default /usr/bin/python3, Debian's)
--     --ref PATH      the C reference program (default <build>/bin/dlua_bench_ref)
--
-- How it measures (docs/performance.md says more). Every side is a worker process that
-- reads one command a line and answers with the seconds it measured with its own wall
-- clock: dlua (bench/dlua_worker.lua, the cases in bench/cases.lua), PyTorch eager
-- (bench/torch_ref.py) and the C references (bench/ref.c: raw OpenBLAS sgemm, plain
-- OpenMP loops). Each row starts fresh workers, so that no row inherits another's heap,
-- caches or threads. A row runs one warm-up round, then --reps rounds in which each
-- side measures one sample in turn, ours first in odd rounds and last in even ones; the
-- table shows the medians, and ours / theirs of the medians. Where a reference has
-- settings to choose from (PyTorch's thread count, 1 or 2), each is measured and the row
-- is compared with the best. Before each sample of a multi-threaded row the harness waits
-- 300 ms, so that the previous side's spinning pool threads (OpenBLAS, OpenMP) have gone
-- to sleep: the C reference's OpenBLAS threads were still using CPU time 133 ms after a
-- sample of 64 x 784 x 256 products, and had stopped by 192 ms (/proc/PID/stat, on an
-- AVX-512 Xeon, 2026-11-29); with 150 ms a split product of dlua's that followed was
-- sometimes run on one thread (Note [Throttling parallel regions under contention] in
-- tensor/cpu/loops.h) and the row showed half its rate. Start-up and peak memory are
-- measured on whole processes. The machine is shared and noisy: only ratios from one run
-- mean anything.
local ffi = require("ffi")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } dlua_bench_ts;
int clock_gettime(int clk, dlua_bench_ts* ts);
int getpid(void);
long readlink(const char* path, char* buf, unsigned long size);
int mkfifo(const char* path, unsigned mode);
int usleep(unsigned usec);
void* signal(int sig, void* handler);
typedef struct { int64_t opaque[16]; } dlua_bench_spawn_actions;
int posix_spawn_file_actions_init(dlua_bench_spawn_actions* fa);
int posix_spawn_file_actions_addopen(dlua_bench_spawn_actions* fa, int fd, const char* path, int flags, unsigned mode);
int posix_spawn_file_actions_destroy(dlua_bench_spawn_actions* fa);
int posix_spawn(int* pid, const char* path, const dlua_bench_spawn_actions* fa, const void* attr,
                char* const argv[], char* const envp[]);
int waitpid(int pid, int* status, int options);
extern char** environ;
int omp_get_max_threads(void);
]]
local C = ffi.C
C.signal(13, ffi.cast("void*", 1))   -- SIGPIPE ignored: a dead worker is an error, not our death

local ts = ffi.new("dlua_bench_ts")
local function now()
  C.clock_gettime(1, ts)   -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + 1e-9 * tonumber(ts.tv_nsec)
end

-- ---- options --------------------------------------------------------------------------------

local opts = { quick = false, python = "/usr/bin/python3" }
do
  local i = 1
  while arg[i] do
    local a = arg[i]
    if a == "--quick" then
      opts.quick = true
      i = i + 1
    elseif a == "--reps" or a == "--rows" or a == "--out" or a == "--python" or a == "--ref" then
      local v = arg[i + 1] or error("bench: " .. a .. " needs a value", 0)
      opts[a:sub(3)] = a == "--reps" and (tonumber(v) or error("bench: --reps needs a number", 0)) or v
      i = i + 2
    else
      error("bench: unknown argument " .. a .. " (see the top of bench/run.lua)", 0)
    end
  end
end
local quick = opts.quick

-- The `dlua` running this (/proc/self/exe), and the build it belongs to.
local function readlink(p)
  local buf = ffi.new("char[4096]")
  local n = C.readlink(p, buf, 4096)
  if n <= 0 or n >= 4096 then return nil end
  return ffi.string(buf, n)
end
local dlua_exe = readlink("/proc/self/exe") or arg[-1]
local build_bin = dlua_exe:match("^(.*)/[^/]*$") or "."
opts.ref = opts.ref or build_bin .. "/dlua_bench_ref"

local function shq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

-- ---- processes ---------------------------------------------------------------------------

local tmpdir = "/tmp/dlua-bench-" .. C.getpid()
os.execute("mkdir -p " .. shq(tmpdir))

-- Runs argv[1] with arguments argv[2..] (no shell), its stdout into `out_file` (or
-- /dev/null); returns the wall time in seconds, or nil and a message.
local function spawn(argv, out_file)
  local n = #argv
  local cargv = ffi.new("char*[?]", n + 1)
  local keep = {}
  for i = 1, n do
    keep[i] = ffi.new("char[?]", #argv[i] + 1, argv[i])
    cargv[i - 1] = keep[i]
  end
  cargv[n] = nil
  local fa = ffi.new("dlua_bench_spawn_actions")
  C.posix_spawn_file_actions_init(fa)
  -- O_WRONLY | O_CREAT | O_TRUNC
  C.posix_spawn_file_actions_addopen(fa, 1, out_file or "/dev/null", 1 + 64 + 512, 420)
  local pid, status = ffi.new("int[1]"), ffi.new("int[1]")
  local t0 = now()
  local rc = C.posix_spawn(pid, argv[1], fa, nil, cargv, C.environ)
  C.posix_spawn_file_actions_destroy(fa)
  if rc ~= 0 then return nil, "cannot start " .. argv[1] .. " (error " .. rc .. ")" end
  while C.waitpid(pid[0], status, 0) < 0 do end
  local t = now() - t0
  local st = status[0]
  if st % 128 ~= 0 or math.floor(st / 256) % 256 ~= 0 then
    return nil, table.concat(argv, " ") .. " failed (status " .. st .. ")"
  end
  return t
end

-- A worker: a process reading one command a line on its stdin and answering one line
-- ("ok <text>" or "err <message>") on a FIFO.
local Worker = {}
Worker.__index = Worker
local nworkers = 0

local function start_worker(name, cmd)
  nworkers = nworkers + 1
  local fifo = ("%s/%s-%d"):format(tmpdir, name, nworkers)
  local self = setmetatable({ name = name }, Worker)
  if C.mkfifo(fifo, 384) ~= 0 then
    self.dead = "cannot make " .. fifo
    return self
  end
  self.fifo = fifo
  self.w = io.popen(cmd .. " > " .. shq(fifo), "w")
  self.r = self.w and io.open(fifo, "r")   -- waits for the worker's side to open it
  if not self.r then self.dead = "cannot start: " .. cmd end
  local info, err = self:ask("info")
  self.info = info or err
  return self
end

-- Sends a command; returns the answer's text after "ok ", or nil and why.
function Worker:ask(line)
  if self.dead then return nil, self.dead end
  local ok = self.w:write(line, "\n") and self.w:flush()
  local answer = ok and self.r:read("*l")
  if not answer then
    self.dead = self.name .. ": the worker exited"
    return nil, self.dead
  end
  local status, rest = answer:match("^(%a+)%s*(.*)$")
  if status == "ok" then return rest end
  return nil, rest or answer
end

function Worker:close()
  if self.w then
    pcall(function() self.w:write("quit\n") self.w:flush() end)
    self.w:close()
  end
  if self.r then self.r:close() end
  if self.fifo then os.remove(self.fifo) end
end

-- PyTorch's best allocator setting for the timed rows. Its CPU tensors come from glibc's
-- malloc, whose mmap threshold adapts to the sizes freed: depending on the order of the
-- first frees, a process kept mapping and unmapping its activations (750,000 to a
-- million page faults in 3 x 6,400 images of the conv net, at about 14 us a fault on
-- this virtual machine) or did not (100,000). The same epoch took 2.5 or 0.4 s from one
-- process to the next. Fixed thresholds keep every process in the fast mode. (Not for
-- the peak memory row: there torch's default is its best.)
local TORCH_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"

-- Note [Single-threaded rows on one CPU]
-- The virtual CPUs of these machines are not equally fast: on one afternoon the second of
-- two ran the d2 row 1.6x slower than the first (taskset -c 0 / -c 1, alternating, the
-- same binary), steadily for minutes, and a worker keeps the CPU it started on. So two
-- workers of a row could each sit on its own CPU and the ratio measure the CPUs. The
-- rows where no side uses a second thread (`pinned` below) run every worker on the same
-- one, the first this process may use; the rows with threads have both CPUs anyway.
local pin_cpu = nil
do
  local f = io.open("/proc/self/status", "r")
  local text = f and f:read("*a") or ""
  if f then f:close() end
  local list = text:match("Cpus_allowed_list:%s*(%S+)")
  pin_cpu = list and tonumber(list:match("^(%d+)"))
  if not exists("/usr/bin/taskset") then pin_cpu = nil end
end
local function pinned(cmd, pin)
  if not (pin and pin_cpu) then return cmd end
  return "/usr/bin/taskset -c " .. pin_cpu .. " " .. cmd
end

local WORKERS = {
  dlua = function(pin)
    return start_worker("dlua", pinned(shq(dlua_exe) .. " " .. shq(here .. "/dlua_worker.lua"), pin))
  end,
  torch = function(pin)
    if not exists(opts.python) then return { dead = opts.python .. " not found" } end
    return start_worker("torch", "GLIBC_TUNABLES=" .. TORCH_MALLOC .. " " ..
                        pinned(shq(opts.python) .. " " .. shq(here .. "/torch_ref.py"), pin))
  end,
  c = function(pin)
    if not exists(opts.ref) then
      return { dead = opts.ref .. " not built (cmake --build <build> --target dlua_bench_ref)" }
    end
    return start_worker("c", pinned(shq(opts.ref), pin))
  end,
  dlg = function(pin)
    local exe = build_bin .. "/dlua_bench_dlg"
    if not exists(exe) then return { dead = exe .. " not built (cmake --build <build> --target dlua_bench_dlg)" } end
    return start_worker("dlg", pinned(shq(exe), pin))
  end,
}
local infos = {}   -- what each kind of worker said about itself, for the header

-- ---- the rows ---------------------------------------------------------------------------------

-- A side: a label and either a worker command (`kind`, `cmd`) or a function `run`
-- (returning the sample). A row: id, label, unit, `show` (a sample to the number shown),
-- `higher` (higher is better), target (ours / theirs of the numbers shown; nil: the row
-- has no goal), `threaded` (settle before each sample), ours, refs, and optionally `warm`
-- (the warm-up round's commands, ours first, when they differ from a sample's).
local US, MS, S = 1e6, 1e3, 1
local function per(k) return function(t) return t * k end end

local rows = {}
local function row(r) rows[#rows + 1] = r end
local function ours(cmd) return { label = "dlua", kind = "dlua", cmd = cmd } end
local function torch(cmd, threads)
  return { label = "PyTorch " .. (threads == 1 and "1 thread" or threads .. " threads"), kind = "torch",
           cmd = cmd .. " " .. threads }
end
local function cref(label, cmd) return { label = label, kind = "c", cmd = cmd } end

do
  local n = quick and 2000 or 300000
  row{ id = "add16", label = "`a + b`, 16 float32, no grad", unit = "us/op", show = per(US), target = 1 / 10,
       ours = ours("add16 " .. n), refs = { torch("add16 " .. n, 1) }, pinned = true }
  n = quick and 50 or 4000
  row{ id = "chain", label = "small-op chain recorded + backward, per op", unit = "us/op", show = per(US),
       target = 1 / 20, ours = ours("chain " .. n), refs = { torch("chain " .. n, 1) }, pinned = true }
  n = quick and 200 or 20000
  row{ id = "d2", label = "d2/dx2 of x^3 at a scalar, per call", unit = "us/call", show = per(US),
       target = 1 / 20, ours = ours("d2 " .. n), refs = { torch("d2 " .. n, 1) }, pinned = true }
  n = quick and 1 or 10
  row{ id = "lstm", label = "LSTM 2 x 256, 64 steps, batch 32, forward + backward", unit = "ms/call",
       show = per(MS), target = 0.8, threaded = true, ours = ours("lstm " .. n),
       refs = { torch("lstm " .. n, 1), torch("lstm " .. n, 2) } }
  n = quick and 1 or 20
  row{ id = "sdpa", label = "scaled_dot_product_attention (8, 4, 128, 64), forward + backward", unit = "ms/call",
       show = per(MS), target = 1.0, threaded = true, ours = ours("sdpa " .. n),
       refs = { torch("sdpa " .. n, 1), torch("sdpa " .. n, 2) } }
  n = quick and 2 or 30
  row{ id = "chartf", label = "char transformer training step (2 layers of 64, batch 16 x 64, AdamW)",
       unit = "ms/step", show = per(MS), target = 0.8, threaded = true, ours = ours("chartf " .. n),
       refs = { torch("chartf " .. n, 1), torch("chartf " .. n, 2) } }
  n = quick and 2 or 100
  row{ id = "pergrad", label = "per-example gradients, MLP 784-128-10, 64 examples (vmap of grad)",
       unit = "ms/call", show = per(MS), target = 1.0, threaded = true, ours = ours("pergrad " .. n),
       refs = { torch("pergrad " .. n, 1), torch("pergrad " .. n, 2) } }
  n = quick and 20 or 2000
  row{ id = "layernorm", label = "layer_norm forward + backward, (64, 512) float32", unit = "us/call",
       show = per(US), target = 0.8, ours = ours("layernorm " .. n), refs = { torch("layernorm " .. n, 1) },
       pinned = true }
  n = quick and 5 or 500
  for _, len in ipairs({ 1024, 1000 }) do
    row{ id = "fft" .. len, label = "dl.fft rfft + irfft, (64, " .. len .. ") float32" .. (len == 1024 and "" or " (radix 5 stages)"),
         unit = "us/call", show = per(US), ours = ours("fft " .. len .. " " .. n),
         refs = { torch("fft " .. len .. " " .. n, 1) } }
  end
  n = quick and 20 or 3000
  for _, o in ipairs({ { "sgdstep", "SGD step with momentum" }, { "adamstep", "Adam step" } }) do
    row{ id = o[1], label = o[2] .. ", (256, 784) float32 weight", unit = "us/step",
         show = per(US), threaded = true, ours = ours(o[1] .. " " .. n),
         refs = { torch(o[1] .. " " .. n, 1), torch(o[1] .. " " .. n, 2) } }
  end
end

-- A float32 product against cblas_sgemm on the same shapes; `args` as both workers take
-- them after the command's name.
local function product_row(id, label, args, flops, target)
  row{ id = id, label = label, unit = "GFLOP/s", show = function(t) return flops / t / 1e9 end, higher = true,
       target = target, threaded = true,
       ours = ours("matmul " .. args), refs = { cref("OpenBLAS sgemm", "sgemm " .. args) } }
end

-- 64 and up have targets; 32 and 128, without one, are each side of the engine's own
-- loop for small products (Note [Small products of matrices] in
-- tensor/cpu/small_gemm.cpp).
for _, n in ipairs({ 32, 64, 128, 256, 1024, 2048 }) do
  -- About 0.3 s per sample at 200 GFLOP/s.
  local iters = math.max(1, math.floor((quick and 2e8 or 6e10) / (2 * n ^ 3)))
  product_row("matmul" .. n, ("float32 matmul %d x %d"):format(n, n), ("%d %d"):format(n, iters), 2 * n ^ 3,
              (n ~= 32 and n ~= 128) and 0.95 or nil)
end

-- The products of the Fashion-MNIST MLP's training step (784-256-10, batch 64; nn.Linear's
-- y = x W^T), each with its layouts (n: as stored, t: read transposed), as bench/ref.c's
-- mlpgemm runs them.
for _, p in ipairs({
  { "mlpmm1", "x W1^T", 64, 256, 784, "nt" }, { "mlpmm2", "dW1 = g1^T x", 256, 784, 64, "tn" },
  { "mlpmm3", "h W2^T", 64, 10, 256, "nt" }, { "mlpmm4", "dW2 = g2^T h", 10, 256, 64, "tn" },
  { "mlpmm5", "dh = g2 W2", 64, 256, 10, "nn" },
}) do
  local id, what, m, n, k, ops = p[1], p[2], p[3], p[4], p[5], p[6]
  local flops = 2 * m * n * k
  local iters = math.max(1, math.floor((quick and 2e8 or 4e10) / flops))
  product_row(id, ("MLP product %s, %d x %d by %d x %d (%s)"):format(what, m, k, k, n, ops),
              ("%d %d %d %d %s"):format(m, iters, n, k, ops), flops, 0.95)
end

do
  -- A Linear layer's product on one example (784 -> 256, the MLP's first layer): the
  -- engine's own loop against OpenBLAS's sgemv, each with its default threads.
  local m, k = 256, 784
  local iters = quick and 20 or 20000
  row{ id = "gemv", label = ("float32 x W^T, x (1, %d), W (%d, %d)"):format(k, m, k), unit = "us/call",
       show = per(US), target = 1.0, threaded = true, ours = ours(("gemv %d %d %d"):format(m, iters, k)),
       refs = { cref("OpenBLAS sgemv", ("sgemv %d %d %d"):format(m, iters, k)) } }
end

do
  -- A batch of LU solves (about (2/3) n^3 flops each) against raw LAPACK sgesv looped
  -- over the same batch in C, both on the engine's OpenBLAS.
  local n, batch = 256, 16
  local iters = quick and 2 or 40
  local flops = batch * (2 / 3) * n ^ 3
  row{ id = "solve256", label = "linalg.solve 256 x 256, batch 16, one right-hand side", unit = "GFLOP/s",
       show = function(t) return flops / t / 1e9 end, higher = true, target = 0.9, threaded = true,
       ours = ours(("solve %d %d %d"):format(n, iters, batch)),
       refs = { cref("LAPACK sgesv", ("sgesv %d %d %d"):format(n, iters, batch)) } }
end

do
  local n = quick and 1e6 or 1e7
  local iters = quick and 3 or 30
  row{ id = "add1e7", label = "elementwise add, 1e7 float32", unit = "GB/s",
       show = function(t) return 12 * n / t / 1e9 end, higher = true, target = 0.9, threaded = true,
       ours = ours(("add %d %d"):format(n, iters)), refs = { cref("C loop (OpenMP)", ("add %d %d"):format(n, iters)) } }
  -- float32 -> float16 conversion (Note [Half-precision storage]): 4 bytes read and 2
  -- written per element.
  local hiters = quick and 2 or 30
  row{ id = "half1e7", label = "x:half(), 1e7 float32 to float16", unit = "GB/s",
       show = function(t) return 6 * 1e7 / t / 1e9 end, higher = true, target = 1.0, threaded = true,
       ours = ours("half " .. hiters), refs = { torch("half " .. hiters, 1), torch("half " .. hiters, 2) } }
  -- Pointwise functions on 1e6 float32 (4 MB in, 4 out: in the last-level cache), each
  -- as the engine computes it (Note [Float exponentials in double] in tensor/functors.h:
  -- exp, log, log1p, tanh, sigmoid and softplus correctly rounded from double; gelu too,
  -- Note [erf in double]) against PyTorch's (Sleef's vectorised functions within an ulp).
  local un, uiters = 1e6, quick and 3 or 300
  for _, op in ipairs({ "sqrt", "exp", "log", "log1p", "tanh", "sigmoid", "softplus", "gelu" }) do
    local args = ("%s %d %d"):format(op, un, uiters)
    row{ id = op .. "1e6", label = ("dl.%s, 1e6 float32"):format(op), unit = "us/op", show = per(US),
         threaded = true, ours = ours("unary " .. args), refs = { torch("unary " .. args, 1), torch("unary " .. args, 2) } }
  end
  row{ id = "sum1e7", label = "sum, 1e7 float32", unit = "GB/s",
       show = function(t) return 4 * n / t / 1e9 end, higher = true, target = 0.9, threaded = true,
       ours = ours(("sum %d %d"):format(n, iters)), refs = { cref("C loop (OpenMP)", ("sum %d %d"):format(n, iters)) } }
end

do
  -- dl.compile (docs/compile.md): compiled against dlua's own eager calls, and against
  -- the machine (a C loop) and PyTorch where the goal names them.
  local n = quick and 1e6 or 1e7
  local iters = quick and 3 or 20
  row{ id = "pw8c", label = "8 pointwise ops on 1e7 float32, compiled vs eager", unit = "ms/call",
       show = per(MS), target = 1 / 4, threaded = true,
       ours = ours(("pw8 %d %d c"):format(n, iters)),
       refs = { { label = "dlua eager", kind = "dlua", cmd = ("pw8 %d %d"):format(n, iters) } } }
  row{ id = "pw8bw", label = "8 pointwise ops on 1e7 float32, compiled, one read + one write", unit = "GB/s",
       show = function(t) return 8 * n / t / 1e9 end, higher = true, target = 0.8, threaded = true,
       ours = ours(("pw8 %d %d c"):format(n, iters)), refs = { cref("C loop (OpenMP)", ("pw8 %d %d"):format(n, iters)) } }
  -- The chain's forward on 16 float32 (values held inline: not deferred, so this is the
  -- cost of the compiled call itself) and on 256 (deferred and fused).
  for _, n in ipairs({ 16, 256 }) do
    local k = quick and 200 or math.floor(320000 / n)
    row{ id = "chainfwdc" .. n, label = ("chain of 31 ops, no gradient, %d float32, compiled vs eager, per op"):format(n),
         unit = "us/op", show = per(US), target = n == 16 and 1.1 or 1 / 3, pinned = true,
         ours = ours(("chainfwd %d %d c"):format(n, k)),
         refs = { { label = "dlua eager", kind = "dlua", cmd = ("chainfwd %d %d"):format(n, k) } } }
  end
  -- The replay overhead per matched op (issue goal: 30 ns an op, compiled minus the
  -- kernel's time): multiplies and adds on 16 float32 held by handles, compiled with
  -- defer_small so that each is deferred and matched (by default such ops run at once:
  -- Note [Small handles run at once] in bindings/compile.h, the "compiled" reference),
  -- and the fused program's arithmetic is a few ns of each.
  local k = quick and 200 or 20000
  row{ id = "replay16", label = "replay of a matched op: 33 deferred ops on 16 float32 (views), compiled, per op",
       unit = "ns/op", show = per(1e9), target = 1.0, pinned = true, ours = ours(("replay16 %d d"):format(k)),
       refs = { { label = "the goal (30 ns)", run = function() return 30e-9 end },
                { label = "dlua eager", kind = "dlua", cmd = ("replay16 %d"):format(k), info = true },
                { label = "dlua compiled (small ops at once)", kind = "dlua", cmd = ("replay16 %d c"):format(k),
                  info = true } } }
  k = quick and 50 or 4000
  -- The issue's goal has two parts, each its own row: >= 3x dlua eager, >= 30x PyTorch
  -- (a row compares with its best reference, so one row with both would hold dlua
  -- eager to the 30x).
  row{ id = "chainc", label = "small-op chain recorded + backward, compiled vs eager, per op", unit = "us/op",
       show = per(US), target = 1 / 3, pinned = true,
       ours = ours("chainc " .. k), refs = { { label = "dlua eager", kind = "dlua", cmd = "chain " .. k } } }
  row{ id = "chainct", label = "small-op chain recorded + backward, compiled vs PyTorch, per op", unit = "us/op",
       show = per(US), target = 1 / 30, pinned = true, ours = ours("chainc " .. k), refs = { torch("chain " .. k, 1) } }
  k = quick and 20 or 400
  row{ id = "mlpstepc", label = "MLP 784-256-10 training step, compiled vs eager", unit = "ms/step",
       show = per(MS), target = 0.9, threaded = true,
       ours = ours(("mlpstep %d c"):format(k)), refs = { { label = "dlua eager", kind = "dlua", cmd = ("mlpstep %d"):format(k) } } }
  k = quick and 20 or 2000
  row{ id = "smallstepc", label = "small MLP 32-64-4 training step (MSE, implicit gradients), compiled vs eager",
       unit = "us/step", show = per(US), target = nil, pinned = true,
       ours = ours(("smallstep %d c"):format(k)), refs = { { label = "dlua eager", kind = "dlua", cmd = ("smallstep %d"):format(k) } } }
  k = quick and 5 or 50
  row{ id = "capture100", label = "first call of a 100-op function: capture and planning vs an eager call", unit = "ms",
       show = per(MS), target = 20, pinned = true,
       ours = ours(("capture100 %d c"):format(k)), refs = { { label = "dlua eager call", kind = "dlua", cmd = ("capture100 %d"):format(k * 20) } } }
end

do
  -- Whole epochs (quick: a partial epoch of a few batches; a count above 1000 is a
  -- number of images). The warm-up round runs a partial epoch on each side: it builds
  -- the model, compiles the traces and fills the caches; the timed epochs continue
  -- training that model.
  -- (compiled: ours trains through dl.compile, one compiled call a batch.)
  local function epoch_row(r, name, n, warm_n, compiled)
    local c = compiled and " c" or ""
    r.ours = ours(name .. " " .. n .. c)
    r.refs = { torch(name .. " " .. n, 1), torch(name .. " " .. n, 2) }
    r.warm = { name .. " " .. warm_n .. c, name .. " " .. warm_n .. " 1", name .. " " .. warm_n .. " 2" }
    r.threaded, r.slow = true, true
    row(r)
  end
  epoch_row({ id = "mlp", label = "Fashion-MNIST MLP epoch (784-256-10, batch 64, SGD)", unit = "s/epoch",
              show = per(S), target = 0.5 }, "mlp", quick and 2048 or 1, quick and 1024 or 6400)
  epoch_row({ id = "cnn", label = "TF guide's conv net epoch (batch 32, Adam)", unit = "s/epoch",
              show = per(S), target = 0.7, reps = 2 }, "cnn", quick and 1024 or 1, quick and 1024 or 3200)
  epoch_row({ id = "cnnc", label = "TF guide's conv net epoch (batch 32, Adam), compiled", unit = "s/epoch",
              show = per(S), target = 0.8, reps = 2 }, "cnn", quick and 1024 or 1, quick and 1024 or 3200, true)

  -- The limit, not only the peer: the same epochs against the work they cannot avoid,
  -- done in C on the same OpenBLAS. The MLP's floor runs its five products a batch with
  -- their shapes and transposes; the conv net's is its convolutions' FLOPs at the rate
  -- sgemm reaches on 1024 x 1024 (its own layers' shapes run slower in any GEMM).
  local images = quick and 2048 or 60000
  local function floor_row(r, name, ref)
    r.ours = ours(name .. " " .. (quick and images or 1))
    r.refs = { ref }
    r.warm = { name .. " " .. (quick and 1024 or 6400), ref.cmd }
    r.show, r.unit, r.threaded, r.slow = per(S), "s/epoch", true, true
    row(r)
  end
  floor_row({ id = "mlpfloor", label = "Fashion-MNIST MLP epoch against its products alone", target = 1.3 },
            "mlp", cref("its products in C (OpenBLAS sgemm)", ("mlpgemm %d 64"):format(images)))
  floor_row({ id = "cnnfloor", label = "TF guide's conv net epoch against its convolutions' FLOPs", reps = 2 },
            "cnn", cref("those FLOPs at sgemm 1024's rate", ("cnnpeak %d"):format(images)))
end

-- A side that times whole processes: argv's mean wall time over k runs.
local function startup(argv, k)
  return function()
    local total = 0
    for _ = 1, k do
      local t, err = spawn(argv)
      if not t then error(err, 0) end
      total = total + t
    end
    return total / k
  end
end

-- What exec and exit alone cost on this machine, shown beside the start-up rows: a C
-- program that does nothing (the rows' goals are absolute times, and this cost varies
-- several-fold between machines and days).
local function noop_start(k) return { label = "/bin/true", info = true, run = startup({ "/bin/true" }, k) } end

do
  local k_ours, k_theirs = quick and 2 or 10, quick and 1 or 2
  row{ id = "startup", label = "start-up: `dlua -e ''` vs `python3 -c 'import torch'`", unit = "ms",
       show = per(MS), target = 1 / 50, slow = true,
       ours = { label = "dlua", run = startup({ dlua_exe, "-e", "" }, k_ours) },
       refs = { { label = "python3 -c 'import torch'", run = startup({ opts.python, "-c", "import torch" }, k_theirs) },
                noop_start(k_ours) } }
end

do
  -- dl.export (docs/export.md): the MLP of bench/cases.lua's infer_model, exported to a
  -- .dlg file (batch free) before the rows run, and run by a C program with libdlua_run
  -- (bench/dlg_worker.c) or by dlua-run, against dlua eager and PyTorch eager.
  local k = quick and 200 or 20000
  row{ id = "runinfer", label = "MLP 784-256-10 inference, batch 1: C host (libdlua_run) vs eager", unit = "us/call",
       show = per(US), target = 0.5, pinned = true, export_model = true,
       ours = { label = "C host", kind = "dlg", cmd = ("infer %s %d"):format(tmpdir .. "/mlp.dlg", k) },
       refs = { { label = "dlua eager", kind = "dlua", cmd = "mlpinfer " .. k }, torch("mlpinfer " .. k, 1) } }
  -- The limit: the same inference written in C on the same OpenBLAS (two sgemv, the
  -- biases and the ReLU); its weights (800 KB) are read once a call, so this is close to
  -- the machine's bandwidth from L2.
  row{ id = "runfloor", label = "MLP 784-256-10 inference, batch 1: C host (libdlua_run) against its products in C",
       unit = "us/call", show = per(US), target = 1.15, pinned = true, export_model = true,
       ours = { label = "C host", kind = "dlg", cmd = ("infer %s %d"):format(tmpdir .. "/mlp.dlg", k) },
       refs = { cref("OpenBLAS sgemv x 2 in C", ("mlpinfer %d"):format(k)) } }
  -- The issue's goal is 5 ms from process start to the first inference; `import torch`
  -- alone, and /bin/true, stand beside it for scale.
  local k_ours, k_theirs = quick and 2 or 10, quick and 1 or 2
  local goal = { label = "the goal (5 ms)", run = function() return 5e-3 end }
  local torch_start = { label = "python3 -c 'import torch'", info = true,
                        run = startup({ opts.python, "-c", "import torch" }, k_theirs) }
  row{ id = "runstart", label = "process start to first MLP inference: C host", unit = "ms",
       show = per(MS), target = 1.0, slow = true, export_model = true,
       ours = { label = "C host", run = startup({ build_bin .. "/dlua_bench_dlg", "--first", tmpdir .. "/mlp.dlg" }, k_ours) },
       refs = { goal, torch_start, noop_start(k_ours) } }
  row{ id = "runcli", label = "process start to first MLP inference: `dlua-run`", unit = "ms",
       show = per(MS), target = 1.0, slow = true, export_model = true,
       ours = { label = "dlua-run", run = startup({ build_bin .. "/dlua-run", tmpdir .. "/mlp.dlg", tmpdir .. "/mlp.in" }, k_ours) },
       refs = { goal, torch_start, noop_start(k_ours) } }
end

do
  -- Peak RSS of a whole training run in a fresh process (start, load the data, build
  -- the model, one epoch), as the process itself reports it (VmHWM), each side at its
  -- own best. (wait4's ru_maxrss is no good here: after posix_spawn's vfork a child
  -- reports its parent's peak when that is higher.)
  local function peak(argv)
    return function()
      local out = tmpdir .. "/peak.txt"
      local t, err = spawn(argv, out)
      if not t then error(err, 0) end
      local f = assert(io.open(out, "r"))
      local text = f:read("*a")
      f:close()
      os.remove(out)
      return tonumber(text:match("peak_rss (%d+)")) or error("no peak_rss line in the output", 0)
    end
  end
  -- mlpmem: the images as float32 on both sides (188 MB of the peak on each: the goal of
  -- 0.35 is below the data set's own size). mlpmem8: both keep them as the file's
  -- bytes (47 MB) and convert each batch, which leaves the runtimes' own memory.
  local function run_pair(bytes)
    local mine = { dlua_exe, here .. "/mlp_train.lua" }
    local theirs = { opts.python, here .. "/torch_ref.py", "train-mlp", "1" }
    local extra = quick and { "--limit", "2048" } or {}
    if bytes then table.insert(extra, 1, "--uint8") end
    for _, a in ipairs(extra) do
      mine[#mine + 1] = a
      theirs[#theirs + 1] = a
    end
    return { label = "dlua", run = peak(mine) }, { { label = "PyTorch 1 thread", run = peak(theirs) } }
  end
  local function mb(b) return b / 2 ^ 20 end
  local ours, refs = run_pair(false)
  row{ id = "mlpmem", label = "peak memory (max RSS) of the MLP training run", unit = "MB",
       show = mb, target = 0.35, slow = true, reps = 2, ours = ours, refs = refs }
  ours, refs = run_pair(true)
  row{ id = "mlpmem8", label = "peak memory (max RSS) of the MLP training run, images kept as uint8", unit = "MB",
       show = mb, target = 0.35, slow = true, reps = 2, ours = ours, refs = refs }
end

-- ---- selection --------------------------------------------------------------------------------

local selected = {}
if opts.rows then
  for id in opts.rows:gmatch("[^,%s]+") do
    local any = false
    for _, r in ipairs(rows) do
      if r.id == id or r.id:sub(1, #id) == id then
        selected[r] = true
        any = true
      end
    end
    if not any then error("bench: no row '" .. id .. "'", 0) end
  end
else
  for _, r in ipairs(rows) do selected[r] = true end
end

-- The export rows' model, made once by a dlua process (bench/cases.lua's infer_model).
for r in pairs(selected) do
  if r.export_model then
    local script = ("package.path = %q .. '/?.lua;' .. package.path; local M = require('cases'); " ..
                    "dl.export(M.infer_model(), { dl.zeros(1, 784) }, { path = %q, dynamic = { [1] = { 1, 'batch' } } }); " ..
                    "dl.save(%q, { input1 = dl.zeros(1, 784) })"):format(here, tmpdir .. "/mlp.dlg", tmpdir .. "/mlp.in")
    local _, err = spawn({ dlua_exe, "-e", script })
    if err then error("bench: exporting the MLP: " .. err, 0) end
    break
  end
end

-- ---- running --------------------------------------------------------------------------------------

local function median(xs)
  local s = {}
  for i, v in ipairs(xs) do s[i] = v end
  table.sort(s)
  local n = #s
  if n == 0 then return nil end
  if n % 2 == 1 then return s[(n + 1) / 2] end
  return (s[n / 2] + s[n / 2 + 1]) / 2
end

local function fmt(v)
  if v == nil then return "n/a" end
  local a = math.abs(v)
  if a >= 100 then return ("%.0f"):format(v) end
  if a >= 10 then return ("%.1f"):format(v) end
  if a >= 1 then return ("%.2f"):format(v) end
  return ("%.3g"):format(v)
end

local function log(...)
  io.stderr:write(...)
  io.stderr:flush()
end

local function load_average()
  local f = io.open("/proc/loadavg", "r")
  local l = f and f:read("*l")
  if f then f:close() end
  return l and l:match("^(%S+ %S+ %S+)") or "?"
end

local load_start = load_average()
local results = {}
local t_start = now()
for _, r in ipairs(rows) do
  if selected[r] then
    local reps = opts.reps or r.reps or (r.slow and 3 or 5)
    if quick then reps = opts.reps or 1 end
    local sides = { r.ours }
    for _, ref in ipairs(r.refs) do sides[#sides + 1] = ref end
    -- Fresh workers for this row, one per kind.
    local workers = {}
    for _, side in ipairs(sides) do
      if side.kind and not workers[side.kind] then
        local w = WORKERS[side.kind](r.pinned)
        workers[side.kind] = w
        infos[side.kind] = infos[side.kind] or w.info or w.dead
      end
    end
    local samples, errs = {}, {}
    for k = 1, #sides do samples[k] = {} end
    local function measure(k, warm)
      if errs[k] then return end
      local side = sides[k]
      if r.threaded then C.usleep(quick and 10000 or 300000) end
      local ok, v
      if side.kind then
        local cmd = (warm and r.warm) and r.warm[k] or side.cmd
        local w = workers[side.kind]
        local text, err = w:ask(cmd)
        ok = text ~= nil
        v = text and tonumber(text:match("^(%S+)")) or err or ("bad answer " .. tostring(text))
        if ok and type(v) ~= "number" then ok = false end
      else
        ok, v = pcall(side.run)
      end
      if not ok then
        errs[k] = tostring(v)
        log(("\n  %s: %s failed: %s\n"):format(r.id, side.label, errs[k]))
        return
      end
      if not warm then samples[k][#samples[k] + 1] = r.show(v) end
    end
    log(("%s: warm-up"):format(r.id))
    for k = 1, #sides do measure(k, true) end
    for rep = 1, reps do
      log((" %d"):format(rep))
      if rep % 2 == 1 then
        for k = 1, #sides do measure(k, false) end
      else
        for k = #sides, 1, -1 do measure(k, false) end
      end
    end
    for _, w in pairs(workers) do if w.close then w:close() end end
    -- The best reference: the best median (of those compared; an `info` side is shown only).
    local best, best_k
    for k = 2, #sides do
      local m = not sides[k].info and median(samples[k])
      if m and (not best or (r.higher and m > best) or (not r.higher and m < best)) then best, best_k = m, k end
    end
    local mo = median(samples[1])
    local ratio = mo and best and mo / best
    local met
    if ratio and r.target then
      if r.higher then met = ratio >= r.target else met = ratio <= r.target end
    end
    local ref_label = sides[best_k or 2].label
    if #sides > 2 and best_k then
      local others = {}
      for k = 2, #sides do
        if k ~= best_k then others[#others + 1] = sides[k].label .. ": " .. fmt(median(samples[k])) end
      end
      ref_label = ref_label .. " (" .. table.concat(others, "; ") .. ")"
    end
    local err = errs[1] or (not best and (errs[2] or "no reference")) or nil
    results[#results + 1] = { row = r, ours = mo, theirs = best, ratio = ratio, met = met, ref = ref_label,
                              n = reps, err = err }
    log((" -> %s vs %s %s\n"):format(fmt(mo), fmt(best), r.unit))
  end
end
os.remove(tmpdir)

-- ---- the table -----------------------------------------------------------------------------------

local function target_str(r)
  local t = r.target
  if not t then return "none set" end
  if r.higher then return (">= %.2f"):format(t) end
  local inv = 1 / t
  if t < 1 and math.abs(inv - math.floor(inv + 0.5)) < 1e-9 then
    return ("<= 1/%d (%dx %s)"):format(inv + 0.5, inv + 0.5, r.unit == "MB" and "less" or "faster")
  end
  return ("<= %.2f"):format(t)
end

local lines = {}
local function out(s) lines[#lines + 1] = s end
out("| case | unit | dlua | reference | reference's | ours/theirs | target | met | reps |")
out("|---|---|---|---|---|---|---|---|---|")
for _, res in ipairs(results) do
  local r = res.row
  local met = res.met == nil and "n/a" or (res.met and "yes" or "**no**")
  local ratio = res.ratio and ("%.3f"):format(res.ratio) or "n/a"
  if res.ratio and not r.higher and res.ratio < 1 then
    ratio = ratio .. (" (%.1fx %s)"):format(1 / res.ratio, r.unit == "MB" and "less" or "faster")
  end
  out(("| %s | %s | %s | %s | %s | %s | %s | %s | %d |"):format(r.label, r.unit, fmt(res.ours), res.ref,
      fmt(res.theirs), ratio, target_str(r), met, res.n))
  if res.err then out(("| %s: %s |  |  |  |  |  |  |  |  |"):format(r.id, (res.err:gsub("|", "/")))) end
end

-- The machine, as this process (linked to the same OpenBLAS as the engine) sees it.
local function first_line(cmd)
  local f = io.popen(cmd .. " 2>/dev/null")
  local l = f and f:read("*l")
  if f then f:close() end
  return l
end
local function cpu_model()
  for l in io.lines("/proc/cpuinfo") do
    local m = l:match("^model name%s*:%s*(.+)$")
    if m then return m end
  end
  return "?"
end
local function env(name) return os.getenv(name) or "(unset)" end
local function cnum(f)
  local ok, v = pcall(f)
  return ok and tostring(v) or "?"
end

local blas = dl.config().blas
local header = {
  ("- CPU: %s, %s cores online; load average %s at the start, %s at the end"):format(
    cpu_model(), first_line("nproc") or "?", load_start, load_average()),
  ("- OpenBLAS: %s; core %s; %s threads. OPENBLAS_CORETYPE=%s, OPENBLAS_NUM_THREADS=%s, OMP_NUM_THREADS=%s; "
   .. "OpenMP threads %s"):format(blas.config, blas.core,
    blas.threads, env("OPENBLAS_CORETYPE"), env("OPENBLAS_NUM_THREADS"), env("OMP_NUM_THREADS"),
    cnum(C.omp_get_max_threads)),
  ("- dlua: %s (%s); %s"):format(infos.dlua or "not run", dlua_exe, first_line("uname -sr") or "?"),
}
if infos.torch then header[#header + 1] = "- PyTorch reference: " .. infos.torch end
if infos.c then header[#header + 1] = "- C reference: " .. infos.c end
do
  local ids = {}
  for _, r in ipairs(rows) do if r.pinned then ids[#ids + 1] = r.id end end
  header[#header + 1] = ("- rows %s: %s (Note [Single-threaded rows on one CPU] in bench/run.lua)")
    :format(table.concat(ids, ", "), pin_cpu and ("every side on CPU " .. pin_cpu) or "not pinned (no taskset)")
end
header[#header + 1] = ("- %s; medians of `reps` alternating repetitions per row after a warm-up round%s; %.0f s in all")
  :format(os.date("!%Y-%m-%d %H:%M UTC"), quick and " (--quick: NOT meaningful numbers)" or "", now() - t_start)

local text = table.concat(header, "\n") .. "\n\n" .. table.concat(lines, "\n") .. "\n"
io.write(text)
if opts.out then
  local f = assert(io.open(opts.out, "w"))
  f:write(text)
  f:close()
end
