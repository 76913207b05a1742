// The attack scripts (docs/design.md, "The attack scripts"), each in a fresh sandboxed runtime:
// each must be refused or stopped with a clear error, and the host then goes on (the
// same Runtime answers again, with the library working).
#include <dlua/dlua.hpp>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tensor/allocator.h"

using dlua::ErrorKind;
using dlua::Runtime;

namespace {

dlua::Options sandbox_options() {
  dlua::Options o;
  o.sandbox = true;
  o.time_limit = 0.3;
  o.lua_memory_limit = 32u << 20;
  o.tensor_memory_limit = 64u << 20;
  o.print = [](std::string_view) {};
  return o;
}

// The host carries on after whatever the script did.
void host_continues(Runtime& rt) {
  CHECK(rt.run_string("return 1 + 1")[0].as_number() == 2);
  CHECK(rt.run_string("return dl.ones(3):sum():item()")[0].as_number() == 3);
}

dlua::Options passing_options() {
  dlua::Options o = sandbox_options();
  o.time_limit = 5;  // scripts that must pass: room for a busy machine
  return o;
}

void must_pass(const char* code, dlua::Options o = passing_options()) {
  INFO(code);
  Runtime rt(o);
  CHECK_NOTHROW(rt.run_string(code));
  host_continues(rt);
}

void must_fail(const char* code, ErrorKind kind, const char* message_part,
               dlua::Options o = sandbox_options()) {
  INFO(code);
  Runtime rt(o);
  uint64_t gen = rt.generation();
  try {
    rt.run_string(code);
    FAIL("the script was not stopped");
  } catch (const dlua::Error& e) {
    INFO(e.what());
    CHECK(e.kind() == kind);
    CHECK(std::string(e.what()).find(message_part) != std::string::npos);
  }
  // A time or memory stop retires the state (notes §1); its tensors are freed.
  if (kind == ErrorKind::Timeout || kind == ErrorKind::Memory) CHECK(rt.generation() == gen + 1);
  host_continues(rt);
}

}  // namespace

TEST_CASE("sandbox: dangerous globals and bytecode are absent") {
  must_pass(R"lua(
    for _, n in ipairs{"io", "os", "ffi", "jit", "debug", "package", "dofile", "loadfile",
                       "getfenv", "setfenv", "newproxy", "module", "gcinfo"} do
      assert(_G[n] == nil, n)
    end
    assert(string.dump == nil and ("").dump == nil)
    assert(not pcall(require, "string.buffer"))
    assert(not pcall(require, "ffi"))
    assert(not pcall(require, "dlua.core"))   -- internals hold ffi and the C library
    assert(not pcall(require, "dlua.tensor")) -- could forge tensor handles
    assert(require("dlua") == dl)
    assert(not load("\27LJ\2\0junk", "x", "bt"))
    assert(not loadstring("\27LJ\2\0junk"))
    assert(select(2, load("\27LJ")):find("mode"))
  )lua");
}

TEST_CASE("sandbox: the string metatable is protected") {
  must_fail(R"lua(getmetatable("").__index.rep = nil)lua", ErrorKind::Runtime, "attempt to index");
  must_pass(R"lua(
    assert(getmetatable("") == false)
    string.rep = nil          -- the script's own copy only
    assert(("ab"):rep(2) == "abab")
  )lua");
}

TEST_CASE("sandbox: replacing library functions does not break dlua") {
  std::vector<std::string> lines;
  dlua::Options o = sandbox_options();
  o.print = [&](std::string_view s) { lines.emplace_back(s); };
  Runtime rt(o);
  rt.run_string("string.format = error; table.concat = nil; tostring = nil; print(dl.ones(3))");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("tensor([1., 1., 1.]") == 0);
  host_continues(rt);
}

