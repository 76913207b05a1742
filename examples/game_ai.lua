-- The script of examples/game_host.cpp: a flock of agents steering towards a target,
-- written with tensors. The host owns the positions and velocities (float32, N x 2)
-- and hands them over every frame without copies; this script updates them in place
-- and answers which agent is closest to the target and how far the flock is.
local GAIN, BLEND = 2.0, 0.1   -- desired speed per unit of distance; steering rate

function update(pos, vel, target, dt)
  local d = target - pos                        -- (N, 2), broadcasting the (2) target
  local dist = (d * d):sum(2, true):sqrt()      -- (N, 1)
  -- Steer towards the desired velocity (arrival: slower when close).
  vel:mul_(1 - BLEND):add_(d * (GAIN * BLEND)) -- in place: the host's own buffer
  pos:add_(vel * dt)
  return dist:argmin():item(), dist:mean():item()
end

-- A bug the host survives: it gets an error with the script's line and traceback.
function broken(pos)
  local square = pos:matmul(pos)
  return square
end
