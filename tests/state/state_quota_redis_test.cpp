// Quotas that hold (users.NAME.over_quota "hold"; common/state/quota.h) in a real redis-server
// (label: redis): a job past the quota is accepted onto the user's held stream, where no claim
// sees it; release_held moves the oldest held tasks to the encode stream, with their fields, only
// while the user's admitted jobs are under the quota.
#include <gtest/gtest.h>

#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/state/quota.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;

namespace {

const std::vector<std::string> kStreams = {keys::stream("encode"), keys::stream("sample")};

pb::JobSpec spec(const std::string& job) {
  pb::JobSpec s;
  s.set_job_id(job);
  s.set_prompt("p");
  s.set_user("Q");
  s.set_priority(1);
  return s;
}

std::vector<std::string> ids(queue::Redis& r, const std::string& stream) {
  std::vector<std::string> out;
  auto es = queue::read_range(r, stream, "-", "+");
  EXPECT_TRUE(es.ok());
  for (const auto& e : *es) out.push_back(e.fields.at("job"));
  return out;
}

}  // namespace

TEST(QuotaHold, JobsPastTheQuotaWaitHeldAndAreReleasedOldestFirstUnderIt) {
  ts::RedisServer srv;
  auto c = srv.connect();
  ASSERT_TRUE(c.ok());
  auto& r = **c;
  state::Store store(r);
  for (const std::string job : {"a", "b", "c", "d"}) {
    auto to = state::accept_stream(r, kStreams, "Q", 2);
    ASSERT_TRUE(to.ok()) << to.error().to_string();
    auto ok = store.accept_job("run1", spec(job), "task-" + job, *to);
    ASSERT_TRUE(ok.ok() && *ok) << job;
  }
  EXPECT_EQ(ids(r, keys::stream("encode")), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ids(r, keys::held("Q")), (std::vector<std::string>{"c", "d"}));
  // Every job is accepted and queued, held or not.
  EXPECT_EQ(test_support::hget(r, keys::job("run1", "d"), "state"), "queued");
  // At the quota: nothing released; in flight counts the held ones too (the refuse mode's count).
  auto none = state::release_held(r, kStreams, "Q", 2);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  auto flying = state::user_jobs_in_flight(r, kStreams, "Q");
  ASSERT_TRUE(flying.ok());
  EXPECT_EQ(*flying, 4);
  // a finishes (its entry leaves the stage streams): c, the oldest held, goes to encode.
  auto es = queue::read_range(r, keys::stream("encode"), "-", "+");
  ASSERT_TRUE(es.ok());
  ASSERT_TRUE(r.command({"XDEL", keys::stream("encode"), es->front().id}).ok());
  auto one = state::release_held(r, kStreams, "Q", 2);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, 1);
  EXPECT_EQ(ids(r, keys::stream("encode")), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(ids(r, keys::held("Q")), (std::vector<std::string>{"d"}));
  es = queue::read_range(r, keys::stream("encode"), "-", "+");
  ASSERT_TRUE(es.ok());
  const auto& c_entry = es->back();
  EXPECT_EQ(c_entry.payload, "task-c");
  EXPECT_EQ(c_entry.fields.at("user"), "Q");
  EXPECT_EQ(c_entry.fields.at("prio"), "1");
  EXPECT_EQ(c_entry.fields.at("run"), "run1");
  EXPECT_EQ(test_support::hget(r, keys::job("run1", "c"), "task:encode"), c_entry.id);
  // While anything is held a new job queues behind it, even under the quota.
  ASSERT_TRUE(r.command({"DEL", keys::stream("encode")}).ok());
  auto to = state::accept_stream(r, kStreams, "Q", 2);
  ASSERT_TRUE(to.ok());
  EXPECT_EQ(*to, keys::held("Q"));
  auto two = state::release_held(r, kStreams, "Q", 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, 1);  // d: all there was
  auto rest = state::held_tasks(r, "Q");
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(*rest, 0);
}
