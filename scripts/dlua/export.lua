-- dl.export: a Lua function's tensor work as a graph in one file, run without Lua by
-- libdlua_run (include/dlua/dlg.h) or back here by dl.export.load (docs/export.md).
--
--   local report = dl.export(function(x) return dl.softmax(net(x), 2) end, { dl.zeros(1, 784) },
--                            { path = "mlp.dlg", dynamic = { [1] = { 1, "batch" } }, names = net })
--   print(report)                      -- inputs, outputs, constants, the Lua numbers it holds
--   local f = dl.export.load("mlp.dlg")
--   local y = f(x)                     -- equal to the function's result, bit for bit
--
-- The capture is strict (Note [Strict capture] in export/capture.cpp): the function runs
-- with every op reported to the capture (a dl.grad inside included: its backward pass
-- is ops too); a tensor it reads that is not an
-- argument becomes a constant of the file, and anything a graph cannot hold (reading a
-- value into Lua, a random op, an in-place write) is an error naming the line. The
-- function then runs again once per symbolic dim, with that dim one larger, to learn
-- which sizes follow it, and once more (with opts.check_args when given) to check that
-- it makes the same graph: a Lua branch on anything but the arguments' values shows up
-- as a difference and is an error, never a frozen path.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local C, raise, raise_last = core.C, core.raise, core.raise_last
local dl, is_tensor, hid, wrap = T.dl, T.is_tensor, T.hid, T.wrap
local type, select, ipairs, pairs, pcall, error, tostring, setmetatable =
  type, select, ipairs, pairs, pcall, error, tostring, setmetatable
local unpack, ffi_string, floor = unpack or table.unpack, ffi.string, math.floor

local OPTIONS = { path = true, dynamic = true, check_args = true, names = true, input_names = true, metadata = true }

local function pack(...) return { n = select("#", ...), ... } end

local function args_of(op, args)
  if type(args) ~= "table" then core.bad_arg(op, "a list of argument tensors", args) end
  for i = 1, #args do
    if not is_tensor(args[i]) then
      raise(op .. ": argument " .. i .. " is a " .. core.typename(args[i]) ..
            "; a graph takes tensors (numbers the function needs are written in it)")
    end
  end
  return args
end

-- True while this module's export is in progress on this thread (its captures are to be
-- dropped when it ends); an export tried inside one fails without touching it.
local exporting = false

-- With a capture begun (dl_export_begin, or dl_vmap_begin for op "vmap"): runs
-- f(args[1..n]), gives its results to the capture and ends it. The capture's number
-- and the number of results; on any failure the capture is abandoned and the error
-- raised, named after op.
local function run_captured(op, f, args, n)
  -- As the caller would run it: under no_grad, a dl.grad inside would see no history
  -- and give zeros, and the graph with it.
  local rets = pack(pcall(f, unpack(args, 1, n)))
  local why
  if not rets[1] then
    why = rets[2]
  elseif rets.n < 2 then
    why = op .. ": the function returned nothing"
  end
  for i = 2, why and 0 or rets.n do
    local y = rets[i]
    if not is_tensor(y) then
      why = op .. ": result " .. (i - 1) .. " is a " .. core.typename(y) .. ", not a tensor"
      break
    end
    if C.dl_export_output(hid(y)) ~= 0 then
      why = ffi_string(C.dl_last_error())
      break
    end
  end
  if why then
    C.dl_export_abort()
    if not rets[1] then error(why, 0) end
    raise(why)
  end
  local k = C.dl_export_end()
  if k < 0 then raise_last() end
  return k, rets.n - 1
end

-- Runs f once on args under a capture; the capture's number.
local function capture(f, args, names)
  local n = #args
  local ids, cnames = ffi.new("uint64_t[?]", n + 1), ffi.new("const char*[?]", n + 1)
  for i = 1, n do
    ids[i - 1] = hid(args[i])
    cnames[i - 1] = names[i]
  end
  if C.dl_export_begin(ids, cnames, n) ~= 0 then raise_last() end
  return (run_captured("export", f, args, n))
end

