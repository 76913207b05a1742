-- The NCCL check of tools/gpu_bundle.sh, for a machine with one GPU: dl.dist's NCCL
-- backend (gpu/nccl.h) driven directly, without MPI (which dl.dist skips for one rank).
--   dlua tools/gpu_nccl.lua
-- 1. a one-rank communicator: every dtype and reduction, broadcast and allgather, each
--    enqueued after the kernel that wrote its buffer and read by the one after it;
-- 2. a rank whose peer never joins: dist.init fails within the timeout, naming it, and
--    a new communicator can be made afterwards;
-- 3. two processes on the one GPU: NCCL either runs them (sums checked) or refuses the
--    second rank on a used device; either way both end within the timeout.
-- The second process is this script again: dlua tools/gpu_nccl.lua peer ID_FILE OUT_FILE
local dl = require("dlua")
local ffi = require("ffi")
local core = require("dlua.core")

local lib = ffi.load(ffi.string(core.C.dl_engine_dir()) .. "libdlua_cuda.so")
ffi.cdef("const char* dln_cdef(void);")
ffi.cdef(ffi.string(lib.dln_cdef()))
local ID = 128
local codes = core.dtype_codes
local function ptr(t) return ffi.cast("void*", t:data_ptr()) end
local function err() return ffi.string(lib.dln_error()) end
local function ok(rc, what) assert(rc == 0, what .. ": " .. err()) end
local function hex(id) local s = {} for i = 0, ID - 1 do s[#s + 1] = string.format("%02x", id[i]) end return table.concat(s) end
local function unhex(s) local id = ffi.new("unsigned char[?]", ID) for i = 0, ID - 1 do id[i] = tonumber(s:sub(2 * i + 1, 2 * i + 2), 16) end return id end
local function slurp(path) local f = io.open(path) if not f then return nil end local s = f:read("*a") f:close() return s end
local function spit(path, s) local f = assert(io.open(path .. ".tmp", "w")) f:write(s) f:close() assert(os.rename(path .. ".tmp", path)) end

-- Both processes of part 3: rank r of 2 on cuda:0; writes "ran <sum>" or "failed <message>".
local function two_ranks(id, rank, timeout)
  local t0 = os.time()
  if lib.dln_init(id, ID, rank, 2, 0, timeout) ~= 0 then return "failed " .. err(), os.time() - t0 end
  local x = (dl.arange(1, 9, { device = "cuda" }) * (rank + 1))
  if lib.dln_allreduce(ptr(x), 8, codes.float32, 0, "dist.allreduce") ~= 0 or lib.dln_wait(timeout, "dist.allreduce") ~= 0 then
    return "failed " .. err(), os.time() - t0
  end
  local got = x:sum():item()
  lib.dln_finalize()
  return "ran " .. got, os.time() - t0
end

if arg[1] == "peer" then
  local id = unhex(assert(slurp(arg[2])))
  spit(arg[3], (two_ranks(id, 1, 20)))
  os.exit(0)
end

print("NCCL " .. lib.dln_version() .. ", " .. dl.cuda.get_device_name(0))
local id = ffi.new("unsigned char[?]", ID)

-- 1. One rank.
ok(lib.dln_unique_id(id, ID), "dln_unique_id")
ok(lib.dln_init(id, ID, 0, 1, 0, 30), "dln_init")
local n = 0
for _, dtype in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8" }) do
  local floating = dtype:find("float") ~= nil
  for op, code in pairs({ sum = 0, max = 1, min = 2, prod = 3, mean = floating and 4 or nil }) do
    local src = dl.arange(0, 1000, { device = "cuda" }):remainder(97)
    local x = (src * 2 + 1):to(dtype)                 -- written by a kernel just before
    local want = x:cpu()
    ok(lib.dln_allreduce(ptr(x), x:numel(), codes[dtype], code, "dist.allreduce"), dtype .. " " .. op)
    local y = x:float() + 0                           -- read by a kernel just after
    assert(dl.equal(y:cpu(), want:float()), "allreduce " .. op .. " changed one rank's " .. dtype .. " values")
    n = n + 1
  end
end
local b = dl.randn(4096, { device = "cuda" }):mul(3)
local want = b:cpu()
ok(lib.dln_broadcast(ptr(b), b:numel(), codes.float32, 0, "dist.broadcast"), "broadcast")
assert(lib.dln_broadcast(ptr(b), b:numel(), codes.float32, 1, "dist.broadcast") == -1 and err():find("root 1 is not a rank", 1, true))
local g = dl.zeros(4096, { device = "cuda" })
ok(lib.dln_allgather(ptr(b), ptr(g), b:numel(), codes.float32, "dist.allgather"), "allgather")
ok(lib.dln_wait(30, "dist.allgather"), "wait")
assert(dl.equal(g:cpu(), want) and dl.equal(b:cpu(), want), "broadcast or allgather of one rank changed the values")
local flag = dl.tensor({ true, false }, { device = "cuda" })
assert(lib.dln_allreduce(ptr(flag), 2, codes.bool, 0, "dist.allreduce") == -1 and err():find("cannot sum bool", 1, true))
ok(lib.dln_finalize(), "finalize")
print("one rank: " .. n .. " allreduces (7 dtypes), broadcast, allgather ok")

-- 2. A peer that never joins.
ok(lib.dln_unique_id(id, ID), "dln_unique_id")
local t0 = os.time()
assert(lib.dln_init(id, ID, 0, 2, 0, 3) == -1, "dist.init with a missing rank succeeded")
local waited = os.time() - t0
print("missing peer: " .. err() .. " (after " .. waited .. " s)")
assert(err():find("dist.init", 1, true) and err():find("did not join", 1, true) and waited <= 10, err())
ok(lib.dln_unique_id(id, ID), "dln_unique_id")
ok(lib.dln_init(id, ID, 0, 1, 0, 30), "dln_init after a failed one")
ok(lib.dln_finalize(), "finalize")
print("missing peer: failed in time, and a new communicator works")

-- 3. Two processes on one GPU.
local dir = os.getenv("TMPDIR") or "/tmp"
local idf, outf = dir .. "/dlua_nccl_id_" .. os.time(), dir .. "/dlua_nccl_peer_" .. os.time()
os.remove(outf)
ok(lib.dln_unique_id(id, ID), "dln_unique_id")
spit(idf, hex(id))
local self = arg[0]
assert(os.execute(string.format("'%s' '%s' peer '%s' '%s' > '%s.log' 2>&1 &", arg[-1], self, idf, outf, outf)) == 0)
local mine, secs = two_ranks(id, 0, 20)
local peer
for _ = 1, 600 do
  peer = slurp(outf)
  if peer then break end
  os.execute("sleep 0.1")
end
print("two ranks on one GPU: rank 0 " .. mine .. " (" .. secs .. " s); rank 1 " .. tostring(peer))
if not peer then print(slurp(outf .. ".log") or "") end
assert(peer, "the second rank did not finish")
if mine:find("^ran") then
  assert(mine == "ran 108" and peer == "ran 108", "two ranks summed wrong")   -- (1+...+8) * (1 + 2)
else
  assert(mine:find("dist.init", 1, true) and peer:find("^failed"), "a rank neither ran nor failed naming dist.init")
end
os.remove(idf)
print("NCCL checks ok")
