-- dlua.nn.layers: the layers of dl.nn (docs/training.md).
--
--   local net = dl.nn.Sequential{
--     dl.nn.Conv2d(1, 16, 3, {padding = 1}), dl.nn.ReLU(), dl.nn.MaxPool2d(2),
--     dl.nn.Flatten(), dl.nn.Linear(16 * 14 * 14, 10),
--   }
--
-- Shapes and initialisations are PyTorch's (so that a state dict moves between the two):
-- Linear and Conv2d weights kaiming_uniform(a = sqrt(5)), that is U(-1/sqrt(fan_in),
-- 1/sqrt(fan_in)), biases the same bound; Embedding N(0, 1); batch norm weight 1, bias 0. Dense is TensorFlow's (kernel
-- (in, units), glorot_uniform, zero bias, input size taken from the first call). All
-- draw from the engine's generator, so dl.manual_seed(n) makes a model reproducible.
local core = require("dlua.core")
local T = require("dlua.tensor")
local Module = require("dlua.nn.module")
local F = require("dlua.nn.functional")
core.own_source()

local raise, bad_arg, typename, options = core.raise, core.bad_arg, core.typename, core.options
local is_tensor, shape_str, meta = T.is_tensor, T.shape_str, T.meta
local dl = T.dl
local type, tostring, ipairs, pairs, rawget, rawset, select = type, tostring, ipairs, pairs, rawget, rawset, select
local sqrt, floor = math.sqrt, math.floor
local fmt = Module.format_args

local L = {}

-- ---- helpers ----------------------------------------------------------------------------------

local function int_arg(op, v, what, min)
  if not core.integer(v) or v < (min or 1) then
    raise(op .. ": " .. what .. " must be an integer >= " .. (min or 1) .. ", got " .. tostring(v))
  end
  return v
end

-- U(-bound, bound) of the given shape.
local function uniform(shape, bound)
  return (dl.rand(shape) * 2 - 1) * bound
end
L.uniform = uniform

local function param(init, name) return dl.Variable(init, name) end
L.int_arg, L.param = int_arg, param

local function check_tensor(op, x)
  if not is_tensor(x) then bad_arg(op, "a tensor", x) end
end

-- ---- Linear, Dense --------------------------------------------------------------------------

local Linear = Module:extend("Linear")
L.Linear = Linear

function Linear:init(in_features, out_features, opts)
  opts = options("Linear", opts, { bias = true })
  int_arg("Linear", in_features, "in_features", 0)
  int_arg("Linear", out_features, "out_features", 0)
  self.in_features, self.out_features = in_features, out_features
  local bound = in_features > 0 and 1 / sqrt(in_features) or 0
  self.weight = param(uniform({ out_features, in_features }, bound), "weight")
  if opts.bias ~= false then self.bias = param(uniform({ out_features }, bound), "bias") end
end

function Linear:forward(x)
  check_tensor("Linear", x)
  local m = meta(x)
  local n = m.ndim
  if n == 0 or m.sizes[n - 1] ~= self.in_features then
    raise("Linear: expected input with " .. self.in_features .. " features, got shape " .. shape_str(x))
  end
  local y = x:matmul(self.weight:t())
  local b = self.bias
  if b then y = y + b end
  return y
end

function Linear:extra_repr()
  return fmt("in_features", self.in_features, "out_features", self.out_features, "bias", self.bias ~= nil)
end

local ACTIVATIONS = {
  relu = dl.relu, tanh = dl.tanh, sigmoid = dl.sigmoid, softplus = dl.softplus,
  softmax = function(x) return dl.softmax(x, -1) end,
  log_softmax = function(x) return dl.log_softmax(x, -1) end,
  gelu = F.gelu, silu = F.silu, linear = false,
}

local function activation_arg(op, a)
  if a == nil then return nil, nil end
  if type(a) == "function" then return a, "function" end
  if type(a) == "table" and Module.is_module(a) then return a, a.__name end
  if type(a) == "string" and ACTIVATIONS[a] ~= nil then return ACTIVATIONS[a] or nil, a end
  raise(op .. ": unknown activation " .. (type(a) == "string" and ("\"" .. a .. "\"") or typename(a))
        .. " (expected a function or one of relu, tanh, sigmoid, softmax, log_softmax, softplus, gelu, silu, linear)")
end

-- TensorFlow's Dense: y = activation(x kernel + bias), kernel (in, units); the input size
-- is taken from the first call, when the variables are made.
local Dense = Module:extend("Dense")
L.Dense = Dense

function Dense:init(units, opts)
  opts = options("Dense", opts, { activation = true, use_bias = true, input_dim = true })
  self.units = int_arg("Dense", units, "units")
  self._act, self._act_name = activation_arg("Dense", opts.activation)
  self.use_bias = opts.use_bias ~= false
  self.built = false
  if opts.input_dim then self:_build(int_arg("Dense", opts.input_dim, "input_dim")) end
end

function Dense:_build(in_features)
  self.in_features = in_features
  local limit = sqrt(6 / (in_features + self.units))   -- glorot_uniform
  self.kernel = param(uniform({ in_features, self.units }, limit), "kernel")
  if self.use_bias then self.bias = param(dl.zeros(self.units), "bias") end
  self.built = true
end

-- load_state_dict on a model not yet called: the kernel's shape in the state dict builds it.
function Dense:_materialize(sd, prefix)
  if self.built then return end
  local k = sd[prefix .. "kernel"]
  if is_tensor(k) and k:dim() == 2 and k:size(2) == self.units then self:_build(k:size(1)) end
end

function Dense:forward(x)
  check_tensor("Dense", x)
  local m = meta(x)
  local n = m.ndim
  if n == 0 then raise("Dense: expected an input with at least 1 dimension, got shape ()") end
  if not self.built then
    dl.no_grad(function() self:_build(m.sizes[n - 1]) end)
  elseif m.sizes[n - 1] ~= self.in_features then
    raise("Dense: expected input with " .. self.in_features .. " features, got shape " .. shape_str(x))
  end
  if not x:is_floating_point() then x = x:to(self.kernel.dtype) end
  local y = x:matmul(self.kernel)
  local b = self.bias
  if b then y = y + b end
  local act = self._act
  if act then y = act(y) end
  return y
