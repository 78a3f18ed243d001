// The transfer's parts on their own (label unit; linked into transfer_unit_test): key files and
// the shipped config's allowed clients, the receiver's latent check from the config, the chunk
// schedule under the credit, the eager span, offer path resolution, ZAP without a handler, and
// the resume state file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/config/config.h"
#include "common/latent/latent.h"
#include "common/transfer/config_map.h"
#include "common/transfer/disk.h"
#include "common/transfer/frames.h"
#include "common/transfer/keys.h"
#include "common/transfer/receiver.h"
#include "common/transfer/wire.h"
#include "tests/transfer/loopback_fixture.h"
#include "tests/transfer/transfer_test_util.h"

namespace h3pipe::transfer {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::Keys;
using testing::make_keys;
using testing::TempDir;

TEST(Keys, KeygenWritesZ85PairWithPrivateSecret) {
  TempDir d;
  auto kp = keygen(d.path(), "hostA");
  ASSERT_TRUE(kp.ok()) << kp.error().to_string();
  struct stat sb {};
  ASSERT_EQ(::stat(kp->secret_path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_EQ(load_key_file(kp->public_path, false).value(), kp->public_z85);
  EXPECT_EQ(load_key_file(kp->secret_path, true).value(), kp->secret_z85);
  EXPECT_EQ(public_of(kp->secret_z85).value(), kp->public_z85);
  EXPECT_EQ(keygen(d.path(), "hostA").error().code, "keygen.exists");
  ::chmod(kp->secret_path.c_str(), 0644);
  EXPECT_EQ(load_key_file(kp->secret_path, true).error().code, "keys.permissions");
  EXPECT_FALSE(is_z85_key("short"));
}

// The shipped deploy/cluster.seeds.json lists no transfer_allowed_clients: node241's receiver
// admits node292's sender by the public key file node292's host entry names (issue #15: the
// receiver stopped with "no sender could connect").
TEST(Keys, ShippedSeedsConfigAdmitsTheSendingHostByItsKeyFile) {
  TempDir d;
  std::ifstream in(std::string(H3PIPE_SOURCE_DIR) + "/deploy/cluster.seeds.json");
  auto j = nlohmann::json::parse(in);
  std::map<std::string, KeyPair> pairs;
  for (auto& h : j["hosts"]) {
    const std::string name = h["name"];
    ASSERT_FALSE(h.contains("transfer_allowed_clients")) << name;
    auto kp = keygen(d.path(), name);
    ASSERT_TRUE(kp.ok()) << kp.error().to_string();
    h["transfer_public_key_file"] = kp->public_path.string();
    h["transfer_secret_key_file"] = kp->secret_path.string();
    pairs[name] = *kp;
  }
  j["state_dir"] = (d.path() / "state").string();
  auto c = config::parse(j, d.path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto r = receiver_options(*c, "node241");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->curve.allowed_clients, std::vector<std::string>{pairs["node292"].public_z85});
  // The data connection's port: transfer_port + 1 unless the host names one (compose and the
  // chart publish it); never the control port.
  EXPECT_EQ(r->data_port, 7701);
  j["hosts"][1]["transfer_data_port"] = 7750;
  auto c2 = config::parse(j, d.path());
  ASSERT_TRUE(c2.ok()) << c2.error().message;
  EXPECT_EQ(receiver_options(*c2, "node241")->data_port, 7750);
  j["hosts"][1]["transfer_data_port"] = 7700;
  auto same = receiver_options(config::parse(j, d.path()).value(), "node241");
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.error().message.find("/hosts/1/transfer_data_port: 7700 is the host's"),
            std::string::npos)
      << same.error().message;
  j["hosts"][1].erase("transfer_data_port");
  // A sending host whose key file is missing is named in the error.
  std::filesystem::remove(pairs["node292"].public_path);
  auto bad = receiver_options(*c, "node241");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("/hosts/0/transfer_public_key_file"), std::string::npos)
      << bad.error().message;
}

// The check the service wires (receiver_options): the latent against the job's profile from the
// cluster config.
TEST(ReceiverLatentCheck, WiredToTheJobsLatentProfile) {
  TempDir dir;
  auto c = config::parse(nlohmann::json::parse(R"({
    "hosts": [{"name": "B"}],
    "pools": [{"name": "s", "host": "B", "stage": "sample"}, {"name": "d", "host": "B", "stage": "decode"},
              {"name": "e", "host": "B", "stage": "encode"}],
    "latent_profile": "wan2.1"})"),
                         dir.path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto o = receiver_options(*c, "B");
  ASSERT_TRUE(o.ok()) << o.error().message;
  ASSERT_TRUE(o->check_file);
  pb::Offer offer;
  offer.set_job_id("j");
  auto* spec = offer.mutable_next_task()->mutable_spec();
  spec->set_width(64);
  spec->set_height(48);
  spec->set_frames(9);
  spec->set_fps(16);
  const auto& wan = *latent::find_builtin_profile("wan2.1");
  ASSERT_TRUE(
      latent::write_latent(dir.path() / "wan.h3latent", latent::make_latent(wan, {64, 48, 9, 16}))
          .ok());
  EXPECT_TRUE(o->check_file(offer, dir.path() / "wan.h3latent").ok());
  ASSERT_TRUE(latent::write_latent(dir.path() / "builtin.h3latent",
                                   latent::make_latent(latent::builtin_profile(), {64, 48, 9, 16}))
                  .ok());
  auto bad = o->check_file(offer, dir.path() / "builtin.h3latent");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, "latent.profile");
  EXPECT_NE(bad.error().message.find("latent for job j does not fit profile wan2.1 (64x48x9@16)"),
            std::string::npos)
      << bad.error().message;
  (*offer.mutable_next_task()->mutable_spec()->mutable_params())["latent_profile"] = "builtin";
  EXPECT_TRUE(o->check_file(offer, dir.path() / "builtin.h3latent").ok())
      << "the job's own profile";
}

