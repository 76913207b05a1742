-- dlua.vmap: dl.vmap(f, {in_dims=, out_dims=}), f made to take a batch of examples
-- (docs/autograd.md, "Per-example work: dl.vmap"):
--
--   local per_example = dl.vmap(dl.grad(loss), { in_dims = { false, 1, 1 } })
--   local g = per_example(w, xs, ys)        -- g[i] is dl.grad(loss)(w, xs[i], ys[i])
--
-- f runs once per call, on the first example of each batched argument (a copy of it),
-- with its ops captured as dl.export captures them (Note [Strict capture] in
-- export/capture.cpp: a dl.grad inside is ops too). The graph then runs once on the
-- whole batch, each op by its batching rule (Note [Batching rules] in export/vmap.cpp):
-- a product of per-example vectors becomes one batched matmul, a reduction moves its
-- dims, a conv folds the batch into its own. Not a Lua loop: the Lua function runs once.
-- So, as in JAX, f may not read a tensor's values into Lua (x:item(), `if x > 0`): one
-- path must serve every example; use dl.where. An op without a rule runs once per
-- example, and a one-time warning names it.
--
-- Dims are 1-based as everywhere in dlua: in_dims 1 is PyTorch's in_dims=0. in_dims is
-- a number for every argument or a list with one entry per argument (false: the
-- argument is shared by every example); out_dims is a number or a list per result.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local C, raise, raise_last = core.C, core.raise, core.raise_last
local dl, is_tensor, hid, wrap = T.dl, T.is_tensor, T.hid, T.wrap
local type, select, tostring, pairs, ipairs, floor =
  type, select, tostring, pairs, ipairs, math.floor
local unpack, insert, ffi_string = unpack or table.unpack, table.insert, ffi.string
local stderr = io and io.stderr

local function pack(...) return { n = select("#", ...), ... } end

local OPTIONS = { in_dims = true, out_dims = true }

-- Ops already named in a warning (once per process), and those of the last call.
local warned, last_looped = {}, {}

-- Entry i of a dims spec: a number for all, or the list's entry (false/nil: none).
local function dim_of(spec, i)
  if type(spec) == "table" then return spec[i] or nil end
  return spec
end

local function check_spec(what, spec)
  if spec == nil or spec == false then return end
  if type(spec) == "number" then
    if spec ~= floor(spec) or spec == 0 then raise("vmap: " .. what .. " must be a nonzero integer dim, got " .. spec) end
    return
  end
  if type(spec) ~= "table" then core.bad_arg("vmap", "a dim or a list of dims for " .. what, spec) end
  for k, d in pairs(spec) do
    if type(k) ~= "number" or (d ~= false and (type(d) ~= "number" or d ~= floor(d) or d == 0)) then
      raise("vmap: " .. what .. "[" .. tostring(k) .. "] must be a nonzero integer dim or false")
    end
  end
end

-- A 1-based dim d (negative: from the end) of a tensor with nd dims, or an error.
local function dim_in(what, d, nd)
  local r = d < 0 and nd + 1 + d or d
  if r < 1 or r > nd then
    raise("vmap: " .. what .. " is dim " .. d .. ", but the tensor has " .. nd .. " dims")
  end
  return r
end

