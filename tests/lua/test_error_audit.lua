-- Audit of error messages from Lua: every op of the op table (tensor/ops.def), fed bad
-- inputs, must raise a message that names the op and the offending shapes, dtypes or
-- devices, raised at the script's line (not inside the library), and leave the runtime
-- usable. The pointwise and reduction families are audited by looping over the table;
-- every other op needs an entry in OTHER below, and the test fails for an op that has
-- none, so a new op cannot skip the audit.
local H = require("harness")
local dl = require("dlua")
local core = require("dlua.core")
local F = dl.nn.functional

local SRC = debug.getinfo(1, "S").short_src

-- fn must raise; the message must hold every string of `parts` and point at this file.
local function audit(label, fn, parts)
  local ok, err = pcall(fn)
  if ok then error(label .. ": no error was raised", 2) end
  local msg = tostring(err)
  for _, p in ipairs(parts) do
    if not msg:find(p, 1, true) then
      error(("%s: the message does not name %q: %s"):format(label, p, msg), 2)
    end
  end
  if msg:sub(1, #SRC + 1) ~= SRC .. ":" then
    error(("%s: the error does not point at the script's line: %s"):format(label, msg), 2)
  end
  return msg
end

local FLAG_NO_BOOL, FLAG_INT_ONLY = 4, 16
local function has(flags, bit) return math.floor(flags / bit) % 2 == 1 end

local f23, f45 = dl.ones(2, 3), dl.ones(4, 5)
local bools = dl.tensor({ true, false })
local ints = dl.tensor({ 1, 2 }, { dtype = "int32" })

-- ---- the families, looping over the op table -------------------------------------------------

H.test("unary ops: a non-tensor argument, and bool where refused", function()
  local n = 0
  for _, op in ipairs(core.op_list) do
    if op.family == "unary" then
      local f = dl[op.name]
      audit(op.name .. "(string)", function() return f("x") end, { op.name .. ":", "string" })
      audit(op.name .. "(nil)", function() return f(nil) end, { op.name .. ":", "nil" })
      if has(op.flags, FLAG_INT_ONLY) then
        audit(op.name .. "(float)", function() return f(f23) end, { op.name .. ":", "integer", "float32" })
      end
      if has(op.flags, FLAG_NO_BOOL) then
        audit(op.name .. "(bool)", function() return f(bools) end, { op.name, "bool" })
        audit(op.name .. "_(bool)", function() return bools[op.name .. "_"](bools) end, { op.name, "bool" })
      end
      n = n + 1
    end
  end
  H.ok(n >= 15, "too few unary ops found: " .. n)
end)

H.test("binary ops: shapes that do not broadcast, bad operands, in-place dtype and shape", function()
  local n = 0
  for _, op in ipairs(core.op_list) do
    if op.family == "binary" then
      local f, name = dl[op.name], op.name
      audit(name .. " shapes", function() return f(f23, f45) end, { name .. ":", "(2, 3)", "(4, 5)" })
      audit(name .. " table operand", function() return f(f23, {}) end, { name .. ":", "table" })
      audit(name .. " string operand", function() return f("a", f23) end, { name .. ":", "string" })
      if has(op.flags, FLAG_NO_BOOL) then
        audit(name .. " bool", function() return f(bools, bools) end, { name, "bool" })
      end
      local inplace = f23[name .. "_"]
      -- (in-place forms may name the op as add or add_: both point at the call)
      audit(name .. "_ broadcast into a smaller tensor", function() return dl.ones(3)[name .. "_"](dl.ones(3), f23) end,
        { name, "(3,)", "(2, 3)" })
      audit(name .. "_ shapes", function() return inplace(dl.ones(2, 3), f45) end, { name, "(2, 3)", "(4, 5)" })
      if has(op.flags, FLAG_INT_ONLY) then
        -- (the bitwise ops, gcd and lcm: a float operand is refused before any other check)
        audit(name .. " float", function() return f(f23, f23) end, { name .. ":", "integer", "float32" })
        audit(name .. "_ float into int", function() return dl.tensor({ 1, 2 }, { dtype = "int32" })[name .. "_"](
          dl.tensor({ 1, 2 }, { dtype = "int32" }), dl.tensor({ 0.5, 1.5 })) end, { name .. ":", "integer", "float32" })
      elseif name ~= "div" and name ~= "atan2" and name ~= "pow" then
        audit(name .. "_ float into int", function() return dl.tensor({ 1, 2 }, { dtype = "int32" })[name .. "_"](
          dl.tensor({ 1, 2 }, { dtype = "int32" }), dl.tensor({ 0.5, 1.5 })) end, { name .. "_", "int32", "float32" })
      end
      n = n + 1
    end
  end
  H.ok(n >= 8, "too few binary ops found: " .. n)
end)

H.test("compare ops: shapes that do not broadcast, bad operands", function()
  local n = 0
  for _, op in ipairs(core.op_list) do
    if op.family == "compare" then
      local f, name = dl[op.name], op.name
      audit(name .. " shapes", function() return f(f23, f45) end, { name .. ":", "(2, 3)", "(4, 5)" })
      audit(name .. " table operand", function() return f(f23, {}) end, { name .. ":", "table" })
      n = n + 1
    end
  end
  H.ok(n >= 6, "too few comparisons found: " .. n)
end)

H.test("reductions: dims out of range, bad dims, bad options", function()
  local n = 0
  for _, op in ipairs(core.op_list) do
    if op.family == "reduce" then
      local f, name = dl[op.name], op.name
      audit(name .. " dim 4 of 2", function() return f(f23, 4) end, { name .. ":", "dimension 4", "2" })
      audit(name .. " dim -3 of 2", function() return f(f23, -3) end, { name .. ":", "-3" })
      audit(name .. " dim 1.5", function() return f(f23, 1.5) end, { name .. ":", "1.5" })
      audit(name .. " repeated dims", function() return f(f23, { 1, 1 }) end, { name .. ":", "1" })
      audit(name .. " unknown option", function() return f(f23, 1, { bogus = 1 }) end, { name .. ":", "bogus" })
      -- another reduction's option is as unknown (var's correction given to sum)
      local other = (name == "var" or name == "std") and "p" or "correction"
      audit(name .. " another's option", function() return f(f23, 1, { [other] = 0 }) end, { name .. ":", other })
      audit(name .. " non-tensor", function() return f("x") end, { name .. ":", "string" })
      n = n + 1
    end
  end
  H.ok(n >= 9, "too few reductions found: " .. n)
end)

