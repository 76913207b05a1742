-- dlua.nn.packing: batches of sequences of different lengths, as torch.nn.utils.rnn (as
-- dl.nn.utils.rnn, loaded when first used):
--
--   local padded = rnn.pad_sequence({a, b, c} [, {batch_first, padding_value}])
--   local packed = rnn.pack_padded_sequence(padded, {5, 3, 4} [, {batch_first, enforce_sorted}])
--   local out, h_n, c_n = lstm(packed)             -- out is a PackedSequence too
--   local y, lengths = rnn.pad_packed_sequence(out [, {batch_first, padding_value, total_length}])
--   rnn.pack_sequence({a, b, c} [, {enforce_sorted}])
--
-- A PackedSequence holds, as PyTorch's, `data` (the steps of every sequence, time-major:
-- at each step the sequences still running, longest first), `batch_sizes` (how many run
-- at each step), and `sorted_indices` / `unsorted_indices` (1-based: the batch in
-- length order, and back). The RNN, LSTM and GRU layers take one: each sequence stops at
-- its length (its final state is the state at its last step; the reverse direction
-- starts from its last step), and the output is packed the same way. Everything is made
-- of index_select, index_copy and where, so gradients reach the data.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local is_tensor, shape_str, dl = T.is_tensor, T.shape_str, T.dl
local type, ipairs, setmetatable, getmetatable, tostring, floor = type, ipairs, setmetatable, getmetatable, tostring,
  math.floor

local M = {}

local PackedSequence = {}
PackedSequence.__index = PackedSequence
PackedSequence.__name = "PackedSequence"
PackedSequence.__tostring = function(self)
  return "PackedSequence(data: " .. shape_str(self.data.shape) .. ", batch_sizes: " .. shape_str(self.batch_sizes.shape)
         .. ")"
end
M.PackedSequence = PackedSequence

function M.is_packed(v) return type(v) == "table" and getmetatable(v) == PackedSequence end

local i64 = { dtype = "int64" }

-- Lengths as a Lua list of integers >= 1 (from a list or a 1-D tensor), n of them.
local function length_list(op, lengths, n)
  local list = lengths
  if is_tensor(lengths) then
    if lengths:dim() ~= 1 or lengths:is_floating_point() then
      raise(op .. ": expected lengths as a list or a 1-D integer tensor, got " .. lengths.dtype .. " "
            .. shape_str(lengths.shape))
    end
    list = lengths:totable()
  elseif type(lengths) ~= "table" then
    bad_arg(op, "lengths (a list or a 1-D integer tensor)", lengths)
  end
  if #list ~= n then raise(op .. ": expected " .. n .. " lengths (one per sequence), got " .. #list) end
  for i, v in ipairs(list) do
    if type(v) ~= "number" or v ~= floor(v) or v < 1 then
      raise(op .. ": length " .. i .. " must be an integer >= 1, got " .. tostring(v))
    end
  end
  return list
end

-- The batch in length order (longest first, ties in batch order) and the way back.
local function orders(lengths)
  local order = {}
  for i = 1, #lengths do order[i] = i end
  table.sort(order, function(a, b)
    if lengths[a] ~= lengths[b] then return lengths[a] > lengths[b] end
    return a < b
  end)
  local back = {}
  for k, b in ipairs(order) do back[b] = k end
  return order, back
end