-- x with its dim `from` moved to position `to` (1-based).
local function moved(x, from, to)
  if from == to then return x end
  local order = {}
  for d = 1, #x.shape do
    if d ~= from then order[#order + 1] = d end
  end
  insert(order, to, from)
  return x:permute(order)
end

-- Runs f on one example under a capture: the capture's number and f's result count.
local function capture(f, examples, n, ids, m)
  if C.dl_vmap_begin(ids, m) ~= 0 then raise_last() end
  return require("dlua.export")._run_captured("vmap", f, examples, n)
end

local function batched(f, in_dims, out_dims, ...)
  local args = pack(...)
  local n = args.n
  local batch, examples, inputs, flags = nil, {}, {}, {}
  -- A list of in_dims has an entry for each tensor argument (false: shared), as
  -- functorch's in_dims must match the structure of the inputs.
  if type(in_dims) == "table" and table.maxn(in_dims) > n then
    raise("vmap: in_dims has " .. table.maxn(in_dims) .. " entries for " .. n .. " argument(s)")
  end
  for i = 1, n do
    local a, d = args[i], dim_of(in_dims, i)
    if is_tensor(a) and type(in_dims) == "table" and in_dims[i] == nil then
      raise("vmap: in_dims has no entry for argument " .. i .. ", a tensor: give its dim, or false to share it "
            .. "(in_dims is a dim for every argument or a list with an entry per argument)")
    end
    if is_tensor(a) then
      if d then
        local nd = #a.shape
        if nd == 0 then raise("vmap: argument " .. i .. " is a 0-dim tensor, which has no dim to map over") end
        d = dim_in("in_dims[" .. i .. "]", d, nd)
        local b = a.shape[d]
        if batch == nil then
          batch = b
        elseif b ~= batch then
          raise("vmap: argument " .. i .. " has " .. b .. " examples along dim " .. d .. ", an earlier one " .. batch)
        end
        examples[i] = a:select(d, 1):clone()
        inputs[#inputs + 1], flags[#flags + 1] = moved(a, d, 1), 1
      else
        examples[i] = a
        inputs[#inputs + 1], flags[#flags + 1] = a, 0
      end
      if dl.is_grad_enabled() and a:requires_grad() then
        raise("vmap: argument " .. i .. " requires grad: the batched results carry no gradient history, " ..
              "so differentiate inside the mapped function (dl.vmap(dl.grad(f))), not through it")
      end
    else
      if d and type(in_dims) == "table" then
        raise("vmap: in_dims[" .. i .. "] maps argument " .. i .. ", a " .. core.typename(a) .. ", not a tensor")
      end
      examples[i] = a
    end
  end
  if batch == nil then raise("vmap: no argument is mapped over (in_dims names no tensor argument)") end
  if batch == 0 then raise("vmap: the mapped dim has no examples") end
  local m = #inputs
  local ids, phys, bat = ffi.new("uint64_t[?]", m + 1), ffi.new("uint64_t[?]", m + 1), ffi.new("int[?]", m + 1)
  local k = 1
  for i = 1, n do
    if is_tensor(args[i]) then
      ids[k - 1], phys[k - 1], bat[k - 1] = hid(examples[i]), hid(inputs[k]), flags[k]
      k = k + 1
    end
  end
  local cap, nres = capture(f, examples, n, ids, m)
  local out, outb = ffi.new("uint64_t[?]", nres + 1), ffi.new("int[?]", nres + 1)
  local got = C.dl_vmap_run(cap, phys, bat, m, batch, out, outb, nres)
  C.dl_export_clear()
  if got < 0 then raise_last() end
  last_looped = {}
  for j = 0, 63 do
    local op = C.dl_vmap_looped(j)
    if op == nil then break end
    local name = ffi_string(op)
    last_looped[#last_looped + 1] = name
    if not warned[name] and stderr then
      warned[name] = true
      stderr:write("dlua: vmap: ", name, " has no batching rule; it runs once per example\n")
    end
  end
  local results = {}
  for j = 1, got do
    local y = wrap(out[j - 1])
    if outb[j - 1] == 0 then   -- the same for every example
      local shape = { batch }
      for d = 1, #y.shape do shape[d + 1] = y.shape[d] end
      y = y:unsqueeze(1):expand(shape)
    end
    local od = dim_of(out_dims, j) or 1
    results[j] = moved(y, 1, dim_in("out_dims[" .. j .. "]", od, #y.shape))
  end
  return unpack(results, 1, got)
end

-- Inside a compiled function the call is set aside while the batch runs (Note
-- [Suspended calls] in compile/trace.h): the mapped function is captured and run as
-- outside, on the values the call has computed so far.
local function batched_call(f, in_dims, out_dims, ...)
  if C.dl_compile_active() == 0 then return batched(f, in_dims, out_dims, ...) end
  if C.dl_compile_suspend() < 0 then raise_last() end
  local r = pack(pcall(batched, f, in_dims, out_dims, ...))
  C.dl_compile_resume()
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

-- dl.vmap(f [, {in_dims = 1, out_dims = 1}]): a function of batches.
function dl.vmap(f, opts)
  core.check_callable("vmap", f)
  opts = core.options("vmap", opts, OPTIONS)
  local in_dims, out_dims = opts.in_dims, opts.out_dims
  if in_dims == nil then in_dims = 1 end
  if out_dims == nil then out_dims = 1 end
  check_spec("in_dims", in_dims)
  check_spec("out_dims", out_dims)
  return function(...) return batched_call(f, in_dims, out_dims, ...) end
end

-- The ops of the last call that had no batching rule and ran once per example.
local function looped()
  local r = {}
  for i, name in ipairs(last_looped) do r[i] = name end
  return r
end

return { vmap = dl.vmap, looped = looped }
