-- The script of examples/game_host.c: particles falling under gravity and bouncing
-- on the floor y = 0, updated in place in the host's buffers. Returns how many
-- particles touched the floor this frame.
local G = -9.81

function step(pos, vel, dt)
  vel:select(2, 2):add_(G * dt)           -- column 2 is y
  pos:add_(vel * dt)
  local y = pos:select(2, 2)
  local below = y:lt(0)
  local vy = vel:select(2, 2)
  vy:copy_(dl.where(below, vy:abs() * 0.8, vy))   -- bounce, losing energy
  y:copy_(dl.where(below, y:abs(), y))
  return below:sum():item()
end
