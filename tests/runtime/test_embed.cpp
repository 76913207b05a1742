// The C++ embedding API: running code, values both ways, errors, and tensors shared
// with scripts without copies (from_blob, script results, revocation).
#include <dlua/dlua.h>
#include <dlua/dlua.hpp>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using dlua::ErrorKind;
using dlua::Runtime;
using dlua::Tensor;
using dlua::Value;

namespace {

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dlua::Error& e) {
    return e.kind();
  }
  FAIL("no dlua::Error was thrown");
  return ErrorKind::Runtime;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dlua::Error& e) {
    return e.what();
  }
  FAIL("no dlua::Error was thrown");
  return "";
}

}  // namespace

TEST_CASE("run_string returns the chunk's results") {
  Runtime rt;
  auto r = rt.run_string("return 1.5, 'two', true, nil, {1, 2, x = 'y'}");
  REQUIRE(r.size() == 5);
  CHECK(r[0].as_number() == 1.5);
  CHECK(r[1].as_string() == "two");
  CHECK(r[2].as_bool());
  CHECK(r[3].is_nil());
  CHECK(r[4].length() == 2);
  CHECK(r[4][2].as_number() == 2);
  CHECK(r[4]["x"].as_string() == "y");
  CHECK(r[4]["nope"].is_nil());
  CHECK(rt.run_string("x = 1").empty());
}

TEST_CASE("strings keep embedded zeros") {
  Runtime rt;
  auto r = rt.run_string("return 'a\\0b'");
  CHECK(r[0].as_string() == std::string("a\0b", 3));
  rt.set_global("s", Value(std::string("x\0y", 3)));
  CHECK(rt.run_string("return #s")[0].as_number() == 3);
}

TEST_CASE("call passes arguments and returns results") {
  Runtime rt;
  rt.run_string(R"lua(
    function add(a, b) return a + b end
    function echo(...) return ... end
    game = {score = function(t) return t.hits * 10 + #t.names end}
  )lua");
  CHECK(rt.call("add", 2, 3.5).as_number() == 5.5);
  auto all = rt.call_all("echo", {Value("a"), Value(true), Value()});
  REQUIRE(all.size() == 3);
  CHECK(all[0].as_string() == "a");
  Value t = Value::table();
  t.set("hits", 4);
  t.set("names", Value::array({Value("p"), Value("q")}));
  CHECK(rt.call("game.score", t).as_number() == 42);
  CHECK(rt.call("echo").is_nil());
}

TEST_CASE("globals round-trip") {
  Runtime rt;
  rt.set_global("config", Value::table({{Value("speed"), Value(3.0)}, {Value(1), Value("first")}}));
  CHECK(rt.run_string("return config.speed * 2, config[1]")[0].as_number() == 6);
  rt.run_string("answer = {nested = {deep = 42}}");
  CHECK(rt.get_global("answer")["nested"]["deep"].as_number() == 42);
  CHECK(rt.get_global("missing").is_nil());
}

TEST_CASE("values that cannot cross arrive as opaque") {
  Runtime rt;
  auto r = rt.run_string("return print, coroutine.create(print)");
  CHECK(r[0].type() == Value::Type::Opaque);
  CHECK(std::string(r[0].type_name()) == "function");
  CHECK(std::string(r[1].type_name()) == "thread");
  CHECK(kind_of([&] { rt.set_global("f", r[0]); }) == ErrorKind::Type);
  CHECK(kind_of([&] { rt.run_string("t = {} t.t = t return t"); }) == ErrorKind::Type);
}

TEST_CASE("script errors become dlua::Error with a traceback") {
  Runtime rt;
  rt.run_string("function inner() error('boom') end\nfunction outer() inner() end", "=game.lua");
  try {
    rt.call("outer");
    FAIL("no error");
  } catch (const dlua::Error& e) {
    CHECK(e.kind() == ErrorKind::Runtime);
    CHECK(std::string(e.what()) == "game.lua:1: boom");
    CHECK(e.traceback().find("stack traceback:") == 0);
    CHECK(e.traceback().find("in function 'inner'") != std::string::npos);
    CHECK(e.traceback().find("game.lua:2:") != std::string::npos);
  }
  CHECK(kind_of([&] { rt.run_string("x = = 1"); }) == ErrorKind::Syntax);
  CHECK(kind_of([&] { rt.call("nothing_here"); }) == ErrorKind::Type);
  CHECK(kind_of([&] { rt.run_file("/nonexistent/script.lua"); }) == ErrorKind::File);
  CHECK(kind_of([&] { rt.run_string("return 1")[0].as_string(); }) == ErrorKind::Type);
  // The runtime is still usable.
  CHECK(rt.run_string("return 7")[0].as_number() == 7);
}

TEST_CASE("an error object with a looping __tostring is reported raw") {
  Runtime rt({.sandbox = true, .time_limit = 1.0});
  std::string m = message_of([&] {
    rt.run_string("error(setmetatable({}, {__tostring = function() while true do end end}))");
  });
  CHECK(m == "(error object is a table value)");
}

TEST_CASE("print goes to the host's logger") {
  std::vector<std::string> lines;
  dlua::Options o;
  o.print = [&](std::string_view s) { lines.emplace_back(s); };
  Runtime rt(o);
  rt.run_string("print('a', 1, nil) print(dl.ones(2))");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "a\t1\tnil");
  CHECK(lines[1].find("tensor([1., 1.]") == 0);
}

