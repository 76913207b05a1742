-- dlua.optim: optimizers and learning-rate schedules, as dl.optim (docs/training.md).
--
--   local opt = dl.optim.Adam{lr = 1e-3}
--   local loss, grads = dl.implicit_value_and_grad(loss_fn)()
--   opt:apply_gradients(grads)                    -- the {grad, variable} pairs
--   opt:step(net:parameters(), gs)                -- or parallel tables
--   opt:minimize(function() return loss_fn() end) -- or both at once; returns the loss
--   local sched = dl.optim.StepLR(opt, 10, 0.1)   -- sched:step() once per epoch
--
-- The update rules are PyTorch's (torch/optim/*.py of 1.13, the single-tensor code
-- paths), operation for operation, so that runs match to float rounding
-- (tests/lua/test_optim.lua against tests/ref/gen_training_refs.py). Updates are applied
-- in place, outside any gradient recording, so Variables keep their identity.
--
-- State is kept per variable and numbered by position: the order of `params` when given
-- to the constructor, otherwise the order in which the variables are first updated
-- (for implicit gradients, the order of first use, which the same program repeats).
-- state_dict() is flat: "iterations", "lr", "state.<position>.<name>" (momentum buffers,
-- moments, per-variable step counts). load_state_dict() before the variables have been
-- seen keeps the state and gives it to each variable when it first comes (a checkpoint
-- restored into a fresh program, before the first step), after checking its shape.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local hid = T.hid
local Module = require("dlua.nn.module")
core.own_source()

local C = core.C
local raise, raise_last, bad_arg, typename = core.raise, core.raise_last, core.bad_arg, core.typename
local entries = core.entries   -- nested loops: Note [Walking nested tables] in core.lua
local is_tensor, shape_str = T.is_tensor, T.shape_str
local dl = T.dl
local type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable =
  type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable
local sqrt, cos, pi, floor = math.sqrt, math.cos, math.pi, math.floor
local smatch, sort, concat = string.match, table.sort, table.concat

local optim = dl.optim or {}
dl.optim = optim

local Optimizer = {}
Optimizer.__index = Optimizer
optim.Optimizer = Optimizer

-- ---- construction -------------------------------------------------------------------------------

local function number_opt(name, opts, key, default, min)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or (min and v < min) then
    raise(name .. ": " .. key .. " must be a number" .. (min and (" >= " .. min) or "") .. ", got " .. tostring(v))
  end
  return v
end

