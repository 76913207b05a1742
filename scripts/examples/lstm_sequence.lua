-- An LSTM learns the adding problem (Hochreiter and Schmidhuber's test of memory): each
-- sequence holds random numbers in [0, 1) and two markers; the answer is the sum of the
-- two marked numbers, which may lie far apart. Always answering the mean sum (1) scores
-- a mean squared error of 1/6 = 0.167; a model must remember the first marked number
-- until it sees the second to do better.
--
--   dlua scripts/examples/lstm_sequence.lua [--steps 1000] [--length 30] [--quick]
--
-- --quick trains 500 steps on sequences of 10 and checks the test error (the test suite
-- runs it); --smoke takes 50 steps through every path and checks no number (the
-- sanitizer suite runs it: there memory errors are what is checked).
local dl = require("dlua")

local steps, length, quick, smoke = 1000, 30, false, false
for i = 1, #(arg or {}) do
  if arg[i] == "--steps" then steps = tonumber(arg[i + 1]) end
  if arg[i] == "--length" then length = tonumber(arg[i + 1]) end
  if arg[i] == "--quick" then quick = true end
  if arg[i] == "--smoke" then quick, smoke = true, true end
end
if quick then steps, length = smoke and 50 or 500, 10 end

dl.manual_seed(3)

-- A batch: x (N, L, 2), channel 1 the numbers, channel 2 the markers; y (N, 1).
local function batch(n)
  local values = dl.rand(n, length)
  local marks = dl.zeros(n, length)
  local first = dl.randint(1, math.floor(length / 2) + 1, { n }, { dtype = "int64" })
  local second = dl.randint(math.floor(length / 2) + 1, length + 1, { n }, { dtype = "int64" })
  marks = marks:scatter_add(2, first:unsqueeze(2), dl.ones(n, 1))
  marks = marks:scatter_add(2, second:unsqueeze(2), dl.ones(n, 1))
  local y = (values * marks):sum(2, true)
  return dl.stack({ values, marks }, 3), y
end

local Net = dl.nn.Module:extend("AddingNet")
function Net:init(hidden)
  self.lstm = dl.nn.LSTM(2, hidden, { batch_first = true })
  self.head = dl.nn.Linear(hidden, 1)
end
function Net:forward(x)
  local _, h = self.lstm(x)          -- h (1, N, hidden): the state after the last step
  return self.head(h:squeeze(1))
end

local net = Net(32)
local opt = dl.optim.Adam({ lr = 1e-2 })
local sched = dl.optim.WarmupCosineLR(opt, 20, steps, 1e-3)
local step = dl.implicit_value_and_grad(function(x, y) return dl.nn.mse_loss(net(x), y) end)

local xt, yt = batch(512)   -- held out
local function test_mse() return dl.nn.mse_loss(net(xt), yt):item() end
print(("sequences of %d steps; always answering 1 scores %.3f"):format(length, dl.nn.mse_loss(dl.ones(512, 1), yt):item()))
for s = 1, steps do
  local x, y = batch(64)
  local _, grads = step(x, y)
  dl.nn.utils.clip_grad_norm_(grads, 1.0)
  opt:apply_gradients(grads)
  sched:step()
  if s % 50 == 0 then print(("step %4d  test mse %.4f"):format(s, test_mse())) end
end
local mse = test_mse()
print(("final test mse %.4f"):format(mse))
local x, y = batch(3)
local p = net(x)
for i = 1, 3 do print(("  marked sum %.3f, predicted %.3f"):format(y[i][1], p[i][1])) end
if smoke then return end
-- The constant answer scores 1/6: the model must remember.
assert(mse < 0.05, ("the LSTM did not learn the task (test mse %.4f)"):format(mse))
