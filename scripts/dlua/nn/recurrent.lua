-- dlua.nn.recurrent: the recurrent cells (RNNCell, LSTMCell, GRUCell: one step) and
-- layers over a whole sequence (RNN, LSTM, GRU: several layers, either direction), as
-- PyTorch's: the same shapes, gate orders, parameter names (weight_ih_l0,
-- weight_hh_l1_reverse, ...) and initialisation U(-1/sqrt(hidden), 1/sqrt(hidden)), so
-- that a state dict moves between the two.
--
--   local lstm = dl.nn.LSTM(32, 64, {num_layers = 2, batch_first = true})
--   local out, h, c = lstm(x)          -- x (N, L, 32): out (N, L, 64), h and c (2, N, 64)
--
-- A layer projects its whole input sequence through weight_ih in one product, then runs
-- the recurrence step by step (the product with weight_hh and the gates), which is
-- what PyTorch's CPU path does too; the steps are the cells' own.
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local F = require("dlua.nn.functional")
local L = require("dlua.nn.layers")
core.own_source()

local raise, options = core.raise, core.options
local is_tensor, shape_str, meta = T.is_tensor, T.shape_str, T.meta
local dl = T.dl
local type, tostring, ipairs = type, tostring, ipairs
local sqrt = math.sqrt
local fmt = Module.format_args
local int_arg, param, uniform = L.int_arg, L.param, L.uniform

local R = {}

-- ---- one step ------------------------------------------------------------------------------------
-- gi: the input's projection x W_ih^T + b_ih, h (and c): the state. Gates in PyTorch's
-- order: LSTM i, f, g, o; GRU r, z, n.

local function rnn_step(gi, h, w_hh, b_hh, relu)
  local y = gi + F.linear(h, w_hh, b_hh)
  if relu then return dl.relu(y) end
  return dl.tanh(y)
end

-- The gates' pointwise math (c' = f c + i g, h' = o tanh(c')) is one fused op. With
-- w_hr (proj_size, hidden), h' is projected: o tanh(c') W_hr^T.
local function lstm_step(gi, h, c, w_hh, b_hh, w_hr)
  local h1, c1 = F.lstm_gates(gi + F.linear(h, w_hh, b_hh), c)
  if w_hr ~= nil then h1 = F.linear(h1, w_hr) end
  return h1, c1
end

-- h' = n + z (h - n), n = tanh(x_n + r (h_n)).
local function gru_step(gi, h, w_hh, b_hh, H)
  local gh = F.linear(h, w_hh, b_hh)
  local r = dl.sigmoid(gh:narrow(-1, 1, H) + gi:narrow(-1, 1, H))
  local z = dl.sigmoid(gh:narrow(-1, H + 1, H) + gi:narrow(-1, H + 1, H))
  local n = dl.tanh(gi:narrow(-1, 2 * H + 1, H) + gh:narrow(-1, 2 * H + 1, H) * r)
  return (h - n) * z + n
end

-- ---- cells ---------------------------------------------------------------------------------------

-- The shared parameters of a cell with `gates` gates: weight_ih (gates*hidden, in),
-- weight_hh (gates*hidden, hidden), bias_ih, bias_hh, all U(-1/sqrt(hidden), ..).
local function cell_init(self, name, in_size, hidden, gates, opts)
  self.input_size = int_arg(name, in_size, "input_size")
  self.hidden_size = int_arg(name, hidden, "hidden_size")
  local k = 1 / sqrt(hidden)
  self.weight_ih = param(uniform({ gates * hidden, in_size }, k), "weight_ih")
  self.weight_hh = param(uniform({ gates * hidden, hidden }, k), "weight_hh")
  if opts.bias ~= false then
    self.bias_ih = param(uniform({ gates * hidden }, k), "bias_ih")
    self.bias_hh = param(uniform({ gates * hidden }, k), "bias_hh")
  end
end

local function check_tensor(op, x)
  if not is_tensor(x) then core.bad_arg(op, "a tensor", x) end
end

