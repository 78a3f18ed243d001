// Redis ACL users per service (label redis; linked into redis_acl_test): each service's real
// code (Ingest, StageWorker with the sim runtime, StageQueue, Store, LeaseKeeper, the CLI's
// submission/resume transactions, the transfer hand-off) runs with only its own user on a real
// redis-server loaded with configs/redis/users.acl, and the server's ACL LOG stays empty: not one
// command of theirs was denied, even where the code ignores an error.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"
#include "common/queue/queue.h"
#include "common/runtime/runtime.h"
#include "common/spec/spec.h"
#include "common/state/paths.h"
#include "common/state/pool_board_store.h"
#include "common/state/state.h"
#include "common/worker/decode_choice.h"
#include "common/worker/pool_board.h"
#include "common/worker/worker.h"
#include "services/transfer/handoff.h"
#include "tests/queue/redis_acl_checks.h"
#include "tests/queue/redis_acl_fixture.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using queue::reply_int;
using queue::reply_str;

namespace {

using ts::acl_log_entries;
using ts::Argv;
using ts::refusal;

config::Cluster cluster_for(const fs::path& dir, int port) {
  auto c = ts::sim_cluster(dir, port,
                           {{"name", "acl"},
                            {"queue",
                             {{"lease_ms", 2000},
                              {"renew_ms", 100},
                              {"sweep_ms", 50},
                              {"max_deliveries", 3},
                              {"block_ms", 20},
                              {"retry_backoff_ms", 0}}}});
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

struct Stage {
  std::unique_ptr<prometheus::Registry> reg = std::make_unique<prometheus::Registry>();
  std::unique_ptr<metrics::WorkerProbe> probe;
  std::unique_ptr<worker::StageWorker> w;
};

Stage make_stage(const config::Cluster& c, const char* pool_name, const queue::RedisAddress& addr) {
  Stage s;
  const auto* pool = c.find_pool(pool_name);
  const auto& rt = c.runtime_for(*pool);
  runtime::FactoryArgs fa{&c, pool, &rt.settings, 7};
  auto rts = std::move(runtime::make_runtime(pool->stage, rt.name, fa).value());
  s.probe = std::make_unique<metrics::WorkerProbe>(*s.reg, config::stage_name(pool->stage),
                                                   pool->name, pool->host);
  auto w = worker::StageWorker::create({&c, pool, addr, pool->name}, std::move(rts), *s.probe, {});
  EXPECT_TRUE(w.ok()) << pool_name << ": " << w.error().to_string();
  if (w.ok()) s.w = std::move(w.value());
  return s;
}

bool step_until_work(worker::StageWorker& w) {
  return ts::wait_for(
      [&] {
        auto r = w.step();
        EXPECT_TRUE(r.ok()) << r.error().to_string();
        return r.ok() && *r;
      },
      20);
}

TEST(RedisAcl, EachServiceRunsItsRealCodeWithOnlyItsOwnUser) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  ts::TempDir dir;
  auto c = cluster_for(dir.path(), srv.port());
  const std::string run = "r-acl-1";

  // Operator (the CLI's `run`): create the run, submit the batch in one MULTI/EXEC.
  auto op = srv.connect("operator");
  ASSERT_TRUE(op.ok()) << op.error().message;
  state::Store op_store(**op);
  ASSERT_TRUE(op_store.create_run(run, {"j1", "bad/id"}).ok());
  auto j1 =
      spec::parse_json(R"({"jobId":"j1","prompt":"a cat","width":64,"height":64,"frames":9})");
  ASSERT_TRUE(j1.ok());
  std::vector<Argv> tx = {{"MULTI"}};
  tx.push_back({"XADD", keys::submit(), "*", "run", run, "spec", spec::to_json(*j1)});
  tx.push_back(
      {"XADD", keys::submit(), "*", "run", run, "spec", R"({"jobId":"bad/id","prompt":"p"})"});
  tx.push_back({"EXEC"});
  auto sub = (*op)->pipeline(tx);
  ASSERT_TRUE(sub.ok()) << sub.error().message;

  // Encoder: ingest (submit stream -> job + encode task, and a rejected job), then encode.
  auto ingest = worker::Ingest::create(c, srv.address("encoder"), "enc");
  ASSERT_TRUE(ingest.ok()) << ingest.error().to_string();
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(ts::wait_for(
        [&] {
          auto r = (*ingest)->step();
          EXPECT_TRUE(r.ok()) << r.error().to_string();
          return r.ok() && *r;
        },
        20));
  auto enc = make_stage(c, "enc", srv.address("encoder"));
  auto samp = make_stage(c, "samp", srv.address("sampler"));
  auto dec = make_stage(c, "dec", srv.address("decoder"));
  ASSERT_TRUE(enc.w && samp.w && dec.w);
  ASSERT_TRUE(step_until_work(*enc.w));
  ASSERT_TRUE(step_until_work(*samp.w));
  ASSERT_TRUE(step_until_work(*dec.w));

  // Operator: wait/status/cancel reads, the resume transaction, queue inspection, preflight.
  auto st = op_store.run_status(run);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->done, 1);
  EXPECT_EQ(st->failed, 1);
  EXPECT_TRUE(st->finished());
  auto jobs = op_store.jobs(run);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  ASSERT_TRUE(op_store.runs(10).ok());
  ASSERT_TRUE(op_store.history(run, "j1").ok());
  ASSERT_EQ(op_store.history(run, "j1")->size(), 3u);
  auto receipt = paths::receipt(c, run, "j1");
  EXPECT_TRUE(artifacts::verify(*receipt).ok());
  for (const Argv& argv :
       std::vector<Argv>{{"PING"},
                         {"INFO", "server"},
                         {"INFO", "persistence"},
                         {"INFO", "memory"},
                         {"TIME"},
                         {"XRANGE", keys::stream("encode"), "-", "+"},
                         {"XRANGE", keys::stream("sample"), "-", "+"},
                         {"XRANGE", keys::stream("decode@h1"), "-", "+"},
                         {"XRANGE", keys::dead_letter(), "-", "+"},
                         {"XLEN", keys::stream("sample")},
                         {"XPENDING", keys::stream("sample"), "sample"},
                         {"XINFO", "GROUPS", keys::stream("sample")},
                         {"XINFO", "STREAM", keys::stream("sample")},
                         {"XINFO", "CONSUMERS", keys::stream("sample"), "sample"},
                         {"ZCARD", keys::runs()},
                         {"HGETALL", keys::run(run)},
                         {"LRANGE", keys::history(run, "j1"), "0", "-1"}}) {
    EXPECT_EQ(refusal(**op, argv), "") << fmt::format("{}", fmt::join(argv, " "));
  }
  std::vector<Argv> resume = {{"MULTI"},
                              {"HINCRBY", keys::run(run), "failed", "-1"},
                              {"HDEL", keys::job(run, "j1"), "attempts:encode", "attempts:sample",
                               "attempts:decode", "error"},
                              {"HSET", keys::job(run, "j1"), "state", "decode"},
                              {"XADD", keys::stream("decode@h1"), "*", "task", "resumed"},
                              {"EXEC"}};
  auto rs = (*op)->pipeline(resume);
  EXPECT_TRUE(rs.ok()) << (rs.ok() ? "" : rs.error().message);
  EXPECT_EQ(refusal(**op, {"HSET", keys::run(run), "done", "1", "cancelled", "0"}), "");
  EXPECT_TRUE(op_store.cancel(run).ok());

