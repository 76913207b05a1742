-- Printing: print(x) / tostring(x) in PyTorch's format with shape and dtype
-- (docs/tensors.md, "Printing"). The expected strings come from PyTorch 1.13's own
-- formatter (torch._tensor_str._tensor_str and _add_suffixes) given the same values,
-- with our suffixes (shape=..., dtype=...) and bools spelt true/false.
local H = require("harness")
local dl = require("dlua")

local cases = {
  { "dl.tensor({{4}})", "tensor([[4.]], shape=(1, 1), dtype=float32)" },
  { "dl.arange(12):view(3, 4) / 7", "tensor([[0.0000, 0.1429, 0.2857, 0.4286],\n        [0.5714, 0.7143, 0.8571, 1.0000],\n        [1.1429, 1.2857, 1.4286, 1.5714]], shape=(3, 4), dtype=float32)" },
  { "dl.tensor({1e-5, 1})", "tensor([1.0000e-05, 1.0000e+00], shape=(2,), dtype=float32)" },
  { "dl.tensor({1e9, 1})", "tensor([1.0000e+09, 1.0000e+00], shape=(2,), dtype=float32)" },
  { "dl.tensor({123456, 0.5})", "tensor([1.2346e+05, 5.0000e-01], shape=(2,), dtype=float32)" },
  { "dl.tensor({0 / 0, 1, math.huge, -math.huge})", "tensor([nan, 1., inf, -inf], shape=(4,), dtype=float32)" },
  { "dl.zeros(2)", "tensor([0., 0.], shape=(2,), dtype=float32)" },
  { "dl.tensor({-1.5, 2.25, 3})", "tensor([-1.5000,  2.2500,  3.0000], shape=(3,), dtype=float32)" },
  { "dl.arange(2000):view(40, 50)", "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.7000e+01, 4.8000e+01,\n         4.9000e+01],\n        [5.0000e+01, 5.1000e+01, 5.2000e+01,  ..., 9.7000e+01, 9.8000e+01,\n         9.9000e+01],\n        [1.0000e+02, 1.0100e+02, 1.0200e+02,  ..., 1.4700e+02, 1.4800e+02,\n         1.4900e+02],\n        ...,\n        [1.8500e+03, 1.8510e+03, 1.8520e+03,  ..., 1.8970e+03, 1.8980e+03,\n         1.8990e+03],\n        [1.9000e+03, 1.9010e+03, 1.9020e+03,  ..., 1.9470e+03, 1.9480e+03,\n         1.9490e+03],\n        [1.9500e+03, 1.9510e+03, 1.9520e+03,  ..., 1.9970e+03, 1.9980e+03,\n         1.9990e+03]], shape=(40, 50), dtype=float32)" },
  { "dl.arange(1200)", "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.1970e+03, 1.1980e+03,\n        1.1990e+03], shape=(1200,), dtype=float32)" },
  { "dl.arange(24, {dtype = 'int64'}):view(2, 3, 4)", "tensor([[[ 0,  1,  2,  3],\n         [ 4,  5,  6,  7],\n         [ 8,  9, 10, 11]],\n\n        [[12, 13, 14, 15],\n         [16, 17, 18, 19],\n         [20, 21, 22, 23]]], shape=(2, 3, 4), dtype=int64)" },
  { "dl.tensor({true, false})", "tensor([ true, false], shape=(2,), dtype=bool)" },
  { "dl.tensor(3.5)", "tensor(3.5000, shape=(), dtype=float32)" },
  { "dl.tensor({100, -2000, 3})", "tensor([  100., -2000.,     3.], shape=(3,), dtype=float32)" },
  { "dl.arange(5000, {dtype = 'int64'}):view(10, 10, 50)", "tensor([[[   0,    1,    2,  ...,   47,   48,   49],\n         [  50,   51,   52,  ...,   97,   98,   99],\n         [ 100,  101,  102,  ...,  147,  148,  149],\n         ...,\n         [ 350,  351,  352,  ...,  397,  398,  399],\n         [ 400,  401,  402,  ...,  447,  448,  449],\n         [ 450,  451,  452,  ...,  497,  498,  499]],\n\n        [[ 500,  501,  502,  ...,  547,  548,  549],\n         [ 550,  551,  552,  ...,  597,  598,  599],\n         [ 600,  601,  602,  ...,  647,  648,  649],\n         ...,\n         [ 850,  851,  852,  ...,  897,  898,  899],\n         [ 900,  901,  902,  ...,  947,  948,  949],\n         [ 950,  951,  952,  ...,  997,  998,  999]],\n\n        [[1000, 1001, 1002,  ..., 1047, 1048, 1049],\n         [1050, 1051, 1052,  ..., 1097, 1098, 1099],\n         [1100, 1101, 1102,  ..., 1147, 1148, 1149],\n         ...,\n         [1350, 1351, 1352,  ..., 1397, 1398, 1399],\n         [1400, 1401, 1402,  ..., 1447, 1448, 1449],\n         [1450, 1451, 1452,  ..., 1497, 1498, 1499]],\n\n        ...,\n\n        [[3500, 3501, 3502,  ..., 3547, 3548, 3549],\n         [3550, 3551, 3552,  ..., 3597, 3598, 3599],\n         [3600, 3601, 3602,  ..., 3647, 3648, 3649],\n         ...,\n         [3850, 3851, 3852,  ..., 3897, 3898, 3899],\n         [3900, 3901, 3902,  ..., 3947, 3948, 3949],\n         [3950, 3951, 3952,  ..., 3997, 3998, 3999]],\n\n        [[4000, 4001, 4002,  ..., 4047, 4048, 4049],\n         [4050, 4051, 4052,  ..., 4097, 4098, 4099],\n         [4100, 4101, 4102,  ..., 4147, 4148, 4149],\n         ...,\n         [4350, 4351, 4352,  ..., 4397, 4398, 4399],\n         [4400, 4401, 4402,  ..., 4447, 4448, 4449],\n         [4450, 4451, 4452,  ..., 4497, 4498, 4499]],\n\n        [[4500, 4501, 4502,  ..., 4547, 4548, 4549],\n         [4550, 4551, 4552,  ..., 4597, 4598, 4599],\n         [4600, 4601, 4602,  ..., 4647, 4648, 4649],\n         ...,\n         [4850, 4851, 4852,  ..., 4897, 4898, 4899],\n         [4900, 4901, 4902,  ..., 4947, 4948, 4949],\n         [4950, 4951, 4952,  ..., 4997, 4998, 4999]]], shape=(10, 10, 50),\n       dtype=int64)" },
  { "dl.tensor({0.1, 0.25, 1000.5})", "tensor([1.0000e-01, 2.5000e-01, 1.0005e+03], shape=(3,), dtype=float32)" },
  { "dl.tensor({{1e-8, 0}, {3, 2}})", "tensor([[1.0000e-08, 0.0000e+00],\n        [3.0000e+00, 2.0000e+00]], shape=(2, 2), dtype=float32)" },
  { "dl.tensor({2 ^ 60, -3})", "tensor([ 1.1529e+18, -3.0000e+00], shape=(2,), dtype=float32)" },
  { "dl.arange(30):view(1, 30) * 1.5", "tensor([[ 0.0000,  1.5000,  3.0000,  4.5000,  6.0000,  7.5000,  9.0000, 10.5000,\n         12.0000, 13.5000, 15.0000, 16.5000, 18.0000, 19.5000, 21.0000, 22.5000,\n         24.0000, 25.5000, 27.0000, 28.5000, 30.0000, 31.5000, 33.0000, 34.5000,\n         36.0000, 37.5000, 39.0000, 40.5000, 42.0000, 43.5000]], shape=(1, 30),\n       dtype=float32)" },
  { "dl.tensor({1 / 3, 2 / 3}, {dtype = 'float64'})", "tensor([0.3333, 0.6667], shape=(2,), dtype=float64)" },
  { "dl.tensor({-5, 10, 200}, {dtype = 'int32'})", "tensor([ -5,  10, 200], shape=(3,), dtype=int32)" },
  { "dl.tensor({0, 7, 255}, {dtype = 'uint8'})", "tensor([  0,   7, 255], shape=(3,), dtype=uint8)" },
  { "dl.zeros(2, 600)", "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n        [0., 0., 0.,  ..., 0., 0., 0.]], shape=(2, 600), dtype=float32)" },
  { "dl.arange(9) / 7", "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429],\n       shape=(9,), dtype=float32)" },
  { "dl.tensor({{-0.5}})", "tensor([[-0.5000]], shape=(1, 1), dtype=float32)" },
  { "dl.tensor({1, 2}, {dtype = 'int64'}):view(2, 1, 1)", "tensor([[[1]],\n\n        [[2]]], shape=(2, 1, 1), dtype=int64)" },
}

