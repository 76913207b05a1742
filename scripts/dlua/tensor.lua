-- dlua.tensor: the tensor type and its operations (docs/tensors.md).
--
-- A tensor is cdata of `struct dl_tensor` (bindings/capi.h) under ffi.metatype: a struct
-- value of const scalars (docs/design.md, "Tensors are FFI struct values") that is either the id
-- of a handle in the engine's table, released once the value dies (Note [Handles released
-- by a sweep, not by finalizers] below), or a small host tensor held inline (Note [Small
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
local raise, raise_last, bad_arg, retry = core.raise, core.raise_last, core.bad_arg, core.retry
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

local total, mark, budget, collect = core.total, core.mark, core.budget, core.collect
local release_id = C.dl_release_id
local setmetatable, tonumber_, collectgarbage = setmetatable, tonumber, collectgarbage

-- Note [Handles released by a sweep, not by finalizers]
-- A handle must be released when the Lua value holding it dies. A finalizer would say
-- when (ffi.gc), but LuaJIT charges 350 to 450 ns over the life of each cdata that has
-- one (this machine: a loop making 88-byte cdata took 55 ns a value without a
-- finalizer, 430 with a C one), as much as a whole 16-element op and its recording.
-- So a handle's cdata is instead the value of a weak table, `tracked`, at a slot whose
-- id `ids` keeps: the collector clears the weak entry when the cdata dies, and once per
-- cycle the finalizer of a sentinel (made unreachable on purpose, and made afresh each
-- time) sweeps the slots whose entry is gone and releases their handles. A cycle's
-- atomic phase clears weak entries before its finalizers run, so a handle is released
-- in the cycle its value died in, as a finalizer would have. (A value resurrected by a
-- finalizer is marked before weak entries are cleared: never released while reachable.)
-- Per handle that is two table stores and its share of the sweep, which visits every
-- slot once a cycle, as the collector's mark phase visits every live value anyway.
-- lua_close clears no weak table: it calls every finalizer, and the `closer`, a cdata
-- this module keeps to the end, releases every handle still tracked from its own.
local tracked = setmetatable({}, { __mode = "v" })   -- slot -> the cdata of a live handle
local ids = {}                                       -- slot -> its handle id, or false
local free_slots, nfree, nslots = {}, 0, 0

-- Handles are also what paces collections here. At LuaJIT's own pace (a cycle when the
-- Lua heap has doubled) a recorded chain of 16-element ops made about 9,000 handles a
-- cycle, and the sweep gave back their engine objects (node, tensor, storage: about
-- 1.2 KB each, 10 MB in all) at once, which the pools then handed out again cold. So a
-- full collection also runs once MADE_MIN handles, or MADE_PER_KB per KB of Lua heap if
-- that is more, were made since the last cycle: a collection costs in proportion to the
-- heap (0.1 to 0.15 ms for dlua's own 530 KB), so its cost per handle stays bounded
-- (about 0.06 us). In alternating runs the chain took 0.95 to 1.2 us an op with this
-- and 1.4 to 1.7 without; `a + b` on inline values makes no handle and did not change.
local MADE_MIN, MADE_PER_KB = 4096, 4
local made, made_limit = 0, MADE_MIN   -- handles made since the last cycle; the trigger

local function own(r, id)
  made = made + 1
  if made > made_limit then collect() end
  local slot
  if nfree > 0 then
    slot = free_slots[nfree]
    nfree = nfree - 1
  else
    nslots = nslots + 1
    slot = nslots
  end
  tracked[slot] = r
  ids[slot] = tonumber_(id)
end

local function sweep()
  made = 0
  made_limit = MADE_PER_KB * collectgarbage("count")
  if made_limit < MADE_MIN then made_limit = MADE_MIN end
  for slot = 1, nslots do
    local id = ids[slot]
    if id and tracked[slot] == nil then
      ids[slot] = false
      release_id(id)
      nfree = nfree + 1
      free_slots[nfree] = slot
    end
  end
end

local sentinel_type = ffi.typeof("struct { char c; }")
local function arm_sentinel()
  ffi_gc(sentinel_type(), function() sweep() arm_sentinel() end)
end
arm_sentinel()
M.closer = ffi_gc(sentinel_type(), function()
  for slot = 1, nslots do
    local id = ids[slot]
    if id then ids[slot] = false release_id(id) end
  end
end)

-- Note [No tail calls to built-ins in hot helpers]
-- The small functions here (wrap, result, value, is_tensor) end with `local v = f(...);
-- return v`, never `return f(...)` for a built-in or C function f. LuaJIT starts a
-- trace at a function called often from code that is not compiled (a gradient's
-- driver in autograd.lua, a script's loop that cannot compile); a trace that starts
-- here must end at this function's own return. A tail call to a built-in returns
-- straight to the caller's frame, which such a trace cannot follow ("leaving loop in
-- root trace", "NYI: return to lower frame"); after a few of those aborts LuaJIT
-- blacklists the function, and from then on every trace that would inline it aborts
-- too: `a + b` in a loop ran 6x slower for the rest of the process after some calls
-- of dl.grad (tests/lua/test_jit.lua).

-- The one place a tensor is made from a handle id (0: the call failed): inline when the
-- engine finds it small and unaliased, else the handle.
local function wrap(id)
  if id == 0 then return raise_last() end
  if total[0] - mark[0] > budget[0] then collect() end
  local r = Tensor()
  local st = C.dl_deliver(id, r)
  if st == 0 then return r end
  if st < 0 then return raise_last() end
  own(r, r.id)
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

local function is_tensor(x)
  local yes = istype(Tensor, x)
  return yes
end
M.is_tensor = is_tensor

-- ---- argument helpers --------------------------------------------------------------------

local function check_tensor(op, x)
  if not istype(Tensor, x) then bad_arg(op, "a tensor", x) end
end

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

local vbuf = ffi_new("double[1]")
local shape_buf = ffi_new("int64_t[8]")
local dims_buf = ffi_new("int32_t[8]")
local out2 = ffi_new("uint64_t[2]")
local meta = ffi_new("dl_meta")

local function get_meta(x)
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

local function unary_fn(op, name)
  return function(x)
    if not istype(Tensor, x) then return bad_arg(name, "a tensor", x) end
    local r = result()
    local st = C.dl_unary(op, x, r)
    if st < 0 and retry() then st = C.dl_unary(op, x, r) end
    return value(st, r)
  end
end

local function binary_fn(op, name)
  return function(a, b)
    local r, st = result(), nil
    if istype(Tensor, a) then
      if istype(Tensor, b) then
        st = C.dl_binary(op, a, b, r)
        if st < 0 and retry() then st = C.dl_binary(op, a, b, r) end
      elseif type(b) == "number" then
        st = C.dl_binary_scalar(op, a, b, 0, r)
        if st < 0 and retry() then st = C.dl_binary_scalar(op, a, b, 0, r) end
      else
        return bad_arg(name, "a tensor or a number", b)
      end
    elseif istype(Tensor, b) then
      if type(a) ~= "number" then return bad_arg(name, "a tensor or a number", a) end
      st = C.dl_binary_scalar(op, b, a, 1, r)
      if st < 0 and retry() then st = C.dl_binary_scalar(op, b, a, 1, r) end
    else
      return raise(name .. ": expected a tensor, got " .. typename(a) .. " and " .. typename(b))
    end
    return value(st, r)
  end
end

local function binary_inplace_fn(op, name)
  local iname = name .. "_"
  return function(a, b)
    if not istype(Tensor, a) then return bad_arg(iname, "a tensor", a) end
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

local function compare_fn(op, name)
  return function(a, b)
    if type(b) == "boolean" then b = b and 1 or 0 end
    if type(a) == "boolean" then a = a and 1 or 0 end
    local r, st = result(), nil
    if istype(Tensor, a) then
      if istype(Tensor, b) then
        st = C.dl_compare(op, a, b, r)
        if st < 0 and retry() then st = C.dl_compare(op, a, b, r) end
      elseif type(b) == "number" then
        st = C.dl_compare_scalar(op, a, b, 0, r)
        if st < 0 and retry() then st = C.dl_compare_scalar(op, a, b, 0, r) end
      else
        return bad_arg(name, "a tensor or a number", b)
      end
    elseif istype(Tensor, b) then
      if type(a) ~= "number" then return bad_arg(name, "a tensor or a number", a) end
      st = C.dl_compare_scalar(op, b, a, 1, r)
      if st < 0 and retry() then st = C.dl_compare_scalar(op, b, a, 1, r) end
    else
      return raise(name .. ": expected a tensor, got " .. typename(a) .. " and " .. typename(b))
    end
    return value(st, r)
  end
end

-- x = y in place, for ops that have no in-place kernel (exp_, clamp_, masked_fill_).
local function assign(op, x, y)
  local dx, dy = dtype_of(x), dtype_of(y)
  if dx ~= dy then
    raise(op .. ": result dtype " .. dtype_names[dy]
          .. " cannot be stored in the in-place target of dtype " .. dtype_names[dx])
  end
  if C.dl_copy_(hid(x), hid(y)) ~= 0 then raise_last() end
  return x
end

local function unary_inplace_fn(op, name)
  local f = unary_fn(op, name)
  local iname = name .. "_"
  return function(x)
    if not istype(Tensor, x) then return bad_arg(iname, "a tensor", x) end
    return assign(iname, x, f(x))
  end
end

local REDUCE_OPTS = { correction = true, unbiased = true, p = true }

-- (x [, dim | {dims}] [, keepdim] [, opts]): fills dims_buf; returns ndims, keepdim, opts.
local function reduce_args(name, x, a, b, c)
  if not istype(Tensor, x) then bad_arg(name, "a tensor", x) end
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
    for k in pairs(opts) do
      if not REDUCE_OPTS[k] then raise(name .. ": unknown option '" .. tostring(k) .. "'") end
    end
  end
  return nd, keepdim, opts
end

local function reduce_fn(op, name)
  return function(x, a, b, c)
    local nd, keepdim, opts = reduce_args(name, x, a, b, c)
    local corr, p = 1, 2
    if opts then
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
      if C.dl_item(t, vbuf) ~= 0 then raise_last() end
      return vbuf[0] ~= 0
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
    if dim == nil or type(dim) == "table" then return whole(x, dim, keepdim, opts) end
    dim_arg(name, dim)
    if keepdim ~= nil and type(keepdim) ~= "boolean" then bad_arg(name, "keepdim (a boolean)", keepdim) end
    local k = keepdim and 1 or 0
    local st
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
  return function(x, dim)
    check_tensor(name, x)
    local d = -1
    if dim ~= nil then d = dim_arg(name, dim) end
    if is_log then return new(C.dl_log_softmax, hid(x), d) end
    return new(C.dl_softmax, hid(x), d)
  end
end
methods.softmax, dl.softmax = softmax_fn("softmax", false), softmax_fn("softmax", false)
methods.log_softmax, dl.log_softmax = softmax_fn("log_softmax", true), softmax_fn("log_softmax", true)

-- x:cumsum(dim), x:cumprod(dim): running sums and products along dim (as PyTorch's;
-- integer and bool tensors give int64). Differentiable to any order (zeros included).
local function scan_fn(name, entry)
  return function(x, dim)
    check_tensor(name, x)
    if dim == nil then raise(name .. ": expected the dim to run along (as x:" .. name .. "(1))") end
    return new(entry, hid(x), dim_arg(name, dim))
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

local function size_or_stride(name, field)
  return function(x, d)
    check_tensor(name, x)
    local m = get_meta(x)
    local arr = m[field]
    if d == nil then
      local t = {}
      for i = 0, m.ndim - 1 do t[i + 1] = arr[i] end
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
    return arr[i]
  end
end
methods.size = size_or_stride("size", "sizes")
methods.stride = size_or_stride("stride", "strides")

function methods.is_contiguous(x)
  return get_meta(x).contiguous ~= 0
end

local FLOATS = { [FLOAT32] = true, [FLOAT64] = true, [dtype_codes.float16] = true, [dtype_codes.bfloat16] = true }
function methods.is_floating_point(x)
  return FLOATS[dtype_of(x)] == true
end

function methods.item(x)
  check_tensor("item", x)
  if C.dl_item(x, vbuf) ~= 0 then raise_last() end
  if C.dl_dtype(x) == BOOL then return vbuf[0] ~= 0 end
  return vbuf[0]
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

local function to_dtype(x, code)
  if dtype_of(x) == code then return x end
  return new(C.dl_to, hid(x), code)
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
  if C.dl_data_ptr(hid(x), vbuf) ~= 0 then raise_last() end
  return vbuf[0]
end

-- ---- views and indexing ------------------------------------------------------------------------

function methods.view(x, ...)
  check_tensor("view", x)
  local nd = parse_shape("view", false, ...)
  return wrap(C.dl_view(hid(x), shape_buf, nd))
end

function methods.reshape(x, ...)
  check_tensor("reshape", x)
  local nd = parse_shape("reshape", false, ...)
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
  return wrap(C.dl_transpose(hid(x), dim_arg("transpose", d1), dim_arg("transpose", d2)))
end

function methods.t(x)
  check_tensor("t", x)
  local n = C.dl_ndim(x)
  if n < 2 then return x end
  if n > 2 then
    raise("t: expected a tensor with at most 2 dimensions, got shape " .. shape_str(x))
  end
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
  return wrap(C.dl_squeeze(hid(x), d == nil and 0 or dim_arg("squeeze", d)))
end

function methods.unsqueeze(x, d)
  check_tensor("unsqueeze", x)
  return wrap(C.dl_unsqueeze(hid(x), dim_arg("unsqueeze", d)))
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

function dl.stack(list, d)
  local ids, n = list_ids("stack", list)
  d = d == nil and 1 or dim_arg("stack", d)
  local id = C.dl_stack(ids, n, d)
  if id == 0 and retry() then id = C.dl_stack(ids, n, d) end
  return wrap(id)
end

-- A Lua number or boolean as a 0-dim tensor that adapts to the other operand, as a
-- Lua number does in arithmetic: whole numbers are int64 (a lower-priority 0-dim
-- operand, so an int32 or float tensor keeps its dtype), others the default float.
local function scalar_tensor(op, v)
  local code
  if type(v) == "boolean" then
    v, code = v and 1 or 0, BOOL
  elseif type(v) == "number" then
    code = (v == floor(v) and v > -9.2e18 and v < 9.2e18) and INT64 or C.dl_default_dtype()
  else
    return bad_arg(op, "a tensor or a number", v)
  end
  return new(C.dl_full, shape_buf, 0, v, code, nil)
end

function dl.where(cond, a, b)
  check_tensor("where", cond)
  if not istype(Tensor, a) then a = scalar_tensor("where", a) end
  if not istype(Tensor, b) then b = scalar_tensor("where", b) end
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
  if not istype(Tensor, b) then b = scalar_tensor("allclose", b) end
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

-- ---- creation -------------------------------------------------------------------------------

local function default_dtype() return C.dl_default_dtype() end

-- zeros, ones or full into shape_buf[0 .. nd - 1] (named so for error messages).
local function full_(op, nd, value, code, dev)
  local id
  if op == "zeros" then id = C.dl_zeros(shape_buf, nd, code, dev)
  elseif op == "ones" then id = C.dl_ones(shape_buf, nd, code, dev)
  else id = C.dl_full(shape_buf, nd, value, code, dev) end
  if id == 0 and retry() then
    if op == "zeros" then id = C.dl_zeros(shape_buf, nd, code, dev)
    elseif op == "ones" then id = C.dl_ones(shape_buf, nd, code, dev)
    else id = C.dl_full(shape_buf, nd, value, code, dev) end
  end
  return wrap(id)
end

function dl.zeros(...)
  local nd, opts = parse_shape("zeros", true, ...)
  local code, dev = parse_opts("zeros", opts)
  return finish(full_("zeros", nd, 0, code or default_dtype(), dev), opts)
end

function dl.ones(...)
  local nd, opts = parse_shape("ones", true, ...)
  local code, dev = parse_opts("ones", opts)
  return finish(full_("ones", nd, 1, code or default_dtype(), dev), opts)
end

-- Uninitialised memory (as torch.empty): fast, but its values are whatever was there.
function dl.empty(...)
  local nd, opts = parse_shape("empty", true, ...)
  local code, dev = parse_opts("empty", opts)
  code = code or default_dtype()
  local id = C.dl_empty(shape_buf, nd, code, dev)
  if id == 0 and retry() then id = C.dl_empty(shape_buf, nd, code, dev) end
  return finish(wrap(id), opts)
end

-- dl.full(shape, value [, opts]): shape is a table or one size. A boolean value makes
-- a bool tensor; numbers make the default float dtype unless opts says otherwise.
function dl.full(shape, value, opts)
  local nd = parse_shape("full", false, shape)
  if type(value) ~= "number" and type(value) ~= "boolean" then bad_arg("full", "a fill value (number or boolean)", value) end
  local code, dev = parse_opts("full", opts)
  if not code then code = type(value) == "boolean" and BOOL or default_dtype() end
  return finish(full_("full", nd, fill_value("full", value), code, dev), opts)
end

local function like(name, f)
  return function(x, ...)
    check_tensor(name, x)
    local nd = fill_shape_from(x)
    return f(nd, x, ...)
  end
end

local function like_opts(name, x, opts)
  local code, dev = parse_opts(name, opts)
  return code or dtype_of(x), dev or device_of(x)
end

dl.zeros_like = like("zeros_like", function(nd, x, opts)
  local code, dev = like_opts("zeros_like", x, opts)
  return finish(full_("zeros", nd, 0, code, dev), opts)
end)
dl.ones_like = like("ones_like", function(nd, x, opts)
  local code, dev = like_opts("ones_like", x, opts)
  return finish(full_("ones", nd, 1, code, dev), opts)
end)
dl.full_like = like("full_like", function(nd, x, value, opts)
  local code, dev = like_opts("full_like", x, opts)
  return finish(full_("full_like", nd, fill_value("full_like", value), code, dev), opts)
end)
dl.empty_like = like("empty_like", function(nd, x, opts)
  local code, dev = like_opts("empty_like", x, opts)
  return finish(new(C.dl_empty, shape_buf, nd, code, dev), opts)
end)
dl.rand_like = like("rand_like", function(nd, x, opts)
  local code, dev = like_opts("rand_like", x, opts)
  return finish(new(C.dl_rand, shape_buf, nd, code, dev), opts)
end)
dl.randn_like = like("randn_like", function(nd, x, opts)
  local code, dev = like_opts("randn_like", x, opts)
  return finish(new(C.dl_randn, shape_buf, nd, code, dev), opts)
end)
dl.randint_like = like("randint_like", function(nd, x, lo, hi, opts)
  int_arg("randint_like", lo, "bound")
  int_arg("randint_like", hi, "bound")
  local code, dev = like_opts("randint_like", x, opts)
  return finish(new(C.dl_randint, lo, hi, shape_buf, nd, code, dev), opts)
end)

-- Leading numbers, then an optional options table or dtype name.
local function numbers_then_opts(op, min, max, ...)
  local n = select("#", ...)
  local vals, opts = {}, nil
  for i = 1, n do
    local v = select(i, ...)
    if type(v) == "number" and #vals < max then
      vals[#vals + 1] = v
    elseif i == n and #vals >= min and (type(v) == "table" or type(v) == "string") then
      opts = v
    elseif v ~= nil then
      bad_arg(op, "a number", v)
    end
  end
  if #vals < min then raise(op .. ": expected at least " .. min .. " numbers, got " .. #vals) end
  return vals, opts
end

-- dl.arange([start,] stop [, step] [, opts]): start, start + step, ... below stop.
function dl.arange(...)
  local v, opts = numbers_then_opts("arange", 1, 3, ...)
  local start, stop, step = 0, v[1], 1
  if #v >= 2 then start, stop = v[1], v[2] end
  if #v == 3 then step = v[3] end
  local code, dev = parse_opts("arange", opts)
  return finish(new(C.dl_arange, start, stop, step, code or default_dtype(), dev), opts)
end

function dl.linspace(...)
  local v, opts = numbers_then_opts("linspace", 3, 3, ...)
  local code, dev = parse_opts("linspace", opts)
  int_arg("linspace", v[3], "number of points")
  return finish(new(C.dl_linspace, v[1], v[2], v[3], code or default_dtype(), dev), opts)
end

function dl.eye(...)
  local v, opts = numbers_then_opts("eye", 1, 2, ...)
  local n = int_arg("eye", v[1], "size")
  local m = v[2] == nil and n or int_arg("eye", v[2], "size")
  local code, dev = parse_opts("eye", opts)
  return finish(new(C.dl_eye, n, m, code or default_dtype(), dev), opts)
end

function dl.rand(...)
  local nd, opts = parse_shape("rand", true, ...)
  local code, dev = parse_opts("rand", opts)
  return finish(new(C.dl_rand, shape_buf, nd, code or default_dtype(), dev), opts)
end

function dl.randn(...)
  local nd, opts = parse_shape("randn", true, ...)
  local code, dev = parse_opts("randn", opts)
  return finish(new(C.dl_randn, shape_buf, nd, code or default_dtype(), dev), opts)
end

-- dl.randint(lo, hi, shape... [, opts]): integers in [lo, hi) (hi excluded, as
-- PyTorch's), int64 unless opts says otherwise.
function dl.randint(lo, hi, ...)
  int_arg("randint", lo, "bound")
  int_arg("randint", hi, "bound")
  local nd, opts = parse_shape("randint", true, ...)
  local code, dev = parse_opts("randint", opts)
  return finish(new(C.dl_randint, lo, hi, shape_buf, nd, code or INT64, dev), opts)
end

-- A random permutation of 1..n (1-based, to index with).
function dl.randperm(n, opts)
  int_arg("randperm", n, "size")
  local code = parse_opts("randperm", opts)
  return finish(new(C.dl_randperm, n, code or INT64), opts)
end

function dl.manual_seed(n)
  int_arg("manual_seed", n, "seed")
  C.dl_manual_seed(n)
end

function dl.initial_seed() return C.dl_initial_seed() end

-- The random generator's state, { seed = s, offset = k } (how far its stream has been
-- read); dl.set_rng_state(state) goes back to it, and the same numbers come again.
local state_buf = ffi.new("double[2]")
function dl.get_rng_state()
  C.dl_rng_state(state_buf)
  return { seed = state_buf[0], offset = state_buf[1] }
end
function dl.set_rng_state(s)
  if type(s) ~= "table" or type(s.seed) ~= "number" or type(s.offset) ~= "number" then
    raise("set_rng_state: expected a state from dl.get_rng_state(), got " .. typename(s))
  end
  if C.dl_set_rng_state(s.seed, s.offset) ~= 0 then raise_last() end
end

function dl.set_default_dtype(name)
  if C.dl_set_default_dtype(dtype_code("set_default_dtype", name)) ~= 0 then raise_last() end
end

function dl.get_default_dtype() return dtype_names[C.dl_default_dtype()] end

-- The CPU threads of this Lua state's ops (OpenMP loops and OpenBLAS's larger
-- products), as torch.set_num_threads: at start, OMP_NUM_THREADS or the core count.
function dl.set_num_threads(n)
  if type(n) ~= "number" or n ~= floor(n) or n < 1 then
    raise("set_num_threads: expected an integer >= 1, got " .. tostring(n))
  end
  if C.dl_set_num_threads(n) ~= 0 then raise_last() end
end
function dl.get_num_threads() return C.dl_get_num_threads() end

-- dl.tensor(data [, opts]): data is a number, a boolean, a tensor (copied) or nested
-- tables of those. Lua has one number type, so numbers make the default float dtype
-- whatever their values (a whole number is not an integer here: the dtype never
-- depends on the data); booleans alone make bool; ask for integers with
-- {dtype = "int64"}. Tensors inside the tables keep their dtype when they are all the
-- same and there are no Lua numbers.
function dl.tensor(data, opts)
  local code, dev = parse_opts("tensor", opts)
  if istype(Tensor, data) then
    local y = methods.clone(data)
    if code then y = to_dtype(y, code) end
    if dev then y = to_device(y, dev) end
    return finish(y, opts)
  end
  local td = type(data)
  if td == "number" or td == "boolean" then
    if not code then code = td == "boolean" and BOOL or default_dtype() end
    return finish(full_("tensor", 0, fill_value("tensor", data), code, dev), opts)
  end
  if td ~= "table" then bad_arg("tensor", "a number, a boolean, a table or a tensor", data) end
  -- The shape, from the first element at each depth.
  local shape, nd = {}, 0
  local v = data
  while true do
    if istype(Tensor, v) then
      local s = shape_of(v)
      for i = 1, #s do shape[nd + i] = s[i] end
      nd = nd + #s
      break
    elseif type(v) == "table" then
      nd = nd + 1
      shape[nd] = #v
      if #v == 0 then break end
      v = v[1]
    else
      break
    end
  end
  if nd > 8 then raise("tensor: at most 8 dimensions are supported, got " .. nd) end
  local n = 1
  for i = 1, nd do n = n * shape[i] end
  local buf = ffi_new("double[?]", n > 0 and n or 1)
  local k, nnum, nbool, tdtype = 0, 0, 0, nil
  local function fill(x, d)
    local tx = type(x)
    if d > nd then
      if tx == "number" then
        buf[k] = x
        nnum = nnum + 1
      elseif tx == "boolean" then
        buf[k] = x and 1 or 0
        nbool = nbool + 1
      else
        raise("tensor: expected a number or a boolean, got " .. typename(x))
      end
      k = k + 1
    elseif istype(Tensor, x) then
      local s = shape_of(x)
      local ok = #s == nd - d + 1
      for i = 1, #s do ok = ok and s[i] == shape[d + i - 1] end
      if not ok then
        raise("tensor: a tensor of shape " .. shape_str(s) .. " does not fit at dimension " .. d
              .. " of shape " .. shape_str(shape))
      end
      local cnt = C.dl_numel(x)
      if cnt > 0 and C.dl_read(x, buf + k, cnt) ~= 0 then raise_last() end
      k = k + cnt
      local dt = dtype_of(x)
      if tdtype == nil or tdtype == dt then tdtype = dt else tdtype = false end
    elseif tx == "table" then
      local len = #x
      if len ~= shape[d] then
        raise("tensor: inconsistent sizes: expected " .. shape[d] .. " elements at dimension "
              .. d .. ", got " .. len)
      end
      for i = 1, len do fill(x[i], d + 1) end
    else
      raise("tensor: expected a table at dimension " .. d .. ", got " .. typename(x))
    end
  end
  fill(data, 1)
  if not code then
    if tdtype and nnum == 0 and nbool == 0 then code = tdtype
    elseif nbool > 0 and nnum == 0 and not tdtype then code = BOOL
    else code = default_dtype() end
  end
  for i = 1, nd do shape_buf[i - 1] = shape[i] end
  local id = C.dl_from_values(buf, n, shape_buf, nd, code, dev)
  if id == 0 and retry() then id = C.dl_from_values(buf, n, shape_buf, nd, code, dev) end
  return finish(wrap(id), opts)
end

-- dl.from_ptr(ptr, shape, dtype [, strides]): a zero-copy view of host memory that the
-- caller keeps alive. ptr is a cdata pointer, a light userdata or an address number.
function dl.from_ptr(ptr, shape, dtype, strides)
  local tp = type(ptr)
  if tp == "number" then
    ptr = ffi_cast("void*", ptr)
  elseif tp ~= "cdata" and tp ~= "userdata" then
    bad_arg("from_ptr", "a pointer (cdata, light userdata or address)", ptr)
  end
  local nd = parse_shape("from_ptr", false, shape)
  local code = dtype_code("from_ptr", dtype == nil and "float32" or dtype)
  local st = nil
  if strides ~= nil then
    if type(strides) ~= "table" or #strides ~= nd then
      raise("from_ptr: expected " .. nd .. " strides, got " .. typename(strides))
    end
    st = ffi_new("int64_t[?]", nd)
    for i = 1, nd do st[i - 1] = int_arg("from_ptr", strides[i], "stride") end
  end
  return wrap(C.dl_from_ptr(ptr, shape_buf, nd, st, code))
end

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

function dl.memory_stats() return core.memory_stats() end

-- ---- the metatable ----------------------------------------------------------------------------

-- x[i] on a 1-D tensor is a Lua number (a boolean for bool tensors); on others, and on
-- a 1-D tensor whose gradient is being taken (a number would drop it), the view
-- x:select(1, i).
local function index(x, k)
  if type(k) == "number" then
    if k ~= floor(k) then return raise("index: expected an integer index, got " .. tostring(k)) end
    local st = C.dl_get1(x, k, vbuf)
    if st == 0 then return vbuf[0] end
    if st == 2 then return vbuf[0] ~= 0 end
    if st == 1 then return select_(x, 1, int_arg("index", k, "index")) end
    return raise_last()
  end
  local m = methods[k]
  if m ~= nil then return m end
  local p = props[k]
  if p ~= nil then return p(x) end
  if istype(Tensor, k) then return require("dlua.sorting").index(x, k) end   -- x[mask], x[idx]
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
  return raise("tensor: cannot set field '" .. tostring(k) .. "'")
end

-- The value of a one-element tensor (or a number) for a native comparison.
local function cmp_value(v)
  if type(v) == "number" then return v end
  if istype(Tensor, v) then
    if C.dl_item(v, vbuf) == 0 then return vbuf[0] end
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
