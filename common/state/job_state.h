#pragma once
// The job state machine: every state a job can be in, every event that moves it, and the one
// table that says which moves are legal.  It is pure (no Redis): Store::apply (state.h) applies a
// move atomically in Redis by handing this table's verdicts to one Lua script, and the stage
// engine's tests apply it in memory, so both obey exactly the same rules.
//
//   none --accept--> queued --start--> encode --advance--> sample --advance--> transfer
//                                                               \                  |
//                                                                `---advance--> decode --advance-->
//                                                                done
//   any stage state --fail--> failed      any stage state --cancel--> cancelled
//   any state but none --reopen (resume)--> encode | sample | transfer | decode
//   none --reject--> failed (a submission refused at ingest)
//
// A stage state means the job is at that stage, waiting or running.  Terminal states (done,
// failed, cancelled) leave only by reopen.  An advance to a state the job is already at or past
// (a second completion of the same stage, a receiver that delivered before the sampler acked) is
// "already past": the history is kept, the state and the next task are not touched.  Everything
// else is refused and counted (the run's `illegal` field): a done job is never failed, a
// cancelled job is never claimed.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/proto/h3pipe.pb.h"

namespace h3pipe::state {

enum class JobState {
  kNone,
  kQueued,
  kEncode,
  kSample,
  kTransfer,
  kDecode,
  kDone,
  kFailed,
  kCancelled
};
enum class Event { kAccept, kReject, kStart, kAdvance, kFail, kCancel, kReopen };
enum class Verdict { kApply, kAlreadyPast, kRefuse };

inline constexpr JobState kAllJobStates[] = {
    JobState::kNone,   JobState::kQueued,   JobState::kEncode,
    JobState::kSample, JobState::kTransfer, JobState::kDecode,
    JobState::kDone,   JobState::kFailed,   JobState::kCancelled};
inline constexpr Event kAllEvents[] = {Event::kAccept,  Event::kReject, Event::kStart,
                                       Event::kAdvance, Event::kFail,   Event::kCancel,
                                       Event::kReopen};

const char* job_state_name(JobState s);  // "none" for kNone (a job hash without a state)
std::optional<JobState> parse_job_state(std::string_view s);  // "" parses as kNone
const char* event_name(Event e);
bool terminal(JobState s);

// The state a stage's task is processed in (encode, sample, transfer, decode).
JobState stage_state(pb::Stage s);

// The verdict on `event` moving a job from `from` to `to`.
Verdict judge(Event event, JobState from, JobState to);

// The states from which judge(event, ., to) gives `v`: what the Lua script is handed.
std::vector<JobState> states_with(Event event, JobState to, Verdict v);

}  // namespace h3pipe::state
