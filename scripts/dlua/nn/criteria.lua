-- dlua.nn.criteria: the losses as modules, and small layers over dl.nn.functional's
-- functions, as PyTorch's (loaded when first used):
--
--   local criterion = dl.nn.CrossEntropyLoss({ weight = w, label_smoothing = 0.1 })
--   local loss = criterion(logits, labels)
--
--   losses: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, SmoothL1Loss, HuberLoss, KLDivLoss,
--     BCELoss, BCEWithLogitsLoss, SoftMarginLoss, MultiLabelSoftMarginLoss,
--     PoissonNLLLoss, GaussianNLLLoss (input, target, var), MarginRankingLoss and
--     CosineEmbeddingLoss (x1, x2, y), HingeEmbeddingLoss, TripletMarginLoss (anchor,
--     positive, negative), CTCLoss (log_probs, targets, input_lengths, target_lengths),
--     MultiMarginLoss, MultiLabelMarginLoss, TripletMarginWithDistanceLoss
--   their new functions: F.multi_margin_loss, F.multilabel_margin_loss,
--     F.triplet_margin_with_distance_loss, and F.pdist
--   padding: ZeroPad2d, ConstantPad1d/2d, ReflectionPad1d/2d, ReplicationPad1d/2d
--   CosineSimilarity, PairwiseDistance, Softmax2d, ChannelShuffle
--
-- A loss module's options are its function's (the same names and defaults); a tensor
-- option (weight, pos_weight) is a buffer, so it follows the module's :to() and is in
-- its state dict, as PyTorch's.
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local F = require("dlua.nn.functional")
core.own_source()

local raise, options, bad_arg = core.raise, core.options, core.bad_arg
local is_tensor, shape_str = T.is_tensor, T.shape_str
local dl = T.dl
local type, tostring, pairs, ipairs, floor = type, tostring, pairs, ipairs, math.floor
local fmt = Module.format_args

local L = {}

-- ---- losses ----------------------------------------------------------------------------------

