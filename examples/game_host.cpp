// A game-style host: it owns the simulation state (positions and velocities of a
// flock, plain float arrays), lends it to a sandboxed script each frame without
// copying (dlua::Tensor::from_blob), calls the script's update(), reads back its
// answer, and checks the result after N frames. Run by ctest.
//
//   game_host [script.lua]
#include <dlua/dlua.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#ifndef GAME_AI_SCRIPT
#define GAME_AI_SCRIPT "game_ai.lua"
#endif

int main(int argc, char** argv) {
  const char* script = argc > 1 ? argv[1] : GAME_AI_SCRIPT;
  constexpr int kAgents = 256, kFrames = 600;
  constexpr float kDt = 1.0f / 60;

  std::vector<float> pos(kAgents * 2), vel(kAgents * 2, 0.0f);
  float target[2] = {3.0f, -2.0f};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-20.0f, 20.0f);
  for (float& p : pos) p = uni(rng);

  // An untrusted mod: sandboxed, a time budget per call, capped memory.
  dlua::Options opts;
  opts.sandbox = true;
  opts.time_limit = 1.0;  // generous: ctest machines are busy; a game would use ~2 ms
  opts.lua_memory_limit = 32u << 20;
  opts.tensor_memory_limit = 64u << 20;
  opts.print = [](std::string_view s) { std::printf("[script] %.*s\n", int(s.size()), s.data()); };
  dlua::Runtime rt(opts);
  rt.run_file(script);

  // The script sees the host's memory: no copy in, no copy out.
  dlua::Tensor P = dlua::Tensor::from_blob(pos.data(), {kAgents, 2}, dlua::DType::Float32);
  dlua::Tensor V = dlua::Tensor::from_blob(vel.data(), {kAgents, 2}, dlua::DType::Float32);
  dlua::Tensor T = dlua::Tensor::from_blob(target, {2}, dlua::DType::Float32);

  double first_mean = 0, mean = 0;
  int closest = -1;
  for (int frame = 0; frame < kFrames; ++frame) {
    if (frame == kFrames / 2) {  // the host moves the target; the script sees it
      target[0] = -4.0f;
      target[1] = 5.0f;
    }
    std::vector<dlua::Value> r = rt.call_all("update", {P, V, T, kDt});
    closest = int(r.at(0).as_number()) - 1;  // Lua indices are 1-based
    mean = r.at(1).as_number();
    if (frame == 0) first_mean = mean;
  }

  // Check the answer against the host's own view of the state.
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("FAILED: %s\n", what);
      ++failures;
    }
  };
  double best = 1e30;
  int best_i = -1;
  for (int i = 0; i < kAgents; ++i) {
    double dx = target[0] - pos[2 * i], dy = target[1] - pos[2 * i + 1];
    double d = std::sqrt(dx * dx + dy * dy);
    if (d < best) best = d, best_i = i;
    expect(std::isfinite(pos[2 * i]) && std::isfinite(vel[2 * i]), "finite state");
  }
  expect(mean < 0.2 * first_mean, "the flock converged on the target");
  expect(closest >= 0 && closest < kAgents, "the closest agent is a valid index");
  expect(best < 1.0, "an agent reached the target");
  (void)best_i;

  // A script error is an exception with the script's line; the host goes on.
  try {
    rt.call("broken", P);
    expect(false, "broken() raised");
  } catch (const dlua::Error& e) {
    std::printf("script error (expected): %s\n", e.what());
    expect(std::string(e.what()).find("matmul") != std::string::npos, "the error names the op");
  }

  // The host takes its buffers back: the script can no longer touch them.
  P.release();
  try {
    rt.call_all("update", {P, V, T, kDt});
    expect(false, "a released buffer is refused");
  } catch (const dlua::Error& e) {
    expect(std::string(e.what()).find("revoked") != std::string::npos, "revoked");
  }

  std::printf("%d agents, %d frames: mean distance %.2f -> %.3f, closest agent %d%s\n", kAgents,
              kFrames, first_mean, mean, closest, failures ? "" : " (ok)");
  return failures ? 1 : 0;
}
