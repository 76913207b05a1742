-- dlua.image: image files as tensors, through Debian's stb (io/image.h).
--
--   local img = dl.image.load("cat.png")                    -- uint8 (C, H, W), as stored
--   local x = dl.image.load("cat.jpg", {mode = "RGB", dtype = "float32"})   -- (3, H, W) in [0, 1]
--   dl.image.save("out.png", x)                             -- PNG or JPEG by the extension
--   local ds = dl.data.images(paths, labels, {mode = "L"})  -- decoded as the data set is read
--
-- Layout (C, H, W), channels first, as torchvision's read_image and as conv2d takes
-- them. PNG, JPEG, BMP, GIF (first frame), TGA and PNM are read; PNG and JPEG written.
-- Files go through dlua.io (the sandbox's file rule; writes are atomic).
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local IO = require("dlua.io")
core.own_source()

local C = core.C
local raise, raise_last, bad_arg, options = core.raise, core.raise_last, core.bad_arg, core.options
local is_tensor, dl = T.is_tensor, T.dl
local type, tostring = type, tostring

local M = dl.image
setmetatable(M, nil)

local MODES = { L = 1, LA = 2, RGB = 3, RGBA = 4 }

local function channels_of(op, mode)
  if mode == nil then return 0 end
  local c = MODES[mode]
  if not c then raise(op .. ": mode must be \"L\", \"LA\", \"RGB\" or \"RGBA\", got " .. tostring(mode)) end
  return c
end

local function finish(op, img, dtype)
  if dtype == nil or dtype == "uint8" then return img end
  if dtype ~= "float32" and dtype ~= "float64" then
    raise(op .. ": dtype must be \"uint8\", \"float32\" or \"float64\", got " .. tostring(dtype))
  end
  return img:to(dtype) / 255
end

-- dl.image.decode(bytes [, {mode, dtype}]): an image from a file's contents (a string).
function M.decode(bytes, opts, name)
  if type(bytes) ~= "string" then bad_arg("image.decode", "the file's bytes (a string)", bytes) end
  opts = options("image.decode", opts, { mode = true, dtype = true })
  return finish("image.decode", T.new(C.dl_image_decode, bytes, #bytes, channels_of("image.decode", opts.mode),
                                      name or "image"), opts.dtype)
end

-- dl.image.load(path [, {mode = "L" | "LA" | "RGB" | "RGBA", dtype = "uint8" | "float32"}]).
function M.load(path, opts)
  opts = options("image.load", opts, { mode = true, dtype = true })
  local channels = channels_of("image.load", opts.mode)
  local bytes = IO.read_file("image.load", path)
  if not bytes then raise("image.load: cannot open " .. tostring(path)) end
  return finish("image.load", T.new(C.dl_image_decode, bytes, #bytes, channels, path), opts.dtype)
end

-- x as uint8 (C, H, W): floats are taken as [0, 1] (clamped, rounded), a (H, W) tensor
-- as one channel.
local function as_uint8(op, x)
  if not is_tensor(x) then bad_arg(op, "an image tensor", x) end
  if x:dim() == 2 then x = x:unsqueeze(1) end
  if x:is_floating_point() then x = (x:clamp(0, 1) * 255):round()
  elseif x.dtype ~= "uint8" then x = x:clamp(0, 255) end   -- integers saturate, as floats do
  return x:to("uint8"):cpu()
end

-- A JPEG quality given: a whole number from 1 to 100 (the engine takes 0 for its default, 95).
local function quality_of(op, opts)
  local q = opts.quality
  if q ~= nil and (type(q) ~= "number" or q ~= math.floor(q) or q < 1 or q > 100) then
    raise(op .. ": quality must be a whole number from 1 to 100, got " .. tostring(q))
  end
  return q or 0
end

-- dl.image.encode(x, format [, {quality = 95}]): the bytes of a "png" or "jpeg" file.
function M.encode(x, format, opts)
  opts = options("image.encode", opts, { quality = true })
  local quality = quality_of("image.encode", opts)
  local img = as_uint8("image.encode", x)
  local n = ffi.new("uint64_t[1]")
  local p = C.dl_image_encode(T.hid(img), format, quality, "image", n)
  if p == nil then return raise_last() end
  return ffi.string(p, n[0])
end

-- dl.image.save(path, x [, {quality = 95}]): PNG for .png, JPEG for .jpg / .jpeg.
function M.save(path, x, opts)
  opts = options("image.save", opts, { quality = true })
  local quality = quality_of("image.save", opts)
  if type(path) ~= "string" then bad_arg("image.save", "a path", path) end
  local ext = (path:match("%.([%w]+)$") or ""):lower()
  local format = (ext == "jpg" or ext == "jpeg") and "jpeg" or ext == "png" and "png" or nil
  if not format then raise("image.save: " .. path .. ": the extension must be .png, .jpg or .jpeg") end
  local img = as_uint8("image.save", x)
  local n = ffi.new("uint64_t[1]")
  local p = C.dl_image_encode(T.hid(img), format, quality, path, n)
  if p == nil then return raise_last() end
  IO.write_file_atomic("image.save", path, ffi.string(p, n[0]))
end

-- dl.data.images(paths [, labels] [, {mode, dtype = "float32"}]): a data set of the images
-- at `paths` (decoded when the set is read), paired with labels when given (integers
-- become int64 class labels, as cross_entropy takes them).
function dl.data.images(paths, labels, opts)
  if type(paths) ~= "table" then bad_arg("data.images", "a list of paths", paths) end
  if opts == nil and type(labels) == "table" and labels[1] == nil and next(labels) ~= nil then
    labels, opts = nil, labels
  end
  opts = options("data.images", opts, { mode = true, dtype = true })
  local load_opts = { mode = opts.mode, dtype = opts.dtype or "float32" }
  if labels ~= nil and (type(labels) ~= "table" or #labels ~= #paths) then
    raise("data.images: expected as many labels as paths (" .. #paths .. ")")
  end
  local items = {}
  for i, p in ipairs(paths) do
    local y = labels and labels[i]
    if type(y) == "number" and y == math.floor(y) then y = dl.tensor(y, { dtype = "int64" }) end   -- class labels
    items[i] = labels and { p, y } or { p }
  end
  -- The file is read on the Lua thread (the sandbox's file rule), the decoding is an
  -- engine job: Dataset:prefetch runs it ahead on its worker thread.
  local channels = channels_of("data.images", opts.mode)
  local function start(jobs, p, y)
    local bytes = IO.read_file("image.load", p)
    if not bytes then raise("image.load: cannot open " .. tostring(p)) end
    return { jobs.start(C.dl_job_image_decode(bytes, #bytes, channels, p)), y }
  end
  local function done(jobs, st)
    local img = finish("image.load", jobs.wait(st[1]), load_opts.dtype)
    if st[2] == nil then return img end
    return img, st[2]
  end
  return dl.data._async_map(dl.data.from_list(items, { tuple = true }), start, done)
end

return M
