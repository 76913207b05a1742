-- dlua.io: tensors in files (docs/training.md).
--
--   dl.save("model.safetensors", {w = w, b = b}, {epoch = "3"})
--   local t, meta = dl.load("model.safetensors")      -- t.w, t.b; meta.epoch == "3"
--   local images = dl.data.load_idx("train-images-idx3-ubyte.gz")   -- uint8 (N, 28, 28)
--   local x, y = dl.data.fashion_mnist("train")        -- float32 in [0, 1], int64 in 1..10
--
-- dl.save writes the safetensors format (readable by Python's safetensors and PyTorch)
-- atomically: a crash never leaves a torn file (io/file.h). dl.load checks the whole
-- file before it returns anything (io/safetensors.h, Note [Reading hostile files]): it
-- returns every tensor, fresh and on the cpu, or raises. Metadata is a table of
-- strings. The C++ side is io/ through bindings/capi_io.cpp.
--
-- Internal module: it returns helpers for dlua.checkpoint and dlua.summary; scripts
-- use `dlua`. In a sandbox every file function is refused (Note [Files and the
-- sandbox]); M.deny_files(reason) refuses them in any other Lua state too.
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local hid = T.hid
core.own_source()

local C = core.C
local raise, raise_last, bad_arg, retry = core.raise, core.raise_last, core.bad_arg,
  require("dlua.lifetime").retry
local wrap, is_tensor = T.wrap, T.is_tensor
local dl = T.dl
local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local ffi_new, ffi_string, ffi_gc = ffi.new, ffi.string, ffi.gc
local sfind, sformat, smatch = string.find, string.format, string.match
local tsort = table.sort
local io_open = io and io.open
local floor = math.floor

local M = {}

-- ---- arguments -----------------------------------------------------------------------------

-- Note [Files and the sandbox]
-- A sandboxed script must not reach the file system (docs/design.md, "What a sandboxed script can
-- reach"), and `dl` is in its environment, so every file function here asks denial() first: files
-- are refused after M.deny_files(), and in any Lua state that holds a sandbox environment (the
-- runtime's registry key "dlua.env", vm/sandbox.cpp), so that no host can forget it.
local getregistry = debug and debug.getregistry
local denied = nil
function M.deny_files(reason)
  denied = reason or "file access is disabled"
end
local function denial()
  if denied then return denied end
  if getregistry and getregistry()["dlua.env"] ~= nil then
    return "file access is disabled in the sandbox"
  end
  return nil
end
M.denial = denial

-- A file name for the C ABI: a Lua string may hold a NUL, which C would cut at.
local function path_arg(op, p)
  local no = denial()
  if no then raise(op .. ": " .. no) end
  if type(p) ~= "string" then bad_arg(op, "a file name (a string)", p) end
  if p == "" then raise(op .. ": empty file name") end
  if sfind(p, "\0", 1, true) then raise(op .. ": the file name contains a NUL byte") end
  return p
end
M.path_arg = path_arg

-- Numbers in metadata and file names: integers without ".0", others exactly.
local function num_str(v)
  if v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then return sformat("%d", v) end
  return sformat("%.17g", v)
end
M.num_str = num_str

-- Calls f() (a C call returning a handle or 0), once more after a collection when it
-- failed for lack of memory.
local function call_id(f, ...)
  local id = f(...)
  if id == 0 and retry() then id = f(...) end
  return id
end

-- ---- safetensors -------------------------------------------------------------------------------

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  tsort(keys)
  return keys
end

function dl.save(path, tensors, metadata)
  path_arg("save", path)
  if type(tensors) ~= "table" then bad_arg("save", "a table of tensors (name -> tensor)", tensors) end
  if metadata ~= nil and type(metadata) ~= "table" then
    bad_arg("save", "a table of metadata strings as the third argument", metadata)
  end
  for k, v in pairs(tensors) do
    if type(k) ~= "string" then
      raise("save: tensor names must be strings, got the " .. type(k) .. " key " .. tostring(k))
    end
    if not is_tensor(v) then
      raise("save: expected a tensor for \"" .. k .. "\", got " .. core.typename(v))
    end
  end
  local names = sorted_keys(tensors)
  local n = #names
  local cnames, clens, ids = ffi_new("const char*[?]", n + 1), ffi_new("int64_t[?]", n + 1),
                             ffi_new("uint64_t[?]", n + 1)
  for i = 1, n do
    local k = names[i]
    cnames[i - 1], clens[i - 1], ids[i - 1] = k, #k, hid(tensors[k])
  end
  local mkeys, mvals = {}, {}
  if metadata then
    for k, v in pairs(metadata) do
      if type(k) ~= "string" then raise("save: metadata keys must be strings, got " .. type(k)) end
      if type(v) == "number" then v = num_str(v)
      elseif type(v) == "boolean" then v = tostring(v)
      elseif type(v) ~= "string" then
        raise("save: metadata value for \"" .. k .. "\" must be a string, got " .. type(v))
      end
      mkeys[#mkeys + 1], mvals[#mkeys + 1] = k, v
    end
  end
  local m = #mkeys
  local ck, ckl = ffi_new("const char*[?]", m + 1), ffi_new("int64_t[?]", m + 1)
  local cv, cvl = ffi_new("const char*[?]", m + 1), ffi_new("int64_t[?]", m + 1)
  for i = 1, m do
    ck[i - 1], ckl[i - 1], cv[i - 1], cvl[i - 1] = mkeys[i], #mkeys[i], mvals[i], #mvals[i]
  end
  -- names, mkeys and mvals keep the strings alive (the arrays only point at them).
  local function save()
    return C.dl_save_safetensors(path, n, cnames, clens, ids, m, ck, ckl, cv, cvl)
  end
  if save() ~= 0 and not (retry() and save() == 0) then raise_last() end
  return path
end

function dl.load(path)
  path_arg("load", path)
  local id = call_id(C.dl_load_safetensors, path)
  if id == 0 then raise_last() end
  -- Released even if wrapping a tensor fails below.
  local owner = ffi_gc(ffi_new("struct dl_io_object", id), C.dl_io_release)
  local len, counts = ffi_new("double[1]"), ffi_new("double[2]")   -- Note [Values C writes back]
  if C.dl_loaded_counts(id, counts) ~= 0 then raise_last() end
  local tensors, metadata = {}, {}
  for i = 0, counts[0] - 1 do
    local p = C.dl_loaded_name(id, i, len)
    if p == nil then raise_last() end
    tensors[ffi_string(p, len[0])] = wrap(C.dl_loaded_tensor(id, i))
  end
  for i = 0, counts[1] - 1 do
    local kp = C.dl_loaded_meta(id, i, 0, len)
    if kp == nil then raise_last() end
    local k = ffi_string(kp, len[0])
    local vp = C.dl_loaded_meta(id, i, 1, len)
    if vp == nil then raise_last() end
    metadata[k] = ffi_string(vp, len[0])
  end
  ffi_gc(owner, nil)
  C.dl_io_release_id(id)
  return tensors, metadata
end

-- ---- files for the other modules -------------------------------------------------------------

function M.write_file_atomic(op, path, data)
  path_arg(op, path)
  if C.dl_write_file_atomic(path, data, #data) ~= 0 then raise_last() end
end

function M.make_dirs(op, path)
  path_arg(op, path)
  if C.dl_make_dirs(path) ~= 0 then raise_last() end
end

function M.read_file(op, path)
  path_arg(op, path)
  local f = io_open and io_open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.exists(path)
  if denial() then return false end
  local f = io_open and io_open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- "a/b/c.txt" -> "a/b", "c.txt" -> ".", "/c" -> "/".
function M.dir_name(path)
  local d = smatch(path, "^(.*)/[^/]*$")
  if d == nil then return "." end
  if d == "" then return "/" end
  return d
end

function M.base_name(path)
  return smatch(path, "([^/]*)$")
end

-- ---- data sets ---------------------------------------------------------------------------------

-- dl.data is shared with the data pipeline module (from_tensors, batch ...): whichever
-- loads first makes it, and each adds its own functions.
dl.data = dl.data or {}
local data = dl.data

function data.load_idx(path)
  path_arg("load_idx", path)
  local id = call_id(C.dl_load_idx, path)
  return wrap(id)
end

M.FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
local FASHION_FILES = {
  train = { "train-images-idx3-ubyte", "train-labels-idx1-ubyte" },
  test = { "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte" },
}

local function find_file(dir, name)
  for _, candidate in ipairs({ dir .. "/" .. name .. ".gz", dir .. "/" .. name }) do
    if M.exists(candidate) then return candidate end
  end
  raise("fashion_mnist: cannot find " .. name .. ".gz (or " .. name .. ") in " .. dir
        .. (dir == M.FASHION_MNIST_DIR and " (install Debian's dataset-fashion-mnist package,"
            .. " or pass the directory holding the files)" or ""))
end

-- Images (N, 28, 28) float32 in [0, 1] and labels (N) int64 in 1..10 (1-based, as
-- every class index in dlua). The second argument is the directory holding the files,
-- or options: {dir =, dtype = "float32" (the default) or "uint8"}. With "uint8" the
-- images stay the file's bytes, 0..255, a quarter of the memory (47 MB for the
-- training split instead of 188), for a pipeline that converts each batch as it is
-- made (docs/training.md, "Data, metrics, checkpoints, logs").
local FASHION_OPTIONS = { dir = true, dtype = true }
-- A bad argument as its messages show it: its type, and a string's value.
local function shown(v)
  return core.typename(v) .. (type(v) == "string" and (" \"" .. v .. "\"") or "")
end
function data.fashion_mnist(split, where)
  local no = denial()
  if no then raise("fashion_mnist: " .. no) end
  local files = type(split) == "string" and FASHION_FILES[split]
  if not files then
    raise("fashion_mnist: split must be \"train\" or \"test\", got " .. shown(split))
  end
  local dir, dtype = where, "float32"
  if type(where) == "table" then
    local opts = core.options("fashion_mnist", where, FASHION_OPTIONS)
    dir, dtype = opts.dir, opts.dtype or "float32"
    if dtype ~= "float32" and dtype ~= "uint8" then
      raise("fashion_mnist: dtype must be \"float32\" or \"uint8\", got " .. shown(dtype))
    end
  end
  if dir ~= nil and type(dir) ~= "string" then
    bad_arg("fashion_mnist", "a directory name or an options table", dir)
  end
  dir = dir or M.FASHION_MNIST_DIR
  local img_path, lbl_path = find_file(dir, files[1]), find_file(dir, files[2])
  -- float32: the pixels are read straight into float32 and scaled to [0, 1] there: no
  -- uint8 copy of the data set (47 MB for the training split) is alive beside the
  -- float32 one, which lowers a training run's peak memory by that much.
  local images = dtype == "uint8" and data.load_idx(img_path)
                 or wrap(call_id(C.dl_load_idx_ubyte_as_float, img_path, 255))
  local labels = data.load_idx(lbl_path)
  local is, ls = images.shape, labels.shape
  if #is ~= 3 or is[2] ~= 28 or is[3] ~= 28 or images.dtype ~= dtype then
    raise("fashion_mnist: " .. img_path .. ": expected " .. dtype .. " images of shape (N, 28, 28), got "
          .. images.dtype .. " " .. T.shape_str(is))
  end
  if #ls ~= 1 or ls[1] ~= is[1] or labels.dtype ~= "uint8" then
    raise("fashion_mnist: " .. lbl_path .. ": expected " .. is[1] .. " uint8 labels, got "
          .. labels.dtype .. " " .. T.shape_str(ls))
  end
  if labels:numel() > 0 and labels:max():item() > 9 then
    raise("fashion_mnist: " .. lbl_path .. ": labels must be in 0..9, found " .. labels:max():item())
  end
  return images, labels:to("int64") + 1
end

return M
