-- Trains an MLP (784-256-10) on Fashion-MNIST (Debian's dataset-fashion-mnist package)
-- and prints its test accuracy: about 88% after the default 5 epochs.
--
--   dlua scripts/examples/fashion_mnist_mlp.lua [--epochs 5] [--batch 64] [--lr 0.001]
--        [--optimizer adam|sgd] [--logdir runs/fashion_mnist_mlp] [--data DIR] [--seed 1]
--        [--quick] [--compile] [--device cpu|cuda|cuda:N]
--
-- --compile runs each training step (forward, loss, backward) through dl.compile: one
-- plan a step, the same results (docs/compile.md). --device trains and evaluates on a
-- GPU (docs/gpu.md): the model moves there once, each batch as it is drawn.
-- --quick trains one epoch on a 10,000-image subset and checks that the accuracy beats
-- chance clearly (the test suite runs it). Each epoch writes a checkpoint under
-- <logdir>/ckpt and TensorBoard scalars under <logdir> (tensorboard --logdir runs).
local dl = require("dlua")

-- ---- flags ---------------------------------------------------------------------------------
local flags = { epochs = 5, batch = 64, lr = nil, optimizer = "adam", logdir = "runs/fashion_mnist_mlp",
                data = nil, seed = 1, quick = false, compile = false, device = "cpu" }
local args = arg or {}
local i = 1
while args[i] do
  local name = args[i]:match("^%-%-([%w_]+)$")
  if not name or flags[name] == nil and name ~= "lr" and name ~= "data" then
    error("unknown argument " .. args[i] .. " (see the top of this file for the flags)", 0)
  end
  if name == "quick" or name == "compile" then
    flags[name] = true
    i = i + 1
  else
    local v = args[i + 1]
    if v == nil then error("--" .. name .. " needs a value", 0) end
    flags[name] = tonumber(v) or v
    i = i + 2
  end
end
if flags.quick then flags.epochs = 1 end
local device = dl.device(tostring(flags.device))   -- the canonical name ("cuda" -> "cuda:0")
if device ~= "cpu" and not dl.cuda.is_available() then
  error("--device " .. flags.device .. ": CUDA is not available (" .. dl.cuda.status() .. ")", 0)
end
local lr = flags.lr or (flags.optimizer == "sgd" and 0.05 or 1e-3)

-- ---- data ------------------------------------------------------------------------------------
dl.manual_seed(flags.seed)
local x_train, y_train = dl.data.fashion_mnist("train", flags.data)
local x_test, y_test = dl.data.fashion_mnist("test", flags.data)
if flags.quick then
  x_train, y_train = x_train:narrow(1, 1, 10000), y_train:narrow(1, 1, 10000)
  x_test, y_test = x_test:narrow(1, 1, 2000), y_test:narrow(1, 1, 2000)
end
-- Flatten and standardise once, up front, so a batch is one index_select.
local MEAN, STD = 0.2860, 0.3530
x_train = ((x_train:reshape(-1, 784) - MEAN) / STD):contiguous()
x_test = ((x_test:reshape(-1, 784) - MEAN) / STD):contiguous()
local train = dl.data.from_tensors(x_train, y_train):shuffle(flags.seed):batch(flags.batch)
local test = dl.data.from_tensors(x_test, y_test):batch(1000)
print(("Fashion-MNIST: %d training and %d test images"):format(x_train:size(1), x_test:size(1)))

-- ---- model -----------------------------------------------------------------------------------
local MLP = dl.nn.Module:extend("MLP")
function MLP:init()
  self.fc1 = dl.nn.Linear(784, 256)
  self.fc2 = dl.nn.Linear(256, 10)
end
function MLP:forward(x) return self.fc2(dl.relu(self.fc1(x))) end

local net = MLP()
net:to(device)
print(net)
local opt
if flags.optimizer == "sgd" then
  opt = dl.optim.SGD{ lr = lr, momentum = 0.9, nesterov = true }
elseif flags.optimizer == "adam" then
  opt = dl.optim.Adam{ lr = lr }
else
  error("--optimizer must be adam or sgd, got " .. tostring(flags.optimizer), 0)
end

-- The loss and, as an auxiliary output, the logits (for the accuracy).
local function loss_fn(x, y)
  local logits = net(x)
  return dl.nn.cross_entropy(logits, y), logits
end
local train_step = dl.implicit_value_and_grad(loss_fn)
if flags.compile then train_step = dl.compile(train_step) end

local function evaluate()
  net:eval()
  local acc = dl.metrics.Accuracy()
  dl.no_grad(function()
    for x, y in test:iter() do
      x, y = x:to(device), y:to(device)
      acc:update(y, net(x))
    end
  end)
  net:train()
  return acc:result():item()
end

-- ---- logging and checkpoints (the io engineer's parts, used when present) ---------------------
local writer = dl.summary and dl.summary.writer and dl.summary.writer(flags.logdir)
local ckpt = dl.Checkpoint and dl.Checkpoint{ model = net, optimizer = opt, step = 0 }

-- ---- training --------------------------------------------------------------------------------------
local step = 0
local acc
for epoch = 1, flags.epochs do
  local loss_avg, train_acc = dl.metrics.Mean(), dl.metrics.Accuracy()
  local batches = dl.progress and dl.progress(train, { desc = ("epoch %d/%d"):format(epoch, flags.epochs) })
                  or train:iter()
  for x, y in batches do
    x, y = x:to(device), y:to(device)
    local loss, grads, logits = train_step(x, y)
    opt:apply_gradients(grads)
    step = step + 1
    loss_avg:update(loss)
    train_acc:update(y, logits)
    if dl.progress and step % 50 == 0 then
      batches:set_postfix({ loss = ("%.4f"):format(loss_avg:result():item()) })
    end
  end
  acc = evaluate()
  print(("epoch %d: loss %.4f, train accuracy %.2f%%, test accuracy %.2f%%")
        :format(epoch, loss_avg:result():item(), 100 * train_acc:result():item(), 100 * acc))
  if writer then
    writer:scalar("train/loss", loss_avg:result(), epoch)
    writer:scalar("train/accuracy", train_acc:result(), epoch)
    writer:scalar("test/accuracy", acc, epoch)
    writer:flush()
  end
  if ckpt then
    ckpt.step = epoch
    print("checkpoint: " .. ckpt:save(flags.logdir .. "/ckpt/model"))
  end
end
if writer then writer:close() end
print(("test accuracy: %.2f%%"):format(100 * acc))

if flags.compile then
  local report = dl.compile.explain(train_step)
  print(report:match("^[^\n]*\n[^\n]*"))
  if flags.quick and not report:find("gradient scope (compiled)", 1, true) then
    error("quick run: the compiled training step did not compile its gradient:\n" .. report, 0)
  end
end
if flags.quick and acc < 0.6 then
  error(("quick run: test accuracy %.2f%% is not clearly above chance (10%%)"):format(100 * acc), 0)
end
