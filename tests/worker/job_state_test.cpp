// The job state machine's table (label: unit): every legal move, and every illegal one refused.
#include "common/state/job_state.h"

#include <gtest/gtest.h>

#include <set>

using namespace h3pipe::state;
using S = JobState;

namespace {
std::set<S> from_states(Event e, S to, Verdict v) {
  auto l = states_with(e, to, v);
  return {l.begin(), l.end()};
}
}  // namespace

TEST(JobStateMachine, TheLegalMovesAreExactlyTheDocumentedOnes) {
  EXPECT_EQ(from_states(Event::kAccept, S::kQueued, Verdict::kApply), (std::set<S>{S::kNone}));
  EXPECT_EQ(from_states(Event::kReject, S::kFailed, Verdict::kApply), (std::set<S>{S::kNone}));
  EXPECT_EQ(from_states(Event::kStart, S::kEncode, Verdict::kApply),
            (std::set<S>{S::kQueued, S::kEncode}));
  EXPECT_EQ(from_states(Event::kStart, S::kSample, Verdict::kApply), (std::set<S>{S::kSample}));
  EXPECT_EQ(from_states(Event::kStart, S::kDecode, Verdict::kApply), (std::set<S>{S::kDecode}));
  EXPECT_EQ(from_states(Event::kAdvance, S::kSample, Verdict::kApply), (std::set<S>{S::kEncode}));
  EXPECT_EQ(from_states(Event::kAdvance, S::kTransfer, Verdict::kApply), (std::set<S>{S::kSample}));
  EXPECT_EQ(from_states(Event::kAdvance, S::kDecode, Verdict::kApply),
            (std::set<S>{S::kSample, S::kTransfer}));
  EXPECT_EQ(from_states(Event::kAdvance, S::kDone, Verdict::kApply), (std::set<S>{S::kDecode}));
  const std::set<S> at_a_stage = {S::kQueued, S::kEncode, S::kSample, S::kTransfer, S::kDecode};
  EXPECT_EQ(from_states(Event::kFail, S::kFailed, Verdict::kApply), at_a_stage);
  EXPECT_EQ(from_states(Event::kCancel, S::kCancelled, Verdict::kApply), at_a_stage);
  for (S to : {S::kEncode, S::kSample, S::kTransfer, S::kDecode}) {
    auto reopen = from_states(Event::kReopen, to, Verdict::kApply);
    EXPECT_EQ(reopen.size(), 8u);
    EXPECT_FALSE(reopen.count(S::kNone));
  }
}

TEST(JobStateMachine, AnAdvanceToWhereTheJobAlreadyIsOrWasIsAlreadyPast) {
  EXPECT_EQ(from_states(Event::kAdvance, S::kSample, Verdict::kAlreadyPast),
            (std::set<S>{S::kSample, S::kTransfer, S::kDecode, S::kDone}));
  EXPECT_EQ(from_states(Event::kAdvance, S::kTransfer, Verdict::kAlreadyPast),
            (std::set<S>{S::kTransfer, S::kDecode, S::kDone}));
  EXPECT_EQ(from_states(Event::kAdvance, S::kDecode, Verdict::kAlreadyPast),
            (std::set<S>{S::kDecode, S::kDone}));
  EXPECT_EQ(from_states(Event::kAdvance, S::kDone, Verdict::kAlreadyPast), (std::set<S>{S::kDone}));
  // Only advances are ever "already past".
  for (Event e : kAllEvents)
    for (S to : kAllJobStates)
      if (e != Event::kAdvance) {
        EXPECT_TRUE(from_states(e, to, Verdict::kAlreadyPast).empty());
      }
}

TEST(JobStateMachine, TheIllegalMovesTheIssueNamesAreRefused) {
  EXPECT_EQ(judge(Event::kFail, S::kDone, S::kFailed), Verdict::kRefuse);  // done back to failed
  EXPECT_EQ(judge(Event::kCancel, S::kDone, S::kCancelled), Verdict::kRefuse);
  for (S to : {S::kEncode, S::kSample, S::kDecode}) {
    EXPECT_EQ(judge(Event::kStart, S::kCancelled, to),
              Verdict::kRefuse);  // a cancelled job claimed
    EXPECT_EQ(judge(Event::kStart, S::kDone, to), Verdict::kRefuse);
    EXPECT_EQ(judge(Event::kStart, S::kFailed, to), Verdict::kRefuse);
    EXPECT_EQ(judge(Event::kStart, S::kNone, to), Verdict::kRefuse);  // a task without a job
  }
  EXPECT_EQ(judge(Event::kAdvance, S::kFailed, S::kDone), Verdict::kRefuse);
  EXPECT_EQ(judge(Event::kAdvance, S::kCancelled, S::kSample), Verdict::kRefuse);
  EXPECT_EQ(judge(Event::kAdvance, S::kQueued, S::kSample),
            Verdict::kRefuse);  // an encode never started
  EXPECT_EQ(judge(Event::kAccept, S::kDone, S::kQueued), Verdict::kRefuse);  // a job accepted twice
  EXPECT_EQ(judge(Event::kReject, S::kDone, S::kFailed),
            Verdict::kRefuse);  // a refusal never flips a job
  EXPECT_EQ(judge(Event::kReopen, S::kNone, S::kEncode), Verdict::kRefuse);
  // Targets an event cannot have.
  EXPECT_EQ(judge(Event::kStart, S::kTransfer, S::kTransfer), Verdict::kRefuse);
  EXPECT_EQ(judge(Event::kReopen, S::kFailed, S::kDone), Verdict::kRefuse);
  EXPECT_EQ(judge(Event::kAdvance, S::kDecode, S::kFailed), Verdict::kRefuse);
}

TEST(JobStateMachine, TerminalStatesLeaveOnlyByReopen) {
  for (S from : {S::kDone, S::kFailed, S::kCancelled})
    for (Event e : kAllEvents)
      for (S to : kAllJobStates)
        if (e != Event::kReopen && judge(e, from, to) == Verdict::kApply)
          ADD_FAILURE() << job_state_name(from) << " -" << event_name(e) << "-> "
                        << job_state_name(to);
}

TEST(JobStateMachine, NamesRoundTrip) {
  for (S s : kAllJobStates) EXPECT_EQ(parse_job_state(job_state_name(s)), s);
  EXPECT_EQ(parse_job_state(""), S::kNone);
  EXPECT_FALSE(parse_job_state("finished").has_value());
}