-- The symbolic dims of opts.dynamic ({ [arg] = { dim, "name" } } or a list of such
-- pairs per argument): the symbols' names, their values, and where each appears.
local function symbols_of(op, dynamic, args)
  local names, values, uses, index = {}, {}, {}, {}
  if dynamic == nil then return names, values, uses end
  if type(dynamic) ~= "table" then core.bad_arg(op, "a table for dynamic", dynamic) end
  for a, spec in pairs(dynamic) do
    local x = args[a]
    if not x then raise(op .. ": dynamic names argument " .. tostring(a) .. ", which is not given") end
    if type(spec) ~= "table" then raise(op .. ": dynamic[" .. a .. "] must be { dim, \"name\" }") end
    if type(spec[1]) ~= "table" then spec = { spec } end
    for _, pair in ipairs(spec) do
      local d, name = pair[1], pair[2]
      local nd = #x.shape
      if type(d) ~= "number" or d ~= floor(d) or d < 1 or d > nd then
        raise(op .. ": dynamic[" .. a .. "]: dim " .. tostring(d) .. " is not a dim of the argument's " .. nd)
      end
      if type(name) ~= "string" or name == "" then
        raise(op .. ": dynamic[" .. a .. "]: expected the dim's name, got " .. core.typename(name))
      end
      local s = index[name]
      if not s then
        s = #names + 1
        index[name], names[s], values[s] = s, name, x.shape[d]
      elseif values[s] ~= x.shape[d] then
        raise(op .. ": dynamic dim " .. name .. " has size " .. values[s] .. " in one argument and " ..
              x.shape[d] .. " in argument " .. a)
      end
      uses[#uses + 1] = { sym = s, arg = a, dim = d }
    end
  end
  return names, values, uses
end

-- args with every dim of each symbol s larger by by[s] (its first slice repeated at the
-- end, so that the values stay in their domain: indices stay valid indices).
local function grown(args, uses, by)
  local out = {}
  for i = 1, #args do out[i] = args[i] end
  for _, u in ipairs(uses) do
    local k = by[u.sym] or 0
    if k > 0 then
      local x = out[u.arg]
      local parts = { x }
      for j = 1, k do parts[j + 1] = x:narrow(u.dim, 1, 1) end
      out[u.arg] = dl.cat(parts, u.dim)
    end
  end
  return out
end

-- Names the constants taken from parameters: a module's (and its buffers), or a table
-- of name -> tensor.
local function name_constants(k, names)
  if names == nil then return end
  local list = {}
  if type(names) == "table" and type(names.named_parameters) == "function" then
    for _, p in ipairs(names:named_parameters()) do list[#list + 1] = p end
    if type(names.named_buffers) == "function" then
      for _, p in ipairs(names:named_buffers()) do list[#list + 1] = p end
    end
  elseif type(names) == "table" then
    for name, t in pairs(names) do list[#list + 1] = { name, t } end
  else
    core.bad_arg("export", "a module or a table of named tensors for names", names)
  end
  for _, p in ipairs(list) do
    if type(p[1]) == "string" and is_tensor(p[2]) then
      if C.dl_export_name(k, hid(p[2]), p[1]) ~= 0 then raise_last() end
    end
  end
end

local function doubles(list)
  local a = ffi.new("double[?]", #list + 1)
  for i = 1, #list do a[i - 1] = list[i] end
  return a
end

local Report = {}
Report.__index = Report
function Report:__tostring() return self.text end

-- dl.export(f, args, opts): writes opts.path; returns the report.
local function export_body(f, args, opts)
  local op = "export"
  core.check_callable(op, f)
  args_of(op, args)
  opts = core.options(op, opts, OPTIONS)
  local path = opts.path
  if type(path) ~= "string" or path == "" then raise(op .. ": expected opts.path, the file to write") end
  require("dlua.io").path_arg(op, path)   -- the sandbox's file rule
  local input_names = {}
  for i = 1, #args do
    local nm = opts.input_names and opts.input_names[i] or ("input" .. i)
    if type(nm) ~= "string" then raise(op .. ": input_names[" .. i .. "] must be a string") end
    input_names[i] = nm
  end
  local syms, values, uses = symbols_of(op, opts.dynamic, args)
  local check = opts.check_args and args_of(op, opts.check_args) or nil
  if check and #check ~= #args then raise(op .. ": check_args has " .. #check .. " tensors, args " .. #args) end
  local meta = {}
  for k, v in pairs(opts.metadata or {}) do
    if type(k) ~= "string" or type(v) ~= "string" then raise(op .. ": metadata keys and values must be strings") end
    meta[#meta + 1] = k
    meta[#meta + 1] = v
  end
  -- Without check_args, the check capture moves every symbol by another amount than
  -- the captures that solved for it (symbol s by s + 1), so that a size that is not
  -- affine in it (x:narrow(1, 1, n // 2)) is found rather than frozen.
  if not check then
    local by = {}
    for s = 1, #syms do by[s] = s + 1 end
    check = grown(args, uses, by)
  end

  local base = capture(f, args, input_names)
  local cnames = ffi.new("const char*[?]", #syms + 1)
  for i = 1, #syms do cnames[i - 1] = syms[i] end
  if C.dl_export_symbols(base, cnames, #syms) ~= 0 then raise_last() end
  local at_base = doubles(values)
  local function unify(k, sym, at)
    if C.dl_export_unify(base, k, sym, at_base, doubles(at), #syms) ~= 0 then raise_last() end
  end
  for s = 1, #syms do
    local at = {}
    for i = 1, #values do at[i] = values[i] end
    at[s] = values[s] + 1
    unify(capture(f, grown(args, uses, { [s] = 1 }), input_names), s - 1, at)
  end
  -- The check capture: its symbols' values are read from its arguments.
  local at = {}
  for _, u in ipairs(uses) do at[u.sym] = check[u.arg].shape[u.dim] end
  unify(capture(f, check, input_names), -1, at)

  name_constants(base, opts.names ~= nil and opts.names or (type(f) == "table" and f or nil))
  local cmeta = ffi.new("const char*[?]", #meta + 1)
  for i = 1, #meta do cmeta[i - 1] = meta[i] end
  if C.dl_export_save(base, path, cmeta, #meta) ~= 0 then raise_last() end
  local text = ffi_string(C.dl_export_describe(base))
  local graph = ffi_string(C.dl_export_graph(base))
  return setmetatable({ path = path, text = "exported " .. path .. "\n" .. text, graph = graph, symbols = syms },
                      Report)
end

-- Whatever happens, no capture is left in progress and the finished ones (each holds a
-- copy of every constant) are dropped.
local function export(f, args, opts)
  if exporting then raise("export: an export is already in progress") end
  exporting = true
  local r = pack(pcall(export_body, f, args, opts))
  exporting = false
  C.dl_export_abort()
  C.dl_export_clear()
  if not r[1] then error(r[2], 0) end
  return r[2]
end

-- dl.export.load(path): the file's graph as a callable; f(x, ...) returns its outputs.
local Loaded = {}
Loaded.__index = Loaded

function Loaded:__call(...)
  local n = select("#", ...)
  if n ~= self.ninputs then
    raise("export.load: " .. self.path .. " takes " .. self.ninputs .. " inputs, got " .. n)
  end
  local xs = { ... }
  local ins, outs = self._ins, self._outs
  for i = 1, n do
    if not is_tensor(xs[i]) then core.bad_arg("export.load", "a tensor for input " .. i, xs[i]) end
    ins[i - 1] = hid(xs[i])
  end
  if C.dl_graph_run(self._id, ins, n, outs, self.noutputs) ~= 0 then raise_last() end
  local r = {}
  for k = 1, self.noutputs do r[k] = wrap(outs[k - 1]) end
  return unpack(r, 1, self.noutputs)
end

function Loaded:__tostring()
  return "exported graph " .. self.path .. " (" .. self.ninputs .. " inputs: " .. table.concat(self.inputs, ", ") ..
         "; " .. self.noutputs .. " outputs; " .. self.nodes .. " nodes)"
end

local function load(path)
  if type(path) ~= "string" then core.bad_arg("export.load", "a path", path) end
  local id = C.dl_graph_load(path)
  if id == 0 then raise_last() end
  local owner = ffi.gc(ffi.new("struct dl_io_object", id), C.dl_io_release)
  local counts = ffi.new("double[3]")
  if C.dl_graph_counts(id, counts) ~= 0 then raise_last() end
  local nin, nout = counts[0], counts[1]
  local inputs = {}
  for i = 1, nin do inputs[i] = ffi_string(C.dl_graph_input_name(id, i - 1)) end
  return setmetatable({
    path = path, inputs = inputs, ninputs = nin, noutputs = nout, nodes = counts[2],
    _id = id, _owner = owner, _ins = ffi.new("uint64_t[?]", nin + 1), _outs = ffi.new("uint64_t[?]", nout + 1),
  }, Loaded)
end

-- dl.export is the table init.lua made (calls and reads load this module first).
-- dl.export.onnx(f, args, opts): the same capture (opts as dl.export's), written as an
-- ONNX model (opset 17) at opts.path through a .dlg file beside it that is then removed.
-- dl.export.to_onnx(dlg_path, onnx_path) converts a file dl.export wrote.
local ONNX_OPSET = 17
local function to_onnx(dlg_path, onnx_path)
  local IO = require("dlua.io")   -- the sandbox's file rule and checked names
  IO.path_arg("export.to_onnx", dlg_path)
  IO.path_arg("export.to_onnx", onnx_path)
  if C.dl_export_onnx(dlg_path, onnx_path, ONNX_OPSET) ~= 0 then raise_last() end
end

local function onnx(f, args, opts)
  if type(opts) ~= "table" or type(opts.path) ~= "string" or opts.path == "" then
    raise("export.onnx: expected opts.path, the .onnx file to write")
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.path = opts.path .. ".dlg.tmp"
  local ok, r = pcall(export, f, args, o)
  if ok then
    local converted, err = pcall(to_onnx, o.path, opts.path)
    if not converted then ok, r = false, err end
  end
  os.remove(o.path)
  if not ok then error(r, 0) end
  r.path = opts.path
  r.text = r.text:gsub("^exported [^\n]*", "exported " .. opts.path .. " (ONNX opset " .. ONNX_OPSET .. ")", 1)
  return r
end

local E = dl.export
E.load = load
E.onnx = onnx
E.to_onnx = to_onnx
E._run_captured = run_captured   -- (internal: dl.vmap captures the same way)
setmetatable(E, { __call = function(_, f, args, opts) return export(f, args, opts) end })
return E
