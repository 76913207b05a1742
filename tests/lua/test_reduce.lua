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

H.test("median shares its gradient among tied elements; nanmedian, var_mean and aminmax as PyTorch's", function()
  local nan = 0 / 0
  -- torch.tensor([1., 2, 2, 3, 2]).median().backward(): [0, .3333, .3333, 0, .3333]
  H.values(dl.grad(function(x) return x:median() end)(dl.tensor({ 1, 2, 2, 3, 2 })), { 0, 1 / 3, 1 / 3, 0, 1 / 3 })
  -- torch.tensor([[1., 2, 2], [3, 2, 2]]).median(): 2, gradient 0.25 on each 2
  local g = dl.grad(function(x) return x:median() end)(dl.tensor({ { 1, 2, 2 }, { 3, 2, 2 } }))
  H.values(g, { { 0, 0.25, 0.25 }, { 0, 0.25, 0.25 } })
  -- torch.tensor([1., nan, 2, nan]).median().backward(): [0, .5, 0, .5] (the NaN ones)
  H.values(dl.grad(function(x) return x:median() end)(dl.tensor({ 1, nan, 2, nan })), { 0, 0.5, 0, 0.5 })
  H.values(dl.tensor({ -0.0 }):median(), -0.0)
  H.ok(1 / dl.tensor({ -0.0 }):median():item() < 0, "median keeps -0")
  local en = dl.zeros(0):nanmedian():item()
  H.ok(en ~= en)   -- (torch.nanmedian of an empty tensor: NaN)

  local m = dl.tensor({ { 1, nan, 3, 2 }, { nan, nan, nan, nan }, { 4, nan, nan, 1 }, { nan, 5, nan, nan }, { 2, 2, 1, 1 } },
                      { dtype = "float64" })
  H.values(m:nanmedian(), 2, { shape = {}, dtype = "float64" })   -- torch.nanmedian(m): 2
  -- torch.nanmedian(m, 1): values [2, nan, 1, 5, 1], indices [3, 2, 3, 1, 3] (0-based; a
  -- slice of NaN only has no defined index: dlua gives its first)
  local v, i = m:nanmedian(2)
  H.values(v, { 2, nan, 1, 5, 1 })
  H.values(i, { 4, 1, 4, 2, 4 }, { dtype = "int64" })
  -- torch.nanmedian(m, 0, keepdim=True): [[2, 2, 1, 1]], indices [[4, 4, 4, 4]]
  v, i = dl.nanmedian(m, 1, true)
  H.values(v, { { 2, 2, 1, 1 } })
  H.values(i, { { 5, 5, 5, 5 } })
  -- torch.tensor([1., nan, 2, 2, nan, 2]).nanmedian().backward(): [0, 0, .3333, .3333, 0, .3333]
  H.values(dl.grad(function(x) return x:nanmedian() end)(dl.tensor({ 1, nan, 2, 2, nan, 2 })), { 0, 0, 1 / 3, 1 / 3, 0, 1 / 3 })
  H.values(dl.grad(function(x) return x:nanmedian() end)(dl.tensor({ nan, nan })), { 0.5, 0.5 })
  -- x = [[3., 1, nan], [nan, 2, 2]]; v, i = x.nanmedian(1); (v * [1, 10]).sum().backward():
  -- v [1, 2], i [1, 1], x.grad [[0, 1, 0], [0, 10, 0]]
  local x = dl.tensor({ { 3, 1, nan }, { nan, 2, 2 } }, { dtype = "float64" })
  v, i = x:nanmedian(2)
  H.values(v, { 1, 2 })
  H.values(i, { 2, 2 })
  H.values(dl.grad(function(a) return (a:nanmedian(2) * dl.tensor({ 1, 10 }, { dtype = "float64" })):sum() end)(x),
           { { 0, 1, 0 }, { 0, 10, 0 } })
  H.values(dl.tensor({ 1, 5, 3, 2 }, { dtype = "int64" }):nanmedian(), 2, { dtype = "int64" })
  H.raises(function() return dl.zeros(2, 0):nanmedian(2) end, "nanmedian: dimension 2 is empty")

  local a = dl.tensor({ { 1, 2, 3, 4 }, { 2, 5, 1, 0 }, { 3, 3, 3, 9 } }, { dtype = "float64" })
  -- torch.var_mean(a, 1, correction=0): [1.25, 3.5, 6.75], [2.5, 2, 4.5]
  local var, mean = dl.var_mean(a, 2, { correction = 0 })
  H.values(var, { 1.25, 3.5, 6.75 })
  H.values(mean, { 2.5, 2, 4.5 })
  -- torch.var_mean(a, (0, 1)): 5.454545..., 3
  var, mean = dl.var_mean(a, { 1, 2 })
  H.values(var, 60 / 11, { shape = {} })
  H.values(mean, 3)
  -- torch.var_mean(a, 1, keepdim=True): [[1.6667], [4.6667], [9]], [[2.5], [2], [4.5]]
  var, mean = dl.var_mean(a, 2, true)
  H.values(var, { { 5 / 3 }, { 14 / 3 }, { 9 } })
  H.values(mean, { { 2.5 }, { 2 }, { 4.5 } })
  -- torch.std_mean(a, 0, unbiased=False, keepdim=True)
  local sd, sm = a:std_mean(1, true, { unbiased = false })
  H.values(sd, { { 0.816496580927726, 1.247219128924647, 0.942809041582063, 3.681787005729087 } })
  H.values(sm, { { 2, 10 / 3, 7 / 3, 13 / 3 } })
  var = a:var_mean({ keepdim = true })
  H.values(var, { { 60 / 11 } })
  H.raises(function() return dl.var_mean(a, 2, { ddof = 1 }) end, "var_mean: unknown option 'ddof'")
  H.raises(function() return dl.std_mean(a, 3) end, "std_mean: dimension 3 is out of range")
  -- torch.aminmax(a, dim=1): [1, 0, 3], [4, 5, 9]; dim=0, keepdim=True: [[1, 2, 1, 0]], [[3, 5, 3, 9]]
  local lo, hi = dl.aminmax(a, { dim = 2 })
  H.values(lo, { 1, 0, 3 })
  H.values(hi, { 4, 5, 9 })
  lo, hi = a:aminmax({ dim = 1, keepdim = true })
  H.values(lo, { { 1, 2, 1, 0 } })
  H.values(hi, { { 3, 5, 3, 9 } })
  lo, hi = a:aminmax({ keepdim = true })
  H.values(lo, { { 0 } })
  H.values(hi, { { 9 } })
  H.raises(function() return a:aminmax({ dims = 2 }) end, "aminmax: unknown option 'dims'")
  H.raises(function() return dl.zeros(2, 0):aminmax() end, "aminmax: cannot take the smallest and largest of an empty tensor")
  -- torch: max() of an empty tensor asks for a dim, max(0) of a (0, 3) one names max (dlua said amax, max_dim)
  H.raises(function() return dl.zeros(0):max() end, "max: an empty tensor (shape (0,)) has no max; give a dim")
  H.raises(function() return dl.zeros(0):min() end, "min: an empty tensor (shape (0,)) has no min")
  H.raises(function() return dl.zeros(0, 3):max(1) end, "max: cannot reduce over dimension 1 of size 0")
  H.eq(dl.zeros(0, 3):max(2).shape, { 0 })
  H.raises(function() return dl.zeros(2, 0):aminmax(2) end, "aminmax: cannot reduce over dimension 2 of size 0")
end)

