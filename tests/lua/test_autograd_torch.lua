-- Values, gradients and second derivatives of composite functions against PyTorch
-- (tests/lua/ref/autograd_ref.lua, made by tests/ref/gen_autograd_refs.py), in float64.
local dl = require("dlua")
local H = require("harness")

-- The reference file's functions refer to a global `dl`.
_G.dl = dl
local cases = dofile((arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or ".") .. "/ref/autograd_ref.lua")

local function input(spec)
  return dl.tensor(spec.values, { dtype = "float64" }):view(spec.shape)
end

local function flat(t) return t:contiguous():view(-1):totable() end

for _, c in ipairs(cases) do
  H.test(c.name, function()
    local xs, nums = {}, {}
    for i, spec in ipairs(c.inputs) do xs[i] = input(spec); nums[i] = i end
    H.near(c.f(unpack(xs)):item(), c.value, 1e-10, "value")
    local grads = { dl.grad(c.f, nums)(unpack(xs)) }
    for i = 1, #xs do H.near(flat(grads[i]), c.grads[i], 1e-9, "gradient " .. i) end
    local function gsum(...)
      local gs = { dl.grad(c.f, nums)(...) }
      local s = gs[1]:sum()
      for i = 2, #gs do s = s + gs[i]:sum() end
      return s
    end
    local second = { dl.grad(gsum, nums)(unpack(xs)) }
    for i = 1, #xs do H.near(flat(second[i]), c.second[i], 1e-8, "second derivative " .. i) end
  end)
end

H.run()
