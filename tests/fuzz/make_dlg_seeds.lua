-- Writes the seeds of the fuzz_dlg target: small exported graphs covering the runner's
-- rows, symbolic sizes and optional inputs.  dlua tests/fuzz/make_dlg_seeds.lua DIR
local dl = require("dlua")
local nn = dl.nn
local dir = assert(arg[1], "usage: make_dlg_seeds.lua DIR")
dl.manual_seed(1)
local function put(name, f, args, opts)
  opts = opts or {}
  opts.path = dir .. "/seed-" .. name
  dl.export(f, args, opts)
end
local mlp = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)):eval()
put("mlp", function(x) return dl.softmax(mlp(x), 2) end, { dl.randn(2, 4) }, { dynamic = { [1] = { 1, "batch" } } })
local cnn = nn.Sequential(nn.Conv2d(1, 2, 3, { padding = 1 }), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2),
                          nn.AvgPool2d(2), nn.Flatten(), nn.Linear(2, 2)):eval()
put("cnn", function(x) return dl.log_softmax(cnn(x), 2) end, { dl.randn(1, 1, 4, 4) },
    { dynamic = { [1] = { 1, "batch" } } })
local emb, ln = nn.Embedding(5, 2), nn.LayerNorm(2)
put("seq", function(i) return ln(emb(i)):cumsum(2):amax(1) end, { dl.tensor({ { 1, 2 }, { 3, 5 } }, "int64") })
put("mixed", function(x, m)
  local y = dl.where(m, x * 2, x:exp()):clamp(-1, 1)
  return dl.cat({ y, y:t():reshape(-1, 2) }, 1):argmax(2), x:reshape(-1):narrow(1, 1, 2), dl.stack({ x, x }, 1):sum()
end, { dl.randn(2, 2), dl.randn(2, 2):gt(0) }, { dynamic = { [1] = { 1, "n" }, [2] = { 1, "n" } } })
put("loop", function(x, n)
  local _, h = dl.while_loop(function(k, h) return k:lt(n) end, function(k, h)
    return k + 1, dl.cond(k:gt(1), function() return h * 0.5 end, function() return h + x end)
  end, { dl.zeros(1), x })
  return h
end, { dl.randn(2, 3), dl.tensor({ 3 }) }, { dynamic = { [1] = { 1, "batch" } } })