local function cell_check(self, name, x, h)
  check_tensor(name, x)
  local m = meta(x)
  if (m.ndim ~= 1 and m.ndim ~= 2) or m.sizes[m.ndim - 1] ~= self.input_size then
    raise(name .. ": expected input (N, " .. self.input_size .. ") or (" .. self.input_size
          .. "), got shape " .. shape_str(x))
  end
  if not x:is_floating_point() then raise(name .. ": expected a floating-point input, got " .. x.dtype) end
  local hs = x:dim() == 2 and { x:size(1), self.hidden_size } or { self.hidden_size }
  if h == nil then return dl.zeros(hs, { dtype = x.dtype, device = x.device }) end
  check_tensor(name, h)
  local s = h.shape
  if #s ~= #hs or s[1] ~= hs[1] or s[#s] ~= hs[#hs] then
    raise(name .. ": expected a hidden state of shape " .. shape_str(hs) .. ", got shape " .. shape_str(s))
  end
  if h.dtype ~= x.dtype then
    raise(name .. ": expected a hidden state of the input's dtype " .. x.dtype .. ", got " .. h.dtype)
  end
  return h
end

local function cell_repr(self)
  return fmt("", self.input_size, "", self.hidden_size, "bias", self.bias_ih ~= nil,
             "nonlinearity", self.nonlinearity)
end

-- h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh (default) or relu.
local RNNCell = Module:extend("RNNCell")
R.RNNCell = RNNCell
local function nonlinearity_of(name, opts)
  local nl = opts.nonlinearity or "tanh"
  if nl ~= "tanh" and nl ~= "relu" then
    raise(name .. ": nonlinearity must be \"tanh\" or \"relu\", got " .. tostring(nl))
  end
  return nl
end
function RNNCell:init(in_size, hidden, opts)
  opts = options("RNNCell", opts, { nonlinearity = true, bias = true })
  self.nonlinearity = nonlinearity_of("RNNCell", opts)
  cell_init(self, "RNNCell", in_size, hidden, 1, opts)
end
function RNNCell:forward(x, h)
  h = cell_check(self, "RNNCell", x, h)
  return rnn_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                  self.nonlinearity == "relu")
end
RNNCell.extra_repr = cell_repr

-- The state is (h, c): cell(x) starts from zeros; cell(x, h, c) or cell(x, {h, c}).
-- Returns h', c'.
local LSTMCell = Module:extend("LSTMCell")
R.LSTMCell = LSTMCell
function LSTMCell:init(in_size, hidden, opts)
  opts = options("LSTMCell", opts, { bias = true })
  cell_init(self, "LSTMCell", in_size, hidden, 4, opts)
end
function LSTMCell:forward(x, h, c)
  if type(h) == "table" and not is_tensor(h) then h, c = h[1], h[2] end
  h = cell_check(self, "LSTMCell", x, h)
  c = cell_check(self, "LSTMCell", x, c)
  return lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)
end
LSTMCell.extra_repr = cell_repr

local GRUCell = Module:extend("GRUCell")
R.GRUCell = GRUCell
function GRUCell:init(in_size, hidden, opts)
  opts = options("GRUCell", opts, { bias = true })
  cell_init(self, "GRUCell", in_size, hidden, 3, opts)
end
function GRUCell:forward(x, h)
  h = cell_check(self, "GRUCell", x, h)
  return gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh, self.hidden_size)
end
GRUCell.extra_repr = cell_repr

-- ---- layers over a sequence -------------------------------------------------------------------

local LAYER_OPTS = { num_layers = true, bias = true, batch_first = true, dropout = true, bidirectional = true,
                     nonlinearity = true, proj_size = true }

