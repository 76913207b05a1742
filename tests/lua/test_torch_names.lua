-- PyTorch 1.13's names for what dlua has (aliases, in-place forms, small pointwise
-- functions and questions); expected values from torch 1.13, named at each literal.
local H = require("harness")
local dl = require("dlua")

local function f64(t) return dl.tensor(t, { dtype = "float64" }) end
local function i64(t) return dl.tensor(t, { dtype = "int64" }) end

H.test("in-place comparisons write 1 and 0 of x's dtype", function()
  local x = dl.tensor({ 1.5, -2, 3 })
  -- torch.tensor([1.5, -2, 3]).greater_(0) -> [1., 0., 1.]
  H.values(x:clone():greater_(0), { 1, 0, 1 }, { dtype = "float32" })
  H.values(x:clone():eq_(dl.tensor({ 1.5, 0, 3 })), { 1, 0, 1 })
  H.values(x:clone():ne_(3), { 1, 1, 0 })
  H.values(x:clone():lt_(0), { 0, 1, 0 })
  H.values(x:clone():le_(1.5), { 1, 1, 0 })
  H.values(x:clone():gt_(1.5), { 0, 0, 1 })
  H.values(x:clone():ge_(1.5), { 1, 0, 1 })
  H.values(x:clone():less_(0), { 0, 1, 0 })
  H.values(x:clone():less_equal_(1.5), { 1, 1, 0 })
  H.values(x:clone():greater_equal_(3), { 0, 0, 1 })
  H.values(x:clone():not_equal_(3), { 1, 1, 0 })
  -- torch.tensor([1, 2, 3]).eq_(torch.tensor([1., 5., 3.])) -> [1, 0, 1] (int64)
  H.values(i64({ 1, 2, 3 }):eq_(dl.tensor({ 1, 5, 3 })), { 1, 0, 1 }, { dtype = "int64" })
  -- x.logical_and_([0, 1, 1]) -> [0., 1., 1.]; x.logical_xor_([0, 1, 0]) -> [1., 0., 1.]
  H.values(x:clone():logical_and_(dl.tensor({ 0, 1, 1 })), { 0, 1, 1 })
  H.values(x:clone():logical_or_(dl.tensor({ 0, 0, 0 })), { 1, 1, 1 })
  H.values(x:clone():logical_xor_(dl.tensor({ 0, 1, 0 })), { 1, 0, 1 })
  local y = x:clone()
  H.ok(rawequal(y:eq_(1.5), y))
  H.raises(function() return dl.tensor({ 1 }):expand({ 3 }):eq_(1) end, "eq_: the in-place target has elements sharing")
  H.raises(function() return dl.zeros(3):lt_(dl.zeros(2, 3)) end, "lt_:")
  H.raises(function() return dl.zeros(3):ge_("a") end, "ge: expected a tensor or a number, got string")
end)

H.test("other spellings are the same functions", function()
  H.eq(dl.greater, dl.gt)
  H.eq(dl.greater_equal, dl.ge)
  H.eq(dl.less, dl.lt)
  H.eq(dl.less_equal, dl.le)
  H.eq(dl.not_equal, dl.ne)
  local x = dl.tensor({ 0.5 })
  H.eq(x.greater, x.gt)
  H.eq(dl.arccos, dl.acos)
  H.eq(dl.arctan2, dl.atan2)
  H.eq(x.arcsinh_, x.asinh_)
  H.eq(dl.arctanh_, x.atanh_)
  H.eq(x.multiply_, x.mul_)
  H.eq(x.absolute_, x.abs_)
  H.eq(dl.concatenate, dl.cat)
  H.eq(dl.fix, dl.trunc)
  -- torch.arccos(0.5) = 1.0471975803, torch.arctan2(0.5, 2) = 0.2449786663
  H.values(dl.arccos(x), { 1.0471975803 })
  H.values(x:arctan2(dl.tensor({ 2 })), { 0.2449786663 })
  H.values(dl.tensor({ 0.5 }):arcsin_(), { 0.5235987902 })   -- torch.tensor([0.5]).arcsin_()
  H.values(dl.tensor({ 1.5, -2.7 }):fix_(), { 1, -2 })
  -- torch: x.divide_(2, rounding_mode="floor") -> [0., -1., 1.]; x.subtract_(1, alpha=2) -> [-0.5, -4., 1.]
  H.values(dl.tensor({ 1.5, -2, 3 }):divide_(2, { rounding_mode = "floor" }), { 0, -1, 1 })
  H.values(dl.tensor({ 1.5, -2, 3 }):subtract_(1, { alpha = 2 }), { -0.5, -4, 1 })
  H.values(dl.tensor({ 1.5, -2 }):negative_(), { -1.5, 2 })
  H.values(dl.tensor({ 3, 4 }):true_divide_(2), { 1.5, 2 })
end)

