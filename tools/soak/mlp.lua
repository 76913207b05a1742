-- Soak: trains the MLP of scripts/examples/fashion_mnist_mlp.lua (784-256-10, ReLU,
-- Adam, batches of 64, the same training step) for --steps steps, cycling over
-- Fashion-MNIST, and checks that resident memory stays flat after warm-up. There is no
-- collectgarbage() here on purpose: the runtime must keep tensor memory bounded by
-- itself (docs/design.md, "Tensor memory and Lua's collector").
--
--   build/bin/dlua tools/soak/mlp.lua [--steps 100000] [--every 1000] [--warmup 5000]
--                  [--tolerance_mb 16] [--csv FILE] [--verbose 1] [--data DIR]
--
-- Exits 1 when resident memory grew by more than the tolerance after warm-up. Without
-- Debian's dataset-fashion-mnist it trains on random images of the same shape (the
-- memory behaviour is the same; the printed accuracy is then meaningless).
local dl = require("dlua")
local soak = dofile(arg[0]:match("^(.-)[^/]*$") .. "common.lua")

local flags = soak.flags({ steps = 100000, every = 1000, warmup = 5000, tolerance_mb = 16, csv = "",
                           verbose = 0, data = "", batch = 64, seed = 1 })
dl.manual_seed(flags.seed)

local ok, x_train, y_train = pcall(dl.data.fashion_mnist, "train", flags.data ~= "" and flags.data or nil)
local real = ok
if not ok then
  print("mlp soak: Fashion-MNIST not found (" .. tostring(x_train):sub(1, 80) .. "); random images instead")
  x_train = dl.rand(60000, 28, 28)
  y_train = dl.randint(1, 11, { 60000 }, { dtype = "int64" })
end
x_train = ((x_train:reshape(-1, 784) - 0.2860) / 0.3530):contiguous()
local train = dl.data.from_tensors(x_train, y_train):shuffle(flags.seed):batch(flags.batch)

local MLP = dl.nn.Module:extend("MLP")
function MLP:init()
  self.fc1 = dl.nn.Linear(784, 256)
  self.fc2 = dl.nn.Linear(256, 10)
end
function MLP:forward(x) return self.fc2(dl.relu(self.fc1(x))) end
local net = MLP()
local opt = dl.optim.Adam{ lr = 1e-3 }

local function loss_fn(x, y)
  local logits = net(x)
  return dl.nn.cross_entropy(logits, y), logits
end
local train_step = dl.implicit_value_and_grad(loss_fn)

local mem = soak.Monitor(flags)
local step, loss_sum, loss_n = 0, 0, 0
local acc = dl.metrics.Accuracy()
while step < flags.steps do
  for x, y in train:iter() do
    local loss, grads, logits = train_step(x, y)
    opt:apply_gradients(grads)
    step = step + 1
    if step % 100 == 0 then
      loss_sum, loss_n = loss_sum + loss:item(), loss_n + 1
      acc:update(y, logits)
    end
    mem:sample(step)
    if step >= flags.steps then break end
  end
end
print(("mlp soak: %d steps, mean sampled loss %.4f, sampled training accuracy %.2f%%%s")
      :format(step, loss_sum / math.max(loss_n, 1), 100 * acc:result():item(),
              real and "" or " (random data)"))
mem:verdict("mlp soak")
