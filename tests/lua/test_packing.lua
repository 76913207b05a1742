-- dl.nn.utils.rnn: padding and packing batches of sequences of different lengths, and the
-- recurrent layers on packed batches, against PyTorch float64 (tests/ref/gen_breadth_refs.py,
-- gen_packed): outputs, final states and gradients.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.breadth_ref")
local nn, rnn = dl.nn, dl.nn.utils.rnn

local f64 = { dtype = "float64" }
local function t64(v) return dl.tensor(v, f64) end

H.test("LSTM, GRU and RNN on packed batches match PyTorch: outputs, final states, gradients", function()
  local made = {
    lstm_bi_2layer_unsorted = function() return nn.LSTM(3, 4, { num_layers = 2, bidirectional = true }) end,
    gru_sorted_batch_first = function() return nn.GRU(3, 5, { batch_first = true }) end,
    rnn_tanh_bi = function() return nn.RNN(3, 4, { bidirectional = true }) end,
  }
  local seen = 0
  for name, c in pairs(R.packed) do
    local net = made[name]():to("float64")
    for k, v in pairs(c.params) do dl.no_grad(function() net[k]:copy_(t64(v)) end) end
    local x = t64(c.x)
    local function total(xx)
      local packed = rnn.pack_padded_sequence(xx, c.lengths, { batch_first = net.batch_first, enforce_sorted = c.sorted })
      local y, hn, cn = net(packed)
      local padded = rnn.pad_packed_sequence(y, { batch_first = true })
      local s = (padded * padded):sum() + hn:sum()
      if cn then s = s + cn:sum() end
      return s, padded, hn, cn, packed
    end
    local _, y, hn, cn, packed = total(x)
    H.near(packed.data:totable(), c.data, 0, name .. " packed data")
    H.values(packed.batch_sizes, c.batch_sizes, { dtype = "int64" })
    H.near(y:totable(), c.y, 1e-12, name .. " output")
    H.near(hn:totable(), c.hn, 1e-12, name .. " h_n")
    if c.cn then H.near(cn:totable(), c.cn, 1e-12, name .. " c_n") end
    H.near(dl.grad(function(xx) return (total(xx)) end)(x):totable(), c.gx, 1e-10, name .. " input gradient")
    local grads = dl.implicit_grad(function() return (total(x)) end)()
    local gw
    for _, p in ipairs(grads) do if rawequal(p[2], net[c.wname]) then gw = p[1] end end
    H.near(gw:totable(), c.gw, 1e-10, name .. " " .. c.wname)
    seen = seen + 1
  end
  H.eq(seen, 3)
end)

H.test("pad_sequence, pack_sequence and pad_packed_sequence round-trip, as PyTorch's", function()
  local a, b, c = dl.tensor({ { 1, 1 }, { 2, 2 }, { 3, 3 } }), dl.tensor({ { 4, 4 } }), dl.tensor({ { 5, 5 }, { 6, 6 } })
  local padded = rnn.pad_sequence({ a, b, c }, { batch_first = true, padding_value = -1 })
  H.shape(padded, { 3, 3, 2 })
  H.values(padded[2], { { 4, 4 }, { -1, -1 }, { -1, -1 } })
  local packed = rnn.pack_sequence({ a, b, c }, { enforce_sorted = false })
  H.values(packed.batch_sizes, { 3, 2, 1 }, { dtype = "int64" })
  H.values(packed.sorted_indices, { 1, 3, 2 }, { dtype = "int64" })
  H.values(packed.data:select(2, 1), { 1, 5, 4, 2, 6, 3 })   -- step by step, longest first
  local back, lengths = rnn.pad_packed_sequence(packed, { total_length = 4 })
  H.shape(back, { 4, 3, 2 })
  H.values(lengths, { 3, 1, 2 }, { dtype = "int64" })
  H.ok(dl.equal(back:narrow(1, 1, 3):transpose(1, 2), rnn.pad_sequence({ a, b, c }, { batch_first = true })))
  H.eq(tostring(packed), "PackedSequence(data: (6, 2), batch_sizes: (3,))")
  -- an LSTM's final state of each sequence is the one at its own last step
  dl.manual_seed(4)
  local lstm = nn.LSTM(2, 3)
  local _, hn = lstm(packed)
  local _, h_b = lstm(b:unsqueeze(2))
  H.near(hn[1][2]:totable(), h_b[1][1]:totable(), 1e-6)
end)

H.test("packing checks its inputs, naming the function", function()
  local x = dl.zeros(4, 2, 3)
  H.raises(function() rnn.pack_padded_sequence(x, { 2, 3 }) end,
           "pack_padded_sequence: the lengths must be sorted longest first (or give enforce_sorted = false), got 2, 3")
  H.raises(function() rnn.pack_padded_sequence(x, { 5, 3 }) end,
           "pack_padded_sequence: length 1 is 5, longer than the input's 4 steps")
  H.raises(function() rnn.pack_padded_sequence(x, { 3 }) end, "pack_padded_sequence: expected 2 lengths (one per sequence), got 1")
  H.raises(function() rnn.pack_padded_sequence(x, { 3, 0 }) end, "pack_padded_sequence: length 2 must be an integer >= 1, got 0")
  H.raises(function() rnn.pad_packed_sequence(x) end, "pad_packed_sequence: expected a PackedSequence")
  H.raises(function() rnn.pad_packed_sequence(rnn.pack_padded_sequence(x, { 3, 2 }), { total_length = 2 }) end,
           "pad_packed_sequence: total_length must be an integer >= the longest length 3, got 2")
  H.raises(function() rnn.pad_sequence({ dl.zeros(2, 3), dl.zeros(2, 4) }) end,
           "pad_sequence: sequence 2 of float32 (2, 4) does not match sequence 1's float32 (2, 3) past its length")
  H.raises(function() rnn.pad_sequence({}) end, "pad_sequence: expected a non-empty list of tensors")
  H.raises(function() rnn.pack_sequence(nil) end, "pack_sequence: expected a non-empty list of tensors")
  H.raises(function() rnn.pack_padded_sequence(dl.ones(3, 0, 2), {}) end, "pack_padded_sequence: cannot pack an empty batch")
  H.raises(function() rnn.pad_sequence({ dl.tensor(1) }) end, "pad_sequence: expected sequences of at least 1 dim")
  H.raises(function() nn.RNN(2, 4)(rnn.pack_sequence({ dl.ones(3), dl.ones(2) })) end,
           "RNN: expected a PackedSequence of (steps, input_size) data, got shape (5,)")
end)

H.run()
