-- dlua.optim: optimizers and learning-rate schedules (optim_schedules.lua), as dl.optim
-- (docs/training.md).
--
--   local opt = dl.optim.Adam{lr = 1e-3}
--   local loss, grads = dl.implicit_value_and_grad(loss_fn)()
--   opt:apply_gradients(grads)                    -- the {grad, variable} pairs
--   opt:step(net:parameters(), gs)                -- or parallel tables
--   opt:minimize(function() return loss_fn() end) -- or both at once; returns the loss
--   local sched = dl.optim.StepLR(opt, 10, 0.1)   -- sched:step() once per epoch
--   dl.optim.SGD{params = {{params = net.body, lr = 1e-4}, {params = net.head}}, lr = 1e-2}
--
-- The update rules are PyTorch's (torch/optim/*.py of 1.13, the single-tensor code
-- paths), operation for operation, so that runs match to float rounding
-- (tests/lua/test_optim.lua against tests/ref/gen_training_refs.py). Updates are applied
-- in place, outside any gradient recording, so Variables keep their identity.
--
-- State is kept per variable and numbered by position: the order of `params` when given
-- to the constructor, otherwise the order in which the variables are first updated
-- (for implicit gradients, the order of first use, which the same program repeats);
-- with param groups, the order of the groups' variables when the state is saved.
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

local function check_lr(name, lr)
  if type(lr) ~= "number" and type(lr) ~= "function" then
    raise(name .. ": lr must be a number or a function of the step, got " .. typename(lr))
  end
  if type(lr) == "number" and lr < 0 then raise(name .. ": lr must be >= 0, got " .. lr) end
end

-- A pair option (betas, etas, step_sizes) as a table of its own: groups and optimizers
-- never share one, so that changing a group's betas[1] changes that group only.
local function own(v)
  if type(v) ~= "table" or getmetatable(v) ~= nil then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = x end
  return out
end

-- Sets the options of `into` (an optimizer, or one of its param groups) from opts, checked;
-- an option that opts leaves out comes from `base` (a group's optimizer) or the defaults.
local function set_options(name, cls, opts, into, base)
  local defaults = cls._defaults
  local lr = opts.lr
  if lr == nil then lr = base and base.lr or defaults.lr end
  check_lr(name, lr)
  into.lr = lr
  for k, d in pairs(defaults) do
    if k ~= "lr" then
      local v = opts[k]
      if v == nil and base then into[k] = own(base[k])
      elseif type(d) == "number" then into[k] = number_opt(name, opts, k, d, 0)
      elseif type(d) == "boolean" then
        if v ~= nil and type(v) ~= "boolean" then raise(name .. ": " .. k .. " must be a boolean, got " .. typename(v)) end
        if v == nil then v = d end
        into[k] = v
      else
        into[k] = own(v == nil and d or v)
      end
    end
  end
  cls._check(into, name)
end

local function unknown_options(name, defaults, opts)
  for k in pairs(opts) do
    if defaults[k] == nil and k ~= "params" and k ~= "lr" then
      raise(name .. ": unknown option '" .. tostring(k) .. "'")
    end
  end
end

-- The Variables of a params option: a module's parameters, a Variable, or a list of
-- Variables or of {name, Variable} pairs (named_parameters()).
local function variables_of(name, ps)
  if Module.is_module(ps) then ps = ps:parameters() end
  if is_tensor(ps) then return { ps } end
  if type(ps) ~= "table" then bad_arg(name, "a list of Variables or a module for params", ps) end
  local out = {}
  for i, p in ipairs(ps) do
    if type(p) == "table" and is_tensor(p[2]) then p = p[2] end   -- named_parameters()
    if not is_tensor(p) then raise(name .. ": params[" .. i .. "] is a " .. typename(p) .. ", expected a Variable") end
    out[i] = p
  end
  return out
end

-- A param group as PyTorch's: a plain table of params and options (a {name, Variable}
-- pair of named_parameters() is not one).
local function is_group(e)
  return type(e) == "table" and getmetatable(e) == nil and not is_tensor(e[2])
