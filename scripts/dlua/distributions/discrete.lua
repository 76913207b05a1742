-- dlua.distributions.discrete: Bernoulli, Categorical, Poisson, Geometric and
-- OneHotCategorical (categories 1..K, as dlua's indices).
local core = require("dlua.core")
local T = require("dlua.tensor")
local B = require("dlua.distributions.base")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local is_tensor, dl = T.is_tensor, T.dl
local type, setmetatable, tostring = type, setmetatable, tostring
local log = math.log
local class, constructor, parameters = B.class, B.constructor, B.parameters
local require_all, concat, with_properties = B.require_all, B.concat, B.with_properties
local eps_of, tiny_of = B.eps_of, B.tiny_of
local C, support = B.C, B.support

-- values (n values along dim 1, each of the event's shape) as enumerate_support gives them:
-- the values first, then the batch (size-1 dims unless {expand = true}, the default).
local function enumerated(self, values, opts)
  local op = self.__name .. ".enumerate_support"
  local expand = true
  if opts ~= nil then
    if type(opts) ~= "table" or is_tensor(opts) then bad_arg(op, "an options table {expand =}", opts) end
    for k in pairs(opts) do
      if k ~= "expand" then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
    end
    if opts.expand ~= nil and type(opts.expand) ~= "boolean" then bad_arg(op, "expand (a boolean)", opts.expand) end
    expand = opts.expand ~= false
  end
  local event = values.shape
  table.remove(event, 1)
  local ones = {}
  for i = 1, #self.batch_shape do ones[i] = 1 end
  values = values:reshape(concat({ values:size(1) }, ones, event))
  return expand and values:expand(concat({ values:size(1) }, self.batch_shape, event)) or values
end

-- ---- discrete distributions ------------------------------------------------------------------

-- probs or logits from an options table {probs =} or {logits =} (exactly one).
local function probs_or_logits(op, args, n)
  local spec = args[1]
  if n ~= 1 or type(spec) ~= "table" or is_tensor(spec) then
    raise(op .. ": expected {probs = p} or {logits = l}")
  end
  local validate = spec.validate_args ~= false
  for k in pairs(spec) do
    if k ~= "probs" and k ~= "logits" and k ~= "validate_args" then raise(op .. ": unknown option '" .. tostring(k) .. "'") end
  end
  if (spec.probs == nil) == (spec.logits == nil) then raise(op .. ": give one of probs and logits") end
  local which = spec.probs ~= nil and "probs" or "logits"
  local t = parameters(op, { which }, { spec[which] })[1]
  if validate and which == "logits" then require_all(op, t:eq(t):logical_or(t:eq(-math.huge)), "logits must not be NaN") end
  return which, t, validate
end

-- Bernoulli({probs = p} or {logits = l}): 1 with probability p.
-- self with success probabilities t given as `which` ("probs", checked to lie in [0, 1]
-- when validating, or "logits"), for Bernoulli's family.
local function with_probs(op, self, which, t, validate)
  if which == "probs" then
    if validate then require_all(op, t:ge(0):logical_and(t:le(1)), "probs must lie in [0, 1]") end
    self._probs = t
  else
    self._logits = t
  end
  return self
end

B.probs_or_logits, B.with_probs = probs_or_logits, with_probs   -- (for derived.lua's families)

local Bernoulli = class("Bernoulli")
function Bernoulli.new(...)
  local which, t, validate = probs_or_logits("Bernoulli", { ... }, select("#", ...))
  return with_probs("Bernoulli", setmetatable({ batch_shape = t.shape, event_shape = {}, _like = t,
                                                _validate = validate, _params = { which } }, Bernoulli),
                    which, t, validate)
end
function Bernoulli:_get_probs() return self._logits:sigmoid() end
function Bernoulli:_get_logits()
  local p = self._probs:clamp(eps_of(self._probs), 1 - eps_of(self._probs))
  return p:log() - (-p):log1p()
end
function Bernoulli:_get_mean() return self.probs end
function Bernoulli:_get_variance() return self.probs * (1 - self.probs) end
function Bernoulli:sample(shape)
  return dl.no_grad(function() return dl.bernoulli(self.probs:expand(self:_extended(shape))) end)
end
function Bernoulli:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then require_all("Bernoulli.log_prob", v:eq(0):logical_or(v:eq(1)), "a value is neither 0 nor 1") end
  local l, y = dl.broadcast_tensors(self.logits, v:to(self.logits.dtype))
  return -dl.nn.bce_with_logits(l, y, { reduction = "none" })
end
function Bernoulli:entropy()
  return dl.nn.bce_with_logits(self.logits, self.probs, { reduction = "none" })
end
-- (1 where p > 1/2, 0 below, NaN at 1/2: no one mode, as PyTorch's)
function Bernoulli:_get_mode()
  local p = self.probs
  return dl.where(p:eq(0.5), 0 / 0, p:ge(0.5):to(p.dtype))
end
support(Bernoulli, C.boolean)
Bernoulli.has_enumerate_support = true
function Bernoulli:enumerate_support(opts)
  return enumerated(self, dl.tensor({ 0, 1 }, { dtype = self._like.dtype, device = self._like.device }), opts)
end
with_properties(Bernoulli)

-- Categorical({probs = p} or {logits = l}): category k (1..K) with probability p[k] (the
-- last dim: K categories; p need not sum to 1, logits need not be normalised).
local Categorical = class("Categorical")
function Categorical.new(...)
  local which, t, validate = probs_or_logits("Categorical", { ... }, select("#", ...))
  if t:dim() < 1 then raise("Categorical: " .. which .. " must have at least one dim (the categories)") end
  local batch = t.shape
  batch[#batch] = nil
  local self = setmetatable({ batch_shape = batch, event_shape = {}, _like = t, _validate = validate,
                              _params = { which }, _num_events = t:size(-1) }, Categorical)
  if which == "probs" then
    if validate then
      require_all("Categorical", t:ge(0), "probs must be non-negative")
      require_all("Categorical", t:sum(-1):gt(0), "probs must not all be zero")
    end
    self._probs = t / t:sum(-1, true)
  else
    self._logits = t - t:logsumexp(-1, true)
  end
  return self
end
function Categorical:_get_probs() return self._logits:softmax(-1) end
function Categorical:_get_logits()
  local p = self._probs:clamp(eps_of(self._probs), 1 - eps_of(self._probs))
  return p:log()
end
-- Categories (1-based, int64) of `shape` .. batch draws from the rows of probs (batch .. K).
local function categorical_draws(probs, batch, shape)
  return dl.no_grad(function()
    local out = concat(shape or {}, batch)
    local rows = probs:reshape(-1, probs:size(-1))
    local per_row = 1
    for i = 1, #out - #batch do per_row = per_row * out[i] end
    -- (n draws per row of the batch, then the sample dims moved in front)
    local draws = dl.multinomial(rows, math.max(per_row, 1), { replacement = true })
    return draws:t():reshape(concat({ per_row }, batch)):reshape(out)
  end)
end
function Categorical:sample(shape)
  self:_extended(shape)   -- (checks the shape)
  return categorical_draws(self.probs, self.batch_shape, shape)
end
function Categorical:log_prob(v)
  v = self:_value("log_prob", v)
  if v:is_floating_point() then
    if self._validate then require_all("Categorical.log_prob", v:eq(v:floor()), "a value is not a whole number") end
    v = v:to("int64")
  end
  if self._validate then
    require_all("Categorical.log_prob", v:ge(1):logical_and(v:le(self._num_events)),
                "a value is not a category 1.." .. self._num_events)
  end
  local logits = self.logits
  local vv, l = dl.broadcast_tensors(v:unsqueeze(-1), logits)
  return l:gather(-1, vv:narrow(-1, 1, 1)):squeeze(-1)
end
function Categorical:entropy()
  local logits = self.logits
  local floor_ = logits.dtype == "float64" and -1.7976931348623157e308 or -3.4028234663852886e38
  return -(logits:clamp_min(floor_) * self.probs):sum(-1)
end
function Categorical:_get_mode() return self.probs:argmax(-1) end
support(Categorical, function(self) return C.integer_interval(1, self._num_events) end)
Categorical.has_enumerate_support = true
function Categorical:enumerate_support(opts)
  return enumerated(self, dl.arange(1, self._num_events + 1, { dtype = "int64", device = self._like.device }), opts)
end
with_properties(Categorical)

-- ---- more discrete families ---------------------------------------------------------------

-- Poisson(rate): counts 0, 1, 2 ... of mean rate (>= 0), drawn by dl.poisson.
local Poisson = class("Poisson")
Poisson._params = { "rate" }
Poisson.new = constructor(Poisson, { "rate" }, function(rate) return rate:ge(0), "rate must not be negative" end)
function Poisson:_get_mean() return self.rate end
function Poisson:_get_variance() return self.rate end
function Poisson:sample(shape)
  require_all("Poisson.sample", self.rate:lt(math.huge), "the rate must be finite (not infinity or NaN)")
  return dl.no_grad(function() return dl.poisson(self.rate:expand(self:_extended(shape))) end)
end
function Poisson:log_prob(v)
  v = self:_count_value(v)
  return dl.xlogy(v, self.rate) - self.rate - (v + 1):lgamma()
end
function Poisson:_get_mode() return self.rate:floor() end
support(Poisson, C.nonnegative_integer)
with_properties(Poisson)

-- Geometric({probs = p} or {logits = l}): the failures before the first success, 0, 1 ...
local Geometric = class("Geometric")
function Geometric.new(...)
  local self = Bernoulli.new(...)
  local p = self.probs
  if self._validate then require_all("Geometric", p:gt(0), "probs must be positive") end
  return setmetatable(self, Geometric)
end
Geometric._get_probs, Geometric._get_logits = Bernoulli._get_probs, Bernoulli._get_logits
function Geometric:_get_mean() return 1 / self.probs - 1 end
function Geometric:_get_variance() return (1 / self.probs - 1) / self.probs end
function Geometric:sample(shape)
  return dl.no_grad(function()
    local p = self.probs:expand(self:_extended(shape))
    local u = dl.rand(p.shape, { dtype = p.dtype, device = p.device }):clamp_min(tiny_of(p))
    return (u:log() / (-p):log1p()):floor()
  end)
end
function Geometric:log_prob(v)
  v = self:_count_value(v)
  local p = self.probs
  return dl.where(v:eq(0), 0, v * (-p):log1p()) + p:log()
end
function Geometric:entropy()
  return dl.nn.bce_with_logits(self.logits, self.probs, { reduction = "none" }) / self.probs
end
function Geometric:_get_mode() return dl.zeros_like(self.probs) end
support(Geometric, C.nonnegative_integer)
with_properties(Geometric)

-- OneHotCategorical({probs =} or {logits =}): Categorical's draws as one-hot vectors
-- (event_shape {K}); log_prob of one-hot values.
local OneHotCategorical = class("OneHotCategorical")
function OneHotCategorical.new(...)
  local self = Categorical.new(...)
  self.event_shape = { self._num_events }
  return setmetatable(self, OneHotCategorical)
end
OneHotCategorical._get_probs, OneHotCategorical._get_logits = Categorical._get_probs, Categorical._get_logits
function OneHotCategorical:_get_mean() return self.probs end
function OneHotCategorical:_get_variance() return self.probs * (1 - self.probs) end
function OneHotCategorical:sample(shape)
  self:_extended(shape)
  local draws = categorical_draws(self.probs, self.batch_shape, shape)
  return dl.nn.one_hot(draws, self._num_events):to(self.probs.dtype)
end
function OneHotCategorical:log_prob(v)
  v = self:_value("log_prob", v)
  if self._validate then
    local bits = v:eq(0):logical_or(v:eq(1))
    require_all("OneHotCategorical.log_prob", bits:logical_and(v:sum(-1, true):eq(1)), "a value is not a one-hot vector")
  end
  return dl.where(v:eq(0), 0, v * self.logits):sum(-1)   -- (a -inf logit where v is 0 counts 0)
end
OneHotCategorical.entropy = Categorical.entropy
function OneHotCategorical:_get_mode()
  local p = self.probs
  return dl.nn.one_hot(p:argmax(-1), self._num_events):to(p.dtype)
end
support(OneHotCategorical, C.one_hot)
OneHotCategorical.has_enumerate_support = true
function OneHotCategorical:enumerate_support(opts)
  return enumerated(self, dl.eye(self._num_events, { dtype = self._like.dtype, device = self._like.device }), opts)
end
with_properties(OneHotCategorical)

-- A total count: a whole number >= 0, or a tensor of them (broadcast with the probabilities).
local function total_count_of(op, n, like)
  if type(n) == "number" then
    if n ~= math.floor(n) or n < 0 then raise(op .. ": total_count must be a whole number >= 0, got " .. tostring(n)) end
    return dl.full({}, n, { dtype = like.dtype, device = like.device })
  end
  if not is_tensor(n) then bad_arg(op, "total_count (a number or a tensor)", n) end
  require_all(op, n:ge(0):logical_and(n:eq(n:floor())), "total_count must hold whole numbers >= 0")
  return n:to(like.dtype)
end

-- Binomial(total_count, {probs = p} or {logits = l}): successes in total_count trials.
local Binomial = class("Binomial")
function Binomial.new(total_count, ...)
  local which, t, validate = probs_or_logits("Binomial", { ... }, select("#", ...))
  local n = total_count_of("Binomial", total_count, t)
  local nb, tb = dl.broadcast_tensors(n, t)
  return with_probs("Binomial", setmetatable({ total_count = nb, batch_shape = tb.shape, event_shape = {}, _like = tb,
                                               _validate = validate, _params = { "total_count", which } }, Binomial),
                    which, tb, validate)
end
Binomial._get_probs, Binomial._get_logits = Bernoulli._get_probs, Bernoulli._get_logits
function Binomial:_get_mean() return self.total_count * self.probs end
function Binomial:_get_variance() return self.total_count * self.probs * (1 - self.probs) end
-- (draws by dl.binomial, in float64 and back to the probabilities' dtype)
function Binomial:sample(shape)
  return dl.no_grad(function()
    local out = self:_extended(shape)
    local p = self.probs
    return dl.binomial(self.total_count:expand(out):double(), p:expand(out):double()):to(p.dtype)
  end)
end
-- log C(n, k) + k log p + (n - k) log(1 - p), from the logits as PyTorch's (stable at p
-- near 0 and 1).
function Binomial:log_prob(v)
  v = self:_value("log_prob", v)
  if not v:is_floating_point() then v = v:to(self._like.dtype) end
  local n = self.total_count
  if self._validate then
    require_all("Binomial.log_prob", v:ge(0):logical_and(v:le(n)):logical_and(v:eq(v:floor())),
                "a value is not a count 0..total_count")
  end
  local l = self.logits
  local normalizer = n * l:clamp_min(0) + n * (-l:abs()):exp():log1p()
  return v * l - normalizer + (n + 1):lgamma() - (v + 1):lgamma() - (n - v + 1):lgamma()
end
-- The entropy by summing over the support 0..total_count (one total_count for the batch).
function Binomial:entropy()
  local n = self.total_count
  local top = n:max():item()
  if n:min():item() ~= top then raise("Binomial.entropy: needs one total_count for the whole batch") end
  local h = dl.zeros(self.batch_shape, { dtype = self._like.dtype, device = self._like.device })
  for k = 0, top do
    local lp = self:log_prob(dl.full(self.batch_shape, k, { dtype = self._like.dtype, device = self._like.device }))
    h = h - lp:exp() * lp
  end
  return h
end
function Binomial:_get_mode()
  local n = self.total_count
  local m = ((n + 1) * self.probs):floor()
  return dl.where(m:gt(n), n, m)
end
support(Binomial, function(self) return C.integer_interval(0, self.total_count) end)
Binomial.has_enumerate_support = true
-- (0..total_count: one total_count for the whole batch, as PyTorch's)
function Binomial:enumerate_support(opts)
  local n = self.total_count
  local top = n:numel() > 0 and n:max():item() or 0
  if n:numel() > 0 and n:min():item() ~= top then
    raise("Binomial.enumerate_support: needs one total_count for the whole batch, got "
          .. n:min():item() .. " to " .. top)
  end
  return enumerated(self, dl.arange(top + 1, { dtype = self._like.dtype, device = self._like.device }), opts)
end
with_properties(Binomial)

-- Multinomial(total_count, {probs = p} or {logits = l}): counts of total_count draws
-- among K categories (event_shape {K}).
local Multinomial = class("Multinomial")
function Multinomial.new(total_count, ...)
  local op = "Multinomial"
  if type(total_count) ~= "number" or total_count ~= math.floor(total_count) or total_count < 0 then
    raise(op .. ": total_count must be a whole number >= 0, got " .. tostring(total_count))
  end
  local ok, cat = pcall(Categorical.new, ...)
  if not ok then error((tostring(cat):gsub("Categorical", op, 1)), 0) end   -- (the checks are its own)
  local k = cat._num_events
  return setmetatable({ total_count = total_count, _cat = cat, batch_shape = cat.batch_shape, event_shape = { k },
                        _like = cat._like, _validate = cat._validate, _params = cat._params, _num_events = k },
                      Multinomial)
end
function Multinomial:_get_probs() return self._cat.probs end
function Multinomial:_get_logits() return self._cat.logits end
function Multinomial:_get_mean() return self.probs * self.total_count end
function Multinomial:_get_variance() return self.probs * (1 - self.probs) * self.total_count end
function Multinomial:sample(shape)
  self:_extended(shape)
  local n, k = self.total_count, self._num_events
  local draws = categorical_draws(self.probs, self.batch_shape, concat({ math.max(n, 1) }, shape or {}))
  local counts = dl.nn.one_hot(draws, k):to(self.probs.dtype):sum(1)
  return n == 0 and counts * 0 or counts
end
function Multinomial:log_prob(v)
  v = self:_value("log_prob", v)
  if not v:is_floating_point() then v = v:to(self._like.dtype) end
  if self._validate then
    require_all("Multinomial.log_prob", v:ge(0):logical_and(v:eq(v:floor())):logical_and(v:sum(-1, true):eq(self.total_count)),
                "a value is not a vector of counts summing to total_count")
  end
  local l = self.logits
  local terms = dl.where(v:eq(0), 0, v * l)   -- (a count of 0 at a -inf logit: 0)
  return terms:sum(-1) + (self.total_count + 1 + v:sum(-1) * 0):lgamma() - (v + 1):lgamma():sum(-1)
end
support(Multinomial, function(self) return C.multinomial(self.total_count) end)
with_properties(Multinomial)
