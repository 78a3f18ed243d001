#pragma once
// Runs a program without a shell (posix_spawnp, argv as given) in its own process group, with
// stdin from /dev/null and stdout/stderr captured into bounded tails.  On timeout or
// cancellation the whole group gets SIGTERM, then SIGKILL after a grace period; when the leader
// exits, whatever it left running in its group is killed too, so nothing outlives a task.
//
// Threading: reentrant; each call owns its pipes and child.  SIGCHLD is not used (the child is
// polled with waitid), so it coexists with other code that spawns processes.
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::runtime {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;   // "KEY=VALUE", the complete environment
  std::string cwd;                // empty = inherit
  double timeout_s = 3600;
  double kill_grace_s = 2;             // SIGTERM -> SIGKILL
  std::size_t tail_bytes = 64 * 1024;  // kept from the end of each stream
  std::function<bool()> cancelled = [] { return false; };
  // Told each line the command writes (stdout and stderr alike, without the newline), on the
  // calling thread as it arrives: the exec runtime's `progress N/M` lines (#37).  Lines longer
  // than kMaxLineBytes are cut there.  Unset: lines are only kept in the tails.
  std::function<void(std::string_view line)> on_line{};
};
inline constexpr std::size_t kMaxLineBytes = 4096;

struct SpawnResult {
  int exit_code = -1;   // when exited normally; -1 if signalled or reaped elsewhere
  int term_signal = 0;  // when killed by a signal
  bool timed_out = false;
  bool cancelled = false;
  double seconds = 0;
  std::string stdout_tail, stderr_tail;
};

// Errors only when the program could not be started (code exec.spawn, naming argv[0]); a
// non-zero exit, a signal or a timeout is reported in SpawnResult.
Result<SpawnResult> spawn_and_wait(const SpawnOptions& options);

// The current process environment with `overrides` ("KEY=VALUE") replacing same-named entries.
std::vector<std::string> merged_environment(const std::vector<std::string>& overrides);

// Up to `max_bytes` from the end of `s`, starting at a line boundary when one is available.
std::string tail_text(const std::string& s, std::size_t max_bytes);

}  // namespace h3pipe::runtime
