-- Generated straight-line programs for the differential tests (test_compile.lua's against
-- eager execution, test_export.lua's against a loaded graph): a deterministic stream of
-- choices, independent of dl's, and the pointwise expressions a program picks from.
local M = {}

-- rand(n): 1..n from an LCG seeded with `seed` (its high bits: an LCG's low bits repeat).
function M.stream(seed)
  local rng = seed
  return function(n)
    rng = (rng * 1103515245 + 12345) % 2147483648
    return math.floor(rng / 65536) % n + 1
  end
end

-- Each a format of the operands' names (%s) and, for `scalar`, a Lua number (%g): every
-- op in the domain it is defined on for any operand.
M.unary = { "dl.tanh(%s)", "dl.sigmoid(%s)", "dl.abs(%s)", "(-%s)", "dl.relu(%s)", "dl.sin(%s)",
            "dl.exp(%s * 0.1)", "dl.sqrt(dl.abs(%s) + 1)", "dl.log1p(dl.abs(%s))", "dl.floor(%s)",
            "dl.gelu(%s)", "dl.erf(%s)", "dl.softplus(%s)", "dl.clamp(%s, -0.5, 0.7)" }
M.binary = { "(%s + %s)", "(%s - %s)", "(%s * %s)", "(%s / (dl.abs(%s) + 1))", "dl.maximum(%s, %s)",
             "dl.minimum(%s, %s)", "dl.atan2(%s, %s)", "dl.where(%s:gt(0), %s, 0.5)" }
M.scalar = { "(%s * %g)", "(%s + %g)", "(%s - %g)", "(%s ^ 2)", "(%s %% 1.5)", "(%s / %g)", "(0.5 - %s * %g)" }

-- A pointwise expression of `kind` ("unary", "binary" or "scalar") over operands pick()
-- names, its choices from rand.
function M.pointwise(kind, rand, pick)
  if kind == "unary" then return string.format(M.unary[rand(#M.unary)], pick()) end
  if kind == "binary" then return string.format(M.binary[rand(#M.binary)], pick(), pick()) end
  return string.format(M.scalar[rand(#M.scalar)], pick(), (rand(9) - 5) / 4 + 0.1)
end

return M
