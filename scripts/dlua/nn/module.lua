-- dlua.nn.module: the Module base class (docs/training.md).
--
--   local Net = dl.nn.Module:extend("Net")
--   function Net:init(hidden)
--     self.fc1 = dl.nn.Linear(784, hidden)     -- tracked: assigned to a field of self
--     self.fc2 = dl.nn.Linear(hidden, 10)
--   end
--   function Net:forward(x) return self.fc2(dl.relu(self.fc1(x))) end
--   local net = Net(256)
--   net(x); net:parameters(); net:state_dict(); net:eval(); print(net)
--
-- Tracking: a module keeps what is assigned to its fields in tables of its own (not in
-- the instance table), so that every assignment, a reassignment included, goes through
-- __newindex. Sub-modules, Variables (parameters) and plain Lua tables (which may hold
-- modules or Variables, as `self.layers = {}` filled later) are members, remembered in
-- assignment order; a reassigned member keeps its place (as PyTorch's OrderedDicts do).
-- Buffers (tensors saved with the model but not trained, e.g. batch-norm running
-- statistics) are registered with self:register_buffer(name, tensor). Anything else (a
-- number, a string, a plain tensor) is an ordinary field.
--
-- Names are dotted paths: "fc1.weight", "layers.1.bias". A module or Variable reachable
-- along two paths is listed once, under the first.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, typename = core.raise, core.bad_arg, core.typename
local is_tensor, shape_str = T.is_tensor, T.shape_str
local dl = T.dl
local type, pairs, ipairs, tostring, tonumber, rawget, rawset, rawequal, setmetatable, getmetatable, select =
  type, pairs, ipairs, tostring, tonumber, rawget, rawset, rawequal, setmetatable, getmetatable, select
local sort, concat = table.sort, table.concat
local sformat, sgsub, smatch = string.format, string.gsub, string.match

local Module = { __name = "Module" }

local function is_module(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  return mt ~= nil and rawget(mt, "__module_class") ~= nil and rawget(v, "_members") ~= nil
end
Module.is_module = is_module

local function is_variable(v) return is_tensor(v) and dl.is_variable(v) end

-- What a value assigned to a field becomes.
local function member_kind(v)
  if v == nil then return nil end
  if is_tensor(v) then return is_variable(v) and "param" or nil end
  if type(v) == "table" then
    if is_module(v) then return "module" end
    if getmetatable(v) == nil then return "table" end
  end
  return nil
end

local function remove_key(list, k)
  for i = 1, #list do
    if list[i] == k then table.remove(list, i) return end
  end
end

local function set_member(self, k, v, kind)
  local members, kinds, order = rawget(self, "_members"), rawget(self, "_kinds"), rawget(self, "_order")
  if members[k] == nil then order[#order + 1] = k end
  members[k], kinds[k] = v, kind
  rawget(self, "_fields")[k] = nil
end

local function newindex(self, k, v)
  if type(k) == "number" and rawget(self, "_raw_list") then   -- Sequential's steps
    rawset(self, k, v)
    return
  end
  local members, kinds = rawget(self, "_members"), rawget(self, "_kinds")
  if kinds[k] == "buffer" and (v == nil or is_tensor(v)) then
    if v == nil then
      members[k], kinds[k] = nil, nil
      remove_key(rawget(self, "_order"), k)
    else
      members[k] = v
    end
    return
  end
  local kind = member_kind(v)
  if kind then
    set_member(self, k, v, kind)
  else
    if members[k] ~= nil then
      members[k], kinds[k] = nil, nil
      remove_key(rawget(self, "_order"), k)
    end
    rawget(self, "_fields")[k] = v
  end
end

-- The instance metatable of a class: fields are looked up in the members, then the
-- ordinary fields, then the class (and its ancestors).
local function instance_mt(cls)
  return {
    __module_class = cls,
    __index = function(self, k)
      local v = rawget(self, "_members")[k]
      if v ~= nil then return v end
      v = rawget(self, "_fields")[k]
      if v ~= nil then return v end
      return cls[k]
    end,
    -- (a class may check or convert what is assigned first: cls._assign(self, k, v))
    __newindex = function(self, k, v)
      local assign = cls._assign
      if assign then v = assign(self, k, v) end
      newindex(self, k, v)
    end,
    __call = function(self, ...) return self:forward(...) end,
    __tostring = function(self) return self:__repr() end,
  }
end

local function construct(cls, ...)
  local self = setmetatable({ _members = {}, _kinds = {}, _order = {}, _fields = { training = true } },
                            rawget(cls, "_imt"))
  self:init(...)
  return self
end

local class_mt = {
  __call = construct,
  __tostring = function(cls) return "class " .. rawget(cls, "__name") end,
}

-- local Net = dl.nn.Module:extend("Net"): a subclass of this class.
function Module:extend(name)
  if type(self) ~= "table" or rawget(self, "_imt") == nil then
    raise("Module:extend: call it on a class, as dl.nn.Module:extend(\"Name\")")
  end
  if type(name) ~= "string" or not smatch(name, "^[%a_][%w_]*$") then
    raise("Module:extend: expected a class name (an identifier), got " .. typename(name))
  end
  local cls = { __name = name, super = self }
  cls._imt = instance_mt(cls)
  return setmetatable(cls, { __index = self, __call = class_mt.__call, __tostring = class_mt.__tostring })
end

Module._imt = instance_mt(Module)
setmetatable(Module, class_mt)

function Module:init() end

function Module:forward()
  raise(self.__name .. ": forward is not defined (define " .. self.__name .. ":forward(...))")
end

-- net:compile([opts]): this module's forward from now on runs through dl.compile (the
-- class's forward, so sub-modules stay as they are; docs/compile.md). Returns the module.
function Module:compile(opts)
  local forward = self.forward
  self.forward = dl.compile(forward, opts or { name = self.__name .. ":forward" })
  return self
end

-- Registers a tensor saved with the module's state (state_dict) but not trained.
function Module:register_buffer(name, t)
  if type(name) ~= "string" then bad_arg("register_buffer", "a name (a string)", name) end
  if t ~= nil and not is_tensor(t) then bad_arg("register_buffer", "a tensor", t) end
  set_member(self, name, t, "buffer")
end

-- ---- walking the tree --------------------------------------------------------------------

-- The keys of a plain table: 1..#t, then the other keys sorted (by their text).
local function table_keys(t)
  local keys, n = {}, #t
  for i = 1, n do keys[i] = i end
  local rest = {}
  for k in pairs(t) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then rest[#rest + 1] = k end
  end
  sort(rest, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  return keys
end

local function join(prefix, k)
  if prefix == "" then return tostring(k) end
  return prefix .. "." .. tostring(k)
end

-- visit(kind, name, value, owner, key) for every member below `self`, depth first, in
-- order: kind is "param", "buffer" or "module"; `owner[key]` is where it lives (a module
-- or a plain table). Each module, table and Variable is visited once.
local function walk(self, visit)
  local seen = {}
  local function table_walk(t, prefix)
    for _, k in ipairs(table_keys(t)) do
      local v = t[k]
      local name = join(prefix, k)
      if is_variable(v) then
        if not seen[v] then seen[v] = true; visit("param", name, v, t, k) end
      elseif is_module(v) then
        if not seen[v] then
          seen[v] = true
          visit("module", name, v, t, k)
          local sub = v
          sub:_walk_members(name, visit, seen, table_walk)
        end
      elseif type(v) == "table" and getmetatable(v) == nil and not seen[v] then
        seen[v] = true
        table_walk(v, name)
      end
    end
  end
  seen[self] = true
  self:_walk_members("", visit, seen, table_walk)
end

function Module:_walk_members(prefix, visit, seen, table_walk)
  local members, kinds = rawget(self, "_members"), rawget(self, "_kinds")
  for _, k in ipairs(rawget(self, "_order")) do
    local v, kind = members[k], kinds[k]
    local name = join(prefix, k)
    if kind == "param" then
      if not seen[v] then seen[v] = true; visit("param", name, v, self, k) end
    elseif kind == "buffer" then
      if v ~= nil then visit("buffer", name, v, self, k) end
    elseif kind == "module" then
      if not seen[v] then
        seen[v] = true
        visit("module", name, v, self, k)
        v:_walk_members(name, visit, seen, table_walk)
      end
    elseif kind == "table" then
      if not seen[v] then seen[v] = true; table_walk(v, name) end
    end
  end
end

function Module:named_parameters()
  local out = {}
  walk(self, function(kind, name, v)
    if kind == "param" then out[#out + 1] = { name, v } end
  end)
  return out
end

function Module:parameters()
  local out = {}
  walk(self, function(kind, _, v)
    if kind == "param" then out[#out + 1] = v end
  end)
  return out
end

function Module:named_buffers()
  local out = {}
  walk(self, function(kind, name, v)
    if kind == "buffer" then out[#out + 1] = { name, v } end
  end)
  return out
end

function Module:buffers()
  local out = {}
  walk(self, function(kind, _, v)
    if kind == "buffer" then out[#out + 1] = v end
  end)
  return out
end

-- Every module below this one (this one first, named ""), as {name, module}.
function Module:named_modules()
  local out = { { "", self } }
  walk(self, function(kind, name, v)
    if kind == "module" then out[#out + 1] = { name, v } end
  end)
  return out
end

function Module:modules()
  local out = {}
  for i, p in ipairs(self:named_modules()) do out[i] = p[2] end
  return out
end

-- The direct sub-modules (those in plain tables included), as {name, module}.
function Module:named_children()
  local out = {}
  local seen = {}
  local function add(name, v)
    if not seen[v] then seen[v] = true; out[#out + 1] = { name, v } end
  end
  local function from_table(t, prefix)
    for _, k in ipairs(table_keys(t)) do
      local v = t[k]
      if is_module(v) then add(join(prefix, k), v)
      elseif type(v) == "table" and getmetatable(v) == nil and not seen[v] then
        seen[v] = true
        from_table(v, join(prefix, k))
      end
    end
  end
  local members, kinds = rawget(self, "_members"), rawget(self, "_kinds")
  for _, k in ipairs(rawget(self, "_order")) do
    if kinds[k] == "module" then add(tostring(k), members[k])
    elseif kinds[k] == "table" then from_table(members[k], tostring(k)) end
  end
  return out
end

function Module:children()
  local out = {}
  for i, p in ipairs(self:named_children()) do out[i] = p[2] end
  return out
end

-- fn(module) for every module below this one, children first (as PyTorch's apply).
-- A deep copy, as PyTorch's copy.deepcopy of a module: the same class and fields, fresh
-- Variables holding copies of the values (names and frozen state kept), buffers and
-- plain tensors copied, sub-modules and plain tables copied in turn; what is reachable
-- twice is copied once and shared in the copy as in the original. Functions and tables
-- with metatables of their own are shared.
function Module:clone()
  local seen = {}
  local function copy(v)
    if v == nil or (type(v) ~= "table" and not is_tensor(v)) then return v end
    if seen[v] ~= nil then return seen[v] end
    local c
    if is_module(v) then
      c = setmetatable({}, getmetatable(v))
      seen[v] = c
      for k, x in pairs(v) do   -- the internal tables, and Sequential's steps
        if k ~= "_members" and k ~= "_kinds" and k ~= "_order" and k ~= "_fields" then rawset(c, k, copy(x)) end
      end
      local members, kinds, order = {}, {}, {}
      for i, k in ipairs(rawget(v, "_order")) do
        order[i], kinds[k], members[k] = k, rawget(v, "_kinds")[k], copy(rawget(v, "_members")[k])
      end
      local fields = {}
      for k, x in pairs(rawget(v, "_fields")) do fields[k] = copy(x) end
      rawset(c, "_members", members)
      rawset(c, "_kinds", kinds)
      rawset(c, "_order", order)
      rawset(c, "_fields", fields)
    elseif is_variable(v) then
      c = dl.Variable(v, v.name)
      c:requires_grad_(v.trainable)
      seen[v] = c
    elseif is_tensor(v) then
      c = v:clone()
      seen[v] = c
    elseif getmetatable(v) == nil then
      c = {}
      seen[v] = c
      for k, x in pairs(v) do c[copy(k)] = copy(x) end
    else
      c = v
      seen[v] = c
    end
    return c
  end
  return copy(self)
end

-- Freezes (false) or unfreezes (true, the default) every parameter, as PyTorch's
-- requires_grad_: implicit gradients and opt:minimize(f, net) leave frozen ones out
-- (scripts/dlua/autograd.lua). Returns the module.
function Module:requires_grad_(flag)
  if flag == nil then flag = true end
  for _, p in ipairs(self:parameters()) do p:requires_grad_(flag) end
  return self
end

-- The parameters not frozen, in parameters() order (Keras's trainable_variables).
function Module:trainable_parameters()
  local out = {}
  for _, p in ipairs(self:parameters()) do
    if p.trainable then out[#out + 1] = p end
  end
  return out
end

function Module:apply(fn)
  local mods = self:modules()
  for i = #mods, 1, -1 do fn(mods[i]) end
  return self
end

function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in ipairs(self:modules()) do rawget(m, "_fields").training = mode and true or false end
  return self
end

function Module:eval() return self:train(false) end

-- ---- state ------------------------------------------------------------------------------------

-- name -> tensor for every parameter and buffer: the live tensors (a copy is the
-- caller's to make).
function Module:state_dict()
  local out = {}
  walk(self, function(kind, name, v)
    if kind == "param" or kind == "buffer" then out[name] = v end
  end)
  return out
end

-- A PyTorch name with every list index moved from 0-based to 1-based ("layers.0.bias" ->
-- "layers.1.bias"), or nil if it has no index.
local function one_based(name)
  local n
  name, n = sgsub("." .. name .. ".", "%.(%d+)%f[.]", function(i) return "." .. (tonumber(i) + 1) end)
  if n == 0 then return nil end
  return name:sub(2, -2)
end

-- Why a key is missing when the state dict comes from PyTorch: its names count list
-- entries from 0. Empty unless every key of sd not in the model, shifted, is one.
local function zero_based_hint(sd, own)
  local example
  for k in pairs(sd) do
    if own[k] == nil then
      local shifted = type(k) == "string" and one_based(k)
      if not (shifted and own[shifted] ~= nil) then return "" end
      if example == nil or k < example then example = k end
    end
  end
  if example == nil then return "" end
  return " (PyTorch's containers count from 0, dlua's from 1: the state dict's \"" .. example
         .. "\" is the model's \"" .. one_based(example) .. "\"; add 1 to every index in the names)"
end

-- Copies the tensors of `sd` into the parameters and buffers, after checking all of them
-- (missing or unexpected keys, shapes, dtypes): on any mismatch nothing is changed.
-- With strict = false, keys missing on either side are skipped and returned as two lists.
function Module:load_state_dict(sd, strict)
  if type(sd) ~= "table" or is_tensor(sd) then bad_arg("load_state_dict", "a table of tensors (name -> tensor)", sd) end
  if strict == nil then strict = true end
  -- Layers whose shapes are only known after a first call (Dense) take them from sd.
  for _, p in ipairs(self:named_modules()) do
    local m = p[2]
    if m._materialize then m:_materialize(sd, p[1] == "" and "" or p[1] .. ".") end
  end
  local own = self:state_dict()
  local names = {}
  for k in pairs(own) do names[#names + 1] = k end
  sort(names)
  local missing, unexpected = {}, {}
  for _, k in ipairs(names) do
    local src, dst = sd[k], own[k]
    if src == nil then
      if strict then
        raise("load_state_dict: missing key \"" .. k .. "\" in the state dict" .. zero_based_hint(sd, own))
      end
      missing[#missing + 1] = k
    else
      if not is_tensor(src) then
        raise("load_state_dict: \"" .. k .. "\" is a " .. typename(src) .. " in the state dict, expected a tensor")
      end
      local ss, ds = src.shape, dst.shape
      local same = #ss == #ds
      for i = 1, #ss do same = same and ss[i] == ds[i] end
      if not same then
        raise("load_state_dict: \"" .. k .. "\" has shape " .. shape_str(ss) .. " in the state dict, "
              .. shape_str(ds) .. " in the model")
      end
      if src.dtype ~= dst.dtype then
        raise("load_state_dict: \"" .. k .. "\" has dtype " .. src.dtype .. " in the state dict, "
              .. dst.dtype .. " in the model")
      end
    end
  end
  local extra = {}
  for k in pairs(sd) do
    if own[k] == nil then extra[#extra + 1] = tostring(k) end
  end
  sort(extra)
  if #extra > 0 then
    if strict then
      raise("load_state_dict: unexpected key \"" .. extra[1] .. "\" in the state dict"
            .. (#extra > 1 and (" (and " .. (#extra - 1) .. " more)") or ""))
    end
    unexpected = extra
  end
  dl.no_grad(function()
    for _, k in ipairs(names) do
      local src, dst = sd[k], own[k]
      if src ~= nil and not rawequal(src, dst) then
        if src.device ~= dst.device then src = src:to(dst.device) end
        dst:copy_(src)
      end
    end
  end)
  return missing, unexpected
end

-- Moves (or converts) every parameter and buffer: net:to("cuda"), net:to("float64"),
-- net:to({device =, dtype =}). A parameter that must change is replaced by a new
-- Variable (same name) in its module: a tensor cannot change device or dtype in place.
-- So build the optimizer after moving the model (as in PyTorch), and refetch a
-- parameter held in a local variable. A dtype applies to the floating-point tensors
-- only, as PyTorch's: an integer buffer (BatchNorm's num_batches_tracked) keeps its
-- dtype, so that a state dict still loads and the count does not stop at float16's 2048.
local FLOAT_DTYPES = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

function Module:to(what)
  if type(what) ~= "string" and type(what) ~= "table" then
    bad_arg("to", "a device or dtype name, or {device =, dtype =}", what)
  end
  local code, dev = T.parse_opts("to", what)
  local dtype = code and core.dtype_names[code]
  if dtype and not FLOAT_DTYPES[dtype] then
    raise("to: a module converts to a floating-point dtype only, got " .. dtype)
  end
  local function moved(v)
    if dtype and v:is_floating_point() then v = v:to(dtype) end
    if dev then v = v:to(dev) end
    return v
  end
  walk(self, function(kind, _, v, owner, key)
    if kind == "param" then
      local m = moved(v)
      if not rawequal(m, v) then
        local nv = dl.Variable(m, v.name)
        if is_module(owner) then rawget(owner, "_members")[key] = nv else owner[key] = nv end
      end
    elseif kind == "buffer" then
      rawget(owner, "_members")[key] = moved(v)
    end
  end)
  return self
end

function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end
function Module:float() return self:to("float32") end
function Module:double() return self:to("float64") end
function Module:half() return self:to("float16") end
function Module:bfloat16() return self:to("bfloat16") end

function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- ---- printing ---------------------------------------------------------------------------------

-- The text inside "Name(...)" for a layer without children (layers override it).
function Module:extra_repr() return "" end

local function indent(s)
  return (sgsub(s, "\n", "\n  "))
end

function Module:__repr()
  local children = self:named_children()
  local extra = self:extra_repr()
  if #children == 0 then return self.__name .. "(" .. extra .. ")" end
  local lines = { self.__name .. "(" }
  if extra ~= "" then lines[#lines + 1] = "  " .. extra end
  for _, c in ipairs(children) do
    lines[#lines + 1] = "  (" .. c[1] .. "): " .. indent(c[2]:__repr())
  end
  lines[#lines + 1] = ")"
  return concat(lines, "\n")
end

-- "a=1, b=true" from a list of name, value pairs (nil values skipped).
function Module.format_args(...)
  local parts = {}
  for i = 1, select("#", ...), 2 do
    local k, v = select(i, ...)
    if v ~= nil then
      if k == "" then parts[#parts + 1] = tostring(v)
      elseif type(v) == "string" then parts[#parts + 1] = k .. "=" .. sformat("%q", v)
      elseif type(v) == "table" then parts[#parts + 1] = k .. "=(" .. concat(v, ", ") .. ")"
      else parts[#parts + 1] = k .. "=" .. tostring(v) end
    end
  end
  return concat(parts, ", ")
end

return Module
