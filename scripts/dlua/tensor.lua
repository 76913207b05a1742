-- dlua.tensor: the tensor type and its operations (docs/tensors.md).
--
-- A tensor is cdata of `struct dl_tensor` (bindings/capi.h) under ffi.metatype: a struct
-- value of const scalars (docs/design.md, "Tensors are FFI struct values") that is either the id
-- of a handle in the engine's table, released once the value dies (Note [Handles released
-- by a sweep, not by finalizers] in lifetime.lua), or a small host tensor held inline (Note [Small
-- tensors inline] in bindings/value.cpp). No tensor value carries a finalizer. The hot
-- entry points (the op families, metadata, elements) take the value itself and write
-- their result into a new one (value()); every other entry point takes a handle id,
-- hid(x), which first makes an inline x a handle in place, for good. A failed call
-- returns 0 (or -1) and is raised as a Lua error at the script's line (core.raise).
--
-- Internal module: it returns the table of internals that the other dlua modules
-- extend (methods, props, setters, wrap ...); scripts see only `dlua`. A sandbox must
-- not let scripts require it (wrap() would let a script forge handles).
--
-- Hot paths (arithmetic, unary math, x[i]) allocate nothing but the result: no
-- tables, closures or varargs per call, the op id is an upvalue, and a Lua number
-- operand goes to the *_scalar entry (no tensor is made for it).
local ffi = require("ffi")
local core = require("dlua.core")
core.own_source()

local C = core.C
local raise, raise_last, bad_arg = core.raise, core.raise_last, core.bad_arg
local typename = core.typename
local istype, ffi_gc, ffi_new = ffi.istype, ffi.gc, ffi.new
local type, select, tostring, tonumber, pairs, ipairs, next =
  type, select, tostring, tonumber, pairs, ipairs, next
local ffi_cast = ffi.cast
local floor = math.floor
local concat = table.concat
local dtype_codes, dtype_names = core.dtype_codes, core.dtype_names

local M = { methods = {}, props = {}, setters = {}, dl = {} }
local methods, props, setters, dl = M.methods, M.props, M.setters, M.dl
-- Option names accepted by the creation functions; another module may add some and
-- then handle them in M.creation_hook(tensor, opts) (e.g. requires_grad).
M.option_names = { dtype = true, device = true }
M.creation_hook = nil

local BOOL, UINT8, INT32, INT64, FLOAT32, FLOAT64 =
  dtype_codes.bool, dtype_codes.uint8, dtype_codes.int32, dtype_codes.int64,
  dtype_codes.float32, dtype_codes.float64

local mt = {}
local Tensor = ffi.metatype("struct dl_tensor", mt)
M.Tensor = Tensor
core.set_tensor_type(Tensor)

local L = require("dlua.lifetime")
local total, mark, budget, collect, own, retry = L.total, L.mark, L.budget, L.collect, L.own, L.retry

