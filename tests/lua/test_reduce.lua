-- Reductions and NN functions (docs/tensors.md, "Reductions").
local H = require("harness")
local dl = require("dlua")

local function m23() return dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }) end

H.test("sum, mean, prod over everything and over dims", function()
  local x = m23()
  H.values(x:sum(), 21, { shape = {}, dtype = "float32" })
  H.values(dl.sum(x), 21)
  H.values(x:sum(1), { 5, 7, 9 })
  H.values(x:sum(2), { 6, 15 })
  H.values(x:sum(-1), { 6, 15 })
  H.values(x:sum(2, true), { { 6 }, { 15 } })
  H.values(x:sum({ 1, 2 }), 21)
  H.values(x:sum({ 1, 2 }, true), { { 21 } })
  H.values(x:mean(), 3.5)
  H.values(x:mean(1), { 2.5, 3.5, 4.5 })
  H.values(x:prod(), 720)
  H.values(x:prod(2), { 6, 120 })
  H.values(dl.tensor({ 1, 2 }, { dtype = "int32" }):sum(), 3, { dtype = "int64" })
  H.values(dl.tensor({ 1, 2 }, { dtype = "int64" }):mean(), 1.5, { dtype = "float32" })
  H.values(dl.tensor({ true, true, false }):sum(), 2, { dtype = "int64" })
  H.values(dl.zeros(0):sum(), 0)
end)

H.test("max, min with and without a dim; indices are 1-based", function()
  local x = dl.tensor({ { 1, 9, 3 }, { 4, 5, 6 } })
  H.values(x:max(), 9, { shape = {} })
  H.values(x:min(), 1)
  H.values(dl.max(x), 9)
  local v, i = x:max(1)
  H.values(v, { 4, 9, 6 })
  H.values(i, { 2, 1, 2 }, { dtype = "int64" })
  v, i = x:max(2)
  H.values(v, { 9, 6 })
  H.values(i, { 2, 3 })
  v, i = x:min(2, true)
  H.values(v, { { 1 }, { 4 } })
  H.values(i, { { 1 }, { 1 } })
  v, i = dl.min(x, -2)
  H.values(v, { 1, 5, 3 })
  H.values(i, { 1, 2, 1 })
  H.values(x:amax(2), { 9, 6 })
  H.values(x:amin(1), { 1, 5, 3 })
  H.values(x:max(dl.tensor({ 5, 5, 5 })), { { 5, 9, 5 }, { 5, 5, 6 } }, nil)   -- elementwise
  H.values(x:argmax(), 2, { dtype = "int64" })
  H.values(x:argmin(), 1)
  H.values(x:argmax(2), { 2, 3 })
  H.values(x:argmin(1), { 1, 2, 1 })
  H.values(x:argmax(2, true), { { 2 }, { 3 } })
  H.values(dl.argmax(dl.tensor({ 0.1, 0.7, 0.2 })), 2)
  H.raises(function() return x:max(3) end, "max: dimension 3 out of range for a tensor of 2 dimensions")
  H.raises(function() return x:max(1, "yes") end, "max: expected keepdim (a boolean), got string")
  H.raises(function() return dl.zeros(0):argmax() end, "argmax:")
  H.raises(function() return x:argmax(0) end, "argmax: dimension 0 out of range")
end)

H.test("norm, logsumexp, reduction errors", function()
  local x = m23()
  H.near(x:norm():item(), math.sqrt(91), 1e-6)
  H.values(x:norm(2), { math.sqrt(14), math.sqrt(77) })
  H.near(x:norm({ p = 1 }):item(), 21, 1e-6)
  H.near(x:norm(nil, false, { p = math.huge }):item(), 6, 1e-6)
  H.values(x:logsumexp(2), { 3 + math.log(1 + math.exp(-1) + math.exp(-2)), 6 + math.log(1 + math.exp(-1) + math.exp(-2)) })
  H.near(dl.tensor({ 1000, 1000 }):logsumexp():item(), 1000 + math.log(2), 1e-6)   -- stable
  H.raises(function() return x:std({ corection = 0 }) end, "std: unknown option 'corection'")
  H.raises(function() return x:sum({ 1, 1 }) end, "sum: dimension 1 appears more than once in the dims")
  H.raises(function() return x:sum(3) end, "sum: dimension 3 out of range for a tensor of 2 dimensions (expected 1..2 or -2..-1)")
  H.raises(function() return x:sum("a") end, "sum: expected a dimension, got string")
  H.raises(function() return x:mean(1, 2) end, "mean: expected keepdim (a boolean), got number")
end)

