// A live worker is never robbed (issue #7, item 3), on real service processes: a private
// redis-server, the encoder, two sampler pools (s0, s1) and the decoder from this build's bin dir,
// with a lease of 300 ms and a sample stage of 3 s (ten leases).  The sampler running the task
// renews its lease while the idle one sweeps for expired leases every 100 ms:
// h3pipe_stage_reclaims_total{reason="expired_lease"}, scraped from both samplers' /metrics
// (ports from the run files STATE/run/sampler-<pool>.json), stays 0 for the whole stage and the
// sample stage runs and completes once.  Then the busy sampler is killed -9 (the test spawns the
// services itself, so nothing restarts it to take its own pending entry back): the idle one
// reclaims the task once the lease lapses, its expired_lease counter becomes 1 and the job
// completes.  Label: e2e.  No sleeps to synchronise: every wait is a condition with a deadline.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/preflight/http_get.h"
#include "common/queue/keys.h"
#include "common/queue/reply.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kLeaseMs = 300;
constexpr double kSampleSeconds = 3.0;  // ten leases

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Sum of one counter's samples whose labels include every `label="value"` given.
std::optional<double> counter(const std::string& text, const std::string& name,
                              const std::vector<std::string>& labels) {
  std::optional<double> sum;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    const auto close = line.find("} ");
    if (close == std::string::npos) continue;
    const std::string set = line.substr(name.size(), close - name.size() + 1);
    bool all = true;
    for (const auto& l : labels) all = all && set.find(l) != std::string::npos;
    if (all) sum = sum.value_or(0) + std::stod(line.substr(close + 2));
  }
  return sum;
}

// The encoder, two samplers and the decoder of one host, spawned directly (no supervisor).
class Services {
 public:
  Services() {
    json cfg = {{"name", "reclaim"},
                {"state_dir", dir_.path().string()},
                {"redis", {{"host", "127.0.0.1"}, {"port", redis_.port()}, {"embedded", false}}},
                {"queue",
                 {{"lease_ms", kLeaseMs},
                  {"renew_ms", 100},
                  {"sweep_ms", 100},
                  {"max_deliveries", 3},
                  {"block_ms", 50}}},
                {"hosts", {{{"name", "local"}}}},
                {"pools",
                 {pool("enc", "encode", 0.01), pool("s0", "sample", kSampleSeconds),
                  pool("s1", "sample", kSampleSeconds), pool("dec", "decode", 0.01)}}};
    config_ = dir_.path() / "cluster.json";
    std::ofstream(config_) << cfg.dump(2);
    auto r = redis_.connect();
    if (r.ok()) redis_conn_ = std::move(*r);
    for (const auto& [svc, p] : std::vector<std::pair<std::string, std::string>>{
             {"encoder", "enc"}, {"sampler", "s0"}, {"sampler", "s1"}, {"decoder", "dec"}})
      pids_[svc + "-" + p] =
          ts::spawn({ts::bin("h3pipe-" + svc), "--config", config_.string(), "--pool", p,
                     "--metrics-port", "0", "--health-port", "0", "--bind", "127.0.0.1"},
                    (dir_.path() / (svc + "-" + p + ".log")).string());
  }
  ~Services() {
    for (auto& [name, pid] : pids_) kill(name);
  }

