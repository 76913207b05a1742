-- A small harness for the Lua tests (tests/lua/test_*.lua), run by ctest through the
-- real runtime (or stock luajit with the module paths set).
--
--   local H = require("harness")
--   H.test("add broadcasts", function()
--     H.values(dl.ones(2, 1) + dl.tensor({1, 2}), {{2, 3}, {2, 3}})
--   end)
--   H.test("bad add", function()
--     H.raises(function() return dl.ones(2) + {} end, "add: expected a tensor or a number, got table")
--   end)
--   H.run()   -- prints one line per test, exits non-zero when any failed
--
-- Every check raises on failure with what was expected and what came instead; H.run
-- catches per test, so one failure does not hide the others.
local H = {}

local tests = {}
local only = os.getenv("DLUA_TEST_ONLY")   -- run only the tests whose name contains this

function H.test(name, fn)
  tests[#tests + 1] = { name = name, fn = fn }
end

-- pairs under another name, for the recursive walkers below: a loop over `pairs` (or
-- `next`) that nests another is mis-iterated by Debian 12's LuaJIT (Note [Walking
-- nested tables] in scripts/dlua/core.lua).
local entries = pairs

local function is_tensor(v)
  return type(v) == "cdata" and package.loaded.dlua and package.loaded.dlua.is_tensor(v)
end