H.test("var and std: unbiased by default, correction as an option", function()
  local x = m23()
  H.near(x:var():item(), 3.5, 1e-6)
  H.near(x:var({ correction = 0 }):item(), 35 / 12, 1e-6)
  H.near(x:var(nil, false, { unbiased = false }):item(), 35 / 12, 1e-6)
  H.near(x:std():item(), math.sqrt(3.5), 1e-6)
  H.values(x:var(2), { 1, 1 })
  H.values(x:std(1), { math.sqrt(4.5), math.sqrt(4.5), math.sqrt(4.5) })
  H.values(x:std(1, true, { correction = 0 }), { { 1.5, 1.5, 1.5 } })
  H.values(dl.tensor({ 1, 2 }, { dtype = "float64" }):var(), 0.5, { dtype = "float64" })
  H.raises(function() return x:std({ corection = 0 }) end, "std: unknown option 'corection'")
end)

H.test("softmax and log_softmax", function()
  local x = dl.tensor({ 1, 2, 3 })
  local e = { math.exp(1), math.exp(2), math.exp(3) }
  local s = e[1] + e[2] + e[3]
  H.values(dl.softmax(x, 1), { e[1] / s, e[2] / s, e[3] / s })
  H.values(x:softmax(), { e[1] / s, e[2] / s, e[3] / s })     -- the last dim by default
  H.values(dl.log_softmax(x, -1), { 1 - math.log(s), 2 - math.log(s), 3 - math.log(s) })
  local m = dl.tensor({ { 1, 1 }, { 1, 3 } })
  H.values(dl.softmax(m, 1), { { 0.5, 1 / (1 + math.exp(2)) }, { 0.5, 1 / (1 + math.exp(-2)) } })
  H.values(dl.softmax(m, 2):sum(2), { 1, 1 })
  H.values(dl.softmax(dl.tensor({ 1000, 0 }), 1), { 1, 0 })       -- stable
  H.values(dl.softmax(dl.tensor({ 1, 2 }, { dtype = "int64" }), 1):sum(), 1, { dtype = "float32" })
  H.raises(function() return dl.softmax(x, 2) end, "softmax: dimension 2 out of range for a tensor of 1 dimension")
  H.raises(function() return dl.softmax({ 1 }, 1) end, "softmax: expected a tensor, got table")
end)

-- Note [Softmax's gradient in one pass] in tensor/cpu/reduce.cpp: the gradient along the
-- last dim is one kernel; it equals the recorded formula y (g - sum(g y)).
H.test("softmax's gradient in one pass equals the formula", function()
  dl.manual_seed(4)
  for _, case in ipairs({ { { 32, 16, 128 }, "float32" }, { { 3, 100 }, "float32" }, { { 6 }, "float32" },
                          { { 5, 7 }, "float64" }, { { 4, 0 }, "float32" } }) do
    local x, w = dl.randn(case[1], case[2]), dl.randn(case[1], case[2])
    local g = dl.grad(function(a) return (dl.softmax(a, -1) * w):sum() end)(x)
    local y = dl.softmax(x, -1)
    local formula = y * (w - (w * y):sum(-1, true))
    H.shape(g, formula.shape)
    if g:numel() > 0 then
      H.ok((g - formula):abs():max():item() <= (case[2] == "float32" and 1e-7 or 1e-15), "gradient " .. case[2])
    end
  end
  -- a broadcast incoming gradient (the gradient of sum): rows of ones, so zeros
  local gz = dl.grad(function(a) return dl.softmax(a, -1):sum() end)(dl.randn(3, 9))
  H.ok(gz:abs():max():item() < 1e-7, "softmax's rows sum to one: no gradient")
  -- a gradient of the gradient still goes through the recorded formula
  local x = dl.randn(2, 5, "float64")
  local h = dl.grad(function(a) return (dl.grad(function(b) return (dl.softmax(b, -1) * b):sum() end)(a) ^ 2):sum() end)(x)
  H.shape(h, { 2, 5 })
end)

H.run()
