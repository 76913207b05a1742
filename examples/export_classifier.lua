-- Trains a Fashion-MNIST classifier, exports it for a program without Lua, and writes
-- the answers that program must give (examples/classifier_host.c checks them).
--
--   dlua examples/export_classifier.lua [out_dir] [--images 10000]
--
-- Writes <out_dir>/classifier.dlg: raw pixels (batch, 28, 28) in [0, 1] -> class
-- probabilities (batch, 10), the batch size free; and <out_dir>/classifier_check.bin:
-- test images, their labels, and eager dlua's probabilities for them, as a batch and
-- one image at a time, which the runner must reproduce bit for bit.
local dl = require("dlua")
local ffi = require("ffi")

local out_dir, images = ".", 10000
local i = 1
while arg and arg[i] do
  if arg[i] == "--images" then
    images = assert(tonumber(arg[i + 1]), "--images needs a number")
    i = i + 2
  else
    out_dir = arg[i]
    i = i + 1
  end
end

-- ---- a quick training run ------------------------------------------------------------------
dl.manual_seed(1)
local x_train, y_train = dl.data.fashion_mnist("train")
local x_test, y_test = dl.data.fashion_mnist("test")
x_train, y_train = x_train:narrow(1, 1, images), y_train:narrow(1, 1, images)
local MEAN, STD = 0.2860, 0.3530

local net = dl.nn.Sequential(dl.nn.Flatten(), dl.nn.Linear(784, 128), dl.nn.ReLU(), dl.nn.Linear(128, 10))
local opt = dl.optim.Adam{ lr = 1e-3 }
local step = dl.implicit_value_and_grad(function(x, y)
  return dl.nn.cross_entropy(net((x - MEAN) / STD), y)
end)
for x, y in dl.data.from_tensors(x_train, y_train):shuffle(1):batch(64):iter() do
  local _, grads = step(x, y)
  opt:apply_gradients(grads)
end
net:eval()

-- What the program gets: pixels in, probabilities out; the standardisation is part of
-- the graph (its two numbers are listed in the report).
local function classify(x) return dl.softmax(net((x - MEAN) / STD), 2) end

local n = 16
local batch = x_test:narrow(1, 1, n):contiguous()
local probs = classify(batch)
local acc = (dl.argmax(classify(x_test:narrow(1, 1, 2000)), 2):eq(y_test:narrow(1, 1, 2000))):float():mean():item()
print(("test accuracy on 2,000 images after one pass over %d: %.1f%%"):format(images, 100 * acc))

local report = dl.export(classify, { batch }, {
  path = out_dir .. "/classifier.dlg", names = net, input_names = { "pixels" },
  dynamic = { [1] = { 1, "batch" } }, metadata = { ["classes"] = "Fashion-MNIST (10)" },
})
print(report)

-- ---- the answers, as raw little-endian numbers ---------------------------------------------
-- "DLGCHECK", int32 n, then n*784 float32 pixels, n int32 labels, n*10 float32
-- probabilities of the batch, n*10 float32 probabilities of each image alone.
local function floats(t)
  local v = t:contiguous():reshape(-1):totable()
  local a = ffi.new("float[?]", #v)
  for k = 1, #v do a[k - 1] = v[k] end
  return ffi.string(a, 4 * #v)
end
local function int32s(list)
  local a = ffi.new("int32_t[?]", #list)
  for k = 1, #list do a[k - 1] = list[k] end
  return ffi.string(a, 4 * #list)
end
local labels = y_test:narrow(1, 1, n):totable()
for k = 1, n do labels[k] = labels[k] - 1 end   -- 0-based classes for C
local alone = {}
for k = 1, n do alone[k] = classify(batch:narrow(1, k, 1)) end
local body = "DLGCHECK" .. int32s({ n }) .. floats(batch) .. int32s(labels) .. floats(probs) ..
             floats(dl.cat(alone, 1))
local f = assert(io.open(out_dir .. "/classifier_check.bin", "wb"))
f:write(body)
f:close()
print("wrote " .. out_dir .. "/classifier.dlg and " .. out_dir .. "/classifier_check.bin")