  // The sampler's dispatch board (h3pipe:pools, the encode/sample backlogs) and the decode-host
  // choice (decode stream lengths) run with the sampler's user too.
  {
    // Two classes: each board also reads the class of its stream's next task (XINFO GROUPS,
    // XRANGE).
    auto two =
        nlohmann::json::parse(R"({"name": "acl2", "redis": {"host": "127.0.0.1", "embedded": false},
      "classes": [{"name": "a", "width": 64, "height": 64, "frames": 9}, {"name": "b", "width": 128, "height": 128, "frames": 9}],
      "stages": {"sample": {"runtime": {"name": "sim"}}},
      "hosts": [{"name": "h1"}, {"name": "h2"}],
      "pools": [{"name": "s1", "host": "h1", "stage": "sample", "profiles": {"default": {"seconds": 1}}},
                {"name": "s2", "host": "h1", "stage": "sample", "profiles": {"default": {"seconds": 2}}},
                {"name": "d1", "host": "h1", "stage": "decode"}, {"name": "d2", "host": "h2", "stage": "decode"},
                {"name": "d3", "host": "h1", "stage": "decode"},
                {"name": "e1", "host": "h1", "stage": "encode"}, {"name": "e2", "host": "h1", "stage": "encode"}]})");
    two["redis"]["port"] = srv.port();
    auto c2 = config::parse(two, dir.path());
    ASSERT_TRUE(c2.ok()) << c2.error().message;
    // Work waiting on every stream, so each board reads all it can (the sampler's with encodes
    // upstream: the decode side too).
    auto admin = srv.connect("admin");
    ASSERT_TRUE(admin.ok());
    for (const char* s : {"encode", "sample", "decode@h1"}) {
      (void)(*admin)->command(
          {"XGROUP", "CREATE", keys::stream(s), std::string(s).substr(0, 6), "0", "MKSTREAM"});
      ASSERT_TRUE((*admin)->command({"XADD", keys::stream(s), "*", "task", "x"}).ok());
    }
    // Every stage's board, each with its own service's user.
    for (auto [pool, user] : {std::pair{"s1", "sampler"}, {"e1", "encoder"}, {"d1", "decoder"}}) {
      SCOPED_TRACE(pool);
      auto board = worker::PoolBoard::create(*c2, *c2->find_pool(pool), srv.address(user));
      ASSERT_TRUE(board.ok()) << board.error().to_string();
      (*board)->claimed(pb::StageTask());
      (void)(*board)->may_claim();
      (*board)->idle();
      (void)(*board)->may_claim();
      auto conn = srv.connect(user);
      ASSERT_TRUE(conn.ok());
      EXPECT_EQ(refusal(**conn, {"PING"}), "");
    }
    auto samp_conn = srv.connect("sampler");
    ASSERT_TRUE(samp_conn.ok());
    pb::StageTask t;
    t.mutable_spec()->set_width(64);
    t.mutable_spec()->set_height(64);
    t.mutable_spec()->set_frames(9);
    state::RedisPoolBoardStore samp_board(**samp_conn);
    EXPECT_FALSE(worker::choose_decode_host(*c2, "h1", t, &samp_board).empty());
    EXPECT_EQ(refusal(**samp_conn, {"PING"}), "");  // flushes the board's unanswered sends
  }

  std::string log;
  EXPECT_EQ(acl_log_entries(srv, &log), 0) << "commands denied during the real run:\n" << log;
}

