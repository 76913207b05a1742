-- The dlua side of each benchmark of bench/run.lua, mirrored line for line by
-- bench/torch_ref.py (PyTorch) and bench/ref.c (raw OpenBLAS, plain C loops): the same
-- shapes, ops, data, batch sizes and optimizers.
--
-- Each function measures one sample and returns seconds per unit (per op, per call,
-- per epoch). Time is the wall clock (clock_gettime(CLOCK_MONOTONIC) through the FFI),
-- never os.clock: the engine's threads work while this one waits. The garbage each
-- loop makes is collected inside the timed region, as a real script pays for it.
local ffi = require("ffi")
local dl = require("dlua")

local M = {}

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } dlua_bench_timespec;
int clock_gettime(int clk, dlua_bench_timespec* ts);
]]
local ts = ffi.new("dlua_bench_timespec")
local CLOCK_MONOTONIC = 1

-- Seconds, from an arbitrary origin.
function M.now()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) + 1e-9 * tonumber(ts.tv_nsec)
end
local now = M.now

M.CHAIN_REPEAT = 10                      -- (y * w, + 0.1, tanh) ten times, then sum
M.CHAIN_OPS = 3 * M.CHAIN_REPEAT + 1     -- 31 ops recorded per call
M.MEAN, M.STD = 0.2860, 0.3530           -- Fashion-MNIST's pixel mean and deviation

-- ---- small ops: the per-op overhead ---------------------------------------------------------------

-- c = a + b on 16 float32, no gradient: seconds per op.
function M.add16(iters)
  local a, b = dl.rand(16), dl.rand(16)
  local c
  for _ = 1, 200 do c = a + b end          -- compile the loop's trace first
  local t0 = now()
  for _ = 1, iters do c = a + b end
  local t = now() - t0
  assert(c:numel() == 16)
  return t / iters
end

local function chain_fn(x, w)
  local y = x
  for _ = 1, M.CHAIN_REPEAT do y = (y * w + 0.1):tanh() end
  return y:sum()
end
M.chain_fn = chain_fn

-- The gradient of chain_fn at a 16-element x: seconds per op recorded (the forward ops,
-- their recording and their share of the backward pass).
function M.chain(iters)
  local x, w = dl.rand(16), dl.rand(16)
  local g = dl.grad(chain_fn)
  local r
  for _ = 1, 20 do r = g(x, w) end
  local t0 = now()
  for _ = 1, iters do r = g(x, w) end
  local t = now() - t0
  assert(r:numel() == 16)
  return t / iters / M.CHAIN_OPS
end

-- d2/dx2 of x^3 at a scalar tensor: seconds per call.
function M.d2(iters)
  local d2 = dl.grad(dl.grad(function(x) return x ^ 3 end))
  local x = dl.tensor(2.0)
  local h = d2(x)
  assert(math.abs(h:item() - 12) < 1e-4, "d2: wrong second derivative " .. tostring(h))
  for _ = 1, 20 do h = d2(x) end
  local t0 = now()
  for _ = 1, iters do h = d2(x) end
  return (now() - t0) / iters
end

-- ---- big kernels --------------------------------------------------------------------------------

