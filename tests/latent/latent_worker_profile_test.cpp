// The worker's decode input check against the job's latent profile (docs/latent.md, "Who
// checks"), with a real redis-server and the real StageWorker and sim decoder: a latent that does
// not fit is dead-lettered at once with the reason (its bytes are verified, retrying cannot help);
// one that fits is decoded.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "common/config/config.h"
#include "common/latent/latent.h"
#include "common/metrics/metrics.h"
#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/runtime/runtime.h"
#include "common/state/paths.h"
#include "common/state/state.h"
#include "common/worker/worker.h"
#include "tests/support/decode_task.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

using test_support::hget;

TEST(WorkerLatentProfile, ADecodeInputThatDoesNotFitItsProfileIsDeadLetteredAtOnce) {
  ts::RedisServer srv;
  ts::TempDir dir;
  auto j = nlohmann::json::parse(R"({
    "latent_profile": "wan2.1",
    "hosts": [{"name": "h1"}],
    "pools": [{"name": "samp", "host": "h1", "stage": "sample"},
              {"name": "dec", "host": "h1", "stage": "decode", "profiles": {"default": {"seconds": 0}}},
              {"name": "enc", "host": "h1", "stage": "encode"}]
  })");
  j["redis"] = {{"port", srv.port()}, {"embedded", false}};
  j["state_dir"] = (dir.path() / "state").string();
  auto c = config::parse(j, dir.path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  state::Store store(**r);
  const std::string run = "r1";
  ASSERT_TRUE(store.create_run(run, {"bad", "good"}).ok());

  const auto& wan = *latent::find_builtin_profile("wan2.1");
  const latent::JobSize size{64, 48, 9, 16};
  queue::StageQueue q(
      **r, {worker::stream_for(config::StageKind::kDecode, "h1"), "decode", "test", 2000, 20, 10});
  ASSERT_TRUE(q.ensure_group().ok());
  for (const std::string job : {"bad", "good"}) {
    auto at = paths::latent(*c, run, job);
    ASSERT_TRUE(at.ok());
    // "bad" holds the builtin grid for the same job, "good" the Wan 2.1 one.
    auto l = latent::make_latent(job == "bad" ? latent::builtin_profile() : wan, size);
    ASSERT_TRUE(latent::write_latent(*at, l).ok());
    ASSERT_TRUE(q.enqueue(ts::decode_task(run, job, size, "a cat").SerializeAsString()).ok());
    // The job is where its sample left it: at decode (the state machine drops a task of a job
    // that is not at the task's stage).
    ASSERT_TRUE((*r)->command({"HSET", keys::job(run, job), "state", "decode"}).ok());
  }

  const auto* pool = c->find_pool("dec");
  const auto& rt = c->runtime_for(*pool);
  runtime::FactoryArgs fa{&*c, pool, &rt.settings, 7};
  std::unique_ptr<runtime::StageRuntime> rts =
      std::move(runtime::make_runtime(config::StageKind::kDecode, rt.name, fa).value());
  prometheus::Registry reg;
  metrics::WorkerProbe probe(reg, "decode", pool->name, pool->host);
  auto w = worker::StageWorker::create({&*c, pool, srv.address(), pool->name}, std::move(rts),
                                       probe, {});
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  int steps = 0;
  ASSERT_TRUE(ts::wait_for(
      [&] {
        auto s = (*w)->step();
        EXPECT_TRUE(s.ok()) << s.error().to_string();
        if (s.ok() && *s) ++steps;
        return steps == 2;
      },
      30));
  EXPECT_EQ(hget(**r, keys::job(run, "bad"), "state"), "failed");
  const std::string why = hget(**r, keys::job(run, "bad"), "error");
  EXPECT_NE(why.find("decode input does not fit the job's latent profile wan2.1"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("latent.profile"), std::string::npos) << why;
  EXPECT_EQ(hget(**r, keys::job(run, "bad"), "attempts:decode"), "1") << "not retried";
  EXPECT_FALSE(fs::exists(paths::mp4(*c, run, "bad").value()));
  EXPECT_EQ(hget(**r, keys::job(run, "good"), "state"), "done");
  EXPECT_TRUE(fs::exists(paths::mp4(*c, run, "good").value()));
}

}  // namespace
