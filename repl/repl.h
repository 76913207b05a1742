// The `dlua` program: the runner (main.cpp) and the interactive REPL (repl.cpp).
#pragma once
#include <string>
#include <string_view>

#include "dlua/dlua.hpp"

namespace dlua::repl {

// Runs the interactive loop until end of input; returns the exit status.
int interactive(Runtime& rt);

// Loads and runs a chunk with the arguments (strings) as `...`; prints errors as
// "dlua: message" plus the traceback on stderr. Returns false on error.
bool run_chunk(Runtime& rt, std::string_view code, const std::string& chunkname,
               int argc = 0, char** argv = nullptr);

// SIGINT stops the running Lua code (Note [Stopping a script]); a second Ctrl-C
// while it runs ends the program, as in luajit.
void catch_sigint(Runtime* rt);
void release_sigint();

}  // namespace dlua::repl
