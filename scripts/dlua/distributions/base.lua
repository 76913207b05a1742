-- dlua.distributions.base: what every distribution of dlua.distributions shares: the
-- Distribution class and the classes' constructor, parameters as broadcast tensors,
-- support checks, fields computed when read (mean, variance ...), the small constants
-- of the dtypes, and the table of KL divergence rules each family adds to.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, shape_str, dl = T.is_tensor, T.shape_str, T.dl
local type, ipairs, setmetatable, getmetatable, tostring = type, ipairs, setmetatable, getmetatable, tostring
local unpack, log, pi = unpack or table.unpack, math.log, math.pi

local D = dl.distributions   -- (filled here: the table a script may already hold)
local LOG_SQRT_2PI = 0.5 * log(2 * pi)

-- ---- the common part ------------------------------------------------------------------------

local Distribution = {}
Distribution.__index = Distribution
D.Distribution = Distribution

-- A class: Name(...) makes an instance through its new; instances print as PyTorch's.
local function class(name, parent)
  local cls = { __name = name }
  cls.__index = cls
  cls.__tostring = function(self) return self:__repr() end
  setmetatable(cls, { __index = parent or Distribution, __call = function(c, ...) return c.new(...) end })
  D[name] = cls
  return cls
end

function Distribution:__repr()
  local parts = {}
  for _, k in ipairs(self._params) do
    local v = self[k]
    parts[#parts + 1] = k .. ": " .. (is_tensor(v) and (v:numel() == 1 and tostring(v:item()) or shape_str(v.shape))
                                      or tostring(v))
  end
  return self.__name .. "(" .. table.concat(parts, ", ") .. ")"
end

-- The trailing options table (validate_args), if the last argument is one.
local function take_options(op, args, n)
  local last = args[n]
  if type(last) == "table" and not is_tensor(last) and getmetatable(last) == nil then
    for k in pairs(last) do
      if k ~= "validate_args" then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
    end
    return last.validate_args ~= false, n - 1
  end
  return true, n
end

-- The parameters as tensors of one floating dtype and device, broadcast together: a
-- number takes the dtype and device of the tensors beside it.
local function parameters(op, names, values)
  local like
  for i = 1, #names do
    local v = values[i]
    if is_tensor(v) then
      like = like or v
    elseif type(v) ~= "number" then
      bad_arg(op, names[i] .. " (a tensor or a number)", v)
    end
  end
  local out = {}
  for i = 1, #names do
    local v = values[i]
    if type(v) == "number" then
      v = dl.tensor(v, like and { dtype = like:is_floating_point() and like.dtype or nil, device = like.device } or nil)
    elseif not v:is_floating_point() then
      v = v:to(dl.get_default_dtype())
    end
    out[i] = v
  end
  if #out > 1 then
    local ok, err = pcall(function() out = { dl.broadcast_tensors(unpack(out)) } end)
    if not ok then raise(op .. ": the parameters' shapes do not broadcast (" .. tostring(err):gsub("^.-: ", "") .. ")") end
  end
  return out
end

-- Raises "op: what" unless every element of the bool tensor holds.
local function require_all(op, holds, what)
  if not holds:all() then raise(op .. ": " .. what) end
end

