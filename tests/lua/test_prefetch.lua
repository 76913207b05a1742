-- Dataset:prefetch: the same elements as without it, the engine's work for the next
-- ones run on the worker thread (Note [Background jobs] in bindings/capi_jobs.cpp):
-- batches of rows, decoded images, errors from a job, abandoned iterations.
local dl = require("dlua")
local H = require("harness")

local function all(ds)
  local out = {}
  for a, b in ds:iter() do out[#out + 1] = { a, b } end
  return out
end

local function same(got, want)
  H.eq(#got, #want, "element count")
  for i = 1, #want do
    for k = 1, 2 do
      if want[i][k] ~= nil then
        H.eq(got[i][k].dtype, want[i][k].dtype)
        H.ok(dl.equal(got[i][k], want[i][k]), "element " .. i .. ", component " .. k)
      end
    end
  end
end

H.test("batches of rows: shuffled, taken, skipped, sharded, in order", function()
  local x = dl.randn(103, 7)
  local y = dl.arange(1, 104, 1, { dtype = "int64" })
  local function pipelines()
    local base = dl.data.from_tensors(x, y)
    return {
      base:batch(16),
      base:shuffle(5):batch(10),
      base:skip(3):take(90):batch(32, { drop_remainder = true }),
      base:shard(2, 2, { seed = 9 }):batch(8),
    }
  end
  local plain, ahead = pipelines(), pipelines()
  for i = 1, #plain do
    for depth = 1, 3 do
      same(all(ahead[i]:prefetch(depth)), all(plain[i]))   -- each pass reshuffles alike
    end
  end
  -- after a Lua map, elements come as without prefetch
  local mapped = dl.data.from_tensors(x, y):map(function(a, b) return a * 2, b end):batch(20)
  same(all(mapped:prefetch(2)), all(mapped))
  H.raises(function() dl.data.from_tensors(x):prefetch(0) end, "prefetch: the number of elements to prepare must be at least 1")
  H.raises(function() dl.data.from_tensors(x):prefetch("2") end, "prefetch")
end)

H.test("images decode on the worker, in order; a bad file fails at its element", function()
  local dir = (os.getenv("TMPDIR") or "/tmp") .. "/dlua_prefetch_" .. os.time() .. "_" .. math.random(1e6)
  os.execute("mkdir -p '" .. dir .. "'")
  local paths, labels = {}, {}
  for i = 1, 9 do
    paths[i] = dir .. "/" .. i .. ".png"
    labels[i] = i % 3 + 1
    dl.image.save(paths[i], (dl.arange(0, 3 * 4 * 5):view(3, 4, 5) * i):remainder(256):to("uint8"))
  end
  local ds = dl.data.images(paths, labels)
  same(all(ds:prefetch(4)), all(ds))
  same(all(ds:batch(4):prefetch(2)), all(ds:batch(4)))
  same(all(ds:batch(4, { drop_remainder = true }):prefetch(1)), all(ds:batch(4, { drop_remainder = true })))
  local first = all(ds:batch(4):prefetch(2))[1]
  H.eq(first[1].shape, { 4, 3, 4, 5 }); H.eq(first[1].dtype, "float32"); H.eq(first[2].dtype, "int64")
  -- a file that is not an image: the error names it, at the element that reads it
  local bad = dir .. "/bad.png"
  local f = io.open(bad, "wb"); f:write("not an image"); f:close()
  local ds2 = dl.data.images({ paths[1], bad, paths[2] }):prefetch(3)
  local it = ds2:iter()
  H.eq(it().shape, { 3, 4, 5 })
  H.raises(function() it() end, bad)
  -- abandoned iterations leave no job behind (their results are dropped when collected)
  for _ = 1, 5 do for _ in ds:batch(2):prefetch(3):iter() do break end end
  collectgarbage(); collectgarbage()
  H.eq(#all(ds:prefetch(2)), 9)
  os.execute("rm -rf '" .. dir .. "'")
end)

H.run()
