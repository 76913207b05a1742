-- The MLP training run whose peak memory bench/run.lua measures (its `mlpmem` rows): a
-- fresh process loads Fashion-MNIST, builds the 784-256-10 model and trains it for one
-- epoch (bench/cases.lua), as `python3 bench/torch_ref.py train-mlp` does for PyTorch.
-- The last line is the process's own peak RSS (VmHWM), which the harness reads.
--   dlua bench/mlp_train.lua [--uint8] [--limit N]
--     --uint8: keep the images as the file's bytes and convert each batch (model "mlp8")
--     --limit N: train on the first N images only
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local cases = require("cases")

local name, limit = "mlp", nil
local i = 1
while arg[i] do
  if arg[i] == "--uint8" then
    name = "mlp8"
  elseif arg[i] == "--limit" then
    i = i + 1
    limit = assert(tonumber(arg[i]), "--limit needs a number")
  else
    error("mlp_train: unknown argument '" .. arg[i] .. "'", 0)
  end
  i = i + 1
end
local t, loss = cases.epoch(name, limit)
print(("%s: one epoch in %.2f s, last loss %.4f"):format(name, t, loss))
print(("peak_rss %d"):format(cases.peak_rss()))
