-- dlua.einsum: dl.einsum(spec, a, b, ...), Einstein summation as NumPy's and PyTorch's:
--
--   dl.einsum("ij,jk->ik", a, b)           -- a matrix product
--   dl.einsum("bhqd,bhkd->bhqk", q, k)     -- attention scores
--   dl.einsum("...ij,...jk", a, b)         -- batched, the batch dims broadcast
--   dl.einsum("ii->i", a)                  -- a diagonal; "ii" its trace
--
-- Without "->" the output is the labels that appear once, in alphabetical order (after
-- the ellipsis dims). Operands are contracted two at a time, left to right, each pair
-- as one batched matrix product: the labels both share and the output (or a later
-- operand) needs become the batch, the shared others the contracted dim, the rest the
-- rows and columns; labels only one operand has and nothing needs are summed first.
-- Everything is the engine's differentiable ops (permute, reshape, matmul, sum,
-- diagonal), so gradients of any order come with it.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise = core.raise
local is_tensor, dl = T.is_tensor, T.dl
local type, tostring, tonumber, ipairs, pairs, select = type, tostring, tonumber, ipairs, pairs, select
local sort, concat = table.sort, table.concat

local OP = "einsum"

-- Labels of one operand's term, with "..." expanded to labels "1".."k" for its k
-- leading broadcast dims (aligned from the right across operands).
local function term_labels(term, ndim, which)
  local labels, ell = {}, nil
  local i = 1
  while i <= #term do
    local c = term:sub(i, i)
    if term:sub(i, i + 2) == "..." then
      if ell then raise(OP .. ": " .. which .. " has two ellipses") end
      ell = #labels + 1
      i = i + 3
    elseif c:match("%a") then
      labels[#labels + 1] = c
      i = i + 1
    elseif c:match("%s") then
      i = i + 1
    else
      raise(OP .. ": unexpected character '" .. c .. "' in " .. which)
    end
  end
  if ell == nil then
    if ndim ~= nil and #labels ~= ndim then
      raise(OP .. ": " .. which .. " has " .. #labels .. " labels for a tensor of " .. ndim .. " dims")
    end
    return labels, 0
  end
  local k = ndim and ndim - #labels or 0
  if k < 0 then raise(OP .. ": " .. which .. " has more labels than its tensor's " .. ndim .. " dims") end
  local out = {}
  for j = 1, ell - 1 do out[#out + 1] = labels[j] end
  for j = 1, k do out[#out + 1] = tostring(j) end   -- broadcast dims, numbered from the right edge
  for j = ell, #labels do out[#out + 1] = labels[j] end
  return out, k
end

-- The lists one after the other, as one list.
local function join(...)
  local out = {}
  for k = 1, select("#", ...) do
    for _, v in ipairs((select(k, ...))) do out[#out + 1] = v end
  end
  return out
end

local function index_of(list)
  local m = {}
  for i, v in ipairs(list) do m[v] = i end
  return m
end

-- x with its dims put in the order of `want` (a permutation of `have`).
local function permuted(x, have, want)
  local pos = index_of(have)
  local perm, same = {}, true
  for i, l in ipairs(want) do
    perm[i] = pos[l]
    same = same and perm[i] == i
  end
  if same then return x end
  return x:permute(perm)
end

-- The diagonal over a repeated label, one pair at a time: x:diagonal(0, p, q) keeps the
-- other dims in order and puts the diagonal last, so the label moves to the end.
local function take_diagonals(x, labels)
  while true do
    local first, p, q = {}, nil, nil
    for i, l in ipairs(labels) do
      if first[l] then p, q = first[l], i break end
      first[l] = i
    end
    if not p then return x, labels end
    local n = x:size(p)
    if x:size(q) ~= n then
      raise(OP .. ": label " .. labels[p] .. " stands for dims of sizes " .. n .. " and " .. x:size(q))
    end
    local rest = {}
    for i, l in ipairs(labels) do if i ~= p and i ~= q then rest[#rest + 1] = l end end
    x = x:diagonal(0, p, q)
    rest[#rest + 1] = labels[p]
    labels = rest
  end
end

-- Sums out the dims whose labels `keep` does not hold.
local function sum_unneeded(x, labels, keep)
  local dims, left = {}, {}
  for i, l in ipairs(labels) do
    if keep[l] then left[#left + 1] = l else dims[#dims + 1] = i end
  end
  if #dims == 0 then return x, labels end
  for k = #dims, 1, -1 do x = x:sum(dims[k]) end
  return x, left
end

-- The size of each label, checked across operands: a dim of size 1 gives way, a
-- labelled one as the ellipsis's (PyTorch broadcasts both).
local function label_sizes(ops, terms)
  local size = {}
  for k, x in ipairs(ops) do
    for i, l in ipairs(terms[k]) do
      local n = x:size(i)
      local s = size[l]
      if s == nil or s == 1 then
        size[l] = n
      elseif n ~= s and n ~= 1 then
        if l:match("^%d") then   -- (the ellipsis's labels are internal: name the dim)
          raise(OP .. ": the dims of '...' do not broadcast: operand " .. k .. "'s dim " .. i .. " has size " .. n
                .. " where an earlier operand's has " .. s)
        end
        raise(OP .. ": label " .. l .. " stands for sizes " .. s .. " and " .. n .. " (operand " .. k .. ")")
      end
    end
  end
  return size
end

-- Contracts a (labels la) with b (labels lb), keeping the labels in `keep`.
local function contract(a, la, b, lb, keep, size)
  local inb, ina = index_of(lb), index_of(la)
  local batch, contr, afree, bfree = {}, {}, {}, {}
  for _, l in ipairs(la) do
    if inb[l] then
      if keep[l] then batch[#batch + 1] = l else contr[#contr + 1] = l end
    else
      afree[#afree + 1] = l
    end
  end
  for _, l in ipairs(lb) do if not ina[l] then bfree[#bfree + 1] = l end end
  local function prod(list)
    local p = 1
    for _, l in ipairs(list) do p = p * size[l] end
    return p
  end
  -- broadcast dims of size 1 grow to the label's size (a view)
  local function grown(x, labels)
    local shape, need = {}, false
    for i, l in ipairs(labels) do
      shape[i] = size[l]
      need = need or x:size(i) ~= size[l]
    end
    return need and x:expand(shape) or x
  end
  a, b = grown(a, la), grown(b, lb)
  local A = permuted(a, la, join(batch, afree, contr))
  local B = permuted(b, lb, join(batch, contr, bfree))
  local nb, m, k, n = prod(batch), prod(afree), prod(contr), prod(bfree)
  local y = A:reshape(nb, m, k):matmul(B:reshape(nb, k, n))
  local labels, shape = join(batch, afree, bfree), {}
  for i, l in ipairs(labels) do shape[i] = size[l] end
  return y:reshape(shape), labels
end

function dl.einsum(spec, ...)
  if type(spec) ~= "string" then core.bad_arg(OP, "a spec string", spec) end
  local n = select("#", ...)
  local ops = { ... }
  if n == 1 and type(ops[1]) == "table" and not is_tensor(ops[1]) then ops = ops[1]; n = #ops end
  if n == 0 then raise(OP .. ": expected at least one operand") end
  local lhs, rhs = spec:match("^(.-)%->(.*)$")
  if not lhs then lhs = spec end
  local terms_text = {}
  for t in (lhs .. ","):gmatch("(.-),") do terms_text[#terms_text + 1] = t end
  if #terms_text ~= n then
    raise(OP .. ": the spec '" .. spec .. "' has " .. #terms_text .. " operand terms for " .. n .. " tensors")
  end
  local terms, ell_dims = {}, 0
  for k = 1, n do
    if not is_tensor(ops[k]) then raise(OP .. ": operand " .. k .. " is a " .. core.typename(ops[k]) .. ", expected a tensor") end
    local labels, e = term_labels(terms_text[k], ops[k]:dim(), "operand " .. k .. " ('" .. terms_text[k] .. "')")
    terms[k] = labels
    if e > ell_dims then ell_dims = e end
  end
  -- The ellipsis labels are numbered from the right edge of the broadcast dims: make
  -- an operand with fewer of them use the last numbers, as broadcasting aligns them.
  for k = 1, n do
    local e = 0
    for _, l in ipairs(terms[k]) do if l:match("^%d") then e = e + 1 end end
    if e < ell_dims then
      for i, l in ipairs(terms[k]) do
        if l:match("^%d") then terms[k][i] = tostring(tonumber(l) + ell_dims - e) end
      end
    end
  end
  local out
  if rhs then
    -- the output's "..." stands for every broadcast dim, numbered as the operands' are
    local ndim = nil
    if rhs:find("...", 1, true) then ndim = select(2, rhs:gsub("%a", "")) + ell_dims end
    out = term_labels(rhs, ndim, "the output")
  else
    local count = {}
    for _, labels in ipairs(terms) do
      for _, l in ipairs(labels) do count[l] = (count[l] or 0) + 1 end
    end
    local letters = {}
    for l, c in pairs(count) do if c == 1 and l:match("%a") then letters[#letters + 1] = l end end
    sort(letters)
    out = {}
    for j = 1, ell_dims do out[#out + 1] = tostring(j) end
    for _, l in ipairs(letters) do out[#out + 1] = l end
  end
  local seen_in = {}
  for _, labels in ipairs(terms) do for _, l in ipairs(labels) do seen_in[l] = true end end
  local seen_out = {}
  for _, l in ipairs(out) do
    if not seen_in[l] then raise(OP .. ": output label " .. l .. " appears in no operand") end
    if seen_out[l] then raise(OP .. ": output label " .. l .. " appears twice") end
    seen_out[l] = true
  end
  local xs = {}
  for k = 1, n do xs[k], terms[k] = take_diagonals(ops[k], terms[k]) end
  local size = label_sizes(xs, terms)
  -- What each step must keep: the output's labels and those of the operands after it.
  local function needed_after(k)
    local keep = {}
    for _, l in ipairs(out) do keep[l] = true end
    for j = k + 1, n do for _, l in ipairs(terms[j]) do keep[l] = true end end
    return keep
  end
  local acc, la = sum_unneeded(xs[1], terms[1], (function()
    local keep = needed_after(1)
    for j = 2, n do for _, l in ipairs(terms[j]) do keep[l] = true end end
    return keep
  end)())
  for k = 2, n do
    local keep = needed_after(k)
    local both = {}
    for l in pairs(keep) do both[l] = true end
    for _, l in ipairs(la) do both[l] = true end
    local b, lb = sum_unneeded(xs[k], terms[k], both)
    acc, la = contract(acc, la, b, lb, keep, size)
  end
  local keep = {}
  for _, l in ipairs(out) do keep[l] = true end
  acc, la = sum_unneeded(acc, la, keep)
  -- broadcast dims still of size 1 where the output wants more (one operand had them)
  local y = permuted(acc, la, out)
  local shape, grow = {}, false
  for i, l in ipairs(out) do
    shape[i] = size[l]
    grow = grow or y:size(i) ~= size[l]
  end
  if grow then y = y:expand(shape) end
  if #out == 0 and y:dim() > 0 then y = y:reshape({}) end
  return y
end

return dl.einsum
