-- Arithmetic, promotion, in-place ops, elementwise math, linear algebra
-- (docs/tensors.md, "Arithmetic and broadcasting").
local H = require("harness")
local dl = require("dlua")
local core = require("dlua.core")

H.test("operators with tensors and numbers on either side", function()
  local x = dl.tensor({ 1, 2, 4 })
  H.values(x + 1, { 2, 3, 5 })
  H.values(1 + x, { 2, 3, 5 })
  H.values(x - 1, { 0, 1, 3 })
  H.values(1 - x, { 0, -1, -3 })
  H.values(x * 2, { 2, 4, 8 })
  H.values(0.5 * x, { 0.5, 1, 2 })
  H.values(x / 2, { 0.5, 1, 2 })
  H.values(2 / x, { 2, 1, 0.5 })
  H.values(x % 3, { 1, 2, 1 })
  H.values(5 % x, { 0, 1, 1 })
  H.values(x ^ 2, { 1, 4, 16 })
  H.values(2 ^ x, { 2, 4, 16 })
  H.values(-x, { -1, -2, -4 })
  H.values(x + x, { 2, 4, 8 })
  H.values(x * x - x / x, { 0, 3, 15 })
  H.values(x ^ x, { 1, 4, 256 })
end)

H.test("% is floor modulo, with the sign of the divisor (as Lua's)", function()
  H.values(dl.tensor({ -5, 5, -5, 5 }) % dl.tensor({ 3, 3, -3, -3 }), { -5 % 3, 5 % 3, -5 % -3, 5 % -3 })
  H.values(dl.tensor({ -5, 5 }) % 3, { 1, 2 })
  H.values(-7 % dl.tensor({ 3 }), { 2 })
  H.values(dl.tensor({ -5, 5 }, { dtype = "int64" }) % 3, { 1, 2 }, { dtype = "int64" })
  H.values(dl.tensor({ 5.5 }) % 2, { 1.5 })
  H.raises(function() return dl.tensor({ 5 }, { dtype = "int64" }) % 0 end, "remainder: integer division by zero")
end)

H.test("broadcasting", function()
  local col = dl.tensor({ { 1 }, { 2 } })
  local row = dl.tensor({ 10, 20, 30 })
  H.values(col + row, { { 11, 21, 31 }, { 12, 22, 32 } })
  H.values(row * col, { { 10, 20, 30 }, { 20, 40, 60 } })
  H.values(dl.ones(2, 3) + dl.tensor(1), { { 2, 2, 2 }, { 2, 2, 2 } })
  H.raises(function() return dl.ones(2, 3) + dl.ones(3, 2) end, "add: shapes (2, 3) and (3, 2) cannot be broadcast")
  H.raises(function() return dl.ones(2) * dl.ones(3) end, "mul: shapes (2,) and (3,) cannot be broadcast")
end)

H.test("promotion follows PyTorch; a Lua number adapts to the tensor", function()
  local i64 = dl.tensor({ 1, 2 }, { dtype = "int64" })
  local i32 = dl.tensor({ 1, 2 }, { dtype = "int32" })
  local u8 = dl.tensor({ 1, 2 }, { dtype = "uint8" })
  local f64 = dl.tensor({ 1, 2 }, { dtype = "float64" })
  H.values(i64 + 2, { 3, 4 }, { dtype = "int64" })
  H.values(i32 * 3, { 3, 6 }, { dtype = "int32" })
  H.values(i64 + 0.5, { 1.5, 2.5 }, { dtype = "float32" })
  H.values(i64 / 2, { 0.5, 1 }, { dtype = "float32" })          -- true division
  H.values(i64 / i64, { 1, 1 }, { dtype = "float32" })
  H.values(i32 + i64, { 2, 4 }, { dtype = "int64" })
  H.values(u8 + i32, { 2, 4 }, { dtype = "int32" })
  H.values(i64 + f64, { 2, 4 }, { dtype = "float64" })
  H.values(dl.ones(2) + f64, { 2, 3 }, { dtype = "float64" })
  H.values(f64 * 2, { 2, 4 }, { dtype = "float64" })
  -- a 0-dim tensor takes part like a number unless it is of a higher category
  H.values(dl.ones(2) + dl.tensor(1, { dtype = "float64" }), { 2, 2 }, { dtype = "float32" })
  H.values(i32 + dl.tensor(1, { dtype = "int64" }), { 2, 3 }, { dtype = "int32" })
  H.values(i64 + dl.tensor(0.5), { 1.5, 2.5 }, { dtype = "float32" })
  H.values(dl.tensor({ true, false }) + 1, { 2, 1 }, { dtype = "int64" })
  H.raises(function() return dl.tensor({ true }) - dl.tensor({ true }) end, "sub: not supported for bool tensors")
end)