end

local function var_name(v)
  return v.name and (" (" .. v.name .. ")") or ""
end

-- A param group made from spec: its params as a list, the options it leaves out from the
-- optimizer's, and any other key kept as it is (a name, as PyTorch keeps them).
local function new_group(self, where, spec)
  if spec.params == nil then raise(where .. " has no params") end
  local group = {}
  for k, v in pairs(spec) do
    if k ~= "params" and k ~= "lr" and self._defaults[k] == nil then group[k] = v end
  end
  set_options(where, getmetatable(self), spec, group, self)
  group.params = variables_of(where, spec.params)
  return group
end

-- opt.param_groups is what a step reads: the variable -> group map (and each variable's
-- position, for its state) is made again when a group's params or the list of groups
-- changed since the last step. Finding that out reads each params list once, which costs
-- little beside the updates themselves; a group added to the list by hand gets the
-- options it leaves out, as add_param_group's.
local function groups_changed(self)
  local groups, seen = self.param_groups, self._seen
  if type(groups) ~= "table" or #groups ~= #seen then return true end
  for i = 1, #seen do
    local g, s = groups[i], seen[i]
    if not rawequal(g, s.group) then return true end
    local ps = g.params
    if not rawequal(ps, s.params) or #ps ~= s.n then return true end
    for j = 1, s.n do
      if not rawequal(ps[j], s[j]) then return true end
    end
  end
  return false
end

