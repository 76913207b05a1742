-- dlua.metrics: running metrics, as dl.metrics (docs/training.md), like
-- tf.keras.metrics:
--
--   local m = dl.metrics.Mean()
--   m:update(1); m:update(dl.tensor({2, 3, 4}))
--   print(m:result())                            -- tensor(2.5000, shape=(), dtype=float32)
--   local acc = dl.metrics.Accuracy()
--   acc:update(labels, logits)                   -- logits (N, C) or class indices (N)
--   acc:result(); acc:reset()
--
-- Totals are kept as Lua numbers (doubles), so a long run does not lose precision to
-- float32 sums. Metrics have state_dict()/load_state_dict(), so a dl.Checkpoint can track
-- them.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, typename = core.raise, core.bad_arg, core.typename
local is_tensor, shape_str = T.is_tensor, T.shape_str
local dl = T.dl
local type, setmetatable, tostring = type, setmetatable, tostring

local metrics = dl.metrics or {}
dl.metrics = metrics

local Metric = {}
Metric.__index = Metric

local function metric_class(name)
  local cls = setmetatable({ __name = name }, { __index = Metric })
  cls.__index = cls
  cls.__tostring = function(self)
    return name .. "(" .. (self.count > 0 and string.format("%.6g", self.total / self.count) or "no data") .. ")"
  end
  return cls
end

function Metric:reset()
  self.total, self.count = 0, 0
  return self
end

-- The mean so far as a float32 scalar tensor (0 before any update, as Keras).
function Metric:result()
  return dl.tensor(self.count > 0 and self.total / self.count or 0)
end

function Metric:state_dict() return { total = self.total, count = self.count } end

function Metric:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.total) ~= "number" or type(sd.count) ~= "number" then
    raise(self.__name .. ":load_state_dict: expected {total = number, count = number}")
  end
  self.total, self.count = sd.total, sd.count
end

-- ---- Mean -------------------------------------------------------------------------------------

local Mean = metric_class("Mean")

function metrics.Mean(name)
  return setmetatable({ name = name or "mean", total = 0, count = 0 }, Mean)
end

-- Adds every value of `values` (a number or a tensor); with `weights` (same shape, or a
-- number), a weighted mean.
function Mean:update(values, weights)
  if type(values) == "number" then
    local w = weights == nil and 1 or weights
    if is_tensor(w) then w = w:item() end
    if type(w) ~= "number" then bad_arg("Mean:update", "a number or a tensor of weights", w) end
    self.total = self.total + values * w
    self.count = self.count + w
    return self
  end
  if not is_tensor(values) then bad_arg("Mean:update", "a number or a tensor", values) end
  if weights == nil then
    local n = values:numel()
    if n == 1 then   -- a loss: read it, no op (item() records nothing)
      local v = values:item()
      if type(v) == "boolean" then v = v and 1 or 0 end
      self.total = self.total + v
      self.count = self.count + 1
    elseif n > 0 then
      self.total = self.total + values:detach():double():sum():item()
      self.count = self.count + n
    end
  else
    values = values:detach()
    if type(weights) == "number" then weights = dl.full(values.shape, weights, { dtype = "float64" }) end
    if not is_tensor(weights) then bad_arg("Mean:update", "a number or a tensor of weights", weights) end
    local w = weights:detach():double()
    self.total = self.total + (values:double() * w):sum():item()
    self.count = self.count + w:expand_as(values):sum():item()
  end
  return self
end

-- ---- Accuracy ---------------------------------------------------------------------------------

local Accuracy = metric_class("Accuracy")

function metrics.Accuracy(name)
  return setmetatable({ name = name or "accuracy", total = 0, count = 0 }, Accuracy)
end

-- labels: class indices (N, ...). predicted: class indices of the same shape, or scores
-- (logits, probabilities) with one more dim, whose argmax over the last dim is the class.
function Accuracy:update(labels, predicted)
  if not is_tensor(labels) then bad_arg("Accuracy:update", "a tensor of labels", labels) end
  if not is_tensor(predicted) then bad_arg("Accuracy:update", "a tensor of predictions", predicted) end
  local ld, pd = labels:dim(), predicted:dim()
  if pd == ld + 1 then
    predicted = predicted:detach():argmax(-1)
  elseif pd ~= ld then
    raise("Accuracy:update: predictions of shape " .. shape_str(predicted) .. " do not match labels of shape "
          .. shape_str(labels) .. " (expected the same shape, or one more dim of class scores)")
  end
  local ls, ps = labels.shape, predicted.shape
  for i = 1, #ls do
    if ls[i] ~= ps[i] then
      raise("Accuracy:update: predicted classes of shape " .. shape_str(ps) .. " do not match labels of shape "
            .. shape_str(ls))
    end
  end
  local n = labels:numel()
  if n > 0 then
    self.total = self.total + labels:eq(predicted):sum():item()
    self.count = self.count + n
  end
  return self
end

-- A metric object is also callable as in Keras: m(values) updates and returns the result.
Mean.__call = function(self, ...) self:update(...) return self:result() end
Accuracy.__call = function(self, ...) self:update(...) return self:result() end

return metrics
