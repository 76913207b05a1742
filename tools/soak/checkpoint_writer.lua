-- The process that tools/soak/crash_safety.py kills: a stand-in for a training run that
-- resumes from its latest checkpoint and saves one at every step.
--
--   dlua tools/soak/checkpoint_writer.lua DIR MB           # loops until killed
--   dlua tools/soak/checkpoint_writer.lua DIR MB --verify  # (the same MB: the same model)
--
-- Every value it saves is a known function of the step: each parameter of the model is
-- filled with value(step, k), and the checkpoint carries the step. So a checkpoint
-- that loads can also be checked for being complete and not mixed from two steps. At start it restores and checks the latest
-- checkpoint (failing loudly if it is torn or wrong), then prints "resumed <step>", and
-- after each save "saved <step>" (flushed), which tells the harness what is durable.
-- --verify only checks the latest checkpoint and prints "latest <step>" ("latest none"
-- before the first save).
local dl = require("dlua")

local dir = assert(arg[1], "usage: checkpoint_writer.lua DIR MB [--verify]")
local mb = assert(tonumber(arg[2]), "usage: checkpoint_writer.lua DIR MB [--verify]")
local verify_only = arg[3] == "--verify"

-- A model of about `mb` megabytes of float32 (several tensors, so a save writes several
-- pieces and a kill can land between them).
local Model = dl.nn.Module:extend("SoakModel")
function Model:init(n)
  self.a = dl.nn.Linear(n, n)
  self.b = dl.nn.Linear(n, 8)
end
local n = math.max(8, math.floor(math.sqrt(mb * 2^20 / 4)))
local net = Model(n)

local function value(step, k) return step + k / 16 end

-- Makes every tracked value the function of `step`.
local function set_state(step)
  dl.no_grad(function()
    local k = 0
    for _, p in ipairs(net:parameters()) do
      k = k + 1
      p:fill_(value(step, k))
    end
  end)
end

-- Checks that everything is the function of one step, the checkpoint's.
local function check_state(step, where)
  local k = 0
  for _, p in ipairs(net:parameters()) do
    k = k + 1
    local want = value(step, k)
    local lo, hi = p:amin():item(), p:amax():item()
    if math.abs(lo - want) > 1e-3 or math.abs(hi - want) > 1e-3 then
      error(("%s: parameter %d holds [%g, %g], step %d means %g: the checkpoint is not complete")
            :format(where, k, lo, hi, step, want), 0)
    end
  end
end

local ckpt = dl.Checkpoint{ model = net, step = 0, label = "soak" }
local latest = dl.latest_checkpoint(dir)
local step = 0
if latest then
  ckpt:restore(latest)
  step = ckpt.step
  check_state(step, latest)
  local name = latest:match("model%-(%d+)%.safetensors$")
  if tonumber(name) ~= step then error(latest .. ": the file name and the step inside disagree", 0) end
end
if verify_only then
  print(latest and ("latest " .. step) or "latest none")
  os.exit(0)
end
io.stdout:setvbuf("line")
print("resumed " .. step)

while true do
  step = step + 1
  set_state(step)
  ckpt.step = step
  ckpt:save(dir .. "/model")
  -- Keep the directory small: the previous-but-one file is no longer needed.
  os.remove(("%s/model-%d.safetensors"):format(dir, step - 2))
  print("saved " .. step)
end
