-- dl.progress: what it iterates (counts, arrays, iterators, data sets), the plain lines
-- it prints when not on a terminal, the bar it draws on one, and by-hand use.
local H = require("harness")
local dl = require("dlua")

-- A stand-in for a file that keeps what is written.
local function sink()
  local s = { text = {} }
  function s:write(...)
    for i = 1, select("#", ...) do self.text[#self.text + 1] = select(i, ...) end
  end
  function s:flush() end
  function s:get() return table.concat(self.text) end
  return s
end

local function lines(text)
  local out = {}
  for l in string.gmatch(text, "[^\n]+") do out[#out + 1] = l end
  return out
end

H.test("a count iterates 1..n and prints a line per tenth, then a last one", function()
  local out = sink()
  local seen = {}
  for i in dl.progress(100, { desc = "train", file = out }) do seen[#seen + 1] = i end
  H.eq(#seen, 100)
  H.eq(seen[1], 1)
  H.eq(seen[100], 100)
  local ls = lines(out:get())
  H.eq(#ls, 10)
  H.ok(string.find(ls[1], "^train: 10/100 %(10%%%) %[") ~= nil, ls[1])
  H.ok(string.find(ls[10], "^train: 100/100 %(100%%%) %[%d%d:%d%d elapsed, %d%d:%d%d left, ") ~= nil, ls[10])
  H.ok(string.find(ls[10], "it/s%]$") ~= nil, ls[10])
end)

H.test("arrays, iterator triples, closures and data sets", function()
  local out = sink()
  local got = {}
  for i, v in dl.progress({ "a", "b", "c" }, { file = out }) do got[#got + 1] = i .. v end
  H.eq(got, { "1a", "2b", "3c" })
  got = {}
  local f, st, ctl = ipairs({ 10, 20 })
  for i, v in dl.progress(f, st, ctl, { file = out }) do got[#got + 1] = i * v end
  H.eq(got, { 10, 40 })
  local n = 0
  local function gen()
    n = n + 1
    if n <= 4 then return n, n * n end
  end
  got = {}
  out = sink()
  for a, b in dl.progress(gen, { total = 4, file = out }) do got[#got + 1] = a + b end
  H.eq(got, { 2, 6, 12, 20 })
  H.ok(string.find(out:get(), "4/4 (100%)", 1, true) ~= nil)
  local ds = { items = { 5, 6, 7 } }
  function ds:size() return #self.items end
  function ds:iter()
    local i = 0
    return function()
      i = i + 1
      return self.items[i]
    end
  end
  got = {}
  out = sink()
  for x in dl.progress(ds, { file = out }) do got[#got + 1] = x end
  H.eq(got, { 5, 6, 7 })
  H.ok(string.find(out:get(), "3/3 (100%)", 1, true) ~= nil)
  -- unknown total: a count and a rate, at the start and at the end
  out = sink()
  n = 0
  for _ in dl.progress(gen, { file = out }) do end
  local ls = lines(out:get())
  H.eq(#ls, 2)
  H.ok(string.find(ls[2], "^4 %[%d%d:%d%d, [%d.]+it/s%]$") ~= nil, ls[2])
  for _ in dl.progress(0, { file = out }) do error("never") end
end)

H.test("on a terminal, a bar redrawn in place with a postfix", function()
  local out = sink()
  local bar = dl.progress(50, { desc = "epoch 1", file = out, tty = true, min_interval = 0 })
  for _ = 1, 50 do bar:update() end
  bar:set_postfix({ loss = 0.25, acc = dl.tensor(0.5) })
  bar:close()
  bar:close()
  local text = out:get()
  H.ok(string.find(text, "\r", 1, true) ~= nil)
  H.ok(string.find(text, "\27[K", 1, true) ~= nil)
  H.ok(string.sub(text, -1) == "\n")
  local last = string.match(text, "\r([^\r]*)\27%[K\n$")
  H.ok(last ~= nil, text)
  H.ok(string.find(last, "^epoch 1: 100%%|[^|]+| 50/50 %[%d%d:%d%d<%d%d:%d%d, [%d.]+it/s, acc=0.5, loss=0.25%]$") ~= nil, last)
  H.raises(function() bar:update() end, "update: the progress bar is closed")
end)

H.test("bad arguments are errors", function()
  H.raises(function() return dl.progress("x") end, "progress: expected a count, a table, an iterator or a data set, got string")
  H.raises(function() return dl.progress(-1) end, "progress: expected a count >= 0, got -1")
  H.raises(function() return dl.progress(3, 5) end, "progress: expected an options table, got number")
  H.raises(function() return dl.progress(3, { desc = 1 }) end, "progress: expected a string desc")
end)

H.run()
