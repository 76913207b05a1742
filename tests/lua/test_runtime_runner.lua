-- The `dlua` runner as a script sees it: the library embedded in the binary, `arg`,
-- the lazy global `dl`, and a trusted environment. Under stock luajit (no embedded
-- library) only the checks that hold there run. (Arguments with values are checked
-- by tests/lua/test_repl_cli.py.)
local H = require("harness")
local args = { ... }
local embedded = package.preload["dlua"] ~= nil

H.test("the script's arguments are ... and arg[1..n]", function()
  H.eq(#arg, #args)
  for i = 1, #args do H.eq(arg[i], args[i]) end
  H.ok(arg[0]:find("test_runtime_runner.lua", 1, true), "arg[0] is the script")
  H.ok(arg[-1] ~= nil, "arg[-1] is the interpreter")
end)

H.test("dl is a global loaded on first use, the same as require('dlua')", function()
  if not embedded then return end
  H.ok(rawget(_G, "dl") == nil or rawget(_G, "dl") == require("dlua"), "dl before use")
  local x = dl.ones(2)
  H.eq(x:sum():item(), 2)
  H.ok(rawget(_G, "dl") == require("dlua"), "dl after use")
end)

H.test("the library comes from the binary, not from a path", function()
  if not embedded then return end
  for _, name in ipairs({ "dlua", "dlua.core", "dlua.tensor" }) do
    H.ok(type(package.preload[name]) == "function", name .. " is preloaded")
  end
  local info = debug.getinfo(require("dlua.tensor").from_id, "S")
  H.eq(info.source, "@dlua/tensor.lua")
end)

H.test("the runner is trusted: the full standard library, the JIT on", function()
  for _, name in ipairs({ "io", "os", "debug", "package", "jit", "dofile", "loadfile" }) do
    H.ok(_G[name] ~= nil, name)
  end
  H.ok(require("ffi") ~= nil, "ffi")
  H.eq(jit.status(), true)
  H.eq(string.dump ~= nil, true)
end)

H.test("errors raised by the library point at the script's line", function()
  local dl = require("dlua")
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, err = pcall(function() return dl.ones(2) + dl.ones(3) end)
  H.eq(ok, false)
  H.ok(err:find("test_runtime_runner.lua:" .. line, 1, true), err)
end)

H.run()
