// The interactive REPL: libedit line editing and history, multi-line input, printing
// of results, TAB completion, help, timing, and Ctrl-C.
//
// Ctrl-C while a command runs stops it through the runtime's stop hook (Note [Stopping
// a script] in vm/runtime_impl.h): commands are compiled with the JIT off (dlua_repl's
// compile), so even `while true do end` stops; a loop inside JIT-compiled library code
// may not, and a second Ctrl-C then ends the program, as in luajit. Ctrl-C at the
// prompt drops the line being typed.
#include <editline/readline.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "repl/repl.h"
#include "vm/runtime_impl.h"

extern "C" {
#include <luajit.h>
}

namespace dlua::vm {
const EmbeddedModule* embedded_repl();
}

namespace dlua::repl {
namespace {

// Commands taking longer than this print their time.
constexpr double kShowTimeMs = 5.0;

Runtime* g_rt = nullptr;
volatile std::sig_atomic_t g_prompt_sigint = 0;

void on_prompt_sigint(int) { g_prompt_sigint = 1; }

// libedit reads through this: a SIGINT (installed without SA_RESTART) interrupts the
// read, and returning EOF makes readline() give up the line.
int getc_hook(FILE* f) {
  for (;;) {
    unsigned char c;
    ssize_t n = read(fileno(f), &c, 1);
    if (n == 1) return c;
    if (n < 0 && errno == EINTR) {
      if (g_prompt_sigint) return EOF;
      continue;
    }
    return EOF;
  }
}

void prompt_signals() {
  struct sigaction sa{};
  sa.sa_handler = on_prompt_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: read() must return EINTR
  sigaction(SIGINT, &sa, nullptr);
}

// Pushes the dlua_repl module's function `name`.
void push_repl_fn(lua_State* L, const char* name) {
  lua_getfield(L, LUA_REGISTRYINDEX, "dlua.repl");
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}

// ---- completion ------------------------------------------------------------------------

std::vector<std::string> g_matches;

char* match_generator(const char*, int state) {
  static size_t next;
  if (state == 0) next = 0;
  if (next >= g_matches.size()) return nullptr;
  return strdup(g_matches[next++].c_str());
}

char** complete(const char* text, int, int) {
  rl_attempted_completion_over = 1;  // never fall back to file names
  g_matches.clear();
  if (!g_rt) return nullptr;
  Runtime::Impl* I = g_rt->impl();
  std::string word(text);
  try {
    I->guarded([&](lua_State* L) {
      push_repl_fn(L, "complete");
      lua_pushlstring(L, word.data(), word.size());
      if (lua_pcall(L, 1, 1, 0) != 0 || lua_type(L, -1) != LUA_TTABLE) return;
      size_t n = lua_objlen(L, -1);
      for (size_t i = 1; i <= n; ++i) {
        lua_rawgeti(L, -1, int(i));
        if (lua_type(L, -1) == LUA_TSTRING) g_matches.emplace_back(lua_tostring(L, -1));
        lua_pop(L, 1);
      }
    });
  } catch (const Error&) {
    g_matches.clear();
  }
  // A method or a function: no space after it, so "(" can follow.
  rl_completion_append_character = '\0';
  if (g_matches.empty()) return nullptr;
  return rl_completion_matches(text, match_generator);
}

// ---- running a command ------------------------------------------------------------------

enum class Compiled { Ok, Incomplete, Error };

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return std::string();
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// `? expr` and `?name` are help(expr), or help("name") when expr is not a value.
std::string rewrite_help(const std::string& line) {
  std::string t = trim(line);
  if (t.empty() || t[0] != '?') return line;
  std::string what = trim(t.substr(1));
  if (what.empty()) return "help()";
  std::string quoted;
  for (char c : what) {
    if (c == '\\' || c == '"') quoted += '\\';
    quoted += c;
  }
  return "require('dlua_repl').help_line(\"" + quoted + "\")";
}

void print_error(const Error& e) {
  std::fflush(stdout);
  // After the terminal's "^C" echo, on a line of its own.
  if (e.kind() == ErrorKind::Interrupted && isatty(STDERR_FILENO)) std::fputc('\n', stderr);
  std::fprintf(stderr, "%s\n", e.what());
  // A traceback through nothing but the command and builtins says nothing the
  // message does not; one that goes through other code is shown.
  const std::string& tb = e.traceback();
  bool useful = false;
  for (size_t p = tb.find("\n\t"); p != std::string::npos; p = tb.find("\n\t", p + 1))
    if (tb.compare(p + 2, 4, "[C]:") != 0 && tb.compare(p + 2, 6, "stdin:") != 0) useful = true;
  if (useful) std::fprintf(stderr, "%s\n", tb.c_str());
  std::fflush(stderr);
}

// Compiles `src` with dlua_repl.compile; on Ok runs it and prints its results.
Compiled run_command(Runtime& rt, const std::string& src) {
  Runtime::Impl* I = rt.impl();
  Compiled status = Compiled::Ok;
  std::string syntax;
  double ms = -1;
  try {
    catch_sigint(&rt);
    I->guarded([&](lua_State* L) {
      push_repl_fn(L, "compile");
      lua_pushlstring(L, src.data(), src.size());
      lua_call(L, 1, 2);
      if (lua_isnil(L, -2)) {
        const char* msg = lua_tostring(L, -1);
        if (msg && std::strcmp(msg, "incomplete") == 0) {
          status = Compiled::Incomplete;
        } else {
          status = Compiled::Error;
          syntax = msg ? msg : "syntax error";
        }
        return;
      }
      bool show = lua_toboolean(L, -1);
      lua_pop(L, 1);
      auto t0 = std::chrono::steady_clock::now();
      int n = I->call(0);
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (n < 0) return;
      if (show && n > 0) {
        push_repl_fn(L, "print_results");
        lua_insert(L, -n - 1);
        lua_pushinteger(L, n);
        lua_insert(L, -n - 1);
        I->call(n + 1, 0);
      } else {
        lua_pop(L, n);
      }
    });
    release_sigint();
  } catch (const Error& e) {
    release_sigint();
    print_error(e);
  }
  if (status == Compiled::Error) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", syntax.c_str());
  }
  std::fflush(stdout);
  if (ms >= kShowTimeMs) {
    bool tty = isatty(STDOUT_FILENO);
    std::printf(tty ? "\033[2m(%.1f ms)\033[0m\n" : "(%.1f ms)\n", ms);
    std::fflush(stdout);
  }
  return status;
}

std::string history_path() {
  if (const char* p = std::getenv("DLUA_HISTORY")) return p;  // "" disables it
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.dlua_history" : std::string();
}

}  // namespace