H.test("tostring matches PyTorch's format", function()
  for _, c in ipairs(cases) do
    local f = assert(loadstring("local dl, math = ... return " .. c[1]))
    local got = tostring(f(dl, math))
    if got ~= c[2] then
      error("tostring(" .. c[1] .. "):\nexpected:\n" .. c[2] .. "\ngot:\n" .. got, 0)
    end
  end
end)

H.test("print, concatenation, devices", function()
  local x = dl.tensor({ 1, 2 })
  H.eq("x = " .. x, "x = tensor([1., 2.], shape=(2,), dtype=float32)")
  H.eq(x .. "!", "tensor([1., 2.], shape=(2,), dtype=float32)!")
  H.eq(tostring(dl.zeros(0, 3)), "tensor([], shape=(0, 3), dtype=float32)")
  H.eq(tostring(dl.tensor({}, { dtype = "int64" })), "tensor([], shape=(0,), dtype=int64)")
  H.eq(tostring(dl.tensor(true)), "tensor(true, shape=(), dtype=bool)")
  H.eq(tostring(dl.tensor(-7, { dtype = "int64" })), "tensor(-7, shape=(), dtype=int64)")
  -- a non-contiguous view prints its own values
  H.eq(tostring(dl.tensor({ { 1, 2 }, { 3, 4 } }):t()), "tensor([[1., 3.],\n        [2., 4.]], shape=(2, 2), dtype=float32)")
end)

