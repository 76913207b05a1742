-- dl.data: pipelines composed like tf.data (from_tensors, shuffle, batch, map, take,
-- skip, filter, repeat), their order, seeding, sizes and errors.
local dl = require("dlua")
local H = require("harness")

local function ids(ds)
  -- the labels (second values) of every element or batch, as one flat Lua list
  local out = {}
  for _, y in ds:iter() do
    local t = y:totable()
    if type(t) ~= "table" then t = { t } end
    for _, v in ipairs(t) do out[#out + 1] = v end
  end
  return out
end

local function range(a, b)
  local t = {}
  for i = a, b do t[#t + 1] = i end
  return t
end

local function sorted(t)
  local c = { unpack(t) }
  table.sort(c)
  return c
end

local function write_file(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local N = 10
local xs = dl.arange(1, N + 1):view(N, 1) * dl.tensor({ { 1, 10 } })   -- row i: {i, 10 i}
local ys = dl.arange(1, N + 1, { dtype = "int64" })

H.test("from_tensors slices along dim 1, keeping dtypes", function()
  local ds = dl.data.from_tensors(xs, ys)
  local n = 0
  for x, y in ds:iter() do
    n = n + 1
    H.values(x, { n, 10 * n })
    H.eq(y.dtype, "int64")
    H.eq(y:item(), n)
  end
  H.eq(n, N)
  H.eq(ds:size(), N)
end)

H.test("batch: full batches, then the remainder unless dropped", function()
  local ds = dl.data.from_tensors(xs, ys):batch(4)
  local sizes = {}
  for x, y in ds:iter() do
    sizes[#sizes + 1] = x:size(1)
    H.eq(y.dtype, "int64")
    H.shape(x, { x:size(1), 2 })
  end
  H.eq(sizes, { 4, 4, 2 })
  H.eq(ds:size(), 3)
  local dropped = dl.data.from_tensors(xs, ys):batch(4, { drop_remainder = true })
  H.eq(ids(dropped), range(1, 8))
  H.eq(dropped:size(), 2)
end)

H.test("shuffle(seed): a permutation, the same for the same seed, new at each pass", function()
  local a = dl.data.from_tensors(xs, ys):shuffle(7):batch(3)
  local b = dl.data.from_tensors(xs, ys):shuffle(7):batch(3)
  local e1, e2 = ids(a), ids(a)
  H.eq(sorted(e1), range(1, N))
  H.eq(sorted(e2), range(1, N))
  H.ok(table.concat(e1, ",") ~= table.concat(e2, ","), "each pass is reshuffled")
  H.eq(ids(b), e1)
  H.eq(ids(b), e2)
  local c = dl.data.from_tensors(xs, ys):shuffle(8):batch(3)
  H.ok(table.concat(ids(c), ",") ~= table.concat(e1, ","), "another seed, another order")
  -- labels travel with their rows
  for x, y in a:iter() do H.values(x:select(2, 1), y:double():totable()) end
end)

H.test("shuffle() without a seed follows dl.manual_seed", function()
  dl.manual_seed(3)
  local first = ids(dl.data.from_tensors(xs, ys):shuffle():batch(4))
  dl.manual_seed(3)
  H.eq(ids(dl.data.from_tensors(xs, ys):shuffle():batch(4)), first)
  H.eq(sorted(first), range(1, N))
end)

H.test("take and skip, before and after batch", function()
  local ds = dl.data.from_tensors(xs, ys)
  H.eq(ids(ds:take(3)), { 1, 2, 3 })
  H.eq(ids(ds:skip(7)), { 8, 9, 10 })
  H.eq(ids(ds:skip(2):take(3):batch(2)), { 3, 4, 5 })
  H.eq(ids(ds:batch(3):take(2)), range(1, 6))
  H.eq(ids(ds:batch(3):skip(3)), { 10 })
  H.eq(ds:batch(3):take(2):size(), 2)
  H.eq(ds:take(100):size(), N)
  H.eq(ids(ds:take(0)), {})
  local s = ds:shuffle(1):take(4)
  local a = ids(s)
  H.eq(#a, 4)
end)

H.test("map: once per batch after batch, once per element before it", function()
  local calls = 0
  local ds = dl.data.from_tensors(xs, ys):batch(4):map(function(x, y)
    calls = calls + 1
    return x * 2, y, "extra"
  end)
  local n = 0
  for x, y, e in ds:iter() do
    n = n + x:size(1)
    H.eq(e, "extra")
  end
  H.eq(n, N)
  H.eq(calls, 3)
  calls = 0
  local per = dl.data.from_tensors(xs, ys):map(function(x, y) calls = calls + 1; return x:sum(), y end):batch(4)
  local out = {}
  for s, y in per:iter() do
    H.eq(y.dtype, "int64")
    for _, v in ipairs(s:totable()) do out[#out + 1] = v end
  end
  H.eq(calls, N)
  H.eq(out, { 11, 22, 33, 44, 55, 66, 77, 88, 99, 110 })
  H.eq(per:size(), 3)
end)

H.test("any order composes: shuffle of batches, shuffle after map, filter, repeat", function()
  local ds = dl.data.from_tensors(xs, ys)
  local b = ids(ds:batch(2):shuffle(5))
  H.eq(sorted(b), range(1, N))
  local pairs_ok = true
  for i = 1, N, 2 do pairs_ok = pairs_ok and b[i] % 2 == 1 and b[i + 1] == b[i] + 1 end
  H.ok(pairs_ok, "batches stay whole when shuffled")
  H.eq(sorted(ids(ds:map(function(x, y) return x, y end):shuffle(2))), range(1, N))
  H.eq(ids(ds:filter(function(x, y) return y % 2 == 0 end):batch(2)), { 2, 4, 6, 8, 10 })
  H.eq(ids(ds:take(3):repeat_(2)), { 1, 2, 3, 1, 2, 3 })
  H.eq(ids(ds:take(2)["repeat"](ds:take(2), 3)), { 1, 2, 1, 2, 1, 2 })
  H.eq(ds:take(3):repeat_(2):size(), 6)
  local shuffled = ids(ds:shuffle(4):repeat_(2))
  local twice = range(1, N)
  for i = 1, N do twice[#twice + 1] = i end
  H.eq(sorted(shuffled), sorted(twice))
  H.ok(table.concat(shuffled, ",", 1, N) ~= table.concat(shuffled, ",", N + 1, 2 * N), "reshuffled when repeated")
  H.eq(ds:filter(function() return true end):size(), nil)
end)

H.test("from_list and batching numbers", function()
  local ds = dl.data.from_list({ 1, 2, 3, 4, 5 }):batch(2)
  local out = {}
  for x in ds:iter() do out[#out + 1] = x:totable() end
  H.eq(out, { { 1, 2 }, { 3, 4 }, { 5 } })
end)

H.test("a data set drives dl.progress, which takes its size as the total", function()
  local ds = dl.data.from_tensors(xs, ys):batch(4)
  local lines = {}
  local file = { write = function(_, s) lines[#lines + 1] = s end, flush = function() end }
  local n = 0
  for x, y in dl.progress(ds, { file = file, tty = false }) do n = n + x:size(1) end
  H.eq(n, N)
  H.ok(table.concat(lines):find("3/3", 1, true) ~= nil, "total from ds:size(): " .. table.concat(lines))
end)

H.test("tostring shows the pipeline", function()
  H.eq(tostring(dl.data.from_tensors(xs, ys):shuffle(3):batch(4, { drop_remainder = true }):take(2)),
       "Dataset: from_tensors((10, 2), (10,)):shuffle(3):batch(4, drop_remainder):take(2)")
end)

H.test("errors", function()
  H.raises(function() dl.data.from_tensors(dl.zeros(3), dl.zeros(4)) end,
           "from_tensors: tensors have different sizes along dim 1: 3 and 4 (argument 2)")
  H.raises(function() dl.data.from_tensors() end, "from_tensors: expected at least one tensor")
  H.raises(function() dl.data.from_tensors(dl.tensor(1)) end, "from_tensors: argument 1 is a 0-dim tensor")
  H.raises(function() dl.data.from_tensors({ 1, 2 }) end, "from_tensors: argument 1 is a table, expected a tensor")
  local ds = dl.data.from_tensors(xs)
  H.raises(function() ds:batch(0) end, "batch: the batch size must be an integer >= 1, got 0")
  H.raises(function() ds:batch(2, { drop = true }) end, "batch: unknown option 'drop'")
  H.raises(function() ds:map(5) end, "map: expected a function, got number")
  H.raises(function() ds:take(-1) end, "take: the count must be an integer >= 0, got -1")
  H.raises(function() ds:shuffle(1.5) end, "shuffle: the seed must be an integer, got 1.5")
  H.raises(function() ds.batch({}, 2) end, "batch: call it on a data set")
  H.raises(function() for _ in dl.data.from_list({ {} }):batch(2):iter() do end end, "batch: cannot batch a table")
end)

H.test("cache: the first complete pass is kept, later passes replay it", function()
  local calls = 0
  local ds = dl.data.from_tensors(dl.arange(1, 6)):map(function(x) calls = calls + 1; return x * 2 end):cache()
  H.eq(ds:size(), 5)
  local function pass()
    local out = {}
    for x in ds:iter() do out[#out + 1] = x:item() end
    return out
  end
  H.eq(pass(), { 2, 4, 6, 8, 10 })
  H.eq(calls, 5)
  H.eq(pass(), { 2, 4, 6, 8, 10 })
  H.eq(calls, 5, "the map ran once")
  -- a pass left early keeps nothing
  local calls2 = 0
  local ds2 = dl.data.from_tensors(dl.arange(1, 6)):map(function(x) calls2 = calls2 + 1; return x end):cache()
  for _ in ds2:take(2):iter() do end
  for _ in ds2:iter() do end
  for _ in ds2:iter() do end
  H.eq(calls2, 2 + 5)
  -- shuffled after the cache: a new order each pass, the same elements
  local sh = ds:shuffle(3)
  local a, b = {}, {}
  for x in sh:iter() do a[#a + 1] = x:item() end
  for x in sh:iter() do b[#b + 1] = x:item() end
  table.sort(a)
  H.eq(a, { 2, 4, 6, 8, 10 })
  H.eq(#b, 5)
end)

H.test("read_csv and from_csv: quotes, CRLF, empty fields, strings, errors with lines", function()
  local path = os.tmpname()
  local function write(text) write_file(path, text) end
  write('a,b,name\n1,2.5,"x, y"\n3,,"he said ""hi"""\r\n-4e2,7,"two\nlines"\n\n')
  local t = dl.data.read_csv(path)
  H.eq(t.rows, 3)
  H.eq(t.names, { "a", "b", "name" })
  H.values(t.columns.a, { 1, 3, -400 })
  H.ok(t.columns.b[2] ~= t.columns.b[2], "an empty numeric field is NaN")
  H.eq(t.columns.name, { "x, y", 'he said "hi"', "two\nlines" })
  H.eq(dl.data.read_csv(path, { columns = { "b" } }).names, { "b" })
  -- a data set of (features, label); string labels become 1-based classes
  write("x1;x2;kind\n0.5;1;cat\n1.5;2;dog\n2.5;3;cat\n")
  local ds = dl.data.from_csv(path, { label = "kind", delimiter = ";", dtype = "float64" })
  H.eq(ds.classes, { "cat", "dog" })
  local X, y = nil, nil
  for xb, yb in ds:batch(3):iter() do X, y = xb, yb end
  H.values(X, { { 0.5, 1 }, { 1.5, 2 }, { 2.5, 3 } })
  H.values(y, { 1, 2, 1 })
  H.eq(X.dtype, "float64")
  -- no header
  write("1,2\n3,4\n")
  H.eq(dl.data.read_csv(path, { header = false }).names, { "1", "2" })
  -- errors name the file and the line
  write('a,b\n1,2\n3\n')
  H.raises(function() dl.data.read_csv(path) end, ":3: 1 fields, the header has 2")
  write('a,b\n1,"open\n')
  H.raises(function() dl.data.read_csv(path) end, ":2: a quoted field is never closed")
  write('a,a\n1,2\n')
  H.raises(function() dl.data.read_csv(path) end, "the column name 'a' appears twice")
  H.raises(function() dl.data.from_csv(path .. ".none") end, "read_csv: cannot open")
  write("a,b\n1,2\n")
  H.raises(function() dl.data.from_csv(path, { label = "c" }) end, "from_csv: " .. path .. " has no column 'c'")
  os.remove(path)
end)

H.test("random_split: disjoint parts covering every row, the same for a seed, the script's stream untouched", function()
  local x = dl.arange(20)
  local ds = dl.data.from_tensors(x, x * 2)
  dl.manual_seed(9)
  local before = dl.rand(3)
  dl.manual_seed(9)
  local parts = dl.data.random_split(ds, { 0.6, 0.25, 0.15 }, 42)
  H.ok(dl.equal(dl.rand(3), before))                      -- the seed did not move the script's generator
  H.eq(#parts, 3)
  H.eq(parts[1]:size() + parts[2]:size() + parts[3]:size(), 20)
  H.eq(parts[1]:size(), 12)
  local seen = {}
  for _, p in ipairs(parts) do
    for a, b in p:iter() do
      H.eq(b:item(), 2 * a:item())                         -- rows stay whole
      H.eq(seen[a:item()], nil)
      seen[a:item()] = true
    end
  end
  local again = dl.data.random_split(ds, { 12, 5, 3 }, 42)
  local r1, r2 = {}, {}
  for a in parts[2]:iter() do r1[#r1 + 1] = a:item() end
  for a in again[2]:iter() do r2[#r2 + 1] = a:item() end
  H.eq(r1, r2)
  H.eq(dl.data.random_split(dl.data.from_tensors(dl.arange(11)), { 0.5, 0.5 })[1]:size(), 6)
  H.raises(function() dl.data.random_split(ds, { 5, 5 }) end, "random_split: the sizes sum to 10, not to the data set's length 20")
  H.raises(function() dl.data.random_split(ds:batch(4), { 5 }) end, "random_split: expected a data set of tensors")
end)

H.test("batches are tensors of their own: an in-place change leaves the data set alone", function()
  -- torch.utils.data.DataLoader(TensorDataset(x), batch_size=4): default_collate stacks
  -- new tensors, so `xb.mul_(0)` leaves x as it was, in order or shuffled.
  local pipelines = {
    ["batch"] = function(ds) return ds:batch(4) end,
    ["shuffle:batch"] = function(ds) return ds:shuffle(1):batch(4) end,
    ["batch:prefetch"] = function(ds) return ds:batch(4):prefetch(2) end,
    ["take:batch:prefetch"] = function(ds) return ds:take(7):batch(4):prefetch(2) end,
    ["skip:batch"] = function(ds) return ds:skip(3):batch(4) end,
    ["map:batch"] = function(ds) return ds:map(function(v) return v end):batch(4) end,
  }
  for name, make in pairs(pipelines) do
    local x = dl.arange(1, 11)
    local seen = {}
    for xb in make(dl.data.from_tensors(x)):iter() do
      for _, v in ipairs(xb:totable()) do seen[#seen + 1] = v end
      xb:mul_(0)
    end
    H.eq(x:totable(), range(1, 10), name .. ": the source is unchanged")
    H.ok(#seen > 0 and seen[1] ~= 0, name .. ": the batches held the rows")
  end
  local seen = {}
  for xb in dl.data.from_tensors(dl.arange(1, 11)):batch(4):prefetch(2):iter() do seen[#seen + 1] = xb:sum():item() end
  H.eq(seen, { 10, 26, 19 })
end)

H.test("map: a function that returns nothing raises instead of ending the pass", function()
  local ds = dl.data.from_tensors(dl.arange(1, 5)):map(function(x) if x:item() ~= 3 then return x end end)
  H.raises(function() for _ in ds:iter() do end end, "map: the function returned nil for element 3")
  local after = dl.data.from_tensors(dl.arange(1, 5)):batch(2):map(function() return nil end)
  H.raises(function() for _ in after:iter() do end end, "map: the function returned nil for element 1")
  -- later values may be nil
  local n = 0
  for x, y in dl.data.from_tensors(dl.arange(1, 4)):map(function(x) return x, nil end):iter() do
    n = n + 1
    H.eq(y, nil)
  end
  H.eq(n, 3)
end)

H.test("repeat_(0) gives nothing, as its size says", function()
  local ds = dl.data.from_tensors(xs, ys):repeat_(0)
  H.eq(ds:size(), 0)
  H.eq(ids(ds), {})
  H.eq(ids(dl.data.from_tensors(xs, ys):batch(4):repeat_(0)), {})
  H.eq(#ids(dl.data.from_tensors(xs, ys):repeat_(2)), 2 * N)
end)

H.test("read_csv: missing values as pandas' (NA, null, ...), hex as text, a quoted empty line kept", function()
  local path = os.tmpname()
  local function write(text) write_file(path, text) end
  -- pandas.read_csv: the default na_values are NaN in a numeric column
  write("a,b\n1,NA\n2,N/A\n3,NaN\n4,null\n5,None\n6,#N/A\n7,<NA>\n8,-nan\n9,\n10,2.5\n")
  local t = dl.data.read_csv(path)
  H.ok(dl.is_tensor(t.columns.b), "b is numeric")
  local b = t.columns.b:totable()
  for i = 1, 9 do H.ok(b[i] ~= b[i], "row " .. i .. " is NaN") end
  H.eq(b[10], 2.5)
  H.ok(dl.is_tensor(dl.data.from_csv(path, { label = "a" }).tensors[1]), "b is a feature")
  -- no NaN in an integer or bool column: pandas raises ("Integer column has NA values")
  H.raises(function() dl.data.read_csv(path, { dtype = "int64" }) end,
           "read_csv: " .. path .. ":2: column 'b' has a missing value (\"NA\"), which dtype int64 cannot hold")
  write("a,b\n1,2\n3,\n")
  H.raises(function() dl.data.read_csv(path, { dtype = "bool" }) end,
           "read_csv: " .. path .. ":3: column 'b' has a missing value (\"\"), which dtype bool cannot hold")
  H.values(dl.data.read_csv(path, { dtype = "int64", columns = { "a" } }).columns.a, { 1, 3 })
  -- Python's float("0x10") and pandas leave hexadecimal as text; "inf" is a number
  write("h,v\n0x10,inf\n0x1p4,-Infinity\n")
  t = dl.data.read_csv(path)
  H.eq(t.columns.h, { "0x10", "0x1p4" })
  H.eq(t.columns.v:totable(), { math.huge, -math.huge })
  -- csv.writer writes an empty value of a one-column row as "": pandas reads NaN
  write('a\n1\n""\n\n3\n')
  t = dl.data.read_csv(path)
  H.eq(t.rows, 3)
  local a = t.columns.a:totable()
  H.eq({ a[1], a[3] }, { 1, 3 })
  H.ok(a[2] ~= a[2], "the quoted empty line is a missing value")
  -- in a file of several columns it is a blank line, as before
  write('a,b\n1,2\n""\n3,4\n')
  H.eq(dl.data.read_csv(path).rows, 2)
  -- from_csv: a column of text is an error unless the features are named
  write("x1,name,x2,kind,y\n1,a,2,p,0\n3,b,4,q,1\n")
  H.raises(function() dl.data.from_csv(path, { label = "y" }) end,
           "from_csv: " .. path .. ": the columns 'name', 'kind' are not numeric")
  H.raises(function() dl.data.from_csv(path, { label = "kind" }) end, "the column 'name' is not numeric")
  local ds = dl.data.from_csv(path, { label = "kind", features = { "x1", "x2" } })
  H.eq(ds.classes, { "p", "q" })
  H.shape(ds.tensors[1], { 2, 2 })
  os.remove(path)
end)

H.run()
