-- dlua.device: where tensors live (docs/gpu.md): dl.device and dl.cuda.
--
--   if dl.cuda.is_available() then
--     local x = dl.randn(4, 3):cuda()            -- or x:to("cuda:0")
--     local s = dl.device("cuda", function()
--       local w = dl.randn(3, 2)                 -- made on cuda:0: no device given
--       return x:matmul(w):sum():item()
--     end)
--   end
--
-- The CUDA plugin (libdlua_cuda.so) is loaded on first use: by dl.cuda.is_available(),
-- or by the first tensor asked for on a cuda device. Without a driver or a device it is
-- simply not available (dl.cuda.status() says why) and everything runs on the CPU.
--
-- dl.device(name, f) runs f with `name` as the default device: creation functions
-- given no device (dl.zeros, dl.ones, dl.full, dl.empty, dl.rand, dl.randn, dl.randint,
-- dl.arange, dl.linspace, dl.eye, dl.tensor) make their tensors there. Tensors made
-- from others (results of ops, zeros_like ...) stay where their inputs are. The
-- previous default comes back when f returns or raises. Device names are "cpu",
-- "cuda" (= "cuda:0") and "cuda:N", with N counted from 0 as in PyTorch.
local ffi = require("ffi")
local core = require("dlua.core")
core.own_source()
local T = require("dlua.tensor")

local C = core.C
local raise, raise_last, bad_arg = core.raise, core.raise_last, core.bad_arg
local unpack = unpack or table.unpack
local function pack(...) return { n = select("#", ...), ... } end
local ffi_string, ffi_new = ffi.string, ffi.new
local type, pcall, error, tonumber = type, pcall, error, tonumber
local dl = T.dl

local function check_name(op, name)
  if type(name) ~= "string" then bad_arg(op, "a device name", name) end
  if C.dl_check_device(name) ~= 0 then
    raise(op .. ": unknown device '" .. name .. "' (expected \"cpu\", \"cuda\" or \"cuda:N\")")
  end
end

local function canonical(name)
  if name == "cuda" or name == "gpu" then return "cuda:0" end
  return name
end

local function finish(prev, ok, ...)
  C.dl_set_default_device(prev)  -- was the default a moment ago: cannot fail
  if not ok then error((...), 0) end
  return ...
end

-- dl.device(name): the canonical name ("cuda" -> "cuda:0"). dl.device(name, f): f()
-- with `name` as the default device; returns what f returns.
function dl.device(name, f)
  check_name("device", name)
  if f == nil then return canonical(name) end
  if type(f) ~= "function" then bad_arg("device", "a function", f) end
  local prev = ffi_string(C.dl_default_device())
  if C.dl_set_default_device(name) ~= 0 then raise_last() end
  return finish(prev, pcall(f))
end

-- The device that creation functions use when given none ("cpu" outside dl.device).
function dl.get_default_device() return ffi_string(C.dl_default_device()) end

-- ---- dl.cuda ------------------------------------------------------------------------------

local cuda = dl.cuda or {}
dl.cuda = cuda

-- A device argument: nil (cuda:0), a name ("cuda", "cuda:1") or an index from 0.
local function index_of(op, device)
  if device == nil then return 0 end
  if type(device) == "number" then
    if device < 0 or device ~= math.floor(device) then
      raise(op .. ": expected a device index from 0, got " .. tostring(device))
    end
    return device
  end
  check_name(op, device)
  local n = tonumber(canonical(device):match("^cuda:(%d+)$"))
  if not n then raise(op .. ": expected a cuda device, got '" .. device .. "'") end
  return n
end

-- True when the plugin loaded and found a device (loads it on the first call).
function cuda.is_available() return C.dl_cuda_available() == 1 end

function cuda.device_count() return C.dl_cuda_device_count() end

-- Why CUDA is not available ("no CUDA device found", the dlopen error ...), or which
-- plugin and how many devices are in use.
function cuda.status() return ffi_string(C.dl_cuda_status()) end

-- Waits for the work queued on a device (every device when none is given): kernels
-- run asynchronously, so time them only after this.
function cuda.synchronize(device)
  local i = device == nil and -1 or index_of("cuda.synchronize", device)
  if C.dl_cuda_synchronize(i) ~= 0 then raise_last() end
