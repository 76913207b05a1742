-- dl.special: torch.special's functions against PyTorch float64 (tests/ref/gen_breadth_refs.py,
-- gen_special_functions), their tails and gradients, and the other names.
local dl = require("dlua")
local H = require("harness")
local R = require("ref.breadth_ref")
local S = dl.special

H.test("ndtr, log_ndtr, ndtri, erfcx, entr and xlog1py match PyTorch float64, tails and gradients", function()
  local FN = { ndtr = S.ndtr, log_ndtr = S.log_ndtr, ndtri = S.ndtri, erfcx = S.erfcx, entr = S.entr, xlog1py = S.xlog1py }
  H.eq(H.ref_cases(R.special_functions, FN, 1e-12, 1e-9), 6)
  -- inverse pairs and limits
  local p = dl.tensor({ 1e-300, 1e-50, 0.01, 0.5, 0.9 }, { dtype = "float64" })
  H.near(S.ndtr(S.ndtri(p)):totable(), p:totable(), 1e-12)
  H.values(S.ndtri(dl.tensor({ 0, 1 }, { dtype = "float64" })), { -math.huge, math.huge })
  local bad = S.ndtri(dl.tensor({ -0.1, 1.5 })):totable()
  H.ok(bad[1] ~= bad[1] and bad[2] ~= bad[2])
  H.eq(S.entr(dl.tensor({ -1.0 })):item(), -math.huge)
  H.eq(S.xlog1py(dl.tensor({ 0.0 }), dl.tensor({ -1.0 })):item(), 0)   -- (0 log 0, as PyTorch's)
  H.eq(S.expit, dl.sigmoid)
  H.near(S.gammaln(dl.tensor({ 5.0 })):item(), math.log(24), 1e-6)
  H.near(S.multigammaln(dl.tensor({ 2.5 }), 2):item(), dl.mvlgamma(dl.tensor({ 2.5 }), 2):item(), 1e-6)
  H.raises(function() S.ndtr("x") end, "special.ndtr: expected a tensor")
end)

H.run()
