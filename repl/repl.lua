-- dlua_repl: the Lua side of the `dlua` REPL (repl/repl.cpp reads lines, this file
-- compiles them, prints values, completes names and shows help). Trusted code, run
-- in the REPL's own globals.
local jit = require("jit")
local type, pairs, ipairs, tostring, select, rawget, pcall = type, pairs, ipairs, tostring, select, rawget, pcall
local getmetatable, next, loadstring = getmetatable, next, loadstring
local concat, sort, insert = table.concat, table.sort, table.insert
local format, rep, sfind, ssub, smatch, sgsub = string.format, string.rep, string.find, string.sub, string.match, string.gsub
local getinfo = debug.getinfo
local write = io.write

local M = {}

-- ---- the tensor's method table ---------------------------------------------------------

local function dlua()
  local dl = rawget(_G, "dl")
  if type(dl) == "table" then return dl end
  local ok, mod = pcall(require, "dlua")
  return ok and type(mod) == "table" and mod or nil
end

-- dlua.tensor (internal, trusted here): the tables behind x:method and x.property.
local function tensor_module()
  if not dlua() then return nil end
  local ok, T = pcall(require, "dlua.tensor")
  return ok and type(T) == "table" and T or nil
end

local function is_tensor(v)
  local T = type(v) == "cdata" and tensor_module()
  return T and T.is_tensor(v) or false
end

local function tensor_methods()
  local T = tensor_module()
  return T and T.methods or {}
end

local function tensor_props()
  local T = tensor_module()
  return T and T.props or {}
end

-- ---- compiling a line ------------------------------------------------------------------

-- Chunks typed at the prompt run with the JIT off (with their nested functions), so
-- the SIGINT hook can stop a runaway loop; library code stays compiled. A loop inside
-- JIT-compiled library code may not stop: a second Ctrl-C ends the program.
local function nojit(f)
  if f then jit.off(f, true) end
  return f
end

-- Returns fn, show_results; or nil, "incomplete"; or nil, message.
function M.compile(src)
  local quiet = smatch(src, ";%s*$") ~= nil
  local expr = smatch(src, "^%s*=(.*)$")  -- Lua 5.1's "=expr"
  if expr then src = expr end
  -- The expression is an argument, not a tail call, so that the command's own frame
  -- stays in tracebacks and error("x") says "stdin:1: x".
  local e = sgsub(src, ";%s*$", "")
  local f = loadstring("local function pass(...) return ... end return pass(" .. e .. "\n)", "=stdin")
  if f then return nojit(f), not quiet end
  local err
  f, err = loadstring(src, "=stdin")
  if f then return nojit(f), false end
  if sfind(err, "<eof>'?$") or sfind(err, "<eof>'? near") then return nil, "incomplete" end
  return nil, err
end

-- load/loadstring/loadfile/dofile at the prompt give NOJIT chunks too.
function M.wrap_loaders(G)
  local load0, loadstring0, loadfile0 = G.load, G.loadstring, G.loadfile
  if load0 then G.load = function(...) return nojit(load0(...)) end end
  if loadstring0 then G.loadstring = function(...) return nojit(loadstring0(...)) end end
  if loadfile0 then
    G.loadfile = function(...) return nojit(loadfile0(...)) end
    G.dofile = function(path)
      local f, err = G.loadfile(path)
      if not f then error(err, 2) end
      return f()
    end
  end
end

-- ---- printing values -------------------------------------------------------------------

local MAX_DEPTH, MAX_ITEMS, WIDTH = 4, 60, 80

local function quote(s)
  return (format("%q", s):gsub("\\\n", "\\n"))
end

local function fn_name(f)
  local info = getinfo(f, "S")
  if not info or info.what == "C" then return "function: builtin" end
  return format("function: %s:%d", info.short_src, info.linedefined)
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then
    if ta == "number" then return true end
    if tb == "number" then return false end
    return ta < tb
  end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local is_ident = function(k)
  return type(k) == "string" and smatch(k, "^[%a_][%w_]*$") ~= nil
end

local show

