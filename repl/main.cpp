// dlua: runs Lua scripts with the dlua library, or the interactive REPL.
//
//   dlua script.lua a b      arg = {[0] = "script.lua", "a", "b"}, and ... = "a", "b"
//   dlua -e 'print(dl.ones(2))'
//   dlua -i script.lua       the REPL after the script
//   dlua -                   the script from standard input
//   dlua                     the REPL (or standard input when it is not a terminal)
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "repl/repl.h"
#include "vm/runtime_impl.h"

extern "C" {
#include <luajit.h>
}

namespace dlua::repl {
namespace {

const char kUsage[] =
    "usage: dlua [options] [script [args...]]\n"
    "  -e code    run code\n"
    "  -l name    require library 'name' into the global of that name\n"
    "  -i         enter the interactive REPL after running the script\n"
    "  -v         show the version\n"
    "  --config   show the runtime's configuration: threads, OpenBLAS's kernels and\n"
    "             who chose them (dl.config()); with -i, before the REPL starts\n"
    "  -          run standard input and stop handling options\n"
    "  --         stop handling options\n"
    "  -h, --help this help\n"
    "With no script and no -e, dlua starts the REPL when standard input is a terminal\n"
    "and runs it as a script otherwise. `dl` is the dlua library in both.\n";

// `dl` as a global, loaded on first use, so that `dlua -e ''` starts in milliseconds
// and scripts that never touch tensors do not pay for loading the library.
const char kLazyDl[] = R"(
local rawset, require = rawset, require
setmetatable(_G, {__index = function(t, k)
  if k == "dl" then
    local dl = require("dlua")
    rawset(t, "dl", dl)
    return dl
  end
end})
-- os.exit closes the Lua state unless told not to (LuaJIT's second argument), so the
-- finalizers run: tensors are released, summary writers and files flushed, and leak
-- checkers (the sanitizer build) see a clean exit.
local exit = os.exit
os.exit = function(code, close)
  if close == nil then close = true end
  return exit(code, close)
end
)";

Runtime* g_rt = nullptr;

void on_sigint(int) {
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the program
  if (g_rt) g_rt->interrupt();
}

// The arg table of lua.c: arg[0] is the script, negative indices the interpreter and
// its options, positive ones the script's arguments.
void set_arg_table(Runtime& rt, int argc, char** argv, int script) {
  Runtime::Impl* I = rt.impl();
  I->guarded([&](lua_State* L) {
    lua_createtable(L, argc - script - 1, script + 1);
    for (int i = 0; i < argc; ++i) {
      lua_pushstring(L, argv[i]);
      lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
  });
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::string read_script(const char* path, bool* ok) {
  FILE* f = std::fopen(path, "rb");
  *ok = f != nullptr;
  if (!f) return std::string();
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  if (s.rfind("#", 0) == 0) {  // '#!' line: skipped, line numbers kept
    size_t nl = s.find('\n');
    s = nl == std::string::npos ? std::string() : "--" + s.substr(nl);
  }
  return s;
}

}  // namespace

void catch_sigint(Runtime* rt) {
  g_rt = rt;
  std::signal(SIGINT, on_sigint);
}

void release_sigint() {
  std::signal(SIGINT, SIG_DFL);
  g_rt = nullptr;
}

// Under mpirun, an uncaught error on one rank must end the whole job: the other ranks
// would otherwise wait for this one in their next collective until their deadline.
// dl.dist (scripts/dlua/dist.lua), when a script started it, reports the error tagged
// with the rank and calls MPI_Abort, which does not return; otherwise nothing happens.
void report_to_dist(Runtime& rt, const Error& e) {
  try {
    rt.impl()->guarded([&](lua_State* L) {
      const int top = lua_gettop(L);
      lua_getglobal(L, "package");
      if (lua_istable(L, -1)) lua_getfield(L, -1, "loaded");
      if (lua_istable(L, -1)) lua_getfield(L, -1, "dlua.dist");
      if (lua_istable(L, -1)) lua_getfield(L, -1, "_uncaught");
      if (lua_isfunction(L, -1)) {
        lua_pushstring(L, e.what());
        lua_pushstring(L, e.traceback().c_str());
        lua_pcall(L, 2, 0, 0);
      }
      lua_settop(L, top);
    });
  } catch (...) {
    // The error is reported as usual below.
  }
}

bool run_chunk(Runtime& rt, std::string_view code, const std::string& chunkname, int argc,
               char** argv) {
  Runtime::Impl* I = rt.impl();
  try {
    catch_sigint(&rt);
    I->guarded([&](lua_State* L) {
      if (!I->load(code, chunkname.c_str())) return;
      for (int i = 0; i < argc; ++i) lua_pushstring(L, argv[i]);
      I->call(argc, 0);
    });
    release_sigint();
    return true;
  } catch (const Error& e) {
    release_sigint();
    std::fflush(stdout);
    report_to_dist(rt, e);
    std::fprintf(stderr, "dlua: %s\n", e.what());
    if (!e.traceback().empty()) std::fprintf(stderr, "%s\n", e.traceback().c_str());
    std::fflush(stderr);
    return false;
  }
}

}  // namespace dlua::repl

int main(int argc, char** argv) {
  using namespace dlua;
  bool interactive = false, version = false, ran = false;
  std::vector<std::pair<char, std::string>> actions;  // -e code, -l name, in order
  int script = 0;                                     // index of the script in argv
  bool from_stdin = false;
  int i = 1;
  for (; i < argc; ++i) {
    const char* a = argv[i];
    if (a[0] != '-') break;
    if (std::strcmp(a, "--") == 0) { ++i; break; }
    if (std::strcmp(a, "-") == 0) { from_stdin = true; break; }
    if (std::strcmp(a, "-h") == 0 || std::strcmp(a, "--help") == 0) {
      std::fputs(repl::kUsage, stdout);
      return 0;
    }
    if (std::strcmp(a, "-v") == 0 || std::strcmp(a, "--version") == 0) { version = true; continue; }
    if (std::strcmp(a, "--config") == 0) { actions.push_back({'e', "print(dl.config())"}); continue; }
    if (std::strcmp(a, "-i") == 0) { interactive = version = true; continue; }
    if ((a[1] == 'e' || a[1] == 'l') && a[2] == '\0') {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dlua: '%s' needs an argument\n%s", a, repl::kUsage);
        return 1;
      }
      actions.emplace_back(a[1], argv[++i]);
      continue;
    }
    if ((a[1] == 'e' || a[1] == 'l') && a[2] != '\0') {  // -ecode, -lname
      actions.emplace_back(a[1], a + 2);
      continue;
    }
    std::fprintf(stderr, "dlua: unrecognized option '%s'\n%s", a, repl::kUsage);
    return 1;
  }
  if (i < argc) script = i;
  if (version)
    std::printf("dlua %s (%s)\n", dlua::version(), LUAJIT_VERSION);
  if (version && !interactive && actions.empty() && !script && !from_stdin) return 0;