local FN = {}   -- the functions of this module (dl.nn.functional's)

local function reduced(op, loss, r)
  r = r or "mean"
  if r == "mean" then return loss:mean() end
  if r == "sum" then return loss:sum() end
  if r == "none" then return loss end
  raise(op .. ": reduction must be mean, sum or none, got " .. tostring(r))
end

-- multi_margin_loss(x (N, C) or (C), y (N) of 1-based classes [, {p = 1, margin = 1, weight,
-- reduction}]): the sum over j ~= y of max(0, margin - x_y + x_j)^p (weighted by
-- weight[y]) over C, as PyTorch's multi-class hinge loss.
function FN.multi_margin_loss(x, y, opts)
  local op = "multi_margin_loss"
  opts = options(op, opts, { p = true, margin = true, weight = true, reduction = true })
  if not is_tensor(x) or not is_tensor(y) then bad_arg(op, "tensors (input and target)", is_tensor(x) and y or x) end
  local X = x:dim() == 1 and x:unsqueeze(1) or x
  local Y = y:dim() == 0 and y:reshape(1) or y
  if X:dim() ~= 2 or Y:dim() ~= 1 or Y:size(1) ~= X:size(1) then
    raise(op .. ": expected input (N, C) and target (N), got shapes " .. shape_str(x.shape) .. " and " .. shape_str(y.shape))
  end
  local p, margin = opts.p or 1, opts.margin or 1
  if p ~= 1 and p ~= 2 then raise(op .. ": p must be 1 or 2, got " .. tostring(p)) end
  local C = X:size(2)
  local idx = Y:long():unsqueeze(2)
  if idx:numel() > 0 and (idx:min():item() < 1 or idx:max():item() > C) then
    raise(op .. ": targets must be class numbers from 1 to " .. C)
  end
  local xy = X:gather(2, idx)                               -- (N, 1)
  local z = X - xy + margin
  local h = dl.where(z:gt(0), z, 0)   -- (no gradient at z = 0, as PyTorch's)
  if p == 2 then h = h * h end
  if opts.weight ~= nil then h = h * opts.weight:to(X.dtype):gather(1, Y:long()):unsqueeze(2) end
  -- (the target's own term, max(0, margin)^p, is left out)
  local own = dl.zeros(X.shape, { dtype = "bool", device = X.device }):scatter(2, idx, true)
  local loss = dl.where(own, 0, h):sum(2) / C
  if x:dim() == 1 then loss = loss:reshape({}) end
  return reduced(op, loss, opts.reduction)
end

-- multilabel_margin_loss(x (N, C) or (C), y of x's shape [, {reduction}]): y lists each
-- row's 1-based target classes, ended by the first 0 (PyTorch's -1); the sum over targets j
-- and non-targets k of max(0, 1 - (x_j - x_k)), over C.
function FN.multilabel_margin_loss(x, y, opts)
  local op = "multilabel_margin_loss"
  opts = options(op, opts, { reduction = true })
  if not is_tensor(x) or not is_tensor(y) then bad_arg(op, "tensors (input and target)", is_tensor(x) and y or x) end
  local X = x:dim() == 1 and x:unsqueeze(1) or x
  local Y = y:dim() == 1 and y:unsqueeze(1) or y
  if X:dim() ~= 2 or Y.shape[1] ~= X.shape[1] or Y.shape[2] ~= X.shape[2] then
    raise(op .. ": expected input (N, C) and target of its shape, got shapes " .. shape_str(x.shape) .. " and "
          .. shape_str(y.shape))
  end
  local C = X:size(2)
  local Yl = Y:long()
  if Yl:numel() > 0 and (Yl:min():item() < 0 or Yl:max():item() > C) then
    raise(op .. ": targets must be class numbers from 1 to " .. C .. ", or 0 to end a row's list")
  end
  -- the targets before a row's first 0, counted per class (a repeat counts again, as PyTorch's)
  local valid = Yl:ne(0):to(X.dtype):cumprod(2)
  local counts = dl.zeros(X.shape, { dtype = X.dtype, device = X.device }):scatter_add(2, Yl:clamp(1), valid)
  local is_target = counts:gt(0):to(X.dtype)
  local z = 1 - X:unsqueeze(3) + X:unsqueeze(2)   -- (N, j, k)
  local margins = dl.where(z:gt(0), z, 0)           -- (no gradient at z = 0, as PyTorch's)
  local loss = (margins * counts:unsqueeze(3) * (1 - is_target):unsqueeze(2)):sum({ 2, 3 }) / C
  if x:dim() == 1 then loss = loss:reshape({}) end
  return reduced(op, loss, opts.reduction)
end

-- triplet_margin_with_distance_loss(anchor, positive, negative [, {distance_function,
-- margin = 1, swap = false, reduction}]): max(d(a, p) - d(a, n) + margin, 0), d the
-- function given (pairwise_distance by default).
function FN.triplet_margin_with_distance_loss(a, pos, neg, opts)
  local op = "triplet_margin_with_distance_loss"
  opts = options(op, opts, { distance_function = true, margin = true, swap = true, reduction = true })
  for _, t in ipairs({ a, pos, neg }) do if not is_tensor(t) then bad_arg(op, "tensors", t) end end
  local d = opts.distance_function or F.pairwise_distance
  if type(d) ~= "function" then bad_arg(op, "a distance function", d) end
  local margin = opts.margin or 1
  if type(margin) ~= "number" or margin <= 0 then raise(op .. ": margin must be a number > 0, got " .. tostring(margin)) end
  local dp, dn = d(a, pos), d(a, neg)
  if opts.swap then dn = dl.minimum(dn, d(pos, neg)) end
  return reduced(op, (dp - dn + margin):clamp(0), opts.reduction)
end

-- pdist(x (N, M) [, p = 2]): the p-norm distances between x's rows, the pairs i < j in
-- order (the upper triangle of cdist(x, x), flattened); a distance of 0 has gradient 0.
function FN.pdist(x, p)
  local op = "pdist"
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
  if x:dim() ~= 2 then raise(op .. ": expected a matrix (N, M), got shape " .. shape_str(x.shape)) end
  p = p or 2
  local n = x:size(1)
  if n < 2 then return dl.zeros(0, { dtype = x.dtype, device = x.device }) end
  local ij = dl.triu_indices(n, n, 1)
  local diff = x:index_select(1, ij[1]:to(x.device)) - x:index_select(1, ij[2]:to(x.device))
  local zero = diff:abs():amax(2):eq(0):unsqueeze(2)
  local safe = dl.where(zero, 1, diff)   -- (a zero row's norm has no gradient: 0, not NaN)
  return dl.where(zero:squeeze(2), 0, dl.linalg.vector_norm(safe, p, 2))
end

-- A loss module `name` over F[fn] with `arity` tensor arguments and the options `keys`
-- (reduction always); those in `tensors` must be tensors (numbers too where the function
-- takes one) and are kept as buffers.
local function criterion(name, fn, arity, keys, tensors)
  local cls = Module:extend(name)
  local allowed = { reduction = true }
  for _, k in ipairs(keys) do allowed[k] = true end
  tensors = tensors or {}
  function cls:init(opts)
    opts = options(name, opts, allowed)
    local r = opts.reduction
    if r ~= nil and r ~= "mean" and r ~= "sum" and r ~= "none" and not (r == "batchmean" and fn == "kl_div") then
      raise(name .. ": reduction must be mean, sum or none" .. (fn == "kl_div" and " (or batchmean)" or "")
            .. ", got " .. tostring(r))
    end
    self._opts = {}
    for k, v in pairs(opts) do
      if tensors[k] and is_tensor(v) then
        self:register_buffer(k, v)
      elseif tensors[k] and not (tensors[k] == "number" and type(v) == "number") then
        bad_arg(name, k .. " as a tensor", v)
      else
        self._opts[k] = v
      end
    end
  end
  -- The options of a call: the plain ones and the buffers as they are now.
  local function call_opts(self)
    local o = {}
    for k, v in pairs(self._opts) do o[k] = v end
    for k in pairs(tensors) do
      local b = self[k]
      if is_tensor(b) then o[k] = b end
    end
    return o
  end
  local f = FN[fn] or F[fn]
  if arity == 2 then
    function cls:forward(a, b) return f(a, b, call_opts(self)) end
  elseif arity == 3 then
    function cls:forward(a, b, c) return f(a, b, c, call_opts(self)) end
  else
    function cls:forward(a, b, c, d) return f(a, b, c, d, call_opts(self)) end
  end
  function cls:extra_repr()
    local args = {}
    for _, k in ipairs(keys) do
      local v = self._opts[k]
      if v ~= nil and type(v) ~= "function" then args[#args + 1] = k; args[#args + 1] = v end
    end
    if self._opts.reduction then args[#args + 1] = "reduction"; args[#args + 1] = self._opts.reduction end
    return fmt(unpack(args))
  end
  L[name] = cls
  return cls
end

criterion("CrossEntropyLoss", "cross_entropy", 2, { "ignore_index", "label_smoothing", "weight" }, { weight = true })
criterion("NLLLoss", "nll_loss", 2, { "ignore_index", "weight" }, { weight = true })
criterion("MSELoss", "mse_loss", 2, {})
criterion("L1Loss", "l1_loss", 2, {})
criterion("SmoothL1Loss", "smooth_l1_loss", 2, { "beta" })
criterion("HuberLoss", "huber_loss", 2, { "delta" })
criterion("KLDivLoss", "kl_div", 2, { "log_target" })
criterion("BCELoss", "binary_cross_entropy", 2, { "weight" }, { weight = true })
criterion("BCEWithLogitsLoss", "bce_with_logits", 2, { "weight", "pos_weight" },
          { weight = "number", pos_weight = "number" })
criterion("SoftMarginLoss", "soft_margin_loss", 2, {})
criterion("MultiLabelSoftMarginLoss", "multilabel_soft_margin_loss", 2, { "weight" }, { weight = true })
criterion("PoissonNLLLoss", "poisson_nll_loss", 2, { "log_input", "full", "eps" })
criterion("GaussianNLLLoss", "gaussian_nll_loss", 3, { "full", "eps" })
criterion("MarginRankingLoss", "margin_ranking_loss", 3, { "margin" })
criterion("CosineEmbeddingLoss", "cosine_embedding_loss", 3, { "margin" })
criterion("HingeEmbeddingLoss", "hinge_embedding_loss", 2, { "margin" })
criterion("TripletMarginLoss", "triplet_margin_loss", 3, { "margin", "p", "eps", "swap" })
criterion("CTCLoss", "ctc_loss", 4, { "blank", "zero_infinity" })
criterion("MultiMarginLoss", "multi_margin_loss", 2, { "p", "margin", "weight" }, { weight = true })
criterion("MultiLabelMarginLoss", "multilabel_margin_loss", 2, {})
criterion("TripletMarginWithDistanceLoss", "triplet_margin_with_distance_loss", 3,
          { "distance_function", "margin", "swap" })

-- ---- padding -----------------------------------------------------------------------------------

-- The counts of F.pad for `dims` trailing dims from a number (every side) or a list of
-- 2 dims counts (left, right[, top, bottom]), each an integer.
local function pad_counts(name, padding, dims)
  local counts = {}
  if type(padding) == "number" then
    for i = 1, 2 * dims do counts[i] = padding end
  elseif type(padding) == "table" and #padding == 2 * dims then
    for i = 1, 2 * dims do counts[i] = padding[i] end
  else
    raise(name .. ": padding must be a number or a list of " .. 2 * dims .. ", got " .. core.typename(padding))
  end
  for i = 1, 2 * dims do
    local c = counts[i]
    if type(c) ~= "number" or c ~= floor(c) or c == math.huge or c == -math.huge then
      raise(name .. ": padding must be integers, got " .. tostring(c))
    end
  end
  return counts
end

-- A padding layer `name` of `dims` trailing dims in F.pad's `mode`; `valued` layers take
-- the fill value as their second argument.
local function pad_layer(name, dims, mode, valued)
  local cls = Module:extend(name)
  function cls:init(padding, value)
    self.padding = pad_counts(name, padding, dims)
    if valued then
      if type(value) ~= "number" then bad_arg(name, "a fill value (a number)", value) end
      self.value = value
    end
  end
  function cls:forward(x)
    if not is_tensor(x) then bad_arg(name, "a tensor", x) end
    if x:dim() < dims + 1 then
      raise(name .. ": expected an input of at least " .. (dims + 1) .. " dims, got shape " .. shape_str(x.shape))
    end
    return F.pad(x, self.padding, { mode = mode, value = self.value })
  end
  function cls:extra_repr() return fmt("padding", self.padding, "value", self.value) end
  L[name] = cls
end

pad_layer("ZeroPad2d", 2, "constant")
pad_layer("ConstantPad1d", 1, "constant", true)
pad_layer("ConstantPad2d", 2, "constant", true)
pad_layer("ReflectionPad1d", 1, "reflect")
pad_layer("ReflectionPad2d", 2, "reflect")
pad_layer("ReplicationPad1d", 1, "replicate")
pad_layer("ReplicationPad2d", 2, "replicate")

-- ---- distances and channels ------------------------------------------------------------------

local CosineSimilarity = Module:extend("CosineSimilarity")
L.CosineSimilarity = CosineSimilarity
function CosineSimilarity:init(opts) self._opts = options("CosineSimilarity", opts, { dim = true, eps = true }) end
function CosineSimilarity:forward(a, b) return F.cosine_similarity(a, b, self._opts) end
function CosineSimilarity:extra_repr() return fmt("dim", self._opts.dim, "eps", self._opts.eps) end

local PairwiseDistance = Module:extend("PairwiseDistance")
L.PairwiseDistance = PairwiseDistance
function PairwiseDistance:init(opts)
  self._opts = options("PairwiseDistance", opts, { p = true, eps = true, keepdim = true })
end
function PairwiseDistance:forward(a, b) return F.pairwise_distance(a, b, self._opts) end
function PairwiseDistance:extra_repr()
  return fmt("p", self._opts.p, "eps", self._opts.eps, "keepdim", self._opts.keepdim)
end

-- Softmax2d: softmax over the channels of (N, C, H, W) or (C, H, W) at each position.
local Softmax2d = Module:extend("Softmax2d")
L.Softmax2d = Softmax2d
function Softmax2d:forward(x)
  if not is_tensor(x) then bad_arg("Softmax2d", "a tensor", x) end
  if x:dim() ~= 3 and x:dim() ~= 4 then
    raise("Softmax2d: expected input (N, C, H, W) or (C, H, W), got shape " .. shape_str(x.shape))
  end
  return dl.softmax(x, x:dim() - 2)
end

-- ChannelShuffle(groups): the channels of (N, C, ...) as a (groups, C / groups) grid,
-- read column by column (ShuffleNet's).
local ChannelShuffle = Module:extend("ChannelShuffle")
L.ChannelShuffle = ChannelShuffle
function ChannelShuffle:init(groups)
  if type(groups) ~= "number" or groups ~= floor(groups) or groups < 1 then
    raise("ChannelShuffle: groups must be a positive integer, got " .. tostring(groups))
  end
  self.groups = groups
end
function ChannelShuffle:forward(x)
  local g = self.groups
  if not is_tensor(x) then bad_arg("ChannelShuffle", "a tensor", x) end
  if x:dim() < 3 or x:size(2) % g ~= 0 then
    raise("ChannelShuffle: expected (N, C, ...) with C divisible by " .. g .. ", got shape " .. shape_str(x.shape))
  end
  local shape = x.shape
  local grid = { shape[1], g, shape[2] / g }
  for i = 3, #shape do grid[#grid + 1] = shape[i] end
  return x:reshape(grid):transpose(2, 3):reshape(shape)
end
function ChannelShuffle:extra_repr() return fmt("groups", self.groups) end

return { functional = FN, layers = L }
