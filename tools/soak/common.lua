-- Shared by the soak scripts (tools/soak/mlp.lua, graphs.lua): flags, resident-memory
-- samples, and the verdict on whether memory stayed flat after warm-up.
--
--   local soak = dofile(arg[0]:match("^(.-)[^/]*$") .. "common.lua")
--   local flags = soak.flags({ steps = 100000 })
--   local mem = soak.Monitor(flags)
--   for step = 1, flags.steps do ... mem:sample(step) end
--   mem:verdict()        -- prints the figures; exits 1 when memory grew
local dl = require("dlua")

local M = {}

-- --name value pairs over `defaults` (numbers converted); --help prints them.
function M.flags(defaults)
  local flags = {}
  for k, v in pairs(defaults) do flags[k] = v end
  local i = 1
  while arg[i] do
    local name = arg[i]:match("^%-%-([%w_]+)$")
    if not name or flags[name] == nil then
      local known = {}
      for k, v in pairs(defaults) do known[#known + 1] = "--" .. k .. " " .. tostring(v) end
      table.sort(known)
      error("unknown argument " .. tostring(arg[i]) .. "; flags: " .. table.concat(known, ", "), 0)
    end
    local v = arg[i + 1]
    if v == nil then error("--" .. name .. " needs a value", 0) end
    flags[name] = type(defaults[name]) == "number" and assert(tonumber(v), "--" .. name .. ": a number") or v
    i = i + 2
  end
  return flags
end

-- Resident set size in bytes, from the kernel's own count.
function M.rss()
  local f = io.open("/proc/self/status", "r")
  if not f then return 0 end
  local text = f:read("*a")
  f:close()
  return (tonumber(text:match("VmRSS:%s*(%d+)")) or 0) * 1024
end

local function mb(b) return b / 2^20 end

-- Samples every flags.every steps; warm-up is the first flags.warmup steps. Memory is
-- flat when no sample after warm-up exceeds the warm-up's last sample by more than
-- flags.tolerance_mb (allocator and collector noise), and the least-squares slope
-- over the samples after warm-up is reported too (bytes per 1000 steps).
function M.Monitor(flags)
  local self = { samples = {}, flags = flags, started = os.time(), clock = os.clock() }
  local csv = flags.csv ~= "" and flags.csv and assert(io.open(flags.csv, "w")) or nil
  if csv then csv:write("step,rss_mb,tensor_in_use_mb,tensor_cached_mb,seconds\n") end
  function self:sample(step, force)
    if step % flags.every ~= 0 and not force then return end
    local s = dl.memory_stats()
    local row = { step = step, rss = M.rss(), in_use = s.in_use or 0, cached = s.cached or 0,
                  t = os.time() - self.started }
    self.samples[#self.samples + 1] = row
    if csv then
      csv:write(("%d,%.2f,%.2f,%.2f,%d\n"):format(step, mb(row.rss), mb(row.in_use), mb(row.cached), row.t))
      csv:flush()
    end
    if flags.verbose ~= 0 then
      print(("step %7d  rss %8.1f MB  tensors %7.1f MB in use, %7.1f MB cached  %5d s")
            :format(step, mb(row.rss), mb(row.in_use), mb(row.cached), row.t))
    end
  end
  function self:verdict(what)
    if csv then csv:close() end
    local base, peak, last, after = nil, 0, nil, {}
    for _, r in ipairs(self.samples) do
      if r.step <= flags.warmup then base = r
      else
        after[#after + 1] = r
        peak = math.max(peak, r.rss)
        last = r
      end
    end
    if not base or #after < 2 then
      print(what .. ": too few samples after warm-up to judge (raise --steps or lower --every)")
      os.exit(1)
    end
    -- least-squares slope of rss over step, after warm-up
    local n, sx, sy, sxx, sxy = #after, 0, 0, 0, 0
    for _, r in ipairs(after) do
      sx, sy = sx + r.step, sy + r.rss
      sxx, sxy = sxx + r.step * r.step, sxy + r.step * r.rss
    end
    local slope = (n * sxy - sx * sy) / math.max(n * sxx - sx * sx, 1)
    local growth = peak - base.rss
    local flat = growth <= flags.tolerance_mb * 2^20
    print(("%s: %d steps in %d s; rss %.1f MB after warm-up (step %d), peak %.1f MB after it, "
           .. "%.1f MB at the end; growth %+.1f MB (tolerance %g MB), slope %+.3f MB per 1000 steps; "
           .. "tensor memory in use at the end %.1f MB, cached %.1f MB: %s")
          :format(what, last.step, os.time() - self.started, mb(base.rss), base.step, mb(peak),
                  mb(last.rss), mb(growth), flags.tolerance_mb, mb(slope * 1000), mb(last.in_use),
                  mb(last.cached), flat and "FLAT" or "GREW"))
    os.exit(flat and 0 or 1)
  end
  return self
end

return M
