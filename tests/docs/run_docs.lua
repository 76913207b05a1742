-- Runs the code blocks of a Markdown file as a reader would, in a fresh directory of its
-- own (removed afterwards), so that a file a block writes by a plain name is where the
-- next block looks for it:
-- - the ```lua blocks through the real `dlua` runtime, as one chunk in document order:
--   a later block sees the locals of earlier ones. Lines outside the blocks become blank
--   lines, so an error names the Markdown file's own line.
-- - then each ```c block, a whole program: compiled with the C compiler named by --cc
--   against the library its includes name (<dlua/dlg.h>: libdlua_run; <dlua/dlua.h>:
--   libdlua), and run; it must exit with 0.
-- Blocks fenced as anything else (```sh, ```text, ```cpp fragments ...) are not run.
-- Usage: dlua tests/docs/run_docs.lua FILE.md [--cc CC --include DIR --libdir DIR
--        [--cflags FLAGS]]; without --cc a file with a ```c block fails.
local ffi = require("ffi")
ffi.cdef [[
char* mkdtemp(char* template);
int chdir(const char* path);
char* getcwd(char* buf, size_t size);
]]

local path = assert(arg[1], "usage: run_docs.lua FILE.md [--cc CC --include DIR --libdir DIR [--cflags FLAGS]]")
local opt = {}
for i = 2, #arg, 2 do
  local k = arg[i]:match("^%-%-(%w+)$")
  assert(k and arg[i + 1], "run_docs.lua: bad option " .. tostring(arg[i]))
  opt[k] = arg[i + 1]
end
-- (the blocks run elsewhere: paths given relative to here are made whole)
local cwd = ffi.new("char[4096]")
assert(ffi.C.getcwd(cwd, 4096) ~= nil, "run_docs.lua: cannot read the working directory")
for _, k in ipairs({ "include", "libdir" }) do
  if opt[k] and opt[k]:sub(1, 1) ~= "/" then opt[k] = ffi.string(cwd) .. "/" .. opt[k] end
end

local f = assert(io.open(path, "rb"))
local text = f:read("*a")
f:close()

local lines, c_blocks, nblocks = {}, {}, 0
local in_block, c_lines = false, nil
local n = 0
for l in (text .. "\n"):gmatch("([^\n]*)\n") do
  n = n + 1
  local keep = ""
  if not in_block then
    local lang = l:match("^%s*```%s*(%w*)")
    if lang then
      in_block = lang
      if lang == "c" then c_lines = { line = n + 1 } end
    end
  elseif l:match("^%s*```%s*$") then
    if in_block == "lua" then nblocks = nblocks + 1 end
    if in_block == "c" then c_blocks[#c_blocks + 1] = c_lines end
    in_block = false
  elseif in_block == "lua" then
    keep = l
  elseif in_block == "c" then
    c_lines[#c_lines + 1] = l
  end
  lines[#lines + 1] = keep
end
assert(not in_block, path .. ": a code block is not closed")

local function fail(msg)
  io.stderr:write("FAILED: ", msg, "\n")
  print(("0 passed, 1 failed: %s"):format(path))
  os.exit(1)
end

-- Each document runs in a directory of its own (the tests run in parallel).
local base = os.getenv("TMPDIR") or "/tmp"
local template = ffi.new("char[?]", #base + 18, base .. "/dlua-docs-XXXXXX")
if ffi.C.mkdtemp(template) == nil then fail("cannot make a directory under " .. base) end
local dir = ffi.string(template)
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function done(ok, msg)
  ffi.C.chdir("/")
  os.execute("rm -rf " .. quote(dir))
  if not ok then fail(msg) end
end
assert(ffi.C.chdir(dir) == 0)

-- The blocks, whose failures (and any error of this script's) come back as a message.
local function run_blocks()
  local chunk, err = loadstring(table.concat(lines, "\n"), "@" .. path)
  if not chunk then error(err, 0) end
  local env = setmetatable({ dl = require("dlua") }, { __index = _G })
  setfenv(chunk, env)
  local ok, e = xpcall(chunk, debug.traceback)
  if not ok then error(tostring(e), 0) end

  -- The C blocks: written out with a #line so that the compiler names the Markdown line.
  for i, block in ipairs(c_blocks) do
    local where = ("%s:%d"):format(path, block.line)
    if not (opt.cc and opt.include and opt.libdir) then
      error(where .. ": a ```c block needs --cc, --include and --libdir", 0)
    end
    local src = ("block%d.c"):format(i)
    local out = assert(io.open(src, "wb"))
    out:write(('#line %d "%s"\n'):format(block.line, path), table.concat(block, "\n"), "\n")
    out:close()
    local code = table.concat(block, "\n")
    local libs = {}
    if code:find("<dlua/dlg.h>", 1, true) then libs[#libs + 1] = "-ldlua_run" end
    if code:find("<dlua/dlua.h>", 1, true) then libs[#libs + 1] = "-ldlua" end
    local exe = ("./block%d"):format(i)
    local cmd = ("%s -std=c11 -Wall -Werror %s -I%s %s -o %s -L%s -Wl,-rpath,%s %s"):format(
      quote(opt.cc), opt.cflags or "", quote(opt.include), src, exe, quote(opt.libdir), quote(opt.libdir),
      table.concat(libs, " ") .. " -lm")
    for _, step in ipairs({ cmd, exe }) do
      local status = os.execute(step .. " > said.txt 2>&1")
      local said = io.open("said.txt", "rb")
      if said then
        io.write(said:read("*a"))
        said:close()
      end
      if status ~= 0 then
        local why = status % 256 == 0 and "exited with " .. status / 256 or "failed (status " .. status .. ")"
        error(("%s: `%s` %s"):format(where, step, why), 0)
      end
    end
    nblocks = nblocks + 1
  end
end
local ok, e = pcall(run_blocks)
if not ok then done(false, tostring(e)) end
done(true)
print(("%d passed, 0 failed: %s (code blocks)"):format(nblocks, path))
