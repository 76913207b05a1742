-- dl.export and dl.export.load: a function's graph, written to a .dlg file and run back,
-- gives eager's results bit for bit; sizes marked dynamic follow the inputs; everything a
-- graph cannot hold is an error that names the line, never a frozen value.
local H = require("harness")
local dl = require("dlua")
local generate = require("programs")
local nn = dl.nn

local tmp = os.tmpname()
local function path(name) return tmp .. "." .. name .. ".dlg" end

local function identical(a, b, what)
  H.eq(a.dtype, b.dtype, what .. " dtype")
  H.eq(a.shape, b.shape, what .. " shape")
  H.ok(dl.equal(a, b), what .. ": values differ from eager's")
end

-- Exports f at args, loads the file, and compares with eager on each list of calls.
local function round_trip(name, f, args, opts, calls)
  opts = opts or {}
  opts.path = path(name)
  local report = dl.export(f, args, opts)
  local g = dl.export.load(opts.path)
  for i, call in ipairs(calls or { args }) do
    local want = { f(unpack(call)) }
    local got = { g(unpack(call)) }
    H.eq(#got, #want, name .. ": number of results")
    for k = 1, #want do identical(got[k], want[k], name .. " call " .. i .. " result " .. k) end
  end
  os.remove(opts.path)
  return report, g
end

H.test("an MLP round-trips bit for bit, its batch dynamic", function()
  dl.manual_seed(3)
  local net = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 5))
  net:eval()
  local f = function(x) return dl.softmax(net(x), 2) end
  local report = round_trip("mlp", f, { dl.randn(4, 12) }, { dynamic = { [1] = { 1, "batch" } }, names = net },
                            { { dl.randn(4, 12) }, { dl.randn(1, 12) }, { dl.randn(37, 12) } })
  local text = tostring(report)
  H.ok(text:find("input1 float32 (batch, 12)", 1, true), text)
  H.ok(text:find("1.weight float32 (32, 12)", 1, true), text)
  H.ok(text:find("softmax 1", 1, true), text)
end)

H.test("a graph takes the exported sizes: exactly without dynamic dims, one size for a symbol two inputs share", function()
  local w = dl.randn(6, 3)
  local f = function(x) return dl.tanh(x:matmul(w)) end
  local p = path("fixed")
  dl.export(f, { dl.randn(2, 6) }, { path = p })
  local g = dl.export.load(p)
  identical(g(dl.ones(2, 6)), f(dl.ones(2, 6)), "fixed")
  H.raises(function() g(dl.ones(3, 6)) end, "dlg_run: input 1 (input1) is float32 (3, 6); the graph takes float32 (2, 6)")
  H.raises(function() g(dl.ones(2, 6, "float64")) end, "the graph takes float32 (2, 6)")
  H.raises(function() g() end, "takes 1 inputs, got 0")
  os.remove(p)
  -- one symbol in two inputs: both take the size the first gives it
  dl.export(function(a, b) return a + b end, { dl.zeros(2, 3), dl.zeros(2, 3) },
            { path = p, dynamic = { [1] = { 1, "batch" }, [2] = { 1, "batch" } } })
  g = dl.export.load(p)
  H.shape(g(dl.ones(4, 3), dl.ones(4, 3)), { 4, 3 })
  H.raises(function() g(dl.ones(2, 3), dl.ones(4, 3)) end,
           "dlg_run: input 2 (input2) is float32 (4, 3); the graph takes float32 (batch, 3)")
  os.remove(p)
end)

