-- dlua.aliases: PyTorch's other spellings of what dlua already has, for code moved over
-- from it (methods, and dl.* where PyTorch has the function; loaded when first used):
--
--   x:clamp_min(lo), x:clamp_max(hi)        x:clamp(lo), x:clamp(nil, hi)
--   x:swapaxes(a, b), x:swapdims(a, b)      x:transpose(a, b)
--   x:movedim(from, to)                     dims (a number or a list) moved to positions
--   x:type_as(y)                            x:to(y.dtype)
--   x:new_zeros(shape), x:new_ones(shape), x:new_full(shape, v), x:new_tensor(data)
--                                           x's dtype and device
--   x:uniform_([a, b]), x:normal_([mean, std])   dl.nn.init.uniform_(x, a, b), normal_
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg = core.raise, core.bad_arg
local methods, dl = T.methods, T.dl
local type, ipairs = type, ipairs

local check = T.check_tensor   -- (op, x): an error naming op unless x is a tensor

function methods.clamp_min(x, lo) check("clamp_min", x) return x:clamp(lo, nil) end
function methods.clamp_max(x, hi) check("clamp_max", x) return x:clamp(nil, hi) end
function methods.swapaxes(x, a, b) check("swapaxes", x) return x:transpose(a, b) end
methods.swapdims = methods.swapaxes

-- The dims of `from` (a number or a list) go to the positions of `to` (as many), the
-- others keep their order in the places left, as numpy's moveaxis.
function methods.movedim(x, from, to)
  local op = "movedim"
  check(op, x)
  local n = x:dim()
  local function list(v, what)
    local l = type(v) == "number" and { v } or v
    if type(l) ~= "table" then bad_arg(op, what .. " (a dim or a list of dims)", v) end
    local out, seen = {}, {}
    for i, d in ipairs(l) do
      d = core.positive_dim(op, d, n)
      if seen[d] then raise(op .. ": dimension " .. d .. " repeats in " .. what) end
      seen[d], out[i] = true, d
    end
    return out
  end
  local src, dst = list(from, "source"), list(to, "destination")
  if #src ~= #dst then
    raise(op .. ": " .. #src .. " source dims for " .. #dst .. " destinations")
  end
  local order, placed, moved = {}, {}, {}
  for i, d in ipairs(dst) do order[d], moved[src[i]] = src[i], true end
  local rest = {}
  for d = 1, n do if not moved[d] then rest[#rest + 1] = d end end
  local k = 1
  for pos = 1, n do
    if order[pos] == nil then
      order[pos] = rest[k]
      k = k + 1
    end
    placed[pos] = order[pos]
  end
  return x:permute(placed)
end
dl.movedim, dl.swapaxes, dl.swapdims = methods.movedim, methods.swapaxes, methods.swapdims

function methods.type_as(x, y)
  check("type_as", x)
  check("type_as", y)
  return x:to(y.dtype)
end

local function like(x) return { dtype = x.dtype, device = x.device } end
function methods.new_zeros(x, shape) check("new_zeros", x) return dl.zeros(shape, like(x)) end
function methods.new_ones(x, shape) check("new_ones", x) return dl.ones(shape, like(x)) end
function methods.new_full(x, shape, v) check("new_full", x) return dl.full(shape, v, like(x)) end
function methods.new_tensor(x, data) check("new_tensor", x) return dl.tensor(data, like(x)) end

function methods.uniform_(x, a, b) check("uniform_", x) return dl.nn.init.uniform_(x, a, b) end
function methods.normal_(x, mean, std) check("normal_", x) return dl.nn.init.normal_(x, mean, std) end

return {}
