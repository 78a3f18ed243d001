// The job state machine in a real redis-server (label: redis): Store::apply's Lua gives the
// table's verdict (state::judge) for every event, from-state and target, applies nothing when it
// refuses, and keeps the run's per-state counts equal to the jobs' states.
#include <gtest/gtest.h>

#include <random>

#include "common/queue/keys.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using namespace h3pipe::state;
using queue::reply_int;
using queue::reply_str;

namespace {

using test_support::hget;

Move move(const std::string& job, Event e, JobState to) {
  Move m;
  m.run_id = "r";
  m.job_id = job;
  m.event = e;
  m.to = to;
  m.record = {op::CountWritten{pb::STAGE_ENCODE}};  // wrote:encode
  m.next = {op::SetError{"nexted"}};
  return m;
}

}  // namespace

TEST(JobStateRedis, TheScriptGivesTheTablesVerdictForEveryMove) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  Store store(**r);
  int n = 0;
  for (Event e : kAllEvents)
    for (JobState from : kAllJobStates)
      for (JobState to : kAllJobStates) {
        const std::string job = "j" + std::to_string(n++);
        if (from != JobState::kNone) {
          ASSERT_TRUE(
              (*r)->command({"HSET", keys::job("r", job), "state", job_state_name(from)}).ok());
        }
        auto got = store.apply(move(job, e, to));
        ASSERT_TRUE(got.ok()) << got.error().message;
        const Verdict want = judge(e, from, to);
        const std::string what =
            fmt::format("{} -{}-> {}", job_state_name(from), event_name(e), job_state_name(to));
        const std::string now = hget(**r, keys::job("r", job), "state");
        EXPECT_EQ(got->from, from) << what;
        switch (want) {
          case Verdict::kApply:
            EXPECT_EQ(got->code, Applied::kApplied) << what;
            EXPECT_EQ(now, job_state_name(to)) << what;
            EXPECT_EQ(hget(**r, keys::job("r", job), "wrote:encode"), "1") << what;
            EXPECT_EQ(hget(**r, keys::job("r", job), "error"), "nexted") << what;
            break;
          case Verdict::kAlreadyPast:
            EXPECT_EQ(got->code, Applied::kAlreadyPast) << what;
            EXPECT_EQ(now, job_state_name(from)) << what;
            EXPECT_EQ(hget(**r, keys::job("r", job), "wrote:encode"), "1") << what;
            EXPECT_EQ(hget(**r, keys::job("r", job), "error"), "") << what;
            break;
          case Verdict::kRefuse:
            EXPECT_EQ(got->code, Applied::kRefused) << what;
            EXPECT_EQ(now, from == JobState::kNone ? "" : job_state_name(from)) << what;
            EXPECT_EQ(hget(**r, keys::job("r", job), "wrote:encode"), "") << what;
            EXPECT_EQ(hget(**r, keys::job("r", job), "error"), "") << what;
            break;
        }
      }
  // Every refusal is counted, by its from>to pair.
  long long refused = 0;
  for (Event e : kAllEvents)
    for (JobState from : kAllJobStates)
      for (JobState to : kAllJobStates) refused += judge(e, from, to) == Verdict::kRefuse;
  EXPECT_EQ(std::stoll(hget(**r, keys::run("r"), "illegal")), refused);
  EXPECT_GE(std::stoll(hget(**r, keys::run("r"), "illegal:done>failed")), 1);
}

TEST(JobStateRedis, RunCountersFollowTheJobsThroughRandomMoves) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  Store store(**r);
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) {
    pb::JobSpec s;
    s.set_job_id("j" + std::to_string(i));
    auto a = store.accept_job("r", s, "task");
    ASSERT_TRUE(a.ok() && *a);
  }
  for (int k = 0; k < 600; ++k) {
    const std::string job = "j" + std::to_string(rng() % 12);
    const Event e = kAllEvents[rng() % std::size(kAllEvents)];
    const JobState to = kAllJobStates[rng() % std::size(kAllJobStates)];
    ASSERT_TRUE(store.apply(move(job, e, to)).ok());
  }
  auto st = store.run_status("r");
  ASSERT_TRUE(st.ok());
  auto jobs = store.jobs("r");
  ASSERT_TRUE(jobs.ok());
  std::map<std::string, long long> actual;
  for (const auto& j : *jobs) actual[j.state]++;
  for (JobState s : kAllJobStates) {
    if (s == JobState::kNone) continue;
    const long long counted =
        st->in_state.count(job_state_name(s)) ? st->in_state.at(job_state_name(s)) : 0;
    EXPECT_EQ(counted, actual[job_state_name(s)]) << job_state_name(s);
  }
  EXPECT_EQ(st->total, 12);
  EXPECT_EQ(st->done, actual["done"]);
  EXPECT_EQ(st->failed, actual["failed"]);
  EXPECT_EQ(st->cancelled_jobs, actual["cancelled"]);
  EXPECT_GT(st->illegal, 0);
}

