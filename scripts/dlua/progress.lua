-- dlua.progress: progress bars (docs/training.md).
--
--   for i in dl.progress(1000, {desc = "train"}) do ... end
--   for i, x in dl.progress({"a", "b", "c"}) do ... end          -- like ipairs
--   for x, y in dl.progress(ds:iter(), {total = n}) do ... end    -- any iterator
--   local bar = dl.progress(n)                                     -- by hand
--   bar:update(); bar:set_postfix({loss = 0.25}); bar:close()
--
-- On a terminal (isatty through the C ABI) the bar is redrawn in place at most ten
-- times a second, sized to the terminal:
--   train:  45%|#############                | 450/1000 [00:12<00:15, 37.50it/s, loss=0.25]
-- Elsewhere (a log file, a pipe) it prints a plain line at each tenth of the total, or
-- every 30 seconds when the total is unknown, and a last line at the end.
local core = require("dlua.core")
core.own_source()

local C = core.C
local raise, bad_arg = core.raise, core.bad_arg
local dl = require("dlua.tensor").dl
local type, tostring, select, setmetatable, pairs = type, tostring, select, setmetatable, pairs
local sformat, srep, sgsub, supper, sfind = string.format, string.rep, string.gsub, string.upper,
  string.find
local concat, tsort = table.concat, table.sort
local floor, min, huge = math.floor, math.min, math.huge
local io_stdout, io_stderr = io and io.stdout, io and io.stderr
local getenv = os and os.getenv

local Bar = {}
Bar.__index = Bar

local function clock() return C.dl_monotonic_time() end

local function fmt_time(s)
  if s ~= s or s == huge then return "?" end
  s = floor(s + 0.5)
  local h, m = floor(s / 3600), floor(s / 60) % 60
  if h > 0 then return sformat("%d:%02d:%02d", h, m, s % 60) end
  return sformat("%02d:%02d", m, s % 60)
end

local function fmt_rate(r)
  if r <= 0 or r ~= r then return "?it/s" end
  if r < 1 then return sformat("%.2fs/it", 1 / r) end
  return sformat("%.2fit/s", r)
end

local function fmt_value(v)
  if type(v) == "number" then
    if v == floor(v) and v > -1e15 and v < 1e15 then return sformat("%d", v) end
    return sformat("%.4g", v)
  end
  if type(v) == "cdata" and dl.is_tensor(v) and v:numel() == 1 then return sformat("%.4g", v:item()) end
  return tostring(v)
end

local function utf8_terminal()
  if not getenv then return false end
  local loc = getenv("LC_ALL") or getenv("LC_CTYPE") or getenv("LANG") or ""
  return sfind(supper(loc), "UTF%-?8") ~= nil
end

-- ---- drawing -----------------------------------------------------------------------------------

function Bar:_text(width)
  local now = clock()
  local elapsed = now - self._start
  local rate = elapsed > 0 and self.n / elapsed or 0
  local desc = self.desc and (self.desc .. ": ") or ""
  local post = self._postfix and (", " .. self._postfix) or ""
  local total = self.total
  if not total then
    return sformat("%s%d [%s, %s%s]", desc, self.n, fmt_time(elapsed), fmt_rate(rate), post)
  end
  local frac = total > 0 and min(1, self.n / total) or 1
  local left = rate > 0 and (total - self.n) / rate or 1 / 0
  local pct = sformat("%3d%%", floor(frac * 100))
  local tail = sformat(" %d/%d [%s<%s, %s%s]", self.n, total, fmt_time(elapsed), fmt_time(left),
                       fmt_rate(rate), post)
  if not width then
    return sformat("%s%d/%d (%s) [%s elapsed, %s left, %s%s]", desc, self.n, total,
                   (sgsub(pct, "^%s+", "")), fmt_time(elapsed), fmt_time(left), fmt_rate(rate), post)
  end
  local bar_w = width - #desc - #pct - #tail - 2
  if bar_w < 5 then return desc .. pct .. tail end
  local fill = frac * bar_w
  local full = floor(fill)
  local bar
  if self._unicode then
    local parts = { " ", "▏", "▎", "▍", "▌", "▋", "▊", "▉" }
    local partial = full < bar_w and parts[floor((fill - full) * 8) + 1] or ""
    bar = srep("█", full) .. partial .. srep(" ", bar_w - full - (partial ~= "" and 1 or 0))
  else
    bar = srep("#", full) .. srep(" ", bar_w - full)
  end
  return desc .. pct .. "|" .. bar .. "|" .. tail