-- ---- every other op, one entry each --------------------------------------------------------------
-- name -> list of {label, function, parts}; or {internal = why} for ops that scripts do not
-- call directly (their bad inputs are those of the op that calls them).

local x4 = dl.ones(1, 2, 5, 5)
local OTHER = {
  cumprod = {
    { "dim out of range", function() return dl.cumprod(f23, 3) end, { "cumprod", "dimension 3" } },
    { "no dim", function() return dl.cumprod(f23) end, { "cumprod", "dim" } },
  },
  sort = { { "dim out of range", function() return f23:sort(3) end, { "sort", "dimension 3" } },
           { "bool descending", function() return f23:sort(1, 1) end, { "sort", "descending" } } },
  nonzero = { { "not a tensor", function() return dl.nonzero(3) end, { "nonzero", "number" } } },
  searchsorted = {
    { "leading dims", function() return dl.searchsorted(dl.ones(2, 3), dl.ones(3, 1)) end,
      { "searchsorted", "(2, 3)", "(3, 1)" } },
    { "bool", function() return dl.searchsorted(dl.ones(3):gt(0), dl.ones(2)) end, { "searchsorted", "bool" } },
  },
  linalg_solve = {
    { "not square", function() return dl.linalg.solve(f23, dl.ones(2)) end, { "linalg.solve", "square", "(2, 3)" } },
    { "rows", function() return dl.linalg.solve(dl.eye(3), dl.ones(2, 1)) end, { "linalg.solve", "(3, 3)", "(2, 1)" } },
    { "singular", function() return dl.linalg.solve(dl.zeros(2, 2), dl.ones(2)) end, { "linalg.solve", "singular" } },
    { "batch", function() return dl.linalg.solve(dl.ones(2, 2, 2), dl.ones(3, 2, 1)) end,
      { "linalg.solve", "(2, 2, 2)", "(3, 2, 1)" } },
    { "not a tensor", function() return dl.linalg.solve(f23, 3) end, { "linalg.solve", "number" } },
  },
  solve_triangular = {
    { "no upper", function() return dl.linalg.solve_triangular(dl.eye(2), dl.ones(2, 1)) end,
      { "linalg.solve_triangular", "upper" } },
    { "vector B", function() return dl.linalg.solve_triangular(dl.eye(2), dl.ones(2), { upper = true }) end,
      { "linalg.solve_triangular", "(2,)" } },
  },
  cholesky = {
    { "not positive-definite", function() return dl.linalg.cholesky(dl.tensor({ { 1, 2 }, { 2, 1 } })) end,
      { "linalg.cholesky", "positive-definite", "order 2" } },
    { "batch element", function() return dl.linalg.cholesky(dl.stack({ dl.eye(2), -dl.eye(2) })) end,
      { "linalg.cholesky", "matrix 2 of the batch" } },
    { "vector", function() return dl.linalg.cholesky(dl.ones(3)) end, { "linalg.cholesky", "(3,)" } },
  },
  qr = { { "mode", function() return dl.linalg.qr(f23, { mode = "full" }) end, { "linalg.qr", "full" } },
         { "vector", function() return dl.linalg.qr(dl.ones(3)) end, { "linalg.qr", "(3,)" } } },
  eigh = { { "not square", function() return dl.linalg.eigh(f23) end, { "linalg.eigh", "(2, 3)" } },
           { "UPLO", function() return dl.linalg.eigh(dl.eye(2), { UPLO = "X" }) end, { "linalg.eigh", "UPLO" } } },
  svd = { { "vector", function() return dl.linalg.svd(dl.ones(3)) end, { "linalg.svd", "(3,)" } },
          { "option", function() return dl.linalg.svd(f23, { full = true }) end, { "linalg.svd", "full" } } },
  slogdet = { { "not square", function() return dl.linalg.slogdet(f23) end, { "linalg.slogdet", "(2, 3)" } } },
  max_dim = { { "dim out of range", function() return f23:max(3) end, { "max", "dimension 3" } } },
  min_dim = { { "dim out of range", function() return f23:min(-3) end, { "min", "-3" } } },
  argmax = { { "dim out of range", function() return f23:argmax(5) end, { "argmax", "dimension 5" } } },
  argmin = { { "dim out of range", function() return f23:argmin(5) end, { "argmin", "dimension 5" } } },
  softmax = { { "dim out of range", function() return dl.softmax(f23, 3) end, { "softmax", "dimension 3" } } },
  cumsum = {
    { "dim out of range", function() return dl.cumsum(f23, 3) end, { "cumsum", "dimension 3" } },
    { "no dim", function() return dl.cumsum(f23) end, { "cumsum", "dim" } },
  },
  fft_c2c = {
    { "not pairs", function() return dl.fft.fft(f23:view(3, 2, 1)) end, { "fft.fft", "pairs in a last dim of 2" } },
    { "dim out of range", function() return dl.fft.ifft(f23:view(3, 2), nil, 2) end, { "fft.ifft", "dim 2" } },
    { "length 0", function() return dl.fft.fft(dl.zeros(0, 2)) end, { "fft", "length 0" } },
    { "bad norm", function() return dl.fft.rfft(f23, { norm = "none" }) end, { "fft.rfft", "norm" } },
  },
  fft_r2c = {
    { "length 0", function() return dl.fft.rfft(dl.zeros(4, 0)) end, { "rfft", "length 0" } },
    { "0 dims", function() return dl.fft.rfft(dl.tensor(1.5)) end, { "fft.rfft", "0-dim" } },
  },
  fft_c2r = {
    { "not pairs", function() return dl.fft.irfft(f23) end, { "fft.irfft", "pairs in a last dim of 2" } },
    { "n below 1", function() return dl.fft.irfft(f23:view(3, 2), 0) end, { "fft.irfft", "n must be" } },
  },
  log_softmax = { { "dim out of range", function() return dl.log_softmax(f23, 3) end,
                    { "log_softmax", "dimension 3" } } },
  where = {
    { "shapes", function() return dl.where(dl.ones(2, 3):gt(0), f23, f45) end, { "where", "(2, 3)", "(4, 5)" } },
    { "non-tensor condition", function() return dl.where("x", f23, f23) end, { "where", "string" } },
  },
  clamp = { { "bool input", function() return bools:clamp(0, 1) end, { "clamp", "bool" } } },
  masked_fill = {
    { "non-bool mask", function() return f23:masked_fill(f23, 0) end, { "masked_fill", "float32" } },
    { "mask shape", function() return f23:masked_fill(dl.ones(4, 5):gt(0), 0) end,
      { "masked_fill", "(4, 5)" } },
  },
  matmul = {
    { "inner sizes", function() return f23:matmul(f45) end, { "matmul", "(2, 3)", "(4, 5)" } },
    { "bool", function() return bools:matmul(bools) end, { "matmul", "bool" } },
    { "0-dim", function() return dl.tensor(1):matmul(f23) end, { "matmul", "()" } },
  },
  to = { { "unknown dtype", function() return f23:to("float16x") end, { "float16x" } },
         { "unknown device", function() return f23:to("tpu") end, { "tpu" } } },
  contiguous = { { "non-tensor", function() return dl.ones(2).contiguous("x") end, { "contiguous", "string" } } },
  view = { { "numel", function() return f23:view(4) end, { "view", "(4,)", "6" } },
           { "strides", function() return f23:t():view(6) end, { "view", "(3, 2)" } } },
  transpose = { { "dim out of range", function() return f23:transpose(1, 3) end, { "transpose", "dimension 3" } } },
  permute = { { "not a permutation", function() return f23:permute(1, 1) end, { "permute", "dim 1 appears twice" } },
              { "count", function() return f23:permute(1) end, { "permute", "2" } } },
  narrow = { { "past the end", function() return f23:narrow(2, 3, 2) end, { "narrow", "3" } } },
  slice = { { "dim out of range", function() return f23:slice(3, 1, 1) end, { "slice", "dimension 3" } },
            { "step", function() return f23:slice(1, 1, 2, 0) end, { "slice", "step" } } },
  select = { { "index", function() return f23:select(1, 3) end, { "select", "index 3" } } },
  expand = { { "shape", function() return f23:expand(4, 3) end, { "expand", "(2, 3)", "(4, 3)", "dimension 1" } } },
  squeeze = { { "dim out of range", function() return f23:squeeze(3) end, { "squeeze", "dimension 3" } } },
  unsqueeze = { { "dim out of range", function() return f23:unsqueeze(4) end, { "unsqueeze", "dimension 4" } } },
  cat = { { "shapes", function() return dl.cat({ f23, f45 }, 1) end,
            { "cat", "(2, 3)", "(4, 5)", "dimension 1", "tensor 1", "tensor 2" } },
          { "empty list", function() return dl.cat({}) end, { "cat" } },
          { "dtypes mixed with bool", function() return dl.cat({ dl.ones(2), bools, "x" }) end, { "cat", "string" } } },
  stack = { { "shapes", function() return dl.stack({ f23, f45 }) end,
              { "stack", "(2, 3)", "(4, 5)", "tensor 1", "tensor 2" } } },
  index_select = {
    { "float index", function() return f23:index_select(1, dl.ones(2)) end, { "index_select", "float32" } },
    { "index out of range", function() return f23:index_select(1, dl.tensor({ 3 }, { dtype = "int64" })) end,
      { "index_select", "3" } },
  },
  gather = {
    { "float index", function() return f23:gather(1, dl.ones(2, 3)) end, { "gather", "float32" } },
    { "index out of range", function() return f23:gather(2, dl.tensor({ { 4 } }, { dtype = "int64" })) end,
      { "gather", "4" } },
  },
  scatter_add = {
    { "src dtype", function() return f23:scatter_add(1, dl.tensor({ { 1 } }, { dtype = "int64" }), ints:view(1, 2)) end,
      { "scatter_add", "int32", "float32" } },
  },
  copy_ = { { "shapes", function() return f23:copy_(f45) end, { "copy_", "(4, 5)", "(2, 3)" } } },
  conv2d = {
    { "channels", function() return F.conv2d(x4, dl.ones(3, 4, 3, 3)) end, { "conv2d", "(1, 2, 5, 5)", "(3, 4, 3, 3)" } },
    { "bias size", function() return F.conv2d(x4, dl.ones(3, 2, 3, 3), dl.ones(4)) end, { "conv2d", "(4,)" } },
    { "3-D weight", function() return F.conv2d(x4, dl.ones(3, 2, 3)) end, { "conv2d", "(3, 2, 3)" } },
  },
  conv2d_input_grad = { internal = "the backward of conv2d (and the forward of conv_transpose2d)" },
  conv2d_weight_grad = { internal = "the backward of conv2d" },
  max_pool2d = {
    { "kernel larger than the input", function() return F.max_pool2d(x4, 7) end, { "max_pool2d", "7" } },
    { "2-D input", function() return F.max_pool2d(f23, 2) end, { "max_pool2d", "(2, 3)" } },
  },
  max_pool2d_backward = { internal = "the backward of max_pool2d" },
  avg_pool2d = { { "2-D input", function() return F.avg_pool2d(f23, 2) end, { "avg_pool2d", "(2, 3)" } },
                 { "padding over half the kernel", function() return F.avg_pool2d(x4, 2, { padding = 2 }) end,
                   { "avg_pool2d", "padding" } } },
  avg_pool2d_backward = { internal = "the backward of avg_pool2d" },
  dropout = { { "probability", function() return F.dropout(f23, 1.5) end, { "dropout", "1.5" } } },
  batch_norm = {
    { "running stats shape", function() return F.batch_norm(x4, dl.zeros(3), dl.ones(3)) end,
      { "batch_norm", "(3,)" } },
    { "1-D input", function() return F.batch_norm(dl.ones(4), nil, nil, nil, nil, true) end,
      { "batch_norm", "(4,)" } },
  },
  layer_norm = {
    { "weight shape", function() return F.layer_norm(f23, 3, dl.ones(2)) end, { "layer_norm", "(3,)", "(2,)" } },
    { "shape not at the end", function() return F.layer_norm(f23, { 2 }) end, { "layer_norm", "(2,)", "(2, 3)" } },
    { "integer input", function() return F.layer_norm(dl.ones(2, 3, { dtype = "int64" }), 3) end, { "layer_norm", "int64" } },
  },
  lstm_gates = {
    { "gates not 4 H wide", function() return F.lstm_gates(dl.ones(2, 7), dl.ones(2, 2)) end,
      { "lstm_gates", "(2, 7)", "(2, 2)" } },
    { "leading dims", function() return F.lstm_gates(dl.ones(3, 8), dl.ones(2, 2)) end,
      { "lstm_gates", "(3, 8)", "(2, 2)" } },
    { "0-dim cell state", function() return F.lstm_gates(dl.ones(4), dl.tensor(1)) end, { "lstm_gates", "()" } },
    { "not a tensor", function() return F.lstm_gates(dl.ones(2, 8), 2) end, { "lstm_gates", "number" } },
  },
  embedding = {
    { "float indices", function() return F.embedding(dl.ones(2), dl.ones(5, 3)) end, { "embedding", "float32" } },
    { "index out of range", function() return F.embedding(dl.tensor({ 6 }, { dtype = "int64" }), dl.ones(5, 3)) end,
      { "embedding", "6" } },
    -- 2^63 - 1 (int64 wraps around): named exactly, not through a double (fuzz_ops)
    { "index 2^63 - 1", function() return F.embedding(dl.tensor({ 2 ^ 62 }, { dtype = "int64" }) * 2 - 1, dl.ones(5, 3)) end,
      { "embedding", "index 9223372036854775807 is out of range" } },
  },
  cross_entropy = {
    { "batch sizes", function() return dl.nn.cross_entropy(dl.ones(3, 4), dl.tensor({ 1, 2 }, { dtype = "int64" })) end,
      { "cross_entropy", "(3, 4)", "(2,)" } },
    { "label out of range", function() return dl.nn.cross_entropy(dl.ones(2, 4), dl.tensor({ 1, 5 }, { dtype = "int64" })) end,
      { "cross_entropy", "5" } },
    { "label 2^63 - 1", function() return dl.nn.cross_entropy(dl.ones(1, 4), dl.tensor({ 2 ^ 62 }, { dtype = "int64" }) * 2 - 1) end,
      { "cross_entropy", "class label 9223372036854775807 is out of range" } },
    { "float labels", function() return dl.nn.cross_entropy(dl.ones(2, 4), dl.ones(2)) end,
      { "cross_entropy", "float32" } },
  },
}

