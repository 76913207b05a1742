-- dlua.dist: data-parallel training across processes, as dl.dist (docs/distributed.md).
--
--   mpirun -np 2 dlua train.lua
--   local dist = dl.dist
--   dist.init()                                   -- under mpirun: MPI; alone: size 1
--   dist.broadcast_parameters(net)                -- every rank starts from rank 0's weights
--   local step = dist.implicit_value_and_grad(loss_fn)   -- gradients averaged over ranks
--   for xb, yb in dist.shard(ds, { seed = epoch }):batch(64):iter() do ... end
--   if dist.is_main() then ckpt:save(...) end
--
-- Under mpirun, dist.init() loads the plugin libdlua_dist.so (dist/), which runs every
-- collective on Open MPI; elsewhere nothing is loaded and every collective is the
-- identity of one process, so that a script runs unchanged alone. Ranks are 0-based,
-- as mpirun numbers them (rank 0 is the main one); everything else keeps dlua's
-- 1-based indices. Collectives on CUDA tensors go through NCCL (dist_nccl.lua), where
-- the CUDA plugin was built with it; a clear error says so where it was not.
--
-- Every wait for a collective has a deadline (Note [Stalls] in dist/mpi.cpp): after
-- `warn` seconds (60) a waiting rank says where it waits, after `timeout` seconds (600,
-- or DLUA_DIST_TIMEOUT) it ends the job with MPI_Abort. Each reduction of gradients first
-- compares the gradients' names, dtypes and shapes across ranks, so that ranks that
-- disagree get an error naming the first difference instead of a hang or a wrong sum.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
-- The NCCL side (dist_nccl.lua), loaded by the first collective on a CUDA tensor.
local function NCCL() return require("dlua.dist_nccl") end
core.own_source()

local raise, bad_arg, typename, entries, options = core.raise, core.bad_arg, core.typename, core.entries,
  core.options
local is_tensor = T.is_tensor
local dl = T.dl
local type, tostring, tonumber, ipairs, pairs, select, unpack, pcall, error, setmetatable, rawequal =
  type, tostring, tonumber, ipairs, pairs, select, unpack, pcall, error, setmetatable, rawequal
local floor, max = math.floor, math.max
local concat, sort = table.concat, table.sort
local getenv = os and os.getenv
local getinfo = debug and debug.getinfo
local ffi_new, ffi_string, ffi_cast = ffi.new, ffi.string, ffi.cast
local io_stderr = io and io.stderr
local dtype_codes = core.dtype_codes

-- (dl.dist is the table init.lua made, filled here in place: a script may have kept it)
local dist = rawget(dl, "dist") or {}
setmetatable(dist, nil)
dl.dist = dist

local OPS = { sum = 0, max = 1, min = 2, prod = 3, mean = 0 }
local ITEMSIZE = { bool = 1, uint8 = 1, int32 = 4, int64 = 8, float32 = 4, float64 = 8, float16 = 2, bfloat16 = 2 }
local HALF = { float16 = true, bfloat16 = true }
local BUCKET_MB, FIRST_BUCKET_MB = 25, 1

-- The state of this process: nil before init; lib is nil at size 1 (no MPI).
local S = nil
local seq = 0   -- collectives started, for the stall messages
local declared = false   -- the plugin's functions are declared to the FFI

-- ---- the plugin ------------------------------------------------------------------------------------