local function show_table(t, depth, seen, indent)
  if seen[t] then return "<cycle>" end
  local mt = getmetatable(t)
  if type(mt) == "table" and rawget(mt, "__tostring") then
    local ok, s = pcall(tostring, t)
    if ok then return s end
  end
  if next(t) == nil then return "{}" end
  if depth >= MAX_DEPTH then return "{...}" end
  seen[t] = true
  local n = #t
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  sort(keys, key_order)
  local items = {}
  local count = 0
  for i = 1, n do
    count = count + 1
    if count > MAX_ITEMS then break end
    items[#items + 1] = show(t[i], depth + 1, seen, indent .. "  ")
  end
  for _, k in ipairs(keys) do
    count = count + 1
    if count > MAX_ITEMS then break end
    local ks = is_ident(k) and k or "[" .. show(k, depth + 1, seen, indent .. "  ") .. "]"
    items[#items + 1] = ks .. " = " .. show(t[k], depth + 1, seen, indent .. "  ")
  end
  local total = n + #keys
  if total > MAX_ITEMS then items[#items + 1] = format("... (%d more)", total - MAX_ITEMS) end
  seen[t] = nil
  local one = "{" .. concat(items, ", ") .. "}"
  if #one + #indent <= WIDTH and not sfind(one, "\n") then return one end
  local inner = indent .. "  "
  return "{\n" .. inner .. concat(items, ",\n" .. inner) .. "\n" .. indent .. "}"
end

function show(v, depth, seen, indent)
  local t = type(v)
  if t == "string" then return depth == 0 and v or quote(v) end
  if t == "table" then return show_table(v, depth, seen, indent) end
  if t == "function" then return fn_name(v) end
  local ok, s = pcall(tostring, v)
  return ok and s or "<" .. t .. ">"
end

function M.show(v) return show(v, 0, {}, "") end

-- Prints each result on its own line (what the REPL calls after a command).
function M.print_results(n, ...)
  for i = 1, n do
    write(show((select(i, ...)), 0, {}, ""), "\n")
  end
end

-- ---- completion ------------------------------------------------------------------------

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false", "for", "function",
  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until",
  "while" }

-- Keys of a table and of the tables its metatable's __index chain leads to (classes).
local function collect_keys(t, out, seen, only_functions)
  local guard = 0
  while type(t) == "table" and not seen[t] and guard < 8 do
    seen[t] = true
    for k, v in pairs(t) do
      if is_ident(k) and (not only_functions or type(v) == "function") then out[k] = true end
    end
    local mt = getmetatable(t)
    local lazy = type(mt) == "table" and rawget(mt, "__lazy")   -- names that load on first use
    if type(lazy) == "table" and not only_functions then
      for k in pairs(lazy) do if is_ident(k) then out[k] = true end end
    end
    t = type(mt) == "table" and rawget(mt, "__index") or nil
    guard = guard + 1
  end
end

-- Looks up a dotted path ("dl.nn") in the globals without calling any metamethod
-- other than a table __index chain.
local function resolve(path)
  local v = _G
  for part in path:gmatch("[^%.:]+") do
    if type(v) == "table" then
      local t, found = v, nil
      for _ = 1, 8 do
        found = rawget(t, part)
        if found ~= nil then break end
        local mt = getmetatable(t)
        t = type(mt) == "table" and rawget(mt, "__index")
        if type(t) ~= "table" then break end
      end
      v = found
    elseif is_tensor(v) then
      v = rawget(tensor_methods(), part)
    else
      return nil
    end
    if v == nil then return nil end
  end
  return v
end

-- word: the text before the cursor, e.g. "dl.ma", "x:su", "pri". Returns the sorted
-- full completions.
function M.complete(word)
  local base, sep, partial = smatch(word, "^(.-)([%.:])([%w_]*)$")
  local names, seen = {}, {}
  if not base then
    partial = word
    collect_keys(_G, names, seen, false)
    for _, k in ipairs(KEYWORDS) do names[k] = true end
    base, sep = "", ""
  else
    local v = resolve(base)
    if v == nil then return {} end
    if is_tensor(v) then
      collect_keys(tensor_methods(), names, seen, sep == ":")
      if sep == "." then collect_keys(tensor_props(), names, seen, false) end
    elseif type(v) == "string" then
      collect_keys(string, names, seen, true)
    else
      collect_keys(v, names, seen, sep == ":")
    end
  end
  local out = {}
  for k in pairs(names) do
    if ssub(k, 1, #partial) == partial then out[#out + 1] = base .. sep .. k end
  end
  sort(out)
  return out
end

-- ---- help ------------------------------------------------------------------------------

local docs        -- name -> {sig =, doc =}, built on first use
local by_fn       -- function -> name

local SIG = {
  unary = "dl.%s(x)    x:%s()",
  binary = "dl.%s(a, b)    a:%s(b)",
  compare = "dl.%s(a, b)    a:%s(b)    -> bool tensor",
  reduce = "dl.%s(x [, dim [, keepdim]])    x:%s([dim [, keepdim]])",
  op = "dl.%s(...)    x:%s(...)",
}

-- dl's libraries, whose functions help() knows under "dl.<library>.<name>".
M.LIBRARIES = { "nn", "optim", "data", "metrics", "summary", "cuda", "compile", "export", "dist", "linalg", "image",
                "fft", "special", "distributions" }

-- dl[name] as a table, its module loaded (several load when first read: reading a key
-- that is not there loads them), or nil.
local function library(dl, name)
  local t = rawget(dl, name)
  if type(t) ~= "table" then return nil end
  local _ = t.__help_probe
  return t
end

-- The tables whose functions are public, each with the prefix help names them by: dl,
-- its libraries (loaded), dl.nn.functional and the tensor methods.
local function public_tables(dl)
  local list = { { dl, "dl." } }
  for _, sub in ipairs(M.LIBRARIES) do
    local t = library(dl, sub)
    if t then list[#list + 1] = { t, "dl." .. sub .. "." } end
  end
  if type(rawget(dl, "nn")) == "table" and type(dl.nn.functional) == "table" then
    list[#list + 1] = { dl.nn.functional, "dl.nn.functional." }
  end
  list[#list + 1] = { tensor_methods(), "Tensor:" }
  return list
end

-- The stubs core.on_first_use put in tbl's metatable for functions not loaded yet.
local function stubs_of(tbl)
  local mt = getmetatable(tbl)
  return type(mt) == "table" and type(rawget(mt, "__index")) == "table" and rawget(mt, "__index") or {}
end

local function build_docs()
  docs, by_fn = {}, {}
  local ok, opdocs = pcall(require, "dlua_repl.opdocs")
  local hand = require("dlua_repl.help")
  if ok then
    for _, op in ipairs(opdocs) do
      local d = op.doc
      if op.diff then d = d .. " (differentiable)" end
      docs[op.name] = { sig = format(SIG[op.family], op.name, op.name), doc = d, op = true }
    end
  end
  -- Hand-written entries (the Lua-level functions) win over generated ones, keeping
  -- the op table's "differentiable" mark; a function an entry documents beside its own
  -- (hand._also) is found under its own name too.
  local function enter(name, d)
    local short = smatch(name, "[%.:]([%w_]+)$") or name
    local old = docs[short]
    if old and old.op and sfind(old.doc, "(differentiable)", 1, true) then
      d = { sig = d.sig, doc = d.doc .. " (differentiable)" }
    end
    docs[name] = d
    if not old or old.op or short == name then docs[short] = d end
  end
  for name, entry in pairs(hand) do
    if name ~= "_also" then enter(name, { sig = entry[1], doc = entry[2] }) end
  end
  for name, target in pairs(hand._also or {}) do
    local e = hand[target]
    if e then enter(name, { sig = e[1], doc = e[2] }) end
  end
  local dl = dlua()
  local methods = tensor_methods()
  -- x:name_(...) is name's in-place form: its doc from name's.
  for k, f in pairs(methods) do
    local base = type(k) == "string" and type(f) == "function" and smatch(k, "^(.-[^_])_$")
    local d = base and not docs["Tensor:" .. k] and (docs["Tensor:" .. base] or docs[base])
    if d then
      local args = smatch(d.sig, "%a:" .. base .. "(%b())") or "(...)"
      enter("Tensor:" .. k, { sig = "x:" .. k .. args,
                              doc = "In place: x becomes x:" .. base .. args .. " (returns x). " .. d.doc })
    end
  end
  local function index(tbl, prefix)
    for k, v in pairs(tbl) do
      if type(v) == "function" and type(k) == "string" then
        local d = docs[prefix .. k] or docs[k]
        if d and by_fn[v] == nil then by_fn[v] = d end
      end
    end
  end
  for _, t in ipairs(dl and public_tables(dl) or { { methods, "Tensor:" } }) do index(t[1], t[2]) end
end

local GENERAL = [[
dlua: Lua with tensors and automatic differentiation.
  dl.tensor({{1, 2}, {3, 4}})    a tensor; dl.zeros(2, 3), dl.randn(4) ...
  x:sum(), x:matmul(y), x + 1    ops as methods, functions and operators
  dl.grad(f)(x)                  the gradient of f at x
  help(dl.matmul)  or  ? dl.matmul    the doc of a function
  help(dl)                       every documented function of a table
  help("relu")                   look a name up
Keys: TAB completes names (dl.ma<TAB>, x:su<TAB>), Ctrl-C stops a running command,
Ctrl-D exits. A trailing ';' hides the result.]]

local function entry_text(name, d)
  return d.sig .. "\n  " .. d.doc
end

function M.help(...)
  if not docs then build_docs() end
  if select("#", ...) == 0 then
    write(GENERAL, "\n")
    return
  end
  local v = ...
  if type(v) == "function" and by_fn[v] == nil then
    -- a function whose module loads on first use: its stub stands for it until then
    local ok, core = pcall(require, "dlua.core")
    local real = ok and core.resolve_stub and core.resolve_stub(v)
    if real then
      build_docs()
      v = real
    end
  end
  if type(v) == "table" and type(rawget(v, "__name")) == "string" and rawget(v, "_imt") then
    local name = rawget(v, "__name")   -- a module class of dl.nn
    local d = docs["dl.nn." .. name]
    if d then write(entry_text(name, d), "\n") return end
  end
  if type(v) == "function" then
    local d = by_fn[v]
    if d then write(entry_text(nil, d), "\n") else write("no documentation for ", fn_name(v), "\n") end
    return
  end
  if type(v) == "string" then
    local key = sgsub(v, "^dl%.", "")
    local d = docs[v] or docs[key] or docs[sgsub(key, "^.*[%.:]", "")]
    if d then write(entry_text(v, d), "\n") return end
    -- the names that contain it
    local hits = {}
    for name in pairs(docs) do
      if not sfind(name, "[%.:]") and sfind(name, v, 1, true) then hits[#hits + 1] = name end
    end
    sort(hits)
    if #hits == 0 then write("no documentation for '", v, "'\n")
    else write("no exact match; related: ", concat(hits, ", "), "\n") end
    return
  end
  if is_tensor(v) then v = tensor_methods() end
  if type(v) == "table" then
    local lines = {}
    for k, f in pairs(v) do
      if type(f) == "function" and by_fn[f] then
        lines[#lines + 1] = format("  %-22s %s", tostring(k), smatch(by_fn[f].doc, "^[^\n]*"))
      end
    end
    sort(lines)
    if #lines == 0 then write("no documented functions in this table\n")
    else write(concat(lines, "\n"), "\n") end
    return
  end
  write("no documentation for a ", type(v), " value\n")
end

-- `? expr`: help for the value of expr, or for the name itself when expr has no value
-- ("? relu" when relu is not a global).
function M.help_line(expr)
  local f = loadstring("return " .. expr, "=stdin")
  local ok, v = false, nil
  if f then ok, v = pcall(f) end
  if ok and v ~= nil then return M.help(v) end
  return M.help(expr)
end

-- For tests: each row of tensor/ops.def, whether it has a doc, and whether help()
-- finds that doc from the function dl.<name> or the method x:<name> when they exist.
function M.op_doc_coverage()
  if not docs then build_docs() end
  local ok, opdocs = pcall(require, "dlua_repl.opdocs")
  local out = {}
  if not ok then return out end
  local dl, methods = dlua() or {}, tensor_methods()
  for _, op in ipairs(opdocs) do
    local r = { name = op.name, doc = docs[op.name] ~= nil, missing = {} }
    for where, f in pairs({ ["dl."] = rawget(dl, op.name), ["x:"] = rawget(methods, op.name) }) do
      if type(f) == "function" and not by_fn[f] then r.missing[#r.missing + 1] = where .. op.name end
    end
    out[#out + 1] = r
  end
  return out
end

-- For tests: the public functions help() has no doc for, by name (sorted): dl.<name>,
-- the functions of dl's libraries (dl.nn, dl.nn.functional, dl.optim ...), dl.nn's
-- module classes and the tensor methods. Names starting with "_" are not public.
function M.doc_coverage()
  local dl, missing, seen = dlua() or {}, {}, {}
  -- Everything loaded first (libraries, and the modules behind functions that load on
  -- first use), so that the answer does not depend on what ran before.
  local ok, core = pcall(require, "dlua.core")
  local tables = public_tables(dl)
  for _, t in ipairs(tables) do
    for _, f in pairs(stubs_of(t[1])) do
      if ok and core.resolve_stub then core.resolve_stub(f) end
    end
  end
  build_docs()
  local function check(name, v)
    if type(name) ~= "string" or sfind(name, "[%.:]_") then return end
    if type(v) == "function" then
      local ok, core = pcall(require, "dlua.core")
      local real = ok and core.resolve_stub and core.resolve_stub(v)
      if real then build_docs() v = real end
      if not by_fn[v] and not seen[name] then missing[#missing + 1] = name end
    elseif type(v) == "table" and type(rawget(v, "__name")) == "string" and rawget(v, "_imt") then
      if not docs["dl.nn." .. rawget(v, "__name")] then missing[#missing + 1] = name end
    end
    seen[name] = true
  end
  for _, t in ipairs(tables) do
    local tbl, prefix = t[1], t[2]
    for k, v in pairs(tbl) do check(type(k) == "string" and prefix .. k, v) end
    -- (a stub whose module did not define its function is reported too)
    for k, v in pairs(stubs_of(tbl)) do
      if rawget(tbl, k) == nil then check(type(k) == "string" and prefix .. k, v) end
    end
  end
  sort(missing)
  return missing
end

function M.install(G)
  G.help = M.help
  M.wrap_loaders(G)
end

return M