H.test("every other op: bad inputs named, one entry per op of the table", function()
  local missing, failures, n = {}, {}, 0
  for _, op in ipairs(core.op_list) do
    if op.family == "other" then
      local cases = OTHER[op.name]
      if not cases then
        missing[#missing + 1] = op.name
      elseif not cases.internal then
        for _, c in ipairs(cases) do
          -- every case runs, and all the failures are reported together
          local ok, err = pcall(audit, op.name .. ": " .. c[1], c[2], c[3])
          if not ok then failures[#failures + 1] = tostring(err) end
          n = n + 1
        end
      end
    end
  end
  H.ok(#failures == 0, #failures .. " cases failed:\n" .. table.concat(failures, "\n"))
  H.ok(#missing == 0, "ops of the table without an audit entry: " .. table.concat(missing, ", "))
  for name in pairs(OTHER) do
    H.ok(core.ops[name] ~= nil, "the audit names an op the table no longer has: " .. name)
  end
  H.ok(n >= 40, "too few cases ran: " .. n)
end)

-- Dims and list positions in messages count from 1, as the script wrote them (the
-- engine counts from 0; Note [Positions in messages] in tensor/error.h).
H.test("the functions and layers made in Lua of several ops name themselves, at the script's line", function()
  local nn = dl.nn
  local x4 = dl.randn(1, 2, 3, 4)
  local CASES = {
  { "interpolate", function() local _ = F.interpolate(x4, {size = "a"}) end },
  { "interpolate", function() local _ = F.interpolate(x4, {scale_factor = {1, "b"}}) end },
  { "interpolate", function() local _ = F.interpolate("x", {size = 2}) end },
  { "multinomial", function() local _ = dl.multinomial(dl.ones(3), 1.5) end },
  { "multinomial", function() local _ = dl.multinomial(dl.ones(2, 2, 2), 1) end },
  { "histc", function() local _ = dl.histc(dl.ones(3), "a") end },
  { "grid_sample", function() local _ = F.grid_sample(x4, dl.zeros(2, 2, 2, 2)) end },
  { "grid_sample", function() local _ = F.grid_sample(x4, dl.zeros(1, 2, 2, 2), {padding_mode = "wrap"}) end },
  { "affine_grid", function() local _ = F.affine_grid(dl.zeros(1, 2, 3), {1, 2}) end },
  { "index_add", function() local _ = dl.zeros(3):index_add(1, {5}, dl.ones(1)) end },
  { "index_fill", function() local _ = dl.zeros(3):index_fill(1, "a", 1) end },
  { "scatter", function() local _ = dl.zeros(2, 2):scatter(1, dl.tensor({{1.5, 1}}), 1) end },
  { "conv_transpose2d", function() local _ = F.conv_transpose2d(x4, dl.zeros(3, 2, 2, 2)) end },
  { "pixel_shuffle", function() local _ = F.pixel_shuffle(x4, 0) end },
  { "unfold", function() local _ = F.unfold(x4, 5) end },
  { "fold", function() local _ = F.fold(dl.zeros(1, 4, 3), {0, 2}, 2) end },
  { "embedding_bag", function() local _ = F.embedding_bag(dl.tensor({{1, 9}}, {dtype = "int64"}), dl.zeros(3, 2)) end },
  { "bilinear", function() local _ = F.bilinear(dl.ones(2, 3), dl.ones(2, 4), dl.ones(2, 3, 5)) end },
  { "median", function() local _ = dl.ones(2, 3):median(3) end },
  { "tensordot", function() local _ = dl.tensordot(dl.ones(2), dl.ones(2), "x") end },
  { "kron", function() local _ = dl.kron("a", dl.ones(2)) end },
  { "lerp", function() local _ = dl.lerp(dl.ones(2), dl.ones(3), 0.5) end },
  { "fmod", function() local _ = dl.fmod(dl.ones(2), "z") end },
  { "bincount", function() local _ = dl.bincount(dl.ones(3)) end },
  { "cross", function() local _ = dl.cross(dl.ones(3), dl.ones(3), 2) end },
  { "diag", function() local _ = dl.diag(dl.ones(2, 2), 1.5) end },
  { "rot90", function() local _ = dl.ones(2, 2):rot90(1, {1, 5}) end },
  { "instance_norm", function() local _ = F.instance_norm(dl.ones(2, 3)) end },
  { "adaptive_avg_pool2d", function() local _ = F.adaptive_avg_pool2d(x4, {0, 2}) end },
  { "random_split", function() local _ = dl.data.random_split(dl.data.from_tensors(dl.ones(4)), {0.5, "x"}) end },
  { "SequentialLR", function() local o = dl.optim.SGD{lr = 1} local _ = dl.optim.SequentialLR(o, {}, {}) end },
  { "index", function() local _ = x4[{{1, 2, 3, 4, 5}}] end },
  { "cosine_similarity", function() local _ = F.cosine_similarity(dl.ones(2, 3), dl.ones(2, 4)) end },
  { "triplet_margin_loss", function() local _ = nn.triplet_margin_loss(dl.ones(2, 3), dl.ones(2, 4), dl.ones(2, 3)) end },
  { "gumbel_softmax", function() local _ = F.gumbel_softmax(dl.ones(2), {tau = "t"}) end },
  { "Transformer", function() local _ = nn.Transformer(8, 3) end },
  -- an option of another function of the family is an error, not dropped
  { "max_pool2d", function() local _ = F.max_pool2d(x4, 2, {count_include_pad = false}) end },
  { "avg_pool1d", function() local _ = F.avg_pool1d(dl.ones(1, 2, 4), 2, {return_indices = true}) end },
  { "MaxPool2d", function() local _ = nn.MaxPool2d(2, {count_include_pad = true}) end },
  { "mse_loss", function() local _ = nn.mse_loss(dl.ones(2), dl.ones(2), {weight = dl.ones(2)}) end },
  { "huber_loss", function() local _ = nn.huber_loss(dl.ones(2), dl.ones(2), {beta = 1}) end },
  { "CrossEntropyLoss", function() local _ = nn.CrossEntropyLoss({margin = 1}) end },
  { "ZeroPad2d", function() local _ = nn.ZeroPad2d(1.5) end },
  { "from_list", function() local _ = dl.data.from_list({ 1 }, { tupl = true }) end },
  { "summary.writer", function() local _ = dl.summary.writer(os.tmpname() .. ".d", { suffix = "x" }) end },
  }
  for _, c in ipairs(CASES) do audit(c[1], c[2], { c[1] }) end
  -- an infinite size or count is refused, not looped over
  local huge = math.huge
  for _, c in ipairs({
    { "adaptive_max_pool2d", function() local _ = F.adaptive_max_pool2d(x4, huge) end },
    { "interpolate", function() local _ = F.interpolate(x4, { size = huge }) end },
    { "histc", function() local _ = dl.histc(dl.ones(2), huge) end },
    { "combinations", function() local _ = dl.combinations(dl.ones(3), huge) end },
    { "unfold", function() local _ = dl.ones(4):unfold(1, huge, 1) end },
    { "index", function() local _ = x4[{ huge }] end },
  }) do
    audit(c[1], c[2], { c[1] })
  end
  H.eq(dl.ones(2):sum():item(), 2)
end)

H.test("positions in messages count from 1, as in the script", function()
  local i64 = function(t) return dl.tensor(t, { dtype = "int64" }) end
  local cases = {
    { "gather", function() return f23:gather(1, i64({ { 1, 1, 1, 1 } })) end,
      { "at dimension 2", "only dimension 1 may be larger" } },
    { "scatter_add", function() return f23:scatter_add(1, i64({ { 1, 1 } }), dl.ones(1, 1)) end,
      { "src of shape (1, 1) at dimension 2" } },
    { "amax over an empty dim", function() return dl.ones(3, 0):amax(2) end, { "dimension 2 of size 0" } },
    { "max over an empty dim", function() return dl.ones(0, 3):max(1) end, { "dimension 1 of size 0" } },
    { "expand -1 in a new dim", function() return f23:expand(-1, 2, 3) end, { "new leading dimension 1" } },
    { "expand -2", function() return f23:expand(2, -2) end, { "at dimension 2" } },
    { "flatten", function() return f23:flatten(2, 1) end, { "start_dim 2 cannot come after end_dim 1" } },
    { "cat of 0-dim", function() return dl.cat({ dl.tensor(1) }) end, { "position 1" } },
    { "permute", function() return f23:permute(2, 2) end, { "dim 2 appears twice" } },
  }
  for _, c in ipairs(cases) do audit(c[1], c[2], c[3]) end
end)

-- ---- devices -------------------------------------------------------------------------------------

H.test("devices: unknown and unavailable devices are named", function()
  audit("zeros on tpu", function() return dl.zeros(2, { device = "tpu" }) end, { "zeros", "tpu" })
  audit("ones on cuda:x", function() return dl.ones(2, { device = "cuda:x" }) end, { "ones", "cuda:x" })
  if not dl.cuda.is_available() then
    audit("to cuda without a GPU", function() return f23:to("cuda") end, { "cuda" })
    audit("tensor on cuda without a GPU", function() return dl.tensor({ 1 }, { device = "cuda" }) end, { "cuda" })
    return
  end
  -- With a GPU: ops that mix devices name both.
  local g = dl.ones(2, 3, { device = "cuda" })
  for _, op in ipairs(core.op_list) do
    if op.family == "binary" or op.family == "compare" then
      audit(op.name .. " across devices", function() return dl[op.name](f23, g) end, { op.name, "cpu", "cuda" })
    end
  end
  audit("matmul across devices", function() return f23:matmul(dl.ones(3, 2, { device = "cuda" })) end,
    { "matmul", "cpu", "cuda" })
  audit("cat across devices", function() return dl.cat({ f23, g }) end, { "cat", "cpu", "cuda" })
end)

H.test("the runtime is usable after every audited error", function()
  H.values(dl.ones(2, 2):matmul(dl.ones(2, 2)) + 1, { { 3, 3 }, { 3, 3 } })
  H.values(dl.grad(function(x) return (x * x):sum() end)(dl.tensor({ 1, 2 })), { 2, 4 })
end)

H.run()
