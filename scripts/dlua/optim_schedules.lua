-- dlua.optim's learning-rate schedules, as dl.optim.StepLR and the rest (docs/training.md);
-- dlua.optim loads it.
--
--   local sched = dl.optim.StepLR(opt, 10, 0.1)   -- sched:step() once per epoch
--
-- A schedule changes the lr of each of the optimizer's param groups (opt.lr, the one
-- group of an optimizer made without groups) at each sched:step() (once per epoch, as
-- PyTorch's), each from the lr its group had when the first schedule of the optimizer
-- was made (PyTorch's initial_lr). Alone, it sets lr from its closed form, a function of
-- the epoch. Schedules stepped back to back on one optimizer compose as PyTorch's: a
-- schedule that finds an lr changed since it last set it (by another schedule,
-- ReduceLROnPlateau or a hand) follows from then on its chainable form (`_chain(lr,
-- epoch, group)`, PyTorch's get_lr: the new lr from the current one), so that each
-- scales what the others set. The two forms agree but for rounding, which the closed
-- form does not gather over a long run. LambdaLR, CosineAnnealingWarmRestarts,
-- OneCycleLR, CyclicLR and WarmupCosineLR have no chainable form: they set lr from the
-- base lr, over what the others set (PyTorch's do the same).
--
-- sched:step() and get_last_lr() give the lr set: a number, or with param groups a list
-- of one per group. Options that PyTorch takes per group (OneCycleLR's max_lr,
-- CyclicLR's base_lr, ReduceLROnPlateau's min_lr ...) may be such a list too.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, typename = core.raise, core.bad_arg, core.typename
local is_tensor = T.is_tensor
local optim = T.dl.optim
local type, ipairs, tostring, setmetatable, getmetatable, rawget = type, ipairs, tostring, setmetatable, getmetatable, rawget
local cos, pi, floor, min, max = math.cos, math.pi, math.floor, math.min, math.max

-- The tables whose lr a schedule drives: the optimizer's param groups.
local function groups_of(opt)
  local gs = rawget(opt, "param_groups")
  if type(gs) == "table" and #gs > 0 then return gs end
  return { opt }
end

local function grouped(opt) return rawget(opt, "_grouped") == true end

-- An lr (or list of them) to hand back: a number, or a list with param groups.
local function lrs_out(opt, lrs)
  if not grouped(opt) then return lrs[1] end
  local out = {}
  for i, v in ipairs(lrs) do out[i] = v end
  return out
end

-- One value per group: v for all, or a list of one for each (PyTorch's lists); check(x,
-- what) checks one and returns it.
local function per_group(name, what, v, n, check)
  local out = {}
  if type(v) == "table" and getmetatable(v) == nil then
    if #v ~= n then
      raise(name .. ": expected " .. n .. " values for " .. what .. " (one per param group), got " .. #v)
    end
    for i = 1, n do out[i] = check(v[i], what .. "[" .. i .. "]") end
  else
    local x = check(v, what)
    for i = 1, n do out[i] = x end
  end
  return out
end

local Schedule = {}
Schedule.__index = Schedule

local function schedule(name, lr_at, chain)
  local cls = setmetatable({ __name = name }, { __index = Schedule })
  cls.__index = cls
  cls._lr_at, cls._chain = lr_at, chain
  return cls
end

-- A schedule knows the groups its optimizer had when it was made.
local function same_groups(self, groups, n)
  if #groups ~= n then
    raise(self.__name .. ": the optimizer has " .. #groups .. " param groups, this schedule was made for " .. n
          .. " (make schedules after add_param_group)")
  end
end

-- Sets each group's lr for epoch e; returns them.
function Schedule:_apply(e)
  local groups, last = groups_of(self.optimizer), self._lrs
  same_groups(self, groups, #self.base_lrs)
  if self._chain then
    for i, g in ipairs(groups) do
      local cur = g.lr
      if cur ~= last[i] then
        if type(cur) ~= "number" then raise(self.__name .. ": the optimizer's lr must be a number, got " .. typename(cur)) end
        self._chained = true
      end
    end
  end
  for i, g in ipairs(groups) do
    local lr
    if self._chained then lr = self:_chain(g.lr, e, i) else lr = self:_lr_at(e, i) end
    g.lr, last[i] = lr, lr
  end
  return lrs_out(self.optimizer, last)
end

-- A schedule just made takes its first step, to epoch 0, as PyTorch's (which sets lr
-- for some: LinearLR's start factor); one made on an lr that another schedule has
-- changed is chained from the start.
local function made(self)
  self.base_lr, self._lrs = self.base_lrs[1], {}
  for i, b in ipairs(self.base_lrs) do self._lrs[i] = b end
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
function Schedule:get_last_lr() return lrs_out(self.optimizer, self._lrs) end

-- With param groups, "base_lr.<i>" and "lr.<i>" for each group i.
function Schedule:state_dict()
  local sd = { last_epoch = self.last_epoch, epoch = self._epoch, chained = self._chained }
  if grouped(self.optimizer) then
    for i, b in ipairs(self.base_lrs) do sd["base_lr." .. i], sd["lr." .. i] = b, self._lrs[i] end
  else
    sd.base_lr, sd.lr = self.base_lrs[1], self._lrs[1]
  end
  return sd
end

-- The lrs are the optimizer's, as PyTorch's: its own state (restored before or after this
-- one) has them, with an lr set by hand or by ReduceLROnPlateau after the schedule's last
-- step, which the schedule then finds changed at its next step, as the first run did.
-- Only an lr that is still the one this schedule set (its optimizer not restored, or
-- restored after it) becomes the one the saved schedule set, so that a schedule restored
-- alone goes on from its epoch; not a chained schedule's, which the others' steps changed.
function Schedule:load_state_dict(sd)
  local groups = groups_of(self.optimizer)
  local many = grouped(self.optimizer)
  local bases, lrs = {}, {}
  local ok = type(sd) == "table" and type(sd.last_epoch) == "number" and (sd.epoch == nil or type(sd.epoch) == "number")
  if ok then
    for i = 1, #groups do
      bases[i], lrs[i] = sd[many and "base_lr." .. i or "base_lr"], sd[many and "lr." .. i or "lr"]
      ok = ok and type(bases[i]) == "number"
    end
  end
  if not ok then
    raise(self.__name .. ":load_state_dict: expected {last_epoch = n, "
          .. (many and "base_lr.1 = x, ... base_lr." .. #groups .. " = x}" or "base_lr = x}"))
  end
  self.last_epoch, self._epoch = sd.last_epoch, sd.epoch
  self.base_lrs, self.base_lr = bases, bases[1]
  self._chained = sd.chained == true or nil
  for i, g in ipairs(groups) do
    local lr = lrs[i]
    if type(lr) ~= "number" then lr = self._chained and g.lr or self:_lr_at(sd.epoch or sd.last_epoch, i) end
    if not self._chained and g.lr == self._lrs[i] then g.lr = lr end
    self._lrs[i] = lr
  end
end

local function check_opt(name, opt)
  if type(opt) ~= "table" or getmetatable(opt) == nil or type(opt.apply_gradients) ~= "function" then
    bad_arg(name, "an optimizer", opt)
  end
end

-- Checks opt; returns the lrs a schedule starts from: each group's lr when the
-- optimizer's first schedule was made (PyTorch's initial_lr), so that a second schedule
-- (SequentialLR's parts) starts from the same lr as the first, whatever the first set since.
local function schedule_opt(name, opt)
  check_opt(name, opt)
  local bases = {}
  for i, g in ipairs(groups_of(opt)) do
    if type(g.lr) ~= "number" then
      raise(name .. ": the " .. (grouped(opt) and ("lr of param group " .. i) or "optimizer's lr")
            .. " must be a number, got " .. typename(g.lr))
    end
    if g.initial_lr == nil then g.initial_lr = g.lr end
    bases[i] = g.initial_lr
  end
  return bases
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

-- schedule_number for each group: a number, or a list of one per group.
local function group_numbers(name, opt, what, v, default, ok, needs)
  return per_group(name, what, v, #groups_of(opt), function(x, w)
    return schedule_number(name, w, x, default, ok, needs)
  end)
end

local function schedule_bool(name, what, v, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then raise(name .. ": " .. what .. " must be a boolean, got " .. tostring(v)) end
  return v
end

-- lr = base gamma^floor(epoch / step_size).
local StepLR = schedule("StepLR", function(self, e, i)
  return self.base_lrs[i] * self.gamma ^ floor(e / self.step_size)
end, function(self, lr, e)
  if e == 0 or e % self.step_size ~= 0 then return lr end
  return lr * self.gamma
end)

function optim.StepLR(opt, step_size, gamma)
  local bases = schedule_opt("StepLR", opt)
  if type(step_size) ~= "number" or step_size < 1 or step_size ~= floor(step_size) then
    raise("StepLR: step_size must be an integer >= 1, got " .. tostring(step_size))
  end
  gamma = gamma == nil and 0.1 or gamma
  if type(gamma) ~= "number" then bad_arg("StepLR", "a number for gamma", gamma) end
  return made(setmetatable({ optimizer = opt, step_size = step_size, gamma = gamma, base_lrs = bases,
                             last_epoch = 0 }, StepLR))
end

-- lr = eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2; chained, PyTorch's
-- recurrence (the ratio of two such factors, and a step up past each trough).
local Cosine = schedule("CosineAnnealingLR", function(self, e, i)
  return self.eta_min + (self.base_lrs[i] - self.eta_min) * (1 + cos(pi * e / self.T_max)) / 2
end, function(self, lr, e, i)
  local T, eta = self.T_max, self.eta_min
  if e == 0 then return lr end
  if (e - 1 - T) % (2 * T) == 0 then return lr + (self.base_lrs[i] - eta) * (1 - cos(pi / T)) / 2 end
  return (1 + cos(pi * e / T)) / (1 + cos(pi * (e - 1) / T)) * (lr - eta) + eta
end)

function optim.CosineAnnealingLR(opt, T_max, eta_min)
  local bases = schedule_opt("CosineAnnealingLR", opt)
  if type(T_max) ~= "number" or T_max <= 0 then
    raise("CosineAnnealingLR: T_max must be a number > 0, got " .. tostring(T_max))
  end
  eta_min = eta_min == nil and 0 or eta_min
  if type(eta_min) ~= "number" then bad_arg("CosineAnnealingLR", "a number for eta_min", eta_min) end
  return made(setmetatable({ optimizer = opt, T_max = T_max, eta_min = eta_min, base_lrs = bases,
                             last_epoch = 0 }, Cosine))
end

-- lr = base gamma^epoch.
local Exponential = schedule("ExponentialLR", function(self, e, i)
  return self.base_lrs[i] * self.gamma ^ e
end, function(self, lr, e)
  if e == 0 then return lr end
  return lr * self.gamma
end)
function optim.ExponentialLR(opt, gamma)
  local bases = schedule_opt("ExponentialLR", opt)
  gamma = schedule_number("ExponentialLR", "gamma", gamma, nil, positive, "a number > 0")
  return made(setmetatable({ optimizer = opt, gamma = gamma, base_lrs = bases, last_epoch = 0 }, Exponential))
end

-- lr = base gamma^(the number of milestones reached), a milestone listed twice counting
-- twice (PyTorch's Counter).
local MultiStep = schedule("MultiStepLR", function(self, e, i)
  local n = 0
  for _, m in ipairs(self.milestones) do if e >= m then n = n + 1 end end
  return self.base_lrs[i] * self.gamma ^ n
end, function(self, lr, e)
  local n = 0
  for _, m in ipairs(self.milestones) do if e == m then n = n + 1 end end
  if n == 0 then return lr end
  return lr * self.gamma ^ n
end)
function optim.MultiStepLR(opt, milestones, gamma)
  local bases = schedule_opt("MultiStepLR", opt)
  if type(milestones) ~= "table" or #milestones == 0 then bad_arg("MultiStepLR", "a list of milestones", milestones) end
  for i, m in ipairs(milestones) do
    if type(m) ~= "number" or m ~= floor(m) or m < 1 or (i > 1 and m < milestones[i - 1]) then
      raise("MultiStepLR: milestones must be nondecreasing integers >= 1, got " .. tostring(m) .. " at " .. i)
    end
  end
  gamma = schedule_number("MultiStepLR", "gamma", gamma, 0.1, positive, "a number > 0")
  return made(setmetatable({ optimizer = opt, milestones = milestones, gamma = gamma, base_lrs = bases,
                             last_epoch = 0 }, MultiStep))
end

-- lr = base f(epoch), f a Lua function of the epoch (0 when made), or a list of one per
-- param group.
local Lambda = schedule("LambdaLR", function(self, e, i)
  local f = self.lr_lambdas[i](e)
  if type(f) ~= "number" then raise("LambdaLR: the function returned " .. typename(f) .. ", expected a number") end
  return self.base_lrs[i] * f
end)
function optim.LambdaLR(opt, lr_lambda)
  local bases = schedule_opt("LambdaLR", opt)
  local fs = per_group("LambdaLR", "lr_lambda", lr_lambda, #bases, function(f)
    if type(f) ~= "function" then bad_arg("LambdaLR", "a function of the epoch", f) end
    return f
  end)
  return made(setmetatable({ optimizer = opt, lr_lambda = lr_lambda, lr_lambdas = fs, base_lrs = bases,
                             last_epoch = 0 }, Lambda))
end

-- LinearLR(opt [, start_factor = 1/3, end_factor = 1, total_iters = 5]): the factor moves
-- linearly from start to end over total_iters epochs, then stays (a warm-up); made,
-- it sets lr to base start_factor, as PyTorch's.
local Linear = schedule("LinearLR", function(self, e, i)
  local t = min(e, self.total_iters) / self.total_iters
  return self.base_lrs[i] * (self.start_factor + (self.end_factor - self.start_factor) * t)
end, function(self, lr, e)
  local s, d = self.start_factor, self.end_factor - self.start_factor
  if e == 0 then return lr * s end
  if e > self.total_iters then return lr end
  return lr * (1 + d / (self.total_iters * s + (e - 1) * d))
end)
function optim.LinearLR(opt, start_factor, end_factor, total_iters)
  local name = "LinearLR"
  local bases = schedule_opt(name, opt)
  start_factor = schedule_number(name, "start_factor", start_factor, 1 / 3, function(v) return v > 0 and v <= 1 end,
                                 "in (0, 1]")
  end_factor = schedule_number(name, "end_factor", end_factor, 1, function(v) return v >= 0 and v <= 1 end, "in [0, 1]")
  total_iters = schedule_number(name, "total_iters", total_iters, 5, whole, "an integer >= 1")
  return made(setmetatable({ optimizer = opt, start_factor = start_factor, end_factor = end_factor,
                             total_iters = total_iters, base_lrs = bases, last_epoch = 0 }, Linear))
end

-- ConstantLR(opt [, factor = 1/3, total_iters = 5]): lr = base factor for total_iters
-- epochs, then base (PyTorch's closed form, to the rounding).
local Constant = schedule("ConstantLR", function(self, e, i)
  return self.base_lrs[i] * (self.factor + (e >= self.total_iters and 1 - self.factor or 0))
end, function(self, lr, e)
  if e == 0 then return lr * self.factor end
  if e ~= self.total_iters then return lr end
  return lr * (1 / self.factor)
end)
function optim.ConstantLR(opt, factor, total_iters)
  local name = "ConstantLR"
  local bases = schedule_opt(name, opt)
  factor = schedule_number(name, "factor", factor, 1 / 3, function(v) return v > 0 and v <= 1 end, "in (0, 1]")
  total_iters = schedule_number(name, "total_iters", total_iters, 5, whole, "an integer >= 1")
  return made(setmetatable({ optimizer = opt, factor = factor, total_iters = total_iters, base_lrs = bases,
                             last_epoch = 0 }, Constant))
end

-- PolynomialLR(opt [, total_iters = 5, power = 1]): lr = base (1 - min(epoch,
-- total_iters) / total_iters)^power, down to 0 at total_iters; chained, PyTorch's ratio
-- of two such factors.
local Polynomial = schedule("PolynomialLR", function(self, e, i)
  return self.base_lrs[i] * (1 - min(self.total_iters, e) / self.total_iters) ^ self.power
end, function(self, lr, e)
  local n = self.total_iters
  if e == 0 or e > n then return lr end
  return lr * ((1 - e / n) / (1 - (e - 1) / n)) ^ self.power
end)
function optim.PolynomialLR(opt, total_iters, power)
  local name = "PolynomialLR"
  local bases = schedule_opt(name, opt)
  total_iters = schedule_number(name, "total_iters", total_iters, 5, whole, "an integer >= 1")
  power = schedule_number(name, "power", power, 1, nonneg, "a number >= 0")
  return made(setmetatable({ optimizer = opt, total_iters = total_iters, power = power, base_lrs = bases,
                             last_epoch = 0 }, Polynomial))
end

-- CosineAnnealingWarmRestarts(opt, T_0 [, T_mult = 1, eta_min = 0]): cosine annealing that
-- restarts at base lr every T_0 epochs, each period T_mult times the last (SGDR).
-- sched:step(epoch) moves it to an epoch, fractional within a period (PyTorch's
-- step(epoch + i / iters), once per batch); sched:step() moves it on by one.
-- The periods are counted in integers: a logarithm of the epoch (PyTorch's step(epoch))
-- can round an epoch at a restart into the period before (121 = 1 + 3 + 9 + 27 + 81).
local Restarts = schedule("CosineAnnealingWarmRestarts", function(self, e, i)
  local T0, mult = self.T_0, self.T_mult
  local t_cur, t_i = e % T0, T0
  if mult > 1 then
    local start = 0
    while e >= start + t_i do start, t_i = start + t_i, t_i * mult end
    t_cur = e - start
  end
  return self.eta_min + (self.base_lrs[i] - self.eta_min) * (1 + cos(pi * t_cur / t_i)) / 2
end)
function optim.CosineAnnealingWarmRestarts(opt, T_0, T_mult, eta_min)
  local name = "CosineAnnealingWarmRestarts"
  local bases = schedule_opt(name, opt)
  T_0 = schedule_number(name, "T_0", T_0, nil, whole, "an integer >= 1")
  T_mult = schedule_number(name, "T_mult", T_mult, 1, whole, "an integer >= 1")
  eta_min = schedule_number(name, "eta_min", eta_min, 0, any_number, "a number")
  return made(setmetatable({ optimizer = opt, T_0 = T_0, T_mult = T_mult, eta_min = eta_min, base_lrs = bases,
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
local Sequential = schedule("SequentialLR", function(self, e, i)
  local sc, se = sequential_part(self, e)
  return sc:_lr_at(se, i)
end, function(self, lr, e, i)
  local sc, se, at_milestone = sequential_part(self, e)
  if at_milestone or sc._chain == nil then return sc:_lr_at(se, i) end
  return sc:_chain(lr, se, i)
end)
function optim.SequentialLR(opt, schedulers, milestones)
  local name = "SequentialLR"
  local bases = schedule_opt(name, opt)
  if type(schedulers) ~= "table" or #schedulers == 0 then bad_arg(name, "a list of schedules", schedulers) end
  if type(milestones) ~= "table" or #milestones ~= #schedulers - 1 then
    raise(name .. ": expected " .. (#schedulers - 1) .. " milestones for " .. #schedulers .. " schedules")
  end
  for i, sc in ipairs(schedulers) do
    if type(sc) ~= "table" or type(sc._lr_at) ~= "function" then bad_arg(name, "a schedule at " .. i, sc) end
    if sc.optimizer ~= opt then raise(name .. ": schedule " .. i .. " drives another optimizer") end
  end
  -- what the parts set when made undone, as PyTorch's
  for i, g in ipairs(groups_of(opt)) do g.lr = bases[i] end
  return made(setmetatable({ optimizer = opt, schedulers = schedulers, milestones = milestones, base_lrs = bases,
                             last_epoch = 0 }, Sequential))
end

-- The momentum of a group: SGD's (and RMSprop's) momentum, or Adam's first beta. An
-- optimizer without groups (its own group) then keeps that option in its state dict
-- (_moved), as a group does, since the restored run needs it before the next step.
local function set_momentum(opt, group, m)
  local key = type(group.betas) == "table" and "betas" or "momentum"
  if key == "betas" then group.betas = { m, group.betas[2] } else group.momentum = m end
  if rawequal(group, opt) then
    local moved = rawget(opt, "_moved") or {}
    moved[key] = true
    rawset(opt, "_moved", moved)
  end
end

local function set_momenta(self)
  for i, g in ipairs(groups_of(self.optimizer)) do set_momentum(self.optimizer, g, self._momenta[i]) end
end

-- OneCycleLR(opt, max_lr, total_steps [, opts]): Smith's one-cycle policy, as PyTorch's,
-- stepped once per batch: lr rises from max_lr / div_factor to max_lr over pct_start
-- of the steps, then falls to max_lr / div_factor / final_div_factor (three_phase: back
-- to the start first, then down), annealed by cosine or linearly; the momentum (SGD's,
-- or Adam's first beta) moves the other way between max_momentum and base_momentum.
local ONE_CYCLE = { pct_start = true, anneal_strategy = true, div_factor = true, final_div_factor = true,
                    three_phase = true, cycle_momentum = true, base_momentum = true, max_momentum = true }
local OneCycle = schedule("OneCycleLR", function(self, e, i)
  if e > self.total_steps then
    raise("OneCycleLR: stepped " .. e .. " times, more than total_steps (" .. self.total_steps .. ")")
  end
  local start, phases = 0, self.phases[i]
  for k, ph in ipairs(phases) do
    if e <= ph.stop or k == #phases then
      if ph.stop == start then   -- PyTorch divides by zero here
        raise("OneCycleLR: phase " .. k .. " of the cycle has no steps (pct_start = " .. self.pct_start
              .. " of total_steps = " .. self.total_steps .. "): change pct_start or total_steps")
      end
      local pct = (e - start) / (ph.stop - start)
      self._momenta[i] = self.anneal(ph.m0, ph.m1, pct)
      return self.anneal(ph.lr0, ph.lr1, pct)
    end
    start = ph.stop
  end
end)

function OneCycle:step(epoch)
  local lr = Schedule.step(self, epoch)
  if self.cycle_momentum then set_momenta(self) end
  return lr
end

function optim.OneCycleLR(opt, max_lr, total_steps, opts)
  local name = "OneCycleLR"
  schedule_opt(name, opt)
  opts = core.options(name, opts, ONE_CYCLE)
  local max_lrs = group_numbers(name, opt, "max_lr", max_lr, nil, positive, "a number > 0")
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
  local div = schedule_number(name, "div_factor", opts.div_factor, 25, positive, "a number > 0")
  local final_div = schedule_number(name, "final_div_factor", opts.final_div_factor, 1e4, positive, "a number > 0")
  local cycle = schedule_bool(name, "cycle_momentum", opts.cycle_momentum, true)
  local m_los = group_numbers(name, opt, "base_momentum", opts.base_momentum, 0.85, nonneg, "a number >= 0")
  local m_his = group_numbers(name, opt, "max_momentum", opts.max_momentum, 0.95, nonneg, "a number >= 0")
  if cycle and opt.momentum == nil and type(opt.betas) ~= "table" then
    raise(name .. ": cycle_momentum needs an optimizer with momentum or betas (pass cycle_momentum = false)")
  end
  local three = schedule_bool(name, "three_phase", opts.three_phase, false)
  local phases, bases = {}, {}
  for i, top in ipairs(max_lrs) do
    local initial = top / div
    local min_lr, m_lo, m_hi = initial / final_div, m_los[i], m_his[i]
    if three then
      phases[i] = { { stop = pct * total_steps - 1, lr0 = initial, lr1 = top, m0 = m_hi, m1 = m_lo },
                    { stop = 2 * pct * total_steps - 2, lr0 = top, lr1 = initial, m0 = m_lo, m1 = m_hi },
                    { stop = total_steps - 1, lr0 = initial, lr1 = min_lr, m0 = m_hi, m1 = m_hi } }
    else
      phases[i] = { { stop = pct * total_steps - 1, lr0 = initial, lr1 = top, m0 = m_hi, m1 = m_lo },
                    { stop = total_steps - 1, lr0 = top, lr1 = min_lr, m0 = m_lo, m1 = m_hi } }
    end
    bases[i] = initial
  end
  local self = made(setmetatable({ optimizer = opt, total_steps = total_steps, pct_start = pct, phases = phases,
                                   anneal = anneal, cycle_momentum = cycle, base_lrs = bases, _momenta = {},
                                   last_epoch = 0 }, OneCycle))
  if cycle then set_momenta(self) end
  return self
end

-- CyclicLR(opt, base_lr, max_lr [, opts]): Smith's cyclical lr, as PyTorch's, stepped
-- once per batch: lr climbs from base_lr to max_lr over step_size_up steps (2000) and
-- back over step_size_down (as many), each cycle's height scaled by mode: "triangular"
-- (1), "triangular2" (halved each cycle), "exp_range" (gamma^step), or by scale_fn(x),
-- a Lua function of the cycle (scale_mode "cycle") or the step ("iterations"). With
-- cycle_momentum (the default: SGD and RMSprop have a momentum; pass false for the
-- others), the momentum moves the other way between max_momentum (0.9) and
-- base_momentum (0.8). Made, it sets lr to base_lr (and momentum to max_momentum).
local CYCLIC = { step_size_up = true, step_size_down = true, mode = true, gamma = true, scale_fn = true,
                 scale_mode = true, cycle_momentum = true, base_momentum = true, max_momentum = true }
local Cyclic = schedule("CyclicLR", function(self, e, i)
  local cycle = floor(1 + e / self.total_size)
  local x = 1 + e / self.total_size - cycle
  local f
  if x <= self.step_ratio then f = x / self.step_ratio else f = (x - 1) / (self.step_ratio - 1) end
  local s = self.scale_fn(self.scale_mode == "cycle" and cycle or e)
  if type(s) ~= "number" then raise("CyclicLR: scale_fn returned " .. typename(s) .. ", expected a number") end
  if self.cycle_momentum then
    local lo, hi = self.base_momentums[i], self.max_momentums[i]
    self._momenta[i] = hi - (hi - lo) * f * s
  end
  local lo = self.base_lrs[i]
  return lo + (self.max_lrs[i] - lo) * f * s
end)
Cyclic.step = OneCycle.step

function optim.CyclicLR(opt, base_lr, max_lr, opts)
  local name = "CyclicLR"
  check_opt(name, opt)
  opts = core.options(name, opts, CYCLIC)
  local bases = group_numbers(name, opt, "base_lr", base_lr, nil, nonneg, "a number >= 0")
  local tops = group_numbers(name, opt, "max_lr", max_lr, nil, nonneg, "a number >= 0")
  local up = schedule_number(name, "step_size_up", opts.step_size_up, 2000, positive, "a number > 0")
  local down = schedule_number(name, "step_size_down", opts.step_size_down, up, nonneg, "a number >= 0")
  local gamma = schedule_number(name, "gamma", opts.gamma, 1, positive, "a number > 0")
  local mode, fn, scale_mode = opts.mode or "triangular", opts.scale_fn, opts.scale_mode or "cycle"
  if fn ~= nil then
    if type(fn) ~= "function" then bad_arg(name, "a function for scale_fn", fn) end
    if scale_mode ~= "cycle" and scale_mode ~= "iterations" then
      raise(name .. ": scale_mode must be cycle or iterations, got " .. tostring(scale_mode))
    end
  elseif mode == "triangular" then
    fn, scale_mode = function() return 1 end, "cycle"
  elseif mode == "triangular2" then
    fn, scale_mode = function(x) return 1 / (2 ^ (x - 1)) end, "cycle"
  elseif mode == "exp_range" then
    fn, scale_mode = function(x) return gamma ^ x end, "iterations"
  else
    raise(name .. ": mode must be triangular, triangular2 or exp_range (or give scale_fn), got " .. tostring(mode))
  end
  local cycle = schedule_bool(name, "cycle_momentum", opts.cycle_momentum, true)
  local m_los, m_his
  if cycle then
    if opt.momentum == nil then
      raise(name .. ": cycle_momentum needs an optimizer with a momentum option (SGD, RMSprop): "
            .. "pass cycle_momentum = false")
    end
    m_los = group_numbers(name, opt, "base_momentum", opts.base_momentum, 0.8, nonneg, "a number >= 0")
    m_his = group_numbers(name, opt, "max_momentum", opts.max_momentum, 0.9, nonneg, "a number >= 0")
  end
  for i, g in ipairs(groups_of(opt)) do
    g.lr = bases[i]
    if cycle then g.momentum = m_los[i] end
  end
  schedule_opt(name, opt)
  local self = made(setmetatable({ optimizer = opt, max_lrs = tops, total_size = up + down,
                                   step_ratio = up / (up + down), mode = mode, gamma = gamma, scale_fn = fn,
                                   scale_mode = scale_mode, cycle_momentum = cycle, base_momentums = m_los,
                                   max_momentums = m_his, base_lrs = bases, _momenta = {}, last_epoch = 0 },
                                 Cyclic))
  if cycle then set_momenta(self) end
  return self
end

-- WarmupCosineLR(opt, warmup_steps, total_steps [, eta_min = 0]): lr rises linearly from
-- 0 to the optimizer's lr over warmup_steps, then follows a cosine down to eta_min at
-- total_steps (and stays there): the transformer schedule, stepped once per batch.
local WarmupCosine = schedule("WarmupCosineLR", function(self, e, i)
  local base = self.base_lrs[i]
  if e < self.warmup then return base * e / self.warmup end
  local t = (min(e, self.total) - self.warmup) / max(1, self.total - self.warmup)
  return self.eta_min + (base - self.eta_min) * 0.5 * (1 + cos(pi * t))
end)

function optim.WarmupCosineLR(opt, warmup_steps, total_steps, eta_min)
  local name = "WarmupCosineLR"
  local bases = schedule_opt(name, opt)
  if type(warmup_steps) ~= "number" or warmup_steps < 0 or warmup_steps ~= floor(warmup_steps) then
    raise(name .. ": warmup_steps must be an integer >= 0, got " .. tostring(warmup_steps))
  end
  if type(total_steps) ~= "number" or total_steps < warmup_steps then
    raise(name .. ": total_steps must be a number >= warmup_steps, got " .. tostring(total_steps))
  end
  eta_min = eta_min == nil and 0 or eta_min
  if type(eta_min) ~= "number" then bad_arg(name, "a number for eta_min", eta_min) end
  return made(setmetatable({ optimizer = opt, warmup = warmup_steps, total = total_steps, eta_min = eta_min,
                             base_lrs = bases, last_epoch = 0 }, WarmupCosine))
end

-- The optimizer's lrs now: a number, or a list with param groups.
local function current_lrs(opt)
  local lrs = {}
  for i, g in ipairs(groups_of(opt)) do lrs[i] = g.lr end
  return lrs_out(opt, lrs)
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
  return current_lrs(self.optimizer)
end

function Chained:get_last_lr() return current_lrs(self.optimizer) end

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
-- relative or absolute) for more than `patience` evaluations, each group's lr = max(lr
-- factor, min_lr), then `cooldown` evaluations pass before counting again. PyTorch's rule.
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
  local min_lrs = group_numbers(name, opt, "min_lr", opts.min_lr, 0, nonneg, "a number >= 0")
  return setmetatable({ optimizer = opt, mode = mode, threshold_mode = tmode, factor = factor,
                        patience = schedule_number(name, "patience", opts.patience, 10, whole0, "an integer >= 0"),
                        threshold = schedule_number(name, "threshold", opts.threshold, 1e-4, nonneg, "a number >= 0"),
                        cooldown = schedule_number(name, "cooldown", opts.cooldown, 0, whole0, "an integer >= 0"),
                        min_lr = min_lrs[1], min_lrs = min_lrs,
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
    same_groups(self, groups_of(self.optimizer), #self.min_lrs)
    for i, g in ipairs(groups_of(self.optimizer)) do
      local old = g.lr
      local new = max(old * self.factor, self.min_lrs[i])
      if old - new > self.eps then g.lr = new end
    end
    self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
  end
  return current_lrs(self.optimizer)
end

function Plateau:get_last_lr() return current_lrs(self.optimizer) end

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
