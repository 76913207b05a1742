-- Linear regression, as in TensorFlow's eager execution guide: recover W = 3 and B = 2
-- from 2,000 noisy points around y = 3x + 2, with a model whose two Variables start at
-- 5 and 10, gradients from a GradientTape and plain SGD.
--
--   dlua scripts/examples/linear_regression.lua [--steps 300] [--quick]
local dl = require("dlua")

local steps = 300
for i = 1, #(arg or {}) do
  if arg[i] == "--steps" then steps = tonumber(arg[i + 1]) end
end

-- The model: a module holding two Variables.
local Linear = dl.nn.Module:extend("Linear")
function Linear:init()
  self.W = dl.Variable(5, "weight")
  self.B = dl.Variable(10, "bias")
end
function Linear:forward(x) return x * self.W + self.B end

-- A toy data set of points around 3 * x + 2.
dl.manual_seed(0)
local NUM_EXAMPLES = 2000
local training_inputs = dl.randn(NUM_EXAMPLES)
local noise = dl.randn(NUM_EXAMPLES)
local training_outputs = training_inputs * 3 + 2 + noise

-- The loss function to be optimized, and its gradient with respect to W and B.
local function loss(model, inputs, targets)
  local err = model(inputs) - targets
  return (err * err):mean()
end

local function grad(model, inputs, targets)
  local tape = dl.GradientTape()
  local loss_value = tape:record(function() return loss(model, inputs, targets) end)
  return tape:gradient(loss_value, { model.W, model.B })
end

local model = Linear()
local optimizer = dl.optim.SGD{ lr = 0.01 }
print(("Initial loss: %.3f"):format(loss(model, training_inputs, training_outputs):item()))
for i = 1, steps do
  local grads = grad(model, training_inputs, training_outputs)
  optimizer:apply_gradients({ { grads[1], model.W }, { grads[2], model.B } })
  if i % 20 == 0 then
    print(("Loss at step %03d: %.3f"):format(i, loss(model, training_inputs, training_outputs):item()))
  end
end
print(("Final loss: %.3f"):format(loss(model, training_inputs, training_outputs):item()))
print(("W = %.4f, B = %.4f"):format(model.W:item(), model.B:item()))

-- The same fit in TensorFlow's other styles: implicit gradients and minimize.
local m2 = Linear()
local opt2 = dl.optim.SGD{ lr = 0.01 }
for _ = 1, steps do
  opt2:minimize(function() return loss(m2, training_inputs, training_outputs) end)
end
print(("minimize: W = %.4f, B = %.4f"):format(m2.W:item(), m2.B:item()))

if math.abs(model.W:item() - 3) > 0.1 or math.abs(model.B:item() - 2) > 0.1 then
  error("W and B were not recovered", 0)
end
if math.abs(m2.W:item() - model.W:item()) > 1e-5 or math.abs(m2.B:item() - model.B:item()) > 1e-5 then
  error("minimize and apply_gradients disagree", 0)
end