-- c = a:matmul(b), n x n float32 (a fresh result each call, as a script gets it):
-- seconds per call. With `cols`, `k` and `ops` (nn, nt, tn or tt: each operand as
-- stored or read transposed, as bench/ref.c's sgemm): c is n x cols, over k.
function M.matmul(n, iters, cols, k, ops)
  local a, b
  if ops then
    cols, k = assert(tonumber(cols)), assert(tonumber(k))
    assert(ops:match("^[nt][nt]$"), "matmul: ops must be nn, nt, tn or tt")
    a = ops:sub(1, 1) == "t" and dl.randn(k, n):t() or dl.randn(n, k)
    b = ops:sub(2, 2) == "t" and dl.randn(cols, k):t() or dl.randn(k, cols)
  else
    a, b = dl.randn(n, n), dl.randn(n, n)
  end
  local c = a:matmul(b)
  local t0 = now()
  for _ = 1, iters do c = a:matmul(b) end
  local t = now() - t0
  assert(c:size(1) == n)
  return t / iters
end

-- x = dl.linalg.solve(A, b) for a batch of n x n float32 systems, one right-hand side
-- each (a fresh result each call): seconds per call.
function M.solve(n, iters, batch)
  batch = tonumber(batch) or 1
  local a = dl.randn(batch, n, n) + dl.eye(n) * n
  local b = dl.randn(batch, n, 1)
  local L = dl.linalg
  local x = L.solve(a, b)
  local t0 = now()
  for _ = 1, iters do x = L.solve(a, b) end
  local t = now() - t0
  assert(x:size(2) == n)
  return t / iters
end

-- c = a + b over n float32: seconds per op.
function M.add(n, iters)
  local a, b = dl.rand(n), dl.rand(n)
  local c = a + b
  local t0 = now()
  for _ = 1, iters do c = a + b end
  local t = now() - t0
  assert(c:numel() == n)
  return t / iters
end

-- h = x:half() of 1e7 float32 (a fresh float16 result each call): seconds per call.
function M.half(iters)
  local x = dl.rand(1e7)
  local h = x:half()
  local t0 = now()
  for _ = 1, iters do h = x:half() end
  local t = now() - t0
  assert(h.dtype == "float16")
  return t / iters
end

-- s = a:sum() over n float32: seconds per op.
function M.sum(n, iters)
  local a = dl.rand(n)
  local s = a:sum()
  local t0 = now()
  for _ = 1, iters do s = a:sum() end
  local t = now() - t0
  assert(s:numel() == 1)
  return t / iters
end

-- ---- dl.compile ---------------------------------------------------------------------------------

-- Eight pointwise ops, one input and one output (bench/ref.c's pw8 is the same loop in C).
local function pw8_fn(x) return ((((x * 1.1 + 0.2):abs() - 0.3) * 0.9):relu() + 1) * 0.5 end
M.pw8_fn = pw8_fn

-- Note [Timed loops that LuaJIT compiles]
-- A timed loop calls f with its arguments named (up to six), as a script's loop calls
-- its step, not with `...`: LuaJIT does not compile a loop that passes on the varargs of
-- the function it runs in ("NYI: bytecode 71", VARG), so that loop ran in the
-- interpreter, and every call paid the interpreter's entry into f. That weighed on a
-- compiled function (a vararg function, entered interpreted) more than on a plain one
-- (entered through its trace): `chainfwd 16 c` ran 1.13 of eager's time in such a loop
-- and 1.03-1.07 in a script's plain loop (docs/performance-compile.md).
local function calls(f, iters, n, a, b, c, d, e, g)
  local r
  if n == 0 then for _ = 1, iters do r = f() end
  elseif n == 1 then for _ = 1, iters do r = f(a) end
  elseif n == 2 then for _ = 1, iters do r = f(a, b) end
  elseif n == 3 then for _ = 1, iters do r = f(a, b, c) end
  elseif n == 4 then for _ = 1, iters do r = f(a, b, c, d) end
  elseif n == 5 then for _ = 1, iters do r = f(a, b, c, d, e) end
  else for _ = 1, iters do r = f(a, b, c, d, e, g) end end
  return r
end

-- Seconds per call of f(...) over `iters` calls, after `warm` untimed ones.
local function timed_after(warm, f, iters, ...)
  local n = select("#", ...)
  assert(n <= 6, "timed: at most six arguments")
  calls(f, warm, n, ...)
  local t0 = now()
  local r = calls(f, iters, n, ...)
  local t = now() - t0
  assert(r ~= nil)
  return t / iters
end

local function timed(f, iters, ...) return timed_after(2, f, iters, ...) end

-- y = x:matmul(W:t()), x (1, k) and W (m, k) float32: a Linear layer on one example
-- (Note [Small products without OpenBLAS] in tensor/cpu/matmul.cpp): seconds per call.
function M.gemv(m, iters, k)
  local W, x = dl.randn(tonumber(m), tonumber(k)), dl.randn(1, tonumber(k))
  local Wt = W:t()
  return timed(function() return x:matmul(Wt) end, iters)
end

-- y = op(x) over n float32 in [0.5, 1.5) (in every op's domain): seconds per op.
function M.unary(op, n, iters)
  local f = assert(dl[op], "unary: no op " .. tostring(op))
  local x = dl.rand(n) + 0.5
  return timed_after(3, function() return f(x) end, iters)
end

-- layer_norm forward and backward (input, weight and bias) on (64, 512) float32:
-- seconds per call.
function M.layernorm(iters)
  dl.manual_seed(1)
  local x, w, b, c = dl.randn(64, 512), dl.randn(512), dl.randn(512), dl.randn(64, 512)
  local g = dl.grad(function(xx, ww, bb) return (dl.layer_norm(xx, 512, ww, bb) * c):sum() end, { 1, 2, 3 })
  assert(g(x, w, b):numel() == 64 * 512)
  return timed_after(20, g, iters, x, w, b)
end

-- dl.fft.rfft then irfft of (64, n) float32 (a power of two, or not: Bluestein's):
-- seconds per round trip.
function M.fft(n, iters)
  n = tonumber(n)
  dl.manual_seed(1)
  local x = dl.randn(64, n)
  local F = dl.fft
  local function trip() return F.irfft(F.rfft(x), n) end
  assert(dl.allclose(trip(), x, 1e-3, 1e-3))
  return timed_after(20, trip, iters)
end

-- One optimizer step on a (256, 784) float32 weight (the MLP's first layer) and a fixed
-- gradient, through apply_gradients: SGD with momentum, or Adam. Seconds per step.
local function optstep(make, iters)
  dl.manual_seed(1)
  local w, g = dl.Variable(dl.randn(256, 784)), dl.randn(256, 784)
  local opt = make()
  local pairs_ = { { g, w } }
  return timed_after(20, function() opt:apply_gradients(pairs_) return w end, iters)
end
function M.sgdstep(iters) return optstep(function() return dl.optim.SGD{ lr = 1e-3, momentum = 0.9 } end, iters) end
function M.adamstep(iters) return optstep(function() return dl.optim.Adam{ lr = 1e-3 } end, iters) end

-- An LSTM layer (2 layers of 256, input 256) over 64 steps of a batch of 32, forward
-- and backward to the input and every weight: seconds per call.
function M.lstm(iters)
  dl.manual_seed(1)
  local net = dl.nn.LSTM(256, 256, { num_layers = 2 })
  local step = dl.implicit_value_and_grad(function(v) return (net(v)):sum() end)
  return timed_after(3, step, iters, dl.randn(64, 32, 256))
end

-- scaled_dot_product_attention on (8, 4, 128, 64), float32, forward and backward to
-- q, k and v: seconds per call.
function M.sdpa(iters)
  dl.manual_seed(1)
  local q, k, v = dl.randn(8, 4, 128, 64), dl.randn(8, 4, 128, 64), dl.randn(8, 4, 128, 64)
  local F = dl.nn.functional
  local g = dl.grad(function(a, b, c) return (F.scaled_dot_product_attention(a, b, c)):sum() end, { 1, 2, 3 })
  return timed_after(3, g, iters, q, k, v)
end

-- One training step of scripts/examples/char_transformer.lua's model (2 pre-norm
-- TransformerEncoderLayers of width 64, 4 heads, feed-forward 256, GELU, dropout 0.1,
-- causal; token embeddings of 80 characters plus sinusoidal positions; a final
-- LayerNorm and a linear head) on a batch of 16 windows of 64 characters: forward,
-- backward, gradient clipping at 1 and an AdamW step. Seconds per step.
function M.chartf(iters)
  dl.manual_seed(1)
  local nn, F = dl.nn, dl.nn.functional
  local V, T, B, width, heads, layers = 80, 64, 16, 64, 4, 2
  local LM = nn.Module:extend("BenchCharLM")
  function LM:init()
    self.tokens = nn.Embedding(V, width)
    for i = 1, layers do
      self["block" .. i] = nn.TransformerEncoderLayer(width, heads, {
        dim_feedforward = 4 * width, dropout = 0.1, batch_first = true, norm_first = true, activation = "gelu" })
    end
    self.norm = nn.LayerNorm(width)
    self.head = nn.Linear(width, V)
    self.positions = F.sinusoidal_positions(T, width)
  end
  function LM:forward(x)
    local h = self.tokens(x) + self.positions
    for i = 1, layers do h = self["block" .. i](h, { is_causal = true }) end
    return self.head(self.norm(h))
  end
  local model = LM()
  local opt = dl.optim.AdamW({ lr = 3e-3, weight_decay = 0.01 })
  local grad = dl.implicit_value_and_grad(function(x, y)
    return nn.cross_entropy(model(x):reshape(-1, V), y:reshape(-1))
  end)
  local x = dl.randint(1, V + 1, { B, T }, { dtype = "int64" })
  local y = dl.randint(1, V + 1, { B, T }, { dtype = "int64" })
  local function step()
    local loss, grads = grad(x, y)
    nn.utils.clip_grad_norm_(grads, 1.0)
    opt:apply_gradients(grads)
    return loss
  end
  return timed_after(3, step, iters)
end

-- Per-example gradients of an MLP 784-128-10 (relu, cross-entropy) on 64 examples,
-- dl.vmap(dl.grad(loss)): seconds per call.
function M.pergrad(iters)
  dl.manual_seed(1)
  local F = dl.nn.functional
  local w1, b1 = dl.randn(128, 784) * 0.05, dl.zeros(128)
  local w2, b2 = dl.randn(10, 128) * 0.05, dl.zeros(10)
  local xs, ys = dl.randn(64, 784), dl.randint(1, 11, { 64 }, { dtype = "int64" })
  local function loss(a1, c1, a2, c2, x, y)
    local h = dl.relu(F.linear(x, a1, c1))
    return dl.nn.cross_entropy(F.linear(h, a2, c2):unsqueeze(1), y:unsqueeze(1))
  end
  local g = dl.vmap(dl.grad(loss, { 1, 2, 3, 4 }), { in_dims = { false, false, false, false, 1, 1 } })
  assert(g(w1, b1, w2, b2, xs, ys):size(3) == 784)
  return timed_after(3, g, iters, w1, b1, w2, b2, xs, ys)
end

-- pw8_fn over n float32, eagerly or compiled: seconds per call.
function M.pw8(n, iters, compiled)
  local x = dl.rand(n)
  return timed(compiled and dl.compile(pw8_fn) or pw8_fn, iters, x)
end

-- The chain row's function without a gradient on n float32, eagerly or compiled:
-- seconds per op.
function M.chainfwd(n, iters, compiled)
  local x, w = dl.rand(n), dl.rand(n)
  return timed(compiled and dl.compile(chain_fn) or chain_fn, iters, x, w) / M.CHAIN_OPS
end

-- What replaying a matched op costs: 32 multiplies and adds, then a sum, on 16 float32
-- held by handles (rows of a matrix: views), eagerly or compiled: seconds per op.
-- Compiled with defer_small (mode "d"), every op is deferred and matched; by default
-- (mode "c") they run at once (Note [Small handles run at once]). The
-- arithmetic of the fused program is a few ns an op of these; the rest is the compiled
-- call's own work (matching, the plan's setup, the call's start and end).
M.REPLAY_OPS = 33
local function replay_fn(x, w)
  local y = x
  for _ = 1, 16 do y = y * w + 0.1 end
  return y:sum()
end
-- mode: nil eagerly, "c" compiled (ops on small tensors run at once), "d" compiled with
-- defer_small (each op deferred and matched against the trace).
function M.replay16(iters, mode)
  local x, w = dl.rand(2, 16)[1], dl.rand(2, 16)[1]
  local f = mode and dl.compile(replay_fn, { defer_small = mode == "d" }) or replay_fn
  return timed(f, iters, x, w) / M.REPLAY_OPS
end

-- The chain row (recorded + backward) through dl.compile: seconds per op.
function M.chainc(iters)
  local x, w = dl.rand(16), dl.rand(16)
  return timed(dl.compile(dl.grad(chain_fn)), iters, x, w) / M.CHAIN_OPS
end

-- One training step of the MLP (784-256-10, batch 64, SGD with momentum) on random data,
-- eagerly or compiled: seconds per step.
function M.mlpstep(iters, compiled)
  local nn = dl.nn
  dl.manual_seed(1)
  local model = nn.Sequential{ nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10) }
  local opt = dl.optim.SGD{ lr = 0.01, momentum = 0.9 }
  local grad = dl.implicit_value_and_grad(function(xb, yb) return nn.cross_entropy(model(xb), yb) end)
  local step = function(xb, yb)
    local loss, grads = grad(xb, yb)
    opt:apply_gradients(grads)
    return loss
  end
  local xb, yb = dl.randn(64, 784), dl.randint(1, 11, { 64 }, { dtype = "int64" })
  return timed(compiled and dl.compile(step) or step, iters, xb, yb)
end

-- One training step of a small controller-sized MLP (32-64-4, tanh, batch 32, mean
-- squared error, SGD with momentum) through implicit gradients, eagerly or compiled (the
-- whole step, gradient and update, is one plan): seconds per step.
function M.smallstep(iters, compiled)
  local nn = dl.nn
  dl.manual_seed(1)
  local model = nn.Sequential{ nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4) }
  local opt = dl.optim.SGD{ lr = 0.01, momentum = 0.9 }
  local grad = dl.implicit_value_and_grad(function(xb, yb) return ((model(xb) - yb) ^ 2):mean() end)
  local step = function(xb, yb)
    local loss, grads = grad(xb, yb)
    opt:apply_gradients(grads)
    return loss
  end
  local xb, yb = dl.randn(32, 32), dl.randn(32, 4)
  return timed(compiled and dl.compile(step) or step, iters, xb, yb)
end

-- The MLP of the export rows (784-256-10, its logits), made alike by bench/run.lua's
-- export and here.
function M.infer_model()
  local nn = dl.nn
  dl.manual_seed(1)
  return nn.Sequential{ nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10) }:eval()
end

-- Its inference on one image of zeros, eagerly under no_grad: seconds per call.
function M.mlpinfer(iters)
  local model = M.infer_model()
  local x = dl.zeros(1, 784)
  return dl.no_grad(function() return timed(model, iters, x) end)
end

-- A function of 100 pointwise ops on (64, 64) float32: its first call through a fresh
-- dl.compile (capture, planning, the collection that finds what it kept), or an eager
-- call: seconds per call.
local function ops100(x)
  local y = x
  for _ = 1, 25 do y = ((y * 0.5 + 0.25):tanh() - x) end
  return y
end
function M.capture100(iters, compiled)
  local x = dl.randn(64, 64)
  if not compiled then return timed(ops100, iters, x) end
  local t = 0
  for _ = 1, iters do
    local cf = dl.compile(ops100)
    local t0 = now()
    local r = cf(x)
    t = t + (now() - t0)
    assert(r ~= nil)
  end
  return t / iters
end

-- ---- training epochs ---------------------------------------------------------------------------

-- Fashion-MNIST's training set: images (60000, 28, 28) standardised float32, labels
-- int64 1..10. Standardised in place: no copy of the 188 MB beyond the one made from
-- the file's bytes.
local train_x, train_y
function M.train_data()
  if not train_x then
    local x, y = dl.data.fashion_mnist("train")
    x:sub_(M.MEAN):div_(M.STD)
    train_x, train_y = x, y
  end
  return train_x, train_y
end

-- The same images as the file's bytes, uint8 (60000, 28, 28): a quarter of the memory;
-- the "mlp8" model converts each batch as it is made (standardise_batch).
function M.train_bytes()
  return dl.data.fashion_mnist("train", { dtype = "uint8" })
end

-- A uint8 batch of images as float32, standardised as train_data's are (in place after
-- the one conversion, as bench/torch_ref.py does it).
function M.standardise_batch(xb, yb)
  return xb:to("float32"):div_(255):sub_(M.MEAN):div_(M.STD), yb
