-- dl.summary: event files read back here by an independent reader (TFRecord framing,
-- both CRC32Cs recomputed bit by bit in Lua, Event fields found by their encoding),
-- the default writer, errors, and a writer closed by the collector.
local H = require("harness")
local dl = require("dlua")
local bit = require("bit")

local root = os.tmpname()
os.remove(root)

local function read(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function u32le(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return a + b * 256 + c * 65536 + d * 16777216
end

local function crc32c(s)
  local crc = bit.bnot(0)
  for i = 1, #s do
    crc = bit.bxor(crc, string.byte(s, i))
    for _ = 1, 8 do
      local lsb = bit.band(crc, 1)
      crc = bit.rshift(crc, 1)
      if lsb == 1 then crc = bit.bxor(crc, 0x82F63B78) end
    end
  end
  return bit.tobit(bit.bnot(crc))
end

local function masked(s)
  local c = crc32c(s)
  return bit.tobit(bit.bor(bit.rshift(c, 15), bit.lshift(c, 17)) + 0xa282ead8)
end

-- The records of an event file, their CRCs checked.
local function records(p)
  local s, out, i = read(p), {}, 1
  while i <= #s do
    local len = u32le(s, i) + u32le(s, i + 4) * 2 ^ 32
    H.eq(bit.tobit(u32le(s, i + 8)), masked(string.sub(s, i, i + 7)), "length CRC")
    local data = string.sub(s, i + 12, i + 11 + len)
    H.eq(#data, len, "record length")
    H.eq(bit.tobit(u32le(s, i + 12 + len)), masked(data), "data CRC")
    out[#out + 1] = data
    i = i + 16 + len
  end
  return out
end

local function float_bytes(x)
  -- simple_value (field 2, wire type 5): key byte 0x15 then the float, little-endian
  local ffi = require("ffi")
  local f = ffi.new("float[1]", x)
  return "\21" .. ffi.string(f, 4)
end

local function only_file(dir)
  local p = io.popen("ls '" .. dir .. "'")
  local names = {}
  for line in p:lines() do names[#names + 1] = line end
  p:close()
  H.eq(#names, 1, "files in " .. dir)
  return dir .. "/" .. names[1], names[1]
end

H.test("scalars and histograms land in a TensorBoard event file", function()
  local dir = root .. "-runs/exp"
  local w = dl.summary.writer(dir)
  local file, name = only_file(dir)
  H.eq(w.path, file)
  H.ok(string.find(name, "^events%.out%.tfevents%.%d+%..+") ~= nil, name)
  w:scalar("loss", 0.5, 1)
  w:scalar("loss", dl.tensor(0.25), 2)
  w:scalar("acc", dl.tensor({ 0.75 }), dl.tensor(3))
  w:histogram("weights", dl.randn(100), 3)
  w:histogram("list", { 1, 2, 2, 3 }, 4, { buckets = 3 })
  w:flush()
  local recs = records(file)
  H.eq(#recs, 6)
  H.ok(string.find(recs[1], "brain.Event:2", 1, true) ~= nil)
  H.ok(string.find(recs[2], "\10\4loss" .. float_bytes(0.5), 1, true) ~= nil, "scalar 0.5")
  H.ok(string.find(recs[2], "\16\1", 1, true) ~= nil, "step 1")
  H.ok(string.find(recs[3], float_bytes(0.25), 1, true) ~= nil, "scalar 0.25")
  H.ok(string.find(recs[4], "\10\3acc" .. float_bytes(0.75), 1, true) ~= nil, "scalar 0.75")
  H.ok(string.find(recs[5], "\10\7weights\42", 1, true) ~= nil, "histogram")
  w:close()
  w:close()
  H.eq(tostring(w), "SummaryWriter(" .. file .. ", closed)")
  os.execute("rm -rf '" .. root .. "-runs'")
end)

H.test("the default writer serves dl.summary.scalar", function()
  local dir = root .. "-default"
  local w = dl.summary.writer(dir)
  H.raises(function() dl.summary.scalar("x", 1, 1) end, "summary.scalar: no default summary writer")
  local r = w:as_default(function(a)
    for step = 1, 3 do dl.summary.scalar("loss", 1 - 0.1 * step, step) end
    return a + 1
  end, 41)
  H.eq(r, 42)
  H.raises(function() dl.summary.scalar("x", 1, 1) end, "no default summary writer")
  H.raises(function() w:as_default(function() error("inside") end) end, "inside")
  w:set_as_default()
  dl.summary.histogram("h", dl.ones(3), 1)
  w:close()
  H.eq(#records(w.path), 1 + 3 + 1)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("bad arguments and closed writers are errors at the script's line", function()
  local dir = root .. "-errors"
  local w = dl.summary.writer(dir)
  local line
  H.at(H.raises(function() line = H.line() w:scalar(1, 2, 3) end, "scalar: expected a tag (a string), got number"), line)
  H.at(H.raises(function() line = H.line() w:scalar("x", "y", 3) end,
    "scalar: expected a number or a one-element tensor, got string"), line)
  H.at(H.raises(function() line = H.line() w:scalar("x", dl.ones(2), 3) end,
    "scalar: expected a number or a one-element tensor, got a tensor of shape (2,)"), line)
  H.at(H.raises(function() line = H.line() w:scalar("x", 1, 1.5) end, "scalar: step must be an integer, got 1.5"), line)
  H.at(H.raises(function() line = H.line() w:histogram("h", dl.zeros(0), 1) end, "histogram: h: the tensor is empty"), line)
  H.at(H.raises(function() line = H.line() w:histogram("h", dl.tensor({ 1, 0 / 0 }), 1) end,
    "a histogram needs finite values"), line)
  H.at(H.raises(function() line = H.line() w:histogram("h", dl.ones(2), 1, { buckets = 0 }) end,
    "histogram: buckets must be an integer in 1..10000, got 0"), line)
  w:close()
  H.at(H.raises(function() line = H.line() w:scalar("x", 1, 1) end, "scalar: the summary writer is closed"), line)
  H.raises(function() w:flush() end, "flush: the summary writer is closed")
  local f = assert(io.open(dir .. "/plain", "w"))
  f:close()
  H.raises(function() return dl.summary.writer(dir .. "/plain") end, "exists and is not a directory")
  H.raises(function() return dl.summary.writer(42) end, "summary.writer: expected a file name")
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("a writer dropped without close() is flushed and closed by the collector", function()
  local dir = root .. "-gc"
  local path
  do
    local w = dl.summary.writer(dir)
    w:scalar("a", 1, 1)
    path = w.path
  end
  collectgarbage()
  collectgarbage()
  H.eq(#records(path), 2)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.run()
