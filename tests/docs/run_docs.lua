-- Runs the ```lua blocks of a Markdown file through the real `dlua` runtime, as one
-- chunk in document order: a later block sees the locals of earlier ones, as a reader
-- would expect. Lines outside the blocks become blank lines, so an error names the
-- Markdown file's own line. Blocks fenced as anything else (```sh, ```text ...) are
-- not run. Usage: dlua tests/docs/run_docs.lua docs/autograd.md
local path = assert(arg[1], "usage: run_docs.lua FILE.md")
local f = assert(io.open(path, "rb"))
local text = f:read("*a")
f:close()

local lines, nblocks = {}, 0
local in_block = false
for l in (text .. "\n"):gmatch("([^\n]*)\n") do
  local keep = ""
  if not in_block then
    local lang = l:match("^%s*```%s*(%w*)")
    if lang then in_block = lang end
  elseif l:match("^%s*```%s*$") then
    if in_block == "lua" then nblocks = nblocks + 1 end
    in_block = false
  elseif in_block == "lua" then
    keep = l
  end
  lines[#lines + 1] = keep
end
assert(not in_block, path .. ": a code block is not closed")

local chunk, err = loadstring(table.concat(lines, "\n"), "@" .. path)
if not chunk then
  io.stderr:write(err, "\n")
  os.exit(1)
end
local env = setmetatable({ dl = require("dlua") }, { __index = _G })
setfenv(chunk, env)
local ok, e = xpcall(chunk, debug.traceback)
if not ok then
  io.stderr:write("FAILED: ", tostring(e), "\n")
  print(("0 passed, 1 failed: %s"):format(path))
  os.exit(1)
end
print(("%d passed, 0 failed: %s (code blocks)"):format(nblocks, path))