H.test("a conv net with batch norm, pooling and dropout (evaluation mode) round-trips", function()
  dl.manual_seed(5)
  local net = nn.Sequential(
    nn.Conv2d(1, 4, 3, { padding = 1 }), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(4, 6, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Dropout(0.5), nn.Linear(6 * 2 * 2, 3))
  -- Running statistics away from their start, so that evaluation mode matters.
  for _ = 1, 3 do net(dl.randn(5, 1, 12, 12)) end
  net:eval()
  round_trip("cnn", function(x) return dl.log_softmax(net(x), 2) end, { dl.randn(2, 1, 12, 12) },
             { dynamic = { [1] = { 1, "batch" } }, names = net },
             { { dl.randn(2, 1, 12, 12) }, { dl.randn(7, 1, 12, 12) } })
end)

H.test("a decoder of transposed convolutions round-trips (conv_transpose2d and 1d)", function()
  dl.manual_seed(6)
  local up = nn.Sequential(
    nn.ConvTranspose2d(4, 6, 3, { stride = 2, padding = 1, output_padding = 1 }), nn.ReLU(),
    nn.ConvTranspose2d(6, 2, { 2, 3 }, { stride = { 1, 2 }, dilation = { 2, 1 }, groups = 2, bias = false }))
  round_trip("decoder", function(x) return up(x) end, { dl.randn(2, 4, 5, 5) },
             { dynamic = { [1] = { 1, "batch" } }, names = up }, { { dl.randn(2, 4, 5, 5) }, { dl.randn(3, 4, 5, 5) } })
  local up1 = nn.ConvTranspose1d(3, 4, 3, { stride = 2 })
  round_trip("decoder1d", function(x) return up1(x) end, { dl.randn(2, 3, 6) }, {}, { { dl.randn(2, 3, 6) } })
end)

H.test("sequence models: embedding, layer norm, attention, an LSTM", function()
  dl.manual_seed(7)
  local emb, ln = nn.Embedding(20, 8), nn.LayerNorm(8)
  local attn = nn.MultiheadAttention(8, 2, { batch_first = true })
  local lstm = nn.LSTM(8, 6, { batch_first = true })
  for _, m in ipairs({ emb, ln, attn, lstm }) do m:eval() end
  local f = function(ids)
    local h = ln(emb(ids))
    local a = attn(h, h, h)
    local y = lstm(a)
    return y:sum(2), a
  end
  local ids = dl.tensor({ { 1, 5, 7, 2 }, { 3, 3, 19, 20 } }, "int64")
  round_trip("seq", f, { ids }, { dynamic = { [1] = { 1, "batch" } } },
             { { ids }, { dl.tensor({ { 4, 4, 4, 4 } }, "int64") } })
end)

H.test("a dynamic dim that appears in two arguments, and float64", function()
  local f = function(x, m) return dl.where(m, x * 2, x:exp()):sum(2), x:mean(1) end
  local x = dl.randn(3, 5, "float64")
  local m = x:gt(0)
  round_trip("two", f, { x, m }, { dynamic = { [1] = { 1, "n" }, [2] = { 1, "n" } } },
             { { x, m }, { dl.randn(6, 5, "float64"), dl.randn(6, 5):gt(0) } })
end)

H.test("reshape and view sizes follow the symbol (affine sizes)", function()
  local f = function(x) return x:reshape(-1):view(x.shape[1] * 2, 3):sum(1) end
  round_trip("affine", f, { dl.randn(4, 6) }, { dynamic = { [1] = { 1, "b" } } },
             { { dl.randn(4, 6) }, { dl.randn(9, 6) } })
end)

H.test("Lua numbers become constants, listed in the report", function()
  local f = function(x) return (x * 0.5 + 3):clamp(0, 2) end
  local report = round_trip("numbers", f, { dl.randn(5) })
  H.ok(tostring(report):find("(mul): 0.5", 1, true), tostring(report))
  H.ok(tostring(report):find("(add): 3", 1, true), tostring(report))
end)

H.test("several results, a result that is an argument, and a constant result", function()
  local c = dl.tensor({ 1, 2, 3 })
  local f = function(x) return x, x + 1, c end
  round_trip("results", f, { dl.randn(3) })
end)

-- Note [The runner's plan] (export/model.cpp): views of constants made at load, a binary
-- op writing over its first operand where nothing else holds it.
H.test("the runner's plan: folded views of constants, results written over dying values", function()
  dl.manual_seed(5)
  local w, b = dl.randn(6, 4), dl.randn(6)
  -- the product's result dies at `+ b` and at each later op: written over, bit for bit
  round_trip("plan-chain", function(x) return ((x:matmul(w:t()) + b) * 2 - b) / 3 end, { dl.randn(3, 4) },
             { dynamic = { [1] = { 1, "batch" } } }, { { dl.randn(3, 4) }, { dl.randn(1, 4) } })
  -- an operand read again later, or viewed by a value that lives on, keeps its values
  round_trip("plan-reread", function(x)
    local y = x:matmul(w:t())
    local z = y + 1
    return z, y * z
  end, { dl.randn(3, 4) })
  round_trip("plan-viewed", function(x)
    local y = x:matmul(w:t())
    local v = y:view(18)
    return y + b, v
  end, { dl.randn(3, 4) })
  -- an input is never written, nor a constant: a result equal to a constant's view is a
  -- copy, so changing it changes neither the next run nor the other result
  local x = dl.randn(2, 6)
  local f = function(a) return a + b, w:t(), w:t() * 1 end
  local _, g = round_trip("plan-consts", f, { x })
  local x0 = x:clone()
  local r1, r2 = select(1, g(x)), select(2, g(x))
  H.ok(dl.equal(x, x0), "the input was written")
  r2:fill_(0)
  H.ok(dl.equal(select(2, g(x)), w:t()), "a constant's view was handed out, not a copy")
  H.ok(dl.equal(r1, x + b))
  -- a reshape of a constant's transpose is a copy, not a view: not kept with the
  -- constants, so each run hands out memory of its own
  local _, h = round_trip("plan-copy", function(a) return w:t():reshape(24) + 0 * a:sum(), w:t():reshape(24) end,
                          { dl.randn(2) })
  local first = select(2, h(dl.randn(2)))
  first:fill_(0)
  H.ok(dl.equal(select(2, h(dl.randn(2))), w:t():reshape(24)), "a result of the model's memory was handed out")
end)

H.test("reading a value into Lua is an error at its line", function()
  local p = path("escape")
  local f = function(x)
    if x:sum():item() > 0 then return x end
    return -x
  end
  local line = H.line() - 3
  local msg = H.raises(function() dl.export(f, { dl.randn(3) }, { path = p }) end, "export: item reads a tensor's value into Lua")
  H.at(msg, line)
  -- the message says what to write instead
  H.ok(msg:find("dl.where", 1, true) and msg:find("dl.cond", 1, true) and msg:find("dl.while_loop", 1, true), msg)
  H.raises(function() dl.export(function(x) return x[1] > 0 and x or -x end, { dl.randn(3) }, { path = p }) end,
           "export: x[i] of a 1-D tensor reads a tensor's value")
  H.raises(function() dl.export(function(x) return tostring(x) and x end, { dl.randn(3) }, { path = p }) end,
           "export:")
  H.ok(io.open(p) == nil, "no file is written")
  -- The runtime is usable afterwards: values are read again.
  H.eq(dl.tensor({ 2 }):item(), 2)
  H.eq(dl.export.load ~= nil, true)
end)

H.test("random ops, in-place writes and training-mode batch norm are refused", function()
  local p = path("refused")
  H.raises(function() dl.export(function(x) return x + dl.rand(3) end, { dl.randn(3) }, { path = p }) end,
           "random ops cannot be exported")
  local drop = nn.Dropout(0.5)
  H.raises(function() dl.export(function(x) return drop(x) end, { dl.randn(3) }, { path = p }) end,
           "evaluation mode")
  H.raises(function() dl.export(function(x) local y = x * 1; y:add_(1); return y end, { dl.randn(3) }, { path = p }) end,
           "in-place write")
  local bn = nn.BatchNorm1d(3)
  H.raises(function() dl.export(function(x) return bn(x) end, { dl.randn(4, 3) }, { path = p }) end,
           "evaluation mode for models")
  H.raises(function()
    dl.export(function(x) return dl.nn.functional.batch_norm(x, bn.running_mean, bn.running_var, nil, nil, true) end,
              { dl.randn(4, 3) }, { path = p })
  end, "batch_norm in training mode")
  H.ok(io.open(p) == nil, "no file is written")
end)

H.test("a Lua branch on a dynamic size, or on changing state, is caught by the captures", function()
  local p = path("branch")
  local f = function(x)
    if x.shape[1] > 3 then return x * 2 end
    return x + 1
  end
  H.raises(function() dl.export(f, { dl.randn(3, 2) }, { path = p, dynamic = { [1] = { 1, "batch" } } }) end,
           "when batch changed from 3 to 4")
  local calls = 0
  local g = function(x)
    calls = calls + 1
    return x * calls
  end
  H.raises(function() dl.export(g, { dl.randn(2) }, { path = p }) end, "Lua number 1 became 2")
  local w = dl.ones(2)
  local h = function(x)
    w = w + 1   -- a tensor read from outside that changes from call to call
    return x * w
  end
  H.raises(function() dl.export(h, { dl.randn(2) }, { path = p }) end, "constant")
  -- A size product of two symbols is not affine in either.
  H.raises(function()
    dl.export(function(x) return x:reshape(-1) end, { dl.randn(2, 3) },
              { path = p, dynamic = { [1] = { { 1, "a" }, { 2, "b" } } } })
  end, "two symbolic dims")
  H.ok(io.open(p) == nil, "no file is written")
end)

H.test("check_args runs the second capture on other sizes", function()
  local p = path("check")
  local f = function(x) return x:sum(2) end
  dl.export(f, { dl.randn(2, 4) }, { path = p, dynamic = { [1] = { 1, "n" } }, check_args = { dl.randn(9, 4) } })
  local g = dl.export.load(p)
  identical(g(dl.ones(5, 4)), f(dl.ones(5, 4)), "check")
  H.raises(function() dl.export(f, { dl.randn(2, 4) }, { path = p, check_args = { dl.randn(9, 4) } }) end,
           "in the check capture")
  os.remove(p)
end)

H.test("bad arguments and hostile files get clear errors", function()
  local p = path("bad")
  H.raises(function() dl.export(42, {}, { path = p }) end, "export: expected a function")
  H.raises(function() dl.export(function(x) return x end, { 3 }, { path = p }) end, "argument 1 is a number")
  H.raises(function() dl.export(function(x) return x end, { dl.ones(2) }) end, "expected opts.path")
  H.raises(function() dl.export(function(x) return x end, { dl.ones(2) }, { path = p, bogus = 1 }) end,
           "unknown option 'bogus'")
  H.raises(function() dl.export(function(x) return 3 end, { dl.ones(2) }, { path = p }) end, "result 1 is a number")
  H.raises(function() dl.export(function(x) return x end, { dl.ones(2) }, { path = p, dynamic = { [1] = { 2, "n" } } }) end,
           "dim 2 is not a dim")
  H.raises(function() dl.export.load(p .. ".missing") end, "dlg_load")
  -- A safetensors file without a graph, and one whose graph is damaged.
  dl.save(p, { w = dl.ones(2) })
  H.raises(function() dl.export.load(p) end, "no graph in the file")
  dl.export(function(x) return x + 1 end, { dl.ones(2) }, { path = p })
  local f = assert(io.open(p, "rb"))
  local bytes = f:read("*a")
  f:close()
  -- The graph's JSON is a string in the header: its quotes are escaped there.
  local function plain_sub(text, from, to)
    local i = text:find(from, 1, true)
    if not i then return text end
    return text:sub(1, i - 1) .. to .. text:sub(i + #from)
  end
  local q = '\\"'
  for _, damage in ipairs({ { q .. "op" .. q .. ":" .. q .. "add", q .. "op" .. q .. ":" .. q .. "nop" },
                            { q .. "version" .. q .. ":1", q .. "version" .. q .. ":7" },
                            { q .. "in" .. q .. ":[0", q .. "in" .. q .. ":[9" },
                            { q .. "outputs" .. q .. ":[1]", q .. "outputs" .. q .. ":[5]" } }) do
    local b = plain_sub(bytes, damage[1], damage[2])
    H.ok(b ~= bytes, "damaged " .. damage[1])
    f = assert(io.open(p, "wb"))
    f:write(b)
    f:close()
    H.raises(function() dl.export.load(p) end, "dlg_load: " .. p)
  end
  os.remove(p)
end)

H.test("compiled functions called inside an export run eagerly into the graph", function()
  local cf = dl.compile(function(x) return dl.tanh(x) * 2 end)
  round_trip("compiled", function(x) return cf(x) + 1 end, { dl.randn(4) })
end)

-- The seeds' fizzbuzz, with its branches as tensor ops: per number 1..100, 0 for the
-- number itself, 1 Fizz, 2 Buzz, 3 FizzBuzz, up to n (a tensor).
local function fizzbuzz(n)
  local positions = dl.arange(1, 101, 1, "int64")
  local function cond(i, codes) return i:le(n) end
  local function body(i, codes)
    local code = dl.cond((i % 15):eq(0), function() return dl.full({ 1 }, 3, "int64") end, function()
      return dl.where((i % 3):eq(0), dl.full({ 1 }, 1, "int64"), dl.where((i % 5):eq(0), dl.full({ 1 }, 2, "int64"), 0 * i))
    end)
    return i + 1, dl.where(positions:eq(i), code, codes)
  end
  local _, codes = dl.while_loop(cond, body, { dl.ones(1, "int64"), dl.zeros(100, "int64") })
  return codes
end

H.test("dl.while_loop and dl.cond run eagerly, under dl.grad too", function()
  H.eq(fizzbuzz(dl.tensor({ 15 }, "int64")):narrow(1, 1, 15):totable(), { 0, 0, 1, 0, 2, 1, 0, 0, 1, 2, 0, 1, 0, 0, 3 })
  local i, y = dl.while_loop(function(i, y) return i:lt(3) end, function(i, y) return i + 1, y * y end,
                             { dl.tensor({ 0 }), dl.tensor({ 1.5 }) })
  H.eq(i:item(), 3)
  H.near(y:item(), 1.5 ^ 8, 1e-4)
  -- d/dx of x^(2^3) = 8 x^7, through the recorded iterations.
  local g = dl.grad(function(x)
    local _, r = dl.while_loop(function(k) return k:lt(3) end, function(k, v) return k + 1, v * v end,
                               { dl.tensor({ 0 }), x })
    return r:sum()
  end)(dl.tensor({ 1.1 }, "float64"))
  H.near(g:item(), 8 * 1.1 ^ 7, 1e-9)
  H.eq(dl.cond(true, function() return 1 end, function() return 2 end), 1)
  H.eq(dl.cond(dl.tensor({ 0 }), function() return 1 end, function() return 2 end), 2)
  -- under dl.grad only the branch taken is differentiated: d/dx of x^3 or of sin x
  local function piecewise(x)
    return dl.cond(x:gt(0), function(a) return a ^ 3 end, function(a) return a:sin() end, x):sum()
  end
  H.near(dl.grad(piecewise)(dl.tensor({ 1.5 }, "float64")):item(), 3 * 1.5 ^ 2, 1e-12)
  H.near(dl.grad(piecewise)(dl.tensor({ -0.5 }, "float64")):item(), math.cos(-0.5), 1e-12)
  H.near(dl.grad(dl.grad(piecewise))(dl.tensor({ 1.5 }, "float64")):item(), 6 * 1.5, 1e-12)   -- second order
  -- and exported, the gradient of the same function takes the branch the input asks for
  local gp = path("cond-grad")
  dl.export(dl.grad(piecewise), { dl.tensor({ 1.0 }, "float64") }, { path = gp })
  local loaded = dl.export.load(gp)
  H.near(loaded(dl.tensor({ 2.0 }, "float64")):item(), 12, 1e-12)
  H.near(loaded(dl.tensor({ -1.0 }, "float64")):item(), math.cos(-1), 1e-12)
  os.remove(gp)
  -- a branch whose derivative is not finite where it is not taken: the gradient is still
  -- eager's (Note [A gradient through both branches] in control.lua), to the bit
  local function root_or_neg(x)
    return dl.cond(x:sum():gt(0), function(a) return a:sqrt() * 3 end, function(a) return -a end, x):sum()
  end
  dl.export(dl.grad(root_or_neg), { dl.tensor({ 1.0, 2.0 }, "float64") }, { path = gp })
  loaded = dl.export.load(gp)
  for _, at in ipairs({ { -1.0, -4.0 }, { 4.0, 0.25 }, { -1.0, 9.0 } }) do
    local x = dl.tensor(at, "float64")
    local want, got = dl.grad(root_or_neg)(x), loaded(x)
    H.eq(got:totable(), want:totable(), "cond's exported gradient at " .. table.concat(at, ", "))
  end
  os.remove(gp)
  H.raises(function() dl.cond(dl.ones(2), function() end, function() end) end, "cond: expected a one-element tensor")
  H.raises(function() dl.while_loop(function(i) return i:lt(2) end, function(i) return dl.zeros(2) end, { dl.zeros(1) }) end,
           "the body changed state 1")
  H.raises(function() dl.while_loop(function(i) return i:lt(2) end, function(i) return i + 1 end, { 3 }) end,
           "state 1 is a number")
end)

H.test("fizzbuzz exports as a loop: the count is an input, the branches tensor ops", function()
  local n = dl.tensor({ 15 }, "int64")
  local report = round_trip("fizzbuzz", fizzbuzz, { n }, {},
                            { { n }, { dl.tensor({ 1 }, "int64") }, { dl.tensor({ 100 }, "int64") } })
  H.ok(tostring(report):find("while 1", 1, true), tostring(report))
end)

H.test("a loop reads the function's arguments and parameters from outside, and nests", function()
  local w = dl.randn(4, 4) * 0.3
  local f = function(x, steps)
    local k, h = dl.while_loop(function(k, h) return k:lt(steps) end, function(k, h)
      local _, inner = dl.while_loop(function(j, v) return j:lt(2) end, function(j, v) return j + 1, dl.tanh(v:matmul(w) + x) end,
                                     { dl.zeros(1), h })
      return k + 1, inner
    end, { dl.zeros(1), x })
    return h, k
  end
  local x = dl.randn(3, 4)
  round_trip("loops", f, { x, dl.tensor({ 3 }) }, { dynamic = { [1] = { 1, "batch" } } },
             { { x, dl.tensor({ 3 }) }, { dl.randn(5, 4), dl.tensor({ 0 }) }, { dl.randn(1, 4), dl.tensor({ 6 }) } })
  -- an inner loop whose condition reads a value the outer body made (its bound)
  local tri = function(n, x)
    local _, acc = dl.while_loop(function(i) return i:lt(n) end, function(i, acc)
      local bound = i * 2 + 1
      local _, a = dl.while_loop(function(j) return j:lt(bound) end, function(j, a) return j + 1, a + x end,
                                 { dl.zeros_like(i), acc })
      return i + 1, a
    end, { dl.zeros(1), dl.zeros(3) })
    return acc
  end
  round_trip("loops-bound", tri, { dl.tensor({ 3 }), dl.ones(3) }, nil,
             { { dl.tensor({ 3 }), dl.ones(3) }, { dl.tensor({ 5 }), dl.randn(3) }, { dl.tensor({ 0 }), dl.ones(3) } })
end)

H.test("cond under export selects between both branches", function()
  local f = function(x)
    return dl.cond(x:sum():gt(0), function(a) return a * 2, a:sum() end, function(a) return -a, a:amax() end, x)
  end
  round_trip("cond", f, { dl.randn(3) }, {}, { { dl.tensor({ 1, 2, 3 }) }, { dl.tensor({ -1, -2, -3 }) } })
  -- a predicate of shape (1) does not give its shape to 0-dim results (eagerly they are 0-dim)
  local g = function(x)
    return dl.cond(x:narrow(1, 1, 1):gt(0), function(a) return a:sum() end, function(a) return a:amax() end, x)
  end
  round_trip("cond-0dim", g, { dl.randn(3) }, {}, { { dl.tensor({ 1, 2, 3 }) }, { dl.tensor({ -1, 5, 3 }) } })
  local p = path("cond-bad")
  H.raises(function()
    dl.export(function(x) return dl.cond(x:sum():gt(0), function(a) return a end, function(a) return a, a end, x) end,
              { dl.randn(3) }, { path = p })
  end, "cond: the branches give 1 and 2 results")
end)

H.test("a gradient exports: dl.grad inside the function is captured with its backward pass", function()
  dl.manual_seed(4)
  local w1, w2 = dl.randn(4, 8), dl.randn(8, 3)
  local g = function(x, y)
    return dl.grad(function(a) return nn.cross_entropy(dl.tanh(x:matmul(a)):matmul(w2), y) end)(w1)
  end
  local x, y = dl.randn(5, 4), dl.tensor({ 1, 2, 3, 1, 2 }, "int64")
  H.ok(g(x, y):abs():sum():item() > 0, "a gradient that is not zero")
  round_trip("grad", g, { x, y }, {}, { { x, y }, { dl.randn(5, 4), dl.tensor({ 3, 3, 2, 1, 1 }, "int64") } })
  -- The mean's backward divides by the batch, a number of the engine's: with the batch
  -- free, that is found, not frozen.
  H.raises(function()
    dl.export(g, { x, y }, { path = path("grad-n"), dynamic = { [1] = { 1, "n" }, [2] = { 1, "n" } } })
  end, "Lua number 5 became 6")
end)

H.test("what a capture could otherwise get wrong is caught or kept apart", function()
  local p = path("wrong")
  -- A size that is not affine in the symbol: found by the check capture's other size.
  H.raises(function()
    dl.export(function(x) return x:narrow(1, 1, math.floor(x.shape[1] / 2)) end, { dl.randn(4, 2) },
              { path = p, dynamic = { [1] = { 1, "n" } } })
  end, "in the check capture")
  -- A loop that runs no time returns its initial state: still a value of its own.
  round_trip("noloop", function(x, n)
    local k, y = dl.while_loop(function(k) return k:lt(n) end, function(k, y) return k + 1, y * 2 end, { dl.zeros(1), x })
    return y + x, k
  end, { dl.randn(3), dl.tensor({ 0 }) }, {}, { { dl.randn(3), dl.tensor({ 0 }) }, { dl.randn(3), dl.tensor({ 2 }) } })
  -- A tensor made in a loop's body and kept aside (not returned as state) is refused.
  local kept
  H.raises(function()
    dl.export(function(x)
      local _, y = dl.while_loop(function(k) return k:lt(2) end, function(k, y)
        kept = y * 3
        return k + 1, y + 1
      end, { dl.zeros(1), x })
      return y + kept
    end, { dl.randn(3) }, { path = p })
  end, "made inside a loop's body")
  -- A loaded graph cannot run inside an export; exports do not nest.
  local q = path("inner")
  dl.export(function(x) return x * 2 end, { dl.randn(3) }, { path = q })
  local inner = dl.export.load(q)
  H.raises(function() dl.export(function(x) return inner(x) end, { dl.randn(3) }, { path = p }) end,
           "a loaded graph cannot run inside an export")
  H.raises(function()
    dl.export(function(x) dl.export(function(y) return y end, { x }, { path = q }) return x end, { dl.randn(3) }, { path = p })
  end, "an export is already in progress")
  H.eq(dl.export.load(q)(dl.ones(2, 1):reshape(-1):narrow(1, 1, 1):expand(3)):totable(), { 2, 2, 2 })
  -- A constant the graph returns as it is comes back as a copy: writing it changes nothing.
  local c = dl.tensor({ 1, 2, 3 })
  dl.export(function(x) return c, x end, { dl.randn(3) }, { path = q })
  local g = dl.export.load(q)
  local r = g(dl.randn(3))
  r:fill_(0)
  H.eq(g(dl.randn(3)):totable(), { 1, 2, 3 })
  -- dl.cond's branches give alike, and its predicate is one element, as eagerly.
  H.raises(function()
    dl.export(function(x) return dl.cond(x:sum():gt(0), function() return x end, function() return x:sum() end) end,
              { dl.randn(3) }, { path = p })
  end, "a graph's branches give alike")
  H.raises(function()
    dl.export(function(x) return dl.cond(x:gt(0), function() return x end, function() return -x end) end,
              { dl.randn(3) }, { path = p })
  end, "cond: expected a one-element tensor")
  H.ok(io.open(p) == nil, "no file is written")
  os.remove(q)
  -- Nothing is left in progress: an export and a plain read work.
  round_trip("after", function(x) return x + 1 end, { dl.randn(2) })
  H.eq(dl.tensor({ 4 }):item(), 4)
end)

H.test("random programs round-trip bit for bit, at sizes other than the exported one", function()
  -- Generated chains of pointwise ops (numbers first and last), reductions with kept
  -- dims, views, products, softmaxes and a loss on integer labels, float32 and float64,
  -- exported at 5 rows and run at 5, 1, 33 and 70.
  local rand = generate.stream(2024)
  local rows = { [1] = { 1, "n" }, [2] = { 1, "n" }, [3] = { 1, "n" } }
  for prog = 1, 30 do
    local lines, vars = { "return function(x, y, lab)" }, { "x", "y" }
    local function pick() return vars[rand(#vars)] end
    for i = 1, 3 + rand(20) do
      local r, e = rand(22), nil
      if r <= 6 then e = generate.pointwise("unary", rand, pick)
      elseif r <= 11 then e = generate.pointwise("binary", rand, pick)
      elseif r <= 14 then e = generate.pointwise("scalar", rand, pick)
      elseif r == 15 then e = string.format("(%s:sum(2, true) + %s)", pick(), pick())
      elseif r == 16 then e = string.format("(%s:t():contiguous():t() * 0.5)", pick())
      elseif r == 17 then e = string.format("(%s:matmul(%s:t()):sum() * 0.01 + %s)", pick(), pick(), pick())
      elseif r == 18 then e = string.format("dl.log_softmax(%s * 0.5, 2)", pick())
      elseif r == 19 then e = string.format("(%s + dl.nn.cross_entropy(%s, lab))", pick(), pick())
      elseif r == 20 then e = string.format("(%s:unsqueeze(1):squeeze(1) - %s:reshape(-1):view(-1, 4))", pick(), pick())
      elseif r == 21 then e = string.format("(%s:mean(1, true) * %s)", pick(), pick())
      else e = string.format("dl.softmax(%s, 2)", pick()) end
      lines[#lines + 1] = string.format("  local v%d = %s", i, e)
      vars[#vars + 1] = "v" .. i
    end
    lines[#lines + 1] = string.format("  return %s, (%s):sum()\nend", vars[#vars], vars[#vars - 1])
    local src = table.concat(lines, "\n")
    local f = assert(loadstring(src, "=program" .. prog))()
    local dt = prog % 4 == 0 and "float64" or "float32"
    local function args(n)
      return { dl.randn(n, 4, { dtype = dt }), dl.randn(n, 4, { dtype = dt }), dl.randint(1, 5, { n }, { dtype = "int64" }) }
    end
    round_trip("random" .. prog, f, args(5), { dynamic = rows }, { args(5), args(1), args(33), args(70) })
  end
end)

H.test("dlua-run runs a file from the shell, and says what it takes", function()
  local runner = os.getenv("DLUA_RUN")
  if not runner then return print("        (DLUA_RUN not set: the shell runner is tested under ctest)") end
  local net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2))
  local f = function(x) return net(x):sigmoid() end
  local p, input, output = path("cli"), tmp .. ".in.safetensors", tmp .. ".out.safetensors"
  dl.export(f, { dl.randn(3, 5) }, { path = p, dynamic = { [1] = { 1, "batch" } }, input_names = { "x" } })
  local x = dl.randn(4, 5)
  dl.save(input, { x = x })
  H.eq(os.execute(runner .. " " .. p .. " " .. input .. " -o " .. output), 0)
  identical(dl.load(output).output1, f(x), "dlua-run")
  local info = io.popen(runner .. " " .. p):read("*a")
  H.ok(info:find("input 1: x float32 (batch, 5)", 1, true), info)
  local printed = io.popen(runner .. " " .. p .. " " .. input):read("*a")
  H.ok(printed:find("output 1: float32 (4, 2)", 1, true), printed)
  H.ok(os.execute(runner .. " 2>/dev/null") ~= 0, "no arguments is a usage error")
  H.ok(os.execute(runner .. " " .. p .. ".missing 2>/dev/null") ~= 0, "a missing file is an error")
  for _, q in ipairs({ p, input, output }) do os.remove(q) end
end)

H.test("Fourier transforms of real signals and their gradients round-trip, the batch dynamic", function()
  dl.manual_seed(11)
  local F = dl.fft
  local k = dl.randn(5)
  -- a smoothing by transforms (fft_r2c, fft_c2r), an odd length, and a gradient through both
  local f = function(x)
    local smooth = F.irfft(F.mul(F.rfft(x, 16), F.rfft(k, 16)), 16)
    return smooth, F.rfft(x, 9, 1, "ortho"), dl.grad(function(y) return F.irfft(F.rfft(y), 7):pow(2):sum() end)(x)
  end
  round_trip("spectra", f, { dl.randn(3, 7) }, { dynamic = { [1] = { 1, "batch" } } },
             { { dl.randn(3, 7) }, { dl.randn(1, 7) }, { dl.randn(6, 7) } })
end)

H.run()
