// The events contract's producers in the state store (#37, label: redis): video.queued with the
// accept, stage.finished / video.completed / video.failed / video.cancelled in the move's own
// script, each terminal one also on the global stream with its run; a move that does not apply
// (a resubmission, a repeated completion, a cancel after resume) writes none.
#include <gtest/gtest.h>

#include "common/queue/events.h"
#include "common/queue/keys.h"
#include "common/queue/reply.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using namespace h3pipe::state;
using queue::reply_str;

namespace {

struct Entry {
  std::string id;
  queue::events::Event e;
  std::string run;
};

std::vector<Entry> read_stream(queue::Redis& r, const std::string& key) {
  std::vector<Entry> out;
  auto rep = r.command({"XRANGE", key, "-", "+"});
  EXPECT_TRUE(rep.ok());
  if (!rep.ok()) return out;
  const redisReply* a = rep->get();
  for (size_t i = 0; i < a->elements; ++i) {
    const redisReply* en = a->element[i];
    std::vector<std::pair<std::string, std::string>> kv;
    const redisReply* f = en->element[1];
    for (size_t k = 0; k + 1 < f->elements; k += 2)
      kv.emplace_back(reply_str(f->element[k]), reply_str(f->element[k + 1]));
    Entry x;
    x.id = reply_str(en->element[0]);
    x.e = queue::events::from_fields(kv, &x.run);
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<std::string> types(const std::vector<Entry>& es) {
  std::vector<std::string> out;
  for (const auto& x : es) out.push_back(x.e.type);
  return out;
}

pb::JobSpec spec(const std::string& job) {
  pb::JobSpec s;
  s.set_job_id(job);
  s.set_prompt("p");
  return s;
}

}  // namespace

TEST(EventsRedis, AcceptAnnouncesQueuedOnceAndRejectAFailure) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  Store store(**r);
  ASSERT_TRUE(*store.accept_job("r", spec("a"), "t"));
  ASSERT_FALSE(*store.accept_job("r", spec("a"), "t"));  // a resubmission: no second event
  ASSERT_TRUE(store.reject_job("r", "bad", "prompt: expected a non-empty string").ok());
  auto es = read_stream(**r, keys::run_events("r"));
  ASSERT_EQ(types(es), (std::vector<std::string>{"video.queued", "video.failed"}));
  EXPECT_EQ(es[0].e.job, "a");
  EXPECT_GT(es[0].e.ts_ms, 0);
  EXPECT_EQ(es[1].e.reason, "prompt: expected a non-empty string");
  auto term = read_stream(**r, keys::terminal_events());
  ASSERT_EQ(term.size(), 1u);
  EXPECT_EQ(term[0].e.type, "video.failed");
  EXPECT_EQ(term[0].e.job, "bad");
  EXPECT_EQ(term[0].run, "r");
}

TEST(EventsRedis, TerminalMovesAnnounceOnBothStreamsOnlyWhenTheyApply) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  Store store(**r);
  for (const char* j : {"done", "fail", "cancel"})
    ASSERT_TRUE((*r)->command({"HSET", keys::job("r", j), "state", "decode"}).ok());
  pb::StageRecord rec;
  rec.set_stage(pb::STAGE_DECODE);
  rec.set_host("h1");
  rec.set_pool("dec");
  rec.set_attempts(2);
  auto m = Store::advance_move("r", "done", rec, JobState::kDone);
  ASSERT_EQ(store.apply(m)->code, Applied::kApplied);
  ASSERT_EQ(store.apply(m)->code, Applied::kAlreadyPast);  // a repeat: no second completion
  auto f = Store::fail_move("r", "fail", pb::STAGE_DECODE, "mux failed");
  f.announce[0].host = "h1";
  ASSERT_EQ(store.apply(f)->code, Applied::kApplied);
  ASSERT_EQ(store.apply(f)->code, Applied::kRefused);
  // A cancel applies only while the run's flag is set.
  ASSERT_EQ(store.apply(Store::cancel_move("r", "cancel", pb::STAGE_DECODE))->code,
            Applied::kNotCancelled);
  ASSERT_TRUE(store.cancel("r").ok());
  ASSERT_EQ(store.apply(Store::cancel_move("r", "cancel", pb::STAGE_DECODE))->code,
            Applied::kApplied);

  auto es = read_stream(**r, keys::run_events("r"));
  ASSERT_EQ(types(es), (std::vector<std::string>{"stage.finished", "video.completed",
                                                 "video.failed", "video.cancelled"}));
  EXPECT_EQ(es[0].e.stage, "decode");
  EXPECT_EQ(es[0].e.host, "h1");
  EXPECT_EQ(es[0].e.pool, "dec");
  EXPECT_EQ(es[0].e.attempt, "2");
  EXPECT_EQ(es[2].e.reason, "decode: mux failed");
  EXPECT_EQ(es[2].e.host, "h1");
  EXPECT_EQ(es[3].e.job, "cancel");
  EXPECT_FALSE(es[3].e.reason.empty());
  auto term = read_stream(**r, keys::terminal_events());
  ASSERT_EQ(types(term),
            (std::vector<std::string>{"video.completed", "video.failed", "video.cancelled"}));
  for (const auto& x : term) EXPECT_EQ(x.run, "r");
  EXPECT_EQ(term[0].e.job, "done");
  // Capped: every XADD carries MAXLEN ~.
  auto argv = queue::events::run_xadd("r", es[0].e);
  EXPECT_EQ(argv[2], "MAXLEN");
}
