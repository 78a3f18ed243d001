// Two hosts in two network namespaces joined by a veth pair shaped with tbf (label netns).
// The sender runs in A, the receiver in B, both as real processes (bench/transfer/xfer_node)
// started with `ip netns exec`; they report events as JSON lines that the tests wait on.
// Needs root (CAP_NET_ADMIN); skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/latent/latent.h"
#include "common/transfer/outbox.h"
#include "tests/transfer/transfer_test_util.h"

namespace h3pipe::transfer {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::TempDir;
using testing::wait_until;
using json = nlohmann::json;

const std::string kNode = XFER_NODE;
constexpr std::uint64_t kWindowBytes = 32ull * 256 * 1024;  // xfer_node defaults

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

// A process started inside a namespace; killed (SIGKILL) and reaped on destruction.
class Proc {
 public:
  Proc(const std::string& ns, std::vector<std::string> args, const fs::path& out,
       std::vector<std::string> env = {}) {
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(out.c_str(), "a");
      if (f) {
        ::dup2(fileno(f), 1);
        ::dup2(fileno(f), 2);
      }
      for (auto& e : env) ::putenv(e.data());
      std::vector<std::string> all = {"ip", "netns", "exec", ns, kNode};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("ip", argv.data());  // ip netns exec execs the node: same pid
      ::_exit(127);
    }
  }
  ~Proc() { kill9(); }
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void term() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Exit status once it exits by itself within `deadline`; -1 otherwise.
  int wait_exit(std::chrono::milliseconds deadline) {
    int status = 0;
    bool done = wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, deadline);
    if (!done) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

std::vector<json> events(const fs::path& log, const std::string& kind) {
  std::vector<json> out;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == kind) out.push_back(j);
  }
  return out;
}

class Netns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN)";
    if (!fs::exists(kNode)) GTEST_SKIP() << kNode << " not built";
    const std::string id = std::to_string(::getpid());
    a_ = "h3xA" + id;
    b_ = "h3xB" + id;
    if (sh("ip netns add " + a_) != 0) GTEST_SKIP() << "cannot create a network namespace here";
    ASSERT_EQ(sh("ip netns add " + b_), 0);
    ASSERT_EQ(sh("ip link add vA netns " + a_ + " type veth peer name vB netns " + b_), 0);
    ASSERT_EQ(sh("ip -n " + a_ + " addr add 10.213.0.1/24 dev vA"), 0);
    ASSERT_EQ(sh("ip -n " + b_ + " addr add 10.213.0.2/24 dev vB"), 0);
    for (const auto& [ns, dev] : {std::pair{a_, "vA"}, std::pair{b_, "vB"}}) {
      ASSERT_EQ(sh("ip -n " + ns + " link set " + dev + " up"), 0);
      ASSERT_EQ(sh("ip -n " + ns + " link set lo up"), 0);
    }
    shape(2350);
    ASSERT_EQ(sh(kNode + " keygen " + (dir_.path() / "keys").string()), 0);
  }
  void TearDown() override {
    receiver_.reset();
    sender_.reset();
    if (!a_.empty()) sh("ip netns del " + a_);
    if (!b_.empty()) sh("ip netns del " + b_);
  }

  // Both directions shaped like the seeds' LAN (tbf: rate, 256 KiB burst, 50 ms queue).
  void shape(int mbit) {
    for (const auto& [ns, dev] : {std::pair{a_, "vA"}, std::pair{b_, "vB"}}) {
      sh("ip netns exec " + ns + " tc qdisc del dev " + dev + " root");
      ASSERT_EQ(sh("ip netns exec " + ns + " tc qdisc add dev " + dev + " root tbf rate " +
                   std::to_string(mbit) + "mbit burst 256kb latency 50ms"),
                0);
    }
  }

  fs::path root_a() const { return dir_.path() / "A"; }
  fs::path root_b() const { return dir_.path() / "B"; }
  fs::path rlog() const { return dir_.path() / "recv.jsonl"; }
  fs::path slog() const { return dir_.path() / "send.jsonl"; }

  std::string make_latent(const std::string& rel, std::uint32_t w, std::uint32_t h,
                          std::uint32_t frames) {
    latent::Latent l = latent::make_latent(latent::builtin_profile(), {w, h, frames, 24});
    for (std::size_t i = 0; i < l.video.size(); ++i)
      l.video[i] = static_cast<float>((i * 2654435761u) % 1000) / 250.0f;
    for (std::size_t i = 0; i < l.audio.size(); ++i)
      l.audio[i] = static_cast<float>(i % 777) / 100.0f;
    l.metadata = {{"rel", rel}};
    return latent::write_latent(root_a() / rel, l).value();
  }

  void start_receiver(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "receive",         "--bind", "tcp://10.213.0.2:7000",         "--root",
        root_b().string(), "--keys", (dir_.path() / "keys").string(), "--log",
        rlog().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    receiver_ = std::make_unique<Proc>(b_, args, dir_.path() / "recv.out");
    ASSERT_TRUE(wait_until([&] { return events(rlog(), "ready").size() >= ready_seen_ + 1; }, 10s));
    ++ready_seen_;
  }

  void start_sender(std::vector<std::string> extra, std::vector<std::string> env = {}) {
    std::vector<std::string> args = {"send",
                                     "--peer",
                                     "B=tcp://10.213.0.2:7000",
                                     "--root",
                                     root_a().string(),
                                     "--outbox",
                                     (dir_.path() / "outbox").string(),
                                     "--keys",
                                     (dir_.path() / "keys").string(),
                                     "--log",
                                     slog().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    sender_ = std::make_unique<Proc>(a_, args, dir_.path() / "send.out", env);
  }

  std::uint64_t part_size(const std::string& rel) {
    std::error_code ec;
    auto n = fs::file_size(artifacts::part_path(root_b() / rel), ec);
    return ec ? 0 : n;
  }

  TempDir dir_;
  std::string a_, b_;
  std::unique_ptr<Proc> receiver_, sender_;
  std::size_t ready_seen_ = 0;
};

