-- Handles and their release (Note [Handles released by a sweep, not by finalizers] in
-- scripts/dlua/lifetime.lua): a handle lives exactly as long as some Lua value holds it,
-- whatever the collector does in between, and is released in the collection its last
-- value died in, including values that a finalizer brings back to life.
local H = require("harness")
local dl = require("dlua")
local ffi = require("ffi")

local function live_handles() return dl.memory_stats().tensors end
-- Live handles after a full collection.
local function settled()
  collectgarbage("collect")
  return live_handles()
end

H.test("handles that die are released by the next full collection", function()
  local before = settled()
  do
    local keep = {}
    for i = 1, 300 do keep[i] = dl.full({ 100 }, i) end    -- 400 bytes each: handles
    H.eq(live_handles(), before + 300)
    keep = nil
  end
  H.eq(settled(), before, "all 300 released by one collection")
end)

H.test("live handles keep their values through many collections and reused slots", function()
  local before = settled()
  local kept = {}
  for round = 1, 20 do
    -- garbage between the kept tensors, so that freed slots are taken again
    for _ = 1, 50 do local _ = dl.zeros(64) + round end
    kept[round] = dl.full({ 40 }, round)
    if round % 3 == 0 then collectgarbage("collect") else collectgarbage("step", 0) end
  end
  collectgarbage("collect")
  for round = 1, 20 do
    H.eq(kept[round]:sum():item(), 40 * round, "tensor of round " .. round)
  end
  H.eq(live_handles(), before + 20)
  kept = nil
  H.eq(settled(), before)
end)

H.test("a tensor brought back to life by a finalizer keeps its handle", function()
  local before = settled()
  local revived
  do
    local t = dl.arange(0, 100)          -- a handle
    -- an unreachable object whose finalizer stores t: t is dead for one moment, then
    -- reachable again (a cdata finalizer written in Lua, as a script could write one)
    ffi.gc(ffi.new("char[1]"), function() revived = t end)
  end
  collectgarbage("collect")
  collectgarbage("collect")
  H.ok(revived ~= nil, "the finalizer ran")
  H.eq(revived:sum():item(), 4950, "the revived tensor is intact")
  H.eq(live_handles(), before + 1)
  revived = nil
  H.eq(settled(), before)
end)

H.test("promoted inline values and recorded results are tracked like other handles", function()
  local before = settled()
  local g
  do
    local xs = {}
    for i = 1, 50 do
      xs[i] = dl.ones(4)
      xs[i]:mul_(i)                      -- promoted in place
    end
    g = dl.grad(function(x) return (x * x):sum() end)(dl.ones(8))
    H.eq(xs[50]:sum():item(), 200)
  end
  collectgarbage("collect")
  H.values(g, { 2, 2, 2, 2, 2, 2, 2, 2 })
  g = nil
  H.eq(settled(), before)
end)

H.test("a loop of handle results keeps few handles alive without collectgarbage()", function()
  local before = settled()
  local a = dl.rand(1000)
  local peak = 0
  for i = 1, 20000 do
    local c = a * 2
    if i % 1000 == 0 then peak = math.max(peak, live_handles() - before) end
  end
  -- the collector runs on its own (Lua heap growth, tensor bytes): handles do not pile up
  H.ok(peak < 20000, "live handles peaked at " .. peak)
end)

H.test("handles pace collections: a loop making them never holds more than a few thousand", function()
  -- With LuaJIT's own collector stopped, only the count of handles made triggers the
  -- collections (Note [Handles released by a sweep, not by finalizers]).
  local before = settled()
  local a = dl.rand(100)                   -- 400-byte results: 30,000 of them stay far
  local peak = 0                           -- below the 16 MB byte budget
  -- The trigger: 4,096 handles, or 4 per KB of Lua heap when that is more (the heap
  -- after a full collection, which is what it is measured on: this state's own).
  local limit = math.max(4096, 4 * collectgarbage("count"))
  collectgarbage("stop")
  local ok, err = pcall(function()
    for i = 1, 30000 do
      local c = a * 2                      -- a handle
      local n = live_handles() - before
      if n > peak then peak = n end
    end
  end)
  collectgarbage("restart")
  if not ok then error(err, 0) end
  H.ok(peak > 1000 and peak <= limit * 1.05 + 2, "live handles peaked at " .. peak .. " (trigger " .. limit .. ")")
end)

H.run()