H.test("var and std take PyTorch's positional unbiased; the median of an empty tensor is NaN", function()
  local x = dl.tensor({ 1, 2, 3, 4 }, { dtype = "float64" })
  H.eq(x:var(false):item(), 1.25); H.near(x:std(false):item(), 1.118033988749895, 1e-15)   -- (torch: x.var(False))
  H.near(x:var(true):item(), 1.6666666666666667, 1e-15)
  local m = dl.zeros(0):median():item()
  H.ok(m ~= m)
  H.eq(select("#", dl.tensor({ 1, 2, 3 }, { dtype = "int64" }):median()), 1)   -- (a value, no index)
end)

H.test("std's gradient is 0 where the std is 0, as PyTorch's (NaN only where count - correction <= 0)", function()
  H.eq(dl.grad(function(x) return x:std(2):sum() end)(dl.ones(2, 3)):totable(), { { 0, 0, 0 }, { 0, 0, 0 } })
  H.eq(dl.grad(function(x) return x:std({ correction = 0 }) end)(dl.tensor({ 1.5 })):totable(), { 0 })
  local g = dl.grad(function(x) return x:std() end)(dl.tensor({ 1.5 })):totable()
  H.ok(g[1] ~= g[1])
  -- and elsewhere as before: d std / dx = (x - mean) / ((n - 1) std)
  local x = dl.tensor({ 1, 2, 4 }, { dtype = "float64" })
  local s = x:std():item()
  local want = {}
  for i, v in ipairs({ 1, 2, 4 }) do want[i] = (v - 7 / 3) / (2 * s) end
  H.near(dl.grad(function(t) return t:std() end)(x):totable(), want, 1e-15)
end)

H.run()