local function concat(...)
  local out = {}
  for _, list in ipairs({ ... }) do
    for _, v in ipairs(list) do out[#out + 1] = v end
  end
  return out
end

-- The shape of `shape` draws: shape .. batch_shape .. event_shape.
function Distribution:_extended(shape)
  if shape ~= nil and (type(shape) ~= "table" or is_tensor(shape)) then
    if type(shape) == "number" then shape = { shape } else bad_arg(self.__name .. ".sample", "a shape (a list)", shape) end
  end
  return concat(shape or {}, self.batch_shape, self.event_shape)
end

function Distribution:rsample()
  raise(self.__name .. ".rsample: the distribution cannot be reparameterised (use sample)")
end

-- A draw without gradient: rsample's value, unrecorded.
function Distribution:sample(shape)
  return dl.no_grad(function() return self:rsample(shape) end)
end

-- value checked as log_prob's argument: a tensor (a number becomes one of the
-- parameters' dtype), within the support when validation is on.
function Distribution:_value(op, v)
  if type(v) == "number" then v = dl.tensor(v, { dtype = self._like.dtype, device = self._like.device }) end
  if not is_tensor(v) then bad_arg(self.__name .. "." .. op, "a tensor", v) end
  return v
end

-- log_prob's value, checked to lie in the support when validating: holds(v) gives a bool
-- tensor, `message` what fails ("Name.log_prob: message").
function Distribution:_checked_value(v, holds, message)
  v = self:_value("log_prob", v)
  if self._validate then require_all(self.__name .. ".log_prob", holds(v), message) end
  return v
end
-- log_prob's value as a count 0, 1, 2 ..., a float of the parameters' dtype.
local function whole_non_negative(v) return v:ge(0):logical_and(v:eq(v:floor())) end
function Distribution:_count_value(v)
  v = self:_value("log_prob", v)
  if not v:is_floating_point() then v = v:to(self._like.dtype) end
  return self:_checked_value(v, whole_non_negative, "a value is not a count 0, 1, 2 ...")
end

local function unsupported(name, what)
  return function() raise(name .. "." .. what .. ": not defined for this distribution") end
end
Distribution.entropy = function(self) unsupported(self.__name, "entropy")() end
Distribution.enumerate_support = function(self) unsupported(self.__name, "enumerate_support")() end
Distribution.has_rsample, Distribution.has_enumerate_support = false, false
function Distribution:perplexity() return self:entropy():exp() end
Distribution.cdf = function(self) unsupported(self.__name, "cdf")() end
Distribution.icdf = function(self) unsupported(self.__name, "icdf")() end

-- The properties read as fields (d.mean, d.mode, d.variance, d.stddev, d.support), computed
-- when read.
local PROPERTIES = { mean = true, mode = true, variance = true, stddev = true, probs = true, logits = true,
                     covariance_matrix = true, support = true }
local function with_properties(cls)
  cls.__index = function(self, k)
    if PROPERTIES[k] then
      local raw = rawget(self, "_" .. k)
      if raw ~= nil then return raw end
      local f = cls["_get_" .. k] or (k == "stddev" and function(s) return s.variance:sqrt() end)
      if f then return f(self) end
      raise(cls.__name .. "." .. k .. ": not defined for this distribution")
    end
    return cls[k]
  end
end

-- The constructor of a family whose parameters (`names`) are tensors or numbers; when
-- validation is on, check(params...) gives bool tensors that must hold everywhere, each
-- followed by what it means.
local function constructor(cls, names, check)
  return function(...)
    local op, args = cls.__name, { ... }
    local validate, n = take_options(op, args, select("#", ...))
    if n ~= #names then raise(op .. ": expected " .. table.concat(names, " and ")) end
    local p = parameters(op, names, args)
    if validate then
      local checks = { check(unpack(p)) }
      for i = 1, #checks, 2 do require_all(op, checks[i], checks[i + 1]) end
    end
    local self = { batch_shape = p[1].shape, event_shape = {}, _like = p[1], _validate = validate }
    for i, k in ipairs(names) do self[k] = p[i] end
    return setmetatable(self, cls)
  end
end

-- ---- supports: constraints as torch.distributions.constraints' ------------------------------

-- A constraint: `name` (torch's: "real", "positive", "integer_interval" ...), event_dim
-- (the right-most dims checked as one value), is_discrete, lower_bound and upper_bound
-- where it has them (numbers or tensors), and c:check(v), a bool tensor over v's dims
-- but the event's.
local Constraint = {}
Constraint.__index = Constraint
Constraint.__tostring = function(c)
  local function bound(b)
    return is_tensor(b) and (b:numel() == 1 and tostring(b:item()) or shape_str(b.shape)) or tostring(b)
  end
  if c.name == "independent" then
    return "independent(" .. tostring(c.base_constraint) .. ", " .. c.reinterpreted_batch_ndims .. ")"
  end
  if c._named or (c.lower_bound == nil and c.upper_bound == nil) then return c.name end
  local parts = {}
  if c.lower_bound ~= nil then parts[#parts + 1] = bound(c.lower_bound) end
  if c.upper_bound ~= nil then parts[#parts + 1] = bound(c.upper_bound) end
  return c.name .. "(" .. table.concat(parts, ", ") .. ")"
end
function Constraint:check(v)
  if not is_tensor(v) then bad_arg("constraint(" .. tostring(self) .. ").check", "a tensor", v) end
  return self._check(v)
end
local function constraint(name, check, fields)
  local c = fields or {}
  c.name, c._check = name, check
  c.event_dim, c.is_discrete = c.event_dim or 0, c.is_discrete or false
  return setmetatable(c, Constraint)
end
local C = {}
D.constraints = C
-- (as torch's v % 1 == 0: not infinity)
local function whole(v) return v:eq(v:floor()):logical_and(v:abs():lt(math.huge)) end
function C.greater_than(lo) return constraint("greater_than", function(v) return v:gt(lo) end, { lower_bound = lo }) end
function C.greater_than_eq(lo) return constraint("greater_than_eq", function(v) return v:ge(lo) end, { lower_bound = lo }) end
function C.less_than(hi) return constraint("less_than", function(v) return v:lt(hi) end, { upper_bound = hi }) end
function C.interval(lo, hi)
  return constraint("interval", function(v) return v:ge(lo):logical_and(v:le(hi)) end, { lower_bound = lo, upper_bound = hi })
end
function C.half_open_interval(lo, hi)
  return constraint("half_open_interval", function(v) return v:ge(lo):logical_and(v:lt(hi)) end,
                    { lower_bound = lo, upper_bound = hi })
end
function C.integer_interval(lo, hi)
  return constraint("integer_interval", function(v) return whole(v):logical_and(v:ge(lo)):logical_and(v:le(hi)) end,
                    { lower_bound = lo, upper_bound = hi, is_discrete = true })
end
-- base's check over n more of the right-most dims, all of which must hold
function C.independent(base, n)
  if getmetatable(base) ~= Constraint then bad_arg("constraints.independent", "a constraint", base) end
  if type(n) ~= "number" or n < 0 or n ~= math.floor(n) then
    raise("constraints.independent: n must be a whole number >= 0, got " .. tostring(n))
  end
  return constraint("independent", function(v)
    if v:dim() < n then
      raise("constraint(independent).check: expected a value of at least " .. n .. " dims, got shape "
            .. shape_str(v.shape))
    end
    local r = base:check(v)
    for _ = 1, n do r = r:all(-1) end
    return r
  end, { base_constraint = base, reinterpreted_batch_ndims = n, event_dim = base.event_dim + n,
         is_discrete = base.is_discrete })
end
-- (counts in each category summing to at most upper_bound, as torch's)
function C.multinomial(hi)
  return constraint("multinomial", function(v) return v:ge(0):all(-1):logical_and(v:sum(-1):le(hi)) end,
                    { upper_bound = hi, event_dim = 1, is_discrete = true })
end
C.real = constraint("real", function(v) return v:eq(v) end)   -- (NaN is not a number)
C.positive = constraint("positive", function(v) return v:gt(0) end, { _named = true, lower_bound = 0 })
C.nonnegative = constraint("nonnegative", function(v) return v:ge(0) end, { _named = true, lower_bound = 0 })
C.unit_interval = constraint("unit_interval", function(v) return v:ge(0):logical_and(v:le(1)) end,
                             { _named = true, lower_bound = 0, upper_bound = 1 })
C.boolean = constraint("boolean", function(v) return v:eq(0):logical_or(v:eq(1)) end, { is_discrete = true })
C.nonnegative_integer = constraint("nonnegative_integer", function(v) return whole(v):logical_and(v:ge(0)) end,
                                   { _named = true, lower_bound = 0, is_discrete = true })
C.real_vector = C.independent(C.real, 1)
C.simplex = constraint("simplex", function(v)
  return v:ge(0):all(-1):logical_and((v:sum(-1) - 1):abs():lt(1e-6))
end, { event_dim = 1 })
C.one_hot = constraint("one_hot", function(v)
  return v:eq(0):logical_or(v:eq(1)):all(-1):logical_and(v:sum(-1):eq(1))
end, { event_dim = 1, is_discrete = true })
local function lower_cholesky(v)
  return v:tril():eq(v):all(-1):all(-1):logical_and(v:diagonal(0, -2, -1):gt(0):all(-1))
end
C.lower_cholesky = constraint("lower_cholesky", lower_cholesky, { event_dim = 2 })
C.corr_cholesky = constraint("corr_cholesky", function(v)   -- (rows of length 1, to torch's tolerance)
  local tol = dl.finfo(v.dtype).eps * v:size(-1) * 10
  return lower_cholesky(v):logical_and((v:detach():norm(-1) - 1):abs():le(tol):all(-1))
end, { event_dim = 2 })
C.positive_definite = constraint("positive_definite", function(v)   -- (symmetric as torch.isclose)
  local vt = v:transpose(-1, -2)
  local symmetric = (v - vt):abs():le(vt:abs() * 1e-5 + 1e-6):all(-1):all(-1)
  return symmetric:logical_and(dl.linalg.eigvalsh(v:detach()):gt(0):all(-1))
end, { event_dim = 2 })

-- cls's support: the constraint c, or what c(self) gives.
local function support(cls, c)
  cls._get_support = type(c) == "function" and c or function() return c end
end

-- ---- expand ---------------------------------------------------------------------------------

-- shape, checked as a batch shape that `from` expands to (torch's rules: new leading dims,
-- and a dim of 1 to any size).
local function expanded_batch(op, from, shape)
  if type(shape) == "number" then shape = { shape } end
  if type(shape) ~= "table" or is_tensor(shape) then bad_arg(op, "a batch shape (a list of sizes)", shape) end
  for _, n in ipairs(shape) do
    if type(n) ~= "number" or n < 0 or n ~= math.floor(n) then bad_arg(op, "a batch shape (sizes >= 0)", shape) end
  end
  local lead = #shape - #from
  local ok = lead >= 0
  for i = 1, ok and #from or 0 do ok = ok and (from[i] == shape[lead + i] or from[i] == 1) end
  if not ok then raise(op .. ": cannot expand the batch shape " .. shape_str(from) .. " to " .. shape_str(shape)) end
  return concat(shape, {})
end

-- The prefix `batch` of shape replaced by `to` (nil where shape does not begin with batch).
local function rebatched(shape, batch, to)
  if #shape < #batch then return nil end
  for i = 1, #batch do if shape[i] ~= batch[i] then return nil end end
  local out = concat(to, {})
  for i = #batch + 1, #shape do out[#out + 1] = shape[i] end
  return out
end

-- (self's fields but `skip`, those of its batch expanded to `to`: a new instance of its class)
local function expanded_copy(self, to, skip)
  local from = self.batch_shape
  local new = {}
  for k, v in pairs(self) do
    if k ~= skip then
      if is_tensor(v) then
        local s = rebatched(v.shape, from, to)
        if s then v = v:expand(s) end
      elseif type(v) == "table" and getmetatable(v) ~= nil and rawget(v, "batch_shape") ~= nil and v.expand then
        local s = rebatched(v.batch_shape, from, to)
        if s then v = v:expand(s) end
      end
      new[k] = v
    end
  end
  new.batch_shape = to
  return setmetatable(new, getmetatable(self))
end
-- A distribution of batch shape batch_shape drawing as this one along the new dims: the
-- parameters (tensors and distributions whose shape begins with the batch) as expanded
-- views of this one's (torch's Distribution.expand).
function Distribution:expand(batch_shape)
  return expanded_copy(self, expanded_batch(self.__name .. ".expand", self.batch_shape, batch_shape))
end

-- ---- shared by several families -------------------------------------------------------------

local B = {}

B.EULER = 0.57721566490153286061

-- The float epsilon of a dtype (PyTorch's clamp_probs: probabilities kept off 0 and 1),
-- and the smallest positive normal number (draws kept off 0).
-- (Of the tensor's own dtype: float16's tiny, 6.1e-5, not float32's, which it rounds to 0.)
local OWN_FINFO = { float64 = true, float16 = true, bfloat16 = true }   -- (others: float32's)
local function finfo_of(t) return dl.finfo(OWN_FINFO[t.dtype] and t.dtype or "float32") end
function B.eps_of(t) return finfo_of(t).eps end
function B.tiny_of(t) return finfo_of(t).tiny end

-- (a location must be a number: NaN is refused, as PyTorch's Real constraint)
function B.located(loc, scale) return loc:eq(loc), "loc must not be NaN", scale:gt(0), "scale must be positive" end

function B.log_beta(a, b) return a:lgamma() + b:lgamma() - (a + b):lgamma() end
function B.half_log_det(L) return L:diagonal(0, -2, -1):log():sum(-1) end
function B.sum_last(t, n)
  for _ = 1, n do t = t:sum(-1) end
  return t
end

-- KL[p's class][q's class] = function(p, q): the rules of kl_divergence.
B.KL = {}
function B.rule(P, Q, f)
  B.KL[P] = B.KL[P] or {}
  B.KL[P][Q] = f
end

B.D, B.Distribution, B.class, B.constructor, B.parameters = D, Distribution, class, constructor, parameters
B.take_options, B.require_all, B.concat, B.with_properties = take_options, require_all, concat, with_properties
B.LOG_SQRT_2PI = LOG_SQRT_2PI
B.C, B.constraint, B.support, B.expanded_batch, B.expanded_copy = C, constraint, support, expanded_batch, expanded_copy

return B