-- Note [No tail calls to built-ins in hot helpers]
-- The small functions here (wrap, result, value, is_tensor) end with `local v = f(...);
-- return v`, never `return f(...)` for a built-in or C function f. LuaJIT starts a
-- trace at a function called often from code that is not compiled (a gradient's
-- driver in autograd.lua, a script's loop that cannot compile); a trace that starts
-- here must end at this function's own return. A tail call to a built-in returns
-- straight to the caller's frame, which such a trace cannot follow ("leaving loop in
-- root trace", "NYI: return to lower frame"); after a few of those aborts LuaJIT
-- blacklists the function, and from then on every trace that would inline it aborts
-- too: `a + b` in a loop ran several times slower for the rest of the process after
-- some calls of dl.grad (tests/lua/test_jit.lua; docs/performance.md, "Measurements
-- behind the code").

-- The one place a tensor is made from a handle id (0: the call failed): inline when the
-- engine finds it small and unaliased, else the handle. `deliver` leaves the collector
-- alone, for a caller that stepped it before the op allocated (fresh, below); wrap
-- steps it first.
local function deliver(id)
  if id == 0 then return raise_last() end
  local r = Tensor()
  local st = C.dl_deliver(id, r)
  if st == 0 then return r end
  if st < 0 then return raise_last() end
  own(r, r.id)
  return r
end

local function wrap(id)
  if total[0] - mark[0] > budget[0] then collect() end
  local r = deliver(id)
  return r
end
M.wrap = wrap

-- A fresh value for an entry point to write its result into. The collector is stepped
-- here, before the op allocates, not after: the garbage of earlier ops (a loop's previous
-- result) is freed first and its memory reused at once, so that `c = a + b` in a loop
-- takes turns between two buffers, as PyTorch's reference counting does, not three.
local function result()
  if total[0] - mark[0] > budget[0] then collect() end
  local r = Tensor()
  return r
end

-- The proxies of the compiled call in progress (2 or 3 from an op: Note [Proxies] in
-- bindings/capi_compile.cpp), kept referenced until scripts/dlua/compile.lua settles
-- them at the call's end; for an op just recorded (3), its line goes to the trace.
local proxies = { n = 0 }
M.proxies = proxies
local where = core.where
local function anchor(st, r)
  local n = proxies.n + 1
  proxies.n = n
  proxies[n] = r
  if st == 3 then C.dl_compile_line(r.inl_slot, where()) end
  return r
end

-- The result r of an entry point that returned status st: 0 inline, 1 a handle, 2 or 3
-- a compiled call's proxy, -1 an error.
local function value(st, r)
  if st == 0 then return r end
  if st >= 2 then return anchor(st, r) end
  if st < 0 then return raise_last() end
  own(r, r.id)
  return r
end
M.result, M.value = result, value

-- The handle id of x, for the entry points that need one; an inline x becomes a handle
-- here, in place, and is tracked from then on.
local function hid(x)
  local id = x.id
  if id ~= 0 then return id end
  id = C.dl_promote(x)
  if id == 0 then return raise_last() end
  own(x, id)
  return id
end
M.hid = hid
M.own = own

-- wrap(f(...)) with one retry after a collection when the tensor memory limit refused
-- the allocation. For the calls off the hot paths (those repeat the call inline).
local function new(f, ...)
  local id = f(...)
  if id == 0 and retry() then id = f(...) end
  return wrap(id)
end
M.new = new

-- new(f, ...), the collector stepped before f allocates, as result() does for the ops:
-- a loop's previous result (`h = x:half()`) is freed first and its block reused.
-- Stepped after (wrap), each call held a block more, and took a fresh one whenever the
-- cache had given its blocks back: paging in fresh memory cost many times the
-- conversion itself (docs/performance.md, "Half precision: conversions"). Only for
-- calls whose tensor operands are the caller's live values: an id taken from a
-- temporary, as in fresh(f, hid(a * b)), is released by the collection before f reads
-- it. Nor for calls that read a shared buffer filled before (the creation functions'
-- shape_buf): a finalizer run by the collection may make a tensor and refill it.
local function fresh(f, ...)
  if total[0] - mark[0] > budget[0] then collect() end
  local id = f(...)
  if id == 0 and retry() then id = f(...) end
  local r = deliver(id)
  return r
end

-- The n (2 or 3) results a C call writes into outs, its last argument (a fresh cell:
-- Note [Values C writes back]), wrapped; the call returns a status and is retried once
-- after a collection, as new() does.
local function several(n, f, ...)
  local outs = select(select("#", ...), ...)
  local st = f(...)
  if st ~= 0 and retry() then st = f(...) end
  if st ~= 0 then return raise_last() end
  local a, b, c = outs[0], outs[1], outs[2]
  if n == 2 then return wrap(a), wrap(b) end
  return wrap(a), wrap(b), wrap(c)
end
M.several = several

local function is_tensor(x)
  local yes = istype(Tensor, x)
  return yes
end
M.is_tensor = is_tensor

-- x itself when it is floating point, else x in the default dtype (an integer or bool
-- input to a function whose values are not whole, as PyTorch's)
function M.floating(x)
  if not x:is_floating_point() then x = x:to(dl.get_default_dtype()) end
  return x
end

-- ---- argument helpers --------------------------------------------------------------------

local function check_tensor(op, x)
  if not istype(Tensor, x) then bad_arg(op, "a tensor", x) end
end
M.check_tensor = check_tensor


local function int_arg(op, v, what)
  if type(v) ~= "number" then bad_arg(op, "an integer " .. what, v) end
  if v ~= floor(v) or v > 9007199254740992 or v < -9007199254740992 then
    raise(op .. ": expected an integer " .. what .. ", got " .. tostring(v))
  end
  return v
end

-- A dim for an `int` parameter (C checks the range, in Lua terms).
local function dim_arg(op, v)
  int_arg(op, v, "dimension")
  if v > 1e6 or v < -1e6 then
    raise(op .. ": dimension " .. tostring(v) .. " out of range")
  end
  return v
end

-- The engine's message for a dim out of range, for the few dims that Lua checks
-- itself (0 is "no dim" in the C ABI where a dim is optional).
local function dim_error(op, d, n)
  local m = n > 0 and n or 1
  raise(op .. ": dimension " .. tostring(d) .. " out of range for a tensor of " .. n
        .. (n == 1 and " dimension" or " dimensions") .. " (expected 1.." .. m .. " or -" .. m .. "..-1)")
end

-- A value a C call writes back: a fresh cell per call (Note [Values C writes back]).
local double1 = ffi.typeof("double[1]")
local handles2 = ffi.typeof("uint64_t[2]")
M.handles2 = handles2   -- sorting.lua and nn/functional.lua write theirs into it too
local shape_buf = ffi_new("int64_t[8]")
local dims_buf = ffi_new("int32_t[8]")
local dl_meta_t = ffi.typeof("dl_meta")

-- Note [Values C writes back]
-- Every buffer a C call fills for Lua to read is fresh per call, never one shared
-- module-level cell. LuaJIT 2.1's x64 backend fuses a load into the instruction that
-- uses it, and its conflict check looks for stores in the trace, not for C calls in
-- between (the same class as LuaJIT issue #1117). With one shared cell, once a caller
-- is compiled, `getd(i) == getd(i + 1)` becomes
--     call filld; movsd xmm0, [cell]; ucomisd xmm0, [cell]
-- the first value read after the second call wrote the cell: b:size(1) == a:size(1)
-- compared a's size with itself (linalg's vector rule took a batch of matrices for
-- vectors). A fresh cell is written once, so a late read still sees its own value.
-- Buffers Lua fills for C to read (shape_buf, dims_buf) are safe to share. The test
-- in tests/lua/test_props.lua loops such comparisons until the traces are compiled.
local function get_meta(x)
  local meta = dl_meta_t()
  if C.dl_meta_get(x, meta) ~= 0 then raise_last() end
  return meta
end
M.meta = get_meta

local function shape_of(x)
  local m = get_meta(x)
  local t = {}
  for i = 0, m.ndim - 1 do t[i + 1] = m.sizes[i] end
  return t
end

-- "(2, 3)", "(5,)", "()" as Python prints tuples (and the engine prints shapes).
local function shape_str(s)
  if istype(Tensor, s) then s = shape_of(s) end
  local parts = {}
  for i = 1, #s do parts[i] = tostring(s[i]) end
  if #s == 1 then return "(" .. parts[1] .. ",)" end
  return "(" .. concat(parts, ", ") .. ")"
end
M.shape_str = shape_str

-- For functions made of several ops: an error naming op unless the shapes of a and b
-- (tensors or numbers) broadcast together, as the elementwise ops would raise it.
function M.check_broadcast(op, a, b)
  if not istype(Tensor, a) or not istype(Tensor, b) then return end
  local sa, sb = a.shape, b.shape
  for i = 1, math.min(#sa, #sb) do
    local x, y = sa[#sa - i + 1], sb[#sb - i + 1]
    if x ~= y and x ~= 1 and y ~= 1 then
      raise(op .. ": shapes " .. shape_str(sa) .. " and " .. shape_str(sb) .. " cannot be broadcast")
    end
  end
end

local function dtype_of(x)
  local d = C.dl_dtype(x)
  if d < 0 then raise_last() end
  return d
end

local function dtype_code(op, name)
  local c = type(name) == "string" and dtype_codes[name]
  if not c then
    if type(name) ~= "string" then bad_arg(op, "a dtype name", name) end
    raise(op .. ": unknown dtype '" .. name
          .. "' (expected float32, float64, float16, bfloat16, int32, int64, uint8 or bool)")
  end
  return c
end
M.dtype_code = dtype_code

local function check_device(op, dev)
  if type(dev) ~= "string" then bad_arg(op, "a device name", dev) end
  if C.dl_check_device(dev) ~= 0 then
    raise(op .. ": unknown device '" .. dev .. "' (expected \"cpu\", \"cuda\" or \"cuda:N\")")
  end
  return dev
end

-- opts: nil, a dtype or device name, or {dtype =, device =, ...}.
local function parse_opts(op, opts)
  if opts == nil then return nil, nil end
  if type(opts) == "string" then
    local c = dtype_codes[opts]
    if c then return c, nil end
    if C.dl_check_device(opts) == 0 then return nil, opts end
    raise(op .. ": unknown dtype or device '" .. opts .. "'")
  end
  if type(opts) ~= "table" then bad_arg(op, "an options table", opts) end
  for k in pairs(opts) do
    if not M.option_names[k] then
      raise(op .. ": unknown option '" .. tostring(k) .. "'")
    end
  end
  local code, dev = nil, nil
  if opts.dtype ~= nil then code = dtype_code(op, opts.dtype) end
  if opts.device ~= nil then dev = check_device(op, opts.device) end
  return code, dev
end
M.parse_opts = parse_opts

local function finish(t, opts)
  local hook = M.creation_hook
  if hook and type(opts) == "table" then return hook(t, opts) end
  return t
end

-- Sizes given as varargs or as one table, into shape_buf; returns ndim and, when
-- allowed, a trailing options table or dtype name.
local function parse_shape(op, allow_opts, ...)
  local n = select("#", ...)
  local first = ...
  local nd, opts = 0, nil
  if type(first) == "table" then
    nd = #first
    if nd > 8 then raise(op .. ": at most 8 dimensions are supported, got " .. nd) end
    for i = 1, nd do shape_buf[i - 1] = int_arg(op, first[i], "size") end
    if n > 1 then
      if not allow_opts or n > 2 then raise(op .. ": unexpected arguments after the shape table") end
      opts = select(2, ...)
    end
    return nd, opts
  end
  for i = 1, n do
    local v = select(i, ...)
    if type(v) == "number" then
      if nd >= 8 then raise(op .. ": at most 8 dimensions are supported") end
      shape_buf[nd] = int_arg(op, v, "size")
      nd = nd + 1
    elseif i == n and allow_opts and (type(v) == "table" or type(v) == "string") then
      opts = v
    elseif i == n and v == nil then  -- a trailing nil (an absent optional argument)
    else
      bad_arg(op, "sizes (numbers or one table of numbers)", v)
    end
  end
  return nd, opts
end
M.parse_shape = parse_shape

local function fill_shape_from(x)
  local m = get_meta(x)
  for i = 0, m.ndim - 1 do shape_buf[i] = m.sizes[i] end
  return m.ndim
end

-- ---- the op families, looped from the op table ----------------------------------------------

-- A second argument to an op of one operand: round's decimals (dlua.pointwise), an
-- error for every other op (never dropped).
local function unary_extra(name, x, extra)
  if name ~= "round" then raise(name .. ": expected one operand, got a second (" .. typename(extra) .. ")") end
  local v = require("dlua.pointwise").round_decimals(x, extra)
  return v
end

local function unary_fn(op, name)
  return function(x, extra)
    if not istype(Tensor, x) then return bad_arg(name, "a tensor", x) end
    if extra ~= nil then return unary_extra(name, x, extra) end
    local r = result()
    local st = C.dl_unary(op, x, r)
    if st < 0 and retry() then st = C.dl_unary(op, x, r) end
    return value(st, r)
  end
end

-- a (op) b for the binary and comparison families: tensor and tensor, tensor and number,
-- number and tensor (the engine's scalar_first), through `entry` and `entry_scalar` (the
-- family's two C entry points). Comparisons also take booleans, as 1 and 0.
-- A third argument: div's rounding_mode and add's and sub's alpha (dlua.pointwise), an
-- error for every other op (never dropped).
local function third_argument(name, a, b, c)
  if name ~= "div" and name ~= "add" and name ~= "sub" then
    raise(name .. ": expected two operands, got a third (" .. typename(c) .. ")")
  end
  local v = require("dlua.pointwise").with_options(name, a, b, c)
  return v
end

local function pointwise2_fn(op, name, entry, entry_scalar, bools)
  return function(a, b, c)
    if c ~= nil then
      local v = third_argument(name, a, b, c)
      return v
    end
    if bools then
      if type(b) == "boolean" then b = b and 1 or 0 end
      if type(a) == "boolean" then a = a and 1 or 0 end
    end
    local r, st = result(), nil
    if istype(Tensor, a) then
      if istype(Tensor, b) then
        st = entry(op, a, b, r)
        if st < 0 and retry() then st = entry(op, a, b, r) end
      elseif type(b) == "number" then
        st = entry_scalar(op, a, b, 0, r)
        if st < 0 and retry() then st = entry_scalar(op, a, b, 0, r) end
      else
        return bad_arg(name, "a tensor or a number", b)
      end
    elseif istype(Tensor, b) then
      if type(a) ~= "number" then return bad_arg(name, "a tensor or a number", a) end
      st = entry_scalar(op, b, a, 1, r)
      if st < 0 and retry() then st = entry_scalar(op, b, a, 1, r) end
    else
      return raise(name .. ": expected a tensor, got " .. typename(a) .. " and " .. typename(b))
    end
    return value(st, r)
  end
end

local function binary_fn(op, name) return pointwise2_fn(op, name, C.dl_binary, C.dl_binary_scalar, false) end
local function compare_fn(op, name) return pointwise2_fn(op, name, C.dl_compare, C.dl_compare_scalar, true) end

-- x:add_(y, {alpha = k}) and x:sub_: y scaled first, then the in-place kernel (its cast
-- and shape rules, recorded as any in-place op). x:div_(y, {rounding_mode = m}): the
-- rounded quotient (whose gradient is zero) written into x under the same rules.
local function inplace_options(iname, name, a, b, c)
  local P = require("dlua.pointwise")
  if name ~= "div" then return P.scaled_operand(iname, a, b, c) end
  local mode = P.rounding_mode(iname, c)
  if mode == nil then return b end
  local v = third_argument(name, a, b, c)
  if v.dtype ~= a.dtype and not dl.can_cast(v.dtype, a.dtype) then
    raise(iname .. ": result dtype " .. v.dtype .. " cannot be stored in the in-place target of dtype " .. a.dtype)
  end
  M.write_into(iname, a, v)   -- (its shape check too: v may not be larger than a)
  return nil
end

local function binary_inplace_fn(op, name)
  local iname = name .. "_"
  return function(a, b, c)
    if not istype(Tensor, a) then return bad_arg(iname, "a tensor", a) end
    if c ~= nil then
      if name ~= "div" and name ~= "add" and name ~= "sub" then
        raise(iname .. ": expected two operands, got a third (" .. typename(c) .. ")")
      end
      b = inplace_options(iname, name, a, b, c)
      if b == nil then return a end
    end
    local st
    if istype(Tensor, b) then
      st = C.dl_binary_(op, hid(a), hid(b))
      if st ~= 0 and retry() then st = C.dl_binary_(op, hid(a), hid(b)) end
    elseif type(b) == "number" then
      st = C.dl_binary_scalar_(op, hid(a), b)
      if st ~= 0 and retry() then st = C.dl_binary_scalar_(op, hid(a), b) end
    else
      return bad_arg(iname, "a tensor or a number", b)
    end
    if st ~= 0 then return raise_last() end
    return a
  end
end

-- x:copy_(y) as the write of the in-place op `op`, whose name its errors carry.
local function write_into(op, x, y)
  if C.dl_copy_(hid(x), hid(y)) ~= 0 then
    raise((ffi.string(C.dl_last_error()):gsub("^copy_:", op .. ":", 1)))
  end
  return x
end
M.write_into = write_into

-- Whether x's elements share memory (an expanded view: a dim of stride 0 and size > 1),
-- which in-place ops refuse (check_no_overlap in tensor/pointwise.cpp).
function M.overlapping(x)
  for d = 1, x:dim() do
    if x:stride(d) == 0 and x:size(d) > 1 then return true end
  end
  return false
end

-- x = y in place, for ops that have no in-place kernel (exp_, clamp_, masked_fill_).
local function assign(op, x, y)
  local dx, dy = dtype_of(x), dtype_of(y)
  if dx ~= dy then
    raise(op .. ": result dtype " .. dtype_names[dy]
          .. " cannot be stored in the in-place target of dtype " .. dtype_names[dx])
  end
  return write_into(op, x, y)
end

local function unary_inplace_fn(op, name)
  local f = unary_fn(op, name)
  local iname = name .. "_"
  return function(x)
    if not istype(Tensor, x) then return bad_arg(iname, "a tensor", x) end
    return assign(iname, x, f(x))
  end
end

-- The options each reduction takes (var and std their correction, norm its p; the rest
-- none: an option given to a reduction that has no use for it is an error, not dropped).
local VARIANCE_OPTS, NORM_OPTS, NO_OPTS = { correction = true, unbiased = true }, { p = true }, {}
local DTYPE_OPTS = { dtype = true }   -- sum, mean, prod: x converted to dtype first (PyTorch's)
local REDUCE_OPTS = { var = VARIANCE_OPTS, std = VARIANCE_OPTS, norm = NORM_OPTS, sum = DTYPE_OPTS, mean = DTYPE_OPTS,
                      prod = DTYPE_OPTS }

-- (x [, dim | {dims}] [, keepdim] [, opts]): fills dims_buf; returns ndims, keepdim, opts.
local function reduce_args(name, x, a, b, c)
  if not istype(Tensor, x) then bad_arg(name, "a tensor", x) end
  if type(a) == "boolean" and REDUCE_OPTS[name] == VARIANCE_OPTS and b == nil and c == nil then
    a = { unbiased = a }   -- x:var(false): PyTorch's positional unbiased
  end
  local nd, keepdim, opts = 0, false, nil
  if type(a) == "number" then
    dims_buf[0] = dim_arg(name, a)
    nd = 1
  elseif type(a) == "table" then
    if a[1] ~= nil or next(a) == nil then
      nd = #a
      if nd > 8 then raise(name .. ": at most 8 dimensions, got " .. nd) end
      for i = 1, nd do dims_buf[i - 1] = dim_arg(name, a[i]) end
    else
      opts, b, c = a, nil, nil
    end
  elseif a ~= nil then
    bad_arg(name, "a dimension", a)
  end
  if type(b) == "boolean" then
    keepdim = b
    opts = opts or c
  elseif type(b) == "table" then
    opts = b
  elseif b ~= nil then
    bad_arg(name, "keepdim (a boolean)", b)
  else
    opts = opts or c
  end
  if opts ~= nil then
    if type(opts) ~= "table" then bad_arg(name, "an options table", opts) end
    local known = REDUCE_OPTS[name] or NO_OPTS
    for k in pairs(opts) do
      if not known[k] then raise(name .. ": unknown option '" .. tostring(k) .. "'") end
    end
  end
  return nd, keepdim, opts
end

local function reduce_fn(op, name)
  return function(x, a, b, c)
    local nd, keepdim, opts = reduce_args(name, x, a, b, c)
    local corr, p = 1, 2
    if opts then
      if opts.dtype ~= nil then
        if dtype_codes[opts.dtype] == nil then raise(name .. ": unknown dtype '" .. tostring(opts.dtype) .. "'") end
        x = x:to(opts.dtype)
      end
      if opts.correction ~= nil then corr = opts.correction
      elseif opts.unbiased == false then corr = 0 end
      if opts.p ~= nil then p = opts.p end
      if type(corr) ~= "number" then bad_arg(name, "a number for correction", corr) end
      if type(p) ~= "number" then bad_arg(name, "a number for p", p) end
    end
    local k = keepdim and 1 or 0
    local r = result()
    local st = C.dl_reduce(op, x, dims_buf, nd, k, corr, p, r)
    if st < 0 and retry() then st = C.dl_reduce(op, x, dims_buf, nd, k, corr, p, r) end
    return value(st, r)
  end
end

local ops = core.ops
local F = {}   -- name -> function, for every op of the families
M.F = F
for _, op in ipairs(core.op_list) do
  local name, id = op.name, op.id
  if op.family == "unary" then
    F[name] = unary_fn(id, name)
    methods[name .. "_"] = unary_inplace_fn(id, name)
  elseif op.family == "binary" then
    F[name] = binary_fn(id, name)
    methods[name .. "_"] = binary_inplace_fn(id, name)
  elseif op.family == "compare" then
    F[name] = compare_fn(id, name)
  elseif op.family == "reduce" then
    F[name] = reduce_fn(id, name)
  end
  if F[name] then
    methods[name] = F[name]
    dl[name] = F[name]
  end
end

-- dl.polygamma(n, x) takes n first, as PyTorch's (the op's first operand): a whole
-- number, or a tensor of them (elementwise; each rounded to the nearest whole number,
-- NaN below 0); x:polygamma(n) is its method.
do
  local polygamma = F.polygamma
  local function checked(n, x)
    if type(n) == "number" and (n ~= floor(n) or n < 0 or n == math.huge) then
      raise("polygamma: n must be a whole number >= 0, got " .. tostring(n))
    end
    local v = polygamma(n, x)
    return v
  end
  dl.polygamma = checked   -- (T.F keeps the op itself, as for every op of the table)
  methods.polygamma = function(x, n)
    local v = checked(n, x)
    return v
  end
end

local add, sub, mul, div, remainder, pow = F.add, F.sub, F.mul, F.div, F.remainder, F.pow
local neg = F.neg
local eq, ne, lt, le, gt, ge = F.eq, F.ne, F.lt, F.le, F.gt, F.ge
local amax, amin = F.amax, F.amin
local OP_ANY, OP_ALL = ops.any.id, ops.all.id

-- Common aliases.
methods.mod, dl.mod = remainder, remainder
methods.negative = neg

-- any/all over everything give a Lua boolean (so `if x:any() then` works); over dims,
-- a bool tensor.
local function truth(op, name)
  local f = F[name]
  return function(x, a, b, c)
    if a == nil and b == nil and c == nil then
      check_tensor(name, x)
      local r = result()
      local st = C.dl_reduce(op, x, dims_buf, 0, 0, 1, 2, r)
      if st < 0 and retry() then st = C.dl_reduce(op, x, dims_buf, 0, 0, 1, 2, r) end
      local t = value(st, r)
      local v = double1()
      if C.dl_item(t, v) ~= 0 then raise_last() end
      return v[0] ~= 0
    end
    return f(x, a, b, c)
  end
end
methods.any, dl.any = truth(OP_ANY, "any"), truth(OP_ANY, "any")
methods.all, dl.all = truth(OP_ALL, "all"), truth(OP_ALL, "all")

-- ---- max/min, argmax/argmin ---------------------------------------------------------------

local function extremum(is_max)
  local name = is_max and "max" or "min"
  local whole = is_max and amax or amin
  local elementwise = is_max and F.maximum or F.minimum
  return function(x, dim, keepdim, opts)
    check_tensor(name, x)
    if istype(Tensor, dim) then return elementwise(x, dim) end
    if dim == nil and C.dl_numel(x) == 0 then
      raise(name .. ": an empty tensor (shape " .. shape_str(x.shape) .. ") has no " .. name
            .. "; give a dim to reduce over one of its sizes")
    end
    if dim == nil or type(dim) == "table" then return whole(x, dim, keepdim, opts) end
    dim_arg(name, dim)
    if keepdim ~= nil and type(keepdim) ~= "boolean" then bad_arg(name, "keepdim (a boolean)", keepdim) end
    local k = keepdim and 1 or 0
    local st, out2 = nil, handles2()
    if is_max then st = C.dl_max_dim(hid(x), dim, k, out2) else st = C.dl_min_dim(hid(x), dim, k, out2) end
    if st ~= 0 and retry() then
      if is_max then st = C.dl_max_dim(hid(x), dim, k, out2) else st = C.dl_min_dim(hid(x), dim, k, out2) end
    end
    if st ~= 0 then return raise_last() end
    local v, i = out2[0], out2[1]
    return wrap(v), wrap(i)
  end
end
methods.max, dl.max = extremum(true), extremum(true)
methods.min, dl.min = extremum(false), extremum(false)

local function arg_extremum(is_max)
  local name = is_max and "argmax" or "argmin"
  return function(x, dim, keepdim)
    check_tensor(name, x)
    local d = 0
    if dim ~= nil then
      d = dim_arg(name, dim)
      if d == 0 then dim_error(name, 0, C.dl_ndim(x)) end
    end
    if keepdim ~= nil and type(keepdim) ~= "boolean" then bad_arg(name, "keepdim (a boolean)", keepdim) end
    local k = keepdim and 1 or 0
    if is_max then return new(C.dl_argmax, hid(x), d, k) end
    return new(C.dl_argmin, hid(x), d, k)
  end
end
methods.argmax, dl.argmax = arg_extremum(true), arg_extremum(true)
methods.argmin, dl.argmin = arg_extremum(false), arg_extremum(false)

local function softmax_fn(name, is_log)
  local log = is_log and 1 or 0
  return function(x, dim)
    check_tensor(name, x)
    local d = -1
    if dim ~= nil then d = dim_arg(name, dim) end
    local r = result()
    local st = C.dl_softmax_value(x, d, log, r)
    if st < 0 and retry() then st = C.dl_softmax_value(x, d, log, r) end
    return value(st, r)
  end
end
methods.softmax, dl.softmax = softmax_fn("softmax", false), softmax_fn("softmax", false)
methods.log_softmax, dl.log_softmax = softmax_fn("log_softmax", true), softmax_fn("log_softmax", true)

-- x:cumsum(dim), x:cumprod(dim): running sums and products along dim (as PyTorch's;
-- integer and bool tensors give int64; {dtype =} converts x first, as PyTorch's).
-- Differentiable to any order (zeros included).
local function scan_fn(name, entry)
  return function(x, dim, opts)
    check_tensor(name, x)
    if dim == nil then raise(name .. ": expected the dim to run along (as x:" .. name .. "(1))") end
    local dtype = opts ~= nil and core.options(name, opts, DTYPE_OPTS).dtype
    if dtype then
      if dtype_codes[dtype] == nil then raise(name .. ": unknown dtype '" .. tostring(dtype) .. "'") end
      x = x:to(dtype)
    end
    local y = new(entry, hid(x), dim_arg(name, dim))
    -- (the engine runs integers in int64: a narrower dtype asked for is given back, wrapped as
    -- its own running values would be)
    if dtype and y.dtype ~= dtype then y = y:to(dtype) end
    return y
  end
end
methods.cumsum, methods.cumprod = scan_fn("cumsum", C.dl_cumsum), scan_fn("cumprod", C.dl_cumprod)
dl.cumsum, dl.cumprod = methods.cumsum, methods.cumprod

-- ---- properties, conversion --------------------------------------------------------------------

props.shape = shape_of
props.dtype = function(x) return dtype_names[dtype_of(x)] end
local function device_of(x)
  local m = get_meta(x)
  if m.device_type == 0 then return "cpu" end
  return "cuda:" .. tostring(m.device_index)
end
props.device = device_of
props.ndim = function(x) return get_meta(x).ndim end
M.device_of = device_of

function methods.dim(x)
  check_tensor("dim", x)
  local n = C.dl_ndim(x)
  if n < 0 then raise_last() end
  return n
end

function methods.numel(x)
  check_tensor("numel", x)
  local n = C.dl_numel(x)
  if n < 0 then raise_last() end
  return n
end
methods.nelement = methods.numel
dl.numel = methods.numel

local function size_or_stride(name, strides)
  return function(x, d)
    check_tensor(name, x)
    local m = get_meta(x)
    if d == nil then
      local t = {}
      for i = 0, m.ndim - 1 do t[i + 1] = strides and m.strides[i] or m.sizes[i] end
      return t
    end
    dim_arg(name, d)
    local n = m.ndim
    local i
    if d >= 1 and d <= n then i = d - 1 elseif d <= -1 and d >= -n then i = n + d end
    if not i then
      raise(name .. ": dimension " .. tostring(d) .. " out of range for a tensor of " .. n
            .. (n == 1 and " dimension" or " dimensions"))
    end
    if strides then return m.strides[i] end
    return m.sizes[i]
  end
end
methods.size = size_or_stride("size", false)
methods.stride = size_or_stride("stride", true)

function methods.is_contiguous(x)
  return get_meta(x).contiguous ~= 0
end

local FLOATS = { [FLOAT32] = true, [FLOAT64] = true, [dtype_codes.float16] = true, [dtype_codes.bfloat16] = true }
function methods.is_floating_point(x)
  return FLOATS[dtype_of(x)] == true
end

function methods.item(x)
  check_tensor("item", x)
  local v = double1()
  if C.dl_item(x, v) ~= 0 then raise_last() end
  if C.dl_dtype(x) == BOOL then return v[0] ~= 0 end
  return v[0]
end

-- All values, row-major, into a fresh double array; returns it and the count.
local function read_all(x)
  local n = C.dl_numel(x)
  if n < 0 then raise_last() end
  local buf = ffi_new("double[?]", n > 0 and n or 1)
  if C.dl_read(x, buf, n) ~= 0 then raise_last() end
  return buf, n
end
M.read_all = read_all

function methods.totable(x)
  check_tensor("totable", x)
  local shape = shape_of(x)
  local is_bool = dtype_of(x) == BOOL
  local buf = read_all(x)
  local nd = #shape
  if nd == 0 then
    if is_bool then return buf[0] ~= 0 end
    return buf[0]
  end
  local k = 0
  local function build(d)
    local t = {}
    local n = shape[d]
    if d == nd then
      if is_bool then
        for i = 1, n do t[i] = buf[k] ~= 0; k = k + 1 end
      else
        for i = 1, n do t[i] = buf[k]; k = k + 1 end
      end
    else
      for i = 1, n do t[i] = build(d + 1) end
    end
    return t
  end
  return build(1)
end

-- (x, a parameter, stays alive through fresh's collection.)
local function to_dtype(x, code)
  if dtype_of(x) == code then return x end
  local r = fresh(C.dl_to, hid(x), code)
  return r
end
M.to_dtype = to_dtype

local function to_device(x, dev)
  if device_of(x) == dev or (dev == "cuda" and device_of(x) == "cuda:0") then return x end
  local id = C.dl_to_device(hid(x), dev)
  if id == 0 and retry() then id = C.dl_to_device(hid(x), dev) end
  return wrap(id)
end

-- x:to("float64"), x:to("cuda"), x:to(other_tensor), x:to({dtype =, device =}).
function methods.to(x, what)
  check_tensor("to", x)
  if istype(Tensor, what) then
    return to_device(to_dtype(x, dtype_of(what)), device_of(what))
  end
  local code, dev = parse_opts("to", what)
  if code then x = to_dtype(x, code) end
  if dev then x = to_device(x, dev) end
  return x
end

local function caster(name, code)
  return function(x)
    check_tensor(name, x)
    return to_dtype(x, code)
  end
end
methods.float = caster("float", FLOAT32)
methods.double = caster("double", FLOAT64)
methods.half = caster("half", dtype_codes.float16)          -- storage: ops compute in float32
methods.bfloat16 = caster("bfloat16", dtype_codes.bfloat16)
methods.long = caster("long", INT64)
methods.int = caster("int", INT32)
methods.byte = caster("byte", UINT8)
methods.bool = caster("bool", BOOL)
function methods.cuda(x) check_tensor("cuda", x) return to_device(x, check_device("cuda", "cuda")) end
function methods.cpu(x) check_tensor("cpu", x) return to_device(x, "cpu") end
function methods.type(x, name)
  check_tensor("type", x)
  if name == nil then return dtype_names[dtype_of(x)] end
  return to_dtype(x, dtype_code("type", name))
end

function methods.clone(x)
  check_tensor("clone", x)
  local id = C.dl_clone(hid(x))
  if id == 0 and retry() then id = C.dl_clone(hid(x)) end
  return wrap(id)
end

function methods.contiguous(x)
  check_tensor("contiguous", x)
  if get_meta(x).contiguous ~= 0 then return x end
  local id = C.dl_contiguous(hid(x))
  if id == 0 and retry() then id = C.dl_contiguous(hid(x)) end
  return wrap(id)
end

-- The address of element 0 as a Lua number, for a host embedding dlua (a sandbox
-- removes it: see M.restrict).
function methods.data_ptr(x)
  check_tensor("data_ptr", x)
  local v = double1()
  if C.dl_data_ptr(hid(x), v) ~= 0 then raise_last() end
  return v[0]
end

-- ---- views and indexing ------------------------------------------------------------------------

-- In a compiled call, a view of a promised result is a step of the call (dl_view_value:
-- which 0 reshape, 1 view, 2 transpose, 3 squeeze, 4 unsqueeze), so that the plan goes
-- on through it; nil when it is not (the handle entries below then run it).
local function deferred_view(x, which, nd, d1, d2)
  if C.dl_compile_active() == 0 then return nil end
  local r = result()
  local st = C.dl_view_value(x, which, shape_buf, nd, d1, d2, r)
  if st == -2 then return nil end
  return value(st, r)
end

function methods.view(x, ...)
  check_tensor("view", x)
  local nd = parse_shape("view", false, ...)
  local v = deferred_view(x, 1, nd, 0, 0)
  if v then return v end
  return wrap(C.dl_view(hid(x), shape_buf, nd))
end

function methods.reshape(x, ...)
  check_tensor("reshape", x)
  local nd = parse_shape("reshape", false, ...)
  local v = deferred_view(x, 0, nd, 0, 0)
  if v then return v end
  local id = C.dl_reshape(hid(x), shape_buf, nd)
  if id == 0 and retry() then id = C.dl_reshape(hid(x), shape_buf, nd) end
  return wrap(id)
end

function methods.view_as(x, y)
  check_tensor("view_as", x)
  check_tensor("view_as", y)
  return wrap(C.dl_view(hid(x), shape_buf, fill_shape_from(y)))
end

function methods.reshape_as(x, y)
  check_tensor("reshape_as", x)
  check_tensor("reshape_as", y)
  return wrap(C.dl_reshape(hid(x), shape_buf, fill_shape_from(y)))
end

function methods.expand(x, ...)
  check_tensor("expand", x)
  local nd = parse_shape("expand", false, ...)
  return wrap(C.dl_expand(hid(x), shape_buf, nd))
end

function methods.expand_as(x, y)
  check_tensor("expand_as", x)
  check_tensor("expand_as", y)
  return wrap(C.dl_expand(hid(x), shape_buf, fill_shape_from(y)))
end

function methods.transpose(x, d1, d2)
  check_tensor("transpose", x)
  d1, d2 = dim_arg("transpose", d1), dim_arg("transpose", d2)
  local v = deferred_view(x, 2, 0, d1, d2)
  if v then return v end
  return wrap(C.dl_transpose(hid(x), d1, d2))
end

function methods.t(x)
  check_tensor("t", x)
  local n = C.dl_ndim(x)
  if n < 2 then return x end
  if n > 2 then
    raise("t: expected a tensor with at most 2 dimensions, got shape " .. shape_str(x))
  end
  local v = deferred_view(x, 2, 0, 1, 2)
  if v then return v end
  return wrap(C.dl_transpose(hid(x), 1, 2))
end

function methods.permute(x, ...)
  check_tensor("permute", x)
  local first = ...
  local n
  if type(first) == "table" then
    n = #first
    if n > 8 then raise("permute: at most 8 dimensions") end
    for i = 1, n do dims_buf[i - 1] = dim_arg("permute", first[i]) end
  else
    n = select("#", ...)
    if n > 8 then raise("permute: at most 8 dimensions") end
    for i = 1, n do dims_buf[i - 1] = dim_arg("permute", (select(i, ...))) end
  end
  return wrap(C.dl_permute(hid(x), dims_buf, n))
end

function methods.squeeze(x, d)
  check_tensor("squeeze", x)
  if d == 0 then dim_error("squeeze", 0, C.dl_ndim(x)) end
  d = d == nil and 0 or dim_arg("squeeze", d)
  local v = deferred_view(x, 3, 0, d, 0)
  if v then return v end
  return wrap(C.dl_squeeze(hid(x), d))
end

function methods.unsqueeze(x, d)
  check_tensor("unsqueeze", x)
  d = dim_arg("unsqueeze", d)
  local v = deferred_view(x, 4, 0, d, 0)
  if v then return v end
  return wrap(C.dl_unsqueeze(hid(x), d))
end

function methods.flatten(x, s, e)
  check_tensor("flatten", x)
  s = s == nil and 1 or dim_arg("flatten", s)
  e = e == nil and -1 or dim_arg("flatten", e)
  return wrap(C.dl_flatten(hid(x), s, e))
end

local function select_(x, d, i)
  return wrap(C.dl_select(hid(x), d, i))
end

function methods.select(x, d, i)
  check_tensor("select", x)
  return select_(x, dim_arg("select", d), int_arg("select", i, "index"))
end

function methods.narrow(x, d, start, len)
  check_tensor("narrow", x)
  if istype(Tensor, start) then   -- a 0-dim integer tensor, as PyTorch's
    if start:dim() ~= 0 or start:is_floating_point() or start.dtype == "bool" then
      raise("narrow: start must be an integer or a 0-dim integer tensor, got a " .. start.dtype .. " tensor of shape "
            .. shape_str(start.shape))
    end
    start = start:item()
  end
  return wrap(C.dl_narrow(hid(x), dim_arg("narrow", d), int_arg("narrow", start, "start"),
                          int_arg("narrow", len, "length")))
end

-- Elements start, start + step, ... up to stop (inclusive, Lua style) along dim d;
-- negative bounds count from the end, and bounds are clamped to the dim.
function methods.slice(x, d, start, stop, step)
  check_tensor("slice", x)
  start = start == nil and 1 or int_arg("slice", start, "start")
  stop = stop == nil and -1 or int_arg("slice", stop, "stop")
  step = step == nil and 1 or int_arg("slice", step, "step")
  return wrap(C.dl_slice(hid(x), dim_arg("slice", d), start, stop, step))
end

-- An index given as a tensor or a Lua list of (1-based) integers.
local function index_arg(op, idx)
  if istype(Tensor, idx) then return idx end
  if type(idx) == "table" then return dl.tensor(idx, { dtype = "int64" }) end
  if type(idx) == "number" then return dl.tensor({ int_arg(op, idx, "index") }, { dtype = "int64" }) end
  return bad_arg(op, "an index tensor or a list of indices", idx)
end

function methods.index_select(x, d, idx)
  check_tensor("index_select", x)
  idx = index_arg("index_select", idx)
  return new(C.dl_index_select, hid(x), dim_arg("index_select", d), hid(idx))
end

function methods.gather(x, d, idx)
  check_tensor("gather", x)
  idx = index_arg("gather", idx)
  return new(C.dl_gather, hid(x), dim_arg("gather", d), hid(idx))
end

function methods.scatter_add(x, d, idx, src)
  check_tensor("scatter_add", x)
  idx = index_arg("scatter_add", idx)
  check_tensor("scatter_add", src)
  return new(C.dl_scatter_add, hid(x), dim_arg("scatter_add", d), hid(idx), hid(src))
end

local function list_ids(op, list)
  if type(list) ~= "table" or istype(Tensor, list) then bad_arg(op, "a list of tensors", list) end
  local n = #list
  if n == 0 then raise(op .. ": expected a non-empty list of tensors") end
  local ids = ffi_new("uint64_t[?]", n)
  for i = 1, n do
    local t = list[i]
    if not istype(Tensor, t) then
      raise(op .. ": element " .. i .. " of the list is a " .. typename(t) .. ", expected a tensor")
    end
    ids[i - 1] = hid(t)
  end
  return ids, n
end

function dl.cat(list, d)
  local ids, n = list_ids("cat", list)
  d = d == nil and 1 or dim_arg("cat", d)
  local id = C.dl_cat(ids, n, d)
  if id == 0 and retry() then id = C.dl_cat(ids, n, d) end
  return wrap(id)
end
dl.concat = dl.cat   -- (PyTorch's alias)

function dl.stack(list, d)
  local ids, n = list_ids("stack", list)
  d = d == nil and 1 or dim_arg("stack", d)
  local id = C.dl_stack(ids, n, d)
  if id == 0 and retry() then id = C.dl_stack(ids, n, d) end
  return wrap(id)
end

-- A number or boolean operand of `op` as a 0-dim tensor on `device` (the tensor
-- operands'), adapting to the other operand as a Lua number does in arithmetic: whole
-- numbers are int64 (a lower-priority 0-dim operand, so an int32 or float tensor keeps
-- its dtype), others the default float.
-- The ranges of the integer dtypes a number beside a tensor of them keeps.
local INT_RANGE = { uint8 = { 0, 255 }, int32 = { -2 ^ 31, 2 ^ 31 - 1 }, int64 = { -9.2e18, 9.2e18 } }

-- A 0-dim tensor of the number v. Beside a tensor (`beside`), v takes its dtype where
-- that holds v, as PyTorch's wrapped numbers do: 0.1 beside float64 stays 0.1, not
-- float32's 0.1 promoted; 3 beside int32 stays int32. Otherwise an integral v is int64,
-- any other the default float dtype.
local function scalar_tensor(op, v, device, beside)
  local code
  if type(v) == "boolean" then
    v, code = v and 1 or 0, BOOL
  elseif type(v) == "number" then
    local integral = v == floor(v) and v > -9.2e18 and v < 9.2e18
    local dt = beside and dtype_of(beside)
    local range = dt and INT_RANGE[dtype_names[dt]]
    if dt and (FLOATS[dt] or (range and integral and v >= range[1] and v <= range[2])) then
      code = dt
    else
      code = integral and INT64 or C.dl_default_dtype()
    end
  else
    return bad_arg(op, "a tensor or a number", v)
  end
  return new(C.dl_full, shape_buf, 0, v, code, device ~= "cpu" and device or nil)
end

M.scalar_tensor = scalar_tensor

-- Refuses a number that a tensor of dtype code `dt` cannot hold when written into it
-- (tensor/ops.h check_fits: PyTorch's "cannot be converted without overflow").
local function check_fits(op, v, dt)
  if C.dl_check_fits(op, v, dt) ~= 0 then raise_last() end
end
M.check_fits = check_fits

-- where's number beside an integer tensor, written into that dtype: one it cannot hold
-- is refused (a whole number did wrap: uint8's 300 was 44), as PyTorch's.
local function where_number(v, other)
  if type(v) == "number" and istype(Tensor, other) and v == floor(v) then
    local dt = dtype_of(other)
    if dt ~= BOOL and not FLOATS[dt] then check_fits("where", v, dt) end
  end
end

function dl.where(cond, a, b)
  check_tensor("where", cond)
  local device = (istype(Tensor, a) and a or istype(Tensor, b) and b or cond).device
  where_number(a, b)
  where_number(b, a)
  if not istype(Tensor, a) then a = scalar_tensor("where", a, device, istype(Tensor, b) and b or nil) end
  if not istype(Tensor, b) then b = scalar_tensor("where", b, device, istype(Tensor, a) and a or nil) end
  local id = C.dl_where(hid(cond), hid(a), hid(b))
  if id == 0 and retry() then id = C.dl_where(hid(cond), hid(a), hid(b)) end
  return wrap(id)
end
-- x:where(cond, y) is dl.where(cond, x, y), as in PyTorch.
function methods.where(x, cond, y) return dl.where(cond, x, y) end

local function fill_value(op, v)
  if type(v) == "boolean" then return v and 1 or 0 end
  if type(v) ~= "number" then bad_arg(op, "a number", v) end
  return v
end

function methods.masked_fill(x, mask, v)
  check_tensor("masked_fill", x)
  check_tensor("masked_fill", mask)
  if istype(Tensor, v) then   -- a 0-dim tensor value, differentiated through (as PyTorch's)
    if v:dim() ~= 0 then
      raise("masked_fill: the value must be a number or a 0-dim tensor, got a tensor of shape " .. shape_str(v.shape))
    end
    if mask.dtype ~= "bool" then raise("masked_fill: expected a bool mask, got " .. mask.dtype) end
    if v.dtype ~= x.dtype and x.dtype ~= "bool" then check_fits("masked_fill", v:item(), dtype_of(x)) end
    return dl.where(mask, v:to(x.dtype), x)
  end
  local id = C.dl_masked_fill(hid(x), hid(mask), fill_value("masked_fill", v))
  if id == 0 and retry() then id = C.dl_masked_fill(hid(x), hid(mask), fill_value("masked_fill", v)) end
  return wrap(id)
end
dl.masked_fill = methods.masked_fill

function methods.masked_fill_(x, mask, v)
  return assign("masked_fill_", x, methods.masked_fill(x, mask, v))
end

-- clamp(x, lo, hi) with either bound nil, or clamp(x, {min =, max =}).
local function clamp(x, lo, hi)
  check_tensor("clamp", x)
  if type(lo) == "table" then lo, hi = lo.min, lo.max end
  if lo ~= nil and type(lo) ~= "number" then bad_arg("clamp", "a number for min", lo) end
  if hi ~= nil and type(hi) ~= "number" then bad_arg("clamp", "a number for max", hi) end
  return new(C.dl_clamp, hid(x), lo or 0, hi or 0, lo ~= nil and 1 or 0, hi ~= nil and 1 or 0)
end
methods.clamp, dl.clamp = clamp, clamp
function methods.clamp_(x, lo, hi) return assign("clamp_", x, clamp(x, lo, hi)) end

function methods.fill_(x, v)
  check_tensor("fill_", x)
  if C.dl_fill_(hid(x), fill_value("fill_", v)) ~= 0 then raise_last() end
  return x
end

function methods.zero_(x)
  check_tensor("zero_", x)
  if C.dl_fill_(hid(x), 0) ~= 0 then raise_last() end
  return x
end

function methods.copy_(x, src)
  check_tensor("copy_", x)
  if not istype(Tensor, src) then return methods.fill_(x, src) end
  if C.dl_copy_(hid(x), hid(src)) ~= 0 then raise_last() end
  return x
end

-- ---- linear algebra -----------------------------------------------------------------------------

local function matmul(a, b)
  check_tensor("matmul", a)
  check_tensor("matmul", b)
  local r = result()
  local st = C.dl_matmul_value(a, b, r)
  if st < 0 and retry() then st = C.dl_matmul_value(a, b, r) end
  return value(st, r)
end
methods.matmul, dl.matmul = matmul, matmul

local function matmul_of_rank(name, rank)
  return function(a, b)
    check_tensor(name, a)
    check_tensor(name, b)
    if C.dl_ndim(a) ~= rank or C.dl_ndim(b) ~= rank then
      raise(name .. ": expected " .. rank .. "-D tensors, got shapes " .. shape_str(a)
            .. " and " .. shape_str(b))
    end
    return matmul(a, b)
  end
end
methods.dot, dl.dot = matmul_of_rank("dot", 1), matmul_of_rank("dot", 1)
methods.mm, dl.mm = matmul_of_rank("mm", 2), matmul_of_rank("mm", 2)
methods.bmm, dl.bmm = matmul_of_rank("bmm", 3), matmul_of_rank("bmm", 3)

-- ---- comparisons as Lua booleans -----------------------------------------------------------------

function dl.equal(a, b)
  check_tensor("equal", a)
  check_tensor("equal", b)
  local sa, sb = shape_of(a), shape_of(b)
  if #sa ~= #sb then return false end
  for i = 1, #sa do if sa[i] ~= sb[i] then return false end end
  return eq(a, b):all()
end
methods.equal = dl.equal

function dl.allclose(a, b, rtol, atol)
  check_tensor("allclose", a)
  if not istype(Tensor, b) then b = scalar_tensor("allclose", b, a.device, a) end
  rtol = rtol == nil and 1e-5 or rtol
  atol = atol == nil and 1e-8 or atol
  if type(rtol) ~= "number" then bad_arg("allclose", "a number for rtol", rtol) end
  if type(atol) ~= "number" then bad_arg("allclose", "a number for atol", atol) end
  if dtype_of(a) == BOOL then a = to_dtype(a, INT64) end
  if dtype_of(b) == BOOL then b = to_dtype(b, INT64) end
  local close = F.le(F.abs(sub(a, b)), add(mul(F.abs(b), rtol), atol))
  return F.logical_or(close, eq(a, b)):all()
end
methods.allclose = dl.allclose

-- ---- creation (scripts/dlua/creation.lua) ------------------------------------------------------

require("dlua.creation")({
  C = C, dl = dl, methods = methods, Tensor = Tensor, BOOL = BOOL, INT64 = INT64, wrap = wrap, new = new,
  retry = retry,
  raise = raise, raise_last = raise_last, bad_arg = bad_arg, typename = typename, istype = istype,
  finish = finish, shape_buf = shape_buf, parse_opts = parse_opts, parse_shape = parse_shape,
  int_arg = int_arg, fill_value = fill_value, shape_str = shape_str, shape_of = shape_of,
  ffi_new = ffi_new, ffi_cast = ffi_cast, floor = floor, dtype_of = dtype_of, dtype_code = dtype_code,
  dtype_names = dtype_names, to_dtype = to_dtype, to_device = to_device, device_of = device_of,
  check_tensor = check_tensor, fill_shape_from = fill_shape_from,
})

-- ---- dtypes, devices ---------------------------------------------------------------------------

for code, name in pairs(dtype_names) do dl[name] = name end
dl.float, dl.double, dl.long, dl.int = "float32", "float64", "int64", "int32"

function dl.device(name)
  check_device("device", name)
  if name == "cuda" or name == "gpu" then return "cuda:0" end
  return name
end

dl.cuda = {
  is_available = function() return C.dl_cuda_available() == 1 end,
}

dl.is_tensor = is_tensor

function dl.memory_stats() return L.memory_stats() end

-- ---- the metatable ----------------------------------------------------------------------------

-- x[i] on a 1-D tensor is a Lua number (a boolean for bool tensors); on others, and on
-- a 1-D tensor whose gradient is being taken (a number would drop it), the view
-- x:select(1, i).
local function index(x, k)
  if type(k) == "number" then
    if k ~= floor(k) then return raise("index: expected an integer index, got " .. tostring(k)) end
    local v = double1()
    local st = C.dl_get1(x, k, v)
    if st == 0 then return v[0] end
    if st == 2 then return v[0] ~= 0 end
    if st == 1 then return select_(x, 1, int_arg("index", k, "index")) end
    return raise_last()
  end
  local m = methods[k]
  if m ~= nil then return m end
  local p = props[k]
  if p ~= nil then return p(x) end
  if istype(Tensor, k) then return require("dlua.sorting").index(x, k) end   -- x[mask], x[idx]
  if type(k) == "table" then return require("dlua.subscript").get(x, k) end   -- x[{{}, 2}]
  return raise("tensor: no method or property '" .. tostring(k) .. "'")
end

local function newindex(x, k, v)
  if type(k) == "number" then
    if k ~= floor(k) then return raise("index: expected an integer index, got " .. tostring(k)) end
    local tv = type(v)
    if tv == "number" or tv == "boolean" then
      if tv == "boolean" then v = v and 1 or 0 end
      local st = C.dl_set1(hid(x), k, v)
      if st == 0 then return end
      if st == 1 then
        methods.fill_(select_(x, 1, int_arg("index", k, "index")), v)
        return
      end
      return raise_last()
    elseif istype(Tensor, v) then
      methods.copy_(select_(x, 1, int_arg("index", k, "index")), v)
      return
    end
    return bad_arg("index", "a number, a boolean or a tensor to assign", v)
  end
  local s = setters[k]
  if s ~= nil then return s(x, v) end
  if istype(Tensor, k) then return require("dlua.sorting").newindex(x, k, v) end   -- x[mask] = v
  if type(k) == "table" then return require("dlua.subscript").set(x, k, v) end   -- x[{{}, 2}] = v
  return raise("tensor: cannot set field '" .. tostring(k) .. "'")
end

-- The value of a one-element tensor (or a number) for a native comparison.
local function cmp_value(v)
  if type(v) == "number" then return v end
  if istype(Tensor, v) then
    local cell = double1()
    if C.dl_item(v, cell) == 0 then return cell[0] end
    local n = C.dl_numel(v)
    if n >= 0 and n ~= 1 then
      raise("compare: a tensor with " .. n .. " elements (shape " .. shape_str(v)
            .. ") is ambiguous in a Lua comparison; use x:lt(y), x:eq(y) ... with :all() or :any()")
    end
    return raise_last()
  end
  return raise("compare: cannot compare a tensor with a " .. typename(v))
end

mt.__index = index
mt.__newindex = newindex
mt.__add = add
mt.__sub = sub
mt.__mul = mul
mt.__div = div
mt.__mod = remainder
mt.__pow = pow
mt.__unm = function(x) return neg(x) end
mt.__lt = function(a, b) return cmp_value(a) < cmp_value(b) end
mt.__le = function(a, b) return cmp_value(a) <= cmp_value(b) end
mt.__eq = function(a, b)
  local ta, tb = type(a), type(b)
  if (ta ~= "number" and not istype(Tensor, a)) or (tb ~= "number" and not istype(Tensor, b)) then
    return false
  end
  return cmp_value(a) == cmp_value(b)
end
mt.__len = function(x)
  local n = C.dl_ndim(x)
  if n < 0 then return raise_last() end
  if n == 0 then return raise("len: a 0-dim tensor has no length") end
  return get_meta(x).sizes[0]
end
mt.__tostring = function(x) return M.tostring(x) end
mt.__concat = function(a, b)
  return (istype(Tensor, a) and M.tostring(a) or a) .. (istype(Tensor, b) and M.tostring(b) or b)
end
M.tostring = function(x) return "tensor" end   -- replaced by dlua.format

-- ---- for trusted hosts ---------------------------------------------------------------------------

-- The tensor behind a handle id received from C++ (the runtime's bridge), or nil.
function M.from_id(id)
  if type(id) ~= "number" or C.dl_valid(id) ~= 1 then return nil end
  return wrap(C.dl_alias(id))
end

-- The handle id of a tensor as a Lua number (exact: ids are below 2^53), or nil.
function M.id_of(x)
  if not istype(Tensor, x) then return nil end
  return tonumber(hid(x))
end

-- Removes what a sandboxed script must not have: raw addresses and foreign memory, and
-- dl.dist (it loads a native library, MPI, and writes through raw addresses); and makes
-- dl.empty zero its memory, so that no script reads what another one (or the host)
-- left in a reused block.
function M.restrict()
  dl.from_ptr = nil
  dl.dist = nil
  methods.data_ptr = nil
  dl.empty = dl.zeros
  dl.empty_like = dl.zeros_like
end

return M
