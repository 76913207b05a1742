-- The hot paths compile: a loop of small-tensor arithmetic and an element loop over
-- x[i] become JIT traces (docs/design.md, "Tensors are FFI struct values": FFI calls are compiled,
-- classic lua_CFunction calls are not). Skipped where the JIT is off (a sandboxed runtime).
local H = require("harness")
local dl = require("dlua")

local jit_on = jit and jit.status and jit.status()

-- Runs f and returns true if a trace that starts in f was completed as a loop. A loop
-- that calls something the JIT cannot compile (a classic C function) is at best
-- "stitched" from several traces, whose first one does not link back to itself.
local function compiles(f)
  local util = require("jit.util")
  local started_in_f = false
  local function on_trace(what, tr, func)
    if what == "stop" and func == f and util.traceinfo(tr).linktype == "loop" then
      started_in_f = true
    end
  end
  jit.attach(on_trace, "trace")
  local ok, err = pcall(f)
  jit.attach(on_trace)
  if not ok then error(err, 0) end
  return started_in_f
end

H.test("the check itself: a loop calling a classic C function does not count", function()
  if not jit_on then print("        skipped: the JIT is off") return end
  local x = 0
  local function loop()
    for i = 1, 5000 do x = x + select("#", collectgarbage("count")) end
  end
  H.ok(not compiles(loop), "a stitched loop was taken for a compiled one")
end)

H.test("a hot loop of a + b on small tensors compiles", function()
  if not jit_on then print("        skipped: the JIT is off") return end
  local a, b = dl.ones(4), dl.tensor({ 1, 2, 3, 4 })
  local c
  local function loop()
    for i = 1, 5000 do c = a + b end
  end
  H.ok(compiles(loop), "no trace was compiled for the a + b loop")
  H.values(c, { 2, 3, 4, 5 })
end)

H.test("numbers on either side stay on the compiled path", function()
  if not jit_on then print("        skipped: the JIT is off") return end
  local a = dl.ones(4)
  local c
  local function loop()
    for i = 1, 5000 do c = (0.5 * a - 1) / 2 end
  end
  H.ok(compiles(loop), "no trace was compiled for the scalar loop")
  H.values(c, { -0.25, -0.25, -0.25, -0.25 })
end)

H.test("an element loop over x[i] compiles and reads numbers", function()
  if not jit_on then print("        skipped: the JIT is off") return end
  local x = dl.arange(1, 10001, { dtype = "float64" })
  local s = 0
  local function loop()
    for i = 1, 10000 do s = s + x[i] end
  end
  H.ok(compiles(loop), "no trace was compiled for the element loop")
  H.eq(s, 10000 * 10001 / 2)
  local y = dl.zeros(1000)
  local function write()
    for i = 1, 1000 do y[i] = i end
  end
  H.ok(compiles(write), "no trace was compiled for the element writes")
  H.eq(y[1000], 1000)
end)

-- LuaJIT blacklists a function whose traces keep aborting, and then every trace that
-- would call it aborts too. The bytecode at a function's start tells: FUNCF, then
-- IFUNCF when blacklisted, JFUNCF when it has a trace (lj_bc.h keeps them in that order).
local function blacklisted(fn)
  local util, bit = require("jit.util"), require("bit")
  local fresh = bit.band(util.funcbc(function(v) return v end, 0), 0xff)
  return bit.band(util.funcbc(fn, 0), 0xff) == fresh + 1
end

H.test("dl.grad called often from a loop that cannot compile blacklists nothing it calls", function()
  if not jit_on then print("        skipped: the JIT is off") return end
  local T = require("dlua.tensor")
  local cube = function(v) return v ^ 3 end      -- a fresh function: blacklists are per function
  local d2 = dl.grad(dl.grad(cube))
  local x = dl.tensor(2.0)
  -- Each call of the driver runs interpreted, as a training step's does. About 80,000
  -- calls blacklisted the function when pcall called it directly; the helpers that
  -- ended in a tail call to a built-in (return istype(...)) went sooner.
  for _ = 1, 120000 do
    d2(x)
    if blacklisted(cube) then break end
  end
  H.ok(not blacklisted(cube), "LuaJIT blacklisted the function that dl.grad differentiates")
  for name, fn in pairs({ is_tensor = T.is_tensor, wrap = T.wrap, hid = T.hid }) do
    H.ok(not blacklisted(fn), "LuaJIT blacklisted dlua.tensor's " .. name)
  end
  H.near(d2(x):item(), 12, 1e-5)
  -- And the script's own loop over the function still compiles.
  local y
  local function loop() for _ = 1, 5000 do y = cube(x) end end
  H.ok(compiles(loop), "a loop calling the differentiated function no longer compiles")
  H.eq(y:item(), 8)
end)

-- Note [A Lua frame between pcall and f] (scripts/dlua/compile.lua): the side trace from
-- the exit of a loop in a compiled function to the function's end must compile. When
-- it could not ("NYI: return to lower frame", four aborts and then a fallback to the
-- interpreter), that path and the call's end ran interpreted on every call.
H.test("a compiled function's path from its loop's exit to its end compiles", function()
  if not jit_on then print("        skipped: the JIT is off") return end
  local vmdef = require("jit.vmdef")
  local function chain(a, b)
    local y = a
    for _ = 1, 10 do y = (y * b + 0.1):tanh() end
    return y:sum(), 7
  end
  local cf = dl.compile(chain)
  local x, w = dl.rand(16), dl.rand(16)
  local aborts = {}
  local function on_trace(what, _, _, _, otr, oex)
    if what == "abort" then
      local msg = vmdef.traceerr[otr] or tostring(otr)
      aborts[#aborts + 1] = msg:format(type(oex) == "number" and vmdef.bcnames:sub(oex * 6 + 1, oex * 6 + 6) or tostring(oex))
    end
  end
  local s, n
  jit.attach(on_trace, "trace")
  local ok, err = pcall(function()
    for _ = 1, 3000 do s, n = cf(x, w) end
  end)
  jit.attach(on_trace)
  if not ok then error(err, 0) end
  for _, msg in ipairs(aborts) do
    H.ok(not msg:find("lower frame", 1, true), "a trace through the compiled call aborted: " .. msg)
  end
  H.eq(n, 7)
  H.ok(dl.equal(s, chain(x, w)), "the compiled call's result differs from eager's")
end)

H.run()
