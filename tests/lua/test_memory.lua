-- Tensor memory and Lua's collector (docs/design.md, "Tensor memory and Lua's collector"): a loop
-- making fresh tensors needs no collectgarbage(); the tensor memory limit is enforced, with one
-- collection and a retry before an allocation is refused.
local H = require("harness")
local dl = require("dlua")
local core = require("dlua.core")
local C = core.C

local MB = 2 ^ 20

local function rss()
  local f = io.open("/proc/self/statm", "r")
  if not f then return nil end
  local line = f:read("*l")
  f:close()
  local resident = tonumber(string.match(line, "^%d+%s+(%d+)"))
  return resident * 4096
end

H.test("100000 fresh 1 MB tensors stay within bounded memory, no collectgarbage()", function()
  local rss0 = rss()
  local max_in_use, max_rss = 0, 0
  for i = 1, 100000 do
    local t = dl.empty(262144)             -- 1 MiB of float32
    if i % 500 == 0 then
      local s = dl.memory_stats()
      if s.in_use > max_in_use then max_in_use = s.in_use end
      local r = rss()
      if r and r - rss0 > max_rss then max_rss = r - rss0 end
      -- fail early, before the machine runs out of memory
      if s.in_use > 512 * MB then
        error(string.format("tensor memory in use grew to %.0f MB after %d tensors", s.in_use / MB, i))
      end
    end
  end
  print(string.format("        in use at most %.0f MB, RSS growth at most %.0f MB",
                      max_in_use / MB, max_rss / MB))
  H.ok(max_in_use < 256 * MB, "in use " .. max_in_use / MB .. " MB")
  H.ok(max_rss < 400 * MB, "RSS grew by " .. max_rss / MB .. " MB")
end)

H.test("memory that is written to is given back too", function()
  local rss0 = rss()
  local max_rss = 0
  local acc = dl.zeros(262144)
  for i = 1, 600 do
    local t = dl.ones(262144) * 2          -- two fresh 1 MiB tensors, both touched
    if i % 20 == 0 then
      acc:add_(t)
      local r = rss()
      if r and r - rss0 > max_rss then max_rss = r - rss0 end
      if max_rss > 1024 * MB then error("RSS grew past 1 GB after " .. i .. " iterations") end
    end
  end
  H.eq(acc[1], 60)
  H.ok(max_rss < 400 * MB, "RSS grew by " .. max_rss / MB .. " MB")
end)

H.test("the collector's budget stays at its base when the live set does not grow", function()
  -- Half of what a gradient step allocates is freed without a collection (the backward
  -- pass's temporaries): that is no sign of growing data. A budget grown from it kept
  -- growing without end, and the garbage with it.
  local x = dl.rand(1000000)
  local g = dl.grad(function(t) return t:tanh():tanh():sum() end)
  local before = dl.memory_stats().gc_collections
  for _ = 1, 300 do g(x) end
  local ms = dl.memory_stats()
  -- 300 steps of some 20 MB each, over a budget of 16 MB or more: collections, not one a step
  H.ok(ms.gc_collections - before > 10 and ms.gc_collections - before < 300,
       (ms.gc_collections - before) .. " collections")
  H.ok(ms.gc_budget <= 64 * MB, "budget " .. ms.gc_budget / MB .. " MB")
  H.ok(ms.in_use + ms.cached < 200 * MB, "in use " .. ms.in_use / MB .. " MB, cached " .. ms.cached / MB .. " MB")
  -- a growing live set still grows the budget
  local keep = {}
  for i = 1, 40 do keep[i] = dl.ones(4 * 1024 * 1024) end   -- 16 MB each
  H.ok(dl.memory_stats().gc_budget > 32 * MB, "budget " .. dl.memory_stats().gc_budget / MB .. " MB")
  keep = nil
end)

H.test("a collection releases every unreachable tensor", function()
  collectgarbage("collect")
  local base = dl.memory_stats().tensors
  local keep = {}
  for i = 1, 1000 do keep[i] = dl.ones(64) end   -- past the inline size: handles
  H.ok(dl.memory_stats().tensors >= base + 1000)
  keep = nil
  collectgarbage("collect")
  collectgarbage("collect")
  H.ok(dl.memory_stats().tensors <= base + 2, "tensors alive: " .. dl.memory_stats().tensors .. ", base " .. base)
end)

H.test("the tensor memory limit: a refused allocation is retried after a collection", function()
  collectgarbage("collect")
  local saved_budget = require("dlua.lifetime").budget[0]
  local in_use0 = dl.memory_stats().in_use
  local F16MB = 4 * 1048576                 -- float32 elements in 16 MiB
  C.dl_set_memory_limit(in_use0 + 256 * MB)
  local ok, err = pcall(function()
    require("dlua.lifetime").budget[0] = 2 ^ 50               -- no collection from the budget: only the retry
    for i = 1, 10 do local garbage = dl.empty(F16MB) end   -- 160 MiB, unreachable
    H.ok(dl.memory_stats().in_use >= in_use0 + 160 * MB, "the garbage is still counted")
    local big = dl.empty(8 * F16MB)       -- 128 MiB: refused until the garbage is collected
    H.shape(big, { 8 * F16MB })
    big = nil
    -- memory that is really in use is refused, with a clear message
    local keep = dl.empty(8 * F16MB)      -- 128 MiB
    H.raises(function() return dl.ones(16 * F16MB) end, "ones: tensor memory limit exceeded")
    H.raises(function() return keep:view(-1, 1) + dl.ones(1, 2) end, "add: tensor memory limit exceeded")
    H.values(dl.ones(2) + 1, { 2, 2 })    -- small tensors still fit
    -- at the limit, a script can still read its tensors, views included: reading
    -- allocates nothing (it copied non-contiguous views first: tests/fuzz, fuzz_ops)
    local t = dl.arange(0, 60):view(6, 10):t()   -- (10, 6), not contiguous: 240 bytes
    local fill = {}
    for _, n in ipairs({ F16MB / 16, 32 }) do    -- 1 MiB tensors, then 128-byte ones
      while pcall(function() fill[#fill + 1] = dl.empty(n) end) do end
    end
    H.raises(function() return dl.empty(32) end, "empty: tensor memory limit exceeded")
    local got = t:totable()
    H.eq(got[10], { 9, 19, 29, 39, 49, 59 })
    H.ok(tostring(t):find("59.", 1, true))
    fill = nil
  end)
  C.dl_set_memory_limit(0)
  require("dlua.lifetime").budget[0] = saved_budget
  if not ok then error(err, 0) end
  H.eq(dl.memory_stats().limit, 0)
end)

H.run()