end

function Dense:extra_repr()
  return fmt("units", self.units, "in_features", self.in_features, "activation", self._act_name,
             "use_bias", self.use_bias)
end

-- ---- convolution, pooling -----------------------------------------------------------------------

-- A convolution's channel counts, checked against its groups; returns the groups.
local function conv_groups(name, in_channels, out_channels, groups)
  int_arg(name, in_channels, "in_channels")
  int_arg(name, out_channels, "out_channels")
  groups = int_arg(name, groups or 1, "groups")
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    raise(name .. ": in_channels (" .. in_channels .. ") and out_channels (" .. out_channels
          .. ") must be divisible by groups (" .. groups .. ")")
  end
  return groups
end

L.conv_groups = conv_groups

-- A convolution's padding_mode; for one other than "zeros", also the F.pad counts that
-- make its padding before a convolution with none (PyTorch's
-- _reversed_padding_repeated_twice: the last dim first, and "same"'s odd one at the end).
-- padding is "same", "valid" or the per-dim sizes; kernel, dilation and stride lists.
local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }
function L.conv_padding_mode(name, mode, padding, kernel, dilation, stride)
  mode = mode == nil and "zeros" or mode
  if not PADDING_MODES[mode] then
    raise(name .. ": padding_mode must be zeros, reflect, replicate or circular, got "
          .. (type(mode) == "string" and ("\"" .. mode .. "\"") or typename(mode)))
  end
  if mode == "zeros" then return mode, nil end
  local pads = {}
  for i = #kernel, 1, -1 do
    local before, after = 0, 0
    if padding == "same" then
      if stride[i] ~= 1 then raise(name .. ": padding \"same\" needs stride 1, got stride " .. shape_str(stride)) end
      local total = dilation[i] * (kernel[i] - 1)
      before = floor(total / 2)
      after = total - before
    elseif padding ~= "valid" then
      before, after = padding[i], padding[i]
    end
    pads[#pads + 1], pads[#pads + 2] = before, after
  end
  return mode, pads
end

-- The output_padding that makes a transposed convolution m's output output_size (its
-- spatial sizes, or with the batch and channel dims too), as PyTorch's _output_padding:
-- each size from the smallest the layer makes to stride - 1 more.
function L.transposed_output_padding(name, m, x, output_size, dims)
  if dims == 1 and type(output_size) == "number" then output_size = { output_size } end
  if type(output_size) ~= "table" or is_tensor(output_size) then
    bad_arg(name, "an output_size (a list of sizes)", output_size)
  end
  local lead = x:dim() - dims   -- (N, C) or, unbatched, (C)
  local want = {}
  if #output_size ~= dims and #output_size ~= dims + lead then
    raise(name .. ": for an input of " .. x:dim() .. " dims, output_size must have " .. dims .. " or " .. (dims + lead)
          .. " sizes, got " .. #output_size)
  end
  local skip = #output_size - dims
  local lo, hi, pads, fits = {}, {}, {}, true
  for i = 1, dims do
    want[i] = output_size[skip + i]
    if not core.integer(want[i]) then raise(name .. ": output_size must be integers, got " .. tostring(want[i])) end
    lo[i] = (x:size(lead + i) - 1) * m.stride[i] - 2 * m.padding[i] + m.dilation[i] * (m.kernel_size[i] - 1) + 1
    hi[i] = lo[i] + m.stride[i] - 1
    fits = fits and want[i] >= lo[i] and want[i] <= hi[i]
    pads[i] = want[i] - lo[i]
  end
  if not fits then
    raise(name .. ": requested an output size of " .. shape_str(want) .. ", but valid sizes range from " .. shape_str(lo)
          .. " to " .. shape_str(hi) .. " (for an input of shape " .. shape_str(x.shape) .. ")")
  end
  return pads
end

local Conv2d = Module:extend("Conv2d")
L.Conv2d = Conv2d

-- Conv2d(in_channels, out_channels, k [, {stride, padding, dilation, groups, bias,
-- padding_mode = "zeros"}]): padding_mode "reflect", "replicate" or "circular" pads the
-- input with F.pad's mode instead of zeros.
function Conv2d:init(in_channels, out_channels, k, opts)
  opts = options("Conv2d", opts, { stride = true, padding = true, dilation = true, groups = true, bias = true,
                                   padding_mode = true })
  local groups = conv_groups("Conv2d", in_channels, out_channels, opts.groups)
  local kh, kw = F._pair("Conv2d", "kernel size", k, 1)
  self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, { kh, kw }
  self.stride = { F._pair("Conv2d", "stride", opts.stride or 1, 1) }
  self.dilation = { F._pair("Conv2d", "dilation", opts.dilation or 1, 1) }
  local p = opts.padding or 0
  self.padding = type(p) == "string" and p or { F._pair("Conv2d", "padding", p, 0) }
  self.groups = groups
  self._opts = { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = groups }
  self.padding_mode, self._pad = L.conv_padding_mode("Conv2d", opts.padding_mode, self.padding, self.kernel_size,
                                                     self.dilation, self.stride)
  if self._pad then self._opts.padding = 0 end
  local fan_in = in_channels / groups * kh * kw
  local bound = 1 / sqrt(fan_in)
  self.weight = param(uniform({ out_channels, in_channels / groups, kh, kw }, bound), "weight")
  if opts.bias ~= false then self.bias = param(uniform({ out_channels }, bound), "bias") end
end

function Conv2d:forward(x)
  check_tensor("Conv2d", x)
  local m = meta(x)
  local n = m.ndim
  if (n ~= 4 and n ~= 3) or m.sizes[n - 3] ~= self.in_channels then
    raise("Conv2d: expected input (N, " .. self.in_channels .. ", H, W) or (" .. self.in_channels
          .. ", H, W), got shape " .. shape_str(x))
  end
  if self._pad then x = F.pad(x, self._pad, { mode = self.padding_mode }) end
  return F.conv2d(x, self.weight, self.bias, self._opts)
end

-- Conv1d(in_channels, out_channels, k [, {stride, padding, dilation, groups, bias,
-- padding_mode}]): weight (out, in / groups, k), PyTorch's initialisation; input (N, C, L)
-- or (C, L); k a number or {k}.
local Conv1d = Module:extend("Conv1d")
L.Conv1d = Conv1d
function Conv1d:init(in_channels, out_channels, k, opts)
  opts = options("Conv1d", opts, { stride = true, padding = true, dilation = true, groups = true, bias = true,
                                   padding_mode = true })
  local groups = conv_groups("Conv1d", in_channels, out_channels, opts.groups)
  if type(k) == "table" and #k == 1 then k = k[1] end
  int_arg("Conv1d", k, "kernel size")
  self.in_channels, self.out_channels, self.kernel_size, self.groups = in_channels, out_channels, k, groups
  self._opts = { stride = opts.stride or 1, padding = opts.padding or 0, dilation = opts.dilation or 1, groups = groups }
  local function one(v) return type(v) == "table" and v[1] or v end
  local p = one(self._opts.padding)
  self.padding_mode, self._pad = L.conv_padding_mode("Conv1d", opts.padding_mode, type(p) == "string" and p or { p },
                                                     { k }, { one(self._opts.dilation) }, { one(self._opts.stride) })
  if self._pad then
    self._padded_opts = { stride = self._opts.stride, padding = 0, dilation = self._opts.dilation, groups = groups }
  end
  local bound = 1 / sqrt(in_channels / groups * k)
  self.weight = param(uniform({ out_channels, in_channels / groups, k }, bound), "weight")
  if opts.bias ~= false then self.bias = param(uniform({ out_channels }, bound), "bias") end
end
function Conv1d:forward(x)
  check_tensor("Conv1d", x)
  local n = x:dim()
  if (n ~= 3 and n ~= 2) or x:size(n - 1) ~= self.in_channels then
    raise("Conv1d: expected input (N, " .. self.in_channels .. ", L) or (" .. self.in_channels .. ", L), got shape "
          .. shape_str(x))
  end
  if self._pad then
    return F.conv1d(F.pad(x, self._pad, { mode = self.padding_mode }), self.weight, self.bias, self._padded_opts)
  end
  return F.conv1d(x, self.weight, self.bias, self._opts)
end
function Conv1d:extra_repr()
  return fmt("", self.in_channels, "", self.out_channels, "kernel_size", self.kernel_size, "stride", self._opts.stride,
             "padding", self._opts.padding, "groups", self.groups ~= 1 and self.groups or nil,
             "padding_mode", self.padding_mode ~= "zeros" and self.padding_mode or nil)
end

function Conv2d:extra_repr()
  local pad = self.padding
  return fmt("", self.in_channels, "", self.out_channels, "kernel_size", self.kernel_size,
             "stride", self.stride, "padding", pad, "dilation",
             (self.dilation[1] ~= 1 or self.dilation[2] ~= 1) and self.dilation or nil,
             "groups", self.groups ~= 1 and self.groups or nil, "bias", self.bias ~= nil,
             "padding_mode", self.padding_mode ~= "zeros" and self.padding_mode or nil)
end

-- ConvTranspose2d(in_channels, out_channels, k [, {stride, padding, output_padding,
-- dilation, groups, bias}]) and ConvTranspose1d (k a number): F.conv_transpose2d / 1d
-- with a weight (in, out / groups, kH, kW) or (in, out / groups, k), initialised as
-- PyTorch's (its fan-in is the weight's second dim times the kernel's size: out / groups
-- k). Input (N, C, H, W) or (C, H, W); (N, C, L) or (C, L). forward(x [, output_size])
-- picks the output_padding that gives that size (L.transposed_output_padding).
-- padding_mode: "zeros" only, as PyTorch's.
local CONVT_OPTS = { stride = true, padding = true, output_padding = true, dilation = true, groups = true,
                     bias = true, padding_mode = true }
