// The transfer service's Redis hand-off (services/transfer/handoff.cpp) waits for replicas the
// way stage completions do (redis.wait_replicas): against a real primary and a real replica
// (a second redis-server with replicaof), the decode task is on the replica when the hand-off
// returns, and the primary counts one WAIT per hand-off; with no replica the hand-off still
// succeeds (fewer replicas is not a failure) after redis.wait_timeout_ms.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"
#include "common/queue/keys.h"
#include "common/worker/worker.h"
#include "services/transfer/handoff.h"
#include "tests/support/test_support.h"

namespace h3pipe {
namespace {
namespace fs = std::filesystem;
using queue::reply_int;
using queue::reply_str;

config::Cluster cluster_for(const fs::path& dir, int port) {
  auto c = test_support::sim_cluster(dir, port, {{"name", "wait"}});
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

// A second redis-server replicating `primary_port` (tests/support/redis_server.h), stopped
// (SIGKILL) with the object.
class Replica {
 public:
  explicit Replica(int primary_port)
      : server_(ts::RedisOptions{
            .conf_lines = {"replicaof 127.0.0.1 " + std::to_string(primary_port)}, .aof = false}) {}
  Result<std::unique_ptr<queue::Redis>> connect() const { return server_.connect(); }

 private:
  ts::RedisServer server_;
};

long long wait_calls(queue::Redis& r) {
  auto info = r.command({"INFO", "commandstats"});
  if (!info.ok()) return -1;
  const std::string s = reply_str(info->get());
  const auto at = s.find("cmdstat_wait:calls=");
  return at == std::string::npos ? 0 : std::stoll(s.substr(at + 19));
}

long long connected_replicas(queue::Redis& r) {
  auto info = r.command({"INFO", "replication"});
  if (!info.ok()) return -1;
  const std::string s = reply_str(info->get());
  const auto at = s.find("connected_slaves:");
  return at == std::string::npos ? 0 : std::stoll(s.substr(at + 17));
}

struct Fixture {
  ts::TempDir dir;
  ts::RedisServer primary;
  config::Cluster c = cluster_for(dir.path(), primary.port());
  fs::path latent = c.artifact_root / "r-w" / "j1" / "latent.h3latent";
  std::string sha;

  Fixture() {
    fs::create_directories(latent.parent_path());
    auto s = artifacts::write_atomic(latent, std::vector<std::uint8_t>(64, 7));
    EXPECT_TRUE(s.ok()) << s.error().message;
    sha = s.ok() ? *s : "";
  }
  pb::StageTask at_transfer(const std::string& job) {
    auto admin = primary.connect();
    EXPECT_TRUE(admin.ok());
    EXPECT_TRUE((*admin)->command({"HSET", keys::job("r-w", job), "state", "transfer"}).ok());
    pb::StageTask t;
    t.set_run_id("r-w");
    t.set_job_id(job);
    t.set_stage(pb::STAGE_SAMPLE);
    return t;
  }
};

TEST(TransferHandoffWait, DecodeTaskIsOnTheReplicaWhenTheHandoffReturns) {
  Fixture f;
  auto admin = f.primary.connect();
  ASSERT_TRUE(admin.ok());
  // A full sync starts at once instead of after the default 5 s wait for more replicas.
  ASSERT_TRUE((*admin)->command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"}).ok());
  Replica replica(f.primary.port());
  ASSERT_TRUE(ts::wait_for([&] { return connected_replicas(**admin) == 1; }, 20))
      << "replica never attached";
  std::unique_ptr<queue::Redis> rep;
  ASSERT_TRUE(ts::wait_for(
      [&] {
        auto r = replica.connect();
        if (!r.ok()) return false;
        auto info = (*r)->command({"INFO", "replication"});
        if (!info.ok() || reply_str(info->get()).find("master_link_status:up") == std::string::npos)
          return false;
        rep = std::move(*r);
        return true;
      },
      20))
      << "replica never in sync";

  queue::RedisAddress addr = f.primary.address();
  addr.wait_replicas = 1;
  addr.wait_timeout_ms = 10000;
  transfer_service::Handoff handoff(f.c, "h1", addr);
  const long long waits_before = wait_calls(**admin);
  auto st = handoff.enqueue_local(f.at_transfer("j1"), f.latent, f.sha);
  ASSERT_TRUE(st.ok()) << st.error().message;
  // WAIT returned with the replica's acknowledgement: the write is applied there already, read at
  // once, without waiting for replication to catch up.
  const std::string stream = worker::stream_for(config::StageKind::kDecode, "h1");
  EXPECT_EQ(reply_int(rep->command({"XLEN", stream})->get()), 1);
  EXPECT_EQ(reply_str(rep->command({"HGET", keys::job("r-w", "j1"), "state"})->get()), "decode");
  EXPECT_EQ(wait_calls(**admin) - waits_before, 1);
}

TEST(TransferHandoffWait, FewerReplicasThanAskedIsNotAFailure) {
  Fixture f;  // no replica at all
  auto admin = f.primary.connect();
  ASSERT_TRUE(admin.ok());
  queue::RedisAddress addr = f.primary.address();
  addr.wait_replicas = 1;
  addr.wait_timeout_ms = 100;
  transfer_service::Handoff handoff(f.c, "h1", addr);
  auto st = handoff.enqueue_local(f.at_transfer("j1"), f.latent, f.sha);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(wait_calls(**admin), 1);
  const std::string stream = worker::stream_for(config::StageKind::kDecode, "h1");
  EXPECT_EQ(reply_int((*admin)->command({"XLEN", stream})->get()), 1);
}

TEST(TransferHandoffWait, NoWaitWhenNoReplicasAreAskedFor) {
  Fixture f;
  auto admin = f.primary.connect();
  ASSERT_TRUE(admin.ok());
  transfer_service::Handoff handoff(f.c, "h1", f.primary.address());
  ASSERT_TRUE(handoff.enqueue_local(f.at_transfer("j1"), f.latent, f.sha).ok());
  EXPECT_EQ(wait_calls(**admin), 0);
}

}  // namespace
}  // namespace h3pipe