local function sync_groups(self)
  if not groups_changed(self) then return end
  local name = self.__name
  local groups = self.param_groups
  if type(groups) ~= "table" or getmetatable(groups) ~= nil then
    raise(name .. ": param_groups must be a list of param groups, got " .. typename(groups))
  end
  local owner, index, seen, known = {}, {}, {}, self._known
  for i, g in ipairs(groups) do
    local where = name .. ": param group " .. i
    if not is_group(g) then
      raise(name .. ": param_groups[" .. i .. "] is a " .. typename(g) .. ", expected a param group (a table)")
    end
    if not known[g] then
      local made = new_group(self, where, g)
      local ps, same = g.params, type(g.params) == "table" and getmetatable(g.params) == nil
      for j, v in ipairs(made.params) do same = same and rawequal(ps[j], v) end
      if same then made.params = nil end   -- (a list of Variables: the group's own list stays)
      for k, v in pairs(made) do g[k] = v end
      known[g] = true
    end
    local ps = g.params
    if type(ps) ~= "table" or getmetatable(ps) ~= nil or is_tensor(ps) then
      raise(where .. ": params must be a list of Variables, got " .. typename(ps))
    end
    local s = { group = g, params = ps, n = #ps }
    for j, v in ipairs(ps) do
      if not is_tensor(v) then
        raise(where .. ": params[" .. j .. "] is a " .. typename(v) .. ", expected a Variable")
      end
      local other = index[v]
      if other and other ~= i then
        raise(name .. ": a variable" .. var_name(v) .. " is in param groups " .. other .. " and " .. i)
      end
      index[v], owner[v], s[j] = i, g, v
    end
    seen[i] = s
  end
  for _, s in ipairs(seen) do
    for j = 1, s.n do self:_position(s[j]) end
  end
  self._group, self._index, self._seen = owner, index, seen
end

-- The variables of the param groups, in order: what "state.<i>" of a state dict numbers.
local function group_vars(self)
  local out = {}
  for _, s in ipairs(self._seen) do
    for j = 1, s.n do out[#out + 1] = s[j] end
  end
  return out
end

-- params = {{params = ..., <options>}, ...}: each group's options are the optimizer's
-- but for those it gives; the variables are numbered in the order of the groups.
local function make_groups(self, name, list)
  local groups, known = {}, {}
  for i, spec in ipairs(list) do
    if not is_group(spec) then
      raise(name .. ": params mixes param groups with other values (params[" .. i .. "] is a " .. typename(spec) .. ")")
    end
    groups[i] = new_group(self, name .. ": param group " .. i, spec)
    known[groups[i]] = true
  end
  self.param_groups, self._known, self._seen, self._grouped = groups, known, {}, true
  sync_groups(self)
end

-- An optimizer class: `defaults` maps each option to its default (nil: the option is
-- required), `check(self)` validates the options, `update(group, p, g, state, lr)` is
-- the rule for one variable, with the options of its group (the optimizer itself when
-- it has no param groups).
--
-- opt.param_groups is PyTorch's: with params given as groups, a table of each group's
-- options and params, which a step reads afresh (opt.param_groups[2].lr = 1e-4 between
-- steps, a variable added to a group's params or taken out of it); a variable outside
-- every group is an error, where PyTorch's step would pass it by. Without groups, the
-- one group is the optimizer itself (opt.lr is opt.param_groups[1].lr), which updates
-- every variable it is given.
-- maximize (where PyTorch 1.13 has it) negates each gradient first, as PyTorch's.
local function class(name, defaults, check, update)
  local cls = setmetatable({ __name = name, _update = update, _defaults = defaults, _check = check },
                           { __index = Optimizer })
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
    unknown_options(name, defaults, opts)
    set_options(name, cls, opts, self)
    local ps = opts.params
    if type(ps) == "table" and not Module.is_module(ps) and #ps > 0 and is_group(ps[1]) then
      make_groups(self, name, ps)
    else
      if ps ~= nil then
        for _, p in ipairs(variables_of(name, ps)) do self:_position(p) end
      end
      self.param_groups, self.params = { self }, self._vars
    end
    return self
  end
  return cls
end

-- opt:add_param_group{params = ..., <options>}: PyTorch's: a group more, its options
-- those it gives, the others the optimizer's. A variable already in a group is an error.
-- An optimizer made without groups becomes one with them: group 1 holds its options
-- and the variables it has (params, or those it has updated), and from then on a
-- gradient for a variable in no group is an error, as for any optimizer with groups.
function Optimizer:add_param_group(spec)
  local name = self.__name .. ":add_param_group"
  if not is_group(spec) then bad_arg(name, "a param group {params = ..., <options>}", spec) end
  if self._grouped then sync_groups(self) end
  local group = new_group(self, name .. ": the group", spec)
  local index = self._grouped and self._index or {}
  if not self._grouped then
    for _, v in ipairs(self._vars) do index[v] = 1 end
  end
  for _, v in ipairs(group.params) do
    if index[v] then raise(name .. ": a variable" .. var_name(v) .. " is already in param group " .. index[v]) end
  end
  if not self._grouped then
    local first = { params = {}, initial_lr = rawget(self, "initial_lr") }
    for k in pairs(self._defaults) do first[k] = own(self[k]) end
    first.lr = self.lr
    for i, v in ipairs(self._vars) do first.params[i] = v end
    self.params = nil
    self.param_groups, self._known, self._seen, self._grouped = { first }, { [first] = true }, {}, true
  end
  local groups = self.param_groups
  groups[#groups + 1] = group
  self._known[group] = true
  sync_groups(self)
  return group
end

-- A restored state tensor as the variable's: its device, dtype and shape.
local function shaped(st, var)
  for k, v in entries(st) do
    if is_tensor(v) then
      if v.device ~= var.device or v.dtype ~= var.dtype then v = v:to(var) end
      st[k] = v:view_as(var)
    end
  end
  return st
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
    self._state[pos] = shaped(pending, v)
    self._pending[pos] = nil
  else
    self._state[pos] = {}
  end
  vars[pos] = v
  self._pos[v] = pos
  return pos
end

-- ---- applying gradients ---------------------------------------------------------------------------

local function lr_of(self, group)
  local lr = group.lr
  if type(lr) == "function" then
    lr = lr(self.iterations)
    if is_tensor(lr) then lr = lr:item() end
    if type(lr) ~= "number" then raise(self.__name .. ": the lr function returned a " .. typename(lr)) end
  elseif type(lr) ~= "number" then
    raise(self.__name .. ": lr must be a number or a function of the step, got " .. typename(lr))
  end
  return lr
end

-- The lr of this step: a number, or with param groups a list (one per group).
function Optimizer:current_lr()
  if not self._grouped then return lr_of(self, self) end
  local out = {}
  for i, g in ipairs(self.param_groups) do out[i] = lr_of(self, g) end
  return out
end

-- This step's lr: a number, or with param groups a table group -> lr.
local function step_lrs(self)
  if not self._grouped then return lr_of(self, self) end
  sync_groups(self)
  local out = {}
  for _, g in ipairs(self.param_groups) do out[g] = lr_of(self, g) end
  return out
end

local function apply_one(self, g, v, lr)
  if not is_tensor(v) then raise(self.__name .. ": expected a Variable, got " .. typename(v)) end
  if not is_tensor(g) then raise(self.__name .. ": expected a gradient tensor, got " .. typename(g)) end
  if C.dl_numel(g) ~= C.dl_numel(v) then
    raise(self.__name .. ": gradient of shape " .. shape_str(g) .. " for a variable of shape " .. shape_str(v)
          .. var_name(v))
  end
  local group = self
  if self._grouped then
    group = self._group[v]
    if group == nil then
      raise(self.__name .. ": a variable" .. var_name(v) .. " of shape " .. shape_str(v) .. " is in none of the "
            .. "param groups: add it to one, or leave its gradient out")
    end
    lr = lr[group]
  end
  local pos = self._pos[v] or self:_position(v)
  if group.maximize then g = -g end
  self._update(group, v, g, self._state[pos], lr)
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
  dl.no_grad(apply_pairs, self, gv, step_lrs(self))
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
  dl.no_grad(apply_parallel, self, params, grads, step_lrs(self))
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
--
-- With param groups, "param_groups.<i>.<option>" holds each group's options (a pair such
-- as betas as "<option>.1" and "<option>.2") and its other keys that are numbers,
-- booleans or strings (a name), and "state.<i>" numbers the variables of the groups in
-- their order now, as PyTorch's: a state restores into groups made alike, whatever was
-- added to them or taken out before. A schedule's initial_lr stays out: the schedule's
-- own state has its base lrs, and a key that only some runs have would stop dl.Checkpoint
-- (which wants every key of a state dict in the file) restoring the others' files.
--
-- Without groups, "lr", and "state.<i>" numbered in the order the variables came. The
-- other options are not saved (states saved before they could be must still restore),
-- but for those a schedule moves: CyclicLR's and OneCycleLR's momentum ("momentum", or
-- "betas.1" and "betas.2"), which the optimizer's state has, as with groups, so that a
-- restored run goes on as the first.
local function put_option(sd, at, k, v)
  if type(v) == "table" then
    for j = 1, #v do sd[at .. k .. "." .. j] = v[j] end
  else
    sd[at .. k] = v
  end
end

local function saved_key(k, v, defaults)
  if type(k) ~= "string" or k == "lr" or k == "params" or k == "initial_lr" then return false end
  if defaults[k] ~= nil then return true end
  local t = type(v)
  return (t == "number" or t == "boolean" or t == "string") and smatch(k, "^[%a_][%w_]*$") ~= nil
end

function Optimizer:state_dict()
  local sd = { class = self.__name, iterations = self.iterations }
  if self._grouped then
    sync_groups(self)
    for i, group in ipairs(self.param_groups) do
      local at = "param_groups." .. i .. "."
      if type(group.lr) == "number" then sd[at .. "lr"] = group.lr end
      for k, v in entries(group) do
        if saved_key(k, v, self._defaults) then put_option(sd, at, k, v) end
      end
    end
    for i, v in ipairs(group_vars(self)) do
      for k, x in entries(self._state[self._pos[v]]) do
        if k:sub(1, 1) ~= "_" then sd["state." .. i .. "." .. k] = x end
      end
    end
    return sd
  end
  if type(self.lr) == "number" then sd.lr = self.lr end
  for k in entries(rawget(self, "_moved") or {}) do put_option(sd, "", k, self[k]) end
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

-- The group a key of a state dict sets, and what: "param_groups.<i>.<key>[.<j>]", or
-- (a state saved without groups) "lr" or "<option>[.<j>]" for group 1. Returns i, key,
-- j (nil without), and whether the key named its group.
local function group_key(self, k)
  local i, key, j = smatch(k, "^param_groups%.(%d+)%.([%a_][%w_]*)%.?(%d*)$")
  if i then return tonumber(i), key, tonumber(j), true end
  key, j = smatch(k, "^([%a_][%w_]*)%.?(%d*)$")
  if key and (key == "lr" or (self._defaults or {})[key] ~= nil) then return 1, key, tonumber(j), false end
end

-- The groups' options of a state dict, checked: group index -> the group's new options
-- (a copy of the group's table, changed).
local function restored_groups(self, name, changes)
  local out = {}
  for i, ch in pairs(changes) do
    local group = self.param_groups[i]
    local new = {}
    for k, v in entries(group) do new[k] = v end
    for k, v in entries(ch) do
      if type(v) == "table" then
        local pair = {}
        for j, x in ipairs(group[k]) do pair[j] = v[j] == nil and x or v[j] end
        new[k] = pair
      elseif k ~= "lr" or type(group.lr) == "number" then   -- (an lr function stays)
        new[k] = v
      end
    end
    local where = self._grouped and (name .. ": param group " .. i) or name
    if type(new.lr) == "number" then check_lr(where, new.lr) end
    for k, d in entries(self._defaults or {}) do
      if k ~= "lr" and type(d) == "number" then number_opt(where, new, k, 0, 0) end
    end
    if self._check then self._check(new, where) end
    out[i] = new
  end
  return out
end


-- Checks every entry, then replaces the whole state (all or nothing). A state of another
-- number of param groups is refused, as PyTorch's, before anything changes.
function Optimizer:load_state_dict(sd)
  local name = self.__name .. ":load_state_dict"
  if type(sd) ~= "table" then bad_arg(name, "a state dict (a table)", sd) end
  local defaults = self._defaults or {}
  local states, changes = {}, {}
  local iterations = self.iterations
  local class = sd.class
  if class ~= nil and class ~= self.__name then
    if type(class) ~= "string" then raise(name .. ": \"class\" must be a string, got " .. typename(class)) end
    local function an(s)   -- the article read aloud: an Adam, an SGD, a Lion
      local vowel = s:match("^[AEIOUaeiou]") or s:match("^[FHLMNRSX]%u")
      return (vowel and "an " or "a ") .. s
    end
    raise(name .. ": the state is " .. an(class) .. "'s, this optimizer is " .. an(self.__name))
  end
  if self._grouped then sync_groups(self) end
  local groups = self.param_groups
  local vars = self._grouped and group_vars(self) or self._vars
  -- the state's number of groups: the largest <i> of its "param_groups.<i>." keys, or 1
  -- for a state saved without groups (none when it has no options at all)
  local count, plain, named
  for k in pairs(sd) do
    local i, _, _, in_groups = group_key(self, tostring(k))
    if i and in_groups then
      if i < 1 then raise(name .. ": unexpected key \"" .. k .. "\"") end
      count, named = math.max(count or 0, i), named or k
    elseif i then
      plain = plain or k
    end
  end
  if plain and named then
    raise(name .. ": the state has both \"" .. plain .. "\" (no param groups) and \"" .. named .. "\"")
  end
  count = count or (plain and 1)
  if count and count ~= #groups then
    raise(name .. ": loaded state dict has a different number of parameter groups (" .. count
          .. ", this optimizer has " .. #groups .. ")")
  end
  for k, v in pairs(sd) do
    local gi, gkey, gj = group_key(self, tostring(k))
    if k == "class" then   -- (checked above)
    elseif k == "iterations" then
      if type(v) ~= "number" then raise(name .. ": \"iterations\" must be a number, got " .. typename(v)) end
      iterations = v
    elseif gi then
      local d = gkey == "lr" and 0 or defaults[gkey]
      if d == nil then
        -- another key of a group (a name), kept as PyTorch keeps them; an optimizer
        -- without groups is its own group, and takes its options only
        if not self._grouped or gkey == "params" or gj then raise(name .. ": unexpected key \"" .. k .. "\"") end
        local t = type(v)
        if t ~= "number" and t ~= "boolean" and t ~= "string" then
          raise(name .. ": \"" .. k .. "\" must be a number, a boolean or a string, got " .. typename(v))
        end
      else
        if (type(d) == "table") ~= (gj ~= nil) or (gj and (gj < 1 or gj > #d)) then
          raise(name .. ": unexpected key \"" .. k .. "\"")
        end
        local want = type(d) == "table" and "number" or type(d)
        if type(v) ~= want then raise(name .. ": \"" .. k .. "\" must be a " .. want .. ", got " .. typename(v)) end
      end
      local ch = changes[gi] or {}
      changes[gi] = ch
      if gj then
        ch[gkey] = ch[gkey] or {}
        ch[gkey][gj] = v
      else
        ch[gkey] = v
      end
    else
      local pos, key = smatch(tostring(k), "^state%.(%d+)%.([%w_]+)$")
      if not pos then raise(name .. ": unexpected key \"" .. tostring(k) .. "\"") end
      if not is_tensor(v) and type(v) ~= "number" then
        raise(name .. ": \"" .. k .. "\" must be a tensor or a number, got " .. typename(v))
      end
      pos = tonumber(pos)
      local var = vars[pos]
      if self._grouped and var == nil then
        raise(name .. ": \"" .. k .. "\": the state has a variable " .. pos .. ", the param groups hold " .. #vars)
      end
      if var and is_tensor(v) and v:numel() ~= var:numel() then
        raise(name .. ": \"" .. k .. "\" has shape " .. shape_str(v) .. ", but variable " .. pos
              .. " (" .. tostring(var.name) .. ") has shape " .. shape_str(var))
      end
      states[pos] = states[pos] or {}
      states[pos][key] = v
    end
  end
  local restored = restored_groups(self, name, changes)
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
  self.iterations = iterations
  -- (the group tables stay the same, for those who hold one)
  for i, new in pairs(restored) do
    local group = groups[i]
    for k in entries(changes[i]) do group[k] = new[k] end
  end
  if self._grouped then
    -- a variable taken out of the groups keeps no state, as PyTorch's
    local st = {}
    for pos in ipairs(self._vars) do st[pos] = {} end
    for i, var in ipairs(vars) do st[self._pos[var]] = shaped(copies[i] or {}, var) end
    self._state, self._pending = st, {}
    return
  end
  self._state, self._pending = {}, {}
  for pos, var in ipairs(self._vars) do
    self._state[pos] = shaped(copies[pos] or {}, var)
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
class("SGD", { lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false },
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

class("Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false, maximize = false },
      adam_check, adam_update(false))
class("AdamW", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false,
                 maximize = false },
      adam_check, adam_update(true))

-- RMSprop: s = a s + (1 - a) g^2; centered: m = a m + (1 - a) g, d = sqrt(s - m^2) + eps,
-- else d = sqrt(s) + eps; with momentum: buf = mom buf + g / d, p = p - lr buf;
-- else p = p - lr g / d.
class("RMSprop", { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false,
                   maximize = false },
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
class("Adagrad", { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10,
                   maximize = false },
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
class("Adadelta", { lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0, maximize = false },
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
class("Adamax", { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, maximize = false }, adam_check,
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

-- Rprop: the step size of each element grows by etas[2] while its gradient keeps its
-- sign and shrinks by etas[1] when it flips (within step_sizes), and the element moves
-- by it against the gradient's sign; after a flip the gradient counts as 0 (no move, and
-- no flip seen at the next step). lr is only the first step size.
class("Rprop", { lr = 1e-2, etas = { 0.5, 1.2 }, step_sizes = { 1e-6, 50 }, maximize = false },
  function(self, name)
    local e, s = self.etas, self.step_sizes
    if type(e) ~= "table" or type(e[1]) ~= "number" or type(e[2]) ~= "number" or #e ~= 2
       or not (e[1] > 0 and e[1] < 1 and e[2] > 1) then
      raise(name .. ": etas must be two numbers, 0 < etas[1] < 1 < etas[2], got "
            .. (type(e) == "table" and "{" .. concat(e, ", ") .. "}" or typename(e)))
    end
    if type(s) ~= "table" or type(s[1]) ~= "number" or type(s[2]) ~= "number" or #s ~= 2
       or not (s[1] >= 0 and s[1] <= s[2]) then
      raise(name .. ": step_sizes must be two numbers, 0 <= min <= max, got "
            .. (type(s) == "table" and "{" .. concat(s, ", ") .. "}" or typename(s)))
    end
  end,
  function(self, p, g, st, lr)
    local prev, size = st.prev, st.step_size
    if prev == nil then
      prev, size = dl.zeros_like(p), dl.full_like(p, lr)
      st.prev, st.step_size, st.step = prev, size, 0
    end
    st.step = st.step + 1
    local sign = (g * prev):sign()
    sign:masked_fill_(sign:gt(0), self.etas[2]):masked_fill_(sign:lt(0), self.etas[1]):masked_fill_(sign:eq(0), 1)
    size:mul_(sign):clamp_(self.step_sizes[1], self.step_sizes[2])
    -- (sign < 1 where it is etas[1], compared in the tensor's dtype as PyTorch's eq)
    local d = g:clone():masked_fill_(sign:lt(1), 0)
    p:addcmul_(d:sign(), size, { value = -1 })
    prev:copy_(d)
  end)

-- ASGD: p = p (1 - lambd eta) - eta g (weight decay added to g); ax, the average of p
-- over the steps after t0 (p itself before), is kept in the state; then eta = lr /
-- (1 + lambd lr t)^alpha and mu = 1 / max(1, t - t0) for the next step. eta and mu are
-- rounded to float32, as PyTorch's state tensors hold them.
class("ASGD", { lr = 1e-2, lambd = 1e-4, alpha = 0.75, t0 = 1e6, weight_decay = 0, maximize = false },
  function() end,
  function(self, p, g, st, lr)
    if st.ax == nil then st.step, st.eta, st.mu, st.ax = 0, f32(lr), 1, dl.zeros_like(p) end
    local t = st.step + 1
    st.step = t
    g = decayed(st, p, g, self.weight_decay, false)
    local eta, ax = st.eta, st.ax
    p:mul_(1 - self.lambd * eta)
    p:add_(scratch(st, "_t", p):copy_(g):mul_(-eta))
    if st.mu ~= 1 then ax:add_((p - ax):mul_(st.mu)) else ax:copy_(p) end
    st.eta = f32(lr / (1 + self.lambd * lr * t) ^ self.alpha)
    st.mu = f32(1 / math.max(1, t - self.t0))
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
  self.param_groups = { self }
  return self
end

function LBFGS:apply_gradients()
  raise("LBFGS: it evaluates the loss several times a step; use opt:minimize(loss_fn, variables)")
end
LBFGS.step = LBFGS.apply_gradients

function LBFGS:add_param_group()
  raise("LBFGS:add_param_group: LBFGS takes no param groups (one set of options for all, as PyTorch's)")
end

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


-- (the learning-rate schedules, dl.optim.StepLR and the rest)
require("dlua.optim_schedules")

return optim
