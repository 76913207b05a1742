-- dlua.csv: CSV files into tensors, as dl.data.read_csv and dl.data.from_csv.
--
--   local t = dl.data.read_csv("iris.csv")                 -- t.names, t.columns[name]
--   local ds = dl.data.from_csv("iris.csv", {label = "species"})   -- (features, label) rows
--
-- The format is RFC 4180's: fields separated by the delimiter (","), a field in double
-- quotes may hold delimiters, line breaks and doubled quotes (""), lines end with LF or
-- CRLF; the first line names the columns unless header = false (then "1", "2", ...). A
-- column whose every field is a decimal number or missing becomes a tensor (float32, or
-- opts.dtype); any other column stays a Lua list of strings. Numbers are decimal, as
-- Python's float() and pandas read them: hexadecimal ("0x10") is text, "inf" and
-- "Infinity" are numbers. Missing values are pandas' default na_values: an empty or blank field, "NA",
-- "N/A", "NaN", "null", "None", "#N/A", ... (MISSING below); they are NaN, and an error
-- under an integer or bool dtype (as pandas'). A quoted empty line ("") in a one-column
-- file is a missing value, an unquoted empty line no record. Errors name the file and
-- the line.
local core = require("dlua.core")
local T = require("dlua.tensor")
core.own_source()

local raise, bad_arg, options = core.raise, core.bad_arg, core.options
local dl = T.dl
local type, tostring, tonumber, ipairs, pairs = type, tostring, tonumber, ipairs, pairs
local IO = require("dlua.io")
local byte, sub, find = string.byte, string.sub, string.find
local concat = table.concat

local data = dl.data

local QUOTE, CR, LF = byte('"'), byte("\r"), byte("\n")

-- The records of `text` as lists of fields; `where` names the file in errors.
local function records(text, delim, where)
  local rows, row, field = {}, {}, {}
  local i, n, line = 1, #text, 1
  local d = byte(delim)
  local function end_field()
    row[#row + 1] = concat(field)
    field = {}
  end
  local quoted = false   -- whether the row has a quoted field: "" alone is a value, not a blank line
  local function end_row()
    end_field()
    rows[#rows + 1] = { fields = row, line = line, quoted = quoted }
    row, quoted = {}, false
  end
  while i <= n do
    local c = byte(text, i)
    if c == QUOTE and #field == 0 then
      -- a quoted field: up to the closing quote that is not doubled
      local start_line = line
      local j = i + 1
      local parts = {}
      while true do
        local q = find(text, '"', j, true)
        if not q then raise("read_csv: " .. where .. ":" .. start_line .. ": a quoted field is never closed") end
        local chunk = sub(text, j, q - 1)
        for _ in chunk:gmatch("\n") do line = line + 1 end
        parts[#parts + 1] = chunk
        if byte(text, q + 1) == QUOTE then
          parts[#parts + 1] = '"'
          j = q + 2
        else
          i = q + 1
          break
        end
      end
      field[1] = concat(parts)
      quoted = true
      local nc = byte(text, i)
      if nc ~= nil and nc ~= d and nc ~= CR and nc ~= LF then
        raise("read_csv: " .. where .. ":" .. line .. ": text after a quoted field's closing quote")
      end
    elseif c == d then
      end_field()
      i = i + 1
    elseif c == CR or c == LF then
      end_row()
      line = line + 1
      i = i + ((c == CR and byte(text, i + 1) == LF) and 2 or 1)
    else
      -- plain text up to the next delimiter or line end
      local j = i
      while j <= n do
        local b = byte(text, j)
        if b == d or b == CR or b == LF then break end
        if b == QUOTE then raise("read_csv: " .. where .. ":" .. line .. ": a quote inside an unquoted field") end
        j = j + 1
      end
      field[#field + 1] = sub(text, i, j - 1)
      i = j
    end
  end
  if #field > 0 or #row > 0 then end_row() end
  -- blank lines are no records; in a file of one column a quoted empty line ("") is a
  -- missing value (Python's csv writer writes one so), elsewhere a blank line too
  local one_column = rows[1] ~= nil and #rows[1].fields == 1
  local out = {}
  for _, r in ipairs(rows) do
    if not (#r.fields == 1 and r.fields[1] == "" and not (r.quoted and one_column)) then out[#out + 1] = r end
  end
  return out
end

local READ = { header = true, delimiter = true, dtype = true, columns = true }

-- pandas' default na_values (read_csv's keep_default_na).
local MISSING = {}
for _, s in ipairs({ "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                     "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null" }) do
  MISSING[s] = true
end

-- A field's number: 0/0 when missing, nil when it is not a number. tonumber reads the
-- decimal forms Python's float() reads (and inf, nan, infinity); it also reads
-- hexadecimal, which Python's float() and pandas leave as text.
local function field_number(s)
  if MISSING[s] then return 0 / 0 end
  local v = tonumber(s)
  if type(v) == "number" then
    if find(s, "[xX]") then return nil end
    return v
  end
  if s:match("^%s*$") then return 0 / 0 end
  local t = s:match("^%s*(.-)%s*$")
  if t:match("^[+-]?%d+%.?%d*[eE][+-]?%d+$") or t:match("^[+-]?%.%d+[eE][+-]?%d+$")
     or t:match("^[+-]?%d+%.?%d*$") or t:match("^[+-]?%.%d+$") then
    return tonumber(t)
  end
  local l = t:lower()
  if l == "inf" or l == "+inf" or l == "infinity" or l == "+infinity" then return 1 / 0 end
  if l == "-inf" or l == "-infinity" then return -1 / 0 end
  if l == "nan" or l == "+nan" or l == "-nan" then return 0 / 0 end
  return nil
end

-- dl.data.read_csv(path [, {header = true, delimiter = ",", dtype = "float32",
-- columns = {names to keep}}]): {names = {...}, columns = {name = tensor or list},
-- rows = n}.
function data.read_csv(path, opts)
  opts = options("read_csv", opts, READ)
  local delim = opts.delimiter or ","
  if type(delim) ~= "string" or #delim ~= 1 or delim == '"' then
    raise("read_csv: the delimiter must be one character other than a quote, got " .. tostring(delim))
  end
  local text = IO.read_file("read_csv", path)   -- (its checks: the sandbox, the name)
  if not text then raise("read_csv: cannot open " .. path) end
  if sub(text, 1, 3) == "\239\187\191" then text = sub(text, 4) end   -- a UTF-8 byte order mark
  local recs = records(text, delim, path)
  local names
  if opts.header ~= false then
    if #recs == 0 then raise("read_csv: " .. path .. " is empty (no header line)") end
    names = table.remove(recs, 1).fields
  else
    names = {}
    for k = 1, recs[1] and #recs[1].fields or 0 do names[k] = tostring(k) end
  end
  local width = #names
  local seen = {}
  for _, nm in ipairs(names) do
    if seen[nm] then raise("read_csv: " .. path .. ": the column name '" .. nm .. "' appears twice") end
    seen[nm] = true
  end
  for _, r in ipairs(recs) do
    if #r.fields ~= width then
      raise("read_csv: " .. path .. ":" .. r.line .. ": " .. #r.fields .. " fields, the header has " .. width)
    end
  end
  local keep = nil
  if opts.columns ~= nil then
    keep = {}
    for _, nm in ipairs(opts.columns) do
      if not seen[nm] then raise("read_csv: " .. path .. " has no column '" .. tostring(nm) .. "'") end
      keep[nm] = true
    end
  end
  local out = { names = {}, columns = {}, rows = #recs }
  for k, nm in ipairs(names) do
    if keep == nil or keep[nm] then
      local values, numeric, missing = {}, true, nil
      for i, r in ipairs(recs) do
        local v = field_number(r.fields[k])
        if v == nil then numeric = false break end
        if v ~= v and not missing then missing = r end
        values[i] = v
      end
      if numeric then
        local dtype = opts.dtype or "float32"
        if missing and not dl.empty(0, { dtype = dtype }):is_floating_point() then
          raise("read_csv: " .. path .. ":" .. missing.line .. ": column '" .. nm .. "' has a missing value ("
                .. '"' .. missing.fields[k] .. '")' .. ", which dtype " .. dtype .. " cannot hold")
        end
        out.columns[nm] = dl.tensor(#recs > 0 and values or {}, { dtype = dtype })
      else
        local strings = {}
        for i, r in ipairs(recs) do strings[i] = r.fields[k] end
        out.columns[nm] = strings
      end
      out.names[#out.names + 1] = nm
    end
  end
  return out
end

-- dl.data.from_csv(path [, opts]): a data set of (features, label) rows: features (F)
-- the columns other than opts.label, in file order (or opts.features; a column of text
-- among them is an error), label
-- the label column (a tensor; a column of strings becomes 1-based class numbers in the
-- order of first appearance, listed in ds.classes). Without a label, rows of features.
-- Other options as read_csv's.
function data.from_csv(path, opts)
  opts = opts or {}
  local read_opts = {}
  for _, k in ipairs({ "header", "delimiter", "dtype" }) do read_opts[k] = opts[k] end
  for k in pairs(opts) do
    if not READ[k] and k ~= "label" and k ~= "features" then raise("from_csv: unknown option '" .. tostring(k) .. "'") end
  end
  local t = data.read_csv(path, read_opts)
  local label = opts.label
  if label ~= nil and t.columns[label] == nil then raise("from_csv: " .. path .. " has no column '" .. tostring(label) .. "'") end
  local feats, text = {}, {}
  for _, nm in ipairs(opts.features or t.names) do
    local col = t.columns[nm]
    if col == nil then raise("from_csv: " .. path .. " has no column '" .. tostring(nm) .. "'") end
    if nm ~= label then
      if not T.is_tensor(col) then
        if opts.features then raise("from_csv: column '" .. nm .. "' is not numeric") end
        text[#text + 1] = "'" .. nm .. "'"
      else
        feats[#feats + 1] = col
      end
    end
  end
  -- A column of text among the features is a typo in the data more often than not: left
  -- out silently, the model would train on fewer features than the file has.
  if #text > 0 then
    raise("from_csv: " .. path .. ": the column" .. (#text > 1 and "s " or " ") .. concat(text, ", ")
          .. (#text > 1 and " are" or " is") .. " not numeric (a field that is neither a number nor missing); "
          .. "name the feature columns with opts.features to leave " .. (#text > 1 and "them" or "it") .. " out")
  end
  if #feats == 0 then raise("from_csv: " .. path .. " has no numeric feature column") end
  local X = dl.stack(feats, 2)
  if label == nil then return data.from_tensors(X) end
  local y, classes = t.columns[label], nil
  if not T.is_tensor(y) then
    local ids, list = {}, {}
    classes = {}
    for i, s in ipairs(y) do
      if not ids[s] then classes[#classes + 1] = s; ids[s] = #classes end
      list[i] = ids[s]
    end
    y = dl.tensor(list, { dtype = "int64" })
  end
  local ds = data.from_tensors(X, y)
  ds.classes = classes
  return ds
end

return data