H.test("in-place forms of the composed pointwise functions", function()
  local function x() return dl.tensor({ 1.5, -2, 3 }) end
  -- torch.tensor([1.5, -2, 3]).<op>_(...)
  H.values(x():square_(), { 2.25, 4, 9 })
  H.values(x():sinc_(), { -2.1220658720e-01, 2.7827534055e-08, -2.5305382234e-09 }, { tol = 1e-5 })
  H.values(x():xlogy_(2), { 1.0397207737, -1.3862943649, 2.0794415474 })
  H.values(x():sgn_(), { 1, -1, 1 })
  H.values(x():hypot_(dl.tensor(4)), { 4.2720017433, 4.4721360207, 5 })
  H.values(x():copysign_(-1), { -1.5, -2, -3 })
  H.values(x():heaviside_(dl.tensor(0.5)), { 1, 0, 1 })
  H.values(x():deg2rad_(), { 0.0261799395, -0.0349065848, 0.0523598790 })
  H.values(x():rad2deg_(), { 85.9436721802, -114.5915603638, 171.8873443604 })
  H.values(x():reciprocal_(), { 0.6666666865, -0.5, 0.3333333433 })
  H.values(x():frac_(), { 0.5, 0, 0 })
  H.values(x():trunc_(), { 1, -2, 3 })
  H.values(dl.tensor({ 2.5, 3 }):mvlgamma_(2), { 0.8570477962, 1.5501949787 })
  H.values(dl.tensor({ 0.25, 0.5 }):logit_(), { -1.0986123085, 0 })
  H.values(f64({ 1.5, -2 }):float_power_(2), { 2.25, 4 }, { dtype = "float64" })
  H.values(dl.tensor({ 0 / 0, 1 / 0 }):nan_to_num_(0, 5), { 0, 5 })
  H.values(dl.tensor({ { 1, 2 }, { 3, 4 } }):tril_(), { { 1, 0 }, { 3, 4 } })
  H.values(dl.tensor({ { 1, 2 }, { 3, 4 } }):triu_(1), { { 0, 2 }, { 0, 0 } })
  -- torch: [[1, 2], [3, 4]].cumsum_(1) -> [[1, 3], [3, 7]]; .cumprod_(0) -> [[1, 2], [3, 8]]
  H.values(dl.tensor({ { 1, 2 }, { 3, 4 } }):cumsum_(2), { { 1, 3 }, { 3, 7 } })
  H.values(dl.tensor({ { 1, 2 }, { 3, 4 } }):cumprod_(1), { { 1, 2 }, { 3, 8 } })
  H.values(x():clamp_min_(0), { 1.5, 0, 3 })
  H.values(x():clamp_max_(0), { 0, -2, 0 })
  H.values(dl.clamp_min(x(), 0), { 1.5, 0, 3 })
  H.values(dl.clamp_max(x(), 0), { 0, -2, 0 })
  H.values(i64({ 2, -3 }):square_(), { 4, 9 }, { dtype = "int64" })
  local y = x()
  H.ok(rawequal(y:square_(), y))
  -- torch: "result type Float can't be cast to the desired output type Long" for these
  H.raises(function() return i64({ 1, 2 }):sinc_() end, "sinc_: result dtype float32 cannot be stored in the in-place target of dtype int64")
  H.raises(function() return i64({ 1, 2 }):clamp_min_(0.5) end, "clamp_min_: result dtype float32 cannot be stored")
  H.raises(function() return i64({ 1, 2 }):reciprocal_() end, "reciprocal_: result dtype float32")
  -- torch: "the base given to float_power_ has dtype Float but the operation's result requires dtype Double"
  H.raises(function() return dl.tensor({ 1.5 }):float_power_(2) end, "float_power_: the result is float64")
  H.raises(function() return dl.tensor({ 1 }):expand({ 3 }):square_() end, "square_: the in-place target has elements sharing")
  H.raises(function() return dl.zeros(3):hypot_(dl.zeros(2, 3)) end, "hypot_:")
end)

