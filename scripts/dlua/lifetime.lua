-- dlua.lifetime: when tensor values die. Tensor memory lives outside the Lua heap
-- (docs/design.md, "Tensor memory and Lua's collector"), so this module
--   - steps Lua's collector from the bytes the engine allocates (Note [Stepping the
--     collector]): M.collect, and M.retry after an allocation the memory limit refused;
--   - releases the engine handle of every tensor value that died, by a sweep rather
--     than by finalizers (Note [Handles released by a sweep, not by finalizers]), and
--     paces collections by the handles made as well: M.own(value, id).
-- dlua.tensor's wrap and result are its callers on the hot path:
--
--   if L.total[0] - L.mark[0] > L.budget[0] then L.collect() end   -- before an op
--   L.own(r, r.id)                                                  -- a new handle
local ffi = require("ffi")
local core = require("dlua.core")
core.own_source()

local C = core.C
local ffi_new, ffi_gc = ffi.new, ffi.gc
local collectgarbage, setmetatable, tonumber_ = collectgarbage, setmetatable, tonumber
local mmin, mmax = math.min, math.max

local M = {}

-- ---- the collector, stepped by the engine's bytes ----------------------------------------

-- Note [Stepping the collector]
-- Tensor memory lives outside the Lua heap, so Lua's collector does not know that a
-- few small cdata handles hold gigabytes. The engine counts the bytes it allocates
-- (dl_allocated_total, per process and never reset); each new tensor handle
-- (dlua.tensor's wrap) compares what was allocated since this Lua state's last
-- collection with a budget and, past it, runs a full collection, which finalizes
-- unreachable tensors and gives their memory back. (Counting from each state's own
-- mark keeps one runtime's collections from hiding another's allocations.) Like
-- torch7's soft limit, the budget adapts: when the memory still in use after a
-- collection grew by more than half the budget since the previous one, the data is
-- growing (a data set being loaded, a model being built), and the budget grows by 40%
-- so that collections do not become quadratic; when it did not grow, the budget
-- shrinks back towards its base, but never below four times the Lua heap, whose size a
-- full collection's cost follows. (What a collection frees is no measure of this:
-- much of what the engine allocates between collections is freed without one, the
-- temporaries of a backward pass for instance. Measured that way, a conv net's
-- training steps grew the budget without end, the garbage with it, and every step
-- paged in fresh memory.) The base (16 MB) bounds the garbage a training loop carries:
-- it is most of what the MLP training run holds beyond its data set (bench/, `mlpmem`).
-- The bytes counted include temporaries freed without the collector, so the fewer of
-- those an op makes, the more of the budget is real garbage; the base was chosen by the
-- MLP run's peak memory against the number of full collections (docs/performance.md,
-- "Measurements behind the code"). With a tensor memory limit set, the budget stays below
-- a quarter of the limit, and an allocation the limit refuses is retried once after a
-- full collection (M.retry).
local KIND_MEMORY = 3        -- dl::ErrorKind::Memory
local BASE_BUDGET = 16 * 2 ^ 20   -- (device bytes count by tensor/allocator.h's weight against it)
-- A full collection costs time in proportion to the Lua heap, so the budget never falls
-- below this many times the heap: a script holding a large Lua heap is not collected
-- more often than that heap can afford.
local HEAP_FACTOR = 4
local MAX_BUDGET = 2 ^ 40
M.total = C.dl_allocated_total()            -- const double*: bytes allocated so far
M.mark = ffi_new("double[1]", M.total[0])   -- the total at this state's last collection
M.budget = ffi_new("double[1]", BASE_BUDGET)
local total, mark, budget = M.total, M.mark, M.budget
local stats5 = ffi.typeof("double[5]")   -- fresh per call: Note [Values C writes back]
local collecting = false
local live_before = 0   -- bytes in use right after this state's previous collection
local collections = 0   -- full collections run by the budget, for memory_stats


function M.collect()
  if collecting then return end
  collecting = true
  collections = collections + 1
  mark[0] = total[0]
  collectgarbage("collect")
  C.dl_trim_idle_cache()   -- large cached blocks long unused go back to the system (tensor/allocator.h)
  local stats = stats5()
  C.dl_memory_stats(stats)
  -- Device tensors count too: their bytes are in `total` as well.
  local live, limit = stats[0] + C.dl_device_bytes_in_use(), stats[3]
  local b = budget[0]
  if live - live_before > 0.5 * b then
    b = mmin(b * 1.4, MAX_BUDGET)
  elseif live <= live_before then
    b = mmax(BASE_BUDGET, b / 1.4)
  end
  live_before = live
  b = mmax(b, HEAP_FACTOR * 1024 * collectgarbage("count"))
  if limit > 0 then b = mmax(2 ^ 20, mmin(b, limit / 4)) end
  budget[0] = b
  collecting = false
end

-- After a failed call: true when it failed for memory and a collection was run, so
-- that the caller should try once more.
function M.retry()
  if C.dl_last_error_kind() ~= KIND_MEMORY or collecting then return false end
  M.collect()
  C.dl_empty_cache()
  return true
end

function M.memory_stats()
  local stats = stats5()
  C.dl_memory_stats(stats)
  return {
    in_use = stats[0], cached = stats[1], peak = stats[2], limit = stats[3],
    tensors = stats[4], gc_budget = budget[0], gc_debt = total[0] - mark[0], gc_collections = collections,
  }
end

-- ---- handles ---------------------------------------------------------------------------------

local collect = M.collect
local release_id = C.dl_release_id

-- Note [Handles released by a sweep, not by finalizers]
-- A handle must be released when the Lua value holding it dies. A finalizer would say
-- when (ffi.gc), but LuaJIT charges a cdata with a finalizer several times the cost of
-- one without, as much as a whole 16-element op and its recording (docs/performance.md,
-- "Measurements behind the code").
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
-- Lua heap has doubled) a recorded chain of small ops made thousands of handles a
-- cycle, and the sweep gave back their engine objects (node, tensor, storage) all at
-- once, which the pools then handed out again cold. So a full collection also runs
-- once MADE_MIN handles, or MADE_PER_KB per KB of Lua heap if that is more, were made
-- since the last cycle: a collection costs in proportion to the heap, so its cost per
-- handle stays bounded (bench/, `chain`; docs/performance.md, "Measurements behind the
-- code"). `a + b` on inline values makes no handle.
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
M.own = own

return M