-- The packed rows' positions in the time-major padded (T, N) grid, flattened (1-based),
-- and the batch sizes.
local function packed_positions(lengths, order, N)
  local rows, sizes = {}, {}
  for t = 1, lengths[order[1]] do
    local k = 0
    for _, b in ipairs(order) do
      if lengths[b] >= t then
        rows[#rows + 1] = (t - 1) * N + b
        k = k + 1
      end
    end
    sizes[t] = k
  end
  return rows, sizes
end

-- pack_padded_sequence(input (T, N, *) or batch-first, lengths [, {batch_first = false,
-- enforce_sorted = true}]).
function M.pack_padded_sequence(input, lengths, opts)
  local op = "pack_padded_sequence"
  T.check_tensor(op, input)
  opts = options(op, opts, { batch_first = true, enforce_sorted = true })
  if input:dim() < 2 then raise(op .. ": expected input (T, N, *), got shape " .. shape_str(input.shape)) end
  if opts.batch_first then input = input:transpose(1, 2) end
  local steps, N = input:size(1), input:size(2)
  if N == 0 or steps == 0 then raise(op .. ": cannot pack an empty batch (input of shape " .. shape_str(input.shape) .. ")") end
  local list = length_list(op, lengths, N)
  for i, v in ipairs(list) do
    if v > steps then raise(op .. ": length " .. i .. " is " .. v .. ", longer than the input's " .. steps .. " steps") end
  end
  local order, back = orders(list)
  if opts.enforce_sorted ~= false then
    for i = 2, N do
      if list[i] > list[i - 1] then
        raise(op .. ": the lengths must be sorted longest first (or give enforce_sorted = false), got "
              .. table.concat(list, ", "))
      end
    end
  end
  local rows, sizes = packed_positions(list, order, N)
  local rest = input.shape
  table.remove(rest, 1)
  rest[1] = steps * N
  local data = input:reshape(rest):index_select(1, dl.tensor(rows, { dtype = "int64", device = input.device }))
  local sorted = opts.enforce_sorted ~= false
  return setmetatable({ data = data, batch_sizes = dl.tensor(sizes, i64),
                        sorted_indices = not sorted and dl.tensor(order, i64) or nil,
                        unsorted_indices = not sorted and dl.tensor(back, i64) or nil,
                        _lengths = list, _order = order }, PackedSequence)
end

-- pad_packed_sequence(sequence [, {batch_first = false, padding_value = 0, total_length}]):
-- the padded (T, N, *) batch in the original order, and the lengths (int64).
function M.pad_packed_sequence(seq, opts)
  local op = "pad_packed_sequence"
  if not M.is_packed(seq) then bad_arg(op, "a PackedSequence", seq) end
  opts = options(op, opts, { batch_first = true, padding_value = true, total_length = true })
  local list, order = seq._lengths, seq._order
  local N = #list
  local steps = list[order[1]]
  local total = opts.total_length or steps
  if type(total) ~= "number" or total ~= floor(total) or total < steps then
    raise(op .. ": total_length must be an integer >= the longest length " .. steps .. ", got " .. tostring(total))
  end
  local rows = packed_positions(list, order, N)
  local rest = seq.data.shape
  rest[1] = total * N
  local pad = opts.padding_value or 0
  local flat = dl.full(rest, pad, { dtype = seq.data.dtype, device = seq.data.device })
    :index_copy(1, dl.tensor(rows, { dtype = "int64", device = seq.data.device }), seq.data)
  rest[1] = N
  table.insert(rest, 1, total)
  local padded = flat:reshape(rest)
  if opts.batch_first then padded = padded:transpose(1, 2) end
  return padded, dl.tensor(list, i64)
end

-- pad_sequence(sequences [, {batch_first = false, padding_value = 0}]): tensors (L_i, *)
-- stacked into (max L, N, *), the short ones padded.
function M.pad_sequence(sequences, opts)
  local op = "pad_sequence"
  if type(sequences) ~= "table" or is_tensor(sequences) or #sequences == 0 then
    bad_arg(op, "a non-empty list of tensors", sequences)
  end
  opts = options(op, opts, { batch_first = true, padding_value = true })
  local first = sequences[1]
  T.check_tensor(op, first)
  if first:dim() == 0 then raise(op .. ": expected sequences of at least 1 dim (their steps), got a 0-dim tensor") end
  local longest = 0
  for i, s in ipairs(sequences) do
    T.check_tensor(op, s)
    local ok = s:dim() == first:dim() and s:dim() >= 1 and s.dtype == first.dtype
    for d = 2, s:dim() do ok = ok and s:size(d) == first:size(d) end
    if not ok then
      raise(op .. ": sequence " .. i .. " of " .. s.dtype .. " " .. shape_str(s.shape) .. " does not match sequence 1's "
            .. first.dtype .. " " .. shape_str(first.shape) .. " past its length")
    end
    longest = math.max(longest, s:size(1))
  end
  local parts = {}
  for i, s in ipairs(sequences) do
    local n = s:size(1)
    if n < longest then
      local shape = s.shape
      shape[1] = longest - n
      s = dl.cat({ s, dl.full(shape, opts.padding_value or 0, { dtype = s.dtype, device = s.device }) }, 1)
    end
    parts[i] = s
  end
  return dl.stack(parts, opts.batch_first and 1 or 2)
end

-- pack_sequence(sequences [, {enforce_sorted = true}]): pad_sequence, then packed.
function M.pack_sequence(sequences, opts)
  if type(sequences) ~= "table" or is_tensor(sequences) or #sequences == 0 then
    bad_arg("pack_sequence", "a non-empty list of tensors", sequences)
  end
  opts = options("pack_sequence", opts, { enforce_sorted = true })
  local lengths = {}
  for i, s in ipairs(sequences) do
    T.check_tensor("pack_sequence", s)
    lengths[i] = s:size(1)
  end
  return M.pack_padded_sequence(M.pad_sequence(sequences), lengths, { enforce_sorted = opts.enforce_sorted })
end

-- For the recurrent layers: a packed input as the padded (T, N, *) batch in the original
-- order and the lengths (a Lua list); and a padded output packed like `like`.
function M.unpacked(seq)
  local padded = M.pad_packed_sequence(seq)
  return padded, seq._lengths
end
function M.packed_like(padded, like)
  local rows = packed_positions(like._lengths, like._order, #like._lengths)
  local rest = padded.shape
  table.remove(rest, 1)
  rest[1] = padded:size(1) * padded:size(2)
  local data = padded:reshape(rest):index_select(1, dl.tensor(rows, { dtype = "int64", device = padded.device }))
  return setmetatable({ data = data, batch_sizes = like.batch_sizes, sorted_indices = like.sorted_indices,
                        unsorted_indices = like.unsorted_indices, _lengths = like._lengths, _order = like._order },
                      PackedSequence)
end

return M