H.test("in-place forms under autograd", function()
  -- y = x * 1; y.hypot_(torch.tensor(2.)); y.sum().backward() -> x.grad = [0.4472135901, 0.7071067691]
  H.values(dl.grad(function(t)
    local y = t * 1
    y:hypot_(dl.tensor(2))
    return y:sum()
  end)(dl.tensor({ 1, 2 })), { 0.4472135901, 0.7071067691 })
  H.values(dl.grad(function(t)
    local y = t * 1
    y:square_()
    return y:sum()
  end)(dl.tensor({ 1, 2 })), { 2, 4 })
  H.raises(function()
    return dl.grad(function(t) t:square_() return t:sum() end)(dl.tensor({ 1, 2 }))
  end, "square_: a tensor that a gradient is taken with respect to cannot be modified in place")
  H.raises(function()
    return dl.grad(function(t)
      local y = t:exp()
      local s = y:sum()
      dl.no_grad(function() y:clamp_min_(0) end)
      return s
    end)(dl.tensor({ 1, 2 }))
  end, "exp: a tensor needed to compute its gradient was modified")
end)

H.test("logaddexp2, ldexp and frexp", function()
  -- torch.logaddexp2([1, 2, -inf, inf, 0.5], [1, 10, -inf, inf, -3])
  H.values(dl.logaddexp2(dl.tensor({ 1, 2, -1 / 0, 1 / 0, 0.5 }), dl.tensor({ 1, 10, -1 / 0, 1 / 0, -3 })),
           { 2, 10.0056247711, -1 / 0, 1 / 0, 0.6221933961 })
  H.values(dl.tensor({ 0.5 }):logaddexp2(-3), { 0.6221933961 })
  -- x = [1., 2.] requires_grad; torch.logaddexp2(x, [1., 5.]).sum().backward() -> [0.5, 0.1111111119]
  H.values(dl.grad(function(t) return dl.logaddexp2(t, dl.tensor({ 1, 5 })):sum() end)(dl.tensor({ 1, 2 })),
           { 0.5, 0.1111111119 })
  -- torch.ldexp(torch.tensor([1, 2]), torch.tensor([3, -1])) -> [8., 1.] float32
  H.values(dl.ldexp(i64({ 1, 2 }), i64({ 3, -1 })), { 8, 1 }, { dtype = "float32" })
  H.values(dl.ldexp(f64({ 1, 2 }), i64({ 3, -1 })), { 8, 1 }, { dtype = "float64" })
  H.values(dl.tensor({ 1, 2 }):ldexp_(dl.tensor({ 2, 2 }, { dtype = "int32" })), { 4, 8 })
  H.raises(function() return i64({ 1, 2 }):ldexp_(i64({ 2, 2 })) end, "ldexp_: result dtype float32")
  -- torch.frexp([0., inf, -inf, nan, -3., 1e-45, 3.4e38])
  local m, e = dl.frexp(dl.tensor({ 0, 1 / 0, -1 / 0, 0 / 0, -3, 1e-45, 3.4e38 }))
  H.values(m, { 0, 1 / 0, -1 / 0, 0 / 0, -0.75, 0.5, 0.999170184135437 }, { dtype = "float32" })
  H.values(e, { 0, 0, 0, 0, 2, -148, 128 }, { dtype = "int32" })
  -- torch.frexp(torch.tensor([1e-310, 1.7976931348623157e308], dtype=torch.float64))
  m, e = dl.frexp(f64({ 1e-310, 1.7976931348623157e308 }))
  H.eq(m:totable(), { 0.5752618031559393, 0.9999999999999999 })
  H.eq(e:totable(), { -1029, 1024 })
  -- torch.frexp(x)[0].sum().backward() for x = [1.5, -3., 0.] -> [0.5, 0.25, 1.]
  H.values(dl.grad(function(t) return (dl.frexp(t)):sum() end)(dl.tensor({ 1.5, -3, 0 })), { 0.5, 0.25, 1 })
  H.raises(function() return dl.frexp(i64({ 1 })) end, "frexp: expected a floating-point tensor, got int64")
  H.raises(function() return dl.ldexp(dl.zeros(2), dl.zeros(3)) end, "ldexp:")
end)

