-- dlua.nn.ctc: the connectionist temporal classification loss, as PyTorch's ctc_loss
-- (dl.nn.ctc_loss and dl.nn.functional.ctc_loss, loaded when first used):
--
--   local loss = dl.nn.ctc_loss(log_probs, targets, input_lengths, target_lengths
--                               [, {blank = 1, reduction = "mean", zero_infinity = false}])
--
-- log_probs (T, N, C) are log-softmax outputs over C classes (class `blank` the blank),
-- targets (N, S) 1-based class numbers (each row's first target_lengths[n] used), or
-- all of them concatenated (sum(target_lengths)), as PyTorch takes them too,
-- input_lengths and target_lengths (N) lists or tensors. The loss of a sequence is minus
-- the log of the summed probability of every alignment: the forward recursion over the
-- targets interleaved with blanks (Graves et al. 2006), in log space, a step per time
-- step, each step made of the engine's ops, so the gradient is the recursion's own.
-- reduction "mean" divides each loss by its target length and averages (PyTorch's);
-- "sum" and "none" as elsewhere. An impossible alignment (a target longer than its input
-- allows) gives inf, or 0 with zero_infinity.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, options = core.raise, core.options
local shape_str, dl = T.shape_str, T.dl
local check = T.check_tensor
local type, ipairs, huge = type, ipairs, math.huge

local F = {}

local function lengths(op, v, n, what, device)
  if type(v) == "table" and not T.is_tensor(v) then v = dl.tensor(v, { dtype = "int64" }) end
  check(op, v)
  if v:numel() ~= n then raise(op .. ": " .. what .. " must hold " .. n .. " lengths, got " .. v:numel()) end
  return v:reshape(-1):long():to(device)
end

-- log(e^a + e^b + e^c), elementwise, where each may be -inf: -inf where all are, with a
-- finite gradient everywhere (no 0/0 at the unreachable states).
local function logsumexp3(a, b, c)
  local m = dl.maximum(dl.maximum(a, b), c):detach()
  local dead = m:eq(-huge)
  local ms = dl.where(dead, 0, m)
  local s = (a - ms):exp() + (b - ms):exp() + (c - ms):exp()
  return dl.where(dead, -huge, dl.where(dead, 1, s):log() + ms)
end

-- x shifted right by k along dim 2, `fill` (-inf when absent) coming in.
local function shifted(x, k, fill)
  local n = x:size(2)
  if k >= n then return dl.full(x.shape, fill or -huge, { dtype = x.dtype, device = x.device }) end
  local pad = dl.full({ x:size(1), k }, fill or -huge, { dtype = x.dtype, device = x.device })
  return dl.cat({ pad, x:narrow(2, 1, n - k) }, 2)
end

-- Concatenated targets (sum(lens)) as (N, max(lens)): each row its own targets, then
-- copies of some given target (never read: the recursion moves only forward, and a row's
-- loss is read at its length).
local function padded_targets(op, targets, lens)
  local ls, total, S = lens:totable(), 0, 0
  for _, l in ipairs(ls) do
    if l < 0 then raise(op .. ": target_lengths must be >= 0, got " .. l) end
    total, S = total + l, l > S and l or S
  end
  if targets:numel() ~= total then
    raise(op .. ": expected concatenated targets of sum(target_lengths) = " .. total .. " elements, got shape "
          .. shape_str(targets.shape))
  end
  if S == 0 then return targets:reshape(#ls, 0) end
  local at, start = {}, 0
  for n, l in ipairs(ls) do
    local row = {}
    for j = 1, S do row[j] = start + (j <= l and j or (l > 0 and l or 1)) end   -- (clamped below)
    at[n], start = row, start + l
  end
  local idx = dl.tensor(at, { dtype = "int64", device = targets.device }):clamp(1, total)
  return targets:index_select(1, idx:reshape(-1)):reshape(#ls, S)
end

function F.ctc_loss(log_probs, targets, input_lengths, target_lengths, opts)
  local op = "ctc_loss"
  check(op, log_probs)
  check(op, targets)
  opts = options(op, opts, { blank = true, reduction = true, zero_infinity = true })
  if log_probs:dim() ~= 3 then raise(op .. ": expected log_probs (T, N, C), got shape " .. shape_str(log_probs.shape)) end
  local Tn, N, Cn = log_probs:size(1), log_probs:size(2), log_probs:size(3)
  if targets:dim() ~= 1 and (targets:dim() ~= 2 or targets:size(1) ~= N) then
    raise(op .. ": expected targets (N, S) with N = " .. N .. ", or 1-D (sum(target_lengths)), got shape "
          .. shape_str(targets.shape))
  end
  local blank = opts.blank or 1
  if type(blank) ~= "number" or blank < 1 or blank > Cn then
    raise(op .. ": blank must be a class number from 1 to " .. Cn .. ", got " .. tostring(blank))
  end
  local reduction = opts.reduction or "mean"
  if reduction ~= "mean" and reduction ~= "sum" and reduction ~= "none" then
    raise(op .. ": reduction must be mean, sum or none, got " .. tostring(reduction))
  end
  local dev = log_probs.device
  local in_len = lengths(op, input_lengths, N, "input_lengths", dev)
  local tg_len = lengths(op, target_lengths, N, "target_lengths", dev)
  if targets:dim() == 1 then targets = padded_targets(op, targets, tg_len) end
  local S = targets:size(2)
  if N > 0 and (in_len:max():item() > Tn or in_len:min():item() < 0 or tg_len:max():item() > S or tg_len:min():item() < 0) then
    raise(op .. ": lengths must lie in 0.." .. Tn .. " (inputs) and 0.." .. S .. " (targets)")
  end
  local tg = targets:long():to(dev)
  if tg:numel() > 0 and (tg:min():item() < 1 or tg:max():item() > Cn) then
    raise(op .. ": targets must be class numbers from 1 to " .. Cn)
  end
  -- the extended labels: blank, t1, blank, t2, ..., blank (N, 2 S + 1)
  local L = 2 * S + 1
  local ext = dl.full({ N, L }, blank, { dtype = "int64", device = dev })
  if S > 0 then
    local odd = dl.arange(2, L, 2, { dtype = "int64", device = dev })   -- positions 2, 4, ... (1-based)
    ext = ext:index_copy(2, odd, tg)
  end
  -- the skip from s - 2 to s: where ext[s] is not blank and differs from ext[s - 2]
  local skip = ext:ne(blank):logical_and(ext:ne(shifted(ext, 2, 0)))   -- (0 is no class)
  local neg = dl.full({ N, L }, -huge, { dtype = log_probs.dtype, device = dev })
  local pos = dl.arange(1, L + 1, { dtype = "int64", device = dev }):view(1, L)
  local alpha
  for t = 1, Tn do
    local emit = log_probs[t]:gather(2, ext)
    local a
    if t == 1 then
      a = dl.where(pos:le(2), emit, neg)
    else
      local via_skip = dl.where(skip, shifted(alpha, 2), neg)
      a = logsumexp3(alpha, shifted(alpha, 1), via_skip) + emit
    end
    -- a sequence past its input length keeps its last alpha
    alpha = t == 1 and a or dl.where(in_len:view(N, 1):ge(t), a, alpha)
  end
  local last = (tg_len * 2 + 1):view(N, 1)                          -- L_n, 1-based
  local ll
  if Tn == 0 then
    ll = dl.where(tg_len:eq(0), 0, -huge):to(log_probs.dtype)
  else
    local a_last = alpha:gather(2, last)
    local a_prev = dl.where(last:gt(1), alpha:gather(2, (last - 1):clamp(1)), neg:narrow(2, 1, 1))
    ll = logsumexp3(a_last, a_prev, neg:narrow(2, 1, 1)):view(N)
    ll = dl.where(in_len:eq(0), dl.where(tg_len:eq(0), 0, -huge), ll)
  end
  local loss = -ll
  if opts.zero_infinity then loss = dl.where(loss:eq(huge), 0, loss) end
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  return (loss / tg_len:clamp(1):to(loss.dtype)):mean()
end

return { functional = F, layers = {} }
