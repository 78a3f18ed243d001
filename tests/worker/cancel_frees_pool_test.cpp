// A cancel frees the GPU (#37 item 5), measured on a real redis-server with the real stage
// worker: a sampler with slow steps that checks for a cancel between steps (as the builtin
// sampler's Dit::sample does) runs job a; the run is cancelled (Store::cancel, what `h3pipe
// cancel` and the API's cancel and DELETE call); the pool stops a between steps and claims its
// next task (b) within one step + 1 s.  The run's events say a started, stepped and was cancelled.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/metrics/metrics.h"
#include "common/queue/events.h"
#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/queue/streams.h"
#include "common/state/paths.h"
#include "common/state/state.h"
#include "common/worker/worker.h"
#include "tests/support/cluster.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 8;
constexpr auto kStep = std::chrono::milliseconds(500);

// The builtin sampler's loop shape with a step that takes kStep: a cancel is seen only between
// steps, each step told to ctx.progress.
class SlowSteps final : public runtime::StageRuntime {
 public:
  std::atomic<int> steps_done{0};
  Result<runtime::StageOutput> run(const runtime::StageContext& ctx) override {
    for (int k = 0; k < kSteps; ++k) {
      if (ctx.cancelled()) return make_error(errc::runtime::kCancelled, "cancelled at step {}", k);
      std::this_thread::sleep_for(kStep);
      ctx.progress(k + 1, kSteps);
      ++steps_done;
    }
    return make_error(errc::io::kWrite, "this test's sampler never finishes a job");
  }
};

pb::StageTask sample_task(const std::string& run, const std::string& job) {
  pb::StageTask t;
  t.set_run_id(run);
  t.set_job_id(job);
  t.set_stage(pb::STAGE_SAMPLE);
  auto* s = t.mutable_spec();
  s->set_job_id(job);
  s->set_prompt("a cat");
  s->set_width(64);
  s->set_height(64);
  s->set_frames(9);
  s->set_fps(24);
  s->set_steps(kSteps);
  return t;
}

}  // namespace

TEST(CancelFreesPool,
     ARunningSamplerStopsBetweenStepsAndThePoolClaimsItsNextTaskWithinAStepAndASecond) {
  ts::RedisServer srv;
  ts::TempDir dir;
  auto c = config::parse(ts::one_host_on_redis(srv.port(), dir.path()), dir.path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  state::Store store(**r);
  const std::string run = "r-cancel";
  ASSERT_TRUE(store.create_run(run, {"a", "b"}).ok());
  queue::StageQueue q(
      **r, {worker::stream_for(config::StageKind::kSample, "h1"), "sample", "test", 60000, 20, 10});
  ASSERT_TRUE(q.ensure_group().ok());
  for (const std::string job : {"a", "b"}) {
    auto cond = paths::conditioning(*c, run, job);
    ASSERT_TRUE(cond.ok());
    fs::create_directories(cond->parent_path());
    ASSERT_TRUE(latent::write_tensors(*cond, {{"cond", {{4, 8}, std::vector<float>(32, 0.5f)}}},
                                      {{"job", job}})
                    .ok());
    ASSERT_TRUE(q.enqueue(sample_task(run, job).SerializeAsString()).ok());
    ASSERT_TRUE((*r)->command({"HSET", keys::job(run, job), "state", "sample"}).ok());
  }

  const auto* pool = c->find_pool("samp");
  auto slow = std::make_unique<SlowSteps>();
  SlowSteps* rt = slow.get();
  std::unique_ptr<runtime::StageRuntime> rts = std::move(slow);
  prometheus::Registry reg;
  metrics::WorkerProbe probe(reg, "sample", pool->name, pool->host);
  std::mutex mu;
  std::optional<Clock::time_point> claimed_b;
  worker::Hooks hooks;
  hooks.on_event = [&](const std::string& what, const pb::StageTask& t) {
    std::lock_guard<std::mutex> l(mu);
    if (what == "claimed" && t.job_id() == "b" && !claimed_b) claimed_b = Clock::now();
  };
  auto w = worker::StageWorker::create({&*c, pool, srv.address(), pool->name}, std::move(rts),
                                       probe, hooks);
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  std::atomic<bool> stop{false};
  std::thread loop([&] { (*w)->run(stop); });

  // Three steps of a in: cancel the run as `h3pipe cancel` does.
  ASSERT_TRUE(ts::wait_for([&] { return rt->steps_done.load() >= 3; }, 30));
  const auto cancel_at = Clock::now();
  ASSERT_TRUE(store.cancel(run).ok());
  const bool freed = ts::wait_for(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return claimed_b.has_value();
      },
      30);
  const int steps_of_a = rt->steps_done.load();
  ASSERT_TRUE(ts::wait_for(
      [&] { return test_support::hget(**r, keys::job(run, "b"), "state") == "cancelled"; }, 30));
  stop = true;
  loop.join();
  ASSERT_TRUE(freed);
  const double delay_s = std::chrono::duration<double>(*claimed_b - cancel_at).count();
  std::printf(
      "cancel -> the pool's next claim: %.3f s (step %.1f s; a stopped after %d of %d "
      "steps)\n",
      delay_s, std::chrono::duration<double>(kStep).count(), steps_of_a, kSteps);
  EXPECT_LE(delay_s, std::chrono::duration<double>(kStep).count() + 1.0);
  EXPECT_LT(steps_of_a, kSteps);
  EXPECT_EQ(test_support::hget(**r, keys::job(run, "a"), "state"), "cancelled");

  // The run's events: a started, its steps in order, then cancelled; both on h3pipe:events.
  auto es = queue::xrange_after(**r, keys::run_events(run), "0-0", "+", 1000);
  ASSERT_TRUE(es.ok());
  std::vector<std::string> a_types;
  long long last_step = 0;
  for (const auto& e : *es) {
    auto ev = queue::events::from_fields(e.fields);
    if (ev.job != "a") continue;
    a_types.push_back(ev.type);
    if (ev.type == queue::events::kStep) {
      EXPECT_EQ(std::stoll(ev.step), last_step + 1);
      EXPECT_EQ(ev.steps, std::to_string(kSteps));
      EXPECT_EQ(ev.pool, "samp");
      last_step = std::stoll(ev.step);
    }
  }
  ASSERT_GE(a_types.size(), 3u);
  EXPECT_EQ(a_types.front(), "stage.started");
  EXPECT_EQ(a_types.back(), "video.cancelled");
  EXPECT_EQ(last_step, steps_of_a);
  auto term = queue::xrange_after(**r, keys::terminal_events(), "0-0", "+", 100);
  ASSERT_TRUE(term.ok());
  EXPECT_EQ(term->size(), 2u);
}
