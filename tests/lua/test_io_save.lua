-- dl.save / dl.load (safetensors) and the data-set loaders: round trips, metadata,
-- errors at the script's line, hostile files refused, a failed save that leaves the old
-- file, IDX files, and Debian's Fashion-MNIST when it is installed.
local H = require("harness")
local dl = require("dlua")

local tmp = os.tmpname()   -- a file name of our own; siblings get suffixes
local function path(suffix) return tmp .. suffix end

local function write(p, bytes)
  local f = assert(io.open(p, "wb"))
  f:write(bytes)
  f:close()
end

local function read(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function u64le(n)
  local s = {}
  for i = 1, 8 do
    s[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(s)
end

-- A safetensors file from its header text and data.
local function st(header, data) return u64le(#header) .. header .. (data or "") end

H.test("every dtype and shape round-trips, with metadata", function()
  local tensors = {
    f32 = dl.tensor({ { 1.5, -2 }, { 3, 4.25 } }),
    f64 = dl.tensor({ 1 / 3, -1e300, 0 }, { dtype = "float64" }),
    i32 = dl.tensor({ -2147483648, 2147483647 }, { dtype = "int32" }),
    i64 = dl.tensor({ -2 ^ 53, 2 ^ 53 }, { dtype = "int64" }),
    u8 = dl.tensor({ 0, 255, 7 }, { dtype = "uint8" }),
    b = dl.tensor({ 1, 2, 3 }):gt(1),
    scalar = dl.tensor(42.5),
    empty = dl.zeros(2, 0, 3),
    view = dl.arange(0, 6):view(2, 3):t(),      -- not contiguous
  }
  local p = path(".safetensors")
  H.eq(dl.save(p, tensors, { epoch = 3, lr = 0.5, name = "run é", ok = true }), p)
  local got, meta = dl.load(p)
  local n = 0
  for k, t in pairs(tensors) do
    n = n + 1
    H.ok(got[k] ~= nil, "missing " .. k)
    H.eq(got[k].dtype, t.dtype, k)
    H.eq(got[k].shape, t.shape, k)
    H.ok(dl.equal(got[k], t), k)
  end
  local m = 0
  for _ in pairs(got) do m = m + 1 end
  H.eq(m, n)
  H.eq(meta, { epoch = "3", lr = "0.5", name = "run é", ok = "true" })
  H.values(got.f64, { 1 / 3, -1e300, 0 }, { dtype = "float64", tol = 0 })
  H.values(got.scalar, 42.5)
  os.remove(p)
end)

H.test("an empty table saves and loads; names may hold any UTF-8", function()
  local p = path("-empty.safetensors")
  dl.save(p, {})
  local got, meta = dl.load(p)
  H.eq(got, {})
  H.eq(meta, {})
  dl.save(p, { ["layer 1/weight é"] = dl.ones(1), ["a\"b\\c"] = dl.zeros(2) })
  got = dl.load(p)
  H.values(got["layer 1/weight é"], { 1 })
  H.values(got["a\"b\\c"], { 0, 0 })
  os.remove(p)
end)

H.test("bad arguments are errors at the script's line", function()
  local line
  H.at(H.raises(function() line = H.line() dl.save(42, {}) end,
    "save: expected a file name (a string), got number"), line)
  H.at(H.raises(function() line = H.line() dl.save("x\0y", {}) end,
    "save: the file name contains a NUL byte"), line)
  H.at(H.raises(function() line = H.line() dl.save(path(".x"), { dl.ones(1) }) end,
    "save: tensor names must be strings, got the number key 1"), line)
  H.at(H.raises(function() line = H.line() dl.save(path(".x"), { w = 3 }) end,
    "save: expected a tensor for \"w\", got number"), line)
  H.at(H.raises(function() line = H.line() dl.save(path(".x"), { w = dl.ones(1) }, { k = {} }) end,
    "save: metadata value for \"k\" must be a string, got table"), line)
  H.at(H.raises(function() line = H.line() dl.save(path(".x"), { ["\255"] = dl.ones(1) }) end,
    "not valid UTF-8"), line)
  H.at(H.raises(function() line = H.line() dl.save(path("/no/such/dir/x"), { w = dl.ones(1) }) end,
    "cannot create a temporary file beside it"), line)
  H.at(H.raises(function() line = H.line() dl.load(path(".missing")) end,
    "load: " .. path(".missing") .. ": cannot open: No such file or directory"), line)
  H.at(H.raises(function() line = H.line() dl.load() end, "load: expected a file name"), line)
end)

H.test("hostile and corrupt files are refused whole, and dlua keeps working", function()
  local p = path("-bad.safetensors")
  local cases = {
    { "", "truncated file: 0 bytes" },
    { u64le(2 ^ 40) .. "{}", "exceeds the limit of 100000000 bytes" },
    { u64le(4096) .. "{}", "truncated file: header says 4096 header bytes" },
    { u64le(8) .. "not json", "must start with '{'" },
    { st('{"a":' .. string.rep("[", 10000)), "expected an object describing tensor \"a\"" },
    { st('{"w":{"dtype":"F32","shape":[1024],"data_offsets":[0,4096]}}', string.rep("\0", 100)),
      "truncated file: header says 4096 data bytes, file has 100" },
    { st('{"w":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}}', "xxxx"), "unknown dtype \"Q9\"" },
    { st('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{}}', "xx"), "duplicate tensor name \"a\"" },
  }
  for _, c in ipairs(cases) do
    write(p, c[1])
    local msg = H.raises(function() return dl.load(p) end, c[2])
    H.ok(string.find(msg, "load: " .. p .. ": ", 1, true) ~= nil, msg)
  end
  -- Random garbage: an error every time, never a crash.
  math.randomseed(7)
  for _ = 1, 200 do
    local bytes = {}
    for i = 1, math.random(0, 64) do bytes[i] = string.char(math.random(0, 255)) end
    write(p, table.concat(bytes))
    H.ok(not pcall(dl.load, p))
  end
  H.values(dl.ones(2) + 1, { 2, 2 })
  os.remove(p)
end)

H.test("a failed save leaves the previous file whole", function()
  local p = path("-keep.safetensors")
  dl.save(p, { w = dl.ones(3) })
  local before = read(p)
  H.raises(function() dl.save(p, { w = dl.ones(3), [""] = 5 }) end, "save: expected a tensor")
  H.raises(function() dl.save(p, { w = dl.zeros(3) }, { ["\255"] = "x" }) end, "not valid UTF-8")
  H.eq(read(p), before)
  dl.save(p, { w = dl.zeros(3) })
  H.values(dl.load(p).w, { 0, 0, 0 })
  os.remove(p)
end)

H.test("load_idx reads IDX files of any element type", function()
  local p = path(".idx")
  -- 2x3 ubyte, then 2 big-endian int16 values
  write(p, "\0\0\8\2\0\0\0\2\0\0\0\3" .. "\1\2\3\4\5\255")
  H.values(dl.data.load_idx(p), { { 1, 2, 3 }, { 4, 5, 255 } }, { dtype = "uint8" })
  write(p, "\0\0\11\1\0\0\0\2" .. "\255\254\1\2")
  H.values(dl.data.load_idx(p), { -2, 258 }, { dtype = "int32" })
  write(p, "\0\0\8\1\0\0\0\9" .. "abc")
  H.raises(function() return dl.data.load_idx(p) end,
    "load_idx: " .. p .. ": truncated file: header says 9 data bytes (shape (9,) of ubyte), file has 3")
  write(p, "\1\2\3\4")
  H.raises(function() return dl.data.load_idx(p) end, "not an IDX file")
  os.remove(p)
end)

H.test("fashion_mnist finds files in a given directory, compressed or not", function()
  local dir = path("-fmnist")
  os.execute("mkdir -p '" .. dir .. "'")
  local img = "\0\0\8\3\0\0\0\2\0\0\0\28\0\0\0\28" .. string.rep("\255", 784) .. string.rep("\0", 784)
  write(dir .. "/t10k-images-idx3-ubyte", img)
  write(dir .. "/t10k-labels-idx1-ubyte", "\0\0\8\1\0\0\0\2" .. "\9\0")
  local x, y = dl.data.fashion_mnist("test", dir)
  H.shape(x, { 2, 28, 28 })
  H.eq(x.dtype, "float32")
  H.eq(x[1][1][1], 1)
  H.values(x[2]:sum(), 0)
  H.values(y, { 10, 1 }, { dtype = "int64" })
  -- Every byte value converts as uint8 -> float32 / 255 does.
  local ramp = {}
  for v = 0, 255 do ramp[#ramp + 1] = string.char(v) end
  ramp = table.concat(ramp)
  write(dir .. "/t10k-images-idx3-ubyte", "\0\0\8\3\0\0\0\2\0\0\0\28\0\0\0\28" .. (ramp):rep(3) .. ramp:sub(1, 16)
        .. (ramp):rep(3) .. ramp:sub(1, 16))
  x = dl.data.fashion_mnist("test", dir)
  local raw = dl.data.load_idx(dir .. "/t10k-images-idx3-ubyte")
  H.eq(raw.dtype, "uint8")
  H.ok((x - raw:to("float32") / 255):abs():max():item() == 0, "the pixels differ from uint8 / 255")
  -- Kept as bytes: the file's values, and the same labels.
  local x8, y8 = dl.data.fashion_mnist("test", { dir = dir, dtype = "uint8" })
  H.eq(x8.dtype, "uint8")
  H.shape(x8, { 2, 28, 28 })
  H.ok(x8:eq(raw):all(), "uint8 images differ from the file's bytes")
  H.ok((x8:to("float32") / 255 - x):abs():max():item() == 0, "uint8 / 255 differs from the float32 images")
  H.values(y8, { 10, 1 }, { dtype = "int64" })
  H.eq(dl.data.fashion_mnist("test", { dir = dir }).dtype, "float32")
  H.raises(function() return dl.data.fashion_mnist("test", { dir = dir, dtype = "int8" }) end,
    "fashion_mnist: dtype must be \"float32\" or \"uint8\", got string \"int8\"")
  H.raises(function() return dl.data.fashion_mnist("test", { dri = dir }) end, "fashion_mnist: unknown option 'dri'")
  H.raises(function() return dl.data.fashion_mnist("test", 5) end,
    "fashion_mnist: expected a directory name or an options table")
  -- Images must be ubyte.
  write(dir .. "/t10k-images-idx3-ubyte", "\0\0\12\3\0\0\0\2\0\0\0\28\0\0\0\28" .. string.rep("\0", 4 * 1568))
  H.raises(function() return dl.data.fashion_mnist("test", dir) end,
    "t10k-images-idx3-ubyte: expected ubyte (0x08) data, got int32")
  H.raises(function() return dl.data.fashion_mnist("test", { dir = dir, dtype = "uint8" }) end,
    "t10k-images-idx3-ubyte: expected uint8 images of shape (N, 28, 28), got int32 (2, 28, 28)")
  write(dir .. "/t10k-images-idx3-ubyte", img)
  H.raises(function() return dl.data.fashion_mnist("train", dir) end,
    "fashion_mnist: cannot find train-images-idx3-ubyte.gz (or train-images-idx3-ubyte) in " .. dir)
  H.raises(function() return dl.data.fashion_mnist("valid") end,
    "fashion_mnist: split must be \"train\" or \"test\", got string \"valid\"")
  write(dir .. "/t10k-labels-idx1-ubyte", "\0\0\8\1\0\0\0\3" .. "\9\0\1")
  H.raises(function() return dl.data.fashion_mnist("test", dir) end, "expected 2 uint8 labels")
  os.execute("rm -rf '" .. dir .. "'")
end)

H.test("NaNs with any payload read back as plain NaN numbers", function()
  -- LuaJIT NaN-boxes its values: a NaN whose payload looks like a type tag, loaded as
  -- is, reads as nil or worse (bindings/capi.cpp, Note [NaN payloads reaching Lua]).
  local function le64(hi, lo)
    local b = {}
    for i = 0, 3 do b[#b + 1] = string.char(math.floor(lo / 2 ^ (8 * i)) % 256) end
    for i = 0, 3 do b[#b + 1] = string.char(math.floor(hi / 2 ^ (8 * i)) % 256) end
    return table.concat(b)
  end
  local header = '{"x":{"dtype":"F64","shape":[4],"data_offsets":[0,32]},'
                 .. '"y":{"dtype":"F32","shape":[2],"data_offsets":[32,40]}}'
  local data = le64(0xFFFF0000, 1) .. le64(0xFFFA1234, 0x56789ABC) .. le64(0x7FF00000, 1) .. le64(0x40000000, 0)
               .. "\1\0\128\255" .. "\255\255\255\255"   -- float32 NaNs with payloads
  local n = #header
  local len = string.char(n % 256, math.floor(n / 256) % 256, 0, 0, 0, 0, 0, 0)
  local p = path("-nan.safetensors")
  write(p, len .. header .. data)
  local t = dl.load(p)
  for _ = 1, 300 do   -- hot enough for the JIT to compile the reads
    local v = t.x:totable()
    for i = 1, 3 do assert(type(v[i]) == "number" and v[i] ~= v[i], "element " .. i) end
    assert(v[4] == 2)
    local w = t.y:totable()
    assert(type(w[1]) == "number" and w[1] ~= w[1] and type(w[2]) == "number" and w[2] ~= w[2])
    local a, b = t.x[1], t.x:narrow(1, 1, 1):view():item()
    assert(type(a) == "number" and a ~= a and type(b) == "number" and b ~= b)
  end
  os.remove(p)
end)

H.test("no file function works in a sandboxed state", function()
  -- The runtime marks a sandboxed state with the registry key "dlua.env"
  -- (vm/sandbox.cpp); the file functions check it on every call.
  local reg = debug.getregistry()
  local saved = reg["dlua.env"]
  reg["dlua.env"] = reg["dlua.env"] or {}
  local p = path("-sandbox.safetensors")
  local ok, err = pcall(function()
    local checks = {
      { function() dl.save(p, { x = dl.ones(1) }) end, "save: file access is disabled in the sandbox" },
      { function() return dl.load("/etc/hostname") end, "load: file access is disabled in the sandbox" },
      { function() return dl.data.load_idx(p) end, "load_idx: file access is disabled" },
      { function() return dl.data.fashion_mnist("test") end, "fashion_mnist: file access is disabled" },
      { function() return dl.summary.writer(p) end, "summary.writer: file access is disabled" },
      { function() return dl.latest_checkpoint("/tmp") end, "latest_checkpoint: file access is disabled" },
      { function() dl.Checkpoint{ step = 1 }:save(p) end, "Checkpoint:save: file access is disabled" },
      { function() dl.Checkpoint{ step = 1 }:restore(p) end, "Checkpoint:restore: file access is disabled" },
    }
    for _, c in ipairs(checks) do H.raises(c[1], c[2]) end
  end)
  reg["dlua.env"] = saved
  if not ok then error(err, 0) end
  H.eq(io.open(p, "rb"), nil)
end)

local debian = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
local f = io.open(debian, "rb")
if f then
  f:close()
  H.test("Debian's Fashion-MNIST test split loads", function()
    local x, y = dl.data.fashion_mnist("test")
    H.shape(x, { 10000, 28, 28 })
    H.shape(y, { 10000 })
    H.eq(x.dtype, "float32")
    H.eq(y.dtype, "int64")
    H.ok(x:min():item() == 0 and x:max():item() == 1)
    H.ok(y:min():item() == 1 and y:max():item() == 10)
    -- every class appears 1000 times in the test split
    H.values(y:eq(3):sum(), 1000)
  end)
else
  print("note: " .. debian .. " is absent; the Debian data set test is not run")
end

os.remove(tmp)
H.run()