-- libdlua_dist.so: DLUA_DIST_PLUGIN when set, else beside the engine library (the build
-- tree's lib/, an installed prefix's lib/), else the system's library path.
local function load_plugin()
  local tried = {}
  local function try(path)
    local ok, lib = pcall(ffi.load, path)
    if ok then return lib end
    tried[#tried + 1] = path .. " (" .. tostring(lib) .. ")"
    return nil
  end
  local env = getenv and getenv("DLUA_DIST_PLUGIN")
  local candidates = { env ~= "" and env or nil, ffi_string(core.C.dl_engine_dir()) .. "libdlua_dist.so", "dlua_dist" }
  for i = 1, 3 do
    local path = candidates[i]
    if path and path ~= "libdlua_dist.so" then
      local lib = try(path)
      if lib then return lib end
    end
  end
  raise("dist.init: running under mpirun, but the dl.dist plugin libdlua_dist.so could not be loaded (tried: "
        .. concat(tried, "; ") .. "); build dlua with Open MPI (apt-get install libopenmpi-dev) "
        .. "or set DLUA_DIST_PLUGIN to its path")
end

local function lib_error(op)
  local msg = ffi_string(S.lib.dld_error())
  if msg:sub(1, #op) == op then raise(msg) end
  raise(op .. ": " .. msg)
end

-- ---- set-up --------------------------------------------------------------------------------------

-- The cores this machine has online (sysconf), or 1.
local function online_cores()
  pcall(ffi.cdef, "long sysconf(int name);")   -- (declared already: the call below finds it)
  local ok, n = pcall(function() return tonumber(ffi.C.sysconf(84)) end)   -- _SC_NPROCESSORS_ONLN
  return ok and n and n >= 1 and n or 1
end

local function env_number(name)
  local v = getenv and getenv(name)
  return v and tonumber(v) or nil
end

-- Where the script called in: "train.lua:37".
local function call_site()
  if not getinfo then return "?" end
  for level = 3, 12 do
    local info = getinfo(level, "Sl")
    if not info then break end
    local src = info.source or ""
    if src:sub(1, 1) == "@" and not src:find("dlua/dist.lua", 1, true) then
      return src:sub(2):match("[^/]*$") .. ":" .. tostring(info.currentline)
    end
  end
  return "?"
end

-- Whether this process was started by mpirun (Open MPI's or another PMIx launcher's).
local function launched()
  if not getenv then return false end
  return getenv("OMPI_COMM_WORLD_SIZE") ~= nil or getenv("PMIX_RANK") ~= nil or getenv("PMI_SIZE") ~= nil
end

-- DLUA_DIST_TIMELINE=path: every collective of this rank as a Chrome trace event
-- (chrome://tracing, Perfetto), written to path.<rank>.json when dl.dist finalizes, as
-- Horovod's timeline: which rank waited, in which collective, for how long.
local function clock() return core.C.dl_monotonic_time() end

local function record(op, n, t0, bytes)
  local tl = S.timeline
  if not tl then return end
  tl[#tl + 1] = ('{"name":"%s","cat":"dist","ph":"X","pid":%d,"tid":0,"ts":%.3f,"dur":%.3f,"args":{"collective":%d,"bytes":%d}}')
    :format(op, S.rank, (t0 - S.t0) * 1e6, (clock() - t0) * 1e6, n, bytes or 0)
end

local function write_timeline(st)
  if not st.timeline or not st.timeline_path then return end
  local path = ("%s.%d.json"):format(st.timeline_path, st.rank)
  local text = '{"traceEvents":[\n' .. concat(st.timeline, ",\n") .. '\n]}\n'
  local ok, err = pcall(require("dlua.io").write_file_atomic, "dist timeline", path, text)
  if not ok and io_stderr then io_stderr:write("dlua: rank ", tostring(st.rank), ": ", tostring(err), "\n") end
end

-- A flag of dist.init's made the same on every rank: reduced with OPS.max (set where
-- any rank set it) or OPS.min (set where every rank did). A failure leaves dl.dist
-- uninitialised.
local function agree(st, flag, op)
  local v = ffi_new("int64_t[1]", flag and 1 or 0)
  if st.lib.dld_allreduce(v, 1, dtype_codes.int64, op, 0, "dist.init", 0, nil) < 0 then
    S = nil
    raise(ffi_string(st.lib.dld_error()))
  end
  return v[0] ~= 0
end

-- dist.init([opts]): opts.timeout (seconds before a stalled collective ends the job;
-- 600, or DLUA_DIST_TIMEOUT; 0: never), opts.warn (seconds before a stalled rank says
-- where it waits; 60; 0: never), opts.threads (CPU threads of this rank: by default the
-- machine's cores shared among the ranks on it, unless OMP_NUM_THREADS or
-- OPENBLAS_NUM_THREADS names a count).
function dist.init(opts)
  opts = options("dist.init", opts, { timeout = true, warn = true, threads = true })
  if S then raise("dist.init: dl.dist is already initialised (rank " .. S.rank .. " of " .. S.size .. ")") end
  for _, k in ipairs({ "timeout", "warn", "threads" }) do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v < 0) then
      raise("dist.init: " .. k .. " must be a number >= 0, got " .. tostring(v))
    end
  end
  local st = {
    rank = 0, size = 1, local_rank = 0, local_size = 1, lib = nil, inflight = {},
    after_steps = 0, after_s = 0,   -- gradient reductions made after their pass (dist.step_stats)
    timeout = opts.timeout or env_number("DLUA_DIST_TIMEOUT") or 600,
    debug = (getenv and getenv("DLUA_DIST_DEBUG") or "") ~= "" and getenv("DLUA_DIST_DEBUG") ~= "0",
    timeline_path = getenv and getenv("DLUA_DIST_TIMELINE") or nil,
    warn = opts.warn or 60,
  }
  if type(st.timeout) ~= "number" or st.timeout < 0 then
    raise("dist.init: DLUA_DIST_TIMEOUT must be a number of seconds >= 0, got " .. tostring(getenv("DLUA_DIST_TIMEOUT")))
  end
  if opts.warn == nil and st.timeout > 0 and st.timeout < st.warn then st.warn = st.timeout end
  if st.timeline_path == "" then st.timeline_path = nil end
  if st.timeline_path then st.timeline, st.t0 = {}, core.C.dl_monotonic_time() end
  if launched() then
    local lib = load_plugin()
    if not declared then
      ffi.cdef("const char* dld_cdef(void);")
      ffi.cdef(ffi_string(lib.dld_cdef()))
      declared = true
    end
    st.lib = lib
    S = st
    if lib.dld_init() < 0 then
      S = nil
      raise(ffi_string(lib.dld_error()))
    end
    lib.dld_set_deadlines(st.warn, st.timeout)
    st.rank, st.size = lib.dld_rank(), lib.dld_size()
    st.local_rank, st.local_size = lib.dld_local_rank(), lib.dld_local_size()
    -- MPI_Finalize when the Lua state closes normally (an uncaught error aborts first:
    -- dist._uncaught).
    st.finalizer = ffi.gc(ffi_new("char[1]"), function()
      -- Asynchronous collectives nobody waited for are finished first (in any order:
      -- they were started in one order on every rank).
      for id, w in pairs(st.inflight) do lib.dld_wait(id, w.op, w.seq, w.site) end
      write_timeline(st)
      local nccl_err = st.nccl and NCCL().finalize(st)
      if nccl_err and io_stderr then io_stderr:write("dlua: rank ", tostring(st.rank), ": ", nccl_err, "\n") end
      if lib.dld_finalize() < 0 and io_stderr then
        io_stderr:write("dlua: rank ", tostring(st.rank), ": ", ffi_string(lib.dld_error()), "\n")
      end
    end)
    -- Debug mode adds a collective before each one: every rank must be in it or none
    -- (DLUA_DIST_DEBUG may reach only some hosts: mpirun passes it on with -x).
    if st.size > 1 then st.debug = agree(st, st.debug, OPS.max) end
    -- os.exit with a failure code on one rank ends the job too: MPI_Finalize would wait
    -- for the other ranks, which wait for this one in their next collective.
    if os and os.exit then
      local exit = os.exit
      os.exit = function(code, close)
        if code ~= nil and code ~= true and code ~= 0 and lib.dld_initialized() == 1 then
          if io_stderr then
            io_stderr:write(("dlua: rank %d of %d exits with %s: ending the job (MPI_Abort)\n"):format(
              st.rank, st.size, tostring(code)))
            io_stderr:flush()
          end
          lib.dld_abort(code == false and 1 or tonumber(code) or 1)
        end
        return exit(code, close)
      end
    end
  end
  S = st
  local threads = opts.threads
  if threads == nil and st.local_size > 1 and not (getenv("OMP_NUM_THREADS") or getenv("OPENBLAS_NUM_THREADS")) then
    threads = max(1, floor(dl.get_num_threads() / st.local_size))
  end
  if threads and threads >= 1 then dl.set_num_threads(floor(threads)) end
  -- Gradients are reduced during the backward pass by default where each rank has a
  -- core for its communication thread beyond its compute threads: where it has none,
  -- the thread's polling takes the core from the backward pass (on 2 cores and 2 ranks
  -- of one thread, the MLP epoch took longer with overlap than without;
  -- docs/performance.md, "dl.dist").
  st.overlap = online_cores() >= st.local_size * (dl.get_num_threads() + 1)
  -- ... on every rank or on none: ranks on machines of other sizes would otherwise
  -- count their collectives apart (the overlapped pass makes its own), and the first 32
  -- are compared by their numbers (Note [Collectives compared across the ranks]).
  if st.lib and st.size > 1 then st.overlap = agree(st, st.overlap, OPS.min) end
  return dist
end

function dist.is_initialized() return S ~= nil and not S.finalized end

local function started(op)
  if not S then raise(op .. ": dl.dist is not initialised (call dist.init() first)") end
  if S.finalized then raise(op .. ": dl.dist was finalized (dist.finalize)") end
  return S
end

function dist.rank() return started("dist.rank").rank end
function dist.size() return started("dist.size").size end
function dist.local_rank() return started("dist.local_rank").local_rank end
function dist.local_size() return started("dist.local_size").local_size end
function dist.is_main() return started("dist.is_main").rank == 0 end
-- "MPI" under mpirun, "none" on one process without MPI.
function dist.backend() return started("dist.backend").lib and "mpi" or "none" end
function dist.library_version()
  local s = started("dist.library_version")
  return s.lib and ffi_string(s.lib.dld_library_version()) or "none"
end

-- Ends every rank of the job now (MPI_Abort); alone, exits the process.
function dist.abort(code)
  code = code or 1
  if S and S.nccl then S.nccl.lib.dln_abort() end
  if S and S.lib then S.lib.dld_abort(code) end
  os.exit(code, false)
end

-- MPI_Finalize now (it also runs when the Lua state closes). Collectives after it fail.
function dist.finalize()
  local s = started("dist.finalize")
  write_timeline(s)
  s.timeline = nil
  local nccl_err = s.nccl and NCCL().finalize(s)
  if nccl_err then raise("dist.finalize: " .. nccl_err) end
  if s.lib and s.lib.dld_finalize() < 0 then lib_error("dist.finalize") end
  s.finalized = true
end

-- The runner calls this with an uncaught error's message and traceback before it
-- reports it (repl/main.cpp): under mpirun, this rank reports it tagged with its rank
-- and ends the whole job (MPI_Abort), as `python -m mpi4py` does, instead of leaving the
-- other ranks waiting for it in their next collective. False: not handled.
function dist._uncaught(msg, traceback)
  if not (S and S.lib and S.lib.dld_initialized() == 1) then return false end
  if io_stderr then
    -- One write, so that mpirun's forwarding cannot set its own abort banner between
    -- the message and its traceback.
    local tb = (traceback and traceback ~= "") and (traceback .. "\n") or ""
    io_stderr:write(("dlua: rank %d of %d: %s\n%sdlua: rank %d of %d ends the job (MPI_Abort)\n")
      :format(S.rank, S.size, tostring(msg), tb, S.rank, S.size))
    io_stderr:flush()
  end
  S.lib.dld_abort(1)
  return true
end

-- ---- collectives on tensors ----------------------------------------------------------------------

local function host_tensor(op, t)
  if not is_tensor(t) then bad_arg(op, "a tensor", t) end
  if t.device ~= "cpu" then
    raise(op .. ": " .. t.device .. " tensors need the NCCL backend, which this build of dl.dist does not have; "
          .. "move the tensor to the host with :cpu()")
  end
  return t
end

-- Whether t is a CUDA tensor, whose collectives go through NCCL (scripts/dlua/dist_nccl.lua).
local function on_cuda(op, t)
  if not is_tensor(t) then bad_arg(op, "a tensor", t) end
  return t.device ~= "cpu"
end

local function ptr(t) return ffi_cast("void*", t:data_ptr()) end

-- After MPI wrote into a tensor the script holds: values a gradient recorded from it
-- are stale, as after any in-place write (autograd's version check sees it).
local function written(t)
  if core.C.dl_mark_written(T.hid(t)) ~= 0 then core.raise_last() end
end

-- The next collective's sequence number, and where the script made it: a collective's
-- stall message names both (Note [Stalls] in dist/mpi.cpp). Finding the script's line
-- costs about a microsecond (and stops LuaJIT's traces), so the plain collectives,
-- whose latency counts, name it only with DLUA_DIST_DEBUG=1; gradient reductions and
-- broadcasts of state always do.
local function next_seq()
  seq = seq + 1
  return seq
end

local function site_for(always)
  if always or S.debug then return call_site() end
  return nil
end


-- Note [Collectives compared across the ranks]
-- A collective is first compared across the ranks (its sequence number, kind, dtype,
-- shape and root: one small allgather), as c10d's ProcessGroupWrapper does, so that ranks
-- that call different collectives, or the same one on different tensors, get an error
-- naming the difference instead of a hang or a wrong result: MPI itself notices only a
-- count that differs (MPI_ERR_TRUNCATE, on one rank, after the other took a wrong sum),
-- and a float32 tensor of 4 beside a float64 one of 2 not at all. The comparison doubles
-- the latency of a small collective, so it runs for the first kComparedFirst
-- collectives of a job, where a script's mistake in what its ranks call shows (it
-- repeats every step), and for every collective with DLUA_DIST_DEBUG=1. Gradient
-- reductions, broadcasts of state and allgather compare their tensors always. The
-- collectives of CUDA tensors (NCCL) are not compared.
local kComparedFirst = 32
-- (fingerprinted: the collective compares its own tensors' fingerprint next, with a
-- message of its own; then only DLUA_DIST_DEBUG compares it here)
local function announce(op, dtype, shape, root, fingerprinted, reduction)
  if not S.lib or S.size == 1 or (not S.debug and (fingerprinted or seq >= kComparedFirst)) then return end
  -- (a blocking collective and a nonblocking one do not match in MPI: _async stays)
  local desc = ("collective %d: %s %s %s%s%s"):format(seq + 1, op, dtype or "", shape and T.shape_str(shape) or "",
                                                      root and (" root " .. root) or "", reduction and (" " .. reduction) or "")
  local rc = S.lib.dld_check_same(desc, #desc, op, seq + 1, nil)
  if rc == 1 then
    local when = S.debug and "DLUA_DIST_DEBUG" or ("the first " .. kComparedFirst .. " collectives are compared")
    raise(op .. ": the ranks' collectives differ (" .. when .. "): " .. ffi_string(S.lib.dld_error()))
  end
  if rc < 0 then lib_error(op) end
end

local function op_code(op, name, dtype)
  local code = OPS[name or "sum"]
  if code == nil then raise(op .. ": op must be sum, mean, max, min or prod, got " .. tostring(name)) end
  if name == "mean" and dtype ~= "float32" and dtype ~= "float64" then
    raise(op .. ": a mean of a " .. dtype .. " tensor (use op = 'sum', or a float tensor)")
  end
  return code
end

-- A handle of an asynchronous collective: h:wait() returns its result.
local Work = {}
Work.__index = Work
function Work:wait()
  if self.done then return self.result end
  if self.nccl then   -- enqueued on the device's stream: wait for it there
    NCCL().wait(S, self.op)
    self.done = true
    return self.result
  end
  local t0 = S.timeline and clock()
  if S.lib.dld_wait(self.id, self.op, self.seq, self.site) < 0 then lib_error(self.op) end
  if t0 then record(self.op .. ":wait", self.seq, t0) end
  S.inflight[self.id] = nil
  self.done = true
  if self.finish then self.result = self.finish(self.result) end
  return self.result
end
function Work:is_done()
  if self.done then return true end
  if self.nccl then return self:wait() ~= nil end
  local rc = S.lib.dld_test(self.id)
  if rc < 0 then lib_error(self.op) end
  if rc == 1 then
    S.inflight[self.id] = nil
    self.done = true
    if self.finish then self.result = self.finish(self.result) end
  end
  return self.done
end
Work.__tostring = function(w)
  return ("dist.Work(%s, collective %d%s)"):format(w.op, w.seq or 0, w.done and ", done" or "")
end

local function finished(result) return setmetatable({ done = true, result = result }, Work) end

-- A started collective's handle. MPI reads and writes its buffers until it is waited
-- for, so the state holds the handle (and through it the tensors) until then, whatever
-- the script does with it: a dropped handle must not let the collector free memory that
-- MPI still writes into.
local function started_work(w)
  S.inflight[w.id] = w
  return setmetatable(w, Work)
end

-- A mean's division by the number of ranks, after the sum. Module-level functions, not
-- closures made in the collectives: a function that makes a closure over its locals
-- closes them when it returns, a bytecode LuaJIT does not compile (UCLO), and such a
-- collective ran interpreted, a few microseconds of a small allreduce's latency.
local function divide_by_size(x) return x:div_(S.size) end
local function divide_by_size_no_grad(x) dl.no_grad(divide_by_size, x) end
local function copy_(t, r) t:copy_(r) end

-- The reduction itself, not differentiable: a new tensor (or an async Work).
local function allreduce_raw(op, t, name, async)
  local s = started(op)
  local cuda = on_cuda(op, t)
  if HALF[t.dtype] and not cuda then
    -- MPI has no 16-bit floats: reduce a float32 copy, round the result back.
    if async then raise(op .. ": cannot reduce " .. t.dtype .. " asynchronously over MPI (reduce a float32 copy)") end
    return allreduce_raw(op, t:float(), name, false):to(t.dtype)
  end
  local dtype = t.dtype
  local code = op_code(op, name, dtype)
  local r = t:contiguous():clone()
  if not s.lib or s.size == 1 then
    return async and finished(r) or r
  end
  if cuda then
    NCCL().allreduce_(op, s, r, name, async)
    return async and setmetatable({ op = op, nccl = true, result = r }, Work) or r
  end
  announce(op, dtype, r.shape, nil, false, name)
  local n, site = next_seq(), site_for(false)
  local t0 = s.timeline and clock()
  local id = s.lib.dld_allreduce(ptr(r), r:numel(), dtype_codes[dtype], code, async and 1 or 0, op, n, site)
  if id < 0 then lib_error(op) end
  if t0 then record(op, n, t0, r:numel() * ITEMSIZE[dtype]) end
  local finish = name == "mean" and divide_by_size or nil
  if not async then return finish and finish(r) or r end
  return started_work({ op = op, id = id, seq = n, site = site, result = r, finish = finish })
end

-- The differentiable allreduce of a sum or a mean, made once per op (not a closure
-- each call: see divide_by_size): its gradient is the same reduction of the incoming
-- gradient (every rank's loss depends on every rank's t).
local differentiable = {}
local function differentiable_allreduce(name)
  local f = differentiable[name]
  if not f then
    local function back(g) return allreduce_raw("dist.allreduce", g, name) end
    f = dl.custom_gradient(function(x) return allreduce_raw("dist.allreduce", x, name), back end)
    differentiable[name] = f
  end
  return f
end

-- dist.allreduce(t [, {op = "sum"|"mean"|"max"|"min"|"prod"}]): t reduced over every
-- rank, a new tensor. A sum or mean is differentiable.
function dist.allreduce(t, opts)
  opts = options("dist.allreduce", opts, { op = true })
  local name = opts.op or "sum"
  if (name == "sum" or name == "mean") and dl.is_grad_enabled() and dl.custom_gradient then
    return differentiable_allreduce(name)(t)
  end
  return allreduce_raw("dist.allreduce", t, name)
end

local function root_of(op, root, s)
  root = root or 0
  if type(root) ~= "number" or root ~= floor(root) or root < 0 or root >= s.size then
    raise(op .. ": root must be a rank from 0 to " .. (s.size - 1) .. ", got " .. tostring(root))
  end
  return root
end

-- dist.allreduce_(t [, opts]): t's own memory receives the reduction (PyTorch's
-- all_reduce): no copy, for buffers a script keeps. t must be a contiguous host tensor;
-- not differentiable (an in-place write). Returns t.
function dist.allreduce_(t, opts)
  local op = "dist.allreduce_"
  opts = options(op, opts, { op = true })
  local s = started(op)
  local cuda = on_cuda(op, t)
  if not t:is_contiguous() then raise(op .. ": the tensor must be contiguous (use dist.allreduce for a new one)") end
  local name = opts.op or "sum"
  local dtype = t.dtype
  if HALF[dtype] and not cuda then   -- through a float32 copy (MPI has no 16-bit floats)
    dl.no_grad(copy_, t, allreduce_raw(op, t:float(), name, false))
    return t
  end
  local code = op_code(op, name, dtype)
  if not s.lib or s.size == 1 then return t end
  if cuda then
    NCCL().allreduce_(op, s, t, name)
    written(t)
    return t
  end
  announce(op, dtype, t.shape, nil, false, name)
  local t0, n = s.timeline and clock(), next_seq()
  if s.lib.dld_allreduce(ptr(t), t:numel(), dtype_codes[dtype], code, 0, op, n, site_for(false)) < 0 then
    lib_error(op)
  end
  if t0 then record(op, n, t0, t:numel() * ITEMSIZE[dtype]) end
  written(t)
  if name == "mean" then divide_by_size_no_grad(t) end
  return t
end

-- dist.broadcast_(t [, root]): t's own memory receives rank root's values. Returns t.
function dist.broadcast_(t, root)
  local op = "dist.broadcast_"
  local s = started(op)
  local cuda = on_cuda(op, t)
  if not t:is_contiguous() then raise(op .. ": the tensor must be contiguous (use dist.broadcast for a new one)") end
  root = root_of(op, root, s)
  if not s.lib or s.size == 1 then return t end
  if cuda then
    NCCL().broadcast_(op, s, t, root)
    written(t)
    return t
  end
  announce(op, t.dtype, t.shape, root)
  local t0, n = s.timeline and clock(), next_seq()
  if s.lib.dld_broadcast(ptr(t), t:numel(), dtype_codes[t.dtype], root, 0, op, n, site_for(false)) < 0 then
    lib_error(op)
  end
  if t0 then record(op, n, t0, t:numel() * ITEMSIZE[t.dtype]) end
  written(t)
  return t
end

function dist.allreduce_async(t, opts)
  opts = options("dist.allreduce_async", opts, { op = true })
  return allreduce_raw("dist.allreduce_async", t, opts.op or "sum", true)
end

local function broadcast_raw(op, t, root, async)
  local s = started(op)
  local cuda = on_cuda(op, t)
  root = root_of(op, root, s)
  local r = t:contiguous():clone()
  if not s.lib or s.size == 1 then return async and finished(r) or r end
  if cuda then
    NCCL().broadcast_(op, s, r, root, async)
    return async and setmetatable({ op = op, nccl = true, result = r }, Work) or r
  end
  announce(op, r.dtype, r.shape, root)
  local n, site = next_seq(), site_for(false)
  local t0 = s.timeline and clock()
  local id = s.lib.dld_broadcast(ptr(r), r:numel(), dtype_codes[r.dtype], root, async and 1 or 0, op, n, site)
  if id < 0 then lib_error(op) end
  if t0 then record(op, n, t0, r:numel() * ITEMSIZE[r.dtype]) end
  if not async then return r end
  return started_work({ op = op, id = id, seq = n, site = site, result = r })
end

-- dist.broadcast(t [, root]): rank root's t on every rank (a new tensor; t must have the
-- same shape and dtype everywhere).
function dist.broadcast(t, root) return broadcast_raw("dist.broadcast", t, root, false) end
function dist.broadcast_async(t, root) return broadcast_raw("dist.broadcast_async", t, root, true) end

-- Describes a list of tensors for dld_check_same: a line each.
local function describe_tensors(list, names)
  local lines = {}
  for i, t in ipairs(list) do
    lines[i] = ("%s %s %s"):format(names and names[i] and ("'" .. names[i] .. "'") or ("tensor " .. i),
                                   t.dtype, T.shape_str(t.shape))
  end
  return concat(lines, "\n")
end

local function check_same(op, what, desc, site)
  if not S.lib or S.size == 1 then return end
  local rc = S.lib.dld_check_same(desc, #desc, op, seq + 1, site)
  if rc == 1 then raise(op .. ": " .. what .. ": " .. ffi_string(S.lib.dld_error())) end
  if rc < 0 then lib_error(op) end
end

local function allgather_raw(op, t, async)
  local s = started(op)
  local cuda = on_cuda(op, t)
  if t:dim() == 0 then raise(op .. ": cannot gather a 0-dim tensor along dim 1 (reshape it to 1 element)") end
  local x = t:contiguous()
  if not s.lib or s.size == 1 then
    local r = x:clone()
    return async and finished(r) or r
  end
  local shape = t.shape
  announce(op, t.dtype, nil, nil, true)   -- (its tensors are compared next, always)
  local rest = {}
  for i = 2, #shape do rest[#rest + 1] = shape[i] end
  check_same(op, "the tensors must agree in dtype and in every dim after the first",
             t.dtype .. " (*" .. (#rest > 0 and "," .. concat(rest, ",") or "") .. ")")
  local counts = ffi_new("int64_t[?]", s.size)
  if s.lib.dld_allgather_i64(shape[1], counts, op, seq + 1, site_for(false)) < 0 then lib_error(op) end
  local per_row = 1   -- elements of one row (the dims after the first)
  for _, d in ipairs(rest) do per_row = per_row * d end
  local total = 0
  local elems = ffi_new("int64_t[?]", s.size)
  for r = 0, s.size - 1 do
    total = total + tonumber(counts[r])
    elems[r] = counts[r] * per_row
  end
  local out_shape = { total }
  for _, d in ipairs(rest) do out_shape[#out_shape + 1] = d end
  local out = dl.empty(out_shape, { dtype = t.dtype, device = t.device })
  local first = 1
  for r = 0, s.rank - 1 do first = first + tonumber(counts[r]) end
  local part = { first = first, count = shape[1] }
  if cuda then   -- NCCL gathers equal parts
    for r = 1, s.size - 1 do
      if counts[r] ~= counts[0] then
        raise(op .. ": CUDA tensors are gathered by NCCL, in parts of one size: rank 0 has " .. tostring(counts[0])
              .. " rows, rank " .. r .. " has " .. tostring(counts[r]))
      end
    end
    NCCL().allgather(op, s, x, out)
    return async and finished(out) or out, part
  end
  local n, site = next_seq(), site_for(false)
  local t0 = s.timeline and clock()
  local id = s.lib.dld_allgatherv(ptr(x), x:numel(), ptr(out), elems, dtype_codes[t.dtype], async and 1 or 0,
                                  op, n, site)
  if id < 0 then lib_error(op) end
  if t0 then record(op, n, t0, out:numel() * ITEMSIZE[t.dtype]) end
  if not async then return out, part end
  return started_work({ op = op, id = id, seq = n, site = site, result = out, keep = x })
end

-- dist.allgather(t): every rank's t concatenated along dim 1, in rank order (first
-- dims may differ between ranks). Differentiable: this rank's part of the summed
-- incoming gradients.
function dist.allgather(t)
  if dl.is_grad_enabled() and dl.custom_gradient then
    return dl.custom_gradient(function(x)
      local y, part = allgather_raw("dist.allgather", x, false)
      return y, function(g)
        local sum = allreduce_raw("dist.allgather", g, "sum")
        if not part then return sum end
        return sum:narrow(1, part.first, part.count)
      end
    end)(t)
  end
  return (allgather_raw("dist.allgather", t, false))
end
function dist.allgather_async(t) return allgather_raw("dist.allgather_async", t, true) end

function dist.barrier()
  local s = started("dist.barrier")
  if not s.lib or s.size == 1 then return end
  announce("dist.barrier")
  local t0, n = s.timeline and clock(), next_seq()
  if s.lib.dld_barrier(0, "dist.barrier", n, site_for(false)) < 0 then lib_error("dist.barrier") end
  if t0 then record("dist.barrier", n, t0) end
end

-- dist.barrier_async(): a handle whose :wait() returns (nothing) once every rank has
-- reached its own barrier_async; :is_done() asks without waiting (MPI_Ibarrier).
function dist.barrier_async()
  local op = "dist.barrier_async"
  local s = started(op)
  if not s.lib or s.size == 1 then return finished(nil) end
  announce(op)
  local n, site = next_seq(), site_for(false)
  local id = s.lib.dld_barrier(1, op, n, site)
  if id < 0 then lib_error(op) end
  return started_work({ op = op, id = id, seq = n, site = site })
end

-- ---- gradients ---------------------------------------------------------------------------------

-- t as memory a collective may write in place: contiguous, and a copy when its memory
-- was already listed in `seen` (the same gradient passed on unchanged to two inputs is
-- then reduced once in each copy, never twice in one).
local function writable(t, seen)
  t = t:contiguous()
  local key = tonumber(ffi_cast("uintptr_t", ptr(t)))
  if seen[key] then t = t:clone() end
  seen[tonumber(ffi_cast("uintptr_t", ptr(t)))] = true
  return t
end

-- Reduces a list of host tensors of any dtypes as few collectives (one per dtype and
-- bucket), in place: the reduced tensors, in the same order (each the tensor given, or
-- its contiguous copy). names[i] (optional) names tensor i in errors.
local function reduce_list(op, list, names, opts)
  local s = started(op)
  local name = opts.op or "mean"   -- (grad_opts checked it)
  local out = {}
  if not s.lib or s.size == 1 then
    for i, t in ipairs(list) do out[i] = t end
    return out
  end
  local cuda = 0
  for _, t in ipairs(list) do cuda = cuda + (on_cuda(op, t) and 1 or 0) end
  if cuda > 0 and cuda < #list then raise(op .. ": the gradients are on the host and on a CUDA device; reduce them apart") end
  local site = site_for(true)
  announce(op, nil, { #list }, nil, true)
  check_same(op, "the ranks' gradients differ (each rank must differentiate the same parameters)",
             describe_tensors(list, names), site)
  if cuda > 0 then   -- NCCL: each in place on the device's stream, then one wait
    local seen = {}
    for i, t in ipairs(list) do out[i] = NCCL().allreduce_(op, s, writable(t, seen), name, true) end
    NCCL().wait(s, op)
    return out
  end
  -- One reduction per dtype, in the order dtypes first appear (the same on every rank:
  -- the descriptions matched).
  local by_dtype, order = {}, {}
  for i, t in ipairs(list) do
    local d = t.dtype
    if not by_dtype[d] then by_dtype[d] = {}; order[#order + 1] = d end
    local l = by_dtype[d]
    l[#l + 1] = i
  end
  local bucket = (opts.bucket_mb or BUCKET_MB) * 1048576
  local first = (opts.first_bucket_mb or FIRST_BUCKET_MB) * 1048576
  local started_at = clock()
  for _, d in ipairs(order) do
    local idx = by_dtype[d]
    local n = #idx
    local srcs, dsts, counts = ffi_new("const void*[?]", n), ffi_new("void*[?]", n), ffi_new("int64_t[?]", n)
    -- The reduction is written back into the gradients themselves (as DDP averages
    -- .grad in place): no new tensor whose pages must be touched first, which took
    -- about a third of an 800 KB sync.
    local seen = {}
    for k, i in ipairs(idx) do
      local t = writable(list[i], seen)
      local p = ptr(t)
      srcs[k - 1], dsts[k - 1], counts[k - 1] = p, p, t:numel()
      out[i] = t
    end
    if name == "mean" and d ~= "float32" and d ~= "float64" then
      raise(op .. ": a mean of " .. d .. " gradients (use op = 'sum')")
    end
    local t0, sq, bytes = s.timeline and clock(), next_seq(), 0
    if s.lib.dld_allreduce_many(srcs, dsts, counts, n, dtype_codes[d], 0, name == "mean" and 1 / s.size or 1,
                                 bucket, first, op, sq, site) < 0 then
      lib_error(op)
    end
    if t0 then
      for k = 0, n - 1 do bytes = bytes + tonumber(counts[k]) * ITEMSIZE[d] end
      record(op, sq, t0, bytes)
    end
  end
  s.after_steps = s.after_steps + 1
  s.after_s = s.after_s + (clock() - started_at)
  return out
end

-- A table's keys in an order every rank agrees on (pairs' order depends on the table's
-- history): numbers first, in order, then the others by name.
local function by_key(a, b)
  local ta, tb = type(a) == "number", type(b) == "number"
  if ta ~= tb then return ta end
  if ta then return a < b end
  return tostring(a) < tostring(b)
end

local function sorted_keys(t)
  local keys = {}
  for k in entries(t) do keys[#keys + 1] = k end
  sort(keys, by_key)
  return keys
end

-- Tensors of a gradient result (a tensor, or tables of them), in an order that every
-- rank agrees on (array parts in order, then other keys sorted by name).
local function flatten(v, list, names, prefix)
  if is_tensor(v) then
    list[#list + 1] = v
    names[#names + 1] = prefix
    return
  end
  if type(v) ~= "table" then return end
  for _, k in ipairs(sorted_keys(v)) do flatten(v[k], list, names, prefix .. "." .. tostring(k)) end
end

local function rebuild(v, reduced, pos)
  if is_tensor(v) then
    pos[1] = pos[1] + 1
    return reduced[pos[1]]
  end
  if type(v) ~= "table" then return v end
  local out = {}
  for _, k in ipairs(sorted_keys(v)) do out[k] = rebuild(v[k], reduced, pos) end
  return out
end

-- Reduces gradients shaped like dl.grad's results (tensors, tables of tensors).
local function reduce_results(op, results, first, last, opts)
  local list, names = {}, {}
  for i = first, last do flatten(results[i], list, names, "gradient " .. (i - first + 1)) end
  local reduced = reduce_list(op, list, names, opts)
  local pos = { 0 }
  for i = first, last do results[i] = rebuild(results[i], reduced, pos) end
  return results
end

-- Only the outermost gradient communicates: a reducing gradient taken inside another
-- gradient's scope (dl.grad, a GradientTape's record) would write the reduction into
-- its result outside autograd's sight, and the outer gradient would differentiate the
-- local values instead, silently. So it is refused, on one process too (a script that
-- runs alone must not fail only on several): take the inner gradient with dl.grad and
-- reduce the outer one.
local function outermost(op)
  started(op)
  if dl.is_grad_enabled() then
    raise(op .. ": a gradient averaged over the ranks cannot be taken inside another gradient "
          .. "(dl.grad, GradientTape:record); use dl." .. op:match("^dist%.(.*)$")
          .. " inside, and reduce the outermost gradient")
  end
end

local GRAD_OPTS = { op = true, bucket_mb = true, first_bucket_mb = true, sync = true, parameters = true,
                    overlap = true, has_aux = true }

local function pack(...) return { n = select("#", ...), ... } end

-- Calls the gradient function g(...) with the plugin's reducer armed, so that its
-- backward pass reduces the gradients over the ranks while it runs (Note [Overlap] in
-- dist/mpi.cpp): g's results, packed, and whether they were reduced. They were not when
-- opts.overlap is false (or nil, on a rank without a spare core), or when the pass declined (the ranks' inputs differ: the
-- reduction after it names the difference), or when no pass took the hook (a compiled
-- call replays its plan instead).
local function overlapped(op, opts, g, ...)
  local s = S
  local overlap = opts.overlap
  if overlap == nil then overlap = s.overlap end
  if not s.lib or s.size == 1 or not overlap then return pack(g(...)), false end
  local sq, t0 = next_seq(), s.timeline and clock()
  local hook = s.lib.dld_reducer(0, (opts.op or "mean") == "mean" and 1 / s.size or 1,
                                 (opts.bucket_mb or BUCKET_MB) * 1048576,
                                 (opts.first_bucket_mb or FIRST_BUCKET_MB) * 1048576, op, sq, site_for(true))
  if hook == nil then lib_error(op) end
  core.C.dl_grad_hook_arm(ffi_cast("const struct dl_grad_hook*", hook))
  local r = pack(pcall(g, ...))
  core.C.dl_grad_hook_disarm()
  local st = s.lib.dld_reducer_result()
  if st < 0 then lib_error(op) end
  if not r[1] then error(r[2], 0) end
  if st == 1 and t0 then record(op, sq, t0) end
  return pack(unpack(r, 2, r.n)), st == 1
end

-- dist.grad(f [, argnums] [, opts]) and dist.value_and_grad: dl.grad's gradients, then
-- averaged over the ranks (opts.op = "sum" sums them). opts.sync = false leaves them
-- local (reduce them later with dist.allreduce_grads).
local function grad_opts(op, opts)
  opts = options(op, opts, GRAD_OPTS)
  if opts.has_aux ~= nil and op ~= "dist.grad" then raise(op .. ": unknown option 'has_aux'") end   -- (dl.grad's)
  if opts.op ~= nil and opts.op ~= "mean" and opts.op ~= "sum" then
    raise(op .. ": op must be mean or sum, got " .. tostring(opts.op))
  end
  return opts
end

local function split_args(op, argnums, opts)
  if type(argnums) == "table" and opts == nil and (argnums.op or argnums.bucket_mb or argnums.sync ~= nil
      or argnums.first_bucket_mb or argnums.has_aux ~= nil) then
    return nil, grad_opts(op, argnums)
  end
  return argnums, grad_opts(op, opts)
end

function dist.grad(f, argnums, opts)
  argnums, opts = split_args("dist.grad", argnums, opts)
  local g = dl.grad(f, argnums, opts.has_aux and { has_aux = true } or nil)
  local ngrads = type(argnums) == "table" and #argnums or 1
  return function(...)
    outermost("dist.grad")
    if S.size == 1 or opts.sync == false then return g(...) end
    local r, done = overlapped("dist.grad", opts, g, ...)
    -- (with has_aux, the auxiliary values after the gradients are this rank's own)
    if not done then reduce_results("dist.grad", r, 1, opts.has_aux and ngrads or r.n, opts) end
    return unpack(r, 1, r.n)
  end
end

function dist.value_and_grad(f, argnums, opts)
  argnums, opts = split_args("dist.value_and_grad", argnums, opts)
  local g = dl.value_and_grad(f, argnums)
  local ngrads = type(argnums) == "table" and #argnums or 1
  return function(...)
    outermost("dist.value_and_grad")
    if S.size == 1 or opts.sync == false then return g(...) end
    local r, done = overlapped("dist.value_and_grad", opts, g, ...)
    if not done then reduce_results("dist.value_and_grad", r, 2, 1 + ngrads, opts) end
    return unpack(r, 1, r.n)
  end
end

-- Reduces implicit gradients, {{g, v}, ...}, in place of their g's. With
-- opts.parameters (a list of Variables, or a module), every listed Variable gets a
-- gradient, zeros where this rank's function did not use it, so that ranks that took
-- different branches still reduce the same list. reduced: the pairs' gradients were
-- reduced already (by the backward pass that made them).
local function reduce_pairs(op, pairs_, opts, reduced)
  local params = opts.parameters
  if params ~= nil and type(params) == "table" and params.parameters then params = params:parameters() end
  if params ~= nil then
    local by_var = {}
    for _, p in ipairs(pairs_) do by_var[p[2]] = p[1] end
    local full = {}
    for i, v in ipairs(params) do
      full[i] = { by_var[v] or dl.zeros_like(v), v }
    end
    for _, p in ipairs(pairs_) do
      local listed = false
      for _, v in ipairs(params) do if rawequal(v, p[2]) then listed = true break end end
      if not listed then
        raise(op .. ": the function used a Variable that is not in opts.parameters ("
              .. tostring(p[2].name or "unnamed") .. ")")
      end
    end
    pairs_ = full
  end
  if reduced then return pairs_ end
  local list, names = {}, {}
  for i, p in ipairs(pairs_) do
    list[i] = p[1]
    names[i] = p[2].name or ("Variable " .. i)
  end
  local out = reduce_list(op, list, names, opts)
  for i, p in ipairs(pairs_) do out[i] = { out[i], p[2] } end
  return out
end

function dist.implicit_value_and_grad(f, opts)
  opts = grad_opts("dist.implicit_value_and_grad", opts)
  local g = dl.implicit_value_and_grad(f)
  return function(...)
    outermost("dist.implicit_value_and_grad")
    if (S.size == 1 and opts.parameters == nil) or opts.sync == false then return g(...) end
    local r, done = overlapped("dist.implicit_value_and_grad", opts, g, ...)
    if not done or opts.parameters ~= nil then
      r[2] = reduce_pairs("dist.implicit_value_and_grad", r[2], opts, done)
    end
    return unpack(r, 1, r.n)
  end
end

function dist.implicit_grad(f, opts)
  opts = grad_opts("dist.implicit_grad", opts)
  local g = dl.implicit_grad(f)
  return function(...)
    outermost("dist.implicit_grad")
    if (S.size == 1 and opts.parameters == nil) or opts.sync == false then return g(...) end
    local r, done = overlapped("dist.implicit_grad", opts, g, ...)
    if done and opts.parameters == nil then return r[1] end
    return reduce_pairs("dist.implicit_grad", r[1], opts, done)
  end
end

-- dist.allreduce_grads(grads [, opts]): the reduction the wrappers make, for gradients
-- kept local with sync = false (accumulated over several micro-batches, say): a list of
-- {g, v} pairs, or tensors and tables of them as dl.grad returns.
function dist.allreduce_grads(grads, opts)
  opts = grad_opts("dist.allreduce_grads", opts)
  local first = type(grads) == "table" and not is_tensor(grads) and grads[1]
  if type(first) == "table" and not is_tensor(first) and is_tensor(first[1]) and dl.is_variable(first[2]) then
    return reduce_pairs("dist.allreduce_grads", grads, opts)
  end
  local r = { grads }
  reduce_results("dist.allreduce_grads", r, 1, 1, opts)
  return r[1]
end

-- dist.GradientTape(tape [, opts]): tape:gradient(target, sources) averaged over the ranks.
function dist.GradientTape(tape, opts)
  opts = grad_opts("dist.GradientTape", opts)
  if type(tape) ~= "table" or type(tape.gradient) ~= "function" then
    bad_arg("dist.GradientTape", "a dl.GradientTape", tape)
  end
  return setmetatable({}, {
    __index = function(_, k)
      if k == "gradient" then
        return function(_, target, sources, ...)
          outermost("dist.GradientTape")
          local r = { tape:gradient(target, sources, ...) }
          reduce_results("dist.GradientTape:gradient", r, 1, 1, opts)
          return r[1]
        end
      end
      local v = tape[k]
      if type(v) == "function" then return function(_, ...) return v(tape, ...) end end
      return v
    end,
    __tostring = function() return "dist." .. tostring(tape) end,
  })
end

-- dist.step_stats(): how this rank's gradient reductions went since dist.init: steps
-- (reductions of a step's gradients), overlapped (of them, made while the backward pass
-- ran), comm_s (seconds in their collectives), exposed_s (of those, the seconds the
-- steps waited for once their backward pass had ended: communication the backward
-- pass did not hide) and exposed, their ratio.
function dist.step_stats()
  local s = started("dist.step_stats")
  local st = { 0, 0, 0, 0 }
  if s.lib then
    local out = ffi_new("double[4]")
    s.lib.dld_reducer_stats(out)
    st = { out[0], out[1], out[2], out[3] }
  end
  local comm, exposed = st[3] + s.after_s, st[4] + s.after_s
  return { steps = st[1] + s.after_steps, overlapped = st[1], buckets = st[2], comm_s = comm, exposed_s = exposed,
           exposed = comm > 0 and exposed / comm or 0 }
end

-- ---- state -----------------------------------------------------------------------------------

-- Broadcasts tensors in place (each rank's memory receives root's values), after
-- checking that every rank lists the same names, dtypes and shapes.
local function broadcast_in_place(op, list, names, root)
  local s = started(op)
  root = root_of(op, root, s)
  if not s.lib or s.size == 1 then return end
  announce(op, nil, { #list }, root, true)
  local site = site_for(true)
  check_same(op, "the ranks' tensors differ", describe_tensors(list, names), site)
  for i, t in ipairs(list) do
    on_cuda(op, t)
    if not t:is_contiguous() then raise(op .. ": " .. (names[i] or ("tensor " .. i)) .. " is not contiguous") end
  end
  for _, t in ipairs(list) do
    local t0, n = s.timeline and clock(), next_seq()
    if on_cuda(op, t) then
      NCCL().broadcast_(op, s, t, root)
    elseif s.lib.dld_broadcast(ptr(t), t:numel(), dtype_codes[t.dtype], root, 0, op, n, site) < 0 then
      lib_error(op)
    end
    if t0 then record(op, n, t0, t:numel() * ITEMSIZE[t.dtype]) end
    written(t)
  end
end

-- dist.broadcast_parameters(net or {name = tensor} or {tensor, ...} [, root]): every
-- rank's parameters (and a module's buffers) become rank root's.
function dist.broadcast_parameters(params, root)
  local op = "dist.broadcast_parameters"
  local list, names = {}, {}
  if type(params) == "table" and type(params.named_parameters) == "function" then
    for _, p in ipairs(params:named_parameters()) do list[#list + 1] = p[2]; names[#names + 1] = p[1] end
    if params.named_buffers then
      for _, b in ipairs(params:named_buffers()) do list[#list + 1] = b[2]; names[#names + 1] = b[1] end
    end
  elseif type(params) == "table" then
    flatten(params, list, names, "parameters")
  else
    bad_arg(op, "a module or a table of tensors", params)
  end
  broadcast_in_place(op, list, names, root)
end

-- dist.broadcast_optimizer_state(opt [, root]): the optimizer's state (its iteration
-- count, learning rate and per-parameter buffers) becomes rank root's. Ranks whose
-- optimizer has no state yet (it is made at the first step; say only rank 0 restored a
-- checkpoint) get root's, which each variable takes when it first comes: root's layout
-- (names, dtypes, shapes) is sent first, and the buffers after it.
function dist.broadcast_optimizer_state(opt, root)
  local op = "dist.broadcast_optimizer_state"
  if type(opt) ~= "table" or type(opt.state_dict) ~= "function" then bad_arg(op, "an optimizer", opt) end
  local s = started(op)
  root = root_of(op, root, s)
  if not s.lib or s.size == 1 then return end
  local sd = opt:state_dict()
  local layout
  if s.rank == root then
    layout = {}
    for k, v in entries(sd) do
      if is_tensor(v) then
        layout[k] = { dtype = v.dtype, shape = v.shape }
      elseif type(v) == "number" then
        layout[k] = v
      end
    end
  end
  layout = dist.broadcast_object(layout, root)
  local out, tensors, names = {}, {}, {}
  for _, k in ipairs(sorted_keys(layout)) do
    local l = layout[k]
    if type(l) == "number" then
      out[k] = l
    else
      local t = s.rank == root and sd[k]:contiguous():clone() or dl.zeros(l.shape, { dtype = l.dtype })
      tensors[#tensors + 1], names[#names + 1], out[k] = t, k, t
    end
  end
  broadcast_in_place(op, tensors, names, root)
  opt:load_state_dict(out)
end

-- dist.broadcast_object(v [, root]): rank root's Lua value (nil, booleans, numbers,
-- strings, tables of them, tensors) on every rank.
local function encode(v, out, seen)
  local tv = type(v)
  if v == nil then out[#out + 1] = "n"
  elseif tv == "boolean" then out[#out + 1] = v and "t" or "f"
  elseif tv == "number" then out[#out + 1] = ("d%.17g;"):format(v)
  elseif tv == "string" then out[#out + 1] = "s" .. #v .. ":" .. v
  elseif is_tensor(v) then
    -- dtype|shape|the raw bytes: every dtype exactly (int64 above 2^53 included).
    local c = host_tensor("dist.broadcast_object", v):contiguous()
    local raw = c:numel() > 0 and ffi_string(ptr(c), c:numel() * ITEMSIZE[c.dtype]) or ""
    local body = c.dtype .. "|" .. concat(c.shape, ",") .. "|" .. raw
    out[#out + 1] = "T" .. #body .. ":" .. body
  elseif tv == "table" then
    if seen[v] then raise("dist.broadcast_object: the table refers to itself") end
    seen[v] = true
    local keys = {}
    for k in entries(v) do keys[#keys + 1] = k end
    out[#out + 1] = "{" .. #keys .. ":"
    for _, k in ipairs(keys) do encode(k, out, seen); encode(v[k], out, seen) end
    seen[v] = nil
  else
    raise("dist.broadcast_object: cannot send a " .. typename(v))
  end
end

local function decode(s, i)
  local c = s:sub(i, i)
  if c == "n" then return nil, i + 1 end
  if c == "t" then return true, i + 1 end
  if c == "f" then return false, i + 1 end
  if c == "d" then
    local j = s:find(";", i, true)
    return tonumber(s:sub(i + 1, j - 1)), j + 1
  end
  local j = s:find(":", i, true)
  local n = tonumber(s:sub(i + 1, j - 1))
  if c == "s" then return s:sub(j + 1, j + n), j + n + 1 end
  if c == "T" then
    local body = s:sub(j + 1, j + n)
    local bar1 = body:find("|", 1, true)
    local bar2 = body:find("|", bar1 + 1, true)
    local dtype, shape = body:sub(1, bar1 - 1), {}
    for d in body:sub(bar1 + 1, bar2 - 1):gmatch("[^,]+") do shape[#shape + 1] = tonumber(d) end
    local t = dl.empty(shape, { dtype = dtype })
    local raw = body:sub(bar2 + 1)
    if #raw > 0 then ffi.copy(ptr(t), raw, #raw) end
    return t, j + n + 1
  end
  local t, at = {}, j + 1
  for _ = 1, n do
    local k, v
    k, at = decode(s, at)
    v, at = decode(s, at)
    t[k] = v
  end
  return t, at
end

function dist.broadcast_object(v, root)
  local op = "dist.broadcast_object"
  local s = started(op)
  root = root_of(op, root, s)
  if not s.lib or s.size == 1 then return v end
  local text = ""
  if s.rank == root then
    local out = {}
    encode(v, out, {})
    text = concat(out)
  end
  local len = dl.tensor({ #text }, { dtype = "int64" })
  broadcast_in_place(op, { len }, { "length" }, root)
  local n = len[1]
  local bytes = dl.zeros({ max(n, 1) }, { dtype = "uint8" })
  if s.rank == root and n > 0 then ffi.copy(ptr(bytes), text, n) end
  broadcast_in_place(op, { bytes }, { "bytes" }, root)
  if s.rank == root then return v end
  local got = ffi_string(ptr(bytes), n)
  return (decode(got, 1))
end

-- ---- data ------------------------------------------------------------------------------------

-- dist.shard(ds [, {seed = n, even = "pad"|"drop"}]): this rank's part of data set ds
-- (Dataset:shard with this job's size and rank): the same shuffle on every rank when a
-- seed is given, then every size-th element, equal lengths on every rank.
function dist.shard(ds, opts)
  local s = started("dist.shard")
  return ds:shard(s.size, s.rank + 1, opts)
end

-- for ... in dist.iter(ds) do: ds:iter(), after checking that every rank's ds has as
-- many elements (batches, after batch) this pass, so that no rank runs a step the
-- others do not: an error names the counts otherwise ("rank 1 has 937, rank 0 has
-- 938"). For data sets whose size is unknown before iterating (a filter), the pass is
-- read into memory first to count it. dist.shard's parts are always equal.
function dist.iter(ds)
  local op = "dist.iter"
  local s = started(op)
  if type(ds) ~= "table" or type(ds.iter) ~= "function" then bad_arg(op, "a data set", ds) end
  local n = ds:size()
  local list
  if n == nil then
    list = {}
    local it = ds:iter()
    while true do
      local el = pack(it())
      if el[1] == nil then break end
      list[#list + 1] = el
    end
    n = #list
  end
  if s.lib and s.size > 1 then
    local counts = ffi_new("int64_t[?]", s.size)
    if s.lib.dld_allgather_i64(n, counts, op, seq + 1, site_for(true)) < 0 then lib_error(op) end
    for r = 0, s.size - 1 do
      if tonumber(counts[r]) ~= n then
        raise(("%s: the ranks' data sets differ in length: rank %d has %d, rank %d has %d (use dist.shard, "
               .. "or make them equal)"):format(op, s.rank, n, r, tonumber(counts[r])))
      end
    end
  end
  if not list then return ds:iter() end
  local i = 0
  return function()
    i = i + 1
    local el = list[i]
    if el then return unpack(el, 1, el.n) end
  end
end

return dist
