#include "common/state/job_state.h"

namespace h3pipe::state {
namespace {

// Position along the pipeline; terminal failure states have none.
int rank(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return 0;
    case JobState::kEncode:
      return 1;
    case JobState::kSample:
      return 2;
    case JobState::kTransfer:
      return 3;
    case JobState::kDecode:
      return 4;
    case JobState::kDone:
      return 5;
    default:
      return -1;
  }
}

bool at_a_stage(JobState s) {
  return rank(s) >= 0 && s != JobState::kDone;
}

}  // namespace

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kNone:
      return "none";
    case JobState::kQueued:
      return "queued";
    case JobState::kEncode:
      return "encode";
    case JobState::kSample:
      return "sample";
    case JobState::kTransfer:
      return "transfer";
    case JobState::kDecode:
      return "decode";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "none";
}

std::optional<JobState> parse_job_state(std::string_view s) {
  if (s.empty()) return JobState::kNone;
  for (JobState j : kAllJobStates)
    if (s == job_state_name(j)) return j;
  return std::nullopt;
}

const char* event_name(Event e) {
  switch (e) {
    case Event::kAccept:
      return "accept";
    case Event::kReject:
      return "reject";
    case Event::kStart:
      return "start";
    case Event::kAdvance:
      return "advance";
    case Event::kFail:
      return "fail";
    case Event::kCancel:
      return "cancel";
    case Event::kReopen:
      return "reopen";
  }
  return "?";
}

bool terminal(JobState s) {
  return s == JobState::kDone || s == JobState::kFailed || s == JobState::kCancelled;
}

JobState stage_state(pb::Stage s) {
  switch (s) {
    case pb::STAGE_ENCODE:
      return JobState::kEncode;
    case pb::STAGE_SAMPLE:
      return JobState::kSample;
    case pb::STAGE_TRANSFER:
      return JobState::kTransfer;
    case pb::STAGE_DECODE:
      return JobState::kDecode;
    default:
      return JobState::kNone;
  }
}

Verdict judge(Event event, JobState from, JobState to) {
  using S = JobState;
  switch (event) {
    case Event::kAccept:
      return to == S::kQueued && from == S::kNone ? Verdict::kApply : Verdict::kRefuse;
    case Event::kReject:
      return to == S::kFailed && from == S::kNone ? Verdict::kApply : Verdict::kRefuse;
    case Event::kStart:
      if (to != S::kEncode && to != S::kSample && to != S::kDecode) return Verdict::kRefuse;
      return from == to || (to == S::kEncode && from == S::kQueued) ? Verdict::kApply
                                                                    : Verdict::kRefuse;
    case Event::kAdvance: {
      bool legal = false;
      switch (to) {
        case S::kSample:
          legal = from == S::kEncode;
          break;
        case S::kTransfer:
          legal = from == S::kSample;
          break;
        case S::kDecode:
          legal = from == S::kSample || from == S::kTransfer;
          break;
        case S::kDone:
          legal = from == S::kDecode;
          break;
        default:
          return Verdict::kRefuse;
      }
      if (legal) return Verdict::kApply;
      return rank(from) >= rank(to) && rank(from) > 0 ? Verdict::kAlreadyPast : Verdict::kRefuse;
    }
    case Event::kFail:
      return to == S::kFailed && at_a_stage(from) ? Verdict::kApply : Verdict::kRefuse;
    case Event::kCancel:
      return to == S::kCancelled && at_a_stage(from) ? Verdict::kApply : Verdict::kRefuse;
    case Event::kReopen:
      if (to != S::kEncode && to != S::kSample && to != S::kTransfer && to != S::kDecode)
        return Verdict::kRefuse;
      return from != S::kNone ? Verdict::kApply : Verdict::kRefuse;
  }
  return Verdict::kRefuse;
}

std::vector<JobState> states_with(Event event, JobState to, Verdict v) {
  std::vector<JobState> out;
  for (JobState from : kAllJobStates)
    if (judge(event, from, to) == v) out.push_back(from);
  return out;
}

}  // namespace h3pipe::state
