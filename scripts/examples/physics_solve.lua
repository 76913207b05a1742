-- A differentiable physics toy of the kind a game script writes: a rope of masses on
-- springs hangs from a pin and swings under gravity, integrated with implicit Euler
-- (each step solves a linear system with dl.linalg.solve). A controller pushes the
-- rope's last mass; dl.grad differentiates the whole simulation, through every solve,
-- and L-BFGS finds the pushes that bring the last mass to a target at the final step with
-- the least effort.
--
-- The dynamics are linear in the pushes, so the best pushes also follow in closed form:
-- the final position is c + G u (G = dl.jacobian of the simulation), and minimising
-- |c + G u - target|^2 + lambda |u|^2 is the linear system (G^T G + lambda I) u =
-- G^T (target - c). The script checks that gradient descent reaches that optimum.
--
--   dlua scripts/examples/physics_solve.lua [--quick] [--steps N]
local dl = require("dlua")
local L = dl.linalg

local quick, iters = false, 10
local args = arg or {}
for i = 1, #args do
  if args[i] == "--quick" then quick, iters = true, 2 end
  if args[i] == "--steps" then iters = assert(tonumber(args[i + 1]), "--steps needs a number") end
end

local f64 = { dtype = "float64" }
local N, T, h = 8, 40, 0.05            -- masses, time steps, step length (s)
local k, damping, mass = 60.0, 0.4, 0.1  -- spring stiffness, damping, each mass
local gravity = dl.tensor({ 0, -9.81 }, f64)
local target = dl.tensor({ 0.45, -0.35 }, f64)   -- where the last mass should be at time T h
local lambda = 1e-6                              -- the price of a push

-- Springs between neighbours and from the pin (at the origin) to the first mass: the
-- stiffness matrix K is k times the chain's Laplacian (with the pin's end grounded).
local Kt, restt = {}, {}
for i = 1, N do
  Kt[i] = {}
  for j = 1, N do Kt[i][j] = 0 end
  Kt[i][i] = (i < N) and 2 * k or k
  if i > 1 then Kt[i][i - 1] = -k end
  if i < N then Kt[i][i + 1] = -k end
  restt[i] = { 0, -0.1 * i }   -- at rest the rope hangs straight down, 0.1 apart
end
local K, rest = dl.tensor(Kt, f64), dl.tensor(restt, f64)
-- Implicit Euler: (M + h c I + h^2 K) v' = M v + h (f(x) + u), x' = x + h v'.
local A = dl.eye(N, f64) * (mass + h * damping) + K * (h * h)
local last = dl.zeros(N, 1, f64)
last[N][1] = 1                     -- the pushes act on the last mass

-- The last mass's position after T steps of pushes u (T, 2), from rest.
local function simulate(u)
  local x, v = rest, dl.zeros(N, 2, f64)
  for t = 1, T do
    local force = -K:matmul(x - rest) + gravity * mass + last:matmul(u[t]:unsqueeze(1))
    v = L.solve(A, v * mass + force * h)
    x = x + v * h
  end
  return x[N]
end

local function loss(u)
  local miss = simulate(u) - target
  return (miss * miss):sum() + (u * u):sum() * lambda
end

-- Gradient-based search through the simulation: each minimize call is up to 20
-- L-BFGS iterations with a strong Wolfe line search.
local u = dl.Variable(dl.zeros(T, 2, f64), "pushes")
local opt = dl.optim.LBFGS{ lr = 1, max_iter = 20, history_size = 20, line_search_fn = "strong_wolfe" }
local first = loss(u):item()
for i = 1, iters do
  opt:minimize(function() return loss(u) end, { u })
  print(("round %2d  loss %.8f"):format(i, loss(u):item()))
end
local found = loss(u):item()

-- The optimum in closed form: G = d(final position)/d(pushes), a (2, 2T) matrix.
local zero = dl.zeros(T, 2, f64)
local c = simulate(zero)
local G = dl.jacobian(simulate)(zero):reshape(2, 2 * T)
local best = L.solve(G:t():matmul(G) + dl.eye(2 * T, f64) * lambda, G:t():matmul(target - c)):reshape(T, 2)
local optimum = loss(best):item()
local reached = simulate(u)
print(("loss: %.6f at rest, %.6f after %d L-BFGS rounds, %.6f at the optimum"):format(first, found, iters, optimum))
local miss = (reached - target):norm():item()
print(("the last mass ends at (%.4f, %.4f), %.4f from the target (%.2f, %.2f)"):format(reached[1], reached[2], miss,
                                                                                      target[1], target[2]))
assert(found < first / 50, "gradient descent did not reduce the loss 50-fold")
assert(miss < 0.02, "the last mass missed the target")
assert(found <= optimum * (quick and 1.05 or 1.001), "gradient descent stopped short of the optimum")
print("ok")