TEST_F(Netns, LatentsCrossTheShapedLinkEachVerifiedEachDurableOnce) {
  std::map<std::string, std::string> sha;
  std::vector<std::string> args;
  const std::uint32_t geo[][3] = {
      {736, 416, 124}, {1280, 736, 137}, {736, 416, 124}, {64, 64, 9}, {736, 416, 61}};
  for (std::size_t i = 0; i < std::size(geo); ++i) {
    std::string rel = "run1/job" + std::to_string(i) + "/latent.h3latent";
    sha["job" + std::to_string(i)] = make_latent(rel, geo[i][0], geo[i][1], geo[i][2]);
    args.insert(args.end(), {"--task", rel});
  }
  start_receiver();
  args.insert(args.end(), {"--exit-after", std::to_string(std::size(geo))});
  start_sender(args);
  ASSERT_EQ(sender_->wait_exit(60s), 0) << "sender did not finish; see " << dir_.path();
  ASSERT_TRUE(wait_until([&] { return events(rlog(), "durable").size() >= std::size(geo); }, 10s));
  auto durable = events(rlog(), "durable");
  ASSERT_EQ(durable.size(), std::size(geo)) << "on_durable exactly once per latent";
  std::set<std::string> jobs;
  for (const auto& e : durable) {
    const std::string job = e["job"];
    EXPECT_TRUE(jobs.insert(job).second) << job << " delivered twice";
    EXPECT_EQ(e["sha256"], sha[job]);
    const fs::path p = root_b() / "run1" / job / "latent.h3latent";
    EXPECT_EQ(artifacts::verify(p).value(), sha[job]);
    EXPECT_TRUE(latent::read_latent(p, nullptr).ok()) << "a valid latent on B";
  }
  for (const auto& e : events(slog(), "sent")) {
    EXPECT_EQ(e["attempts"], 1);
    // Issue #36 item 8: every latent's bytes as AES-256-GCM data frames, the connection's first
    // one too (its offer waits for the data connection).
    EXPECT_EQ(e["sealed"], true) << e.dump();
    EXPECT_EQ(e["data_fallbacks"], 0) << e.dump();
  }
  EXPECT_TRUE(events(slog(), "failed").empty());
}

