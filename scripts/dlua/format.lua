-- dlua.format: print(x) / tostring(x), in PyTorch's format (torch/_tensor_str.py,
-- default print options: precision 4, threshold 1000, edgeitems 3, linewidth 80)
-- with the shape and dtype always shown, and the device when it is not the cpu:
--
--   tensor([[0.0000, 0.1429],
--           [0.2857, 0.4286]], shape=(2, 2), dtype=float32)
--
-- Floats share one format per tensor, chosen from the finite non-zero values: whole
-- numbers print as "4." ; values spanning more than 1000x, or above 1e8, or (when not
-- whole) below 1e-4 print in scientific notation; others with 4 decimals. Ints print
-- plainly, bools as true/false. Above 1000 elements only the first and last 3 entries
-- of each dim are shown, around "...". Internal: installs itself as tensor.tostring.
local core = require("dlua.core")
core.own_source()
local T = require("dlua.tensor")

local C = core.C
local ffi_new, ffi_cast = core.ffi.new, core.ffi.cast
local sfmt, srep, concat = string.format, string.rep, table.concat
local floor, ceil, huge = math.floor, math.ceil, math.huge
local mmax, mmin, abs = math.max, math.min, math.abs
local tostring, ipairs = tostring, ipairs
local sbyte = string.byte

local PRECISION, THRESHOLD, EDGE, LINEWIDTH, SCI_MODE = 4, 1000, 3, 80, nil
local FIXED, SCI = "%." .. PRECISION .. "f", "%." .. PRECISION .. "e"
local BOOL, INT64 = core.dtype_codes.bool, core.dtype_codes.int64
local FLOATS = { [core.dtype_codes.float32] = true, [core.dtype_codes.float64] = true,
                 [core.dtype_codes.float16] = true, [core.dtype_codes.bfloat16] = true }

local function nonfinite(v)
  if v ~= v then return "nan" end
  if v == huge then return "inf" end
  if v == -huge then return "-inf" end
  return nil
end

local function pad(s, width)
  local n = #s
  if n >= width then return s end
  return srep(" ", width - n) .. s
end

-- PyTorch's _Formatter for floating tensors: returns format(v) and the width.
local function float_formatter(vals, n)
  local int_mode, sci_mode, width = true, false, 1
  local lo, hi, count = huge, 0, 0
  for i = 1, n do
    local v = vals[i]
    if v == v and v ~= huge and v ~= -huge and v ~= 0 then
      local a = abs(v)
      if a < lo then lo = a end
      if a > hi then hi = a end
      count = count + 1
      if int_mode and v ~= ceil(v) then int_mode = false end
    end
  end
  if count > 0 then
    if SCI_MODE ~= nil then
      sci_mode = SCI_MODE
      if sci_mode then int_mode = false end
    elseif hi / lo > 1000 or hi > 1e8 or (not int_mode and lo < 1e-4) then
      sci_mode = true
    end
    for i = 1, n do
      local v = vals[i]
      if v == v and v ~= huge and v ~= -huge and v ~= 0 then
        local len
        if sci_mode then len = #sfmt(SCI, v)
        elseif int_mode then len = #sfmt("%.0f", v) + 1
        else len = #sfmt(FIXED, v) end
        if len > width then width = len end
      end
    end
  end
  local function format(v)
    local s = nonfinite(v)
    if not s then
      if sci_mode then s = sfmt(SCI, v)
      elseif int_mode then s = sfmt("%.0f", v) .. "."
      else s = sfmt(FIXED, v) end
    end
    return pad(s, width)
  end
  return format, width
end

local function plain_formatter(vals, n, is_bool)
  local width = 1
  local function raw(v)
    if is_bool then return v ~= 0 and "true" or "false" end
    if type(v) == "cdata" then return (tostring(v):gsub("LL$", "")) end   -- exact_int64's
    return sfmt("%.0f", v)
  end
  for i = 1, n do
    local len = #raw(vals[i])
    if len > width then width = len end
  end
  return function(v) return pad(raw(v), width) end, width
end

