-- Soak: builds and drops large gradient graphs in a loop and checks that resident memory
-- stays flat after warm-up. Each iteration records a graph of --nodes ops on small
-- matrices (matmuls, pointwise ops, broadcasting, views, reductions, a fan-out that
-- keeps many intermediate results alive at once), takes first-order gradients of it
-- (and, every --second iterations, a second-order one, whose backward is itself
-- recorded), then lets everything go. No collectgarbage() on purpose (docs/design.md, "Tensor
-- memory and Lua's collector").
--
--   build/bin/dlua tools/soak/graphs.lua [--steps 100000] [--nodes 120] [--size 32]
--                  [--every 1000] [--warmup 5000] [--tolerance_mb 16] [--csv FILE]
--
-- Exits 1 when resident memory grew by more than the tolerance after warm-up.
local dl = require("dlua")
local soak = dofile(arg[0]:match("^(.-)[^/]*$") .. "common.lua")

local flags = soak.flags({ steps = 100000, nodes = 120, size = 32, second = 10, every = 1000,
                           warmup = 5000, tolerance_mb = 16, csv = "", verbose = 0, seed = 1 })
dl.manual_seed(flags.seed)
local n = flags.size
local w = dl.randn(n, n) / math.sqrt(n)
local bias = dl.randn(n) * 0.1

-- A graph of `nodes` ops over x and v; returns a scalar. Shapes vary with the step, so
-- the allocator sees many sizes, and a list keeps a third of the results alive until
-- the end (wide graphs, not only chains).
local function model(x, v, step)
  local h, keep = x, {}
  local rows = 1 + step % n
  for k = 1, flags.nodes do
    local r = k % 6
    if r == 0 then h = dl.tanh(h:matmul(w) + bias)
    elseif r == 1 then h = h * v + 0.5
    elseif r == 2 then h = dl.sigmoid(h) - h:mean(2, true)
    elseif r == 3 then h = h:narrow(1, 1, math.min(rows, h:size(1))):sum(1, true):expand(h:size(1), n) + h
    elseif r == 4 then h = dl.softmax(h, 2) * n
    else h = h:t():contiguous():t() + dl.relu(h) end
    if k % 3 == 0 then keep[#keep + 1] = h end
  end
  local total = h:sum()
  for i = 1, #keep do total = total + keep[i]:mean() end
  return total
end

local mem = soak.Monitor(flags)
local grad_xv = dl.grad(model, { 1, 2 })
local checksum = 0
for step = 1, flags.steps do
  local x = dl.randn(8 + step % 24, n)
  local v = dl.rand(n) + 0.5
  local gx, gv = grad_xv(x, v, step)
  if step % 1000 == 0 then checksum = checksum + gx:abs():sum():item() + gv:abs():sum():item() end
  if step % flags.second == 0 then
    -- d/dv of |d model / dx|^2: a backward through a recorded backward
    local g2 = dl.grad(function(vv) return (dl.grad(model)(x, vv, step) ^ 2):sum() end)(v)
    if step % 1000 == 0 then checksum = checksum + g2:abs():sum():item() end
  end
  mem:sample(step)
end
if checksum ~= checksum then
  print("graphs soak: the gradients became NaN")
  os.exit(1)
end
mem:verdict("graphs soak")