H.test("printing survives a script replacing string functions", function()
  local saved = { format = string.format, rep = string.rep, concat = table.concat }
  string.format = error
  string.rep = error
  table.concat = error
  local ok, s = pcall(tostring, dl.arange(2000):view(40, 50))
  string.format, string.rep, table.concat = saved.format, saved.rep, saved.concat
  H.ok(ok, tostring(s))
  H.ok(string.find(s, "shape=(40, 50)", 1, true) ~= nil)
  H.ok(not string.find(tostring(dl.ones(4)), "0x"), "no address in tostring")
end)

H.test("set_printoptions: precision, sci_mode, threshold and edgeitems, profiles, errors", function()
  local x = dl.tensor({ 1.123456, 2.5, 300.25 })
  dl.set_printoptions({ precision = 2 })
  H.eq(tostring(x), "tensor([  1.12,   2.50, 300.25], shape=(3,), dtype=float32)")
  dl.set_printoptions({ sci_mode = true })
  H.eq(tostring(x), "tensor([1.12e+00, 2.50e+00, 3.00e+02], shape=(3,), dtype=float32)")
  dl.set_printoptions({ profile = "default" })
  H.eq(tostring(x), "tensor([  1.1235,   2.5000, 300.2500], shape=(3,), dtype=float32)")
  dl.set_printoptions({ threshold = 5, edgeitems = 1 })
  H.eq(tostring(dl.arange(10, { dtype = "int64" })), "tensor([0,  ..., 9], shape=(10,), dtype=int64)")   -- (PyTorch's two spaces)
  dl.set_printoptions({ profile = "full" })
  H.ok(not tostring(dl.arange(2000)):find("...", 1, true))
  dl.set_printoptions({ profile = "default" })
  H.eq(dl.get_printoptions().precision, 4)
  H.raises(function() dl.set_printoptions({ precision = -1 }) end, "set_printoptions: precision must be an integer >= 0, got -1")
  H.raises(function() dl.set_printoptions({ profile = "long" }) end, "set_printoptions: profile must be default, short or full")
  H.raises(function() dl.set_printoptions({ digits = 2 }) end, "set_printoptions: unknown option 'digits'")
end)

-- int64 values past 2^53 print exactly (a double would round them), summarised too
H.test("int64 values past 2^53 print exactly", function()
  local w = dl.full({ 3 }, 2 ^ 62, { dtype = "int64" }) + dl.tensor({ 1, -3, 5 }, { dtype = "int64" })
  w[2] = -2 ^ 63
  H.eq(tostring(w), "tensor([ 4611686018427387905, -9223372036854775808,  4611686018427387909],\n       shape=(3,), dtype=int64)")
  local big = dl.arange(2000, { dtype = "int64" }) + (2 ^ 60 + 2 ^ 10)
  -- (torch.arange(2000) + 2**60 + 2**10, as PyTorch prints it)
  H.eq(tostring(big), "tensor([1152921504606848000, 1152921504606848001, 1152921504606848002,\n"
                   .. "         ..., 1152921504606849997, 1152921504606849998,\n"
                   .. "        1152921504606849999], shape=(2000,), dtype=int64)")
end)

H.run()