-- A layer of kind "RNN", "LSTM" or "GRU": opts num_layers (1), bias (true),
-- batch_first (false: input (L, N, in)), dropout (0: between layers, when training),
-- bidirectional (false), nonlinearity (RNN: "tanh" or "relu"), proj_size (LSTM: 0, or
-- p < hidden: each layer's h projected to p by weight_hr_l{k} (p, hidden), so h, the
-- output and the next layer's input have p features a direction; c keeps hidden).
local function layer_class(name, gates)
  local cls = Module:extend(name)
  R[name] = cls
  function cls:init(in_size, hidden, opts)
    opts = options(name, opts, LAYER_OPTS)
    if name ~= "RNN" and opts.nonlinearity ~= nil then raise(name .. ": unknown option 'nonlinearity'") end
    if name ~= "LSTM" and opts.proj_size ~= nil and opts.proj_size ~= 0 then
      raise(name .. ": proj_size is only supported for LSTM, not RNN or GRU")
    end
    self.nonlinearity = name == "RNN" and nonlinearity_of(name, opts) or nil
    self.input_size = int_arg(name, in_size, "input_size")
    self.hidden_size = int_arg(name, hidden, "hidden_size")
    local proj = opts.proj_size or 0
    int_arg(name, proj, "proj_size", 0)
    if proj >= hidden then
      raise(name .. ": proj_size must be smaller than hidden_size (" .. hidden .. "), got " .. proj)
    end
    self.proj_size = proj
    self.num_layers = int_arg(name, opts.num_layers or 1, "num_layers")
    self.batch_first = opts.batch_first == true
    self.bidirectional = opts.bidirectional == true
    self.bias = opts.bias ~= false
    local p = opts.dropout or 0
    if type(p) ~= "number" or p < 0 or p >= 1 then raise(name .. ": dropout must be in [0, 1), got " .. tostring(p)) end
    self.dropout = p
    local dirs = self.bidirectional and 2 or 1
    local k = 1 / sqrt(hidden)
    local out_size = proj > 0 and proj or hidden
    for l = 0, self.num_layers - 1 do
      local in_l = l == 0 and in_size or out_size * dirs
      for d = 1, dirs do
        local sfx = "_l" .. l .. (d == 2 and "_reverse" or "")
        self["weight_ih" .. sfx] = param(uniform({ gates * hidden, in_l }, k), "weight_ih" .. sfx)
        self["weight_hh" .. sfx] = param(uniform({ gates * hidden, out_size }, k), "weight_hh" .. sfx)
        if self.bias then
          self["bias_ih" .. sfx] = param(uniform({ gates * hidden }, k), "bias_ih" .. sfx)
          self["bias_hh" .. sfx] = param(uniform({ gates * hidden }, k), "bias_hh" .. sfx)
        end
        if proj > 0 then self["weight_hr" .. sfx] = param(uniform({ proj, hidden }, k), "weight_hr" .. sfx) end
      end
    end
  end
  cls.extra_repr = function(self)
    return fmt("", self.input_size, "", self.hidden_size, "proj_size", self.proj_size > 0 and self.proj_size or nil,
               "num_layers", self.num_layers, "batch_first", self.batch_first, "bidirectional", self.bidirectional,
               "dropout", self.dropout, "nonlinearity", self.nonlinearity)
  end
  return cls
end

-- A given state is checked as given: (layers x directions, N, hidden), or (layers x
-- directions, hidden) for unbatched input; x the input as given too.
local function state_or_zeros(name, what, s, shape, x)
  if s == nil then return dl.zeros(shape, { dtype = x.dtype, device = x.device }) end
  check_tensor(name, s)
  if shape_str(s.shape) ~= shape_str(shape) then
    raise(name .. ": expected " .. what .. " of shape " .. shape_str(shape)
          .. (#shape == 2 and " for unbatched input" or "") .. ", got shape " .. shape_str(s.shape))
  end
  if s.dtype ~= x.dtype then
    raise(name .. ": expected " .. what .. " of the input's dtype " .. x.dtype .. ", got " .. s.dtype)
  end
  return s
end

-- Runs the layers: x (L, N, in) or batch-first, or unbatched (L, in), or a
-- PackedSequence; h0 (and c0) of
-- shape (num_layers x directions, N, hidden (h0: proj_size if set)), zeros when nil. Returns the last
-- layer's outputs at every step (both directions side by side), and the final states.
local function run(self, name, x, h0, c0)
  -- A PackedSequence (dlua.nn.packing): run padded, each sequence held at its last step
  -- past its length, and the output packed back.
  local packing = package.loaded["dlua.nn.packing"]
  local packed = packing and packing.is_packed(x) and x or nil
  local lengths
  if packed then
    if packed.data:dim() ~= 2 then
      raise(name .. ": expected a PackedSequence of (steps, input_size) data, got shape " .. shape_str(packed.data.shape))
    end
    x, lengths = packing.unpacked(packed)
  end
  check_tensor(name, x)
  local unbatched = x:dim() == 2
  if x:dim() ~= 3 and not unbatched then
    raise(name .. ": expected input of 3 dims (or 2, unbatched), got shape " .. shape_str(x.shape))
  end
  if not x:is_floating_point() then
    raise(name .. ": expected a floating-point input, got " .. x.dtype)
  end
  if name == "LSTM" and (h0 == nil) ~= (c0 == nil) then
    raise("LSTM: expected both h0 and c0, or neither (zeros), got " .. (h0 == nil and "c0" or "h0") .. " only")
  end
  if unbatched then x = x:unsqueeze(2)
  elseif self.batch_first and not packed then x = x:transpose(1, 2) end
  local running   -- running[t]: (N, 1) true where step t is within the sequence
  if lengths then
    running = {}
    local lens = dl.tensor(lengths, { dtype = "int64", device = x.device }):view(-1, 1)
    for t = 1, x:size(1) do running[t] = lens:ge(t) end
  end
  if x:size(3) ~= self.input_size then
    raise(name .. ": expected input of size " .. self.input_size .. " in its last dim, got shape " .. shape_str(x.shape))
  end
  local steps, N, H = x:size(1), x:size(2), self.hidden_size
  local dirs = self.bidirectional and 2 or 1
  local P = self.proj_size > 0 and self.proj_size or H
  local function state_shape(size)
    return unbatched and { self.num_layers * dirs, size } or { self.num_layers * dirs, N, size }
  end
  h0 = state_or_zeros(name, "h0", h0, state_shape(P), x)
  local lstm = name == "LSTM"
  if lstm then c0 = state_or_zeros(name, "c0", c0, state_shape(H), x) end
  if unbatched then
    h0 = h0:unsqueeze(2)
    if lstm then c0 = c0:unsqueeze(2) end
  end
  local relu = self.nonlinearity == "relu"
  local hn, cn = {}, {}
  local input = x
  for l = 0, self.num_layers - 1 do
    local outs = {}
    for d = 1, dirs do
      local sfx = "_l" .. l .. (d == 2 and "_reverse" or "")
      local w_hh, b_hh, w_hr = self["weight_hh" .. sfx], self["bias_hh" .. sfx], self["weight_hr" .. sfx]
      local gi_all = F.linear(input, self["weight_ih" .. sfx], self["bias_ih" .. sfx])   -- (L, N, gates H)
      -- RNN and LSTM add b_hh to every step's gates: once for the sequence instead
      -- (GRU's sits inside r * (h W_hn^T + b_hn)).
      if b_hh ~= nil and name ~= "GRU" then gi_all, b_hh = gi_all + b_hh, nil end
      local k = l * dirs + d
      local h = h0:narrow(1, k, 1):squeeze(1)
      local c = lstm and c0:narrow(1, k, 1):squeeze(1) or nil
      local hs, gis = {}, gi_all:unbind(1)
      for s = 1, steps do
        local t = d == 1 and s or steps - s + 1
        local gi = gis[t]
        local h1, c1
        if lstm then
          h1, c1 = lstm_step(gi, h, c, w_hh, b_hh, w_hr)
        elseif name == "GRU" then
          h1 = gru_step(gi, h, w_hh, b_hh, H)
        else
          h1 = rnn_step(gi, h, w_hh, b_hh, relu)
        end
        if running then   -- (past a sequence's end its state stays)
          h1 = dl.where(running[t], h1, h)
          if lstm then c1 = dl.where(running[t], c1, c) end
        end
        h, c = h1, c1
        hs[t] = h
      end
      outs[d] = dl.stack(hs, 1)
      hn[k], cn[k] = h, c
    end
    input = dirs == 2 and dl.cat(outs, 3) or outs[1]
    if self.dropout > 0 and l < self.num_layers - 1 then input = F.dropout(input, self.dropout, self.training) end
  end
  local out, h_n = input, dl.stack(hn, 1)
  local c_n = lstm and dl.stack(cn, 1) or nil
  if packed then return packing.packed_like(out, packed), h_n, c_n end
  if unbatched then
    out, h_n = out:squeeze(2), h_n:squeeze(2)
    if c_n then c_n = c_n:squeeze(2) end
  elseif self.batch_first then
    out = out:transpose(1, 2)
  end
  return out, h_n, c_n
end

-- out, h_n = rnn(x [, h0])
local RNN = layer_class("RNN", 1)
function RNN:forward(x, h0) return run(self, "RNN", x, h0) end

-- out, h_n, c_n = lstm(x [, h0, c0]) (or lstm(x, {h0, c0}))
local LSTM = layer_class("LSTM", 4)
function LSTM:forward(x, h0, c0)
  if type(h0) == "table" and not is_tensor(h0) then h0, c0 = h0[1], h0[2] end
  return run(self, "LSTM", x, h0, c0)
end

-- out, h_n = gru(x [, h0])
local GRU = layer_class("GRU", 3)
function GRU:forward(x, h0) return run(self, "GRU", x, h0) end

return R
