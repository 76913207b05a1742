-- Trains the MLP (784-256-10) of fashion_mnist_mlp.lua on Fashion-MNIST, data-parallel
-- over the processes of an mpirun job (dl.dist, docs/distributed.md): every rank trains
-- on its shard of each epoch, the gradients are averaged over the ranks at every step,
-- so that every rank holds the same weights, and rank 0 evaluates, logs and saves.
--
--   mpirun -np 2 dlua scripts/examples/fashion_mnist_ddp.lua [--epochs 5] [--batch 64]
--        [--lr 0.001] [--data DIR] [--seed 1] [--logdir runs/fashion_mnist_ddp] [--quick]
--   dlua scripts/examples/fashion_mnist_ddp.lua          the same on one process
--
-- --batch is the batch of one rank: N ranks take N times as many images a step, at the
-- same learning rate (the gradient is their mean). --quick trains one epoch on a
-- 10,000-image subset and checks the accuracy. One process with --batch 128 sees the
-- images that 2 ranks with --batch 64 see at every step (dist.shard interleaves one
-- shuffle), so it trains to the same loss and accuracy: the test suite runs both and
-- compares them (tests/dist/run.py, case "example"). About 88% after 5 epochs.
local dl = require("dlua")
local dist = dl.dist
dist.init()

-- ---- flags ---------------------------------------------------------------------------------
local flags = { epochs = 5, batch = 64, lr = 1e-3, data = false, seed = 1, quick = false,
                logdir = "runs/fashion_mnist_ddp" }
local args = arg or {}
local i = 1
while args[i] do
  local name = args[i]:match("^%-%-([%w_]+)$")
  if not name or flags[name] == nil then
    error("unknown argument " .. args[i] .. " (see the top of this file for the flags)", 0)
  end
  if name == "quick" then
    flags.quick = true
    i = i + 1
  else
    local v = args[i + 1]
    if v == nil then error("--" .. name .. " needs a value", 0) end
    flags[name] = tonumber(v) or v
    i = i + 2
  end
end
if flags.quick then flags.epochs = 1 end
local main = dist.is_main()
local function say(...) if main then print(...) end end

-- ---- data: every rank reads the files, and trains on its shard of each epoch ---------------
local x_train, y_train = dl.data.fashion_mnist("train", flags.data or nil)
local x_test, y_test = dl.data.fashion_mnist("test", flags.data or nil)
if flags.quick then
  x_train, y_train = x_train:narrow(1, 1, 10000), y_train:narrow(1, 1, 10000)
  x_test, y_test = x_test:narrow(1, 1, 2000), y_test:narrow(1, 1, 2000)
end
local MEAN, STD = 0.2860, 0.3530
x_train = ((x_train:reshape(-1, 784) - MEAN) / STD):contiguous()
x_test = ((x_test:reshape(-1, 784) - MEAN) / STD):contiguous()
local train = dl.data.from_tensors(x_train, y_train)
local test = dl.data.from_tensors(x_test, y_test):batch(1000)
say(("Fashion-MNIST on %d rank%s (%s): %d training images, %d a step"):format(
  dist.size(), dist.size() > 1 and "s" or "", dist.backend(), x_train:size(1), flags.batch * dist.size()))

-- ---- model: the same start on every rank ---------------------------------------------------
dl.manual_seed(flags.seed + dist.rank())   -- different on purpose: the broadcast makes them equal
local net = dl.nn.Sequential{ dl.nn.Linear(784, 256), dl.nn.ReLU(), dl.nn.Linear(256, 10) }
dist.broadcast_parameters(net)
local opt = dl.optim.Adam{ lr = flags.lr }

local step = dist.implicit_value_and_grad(function(x, y)
  local logits = net(x)
  return dl.nn.cross_entropy(logits, y), logits
end)

local function evaluate()
  net:eval()
  local acc = dl.metrics.Accuracy()
  dl.no_grad(function()
    for x, y in test:iter() do acc:update(y, net(x)) end
  end)
  net:train()
  return acc:result():item()
end

local writer = main and dl.summary.writer(flags.logdir)
local acc
for epoch = 1, flags.epochs do
  local loss_avg = dl.metrics.Mean()
  local t0 = os.clock()
  for x, y in dist.shard(train, { seed = flags.seed + epoch }):batch(flags.batch):iter() do
    local loss, grads = step(x, y)
    opt:apply_gradients(grads)
    loss_avg:update(loss)
  end
  -- The mean loss over every rank's batches, for the log.
  local loss = dist.allreduce(loss_avg:result(), { op = "mean" }):item()
  acc = evaluate()
  say(("epoch %d: loss %.4f, test accuracy %.2f%% (%.1f s of CPU on rank 0)"):format(
    epoch, loss, 100 * acc, os.clock() - t0))
  if writer then
    writer:scalar("train/loss", loss, epoch)
    writer:scalar("test/accuracy", acc, epoch)
    writer:flush()
    dl.Checkpoint{ model = net, optimizer = opt }:save(flags.logdir .. "/ckpt/model")
  end
end
if writer then writer:close() end

-- Every rank must hold the same weights: their largest difference from rank 0's.
local w = net:parameters()[1]
local drift = dist.allreduce((w - dist.broadcast(w, 0)):abs():max(), { op = "max" }):item()
say(("weights equal on every rank: largest difference %g"):format(drift))
say(("test accuracy: %.2f%%"):format(100 * acc))
if drift ~= 0 then error("the ranks' weights drifted apart", 0) end
if flags.quick and acc < 0.6 then
  error(("quick run: test accuracy %.2f%% is not clearly above chance (10%%)"):format(100 * acc), 0)
end
