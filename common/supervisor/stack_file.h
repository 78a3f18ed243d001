#pragma once
// <state>/stack.json, read only from a trusted state dir (state_dir.h), and the proof that the
// pid it names is this state dir's supervisor (issue #22: after a kill -9 of the supervisor its
// stack.json stays, and the pid may be anybody's by now).  A process is the stack's supervisor
// only when all of these hold:
//   - its start time (/proc/PID/stat field 22) is the one stack.json records;
//   - it is the h3pipe CLI binary (/proc/PID/exe) and named "h3pipe-super" (/proc/PID/comm, set by
//     the supervisor);
//   - one of its descriptors is open on <state>/supervisor.lock and holds the flock the
//     supervisor keeps for its whole life (/proc/PID/fdinfo/FD has the FLOCK line).
#include <sys/types.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/core/result.h"

namespace h3pipe::supervisor {

inline constexpr const char kSupervisorComm[] = "h3pipe-super";

std::filesystem::path stack_file(const std::filesystem::path& state_dir);
std::filesystem::path lock_file(const std::filesystem::path& state_dir);

// stack.json after the state dir, the file and its sidecar are checked; nullopt when there is
// none (or it is not complete JSON).  Errors: state_dir.unsafe, io.stat.
Result<std::optional<nlohmann::json>> read_stack(const std::filesystem::path& state_dir);

// /proc/PID/stat field 22 (clock ticks after boot), -1 when there is no such process (or only
// its zombie).
long long process_start_time(pid_t pid);

struct Proof {
  bool supervisor = false;
  std::string why;  // when not: "is not running", "is another process (...)"
};
// Whether stack.json's supervisor_pid is this state dir's live supervisor.
Proof prove_supervisor(const std::filesystem::path& state_dir, const nlohmann::json& stack);

// Whether `pid` is still the process that started at `start_time` (no reuse).
bool same_process(pid_t pid, long long start_time);

}  // namespace h3pipe::supervisor
