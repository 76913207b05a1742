// Fuzz target: the checkpoint restore path, from the file's bytes to the model's
// parameters (dl.load, then scripts/dlua/checkpoint.lua's Checkpoint:restore, which
// checks the file against a model, an Adam optimizer with state, a tensor, a number,
// a string and a boolean), through the embedding API as a host would run it. The same
// bytes are also read as the directory's index file by dl.latest_checkpoint.
//
// Oracles, besides ASan/UBSan: a refused file raises a message from the loader or
// from restore, never a Lua runtime error ("attempt to index a nil value" would be a
// bug in the library, not a clear refusal); and restore is all or nothing: after a
// refusal every tracked value is what it was before (compared as a dump of the whole
// state). The seeds are real checkpoints written by ckpt:save, so mutations start
// inside well-formed files.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <dlua/dlua.hpp>

namespace {

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n", what.c_str());
  std::abort();
}

// The state the checkpoint tracks, and the oracle. Kept small so that an input runs
// in well under a millisecond of Lua.
constexpr const char* kHarness = R"lua(
local dl = require("dlua")
dl.manual_seed(1)
local net = dl.nn.Sequential{ dl.nn.Linear(3, 4), dl.nn.ReLU(), dl.nn.Linear(4, 2) }
local opt = dl.optim.Adam{ lr = 0.01 }
local train = dl.implicit_value_and_grad(function(x) return net(x):sum() end)
local _, grads = train(dl.ones(5, 3))
opt:apply_gradients(grads)
local ckpt = dl.Checkpoint{ model = net, optimizer = opt, step = 7, scale = dl.tensor({1.5, 2.5}),
                            name = "run", done = false }

local function dump_value(v)
  if dl.is_tensor(v) then
    return v.dtype .. "(" .. table.concat(v.shape, ",") .. "):" .. dl.tostring_values(v)
  end
  return type(v) .. ":" .. tostring(v)
end
local function dump_dict(sd)
  local keys = {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do out[#out + 1] = k .. "=" .. dump_value(sd[k]) end
  return table.concat(out, ";")
end
local function dump()
  return dump_dict(net:state_dict()) .. "|" .. dump_dict(opt:state_dict()) .. "|"
         .. dump_value(ckpt.step) .. dump_value(ckpt.scale) .. dump_value(ckpt.name)
         .. dump_value(ckpt.done)
end

local CLEAN = { "^restore: ", "^Checkpoint:restore: ", "^load: " }
-- A Lua runtime error raised inside the library ("dlua/checkpoint.lua:12: attempt to
-- index a nil value"), possibly wrapped in a clean prefix. (Not any "attempt to": a
-- refusal may quote the file's own bytes, which can say anything.)
local function runtime_error(msg)
  return msg:find("^attempt to ") ~= nil or msg:find("%.lua:%d+: attempt to ") ~= nil
end
function fuzz_restore(path, dir)
  local before = dump()
  local ok, err = pcall(ckpt.restore, ckpt, path)
  if not ok then
    local msg = tostring(err):gsub("^[^\n]-:%d+: ", "", 1)
    local clean = false
    for _, p in ipairs(CLEAN) do clean = clean or msg:find(p) ~= nil end
    if not clean or runtime_error(msg) then error("unclear refusal: " .. msg, 0) end
    local after = dump()
    if after ~= before then error("a refused restore changed the state: " .. msg, 0) end
  end
  local ok2, latest = pcall(dl.latest_checkpoint, dir)
  if not ok2 and runtime_error(tostring(latest):gsub("^[^\n]-:%d+: ", "", 1)) then
    error("latest_checkpoint: " .. tostring(latest), 0)
  end
end

-- Seeds for the corpus (make_seeds.py's counterpart): this harness's own checkpoints.
function write_seeds(dir)
  ckpt:save(dir .. "/seed-full")
  dl.Checkpoint{ model = net, step = 3 }:save(dir .. "/seed-model-only")
  os.remove(dir .. "/checkpoint")
end
)lua";

// tostring_values: every element at full precision (tostring(x) abbreviates large
// tensors, which would hide a change).
constexpr const char* kValues = R"lua(
local dl = require("dlua")
function dl.tostring_values(x)
  local t = x:detach():contiguous():view(-1):to("float64"):totable()
  for i = 1, #t do t[i] = string.format("%.17g", t[i]) end
  return table.concat(t, ",")
end
)lua";

std::unique_ptr<dlua::Runtime> g_rt;
std::string g_dir, g_file, g_index;

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp) fatal("cannot write " + path);
  bool ok = size == 0 || std::fwrite(data, 1, size, fp) == size;
  if (std::fclose(fp) != 0 || !ok) fatal("cannot write " + path);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  g_dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlua-fuzz-ckpt-" + std::to_string(::getpid());
  std::string mk = "mkdir -p '" + g_dir + "'";
  if (std::system(mk.c_str()) != 0) fatal("cannot create " + g_dir);
  g_file = g_dir + "/model-7.safetensors";
  g_index = g_dir + "/checkpoint";
  dlua::Options o;
  o.print = [](std::string_view) {};
  g_rt = std::make_unique<dlua::Runtime>(o);
  g_rt->run_string(kValues, "=values");
  g_rt->run_string(kHarness, "=harness");
  if (const char* seeds = std::getenv("DLUA_FUZZ_SEED_DIR")) g_rt->call("write_seeds", seeds);
  std::atexit([] {
    g_rt.reset();
    std::remove(g_file.c_str());
    std::remove(g_index.c_str());
    ::rmdir(g_dir.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  write_file(g_file, data, size);
  write_file(g_index, data, size);
  try {
    g_rt->call("fuzz_restore", g_file, g_dir);
  } catch (const dlua::Error& e) {
    fatal(e.what());
  }
  return 0;
}