int interactive(Runtime& rt) {
  g_rt = &rt;
  Runtime::Impl* I = rt.impl();
  I->nojit_chunks = true;
  try {
    I->guarded([&](lua_State* L) {
      vm::preload_embedded(L, vm::embedded_repl());
      lua_getglobal(L, "require");
      lua_pushliteral(L, "dlua_repl");
      lua_call(L, 1, 1);
      lua_pushvalue(L, -1);
      lua_setfield(L, LUA_REGISTRYINDEX, "dlua.repl");
      lua_getfield(L, -1, "install");
      lua_pushvalue(L, LUA_GLOBALSINDEX);
      lua_call(L, 1, 0);
    });
  } catch (const Error& e) {
    std::fprintf(stderr, "dlua: cannot start the REPL: %s\n", e.what());
    return 1;
  }
  // The library: a failure to load it leaves a usable Lua REPL, with the reason shown.
  try {
    rt.run_string("dl = require('dlua')", "=[dlua]");
  } catch (const Error& e) {
    std::fprintf(stderr, "dlua: warning: the dlua library did not load: %s\n", e.what());
  }

  std::string hist = history_path();
  using_history();
  stifle_history(1000);
  if (!hist.empty()) read_history(hist.c_str());
  rl_readline_name = "dlua";
  rl_catch_signals = 0;
  rl_getc_function = getc_hook;
  rl_attempted_completion_function = complete;
  // '.' and ':' are part of a word, so "dl.ma" and "x:su" complete as a whole.
  rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^~#[]";
  rl_completer_word_break_characters = const_cast<char*>(rl_basic_word_break_characters);

  std::printf("dlua %s (%s)  help() for help, Ctrl-D to exit\n", dlua::version(), LUAJIT_VERSION);
  std::fflush(stdout);
  std::string buf, typed;  // what runs, and what goes into the history
  for (;;) {
    prompt_signals();
    g_prompt_sigint = 0;
    char* line = readline(buf.empty() ? "> " : ">> ");
    if (g_prompt_sigint) {  // Ctrl-C at the prompt: drop the input
      std::free(line);
      std::printf("^C\n");
      std::fflush(stdout);
      buf.clear();
      typed.clear();
      continue;
    }
    if (!line) {
      std::printf("\n");
      break;
    }
    std::string l(line);
    std::free(line);
    if (buf.empty()) {
      if (trim(l).empty()) continue;
      typed = l;
      buf = rewrite_help(l);
    } else {
      typed += "\n" + l;
      buf += "\n" + l;
    }
    Compiled st = run_command(rt, buf);
    if (st == Compiled::Incomplete) continue;
    add_history(typed.c_str());
    if (!hist.empty()) write_history(hist.c_str());  // kept even if the program is killed
    buf.clear();
    typed.clear();
  }
  if (!hist.empty()) write_history(hist.c_str());
  std::signal(SIGINT, SIG_DFL);
  g_rt = nullptr;
  return 0;
}

}  // namespace dlua::repl