end

function Bar:_draw(final)
  local now = clock()
  if self._tty then
    if not final and now - self._last_draw < self.min_interval then return end
    local cols = C.dl_terminal_columns(self._fd)
    self._file:write("\r", self:_text((cols > 0 and cols or 80) - 1), "\27[K", final and "\n" or "")
    self._file:flush()
  else
    if not final then
      if self.total and self.total > 0 then
        local tenth = floor(10 * self.n / self.total)
        if tenth <= self._last_tenth then return end
        self._last_tenth = tenth
        if self.n >= self.total then return end   -- the final line says it
      elseif now - self._last_draw < 30 then
        return
      end
    end
    self._file:write(self:_text(nil), "\n")
    self._file:flush()
  end
  self._last_draw = now
end

-- ---- the public object ---------------------------------------------------------------------------

function Bar:update(k)
  if self._closed then raise("update: the progress bar is closed") end
  k = k or 1
  if type(k) ~= "number" then bad_arg("update", "a number of steps", k) end
  self.n = self.n + k
  self:_draw(false)
  return self
end

function Bar:set_postfix(p)
  if type(p) == "table" then
    local parts = {}
    for key, v in pairs(p) do parts[#parts + 1] = tostring(key) .. "=" .. fmt_value(v) end
    tsort(parts)
    self._postfix = concat(parts, ", ")
  elseif p == nil then
    self._postfix = nil
  else
    self._postfix = fmt_value(p)
  end
  return self
end

function Bar:close()
  if self._closed then return end
  self._closed = true
  self:_draw(true)
end

-- The generic-for protocol: `for ... in bar do`.
local function advance(self, first, ...)
  if first == nil then
    self:close()
    return nil
  end
  self._ctl = first
  self:update(1)
  return first, ...
end

Bar.__call = function(self)
  if self._closed then return nil end
  local kind = self._kind
  if kind == "count" then
    local i = self.n + 1
    if i > self.total then
      self:close()
      return nil
    end
    self:update(1)
    return i
  elseif kind == "array" then
    local i = self.n + 1
    local v = self._array[i]
    if v == nil then
      self:close()
      return nil
    end
    self:update(1)
    return i, v
  end
  return advance(self, self._f(self._s, self._ctl))
end

Bar.__tostring = function(self) return self:_text(nil) end

function dl.progress(what, ...)
  local nargs = select("#", ...)
  local opts, f, s, ctl
  if type(what) == "function" and nargs >= 2 then
    -- an (iterator, state, control) triple, as ipairs(t) or pairs(t) return
    s, ctl, opts = ...
    f = what
  else
    opts = ...
  end
  if opts ~= nil and type(opts) ~= "table" then bad_arg("progress", "an options table", opts) end
  opts = opts or {}
  local self = setmetatable({ n = 0, desc = opts.desc, total = opts.total,
                              min_interval = opts.min_interval or 0.1 }, Bar)
  if self.desc ~= nil and type(self.desc) ~= "string" then bad_arg("progress", "a string desc", self.desc) end
  if type(what) == "number" then
    if what ~= floor(what) or what < 0 then raise("progress: expected a count >= 0, got " .. tostring(what)) end
    self._kind, self.total = "count", what
  elseif type(what) == "function" then
    self._kind, self._f, self._s, self._ctl = "iterator", what, s, ctl
  elseif type(what) == "table" and type(what.iter) == "function" then
    -- a data set: iterate ds:iter(), its size as the total when it tells
    self._kind = "iterator"
    self._f, self._s, self._ctl = what:iter()
    if not self.total and type(what.size) == "function" then self.total = what:size() end
  elseif type(what) == "table" then
    self._kind, self._array = "array", what
    self.total = self.total or #what
  else
    bad_arg("progress", "a count, a table, an iterator or a data set", what)
  end
  if self.total ~= nil and (type(self.total) ~= "number" or self.total < 0) then
    raise("progress: total must be a number >= 0, got " .. tostring(self.total))
  end
  self._file = opts.file or io_stdout
  self._fd = self._file == io_stderr and 2 or 1
  self._tty = (self._file == io_stdout or self._file == io_stderr) and C.dl_isatty(self._fd) == 1
  if opts.tty ~= nil then self._tty = opts.tty and true or false end   -- for tests
  self._unicode = self._tty and utf8_terminal()
  self._start = clock()
  self._last_draw = -1e300
  self._last_tenth = 0
  if self._tty then self:_draw(false) end
  return self
end

return Bar
