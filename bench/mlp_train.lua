-- The MLP training run whose peak memory bench/run.lua measures (its `mlpmem` row): a
-- fresh process loads Fashion-MNIST, builds the 784-256-10 model and trains it for one
-- epoch (bench/cases.lua), as `python3 bench/torch_ref.py train-mlp` does for PyTorch.
-- The last line is the process's own peak RSS (VmHWM), which the harness reads.
--   dlua bench/mlp_train.lua [--limit N]     (N: train on the first N images only)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local cases = require("cases")

local limit = nil
if arg[1] == "--limit" then limit = assert(tonumber(arg[2]), "--limit needs a number") end
local t, loss = cases.epoch("mlp", limit)
print(("mlp: one epoch in %.2f s, last loss %.4f"):format(t, loss))
print(("peak_rss %d"):format(cases.peak_rss()))
