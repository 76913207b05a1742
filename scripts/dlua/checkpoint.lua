-- dlua.checkpoint: object-based checkpoints (docs/training.md).
--
--   local ckpt = dl.Checkpoint{model = net, optimizer = opt, step = 0}
--   ckpt:restore(dl.latest_checkpoint("ckpt"))    -- nothing to do on the first run
--   for step = ckpt.step + 1, 1000 do
--     ...
--     ckpt.step = step
--     if step % 100 == 0 then ckpt:save("ckpt/model") end   -- ckpt/model-100.safetensors
--   end
--
-- A checkpoint tracks named values: objects with state_dict()/load_state_dict() (models,
-- optimizers, metrics: a state dict maps names to tensors, numbers, booleans or strings),
-- tensors and Variables (restored in place), and numbers, booleans and strings (restored
-- into the checkpoint's own fields, e.g. ckpt.step). save() writes one safetensors file:
-- tensors under "<name>" or "<name>/<key>" ("model/fc1.weight"), scalars in the metadata
-- as "<type>:<name>[/<key>]" ("number:step"). The file is written atomically, then the
-- directory's index file "checkpoint" (also atomically, last), which names the latest
-- file for dl.latest_checkpoint(dir). A crash at any moment leaves the previous
-- checkpoint and index intact.
--
-- restore() is all or nothing: it loads and checks the whole file (dl.load), then checks
-- every tracked value against it (missing entries, shapes, types) before touching any;
-- then it applies them, and if an object's load_state_dict still fails, it puts back
-- every value it had already changed (from copies taken just before) and raises.
local core = require("dlua.core")
local T = require("dlua.tensor")
local IO = require("dlua.io")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local entries = core.entries   -- nested loops: Note [Walking nested tables] in core.lua
local is_tensor = T.is_tensor
local dl = T.dl
local type, pairs, ipairs, tostring, tonumber, pcall, setmetatable, getmetatable, rawget, rawset =
  type, pairs, ipairs, tostring, tonumber, pcall, setmetatable, getmetatable, rawget, rawset
local sfind, sformat, smatch, ssub, gmatch, sgsub = string.find, string.format, string.match,
  string.sub, string.gmatch, string.gsub
local concat, tsort = table.concat, table.sort
local floor, huge = math.floor, math.huge
local path_arg, num_str = IO.path_arg, IO.num_str

local INDEX_NAME = "checkpoint"
local FORMAT_KEY = "dlua.checkpoint"
local COUNTER_KEY = "dlua.save_counter"

local Checkpoint = {}

-- ---- values -------------------------------------------------------------------------------

local function kind_of(v)
  local t = type(v)
  if t == "number" or t == "boolean" or t == "string" then return t end
  if is_tensor(v) then return "tensor" end
  if t == "table" and type(v.state_dict) == "function" and type(v.load_state_dict) == "function" then
    return "object"
  end
  return nil
end

local function encode_scalar(v)
  if type(v) == "number" then
    if v ~= v then return "nan" end
    if v == huge then return "inf" end
    if v == -huge then return "-inf" end
    return num_str(v)
  end
  return tostring(v)
end

local function decode_scalar(kind, s)
  if kind == "string" then return s end
  if kind == "boolean" then
    if s == "true" then return true end
    if s == "false" then return false end
    return nil
  end
  if s == "nan" then return 0 / 0 end
  if s == "inf" then return huge end
  if s == "-inf" then return -huge end
  return tonumber(s)
end

local function no_grad(f, ...)
  if dl.no_grad then return dl.no_grad(f, ...) end
  return f(...)
end

local function shape_str(x) return T.shape_str(x.shape) end

local function same_shape(a, b)
  local sa, sb = a.shape, b.shape
  if #sa ~= #sb then return false end
  for i = 1, #sa do if sa[i] ~= sb[i] then return false end end
  return true
end

-- ---- the object ------------------------------------------------------------------------------

local function check_name(op, k)
  if type(k) ~= "string" then raise(op .. ": names must be strings, got the " .. type(k) .. " key " .. tostring(k)) end
  if k == "" or sfind(k, "/", 1, true) or sfind(k, ":", 1, true) then
    raise(op .. ": name \"" .. k .. "\" must be non-empty, without '/' or ':'")
  end
  if Checkpoint[k] ~= nil then raise(op .. ": \"" .. k .. "\" is the name of a Checkpoint method") end
end

local function check_value(op, k, v)
  if not kind_of(v) then
    raise(op .. ": cannot track \"" .. k .. "\": expected an object with state_dict() and "
          .. "load_state_dict(), a tensor, a number, a boolean or a string, got " .. core.typename(v))
  end
end

local mt = {}
mt.__index = function(self, k)
  local m = Checkpoint[k]
  if m ~= nil then return m end
  return rawget(self, "_tracked")[k]
end
mt.__newindex = function(self, k, v)
  check_name("Checkpoint", k)
  if v ~= nil then check_value("Checkpoint", k, v) end
  rawget(self, "_tracked")[k] = v
end
mt.__tostring = function(self)
  local parts = {}
  for k, v in pairs(rawget(self, "_tracked")) do
    local kind = kind_of(v)
    if kind == "number" or kind == "boolean" then parts[#parts + 1] = k .. "=" .. tostring(v)
    elseif kind == "string" then parts[#parts + 1] = k .. "=" .. sformat("%q", v)
    else parts[#parts + 1] = k end
  end
  tsort(parts)
  return "Checkpoint{" .. concat(parts, ", ") .. "}"
end

function dl.Checkpoint(values)
  if type(values) ~= "table" or is_tensor(values) then
    bad_arg("Checkpoint", "a table of the values to track (e.g. {model = net, step = 0})", values)
  end
  local self = setmetatable({}, mt)
  rawset(self, "_tracked", {})
  rawset(self, "_save_counter", 0)
  for k, v in pairs(values) do
    check_name("Checkpoint", k)
    check_value("Checkpoint", k, v)
    self._tracked[k] = v
  end
  return self
end

-- ---- saving ------------------------------------------------------------------------------------

local function flatten(self, op, counter)
  local tensors = {}
  local meta = { [FORMAT_KEY] = "1", [COUNTER_KEY] = num_str(counter) }
  local function put(path, x, owner)
    local kind = kind_of(x)
    if kind == "tensor" then
      tensors[path] = x
    elseif kind == "number" or kind == "boolean" or kind == "string" then
      meta[kind .. ":" .. path] = encode_scalar(x)
    else
      raise(op .. ": " .. owner .. ":state_dict() holds a " .. core.typename(x) .. " at \"" .. path
            .. "\"; a state dict maps names to tensors, numbers, booleans or strings")
    end
  end
  for name, v in entries(rawget(self, "_tracked")) do
    if kind_of(v) == "object" then
      local sd = v:state_dict()
      if type(sd) ~= "table" then
        raise(op .. ": " .. name .. ":state_dict() returned a " .. core.typename(sd) .. ", expected a table")
      end
      for key, x in entries(sd) do
        if type(key) ~= "string" then
          raise(op .. ": " .. name .. ":state_dict() has the " .. type(key) .. " key " .. tostring(key)
                .. "; keys must be strings")
        end
        put(name .. "/" .. key, x, name)
      end
    else
      put(name, v, name)
    end
  end
  return tensors, meta
end

function Checkpoint:save(prefix)
  local op = "Checkpoint:save"
  if getmetatable(self) ~= mt then raise(op .. ": call it as ckpt:save(prefix)") end
  path_arg(op, prefix)
  local step = self._tracked.step
  local n
  if type(step) == "number" then n = step
  elseif is_tensor(step) then n = step:item()
  else n = rawget(self, "_save_counter") + 1 end
  if n ~= floor(n) or n ~= n or n == huge or n == -huge then
    raise(op .. ": step must be an integer to name the file, got " .. tostring(n))
  end
  local counter = rawget(self, "_save_counter") + 1
  local tensors, meta = flatten(self, op, counter)
  local file = prefix .. "-" .. num_str(n) .. ".safetensors"
  local dir = IO.dir_name(file)
  IO.make_dirs(op, dir)
  dl.save(file, tensors, meta)
  rawset(self, "_save_counter", counter)
  IO.write_file_atomic(op, dir .. "/" .. INDEX_NAME,
                       "# dlua checkpoint index: the latest checkpoint in this directory\n"
                       .. "latest: " .. IO.base_name(file) .. "\n")
  return file
end

function dl.latest_checkpoint(dir)
  local op = "latest_checkpoint"
  path_arg(op, dir)
  if ssub(dir, -1) == "/" and #dir > 1 then dir = ssub(dir, 1, -2) end
  local text = IO.read_file(op, dir .. "/" .. INDEX_NAME)
  if not text then return nil end
  local name
  for line in gmatch(text, "[^\n]+") do
    name = smatch(line, "^latest: (.-)%s*$") or name
  end
  if not name or name == "" or sfind(name, "/", 1, true) then return nil end
  local path = dir .. "/" .. name
  -- Returning nil here would make restore(latest_checkpoint(dir)) start again from step 0,
  -- over the run whose checkpoint went missing.
  if not IO.exists(path) then
    raise(op .. ": " .. dir .. "/" .. INDEX_NAME .. " names " .. name .. ", which does not exist")
  end
  return path
end

-- ---- restoring -----------------------------------------------------------------------------------

-- What the file holds under "<name>/": key -> tensor or scalar.
local function entries_under(tensors, meta, name)
  local out, prefix = {}, name .. "/"
  local n = #prefix
  for k, t in pairs(tensors) do
    if ssub(k, 1, n) == prefix then out[ssub(k, n + 1)] = t end
  end
  for k, s in pairs(meta) do
    local kind, path = smatch(k, "^(%a+):(.*)$")
    if kind and ssub(path, 1, n) == prefix then
      local v = decode_scalar(kind, s)
      if v ~= nil then out[ssub(path, n + 1)] = v end
    end
  end
  return out
end

local function scalar_entry(meta, kind, name)
  local s = meta[kind .. ":" .. name]
  if s == nil then return nil end
  return decode_scalar(kind, s)
end

-- Copies of a state dict's tensors (it may hand out the live parameters themselves).
local function snapshot(sd)
  local out = {}
  for k, x in pairs(sd) do
    out[k] = is_tensor(x) and no_grad(function() return x:detach():clone() end) or x
  end
  return out
end

local function strip_position(msg)
  msg = tostring(msg)
  return (sgsub(msg, "^[^\n]-:%d+: ", "", 1))
end

function Checkpoint:restore(path)
  local op = "Checkpoint:restore"
  if getmetatable(self) ~= mt then raise(op .. ": call it as ckpt:restore(path)") end
  -- restore(dl.latest_checkpoint(dir)) on a first run: nothing to restore.
  if path == nil then return nil end
  path_arg(op, path)
  local tensors, meta = dl.load(path)
  local where = "restore: " .. path .. ": "
  local tracked = rawget(self, "_tracked")

  -- 1. Check everything; change nothing.
  local names = {}
  for name in pairs(tracked) do names[#names + 1] = name end
  tsort(names)
  local plan = {}
  for _, name in ipairs(names) do
    local v = tracked[name]
    local kind = kind_of(v)
    if kind == "tensor" then
      local t = tensors[name]
      if not t then raise(where .. "the checkpoint has no tensor \"" .. name .. "\"") end
      if not same_shape(v, t) then
        raise(where .. "\"" .. name .. "\" has shape " .. shape_str(t) .. " in the file, "
              .. shape_str(v) .. " here")
      end
      plan[#plan + 1] = { kind = kind, name = name, target = v, value = t }
    elseif kind == "object" then
      local incoming = entries_under(tensors, meta, name)
      local cur = v:state_dict()
      if type(cur) ~= "table" then
        raise(where .. name .. ":state_dict() returned a " .. core.typename(cur) .. ", expected a table")
      end
      local keys = {}
      for key in pairs(cur) do keys[#keys + 1] = key end
      tsort(keys)
      for _, key in ipairs(keys) do
        local x, y = cur[key], incoming[key]
        local full = "\"" .. name .. "/" .. key .. "\""
        if y == nil then
          -- An optimizer's "class" (its type, which its load_state_dict checks) is not in
          -- files saved before optimizers recorded it.
          if not (key == "class" and type(x) == "string") then raise(where .. "the checkpoint has no entry " .. full) end
        elseif is_tensor(x) ~= is_tensor(y) or (not is_tensor(x) and type(x) ~= type(y)) then
          raise(where .. full .. " is a " .. core.typename(y) .. " in the file, a "
                .. core.typename(x) .. " here")
        end
        if is_tensor(x) and not same_shape(x, y) then
          raise(where .. full .. " has shape " .. shape_str(y) .. " in the file, " .. shape_str(x) .. " here")
        end
      end
      plan[#plan + 1] = { kind = kind, name = name, target = v, value = incoming }
    else
      local y = scalar_entry(meta, kind, name)
      if y == nil then
        raise(where .. "the checkpoint has no " .. kind .. " \"" .. name .. "\"")
      end
      plan[#plan + 1] = { kind = kind, name = name, value = y }
    end
  end

  -- 2. Apply, undoing everything if an object refuses its state.
  local done = {}
  local ok, err = pcall(function()
    for _, p in ipairs(plan) do
      if p.kind == "tensor" then
        p.undo = no_grad(function() return p.target:detach():clone() end)
        done[#done + 1] = p
        no_grad(function() p.target:copy_(p.value) end)
      elseif p.kind == "object" then
        p.undo = snapshot(p.target:state_dict())
        done[#done + 1] = p
        p.target:load_state_dict(p.value)
      end
    end
  end)
  if not ok then
    local failed = done[#done]
    for i = #done, 1, -1 do
      local p = done[i]
      if p.kind == "tensor" then
        pcall(no_grad, function() p.target:copy_(p.undo) end)
      else
        pcall(p.target.load_state_dict, p.target, p.undo)
      end
    end
    raise(where .. "restoring \"" .. (failed and failed.name or "?") .. "\" failed, nothing was "
          .. "restored: " .. strip_position(err))
  end
  for _, p in ipairs(plan) do
    if p.kind ~= "tensor" and p.kind ~= "object" then tracked[p.name] = p.value end
  end
  local counter = tonumber(meta[COUNTER_KEY])
  if counter then rawset(self, "_save_counter", counter) end
  return path
end

return Checkpoint
