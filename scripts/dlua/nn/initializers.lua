-- dlua.nn.initializers: dl.nn.init, PyTorch's torch.nn.init: each function fills a
-- tensor (a Variable, a module's weight) in place, unrecorded, and returns it.
--
--   dl.nn.init.kaiming_normal_(net.fc1.weight, { nonlinearity = "relu" })
--   dl.nn.init.orthogonal_(rnn.weight_hh, dl.nn.init.calculate_gain("tanh"))
--
-- Fans follow PyTorch's layout, (out, in, kernel...): fan_in = size(2) x the kernel's
-- elements, fan_out = size(1) x the kernel's elements.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, dl = T.is_tensor, T.dl
local type, tostring, sqrt, floor = type, tostring, math.sqrt, math.floor

local init = {}

local function target(op, t)
  if not is_tensor(t) then bad_arg(op, "a tensor", t) end
  if not t:is_floating_point() then
    raise(op .. ": expected a float tensor, got " .. t.dtype)
  end
  return t
end

-- Writes v into t, unrecorded (an initialisation is not part of any gradient).
local function fill(t, v)
  dl.no_grad(function() t:copy_(v) end)
  return t
end

local function opts_of(t) return { dtype = t.dtype, device = t.device } end

function init.calculate_gain(nonlinearity, param)
  local n = nonlinearity or "leaky_relu"
  if n == "linear" or n == "conv1d" or n == "conv2d" or n == "conv3d" or n == "sigmoid" or n == "identity" then
    return 1
  elseif n == "tanh" then
    return 5 / 3
  elseif n == "relu" then
    return sqrt(2)
  elseif n == "leaky_relu" then
    local slope = param == nil and 0.01 or param
    if type(slope) ~= "number" then bad_arg("calculate_gain", "a number for the negative slope", slope) end
    return sqrt(2 / (1 + slope * slope))
  elseif n == "selu" then
    return 3 / 4
  end
  raise("calculate_gain: unknown nonlinearity '" .. tostring(n) .. "'")
end

-- fan_in, fan_out of a weight of at least 2 dims.
function init.calculate_fans(t)
  local op = "calculate_fans"
  if not is_tensor(t) then bad_arg(op, "a tensor", t) end
  if t:dim() < 2 then
    raise(op .. ": fan in and fan out need a tensor of 2 or more dims, got shape " .. T.shape_str(t.shape))
  end
  local receptive = 1
  for d = 3, t:dim() do receptive = receptive * t:size(d) end
  return t:size(2) * receptive, t:size(1) * receptive
end

function init.uniform_(t, a, b)
  target("uniform_", t)
  a, b = a or 0, b or 1
  return fill(t, dl.rand(t.shape, opts_of(t)) * (b - a) + a)
end

function init.normal_(t, mean, std)
  target("normal_", t)
  mean, std = mean or 0, std or 1
  return fill(t, dl.randn(t.shape, opts_of(t)) * std + mean)
end

function init.constant_(t, v)
  target("constant_", t)
  if type(v) ~= "number" then bad_arg("constant_", "a number", v) end
  return fill(t, dl.full(t.shape, v, opts_of(t)))
end

function init.zeros_(t) return init.constant_(t, 0) end
function init.ones_(t) return init.constant_(t, 1) end

function init.eye_(t)
  target("eye_", t)
  if t:dim() ~= 2 then raise("eye_: expected a 2-D tensor, got shape " .. T.shape_str(t.shape)) end
  return fill(t, dl.eye(t:size(1), t:size(2), opts_of(t)))
end

-- Normal(mean, std) cut to [a, b]: values outside are drawn again until none is.
function init.trunc_normal_(t, mean, std, a, b)
  target("trunc_normal_", t)
  mean, std, a, b = mean or 0, std or 1, a or -2, b or 2
  if not (a < b) then raise("trunc_normal_: needs a < b, got " .. tostring(a) .. " and " .. tostring(b)) end
  if (b - mean) / std < -3 or (a - mean) / std > 3 then
    raise("trunc_normal_: [a, b] lies more than 3 std from the mean; almost every draw would be rejected")
  end
  local v = dl.randn(t.shape, opts_of(t)) * std + mean
  for _ = 1, 1000 do
    local bad = v:lt(a):logical_or(v:gt(b))
    if not bad:any() then return fill(t, v) end
    v = dl.where(bad, dl.randn(t.shape, opts_of(t)) * std + mean, v)
  end
  raise("trunc_normal_: could not draw values inside [a, b]")
end

function init.xavier_uniform_(t, gain)
  target("xavier_uniform_", t)
  local fan_in, fan_out = init.calculate_fans(t)
  local bound = (gain or 1) * sqrt(6 / (fan_in + fan_out))
  return init.uniform_(t, -bound, bound)
end

function init.xavier_normal_(t, gain)
  target("xavier_normal_", t)
  local fan_in, fan_out = init.calculate_fans(t)
  return init.normal_(t, 0, (gain or 1) * sqrt(2 / (fan_in + fan_out)))
end

-- kaiming_*_(t [, {a = 0, mode = "fan_in", nonlinearity = "leaky_relu"}]): PyTorch's
-- He initialisation; std = gain / sqrt(fan).
local KAIMING = { a = true, mode = true, nonlinearity = true }
local function kaiming_std(op, t, opts)
  opts = core.options(op, opts, KAIMING)
  local fan_in, fan_out = init.calculate_fans(t)
  local mode = opts.mode or "fan_in"
  if mode ~= "fan_in" and mode ~= "fan_out" then raise(op .. ": mode must be fan_in or fan_out, got " .. tostring(mode)) end
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  return gain / sqrt(mode == "fan_in" and fan_in or fan_out)
end

function init.kaiming_uniform_(t, opts)
  target("kaiming_uniform_", t)
  local bound = sqrt(3) * kaiming_std("kaiming_uniform_", t, opts)
  return init.uniform_(t, -bound, bound)
end

function init.kaiming_normal_(t, opts)
  target("kaiming_normal_", t)
  return init.normal_(t, 0, kaiming_std("kaiming_normal_", t, opts))
end

-- A (semi-)orthogonal matrix (t flattened to (size(1), rest)) times gain: the Q of a
-- Gaussian matrix's QR with R's diagonal made positive (Saxe et al., as PyTorch),
-- orthonormalised by classical Gram-Schmidt applied twice in float64, which keeps
-- the columns orthogonal to rounding.
function init.orthogonal_(t, gain)
  target("orthogonal_", t)
  if t:dim() < 2 then raise("orthogonal_: expected a tensor of 2 or more dims, got shape " .. T.shape_str(t.shape)) end
  local rows = t:size(1)
  local cols = floor(t:numel() / rows)
  local n, m = rows, cols
  if n < m then n, m = m, n end   -- orthonormal columns of a tall (n, m) matrix
  local A = dl.randn(n, m, { dtype = "float64" })
  local Q = dl.zeros(n, m, { dtype = "float64" })
  dl.no_grad(function()
    for j = 1, m do
      local v = A:narrow(2, j, 1)
      if j > 1 then
        local P = Q:narrow(2, 1, j - 1)
        for _ = 1, 2 do v = v - P:matmul(P:t():matmul(v)) end
      end
      local len = v:pow(2):sum():sqrt():item()
      -- R's diagonal entry is <q_j, a_j> = len > 0: the sign fix is already made
      Q:narrow(2, j, 1):copy_(v / len)
    end
  end)
  if rows < cols then Q = Q:t() end
  return fill(t, (Q * (gain or 1)):reshape(t.shape):to(t.dtype))
end

return init
