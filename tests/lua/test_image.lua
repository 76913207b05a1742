-- dl.image: PNG round trips bit for bit in every channel count, JPEG within its loss,
-- modes, floats, data sets, and files that are not images (or claim absurd sizes).
local dl = require("dlua")
local H = require("harness")
local bit = require("bit")

local dir = os.getenv("TMPDIR") or "/tmp"
local stem = dir .. "/dlua_image_" .. os.time() .. "_" .. math.random(1e6)

local function pattern(c, h, w)
  return (dl.arange(0, c * h * w):view(c, h, w) * 37):remainder(256):to("uint8")
end

-- v as 4 bytes, big-endian (PNG's lengths and sizes)
local function be32(v) return string.char(math.floor(v / 16777216) % 256, math.floor(v / 65536) % 256,
                                          math.floor(v / 256) % 256, v % 256) end

H.test("PNG round trips bit for bit, 1 to 4 channels", function()
  for c = 1, 4 do
    local img = pattern(c, 5, 7)
    local path = stem .. "_" .. c .. ".png"
    dl.image.save(path, img)
    local back = dl.image.load(path)
    H.eq(back.dtype, "uint8")
    H.eq(back.shape, { c, 5, 7 })
    H.ok(dl.equal(back, img), "channels " .. c)
    H.ok(dl.equal(dl.image.decode(dl.image.encode(img, "png")), img), "in memory too")
    os.remove(path)
  end
end)

H.test("modes, floats and JPEG", function()
  local img = pattern(3, 16, 16)
  local path = stem .. ".png"
  dl.image.save(path, img)
  local grey = dl.image.load(path, { mode = "L" })
  H.eq(grey.shape, { 1, 16, 16 })
  local rgba = dl.image.load(path, { mode = "RGBA" })
  H.eq(rgba[4]:min():item(), 255)                     -- an opaque alpha added
  local f = dl.image.load(path, { dtype = "float32" })
  H.ok(dl.allclose(f * 255, img:float()), "floats are bytes / 255")
  dl.image.save(path, f)                              -- floats in [0, 1] go back exactly
  H.ok(dl.equal(dl.image.load(path), img), "float save")
  dl.image.save(path, dl.full({ 4, 4 }, 2.0))         -- (H, W), out of range: clamped, one channel
  local sat = dl.image.load(path)
  H.eq(sat.shape, { 1, 4, 4 }); H.eq(sat:min():item(), 255)
  local smooth = (dl.arange(0, 16):view(1, 16) + dl.arange(0, 16):view(16, 1)):mul(8):clamp(0, 255)
  local jimg = dl.stack({ smooth, smooth, smooth }):to("uint8")
  dl.image.save(stem .. ".jpg", jimg, { quality = 95 })
  local j = dl.image.load(stem .. ".jpg")
  H.eq(j.shape, { 3, 16, 16 })
  H.ok((j:float() - jimg:float()):abs():max():item() <= 8, "JPEG stays within its loss")
  os.remove(path); os.remove(stem .. ".jpg")
end)

H.test("a data set of image files", function()
  local paths = {}
  for i = 1, 3 do
    paths[i] = stem .. "_ds" .. i .. ".png"
    dl.image.save(paths[i], pattern(1, 4, 4) + i)
  end
  local n = 0
  for x, y in dl.data.images(paths, { 1, 2, 3 }, { mode = "L" }):batch(2):iter() do
    n = n + 1
    H.eq(x.dtype, "float32"); H.eq(y.dtype, "int64")
    if n == 1 then H.eq(x.shape, { 2, 1, 4, 4 }); H.eq(y:totable(), { 1, 2 }) end
  end
  H.eq(n, 2)
  for _, p in ipairs(paths) do os.remove(p) end
end)

H.test("bad files and arguments are named", function()
  H.raises(function() return dl.image.decode("not an image") end, "not an image stb can read")
  H.raises(function() return dl.image.load(stem .. "_missing.png") end, "image.load: cannot open")
  -- a PNG header that claims 20000 x 15000 pixels: refused before anything is allocated
  local huge = "\137PNG\r\n\26\n" .. be32(13) .. "IHDR" .. be32(20000) .. be32(15000) .. "\8\2\0\0\0" .. be32(0)
  H.raises(function() return dl.image.decode(huge) end, "is larger than dlua decodes")
  H.raises(function() dl.image.save(stem .. ".gif", pattern(3, 2, 2)) end, "the extension must be .png, .jpg or .jpeg")
  H.raises(function() dl.image.save(stem .. ".jpg", pattern(4, 2, 2)) end, "JPEG has no alpha channel")
  H.raises(function() return dl.image.load(stem .. ".png", { mode = "CMYK" }) end, "mode must be")
  H.raises(function() dl.image.encode(dl.zeros(5, 2, 2), "png") end, "1 to 4 channels")
  -- integers saturate as floats do (300 is 255, not 44)
  local sat = dl.image.decode(dl.image.encode(dl.full({ 1, 1, 2 }, 300, { dtype = "int64" }), "png"))
  H.eq(sat:totable(), { { { 255, 255 } } })
  -- the runtime stays usable
  H.eq(dl.image.decode(dl.image.encode(pattern(1, 2, 2), "png")).shape, { 1, 2, 2 })
end)

-- Note [Images from short files] in io/image.cpp: stb's PNM and raw TGA loaders leave
-- the pixels a short file lacks as uninitialised memory; they are refused, and whatever
-- else a loader reads past a file's end is zeros.
H.test("short files give no memory's old contents", function()
  -- An image decoded first leaves its pixels in memory that stb allocates again.
  H.eq(dl.image.decode("P5\n64 64\n255\n" .. string.rep("\171", 64 * 64)):float():mean():item(), 171)
  H.raises(function() return dl.image.decode("P5\n64 64\n255\n" .. string.rep("\1", 10)) end,
           "the file is truncated (its header announces 64 x 64 pixels, which take at least 4096 bytes")
  -- 18 bytes that announce 3253 x 32255 pixels: refused before 105 MB are allocated.
  H.raises(function() return dl.image.decode("P5\n3253\n32255$(/6") end, "the file is truncated")
  local tga = string.char(0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 64, 0, 24, 0)
  H.raises(function() return dl.image.decode(tga .. string.rep("\1", 30)) end, "the file is truncated")
  -- run-length TGA: at least a packet (a byte and a pixel) per 128 pixels; 29 bytes that
  -- announced 13578 x 13107 pixels decoded to 712 MB of zeros
  local rle = string.char(0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x35, 0x33, 0x33, 32, 0)
  H.raises(function() return dl.image.decode(rle .. "\0\0\0\50\255\204\255\83\128\246\52") end,
           "take at least 6951848 bytes")
  -- ... even one cut short in its own 18-byte header
  H.raises(function() return dl.image.decode(string.char(0, 0, 11, 0xaa, 0, 0, 0, 0, 0x48, 0x44, 0x52, 0, 0x10, 0x26, 0x31, 0x38, 0x20)) end,
           "the file is truncated")
  -- an uncompressed BMP: its rows from the data's offset
  local function le(v, k) local t = {} for i = 1, k do t[i] = string.char(v % 256); v = math.floor(v / 256) end return table.concat(t) end
  local header = "BM" .. le(0, 4) .. le(0, 4) .. le(54, 4) .. le(40, 4) .. le(4000, 4) .. le(4000, 4) .. le(1, 2) ..
                 le(24, 2) .. le(0, 4) .. le(0, 4) .. le(0, 4) .. le(0, 4) .. le(0, 4) .. le(0, 4)
  H.raises(function() return dl.image.decode(header .. "\1\2\3") end, "which take at least 48000054 bytes")
  -- stb takes a negative compression (0xaa000000) as none: so does the check
  local negative = header:sub(1, 30) .. le(0xaa000000, 4) .. header:sub(35)
  H.raises(function() return dl.image.decode(negative .. "\1\2\3") end, "which take at least 48000054 bytes")
  H.eq(dl.image.decode(header:sub(1, 18) .. le(2, 4) .. le(1, 4) .. header:sub(27) .. "\1\2\3\4\5\6\0\0"):totable(),
       { { { 3, 6 } }, { { 2, 5 } }, { { 1, 4 } } })
  -- A PNG whose image data stops early: what stb reads past the end is zeros, the same every time.
  local png = dl.image.encode(pattern(3, 16, 16), "png")
  local cut = png:sub(1, #png - 30)
  local ok1, a = pcall(dl.image.decode, cut)
  dl.image.decode("P6\n16 16\n255\n" .. string.rep("\205", 16 * 16 * 3))
  local ok2, b = pcall(dl.image.decode, cut)
  H.eq(ok1, ok2)
  if ok1 then H.ok(dl.equal(a, b), "a short PNG decodes the same way twice") end
  -- the formats stb reads that dlua does not decode are refused by name
  H.raises(function() return dl.image.decode("8BPS" .. string.rep("\0", 40)) end, "a Photoshop (PSD) file")
  H.raises(function() return dl.image.decode("#?RADIANCE\n" .. string.rep("\0", 40)) end, "a Radiance HDR file")
  -- the runtime stays usable
  H.eq(dl.image.decode("P5\n2 1\n255\n\3\4"):totable(), { { { 3, 4 } } })
end)

-- PNGs built here byte by byte, their image data in stored (uncompressed) deflate blocks,
-- so that the stream says exactly what it holds (Note [PNG data that inflates past its
-- image] in io/image.cpp).
local function le16(v) return string.char(v % 256, math.floor(v / 256) % 256) end
local CRC = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = bit.band(c, 1) == 1 and bit.bxor(bit.rshift(c, 1), 0xEDB88320) or bit.rshift(c, 1) end
  CRC[i] = c
end
local function crc32(s)   -- PNG's (zlib's) CRC-32
  local c = 0xFFFFFFFF
  for i = 1, #s do c = bit.bxor(CRC[bit.band(bit.bxor(c, s:byte(i)), 255)], bit.rshift(c, 8)) end
  return bit.bxor(c, 0xFFFFFFFF) % 2 ^ 32
end
local function chunk(kind, body) return be32(#body) .. kind .. body .. be32(crc32(kind .. body)) end
local function stored(data, final)   -- one stored deflate block
  return string.char(final and 1 or 0) .. le16(#data) .. le16(65535 - #data) .. data
end
local function png(w, h, colour, interlace, idat)
  return "\137PNG\r\n\26\n" .. chunk("IHDR", be32(w) .. be32(h) .. string.char(8, colour, 0, 0, interlace)) ..
         chunk("IDAT", idat) .. chunk("IEND", "")
end

H.test("a PNG's image data is checked against its header before stb reads it", function()
  -- An interlaced (Adam7) 5 x 3 grey image, pixel (r, c) = 10 r + c: its seven passes'
  -- rows, each a filter byte (0) and the pass's pixels.
  local passes = { { 0, 0, 8, 8 }, { 4, 0, 8, 8 }, { 0, 4, 4, 8 }, { 2, 0, 4, 4 }, { 0, 2, 2, 4 }, { 1, 0, 2, 2 }, { 0, 1, 1, 2 } }
  local rows = {}
  for _, p in ipairs(passes) do
    for r = p[2], 2, p[4] do
      local line = {}
      for c = p[1], 4, p[3] do line[#line + 1] = string.char(10 * r + c) end
      if #line > 0 then rows[#rows + 1] = "\0" .. table.concat(line) end
    end
  end
  local raw = table.concat(rows)
  local img = dl.image.decode(png(5, 3, 0, 1, "\120\1" .. stored(raw, true) .. "\0\0\0\0"))
  H.eq(img:totable(), { { { 0, 1, 2, 3, 4 }, { 10, 11, 12, 13, 14 }, { 20, 21, 22, 23, 24 } } })
  -- The same rows, not interlaced
  local flat = "\0\0\1\2\3\4" .. "\0\10\11\12\13\14" .. "\0\20\21\22\23\24"
  local good = png(5, 3, 0, 0, "\120\1" .. stored(flat, true))
  H.eq(dl.image.decode(good):totable(), img:totable())
  -- One pixel byte changed, the image data's CRC left as it was: corrupt (libpng's answer)
  local at = good:find("IDAT", 1, true) + 4 + 2 + 5 + 2
  local bad = good:sub(1, at - 1) .. string.char((good:byte(at) + 1) % 256) .. good:sub(at + 1)
  H.raises(function() return dl.image.decode(bad) end, "the PNG's IDAT chunk fails its CRC")
  -- A stream giving far more than a 2 x 2 image's 6 bytes of rows
  H.raises(function() return dl.image.decode(png(2, 2, 0, 0, "\120\1" .. stored(string.rep("\0", 60000), true))) end,
           "inflates to more than its 7 bytes of rows")
  -- A stream that stops before its end: a stored block announcing 18 bytes, 9 given
  H.raises(function()
    return dl.image.decode(png(5, 3, 0, 0, "\120\1" .. string.char(1) .. le16(18) .. le16(65535 - 18) .. flat:sub(1, 9)))
  end, "the PNG's image data is cut short")
  -- Not deflate data: a block of the reserved type 3
  H.raises(function() return dl.image.decode(png(5, 3, 0, 0, "\120\1\7" .. flat)) end, "is not a valid deflate stream")
  -- A chunk announcing 2 GB, with 35 bytes after it (found by fuzz_image: stb took 2 GB)
  local f = assert(io.open("tests/fuzz/regressions/image/png-idat-chunk-announcing-2-gb", "rb"))
  local bomb = f:read("*a"):sub(2)   -- (the fuzz target's first byte picks the channels)
  f:close()
  H.raises(function() return dl.image.decode(bomb) end, "an image data chunk announces 2108555286 bytes, and 35 follow")
  -- A JPEG frame header announcing 16133 x 12032 pixels and no data after it (found by
  -- fuzz_image: stb made 1.1 GB of it): at least a bit per 8 x 8 block is 379,196 bytes
  local jpeg = "\255\216\255\192\0\17\8\47\0\63\5\3\5\34\0\2\17\1\3\17\1\255\196"
  H.raises(function() return dl.image.decode(jpeg) end, "which take at least 379196 bytes, and the file has 23")
  -- a real JPEG still decodes
  H.eq(dl.image.decode(dl.image.encode(pattern(3, 16, 16), "jpeg")).shape, { 3, 16, 16 })
  -- the runtime stays usable
  H.eq(dl.image.decode(png(5, 3, 0, 0, "\120\1" .. stored(flat, true))).shape, { 1, 3, 5 })
end)

H.test("a JPEG quality is a whole number from 1 to 100", function()
  local img = dl.zeros(3, 4, 4, { dtype = "uint8" })
  H.raises(function() return dl.image.encode(img, "jpeg", { quality = 0 }) end,
           "image.encode: quality must be a whole number from 1 to 100, got 0")
  H.raises(function() return dl.image.save("x.jpg", img, { quality = 50.5 }) end, "image.save: quality must be")
  H.ok(#dl.image.encode(img, "jpeg", { quality = 1 }) > 0 and #dl.image.encode(img, "jpeg") > 0)
end)

H.run()