H.test("nextafter is exact in float32 and float64", function()
  local a = { 1, 0, -1, 1, 3.4028234663852886e38, 1e-45, -0.0, 2 }
  local b = { 2, -1, 0, 1, 1 / 0, 0, 1, 1 }
  -- torch.nextafter(a, b) in float32
  H.eq(dl.nextafter(dl.tensor(a), dl.tensor(b)):totable(),
       { 1.0000001192092896, -1.401298464324817e-45, -0.9999999403953552, 1, 1 / 0, 0, 1.401298464324817e-45,
         1.9999998807907104 })
  -- ... in float64 (a float32 with a float64 b promotes to float64, as torch's)
  local r = dl.nextafter(dl.tensor(a), f64(b))
  H.eq(r.dtype, "float64")
  H.eq(r:totable(), { 1.0000000000000002, -5e-324, -0.9999999999999999, 1, 3.402823466385289e+38,
                      1.4012984643248169e-45, 5e-324, 1.9999999999999998 })
  H.values(dl.tensor({ 0 / 0, 1 }):nextafter(dl.tensor(0 / 0)), { 0 / 0, 0 / 0 })
  -- torch: "nextafter_cpu" not implemented for 'Long'
  H.raises(function() return dl.nextafter(i64({ 1 }), i64({ 2 })) end, "nextafter: expected float32, float64 or bfloat16 tensors")
end)

H.test("nextafter in bfloat16 steps its last bit; float16 refused (as torch's)", function()
  local bf = { dtype = "bfloat16" }
  -- torch.nextafter(tensor([1, 0, -1, 1, 3.5, 1e38, 0], dtype=bfloat16), tensor([2, 1, -2, 0, -10, inf, -1], dtype=bfloat16))
  local r = dl.nextafter(dl.tensor({ 1, 0, -1, 1, 3.5, 1e38, 0 }, bf), dl.tensor({ 2, 1, -2, 0, -10, 1 / 0, -1 }, bf))
  H.eq(r.dtype, "bfloat16")
  H.eq(r:double():totable(), { 1.0078125, 9.183549615799121e-41, -1.0078125, 0.99609375, 3.484375, 1.0035671368176115e+38,
                               -9.183549615799121e-41 })
  -- torch: "nextafter_cpu" not implemented for 'Half'
  H.raises(function() return dl.nextafter(dl.ones(2, { dtype = "float16" }), dl.ones(2, { dtype = "float16" })) end,
           "nextafter: expected float32, float64 or bfloat16 tensors (float16's is not in PyTorch), got float16")
end)

H.test("clamp_min and clamp_max take a tensor bound as torch's: broadcast, promoted, NaN kept, gradients", function()
  local x = dl.tensor({ { 1, 5, -3 }, { 2, 0, 9 } })
  -- torch.clamp_min(x, tensor([0., 4, 10])); torch.clamp_max(x, tensor([[2.], [1]]))
  H.values(x:clamp_min(dl.tensor({ 0, 4, 10 })), { { 1, 5, 10 }, { 2, 4, 10 } })
  H.values(dl.clamp_max(x, dl.tensor({ { 2 }, { 1 } })), { { 1, 2, -3 }, { 1, 0, 1 } })
  -- torch.clamp_min(tensor([1, 5, -3]), tensor([0.5, 4, 10])) -> float32 [1, 5, 10]
  H.values(dl.clamp_min(i64({ 1, 5, -3 }), dl.tensor({ 0.5, 4, 10 })), { 1, 5, 10 }, { dtype = "float32" })
  -- torch.clamp_min(tensor([1., 5, nan]), tensor([nan, 4, 10])) -> [nan, 5, nan]
  H.values(dl.clamp_min(dl.tensor({ 1, 5, 0 / 0 }), dl.tensor({ 0 / 0, 4, 10 })), { 0 / 0, 5, 0 / 0 })
  local y = dl.tensor({ 1, 5, -3 })
  H.ok(rawequal(y:clamp_min_(i64({ 0, 4, 10 })), y))
  H.values(y, { 1, 5, 10 })
  -- torch: "result type Float can't be cast to the desired output type Long"; "output with shape [3] doesn't match"
  H.raises(function() return i64({ 1, 5, -3 }):clamp_min_(dl.tensor({ 0.5, 4, 10 })) end, "clamp_min_: result dtype float32")
  H.raises(function() return dl.tensor({ 1, 5, -3 }):clamp_max_(dl.ones(2, 3)) end, "clamp_max_: cannot broadcast shape (2, 3)")
  H.raises(function() return dl.tensor({ 1, 5, -3 }):clamp_min(dl.ones(2)) end, "clamp_min: x (3,) and the bound (2,) do not broadcast")
  H.raises(function() return dl.tensor({ 1 }):clamp_max("a") end, "clamp_max: expected a bound (a number or a tensor)")
  -- (a.clamp_min(b) * [1, 2, 3]).sum().backward() for a = [1, 4, -3], b = [0, 4, 10]: a [1, 2, 0], b [0, 0, 3];
  -- clamp_max: a [0, 2, 3], b [1, 0, 0]
  local a, b, w = dl.tensor({ 1, 4, -3 }), dl.tensor({ 0, 4, 10 }), dl.tensor({ 1, 2, 3 })
  local ga, gb = dl.grad(function(p, q) return (p:clamp_min(q) * w):sum() end, { 1, 2 })(a, b)
  H.values(ga, { 1, 2, 0 })
  H.values(gb, { 0, 0, 3 })
  ga, gb = dl.grad(function(p, q) return (p:clamp_max(q) * w):sum() end, { 1, 2 })(a, b)
  H.values(ga, { 0, 2, 3 })
  H.values(gb, { 1, 0, 0 })
end)

H.test("hsplit, vsplit, dsplit and split_with_sizes", function()
  local m = dl.arange(12):reshape(3, 4)
  -- torch.hsplit(m, [1, 3]) -> shapes (3, 1), (3, 2), (3, 1); torch.vsplit(m, 3) -> 3 of (1, 4)
  local h = dl.hsplit(m, { 1, 3 })
  H.eq(#h, 3)
  H.shape(h[1], { 3, 1 })
  H.shape(h[2], { 3, 2 })
  H.values(h[3], { { 3 }, { 7 }, { 11 } })
  local v = m:vsplit(3)
  H.eq(#v, 3)
  H.values(v[2], { { 4, 5, 6, 7 } })
  -- torch.hsplit(torch.arange(6.), 3) -> [0, 1], [2, 3], [4, 5]
  H.values(dl.hsplit(dl.arange(6), 3)[3], { 4, 5 })
  -- torch.dsplit(torch.arange(8.).reshape(1, 2, 4), [1]) -> [[[0], [4]]], [[[1, 2, 3], [5, 6, 7]]]
  local d = dl.dsplit(dl.arange(8):reshape(1, 2, 4), { 1 })
  H.values(d[1], { { { 0 }, { 4 } } })
  H.values(d[2], { { { 1, 2, 3 }, { 5, 6, 7 } } })
  local s = m:split_with_sizes({ 1, 2 })
  H.values(s[2], { { 4, 5, 6, 7 }, { 8, 9, 10, 11 } })
  H.shape(m:split_with_sizes({ 3, 1 }, 2)[2], { 3, 1 })
  -- torch: "torch.hsplit attempted to split along dimension 1, but the size of the dimension 4 is not
  -- divisible by the split_size 3!"; "torch.vsplit requires a tensor with at least 2 dimension"
  H.raises(function() return dl.hsplit(m, 3) end, "hsplit: dim 2 of size 4 does not divide into 3 equal sections")
  H.raises(function() return dl.vsplit(dl.arange(3), 1) end, "vsplit: expected a tensor of at least 2 dims")
  H.raises(function() return dl.dsplit(m, 1) end, "dsplit: expected a tensor of at least 3 dims")
  H.raises(function() return dl.hsplit(m, 0) end, "hsplit: the number of sections must be an integer >= 1")
  H.raises(function() return m:split_with_sizes({ 1, 1 }) end, "split_with_sizes: the sizes (1, 1) sum to 2, but dim 1 has size 3")
  H.raises(function() return m:split_with_sizes(2) end, "split_with_sizes: expected a list of sizes, got number")
end)

H.test("sum_to_size and fill_diagonal_", function()
  local m = dl.arange(12):reshape(3, 4)
  -- m.sum_to_size(1, 4), m.sum_to_size((3, 1)), m.sum_to_size(4)
  H.values(m:sum_to_size(1, 4), { { 12, 15, 18, 21 } })
  H.values(m:sum_to_size({ 3, 1 }), { { 6 }, { 22 }, { 38 } })
  H.values(m:sum_to_size(4), { 12, 15, 18, 21 })
  H.values(m:sum_to_size(1, 1), { { 66 } })
  H.ok(rawequal(m:sum_to_size(3, 4), m))
  H.values(dl.grad(function(t) return t:sum_to_size(1, 4):sum() end)(dl.ones(2, 4)), { { 1, 1, 1, 1 }, { 1, 1, 1, 1 } })
  -- torch: "size {[2, 4]} is not expandable to size {[3, 4]}."
  H.raises(function() return m:sum_to_size(2, 4) end, "sum_to_size: size (2, 4) is not expandable to size (3, 4)")
  -- torch.zeros(7, 3).fill_diagonal_(5, wrap=True): rows 1-3 and 5-7 hold the diagonal
  local z = dl.zeros(7, 3)
  H.ok(rawequal(z:fill_diagonal_(5, true), z))
  H.values(z, { { 5, 0, 0 }, { 0, 5, 0 }, { 0, 0, 5 }, { 0, 0, 0 }, { 5, 0, 0 }, { 0, 5, 0 }, { 0, 0, 5 } })
  H.values(dl.zeros(4, 3):fill_diagonal_(5), { { 5, 0, 0 }, { 0, 5, 0 }, { 0, 0, 5 }, { 0, 0, 0 } })
  -- torch.zeros(8, 2).fill_diagonal_(5, wrap=True)
  H.values(dl.zeros(8, 2):fill_diagonal_(5, true),
           { { 5, 0 }, { 0, 5 }, { 0, 0 }, { 5, 0 }, { 0, 5 }, { 0, 0 }, { 5, 0 }, { 0, 5 } })
  H.values(dl.zeros(3, 5):fill_diagonal_(1, true),
           { { 1, 0, 0, 0, 0 }, { 0, 1, 0, 0, 0 }, { 0, 0, 1, 0, 0 } })
  H.values(dl.zeros(2, 2, 2):fill_diagonal_(1), { { { 1, 0 }, { 0, 0 } }, { { 0, 0 }, { 0, 1 } } })
  -- torch.tensor([[1, 2], [3, 4]], dtype=torch.int32).fill_diagonal_(2.5) -> [[2, 2], [3, 2]]
  H.values(dl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "int32" }):fill_diagonal_(2.5), { { 2, 2 }, { 3, 2 } },
           { dtype = "int32" })
  H.raises(function() return dl.zeros(2, 3, 2):fill_diagonal_(1) end, "fill_diagonal_: all dims must be of equal length")
  H.raises(function() return dl.zeros(3):fill_diagonal_(1) end, "fill_diagonal_: expected a tensor of at least 2 dims")
  H.raises(function() return dl.zeros(2, 2):fill_diagonal_("a") end, "fill_diagonal_: expected a number for the fill value")
  H.raises(function() return dl.zeros(1, 2):expand({ 2, 2 }):fill_diagonal_(1) end, "fill_diagonal_: the in-place target")
end)

H.test("rsub, scalar_tensor and fill", function()
  -- torch.rsub(torch.tensor([1.5, -2, 3]), 1, alpha=2) -> [-2., 5., -5.]; torch.rsub([1, 2], [5, 5]) -> [4, 3]
  H.values(dl.rsub(dl.tensor({ 1.5, -2, 3 }), 1, { alpha = 2 }), { -2, 5, -5 })
  H.values(dl.rsub(i64({ 1, 2 }), i64({ 5, 5 })), { 4, 3 }, { dtype = "int64" })
  H.raises(function() return dl.rsub(dl.zeros(2), 1, { beta = 1 }) end, "rsub: unknown option 'beta'")
  H.raises(function() return dl.rsub(dl.zeros(2), "a") end, "rsub: expected a tensor or a number, got string")
  -- torch.scalar_tensor(3) -> tensor(3.) float32; torch.scalar_tensor(True) -> tensor(1.)
  H.values(dl.scalar_tensor(3), 3, { dtype = "float32", shape = {} })
  H.values(dl.scalar_tensor(true), 1, { dtype = "float32" })
  H.values(dl.scalar_tensor(2, { dtype = "int64" }), 2, { dtype = "int64" })
  H.raises(function() return dl.scalar_tensor("a") end, "scalar_tensor: expected a number, got string")
  -- torch.fill(torch.tensor([1, 2]), 2.7) -> [2, 2]
  H.values(dl.fill(i64({ 1, 2 }), 2.7), { 2, 2 }, { dtype = "int64" })
  H.values(dl.fill(dl.zeros(2, 1), dl.tensor(4)), { { 4 }, { 4 } })
  H.raises(function() return dl.fill(dl.zeros(2), dl.zeros(2)) end, "fill: the value must be a number or a 0-dim tensor")
end)

H.test("element_size, is_signed, is_nonzero, is_same_size, is_complex", function()
  -- torch's element_size() and is_signed() per dtype
  local want = { bool = { 1, false }, uint8 = { 1, false }, int32 = { 4, true }, int64 = { 8, true },
                 float16 = { 2, true }, bfloat16 = { 2, true }, float32 = { 4, true }, float64 = { 8, true } }
  for dtype, w in pairs(want) do
    local t = dl.zeros(1, { dtype = dtype })
    H.eq(t:element_size(), w[1], dtype)
    H.eq(t:is_signed(), w[2], dtype)
  end
  -- torch.tensor([0.]).is_nonzero() False; torch.tensor([nan]).is_nonzero() True
  H.eq(dl.tensor({ 0 }):is_nonzero(), false)
  H.eq(dl.is_nonzero(dl.tensor({ { 0 / 0 } })), true)
  H.eq(dl.tensor(true):is_nonzero(), true)
  H.raises(function() return dl.zeros(0):is_nonzero() end, "is_nonzero: the truth of a tensor of no values is ambiguous")
  H.raises(function() return dl.zeros(2):is_nonzero() end, "is_nonzero: the truth of a tensor of 2 values is ambiguous")
  H.eq(dl.zeros(2, 3):is_same_size(dl.ones(2, 3)), true)
  H.eq(dl.zeros(2, 3):is_same_size(dl.ones(3, 2)), false)
  H.eq(dl.zeros(2):is_same_size(dl.zeros(2, 1)), false)
  H.eq(dl.zeros(2):is_complex(), false)
  H.raises(function() return dl.zeros(2):is_same_size(3) end, "is_same_size: expected a tensor, got number")
end)

H.run()
