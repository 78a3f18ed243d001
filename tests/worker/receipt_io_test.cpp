// A decoder whose outputs folder fills up between the MP4 and its receipt (issue #14): the job
// fails with the I/O error as its reason (it said "the worker died while running it", as a failed
// receipt never reached the runtime's failure path) and no .part stays.  A real redis-server and
// a small tmpfs (label redis; skips without CAP_SYS_ADMIN).
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
#include "tests/support/small_fs.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

using test_support::hget;

std::vector<std::string> parts_below(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".part") out.push_back(e.path().lexically_relative(dir).string());
  return out;
}

}  // namespace

TEST(ReceiptIo, AReceiptThatDoesNotFitFailsTheJobWithTheIoError) {
  ts::SmallFs small(1 << 20);
  H3_REQUIRE_SMALL_FS(small);
  ts::RedisServer srv;
  ts::TempDir dir;
  auto j = nlohmann::json::parse(R"({
    "hosts": [{"name": "h1"}],
    "queue": {"lease_ms": 300, "renew_ms": 100, "sweep_ms": 10, "block_ms": 20, "max_deliveries": 2, "retry_backoff_ms": 10},
    "pools": [{"name": "enc", "host": "h1", "stage": "encode"}, {"name": "samp", "host": "h1", "stage": "sample"},
              {"name": "dec", "host": "h1", "stage": "decode", "profiles": {"default": {"seconds": 0}}}]
  })");
  j["redis"] = {{"port", srv.port()}, {"embedded", false}};
  j["state_dir"] = (dir.path() / "state").string();
  j["output_root"] = small.path().string();
  auto c = config::parse(j, dir.path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  state::Store store(**r);
  const std::string run = "r1";
  ASSERT_TRUE(store.create_run(run, {"probe", "big"}).ok());
  queue::StageQueue q(
      **r, {worker::stream_for(config::StageKind::kDecode, "h1"), "decode", "test", 300, 20, 10});
  ASSERT_TRUE(q.ensure_group().ok());
  // Two jobs of one latent; "probe" is decoded first (it learns the MP4's size), "big" has a
  // 16 KB prompt, so its receipt needs four pages more than its MP4.
  const latent::JobSize size{64, 48, 9, 16};
  auto enqueue = [&](const std::string& job, const std::string& prompt) {
    auto at = paths::latent(*c, run, job);
    ASSERT_TRUE(at.ok());
    ASSERT_TRUE(
        latent::write_latent(*at, latent::make_latent(latent::builtin_profile(), size)).ok());
    ASSERT_TRUE(q.enqueue(ts::decode_task(run, job, size, prompt).SerializeAsString()).ok());
    // The job is where its sample left it: at decode.
    ASSERT_TRUE((*r)->command({"HSET", keys::job(run, job), "state", "decode"}).ok());
  };
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
  auto until_state = [&](const std::string& job, const std::string& want) {
    return ts::wait_for(
        [&] {
          (void)(*w)->step();  // a failed receipt is a failed attempt: the entry is redelivered
          return hget(**r, keys::job(run, job), "state") == want;
        },
        30);
  };

  enqueue("probe", "a cat");
  ASSERT_TRUE(until_state("probe", "done"));
  const auto mp4_bytes = fs::file_size(paths::mp4(*c, run, "probe").value());
  // Room for big's MP4 and its sidecar, and one page more: not for its receipt.
  constexpr std::size_t kPage = 4096;
  small.fill(((mp4_bytes + kPage - 1) / kPage + 2) * kPage);
  enqueue("big", std::string(16000, 'p'));
  ASSERT_TRUE(until_state("big", "failed"))
      << "state " << hget(**r, keys::job(run, "big"), "state");

  EXPECT_TRUE(fs::exists(paths::mp4(*c, run, "big").value())) << "the MP4 fitted";
  const std::string why = hget(**r, keys::job(run, "big"), "error");
  EXPECT_EQ(why.find("the worker died"), std::string::npos) << why;
  EXPECT_NE(why.find("No space left on device"), std::string::npos) << why;
  EXPECT_NE(why.find(paths::receipt(*c, run, "big").value().string()), std::string::npos)
      << "names the path: " << why;
  EXPECT_EQ(parts_below(small.path()), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(paths::receipt(*c, run, "big").value()));
}