-- An optimizer class: `defaults` maps each option to its default (nil: the option is
-- required), `check(self)` validates the options, `update(self, p, g, state, lr)` is the
-- rule for one variable.
local function class(name, defaults, check, update)
  local cls = setmetatable({ __name = name, _update = update }, { __index = Optimizer })
  cls.__index = cls
  cls.__tostring = function(self)
    local keys = {}
    for k in pairs(defaults) do keys[#keys + 1] = k end
    sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do
      local v = self[k]
      if type(v) == "table" then v = "{" .. concat(v, ", ") .. "}" end
      parts[#parts + 1] = k .. "=" .. tostring(v)
    end
    return name .. "{" .. concat(parts, ", ") .. "}"
  end
  optim[name] = function(opts)
    if opts == nil then opts = {} end
    if type(opts) ~= "table" then bad_arg(name, "an options table", opts) end
    local self = setmetatable({ iterations = 0, _state = {}, _pos = {}, _vars = {}, _pending = {} }, cls)
    for k in pairs(opts) do
      if defaults[k] == nil and k ~= "params" and k ~= "lr" then
        raise(name .. ": unknown option '" .. tostring(k) .. "'")
      end
    end
    local lr = opts.lr
    if lr == nil then lr = defaults.lr end
    if type(lr) ~= "number" and type(lr) ~= "function" then
      raise(name .. ": lr must be a number or a function of the step, got " .. typename(lr))
    end
    if type(lr) == "number" and lr < 0 then raise(name .. ": lr must be >= 0, got " .. lr) end
    self.lr = lr
    for k, d in pairs(defaults) do
      if k ~= "lr" then
        if type(d) == "number" then self[k] = number_opt(name, opts, k, d, 0)
        elseif type(d) == "boolean" then
          local v = opts[k]
          if v ~= nil and type(v) ~= "boolean" then raise(name .. ": " .. k .. " must be a boolean, got " .. typename(v)) end
          if v == nil then v = d end
          self[k] = v
        else
          self[k] = opts[k] == nil and d or opts[k]
        end
      end
    end
    check(self, name)
    if opts.params ~= nil then
      local ps = opts.params
      if Module.is_module(ps) then ps = ps:parameters() end
      if type(ps) ~= "table" then bad_arg(name, "a list of Variables or a module for params", ps) end
      for i, p in ipairs(ps) do
        if type(p) == "table" and is_tensor(p[2]) then p = p[2] end   -- named_parameters()
        if not is_tensor(p) then raise(name .. ": params[" .. i .. "] is a " .. typename(p) .. ", expected a Variable") end
        self:_position(p)
      end
    end
    return self
  end
  return cls
end

-- The position of variable v (assigned on first sight, with its pending restored state).
function Optimizer:_position(v)
  local pos = self._pos[v]
  if pos then return pos end
  local vars = self._vars
  pos = #vars + 1
  local pending = self._pending[pos]
  if pending then
    for k, x in pairs(pending) do
      if is_tensor(x) and x:numel() ~= v:numel() then
        raise(self.__name .. ": the restored state \"state." .. pos .. "." .. k .. "\" has shape "
              .. shape_str(x) .. ", but variable " .. pos .. " (" .. tostring(v.name) .. ") has shape " .. shape_str(v))
      end
    end
    for k, x in pairs(pending) do
      if is_tensor(x) then
        if x.device ~= v.device or x.dtype ~= v.dtype then x = x:to(v) end
        pending[k] = x:view_as(v)
      end
    end
    self._state[pos] = pending
    self._pending[pos] = nil
  else
    self._state[pos] = {}
  end
  vars[pos] = v
  self._pos[v] = pos
  return pos
end

-- ---- applying gradients ---------------------------------------------------------------------------

function Optimizer:current_lr()
  local lr = self.lr
  if type(lr) == "function" then
    lr = lr(self.iterations)
    if is_tensor(lr) then lr = lr:item() end
    if type(lr) ~= "number" then raise(self.__name .. ": the lr function returned a " .. typename(lr)) end
  end
  return lr
end

local function apply_one(self, g, v, lr)
  if not is_tensor(v) then raise(self.__name .. ": expected a Variable, got " .. typename(v)) end
  if not is_tensor(g) then raise(self.__name .. ": expected a gradient tensor, got " .. typename(g)) end
  if C.dl_numel(g) ~= C.dl_numel(v) then
    raise(self.__name .. ": gradient of shape " .. shape_str(g) .. " for a variable of shape " .. shape_str(v)
          .. (v.name and (" (" .. v.name .. ")") or ""))
  end
  local pos = self._pos[v] or self:_position(v)
  self:_update(v, g, self._state[pos], lr)
end

local function apply_pairs(self, gv, lr)
  for i = 1, #gv do
    local pair = gv[i]
    if type(pair) ~= "table" then raise(self.__name .. ": expected {gradient, variable} pairs, got a " .. typename(pair)) end
    local g = pair[1]
    if g ~= nil then apply_one(self, g, pair[2], lr) end
  end
end

local function apply_parallel(self, params, grads, lr)
  for i = 1, #params do
    local g = grads[i]
    if g ~= nil then apply_one(self, g, params[i], lr) end
  end
end

-- The {grad, variable} pairs of dl.implicit_grad (a nil grad skips its variable).
function Optimizer:apply_gradients(gv)
  if type(gv) ~= "table" then bad_arg("apply_gradients", "a list of {gradient, variable} pairs", gv) end
  dl.no_grad(apply_pairs, self, gv, self:current_lr())
  self.iterations = self.iterations + 1
end

-- Functional style: parallel lists of variables and gradients.
function Optimizer:step(params, grads)
  if Module.is_module(params) then params = params:parameters() end
  if type(params) ~= "table" or type(grads) ~= "table" or is_tensor(params) or is_tensor(grads) then
    raise("step: expected a list of variables and a list of gradients")
  end
  if #grads > #params then   -- fewer is fine: a nil gradient (a hole) skips its variable
    raise("step: " .. #params .. " variables but " .. #grads .. " gradients")
  end
  dl.no_grad(apply_parallel, self, params, grads, self:current_lr())
  self.iterations = self.iterations + 1
end

-- Computes loss_fn()'s gradients and applies them; returns the loss. With `variables`
-- (a list, or a module for its parameters), only those are updated; otherwise every
-- Variable the function used.
function Optimizer:minimize(loss_fn, variables)
  if type(loss_fn) ~= "function" then bad_arg("minimize", "a loss function", loss_fn) end
  if variables == nil then
    local loss, gv = dl.implicit_value_and_grad(loss_fn)()
    self:apply_gradients(gv)
    return loss
  end
  if Module.is_module(variables) then variables = variables:trainable_parameters() end
  if type(variables) ~= "table" then bad_arg("minimize", "a list of variables", variables) end
  local tape = dl.GradientTape()
  local loss = tape:record(loss_fn)
  if not is_tensor(loss) then raise("minimize: the loss function must return a tensor, got " .. typename(loss)) end
  local grads = tape:gradient(loss, variables)
  self:step(variables, grads)
  return loss
end

-- ---- state ---------------------------------------------------------------------------------------

-- "class" names the optimizer's type, so that a state is not given to another type (an
-- Adam's lr and moments to an SGD); states saved without it still load.
function Optimizer:state_dict()
  local sd = { class = self.__name, iterations = self.iterations }
  if type(self.lr) == "number" then sd.lr = self.lr end
  for pos, st in entries(self._state) do
    for k, v in entries(st) do
      if k:sub(1, 1) ~= "_" then sd["state." .. pos .. "." .. k] = v end
    end
  end
  for pos, st in entries(self._pending) do
    for k, v in entries(st) do sd["state." .. pos .. "." .. k] = v end
  end
  return sd
end

-- Checks every entry, then replaces the whole state (all or nothing).
function Optimizer:load_state_dict(sd)
  local name = self.__name .. ":load_state_dict"
  if type(sd) ~= "table" then bad_arg(name, "a state dict (a table)", sd) end
  local states = {}
  local iterations, lr = self.iterations, self.lr
  local class = sd.class
  if class ~= nil and class ~= self.__name then
    if type(class) ~= "string" then raise(name .. ": \"class\" must be a string, got " .. typename(class)) end
    local function an(s)   -- the article read aloud: an Adam, an SGD, a Lion
      local vowel = s:match("^[AEIOUaeiou]") or s:match("^[FHLMNRSX]%u")
      return (vowel and "an " or "a ") .. s
    end
    raise(name .. ": the state is " .. an(class) .. "'s, this optimizer is " .. an(self.__name))
  end
  for k, v in pairs(sd) do
    if k == "class" then   -- (checked above)
    elseif k == "iterations" then
      if type(v) ~= "number" then raise(name .. ": \"iterations\" must be a number, got " .. typename(v)) end
      iterations = v
    elseif k == "lr" then
      if type(v) ~= "number" then raise(name .. ": \"lr\" must be a number, got " .. typename(v)) end
      if type(lr) == "number" then lr = v end
    else
      local pos, key = smatch(tostring(k), "^state%.(%d+)%.([%w_]+)$")
      if not pos then raise(name .. ": unexpected key \"" .. tostring(k) .. "\"") end
      if not is_tensor(v) and type(v) ~= "number" then
        raise(name .. ": \"" .. k .. "\" must be a tensor or a number, got " .. typename(v))
      end
      pos = tonumber(pos)
      local var = self._vars[pos]
      if var and is_tensor(v) and v:numel() ~= var:numel() then
        raise(name .. ": \"" .. k .. "\" has shape " .. shape_str(v) .. ", but variable " .. pos
              .. " (" .. tostring(var.name) .. ") has shape " .. shape_str(var))
      end
      states[pos] = states[pos] or {}
      states[pos][key] = v
    end
  end
  -- Copies, so that the state never aliases the tensors handed in.
  local copies = dl.no_grad(function()
    local out = {}
    for pos, st in entries(states) do
      local c = {}
      for k, v in entries(st) do c[k] = is_tensor(v) and v:detach():clone() or v end
      out[pos] = c
    end
    return out
  end)
  self.iterations, self.lr = iterations, lr
  self._state, self._pending = {}, {}
  for pos, var in ipairs(self._vars) do
    local st = copies[pos] or {}
    for k, v in pairs(st) do
      if is_tensor(v) then
        if v.device ~= var.device or v.dtype ~= var.dtype then v = v:to(var) end
        st[k] = v:view_as(var)
      end
    end
    self._state[pos] = st
    copies[pos] = nil
  end
  for pos, st in pairs(copies) do self._pending[pos] = st end
end

-- ---- the rules -------------------------------------------------------------------------------------

local function nonneg_check(fields)
  return function(self, name)
    for _, f in ipairs(fields) do
      if self[f] < 0 then raise(name .. ": " .. f .. " must be >= 0, got " .. self[f]) end
    end
  end
end

-- SGD, Adam and AdamW are fused engine updates (tensor/optim.h): one pass over the
-- parameter and its state. RMSprop works in place on its state and on a scratch tensor
-- or two per variable (state keys starting with "_", not saved): a step allocates at
-- most one tensor (the square root, which has no in-place form), so it makes little
-- garbage for the collector.
local function scratch(st, key, p)
  local s = st[key]
  if s == nil then
    s = dl.empty_like(p)
    st[key] = s
  end
  return s
end

-- g + wd p (PyTorch's grad.add(param, alpha=wd)), or g itself without weight decay.
-- With `dense`, the result is also contiguous: a Linear layer's weight gradient
-- arrives as a transposed view, and a pointwise op reading a transposed operand is
-- several times slower than one reading contiguous memory, so a rule that reads g more
-- than once first copies it (one strided pass instead of several).
local function decayed(st, p, g, wd, dense)
  if wd ~= 0 then return scratch(st, "_g", p):copy_(p):mul_(wd):add_(g) end
  if dense and not g:is_contiguous() then return scratch(st, "_g", p):copy_(g) end
  return g
end

-- SGD: d = g + wd p; buf = mom buf + (1 - dampening) d (d on the first step);
-- d = d + mom buf (nesterov) or buf; p = p - lr d. One fused pass over p, g and buf
-- (tensor/optim_functors.h has the rule, in PyTorch's order of operations).
class("SGD", { lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false },
  function(self, name)
    if self.nesterov and (self.momentum <= 0 or self.dampening ~= 0) then
      raise(name .. ": nesterov momentum needs momentum > 0 and dampening 0")
    end
  end,
  function(self, p, g, st, lr)
    local mom = self.momentum
    local buf, first = 0, 0
    if mom ~= 0 then
      local b = st.momentum_buffer
      if b == nil then
        b = dl.empty_like(p)
        st.momentum_buffer = b
        first = 1
      end
      buf = hid(b)
    end
    if C.dl_sgd_step_(hid(p), hid(g), buf, lr, mom, self.dampening, self.weight_decay,
                      self.nesterov and 1 or 0, first) ~= 0 then
      raise_last()
    end
  end)

-- Adam / AdamW: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
-- p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), with amsgrad the
-- running maximum of v in place of v. Adam's weight decay is L2 (added to g); AdamW's is
-- decoupled (p = p (1 - lr wd) first). One fused pass over p, g and the moments.
local function adam_update(decoupled)
  return function(self, p, g, st, lr)
    local m, v = st.exp_avg, st.exp_avg_sq
    if m == nil then
      m, v = dl.zeros_like(p), dl.zeros_like(p)
      st.exp_avg, st.exp_avg_sq, st.step = m, v, 0
    end
    local vmax = 0
    if self.amsgrad then
      if st.max_exp_avg_sq == nil then st.max_exp_avg_sq = dl.zeros_like(p) end
      vmax = hid(st.max_exp_avg_sq)
    end
    local t = st.step + 1
    st.step = t
    if C.dl_adam_step_(hid(p), hid(g), hid(m), hid(v), vmax, lr, self.betas[1], self.betas[2], self.eps,
                       self.weight_decay, decoupled and 1 or 0, t) ~= 0 then
      raise_last()
    end
  end
end

local function adam_check(self, name)
  local b = self.betas
  if type(b) ~= "table" or getmetatable(b) ~= nil or #b ~= 2 or type(b[1]) ~= "number" or type(b[2]) ~= "number"
     or not (b[1] >= 0 and b[1] < 1 and b[2] >= 0 and b[2] < 1) then
    local shown = typename(b)
    if type(b) == "table" and getmetatable(b) == nil then
      local parts = {}
      for i = 1, #b do parts[i] = tostring(b[i]) end
      shown = "{" .. concat(parts, ", ") .. "}"
    end
    raise(name .. ": betas must be two numbers in [0, 1), got " .. shown)
  end
  if self.eps < 0 or self.weight_decay < 0 then raise(name .. ": eps and weight_decay must be >= 0") end
end

class("Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false },
      adam_check, adam_update(false))
class("AdamW", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false },
      adam_check, adam_update(true))

-- RMSprop: s = a s + (1 - a) g^2; centered: m = a m + (1 - a) g, d = sqrt(s - m^2) + eps,
-- else d = sqrt(s) + eps; with momentum: buf = mom buf + g / d, p = p - lr buf;
-- else p = p - lr g / d.
class("RMSprop", { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false },
  nonneg_check({ "alpha", "eps", "weight_decay", "momentum" }),
  function(self, p, g, st, lr)
    local a, mom = self.alpha, self.momentum
    g = decayed(st, p, g, self.weight_decay, true)
    local sq = st.square_avg
    if sq == nil then
      sq = dl.zeros_like(p)
      st.square_avg, st.step = sq, 0
      if mom > 0 then st.momentum_buffer = dl.zeros_like(p) end
      if self.centered then st.grad_avg = dl.zeros_like(p) end
    end
    st.step = st.step + 1
    local tmp = scratch(st, "_t", p)
    sq:mul_(a):add_(tmp:copy_(g):mul_(1 - a):mul_(g))
    local den
    if self.centered then
      local ga = st.grad_avg
      ga:mul_(a):add_(tmp:copy_(g):mul_(1 - a))
      den = tmp:copy_(ga):mul_(-1):mul_(ga):add_(sq):sqrt()
    else
      den = sq:sqrt()
    end
    den:add_(self.eps)
    if mom > 0 then
      local buf = st.momentum_buffer
      buf:mul_(mom):add_(tmp:copy_(g):div_(den))
      p:sub_(tmp:copy_(buf):mul_(lr))
    else
      p:add_(tmp:copy_(g):mul_(-lr):div_(den))
    end
  end)

-- Adagrad: s = s + g^2 (s starts at initial_accumulator_value); p = p - clr g /
-- (sqrt(s) + eps), clr = lr / (1 + (t - 1) lr_decay); weight decay added to g.
class("Adagrad", { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10 },
  nonneg_check({ "lr_decay", "weight_decay", "initial_accumulator_value", "eps" }),
  function(self, p, g, st, lr)
    g = decayed(st, p, g, self.weight_decay, true)
    local sum = st.sum
    if sum == nil then
      sum = dl.zeros_like(p)
      if self.initial_accumulator_value ~= 0 then sum:add_(self.initial_accumulator_value) end
      st.sum, st.step = sum, 0
    end
    st.step = st.step + 1
    local clr = lr / (1 + (st.step - 1) * self.lr_decay)
    local tmp = scratch(st, "_t", p)
    sum:add_(tmp:copy_(g):mul_(g))
    p:add_(tmp:copy_(g):div_(sum:sqrt():add_(self.eps)):mul_(-clr))
  end)

-- Adam's moments m and v of st (made on the first step), updated by g: m = b1 m + (1 - b1)
-- g, v = b2 v + (1 - b2) g^2; returns them and the step count t.
local function moments(self, st, p, g)
  local m, v = st.exp_avg, st.exp_avg_sq
  if m == nil then
    m, v = dl.zeros_like(p), dl.zeros_like(p)
    st.exp_avg, st.exp_avg_sq, st.step = m, v, 0
  end
  st.step = st.step + 1
  local b1, b2 = self.betas[1], self.betas[2]
  local tmp = scratch(st, "_t", p)
  m:mul_(b1):add_(tmp:copy_(g):mul_(1 - b1))
  v:mul_(b2):add_(tmp:copy_(g):mul_(1 - b2):mul_(g))
  return m, v, st.step, tmp
end

-- Adadelta: s = rho s + (1 - rho) g^2; d = sqrt(u + eps) / sqrt(s + eps) g;
-- u = rho u + (1 - rho) d^2; p = p - lr d (weight decay added to g).
class("Adadelta", { lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0 },
  function(self, name)
    if self.rho > 1 then raise(name .. ": rho must be in [0, 1], got " .. self.rho) end
  end,
  function(self, p, g, st, lr)
    g = decayed(st, p, g, self.weight_decay, true)
    local sq, acc = st.square_avg, st.acc_delta
    if sq == nil then
      sq, acc = dl.zeros_like(p), dl.zeros_like(p)
      st.square_avg, st.acc_delta, st.step = sq, acc, 0
    end
    st.step = st.step + 1
    local rho, eps = self.rho, self.eps
    local tmp = scratch(st, "_t", p)
    sq:mul_(rho):add_(tmp:copy_(g):mul_(1 - rho):mul_(g))
    local delta = (acc + eps):sqrt():div_((sq + eps):sqrt()):mul_(g)
    acc:mul_(rho):add_(tmp:copy_(delta):mul_(1 - rho):mul_(delta))
    p:add_(delta:mul_(-lr))
  end)

-- Adamax: m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps); p = p - lr / (1 - b1^t) m / u.
class("Adamax", { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0 }, adam_check,
  function(self, p, g, st, lr)
    g = decayed(st, p, g, self.weight_decay, true)
    local m, u = st.exp_avg, st.exp_inf
    if m == nil then
      m, u = dl.zeros_like(p), dl.zeros_like(p)
      st.exp_avg, st.exp_inf, st.step = m, u, 0
    end
    st.step = st.step + 1
    local b1, b2 = self.betas[1], self.betas[2]
    local tmp = scratch(st, "_t", p)
    m:mul_(b1):add_(tmp:copy_(g):mul_(1 - b1))
    u:copy_(dl.maximum(u:mul_(b2), tmp:copy_(g):abs_():add_(self.eps)))
    p:add_(tmp:copy_(m):div_(u):mul_(-lr / (1 - b1 ^ st.step)))
  end)

-- NAdam (Dozat): Adam with Nesterov momentum, its momentum mu_t = b1 (1 - 0.96^(t
-- momentum_decay) / 2) and their running product (kept in float32, as PyTorch's state
-- tensor, whose products round each mu to float32 first). PyTorch 1.13's update, whose
-- product for the next step multiplies mu_t twice (mu_product mu_t mu_{t+1}; later
-- versions drop one).
local f32cell = ffi.new("float[1]")
local function f32(v)
  f32cell[0] = v
  return f32cell[0]
end
class("NAdam", { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3 },
  adam_check,
  function(self, p, g, st, lr)
    g = decayed(st, p, g, self.weight_decay, true)
    local m, v, t = moments(self, st, p, g)
    local b1, b2, md = self.betas[1], self.betas[2], self.momentum_decay
    local mu = b1 * (1 - 0.5 * 0.96 ^ (t * md))
    local mu_next = b1 * (1 - 0.5 * 0.96 ^ ((t + 1) * md))
    local mp = st.mu_product or 1
    if is_tensor(mp) then mp = mp:item() end
    local prod = f32(mp * f32(mu))
    st.mu_product = prod
    local prod_next = f32(f32(prod * f32(mu)) * f32(mu_next))
    local denom = (v / (1 - b2 ^ t)):sqrt():add_(self.eps)
    p:add_(g / denom * (-lr * (1 - mu) / (1 - prod)))
    p:add_(m / denom * (-lr * mu_next / (1 - prod_next)))
  end)

-- RAdam (Liu et al.): Adam whose adaptive step is rectified by the variance of its
-- estimate, and plain momentum while that variance is undefined (rho_t <= 5).
class("RAdam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0 }, adam_check,
  function(self, p, g, st, lr)
    g = decayed(st, p, g, self.weight_decay, true)
    local m, v, t = moments(self, st, p, g)
    local b1, b2 = self.betas[1], self.betas[2]
    local bc1, bc2 = 1 - b1 ^ t, 1 - b2 ^ t
    local rho_inf = 2 / (1 - b2) - 1
    local rho_t = rho_inf - 2 * t * b2 ^ t / bc2
    local avg = m / bc1
    if rho_t > 5 then
      local rect = sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
      local adaptive = v:sqrt():add_(self.eps):reciprocal():mul_(sqrt(bc2))
      p:add_(avg * lr * adaptive * rect * -1)
    else
      p:add_(avg * (-lr))
    end
  end)

-- ---- L-BFGS ---------------------------------------------------------------------------------

-- LBFGS{lr = 1, max_iter = 20, max_eval, tolerance_grad = 1e-7, tolerance_change = 1e-9,
-- history_size = 100, line_search_fn = nil | "strong_wolfe"}: PyTorch's limited-memory
-- BFGS. Without a line search the steps are lr (the first scaled by 1 / |g|_1); with
-- "strong_wolfe" each step is searched for along the direction until the strong Wolfe
-- conditions hold (sufficient decrease c1 = 1e-4, curvature c2 = 0.9; bracketing, then
-- zooming by cubic interpolation, at most 25 evaluations: Nocedal and Wright's
-- algorithms 3.5 and 3.6, as PyTorch and minFunc). It needs the loss function, not one gradient:
-- opt:minimize(loss_fn, variables) runs up to max_iter iterations of the two-loop
-- recursion over the last history_size curvature pairs, evaluating loss_fn (and its
-- gradient) once per iteration, and returns the first loss, as PyTorch's step(closure).
-- The history carries over to the next minimize call. `variables` defaults to the
-- `params` option; a module stands for its trainable parameters.
local LBFGS = setmetatable({ __name = "LBFGS" }, { __index = Optimizer })
LBFGS.__index = LBFGS
local LBFGS_OPTS = { lr = true, max_iter = true, max_eval = true, tolerance_grad = true, tolerance_change = true,
                     history_size = true, line_search_fn = true, params = true }

function optim.LBFGS(opts)
  local name = "LBFGS"
  opts = core.options(name, opts, LBFGS_OPTS)
  if opts.line_search_fn ~= nil and opts.line_search_fn ~= "strong_wolfe" then
    raise(name .. ": line_search_fn must be nil or \"strong_wolfe\", got " .. tostring(opts.line_search_fn))
  end
  local self = setmetatable({ iterations = 0, _state = {}, _pos = {}, _vars = {}, _pending = {},
                              lr = number_opt(name, opts, "lr", 1, 0),
                              max_iter = number_opt(name, opts, "max_iter", 20, 1),
                              tolerance_grad = number_opt(name, opts, "tolerance_grad", 1e-7, 0),
                              tolerance_change = number_opt(name, opts, "tolerance_change", 1e-9, 0),
                              history_size = number_opt(name, opts, "history_size", 100, 1),
                              line_search_fn = opts.line_search_fn, params = opts.params,
                              lbfgs = { n_iter = 0, func_evals = 0 } }, LBFGS)
  local ps = opts.params
  if ps ~= nil and not Module.is_module(ps) then
    if type(ps) ~= "table" or is_tensor(ps) or #ps == 0 then bad_arg(name, "a list of Variables or a module for params", ps) end
    for i, p in ipairs(ps) do
      if not is_tensor(p) then raise(name .. ": params[" .. i .. "] is a " .. typename(p) .. ", expected a Variable") end
    end
  end
  self.max_eval = number_opt(name, opts, "max_eval", floor(self.max_iter * 5 / 4), 1)
  return self
end

function LBFGS:apply_gradients()
  raise("LBFGS: it evaluates the loss several times a step; use opt:minimize(loss_fn, variables)")
end
LBFGS.step = LBFGS.apply_gradients

local function dot(a, b) return (a * b):sum():item() end

-- The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, kept
-- within [lo, hi] (the two points when not given); their middle when the cubic has none.
local function cubic_interpolate(x1, f1, g1, x2, f2, g2, lo, hi)
  if lo == nil then lo, hi = math.min(x1, x2), math.max(x1, x2) end
  local d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
  local d2_square = d1 * d1 - g1 * g2
  if d2_square >= 0 then
    local d2 = sqrt(d2_square)
    local at
    if x1 <= x2 then
      at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else
      at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    end
    return math.min(math.max(at, lo), hi)
  end
  return (lo + hi) / 2
end

-- A step t along d from the loss f (gradient g, slope gtd = g.d) satisfying the strong
-- Wolfe conditions: phi(t) = evaluate(t) gives the loss and gradient at x + t d. Returns
-- the loss, gradient and step found, and the evaluations made.
local function strong_wolfe(phi, t, d, f, g, gtd, tolerance_change)
  local c1, c2, max_ls = 1e-4, 0.9, 25
  local d_norm = d:abs():max():item()
  local f_new, g_new = phi(t)
  local evals = 1
  local gtd_new = dot(g_new, d)
  local t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
  local done, ls_iter = false, 0
  local bracket, bf, bg, bgtd
  while ls_iter < max_ls do
    if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev) then
      bracket, bf, bg, bgtd = { t_prev, t }, { f_prev, f_new }, { g_prev, g_new }, { gtd_prev, gtd_new }
      break
    end
    if math.abs(gtd_new) <= -c2 * gtd then
      bracket, bf, bg, done = { t }, { f_new }, { g_new }, true
      break
    end
    if gtd_new >= 0 then
      bracket, bf, bg, bgtd = { t_prev, t }, { f_prev, f_new }, { g_prev, g_new }, { gtd_prev, gtd_new }
      break
    end
    -- extrapolate: a step between 1.01 and 10 times this one
    local lo, hi = t + 0.01 * (t - t_prev), t * 10
    local tmp = t
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, lo, hi)
    t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
    f_new, g_new = phi(t)
    evals = evals + 1
    gtd_new = dot(g_new, d)
    ls_iter = ls_iter + 1
  end
  if ls_iter == max_ls then bracket, bf, bg = { 0, t }, { f, f_new }, { g, g_new } end
  -- zoom: shrink the bracket until a point satisfies both conditions
  local insuf_progress = false
  local low, high = 1, 2
  if #bf == 2 and bf[1] > bf[2] then low, high = 2, 1 end
  while not done and ls_iter < max_ls do
    if math.abs(bracket[2] - bracket[1]) * d_norm < tolerance_change then break end
    t = cubic_interpolate(bracket[1], bf[1], bgtd[1], bracket[2], bf[2], bgtd[2])
    local bmax, bmin = math.max(bracket[1], bracket[2]), math.min(bracket[1], bracket[2])
    local eps = 0.1 * (bmax - bmin)
    if math.min(bmax - t, t - bmin) < eps then
      -- too close to an end: move away from it, unless the last step progressed
      if insuf_progress or t >= bmax or t <= bmin then
        t = math.abs(t - bmax) < math.abs(t - bmin) and bmax - eps or bmin + eps
        insuf_progress = false
      else
        insuf_progress = true
      end
    else
      insuf_progress = false
    end
    f_new, g_new = phi(t)
    evals = evals + 1
    gtd_new = dot(g_new, d)
    ls_iter = ls_iter + 1
    if f_new > f + c1 * t * gtd or f_new >= bf[low] then
      bracket[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new, gtd_new
      if bf[1] <= bf[2] then low, high = 1, 2 else low, high = 2, 1 end
    else
      if math.abs(gtd_new) <= -c2 * gtd then
        done = true
      elseif gtd_new * (bracket[high] - bracket[low]) >= 0 then
        bracket[high], bf[high], bg[high], bgtd[high] = bracket[low], bf[low], bg[low], bgtd[low]
      end
      bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new, gtd_new
    end
  end
  return bf[low], bg[low], bracket[low], evals
end

function LBFGS:minimize(loss_fn, variables)
  local name = "LBFGS"
  if type(loss_fn) ~= "function" then bad_arg("minimize", "a loss function", loss_fn) end
  if variables == nil then variables = self.params end
  if Module.is_module(variables) then variables = variables:trainable_parameters() end
  if type(variables) ~= "table" or #variables == 0 then
    bad_arg(name .. ":minimize", "a list of variables (or params given to LBFGS)", variables)
  end
  -- The loss and the gradient, flattened into one vector.
  local function evaluate()
    local tape = dl.GradientTape()
    local loss = tape:record(loss_fn)
    if not is_tensor(loss) then raise(name .. ": the loss function must return a tensor, got " .. typename(loss)) end
    local gs = tape:gradient(loss, variables)
    local flat = {}
    for i, v in ipairs(variables) do   -- (no gradient: zeros, as PyTorch's)
      local g = gs[i]
      flat[i] = g and g:reshape(-1) or dl.zeros(v:numel(), { dtype = v.dtype, device = v.device })
    end
    return loss, dl.cat(flat, 1)
  end
  local function add_step(t, d)   -- variables += t d
    dl.no_grad(function()
      local at = 1
      for _, v in ipairs(variables) do
        local n = v:numel()
        v:add_(d:narrow(1, at, n):reshape(v.shape) * t)
        at = at + n
      end
    end)
  end
  local st = self.lbfgs
  local orig_loss, flat_grad = evaluate()
  local loss = orig_loss:item()
  local current_evals = 1
  st.func_evals = st.func_evals + 1
  if flat_grad:abs():max():item() <= self.tolerance_grad then return orig_loss end
  local d, t = st.d, st.t
  local old_dirs, old_stps, ro, H_diag = st.old_dirs, st.old_stps, st.ro, st.H_diag
  local prev_flat_grad, prev_loss = st.prev_flat_grad, st.prev_loss
  local n_iter = 0
  while n_iter < self.max_iter do
    n_iter = n_iter + 1
    st.n_iter = st.n_iter + 1
    if st.n_iter == 1 then
      d = -flat_grad
      old_dirs, old_stps, ro, H_diag = {}, {}, {}, 1
    else
      -- the newest curvature pair, kept when it is positive enough
      local y = flat_grad - prev_flat_grad
      local s = d * t
      local ys = dot(y, s)
      if ys > 1e-10 then
        if #old_dirs == self.history_size then
          table.remove(old_dirs, 1); table.remove(old_stps, 1); table.remove(ro, 1)
        end
        old_dirs[#old_dirs + 1], old_stps[#old_stps + 1], ro[#ro + 1] = y, s, 1 / ys
        H_diag = ys / dot(y, y)
      end
      -- the two-loop recursion: d = -H g
      local al = {}
      local q = -flat_grad
      for i = #old_dirs, 1, -1 do
        al[i] = dot(old_stps[i], q) * ro[i]
        q = q - old_dirs[i] * al[i]
      end
      local r = q * H_diag
      for i = 1, #old_dirs do
        local be = dot(old_dirs[i], r) * ro[i]
        r = r + old_stps[i] * (al[i] - be)
      end
      d = r
    end
    prev_flat_grad, prev_loss = flat_grad:clone(), loss
    if st.n_iter == 1 then
      t = math.min(1, 1 / flat_grad:abs():sum():item()) * self.lr
    else
      t = self.lr
    end
    local gtd = dot(flat_grad, d)
    if gtd > -self.tolerance_change then break end
    local ls_evals = 0
    local opt_cond = false
    if self.line_search_fn == "strong_wolfe" then
      local x0 = {}
      for i, v in ipairs(variables) do x0[i] = v:clone() end
      local function phi(step)   -- the loss and gradient at x0 + step d; x0 restored
        add_step(step, d)
        local l, g = evaluate()
        dl.no_grad(function() for i, v in ipairs(variables) do v:copy_(x0[i]) end end)
        return l:item(), g
      end
      loss, flat_grad, t, ls_evals = strong_wolfe(phi, t, d, loss, flat_grad, gtd, self.tolerance_change)
      add_step(t, d)
      opt_cond = flat_grad:abs():max():item() <= self.tolerance_grad
    else
      add_step(t, d)
      if n_iter ~= self.max_iter then
        local l
        l, flat_grad = evaluate()
        loss = l:item()
        opt_cond = flat_grad:abs():max():item() <= self.tolerance_grad
        ls_evals = 1
      end
    end
    current_evals = current_evals + ls_evals
    st.func_evals = st.func_evals + ls_evals
    if n_iter == self.max_iter or current_evals >= self.max_eval or opt_cond then break end
    if (d * t):abs():max():item() <= self.tolerance_change then break end
    if math.abs(loss - prev_loss) < self.tolerance_change then break end
  end
  st.d, st.t, st.old_dirs, st.old_stps, st.ro, st.H_diag = d, t, old_dirs, old_stps, ro, H_diag
  st.prev_flat_grad, st.prev_loss = prev_flat_grad, prev_loss
  self.iterations = self.iterations + 1
  return orig_loss
end

-- ---- gradient clipping --------------------------------------------------------------------------

-- TensorFlow's clip_by_global_norm: scales every gradient by max_norm / max(norm,
-- max_norm), norm being the 2-norm of all of them together. `grads` is a list of
-- tensors or of {grad, variable} pairs (nil gradients allowed); returns a new list of
-- the same kind and the global norm (a number, before clipping).
function optim.clip_by_global_norm(grads, max_norm)
  if type(grads) ~= "table" or is_tensor(grads) then bad_arg("clip_by_global_norm", "a list of gradients", grads) end
  if type(max_norm) ~= "number" or max_norm <= 0 then
    raise("clip_by_global_norm: max_norm must be a number > 0, got " .. tostring(max_norm))
  end
  local n = table.maxn(grads)
  local sq = 0
  for i = 1, n do
    local e = grads[i]
    local g = e
    if type(e) == "table" then g = e[1] end
    if g ~= nil then
      if not is_tensor(g) then raise("clip_by_global_norm: element " .. i .. " is a " .. typename(g) .. ", expected a tensor") end
      local v = dl.no_grad(function() return g:detach():double():pow(2):sum():item() end)
      sq = sq + v
    end
  end
  local norm = sqrt(sq)
  local scale = max_norm / (norm > max_norm and norm or max_norm)
  local out = {}
  for i = 1, n do
    local e = grads[i]
    local pair = type(e) == "table"
    local g = e
    if pair then g = e[1] end
    if g ~= nil and scale < 1 then g = g * scale end
    if pair then out[i] = { g, e[2] } else out[i] = g end
  end
  return out, norm
end

-- ---- learning-rate schedules -------------------------------------------------------------------

-- A schedule changes opt.lr at each sched:step() (once per epoch, as PyTorch's), from
-- the lr the optimizer had when its first schedule was made. Alone, it sets lr from its
-- closed form, a function of the epoch. Schedules stepped back to back on one optimizer
-- compose as PyTorch's: a schedule that finds lr changed since it last set it (by
-- another schedule, ReduceLROnPlateau or a hand) follows from then on its chainable form
-- (`_chain(lr, epoch)`, PyTorch's get_lr: the new lr from the current one), so that each
-- scales what the others set. The two forms agree but for rounding, which the closed
-- form does not gather over a long run. LambdaLR, CosineAnnealingWarmRestarts,
-- OneCycleLR and WarmupCosineLR have no chainable form: they set lr from the base lr,
-- over what the others set (PyTorch's do the same).
local Schedule = {}
Schedule.__index = Schedule

local function schedule(name, lr_at, chain)
  local cls = setmetatable({ __name = name }, { __index = Schedule })
  cls.__index = cls
  cls._lr_at, cls._chain = lr_at, chain
  return cls
end

-- Sets opt.lr for epoch e; returns it.
function Schedule:_apply(e)
  local opt = self.optimizer
  local cur = opt.lr
  if self._chain and cur ~= self._lr then
    if type(cur) ~= "number" then raise(self.__name .. ": the optimizer's lr must be a number, got " .. typename(cur)) end
    self._chained = true
  end
  local lr
  if self._chained then lr = self:_chain(cur, e) else lr = self:_lr_at(e) end
  opt.lr, self._lr = lr, lr
  return lr
end

-- A schedule just made takes its first step, to epoch 0, as PyTorch's (which sets lr
-- for some: LinearLR's start factor); one made on an lr that another schedule has
-- changed is chained from the start.
local function made(self)
  self._lr = self.base_lr
  self:_apply(0)
  return self
end

function Schedule:step(epoch)
  if epoch ~= nil then
    raise(self.__name .. ":step takes no epoch (it counts them itself), got " .. tostring(epoch))
  end
  self.last_epoch = self.last_epoch + 1
  return self:_apply(self.last_epoch)
end

-- The lr this schedule set last (a later schedule may have changed opt.lr since).
function Schedule:get_last_lr() return self._lr end

function Schedule:state_dict()
  return { last_epoch = self.last_epoch, base_lr = self.base_lr, epoch = self._epoch, lr = self._lr,
           chained = self._chained }
end

-- A chained schedule leaves opt.lr as it is: what it set depends on the others, and the
-- optimizer's own state dict has it (as PyTorch's).
function Schedule:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.last_epoch) ~= "number" or type(sd.base_lr) ~= "number"
     or (sd.epoch ~= nil and type(sd.epoch) ~= "number") then
    raise(self.__name .. ":load_state_dict: expected {last_epoch = n, base_lr = x}")
  end
  self.last_epoch, self.base_lr, self._epoch = sd.last_epoch, sd.base_lr, sd.epoch
  self._chained = sd.chained == true or nil
  if self._chained then
    self._lr = type(sd.lr) == "number" and sd.lr or self.optimizer.lr
  else
    self._lr = self:_lr_at(sd.epoch or sd.last_epoch)
    self.optimizer.lr = self._lr
  end
end

-- Checks opt; returns the lr a schedule starts from: the optimizer's lr when its first
-- schedule was made (PyTorch's initial_lr), so that a second schedule (SequentialLR's
-- parts) starts from the same lr as the first, whatever the first set since.
local function schedule_opt(name, opt)
  if type(opt) ~= "table" or getmetatable(opt) == nil or type(opt.apply_gradients) ~= "function" then
    bad_arg(name, "an optimizer", opt)
  end
  if type(opt.lr) ~= "number" then raise(name .. ": the optimizer's lr must be a number, got " .. typename(opt.lr)) end
  if opt.initial_lr == nil then opt.initial_lr = opt.lr end
  return opt.initial_lr
end

-- A number option of a schedule, checked: ok(v) says whether it may be v.
local function schedule_number(name, what, v, default, ok, needs)
  if v == nil then v = default end
  if type(v) ~= "number" or not ok(v) then
    raise(name .. ": " .. what .. " must be " .. needs .. ", got " .. tostring(v))
  end
  return v
end
local function positive(v) return v > 0 end
local function nonneg(v) return v >= 0 end
local function whole(v) return v >= 1 and v == floor(v) end
local function whole0(v) return v >= 0 and v == floor(v) end
local function any_number(v) return v == v end

local function schedule_bool(name, what, v, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then raise(name .. ": " .. what .. " must be a boolean, got " .. tostring(v)) end
  return v
end

-- lr = base gamma^floor(epoch / step_size).
local StepLR = schedule("StepLR", function(self, e)
  return self.base_lr * self.gamma ^ floor(e / self.step_size)
end, function(self, lr, e)
  if e == 0 or e % self.step_size ~= 0 then return lr end
  return lr * self.gamma
end)

function optim.StepLR(opt, step_size, gamma)
  local base = schedule_opt("StepLR", opt)
  if type(step_size) ~= "number" or step_size < 1 or step_size ~= floor(step_size) then
    raise("StepLR: step_size must be an integer >= 1, got " .. tostring(step_size))
  end
  gamma = gamma == nil and 0.1 or gamma
  if type(gamma) ~= "number" then bad_arg("StepLR", "a number for gamma", gamma) end
  return made(setmetatable({ optimizer = opt, step_size = step_size, gamma = gamma, base_lr = base,
                             last_epoch = 0 }, StepLR))
end

-- lr = eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2; chained, PyTorch's
-- recurrence (the ratio of two such factors, and a step up past each trough).
local Cosine = schedule("CosineAnnealingLR", function(self, e)
  return self.eta_min + (self.base_lr - self.eta_min) * (1 + cos(pi * e / self.T_max)) / 2
end, function(self, lr, e)
  local T, eta = self.T_max, self.eta_min
  if e == 0 then return lr end
  if (e - 1 - T) % (2 * T) == 0 then return lr + (self.base_lr - eta) * (1 - cos(pi / T)) / 2 end
  return (1 + cos(pi * e / T)) / (1 + cos(pi * (e - 1) / T)) * (lr - eta) + eta
end)

function optim.CosineAnnealingLR(opt, T_max, eta_min)
  local base = schedule_opt("CosineAnnealingLR", opt)
  if type(T_max) ~= "number" or T_max <= 0 then
    raise("CosineAnnealingLR: T_max must be a number > 0, got " .. tostring(T_max))
  end
  eta_min = eta_min == nil and 0 or eta_min
  if type(eta_min) ~= "number" then bad_arg("CosineAnnealingLR", "a number for eta_min", eta_min) end
  return made(setmetatable({ optimizer = opt, T_max = T_max, eta_min = eta_min, base_lr = base,
                             last_epoch = 0 }, Cosine))
end

-- lr = base gamma^epoch.
local Exponential = schedule("ExponentialLR", function(self, e)
  return self.base_lr * self.gamma ^ e
end, function(self, lr, e)
  if e == 0 then return lr end
  return lr * self.gamma
end)
function optim.ExponentialLR(opt, gamma)
  local base = schedule_opt("ExponentialLR", opt)
  gamma = schedule_number("ExponentialLR", "gamma", gamma, nil, positive, "a number > 0")
  return made(setmetatable({ optimizer = opt, gamma = gamma, base_lr = base, last_epoch = 0 }, Exponential))
end

-- lr = base gamma^(the number of milestones reached), milestones increasing epochs.
local MultiStep = schedule("MultiStepLR", function(self, e)
  local n = 0
  for _, m in ipairs(self.milestones) do if e >= m then n = n + 1 end end
  return self.base_lr * self.gamma ^ n
end, function(self, lr, e)
  for _, m in ipairs(self.milestones) do
    if e == m then return lr * self.gamma end
  end
  return lr
end)
function optim.MultiStepLR(opt, milestones, gamma)
  local base = schedule_opt("MultiStepLR", opt)
  if type(milestones) ~= "table" or #milestones == 0 then bad_arg("MultiStepLR", "a list of milestones", milestones) end
  for i, m in ipairs(milestones) do
    if type(m) ~= "number" or m ~= floor(m) or m < 1 or (i > 1 and m <= milestones[i - 1]) then
      raise("MultiStepLR: milestones must be increasing integers >= 1, got " .. tostring(m) .. " at " .. i)
    end
  end
  gamma = schedule_number("MultiStepLR", "gamma", gamma, 0.1, positive, "a number > 0")
  return made(setmetatable({ optimizer = opt, milestones = milestones, gamma = gamma, base_lr = base,
                             last_epoch = 0 }, MultiStep))
end

-- lr = base f(epoch), f a Lua function of the epoch (0 when made).
local Lambda = schedule("LambdaLR", function(self, e)
  local f = self.lr_lambda(e)
  if type(f) ~= "number" then raise("LambdaLR: the function returned " .. typename(f) .. ", expected a number") end
  return self.base_lr * f
end)
function optim.LambdaLR(opt, lr_lambda)
  local base = schedule_opt("LambdaLR", opt)
  if type(lr_lambda) ~= "function" then bad_arg("LambdaLR", "a function of the epoch", lr_lambda) end
  return made(setmetatable({ optimizer = opt, lr_lambda = lr_lambda, base_lr = base, last_epoch = 0 }, Lambda))
end

-- LinearLR(opt [, start_factor = 1/3, end_factor = 1, total_iters = 5]): the factor moves
-- linearly from start to end over total_iters epochs, then stays (a warm-up); made,
-- it sets lr to base start_factor, as PyTorch's.
local Linear = schedule("LinearLR", function(self, e)
  local t = math.min(e, self.total_iters) / self.total_iters
  return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * t)
end, function(self, lr, e)
  local s, d = self.start_factor, self.end_factor - self.start_factor
  if e == 0 then return lr * s end
  if e > self.total_iters then return lr end
  return lr * (1 + d / (self.total_iters * s + (e - 1) * d))
end)
function optim.LinearLR(opt, start_factor, end_factor, total_iters)
  local name = "LinearLR"
  local base = schedule_opt(name, opt)
  start_factor = schedule_number(name, "start_factor", start_factor, 1 / 3, function(v) return v > 0 and v <= 1 end,
                                 "in (0, 1]")
  end_factor = schedule_number(name, "end_factor", end_factor, 1, function(v) return v >= 0 and v <= 1 end, "in [0, 1]")
  total_iters = schedule_number(name, "total_iters", total_iters, 5, whole, "an integer >= 1")
  return made(setmetatable({ optimizer = opt, start_factor = start_factor, end_factor = end_factor,
                             total_iters = total_iters, base_lr = base, last_epoch = 0 }, Linear))
end

-- ConstantLR(opt [, factor = 1/3, total_iters = 5]): lr = base factor for total_iters
-- epochs, then base (PyTorch's closed form, to the rounding).
local Constant = schedule("ConstantLR", function(self, e)
  return self.base_lr * (self.factor + (e >= self.total_iters and 1 - self.factor or 0))
end, function(self, lr, e)
  if e == 0 then return lr * self.factor end
  if e ~= self.total_iters then return lr end
  return lr * (1 / self.factor)
end)
function optim.ConstantLR(opt, factor, total_iters)
  local name = "ConstantLR"
  local base = schedule_opt(name, opt)
  factor = schedule_number(name, "factor", factor, 1 / 3, function(v) return v > 0 and v <= 1 end, "in (0, 1]")
  total_iters = schedule_number(name, "total_iters", total_iters, 5, whole, "an integer >= 1")
  return made(setmetatable({ optimizer = opt, factor = factor, total_iters = total_iters, base_lr = base,
                             last_epoch = 0 }, Constant))
end

-- CosineAnnealingWarmRestarts(opt, T_0 [, T_mult = 1, eta_min = 0]): cosine annealing that
-- restarts at base lr every T_0 epochs, each period T_mult times the last (SGDR).
-- sched:step(epoch) moves it to an epoch, fractional within a period (PyTorch's
-- step(epoch + i / iters), once per batch); sched:step() moves it on by one.
-- The periods are counted in integers: a logarithm of the epoch (PyTorch's step(epoch))
-- can round an epoch at a restart into the period before (121 = 1 + 3 + 9 + 27 + 81).
local Restarts = schedule("CosineAnnealingWarmRestarts", function(self, e)
  local T0, mult = self.T_0, self.T_mult
  local t_cur, t_i = e % T0, T0
  if mult > 1 then
    local start = 0
    while e >= start + t_i do start, t_i = start + t_i, t_i * mult end
    t_cur = e - start
  end
  return self.eta_min + (self.base_lr - self.eta_min) * (1 + cos(pi * t_cur / t_i)) / 2
end)
function optim.CosineAnnealingWarmRestarts(opt, T_0, T_mult, eta_min)
  local name = "CosineAnnealingWarmRestarts"
  local base = schedule_opt(name, opt)
  T_0 = schedule_number(name, "T_0", T_0, nil, whole, "an integer >= 1")
  T_mult = schedule_number(name, "T_mult", T_mult, 1, whole, "an integer >= 1")
  eta_min = schedule_number(name, "eta_min", eta_min, 0, any_number, "a number")
  return made(setmetatable({ optimizer = opt, T_0 = T_0, T_mult = T_mult, eta_min = eta_min, base_lr = base,
                             last_epoch = 0 }, Restarts))
end

function Restarts:step(epoch)
  if epoch == nil then
    epoch = (self._epoch or self.last_epoch) + 1
  elseif type(epoch) ~= "number" or not (epoch >= 0 and epoch < 2 ^ 53) then
    raise("CosineAnnealingWarmRestarts:step: epoch must be a finite number >= 0, got " .. tostring(epoch))
  end
  self._epoch, self.last_epoch = epoch, floor(epoch)
  return self:_apply(epoch)
end

-- SequentialLR(opt, {s1, s2, ...}, {m1, m2, ...}): schedule s1 until epoch m1, then s2
-- counted from 0 again, and so on (a warm-up then a decay), as PyTorch's; the schedules
-- must drive opt. Chained, the part in force steps by its chainable form, but at a
-- milestone, where PyTorch's step(0) takes the closed form.
local function sequential_part(self, e)
  local k, start = 1, 0
  for i, m in ipairs(self.milestones) do
    if e >= m then k, start = i + 1, m end
  end
  return self.schedulers[k], e - start, k > 1 and e == start
end
local Sequential = schedule("SequentialLR", function(self, e)
  local sc, se = sequential_part(self, e)
  return sc:_lr_at(se)
end, function(self, lr, e)
  local sc, se, at_milestone = sequential_part(self, e)
  if at_milestone or sc._chain == nil then return sc:_lr_at(se) end
  return sc:_chain(lr, se)
end)
function optim.SequentialLR(opt, schedulers, milestones)
  local name = "SequentialLR"
  local base = schedule_opt(name, opt)
  if type(schedulers) ~= "table" or #schedulers == 0 then bad_arg(name, "a list of schedules", schedulers) end
  if type(milestones) ~= "table" or #milestones ~= #schedulers - 1 then
    raise(name .. ": expected " .. (#schedulers - 1) .. " milestones for " .. #schedulers .. " schedules")
  end
  for i, sc in ipairs(schedulers) do
    if type(sc) ~= "table" or type(sc._lr_at) ~= "function" then bad_arg(name, "a schedule at " .. i, sc) end
    if sc.optimizer ~= opt then raise(name .. ": schedule " .. i .. " drives another optimizer") end
  end
  opt.lr = base   -- what the parts set when made undone, as PyTorch's
  return made(setmetatable({ optimizer = opt, schedulers = schedulers, milestones = milestones, base_lr = base,
                             last_epoch = 0 }, Sequential))
end

-- OneCycleLR(opt, max_lr, total_steps [, opts]): Smith's one-cycle policy, as PyTorch's,
-- stepped once per batch: lr rises from max_lr / div_factor to max_lr over pct_start
-- of the steps, then falls to max_lr / div_factor / final_div_factor (three_phase: back
-- to the start first, then down), annealed by cosine or linearly; the momentum (SGD's,
-- or Adam's first beta) moves the other way between max_momentum and base_momentum.
local ONE_CYCLE = { pct_start = true, anneal_strategy = true, div_factor = true, final_div_factor = true,
                    three_phase = true, cycle_momentum = true, base_momentum = true, max_momentum = true }
local OneCycle = schedule("OneCycleLR", function(self, e)
  if e > self.total_steps then
    raise("OneCycleLR: stepped " .. e .. " times, more than total_steps (" .. self.total_steps .. ")")
  end
  local start = 0
  for i, ph in ipairs(self.phases) do
    if e <= ph.stop or i == #self.phases then
      if ph.stop == start then   -- PyTorch divides by zero here
        raise("OneCycleLR: phase " .. i .. " of the cycle has no steps (pct_start = " .. self.pct_start
              .. " of total_steps = " .. self.total_steps .. "): change pct_start or total_steps")
      end
      local pct = (e - start) / (ph.stop - start)
      self._momentum = self.anneal(ph.m0, ph.m1, pct)
      return self.anneal(ph.lr0, ph.lr1, pct)
    end
    start = ph.stop
  end
end)

local function set_momentum(opt, m)
  if type(opt.betas) == "table" then opt.betas = { m, opt.betas[2] } else opt.momentum = m end
end

function OneCycle:step(epoch)
  local lr = Schedule.step(self, epoch)
  if self.cycle_momentum then set_momentum(self.optimizer, self._momentum) end
  return lr
end

function optim.OneCycleLR(opt, max_lr, total_steps, opts)
  local name = "OneCycleLR"
  schedule_opt(name, opt)
  opts = core.options(name, opts, ONE_CYCLE)
  max_lr = schedule_number(name, "max_lr", max_lr, nil, positive, "a number > 0")
  total_steps = schedule_number(name, "total_steps", total_steps, nil, whole, "an integer >= 1")
  local pct = schedule_number(name, "pct_start", opts.pct_start, 0.3, function(v) return v >= 0 and v <= 1 end,
                              "in [0, 1]")
  local strategy = opts.anneal_strategy or "cos"
  local anneal
  if strategy == "cos" then
    anneal = function(a, b, t) return b + (a - b) / 2 * (cos(pi * t) + 1) end
  elseif strategy == "linear" then
    anneal = function(a, b, t) return (b - a) * t + a end
  else
    raise(name .. ": anneal_strategy must be cos or linear, got " .. tostring(strategy))
  end
  local initial = max_lr / schedule_number(name, "div_factor", opts.div_factor, 25, positive, "a number > 0")
  local min_lr = initial / schedule_number(name, "final_div_factor", opts.final_div_factor, 1e4, positive,
                                           "a number > 0")
  local cycle = schedule_bool(name, "cycle_momentum", opts.cycle_momentum, true)
  local m_lo = schedule_number(name, "base_momentum", opts.base_momentum, 0.85, nonneg, "a number >= 0")
  local m_hi = schedule_number(name, "max_momentum", opts.max_momentum, 0.95, nonneg, "a number >= 0")
  if cycle and opt.momentum == nil and type(opt.betas) ~= "table" then
    raise(name .. ": cycle_momentum needs an optimizer with momentum or betas (pass cycle_momentum = false)")
  end
  local phases
  if schedule_bool(name, "three_phase", opts.three_phase, false) then
    phases = { { stop = pct * total_steps - 1, lr0 = initial, lr1 = max_lr, m0 = m_hi, m1 = m_lo },
               { stop = 2 * pct * total_steps - 2, lr0 = max_lr, lr1 = initial, m0 = m_lo, m1 = m_hi },
               { stop = total_steps - 1, lr0 = initial, lr1 = min_lr, m0 = m_hi, m1 = m_hi } }
  else
    phases = { { stop = pct * total_steps - 1, lr0 = initial, lr1 = max_lr, m0 = m_hi, m1 = m_lo },
               { stop = total_steps - 1, lr0 = max_lr, lr1 = min_lr, m0 = m_lo, m1 = m_hi } }
  end
  local self = made(setmetatable({ optimizer = opt, total_steps = total_steps, pct_start = pct, phases = phases,
                                   anneal = anneal, cycle_momentum = cycle, base_lr = initial, last_epoch = 0 },
                                 OneCycle))
  if cycle then set_momentum(opt, self._momentum) end
  return self
end

-- WarmupCosineLR(opt, warmup_steps, total_steps [, eta_min = 0]): lr rises linearly from
-- 0 to the optimizer's lr over warmup_steps, then follows a cosine down to eta_min at
-- total_steps (and stays there): the transformer schedule, stepped once per batch.
local WarmupCosine = schedule("WarmupCosineLR", function(self, e)
  if e < self.warmup then return self.base_lr * e / self.warmup end
  local t = (math.min(e, self.total) - self.warmup) / math.max(1, self.total - self.warmup)
  return self.eta_min + (self.base_lr - self.eta_min) * 0.5 * (1 + cos(pi * t))
end)

function optim.WarmupCosineLR(opt, warmup_steps, total_steps, eta_min)
  local name = "WarmupCosineLR"
  local base = schedule_opt(name, opt)
  if type(warmup_steps) ~= "number" or warmup_steps < 0 or warmup_steps ~= floor(warmup_steps) then
    raise(name .. ": warmup_steps must be an integer >= 0, got " .. tostring(warmup_steps))
  end
  if type(total_steps) ~= "number" or total_steps < warmup_steps then
    raise(name .. ": total_steps must be a number >= warmup_steps, got " .. tostring(total_steps))
  end
  eta_min = eta_min == nil and 0 or eta_min
  if type(eta_min) ~= "number" then bad_arg(name, "a number for eta_min", eta_min) end
  return made(setmetatable({ optimizer = opt, warmup = warmup_steps, total = total_steps, eta_min = eta_min,
                             base_lr = base, last_epoch = 0 }, WarmupCosine))
end

-- ChainedScheduler(opt, {s1, s2, ...}): one step() steps s1, s2, ... in turn (schedules
-- of opt, which compose as above), as PyTorch's.
local Chained = {}
Chained.__index = Chained
Chained.__name = "ChainedScheduler"

function optim.ChainedScheduler(opt, schedulers)
  local name = "ChainedScheduler"
  schedule_opt(name, opt)
  if type(schedulers) ~= "table" or getmetatable(schedulers) ~= nil or #schedulers == 0 then
    bad_arg(name, "a list of schedules", schedulers)
  end
  for i, sc in ipairs(schedulers) do
    local mt = type(sc) == "table" and getmetatable(sc)
    if not mt or (type(sc._lr_at) ~= "function" and mt ~= Chained) then
      bad_arg(name, "a schedule stepped without a metric at " .. i, sc)
    end
    if sc.optimizer ~= opt then raise(name .. ": schedule " .. i .. " drives another optimizer") end
  end
  return setmetatable({ optimizer = opt, schedulers = schedulers }, Chained)
end

function Chained:step(epoch)
  if epoch ~= nil then raise("ChainedScheduler:step takes no epoch (it counts them itself), got " .. tostring(epoch)) end
  for _, sc in ipairs(self.schedulers) do sc:step() end
  return self.optimizer.lr
end

function Chained:get_last_lr() return self.optimizer.lr end

function Chained:state_dict()
  local parts = {}
  for i, sc in ipairs(self.schedulers) do parts[i] = sc:state_dict() end
  return { schedulers = parts }
end

function Chained:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.schedulers) ~= "table" or #sd.schedulers ~= #self.schedulers then
    raise("ChainedScheduler:load_state_dict: expected the table of state_dict() (" .. #self.schedulers .. " schedules)")
  end
  for i, sc in ipairs(self.schedulers) do sc:load_state_dict(sd.schedulers[i]) end
end

-- ReduceLROnPlateau(opt [, opts]): sched:step(metric) after each evaluation; when the
-- metric has not improved (mode "min": fallen, "max": risen, by more than threshold,
-- relative or absolute) for more than `patience` evaluations, lr = max(lr factor, min_lr),
-- then `cooldown` evaluations pass before counting again. PyTorch's rule.
local PLATEAU = { mode = true, factor = true, patience = true, threshold = true, threshold_mode = true,
                  cooldown = true, min_lr = true, eps = true }
local Plateau = {}
Plateau.__index = Plateau
Plateau.__name = "ReduceLROnPlateau"

function optim.ReduceLROnPlateau(opt, opts)
  local name = "ReduceLROnPlateau"
  schedule_opt(name, opt)
  opts = core.options(name, opts, PLATEAU)
  local mode, tmode = opts.mode or "min", opts.threshold_mode or "rel"
  if mode ~= "min" and mode ~= "max" then raise(name .. ": mode must be min or max, got " .. tostring(mode)) end
  if tmode ~= "rel" and tmode ~= "abs" then raise(name .. ": threshold_mode must be rel or abs, got " .. tostring(tmode)) end
  local factor = schedule_number(name, "factor", opts.factor, 0.1, function(v) return v > 0 and v < 1 end, "in (0, 1)")
  return setmetatable({ optimizer = opt, mode = mode, threshold_mode = tmode, factor = factor,
                        patience = schedule_number(name, "patience", opts.patience, 10, whole0, "an integer >= 0"),
                        threshold = schedule_number(name, "threshold", opts.threshold, 1e-4, nonneg, "a number >= 0"),
                        cooldown = schedule_number(name, "cooldown", opts.cooldown, 0, whole0, "an integer >= 0"),
                        min_lr = schedule_number(name, "min_lr", opts.min_lr, 0, nonneg, "a number >= 0"),
                        eps = schedule_number(name, "eps", opts.eps, 1e-8, nonneg, "a number >= 0"),
                        best = mode == "min" and math.huge or -math.huge, num_bad_epochs = 0,
                        cooldown_counter = 0, last_epoch = 0 }, Plateau)
end

function Plateau:_better(a)
  local best, th = self.best, self.threshold
  if self.mode == "min" then
    return self.threshold_mode == "rel" and a < best * (1 - th) or (self.threshold_mode == "abs" and a < best - th)
  end
  return self.threshold_mode == "rel" and a > best * (1 + th) or (self.threshold_mode == "abs" and a > best + th)
end

-- (epoch: the epoch to count this one as, PyTorch's deprecated second argument.)
function Plateau:step(metric, epoch)
  if is_tensor(metric) then metric = metric:item() end
  if type(metric) ~= "number" then bad_arg("ReduceLROnPlateau:step", "the metric (a number)", metric) end
  if epoch ~= nil and type(epoch) ~= "number" then bad_arg("ReduceLROnPlateau:step", "a number for the epoch", epoch) end
  self.last_epoch = epoch or self.last_epoch + 1
  if self:_better(metric) then
    self.best, self.num_bad_epochs = metric, 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self.cooldown_counter > 0 then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    local old = self.optimizer.lr
    local new = math.max(old * self.factor, self.min_lr)
    if old - new > self.eps then self.optimizer.lr = new end
    self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
  end
  return self.optimizer.lr
end

function Plateau:get_last_lr() return self.optimizer.lr end

function Plateau:state_dict()
  return { best = self.best, num_bad_epochs = self.num_bad_epochs, cooldown_counter = self.cooldown_counter,
           last_epoch = self.last_epoch }
end

function Plateau:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.best) ~= "number" then
    raise("ReduceLROnPlateau:load_state_dict: expected the table of state_dict()")
  end
  self.best, self.num_bad_epochs = sd.best, sd.num_bad_epochs or 0
  self.cooldown_counter, self.last_epoch = sd.cooldown_counter or 0, sd.last_epoch or 0
end

return optim