end

-- Bytes: in_use (tensors), cached (freed blocks kept for reuse), peak (of in_use), and
-- the device's free and total memory as the driver reports them.
function cuda.memory_stats(device)
  local stats = ffi_new("double[5]")   -- fresh per call: Note [Values C writes back]
  if C.dl_cuda_memory_stats(index_of("cuda.memory_stats", device), stats) ~= 0 then raise_last() end
  return { in_use = stats[0], cached = stats[1], peak = stats[2], free = stats[3], total = stats[4] }
end

function cuda.get_device_name(device)
  local buf = ffi_new("char[256]")
  if C.dl_cuda_device_name(index_of("cuda.get_device_name", device), buf, 256) ~= 0 then raise_last() end
  return ffi_string(buf)
end

-- Gives the cached device blocks back to the driver (for other processes to use).
function cuda.empty_cache() C.dl_cuda_empty_cache() end

-- ---- dl.autocast -------------------------------------------------------------------------

-- dl.autocast(f [, {dtype = "float16" | "bfloat16", enabled = true}]): runs f(), whose
-- matrix products of float32 tensors on a CUDA device then run in the half dtype
-- (float32 accumulation) and return it, as torch.autocast("cuda") does; on the CPU it
-- changes nothing (Note [Autocast] in tensor/half_ops.h). Returns f's results; the
-- previous mode comes back when f returns or raises.
function dl.autocast(f, opts)
  if type(f) ~= "function" then raise("autocast: expected a function, got " .. type(f)) end
  if opts ~= nil and type(opts) ~= "table" then raise("autocast: expected an options table, got " .. type(opts)) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "dtype" and k ~= "enabled" then raise("autocast: unknown option '" .. tostring(k) .. "'") end
  end
  local name = opts.dtype or "float16"
  local code = core.dtype_codes[name]
  if not code then raise("autocast: unknown dtype '" .. tostring(name) .. "'") end
  local previous = C.dl_set_autocast(opts.enabled == false and 0 or 1, code)
  if previous < 0 then raise_last() end
  local r = pack(pcall(f))
  C.dl_set_autocast(previous >= 256 and 1 or 0, previous % 256)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

-- ---- dl.config ----------------------------------------------------------------------------

-- What this runtime runs on, as torch.__config__.show() tells it: versions, CPU threads,
-- OpenBLAS's kernels and who chose them (Note [Choosing OpenBLAS's core] in
-- tensor/cpu/openblas.cpp), and, with { cuda = true }, the CUDA plugin's status (which
-- loads it). Printing the table shows it as lines.
local Config = {}
Config.__index = Config
function Config.__tostring(c)
  local b = c.blas
  local who = b.chosen_by == "openblas" and "detected by OpenBLAS"
      or b.chosen_by == "dlua" and ("chosen by dlua; OpenBLAS detected " .. b.detected)
      or b.chosen_by == "host" and ("OpenBLAS detected it; loaded before dlua, see the warning")
      or "set by OPENBLAS_CORETYPE"
  local lines = {
    string.format("dlua %s (%s)", c.version, c.luajit),
    string.format("CPU threads: %d; default dtype %s", c.threads, c.default_dtype),
    string.format("BLAS: OpenBLAS core %s (%s), %d threads", b.core, who, b.threads),
    "BLAS build: " .. b.config,
  }
  if c.cuda then lines[#lines + 1] = "CUDA: " .. c.cuda end
  return table.concat(lines, "\n")
end

function dl.config(opts)
  if opts ~= nil and type(opts) ~= "table" then
    raise("config: expected an options table, got " .. type(opts))
  end
  local function blas(i)
    local p = C.dl_blas_info(i)
    if p == nil then raise_last() end
    return ffi_string(p)
  end
  return setmetatable({
    version = dl._VERSION or "?",
    luajit = jit.version,
    threads = dl.get_num_threads(),
    default_dtype = dl.get_default_dtype(),
    blas = { core = blas(0), detected = blas(1), chosen_by = blas(2), config = blas(3),
             threads = tonumber(blas(4)) },
    cuda = opts and opts.cuda and cuda.status() or nil,
  }, Config)
end

return cuda