TEST_CASE("sandbox: tensors are sealed cdata") {
  must_pass(R"lua(
    local t = dl.ones(4)
    assert(not pcall(function() t.h = 1 end))
    assert(not tostring(t):find("0x"))
    assert(getmetatable(t) ~= nil and type(getmetatable(t)) ~= "table")
    assert(dl.from_ptr == nil)
    assert(not pcall(function() return t:data_ptr() end))
    assert(dl.dist == nil)   -- it loads MPI and writes through raw addresses
  )lua");
}

TEST_CASE("sandbox: dl.compile works and compiled gradients too") {
  must_pass(R"lua(
    local f = dl.compile(function(x) return (x * 2 + 1):tanh():sum() end)
    local g = dl.compile(dl.grad(function(x) return (x * x):sum() end))
    for _ = 1, 3 do
      local x = dl.ones(40)
      assert(dl.equal(f(x), (x * 2 + 1):tanh():sum()))
      assert(dl.equal(g(x), x * 2))
    end
    assert(dl.compile.explain(g):find("gradient scope (compiled)", 1, true))
  )lua");
}

TEST_CASE("sandbox: nothing reachable from the globals leads to ffi or C") {
  // Walks every table, function upvalue-free value and metatable reachable without
  // the debug library: no userdata (a C library namespace), no cdata but tensors,
  // no table that looks like the ffi module.
  must_pass(R"lua(
    local seen, bad = {}, {}
    local function walk(v, path, depth)
      local t = type(v)
      if t == "userdata" then bad[#bad + 1] = path .. " is userdata" end
      if t == "cdata" and not dl.is_tensor(v) then bad[#bad + 1] = path .. " is cdata" end
      if t ~= "table" or seen[v] or depth > 12 then return end
      seen[v] = true
      if rawget(v, "cdef") or rawget(v, "typeof") or rawget(v, "dl_cdef") then
        bad[#bad + 1] = path .. " looks like ffi"
      end
      for k, x in pairs(v) do walk(x, path .. "." .. tostring(k), depth + 1) end
      local mt = getmetatable(v)
      if type(mt) == "table" then walk(mt, path .. "<mt>", depth + 1) end
    end
    walk(_G, "_G", 0)
    walk(dl.ones(1), "tensor", 0)
    assert(#bad == 0, table.concat(bad, "; "))
  )lua");
}

TEST_CASE("sandbox: no file access through the dl library") {
  must_pass(R"lua(
    for _, f in ipairs({
      function() dl.save("/tmp/dlua_sandbox_probe.safetensors", {x = dl.ones(2)}) end,
      function() dl.load("/etc/passwd") end,
      function() dl.data.load_idx("/etc/passwd") end,
      function() dl.summary.writer("/tmp/dlua_sandbox_probe") end,
      function() dl.latest_checkpoint("/tmp") end,
    }) do
      local ok, err = pcall(f)
      assert(not ok and tostring(err):find("not available in the sandbox", 1, true), tostring(err))
    end
  )lua");
}

TEST_CASE("sandbox: runaway loops are stopped") {
  for (const char* code : {
           "while true do end",
           "for i = 1, math.huge do end",
           "::a:: goto a",
           "local function f() return f() end f()",
           "repeat until false",
       })
    must_fail(code, ErrorKind::Timeout, "time limit exceeded");
}

TEST_CASE("sandbox: pcall, coroutines and xpcall cannot swallow the stop") {
  for (const char* code : {
           "while true do pcall(function() while true do end end) end",
           "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
           "xpcall(function() while true do end end, function() while true do end end)",
           "while true do xpcall(function() while true do end end, function(e) return e end) end",
           "local co = coroutine.wrap(function() while true do end end) while true do pcall(co) end",
           "while true do pcall(error, 'x') end",
       })
    must_fail(code, ErrorKind::Timeout, "time limit exceeded");
}

TEST_CASE("sandbox: xpcall still calls its handler for ordinary errors") {
  must_pass(R"lua(
    local ok, v = xpcall(function() error("e", 0) end, function(m) return "handled " .. m end)
    assert(not ok and v == "handled e")
    local ok2, a, b = xpcall(function(x, y) return x + y, x end, print, 2, 3)
    assert(ok2 and a == 5 and b == 2)
  )lua");
}

TEST_CASE("sandbox: new chunks stay under the limits") {
  must_fail("load('while true do end')()", ErrorKind::Timeout, "time limit");
  must_fail("loadstring('while true do end')()", ErrorKind::Timeout, "time limit");
  must_pass("local f = load('return x', 'c', 't', {x = 5}) assert(f() == 5)");
  must_pass("assert(load('return _G')() == _G)");
}

TEST_CASE("sandbox: pathological patterns are stopped") {
  must_fail(R"lua(string.find(("a"):rep(30), ("a?"):rep(30) .. ("a"):rep(30)))lua",
            ErrorKind::Timeout, "time limit");
  must_fail(R"lua(("a"):rep(30):match(("a?"):rep(30) .. ("a"):rep(30)))lua", ErrorKind::Timeout,
            "time limit");
  must_fail(R"lua(string.gsub(("a"):rep(30000), "(.-)b", "") )lua", ErrorKind::Timeout, "time limit");
}

TEST_CASE("sandbox: error objects are read raw") {
  must_fail("error(setmetatable({}, {__tostring = function() while true do end end}))",
            ErrorKind::Runtime, "(error object is a table value)");
}

TEST_CASE("sandbox: the Lua heap cap") {
  dlua::Options o = sandbox_options();
  o.time_limit = 60;  // the cap must stop these, even on a busy machine
  must_fail("local s = 'x' while true do s = s .. s end", ErrorKind::Memory, "not enough memory", o);
  must_fail("local t = {} for i = 1, 1e9 do t[i] = {i} end", ErrorKind::Memory, "not enough memory", o);
  must_fail("while true do pcall(string.rep, 'x', 2^30) end", ErrorKind::Timeout, "time limit");
}

TEST_CASE("sandbox: the tensor memory cap") {
  int64_t before = dl::host_allocator::stats().in_use;
  // Real work under a loaded machine: a generous time limit, a cap of 4 such tensors.
  dlua::Options o = sandbox_options();
  o.time_limit = 60;
  o.tensor_memory_limit = 16u << 20;
  must_fail("local k = {} while true do k[#k + 1] = dl.zeros(1e6) end", ErrorKind::Runtime,
            "tensor memory limit exceeded", o);
  // Garbage tensors are collected in time: the cap is never hit.
  must_pass("for i = 1, 300 do local x = dl.zeros(1e6) end", o);
  CHECK(dl::host_allocator::stats().in_use == before);
}

TEST_CASE("sandbox: deep recursion is an error, not a crash") {
  dlua::Options o = sandbox_options();
  o.time_limit = 60;  // stack growth is slow work on a busy machine, and must still end in an error
  for (const char* code : {
           "local function f(n) return 1 + f(n + 1) end f(1)",
           "local t = setmetatable({}, {__index = function(t, k) return t[k] end}) return t.x",
           "local function f() local s = tostring(setmetatable({}, {__tostring = f})) return s end f()",
           "local function f() local ok, e = pcall(f) error(e, 0) end f()",
           "local function f(...) return f(1, ...) end f()",
           "local function f(x) return f(dl.ones(1) + x) + 1 end f(dl.ones(1))",
       })
    must_fail(code, ErrorKind::Runtime, "stack overflow", o);
  // A coroutine that recurses fails alone; its caller goes on.
  must_pass(R"lua(
    local co = coroutine.create(function() local function f() return 1 + f() end return f() end)
    local ok, err = coroutine.resume(co)
    assert(not ok and tostring(err):find("stack overflow"), tostring(err))
  )lua");
}

TEST_CASE("sandbox: hot loops that the JIT would compile are stopped") {
  // Compiled LuaJIT code ignores hooks, so a runtime with a time limit runs with the
  // JIT off (vm/runtime.cpp); these are the loops that would otherwise be compiled
  // (tight numeric ones, tensor arithmetic, FFI-backed calls), and must still stop.
  for (const char* code : {
           "local s = 0 for i = 1, 2^52 do s = s + i % 7 end",
           "local x = 0 while x >= 0 do x = (x + 1) % 1000 end",
           "local t = dl.zeros(4) while true do t = t + 1 end",
           "local s = 0 for i = 1, 2^52 do s = s + dl.ones(1):numel() end",
       })
    must_fail(code, ErrorKind::Timeout, "time limit exceeded");
}

TEST_CASE("sandbox: huge unpack") {
  must_fail("unpack({}, -2^31, 2^31 - 1)", ErrorKind::Runtime, "too many results");
}

TEST_CASE("sandbox: collectgarbage only counts") {
  must_pass("assert(collectgarbage('count') > 0)");
  must_fail("collectgarbage('stop')", ErrorKind::Runtime, "only \"count\"");
}

// The sandbox's pattern functions (vm/strmatch.cpp) against LuaJIT's own.
TEST_CASE("sandbox: pattern functions agree with LuaJIT's") {
  const char* probe = R"lua(
    local out = {}
    local function add(...) local n = select('#', ...) local t = {} for i = 1, n do t[i] = tostring((select(i, ...))) end out[#out + 1] = table.concat(t, ",") end
    local cases = {
      {"hello world", "o"}, {"hello world", "l+"}, {"hello world", "(h)(e)"}, {"hello", "()ll()"},
      {"  trim  ", "^%s*(.-)%s*$"}, {"key = value", "(%w+)%s*=%s*(%w+)"}, {"a.b", ".", 1, true},
      {"THE (quick) fox", "%((%a+)%)"}, {"f(a(b)c)d", "%b()"}, {"THE (quick) fox", "%f[%a]%a+"},
      {"abc", "", 10}, {"abc", "", 4}, {"abc", "c", -1}, {"abc", "^b"}, {"aaa", "a-", 2},
      {"x=1, y=2", "(%w)=(%d)"}, {"[[x]]", "[%[%]]+"}, {"a\0b", "%z"}, {"hello", "[^aeiou]+"},
      {"2024-01-02", "(%d+)-(%d+)-(%d+)"}, {"abab", "(ab)%1"}, {"", "x*"}, {"end$", "d%$"},
    }
    for _, c in ipairs(cases) do
      add(string.find(c[1], c[2], c[3], c[4]))
      add(string.match(c[1], c[2], c[3]))
      add(string.gsub(c[1], c[2], "<%0>"))
      for a, b in string.gmatch(c[1], c[2]) do add("g", a, b) end
    end
    add(string.gsub("hello world", "(%w+)", "%1 %1", 1))
    add(string.gsub("abc", "%w", {a = "1", b = false}))
    add(string.gsub("abc", "%w", function(ch) if ch == "b" then return false end return ch:upper() end))
    for _, bad in ipairs({"%", "[a", "(()", "%b", "%f", "(%1)"}) do add(pcall(string.find, "abc", bad)) end
    return table.concat(out, "\n")
  )lua";
  Runtime native;
  Runtime boxed(sandbox_options());
  std::string want = native.run_string(probe)[0].as_string();
  std::string got = boxed.run_string(probe)[0].as_string();
  // Error messages name their position differently ("bad argument" vs "malformed"); the
  // results before the error cases must match exactly, and the errors must be errors.
  CHECK(got.substr(0, got.find("false,")) == want.substr(0, want.find("false,")));
  size_t errors = 0;
  for (size_t p = got.find("false,"); p != std::string::npos; p = got.find("false,", p + 1)) ++errors;
  CHECK(errors == 6);
}