end

-- A model, its optimizer and its data, kept across samples (as bench/torch_ref.py keeps
-- its own): every timed epoch continues training the same model. `name .. "c"` is the
-- same model trained through dl.compile: gradient and update, one compiled call a batch.
local models = {}

local function make(name)
  local base = name:match("^(.-)c$")
  if base then
    local m = setmetatable({ sets = {} }, { __index = models[base] or make(base) })
    m.train = dl.compile(m.train)
    models[name] = m
    return m
  end
  local nn = dl.nn
  local bytes = name == "mlp8"   -- the MLP on uint8 images, each batch standardised
  local x, y = (bytes and M.train_bytes or M.train_data)()
  dl.manual_seed(1)
  local model, opt, batch
  if name == "mlp" or bytes then
    -- 784-256-10, SGD with momentum, batch 64.
    x = x:view(-1, 784)
    model = nn.Sequential{ nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10) }
    opt = dl.optim.SGD{ lr = 0.05, momentum = 0.9 }
    batch = 64
  else
    -- The conv net of TensorFlow's eager execution guide: Conv2D(16, 3x3, relu),
    -- Conv2D(16, 3x3, relu), GlobalAveragePooling2D, Dense(10); Adam, batch 32.
    x = x:view(-1, 1, 28, 28)
    model = nn.Sequential{
      nn.Conv2d(1, 16, 3), nn.ReLU(),
      nn.Conv2d(16, 16, 3), nn.ReLU(),
      nn.GlobalAvgPool2d(),
      nn.Linear(16, 10),
    }
    opt = dl.optim.Adam{ lr = 1e-3 }
    batch = 32
  end
  local step = dl.implicit_value_and_grad(function(xb, yb) return nn.cross_entropy(model(xb), yb) end)
  -- One batch: forward, loss, backward and the optimizer's step; returns the loss.
  local function train(xb, yb)
    local loss, grads = step(xb, yb)
    opt:apply_gradients(grads)
    return loss
  end
  local m = { x = x, y = y, batch = batch, train = train, sets = {},
              prepare = bytes and M.standardise_batch or nil }
  models[name] = m
  return m