TEST(RedisAcl, QueueRetryDeadLetterAndLeaseRenewalWorkForEveryStageUser) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  struct StageUser {
    std::string who, stream, group;
  };
  const std::vector<StageUser> stages = {
      {"encoder", keys::stream("encode"), "encode"},
      {"encoder", keys::submit(), std::string(keys::kIngestGroup)},
      {"sampler", keys::stream("sample"), "sample"},
      {"decoder", keys::stream("decode@h1"), "decode"}};
  for (const auto& [who, stream, group] : stages) {
    SCOPED_TRACE(who + " on " + stream);
    auto r = srv.connect(who);
    ASSERT_TRUE(r.ok());
    queue::QueueOptions qo{stream, group, who + "-pool", 200, 20, 10};
    queue::StageQueue q(**r, qo);
    ASSERT_TRUE(q.ensure_group().ok());
    ASSERT_TRUE(q.ensure_group().ok());
    // The worker only XADDs through its completion script; enqueue here stands for the previous
    // stage.
    ASSERT_TRUE(q.enqueue("t1").ok());
    ASSERT_TRUE(q.enqueue("t2").ok());
    auto e1 = q.claim();
    ASSERT_TRUE(e1.ok() && e1->has_value()) << (e1.ok() ? "empty" : e1.error().message);
    {
      // The LeaseKeeper's renewal script, on its own connection.
      queue::LeaseKeeper keeper(srv.address(who), qo, 10);
      keeper.hold((*e1)->id);
      EXPECT_TRUE(ts::wait_for([&] { return keeper.renewals() > 0; }, 10));
    }
    ASSERT_TRUE(q.release_for_retry(**e1, 0).ok());
    EXPECT_EQ(*q.pending_count(), 1);
    EXPECT_GE(*q.length(), 1);
    // The retried entry comes back through XAUTOCLAIM; the other through XREADGROUP >.
    std::vector<queue::Entry> got;
    ASSERT_TRUE(ts::wait_for(
        [&] {
          auto e = q.claim();
          EXPECT_TRUE(e.ok()) << e.error().message;
          if (e.ok() && e->has_value()) got.push_back(**e);
          return got.size() >= 2;
        },
        10));
    const std::string run = "r-" + who;
    // The state machine's moves with the entry's ack (Store::apply's script), as the stage
    // engine makes them: the attempt start, a failure, a dead letter.
    state::Store store(**r);
    for (const char* j : {"j", "j2"})
      ASSERT_TRUE((*r)->command({"HSET", keys::job(run, j), "state", "sample"}).ok());
    ASSERT_TRUE(store
                    .start_attempt(run, "j", pb::STAGE_SAMPLE,
                                   state::QueueAck{stream, group, qo.consumer, got[0].id})
                    .ok());
    auto m = state::Store::fail_move(run, "j", pb::STAGE_SAMPLE, "x");
    m.ack = state::QueueAck{stream, group, qo.consumer, got[0].id};
    auto done = store.apply(m);
    ASSERT_TRUE(done.ok()) << done.error().message;
    EXPECT_EQ(done->code, state::Applied::kApplied);
    auto dl = state::Store::fail_move(run, "j2", pb::STAGE_SAMPLE, "poison", got[1].payload);
    dl.ack = state::QueueAck{stream, group, qo.consumer, got[1].id};
    auto dead = store.apply(dl);
    ASSERT_TRUE(dead.ok()) << dead.error().message;
    EXPECT_EQ(dead->code, state::Applied::kApplied);
    EXPECT_EQ(*q.pending_count(), 0);
    // The store calls every stage worker makes around a task.
    ASSERT_TRUE(store.note_exec(run, "j", pb::STAGE_SAMPLE).ok());
    ASSERT_TRUE(store.note_error(run, "j", pb::STAGE_SAMPLE, "boom").ok());
    ASSERT_TRUE(store.cancelled(run).ok());
    EXPECT_EQ(refusal(**r, {"HGET", keys::job(run, "j"), "error"}), "");
  }
  // EVAL, the fallback when the script cache was flushed (NOSCRIPT), is part of every worker's set.
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  auto samp = srv.connect("sampler");
  queue::StageQueue q(**samp, {keys::stream("sample"), "sample", "p2", 200, 20, 10});
  ASSERT_TRUE(q.enqueue("t3").ok());
  auto e = q.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  ASSERT_EQ(refusal(**admin, {"SCRIPT", "FLUSH"}), "");
  auto done = q.complete(**e, {{"XADD", keys::stream("decode@h1"), "*", "task", "next"}});
  ASSERT_TRUE(done.ok()) << done.error().message;
  EXPECT_TRUE(*done);
  EXPECT_EQ(reply_int((*admin)->command({"XLEN", keys::stream("decode@h1")})->get()), 1);

  // The transfer service's intended commands: ensure the decode group, enqueue the decode task and
  // record its stage atomically (declared keys), check idempotency.
  auto xfer = srv.connect("transfer");
  ASSERT_TRUE(xfer.ok());
  queue::StageQueue dq(**xfer, {keys::stream("decode@h2"), "decode", "xfer"});
  ASSERT_TRUE(dq.ensure_group().ok());
  const std::string run = "r-xfer";
  auto enq = (*xfer)->eval(
      R"LUA(
if redis.call('HGET', KEYS[2], 'task:decode') then return 0 end
local id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[1])
redis.call('HSET', KEYS[2], 'state', 'decode', 'task:decode', id)
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('HINCRBY', KEYS[4], 'count:transfer', 1)
return 1)LUA",
      {keys::stream("decode@h2"), keys::job(run, "j"), keys::history(run, "j"), keys::run(run)},
      {"payload", "{}"});
  ASSERT_TRUE(enq.ok()) << enq.error().message;
  EXPECT_EQ(reply_int(enq->get()), 1);
  EXPECT_EQ(refusal(**xfer, {"EXISTS", keys::job(run, "j")}), "");
  EXPECT_EQ(refusal(**xfer, {"PING"}), "");

  // KEDA's scaler reads queue depth only.
  auto keda = srv.connect("keda");
  ASSERT_TRUE(keda.ok());
  for (const Argv& argv : std::vector<Argv>{{"XLEN", keys::stream("sample")},
                                            {"XPENDING", keys::stream("sample"), "sample"},
                                            {"XINFO", "GROUPS", keys::stream("decode@h1")},
                                            {"XINFO", "STREAM", keys::stream("encode")}})
    EXPECT_EQ(refusal(**keda, argv), "") << argv[0];

  std::string log;
  EXPECT_EQ(acl_log_entries(srv, &log), 0) << "commands denied:\n" << log;
}

