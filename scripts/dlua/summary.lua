-- dlua.summary: TensorBoard event files (docs/training.md).
--
--   local w = dl.summary.writer("runs/exp1")
--   for step = 1, 1000 do
--     ...
--     w:scalar("loss", loss, step)              -- a number or a one-element tensor
--     if step % 100 == 0 then w:histogram("fc1/weight", net.fc1.weight, step) end
--   end
--   w:close()                                    -- flushed and closed (also when collected)
--
-- TensorFlow's style works too: w:as_default(function() dl.summary.scalar("loss", l, step) end).
-- Files are named events.out.tfevents.<time>.<host>.<pid>.<n> and written by io/events.h
-- (TFRecord framing, CRC32C, hand-encoded Event protobufs); records are flushed every
-- 10 records or 2 seconds, by w:flush() and by w:close().
local ffi = require("ffi")
local core = require("dlua.core")
local T = require("dlua.tensor")
local hid = T.hid
local IO = require("dlua.io")
core.own_source()

local C = core.C
local raise, raise_last, bad_arg = core.raise, core.raise_last, core.bad_arg
local is_tensor = T.is_tensor
local dl = T.dl
local type, tostring, pcall, error, setmetatable, getmetatable, select, unpack =
  type, tostring, pcall, error, setmetatable, getmetatable, select, unpack
local ffi_new, ffi_string, ffi_gc = ffi.new, ffi.string, ffi.gc
local floor = math.floor

dl.summary = dl.summary or {}
local summary = dl.summary

local Writer = {}
Writer.__index = Writer

local function check_writer(op, w)
  if type(w) ~= "table" or getmetatable(w) ~= Writer then
    raise(op .. ": expected a summary writer (call it as w:" .. op .. "(...))")
  end
  if w._closed then raise(op .. ": the summary writer is closed") end
end

local function tag_arg(op, tag)
  if type(tag) ~= "string" then bad_arg(op, "a tag (a string)", tag) end
  if tag == "" then raise(op .. ": empty tag") end
  return tag
end

local function step_arg(op, step)
  if step == nil then return 0 end
  if is_tensor(step) then step = step:item() end
  if type(step) ~= "number" then bad_arg(op, "an integer step", step) end
  if step ~= floor(step) or step >= 2 ^ 63 or step < -2 ^ 63 then
    raise(op .. ": step must be an integer, got " .. tostring(step))
  end
  return step
end

function summary.writer(logdir, opts)
  IO.path_arg("summary.writer", logdir)
  opts = core.options("summary.writer", opts, { filename_suffix = true })
  local suffix = opts.filename_suffix or ""
  if type(suffix) ~= "string" then bad_arg("summary.writer", "a string filename_suffix", suffix) end
  local id = C.dl_summary_open(logdir, suffix)
  if id == 0 then raise_last() end
  local w = setmetatable({ logdir = logdir, _id = id, _closed = false }, Writer)
  -- Closes the file when the writer is collected without close().
  w._owner = ffi_gc(ffi_new("struct dl_io_object", id), C.dl_io_release)
  w.path = ffi_string(C.dl_summary_path(id))
  return w
end

function Writer:scalar(tag, value, step)
  check_writer("scalar", self)
  tag_arg("scalar", tag)
  if is_tensor(value) then
    if value:numel() ~= 1 then
      raise("scalar: expected a number or a one-element tensor, got a tensor of shape "
            .. T.shape_str(value.shape))
    end
    value = value:item()
  elseif type(value) ~= "number" then
    bad_arg("scalar", "a number or a one-element tensor", value)
  end
  if C.dl_summary_scalar(self._id, tag, #tag, value, step_arg("scalar", step)) ~= 0 then raise_last() end
  return self
end

function Writer:histogram(tag, values, step, opts)
  check_writer("histogram", self)
  tag_arg("histogram", tag)
  if type(values) == "table" then values = dl.tensor(values) end
  if not is_tensor(values) then bad_arg("histogram", "a tensor or a table of numbers", values) end
  opts = core.options("histogram", opts, { buckets = true })
  local buckets = opts.buckets or 30
  if type(buckets) ~= "number" or buckets ~= floor(buckets) or buckets < 1 or buckets > 10000 then
    raise("histogram: buckets must be an integer in 1..10000, got " .. tostring(buckets))
  end
  local st = step_arg("histogram", step)
  if C.dl_summary_histogram(self._id, tag, #tag, hid(values), st, buckets) ~= 0 then raise_last() end
  return self
end

function Writer:flush()
  check_writer("flush", self)
  if C.dl_summary_flush(self._id) ~= 0 then raise_last() end
  return self
end

-- Closing twice is fine; using a closed writer is an error.
function Writer:close()
  if type(self) ~= "table" or getmetatable(self) ~= Writer then
    raise("close: expected a summary writer (call it as w:close())")
  end
  if self._closed then return end
  self._closed = true
  local rc = C.dl_summary_close(self._id)
  local msg = rc ~= 0 and ffi_string(C.dl_last_error()) or nil
  ffi_gc(self._owner, nil)
  C.dl_io_release_id(self._id)
  if msg then raise(msg) end
end

Writer.__tostring = function(self)
  return "SummaryWriter(" .. self.path .. (self._closed and ", closed)" or ")")
end

-- ---- the default writer (TensorFlow's as_default) ---------------------------------------------

local default = nil

function Writer:set_as_default()
  check_writer("set_as_default", self)
  default = self
  return self
end

local function pack(...) return { n = select("#", ...), ... } end

-- Runs fn(...) with this writer as the default, restoring the previous one afterwards.
function Writer:as_default(fn, ...)
  check_writer("as_default", self)
  if type(fn) ~= "function" then bad_arg("as_default", "a function", fn) end
  local previous = default
  default = self
  local r = pack(pcall(fn, ...))
  default = previous
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

local function default_writer(op)
  if not default then
    raise(op .. ": no default summary writer (use w:as_default(function() ... end) or "
          .. "w:set_as_default())")
  end
  return default
end

function summary.scalar(tag, value, step) return default_writer("summary.scalar"):scalar(tag, value, step) end
function summary.histogram(tag, values, step, opts)
  return default_writer("summary.histogram"):histogram(tag, values, step, opts)
end
function summary.flush() if default then default:flush() end end

return Writer
