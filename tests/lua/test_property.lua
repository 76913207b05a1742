-- Property test: random expression graphs, their values checked against an independent
-- float64 evaluation written here in plain Lua, and their gradients against central
-- finite differences of that evaluation (and, for some, second derivatives: the
-- gradient of a gradient against finite differences of the first).
--
-- Each graph has 1 to 3 inputs whose shapes broadcast to a common base shape, and up to
-- a dozen nodes: smooth pointwise ops, kinked ones (abs, relu, maximum, clamp ...),
-- binary ops between any two earlier nodes (broadcasting), reductions and softmaxes
-- over a dim with keepdim, expand and transpose views. Domains are kept valid by
-- construction (log of x*x + 0.5, division by y*y + 0.5). The reference evaluator
-- records how close any kinked op came to its kink; a graph whose inputs sit within
-- the finite-difference step of a kink has no defined numerical gradient and is
-- checked for values only.
--
-- Deterministic: the graphs come from a fixed seed. To explore, set
-- DLUA_PROPERTY_SEED and DLUA_PROPERTY_COUNT (the failing graph is printed with its
-- seed and index, so it can be replayed alone with DLUA_PROPERTY_ONLY=<index>).
local H = require("harness")
local dl = require("dlua")

local SEED = tonumber(os.getenv("DLUA_PROPERTY_SEED")) or 20261122
local COUNT = tonumber(os.getenv("DLUA_PROPERTY_COUNT")) or 250
local ONLY = tonumber(os.getenv("DLUA_PROPERTY_ONLY"))
local FD_STEP = 1e-6
local KINK_MARGIN = 1e-4   -- a kinked op this close to its kink: no gradient check

local abs, exp, log, sqrt, floor, max, min = math.abs, math.exp, math.log, math.sqrt, math.floor,
  math.max, math.min

-- ---- a small deterministic generator (xorshift; math.random differs between builds) -----------