TEST(JobStateRedis, AMoveWithAnEntryAcksItOnlyWhileItIsOursAndACancelOnlyWhileTheRunIsCancelled) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  Store store(**r);
  queue::StageQueue q(**r, {keys::stream("sample"), "sample", "me", 1000, 20, 10});
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.enqueue("t").ok());
  auto e = q.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  ASSERT_TRUE((*r)->command({"HSET", keys::job("r", "j"), "state", "sample"}).ok());
  // Another consumer's move: the entry is not its own; nothing happens.
  auto m = Store::cancel_move("r", "j", pb::STAGE_SAMPLE);
  m.ack = QueueAck{keys::stream("sample"), "sample", "someone-else", (*e)->id};
  ASSERT_TRUE(store.cancel("r").ok());
  EXPECT_EQ(store.apply(m)->code, Applied::kLeaseLost);
  // The run is no longer cancelled (resumed): the cancel does not apply and the entry stays.
  m.ack->consumer = "me";
  ASSERT_TRUE((*r)->command({"HSET", keys::run("r"), "cancelled", "0"}).ok());
  EXPECT_EQ(store.apply(m)->code, Applied::kNotCancelled);
  EXPECT_EQ(*q.pending_count(), 1);
  EXPECT_EQ(hget(**r, keys::job("r", "j"), "state"), "sample");
  // Cancelled again: applied, acked, the reason recorded, counted as cancelled (not failed).
  ASSERT_TRUE(store.cancel("r").ok());
  EXPECT_EQ(store.apply(m)->code, Applied::kApplied);
  EXPECT_EQ(*q.pending_count(), 0);
  EXPECT_EQ(hget(**r, keys::job("r", "j"), "error"),
            "cancelled at sample: the run was cancelled (h3pipe cancel)");
  auto st = store.run_status("r");
  EXPECT_EQ(st->cancelled_jobs, 1);
  EXPECT_EQ(st->failed, 0);
  // A stale task of the cancelled job: its start is refused and the entry dropped.
  ASSERT_TRUE(q.enqueue("t2").ok());
  auto e2 = q.claim();
  ASSERT_TRUE(e2.ok() && e2->has_value());
  auto a = store.start_attempt("r", "j", pb::STAGE_SAMPLE,
                               QueueAck{keys::stream("sample"), "sample", "me", (*e2)->id});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->refused);
  EXPECT_EQ(a->from, JobState::kCancelled);
  EXPECT_EQ(*q.pending_count(), 0);
  EXPECT_EQ(hget(**r, keys::run("r"), "illegal:cancelled>sample"), "1");
}

TEST(JobStateRedis, ARunIsExpectedToHoldTheIdsItWasGivenOnceEach) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  Store store(**r);
  // `h3pipe run --run-id X` twice with the same batch: the run still expects three jobs (it
  // expected six and `wait` hung at 3/6).
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(store.create_run("r", {"a", "b", "c"}).ok());
  for (const char* j : {"a", "b", "c"}) {
    pb::JobSpec s;
    s.set_job_id(j);
    ASSERT_TRUE(store.accept_job("r", s, "t").ok());
    ASSERT_FALSE(*store.accept_job("r", s, "t"));  // the resubmission is not a second job
  }
  auto st = store.run_status("r");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->expected, 3);
  EXPECT_EQ(st->total, 3);
  EXPECT_FALSE(st->finished());
  for (const char* j : {"a", "b", "c"}) {
    for (auto [e, to] : {std::pair{Event::kStart, JobState::kEncode},
                         {Event::kAdvance, JobState::kSample},
                         {Event::kAdvance, JobState::kDecode},
                         {Event::kAdvance, JobState::kDone}}) {
      auto m = move(j, e, to);
      ASSERT_EQ(store.apply(m)->code, Applied::kApplied) << j << " " << event_name(e);
    }
  }
  st = store.run_status("r");
  EXPECT_EQ(st->done, 3);
  EXPECT_TRUE(st->finished());
  EXPECT_EQ(st->stage_jobs(),
            (std::map<std::string, long long>{{"encode", 3}, {"sample", 3}, {"decode", 3}}));
}