  static json pool(const std::string& name, const std::string& stage, double seconds) {
    return {{"name", name},
            {"host", "local"},
            {"stage", stage},
            {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", seconds}}}}}};
  }

  void kill(const std::string& name) {
    pid_t& pid = pids_.at(name);
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  bool alive(const std::string& name) const { return pids_.at(name) > 0; }

  // The service's /metrics text, or nullopt while it is not up (no run file, not listening).
  std::optional<std::string> metrics(const std::string& name) const {
    auto rf = dir_.path() / "run" / (name + ".json");
    std::error_code ec;
    if (!fs::exists(rf, ec)) return std::nullopt;
    json j = json::parse(slurp(rf), nullptr, false);
    if (!j.is_object() || !j.contains("metrics_port")) return std::nullopt;
    auto r = preflight::http_get(
        fmt::format("http://127.0.0.1:{}/metrics", j["metrics_port"].get<int>()),
        std::chrono::milliseconds(2000));
    if (!r.ok() || r->status != 200) return std::nullopt;
    return r->body;
  }
  // h3pipe_stage_reclaims_total{reason=...} of one sampler (nullopt while not scrapeable).
  std::optional<double> reclaims(const std::string& sampler, const std::string& reason) const {
    auto m = metrics(sampler);
    if (!m) return std::nullopt;
    return counter(*m, "h3pipe_stage_reclaims_total", {"reason=\"" + reason + "\""}).value_or(0);
  }

  std::string cli() const { return ts::bin("h3pipe") + " --config " + config_.string(); }
  std::string submit(const std::string& job) {
    auto f = dir_.path() / (job + ".jsonl");
    std::ofstream(f)
        << fmt::format(
               R"({{"jobId":"{}","prompt":"a long sample","width":64,"height":64,"frames":9,"fps":12}})",
               job)
        << "\n";
    auto [rc, out] = ts::sh(cli() + " run " + f.string() + " --background 2>/dev/null");
    EXPECT_EQ(rc, 0) << out;
    return out.substr(0, out.find('\n'));
  }
  std::string field(const std::string& run, const std::string& job, const std::string& f) {
    auto r = redis_conn_->command({"HGET", keys::job(run, job), f});
    return r.ok() ? queue::reply_str(r->get()) : "";
  }
  // Consumer (pool name) holding the sample stream's pending entry, if any.
  std::string sample_owner() {
    auto r = redis_conn_->command({"XPENDING", keys::stream("sample"), "sample", "-", "+", "10"});
    if (!r.ok() || r->get()->type != REDIS_REPLY_ARRAY || r->get()->elements != 1) return "";
    return queue::reply_str(r->get()->element[0]->element[1]);
  }
  std::string log(const std::string& name) const { return slurp(dir_.path() / (name + ".log")); }
  const fs::path& state() const { return dir_.path(); }

 private:
  ts::RedisServer redis_;
  ts::TempDir dir_;
  fs::path config_;
  std::unique_ptr<queue::Redis> redis_conn_;
  std::map<std::string, pid_t> pids_;
};

}  // namespace

TEST(LiveReclaim, BusyWorkerRenewingIsNeverRobbedAndAKilledOnesTaskIsReclaimedOnce) {
  Services sv;
  ASSERT_TRUE(ts::wait_for(
      [&] {
        return sv.reclaims("sampler-s0", "expired_lease") &&
               sv.reclaims("sampler-s1", "expired_lease") && sv.metrics("encoder-enc") &&
               sv.metrics("decoder-dec");
      },
      30))
      << sv.log("sampler-s0") << sv.log("sampler-s1");

  // 1. One job whose sample stage runs ten leases; both samplers are scraped throughout.
  const std::string run1 = sv.submit("long");
  double seen_expired = 0;
  int scrapes = 0;
  const auto stage_done = [&] { return sv.field(run1, "long", "done:sample") == "1"; };
  ASSERT_TRUE(ts::wait_for(
      [&] {
        for (const char* s : {"sampler-s0", "sampler-s1"}) {
          auto n = sv.reclaims(s, "expired_lease");
          if (n) seen_expired = std::max(seen_expired, *n), ++scrapes;
        }
        return stage_done();
      },
      60))
      << sv.log("sampler-s0") << sv.log("sampler-s1");
  EXPECT_EQ(seen_expired, 0) << "a renewing worker's task was reclaimed as an expired lease";
  EXPECT_GE(scrapes, 10) << "both samplers must be scraped while the stage runs";
  EXPECT_EQ(sv.reclaims("sampler-s0", "expired_lease"), 0.0);
  EXPECT_EQ(sv.reclaims("sampler-s1", "expired_lease"), 0.0);
  ASSERT_EQ(ts::sh(sv.cli() + " wait " + run1 + " --timeout 60 >/dev/null 2>&1").first, 0);
  EXPECT_EQ(sv.field(run1, "long", "done:sample"), "1");
  EXPECT_EQ(sv.field(run1, "long", "exec:sample"), "1") << "the sample stage ran once";
  EXPECT_EQ(sv.field(run1, "long", "attempts:sample"), "1") << "and was delivered once";
  EXPECT_EQ(sv.field(run1, "long", "done:decode"), "1");
  // The stage really outlived its lease ten times (the receipt's sample record).
  const json receipt =
      json::parse(slurp(sv.state() / "outputs" / run1 / "long.pipeline.json"), nullptr, false);
  double sample_ms = 0;
  for (const auto& st : receipt.value("stages", json::array()))
    if (st.value("stage", "") == "STAGE_SAMPLE")
      sample_ms = std::stod(st.value("endUnixMs", std::string("0"))) -
                  std::stod(st.value("startUnixMs", std::string("0")));
  EXPECT_GE(sample_ms, kSampleSeconds * 1000 * 0.95) << receipt.dump();
  EXPECT_GE(sample_ms, 9.5 * kLeaseMs);

  // 2. A second job: kill -9 the sampler running it; the other reclaims it when the lease lapses.
  const std::string run2 = sv.submit("robbed");
  std::string owner;
  ASSERT_TRUE(ts::wait_for(
      [&] {
        owner = sv.sample_owner();
        return sv.field(run2, "robbed", "exec:sample") == "1" && !owner.empty();
      },
      30))
      << sv.log("sampler-s0") << sv.log("sampler-s1");
  ASSERT_TRUE(owner == "s0" || owner == "s1") << owner;
  const std::string busy = "sampler-" + owner, idle = owner == "s0" ? "sampler-s1" : "sampler-s0";
  const double idle_before = sv.reclaims(idle, "expired_lease").value_or(-1);
  ASSERT_EQ(idle_before, 0);
  sv.kill(busy);
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(ts::wait_for([&] { return sv.reclaims(idle, "expired_lease") == 1.0; }, 30))
      << sv.log(idle);
  const double taken_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("task of the killed %s reclaimed by %s %.2f s after the kill (lease %d ms)\n",
              busy.c_str(), idle.c_str(), taken_s, kLeaseMs);
  ASSERT_EQ(ts::sh(sv.cli() + " wait " + run2 + " --timeout 60 >/dev/null 2>&1").first, 0)
      << sv.log(idle);
  EXPECT_EQ(sv.reclaims(idle, "expired_lease"), 1.0) << "reclaimed exactly once";
  EXPECT_EQ(sv.field(run2, "robbed", "done:sample"), "1") << "committed exactly once";
  EXPECT_EQ(sv.field(run2, "robbed", "attempts:sample"), "2")
      << "the killed and the reclaimed delivery";
  // The sim sampler writes its latent, then sleeps out the profile: a kill during the sleep leaves
  // a verified output the reclaiming delivery skips (exec 1); during the write, it runs again.
  const std::string exec = sv.field(run2, "robbed", "exec:sample");
  EXPECT_TRUE(exec == "1" || exec == "2") << exec;
  EXPECT_EQ(sv.field(run2, "robbed", "done:decode"), "1");
  EXPECT_EQ(sv.field(run1, "long", "done:sample"), "1") << "the first job is untouched";
}