  Options opts;
  opts.preload_dl = false;
  std::unique_ptr<Runtime> rt;
  try {
    rt = std::make_unique<Runtime>(opts);
  } catch (const Error& e) {
    std::fprintf(stderr, "dlua: %s\n", e.what());
    return 1;
  }
  repl::run_chunk(*rt, repl::kLazyDl, "=[dlua]");
  repl::set_arg_table(*rt, argc, argv, script ? script : (from_stdin ? i : argc));

  for (auto& [kind, text] : actions) {
    std::string code = kind == 'e' ? text : text + " = require(\"" + text + "\")";
    if (!repl::run_chunk(*rt, code, kind == 'e' ? "=(command line)" : "=(require)")) return 1;
    ran = true;
  }
  if (script || from_stdin) {
    int first_arg = (script ? script : i) + 1;
    std::string code, name;
    if (from_stdin) {
      code = repl::read_stdin();
      name = "=stdin";
    } else {
      bool ok;
      code = repl::read_script(argv[script], &ok);
      if (!ok) {
        std::fprintf(stderr, "dlua: cannot open %s: %s\n", argv[script], std::strerror(errno));
        return 1;
      }
      name = std::string("@") + argv[script];
    }
    if (!repl::run_chunk(*rt, code, name, argc - first_arg, argv + first_arg)) return 1;
    ran = true;
  }
  if (interactive || (!ran && isatty(STDIN_FILENO))) return repl::interactive(*rt);
  if (!ran) return repl::run_chunk(*rt, repl::read_stdin(), "=stdin") ? 0 : 1;
  return 0;
}