H.test("named functions and methods for the binary ops", function()
  local a, b = dl.tensor({ 1, 5, 3 }), dl.tensor({ 4, 2, 3 })
  H.values(dl.add(a, b), { 5, 7, 6 })
  H.values(a:add(b), { 5, 7, 6 })
  H.values(dl.add(2, a), { 3, 7, 5 })
  H.values(a:sub(1), { 0, 4, 2 })
  H.values(a:mul(b), { 4, 10, 9 })
  H.values(a:div(b), { 0.25, 2.5, 1 })
  H.values(a:remainder(b), { 1, 1, 0 })
  H.values(a:mod(2), { 1, 1, 1 })
  H.values(a:pow(2), { 1, 25, 9 })
  H.values(dl.pow(2, a), { 2, 32, 8 })
  H.values(dl.maximum(a, b), { 4, 5, 3 })
  H.values(a:minimum(b), { 1, 2, 3 })
  H.values(a:maximum(2), { 2, 5, 3 })
  H.values(dl.atan2(dl.tensor({ 1, 0 }), dl.tensor({ 1, -1 })), { math.atan2(1, 1), math.atan2(0, -1) })
  H.raises(function() return dl.add(1, 2) end, "add: expected a tensor, got number and number")
  H.raises(function() return a + {} end, "add: expected a tensor or a number, got table")
  H.raises(function() return "x" * a end, "mul: expected a tensor or a number, got string")
  H.raises(function() return a:pow(nil) end, "pow: expected a tensor or a number, got nil")
end)

H.test("in-place ops return the tensor and check dtypes and shapes", function()
  local x = dl.tensor({ 1, 2, 3 })
  H.ok(rawequal(x:add_(1), x))
  H.values(x, { 2, 3, 4 })
  x:sub_(dl.tensor({ 1, 1, 1 })):mul_(2):div_(4)
  H.values(x, { 0.5, 1, 1.5 })
  x:pow_(2)
  H.values(x, { 0.25, 1, 2.25 })
  local m = dl.zeros(2, 3)
  m:add_(dl.tensor({ 1, 2, 3 }))
  H.values(m, { { 1, 2, 3 }, { 1, 2, 3 } })
  local i = dl.tensor({ 7, 8 }, { dtype = "int64" })
  i:remainder_(3)
  H.values(i, { 1, 2 }, { dtype = "int64" })
  H.values(dl.tensor({ -1, 4 }):relu_(), { 0, 4 })
  H.values(dl.tensor({ 0, 1 }):exp_(), { 1, math.exp(1) })
  local z = dl.tensor({ 1, 2 })
  H.ok(rawequal(z:fill_(3), z))
  H.values(z, { 3, 3 })
  H.ok(rawequal(z:zero_(), z))
  H.values(z, { 0, 0 })
  H.ok(rawequal(z:copy_(dl.tensor({ 5, 6 }, { dtype = "int64" })), z))
  H.values(z, { 5, 6 }, { dtype = "float32" })
  z:copy_(1)
  H.values(z, { 1, 1 })
  H.values(dl.tensor({ -2, 0, 2 }):clamp_(-1, 1), { -1, 0, 1 })
  H.raises(function() i:div_(2) end, "div_: result dtype float32 cannot be stored in the in-place target of dtype int64")
  H.raises(function() i:add_(0.5) end, "add_: result dtype float32 cannot be stored in the in-place target of dtype int64")
  H.raises(function() i:exp_() end, "exp_: result dtype float32 cannot be stored in the in-place target of dtype int64")
  H.raises(function() dl.zeros(3):add_(dl.zeros(2, 3)) end,
    "add_: cannot broadcast shape (2, 3) into the in-place target of shape (3,)")
  H.raises(function() dl.zeros(3):add_("x") end, "add_: expected a tensor or a number, got string")
  H.raises(function() dl.zeros(3):fill_("x") end, "fill_: expected a number, got string")
end)

-- Reference values: Lua's math library, and erf from tables.
local xs = { 0.5, 1, 2 }
local function each(f) local t = {} for i, v in ipairs(xs) do t[i] = f(v) end return t end
local unary_ref = {
  exp = math.exp, log = math.log, sqrt = math.sqrt, sin = math.sin, cos = math.cos,
  tan = math.tan, tanh = math.tanh, abs = math.abs,
  log1p = function(v) return math.log(1 + v) end,
  expm1 = function(v) return math.exp(v) - 1 end,
  rsqrt = function(v) return 1 / math.sqrt(v) end,
  sign = function() return 1 end,
  neg = function(v) return -v end,
  sigmoid = function(v) return 1 / (1 + math.exp(-v)) end,
  relu = function(v) return v end,
  softplus = function(v) return math.log(1 + math.exp(v)) end,
  erf = function(v) return ({ [0.5] = 0.5204998778130465, [1] = 0.8427007929497149, [2] = 0.9953222650189527 })[v] end,
  floor = math.floor, ceil = math.ceil,
  round = function(v) return ({ [0.5] = 0, [1] = 1, [2] = 2 })[v] end,
}

