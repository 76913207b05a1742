-- dlua.autograd: gradients of Lua functions (docs/autograd.md).
--
--   local f = function(x) return x * x end
--   dl.grad(f)(3)               --> tensor(6.)
--   dl.grad(dl.grad(f))(3)      --> tensor(2.)
--
-- The tape and the backward pass are in C++ (autograd/); this module opens and closes
-- the engine's gradient scopes around the user's function, hands it watched aliases of
-- the arguments (so that an inner gradient never confuses its argument with an outer
-- one's), and drives the backward pass. A custom gradient written in Lua cannot be
-- called from C++ (docs/design.md, "C++ never calls Lua"): the engine stops at its node, this module
-- calls the Lua function with the pending gradient and resumes the engine.
--
-- Nesting: a gradient taken while an outer gradient is being taken is computed with its
-- own backward recorded (create_graph), which is what makes dl.grad(dl.grad(f)) work.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local hid = T.hid
core.own_source()

local C = core.C
local raise, raise_last = core.raise, core.raise_last
local entries = core.entries   -- Note [Walking nested tables] in core.lua
local wrap, is_tensor, fresh, value = T.wrap, T.is_tensor, T.result, T.value
local methods, props, dl = T.methods, T.props, T.dl
local ffi_new, ffi_string = ffi.new, ffi.string
local type, select, pcall, error, ipairs, pairs, tostring, setmetatable, getmetatable, unpack =
  type, select, pcall, error, ipairs, pairs, tostring, setmetatable, getmetatable, unpack
local abs, max = math.abs, math.max

local M = {}

-- ---- scopes -----------------------------------------------------------------------------

local function pack(...) return { n = select("#", ...), ... } end

-- Note [The user's function is not called by pcall]
-- LuaJIT cannot end a trace that returns into a pcall made outside it ("NYI: return
-- to lower frame"). A function that pcall calls directly, often, from code that is not
-- compiled (this module's drivers are not: their short loops and pcalls keep them
-- interpreted) would start a trace at each hot call that aborts there, until LuaJIT
-- blacklists it for good; every trace that calls it later aborts too, the script's own
-- compiled loops included. So pcall calls invoke(), and the user's function returns
-- into invoke's Lua frame, where its traces end normally (tests/lua/test_jit.lua).
-- invoke() itself may be blacklisted; nothing else calls it.
local function invoke(f, ...)
  local r = pack(f(...))
  return r
end

-- Calls f(...) with the engine's scope `enter`/`exit` around it, also on error; returns
-- f's results packed: r[1] .. r[r.n].
local function scoped(enter, exit, f, ...)
  if enter() ~= 0 then raise_last() end
  local ok, r = pcall(invoke, f, ...)
  exit()
  if not ok then error(r, 0) end
  return r
end

function dl.no_grad(f, ...)
  if type(f) ~= "function" then raise("no_grad: expected a function, got " .. type(f)) end
  local r = scoped(C.dl_no_grad_enter, C.dl_no_grad_exit, f, ...)
  return unpack(r, 1, r.n)
end

-- f(...) recording again inside dl.no_grad, as torch.enable_grad (a gradient's own scope
-- does this already: dl.grad inside dl.no_grad takes its gradient).
function dl.enable_grad(f, ...)
  if type(f) ~= "function" then raise("enable_grad: expected a function, got " .. type(f)) end
  local r = scoped(C.dl_enable_grad_enter, C.dl_enable_grad_exit, f, ...)
  return unpack(r, 1, r.n)
end

function dl.is_grad_enabled() return C.dl_is_recording() == 1 end

local function detach(x)
  if not is_tensor(x) then raise("stop_gradient: expected a tensor, got " .. type(x)) end
  return wrap(C.dl_detach(hid(x)))
end
dl.stop_gradient, dl.detach, methods.detach = detach, detach, detach

function methods.requires_grad(x)
  local r = C.dl_requires_grad(hid(x))
  if r < 0 then raise_last() end
  return r == 1
end

-- ---- arguments: numbers, tensors and nested tables of tensors ------------------------------

-- A Lua number as a 0-dim tensor of the default float dtype.
local function float_scalar(v)
  return dl.tensor(v, { dtype = core.dtype_names[C.dl_default_dtype()] })
end

local function to_float_tensor(op, v)
  if type(v) == "number" then return float_scalar(v) end
  if is_tensor(v) then return v end
  raise(op .. ": cannot differentiate with respect to a " .. type(v))
end

-- A watched alias of x (a tensor or a number): a value on the tape when x is inline.
local function watch_one(op, x)
  local r = fresh()
  local st = C.dl_watch_value(to_float_tensor(op, x), r)
  local wt = value(st, r)
  return wt
end

-- What a differentiated function returned, as the tensor to differentiate: a number
-- becomes a float scalar, anything else is an error.
local function result_tensor(op, y)
  if type(y) == "number" then y = float_scalar(y) end
  if not is_tensor(y) then
    raise(op .. ": the function must return a tensor, got " .. type(y))
  end
  return y
end

-- Replaces every tensor (or number) leaf of `v` with a watched alias; appends the
-- aliases to `flat`. Returns the new structure.
local function watch_tree(op, v, flat, depth)
  if type(v) == "table" and not is_tensor(v) then
    if depth > 32 then raise(op .. ": argument tables nested too deeply") end
    local out = {}
    for k, x in entries(v) do out[k] = watch_tree(op, x, flat, depth + 1) end
    return out
  end
  local wt = watch_one(op, v)
  flat[#flat + 1] = wt
  return wt
end

-- The structure of `tree` (made by watch_tree) with each watched leaf replaced by its
-- gradient: grads[i] belongs to flat[i]. Leaves are matched by identity, not by
-- traversal order (pairs() may order two tables with the same keys differently).
local function leaf_grad(leaf, flat, grads)
  local g = nil
  for i = 1, #flat do
    if rawequal(flat[i], leaf) then g = grads[i] end
  end
  return g
end

local function rebuild_table(tree, flat, grads)
  local pos = {}
  for i, t in ipairs(flat) do pos[t] = i end
  local function walk(v)
    if type(v) == "table" and not is_tensor(v) then
      local out = {}
      for k, x in entries(v) do out[k] = walk(x) end
      return out
    end
    return grads[pos[v]]
  end
  return walk(tree)
end

local function rebuild(tree, flat, grads)
  -- A watched leaf itself (the common dl.grad(f)(x)) takes no table and no closure,
  -- which LuaJIT 2.1 does not compile and which would send each call to the
  -- interpreter. (Nor may this function hold the closure itself: a function with a
  -- captured local closes its upvalues on every return, and that is not compiled either.)
  if type(tree) ~= "table" or is_tensor(tree) then return leaf_grad(tree, flat, grads) end
  return rebuild_table(tree, flat, grads)
end

local function tensor_list(op, list)
  local n = #list
  local ids = ffi_new("uint64_t[?]", max(n, 1))
  for i = 1, n do ids[i - 1] = hid(list[i]) end
  return ids, n
end

-- ---- the backward pass, with custom gradients called from here -----------------------------

local custom_fns = {}       -- ref -> the Lua backward of a custom_gradient node
-- Cells C writes back are fresh per call (Note [Values C writes back] in tensor.lua).
local int1 = ffi.typeof("int[1]")
local next_ref = 1

local function drain_dead_refs()
  local dead = ffi_new("double[64]")
  while true do
    local n = C.dl_dead_custom_refs(dead, 64)
    for i = 0, n - 1 do custom_fns[dead[i]] = nil end
    if n < 64 then return end
  end
end

-- Whether a tensor of shape `from` broadcasts to shape `to` (a gradient of shape `to`
-- then sums back to `from`, as PyTorch accepts a custom backward's result).
local function expandable(from, to)
  if #from > #to then return false end
  for i = 0, #from - 1 do
    local a, b = from[#from - i], to[#to - i]
    if a ~= b and a ~= 1 then return false end
  end
  return true
end

-- What a custom backward returned (r, packed), as one tensor (or nil) per input: a list,
-- or the gradients as separate results (`return dy * b, dy * a`). A number is that value
-- everywhere in its input's shape.
local function gradient_list(info, r)
  local op, n = info.op, info.n
  local list, count = r, r.n
  if r.n == 1 and type(r[1]) == "table" and not is_tensor(r[1]) then list, count = r[1], #r[1] end
  if count > n then
    raise(op .. ": the gradient function returned " .. count .. " gradients for " .. n .. " input(s)")
  end
  local out = {}
  for i = 1, n do
    local g, shape = list[i], info.shapes[i]
    if type(g) == "number" then
      g = dl.full(shape, g, { dtype = info.dtypes[i], device = info.devices[i] })
    elseif g ~= nil and not is_tensor(g) then
      raise(op .. ": gradient " .. i .. " is a " .. type(g) .. ", expected a tensor")
    elseif g ~= nil and not expandable(shape, g.shape) then
      raise(op .. ": gradient " .. i .. " has shape " .. T.shape_str(g.shape) .. ", expected its input's shape "
            .. T.shape_str(shape) .. " (or one that sums to it)")
    end
    out[i] = g
  end
  return out
end

-- Runs a backward task to its end, calling the Lua backward of each custom gradient it
-- stops at; st is what the task's last dl_backward_run returned. (A named function, not
-- a closure made per call: LuaJIT 2.1 does not compile closure creation, and one would
-- send every call of dl.grad back to the interpreter.)
local function run_task(op, task, st)
  while true do
    if st < 0 then raise_last() end
    if st == 1 then break end
    -- A custom gradient: call its Lua backward with the pending output gradients.
    local info = custom_fns[C.dl_backward_custom_ref(task)]
    if not info then raise(op .. ": the custom gradient's function is gone") end
    local pending = ffi_new("uint64_t[16]")
    if C.dl_backward_pending(task, pending, 16) ~= 0 then raise_last() end
    local args, nargs = {}, 0
    for i = 0, 15 do
      if pending[i] ~= 0 then nargs = i + 1; args[i + 1] = wrap(pending[i]) end
    end
    local grads = gradient_list(info, pack(info.fn(unpack(args, 1, max(nargs, info.nout)))))
    local gids = ffi_new("uint64_t[?]", max(info.n, 1))
    for i = 1, info.n do gids[i - 1] = grads[i] and hid(grads[i]) or 0 end
    if C.dl_backward_supply(task, gids, info.n) ~= 0 then raise_last() end
    st = C.dl_backward_run(task)
  end
end

-- Drives a task that stopped at a custom gradient to its end (under pcall, to free it
-- on the way out) and writes its results, nin ids, to res.
local function finish_task(op, task, res, nin)
  local ok, err = pcall(run_task, op, task, 0)
  if ok and C.dl_backward_results(task, res, nin) ~= 0 then
    ok, err = false, ffi_string(C.dl_last_error())
  end
  C.dl_backward_free(task)
  if not ok then error(err, 0) end
end

-- Gradients of `outputs` (with output gradients `seeds`, or nil) with respect to the
-- tensors of `inputs`: a list of tensors in the same order.
local function backward(op, outputs, seeds, inputs, retain)
  local outs, nout = tensor_list(op, outputs)
  local gouts = nil
  if seeds then
    gouts = ffi_new("uint64_t[?]", max(nout, 1))
    for i = 1, nout do gouts[i - 1] = seeds[i] and hid(seeds[i]) or 0 end
  end
  local ins, nin = tensor_list(op, inputs)
  local res = ffi_new("uint64_t[?]", max(nin, 1))
  -- The whole pass in one call (this driver runs interpreted, where an FFI call costs
  -- far more than compiled; bench/, `d2`); only a graph with a custom gradient leaves a task to drive from here,
  -- under pcall, to free it on the way out (Note [The user's function is not called by
  -- pcall]).
  local task_out = int1()
  local st = C.dl_backward_once(outs, nout, gouts, ins, nin, retain and 1 or 0, res, task_out)
  if st < 0 then raise_last() end
  if st == 0 then finish_task(op, task_out[0], res, nin) end
  local result = {}
  for i = 1, nin do result[i] = wrap(res[i - 1]) end
  return result
end
M.backward = backward
M.watch_tree, M.rebuild, M.result_tensor = watch_tree, rebuild, result_tensor

-- Note [One tensor in, one gradient out]
-- dl.grad(f)(x) with one tensor x is the common call, and a second derivative is two
-- of them nested. The general driver (run_watched, backward) makes a dozen Lua objects
-- a call (argument packs, the lists of watched tensors and their structures, id
-- arrays, result lists), which LuaJIT's collector then sweeps: in a second derivative
-- the collector took a fifth of the time. This path makes none beyond the watched alias
-- and the gradient: the user's function is called through call_watched (a Lua frame
-- for it to return into, Note [The user's function is not called by pcall]) and the
-- backward pass is one dl_backward_one, which takes the result and the watched alias
-- as values (so a small result kept in an arena, Note [Recorded values in arenas] in
-- bindings/arenas.cpp, is not made a handle) and writes the gradient into a value.
-- The errors are the general path's. A second derivative went from 54,800 to 36,900
-- instructions a call (callgrind, bench/ `d2`) and the collector's share of its time
-- from 21% to 9-13% (jit.p's "v" mode); any other call (a table argument, argnums, more arguments,
-- value_and_grad) takes the general path.

-- f called with n (1 to 3) arguments: its first, x, watched, then b and c. (Named
-- arguments, not `...`: with vararg functions here, the traces through this path
-- aborted ("NYI: return to lower frame", and "NYI: bytecode 71", a vararg call in a
-- frame the trace did not enter), the calling loop ended up interpreted, and a second
-- derivative cost more than on the general path. As written, jit.v reports at most a
-- few aborts a run, never enough to blacklist anything: tests/lua/test_jit.lua.)
local function call_watched(op, f, n, x, b, c)
  local w = watch_one(op, x)
  local y, extra
  if n == 1 then
    y, extra = f(w)
  elseif n == 2 then
    y, extra = f(w, b)
  else
    y, extra = f(w, b, c)
  end
  return w, y, extra
end

-- dl.grad differentiates a function of one element, as functorch's grad (a tape or an
-- implicit gradient sums a larger target, as TensorFlow's).
local function check_scalar(op, y)
  if methods.numel(y) ~= 1 then
    raise(op .. ": the function must return a single-element tensor, got shape " .. T.shape_str(y.shape)
          .. ": dl." .. op .. " differentiates a scalar function (sum it, or use dl.vjp or dl.jacobian)")
  end
end

-- The gradient of y with respect to one watched tensor w (the tape is left to the
-- caller). One dl_backward_one: a compiled call runs it from its recorded plan (Note
-- [Compiled gradients] in compile/grad.cpp).
local function backward_one(op, y, w)
  local g = fresh()
  local task_out = int1()
  local st = C.dl_backward_one(y, w, g, task_out)
  if st < 0 then check_scalar(op, y) end
  if st == 2 then
    -- A custom gradient's Lua backward runs first.
    local res = ffi_new("uint64_t[1]")
    finish_task(op, task_out[0], res, 1)
    g = wrap(res[0])
  else
    g = value(st, g)
  end
  return g
end

-- f returned n results to dl.grad, which differentiates a function of one (as functorch's
-- grad refuses a tuple).
local function more_results(op, n)
  raise(op .. ": the function returned " .. n .. " results; it must return one tensor "
        .. "(pass {has_aux = true} to get the others after the gradients, or use dl.value_and_grad)")
end

-- The gradient of f at its first argument x (a tensor or a number); f takes n
-- arguments, x, b and c.
local function grad_one(op, f, n, x, b, c)
  if C.dl_grad_enter() ~= 0 then raise_last() end
  local ok, w, y, extra = pcall(call_watched, op, f, n, x, b, c)
  C.dl_grad_exit()
  if not ok then error(w, 0) end
  if extra ~= nil then C.dl_arena_done(); more_results(op, 2) end
  y = result_tensor(op, y)
  local g = backward_one(op, y, w)
  C.dl_arena_done()
  return g
end

-- The gradients of y with respect to the tensors of flat (watched tensors, or the
-- Variables an implicit gradient found), a list. In a compiled call, one
-- dl_backward_many, which the call may run from its recorded plan as it does
-- dl_backward_one's; anywhere else (or when the call does not take it) the general pass.
local function backward_watched(op, y, flat)
  if C.dl_compile_active() ~= 0 and #flat > 0 then
    local n = #flat
    local xs, outs = ffi_new("const struct dl_tensor*[?]", n), ffi_new("struct dl_tensor*[?]", n)
    local gs = {}
    for i = 1, n do
      xs[i - 1] = flat[i]
      gs[i] = fresh()
      outs[i - 1] = gs[i]
    end
    local task_out = int1()
    local st = C.dl_backward_many(y, xs, n, outs, task_out)
    if st == 2 then
      local res = ffi_new("uint64_t[?]", n)
      finish_task(op, task_out[0], res, n)
      for i = 1, n do gs[i] = wrap(res[i - 1]) end
      return gs
    end
    if st ~= -2 then
      for i = 1, n do gs[i] = value(st, gs[i]) end
      return gs
    end
  end
  return backward(op, { y }, nil, flat, false)
end

-- The gradients of y with respect to flat; a y of more than one element is summed, as
-- TensorFlow's tape and implicit_gradients differentiate the sum of a target that is
-- not a scalar (a per-example loss).
local function backward_target(op, y, flat)
  if methods.numel(y) == 1 then return backward_watched(op, y, flat) end
  return backward(op, { y }, { dl.ones_like(y) }, flat, false)
end

-- ---- dl.grad and dl.value_and_grad ----------------------------------------------------------

local function argnum_list(op, argnums)
  local nums, multi
  if argnums == nil then return { 1 }, false end
  if type(argnums) == "number" then
    nums, multi = { argnums }, false
  elseif type(argnums) == "table" and not is_tensor(argnums) and #argnums > 0 then
    nums, multi = argnums, true
  else
    raise(op .. ": argnums must be a number or a list of numbers, got " .. core.typename(argnums))
  end
  for _, k in ipairs(nums) do
    if type(k) ~= "number" or k ~= math.floor(k) or k < 1 then
      raise(op .. ": argnums must be argument positions (whole numbers from 1), got " .. tostring(k))
    end
  end
  return nums, multi
end
M.argnum_list = argnum_list

-- Runs f with watched arguments; returns the results of f, the watched structures per
-- argnum, and the flat list of watched tensors.
local function watched_call(op, f, nums, args, flat, trees)
  for i, k in ipairs(nums) do
    if type(k) ~= "number" or k < 1 or k > args.n then
      raise(op .. ": argnum " .. tostring(k) .. " out of range for " .. args.n .. " argument(s)")
    end
    args[k] = watch_tree(op, args[k], flat, 0)
    trees[i] = args[k]
  end
  return f(unpack(args, 1, args.n))
end

local function run_watched(op, f, nums, ...)
  local args = pack(...)
  local flat, trees = {}, {}
  local r = scoped(C.dl_grad_enter, C.dl_grad_exit, watched_call, op, f, nums, args, flat, trees)
  return r, trees, flat
end

local GRAD_OPTS = { has_aux = true }

-- has_aux (functorch's): f returns its result and auxiliary values, which come back
-- after the gradients. dl.value_and_grad passes them through in any case.
local function differentiate(op, f, argnums, with_value, opts)
  if type(f) ~= "function" and not (type(f) == "table" and getmetatable(f) and getmetatable(f).__call) then
    raise(op .. ": expected a function, got " .. type(f))
  end
  local nums, multi = argnum_list(op, argnums)
  opts = core.options(op, opts, GRAD_OPTS)
  local aux = opts.has_aux and true or with_value
  local first_only = not aux and not multi and nums[1] == 1
  return function(...)
    local n = select("#", ...)
    if first_only and n >= 1 and n <= 3 then
      local x, b, c = ...
      if type(x) ~= "table" or is_tensor(x) then
        local g = grad_one(op, f, n, x, b, c)
        return g
      end
    end
    local r, trees, flat = run_watched(op, f, nums, ...)
    if not aux then
      for i = r.n, 2, -1 do
        if r[i] ~= nil then C.dl_arena_done(); more_results(op, i) end
      end
    end
    local y = result_tensor(op, r[1])
    check_scalar(op, y)
    local g = #flat == 1 and { backward_one(op, y, flat[1]) } or backward_watched(op, y, flat)
    C.dl_arena_done()
    local res = {}
    for i, t in ipairs(trees) do res[i] = rebuild(t, flat, g) end
    local nres = #trees
    if aux then
      local out, k = {}, 0
      if with_value then out[1], k = y, 1 end
      for i = 1, nres do out[k + i] = res[i] end
      k = k + nres
      for i = 2, r.n do out[k + i - 1] = r[i] end
      return unpack(out, 1, k + max(r.n - 1, 0))
    end
    return unpack(res, 1, nres)
  end
end

function dl.grad(f, argnums, opts) return differentiate("grad", f, argnums, false, opts) end
function dl.value_and_grad(f, argnums, opts) return differentiate("value_and_grad", f, argnums, true, opts) end

-- ---- variables --------------------------------------------------------------------------------

-- Variables by the identity of their tensor, so that the ones the engine reports (as
-- fresh handles) come back as the very objects the script holds.
local variables = setmetatable({}, { __mode = "v" })
local names = setmetatable({}, { __mode = "k" })
local variable_count = 0

local function key_of(x)
  local k = C.dl_tensor_key(hid(x))
  if k == 0 then raise_last() end
  return k
end

local function is_variable(x) return is_tensor(x) and C.dl_is_variable(hid(x)) == 1 end
dl.is_variable = is_variable

function dl.Variable(init, name)
  local t
  if type(init) == "number" then
    t = float_scalar(init)
  elseif type(init) == "table" then
    t = dl.tensor(init)
  elseif is_tensor(init) then
    t = methods.clone(detach(init))
  else
    raise("Variable: expected a tensor, a number or a table of numbers, got " .. type(init))
  end
  if not methods.is_floating_point(t) then t = methods.to(t, core.dtype_names[C.dl_default_dtype()]) end
  if name ~= nil and type(name) ~= "string" then
    raise("Variable: name must be a string, got " .. type(name))
  end
  if C.dl_mark_variable(hid(t)) ~= 0 then raise_last() end
  variable_count = variable_count + 1
  variables[key_of(t)] = t
  names[t] = name or ("Variable:" .. variable_count)
  return t
end

props.name = function(x) return names[x] end
props.is_variable = is_variable

-- Variables frozen by v:requires_grad_(false) (or a module's net:requires_grad_(false)),
-- by tensor key. Implicit gradients (implicit_grad, implicit_value_and_grad, opt:minimize
-- without a list or with a module, dl.dist's) leave them out, as TensorFlow leaves out
-- variables that are not trainable: a frozen backbone gets no gradient and no update,
-- and its backward is not computed. A gradient asked for by name (dl.grad's arguments,
-- GradientTape.gradient's sources, minimize's explicit list) is still given.
local frozen = {}

function methods.requires_grad_(x, flag)
  if flag == nil then flag = true end
  if type(flag) ~= "boolean" then raise("requires_grad_: expected a boolean, got " .. type(flag)) end
  if not is_variable(x) then
    raise("requires_grad_: only a Variable (a parameter) can be frozen or unfrozen; dl.grad differentiates "
          .. "with respect to its arguments")
  end
  frozen[key_of(x)] = (not flag) or nil
  if C.dl_set_frozen(hid(x), flag and 0 or 1) ~= 0 then raise_last() end
  return x
end
props.trainable = function(x) return is_variable(x) and not frozen[key_of(x)] end

local function as_value(op, v, like)
  if type(v) == "number" then return v end
  if is_tensor(v) then return v end
  raise(op .. ": expected a tensor or a number, got " .. type(v))
end

-- Assignments change the variable's values in place, outside any recording; a backward
-- that needed the old values then reports it (version counters). (Module-level functions
-- run under no_grad, not closures made per call: a function that makes a closure is not
-- compiled by LuaJIT, and these run in training loops.)
local function fill_or_copy_(v, x)
  if type(x) == "number" then methods.fill_(v, x) else methods.copy_(v, x) end
end
function methods.assign(v, x)
  if not is_variable(v) then raise("assign: expected a Variable") end
  dl.no_grad(fill_or_copy_, v, as_value("assign", x))
  return v
end
function methods.assign_add(v, x)
  if not is_variable(v) then raise("assign_add: expected a Variable") end
  dl.no_grad(methods.add_, v, as_value("assign_add", x))
  return v
end
function methods.assign_sub(v, x)
  if not is_variable(v) then raise("assign_sub: expected a Variable") end
  dl.no_grad(methods.sub_, v, as_value("assign_sub", x))
  return v
end

-- ---- implicit gradients: every Variable the function used -------------------------------------

-- The Variables the innermost variable log holds, as the script's objects, that are
-- trainable, and how many it holds, frozen ones too; or nil and the error.
local function logged_variables()
  local used, n = {}, C.dl_varlog_count()
  for i = 1, n do
    local id = C.dl_varlog_get(i)
    if id == 0 then return nil, ffi_string(C.dl_last_error()) end
    -- A Variable of the script's is found by its key without making a value of the id
    -- (a value would run a compiled call's deferred steps: compile.md).
    local key = C.dl_tensor_key(id)
    local v = variables[key]
    if v then C.dl_release_id(id) else v = wrap(id) end
    if not frozen[key] then used[#used + 1] = v end
  end
  return used, n
end

local function implicit(op, f, with_value)
  if type(f) ~= "function" then raise(op .. ": expected a function, got " .. type(f)) end
  return function(...)
    if C.dl_varlog_push() ~= 0 then raise_last() end
    local ok, r = pcall(scoped, C.dl_grad_enter, C.dl_grad_exit, f, ...)
    local used
    if ok then
      local err
      used, err = logged_variables()
      if not used then ok, r = false, err end
    end
    C.dl_varlog_pop()
    if not ok then error(r, 0) end
    local y = r[1]
    if not is_tensor(y) then raise(op .. ": the function must return a tensor, got " .. type(y)) end
    local g = backward_target(op, y, used)
    C.dl_arena_done()
    local pairs_ = {}
    for i = 1, #used do pairs_[i] = { g[i], used[i] } end
    if with_value then return y, pairs_, unpack(r, 2, r.n) end
    return pairs_
  end
end

function dl.implicit_grad(f) return implicit("implicit_grad", f, false) end
function dl.implicit_value_and_grad(f) return implicit("implicit_value_and_grad", f, true) end

-- ---- GradientTape ----------------------------------------------------------------------------

local Tape = {}
Tape.__index = Tape
Tape.__tostring = function(t)
  return "GradientTape(persistent=" .. tostring(t.persistent) .. ")"
end

-- The engine's tapes this GradientTape holds (one per record call that was not inside
-- another gradient), each let go when its holder dies: after a non-persistent tape's
-- gradient, or when the GradientTape is collected.
local tape_holder = ffi.typeof("struct { double serial; }")
local function free_held(h) C.dl_arena_free(h.serial) end

local TAPE_OPTS = { persistent = true, watch_accessed_variables = true }

-- GradientTape([{persistent = false, watch_accessed_variables = true}]): with
-- watch_accessed_variables = false, as TensorFlow's, only what tape:watch named has a
-- gradient; a Variable source not watched gets nil.
function dl.GradientTape(opts)
  opts = core.options("GradientTape", opts, TAPE_OPTS)
  local tape = { persistent = opts.persistent or false, used = false, held = {}, watching = {} }
  if opts.watch_accessed_variables == false then tape.watched = setmetatable({}, { __mode = "k" }) end
  return setmetatable(tape, Tape)
end

function Tape:watch(x)
  if type(x) == "table" and not is_tensor(x) then
    for _, v in entries(x) do self:watch(v) end
    return
  end
  if not is_tensor(x) then raise("GradientTape.watch: expected a tensor, got " .. type(x)) end
  if C.dl_watch_inplace(hid(x)) ~= 0 then raise_last() end
  if self.watched then self.watched[x] = true end
  self.watching[#self.watching + 1] = x
end

-- While a tape records, what it watches may not be written in place (the gradient would
-- be the new value's: PyTorch's rule for a leaf that requires grad); once it is done,
-- the tensors are free again (a training loop updates what it watched).
local function watching_done(tape)
  for i = #tape.watching, 1, -1 do
    C.dl_watch_done(hid(tape.watching[i]))
    tape.watching[i] = nil
  end
end

function Tape:record(f, ...)
  if type(f) ~= "function" then raise("GradientTape.record: expected a function, got " .. type(f)) end
  local ok, r = pcall(scoped, C.dl_grad_enter, C.dl_grad_exit, f, ...)
  watching_done(self)
  local serial = C.dl_arena_hold()
  if serial ~= 0 then self.held[#self.held + 1] = ffi.gc(tape_holder(serial), free_held) end
  if not ok then error(r, 0) end
  return unpack(r, 1, r.n)
end

local function flatten_sources(v, flat, depth)
  if type(v) == "table" and not is_tensor(v) then
    if depth > 32 then raise("GradientTape.gradient: sources nested too deeply") end
    for _, x in entries(v) do flatten_sources(x, flat, depth + 1) end
    return
  end
  if not is_tensor(v) then raise("GradientTape.gradient: a source is a " .. type(v) .. ", expected a tensor") end
  flat[#flat + 1] = v
end

local function rebuild_sources(v, grads, pos)
  if type(v) == "table" and not is_tensor(v) then
    local out = {}
    for k, x in entries(v) do out[k], pos = rebuild_sources(x, grads, pos) end
    return out, pos
  end
  return grads[pos], pos + 1
end

-- Note [Unconnected sources]
-- The engine gives zeros to an input its outputs do not reach, which is the tape's
-- default (unconnected_gradients = "zero"; TensorFlow's default is "none"). For "none",
-- a source whose gradient is all zeros is told apart from one that is reached with a
-- zero gradient (a dead relu) by a second pass, taken recorded from watched seeds: a
-- source the targets reach gets a gradient that depends on the seeds (its backward
-- multiplies them through); an unreached one, fresh zeros with no history. That pass
-- is taken, and its history discarded, in a gradient scope of its own.
local function reached(targets, seeds, sources)
  local probe = {}
  for i, t in ipairs(targets) do
    probe[i] = watch_one("GradientTape.gradient", seeds and seeds[i] or dl.ones_like(t))
  end
  local g = backward("GradientTape.gradient", targets, probe, sources, true)
  local r = {}
  for i = 1, #sources do r[i] = methods.requires_grad(g[i]) end
  return r
end

local GRADIENT_OPTS = { unconnected_gradients = true }

function Tape:gradient(target, sources, output_gradients, opts)
  opts = core.options("GradientTape.gradient", opts, GRADIENT_OPTS)
  local unconnected = opts.unconnected_gradients or "zero"
  if unconnected ~= "zero" and unconnected ~= "none" then
    raise("GradientTape.gradient: unconnected_gradients must be \"zero\" or \"none\", got " .. tostring(unconnected))
  end
  if self.used and not self.persistent then
    raise("GradientTape.gradient: can only be called once on a non-persistent tape "
          .. "(use dl.GradientTape{persistent = true})")
  end
  self.used = true
  local targets = is_tensor(target) and { target } or target
  if type(targets) ~= "table" then
    raise("GradientTape.gradient: target must be a tensor or a table of tensors, got " .. type(target))
  end
  for i, t in ipairs(targets) do
    if not is_tensor(t) then
      raise("GradientTape.gradient: target " .. i .. " is a " .. core.typename(t) .. ", expected a tensor")
    end
  end
  local flat = {}
  flatten_sources(sources, flat, 0)
  local seeds = nil
  if output_gradients ~= nil then
    seeds = is_tensor(output_gradients) and { output_gradients } or output_gradients
  end
  -- A target of more than one element without an output gradient is summed (TensorFlow's).
  for i, t in ipairs(targets) do
    if (seeds == nil or seeds[i] == nil) and methods.numel(t) ~= 1 then
      seeds = seeds or {}
      seeds[i] = dl.ones_like(t)
    end
  end
  local none = unconnected == "none"
  local g = backward("GradientTape.gradient", targets, seeds, flat, self.persistent or none)
  if none then
    local zero, idx = {}, {}
    for i, x in ipairs(g) do
      if not methods.any(methods.ne(x, 0)) then idx[#idx + 1] = i; zero[#zero + 1] = flat[i] end
    end
    if #idx > 0 then
      local r = scoped(C.dl_grad_enter, C.dl_grad_exit, reached, targets, seeds, zero)
      local serial = C.dl_arena_hold()
      if serial ~= 0 then C.dl_arena_free(serial) end
      for j, i in ipairs(idx) do
        if not r[1][j] then g[i] = nil end
      end
    end
  end
  if self.watched then   -- watch_accessed_variables = false: Variables not watched get nil
    for i, src in ipairs(flat) do
      if is_variable(src) and not self.watched[src] then g[i] = nil end
    end
  end
  if not self.persistent then
    for i = #self.held, 1, -1 do
      local h = self.held[i]
      self.held[i] = nil
      ffi.gc(h, nil)
      free_held(h)
    end
  end
  if is_tensor(sources) then return g[1] end
  return (rebuild_sources(sources, g, 1))
end

-- ---- custom gradients ------------------------------------------------------------------------

-- Attaches the outputs (a list of tensors) to a node whose backward is the Lua function
-- fn: fn(dy1, dy2, ...) (nil for an output that got no gradient) returns one gradient
-- per input, as a list or as separate results. Returns the outputs as the node's, or
-- the outputs themselves when no input needs a gradient (nothing is recorded).
local function custom_record(op, inputs, outputs, fn)
  drain_dead_refs()
  local ref = next_ref
  next_ref = next_ref + 1
  local ins, nin = tensor_list(op, inputs)
  local nout = #outputs
  local outs = ffi_new("uint64_t[?]", nout)
  for i = 1, nout do outs[i - 1] = hid(outputs[i]) end
  if C.dl_custom_record(ins, nin, outs, nout, ref) ~= 0 then raise_last() end
  if outs[0] == hid(outputs[1]) then return outputs end
  local shapes, dtypes, devices = {}, {}, {}
  for i, x in ipairs(inputs) do shapes[i], dtypes[i], devices[i] = x.shape, x.dtype, x.device end
  custom_fns[ref] = { fn = fn, op = op, n = nin, nout = nout, shapes = shapes, dtypes = dtypes, devices = devices }
  local res = {}
  for i = 1, nout do res[i] = wrap(outs[i - 1]) end
  return res
end
M.custom_record = custom_record

-- Note [What a custom node does not see]
-- A custom gradient (and dl.checkpoint, built the same way) gives gradients to the
-- inputs of its node only. A tensor that needs a gradient and that its function reads
-- some other way would get none, silently: a Variable (a layer's weight), or a tensor
-- with a gradient history captured by the closure (the argument of an enclosing
-- dl.grad). Variables are found by the engine's log of the Variables used; a captured
-- tensor by the function's upvalues (one level: a tensor reached through a table or
-- another function's closure is not found). Both are errors, as TensorFlow's
-- custom_gradient refuses Variables its grad_fn does not take.
local getupvalue = debug and debug.getupvalue

local function check_captured(op, f, inputs)
  if not getupvalue or type(f) ~= "function" then return end
  for i = 1, 255 do
    local name, v = getupvalue(f, i)
    if name == nil then return end
    if is_tensor(v) and not is_variable(v) and methods.requires_grad(v) then
      local arg = false
      for _, x in ipairs(inputs) do arg = arg or rawequal(x, v) end
      if not arg then
        raise(op .. ": the function reads '" .. name .. "', a tensor that needs a gradient, from its closure; "
              .. "it would get none: pass it as an argument (or detach it)")
      end
    end
  end
end

-- Each tensor that needs a gradient in a (nested) table argument, as an error: only the
-- tensor arguments themselves are inputs of a custom gradient.
local function check_table_arg(op, v, i, depth)
  if depth > 32 then return end
  for _, x in entries(v) do
    if is_tensor(x) then
      if methods.requires_grad(x) then
        raise(op .. ": argument " .. i .. " is a table holding a tensor that needs a gradient; "
              .. "pass tensors as arguments of their own (a custom gradient's inputs)")
      end
    elseif type(x) == "table" and getmetatable(x) == nil then
      check_table_arg(op, x, i, depth + 1)
    end
  end
end


-- f(...) with the Variables it uses logged: f's results packed, the trainable Variables
-- used, in first-use order, and how many were used, frozen ones too.
local function call_logged(f, ...)
  if C.dl_varlog_probe() ~= 0 then raise_last() end
  local ok, r = pcall(invoke, f, ...)
  local used, n = nil, nil
  if ok then used, n = logged_variables() end
  C.dl_varlog_pop()
  if not ok then error(r, 0) end
  if not used then raise(n) end
  return r, used, n
end

-- f(...) run recorded in a gradient scope of its own, for the Variables it uses, and
-- that scope's history then discarded (dl.checkpoint's forward keeps no intermediate
-- value, but its node must know the Variables). Returns f's results packed, tensors
-- detached; the trainable Variables used; and whether a result needed a gradient though
-- no Variable was used: then f read a tensor with a history that is not an argument.
function M.call_forgetting(f, ...)
  local s = scoped(C.dl_grad_enter, C.dl_grad_exit, call_logged, f, ...)
  local r, used, n = s[1], s[2], s[3]
  local stray = false
  for i = 1, r.n do
    local y = r[i]
    if is_tensor(y) then
      stray = stray or (n == 0 and methods.requires_grad(y))
      r[i] = detach(y)
    end
  end
  local serial = C.dl_arena_hold()
  if serial ~= 0 then C.dl_arena_free(serial) end
  return r, used, stray
end
M.check_captured = check_captured

-- f returns y, grad_fn; grad_fn(dy) returns one gradient per tensor argument of f.
function dl.custom_gradient(f)
  if type(f) ~= "function" then raise("custom_gradient: expected a function, got " .. type(f)) end
  return function(...)
    local args = pack(...)
    local inputs = {}
    local recording = C.dl_is_recording() == 1
    for i = 1, args.n do
      local a = args[i]
      if type(a) == "number" then a = float_scalar(a); args[i] = a end
      if is_tensor(a) then
        inputs[#inputs + 1] = a
      elseif recording and type(a) == "table" and getmetatable(a) == nil then
        check_table_arg("custom_gradient", a, i, 0)
      end
    end
    -- The forward runs recorded, so that values it computes and the gradient function
    -- uses stay differentiable (higher orders); its output is cut from that history
    -- and attached to a node whose backward is grad_fn. Note [What a custom node does
    -- not see].
    local r
    if recording then
      check_captured("custom_gradient", f, inputs)
      local collecting = C.dl_varlog_depth() > 0   -- (under dl.grad alone no Variable's gradient is taken)
      local used
      r, used = call_logged(f, unpack(args, 1, args.n))
      for _, v in ipairs(collecting and used or {}) do
        local arg = false
        for _, x in ipairs(inputs) do arg = arg or rawequal(x, v) end
        if not arg then
          raise("custom_gradient: the function uses the Variable '" .. tostring(names[v]) .. "', which is not "
                .. "an argument: its gradient would be lost; pass it as an argument")
        end
      end
    else
      r = pack(f(unpack(args, 1, args.n)))
    end
    local y, grad_fn = r[1], r[2]
    if type(y) == "number" then y = float_scalar(y) end
    if not is_tensor(y) then
      raise("custom_gradient: the function must return a tensor and a gradient function, got " .. type(y))
    end
    if type(grad_fn) ~= "function" then
      raise("custom_gradient: the function's second result must be the gradient function, got " .. type(grad_fn))
    end
    return custom_record("custom_gradient", inputs, { y }, grad_fn)[1], unpack(r, 3, r.n)
  end
end

-- ---- gradient checking --------------------------------------------------------------------

-- Finite differences in float64, first and (unless opts.second_order == false) second
-- order. Returns true, or raises an error naming the input and element that differ.
function dl.gradcheck(f, inputs, opts)
  opts = core.options("gradcheck", opts, { eps = true, atol = true, rtol = true, second_order = true })
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  if type(f) ~= "function" then raise("gradcheck: expected a function, got " .. type(f)) end
  if is_tensor(inputs) or type(inputs) == "number" then inputs = { inputs } end
  if type(inputs) ~= "table" then raise("gradcheck: inputs must be a table of tensors") end
  local xs = {}
  for i, x in ipairs(inputs) do
    xs[i] = methods.clone(methods.to(to_float_tensor("gradcheck", x), "float64"))
  end
  local n = #xs
  local nums = {}
  for i = 1, n do nums[i] = i end
  local function scalar(...)
    local y = f(...)
    if type(y) == "number" then y = dl.tensor(y, { dtype = "float64" }) end
    return methods.sum(y)
  end
  local function check(analytic, value_of, what)
    for i = 1, n do
      local x, a = xs[i], analytic[i]
      local flatx = methods.view(x, -1)
      local flata = methods.view(methods.contiguous(a), -1)
      for j = 1, methods.numel(x) do
        local v = flatx[j]
        flatx[j] = v + eps
        local hi = value_of()
        flatx[j] = v - eps
        local lo = value_of()
        flatx[j] = v
        local num, ana = (hi - lo) / (2 * eps), flata[j]
        if abs(num - ana) > atol + rtol * abs(num) then
          raise(("gradcheck: %s derivative for input %d, element %d: analytic %.8g, numeric %.8g")
                :format(what, i, j, ana, num))
        end
      end
    end
  end
  local g = pack(dl.grad(scalar, nums)(unpack(xs, 1, n)))
  check(g, function() return methods.item(dl.no_grad(scalar, unpack(xs, 1, n))) end, "first")
  if opts.second_order ~= false then
    -- The gradient of sum_i <grad_i f, 1> against differences of the first derivative.
    local function gsum(...)
      local gs = pack(dl.grad(scalar, nums)(...))
      local acc = dl.tensor(0, { dtype = "float64" })
      for i = 1, n do acc = acc + methods.sum(gs[i]) end
      return acc
    end
    local h = pack(dl.grad(gsum, nums)(unpack(xs, 1, n)))
    check(h, function() return methods.item(gsum(unpack(xs, 1, n))) end, "second")
  end
  return true
end

return M
