-- A recursive neural network whose structure is the data's: each example is an
-- arithmetic expression tree (digits joined by + and -), and the network is built by
-- plain Lua recursion over that tree, a different graph for every example. It learns
-- to tell whether the expression's value is positive. Nothing is padded or batched into
-- a fixed shape: gradients flow through whatever the recursion did (eager execution's
-- "dynamic models").
--
--   dlua scripts/examples/tree_net.lua [--epochs 6] [--quick]
local dl = require("dlua")

local epochs, quick = 6, false
for i = 1, #(arg or {}) do
  if arg[i] == "--epochs" then epochs = tonumber(arg[i + 1]) end
  if arg[i] == "--quick" then quick = true end
end

-- ---- data: random expression trees ------------------------------------------------------------
math.randomseed(7)
local function random_tree(depth)
  if depth == 0 or (depth < 4 and math.random() < 0.3) then
    return { digit = math.random(0, 9) }
  end
  return { op = math.random(1, 2), left = random_tree(depth - 1), right = random_tree(depth - 1) }
end

local function value(t)
  if t.digit then return t.digit end
  if t.op == 1 then return value(t.left) + value(t.right) end
  return value(t.left) - value(t.right)
end

local function show(t)
  if t.digit then return tostring(t.digit) end
  return "(" .. show(t.left) .. (t.op == 1 and " + " or " - ") .. show(t.right) .. ")"
end

local function make_set(n)
  local trees, labels = {}, {}
  for i = 1, n do
    trees[i] = random_tree(4)
    labels[i] = value(trees[i]) > 0 and 2 or 1   -- class 2: positive
  end
  return trees, dl.tensor(labels, { dtype = "int64" })
end

local n_train, n_test = quick and 1000 or 4000, 500
if quick then epochs = 2 end
local train_trees, train_labels = make_set(n_train)
local test_trees, test_labels = make_set(n_test)
local majority = math.max(test_labels:eq(1):sum():item(), test_labels:eq(2):sum():item()) / n_test

-- ---- the model -----------------------------------------------------------------------------------
local TreeNet = dl.nn.Module:extend("TreeNet")
function TreeNet:init(hidden)
  self.digits = dl.nn.Embedding(10, hidden)
  self.ops = dl.nn.Embedding(2, hidden)
  self.combine = dl.nn.Linear(2 * hidden, hidden)
  self.classify = dl.nn.Linear(hidden, 2)
end

-- A vector for a tree: a digit's embedding, or the two children's vectors combined
-- (with the operator's own vector added).
function TreeNet:encode(t)
  if t.digit then return self.digits.weight[t.digit + 1] end
  local left, right = self:encode(t.left), self:encode(t.right)
  return dl.tanh(self.combine(dl.cat({ left, right }, 1)) + self.ops.weight[t.op])
end

-- Logits (N, 2) for a list of trees.
function TreeNet:forward(trees)
  local roots = {}
  for i, t in ipairs(trees) do roots[i] = self:encode(t) end
  return self.classify(dl.stack(roots, 1))
end

dl.manual_seed(0)
local net = TreeNet(32)
print(net)
local opt = dl.optim.Adam{ lr = 0.01 }

local function slice(list, first, last)
  local out = {}
  for i = first, last do out[#out + 1] = list[i] end
  return out
end

local function accuracy(trees, labels)
  local acc = dl.metrics.Accuracy()
  dl.no_grad(function()
    for s = 1, #trees, 100 do
      local e = math.min(s + 99, #trees)
      acc:update(labels:narrow(1, s, e - s + 1), net(slice(trees, s, e)))
    end
  end)
  return acc:result():item()
end

-- ---- training ------------------------------------------------------------------------------------------
local BATCH = 32
local loss_avg = dl.metrics.Mean()
local acc
for epoch = 1, epochs do
  loss_avg:reset()
  local order = dl.randperm(n_train)
  for s = 1, n_train, BATCH do
    local e = math.min(s + BATCH - 1, n_train)
    local idx = order:narrow(1, s, e - s + 1)
    local trees = {}
    for k = 1, idx:size(1) do trees[k] = train_trees[idx[k]] end
    local labels = train_labels:index_select(1, idx)
    local loss = opt:minimize(function() return dl.nn.cross_entropy(net(trees), labels) end)
    loss_avg:update(loss)
  end
  acc = accuracy(test_trees, test_labels)
  print(("epoch %d: loss %.4f, test accuracy %.1f%% (majority class %.1f%%)")
        :format(epoch, loss_avg:result():item(), 100 * acc, 100 * majority))
end

for i = 1, 3 do
  local t = test_trees[i]
  local p = dl.no_grad(function() return dl.softmax(net({ t }), -1)[1][2] end)
  print(("%s = %d: P(positive) = %.3f"):format(show(t), value(t), p))
end

if acc < majority + 0.1 then
  error(("test accuracy %.1f%% is not clearly above the majority class (%.1f%%)"):format(100 * acc, 100 * majority), 0)
end
