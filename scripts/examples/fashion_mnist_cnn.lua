-- Convolutional networks on Fashion-MNIST (Debian's dataset-fashion-mnist package).
--
--   --model guide    the conv net of TensorFlow's eager execution guide: two 3x3
--                    convolutions of 16 filters with ReLU, global average pooling and a
--                    Dense layer of 10 (small and quick, but weak: about 70%)
--   --model strong   (default) two 3x3 convolutions (32 and 64 filters), each with batch
--                    norm and max pooling, then dropout and two dense layers: about 91%
--                    after 3 epochs
--
--   dlua scripts/examples/fashion_mnist_cnn.lua [--model strong|guide] [--epochs 3]
--        [--batch 64] [--lr 0.001] [--logdir runs/fashion_mnist_cnn] [--data DIR] [--quick|--smoke]
--        [--device cpu|cuda|cuda:N]
--
-- --device trains and evaluates on a GPU (docs/gpu.md): the model moves there once,
-- each batch as it is drawn.
-- --quick trains one epoch on a 3,000-image subset and checks that the test accuracy
-- beats chance clearly (the test suite runs it); --smoke one epoch of 640 images and
-- checks no number (the sanitizer suite runs it: there memory errors are what is
-- checked). Images are NCHW: (N, 1, 28, 28).
local dl = require("dlua")

local flags = { model = "strong", epochs = 3, batch = 64, lr = 1e-3, logdir = "runs/fashion_mnist_cnn",
                data = false, seed = 1, quick = false, smoke = false, device = "cpu" }
local args = arg or {}
local i = 1
while args[i] do
  local name = args[i]:match("^%-%-([%w_]+)$")
  if not name or flags[name] == nil then error("unknown argument " .. args[i], 0) end
  if name == "quick" or name == "smoke" then
    flags.quick, flags[name], i = true, true, i + 1
  else
    if args[i + 1] == nil then error("--" .. name .. " needs a value", 0) end
    flags[name] = tonumber(args[i + 1]) or args[i + 1]
    i = i + 2
  end
end
if flags.quick then flags.epochs = 1 end
local device = dl.device(tostring(flags.device))   -- the canonical name ("cuda" -> "cuda:0")
if device ~= "cpu" and not dl.cuda.is_available() then
  error("--device " .. flags.device .. ": CUDA is not available (" .. dl.cuda.status() .. ")", 0)
end

-- ---- data ---------------------------------------------------------------------------------------
dl.manual_seed(flags.seed)
local x_train, y_train = dl.data.fashion_mnist("train", flags.data or nil)
local x_test, y_test = dl.data.fashion_mnist("test", flags.data or nil)
if flags.quick then
  local n = flags.smoke and 640 or 3000
  x_train, y_train = x_train:narrow(1, 1, n), y_train:narrow(1, 1, n)
  x_test, y_test = x_test:narrow(1, 1, 1000), y_test:narrow(1, 1, 1000)
end
x_train = ((x_train - 0.2860) / 0.3530):unsqueeze(2):contiguous()   -- (N, 1, 28, 28)
x_test = ((x_test - 0.2860) / 0.3530):unsqueeze(2):contiguous()
local train = dl.data.from_tensors(x_train, y_train):shuffle(flags.seed):batch(flags.batch)
local test = dl.data.from_tensors(x_test, y_test):batch(500)

-- ---- models ---------------------------------------------------------------------------------------
local nn = dl.nn
local model
if flags.model == "guide" then
  model = nn.Sequential{
    nn.Conv2d(1, 16, 3), nn.ReLU(),
    nn.Conv2d(16, 16, 3), nn.ReLU(),
    nn.GlobalAvgPool2d(),
    nn.Dense(10),
  }
  -- Even before training, the model can be called and its output inspected.
  print(model(x_train:narrow(1, 1, 2)))
elseif flags.model == "strong" then
  -- Two convolution blocks (batch norm, max pooling), dropout, two dense layers.
  model = nn.Sequential{
    nn.Conv2d(1, 32, 3, { padding = 1, bias = false }), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1, bias = false }), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Dropout(0.3),
    nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.3),
    nn.Linear(128, 10),
  }
else
  error("--model must be strong or guide, got " .. tostring(flags.model), 0)
end
model:to(device)
print(model)

local opt = dl.optim.Adam{ lr = flags.lr }
local epochs = flags.epochs
-- The strong model: the learning rate follows a cosine down to a tenth over the epochs.
local sched = flags.model == "strong" and epochs > 1 and dl.optim.CosineAnnealingLR(opt, epochs, flags.lr / 10)

local train_step = dl.implicit_value_and_grad(function(x, y)
  local logits = model(x)
  return nn.cross_entropy(logits, y), logits
end)

local function evaluate()
  model:eval()
  local acc = dl.metrics.Accuracy()
  dl.no_grad(function()
    for x, y in test:iter() do
      x, y = x:to(device), y:to(device)
      acc:update(y, model(x))
    end
  end)
  model:train()
  return acc:result():item()
end

local writer = dl.summary and dl.summary.writer and dl.summary.writer(flags.logdir .. "/" .. flags.model)
local ckpt = dl.Checkpoint and dl.Checkpoint{ model = model, optimizer = opt, step = 0 }

local acc
for epoch = 1, epochs do
  local loss_avg, train_acc = dl.metrics.Mean(), dl.metrics.Accuracy()
  local batches = dl.progress and dl.progress(train, { desc = ("epoch %d/%d"):format(epoch, epochs) })
                  or train:iter()
  local n = 0
  for x, y in batches do
    x, y = x:to(device), y:to(device)
    local loss, grads, logits = train_step(x, y)
    opt:apply_gradients(grads)
    loss_avg:update(loss)
    train_acc:update(y, logits)
    n = n + 1
    if dl.progress and n % 20 == 0 then
      batches:set_postfix({ loss = ("%.4f"):format(loss_avg:result():item()) })
    end
  end
  if sched then sched:step() end
  acc = evaluate()
  print(("epoch %d: loss %.4f, train accuracy %.2f%%, test accuracy %.2f%%")
        :format(epoch, loss_avg:result():item(), 100 * train_acc:result():item(), 100 * acc))
  if writer then
    writer:scalar("train/loss", loss_avg:result(), epoch)
    writer:scalar("test/accuracy", acc, epoch)
    writer:flush()
  end
  if ckpt then
    ckpt.step = epoch
    ckpt:save(flags.logdir .. "/" .. flags.model .. "/ckpt/model")
  end
end
if writer then writer:close() end
print(("test accuracy: %.2f%%"):format(100 * acc))

local floor = flags.model == "guide" and 0.12 or 0.5
if flags.quick and not flags.smoke and acc < floor then
  error(("quick run: test accuracy %.2f%% is not clearly above chance (10%%)"):format(100 * acc), 0)
end