function L.transposed_padding_mode(name, mode)
  if mode ~= nil and mode ~= "zeros" then
    raise(name .. ": padding_mode must be \"zeros\" (the only one of a transposed convolution), got "
          .. (type(mode) == "string" and ("\"" .. mode .. "\"") or typename(mode)))
  end
end
local function conv_transpose_init(self, name, dims, in_channels, out_channels, k, opts)
  opts = options(name, opts, CONVT_OPTS)
  L.transposed_padding_mode(name, opts.padding_mode)
  local groups = conv_groups(name, in_channels, out_channels, opts.groups)
  local function sizes(what, v, min)
    if dims == 1 then return { int_arg(name, v, what, min) } end
    return { F._pair(name, what, v, min) }
  end
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
  self.kernel_size = sizes("kernel size", k, 1)
  self.stride = sizes("stride", opts.stride or 1, 1)
  self.padding = sizes("padding", opts.padding or 0, 0)
  self.output_padding = sizes("output_padding", opts.output_padding or 0, 0)
  self.dilation = sizes("dilation", opts.dilation or 1, 1)
  local unpacked = function(t) return dims == 1 and t[1] or t end
  self._opts = { stride = unpacked(self.stride), padding = unpacked(self.padding),
                 output_padding = unpacked(self.output_padding), dilation = unpacked(self.dilation), groups = groups }
  local shape, fan_in = { in_channels, out_channels / groups }, out_channels / groups
  for _, kk in ipairs(self.kernel_size) do
    shape[#shape + 1] = kk
    fan_in = fan_in * kk
  end
  local bound = 1 / sqrt(fan_in)
  self.weight = param(uniform(shape, bound), "weight")
  if opts.bias ~= false then self.bias = param(uniform({ out_channels }, bound), "bias") end
end
local function conv_transpose_repr(self)
  local function shown(t, default)
    for _, v in ipairs(t) do if v ~= default then return t end end
    return nil
  end
  return fmt("", self.in_channels, "", self.out_channels, "kernel_size", self.kernel_size, "stride", self.stride,
             "padding", shown(self.padding, 0), "output_padding", shown(self.output_padding, 0),
             "dilation", shown(self.dilation, 1), "groups", self.groups ~= 1 and self.groups or nil,
             "bias", self.bias ~= nil)
end

for dims, what in ipairs({ "L", "H, W" }) do
  local name = "ConvTranspose" .. dims .. "d"
  local Layer = Module:extend(name)
  L[name] = Layer
  local conv = dims == 1 and F.conv_transpose1d or F.conv_transpose2d
  function Layer:init(in_channels, out_channels, k, opts)
    conv_transpose_init(self, name, dims, in_channels, out_channels, k, opts)
  end
  function Layer:forward(x, output_size)
    check_tensor(name, x)
    local n = x:dim()
    if (n ~= dims + 2 and n ~= dims + 1) or x:size(n - dims) ~= self.in_channels then
      raise(name .. ": expected input (N, " .. self.in_channels .. ", " .. what .. ") or (" .. self.in_channels
            .. ", " .. what .. "), got shape " .. shape_str(x))
    end
    local opts = self._opts
    if output_size ~= nil then
      local o = L.transposed_output_padding(name, self, x, output_size, dims)
      opts = { stride = opts.stride, padding = opts.padding, dilation = opts.dilation, groups = opts.groups,
               output_padding = dims == 1 and o[1] or o }
    end
    return conv(x, self.weight, self.bias, opts)
  end
  Layer.extra_repr = conv_transpose_repr
end

-- A pooling layer's options: count_include_pad and divisor_override for the average
-- pools, dilation and return_indices (forward gives the maxima and their indices) for
-- the max pools.
local function pool_options(name)
  local o = { stride = true, padding = true, ceil_mode = true }
  if name:find("^Avg") then o.count_include_pad, o.divisor_override = true, true
  else o.dilation, o.return_indices = true, true end
  return o
end

local function pool_init(self, name, k, opts)
  opts = options(name, opts, pool_options(name))
  local kh, kw = F._pair(name, "kernel size", k, 1)
  self.kernel_size = { kh, kw }
  self.stride = { F._pair(name, "stride", opts.stride or { kh, kw }, 1) }
  self.padding = { F._pair(name, "padding", opts.padding or 0, 0) }
  self.ceil_mode = opts.ceil_mode and true or false
  if opts.dilation ~= nil then self.dilation = { F._pair(name, "dilation", opts.dilation, 1) } end
  if opts.divisor_override ~= nil then self.divisor_override = F._divisor_arg(name, opts.divisor_override) end
  self.return_indices = opts.return_indices and true or nil
  self._opts = { stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode,
                 count_include_pad = opts.count_include_pad, dilation = self.dilation,
                 divisor_override = self.divisor_override, return_indices = self.return_indices }
end

local function pool_repr(self)
  local d = self.dilation
  if type(d) == "table" and d[1] == 1 and d[2] == 1 then d = nil end
  return fmt("kernel_size", self.kernel_size, "stride", self.stride, "padding", self.padding,
             "dilation", d ~= 1 and d or nil, "ceil_mode", self.ceil_mode or nil,
             "divisor_override", self.divisor_override, "return_indices", self.return_indices)
end

local MaxPool2d = Module:extend("MaxPool2d")
L.MaxPool2d = MaxPool2d
function MaxPool2d:init(k, opts) pool_init(self, "MaxPool2d", k, opts) end
function MaxPool2d:forward(x) return F.max_pool2d(x, self.kernel_size, self._opts) end
MaxPool2d.extra_repr = pool_repr

local AvgPool2d = Module:extend("AvgPool2d")
L.AvgPool2d = AvgPool2d
function AvgPool2d:init(k, opts) pool_init(self, "AvgPool2d", k, opts) end
function AvgPool2d:forward(x) return F.avg_pool2d(x, self.kernel_size, self._opts) end
AvgPool2d.extra_repr = pool_repr

-- MaxPool1d(k [, {stride = k, padding, dilation, ceil_mode, return_indices}]) and
-- AvgPool1d (count_include_pad and divisor_override instead of dilation and return_indices).
for _, name in ipairs({ "MaxPool1d", "AvgPool1d" }) do
  local cls = Module:extend(name)
  local fn = name == "MaxPool1d" and F.max_pool1d or F.avg_pool1d
  function cls:init(k, opts)
    opts = options(name, opts, pool_options(name))
    self.kernel_size = int_arg(name, k, "kernel size")
    self.stride = int_arg(name, opts.stride or k, "stride")
    self.padding = int_arg(name, opts.padding or 0, "padding", 0)
    self.ceil_mode = opts.ceil_mode and true or false
    if opts.dilation ~= nil then self.dilation = int_arg(name, opts.dilation, "dilation") end
    if opts.divisor_override ~= nil then self.divisor_override = F._divisor_arg(name, opts.divisor_override) end
    self.return_indices = opts.return_indices and true or nil
    self._opts = { stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode,
                   count_include_pad = opts.count_include_pad, dilation = self.dilation,
                   divisor_override = self.divisor_override, return_indices = self.return_indices }
  end
  function cls:forward(x) return fn(x, self.kernel_size, self._opts) end
  cls.extra_repr = pool_repr
  L[name] = cls
end

local GlobalAvgPool2d = Module:extend("GlobalAvgPool2d")
L.GlobalAvgPool2d = GlobalAvgPool2d
function GlobalAvgPool2d:init(opts)
  opts = options("GlobalAvgPool2d", opts, { keepdim = true })
  self.keepdim = opts.keepdim and true or false
end
function GlobalAvgPool2d:forward(x) return F.global_avg_pool2d(x, self.keepdim) end

-- Flatten dims start_dim..end_dim (default 2..-1: everything but the batch dim).
local Flatten = Module:extend("Flatten")
L.Flatten = Flatten
function Flatten:init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
end
function Flatten:forward(x)
  check_tensor("Flatten", x)
  return x:flatten(self.start_dim, self.end_dim)
end
function Flatten:extra_repr() return fmt("start_dim", self.start_dim, "end_dim", self.end_dim) end

-- Unflatten(dim, sizes): dim split into sizes (their product its size), as PyTorch's.
local Unflatten = Module:extend("Unflatten")
L.Unflatten = Unflatten
function Unflatten:init(dim, sizes)
  int_arg("Unflatten", math.abs(dim or 0), "dim")
  if type(sizes) ~= "table" or #sizes == 0 then bad_arg("Unflatten", "a list of sizes", sizes) end
  self.dim, self.unflattened_size = dim, sizes
end
function Unflatten:forward(x)
  check_tensor("Unflatten", x)
  local n = x:dim()
  local d = self.dim < 0 and n + self.dim + 1 or self.dim
  if d < 1 or d > n then raise("Unflatten: dim " .. self.dim .. " is out of range for input of shape " .. shape_str(x)) end
  local shape = {}
  for k = 1, d - 1 do shape[#shape + 1] = x:size(k) end
  for _, s in ipairs(self.unflattened_size) do shape[#shape + 1] = s end
  for k = d + 1, n do shape[#shape + 1] = x:size(k) end
  return x:reshape(shape)
end
function Unflatten:extra_repr() return fmt("dim", self.dim, "unflattened_size", self.unflattened_size) end

-- ---- dropout, normalisation, embedding ---------------------------------------------------------

local Dropout = Module:extend("Dropout")
L.Dropout = Dropout
function Dropout:init(p)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or p < 0 or p > 1 then
    raise("Dropout: probability must be between 0 and 1, got " .. tostring(p))
  end
  self.p = p
end
function Dropout:forward(x) return F.dropout(x, self.p, self.training) end
function Dropout:extra_repr() return fmt("p", self.p) end

-- Batch normalisation over dim 2 (channels) of (N, C) or (N, C, ...): the running mean
-- and variance are buffers (in state_dict), updated in training with `momentum` (0.1);
-- momentum = false (PyTorch's None) makes them cumulative averages of every batch so
-- far (the factor 1 / num_batches_tracked).
local BatchNorm = Module:extend("BatchNorm")
L.BatchNorm = BatchNorm
BatchNorm._dims = nil   -- accepted input ranks (BatchNorm1d: 2 or 3, BatchNorm2d: 4)

function BatchNorm:init(num_features, opts)
  opts = options(self.__name, opts, { eps = true, momentum = true, affine = true, track_running_stats = true })
  self.num_features = int_arg(self.__name, num_features, "num_features")
  self.eps = opts.eps or 1e-5
  local momentum = opts.momentum
  if momentum == nil then momentum = 0.1 end
  if momentum ~= false and type(momentum) ~= "number" then
    raise(self.__name .. ": momentum must be a number, or false for a cumulative average, got "
          .. typename(momentum))
  end
  self.momentum = momentum
  self.affine = opts.affine ~= false
  self.track_running_stats = opts.track_running_stats ~= false
  if self.affine then
    self.weight = param(dl.ones(num_features), "weight")
    self.bias = param(dl.zeros(num_features), "bias")
  end
  if self.track_running_stats then
    self:register_buffer("running_mean", dl.zeros(num_features))
    self:register_buffer("running_var", dl.ones(num_features))
    self:register_buffer("num_batches_tracked", dl.tensor(0, { dtype = "int64" }))
  end
end

function BatchNorm:forward(x)
  check_tensor(self.__name, x)
  local m = meta(x)
  local n = m.ndim
  local dims = self._dims
  local rank_ok = n >= 2 and (dims == nil or n == dims[1] or n == dims[2])
  if not rank_ok or m.sizes[1] ~= self.num_features then
    local want = dims == nil and "(N, C, ...)" or dims[1] == 5 and "(N, C, D, H, W)"
                 or (dims[1] == 4 and "(N, C, H, W)" or "(N, C) or (N, C, L)")
    raise(self.__name .. ": expected input " .. want .. " with C = " .. self.num_features
          .. ", got shape " .. shape_str(x))
  end
  local training = self.training
  local rm, rv = self.running_mean, self.running_var
  local momentum = self.momentum
  if training and rm then
    local count = self.num_batches_tracked
    count:add_(1)
    if momentum == false then momentum = 1 / count:item() end
  end
  return F.batch_norm(x, rm, rv, self.weight, self.bias, training or not rm, momentum or 0, self.eps)
end

function BatchNorm:extra_repr()
  return fmt("", self.num_features, "eps", self.eps, "momentum", self.momentum, "affine", self.affine,
             "track_running_stats", self.track_running_stats)
end

-- Layer normalisation over the last dims (normalized_shape: their sizes, or one size):
-- weight (ones) and bias (zeros) of that shape unless elementwise_affine = false.
local LayerNorm = Module:extend("LayerNorm")
L.LayerNorm = LayerNorm
function LayerNorm:init(normalized_shape, opts)
  opts = options("LayerNorm", opts, { eps = true, elementwise_affine = true, bias = true })
  local ns = type(normalized_shape) == "number" and { normalized_shape } or normalized_shape
  if type(ns) ~= "table" or #ns == 0 then bad_arg("LayerNorm", "the normalised shape (a number or a list)", normalized_shape) end
  for i, d in ipairs(ns) do int_arg("LayerNorm", d, "normalized_shape[" .. i .. "]") end
  self.normalized_shape = ns
  self.eps = opts.eps or 1e-5
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then
    self.weight = param(dl.ones(ns), "weight")
    if opts.bias ~= false then self.bias = param(dl.zeros(ns), "bias") end
  end
end
function LayerNorm:forward(x) return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps) end
function LayerNorm:extra_repr()
  return fmt("", shape_str(self.normalized_shape), "eps", self.eps, "elementwise_affine", self.elementwise_affine)
end

-- Group normalisation of (N, C, ...) in num_groups groups of channels; weight and bias
-- per channel unless affine = false.
local GroupNorm = Module:extend("GroupNorm")
L.GroupNorm = GroupNorm
function GroupNorm:init(num_groups, num_channels, opts)
  opts = options("GroupNorm", opts, { eps = true, affine = true })
  self.num_groups = int_arg("GroupNorm", num_groups, "num_groups")
  self.num_channels = int_arg("GroupNorm", num_channels, "num_channels")
  if num_channels % num_groups ~= 0 then
    raise("GroupNorm: num_channels (" .. num_channels .. ") must be a multiple of num_groups (" .. num_groups .. ")")
  end
  self.eps = opts.eps or 1e-5
  self.affine = opts.affine ~= false
  if self.affine then
    self.weight = param(dl.ones(num_channels), "weight")
    self.bias = param(dl.zeros(num_channels), "bias")
  end
end
function GroupNorm:forward(x)
  check_tensor("GroupNorm", x)
  if x:dim() < 2 or x:size(2) ~= self.num_channels then
    raise("GroupNorm: expected input (N, " .. self.num_channels .. ", ...), got shape " .. shape_str(x))
  end
  return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
end
function GroupNorm:extra_repr()
  return fmt("", self.num_groups, "", self.num_channels, "eps", self.eps, "affine", self.affine)
end

local BatchNorm1d = BatchNorm:extend("BatchNorm1d")
BatchNorm1d._dims = { 2, 3 }
L.BatchNorm1d = BatchNorm1d
local BatchNorm2d = BatchNorm:extend("BatchNorm2d")
BatchNorm2d._dims = { 4, 4 }
L.BatchNorm2d = BatchNorm2d
local BatchNorm3d = BatchNorm:extend("BatchNorm3d")
BatchNorm3d._dims = { 5, 5 }
L.BatchNorm3d = BatchNorm3d

-- Embedding(n, d [, {padding_idx, max_norm, norm_type = 2}]): rows of an (n, d) table at
-- 1-based indices; the padding row (1-based) starts at zero and gets no gradient. With
-- max_norm, each call first renormalises the weight rows it looks up, in place, to a
-- norm_type norm of at most max_norm (F.embedding's, as PyTorch's).
local Embedding = Module:extend("Embedding")
L.Embedding = Embedding
local function norm_opts(name, opts)
  local max_norm, p = opts.max_norm, opts.norm_type
  if max_norm ~= nil and (type(max_norm) ~= "number" or not (max_norm >= 0)) then
    raise(name .. ": max_norm must be a number >= 0, got " .. tostring(max_norm))
  end
  if p ~= nil and (type(p) ~= "number" or p ~= p) then
    raise(name .. ": norm_type must be a number, got " .. tostring(p))
  end
  return max_norm, p
end
function Embedding:init(n, d, opts)
  opts = options("Embedding", opts, { padding_idx = true, max_norm = true, norm_type = true })
  self.max_norm, self.norm_type = norm_opts("Embedding", opts)
  self.num_embeddings = int_arg("Embedding", n, "num_embeddings")
  self.embedding_dim = int_arg("Embedding", d, "embedding_dim")
  local pad = opts.padding_idx
  local w = dl.randn(n, d)
  if pad ~= nil then
    if type(pad) ~= "number" or pad ~= floor(pad) or pad == 0 or pad > n or pad < -n then
      raise("Embedding: padding_idx must be in 1.." .. n .. " or -" .. n .. "..-1, got " .. tostring(pad))
    end
    if pad < 0 then pad = n + 1 + pad end
    w[pad] = 0
  end
  self.padding_idx = pad
  self.weight = param(w, "weight")
end
function Embedding:forward(idx)
  check_tensor("Embedding", idx)
  if self.max_norm == nil then return F.embedding(idx, self.weight, self.padding_idx) end
  return F.embedding(idx, self.weight, { padding_idx = self.padding_idx, max_norm = self.max_norm,
                                         norm_type = self.norm_type })
end
function Embedding:extra_repr()
  return fmt("", self.num_embeddings, "", self.embedding_dim, "padding_idx", self.padding_idx,
             "max_norm", self.max_norm, "norm_type", self.norm_type ~= 2 and self.norm_type or nil)
end

-- nn.Embedding.from_pretrained(weights (n, d) [, {freeze = true, padding_idx, max_norm,
-- norm_type}]): an Embedding holding a copy of weights (its padding row, dtype and
-- device too), frozen unless freeze = false (PyTorch's).
function Embedding.from_pretrained(weights, opts)
  local name = "Embedding.from_pretrained"
  check_tensor(name, weights)
  if weights:dim() ~= 2 then raise(name .. ": expected weights of 2 dims (n, d), got shape " .. shape_str(weights)) end
  if not weights:is_floating_point() then
    raise(name .. ": expected floating-point weights, got " .. weights.dtype)   -- (parameters are floats)
  end
  opts = options(name, opts, { freeze = true, padding_idx = true, max_norm = true, norm_type = true })
  norm_opts(name, opts)
  local e = Embedding(weights:size(1), weights:size(2), { padding_idx = opts.padding_idx, max_norm = opts.max_norm,
                                                          norm_type = opts.norm_type })
  e.weight = param(weights:detach():clone(), "weight")   -- (of the weights' dtype and device)
  if opts.freeze ~= false then e.weight:requires_grad_(false) end
  return e
end

-- ---- activations -------------------------------------------------------------------------------

-- A layer without parameters that applies fn, as into[name] (L when absent). It takes no
-- arguments (an option PyTorch's takes would otherwise be dropped in silence), unless
-- any_args (Identity ignores its arguments, as PyTorch's).
local function activation(name, fn, into, any_args)
  local cls = Module:extend(name)
  if not any_args then
    function cls:init(...)
      if select("#", ...) > 0 then raise(name .. ": takes no arguments, got " .. typename((...))) end
    end
  end
  function cls:forward(x) return fn(x) end
  local target = into or L
  target[name] = cls
  return cls
end
L.activation = activation
activation("ReLU", dl.relu)
activation("Tanh", dl.tanh)
activation("Sigmoid", dl.sigmoid)
activation("SiLU", F.silu)
activation("Identity", function(x) return x end, nil, true)

-- GELU([approximate = "none" | {approximate}]): F.gelu, "tanh" its approximation.
local GELU = Module:extend("GELU")
L.GELU = GELU
function GELU:init(approximate)
  if type(approximate) == "table" then approximate = options("GELU", approximate, { approximate = true }).approximate end
  if approximate ~= nil and approximate ~= "none" and approximate ~= "tanh" then
    raise("GELU: approximate must be \"none\" or \"tanh\", got "
          .. (type(approximate) == "string" and ("\"" .. approximate .. "\"") or typename(approximate)))
  end
  self.approximate = approximate or "none"
end
function GELU:forward(x) return F.gelu(x, self.approximate) end
function GELU:extra_repr() return fmt("approximate", self.approximate) end

-- Softplus([beta = 1, threshold = 20] | {beta, threshold}): F.softplus.
local Softplus = Module:extend("Softplus")
L.Softplus = Softplus
function Softplus:init(beta, threshold)
  if type(beta) == "table" then
    local o = options("Softplus", beta, { beta = true, threshold = true })
    beta, threshold = o.beta, o.threshold
  end
  for _, v in ipairs({ { "beta", beta }, { "threshold", threshold } }) do
    if v[2] ~= nil and type(v[2]) ~= "number" then bad_arg("Softplus", "a number (" .. v[1] .. ")", v[2]) end
  end
  if beta == 0 then raise("Softplus: beta must not be 0") end
  self.beta, self.threshold = beta or 1, threshold or 20
end
function Softplus:forward(x) return F.softplus(x, self.beta, self.threshold) end
function Softplus:extra_repr() return fmt("beta", self.beta, "threshold", self.threshold) end

-- LeakyReLU([negative_slope = 0.01 | {negative_slope}]).
local LeakyReLU = Module:extend("LeakyReLU")
L.LeakyReLU = LeakyReLU
function LeakyReLU:init(slope)
  if type(slope) == "table" then slope = options("LeakyReLU", slope, { negative_slope = true }).negative_slope end
  if slope ~= nil and type(slope) ~= "number" then bad_arg("LeakyReLU", "a number (negative_slope)", slope) end
  self.negative_slope = slope or 0.01
end
function LeakyReLU:forward(x) return F.leaky_relu(x, self.negative_slope) end
function LeakyReLU:extra_repr() return fmt("negative_slope", self.negative_slope) end

for _, name in ipairs({ "Softmax", "LogSoftmax" }) do
  local cls = Module:extend(name)
  local fn = name == "Softmax" and dl.softmax or dl.log_softmax
  function cls:init(dim) self.dim = dim or -1 end
  function cls:forward(x) return fn(x, self.dim) end
  function cls:extra_repr() return fmt("dim", self.dim) end
  L[name] = cls
end

-- ---- Sequential -------------------------------------------------------------------------------

-- Sequential{m1, m2, ...}: calls each in turn. The steps are the module's integer keys
-- (seq[i], #seq, ipairs(seq)); a step may also be a plain function (no parameters).
local Sequential = Module:extend("Sequential")
L.Sequential = Sequential

local function check_step(i, m)
  if not (Module.is_module(m) or type(m) == "function") then
    raise("Sequential: step " .. tostring(i) .. " is a " .. typename(m) .. ", expected a module or a function")
  end
end

function Sequential:init(list, ...)
  if Module.is_module(list) or type(list) == "function" then list = { list, ... } end
  if list ~= nil and type(list) ~= "table" then bad_arg("Sequential", "a list of modules", list) end
  rawset(self, "_raw_list", true)
  for i, m in ipairs(list or {}) do
    check_step(i, m)
    rawset(self, i, m)
  end
end

function Sequential:add(m)
  check_step(#self + 1, m)
  rawset(self, #self + 1, m)
  return self
end

function Sequential:forward(x, ...)
  for i = 1, #self do x = self[i](x, ...) end
  return x
end

function Sequential:_walk_members(prefix, visit, seen, table_walk)
  local list = {}
  for i = 1, #self do
    local m = self[i]
    if Module.is_module(m) then list[#list + 1] = m else list[#list + 1] = false end
  end
  table_walk(list, prefix)
  Module._walk_members(self, prefix, visit, seen, table_walk)
end

function Sequential:named_children()
  local out = {}
  for i = 1, #self do
    if Module.is_module(self[i]) then out[#out + 1] = { tostring(i), self[i] } end
  end
  local rest = Module.named_children(self)
  for _, c in ipairs(rest) do out[#out + 1] = c end
  return out
end

-- A layer of an output size (a number or a list) and the options `allowed` (none when
-- absent; a boolean for the first of them, PyTorch's positional return_indices) that
-- applies fn(x, size, opts), as into[name]: the adaptive pools.
function L.sized_layer(name, fn, into, allowed)
  local cls = Module:extend(name)
  function cls:init(size, opts)
    if size == nil then raise(name .. ": expected an output size") end
    if type(opts) == "boolean" and allowed and allowed.return_indices then opts = { return_indices = opts } end
    self.output_size = size
    self._opts = options(name, opts, allowed or {})
    self.return_indices = self._opts.return_indices and true or nil
  end
  function cls:forward(x) return fn(x, self.output_size, self.return_indices and self._opts or nil) end
  function cls:extra_repr() return fmt("output_size", self.output_size, "return_indices", self.return_indices) end
  into[name] = cls
  return cls
end

-- ModuleList{m1, m2, ...}: an ordered list of modules, tracked as Sequential's steps
-- (list[i], #list, ipairs(list), list:add(m); names "1.weight" ...), without a forward of
-- its own, as PyTorch's. ModuleDict{name = m, ...}: modules by name (dict.name, and
-- dict:items() in name order).
local ModuleList = Sequential:extend("ModuleList")
L.ModuleList = ModuleList
function ModuleList:forward()
  raise("ModuleList: it has no forward; call its modules (for _, m in ipairs(list) do x = m(x) end)")
end
ModuleList.append = Sequential.add

local ModuleDict = Module:extend("ModuleDict")
L.ModuleDict = ModuleDict
-- The keys of a container's table of entries by name, checked and in name order.
local function names_of(name, entries, what)
  if entries ~= nil and (type(entries) ~= "table" or dl.is_tensor(entries)) then
    bad_arg(name, "a table of " .. what .. " by name", entries)
  end
  local keys = {}
  for k in pairs(entries or {}) do
    if type(k) ~= "string" then raise(name .. ": keys must be strings, got " .. typename(k)) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

function ModuleDict:init(entries)
  for _, k in ipairs(names_of("ModuleDict", entries, "modules")) do
    if not Module.is_module(entries[k]) then raise("ModuleDict: " .. k .. " is a " .. typename(entries[k]) .. ", expected a module") end
    self[k] = entries[k]
  end
end
function ModuleDict:forward()
  raise("ModuleDict: it has no forward; call its modules by name")
end
function ModuleDict:items() return self:named_children() end

-- A parameter for a container: a Variable as it is, a tensor made one (as PyTorch's
-- containers wrap tensors in Parameters).
local function as_parameter(name, key, v)
  if dl.is_tensor(v) then return dl.is_variable(v) and v or param(v, tostring(key)) end
  raise(name .. ": " .. tostring(key) .. " is a " .. typename(v) .. ", expected a tensor or a Variable")
end

-- ParameterList{p1, p2, ...}: Variables by position (tensors become Variables): list[i],
-- #list, ipairs(list), list:append(p), list[i] = t; their names "1", "2" ... in parameters() and the
-- state dict. ParameterDict{name = p, ...}: Variables by name (dict.name, dict:items() in
-- name order). Neither has a forward, as PyTorch's.
local ParameterList = Module:extend("ParameterList")
L.ParameterList = ParameterList
function ParameterList:init(list)
  if list ~= nil and (type(list) ~= "table" or dl.is_tensor(list)) then
    bad_arg("ParameterList", "a list of tensors", list)
  end
  rawset(self, "_raw_list", true)
  for i, v in ipairs(list or {}) do rawset(self, i, as_parameter("ParameterList", i, v)) end
end
function ParameterList:append(v)
  rawset(self, #self + 1, as_parameter("ParameterList", #self + 1, v))
  return self
end
-- list[#list + 1] = t: a Variable, as append's. (Replacing an entry, list[i] = t, sets
-- the field itself; it becomes a Variable when the parameters are next gathered.)
function ParameterList:_assign(k, v)
  if type(k) ~= "number" then return v end
  if k ~= math.floor(k) or k < 1 or k > #self + 1 then
    raise("ParameterList: index " .. tostring(k) .. " is out of range 1.." .. (#self + 1))
  end
  return as_parameter("ParameterList", k, v)
end
function ParameterList:_walk_members(prefix, visit, seen, table_walk)
  local list = {}
  for i = 1, #self do
    -- (an entry replaced in place, list[i] = t, is a plain field: made a Variable here,
    -- when the parameters are gathered)
    local v = rawget(self, i)
    if not dl.is_variable(v) then
      v = as_parameter("ParameterList", i, v)
      rawset(self, i, v)
    end
    list[i] = v
  end
  table_walk(list, prefix)
  for i = 1, #list do   -- (a walk that replaces entries, as to() does, writes into the copy)
    if not rawequal(rawget(self, i), list[i]) then rawset(self, i, list[i]) end
  end
  Module._walk_members(self, prefix, visit, seen, table_walk)
end
function ParameterList:forward() raise("ParameterList: it has no forward; use its Variables") end
-- "(name): Variable dtype (shape), ..." of a parameter container's named Variables.
local function variables_repr(self)
  local parts = {}
  for _, item in ipairs(self:named_parameters()) do
    parts[#parts + 1] = "(" .. item[1] .. "): Variable " .. item[2].dtype .. " " .. T.shape_str(item[2].shape)
  end
  return table.concat(parts, ", ")
end
ParameterList.extra_repr = variables_repr

local ParameterDict = Module:extend("ParameterDict")
L.ParameterDict = ParameterDict
function ParameterDict:init(entries)
  for _, k in ipairs(names_of("ParameterDict", entries, "tensors")) do
    self[k] = as_parameter("ParameterDict", k, entries[k])
  end
end
function ParameterDict:forward() raise("ParameterDict: it has no forward; use its Variables by name") end
-- dict.name = t: a Variable, unless the name is one of the container's own.
function ParameterDict:_assign(k, v)
  if type(k) ~= "string" or not T.is_tensor(v) or rawget(self, "_kinds")[k] == "buffer" then return v end
  local members = rawget(self, "_members")
  if members[k] == nil and (ParameterDict[k] ~= nil or rawget(self, "_fields")[k] ~= nil) then
    raise("ParameterDict: '" .. k .. "' names the container's own method or field; choose another name")
  end
  return as_parameter("ParameterDict", k, v)
end
function ParameterDict:items() return self:named_parameters() end
ParameterDict.extra_repr = variables_repr

return L