end

-- One epoch (or its first `limit` images): shuffle, then for each batch an index
-- gather, forward, loss, backward and the optimizer's step. Returns seconds and the
-- last batch's loss.
function M.epoch(name, limit)
  local m = models[name] or make(name)
  local n = limit or m.x:size(1)
  local ds = m.sets[n]
  if not ds then
    local x, y = m.x, m.y
    if n < x:size(1) then x, y = x:narrow(1, 1, n), y:narrow(1, 1, n) end
    ds = dl.data.from_tensors(x, y):shuffle(1):batch(m.batch)
    if m.prepare then ds = ds:map(m.prepare) end
    m.sets[n] = ds
  end
  local train = m.train
  local loss
  local t0 = now()
  for xb, yb in ds:iter() do loss = train(xb, yb) end
  return now() - t0, loss:item()
end

-- The harness's form: n > 1000 is a partial epoch of n images (the quick mode), else n
-- whole epochs; seconds per epoch (or per partial epoch).
function M.epochs(name, n)
  if n > 1000 then return (M.epoch(name, n)) end
  local t = 0
  for _ = 1, n do t = t + M.epoch(name) end
  return t / n
end

-- ---- the worker -----------------------------------------------------------------------------

-- The peak resident set of this process so far, in bytes (VmHWM: this process only, since
-- its exec; a parent's peak never leaks into it, unlike wait4's ru_maxrss after vfork).
function M.peak_rss()
  local f = io.open("/proc/self/status", "r")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  local kb = text:match("VmHWM:%s*(%d+)")
  return kb and tonumber(kb) * 1024