local function show(v, depth)
  depth = depth or 0
  if type(v) == "table" then
    if depth > 4 then return "{...}" end
    local parts = {}
    for i = 1, #v do parts[i] = show(v[i], depth + 1) end
    for k, x in entries(v) do
      if type(k) ~= "number" or k < 1 or k > #v or k ~= math.floor(k) then
        parts[#parts + 1] = tostring(k) .. "=" .. show(x, depth + 1)
      end
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  elseif type(v) == "string" then
    return string.format("%q", v)
  elseif type(v) == "number" then
    if v ~= v then return "nan" end
    if v == math.floor(v) and math.abs(v) < 1e15 then return string.format("%d", v) end
    return string.format("%.17g", v)
  end
  return tostring(v)
end
H.show = show

-- Deep equality; numbers within tol (absolute plus relative), nan equal to nan.
local function same(a, b, tol)
  if type(a) == "number" and type(b) == "number" then
    if a ~= a or b ~= b then return a ~= a and b ~= b end
    if a == b then return true end
    -- (an infinity matches only itself: the relative tolerance of an infinite b is infinite)
    if math.abs(a) == math.huge or math.abs(b) == math.huge then return false end
    return math.abs(a - b) <= tol * (1 + math.abs(b))
  end
  if type(a) == "table" and type(b) == "table" then
    if #a ~= #b then return false end
    for k, v in entries(b) do
      if not same(a[k], v, tol) then return false end
    end
    for k in entries(a) do
      if b[k] == nil then return false end
    end
    return true
  end
  return a == b
end

function H.ok(cond, msg)
  if not cond then error("check failed" .. (msg and (": " .. msg) or ""), 2) end
  return cond
end

function H.eq(got, want, msg)
  if not same(got, want, 0) then
    error((msg and (msg .. ": ") or "") .. "expected " .. show(want) .. ", got " .. show(got), 2)
  end
end

function H.near(got, want, tol, msg)
  if not same(got, want, tol or 1e-6) then
    error((msg and (msg .. ": ") or "") .. "expected " .. show(want) .. " (tol " .. (tol or 1e-6)
          .. "), got " .. show(got), 2)
  end
end

-- A tensor's values (nested tables, or a number for a 0-dim tensor) and optionally its
-- dtype: H.values(t, {{1, 2}}, {dtype = "float32", tol = 1e-6}).
function H.values(t, want, opts)
  opts = opts or {}
  if not is_tensor(t) then error("expected a tensor, got " .. type(t), 2) end
  if opts.dtype and t.dtype ~= opts.dtype then
    error("expected dtype " .. opts.dtype .. ", got " .. t.dtype .. " (" .. tostring(t) .. ")", 2)
  end
  if opts.shape and not same(t.shape, opts.shape, 0) then
    error("expected shape " .. show(opts.shape) .. ", got " .. show(t.shape), 2)
  end
  local got = t:totable()
  if not same(got, want, opts.tol or 1e-6) then
    error("expected values " .. show(want) .. ", got " .. show(got) .. " (" .. tostring(t) .. ")", 2)
  end
end

function H.shape(t, want)
  if not is_tensor(t) then error("expected a tensor, got " .. type(t), 2) end
  if not same(t.shape, want, 0) then
    error("expected shape " .. show(want) .. ", got " .. show(t.shape), 2)
  end
end

-- fn must raise an error whose message contains `text` (plain text). With `line`, the
-- message must also point at that line of the calling test file. Returns the message.
function H.raises(fn, text, line)
  local ok, err = pcall(fn)
  if ok then error("expected an error containing " .. show(text) .. ", but none was raised", 2) end
  local msg = tostring(err)
  if not string.find(msg, text, 1, true) then
    error("expected an error containing " .. show(text) .. ", got " .. show(msg), 2)
  end
  if line then
    local src = debug.getinfo(2, "S").short_src
    local where = src .. ":" .. line .. ":"
    if string.sub(msg, 1, #where) ~= where then
      error("expected the error at " .. where .. " got " .. show(msg), 2)
    end
  end
  return msg
end

-- The error message `msg` points at line `line` of the calling test file.
function H.at(msg, line)
  local src = debug.getinfo(2, "S").short_src
  local where = src .. ":" .. tostring(line) .. ":"
  if string.sub(msg, 1, #where) ~= where then
    error("expected the error at " .. where .. " got " .. show(msg), 2)
  end
end

-- The line this is called from (for H.at and H.raises(..., line)).
function H.line()
  return debug.getinfo(2, "l").currentline
end

-- Runs cases made from PyTorch's results (tests/ref/gen_breadth_refs.py): each {name,
-- args, ys, c, grads}: fns[name] of the float64 args must give every y (to tol, 1e-12 by
-- default) and the gradients of sum(ys[1] * c) (to grad_tol, 1e-10). Returns the count.
function H.ref_cases(cases, fns, tol, grad_tol)
  local dl = require("dlua")
  local unpack = unpack or table.unpack
  local f64 = { dtype = "float64" }
  local n = 0
  for _, c in ipairs(cases) do
    local fn = fns[c.name]
    H.ok(fn, "no function for case " .. c.name)
    local args = {}
    for i, v in ipairs(c.args) do args[i] = dl.tensor(v, f64) end
    local ys = { fn(unpack(args)) }
    for i, want in ipairs(c.ys) do H.near(ys[i]:totable(), want, tol or 1e-12, c.name .. " output " .. i) end
    if #c.grads > 0 then
      local cc = dl.tensor(c.c, f64)
      local nums = {}
      for i = 1, #args do nums[i] = i end
      local grads = { dl.grad(function(...) return (fn(...) * cc):sum() end, nums)(unpack(args)) }
      for i, want in ipairs(c.grads) do H.near(grads[i]:totable(), want, grad_tol or 1e-10, c.name .. " gradient " .. i) end
    end
    n = n + 1
  end
  return n
end

function H.run()
  local passed, failed = 0, 0
  local names = {}
  for _, t in ipairs(tests) do
    if not only or string.find(t.name, only, 1, true) then
      local ok, err = xpcall(t.fn, debug.traceback)
      if ok then
        passed = passed + 1
        print("ok      " .. t.name)
      else
        failed = failed + 1
        names[#names + 1] = t.name
        print("FAILED  " .. t.name .. "\n        " .. (tostring(err):gsub("\n", "\n        ")))
      end
    end
  end
  print(string.format("%d passed, %d failed", passed, failed))
  if failed > 0 then
    print("failed: " .. table.concat(names, ", "))
    os.exit(1)
  end
  if passed == 0 then
    print("no test ran")
    os.exit(1)
  end
  os.exit(0)
end

return H