H.test("elementwise math as functions and methods", function()
  local x = dl.tensor(xs, { dtype = "float64" })
  for name, ref in pairs(unary_ref) do
    H.ok(dl[name], "dl." .. name)
    H.near(dl[name](x):totable(), each(ref), 1e-12, "dl." .. name)
    H.near(x[name](x):totable(), each(ref), 1e-12, "x:" .. name .. "()")
  end
  local n = dl.tensor({ -1.5, 0, 2.5, -0.5 })
  H.values(n:abs(), { 1.5, 0, 2.5, 0.5 })
  H.values(n:sign(), { -1, 0, 1, -1 })
  H.values(n:relu(), { 0, 0, 2.5, 0 })
  H.values(n:floor(), { -2, 0, 2, -1 })
  H.values(n:ceil(), { -1, 0, 3, 0 })
  H.values(n:round(), { -2, 0, 2, 0 })                          -- half to even
  H.values(dl.tensor({ 0, 1 }):logical_not(), { true, false }, { dtype = "bool" })
  H.values(dl.tensor({ -1000, 1000 }):sigmoid(), { 0, 1 })       -- stable for large |x|
  H.values(dl.tensor({ 1, 4 }):sqrt(), { 1, 2 }, { dtype = "float32" })
  -- integer inputs: float-only ops promote, int-exact ones keep the dtype
  H.values(dl.tensor({ 1, 4 }, { dtype = "int64" }):sqrt(), { 1, 2 }, { dtype = "float32" })
  H.values(dl.tensor({ -1, 4 }, { dtype = "int64" }):abs(), { 1, 4 }, { dtype = "int64" })
  H.values(dl.tensor({ -3 }, { dtype = "int32" }):relu(), { 0 }, { dtype = "int32" })
  H.raises(function() return dl.exp(3) end, "exp: expected a tensor, got number")
  H.raises(function() return dl.tensor({ true }):neg() end, "neg: not supported for bool tensors")
end)

H.test("every op of the op table has its function and method", function()
  for _, op in ipairs(core.op_list) do
    if op.family ~= "other" and op.name ~= "amax" and op.name ~= "amin" then
      H.eq(type(dl[op.name]), "function", "dl." .. op.name)
      H.eq(type(dl.ones(1)[op.name]), "function", "x:" .. op.name)
    end
    if op.family == "unary" or op.family == "binary" then
      H.eq(type(dl.ones(1)[op.name .. "_"]), "function", "x:" .. op.name .. "_")
    end
  end
  for _, name in ipairs({ "max", "min", "argmax", "argmin", "softmax", "log_softmax", "where", "clamp",
                          "masked_fill", "matmul", "cat", "stack" }) do
    H.eq(type(dl[name]), "function", "dl." .. name)
  end
end)

H.test("clamp", function()
  local x = dl.tensor({ -2, 0.5, 3 })
  H.values(x:clamp(-1, 1), { -1, 0.5, 1 })
  H.values(dl.clamp(x, 0), { 0, 0.5, 3 })
  H.values(x:clamp(nil, 1), { -2, 0.5, 1 })
  H.values(x:clamp({ min = 0, max = 2 }), { 0, 0.5, 2 })
  H.values(dl.tensor({ -5, 5 }, { dtype = "int64" }):clamp(-2, 2), { -2, 2 }, { dtype = "int64" })
  H.raises(function() return x:clamp() end, "clamp: at least one of min and max must be given")
  H.raises(function() return x:clamp("a") end, "clamp: expected a number for min, got string")
end)

H.test("matmul, dot, mm, bmm", function()
  local a = dl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  local b = dl.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } })
  H.values(a:matmul(b), { { 4, 5 }, { 10, 11 } })
  H.values(dl.matmul(a, b), { { 4, 5 }, { 10, 11 } })
  H.values(a:mm(b), { { 4, 5 }, { 10, 11 } })
  H.values(a:matmul(dl.tensor({ 1, 1, 1 })), { 6, 15 })
  H.values(dl.tensor({ 1, 1 }):matmul(a), { 5, 7, 9 })
  H.values(dl.tensor({ 1, 2, 3 }):matmul(dl.tensor({ 4, 5, 6 })), 32, { shape = {} })
  H.values(dl.dot(dl.tensor({ 1, 2 }), dl.tensor({ 3, 4 })), 11)
  local batch = dl.stack({ a, a * 2 })
  H.values(batch:matmul(b), { { { 4, 5 }, { 10, 11 } }, { { 8, 10 }, { 20, 22 } } })
  H.values(batch:bmm(dl.stack({ b, b })), { { { 4, 5 }, { 10, 11 } }, { { 8, 10 }, { 20, 22 } } })
  H.values(dl.eye(2, { dtype = "float64" }):matmul(dl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64" })),
    { { 1, 2 }, { 3, 4 } }, { dtype = "float64" })
  H.raises(function() return dl.matmul(dl.ones(2, 3), dl.ones(4, 5)) end,
    "matmul: shapes (2, 3) and (4, 5) cannot be multiplied")
  H.raises(function() return a:mm(dl.ones(3)) end, "mm: expected 2-D tensors, got shapes (2, 3) and (3,)")
  H.raises(function() return a:dot(a) end, "dot: expected 1-D tensors, got shapes (2, 3) and (2, 3)")
  H.raises(function() return a:bmm(b) end, "bmm: expected 3-D tensors")
  H.raises(function() return a:matmul(3) end, "matmul: expected a tensor, got number")
end)

H.run()
