// Issue #35 D4: an authenticated transfer peer delivers only the latents of jobs it sampled.  A
// real redis-server, the transfer service's Handoff (services/transfer/handoff.cpp) guarding a
// real TransferReceiver built from the cluster config (CURVE on, the senders admitted by their
// hosts' public keys), and real senders over loopback.  Host c (an authenticated sender, as
// every sampling host of the cluster is) offers latents for a job sampled on a and for a job
// still being sampled: both refused, nothing written, nothing enqueued, the jobs untouched.
// Host a delivers its own job's latent with a task whose spec was tampered with: the decode task
// carries the job's stored spec.  Before the fix the receiver took any authenticated offer and
// enqueued the decode from the peer's own task.  Label redis.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/config/config.h"
#include "common/queue/keys.h"
#include "common/queue/reply.h"
#include "common/state/state.h"
#include "common/transfer/config_map.h"
#include "common/transfer/keys.h"
#include "common/transfer/receiver.h"
#include "common/transfer/sender.h"
#include "common/worker/worker.h"
#include "services/transfer/handoff.h"
#include "tests/support/test_support.h"
#include "tests/transfer/transfer_test_util.h"

namespace h3pipe {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using queue::reply_int;
using queue::reply_str;
using transfer::testing::make_latent_task;
using transfer::testing::wait_until;

constexpr const char* kPrompt = "the prompt the job was submitted with";

struct Fixture {
  ts::TempDir dir;
  ts::RedisServer redis;
  std::map<std::string, transfer::KeyPair> keys;
  config::Cluster cluster;
  std::unique_ptr<queue::Redis> admin;

  Fixture() {
    for (const char* h : {"a", "b", "c"})
      keys[h] = transfer::keygen(dir.path() / "keys", h).value();
    nlohmann::json hosts = nlohmann::json::array();
    for (const char* h : {"a", "b", "c"})
      hosts.push_back({{"name", h},
                       {"address", "127.0.0.1"},
                       {"transfer_port", 7800 + (h[0] - 'a')},
                       {"transfer_public_key_file", keys[h].public_path.string()},
                       {"transfer_secret_key_file", keys[h].secret_path.string()}});
    nlohmann::json j = {{"name", "handoff-auth"},
                        {"state_dir", (dir.path() / "state").string()},
                        {"artifact_root", (dir.path() / "B").string()},
                        {"hosts", hosts},
                        {"pools",
                         {{{"name", "e"}, {"host", "a"}, {"stage", "encode"}},
                          {{"name", "sa"}, {"host", "a"}, {"stage", "sample"}},
                          {{"name", "sc"}, {"host", "c"}, {"stage", "sample"}},
                          {{"name", "d"}, {"host", "b"}, {"stage", "decode"}}}},
                        {"links",
                         {{{"from", "a"}, {"to", "b"}, {"gbps", 10}, {"latency_ms", 1}},
                          {{"from", "c"}, {"to", "b"}, {"gbps", 10}, {"latency_ms", 1}}}},
                        {"redis", {{"port", redis.port()}, {"embedded", false}}}};
    auto c = config::parse(j, dir.path().string());
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    if (c.ok()) cluster = *c;
    auto r = redis.connect();
    EXPECT_TRUE(r.ok());
    if (r.ok()) admin = std::move(*r);
  }

  // A job of run r accepted with kPrompt, then at `state`; sampled on `sampled_on` if not empty.
  void job(const std::string& id, const std::string& state, const std::string& sampled_on) {
    state::Store store(*admin);
    pb::JobSpec spec;
    spec.set_job_id(id);
    spec.set_prompt(kPrompt);
    spec.set_width(64);
    spec.set_height(64);
    spec.set_frames(9);
    spec.set_fps(12);
    auto accepted = store.accept_job("r", spec, "x");
    ASSERT_TRUE(accepted.ok() && *accepted);
    ASSERT_TRUE(admin->command({"HSET", keys::job("r", id), "state", state}).ok());
    if (sampled_on.empty()) return;
    pb::StageRecord rec;
    rec.set_stage(pb::STAGE_SAMPLE);
    rec.set_host(sampled_on);
    std::string js;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(rec, &js).ok());
    ASSERT_TRUE(admin->command({"RPUSH", keys::history("r", id), js}).ok());
  }

  std::string state_of(const std::string& id) {
    return reply_str(admin->command({"HGET", keys::job("r", id), "state"})->get());
  }
  long long decode_tasks() {
    return reply_int(
        admin->command({"XLEN", worker::stream_for(config::StageKind::kDecode, "b")})->get());
  }
};

// A sender on `host` with its own key pair, delivering to b's receiver; failures recorded.
struct Sender {
  std::mutex mu;
  std::map<std::string, Error> failed;
  std::unique_ptr<transfer::TransferSender> s;
  transfer::TransferProbe probe;

  Sender(zmq::context_t& ctx, prometheus::Registry& reg, Fixture& f, const std::string& host,
         const std::string& endpoint)
      : probe(reg, "sender-" + host) {
    transfer::SenderOptions o;
    o.host = host;
    o.root = f.dir.path() / host;
    o.peers = {{"b", endpoint, f.keys["b"].public_z85}};
    o.curve.public_key = f.keys[host].public_z85;
    o.curve.secret_key = f.keys[host].secret_z85;
    o.heartbeat_ms = 100;
    o.backoff_initial_ms = 20;
    o.backoff_max_ms = 100;
    o.eager_bytes = 0;
    o.on_failed = [this](const pb::StageTask& t, const Error& e) {
      std::lock_guard<std::mutex> l(mu);
      failed.emplace(t.job_id(), e);
    };
    auto started = transfer::TransferSender::start(ctx, o, probe);
    EXPECT_TRUE(started.ok()) << (started.ok() ? "" : started.error().to_string());
    if (started.ok()) s = std::move(*started);
  }
  std::optional<Error> failure(const std::string& job) {
    std::lock_guard<std::mutex> l(mu);
    auto it = failed.find(job);
    return it == failed.end() ? std::nullopt : std::optional<Error>(it->second);
  }
};

