-- dl.Checkpoint and dl.latest_checkpoint: save/restore of Variables, numbers and
-- objects with state_dict()/load_state_dict(), file naming, the index file, and
-- all-or-nothing restores (a bad checkpoint or a refusing object changes nothing).
local H = require("harness")
local dl = require("dlua")

local root = os.tmpname()
os.remove(root)
local n_dirs = 0
local function fresh_dir()
  n_dirs = n_dirs + 1
  return root .. "-ckpt" .. n_dirs
end

local function read(p)
  local f = io.open(p, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- A stand-in for a model: a flat state dict of tensors it owns, copied in on load
-- (strict: unknown or missing keys are refused, as nn modules do).
local function Model(w, b)
  local m = { w = dl.tensor(w), b = dl.tensor(b), calls = 0 }
  function m:state_dict() return { weight = self.w, bias = self.b } end
  function m:load_state_dict(sd)
    self.calls = self.calls + 1
    for k in pairs(sd) do
      if k ~= "weight" and k ~= "bias" then error("load_state_dict: unexpected key \"" .. k .. "\"") end
    end
    self.w:copy_(sd.weight)
    self.b:copy_(sd.bias)
  end
  return m
end

-- A stand-in for an optimizer: its state grows on the first step (like Adam's moments)
-- and holds numbers.
local function Optimizer()
  local o = { t = 0, m = nil, lr = 0.01 }
  function o:step()
    self.t = self.t + 1
    self.m = (self.m or dl.zeros(2)) + 1
  end
  function o:state_dict()
    local sd = { t = self.t, lr = self.lr }
    if self.m then sd["state/m"] = self.m end
    return sd
  end
  function o:load_state_dict(sd)
    self.t, self.lr = sd.t, sd.lr
    self.m = sd["state/m"] and sd["state/m"]:clone() or nil
  end
  return o
end

H.test("Variables, numbers and objects round-trip through save and restore", function()
  local dir = fresh_dir()
  local v = dl.Variable({ 1, 2, 3 })
  local model, opt = Model({ { 1, 2 }, { 3, 4 } }, { 5, 6 }), Optimizer()
  opt:step()
  local ckpt = dl.Checkpoint{ v = v, model = model, optimizer = opt, step = 7, tag = "run-a", best = true }
  local file = ckpt:save(dir .. "/ckpt")
  H.eq(file, dir .. "/ckpt-7.safetensors")
  H.eq(dl.latest_checkpoint(dir), file)
  H.eq(dl.latest_checkpoint(dir .. "/"), file)

  -- What the file holds, seen by plain dl.load.
  local t, meta = dl.load(file)
  H.values(t.v, { 1, 2, 3 })
  H.values(t["model/weight"], { { 1, 2 }, { 3, 4 } })
  H.values(t["optimizer/state/m"], { 1, 1 })
  H.eq(meta["number:step"], "7")
  H.eq(meta["number:optimizer/t"], "1")
  H.eq(meta["number:optimizer/lr"], "0.01")
  H.eq(meta["string:tag"], "run-a")
  H.eq(meta["boolean:best"], "true")

  -- Change everything, then restore.
  v:assign(dl.zeros(3))
  model.w:fill_(0)
  opt:step()
  ckpt.step, ckpt.tag, ckpt.best = 99, "other", false
  H.eq(ckpt:restore(file), file)
  H.values(v, { 1, 2, 3 })
  H.values(model.w, { { 1, 2 }, { 3, 4 } })
  H.values(model.b, { 5, 6 })
  H.eq(opt.t, 1)
  H.values(opt.m, { 1, 1 })
  H.eq(ckpt.step, 7)
  H.eq(ckpt.tag, "run-a")
  H.eq(ckpt.best, true)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("a fresh optimizer takes the state it did not have yet", function()
  local dir = fresh_dir()
  local opt = Optimizer()
  opt:step()
  opt:step()
  local file = dl.Checkpoint{ optimizer = opt }:save(dir .. "/o")
  local fresh = Optimizer()
  dl.Checkpoint{ optimizer = fresh }:restore(file)
  H.eq(fresh.t, 2)
  H.values(fresh.m, { 2, 2 })
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("without a step, files are numbered by a save counter that survives a restore", function()
  local dir = fresh_dir()
  local v = dl.Variable(1)
  local ckpt = dl.Checkpoint{ v = v }
  H.eq(ckpt:save(dir .. "/m"), dir .. "/m-1.safetensors")
  H.eq(ckpt:save(dir .. "/m"), dir .. "/m-2.safetensors")
  H.eq(dl.latest_checkpoint(dir), dir .. "/m-2.safetensors")
  local again = dl.Checkpoint{ v = dl.Variable(0) }
  again:restore(dl.latest_checkpoint(dir))
  H.eq(again:save(dir .. "/m"), dir .. "/m-3.safetensors")
  -- A prefix that is a directory: TensorFlow's "ckpt/-1".
  H.eq(dl.Checkpoint{ v = v }:save(dir .. "/sub/"), dir .. "/sub/-1.safetensors")
  H.eq(dl.latest_checkpoint(dir .. "/sub"), dir .. "/sub/-1.safetensors")
  -- A tensor step names the file too.
  H.eq(dl.Checkpoint{ v = v, step = dl.tensor(12) }:save(dir .. "/t"), dir .. "/t-12.safetensors")
  local index = read(dir .. "/checkpoint")
  H.ok(string.find(index, "latest: t-12.safetensors\n", 1, true) ~= nil, index)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("restore(nil) and a directory without checkpoints are a first run", function()
  local dir = fresh_dir()
  H.eq(dl.latest_checkpoint(dir), nil)
  local v = dl.Variable({ 4, 5 })
  local ckpt = dl.Checkpoint{ v = v, step = 0 }
  H.eq(ckpt:restore(dl.latest_checkpoint(dir)), nil)
  H.values(v, { 4, 5 })
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("an index naming a file that is gone is an error, not a first run", function()
  local dir = fresh_dir()
  local ckpt = dl.Checkpoint{ v = dl.Variable({ 4, 5 }), step = 0 }
  ckpt:save(dir .. "/m")
  os.remove(dir .. "/m-0.safetensors")
  H.raises(function() ckpt:restore(dl.latest_checkpoint(dir)) end,
           "latest_checkpoint: " .. dir .. "/checkpoint names m-0.safetensors, which does not exist")
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("a checkpoint that does not fit changes nothing", function()
  local dir = fresh_dir()
  local a, b = Model({ 1, 2 }, { 3 }), Model({ 4, 5 }, { 6 })
  local file = dl.Checkpoint{ a = a, b = b, step = 1 }:save(dir .. "/m")

  -- Shape mismatch in the second object: the first is left alone.
  local a2, b2 = Model({ 0, 0 }, { 0 }), Model({ 0, 0, 0 }, { 0 })
  local ckpt = dl.Checkpoint{ a = a2, b = b2, step = 0 }
  local line
  H.at(H.raises(function() line = H.line() ckpt:restore(file) end,
    "restore: " .. file .. ": \"b/weight\" has shape (2,) in the file, (3,) here"), line)
  H.values(a2.w, { 0, 0 })
  H.eq(a2.calls, 0)
  H.eq(ckpt.step, 0)

  -- A missing entry.
  local c = Model({ 0, 0 }, { 0 })
  H.raises(function() dl.Checkpoint{ a = a2, c = c }:restore(file) end,
    "restore: " .. file .. ": the checkpoint has no entry \"c/bias\"")
  H.raises(function() dl.Checkpoint{ a = a2, x = dl.Variable(1) }:restore(file) end,
    "the checkpoint has no tensor \"x\"")
  H.raises(function() dl.Checkpoint{ a = a2, lr = 0.1 }:restore(file) end,
    "the checkpoint has no number \"lr\"")
  H.values(a2.w, { 0, 0 })

  -- A corrupt file: nothing is touched.
  local f = assert(io.open(file, "r+b"))
  f:seek("set", 20)
  f:write("garbage!")
  f:close()
  H.raises(function() ckpt:restore(file) end, "load: " .. file .. ": ")
  H.values(a2.w, { 0, 0 })
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("an object that refuses its state rolls every change back", function()
  local dir = fresh_dir()
  local a, v = Model({ 1, 2 }, { 3 }), dl.Variable({ 9, 9 })
  local extra = Model({ 7 }, { 8 })
  local file = dl.Checkpoint{ a = a, v = v, z = extra, step = 5 }:save(dir .. "/m")
  -- "z" now has an extra key in the file that a strict load refuses; "a" and "v" are
  -- restored first (alphabetical order) and must be put back.
  local a2, v2 = Model({ 0, 0 }, { 0 }), dl.Variable({ 0, 0 })
  local z2 = Model({ 0 }, { 0 })
  local ckpt_file = dl.load(file)
  ckpt_file["z/unexpected"] = dl.ones(1)
  dl.save(file, ckpt_file, select(2, dl.load(file)))
  local ckpt = dl.Checkpoint{ a = a2, v = v2, z = z2, step = 0 }
  local msg = H.raises(function() ckpt:restore(file) end,
    "restore: " .. file .. ": restoring \"z\" failed, nothing was restored: load_state_dict: unexpected key \"unexpected\"")
  H.values(a2.w, { 0, 0 })
  H.values(v2, { 0, 0 })
  H.values(z2.w, { 0 })
  H.eq(ckpt.step, 0)
  H.eq(a2.calls, 2)   -- the load, then the roll-back
  H.ok(msg)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("bad checkpoints are refused when made and when saved", function()
  local line
  H.at(H.raises(function() line = H.line() local c = dl.Checkpoint(5) return c end,
    "Checkpoint: expected a table of the values to track"), line)
  H.at(H.raises(function() line = H.line() local c = dl.Checkpoint{ f = print } return c end,
    "Checkpoint: cannot track \"f\": expected an object with state_dict()"), line)
  H.raises(function() return dl.Checkpoint{ ["a/b"] = 1 } end, "must be non-empty, without '/' or ':'")
  H.raises(function() return dl.Checkpoint{ save = 1 } end, "\"save\" is the name of a Checkpoint method")
  local ckpt = dl.Checkpoint{ step = 1.5 }
  H.raises(function() ckpt:save(root .. "-never/m") end, "Checkpoint:save: step must be an integer")
  H.raises(function() ckpt.other = {} end, "cannot track \"other\"")
  local nested = { state_dict = function() return { inner = { 1 } } end, load_state_dict = function() end }
  H.raises(function() dl.Checkpoint{ o = nested }:save(root .. "-never/m") end,
    "o:state_dict() holds a table at \"o/inner\"")
  H.eq(tostring(dl.Checkpoint{ step = 3, model = Model({ 1 }, { 1 }), note = "x" }),
    "Checkpoint{model, note=\"x\", step=3}")
end)

if dl.nn and dl.optim and dl.nn.Linear and dl.optim.SGD then
  H.test("a real model and optimizer round-trip", function()
    local dir = fresh_dir()
    local net = dl.nn.Linear(3, 2)
    local opt = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }
    local ckpt = dl.Checkpoint{ model = net, optimizer = opt, step = 1 }
    local file = ckpt:save(dir .. "/net")
    local before = dl.load(file)
    local net2 = dl.nn.Linear(3, 2)
    dl.Checkpoint{ model = net2, optimizer = dl.optim.SGD{ lr = 0.1, momentum = 0.9 }, step = 0 }:restore(file)
    for k, t in pairs(net2:state_dict()) do
      H.ok(dl.equal(t, before["model/" .. k]), k)
    end
    os.execute("rm -rf '" .. dir .. "'")
  end)

  H.test("an optimizer's type is checked on restore; files saved before it was recorded still load", function()
    local dir = fresh_dir()
    local net = dl.nn.Linear(3, 2)
    local file = dl.Checkpoint{ model = net, optimizer = dl.optim.Adam{ lr = 0.5 }, step = 1 }:save(dir .. "/net")
    local sgd = dl.optim.SGD{ lr = 0.1 }
    local w = net.weight:clone()
    H.raises(function() dl.Checkpoint{ model = net, optimizer = sgd, step = 0 }:restore(file) end,
             "restoring \"optimizer\" failed, nothing was restored: SGD:load_state_dict: the state is an Adam's, "
             .. "this optimizer is an SGD")
    H.eq(sgd.lr, 0.1)
    H.ok(dl.equal(net.weight, w))
    -- a file without "optimizer/class", as written before optimizers recorded it
    local tensors, meta = dl.load(file)
    H.eq(meta["string:optimizer/class"], "Adam")
    meta["string:optimizer/class"] = nil
    meta["number:optimizer/lr"] = "0.25"
    local old = dir .. "/old.safetensors"
    dl.save(old, tensors, meta)
    local sgd2 = dl.optim.SGD{ lr = 0.1 }
    local ckpt = dl.Checkpoint{ model = dl.nn.Linear(3, 2), optimizer = sgd2, step = 0 }
    H.eq(ckpt:restore(old), old)
    H.eq(sgd2.lr, 0.25)
    H.eq(ckpt.step, 1)
    os.execute("rm -rf '" .. dir .. "'")
  end)
else
  print("note: dl.nn / dl.optim are not loaded; the real-model checkpoint test is not run")
end

H.run()