end

-- bench/run.lua's protocol (as bench/torch_ref.py and bench/ref.c speak it): one command
-- a line on stdin, one answer a line on stdout ("ok <seconds>" or "err <message>").
--   add16 <iters> | chain <iters> | d2 <iters> | layernorm <iters> | lstm <iters> | sdpa <iters>
--   | pergrad <iters> | chartf <iters> | sgdstep <iters> | adamstep <iters> | fft <n> <iters>
--   | matmul <n> <iters> [<cols> <k> <ops>] | gemv <m> <iters> <k> | solve <n> <iters> <batch> | add <n> <iters>
--   | sum <n> <iters> | unary <op> <n> <iters> | half <iters> | mlp <epochs or images> [c] | cnn <epochs or images> [c]
--   | pw8 <n> <iters> [c] | chainfwd <n> <iters> [c] | replay16 <iters> [c|d] | chainc <iters> | mlpstep <iters> [c]
--   | smallstep <iters> [c]
--   | capture100 <iters> [c] | info | quit          (c: through dl.compile)
function M.worker(input, output)
  local commands = {
    add16 = M.add16, chain = M.chain, d2 = M.d2, matmul = M.matmul, gemv = M.gemv, add = M.add, sum = M.sum, half = M.half,
    unary = function(op, n, iters) return M.unary(op, tonumber(n), tonumber(iters)) end,
    layernorm = M.layernorm, lstm = M.lstm, sdpa = M.sdpa, solve = M.solve, pergrad = M.pergrad,
    chartf = M.chartf, sgdstep = M.sgdstep, adamstep = M.adamstep, fft = M.fft,
    pw8 = function(n, iters, c) return M.pw8(n, iters, c == "c") end,
    chainfwd = function(n, iters, c) return M.chainfwd(n, iters, c == "c") end,
    replay16 = function(iters, c) return M.replay16(iters, (c == "c" or c == "d") and c or nil) end,
    chainc = M.chainc, mlpinfer = M.mlpinfer,
    mlpstep = function(iters, c) return M.mlpstep(iters, c == "c") end,
    smallstep = function(iters, c) return M.smallstep(iters, c == "c") end,
    capture100 = function(iters, c) return M.capture100(iters, c == "c") end,
    mlp = function(n, c) return M.epochs(c == "c" and "mlpc" or "mlp", n) end,
    cnn = function(n, c) return M.epochs(c == "c" and "cnnc" or "cnn", n) end,
  }
  for line in input:lines() do
    local words = {}
    for w in line:gmatch("%S+") do words[#words + 1] = w end
    local cmd = words[1]
    if cmd == "quit" then break end
    if cmd == "info" then
      output:write(("ok dlua %s, %s\n"):format(dl._VERSION or "?", jit and jit.version or _VERSION))
    elseif commands[cmd] then
      local a2, a3 = tonumber(words[2]) or words[2], tonumber(words[3])
      local ok, t = pcall(commands[cmd], a2, a3 or words[3], words[4], words[5], words[6])
      if ok then
        output:write(("ok %.9g\n"):format(t))
      else
        output:write("err " .. tostring(t):gsub("\n", " ") .. "\n")
      end
    elseif cmd then
      output:write("err unknown command " .. cmd .. "\n")
    end
    output:flush()
  end
end

return M
