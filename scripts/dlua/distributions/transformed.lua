-- dlua.distributions.transformed: distributions made of others, as torch.distributions':
--
--   local T = dl.distributions.transforms
--   local squashed = D.TransformedDistribution(D.Normal(mu, sigma), {T.TanhTransform(),
--                                              T.AffineTransform(0, 2)})   -- a bounded policy
--   local mix = D.MixtureSameFamily(D.Categorical({logits = w}), D.Normal(mus, sigmas))
--
-- A transform t maps x to t(x), back with t:inv(y), and t:log_abs_det_jacobian(x, y) is
-- log |det dy/dx| over its domain's event dims (t.domain_event_dim; 0: elementwise):
-- ExpTransform, AffineTransform(loc, scale [, event_dim]), SigmoidTransform, TanhTransform,
-- PowerTransform(exponent), AbsTransform, on vectors StickBreakingTransform (K values to
-- the simplex of K + 1), CorrCholeskyTransform (D (D - 1) / 2 values to a correlation
-- matrix's Cholesky factor) and SoftmaxTransform, on matrices LowerCholeskyTransform (Abs,
-- Softmax and LowerCholesky are not one to one: no Jacobian, as PyTorch's),
-- IndependentTransform(t, n) (t with n more event dims), ReshapeTransform(in_shape,
-- out_shape), ComposeTransform({t1, t2, ...}), on parts of a tensor CatTransform({t1,
-- ...}, dim, lengths) and StackTransform({t1, ...}, dim), and
-- CumulativeDistributionTransform(d) (x to d:cdf(x)). A transform's event dims and the
-- shapes it maps (t:forward_shape(s), t:inverse_shape(s)) are PyTorch's.
-- TransformedDistribution(base, t or {t1, t2, ...}) draws base's samples through them
-- (rsample when base has it) and scores y by base's log_prob at the preimage less the
-- log-Jacobians, each summed over the event dims beyond its own; its event shape is what
-- the transforms make of base's (base's batch dims taken into the event as the domain
-- needs). MixtureSameFamily(mixture, components): components' batch's last dim is the
-- mixture's categories.
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, dl = T.is_tensor, T.dl
local type, ipairs, setmetatable, getmetatable, tostring = type, ipairs, setmetatable, getmetatable, tostring
local unpack = unpack or table.unpack
local D, class, with_properties, concat, sum_last = B.D, B.class, B.with_properties, B.concat, B.sum_last
local eps_of = B.eps_of
local C, support = B.C, B.support

-- ---- transforms -----------------------------------------------------------------------------

local transforms = {}
D.transforms = transforms

local Transform = {}
Transform.__index = Transform
Transform.__call = function(self, x) return self:forward(x) end
Transform.__tostring = function(self) return self.__name .. "()" end
Transform.sign = 1   -- (+1: increasing, -1: decreasing; false: neither, or not known)
Transform.domain_event_dim, Transform.codomain_event_dim = 0, 0
function Transform.forward_shape(_, shape) return shape end
function Transform.inverse_shape(_, shape) return shape end

local function transform(name, fields)
  local cls = setmetatable({ __name = name }, { __index = Transform })
  cls.__index, cls.__call, cls.__tostring = cls, Transform.__call, Transform.__tostring
  for k, v in pairs(fields) do cls[k] = v end
  transforms[name] = function(...) return cls.new and cls.new(...) or setmetatable({}, cls) end
  return cls
end

local function is_transform(v)
  local mt = getmetatable(v)
  return type(v) == "table" and mt ~= nil and getmetatable(mt) ~= nil and getmetatable(mt).__index == Transform
end

transform("ExpTransform", {
  forward = function(_, x) return x:exp() end,
  inv = function(_, y) return y:log() end,
  log_abs_det_jacobian = function(_, x) return x end,
})

