-- What a sandboxed runtime removes from the module before scripts run
-- (dlua.tensor's restrict(), called by vm/sandbox.cpp; docs/design.md, "What a sandboxed script can
-- reach").
local H = require("harness")
local dl = require("dlua")
local T = require("dlua.tensor")

H.test("restrict removes raw addresses and foreign memory, and zeroes dl.empty", function()
  -- leave garbage in the allocator's cache, where dl.empty may find it again
  for i = 1, 20 do local g = dl.full({ 1024 }, 7) g = nil end
  collectgarbage("collect")
  T.restrict()
  H.eq(dl.from_ptr, nil)
  H.raises(function() return dl.ones(2):data_ptr() end, "tensor: no method or property 'data_ptr'")
  for i = 1, 20 do
    H.eq(dl.empty(1024):abs():sum():item(), 0, "dl.empty is zeroed")
    H.eq(dl.empty_like(dl.ones(1024)):abs():sum():item(), 0, "dl.empty_like is zeroed")
  end
  H.values(dl.ones(2) + 1, { 2, 2 }, nil)
end)

H.run()
