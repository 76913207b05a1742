// Time limits, interrupt() and memory caps outside the sandbox (trusted scripts), and
// how the runtime carries on after each. Timing is asserted only as "it stopped".
#include <dlua/dlua.hpp>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "tensor/allocator.h"

using dlua::ErrorKind;
using dlua::Runtime;

namespace {

ErrorKind run_kind(Runtime& rt, const char* code) {
  try {
    rt.run_string(code);
  } catch (const dlua::Error& e) {
    return e.kind();
  }
  FAIL("not stopped: " << code);
  return ErrorKind::Runtime;
}

}  // namespace

TEST_CASE("limits: a time limit stops trusted loops too") {
  Runtime rt({.time_limit = 0.2});
  for (const char* code : {
           "while true do end",
           "while true do pcall(function() while true do end end) end",
           "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
           "xpcall(function() while true do end end, function() while true do end end)",
           "local f = loadstring('while true do end') f()",
           "local s = 0 for i = 1, 1e12 do s = s + i end",
       }) {
    INFO(code);
    CHECK(run_kind(rt, code) == ErrorKind::Timeout);
    CHECK(rt.run_string("return 40 + 2")[0].as_number() == 42);
  }
}

TEST_CASE("limits: each call gets the whole time limit") {
  Runtime rt({.time_limit = 0.5});
  rt.run_string("function work(n) local s = 0 for i = 1, n do s = s + i end return s end");
  for (int i = 0; i < 5; ++i) CHECK(rt.call("work", 1000).as_number() == 500500);
}

TEST_CASE("limits: after a timeout the state is fresh, the host goes on") {
  Runtime rt({.time_limit = 0.2});
  rt.run_string("kept = 1");
  uint64_t gen = rt.generation();
  CHECK(run_kind(rt, "while true do end") == ErrorKind::Timeout);
  CHECK(rt.generation() == gen + 1);
  CHECK(rt.get_global("kept").is_nil());  // a fresh state: globals are gone
  CHECK(rt.run_string("return dl.ones(2):sum():item()")[0].as_number() == 2);
}

TEST_CASE("limits: interrupt() from another thread keeps the state") {
  Runtime rt({.sandbox = true});  // no time limit: only the interrupt stops it
  rt.run_string("kept = 7");
  uint64_t gen = rt.generation();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rt.interrupt();
  });
  ErrorKind k = run_kind(rt, "while true do pcall(function() while true do end end) end");
  stopper.join();
  CHECK(k == ErrorKind::Interrupted);
  CHECK(rt.generation() == gen);
  CHECK(rt.get_global("kept").as_number() == 7);
}

TEST_CASE("limits: interrupt() of a trusted JIT-off runtime") {
  Runtime rt({.jit = false});
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rt.interrupt();
  });
  CHECK(run_kind(rt, "while true do end") == ErrorKind::Interrupted);
  stopper.join();
  CHECK(rt.run_string("return 1")[0].as_number() == 1);
}

TEST_CASE("limits: an interrupt between calls does not stop the next one") {
  Runtime rt({.sandbox = true});
  rt.interrupt();
  CHECK(rt.run_string("local s = 0 for i = 1, 1e5 do s = s + i end return s")[0].as_number() == 5000050000.0);
}

TEST_CASE("limits: the Lua heap cap, trusted") {
  Runtime rt({.lua_memory_limit = 16u << 20});
  rt.run_string("small = {1, 2, 3}");
  try {
    rt.run_string("local t = {} for i = 1, 1e8 do t[i] = 'x' .. i end");
    FAIL("not stopped");
  } catch (const dlua::Error& e) {
    CHECK(e.kind() == ErrorKind::Memory);
    CHECK(std::string(e.what()).find("not enough memory") != std::string::npos);
  }
  CHECK(rt.lua_memory() < (16u << 20));
  CHECK(rt.run_string("return 5")[0].as_number() == 5);
  // A script may catch the refusal itself and go on.
  CHECK(rt.run_string("local ok = pcall(string.rep, 'x', 1e9) return ok")[0].as_bool() == false);
}

TEST_CASE("limits: a heap cap too small for the library is a clear error") {
  try {
    Runtime rt({.lua_memory_limit = 64 * 1024});
    FAIL("created");
  } catch (const dlua::Error& e) {
    CHECK(e.kind() == ErrorKind::Memory);
  }
}

TEST_CASE("limits: the tensor memory cap, with one collection before refusing") {
  int64_t before = dl::host_allocator::stats().in_use;
  {
    Runtime rt({.tensor_memory_limit = 32u << 20});
    CHECK(dl::host_allocator::stats().limit == (32 << 20));
    try {
      rt.run_string("keep = {} for i = 1, 100 do keep[i] = dl.zeros(1e6) end");
      FAIL("not refused");
    } catch (const dlua::Error& e) {
      CHECK(e.kind() == ErrorKind::Runtime);
      CHECK(std::string(e.what()).find("tensor memory limit exceeded") != std::string::npos);
    }
    rt.run_string("keep = nil");
    // Unreachable tensors are collected when the cap is reached.
    CHECK_NOTHROW(rt.run_string("for i = 1, 200 do local x = dl.zeros(1e6) end"));
  }
  CHECK(dl::host_allocator::stats().limit == 0);  // restored
  CHECK(dl::host_allocator::stats().in_use == before);
}

TEST_CASE("limits: nested host calls share the outer deadline") {
  Runtime rt({.time_limit = 0.2});
  rt.run_string("function spin() while true do end end");
  CHECK(run_kind(rt, "pcall(spin) spin()") == ErrorKind::Timeout);
}

TEST_CASE("limits: a compiled call stopped by the time limit or an interrupt leaves nothing behind") {
  // The stop unwinds through the compiled call's own end (scripts/dlua/compile.lua);
  // the runtime ends the call, so the next ops on the thread run eagerly as before.
  const char* setup =
      "f = dl.compile(function(x) local y = x * 2 + 1 while y:sum():item() > 0 do end return y end)\n"
      "g = dl.compile(function(x) return (x * 3):tanh() end)";
  const char* after =
      "local x = dl.ones(100)\n"
      "local a, b = g(x), (x * 3):tanh()\n"
      "local c = x * 5\n"
      "return dl.equal(a, b) and dl.equal(c, dl.full({100}, 5)) and c.id ~= 0 and 1 or 0";
  {
    Runtime rt({.time_limit = 0.2});
    rt.run_string(setup);
    CHECK(run_kind(rt, "f(dl.ones(100))") == ErrorKind::Timeout);
    rt.run_string(setup);   // the state was retired: a fresh one
    CHECK(rt.run_string(after)[0].as_number() == 1);
  }
  {
    Runtime rt({.sandbox = true});
    rt.run_string(setup);
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      rt.interrupt();
    });
    ErrorKind k = run_kind(rt, "f(dl.ones(100))");
    stopper.join();
    CHECK(k == ErrorKind::Interrupted);
    CHECK(rt.run_string(after)[0].as_number() == 1);   // the same state
  }
}