TEST(ChunkSchedule, NeverPastTheCreditEvenOffTheChunkGrid) {
  // After 64 KiB eager chunks, a checkpoint may ack an offset that is no multiple of the
  // receiver's 256 KiB chunk; the sender must then stop exactly at the credit.
  const std::uint64_t chunk = 256 * 1024, size = 13180888;
  const std::uint64_t acked = (1u << 20) + 64 * 1024;
  const std::uint64_t limit = grant_limit(acked, 32, chunk);
  std::uint64_t next = 1u << 20, sent = 0, chunks = 0;
  while (std::uint64_t n = next_chunk_len(next, size, limit, chunk)) {
    EXPECT_LE(n, chunk);
    EXPECT_EQ(check_chunk({next, acked, size, 256 * 1024, 32}, next, n).verdict,
              ChunkCheck::Verdict::kAccept)
        << "chunk at " << next;
    next += n, sent += n, ++chunks;
  }
  EXPECT_EQ(next, limit);
  EXPECT_EQ(chunks, 33u) << "32 full chunks and the 64 KiB that closes the gap";
  EXPECT_EQ(next_chunk_len(size - 10, size, UINT64_MAX, chunk), 10u);
  EXPECT_EQ(next_chunk_len(size, size, UINT64_MAX, chunk), 0u);
  // The last kTailBytes go in small chunks; the whole file is still covered exactly.
  EXPECT_EQ(next_chunk_len(size - kTailBytes - 1, size, UINT64_MAX, chunk), chunk);
  EXPECT_EQ(next_chunk_len(size - kTailBytes, size, UINT64_MAX, chunk), kTailChunk);
  std::uint64_t at = 0, messages = 0;
  while (std::uint64_t n = next_chunk_len(at, size, UINT64_MAX, chunk)) at += n, ++messages;
  EXPECT_EQ(at, size);
  EXPECT_LE(messages, size / chunk + kTailBytes / kTailChunk + 1);
}