// The transfer service's real Redis code (services/transfer/handoff.cpp) with only the shipped
// h3pipe-transfer user: the decode task is enqueued once per (job, hash), a repeat is a no-op, and
// a given-up transfer fails the job.  The shipped ACL once lacked HSETNX, which the handoff script
// needs: every latent received on a decode host then failed (issue #15).
TEST(RedisAcl, TransferHandoffRunsWithOnlyTheTransferUser) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  ts::TempDir dir;
  const config::Cluster c = cluster_for(dir.path(), srv.port());
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  const fs::path latent = c.artifact_root / "r-h" / "j1" / "latent.h3latent";
  fs::create_directories(latent.parent_path());
  auto sha = artifacts::write_atomic(latent, std::vector<std::uint8_t>(64, 7));
  ASSERT_TRUE(sha.ok()) << sha.error().message;

  transfer_service::Handoff handoff(c, "h1", srv.address("transfer"));
  // Both jobs are where the sampler's completion left them: at transfer.
  for (const char* j : {"j1", "j2"})
    ASSERT_TRUE((*admin)->command({"HSET", keys::job("r-h", j), "state", "transfer"}).ok());
  pb::StageTask task;
  task.set_run_id("r-h");
  task.set_job_id("j1");
  task.set_stage(pb::STAGE_SAMPLE);
  for (int i = 0; i < 2; ++i) {  // the second call is a repeat: no second decode task
    auto st = handoff.enqueue_local(task, latent, *sha);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  const std::string stream = worker::stream_for(config::StageKind::kDecode, "h1");
  EXPECT_EQ(reply_int((*admin)->command({"XLEN", stream})->get()), 1);
  EXPECT_EQ(reply_str((*admin)->command({"HGET", keys::job("r-h", "j1"), "state"})->get()),
            "decode");

  pb::StageTask lost = task;
  lost.set_job_id("j2");
  handoff.fail(lost, Error{"transfer.max_attempts", "gave up after 5 attempts"});
  EXPECT_EQ(reply_str((*admin)->command({"HGET", keys::job("r-h", "j2"), "state"})->get()),
            "failed");

  std::string log;
  EXPECT_EQ(acl_log_entries(srv, &log), 0) << "commands denied:\n" << log;
}

}  // namespace