local function Rng(seed)
  local s = seed % 2147483647
  if s <= 0 then s = s + 2147483646 end
  local r = {}
  function r.next()          -- Park-Miller: exact in doubles, the same everywhere
    s = (s * 16807) % 2147483647
    return s / 2147483647
  end
  function r.int(lo, hi) return lo + floor(r.next() * (hi - lo + 1)) end
  function r.pick(t) return t[r.int(1, #t)] end
  function r.uniform(lo, hi) return lo + (hi - lo) * r.next() end
  return r
end

-- ---- reference tensors: {shape = {...}, data = {...}} row-major float64 ------------------------

local function numel(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

local function strides(shape)
  local st, acc = {}, 1
  for i = #shape, 1, -1 do st[i] = acc acc = acc * shape[i] end
  return st
end

local function broadcast_shape(a, b)
  local n = max(#a, #b)
  local out = {}
  for i = 1, n do
    local da = a[#a - n + i] or 1
    local db = b[#b - n + i] or 1
    assert(da == db or da == 1 or db == 1, "reference: shapes do not broadcast")
    out[i] = da == 1 and db or da
  end
  return out
end

-- The flat index into `t` of the element at multi-index `idx` of a broadcast result.
local function source_index(t, idx, nout)
  local sh, st = t.shape, strides(t.shape)
  local off = 0
  for i = 1, #sh do
    local k = idx[nout - #sh + i]
    if sh[i] ~= 1 then off = off + (k - 1) * st[i] end
  end
  return off + 1
end

local function each_index(shape, fn)
  local n = numel(shape)
  local idx = {}
  for i = 1, #shape do idx[i] = 1 end
  for flat = 1, n do
    fn(idx, flat)
    for d = #shape, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] <= shape[d] then break end
      idx[d] = 1
    end
  end
end

local function map1(t, f)
  local out = { shape = t.shape, data = {} }
  for i = 1, #t.data do out.data[i] = f(t.data[i]) end
  return out
end

local function map2(a, b, f)
  local shape = broadcast_shape(a.shape, b.shape)
  local out = { shape = shape, data = {} }
  each_index(shape, function(idx, flat)
    out.data[flat] = f(a.data[source_index(a, idx, #shape)], b.data[source_index(b, idx, #shape)])
  end)
  return out
end

-- Reduces dim d (keepdim): fn receives the list of values along it, returns one value.
local function reduce_dim(t, d, fn)
  local shape = {}
  for i = 1, #t.shape do shape[i] = t.shape[i] end
  local len = shape[d]
  shape[d] = 1
  local st = strides(t.shape)
  local out = { shape = shape, data = {} }
  each_index(shape, function(idx, flat)
    local base = 0
    for i = 1, #idx do base = base + (idx[i] - 1) * st[i] end
    local vals = {}
    for k = 1, len do vals[k] = t.data[base + (k - 1) * st[d] + 1] end
    out.data[flat] = fn(vals)
  end)
  return out
end

-- Applies fn to each line along dim d; fn returns a list of the same length.
local function along_dim(t, d, fn)
  local out = { shape = t.shape, data = {} }
  local len, st = t.shape[d], strides(t.shape)
  local outer = {}
  for i = 1, #t.shape do outer[i] = t.shape[i] end
  outer[d] = 1
  each_index(outer, function(idx)
    local base = 0
    for i = 1, #idx do base = base + (idx[i] - 1) * st[i] end
    local vals = {}
    for k = 1, len do vals[k] = t.data[base + (k - 1) * st[d] + 1] end
    local r = fn(vals)
    for k = 1, len do out.data[base + (k - 1) * st[d] + 1] = r[k] end
  end)
  return out
end

local function transpose(t, i, j)
  local shape = {}
  for k = 1, #t.shape do shape[k] = t.shape[k] end
  shape[i], shape[j] = shape[j], shape[i]
  local st = strides(t.shape)
  local out = { shape = shape, data = {} }
  each_index(shape, function(idx, flat)
    local off = 0
    for k = 1, #idx do
      local src = k == i and j or k == j and i or k
      off = off + (idx[k] - 1) * st[src]
    end
    out.data[flat] = t.data[off + 1]
  end)
  return out
end

local function expand(t, shape)
  local out = { shape = shape, data = {} }
  each_index(shape, function(idx, flat) out.data[flat] = t.data[source_index(t, idx, #shape)] end)
  return out
end

-- ---- the ops: a reference implementation and the dlua call of each -----------------------------
-- kink(ctx, v) reports how close an input came to a point where the op is not smooth.

local function erf(x)
  -- Abramowitz-Stegun 7.1.26 is too coarse for 1e-9; a series/continued fraction pair is
  -- exact to double precision.
  local ax = abs(x)
  if ax < 2.5 then
    local sum, term, k = ax, ax, 0
    repeat
      k = k + 1
      term = term * (-ax * ax) / k
      local add = term / (2 * k + 1)
      sum = sum + add
    until abs(add) <= 1e-17 * abs(sum)
    local r = 2 / sqrt(math.pi) * sum
    return x < 0 and -r or r
  end
  -- erfc continued fraction (Lentz), accurate for |x| >= 2.5
  local tiny = 1e-300
  local b = ax * ax + 0.5
  local c, d = 1 / tiny, 1 / b
  local h = d
  for i = 1, 300 do
    local an = -i * (i - 0.5)
    b = b + 2
    d = an * d + b; if abs(d) < tiny then d = tiny end
    c = b + an / c; if abs(c) < tiny then c = tiny end
    d = 1 / d
    local del = d * c
    h = h * del
    if abs(del - 1) < 1e-16 then break end
  end
  local erfc = ax * h * exp(-ax * ax) / sqrt(math.pi)
  local r = 1 - erfc
  return x < 0 and -r or r
end

local function softplus(x) return x > 0 and x + log(1 + exp(-x)) or log(1 + exp(x)) end
local function sigmoid(x) return 1 / (1 + exp(-x)) end
local function tanh(x)
  if abs(x) > 20 then return x > 0 and 1 or -1 end
  local e = exp(2 * x)
  return (e - 1) / (e + 1)
end
local function expm1(x)
  if abs(x) < 1e-5 then return x + x * x / 2 + x * x * x / 6 end
  return exp(x) - 1
end
local function log1p(x)
  if abs(x) < 1e-4 then return x - x * x / 2 + x * x * x / 3 end
  return log(1 + x)
end

-- Unary ops: name -> {ref = f(v, ctx), dl = f(x)}.
local UNARY = {
  neg = { ref = function(v) return -v end, dl = function(x) return -x end },
  exp = { ref = function(v) return exp(0.5 * v) end, dl = function(x) return dl.exp(x * 0.5) end },
  tanh = { ref = tanh, dl = dl.tanh },
  sigmoid = { ref = sigmoid, dl = dl.sigmoid },
  sin = { ref = math.sin, dl = dl.sin },
  cos = { ref = math.cos, dl = dl.cos },
  softplus = { ref = softplus, dl = dl.softplus },
  erf = { ref = erf, dl = dl.erf },
  expm1 = { ref = function(v) return expm1(0.5 * v) end, dl = function(x) return dl.expm1(x * 0.5) end },
  log1p_sq = { ref = function(v) return log1p(v * v) end, dl = function(x) return dl.log1p(x * x) end },
  log_pos = { ref = function(v) return log(v * v + 0.5) end, dl = function(x) return dl.log(x * x + 0.5) end },
  sqrt_pos = { ref = function(v) return sqrt(v * v + 0.5) end, dl = function(x) return dl.sqrt(x * x + 0.5) end },
  rsqrt_pos = { ref = function(v) return 1 / sqrt(v * v + 0.5) end,
                dl = function(x) return dl.rsqrt(x * x + 0.5) end },
  square = { ref = function(v) return v * v end, dl = function(x) return x ^ 2 end },
  affine = { ref = function(v) return 1.5 - 0.75 * v end, dl = function(x) return 1.5 - 0.75 * x end },
  scale_div = { ref = function(v) return v / 3 end, dl = function(x) return x / 3 end },
  abs = { ref = function(v, ctx) ctx.kink(v) return abs(v) end, dl = dl.abs },
  relu = { ref = function(v, ctx) ctx.kink(v) return max(v, 0) end, dl = dl.relu },
  clamp = { ref = function(v, ctx) ctx.kink(v + 0.5) ctx.kink(v - 0.5) return min(max(v, -0.5), 0.5) end,
            dl = function(x) return x:clamp(-0.5, 0.5) end },
}

local BINARY = {
  add = { ref = function(a, b) return a + b end, dl = function(x, y) return x + y end },
  sub = { ref = function(a, b) return a - b end, dl = function(x, y) return x - y end },
  mul = { ref = function(a, b) return a * b end, dl = function(x, y) return x * y end },
  div = { ref = function(a, b) return a / (b * b + 0.5) end, dl = function(x, y) return x / (y * y + 0.5) end },
  pow = { ref = function(a, b) return (a * a + 0.5) ^ (0.5 * b) end,
          dl = function(x, y) return dl.pow(x * x + 0.5, y * 0.5) end },
  atan2 = { ref = function(a, b, ctx) ctx.kink(sqrt(a * a + b * b)) return math.atan2(a, b + 2) end,
            dl = function(x, y) return dl.atan2(x, y + 2) end },
  maximum = { ref = function(a, b, ctx) ctx.kink(a - b) return max(a, b) end, dl = dl.maximum },
  minimum = { ref = function(a, b, ctx) ctx.kink(a - b) return min(a, b) end, dl = dl.minimum },
}

local function sum(vals) local s = 0 for i = 1, #vals do s = s + vals[i] end return s end
local function lse(vals)
  local m = -math.huge
  for i = 1, #vals do m = max(m, vals[i]) end
  local s = 0
  for i = 1, #vals do s = s + exp(vals[i] - m) end
  return m + log(s)
end

-- Ops over a dim d (keepdim); `need` is the smallest size of that dim they accept.
local DIMWISE = {
  sum = { ref = function(t, d) return reduce_dim(t, d, sum) end, dl = function(x, d) return x:sum(d, true) end },
  mean = { ref = function(t, d) return reduce_dim(t, d, function(v) return sum(v) / #v end) end,
           dl = function(x, d) return x:mean(d, true) end },
  logsumexp = { ref = function(t, d) return reduce_dim(t, d, lse) end,
                dl = function(x, d) return x:logsumexp(d, true) end },
  amax = { ref = function(t, d, ctx)
             return reduce_dim(t, d, function(v)
               local a, b = -math.huge, -math.huge
               for i = 1, #v do
                 if v[i] > a then a, b = v[i], a elseif v[i] > b then b = v[i] end
               end
               if #v > 1 then ctx.kink(a - b) end
               return a
             end)
           end,
           dl = function(x, d) return x:amax(d, true) end },
  var = { need = 2, ref = function(t, d) return reduce_dim(t, d, function(v)
            local m = sum(v) / #v
            local s = 0
            for i = 1, #v do s = s + (v[i] - m) ^ 2 end
            return s / (#v - 1)
          end) end,
          dl = function(x, d) return x:var(d, true) end },
  norm = { ref = function(t, d, ctx) return reduce_dim(t, d, function(v)
             local s = 0
             for i = 1, #v do s = s + v[i] * v[i] end
             ctx.kink(sqrt(s))
             return sqrt(s)
           end) end,
           dl = function(x, d) return x:norm(d, true) end },
  softmax = { ref = function(t, d) return along_dim(t, d, function(v)
                local l = lse(v)
                local r = {}
                for i = 1, #v do r[i] = exp(v[i] - l) end
                return r
              end) end,
              dl = function(x, d) return dl.softmax(x, d) end },
  log_softmax = { ref = function(t, d) return along_dim(t, d, function(v)
                    local l = lse(v)
                    local r = {}
                    for i = 1, #v do r[i] = v[i] - l end
                    return r
                  end) end,
                  dl = function(x, d) return dl.log_softmax(x, d) end },
}

local function sorted_keys(t)
  local k = {}
  for name in pairs(t) do k[#k + 1] = name end
  table.sort(k)
  return k
end
local UNARY_NAMES, BINARY_NAMES, DIM_NAMES = sorted_keys(UNARY), sorted_keys(BINARY), sorted_keys(DIMWISE)

-- ---- graphs ------------------------------------------------------------------------------------

-- A graph: inputs (shapes and values), then nodes, each referring to earlier ones by
-- position (inputs first). The last node is the output.
local function random_graph(rng)
  local nd = rng.int(1, 3)
  local base = {}
  for i = 1, nd do base[i] = rng.int(1, 3) end
  local g = { base = base, inputs = {}, nodes = {} }
  local shapes = {}
  for i = 1, rng.int(1, 3) do
    -- a shape that broadcasts to base: trailing dims, some of them 1
    local drop = rng.int(0, nd - 1)
    local sh = {}
    for k = drop + 1, nd do sh[#sh + 1] = rng.next() < 0.3 and 1 or base[k] end
    local vals = {}
    for k = 1, numel(sh) do vals[k] = rng.uniform(-1.5, 1.5) end
    g.inputs[i] = { shape = sh, data = vals }
    shapes[#shapes + 1] = sh
  end
  local function any_value() return rng.int(1, #shapes) end
  for _ = 1, rng.int(1, 12) do
    local kind = rng.next()
    local node
    if kind < 0.4 then
      node = { kind = "unary", op = rng.pick(UNARY_NAMES), a = any_value() }
    elseif kind < 0.75 then
      node = { kind = "binary", op = rng.pick(BINARY_NAMES), a = any_value(), b = any_value() }
    elseif kind < 0.9 then
      local a = any_value()
      local sh = shapes[a]
      if #sh == 0 then
        node = { kind = "unary", op = rng.pick(UNARY_NAMES), a = a }
      else
        local name = rng.pick(DIM_NAMES)
        local d = rng.int(1, #sh)
        if sh[d] < (DIMWISE[name].need or 1) then name = "sum" end
        node = { kind = "dim", op = name, a = a, d = d }
      end
    else
      local a = any_value()
      local sh = shapes[a]
      local i, j = rng.int(1, max(#sh, 1)), rng.int(1, max(#sh, 1))
      if #sh >= 2 and i ~= j and base[#base - #sh + i] == base[#base - #sh + j] then
        node = { kind = "transpose", a = a, i = i, j = j }
      else
        node = { kind = "expand", a = a }
      end
    end
    g.nodes[#g.nodes + 1] = node
    -- the node's shape, to plan later nodes
    local sa = shapes[node.a]
    local out
    if node.kind == "binary" then out = broadcast_shape(sa, shapes[node.b])
    elseif node.kind == "dim" then
      out = {}
      for k = 1, #sa do out[k] = sa[k] end
      if not (node.op == "softmax" or node.op == "log_softmax") then out[node.d] = 1 end
    elseif node.kind == "transpose" then
      out = {}
      for k = 1, #sa do out[k] = sa[k] end
      out[node.i], out[node.j] = out[node.j], out[node.i]
    elseif node.kind == "expand" then out = base
    else out = sa end
    shapes[#shapes + 1] = out
  end
  return g
end

local function describe(g)
  local parts = { "base " .. H.show(g.base) }
  for i, t in ipairs(g.inputs) do parts[#parts + 1] = ("v%d = input %s"):format(i, H.show(t.shape)) end
  local n = #g.inputs
  for k, node in ipairs(g.nodes) do
    local s
    if node.kind == "unary" then s = ("%s(v%d)"):format(node.op, node.a)
    elseif node.kind == "binary" then s = ("%s(v%d, v%d)"):format(node.op, node.a, node.b)
    elseif node.kind == "dim" then s = ("%s(v%d, dim %d)"):format(node.op, node.a, node.d)
    elseif node.kind == "transpose" then s = ("transpose(v%d, %d, %d)"):format(node.a, node.i, node.j)
    else s = ("expand(v%d)"):format(node.a) end
    parts[#parts + 1] = ("v%d = %s"):format(n + k, s)
  end
  return table.concat(parts, "; ")
end

-- The reference: values of every node; ctx.closest is the nearest approach to a kink.
local function eval_ref(g, inputs)
  local ctx = { closest = math.huge, biggest = 0 }
  function ctx.kink(v) ctx.closest = min(ctx.closest, abs(v)) end
  local vals = {}
  for i, t in ipairs(inputs) do vals[i] = t end
  for _, node in ipairs(g.nodes) do
    local a = vals[node.a]
    local r
    if node.kind == "unary" then
      local f = UNARY[node.op].ref
      r = map1(a, function(v) return f(v, ctx) end)
    elseif node.kind == "binary" then
      local f = BINARY[node.op].ref
      r = map2(a, vals[node.b], function(x, y) return f(x, y, ctx) end)
    elseif node.kind == "dim" then r = DIMWISE[node.op].ref(a, node.d, ctx)
    elseif node.kind == "transpose" then r = transpose(a, node.i, node.j)
    else r = expand(a, g.base) end
    for i = 1, #r.data do ctx.biggest = max(ctx.biggest, abs(r.data[i])) end
    vals[#vals + 1] = r
  end
  return vals[#vals], ctx
end

local function eval_dl(g, xs)
  local vals = {}
  for i, x in ipairs(xs) do vals[i] = x end
  for _, node in ipairs(g.nodes) do
    local a = vals[node.a]
    local r
    if node.kind == "unary" then r = UNARY[node.op].dl(a)
    elseif node.kind == "binary" then r = BINARY[node.op].dl(a, vals[node.b])
    elseif node.kind == "dim" then r = DIMWISE[node.op].dl(a, node.d)
    elseif node.kind == "transpose" then r = a:transpose(node.i, node.j)
    else r = a:expand(g.base) end
    vals[#vals + 1] = r
  end
  return vals[#vals]
end

-- A dlua tensor from a reference one (a 0-dim tensor for shape {}).
local function to_dl(t, dtype)
  local x = dl.tensor(t.data, { dtype = dtype })
  return x:reshape(t.shape)
end

local function flat_values(x)
  local t = x:contiguous():reshape(-1):to("float64"):totable()
  return t
end

-- The scalar whose gradient is checked: sum(out * w), w fixed per graph.
local function weights_for(shape, rng)
  local w = { shape = shape, data = {} }
  for i = 1, numel(shape) do w.data[i] = rng.uniform(0.5, 1.5) * (rng.next() < 0.5 and -1 or 1) end
  return w
end

local function loss_ref(g, inputs, w)
  local out = eval_ref(g, inputs)
  local s = 0
  local prod = map2(out, w, function(a, b) return a * b end)
  for i = 1, #prod.data do s = s + prod.data[i] end
  return s
end

local function close(got, want, rtol, atol)
  return abs(got - want) <= atol + rtol * abs(want)
end

local function check_graph(index, g, rng, stats)
  local where = ("graph %d (seed %d): %s"):format(index, SEED, describe(g))
  local ref, ctx = eval_ref(g, g.inputs)
  for i = 1, #ref.data do
    if ref.data[i] ~= ref.data[i] or abs(ref.data[i]) > 1e6 then stats.skipped = stats.skipped + 1 return end
  end
  -- values, float64 and float32
  local xs64, xs32 = {}, {}
  for i, t in ipairs(g.inputs) do xs64[i] = to_dl(t, "float64") xs32[i] = to_dl(t, "float32") end
  local y64 = eval_dl(g, xs64)
  H.eq(y64.shape, ref.shape, where .. ": shape")
  H.eq(y64.dtype, "float64", where .. ": dtype")
  local got = flat_values(y64)
  for i = 1, #got do
    if not close(got[i], ref.data[i], 1e-9, 1e-12 * (1 + ctx.biggest)) then
      error(("%s: float64 value %d is %.17g, the reference %.17g"):format(where, i, got[i], ref.data[i]))
    end
  end
  local y32 = eval_dl(g, xs32)
  H.eq(y32.dtype, "float32", where .. ": float32 dtype")
  got = flat_values(y32)
  for i = 1, #got do
    if not close(got[i], ref.data[i], 2e-3, 1e-4 * (1 + ctx.biggest)) then
      error(("%s: float32 value %d is %.9g, the reference %.17g"):format(where, i, got[i], ref.data[i]))
    end
  end
  stats.values = stats.values + 1

  -- gradients: every input, against central differences of the reference
  if ctx.closest < KINK_MARGIN then stats.kinked = stats.kinked + 1 return end
  local w = weights_for(ref.shape, rng)
  local wt = to_dl(w, "float64")
  local function loss(...) return (eval_dl(g, { ... }) * wt):sum() end
  local argnums = {}
  for i = 1, #xs64 do argnums[i] = i end
  local grads = { dl.grad(loss, argnums)(unpack(xs64)) }
  for i, t in ipairs(g.inputs) do
    H.eq(grads[i].shape, t.shape, where .. ": gradient shape of input " .. i)
    local gv = flat_values(grads[i])
    for k = 1, #t.data do
      local keep = t.data[k]
      t.data[k] = keep + FD_STEP
      local up = loss_ref(g, g.inputs, w)
      t.data[k] = keep - FD_STEP
      local down = loss_ref(g, g.inputs, w)
      t.data[k] = keep
      local fd = (up - down) / (2 * FD_STEP)
      if not close(gv[k], fd, 1e-4, 1e-6 * (1 + ctx.biggest)) then
        error(("%s: d/d input %d [%d] is %.12g, finite differences %.12g"):format(where, i, k, gv[k], fd))
      end
    end
  end
  stats.grads = stats.grads + 1

  -- second order (every third graph): d/dx1 of <grad_x1, v> against finite differences
  -- of the first gradient, which the first-order check above already trusts.
  if index % 3 ~= 0 then return end
  local x1 = g.inputs[1]
  local v = weights_for(x1.shape, rng)
  local vt = to_dl(v, "float64")
  local function first(x, ...) return dl.grad(loss)(x, ...) end
  local function gv_dot(x, ...) return (first(x, ...) * vt):sum() end
  local hv = flat_values(dl.grad(gv_dot)(unpack(xs64)))
  local dot_at = function(shift)
    local xs = {}
    for i, t in ipairs(g.inputs) do xs[i] = to_dl(t, "float64") end
    xs[1] = xs[1] + shift
    return flat_values((first(unpack(xs)) * vt):sum())[1]
  end
  for k = 1, #x1.data do
    local e = {}
    for j = 1, #x1.data do e[j] = j == k and 1e-5 or 0 end
    local shift = to_dl({ shape = x1.shape, data = e }, "float64")
    local fd = (dot_at(shift) - dot_at(-shift)) / 2e-5
    if not close(hv[k], fd, 1e-3, 1e-5 * (1 + ctx.biggest)) then
      error(("%s: second derivative [%d] is %.12g, finite differences %.12g"):format(where, k, hv[k], fd))
    end
  end
  stats.second = stats.second + 1
end

H.test(("random graphs: values and gradients (%d graphs, seed %d)"):format(COUNT, SEED), function()
  local stats = { values = 0, grads = 0, second = 0, kinked = 0, skipped = 0 }
  for index = 1, COUNT do
    local rng = Rng(SEED * 7919 + index)
    local g = random_graph(rng)
    if not ONLY or ONLY == index then check_graph(index, g, rng, stats) end
  end
  print(("        %d graphs: %d values checked, %d first and %d second derivatives, %d near a kink, "
         .. "%d out of range"):format(COUNT, stats.values, stats.grads, stats.second, stats.kinked,
                                      stats.skipped))
  -- The generator must keep producing checkable graphs (a regression here would make
  -- the test vacuous).
  if not ONLY then
    H.ok(stats.values >= COUNT * 0.8, "too few graphs had their values checked")
    H.ok(stats.grads >= COUNT * 0.5, "too few graphs had their gradients checked")
  end
end)

H.run()