// A firewalled data port (packets dropped: no RST, the connect just hangs): the hand-off does not
// hang; the first offer waits for the data connection at most data_wait_ms (1 s), then every
// latent goes through CURVE, and the fallback is counted once for the connection.
TEST_F(Netns, FirewalledDataPortFallsBackToCurveWithinABoundedTime) {
  const std::string rel1 = "run1/fw1/latent.h3latent", rel2 = "run1/fw2/latent.h3latent";
  const std::string sha1 = make_latent(rel1, 736, 416, 124), sha2 = make_latent(rel2, 64, 64, 9);
  ASSERT_EQ(sh("ip netns exec " + b_ + " iptables -A INPUT -p tcp --dport 7001 -j DROP"), 0);
  start_receiver({"--data-port", "7001"});
  EXPECT_EQ(events(rlog(), "ready").at(0)["data_endpoint"], "tcp://10.213.0.2:7001");
  const auto t0 = std::chrono::steady_clock::now();
  start_sender({"--task", rel1, "--task", rel2, "--sequential", "--exit-after", "2"});
  ASSERT_EQ(sender_->wait_exit(30s), 0) << "the hand-off hung; see " << dir_.path();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 6.0) << "one 1 s wait for the data connection, then CURVE at the link's rate";
  auto sent = events(slog(), "sent");
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& e : sent) {
    EXPECT_EQ(e["sealed"], false) << e.dump();
    EXPECT_EQ(e["attempts"], 1) << e.dump();
  }
  EXPECT_EQ(sent[1]["curve_total"], 2);
  EXPECT_EQ(sent[1]["data_fallbacks"], 1) << "counted once for the connection";
  EXPECT_GE(sent[0]["seconds"].get<double>(), 0.9) << "the offer waited for the data connection";
  EXPECT_EQ(artifacts::verify(root_b() / rel1).value(), sha1);
  EXPECT_EQ(artifacts::verify(root_b() / rel2).value(), sha2);
  std::ifstream out(dir_.path() / "send.out");
  const std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("not up 1000 ms after the control connection"), std::string::npos) << text;
}

TEST_F(Netns, BitFlippedInTransitIsDetectedAndResent) {
  const std::string rel = "run1/flip/latent.h3latent";
  const std::string sha = make_latent(rel, 736, 416, 124);
  start_receiver();
  start_sender({"--task", rel, "--exit-after", "1"}, {"H3PIPE_TEST_ONLY_CORRUPT_ATTEMPTS=1"});
  ASSERT_EQ(sender_->wait_exit(60s), 0);
  auto sent = events(slog(), "sent");
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0]["attempts"], 2);
  ASSERT_TRUE(wait_until([&] { return events(rlog(), "durable").size() == 1; }, 10s));
  auto d = events(rlog(), "durable");
  EXPECT_EQ(d[0]["integrity_failures"], 1);
  EXPECT_EQ(artifacts::verify(root_b() / rel).value(), sha);
}

TEST_F(Netns, SlowLinkLastWindowProgressesWithoutReoffers) {
  // 4.3 MB over 20 Mbit/s takes ~1.8 s, all of it inside the first window (8 MiB): the sender
  // holds credit to the end from the start and would hear nothing but pongs for longer than
  // dead_after_ms (1 s here).  The receiver's checkpoints keep acknowledging progress, so the
  // sender neither gives the attempt up nor sends anything twice.
  shape(20);
  const std::string rel = "run1/slow/latent.h3latent";
  const std::string sha = make_latent(rel, 736, 416, 124);
  const std::vector<std::string> timing = {"--heartbeat-ms", "200", "--dead-after-ms", "1000"};
  start_receiver(timing);
  std::vector<std::string> args = {"--task", rel, "--exit-after", "1"};
  args.insert(args.end(), timing.begin(), timing.end());
  start_sender(args);
  ASSERT_EQ(sender_->wait_exit(60s), 0) << "see " << dir_.path();
  auto sent = events(slog(), "sent");
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0]["bytes_sent"], sent[0]["size"])
      << "nothing re-sent; the sender's log:\n"
      << testing::slurp(dir_.path() / "send.out") << "the receiver's:\n"
      << testing::slurp(dir_.path() / "recv.out");
  EXPECT_GT(sent[0]["seconds"].get<double>(), 1.0) << "the link was not slow enough to tell";
  EXPECT_EQ(artifacts::verify(root_b() / rel).value(), sha);
}

TEST_F(Netns, ReceiverKilledMidTransferResumesFromAcknowledgedOffset) {
  shape(100);  // slow enough to land a kill mid-transfer
  const std::string rel = "run1/big/latent.h3latent";
  const std::string sha = make_latent(rel, 1280, 736, 137);
  const std::uint64_t size = fs::file_size(root_a() / rel);
  start_receiver();
  start_sender({"--task", rel, "--exit-after", "1"});
  ASSERT_TRUE(wait_until([&] { return part_size(rel) > size * 4 / 10; }, 30s));
  receiver_->kill9();
  start_receiver();
  ASSERT_EQ(sender_->wait_exit(60s), 0);
  auto sent = events(slog(), "sent");
  ASSERT_EQ(sent.size(), 1u);
  const std::uint64_t bytes_sent = sent[0]["bytes_sent"], resumed = sent[0]["resumed_from"];
  EXPECT_GT(resumed, 0u) << "resumed, not restarted";
  EXPECT_LE(bytes_sent - size, kWindowBytes) << "re-sent at most one window";
  std::printf("receiver kill: resumed at %llu of %llu, re-sent %llu bytes (window %llu)\n",
              (unsigned long long)resumed, (unsigned long long)size,
              (unsigned long long)(bytes_sent - size), (unsigned long long)kWindowBytes);
  EXPECT_EQ(artifacts::verify(root_b() / rel).value(), sha);
  ASSERT_TRUE(wait_until([&] { return events(rlog(), "durable").size() == 1; }, 10s));
}