TEST_CASE("from_blob shares host memory with scripts, both ways") {
  Runtime rt;
  float buf[4] = {1, 2, 3, 4};
  Tensor t = Tensor::from_blob(buf, {4}, dlua::DType::Float32);
  rt.set_global("pos", t);
  rt.run_string("pos:mul_(10) pos[1] = -1");  // the script writes
  CHECK(buf[0] == -1);
  CHECK(buf[3] == 40);
  buf[1] = 0.5f;                              // the host writes
  CHECK(rt.run_string("return pos[2]")[0].as_number() == 0.5);
  // Passed as an argument, the same memory again.
  rt.run_string("function scale(x, k) x:mul_(k) return x end");
  Tensor back = rt.call("scale", t, 2).as_tensor();
  CHECK(back.data<float>() == buf);
  CHECK(buf[3] == 80);
}

TEST_CASE("from_blob with strides and a 2-D view") {
  Runtime rt;
  double m[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_blob(m, {3, 2}, dlua::DType::Float64);
  CHECK(t.strides() == std::vector<int64_t>{2, 1});
  rt.set_global("m", t);
  auto s = rt.run_string("return m:sum():item(), m:t()");
  CHECK(s[0].as_number() == 21);
  Tensor tt = s[1].as_tensor();
  CHECK(tt.shape() == std::vector<int64_t>{2, 3});
  CHECK(!tt.is_contiguous());
  CHECK(tt.data<double>() == m);  // a view of the host's memory
  Tensor c = tt.contiguous();
  CHECK(c.data<double>()[1] == 3);
  Tensor every_other = Tensor::from_blob(m, {3}, dlua::DType::Float64, {2});
  rt.set_global("e", every_other);
  CHECK(rt.run_string("return e:sum():item()")[0].as_number() == 1 + 3 + 5);
}

TEST_CASE("tensors made by scripts are read in place by the host") {
  Runtime rt;
  Tensor y = rt.run_string("y = dl.arange(0, 6, 1, {dtype = 'float32'}):view(2, 3) return y")[0].as_tensor();
  CHECK(y.dim() == 2);
  CHECK(y.shape() == std::vector<int64_t>{2, 3});
  CHECK(y.dtype() == dlua::DType::Float32);
  CHECK(y.numel() == 6);
  CHECK(y.device() == "cpu");
  float* p = y.data<float>();
  CHECK(p[5] == 5);
  p[0] = 42;  // the script sees the host's write
  CHECK(rt.run_string("return y[1][1]")[0].as_number() == 42);
  CHECK(kind_of([&] { y.data<double>(); }) == ErrorKind::Type);
  CHECK(rt.run_string("return dl.tensor(3.5)")[0].as_tensor().item() == 3.5);
  // A host reference keeps the tensor alive after the script dropped it.
  rt.run_string("y = nil collectgarbage()");
  CHECK(p[0] == 42);
}

TEST_CASE("Tensor::zeros can be handed to a script") {
  Runtime rt;
  Tensor z = Tensor::zeros({2, 2}, dlua::DType::Int64);
  rt.set_global("z", z);
  rt.run_string("z:fill_(7)");
  CHECK(z.data<int64_t>()[3] == 7);
}

TEST_CASE("released blobs are revoked for every script tensor and view") {
  Runtime rt;
  std::vector<float> buf(8, 1.0f);
  Tensor t = Tensor::from_blob(buf.data(), {8}, dlua::DType::Float32);
  rt.set_global("b", t);
  rt.run_string("v = b:view(2, 4)");
  CHECK(rt.run_string("return v:sum():item()")[0].as_number() == 8);
  t.release();
  CHECK(t.released());
  std::string m1 = message_of([&] { rt.run_string("return b:sum()"); });
  std::string m2 = message_of([&] { rt.run_string("return v[1][1]"); });
  CHECK(m1.find("revoked") != std::string::npos);
  CHECK(m2.find("revoked") != std::string::npos);
  CHECK(kind_of([&] { t.data(); }) == ErrorKind::Runtime);
  // Owned tensors cannot be released.
  CHECK(kind_of([&] { Tensor::zeros({1}).release(); }) == ErrorKind::Type);
  CHECK(rt.run_string("return 1 + 1")[0].as_number() == 2);
}

TEST_CASE("from_blob's on_free runs when the last reference is gone") {
  Runtime rt;
  static float buf[3] = {1, 2, 3};
  int freed = 0;
  {
    Tensor t = Tensor::from_blob(buf, {3}, dlua::DType::Float32, {},
                                 [&](void* p) { freed += (p == buf); });
    rt.set_global("held", t);
  }
  CHECK(freed == 0);  // the script still holds it
  rt.run_string("held = nil collectgarbage() collectgarbage()");
  CHECK(freed == 1);
}

TEST_CASE("bad tensor arguments are clear errors") {
  CHECK(message_of([] { Tensor::from_blob(nullptr, {3}, dlua::DType::Float32); })
            .find("from_blob") != std::string::npos);
  CHECK(kind_of([] { Tensor().dim(); }) == ErrorKind::Type);
  CHECK(kind_of([] { Tensor::zeros({2}).size(3); }) == ErrorKind::Type);
}

TEST_CASE("the C API mirrors the C++ one") {
  dlua_options o;
  dlua_options_init(&o);
  dlua_runtime* rt = nullptr;
  REQUIRE(dlua_open(&o, &rt) == DLUA_OK);
  REQUIRE(dlua_run_string(rt, "function f(x, s) x:add_(1) return x:sum():item(), s .. '!', x, print end") == DLUA_OK);
  float buf[2] = {1, 2};
  int64_t shape[1] = {2};
  dlua_tensor* t = nullptr;
  REQUIRE(dlua_tensor_from_blob(buf, shape, 1, DLUA_FLOAT32, nullptr, &t) == DLUA_OK);
  dlua_value args[2] = {dlua_tensor_value(t), dlua_string("hi")};
  dlua_value res[4];
  REQUIRE(dlua_call(rt, "f", args, 2, res, 4) == DLUA_OK);
  CHECK(res[0].type == DLUA_TNUMBER);
  CHECK(res[0].number == 5);
  CHECK(std::string(res[1].string) == "hi!");
  CHECK(res[2].type == DLUA_TTENSOR);
  CHECK(dlua_tensor_data(res[2].tensor) == buf);
  CHECK(dlua_tensor_ndim(res[2].tensor) == 1);
  CHECK(dlua_tensor_size(res[2].tensor, 0) == 2);
  CHECK(res[3].type == DLUA_TOTHER);
  CHECK(std::string(res[3].string) == "function");
  for (auto& v : res) dlua_value_free(&v);
  CHECK(buf[1] == 3);

  CHECK(dlua_run_string(rt, "error('nope')") == DLUA_ERR_RUNTIME);
  CHECK(std::string(dlua_errmsg(rt)).find("nope") != std::string::npos);
  CHECK(std::string(dlua_traceback(rt)).find("stack traceback") == 0);
  CHECK(dlua_run_string(rt, "x = = 1") == DLUA_ERR_SYNTAX);
  dlua_value g = dlua_number(4);
  CHECK(dlua_set_global(rt, "g", &g) == DLUA_OK);
  dlua_value out;
  CHECK(dlua_get_global(rt, "g", &out) == DLUA_OK);
  CHECK(out.number == 4);
  CHECK(dlua_tensor_release(t) == DLUA_OK);
  CHECK(dlua_call(rt, "f", args, 2, res, 1) == DLUA_ERR_RUNTIME);
  CHECK(std::string(dlua_errmsg(rt)).find("revoked") != std::string::npos);
  dlua_tensor_free(t);
  CHECK(dlua_call(nullptr, "f", nullptr, 0, nullptr, 0) == DLUA_ERR_ARG);
  dlua_close(rt);
}

TEST_CASE("a GradientTape recorded in one call answers in the next, on another thread") {
  // A runtime is used from one thread at a time, not always the same one: the values a
  // held arena keeps (bindings/arenas.cpp) are found from any thread.
  Runtime rt;
  std::thread([&] {
    rt.run_string("x = dl.tensor({1, 2}) tape = dl.GradientTape({persistent = true}) tape:watch(x) "
                  "y = tape:record(function() return (x * x * x):sum() end)");
  }).join();
  std::thread([&] {
    auto r = rt.run_string("local g = tape:gradient(y, x) return g[1], g[2]");
    CHECK(r[0].as_number() == 3);
    CHECK(r[1].as_number() == 12);
    r = rt.run_string("tape = nil y = nil collectgarbage() collectgarbage() "
                      "return require('dlua.core').C.dl_arena_values()");
    CHECK(r[0].as_number() == 0);
  }).join();
}

TEST_CASE("a gradient that raised an error leaves nothing kept after its call") {
  Runtime rt;
  CHECK_THROWS(rt.run_string("dl.grad(function(x) local y = x * 2 error('boom') end)(dl.ones(2))"));
  auto r = rt.run_string("return require('dlua.core').C.dl_arena_values()");
  CHECK(r[0].as_number() == 0);
}