TEST(TransferHandoffAuth, ALatentIsAcceptedOnlyFromTheHostThatSampledItsJob) {
  Fixture f;
  ASSERT_TRUE(f.admin);
  ASSERT_TRUE(state::Store(*f.admin).load_scripts().ok());
  ASSERT_TRUE(state::Store(*f.admin).create_run("r", {"theirs", "busy", "mine"}).ok());
  f.job("theirs", "transfer", "a");  // sampled on a, its latent on its way
  f.job("busy", "sample", "");       // still being sampled
  f.job("mine", "transfer", "a");

  auto o = transfer::receiver_options(f.cluster, "b");
  ASSERT_TRUE(o.ok()) << o.error().to_string();
  ASSERT_TRUE(o->curve.enabled);
  o->bind_endpoint = "tcp://127.0.0.1:0";
  EXPECT_EQ(o->data_port, 7802) << "hosts[].transfer_data_port 0: transfer_port + 1";
  o->data_port = 0;    // a free one, as the control port's
  o->check_file = {};  // the latents here are random bytes, not of the jobs' profile
  transfer_service::Handoff handoff(f.cluster, "b", f.redis.address());
  handoff.guard(*o);
  zmq::context_t ctx(1);
  prometheus::Registry reg;
  transfer::TransferProbe rprobe(reg, "receiver");
  auto receiver = transfer::TransferReceiver::start(
      ctx, *o,
      [&](const pb::Offer& offer, const fs::path& p, const std::string& sha) {
        return handoff.enqueue_decode(offer, p, sha);
      },
      rprobe);
  ASSERT_TRUE(receiver.ok()) << receiver.error().to_string();

  // c offers a latent for a's job and one for the job still being sampled, each task carrying a
  // spec of its own.
  Sender c(ctx, reg, f, "c", (*receiver)->endpoint());
  for (const char* job : {"theirs", "busy"}) {
    auto t = make_latent_task(f.dir.path() / "c", "r", job, 200 * 1000, "b");
    t.mutable_spec()->set_prompt("planted by c");
    c.s->submit(t);
  }
  ASSERT_TRUE(wait_until([&] { return c.failure("theirs").has_value(); }, 20s))
      << "c's latent for a's job was not refused";
  EXPECT_NE(c.failure("theirs")->message.find("sampled on host a"), std::string::npos)
      << c.failure("theirs")->message;
  // The job still at sample is refused for now (c offers it again), never accepted.
  ASSERT_TRUE(wait_until([&] { return handoff.refused() >= 3; }, 20s));
  EXPECT_FALSE(c.failure("busy").has_value());

  // a delivers its own job's latent, its task's spec tampered with: accepted, and the decode
  // task carries the stored spec.
  Sender a(ctx, reg, f, "a", (*receiver)->endpoint());
  auto mine = make_latent_task(f.dir.path() / "a", "r", "mine", 200 * 1000, "b");
  mine.mutable_spec()->set_prompt("planted in a's task");
  a.s->submit(mine);
  ASSERT_TRUE(wait_until([&] { return f.state_of("mine") == "decode"; }, 20s))
      << "a's own latent was not handed off: " << f.state_of("mine");
  EXPECT_FALSE(a.failure("mine").has_value());

  EXPECT_EQ(f.decode_tasks(), 1) << "only a's job reached the decode stream";
  auto entries =
      f.admin->command({"XRANGE", worker::stream_for(config::StageKind::kDecode, "b"), "-", "+"});
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->get()->elements, 1u);
  const redisReply* fields = entries->get()->element[0]->element[1];
  pb::StageTask decode;
  for (std::size_t k = 0; k + 1 < fields->elements; k += 2) {
    if (reply_str(fields->element[k]) == "task") {
      ASSERT_TRUE(decode.ParseFromString(reply_str(fields->element[k + 1])));
    }
  }
  EXPECT_EQ(decode.job_id(), "mine");
  EXPECT_EQ(decode.spec().prompt(), kPrompt) << "the decode task took the peer's spec";
  // c's jobs: untouched, nothing of c's latents on b's disk, no transfer record.
  EXPECT_EQ(f.state_of("theirs"), "transfer");
  EXPECT_EQ(f.state_of("busy"), "sample");
  for (const char* job : {"theirs", "busy"}) {
    EXPECT_FALSE(fs::exists(f.cluster.artifact_root / "r" / job / "latent.h3latent")) << job;
    EXPECT_FALSE(fs::exists(f.cluster.artifact_root / "r" / job / "latent.h3latent.part")) << job;
    auto h = state::Store(*f.admin).history("r", job);
    ASSERT_TRUE(h.ok());
    for (const auto& rec : *h) EXPECT_NE(rec.stage(), pb::STAGE_TRANSFER) << job;
  }
  a.s.reset();
  c.s.reset();
  (*receiver).reset();
}

}  // namespace
}  // namespace h3pipe