-- The values to show, row-major over the kept indices of each dim: all of them, or
-- for a summarised tensor the first and last EDGE of each dim longer than 2 * EDGE.
local function gather_values(x, sizes, nd, summarize)
  local kept, cut = {}, {}
  local total = 1
  for d = 1, nd do
    local n = sizes[d]
    if summarize and n > 2 * EDGE then
      local l = {}
      for i = 1, EDGE do l[i] = i - 1 end
      for i = 1, EDGE do l[EDGE + i] = n - EDGE + i - 1 end
      kept[d], cut[d] = l, true
    else
      local l = {}
      for i = 1, n do l[i] = i - 1 end
      kept[d], cut[d] = l, false
    end
    total = total * #kept[d]
  end
  local vals = {}
  if not summarize then
    local buf, n = T.read_all(x)
    for i = 1, n do vals[i] = buf[i - 1] end
    return vals, total, kept, cut
  end
  local idx = ffi_new("int64_t[8]")
  local out = ffi_new("double[1]")
  local pos = {}
  for d = 1, nd do pos[d] = 1 end
  for k = 1, total do
    for d = 1, nd do idx[d - 1] = kept[d][pos[d]] end
    if C.dl_read_at(x, idx, out) ~= 0 then core.raise_last() end
    vals[k] = out[0]
    local d = nd
    while d >= 1 do
      pos[d] = pos[d] + 1
      if pos[d] <= #kept[d] then break end
      pos[d] = 1
      d = d - 1
    end
  end
  return vals, total, kept, cut
end

-- The values of an int64 tensor whose magnitudes reach 2^53, which a double does not
-- hold exactly: each as an int64_t cdata, from x's high and low 32 bits read apart
-- (each exact as a double); nil when every value fits a double.
local TWO53, TWO32 = 2 ^ 53, 2 ^ 32
local function exact_int64(x, sizes, nd, summarize)
  if x:max():item() < TWO53 and x:min():item() > -TWO53 then return nil end
  local hi = x:floor_divide(TWO32)
  local his = gather_values(hi, sizes, nd, summarize)
  local los = gather_values(x - hi * TWO32, sizes, nd, summarize)
  local vals = {}
  for i = 1, #his do vals[i] = ffi_cast("int64_t", his[i]) * 4294967296LL + ffi_cast("int64_t", los[i]) end
  return vals
end

