-- A character-level transformer language model, trained on a text every Debian system
-- has (the GNU GPL version 3, /usr/share/common-licenses/GPL-3, from base-files): token
-- and position embeddings, causal self-attention blocks (dl.nn.TransformerEncoderLayer,
-- pre-norm), a final LayerNorm and a linear head; AdamW with warm-up and cosine decay.
-- It prints the loss and a sample of generated text. A model that only knew each
-- character's frequency would stay near the text's unigram entropy (about 3.0 nats a
-- character); this one falls well below it.
--
--   dlua scripts/examples/char_transformer.lua [--steps 1500] [--quick] [--text FILE]
--
-- --quick trains 250 steps and checks the held-out loss (the test suite runs it);
-- --smoke takes 20 steps through every path and checks no number (the sanitizer suite
-- runs it: there memory errors are what is checked, the learning by --quick).
local dl = require("dlua")
local nn, F = dl.nn, dl.nn.functional

local steps, quick, smoke, path = 1500, false, false, "/usr/share/common-licenses/GPL-3"
for i = 1, #(arg or {}) do
  if arg[i] == "--steps" then steps = tonumber(arg[i + 1]) end
  if arg[i] == "--quick" then quick = true end
  if arg[i] == "--smoke" then quick, smoke = true, true end
  if arg[i] == "--text" then path = arg[i + 1] end
end
if quick then steps = smoke and 20 or 250 end
local context, batch, width, heads, layers = 64, 16, 64, 4, 2

-- ---- data -----------------------------------------------------------------------------------
local f = assert(io.open(path, "rb"), "char_transformer: cannot read " .. path)
local text = f:read("*a"):gsub("%s+", " ")   -- runs of white space as one space
f:close()
local chars, index = {}, {}
for c in text:gmatch(".") do
  if not index[c] then chars[#chars + 1] = c; index[c] = true end
end
table.sort(chars)
for i, c in ipairs(chars) do index[c] = i end
local codes = {}
for i = 1, #text do codes[i] = index[text:sub(i, i)] end
local data = dl.tensor(codes, { dtype = "int64" })
local V, N = #chars, #codes
local split = math.floor(N * 0.9)
print(("%d characters, %d distinct; %d for training, %d held out"):format(N, V, split, N - split))

dl.manual_seed(0)
-- A batch of windows starting in [lo, hi - context]: inputs (B, T) and next characters (B, T).
local function windows(lo, hi, b)
  local starts = dl.randint(lo, hi - context, { b }, { dtype = "int64" })
  local offs = dl.arange(0, context, { dtype = "int64" }):reshape(1, context)
  local idx = starts:reshape(b, 1) + offs
  return data:gather(1, idx:reshape(-1)):reshape(b, context), data:gather(1, (idx + 1):reshape(-1)):reshape(b, context)
end

-- ---- the model ------------------------------------------------------------------------------
local LM = nn.Module:extend("CharLM")
function LM:init()
  self.tokens = nn.Embedding(V, width)
  for i = 1, layers do
    self["block" .. i] = nn.TransformerEncoderLayer(width, heads, {
      dim_feedforward = 4 * width, dropout = 0.1, batch_first = true, norm_first = true, activation = "gelu" })
  end
  self.norm = nn.LayerNorm(width)
  self.head = nn.Linear(width, V)
  self.positions = F.sinusoidal_positions(context, width)
end
function LM:forward(x)
  local T = x:size(2)
  local h = self.tokens(x) + self.positions:narrow(1, 1, T)
  for i = 1, layers do h = self["block" .. i](h, { is_causal = true }) end
  return self.head(self.norm(h))
end

local model = LM()
local params = 0
for _, p in ipairs(model:parameters()) do params = params + p:numel() end
print(("a transformer of %d layers, width %d, %d heads: %d parameters"):format(layers, width, heads, params))

local function loss_of(x, y)
  return nn.cross_entropy(model(x):reshape(-1, V), y:reshape(-1))
end
local opt = dl.optim.AdamW({ lr = 3e-3, weight_decay = 0.01 })
local sched = dl.optim.WarmupCosineLR(opt, math.min(50, math.floor(steps / 2)), steps, 3e-4)
local step = dl.implicit_value_and_grad(loss_of)

local held_x, held_y = windows(split + 1, N, 64)   -- one fixed held-out set
local function held_out_loss()
  model:eval()
  local l = dl.no_grad(loss_of, held_x, held_y):item()
  model:train()
  return l
end

-- Generates n characters after `prompt`, sampling from the softmax at temperature t.
local function sample(prompt, n, t)
  model:eval()
  local out = {}
  for i = 1, #prompt do out[i] = index[prompt:sub(i, i)] or 1 end
  for _ = 1, n do
    local from = math.max(1, #out - context + 1)
    local x = dl.tensor({ { unpack(out, from, #out) } }, { dtype = "int64" })
    local logits = dl.no_grad(model.forward, model, x)
    local p = dl.softmax(logits[1][x:size(2)] / t, 1):totable()
    local r, acc, pick = math.random(), 0, V
    for k = 1, V do
      acc = acc + p[k]
      if r <= acc then pick = k break end
    end
    out[#out + 1] = pick
  end
  model:train()
  local s = {}
  for i, c in ipairs(out) do s[i] = chars[c] end
  return table.concat(s)
end

math.randomseed(1)
local first = held_out_loss()
print(("step    0  held-out loss %.3f (uniform: %.3f)"):format(first, math.log(V)))
for s = 1, steps do
  local x, y = windows(1, split, batch)
  local _, grads = step(x, y)
  nn.utils.clip_grad_norm_(grads, 1.0)
  opt:apply_gradients(grads)
  sched:step()
  if s % 100 == 0 then print(("step %4d  held-out loss %.3f"):format(s, held_out_loss())) end
end
local final = held_out_loss()
print(("final held-out loss %.3f nats a character"):format(final))
print("sample: " .. sample("This License ", quick and 80 or 200, 0.8))
-- Below the unigram entropy of the text (about 3.0): the model uses the context.
if smoke then return end
local goal = quick and 2.7 or 2.0
assert(final < goal, ("the model did not learn enough (held-out loss %.3f, goal %.1f)"):format(final, goal))
