-- dlua.data: input pipelines, as dl.data (docs/training.md), composed
-- like tf.data:
--
--   local ds = dl.data.from_tensors(images, labels):shuffle(42):batch(64)
--   for epoch = 1, 5 do
--     for x, y in ds:iter() do ... end          -- reshuffled at every epoch
--   end
--   ds:map(function(x, y) return x:flatten(2), y end):take(10)
--
-- An element is a tuple of values (tensors or numbers), like the results of a Lua
-- function. from_tensors(x, y, ...) has one element per row (index along dim 1) of its
-- tensors: a view of the row, as indexing PyTorch's TensorDataset gives, while a batch
-- holds new tensors, as its default_collate makes.
--
-- Speed: while a pipeline is still about rows of the source tensors (shuffle, take and
-- skip before any map), it is planned as an index tensor (a permutation, a prefix) and
-- each batch is gathered from every source tensor with one index_select: no Lua loop runs
-- per element. A map placed before batch runs once per element (its function sees one
-- row), as tf.data's does; put it after batch to run it once per batch.
--
-- Shuffling: shuffle(seed) draws a fresh permutation at each pass (each iter()) from a
-- stream that depends only on the seed and the pass number, so a run is reproducible
-- and every epoch differs; shuffle() without a seed draws from the engine's generator
-- (dl.manual_seed). A shuffle after a map or a batch shuffles the whole stream in
-- memory (there is no tf.data-style bounded buffer).
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local C = core.C
local raise, bad_arg, typename, raise_last = core.raise, core.bad_arg, core.typename, core.raise_last
local is_tensor, wrap, hid = T.is_tensor, T.wrap, T.hid
local dl = T.dl
local type, select, tostring, ipairs, pairs, setmetatable, getmetatable, unpack =
  type, select, tostring, ipairs, pairs, setmetatable, getmetatable, unpack
local floor, min, max = math.floor, math.min, math.max
local ffi_new = ffi.new
local INT64 = core.dtype_codes.int64

dl.data = dl.data or {}
local data = dl.data

local Dataset = {}
Dataset.__index = Dataset
data.Dataset = Dataset

local function pack(...) return { n = select("#", ...), ... } end

local function node(kind, parent, fields)
  fields.kind, fields.parent = kind, parent
  return setmetatable(fields, Dataset)
end

local function check_ds(op, ds)
  if getmetatable(ds) ~= Dataset then raise(op .. ": call it on a data set, as ds:" .. op .. "(...)") end
end

local function count_arg(op, n, what)
  if type(n) ~= "number" or n ~= floor(n) or n < 0 then
    raise(op .. ": " .. what .. " must be an integer >= 0, got " .. tostring(n))
  end
  return n
end

-- ---- sources -------------------------------------------------------------------------------

-- One element per index along dim 1 of every tensor (all the same length).
function data.from_tensors(...)
  local n = select("#", ...)
  if n == 0 then raise("from_tensors: expected at least one tensor") end
  local ts, len = {}, nil
  for i = 1, n do
    local t = select(i, ...)
    if not is_tensor(t) then raise("from_tensors: argument " .. i .. " is a " .. typename(t) .. ", expected a tensor") end
    if t:dim() == 0 then raise("from_tensors: argument " .. i .. " is a 0-dim tensor; expected at least 1 dimension") end
    local l = t:size(1)
    if len and l ~= len then
      raise("from_tensors: tensors have different sizes along dim 1: " .. len .. " and " .. l
            .. " (argument " .. i .. ")")
    end
    len = l
    ts[i] = t
  end
  return node("tensors", nil, { tensors = ts, length = len })
end
data.from_tensor_slices = data.from_tensors