TEST_F(Netns, SenderKilledMidTransferResumesAfterRestart) {
  shape(100);
  const std::string rel = "run1/big/latent.h3latent";
  const std::string sha = make_latent(rel, 1280, 736, 137);
  const std::uint64_t size = fs::file_size(root_a() / rel);
  start_receiver();
  start_sender({"--task", rel});
  ASSERT_TRUE(wait_until([&] { return part_size(rel) > size * 4 / 10; }, 30s));
  sender_->kill9();
  start_sender({"--exit-after", "1"});  // nothing on the command line: the outbox scan finds it
  ASSERT_EQ(sender_->wait_exit(60s), 0);
  ASSERT_TRUE(wait_until([&] { return events(rlog(), "durable").size() == 1; }, 10s));
  auto d = events(rlog(), "durable")[0];
  const std::uint64_t received = d["received_total"];
  EXPECT_GT(d["resumed_total"].get<double>(), 0.0);
  EXPECT_LE(received - size, kWindowBytes) << "re-sent at most one window";
  std::printf("sender kill: receiver got %llu bytes for %llu (re-sent %llu)\n",
              (unsigned long long)received, (unsigned long long)size,
              (unsigned long long)(received - size));
  EXPECT_EQ(artifacts::verify(root_b() / rel).value(), sha);
  EXPECT_TRUE(scan_outbox(dir_.path() / "outbox").empty());
}

TEST_F(Netns, ClientKeyNotInAllowListIsRefusedAndDeliversNothing) {
  const std::string rel = "run1/j/latent.h3latent";
  make_latent(rel, 64, 64, 9);
  start_receiver();
  start_sender({"--task", rel, "--as", "stranger"});
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& e : events(rlog(), "stats"))
          if (e["zap_refused"].get<double>() >= 1) return true;
        return false;
      },
      10s));
  EXPECT_TRUE(events(rlog(), "durable").empty());
  EXPECT_TRUE(events(slog(), "sent").empty());
  EXPECT_FALSE(fs::exists(root_b() / "run1"));
}

TEST_F(Netns, PeerSendingAnOversizeFrameIsDisconnected) {
  start_receiver();
  Proc flood(
      a_, {"flood", "--peer", "B=tcp://10.213.0.2:7000", "--keys", (dir_.path() / "keys").string()},
      dir_.path() / "flood.out");
  EXPECT_EQ(flood.wait_exit(15s), 0) << "the receiver must drop a peer sending an oversize frame";
  const std::string rel = "run1/after/latent.h3latent";  // and keep serving others
  make_latent(rel, 64, 64, 9);
  start_sender({"--task", rel, "--exit-after", "1"});
  EXPECT_EQ(sender_->wait_exit(30s), 0);
}

TEST_F(Netns, DeadPeerNoticedWithin3sThenReconnects) {
  const std::string rel1 = "run1/one/latent.h3latent";
  make_latent(rel1, 64, 64, 9);
  start_receiver();
  start_sender({"--task", rel1, "--rescan-ms", "100"});
  ASSERT_TRUE(wait_until([&] { return events(slog(), "sent").size() == 1; }, 30s));
  // Silent death: the cable is pulled (no FIN, no RST), only heartbeats can tell.
  ASSERT_EQ(sh("ip -n " + b_ + " link set vB down"), 0);
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_until([&] { return !events(slog(), "stats").empty(); }, 10s));
  const double noticed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  EXPECT_LE(noticed, 3.6) << "dead peer noticed after " << noticed << " s";
  std::printf("dead peer noticed after %.2f s\n", noticed);
  ASSERT_EQ(sh("ip -n " + b_ + " link set vB up"), 0);
  const std::string rel2 = "run1/two/latent.h3latent";
  const std::string sha2 = make_latent(rel2, 736, 416, 124);
  pb::StageTask t;
  t.set_run_id("run1");
  t.set_job_id("two");
  t.set_input_path(rel2);
  t.set_target_host("B");
  ASSERT_TRUE(record_task(dir_.path() / "outbox", t).ok());
  ASSERT_TRUE(wait_until([&] { return events(slog(), "sent").size() == 2; }, 30s));
  EXPECT_EQ(artifacts::verify(root_b() / rel2).value(), sha2);
}

}  // namespace
}  // namespace h3pipe::transfer
