#pragma once
// The live events of a run (#37, "the events contract"): every producer writes the same fields
// through these helpers, so the API's SSE and webhook delivery read one shape.
//
//   per run:  XADD keys::run_events(run) MAXLEN ~ kEventsMaxLen * type T job J stage S ...
//   terminal: XADD keys::terminal_events() MAXLEN ~ kEventsMaxLen * ... run R   (terminal types
//             only, in the same MULTI/EXEC or script as the state change that ends the job)
//
// All field values are strings; empty ones are left out.  `ts_ms` is the writer's wall clock.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace h3pipe::queue::events {

inline constexpr std::string_view kQueued = "video.queued";
inline constexpr std::string_view kStageStarted = "stage.started";
inline constexpr std::string_view kStageFinished = "stage.finished";
inline constexpr std::string_view kStep = "step";
inline constexpr std::string_view kPreview = "preview";
inline constexpr std::string_view kFailed = "video.failed";
inline constexpr std::string_view kCompleted = "video.completed";
inline constexpr std::string_view kCancelled = "video.cancelled";

inline constexpr long long kEventsMaxLen = 100000;

// Whether `type` goes to the global terminal stream too.
bool is_terminal(std::string_view type);

struct Event {
  // Each member with its initializer, so that a designated initializer may leave any out.
  std::string type{};  // one of the constants above
  std::string job{};
  std::string stage{};  // encode | sample | transfer | decode (empty: none)
  std::string host{};
  std::string pool{};
  std::string attempt{};
  std::string step{};  // type step: 1-based step done
  std::string steps{};
  std::string reason{};    // failed / cancelled
  std::int64_t ts_ms = 0;  // 0: now
  // Extra fields (a preview's `image`, `format`...): appended as they are.
  std::vector<std::pair<std::string, std::string>> extra{};
};

// Wall clock in ms since the epoch (what ts_ms carries).
std::int64_t now_ms();

// The field/value list of an event (no `run`), in the contract's order: what a Lua script gets as
// ARGV to XADD itself.
std::vector<std::string> fields(const Event& e);

// XADD KEY MAXLEN ~ kEventsMaxLen * FIELDS... for the run's stream.
std::vector<std::string> run_xadd(std::string_view run, const Event& e);
// The same for keys::terminal_events(), with `run` (callers check is_terminal).
std::vector<std::string> terminal_xadd(std::string_view run, const Event& e);

// Reads the field/value array of a stream entry back into an Event (unknown fields into extra,
// `run` into *run when given).  For consumers and tests.
Event from_fields(const std::vector<std::pair<std::string, std::string>>& kv,
                  std::string* run = nullptr);

}  // namespace h3pipe::queue::events
