-- dl.dist on CUDA tensors: the NCCL backend of the CUDA plugin (gpu/nccl.h), started
-- by the first collective on a CUDA tensor, on that tensor's device. MPI (the dist
-- plugin) stays the control plane: rank 0's NCCL id goes to the others by an MPI
-- broadcast. Every collective is enqueued on the device's stream, after the work that
-- made its tensor; a collective that the script waits for (all but the _async forms)
-- is waited for against dl.dist's timeout, past which the communicator is aborted and
-- the call fails naming it. Unverified on a device in this repository's CI: docs/gpu.md.
local ffi = require("ffi")
local core = require("dlua.core")

local raise = core.raise
local ffi_new, ffi_string, ffi_cast = ffi.new, ffi.string, ffi.cast
local dtype_codes = core.dtype_codes

local M = {}
local declared = false
local REDUCE = { sum = 0, max = 1, min = 2, prod = 3, mean = 4 }
local ID_BYTES = 128

local function device_index(t)
  return tonumber(t.device:match("^cuda:(%d+)$") or "0")
end

local function ptr(t) return ffi_cast("void*", t:data_ptr()) end

-- The backend of dl.dist's state s for tensor t (started on first use).
local function backend(op, s, t)
  local b = s.nccl
  if b then
    if b.device ~= device_index(t) then
      raise(op .. ": this rank's NCCL communicator is on cuda:" .. b.device .. ", the tensor on " .. t.device
            .. " (one device per rank)")
    end
    return b
  end
  local ok, lib = pcall(ffi.load, ffi_string(core.C.dl_engine_dir()) .. "libdlua_cuda.so")
  if ok and not declared then
    ffi.cdef("const char* dln_cdef(void);")
    if pcall(function() return lib.dln_cdef end) then
      ffi.cdef(ffi_string(lib.dln_cdef()))
      declared = true
    end
  end
  if not ok or not declared then
    raise(op .. ": " .. t.device .. " tensors need dl.dist's NCCL backend, which this build's CUDA plugin does "
          .. "not have (NCCL was not found when it was built); move the tensor to the host with :cpu()")
  end
  local id = ffi_new("unsigned char[?]", ID_BYTES)
  if s.rank == 0 and lib.dln_unique_id(id, ID_BYTES) < 0 then raise(ffi_string(lib.dln_error())) end
  if s.lib.dld_broadcast(id, ID_BYTES, dtype_codes.uint8, 0, 0, "dist.init (NCCL)", 0, nil) < 0 then
    raise("dist.init (NCCL): " .. ffi_string(s.lib.dld_error()))
  end
  if lib.dln_init(id, ID_BYTES, s.rank, s.size, device_index(t), s.timeout) < 0 then raise(ffi_string(lib.dln_error())) end
  b = { lib = lib, device = device_index(t) }
  s.nccl = b
  return b
end

local function check(b, rc)
  if rc < 0 then raise(ffi_string(b.lib.dln_error())) end
end

-- Waits for what was enqueued, within dl.dist's timeout.
function M.wait(s, op)
  local b = s.nccl
  if b then check(b, b.lib.dln_wait(s.timeout, op)) end
end

-- t (a contiguous CUDA tensor) reduced in place; name: sum, mean, max, min, prod.
function M.allreduce_(op, s, t, name, async)
  local b = backend(op, s, t)
  check(b, b.lib.dln_allreduce(ptr(t), t:numel(), dtype_codes[t.dtype], REDUCE[name], op))
  if not async then M.wait(s, op) end
  return t
end

function M.broadcast_(op, s, t, root, async)
  local b = backend(op, s, t)
  check(b, b.lib.dln_broadcast(ptr(t), t:numel(), dtype_codes[t.dtype], root, op))
  if not async then M.wait(s, op) end
  return t
end

-- Every rank's contiguous t (of one shape on every rank) into out, in rank order.
function M.allgather(op, s, t, out)
  local b = backend(op, s, t)
  check(b, b.lib.dln_allgather(ptr(t), ptr(out), t:numel(), dtype_codes[t.dtype], op))
  M.wait(s, op)
  return out
end

-- At dist.finalize.
function M.finalize(s)
  local b = s.nccl
  if b and b.lib.dln_finalize() < 0 then return ffi_string(b.lib.dln_error()) end
  return nil
end

return M