TEST(EagerSpan, FitsWhatTheReceiverGrantsAtTheStart) {
  EXPECT_EQ(eager_span_for(256 * 1024, 32).bytes, 1u << 20);
  EXPECT_EQ(eager_span_for(256 * 1024, 32).chunk, 64u * 1024);
  EXPECT_EQ(eager_span_for(64 * 1024, 8).bytes, 512u * 1024) << "window x chunk < 1 MiB";
  EXPECT_EQ(eager_span_for(16 * 1024, 4).chunk, 16u * 1024) << "never above the chunk size";
  EXPECT_EQ(eager_span_for(16 * 1024, 4).bytes, 64u * 1024);
}

TEST(ResolveOffer, RejectsTraversalAndLimits) {
  pb::Offer o;
  o.set_run_id("r");
  o.set_job_id("j");
  o.set_size(10);
  o.set_sha256(std::string(64, 'a'));
  o.set_transfer_id(7);
  o.set_relative_path("r/j/latent.h3latent");
  o.mutable_next_task()->set_run_id("r");
  o.mutable_next_task()->set_job_id("j");
  EXPECT_EQ(resolve_offer(o, "/root", 100).value(), fs::path("/root/r/j/latent.h3latent"));
  for (const char* bad : {"../x", "r/../../etc/passwd", "/abs", "r//j", "", "a/b/c/d/e/f/g"}) {
    o.set_relative_path(bad);
    EXPECT_FALSE(resolve_offer(o, "/root", 100).ok()) << bad;
  }
  o.set_relative_path("r/j/l");
  o.set_size(101);
  EXPECT_FALSE(resolve_offer(o, "/root", 100).ok());
  o.set_size(10);
  o.set_sha256("ABC");
  EXPECT_FALSE(resolve_offer(o, "/root", 100).ok());
}

TEST(Zap, MissingHandlerRefusesCurveClients) {
  TempDir d;
  Keys k = make_keys(d.path());
  zmq::context_t ctx(1);
  zmq::socket_t server(ctx, zmq::socket_type::router);
  CurveServer cs{true, k.server.public_z85, k.server.secret_z85, {k.client.public_z85}};
  ASSERT_TRUE(configure_server(server, cs, 1024, 4, 100, 1000).ok());
  server.bind("tcp://127.0.0.1:*");
  zmq::socket_t client(ctx, zmq::socket_type::dealer);
  CurveClient cc{true, k.client.public_z85, k.client.secret_z85, k.server.public_z85};
  ASSERT_TRUE(configure_client(client, cc, 1024, 4, 100, 1000).ok());
  client.set(zmq::sockopt::immediate, 0);
  client.connect(server.get(zmq::sockopt::last_endpoint));
  client.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  zmq::pollitem_t it{server.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&it, 1, 1500ms), 0) << "no ZAP handler must mean no admission";
}

TEST(StateFile, TornSlotFallsBackToThePreviousOne) {
  TempDir d;
  Sha256 h;
  std::uint64_t have = 0;
  const std::string sha(64, 'b');
  auto f = PartFile::open(d.path() / "x", 1000, sha, &h, &have);
  ASSERT_TRUE(f.ok());
  std::string data(1000, 'z');
  ASSERT_TRUE((*f)->write(0, data.data(), 600).ok());
  ASSERT_TRUE((*f)->checkpoint(200).ok());
  ASSERT_TRUE((*f)->checkpoint(600).ok());
  auto st = read_state(d.path() / "x.xfer");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->durable, 600u);
  // Tear the newest slot: the reader must fall back to durable = 200.
  FILE* fp = std::fopen((d.path() / "x.xfer").c_str(), "r+b");
  std::fseek(fp, static_cast<long>((st->seq % 2) * 128 + 30), SEEK_SET);
  std::fputc(0x5a, fp);
  std::fclose(fp);
  st = read_state(d.path() / "x.xfer");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->durable, 200u);
}

}  // namespace
}  // namespace h3pipe::transfer