local function body(vals, kept, cut, nd, format, width, indent)
  if nd == 0 then return format(vals[1]) end
  local sz, strides = {}, {}
  for d = 1, nd do sz[d] = #kept[d] end
  strides[nd] = 1
  for d = nd - 1, 1, -1 do strides[d] = strides[d + 1] * sz[d + 1] end
  local function rec(d, base, ind)
    if d == nd then
      local elems = {}
      for i = 1, sz[d] do
        if cut[d] and i == EDGE + 1 then elems[#elems + 1] = " ..." end
        elems[#elems + 1] = format(vals[base + i])
      end
      local per_line = mmax(1, floor((LINEWIDTH - ind) / (width + 2)))
      local lines = {}
      for i = 1, #elems, per_line do
        local chunk = {}
        for j = i, mmin(i + per_line - 1, #elems) do chunk[#chunk + 1] = elems[j] end
        lines[#lines + 1] = concat(chunk, ", ")
      end
      return "[" .. concat(lines, ",\n" .. srep(" ", ind + 1)) .. "]"
    end
    local parts = {}
    for i = 1, sz[d] do
      if cut[d] and i == EDGE + 1 then parts[#parts + 1] = "..." end
      parts[#parts + 1] = rec(d + 1, base + (i - 1) * strides[d], ind + 1)
    end
    return "[" .. concat(parts, "," .. srep("\n", nd - d) .. srep(" ", ind + 1)) .. "]"
  end
  return rec(1, 0, indent)
end

-- PyTorch's _add_suffixes: a suffix that would pass the line width goes on a new line.
local function add_suffixes(s, suffixes, indent)
  local out = { s }
  local last_nl = 0
  for i = #s, 1, -1 do
    if sbyte(s, i) == 10 then last_nl = i break end
  end
  -- Python: len(s) - s.rfind("\n") + 1, with rfind = -1 when there is no newline.
  local last_len = last_nl == 0 and #s + 2 or #s - (last_nl - 1) + 1
  for _, suffix in ipairs(suffixes) do
    if last_len + #suffix + 2 > LINEWIDTH then
      out[#out + 1] = ",\n" .. srep(" ", indent) .. suffix
      last_len = indent + #suffix
    else
      out[#out + 1] = ", " .. suffix
      last_len = last_len + #suffix + 2
    end
  end
  out[#out + 1] = ")"
  return concat(out)
end

local function format_tensor(x)
  local m = T.meta(x)
  local nd, numel, dtype = m.ndim, m.numel, m.dtype
  local sizes = {}
  for d = 1, nd do sizes[d] = m.sizes[d - 1] end
  local device = m.device_type == 0 and "cpu" or ("cuda:" .. tostring(m.device_index))
  local prefix = "tensor("
  local indent = #prefix
  local s
  if numel == 0 then
    s = "[]"
  else
    if device ~= "cpu" then x = x:cpu() end
    local vals, n, kept, cut = gather_values(x, sizes, nd, numel > THRESHOLD)
    if dtype == INT64 then vals = exact_int64(x, sizes, nd, numel > THRESHOLD) or vals end
    local format, width
    if FLOATS[dtype] then
      format, width = float_formatter(vals, n)
    else
      format, width = plain_formatter(vals, n, dtype == BOOL)
    end
    s = body(vals, kept, cut, nd, format, width, indent)
  end
  local suffixes = { "shape=" .. T.shape_str(sizes), "dtype=" .. core.dtype_names[dtype] }
  if device ~= "cpu" then suffixes[#suffixes + 1] = "device=" .. device end
  return add_suffixes(prefix .. s, suffixes, indent)
end

-- dl.set_printoptions{precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80,
-- sci_mode = nil} (or {profile = "default" | "short" | "full"}), as PyTorch's: the digits
-- after the point, the element count above which a tensor is summarised, the entries kept
-- at each end of a summarised dim, the line width, and scientific notation forced on
-- (true), off (false) or chosen per tensor (nil). Options not given keep their values.
-- dl.get_printoptions() returns them.
local PROFILES = {
  default = { precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80 },
  short = { precision = 2, threshold = 1000, edgeitems = 2, linewidth = 80 },
  full = { precision = 4, threshold = huge, edgeitems = 3, linewidth = 80 },
}
local PRINT_OPTIONS = { precision = true, threshold = true, edgeitems = true, linewidth = true, sci_mode = true,
                        profile = true }
function T.dl.set_printoptions(opts)
  local op = "set_printoptions"
  opts = core.options(op, opts, PRINT_OPTIONS)
  if opts.profile ~= nil then
    local p = PROFILES[opts.profile]
    if not p then core.raise(op .. ": profile must be default, short or full, got " .. tostring(opts.profile)) end
    PRECISION, THRESHOLD, EDGE, LINEWIDTH, SCI_MODE = p.precision, p.threshold, p.edgeitems, p.linewidth, nil
  end
  local function whole(key, min)
    local v = opts[key]
    if v == nil then return nil end
    if type(v) ~= "number" or (v ~= floor(v) and v ~= huge) or v < min then
      core.raise(op .. ": " .. key .. " must be an integer >= " .. min .. ", got " .. tostring(v))
    end
    return v
  end
  PRECISION = whole("precision", 0) or PRECISION
  THRESHOLD = whole("threshold", 0) or THRESHOLD
  EDGE = whole("edgeitems", 1) or EDGE
  LINEWIDTH = whole("linewidth", 1) or LINEWIDTH
  if opts.sci_mode ~= nil then
    if type(opts.sci_mode) ~= "boolean" then core.raise(op .. ": sci_mode must be a boolean") end
    SCI_MODE = opts.sci_mode
  end
  FIXED, SCI = "%." .. PRECISION .. "f", "%." .. PRECISION .. "e"
end

function T.dl.get_printoptions()
  return { precision = PRECISION, threshold = THRESHOLD, edgeitems = EDGE, linewidth = LINEWIDTH, sci_mode = SCI_MODE }
end

T.tostring = format_tensor
return format_tensor