-- (a tensor loc or scale broadcasts the shape it maps, as PyTorch's; event_dim: the
-- right-most dims taken as one event, the Jacobian summed over them)
local function affine_shape(self, shape)
  local parts = { shape }
  for _, v in ipairs({ self.loc, self.scale }) do if is_tensor(v) then parts[#parts + 1] = v.shape end end
  return #parts == 1 and shape or dl.broadcast_shapes(unpack(parts))
end
local Affine = transform("AffineTransform", {
  forward = function(self, x) return x * self.scale + self.loc end,
  inv = function(self, y) return (y - self.loc) / self.scale end,
  log_abs_det_jacobian = function(self, x)
    return sum_last((x * 0 + self.scale):abs():log(), self.domain_event_dim)
  end,
  forward_shape = affine_shape,
  inverse_shape = affine_shape,
})
function Affine.new(loc, scale, event_dim)
  for what, v in pairs({ loc = loc, scale = scale }) do
    if type(v) ~= "number" and not is_tensor(v) then bad_arg("AffineTransform", what .. " (a number or a tensor)", v) end
  end
  event_dim = event_dim or 0
  if not core.integer(event_dim) or event_dim < 0 then
    raise("AffineTransform: event_dim must be a whole number >= 0, got " .. tostring(event_dim))
  end
  local sign
  if type(scale) == "number" then
    if scale == 0 then raise("AffineTransform: scale must not be 0") end
    sign = scale > 0 and 1 or -1
  else
    sign = scale:sign()   -- (each element's direction: cdf and icdf take them elementwise)
  end
  return setmetatable({ loc = loc, scale = scale, sign = sign, domain_event_dim = event_dim,
                        codomain_event_dim = event_dim }, Affine)
end
Affine.__tostring = function(self) return "AffineTransform(" .. tostring(self.loc) .. ", " .. tostring(self.scale) .. ")" end

transform("SigmoidTransform", {
  forward = function(_, x) return x:sigmoid() end,
  inv = function(_, y)
    y = y:clamp(B.tiny_of(y), 1 - eps_of(y))   -- (as PyTorch's: a y of 1e-9 keeps its logit)
    return y:log() - (-y):log1p()
  end,
  log_abs_det_jacobian = function(_, x) return -dl.softplus(-x) - dl.softplus(x) end,
})

transform("TanhTransform", {
  forward = function(_, x) return x:tanh() end,
  inv = function(_, y)
    local e = eps_of(y)
    return y:clamp(-1 + e, 1 - e):atanh()
  end,
  -- log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2 x)), stable for large |x|
  log_abs_det_jacobian = function(_, x) return (-x - dl.softplus(x * -2) + math.log(2)) * 2 end,
})

local Power = transform("PowerTransform", {
  forward = function(self, x) return x:pow(self.exponent) end,
  inv = function(self, y) return y:pow(1 / self.exponent) end,
  log_abs_det_jacobian = function(self, x, y) return (y * self.exponent / x):abs():log() end,
})
function Power.new(exponent)
  if type(exponent) ~= "number" or exponent == 0 then bad_arg("PowerTransform", "a non-zero exponent", exponent) end
  return setmetatable({ exponent = exponent, sign = exponent > 0 and 1 or -1 }, Power)
end
Power.__tostring = function(self) return "PowerTransform(" .. self.exponent .. ")" end

-- The shape of a tensor's last `n` dims (or all of them, or an error naming op).
local function last_dims(op, x, n)
  if x:dim() < n then raise(op .. ": expected at least " .. n .. " dims, got shape " .. T.shape_str(x.shape)) end
  return x.shape
end

transform("AbsTransform", {
  forward = function(_, x) return x:abs() end,
  inv = function(_, y) return y end,
  log_abs_det_jacobian = function()
    raise("AbsTransform.log_abs_det_jacobian: |x| is not one to one (no density through it)")
  end,
  sign = false,
})

-- log(K + 1 - i) for i = 1..K, as x's dtype and device
local function stick_offsets(x)
  local k = x.shape[x:dim()]
  return (dl.arange(k, 0, -1, { dtype = x.dtype, device = x.device })):log()
end
-- Stick breaking: z_i = sigmoid(x_i - log(K + 1 - i)), y_i = z_i prod_(j < i) (1 - z_j),
-- the last y what is left (K values to the open simplex of K + 1).
local StickBreaking = transform("StickBreakingTransform", {
  domain_event_dim = 1, codomain_event_dim = 1, sign = false,
  forward = function(_, x)
    last_dims("StickBreakingTransform", x, 1)
    local z = (x - stick_offsets(x)):sigmoid():clamp(B.tiny_of(x), 1 - eps_of(x))
    local left = (1 - z):cumprod(-1)
    local ones = dl.ones_like(z:narrow(-1, 1, 1))
    return dl.cat({ z, ones }, -1) * dl.cat({ ones, left }, -1)
  end,
  inv = function(_, y)
    local k = last_dims("StickBreakingTransform.inv", y, 1)[y:dim()] - 1
    local crop = y:narrow(-1, 1, k)
    local left = (1 - crop:cumsum(-1)):clamp(B.tiny_of(y))
    return crop:log() - left:log() + stick_offsets(crop)
  end,
  -- log |det J| = sum_i (log sigmoid(s_i) - s_i + log y_i), s = x - offsets (1 - sigmoid(s)
  -- = e^-s sigmoid(s))
  log_abs_det_jacobian = function(_, x, y)
    local s = x - stick_offsets(x)
    return (-s - dl.softplus(-s) + y:narrow(-1, 1, x.shape[x:dim()]):log()):sum(-1)
  end,
})
function StickBreaking.forward_shape(_, shape)
  local out = concat(shape, {})
  out[#out] = out[#out] + 1
  return out
end
function StickBreaking.inverse_shape(_, shape)
  local out = concat(shape, {})
  out[#out] = out[#out] - 1
  return out
end

-- softmax over the last dim; back to the logits log y (one of the many that give y: it
-- is not one to one, so no Jacobian, as PyTorch's).
transform("SoftmaxTransform", {
  domain_event_dim = 1, codomain_event_dim = 1, sign = false,
  forward = function(_, x) return x:softmax(-1) end,
  inv = function(_, y) return y:log() end,
  log_abs_det_jacobian = function()
    raise("SoftmaxTransform.log_abs_det_jacobian: the softmax is not one to one (no density through it)")
  end,
})

-- An unconstrained square matrix to a lower Cholesky factor: the strictly lower part kept,
-- the diagonal through exp (the upper part dropped: no Jacobian, as PyTorch's).
transform("LowerCholeskyTransform", {
  domain_event_dim = 2, codomain_event_dim = 2, sign = false,
  forward = function(_, x)
    last_dims("LowerCholeskyTransform", x, 2)
    return x:tril(-1) + dl.diag_embed(x:diagonal(0, -2, -1):exp())
  end,
  inv = function(_, y) return y:tril(-1) + dl.diag_embed(y:diagonal(0, -2, -1):log()) end,
  log_abs_det_jacobian = function()
    raise("LowerCholeskyTransform.log_abs_det_jacobian: the upper triangle is dropped (not one to one)")
  end,
})

-- The positions (1-based, in a row-major flattened D x D matrix) of the elements at least
-- `below` under the diagonal, row by row; below = 1, the strictly lower triangle: the
-- order in which a vector of D (D - 1) / 2 values fills it.
local function strict_lower(d, below)
  local pos = {}
  for i = 1 + below, d do
    for j = 1, i - below do pos[#pos + 1] = (i - 1) * d + j end
  end
  return pos
end
-- t's last dim moved one place right, a 1 in front (its last element dropped)
local function after_one(t)
  local n = t.shape[t:dim()]
  return dl.cat({ dl.ones_like(t:narrow(-1, 1, 1)), t:narrow(-1, 1, n - 1) }, -1)
end
-- the D of a vector of n = D (D - 1) / 2 values, or an error naming op
local function corr_size(op, n)
  local d = math.floor(math.sqrt(0.25 + 2 * n) + 1)   -- round(sqrt(1/4 + 2 n) + 1/2)
  if d * (d - 1) / 2 ~= n then raise(op .. ": " .. n .. " values are not D (D - 1) / 2 for any D") end
  return d
end
local function long(list, like) return dl.tensor(list, { dtype = "int64", device = like.device }) end

-- D (D - 1) / 2 unconstrained values to the lower Cholesky factor of a D x D correlation
-- matrix: tanh to (-1, 1), then each row's squares broken off what is left of 1 (Stan's
-- and PyTorch's CorrCholeskyTransform); its Jacobian is that of the values and the
-- factor's strictly lower triangle.
local CorrCholesky = transform("CorrCholeskyTransform", {
  domain_event_dim = 1, codomain_event_dim = 2, sign = false,
  forward = function(_, x)
    local op = "CorrCholeskyTransform"
    local n = last_dims(op, x, 1)[x:dim()]
    local d = corr_size(op, n)
    local e = eps_of(x)
    local r = x:tanh():clamp(-1 + e, 1 - e)
    -- the values into the strictly lower triangle (a gather from the values and a 0)
    local map = {}
    for k = 1, d * d do map[k] = n + 1 end
    for k, p in ipairs(strict_lower(d, 1)) do map[p] = k end
    local zero = dl.zeros_like(r:narrow(-1, 1, 1))
    local lower = dl.cat({ r, zero }, -1):index_select(-1, long(map, x))
    local shape = concat(x.shape, {})
    shape[#shape] = nil
    lower = lower:reshape(concat(shape, { d, d }))
    local scale = after_one((1 - lower * lower):sqrt():cumprod(-1))
    return (lower + dl.eye(d, { dtype = x.dtype, device = x.device })) * scale
  end,
  inv = function(_, y)
    local d = last_dims("CorrCholeskyTransform.inv", y, 2)[y:dim()]
    local shifted = after_one(1 - (y * y):cumsum(-1))
    local idx = long(strict_lower(d, 1), y)
    local flat = function(m) return m:flatten(-2, -1):index_select(-1, idx) end
    local t = flat(y) / flat(shifted):sqrt()
    return (t:log1p() - (-t):log1p()) / 2
  end,
  log_abs_det_jacobian = function(_, x, y)
    local d = y.shape[y:dim()]
    local left = 1 - (y * y):cumsum(-1)
    local pos = strict_lower(d, 2)   -- (two below the diagonal: no shift needed)
    local stick = 0
    if #pos > 0 then stick = left:flatten(-2, -1):index_select(-1, long(pos, y)):log():sum(-1) * 0.5 end
    local tanh = ((x + dl.softplus(x * -2) - math.log(2)) * -2):sum(-1)
    return tanh + stick
  end,
})
function CorrCholesky.forward_shape(_, shape)
  local out = concat(shape, {})
  local d = corr_size("CorrCholeskyTransform", out[#out])
  out[#out] = d
  out[#out + 1] = d
  return out
end
function CorrCholesky.inverse_shape(_, shape)
  local out = concat(shape, {})
  local d = out[#out]
  out[#out] = nil
  out[#out] = d * (d - 1) / 2
  return out
end

-- t taking n more of the right-most dims into its event: its Jacobian summed over them.
local IndependentT = transform("IndependentTransform", {
  forward = function(self, x) return self.base(x) end,
  inv = function(self, y) return self.base:inv(y) end,
  log_abs_det_jacobian = function(self, x, y) return sum_last(self.base:log_abs_det_jacobian(x, y), self.n) end,
  forward_shape = function(self, shape) return self.base:forward_shape(shape) end,
  inverse_shape = function(self, shape) return self.base:inverse_shape(shape) end,
})
IndependentT.__tostring = function(self) return "IndependentTransform(" .. tostring(self.base) .. ", " .. self.n .. ")" end

-- The right-most dims of in_shape (the event) reshaped to out_shape, the same count of
-- elements; Jacobian 0.
local Reshape = transform("ReshapeTransform", {
  sign = false,
  forward = function(self, x) return x:reshape(self:forward_shape(x.shape)) end,
  inv = function(self, y) return y:reshape(self:inverse_shape(y.shape)) end,
  log_abs_det_jacobian = function(self, x)
    local batch = {}
    for i = 1, x:dim() - self.domain_event_dim do batch[i] = x.shape[i] end
    return dl.zeros(batch, { dtype = x.dtype, device = x.device })
  end,
})
-- shape with its last #from dims (which must be `from`) replaced by `to`
local function reshaped(op, shape, from, to)
  local nb = #shape - #from
  local ok = nb >= 0
  for i = 1, #from do ok = ok and shape[nb + i] == from[i] end
  if not ok then
    raise(op .. ": expected a shape ending in " .. T.shape_str(from) .. ", got " .. T.shape_str(shape))
  end
  local out = {}
  for i = 1, nb do out[i] = shape[i] end
  return concat(out, to)
end
function Reshape.forward_shape(self, shape) return reshaped("ReshapeTransform", shape, self.in_shape, self.out_shape) end
function Reshape.inverse_shape(self, shape) return reshaped("ReshapeTransform.inv", shape, self.out_shape, self.in_shape) end
Reshape.__tostring = function(self)
  return "ReshapeTransform(" .. T.shape_str(self.in_shape) .. ", " .. T.shape_str(self.out_shape) .. ")"
end

local Compose = transform("ComposeTransform", {
  forward = function(self, x)
    for _, t in ipairs(self.parts) do x = t(x) end
    return x
  end,
  inv = function(self, y)
    for i = #self.parts, 1, -1 do y = self.parts[i]:inv(y) end
    return y
  end,
  -- each part's Jacobian summed over the event dims the chain has beyond the part's own
  log_abs_det_jacobian = function(self, x)
    local total
    local event_dim = self.domain_event_dim
    for _, t in ipairs(self.parts) do
      local y = t(x)
      local j = sum_last(t:log_abs_det_jacobian(x, y), event_dim - t.domain_event_dim)
      total = total and total + j or j
      x = y
      event_dim = event_dim + t.codomain_event_dim - t.domain_event_dim
    end
    return total or x * 0   -- (no parts: the identity's 0)
  end,
  forward_shape = function(self, shape)
    for _, t in ipairs(self.parts) do shape = t:forward_shape(shape) end
    return shape
  end,
  inverse_shape = function(self, shape)
    for i = #self.parts, 1, -1 do shape = self.parts[i]:inverse_shape(shape) end
    return shape
  end,
})

-- A list of transforms (or one), checked.
local function transform_list(op, ts)
  if is_transform(ts) then return { ts } end
  if type(ts) ~= "table" or is_tensor(ts) or getmetatable(ts) ~= nil then bad_arg(op, "a transform or a list of them", ts) end
  for i, t in ipairs(ts) do
    if not is_transform(t) then bad_arg(op, "transform " .. i .. " (from dl.distributions.transforms)", t) end
  end
  return ts
end

function Compose.new(ts)
  local parts = transform_list("ComposeTransform", ts)
  -- the direction: +1, -1, a tensor of them (elementwise), or false (not monotone)
  local sign = 1
  for _, t in ipairs(parts) do
    if sign ~= false then sign = t.sign ~= false and sign * t.sign or false end
  end
  if #parts == 0 then   -- (the identity, as PyTorch's empty ComposeTransform)
    return setmetatable({ parts = parts, sign = 1, domain_event_dim = 0, codomain_event_dim = 0 }, Compose)
  end
  -- the event dims of the chain's domain and codomain: each part's, carried through the
  -- others (PyTorch's ComposeTransform)
  local domain = parts[#parts].codomain_event_dim
  for i = #parts, 1, -1 do
    domain = math.max(domain + parts[i].domain_event_dim - parts[i].codomain_event_dim, parts[i].domain_event_dim)
  end
  local codomain = parts[1].domain_event_dim
  for _, t in ipairs(parts) do
    codomain = math.max(codomain + t.codomain_event_dim - t.domain_event_dim, t.codomain_event_dim)
  end
  return setmetatable({ parts = parts, sign = sign, domain_event_dim = domain, codomain_event_dim = codomain }, Compose)
end

function IndependentT.new(base, n)
  if not is_transform(base) then bad_arg("IndependentTransform", "a transform", base) end
  if not core.integer(n) or n < 0 then raise("IndependentTransform: n must be a whole number >= 0, got " .. tostring(n)) end
  return setmetatable({ base = base, n = n, sign = base.sign, domain_event_dim = base.domain_event_dim + n,
                        codomain_event_dim = base.codomain_event_dim + n }, IndependentT)
end

function Reshape.new(in_shape, out_shape)
  local op = "ReshapeTransform"
  local function count(s, what)
    if type(s) ~= "table" or is_tensor(s) then bad_arg(op, what .. " (a list of sizes)", s) end
    local n = 1
    for _, d in ipairs(s) do
      if not core.integer(d) or d < 0 then bad_arg(op, what .. " (sizes >= 0)", s) end
      n = n * d
    end
    return n
  end
  if count(in_shape, "in_shape") ~= count(out_shape, "out_shape") then
    raise(op .. ": " .. T.shape_str(in_shape) .. " and " .. T.shape_str(out_shape) .. " hold different counts of elements")
  end
  return setmetatable({ in_shape = concat(in_shape, {}), out_shape = concat(out_shape, {}),
                        domain_event_dim = #in_shape, codomain_event_dim = #out_shape }, Reshape)
end
-- The names of a transform's parts, comma-separated
local function part_names(self)
  local names = {}
  for i, t in ipairs(self.parts) do names[i] = tostring(t) end
  return table.concat(names, ", ")
end
Compose.__tostring = function(self) return "ComposeTransform(" .. part_names(self) .. ")" end

-- ---- transforms of parts: CatTransform, StackTransform ------------------------------------

-- A list of transforms with equal event dims in and out (PyTorch's event_dim), and the
-- largest of them: the event dims of a transform made of their parts.
local function part_list(op, ts)
  ts = transform_list(op, ts)
  if #ts == 0 then raise(op .. ": expected at least one transform") end
  local event_dim = 0
  for i, t in ipairs(ts) do
    if t.domain_event_dim ~= t.codomain_event_dim then
      raise(op .. ": transform " .. i .. " (" .. tostring(t) .. ") changes the event's rank")
    end
    event_dim = math.max(event_dim, t.domain_event_dim)
  end
  return ts, event_dim
end
-- dim (1-based, or negative from the end) of a tensor of `rank` dims, as a positive dim
local function dim_in(op, dim, rank)
  local d = dim < 0 and rank + 1 + dim or dim
  if d < 1 or d > rank then raise(op .. ": dim " .. dim .. " is out of range for a tensor of " .. rank .. " dims") end
  return d
end

-- parts[i] applied to the i-th run of lengths[i] elements of x along dim, the runs put
-- back together (PyTorch's CatTransform; its log |det J| concatenated along dim where dim
-- is a batch dim, else summed)
local Cat = transform("CatTransform", { sign = false })
local function cat_parts(self, op, x, apply)
  local d = dim_in(op, self.dim, x:dim())
  if x.shape[d] ~= self.length then
    raise(op .. ": expected " .. self.length .. " elements along dim " .. self.dim .. ", got " .. x.shape[d])
  end
  local out, start = {}, 1
  for i, t in ipairs(self.parts) do
    out[i] = apply(t, x:narrow(d, start, self.lengths[i]), start, d)
    start = start + self.lengths[i]
  end
  return out, d
end
function Cat.forward(self, x)
  local out, d = cat_parts(self, "CatTransform", x, function(t, part) return t(part) end)
  return dl.cat(out, d)
end
function Cat.inv(self, y)
  local out, d = cat_parts(self, "CatTransform.inv", y, function(t, part) return t:inv(part) end)
  return dl.cat(out, d)
end
function Cat.log_abs_det_jacobian(self, x, y)
  local ladj, d = cat_parts(self, "CatTransform", x, function(t, part, start, d)
    local j = t:log_abs_det_jacobian(part, y:narrow(d, start, part.shape[d]))
    return sum_last(j, self.domain_event_dim - t.domain_event_dim)
  end)
  local from_end = d - 1 - x:dim() + self.domain_event_dim   -- (PyTorch's dim - x.dim() + event_dim)
  if from_end < 0 then return dl.cat(ladj, from_end) end
  local total = ladj[1]
  for i = 2, #ladj do total = total + ladj[i] end
  return total
end
function Cat.new(ts, dim, lengths)
  local op = "CatTransform"
  local parts, event_dim = part_list(op, ts)
  dim = dim or 1
  if not core.integer(dim) or dim == 0 then bad_arg(op, "dim (a whole number, not 0)", dim) end
  if lengths == nil then
    lengths = {}
    for i = 1, #parts do lengths[i] = 1 end
  elseif type(lengths) ~= "table" or #lengths ~= #parts then
    raise(op .. ": expected a length for each of the " .. #parts .. " transforms")
  end
  local length = 0
  for i, n in ipairs(lengths) do
    if not core.integer(n) or n < 1 then bad_arg(op, "length " .. i .. " (a whole number >= 1)", n) end
    length = length + n
  end
  return setmetatable({ parts = parts, dim = dim, lengths = concat(lengths, {}), length = length,
                        domain_event_dim = event_dim, codomain_event_dim = event_dim }, Cat)
end
Cat.__tostring = function(self) return "CatTransform({" .. part_names(self) .. "}, " .. self.dim .. ")" end

-- parts[i] applied to x's i-th slice along dim (PyTorch's StackTransform; its log |det J|
-- stacked along dim as well)
local Stack = transform("StackTransform", { sign = false })
local function stack_parts(self, op, x, apply)
  local d = dim_in(op, self.dim, x:dim())
  if x.shape[d] ~= #self.parts then
    raise(op .. ": expected " .. #self.parts .. " slices along dim " .. self.dim .. " (one a transform), got " .. x.shape[d])
  end
  local out = {}
  for i, t in ipairs(self.parts) do out[i] = apply(t, x:select(d, i), i, d) end
  return dl.stack(out, d)
end
function Stack.forward(self, x) return stack_parts(self, "StackTransform", x, function(t, part) return t(part) end) end
function Stack.inv(self, y) return stack_parts(self, "StackTransform.inv", y, function(t, part) return t:inv(part) end) end
function Stack.log_abs_det_jacobian(self, x, y)
  return stack_parts(self, "StackTransform", x, function(t, part, i, d) return t:log_abs_det_jacobian(part, y:select(d, i)) end)
end
function Stack.new(ts, dim)
  local parts, event_dim = part_list("StackTransform", ts)
  dim = dim or 1
  if not core.integer(dim) or dim == 0 then bad_arg("StackTransform", "dim (a whole number, not 0)", dim) end
  -- (PyTorch's stack constraint: a dim counted from the end inside the parts' events adds
  -- itself to the event)
  if dim < 0 and dim + event_dim < 0 then event_dim = event_dim + 1 end
  return setmetatable({ parts = parts, dim = dim, domain_event_dim = event_dim, codomain_event_dim = event_dim }, Stack)
end
Stack.__tostring = function(self) return "StackTransform({" .. part_names(self) .. "}, " .. self.dim .. ")" end

-- x to its probability under a distribution, d:cdf(x), back with d:icdf; log |det J| is
-- d's log density (PyTorch's CumulativeDistributionTransform: a copula's marginals)
local Cdf = transform("CumulativeDistributionTransform", {
  forward = function(self, x) return self.distribution:cdf(x) end,
  inv = function(self, y) return self.distribution:icdf(y) end,
  log_abs_det_jacobian = function(self, x) return self.distribution:log_prob(x) end,
})
function Cdf.new(d)
  if type(d) ~= "table" or type(d.cdf) ~= "function" or type(d.log_prob) ~= "function" then
    bad_arg("CumulativeDistributionTransform", "a distribution", d)
  end
  local event_dim = #d.event_shape
  return setmetatable({ distribution = d, domain_event_dim = event_dim, codomain_event_dim = event_dim }, Cdf)
end
Cdf.__tostring = function(self) return "CumulativeDistributionTransform(" .. tostring(self.distribution) .. ")" end

-- ---- codomains ---------------------------------------------------------------------------------

-- The set a transform maps into (PyTorch's codomain): TransformedDistribution's support.
local CODOMAIN = {
  ExpTransform = C.positive, PowerTransform = C.positive, AbsTransform = C.positive,
  SigmoidTransform = C.unit_interval, CumulativeDistributionTransform = C.unit_interval,
  TanhTransform = C.interval(-1, 1), StickBreakingTransform = C.simplex, SoftmaxTransform = C.simplex,
  LowerCholeskyTransform = C.lower_cholesky, CorrCholeskyTransform = C.corr_cholesky,
}
local codomain
-- the parts' codomains on the pieces of v along dim, put back together as Cat and Stack
-- put their pieces (PyTorch's constraints.cat and constraints.stack)
local function of_parts(name, self)
  local parts, event_dim = {}, 0
  for i, t in ipairs(self.parts) do
    parts[i] = codomain(t)
    event_dim = math.max(event_dim, parts[i].event_dim)
  end
  return B.constraint(name, function(v)
    local d = dim_in("constraints." .. name .. ".check", self.dim, v:dim())
    local checks, start = {}, 1
    for i, part in ipairs(parts) do
      if name == "cat" then
        checks[i] = part:check(v:narrow(d, start, self.lengths[i]))
        start = start + self.lengths[i]
      else
        checks[i] = part:check(v:select(d, i))
      end
    end
    return name == "cat" and dl.cat(checks, d) or dl.stack(checks, d)
  end, { event_dim = event_dim })
end
codomain = function(t)
  local name = t.__name
  if CODOMAIN[name] then return CODOMAIN[name] end
  if name == "AffineTransform" then
    return t.codomain_event_dim == 0 and C.real or C.independent(C.real, t.codomain_event_dim)
  elseif name == "IndependentTransform" then return C.independent(codomain(t.base), t.n)
  elseif name == "ReshapeTransform" then return C.independent(C.real, #t.out_shape)
  elseif name == "ComposeTransform" then return #t.parts == 0 and C.real or codomain(t.parts[#t.parts])
  elseif name == "CatTransform" then return of_parts("cat", t)
  elseif name == "StackTransform" then return of_parts("stack", t)
  end
  return C.real
end

-- ---- TransformedDistribution ----------------------------------------------------------------

local Transformed = class("TransformedDistribution")
function Transformed.new(base, ts)
  local op = "TransformedDistribution"
  if type(base) ~= "table" or getmetatable(base) == nil or base.log_prob == nil then bad_arg(op, "a distribution", base) end
  local chain = transforms.ComposeTransform(transform_list(op, ts))
  -- base's batch dims taken into its event as far as the transforms' domain needs; the
  -- event is then the codomain's dims and what base's event has beyond the domain
  local base_shape = concat(base.batch_shape, base.event_shape)
  local base_event = #base.event_shape
  if #base_shape < chain.domain_event_dim then
    raise(op .. ": the transforms take events of " .. chain.domain_event_dim .. " dims, the base's draws have "
          .. #base_shape)
  end
  local inner = base
  if chain.domain_event_dim > base_event then inner = D.Independent(base, chain.domain_event_dim - base_event) end
  local shape = chain:forward_shape(base_shape)
  local event_dim = chain.codomain_event_dim + math.max(base_event - chain.domain_event_dim, 0)
  local batch, event = {}, {}
  for i = 1, #shape - event_dim do batch[i] = shape[i] end
  for i = #shape - event_dim + 1, #shape do event[#event + 1] = shape[i] end
  -- A transform with tensor parameters may broadcast the base's batch (PyTorch expands
  -- the base): where that only adds leading dims, the base draws them as a sample shape.
  local expanded = chain:inverse_shape(shape)
  local extra = {}
  local lead = #expanded - #base_shape
  local suffix = lead >= 0
  for i = 1, #base_shape do suffix = suffix and expanded[lead + i] == base_shape[i] end
  if suffix then
    for i = 1, lead do extra[i] = expanded[i] end
  else
    extra = false
  end
  return setmetatable({ base_dist = inner, transforms = chain.parts, _chain = chain, batch_shape = batch,
                        event_shape = event, _like = base._like, _validate = base._validate, _extra = extra,
                        _expanded = expanded, has_rsample = base.has_rsample }, Transformed)
end
function Transformed:__repr() return "TransformedDistribution(" .. tostring(self.base_dist) .. ", " .. tostring(self._chain) .. ")" end
-- the base's sample shape for `shape` draws: shape and the leading batch dims the
-- transforms add
function Transformed:_base_shape(shape)
  if not self._extra then
    raise("TransformedDistribution.sample: the transforms broadcast the base's shape to "
          .. T.shape_str(self._expanded) .. ": give the base parameters of that batch shape")
  end
  if shape ~= nil and (type(shape) ~= "table" or is_tensor(shape)) then
    if type(shape) == "number" then shape = { shape } else bad_arg("TransformedDistribution.sample", "a shape (a list)", shape) end
  end
  return concat(shape or {}, self._extra)
end
function Transformed:rsample(shape) return self._chain(self.base_dist:rsample(self:_base_shape(shape))) end
function Transformed:sample(shape)
  return dl.no_grad(function() return self._chain(self.base_dist:sample(self:_base_shape(shape))) end)
end
-- log p(y) = log p_base(x) - sum of the log-Jacobians, each summed over the event dims
-- beyond its transform's own (PyTorch's)
function Transformed:log_prob(y)
  y = self:_value("log_prob", y)
  local event_dim = #self.event_shape
  local lp
  for i = #self.transforms, 1, -1 do
    local t = self.transforms[i]
    local x = t:inv(y)
    event_dim = event_dim + t.domain_event_dim - t.codomain_event_dim
    local j = sum_last(t:log_abs_det_jacobian(x, y), event_dim - t.domain_event_dim)
    lp = lp and lp - j or -j
    y = x
  end
  local base = sum_last(self.base_dist:log_prob(y), event_dim - #self.base_dist.event_shape)
  return lp and lp + base or base
end
-- cdf and icdf through increasing (or decreasing) transforms, as PyTorch's.
-- A cdf value through transforms of direction `sign` (+1, -1 or a tensor of them): c, or
-- 1 - c where a transform decreases (PyTorch's monotonize_cdf).
local function monotonized(sign, c) return sign * (c - 0.5) + 0.5 end
function Transformed:cdf(y)
  local sign = self._chain.sign
  if not sign then raise("TransformedDistribution.cdf: the transforms' direction is not known (one is not monotone)") end
  local x = self._chain:inv(self:_value("cdf", y))
  return monotonized(sign, self.base_dist:cdf(x))
end
function Transformed:icdf(q)
  local sign = self._chain.sign
  if not sign then raise("TransformedDistribution.icdf: the transforms' direction is not known (one is not monotone)") end
  q = self:_value("icdf", q)
  return self._chain(self.base_dist:icdf(monotonized(sign, q)))
end
support(Transformed, function(self)
  if #self.transforms == 0 then return self.base_dist.support end
  local c = codomain(self.transforms[#self.transforms])
  local n = #self.event_shape - c.event_dim
  return n > 0 and C.independent(c, n) or c
end)
-- (the base expanded to the batch the transforms take back from the new one, as
-- PyTorch's; it then has every batch dim itself)
function Transformed:expand(batch_shape)
  local to = B.expanded_batch(self.__name .. ".expand", self.batch_shape, batch_shape)
  local shape = self._chain:inverse_shape(concat(to, self.event_shape))
  local base_batch = {}
  for i = 1, #shape - #self.base_dist.event_shape do base_batch[i] = shape[i] end
  local new = B.expanded_copy(self, to, "base_dist")
  new.base_dist = self.base_dist:expand(base_batch)
  new._extra, new._expanded = {}, shape
  return new
end
with_properties(Transformed)

-- ---- MixtureSameFamily ------------------------------------------------------------------------

-- MixtureSameFamily(mixture (a Categorical over K), components (batch (..., K))).
local Mixture = class("MixtureSameFamily")
function Mixture.new(mixture, components)
  local op = "MixtureSameFamily"
  if getmetatable(mixture) ~= D.Categorical then bad_arg(op, "a Categorical as the mixture", mixture) end
  if type(components) ~= "table" or getmetatable(components) == nil or components.log_prob == nil then
    bad_arg(op, "a distribution as the components", components)
  end
  local cb = components.batch_shape
  local k = mixture._num_events
  if #cb < 1 or cb[#cb] ~= k then
    raise(op .. ": the components' batch must end in the mixture's " .. k .. " categories, got batch shape "
          .. T.shape_str(cb))
  end
  local batch = {}
  for i = 1, #cb - 1 do batch[i] = cb[i] end
  local mb = mixture.batch_shape
  local same = #mb == #batch
  for i = 1, #batch do same = same and mb[i] == batch[i] end
  if not same then
    raise(op .. ": the mixture's batch " .. T.shape_str(mb) .. " must be the components' " .. T.shape_str(batch))
  end
  return setmetatable({ mixture_distribution = mixture, component_distribution = components, batch_shape = batch,
                        event_shape = components.event_shape, _like = components._like }, Mixture)
end
function Mixture:__repr()
  return "MixtureSameFamily(" .. tostring(self.mixture_distribution) .. ", " .. tostring(self.component_distribution) .. ")"
end
-- The mixture's weights with a dim of 1 for each of the components' event dims.
local function weights(self, t)
  local w = t
  for _ = 1, #self.event_shape do w = w:unsqueeze(-1) end
  return w
end
function Mixture:_get_mean()
  local m = self.component_distribution.mean
  return (weights(self, self.mixture_distribution.probs) * m):sum(-1 - #self.event_shape)
end
function Mixture:_get_variance()
  local d = -1 - #self.event_shape
  local p = weights(self, self.mixture_distribution.probs)
  local c = self.component_distribution
  local mean = (p * c.mean):sum(d, true)
  return (p * c.variance):sum(d) + (p * (c.mean - mean):pow(2)):sum(d)
end
function Mixture:log_prob(v)
  v = self:_value("log_prob", v)
  local x = v:unsqueeze(-1 - #self.event_shape)
  local lp = self.component_distribution:log_prob(x)
  return (lp + self.mixture_distribution.logits):logsumexp(-1)
end
function Mixture:sample(shape)
  return dl.no_grad(function()
    local which = self.mixture_distribution:sample(shape)               -- shape .. batch, 1..K
    local all = self.component_distribution:sample(shape)               -- shape .. batch .. K .. event
    local idx = which
    for _ = 1, #self.event_shape + 1 do idx = idx:unsqueeze(-1) end
    local want = all.shape
    want[#want - #self.event_shape] = 1
    idx = idx:expand(want)
    return all:gather(-1 - #self.event_shape, idx):squeeze(-1 - #self.event_shape)
  end)
end
support(Mixture, function(self) return self.component_distribution.support end)
with_properties(Mixture)

return transforms
