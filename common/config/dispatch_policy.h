#pragma once
// The dispatch policy (/dispatch), parsed once: the config loader stores the enum, and the live
// board, the planner and the simulator read it from config::Cluster::dispatch
// (common/dispatch/policy.h names it dispatch::Policy).  Header-only.
#include <optional>
#include <string_view>

namespace h3pipe::config {

enum class DispatchPolicy {
  // A pool claims a task only if the greedy earliest-completion assignment of the queued tasks
  // gives it one.  A slower pool therefore leaves a task to a faster pool that would finish it
  // sooner, even if the faster pool is still busy; this matters most at the tail of a batch.
  kCompletionTime,
  // Any idle pool claims the next task (what a plain shared queue does).
  kFirstFree,
};

inline const char* policy_name(DispatchPolicy p) {
  return p == DispatchPolicy::kCompletionTime ? "completion_time" : "first_free";
}

// "completion_time" | "first_free"; nullopt otherwise (a --policy argument, an adapted host map).
inline std::optional<DispatchPolicy> parse_policy(std::string_view name) {
  if (name == "completion_time") return DispatchPolicy::kCompletionTime;
  if (name == "first_free") return DispatchPolicy::kFirstFree;
  return std::nullopt;
}

}  // namespace h3pipe::config
