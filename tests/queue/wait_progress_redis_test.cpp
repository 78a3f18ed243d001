// `h3pipe wait`'s step progress (#37 item 3, cli/wait_progress.h) over a real redis-server: the
// run's step events become "sample k/n" while a job samples, in order, read after the last entry
// seen; a stage's end or the job's end clears it.
#include <gtest/gtest.h>

#include "cli/wait_progress.h"
#include "common/queue/events.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace ev = queue::events;

namespace {
void add(queue::Redis& r, std::string_view type, const std::string& job, long long k = 0,
         long long n = 0) {
  ev::Event e;
  e.type = std::string(type);
  e.job = job;
  e.stage = "sample";
  if (n) e.step = std::to_string(k), e.steps = std::to_string(n);
  ASSERT_TRUE(r.command(ev::run_xadd("r1", e)).ok());
}
}  // namespace

TEST(WaitProgress, ShowsEachSamplingJobsLatestStep) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  cli::StepProgress p;
  p.poll(**r, "r1");  // no stream yet
  EXPECT_EQ(p.summary(), "");
  add(**r, ev::kStageStarted, "a");
  add(**r, ev::kStep, "a", 1, 8);
  add(**r, ev::kStep, "a", 2, 8);
  p.poll(**r, "r1");
  EXPECT_EQ(p.summary(), "sample 2/8");
  EXPECT_EQ(p.take_lines(), (std::vector<std::string>{"a sample 1/8", "a sample 2/8"}));
  EXPECT_TRUE(p.take_lines().empty());
  add(**r, ev::kStep, "b", 5, 8);
  add(**r, ev::kStep, "c", 1, 4);
  p.poll(**r, "r1");
  EXPECT_EQ(p.summary(), "sample 2/8 (a), sample 5/8 (b) +1");
  EXPECT_EQ(p.take_lines(), (std::vector<std::string>{"b sample 5/8", "c sample 1/4"}));
  add(**r, ev::kStageFinished, "a");
  add(**r, ev::kCancelled, "c");
  p.poll(**r, "r1");
  EXPECT_EQ(p.summary(), "sample 5/8");
}
