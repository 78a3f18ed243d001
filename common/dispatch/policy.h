#pragma once
// The dispatch policy's name, parsed in one place.  Header-only and free of every other h3pipe
// header, so that the config loader (below this module) can parse /dispatch with it: the config
// stores the enum, the live board, the planner and the simulator read it from there.
#include <optional>
#include <string_view>

namespace h3pipe::dispatch {

enum class Policy {
  // A pool claims a task only if the greedy earliest-completion assignment of the queued tasks
  // gives it one.  A slower pool therefore leaves a task to a faster pool that would finish it
  // sooner, even if the faster pool is still busy; this matters most at the tail of a batch.
  kCompletionTime,
  // Any idle pool claims the next task (what a plain shared queue does).
  kFirstFree,
};

inline const char* policy_name(Policy p) {
  return p == Policy::kCompletionTime ? "completion_time" : "first_free";
}

// "completion_time" | "first_free"; nullopt otherwise.
inline std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "completion_time") return Policy::kCompletionTime;
  if (name == "first_free") return Policy::kFirstFree;
  return std::nullopt;
}

}  // namespace h3pipe::dispatch