-- data.random_split(ds, sizes [, seed]): disjoint data sets of a data set of tensors
-- (from_tensors), as PyTorch's random_split: sizes are counts summing to its length, or
-- fractions summing to 1 (the remainder given one by one to the first parts); the rows
-- are dealt by one permutation, from the seed (or the engine's generator), so a seed
-- gives the same split every run. Each part holds copies of its rows.
function data.random_split(ds, sizes, seed)
  local op = "random_split"
  check_ds(op, ds)
  if ds.kind ~= "tensors" then
    raise(op .. ": expected a data set of tensors (dl.data.from_tensors); split before shuffle, map or batch")
  end
  if type(sizes) ~= "table" or #sizes == 0 then bad_arg(op, "a list of sizes or fractions", sizes) end
  local n, counts, total = ds.length, {}, 0
  for i, v in ipairs(sizes) do
    if type(v) ~= "number" or v < 0 then raise(op .. ": size " .. i .. " must be a number >= 0, got " .. tostring(v)) end
    total = total + v
  end
  if math.abs(total - 1) < 1e-9 and n ~= 1 then   -- fractions
    local given = 0
    for i, v in ipairs(sizes) do counts[i] = floor(n * v); given = given + counts[i] end
    for i = 1, n - given do counts[(i - 1) % #counts + 1] = counts[(i - 1) % #counts + 1] + 1 end
  else
    for i, v in ipairs(sizes) do
      if v ~= floor(v) then raise(op .. ": sizes must be counts summing to " .. n .. " or fractions summing to 1") end
      counts[i] = v
    end
    if total ~= n then raise(op .. ": the sizes sum to " .. total .. ", not to the data set's length " .. n) end
  end
  local perm
  if seed ~= nil then
    if type(seed) ~= "number" or seed ~= floor(seed) then raise(op .. ": the seed must be an integer, got " .. tostring(seed)) end
    local state = dl.get_rng_state()   -- (the script's stream is left as it was)
    dl.manual_seed(seed)
    perm = dl.randperm(n)
    dl.set_rng_state(state)
  else
    perm = dl.randperm(n)
  end
  local parts, at = {}, 1
  for i, c in ipairs(counts) do
    local idx = perm:narrow(1, at, c)
    local ts = {}
    for k, t in ipairs(ds.tensors) do ts[k] = t:index_select(1, idx:to(t.device)) end
    parts[i] = node("tensors", nil, { tensors = ts, length = c })
    at = at + c
  end
  return parts
end

-- A data set over a Lua list of elements (each a value, or a table {v1, v2, ...} with
-- tuple = true): mostly for tests and small dynamic data.
function data.from_list(list, opts)
  if type(list) ~= "table" then bad_arg("from_list", "a list", list) end
  opts = core.options("from_list", opts, { tuple = true })
  return node("list", nil, { list = list, tuple = opts.tuple or false, length = #list })
end

-- ---- transformations -----------------------------------------------------------------------------

function Dataset:shuffle(seed)
  check_ds("shuffle", self)
  if seed ~= nil and (type(seed) ~= "number" or seed ~= floor(seed)) then
    raise("shuffle: the seed must be an integer, got " .. tostring(seed))
  end
  return node("shuffle", self, { seed = seed, passes = 0 })
end

function Dataset:batch(n, opts)
  check_ds("batch", self)
  if type(n) ~= "number" or n ~= floor(n) or n < 1 then
    raise("batch: the batch size must be an integer >= 1, got " .. tostring(n))
  end
  if opts ~= nil and type(opts) ~= "table" then bad_arg("batch", "an options table", opts) end
  for k in pairs(opts or {}) do
    if k ~= "drop_remainder" then raise("batch: unknown option '" .. tostring(k) .. "'") end
  end
  return node("batch", self, { batch_size = n, drop_remainder = opts and opts.drop_remainder or false })
end

function Dataset:map(f)
  check_ds("map", self)
  if type(f) ~= "function" then bad_arg("map", "a function", f) end
  return node("map", self, { fn = f })
end

function Dataset:take(n)
  check_ds("take", self)
  return node("take", self, { count = count_arg("take", n, "the count") })
end

function Dataset:skip(n)
  check_ds("skip", self)
  return node("skip", self, { count = count_arg("skip", n, "the count") })
end

-- Elements for which pred(...) is true (runs per element).
function Dataset:filter(pred)
  check_ds("filter", self)
  if type(pred) ~= "function" then bad_arg("filter", "a function", pred) end
  return node("filter", self, { fn = pred })
end

-- The data set `count` times over (reshuffling each time), or forever without a count.
function Dataset:repeat_(count)
  check_ds("repeat", self)
  if count ~= nil then count_arg("repeat", count, "the count") end
  return node("repeat", self, { count = count })
end
Dataset["repeat"] = Dataset.repeat_

-- The elements of the first complete pass kept in memory, and every later pass served
-- from there (tf.data's cache()): the work before it (reading, decoding, maps) runs once.
-- A pass left before its end keeps nothing; a shuffle placed after the cache still
-- reshuffles every pass.
function Dataset:cache()
  check_ds("cache", self)
  return node("cache", self, { kept = nil })
end

-- The same elements, with the engine's work for the next n of them running on a worker
-- thread while the Lua thread uses the current one (tf.data's prefetch). What can run
-- there is engine work, not Lua: the gathers of batches of rows (from_tensors with
-- shuffle, take, skip, shard and batch), and the decoding of dl.data.images' files
-- (reading them stays on the Lua thread, under the sandbox's file rule). Put it last:
-- ds:shuffle(s):batch(64):prefetch(2), dl.data.images(paths, labels):batch(32):prefetch(2).
-- Over other pipelines (a Lua map before it) the elements come as they would without it.
-- Note [Background jobs] in bindings/capi_jobs.cpp.
function Dataset:prefetch(n)
  check_ds("prefetch", self)
  local depth = count_arg("prefetch", n, "the number of elements to prepare")
  if depth < 1 then raise("prefetch: the number of elements to prepare must be at least 1, got " .. depth) end
  return node("prefetch", self, { depth = depth })
end

-- A map whose function has an asynchronous form: start(jobs, ...) begins the work
-- (engine jobs, through jobs.start) and returns what finish(jobs, started) turns into the
-- element's values (through jobs.wait); fn is the two in a row. dl.data.images builds its decoding this way, and prefetch runs start
-- ahead. (Internal.)
function data._async_map(ds, start, finish)
  check_ds("map", ds)
  local function fn(...)
    local jobs = data._job_set()
    return finish(jobs, start(jobs, ...))
  end
  return node("map", ds, { fn = fn, start = start, finish = finish })
end

-- Part i (1-based) of n parts of the data set, for data-parallel training (dist.shard
-- calls it with the job's size and this rank): with opts.seed, the elements are first
-- shuffled the same way in every process (a new order at each pass, as shuffle(seed));
-- then part i takes elements i, i + n, i + 2n, ... With even = "pad" (the default) the
-- parts are made equal by taking elements from the start again (as PyTorch's
-- DistributedSampler), with even = "drop" by leaving out the last len % n elements, so
-- that every process runs the same number of steps.
function Dataset:shard(n, i, opts)
  check_ds("shard", self)
  if type(n) ~= "number" or n ~= floor(n) or n < 1 then
    raise("shard: the number of parts must be an integer >= 1, got " .. tostring(n))
  end
  if type(i) ~= "number" or i ~= floor(i) or i < 1 or i > n then
    raise("shard: the part must be an integer from 1 to " .. n .. ", got " .. tostring(i))
  end
  if opts ~= nil and type(opts) ~= "table" then bad_arg("shard", "an options table", opts) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "seed" and k ~= "even" then raise("shard: unknown option '" .. tostring(k) .. "'") end
  end
  if opts.seed ~= nil and (type(opts.seed) ~= "number" or opts.seed ~= floor(opts.seed)) then
    raise("shard: the seed must be an integer, got " .. tostring(opts.seed))
  end
  local even = opts.even or "pad"
  if even ~= "pad" and even ~= "drop" then raise("shard: even must be 'pad' or 'drop', got " .. tostring(even)) end
  return node("shard", self, { parts = n, part = i, seed = opts.seed, even = even, passes = 0 })
end

-- The number of elements of a part of len elements.
local function shard_length(ds, len)
  if ds.even == "drop" then return floor(len / ds.parts) end
  return floor((len + ds.parts - 1) / ds.parts)
end

-- Positions (1-based, into the shuffled order of len elements) of ds's part.
local function shard_positions(ds, len)
  local m = shard_length(ds, len)
  local buf = ffi_new("double[?]", max(m, 1))
  for k = 0, m - 1 do
    local p = ds.part + k * ds.parts
    if p > len then p = p - len * floor((p - 1) / len) end
    buf[k] = p
  end
  local shape = ffi_new("int64_t[1]", m)
  return wrap(C.dl_from_values(buf, m, shape, 1, INT64, nil)), m
end

-- ---- planning: index tensors for row pipelines ------------------------------------------------------

-- Park-Miller's minimal standard generator (exact in doubles), seeded from the seed and
-- the pass number, for seeded shuffles that leave the engine's generator alone.
local function permutation(seed, pass, n)
  local s = (seed * 1000003 + pass * 7919 + 12345) % 2147483646
  if s < 0 then s = s + 2147483646 end
  s = s + 1
  for _ = 1, 8 do s = s * 48271 % 2147483647 end
  local buf = ffi_new("double[?]", max(n, 1))
  for i = 0, n - 1 do buf[i] = i + 1 end
  for i = n - 1, 1, -1 do
    s = s * 48271 % 2147483647
    local j = floor(s / 2147483647 * (i + 1))
    buf[i], buf[j] = buf[j], buf[i]
  end
  local shape = ffi_new("int64_t[1]", n)
  return wrap(C.dl_from_values(buf, n, shape, 1, INT64, nil))
end

-- Whether the pipeline is still about rows of one from_tensors source.
local function is_row(ds)
  local kind = ds.kind
  if kind == "tensors" then return true end
  if kind == "shuffle" or kind == "take" or kind == "skip" or kind == "shard" then return is_row(ds.parent) end
  return false
end

-- For a pipeline of rows of one from_tensors source: the source and this pass's row
-- order (an int64 index tensor, or nil for 1..length in order, with its length). Each
-- call is a new pass (shuffles draw their next permutation).
local function row_plan(ds)
  local kind = ds.kind
  if kind == "tensors" then return ds, nil, ds.length end
  local src, order, len = row_plan(ds.parent)
  if kind == "shuffle" then
    local perm
    if ds.seed ~= nil then
      perm = permutation(ds.seed, ds.passes, len)
    else
      perm = dl.randperm(len)
    end
    ds.passes = ds.passes + 1
    if order then order = order:index_select(1, perm) else order = perm end
    return src, order, len
  elseif kind == "shard" then
    if ds.seed ~= nil then
      local perm = permutation(ds.seed, ds.passes, len)
      ds.passes = ds.passes + 1
      order = order and order:index_select(1, perm) or perm
    end
    local pos, m = shard_positions(ds, len)
    order = order and order:index_select(1, pos) or pos
    return src, order, m
  elseif kind == "take" then
    local n = min(ds.count, len)
    if order then order = order:narrow(1, 1, n) elseif n < len then order = dl.arange(1, n + 1, { dtype = "int64" }) end
    return src, order, n
  else
    local n = max(len - ds.count, 0)
    if order then order = order:narrow(1, len - n + 1, n)
    else order = dl.arange(len - n + 1, len + 1, { dtype = "int64" }) end
    return src, order, n
  end
end

-- Rows start..start+count-1 of the plan, from every source tensor: new tensors, as
-- PyTorch's default_collate makes (a view would let an in-place change to a batch change
-- the data set).
local function gather_rows(src, order, start, count)
  local ts = src.tensors
  local out = {}
  if order then
    local idx = order:narrow(1, start, count)
    for i = 1, #ts do out[i] = ts[i]:index_select(1, idx) end
  else
    for i = 1, #ts do out[i] = ts[i]:narrow(1, start, count):clone() end
  end
  return out
end

-- ---- iteration: each node gives a function returning the next element as a packed tuple ---------

local iterators = {}

-- A batch of elements: per component, tensors stacked along a new dim 1, numbers and
-- booleans as a tensor (numbers float32, not int64 for whole ones as PyTorch's
-- default_collate does for Python ints: a Lua number does not tell an integer from a
-- float, and a dtype chosen from the values would change from batch to batch).
local function stack_elements(els)
  local first = els[1]
  local out = { n = first.n }
  for c = 1, first.n do
    local v = first[c]
    if is_tensor(v) then
      local list = {}
      for i = 1, #els do list[i] = els[i][c] end
      out[c] = dl.stack(list, 1)
    elseif type(v) == "number" or type(v) == "boolean" then
      local list = {}
      for i = 1, #els do list[i] = els[i][c] end
      out[c] = dl.tensor(list)
    else
      raise("batch: cannot batch a " .. typename(v) .. " (component " .. c .. " of an element)")
    end
  end
  return out
end

local function iterate(ds)
  return iterators[ds.kind](ds)
end

iterators.tensors = function(ds)
  local src, i, len = ds, 0, ds.length
  return function()
    if i >= len then return nil end
    i = i + 1
    local out = { n = #src.tensors }
    for k, t in ipairs(src.tensors) do out[k] = t:select(1, i) end
    return out
  end
end

iterators.list = function(ds)
  local i = 0
  return function()
    i = i + 1
    local v = ds.list[i]
    if v == nil then return nil end
    if ds.tuple then return { n = #v, unpack(v) } end
    return { n = 1, v }
  end
end

-- shuffle/take/skip over rows: the planned order, one row at a time.
local function row_iterator(ds)
  local src, order, len = row_plan(ds)
  local i = 0
  return function()
    if i >= len then return nil end
    i = i + 1
    local r = order and order[i] or i
    local out = { n = #src.tensors }
    for k, t in ipairs(src.tensors) do out[k] = t:select(1, r) end
    return out
  end
end

iterators.shuffle = function(ds)
  if is_row(ds.parent) then return row_iterator(ds) end
  -- Shuffling elements of another kind: all of them, in memory.
  local els = {}
  for el in iterate(ds.parent) do els[#els + 1] = el end
  local n = #els
  local perm = ds.seed ~= nil and permutation(ds.seed, ds.passes, n) or dl.randperm(n)
  ds.passes = ds.passes + 1
  local i = 0
  return function()
    if i >= n then return nil end
    i = i + 1
    return els[perm[i]]
  end
end

iterators.shard = function(ds)
  if is_row(ds.parent) then return row_iterator(ds) end
  -- A part of elements of another kind: all of them, in memory.
  local els = {}
  for el in iterate(ds.parent) do els[#els + 1] = el end
  local len = #els
  local perm
  if ds.seed ~= nil then
    perm = permutation(ds.seed, ds.passes, len)
    ds.passes = ds.passes + 1
  end
  local pos, m = shard_positions(ds, len)
  local k = 0
  return function()
    if k >= m then return nil end
    k = k + 1
    local p = pos[k]
    if perm then p = perm[p] end
    return els[p]
  end
end

iterators.take = function(ds)
  if is_row(ds.parent) then return row_iterator(ds) end
  local it, left = iterate(ds.parent), ds.count
  return function()
    if left <= 0 then return nil end
    left = left - 1
    return it()
  end
end

iterators.skip = function(ds)
  if is_row(ds.parent) then return row_iterator(ds) end
  local it, skipped = iterate(ds.parent), false
  return function()
    if not skipped then
      skipped = true
      for _ = 1, ds.count do if it() == nil then return nil end end
    end
    return it()
  end
end

iterators.batch = function(ds)
  local size, drop = ds.batch_size, ds.drop_remainder
  if is_row(ds.parent) then
    local src, order, len = row_plan(ds.parent)
    local start = 1
    return function()
      local left = len - start + 1
      if left <= 0 or (drop and left < size) then return nil end
      local count = min(size, left)
      local out = gather_rows(src, order, start, count)
      out.n = #out
      start = start + count
      return out
    end
  end
  local it = iterate(ds.parent)
  return function()
    local els = {}
    for _ = 1, size do
      local el = it()
      if el == nil then break end
      els[#els + 1] = el
    end
    if #els == 0 or (drop and #els < size) then return nil end
    return stack_elements(els)
  end
end

iterators.map = function(ds)
  local it, f, k = iterate(ds.parent), ds.fn, 0
  return function()
    local el = it()
    if el == nil then return nil end
    k = k + 1
    local out = pack(f(unpack(el, 1, el.n)))
    -- A first value nil would end the caller's for loop: the epoch cut short in silence.
    if out[1] == nil then raise("map: the function returned nil for element " .. k) end
    return out
  end
end

-- ---- prefetch: engine jobs started ahead ----------------------------------------------

-- Jobs of one iteration: waited for in order; those still pending when the iteration is
-- abandoned are dropped when its iterator is collected.
local function job_set()
  local pending = {}
  local guard = newproxy(true)
  getmetatable(guard).__gc = function()
    for id in pairs(pending) do C.dl_job_drop(id) end
  end
  local set = { guard = guard }
  function set.start(id)
    if id == 0 then raise_last() end
    pending[id] = true
    return id
  end
  function set.wait(id)
    pending[id] = nil
    return wrap(C.dl_job_wait(id))
  end
  return set
end
data._job_set = job_set

iterators.prefetch = function(ds)
  local p, depth = ds.parent, ds.depth
  local jobs = job_set()
  local produce   -- starts the next element's work; returns a function that finishes it
  if p.kind == "batch" and is_row(p.parent) then
    local src, order, len = row_plan(p.parent)
    local size, drop, start = p.batch_size, p.drop_remainder, 1
    produce = function()
      local left = len - start + 1
      if left <= 0 or (drop and left < size) then return nil end
      local count = min(size, left)
      -- Each job makes a tensor of its own (see gather_rows); the engine's indices are 0-based.
      local ids = {}
      if order then
        local idx0 = order:narrow(1, start, count) - 1
        for i, t in ipairs(src.tensors) do ids[i] = jobs.start(C.dl_job_index_select(hid(t), 0, hid(idx0))) end
      else
        for i, t in ipairs(src.tensors) do ids[i] = jobs.start(C.dl_job_narrow(hid(t), start - 1, count)) end
      end
      start = start + count
      return function()
        local out = { n = #ids }
        for i, id in ipairs(ids) do out[i] = jobs.wait(id) end
        return out
      end
    end
  elseif p.kind == "map" and p.start then
    local it = iterate(p.parent)
    produce = function()
      local el = it()
      if el == nil then return nil end
      local started = p.start(jobs, unpack(el, 1, el.n))
      return function() return pack(p.finish(jobs, started)) end
    end
  elseif p.kind == "batch" and p.parent.kind == "map" and p.parent.start then
    local m, size, drop = p.parent, p.batch_size, p.drop_remainder
    local it = iterate(m.parent)
    produce = function()
      local started = {}
      for k = 1, size do
        local el = it()
        if el == nil then break end
        started[k] = m.start(jobs, unpack(el, 1, el.n))
      end
      if #started == 0 or (drop and #started < size) then
        for _, st in ipairs(started) do m.finish(jobs, st) end   -- collect, and leave out
        return nil
      end
      return function()
        local els = {}
        for k, st in ipairs(started) do els[k] = pack(m.finish(jobs, st)) end
        return stack_elements(els)
      end
    end
  else
    return iterate(p)   -- Lua work cannot leave the Lua thread
  end
  local queue, head, tail, done = {}, 1, 0, false
  local function fill()
    while not done and tail - head < depth do
      local f = produce()
      if f == nil then done = true else tail = tail + 1; queue[tail] = f end
    end
  end
  return function()
    fill()
    if head > tail then return nil end
    local f = queue[head]
    queue[head] = nil
    head = head + 1
    local el = f()
    fill()   -- the next elements' work runs while the caller uses this one
    local _ = jobs.guard
    return el
  end
end

iterators.filter = function(ds)
  local it, f = iterate(ds.parent), ds.fn
  return function()
    while true do
      local el = it()
      if el == nil then return nil end
      local keep = f(unpack(el, 1, el.n))
      if is_tensor(keep) then keep = keep:item() end
      if keep and keep ~= 0 then return el end
    end
  end
end

iterators["repeat"] = function(ds)
  if ds.count == 0 then return function() return nil end end
  local pass, it = 1, iterate(ds.parent)
  return function()
    while true do
      local el = it()
      if el ~= nil then return el end
      if ds.count and pass >= ds.count then return nil end
      pass = pass + 1
      it = iterate(ds.parent)
      local again = it()
      if again == nil then return nil end   -- an empty data set would loop forever
      return again
    end
  end
end

iterators.cache = function(ds)
  local kept = ds.kept
  if kept then
    local i = 0
    return function()
      i = i + 1
      return kept[i]
    end
  end
  local it, list = iterate(ds.parent), {}
  return function()
    local el = it()
    if el == nil then
      ds.kept = list   -- the pass reached its end: keep it
      return nil
    end
    list[#list + 1] = el
    return el
  end
end

-- for x, y in ds:iter() do ... end: one pass over the data set.
function Dataset:iter()
  check_ds("iter", self)
  local next_el = iterate(self)
  return function()
    local el = next_el()
    if el == nil then return nil end
    return unpack(el, 1, el.n)
  end
end

-- The number of elements (batches, after batch) one pass gives, or nil when it is
-- unknown before iterating (after filter, a shuffle of a non-row pipeline ...).
function Dataset:size()
  local kind = self.kind
  if kind == "tensors" or kind == "list" then return self.length end
  local p = self.parent and self.parent:size()
  if p == nil then return nil end
  if kind == "shuffle" or kind == "map" or kind == "cache" then return p end
  if kind == "take" then return min(self.count, p) end
  if kind == "shard" then return shard_length(self, p) end
  if kind == "skip" then return max(p - self.count, 0) end
  if kind == "batch" then
    local b = self.batch_size
    if self.drop_remainder then return floor(p / b) end
    return floor((p + b - 1) / b)
  end
  if kind == "repeat" then return self.count and p * self.count or nil end
  return nil
end
Dataset.cardinality = Dataset.size

function Dataset:__tostring()
  local parts = {}
  local d = self
  while d do
    local s = d.kind
    if d.kind == "tensors" then
      local shapes = {}
      for i, t in ipairs(d.tensors) do shapes[i] = T.shape_str(t.shape) end
      s = "from_tensors(" .. table.concat(shapes, ", ") .. ")"
    elseif d.kind == "batch" then s = "batch(" .. d.batch_size .. (d.drop_remainder and ", drop_remainder" or "") .. ")"
    elseif d.kind == "take" or d.kind == "skip" then s = d.kind .. "(" .. d.count .. ")"
    elseif d.kind == "shuffle" then s = "shuffle(" .. (d.seed and tostring(d.seed) or "") .. ")"
    elseif d.kind == "shard" then s = "shard(" .. d.parts .. ", " .. d.part .. ")"
    elseif d.kind == "repeat" then s = "repeat(" .. (d.count and tostring(d.count) or "") .. ")"
    else s = d.kind .. "(...)" end
    table.insert(parts, 1, s)
    d = d.parent
  end
  return "Dataset: " .. table.concat(parts, ":")
end

return data
