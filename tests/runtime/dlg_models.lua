-- Writes the .dlg files tests/runtime/dlg_api.c runs through libdlua_run's C API:
--   dlua tests/runtime/dlg_models.lua <dir>
--   affine.dlg  y = 2 x + 1, x (n, 3) float32 with a free n
--   loop.dlg    the sum 0 + 1 + ... + (n - 1) by a while_loop, n an int64 (1) input
--   gather.dlg  the rows idx (int64, 1-based) of x (4, 2)
--   outer.dlg   the outer product of x (n) with itself: n^2 elements
local dir = assert(arg[1], "usage: dlg_models.lua <dir>")

local function save(name, f, args, opts)
  opts = opts or {}
  opts.path = dir .. "/" .. name .. ".dlg"
  dl.export(f, args, opts)
end

save("affine", function(x) return x * 2 + 1 end, { dl.zeros(2, 3) }, { dynamic = { [1] = { 1, "n" } } })
save("loop", function(n)
  local _, s = dl.while_loop(function(i, _) return i:lt(n) end, function(i, acc) return i + 1, acc + i end,
                             { dl.zeros(1, "int64"), dl.zeros(1, "int64") })
  return s
end, { dl.tensor({ 4 }, "int64") })
save("gather", function(x, idx) return x:index_select(1, idx) end,
     { dl.arange(8):reshape(4, 2):float(), dl.tensor({ 1, 3 }, "int64") })
save("outer", function(x) return x:unsqueeze(2) * x:unsqueeze(1) end, { dl.zeros(3) },
     { dynamic = { [1] = { 1, "n" } } })
