// The CLI's promises that a careless operator or a hostile local user tests (issue #22 items 7,
// 8, 10), through the real `h3pipe` binary, a real redis-server and the real local stack:
//   - exit codes: one table for every command (bad flags 2, unknown run 4, Redis down 5);
//   - a refused resubmission never changes a run's verdict (CLI re-run, raw XADD);
//   - a full disk under the stack is said (status, wait, /readyz, a counter, one log line per
//     change), and freeing space lets the run finish.
// Labels: e2e.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "tests/support/small_fs.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string h3pipe_cli() {
  return ts::bin("h3pipe");
}

std::string batch(int n, const std::string& prompt = "clip") {
  std::string s;
  for (int i = 0; i < n; ++i)
    s +=
        fmt::format(
            R"({{"jobId":"j{:02d}","prompt":"{} {}","width":64,"height":64,"frames":9,"fps":12,"seed":{}}})",
            i, prompt, i, i) +
        "\n";
  return s;
}

// A local stack in `dir` (a temp dir, or a small file system for the full-disk case).
class Stack {
 public:
  // artifacts: where artifacts and outputs go (default: under the state dir).
  explicit Stack(const fs::path& dir, double sample_s = 0.05, const fs::path& artifacts = {})
      : dir_(dir) {
    json cfg = json::parse(R"({
      "name": "contract", "queue": {"lease_ms": 1500, "renew_ms": 300, "sweep_ms": 200, "max_deliveries": 3, "block_ms": 50},
      "hosts": [{"name": "local"}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.05}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}
      ]})");
    cfg["pools"][1]["profiles"]["default"]["seconds"] = sample_s;
    cfg["state_dir"] = (dir_ / "state").string();
    if (!artifacts.empty()) {
      cfg["artifact_root"] = (artifacts / "artifacts").string();
      cfg["output_root"] = (artifacts / "outputs").string();
    }
    config_ = dir_ / "cluster.json";
    std::ofstream(config_) << cfg.dump(2);
    auto [rc, out] = ts::sh(cli() + " start 2>&1");
    EXPECT_EQ(rc, 0) << out;
  }
  ~Stack() { ts::sh(cli() + " stop >/dev/null 2>&1"); }
  std::string cli() const { return h3pipe_cli() + " --config " + config_.string(); }
  json stack() const {
    json j;
    std::ifstream(dir_ / "state" / "stack.json") >> j;
    return j;
  }
  std::unique_ptr<queue::Redis> redis(const std::string& role) const {
    return std::move(queue::Redis::connect(ts::stack_redis(stack(), role)).value());
  }
  json service(const std::string& name) const {
    json j;
    std::ifstream(dir_ / "state" / "run" / (name + ".json")) >> j;
    return j;
  }
  std::string log(const std::string& name) const {
    std::ifstream in(dir_ / "state" / "logs" / name);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  json status(const std::string& run) const {
    auto [rc, out] = ts::sh(cli() + " status " + run + " --json 2>/dev/null");
    return rc == 0 ? json::parse(out, nullptr, false) : json();
  }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

 private:
  fs::path dir_, config_;
};

// The value of a counter series on a service's /metrics (-1: absent).
double counter(int port, const std::string& series) {
  auto [rc, out] = ts::sh(fmt::format("curl -s --max-time 2 http://127.0.0.1:{}/metrics", port));
  for (std::istringstream in(out); std::getline(in, out);)
    if (out.rfind(series + " ", 0) == 0) return std::stod(out.substr(series.size() + 1));
  return -1;
}

std::pair<int, std::string> readyz(int port) {
  auto [rc, out] = ts::sh(
      fmt::format("curl -s --max-time 2 -w '\\n%{{http_code}}' http://127.0.0.1:{}/readyz", port));
  const auto nl = out.rfind('\n');
  return {std::atoi(out.c_str() + nl + 1), out.substr(0, nl)};
}

}  // namespace

// Item 7: every subcommand with a bad flag exits 2 (CLI11 said 104, 106, 109); a run Redis does
// not know exits 4, a Redis that does not answer 5, `--redis notaport` 2 naming the flag.
TEST(CliExitCodes, OneMappingForEveryCommand) {
  ts::TempDir dir;
  ts::RedisServer redis;  // no stack: --redis names it
  const fs::path batch_file = dir.path() / "b.jsonl";
  std::ofstream(batch_file) << batch(1);
  const std::string base = h3pipe_cli() + " --state-dir " + (dir.path() / "state").string();
  const std::string up = " --redis 127.0.0.1:" + std::to_string(redis.port());
  const std::string down = " --redis 127.0.0.1:" + std::to_string(supervisor::free_loopback_port());
  auto rc = [&](const std::string& args) {
    return ts::sh(base + " " + args + " >/dev/null 2>&1").first;
  };

  // Bad flags, an unknown subcommand, a missing argument, a flag without its value: 2.
  for (const char* sub :
       {"start", "stop", "run b.jsonl", "wait r", "status", "cancel r", "resume r", "keygen",
        "plan", "preflight", "report", "config-adapt", "latent inspect x", "profile learn"})
    EXPECT_EQ(rc(std::string(sub) + " --no-such-flag"), 2) << sub;
  EXPECT_EQ(rc("no-such-command"), 2);
  EXPECT_EQ(rc("wait"), 2);
  EXPECT_EQ(rc("cancel"), 2);
  EXPECT_EQ(rc("resume"), 2);
  EXPECT_EQ(rc("run"), 2);
  EXPECT_EQ(rc("wait r --timeout"), 2);
  EXPECT_EQ(rc("wait r --timeout soon"), 2);
  EXPECT_EQ(rc(""), 2);
  EXPECT_EQ(rc("--help"), 0);
  // --redis must be HOST:PORT, named in the message, never "no stack runs".
  for (const char* bad : {"notaport", "host:", ":6379", "h:0", "h:70000", "h:12x"}) {
    auto [code, out] = ts::sh(base + " status r --redis '" + bad + "' 2>&1");
    EXPECT_EQ(code, 2) << bad << ": " << out;
    EXPECT_NE(out.find("--redis"), std::string::npos) << out;
    EXPECT_EQ(out.find("no running local stack"), std::string::npos) << out;
  }
  // A run Redis does not know: 4, for each command that names one.
  for (const char* sub : {"status nope", "cancel nope", "resume nope", "wait nope --timeout 5"})
    EXPECT_EQ(rc(std::string(sub) + up), 4) << sub;
  // Redis does not answer: 5, for each command that talks to it.
  for (const std::string& sub : std::vector<std::string>{
           "status", "status nope", "cancel nope", "resume nope", "wait nope --timeout 1",
           "run " + batch_file.string() + " --background"})
    EXPECT_EQ(rc(sub + down), 5) << sub;
  // And the positive cases against the live Redis.
  EXPECT_EQ(rc("status" + up), 0);
  EXPECT_EQ(rc("run " + batch_file.string() + " --background --run-id ok" + up), 0);
  EXPECT_EQ(rc("status ok" + up), 0);
  EXPECT_EQ(rc("cancel ok" + up), 0);
}

// #34 P3, #35 D9: a Redis that wants a password the CLI lacks (NOAUTH), refuses the one it has
// (WRONGPASS), or a password file that cannot be read: exit 5 for every command that talks to
// Redis (it was 1 for run, status, cancel and resume), and the message names the user, the
// password file and the config field to fix; `wait` says so at once instead of retrying.
TEST(CliExitCodes, RefusedLoginIsFiveForEveryCommandAndNamesTheFix) {
  ts::TempDir dir;
  const std::string good = "operator-pass-0123456789";
  ts::RedisServer redis(
      ts::RedisOptions{.password = "default-pass-0123456789",
                       .conf_lines = {"user h3pipe-operator on >" + good + " ~* &* +@all"}});
  ASSERT_TRUE(redis.ok()) << redis.log();
  const fs::path batch_file = dir.path() / "b.jsonl";
  std::ofstream(batch_file) << batch(1);
  const std::vector<std::string> commands = {"status",
                                             "status nope",
                                             "cancel nope",
                                             "resume nope",
                                             "wait nope --timeout 20",
                                             "run " + batch_file.string() + " --background"};
  auto each = [&](const std::string& base, const std::vector<std::string>& must) {
    for (const auto& sub : commands) {
      const auto t0 = std::chrono::steady_clock::now();
      auto [rc, out] = ts::sh(base + " " + sub + " 2>&1");
      EXPECT_EQ(rc, 5) << sub << ": " << out;
      for (const auto& m : must) EXPECT_NE(out.find(m), std::string::npos) << sub << ": " << out;
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << sub;
    }
  };
  const std::string cli = h3pipe_cli() + " --state-dir " + (dir.path() / "state").string();
  // No credentials at all (the embedded default config, --redis): NOAUTH.
  each(cli + " --redis 127.0.0.1:" + std::to_string(redis.port()),
       {"NOAUTH", "no password", "/redis/credentials_dir", "/redis/password_file"});

  // A config whose credentials_dir lacks the operator's file: the file, the user, the field.
  const fs::path creds = dir.path() / "creds";
  fs::create_directories(creds);
  json cfg = json::parse(R"({"name": "auth", "hosts": [{"name": "local"}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})");
  cfg["state_dir"] = (dir.path() / "state").string();
  cfg["redis"] = {{"host", "127.0.0.1"},
                  {"port", redis.port()},
                  {"embedded", false},
                  {"credentials_dir", creds.string()}};
  const fs::path config = dir.path() / "cluster.json";
  std::ofstream(config) << cfg.dump(2);
  const std::string with_config = h3pipe_cli() + " --config " + config.string();
  const std::string pw_file = (creds / "redis-operator.password").string();
  each(with_config, {pw_file, "h3pipe-operator", "/redis/credentials_dir", config.string()});

  // The file with a password Redis does not take: WRONGPASS, the same names.
  std::ofstream(pw_file) << "not-the-password\n";
  each(with_config, {"WRONGPASS", pw_file, "h3pipe-operator", "/redis/credentials_dir"});

  // The right one: the commands work.
  std::ofstream(pw_file) << good << "\n";
  auto [rc, out] = ts::sh(with_config + " status 2>&1");
  EXPECT_EQ(rc, 0) << out;
}

// #36 item 3: with redis.sentinel configured and no Sentinel answering, every command that talks
// to Redis exits 5 (it was 1 for run, status, cancel and resume) and says which Sentinels it asked.
TEST(CliExitCodes, NoSentinelAnsweringIsFiveForEveryCommand) {
  ts::TempDir dir;
  const fs::path creds = dir.path() / "creds";
  fs::create_directories(creds);
  fs::permissions(creds, fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(creds / "redis-operator.password") << "operator-pass-0123456789\n";
  fs::permissions(creds / "redis-operator.password", fs::perms::owner_read | fs::perms::owner_write,
                  fs::perm_options::replace);
  const fs::path batch_file = dir.path() / "b.jsonl";
  std::ofstream(batch_file) << batch(1);
  // Two loopback ports nothing listens on (taken and released: refused at once).
  const int s1 = supervisor::free_loopback_port(), s2 = supervisor::free_loopback_port();
  json cfg = json::parse(R"({"name": "snt", "hosts": [{"name": "local"}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})");
  cfg["state_dir"] = (dir.path() / "state").string();
  cfg["redis"] = {
      {"embedded", false},
      {"credentials_dir", creds.string()},
      {"sentinel",
       {{"addresses", {fmt::format("127.0.0.1:{}", s1), fmt::format("127.0.0.1:{}", s2)}},
        {"master", "h3"}}}};
  const fs::path config = dir.path() / "cluster.json";
  std::ofstream(config) << cfg.dump(2);
  const std::string cli = h3pipe_cli() + " --config " + config.string();
  for (const std::string& sub : std::vector<std::string>{
           "status", "status nope", "cancel nope", "resume nope", "wait nope --timeout 1",
           "run " + batch_file.string() + " --background"}) {
    auto [rc, out] = ts::sh(cli + " " + sub + " 2>&1");
    EXPECT_EQ(rc, 5) << sub << ": " << out;
    EXPECT_NE(out.find("no Sentinel named the primary h3"), std::string::npos)
        << sub << ": " << out;
    EXPECT_NE(out.find(fmt::format("127.0.0.1:{}", s2)), std::string::npos) << sub << ": " << out;
  }
}

// #34 P3: an explicit --config wins over the running stack's stack.json credentials.
TEST(CliExitCodes, ExplicitConfigCredentialsWinOverTheStacks) {
  ts::TempDir dir;
  Stack st(dir.path());
  ASSERT_EQ(ts::sh(st.cli() + " status >/dev/null 2>&1").first, 0);
  const fs::path creds = dir.path() / "other-creds";
  fs::create_directories(creds);
  std::ofstream(creds / "redis-operator.password") << "a-password-this-redis-never-had\n";
  json cfg;
  std::ifstream(dir.path() / "cluster.json") >> cfg;
  cfg["redis"] = {{"host", st.stack()["redis"]["host"]},  // its Unix socket (#35 D1)
                  {"port", st.stack()["redis"]["port"]},
                  {"embedded", false},
                  {"credentials_dir", creds.string()}};
  const fs::path other = st.write("other.json", cfg.dump(2));
  auto [rc, out] = ts::sh(h3pipe_cli() + " --config " + other.string() + " status 2>&1");
  EXPECT_EQ(rc, 5) << out;
  EXPECT_NE(out.find((creds / "redis-operator.password").string()), std::string::npos) << out;
}

// #34 P13: a state dir started with --config is not restarted with the embedded default: `start`
// without --config refuses, naming the config file it was started with.
TEST(StartRecord, RestartWithoutConfigRefusesAndNamesTheConfig) {
  ts::TempDir dir;
  const fs::path config = dir.path() / "cluster.json";
  const std::string bare = h3pipe_cli() + " --state-dir " + (dir.path() / "state").string();
  {
    Stack st(dir.path());
    ASSERT_EQ(ts::sh(st.cli() + " stop >/dev/null 2>&1").first, 0);
    auto [rc, out] = ts::sh(bare + " start 2>&1");
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("--config " + config.string()), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(dir.path() / "state" / "stack.json")) << "nothing may start";
    // With its --config it starts again; a second start is "already running", exit 0.
    auto [src, sout] = ts::sh(st.cli() + " start 2>&1");
    EXPECT_EQ(src, 0) << sout;
    auto [arc, aout] = ts::sh(st.cli() + " start 2>&1");
    EXPECT_EQ(arc, 0) << aout;
    EXPECT_NE(aout.find("already running"), std::string::npos) << aout;
  }
}

// #34 P12, #35 D3: `status` shows each host and pool with its heartbeat age (Redis's clock); a
// decoder that stops beating (stopped, not dead: the supervisor does not restart it) is "dead: no
// heartbeat for N s" within a few seconds, and a run whose jobs wait for decode is "stalled: no
// live pool for decode", not "(running)".  It finishes once the decoder goes on.
TEST(StatusPools, AStoppedDecoderIsDeadAndItsStageStalled) {
  ts::TempDir dir;
  Stack st(dir.path());
  pid_t decoder = -1;
  const json stack = st.stack();
  for (const auto& p : stack["processes"])
    if (p["name"] == "decoder-dec") decoder = p["pid"].get<int>();
  ASSERT_GT(decoder, 0) << stack.dump();
  auto text = [&](const std::string& args) {
    return ts::sh(st.cli() + " " + args + " 2>&1").second;
  };
  ASSERT_TRUE(ts::wait_for(
      [&] {
        const std::string out = text("status");
        return out.find("hosts and pools") != std::string::npos &&
               out.find("dec ") != std::string::npos && out.find("dead") == std::string::npos;
      },
      10))
      << text("status");
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{decoder};
  ASSERT_EQ(::kill(decoder, SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  std::regex dead(R"(dec\s+decode\s+dead: no heartbeat for [0-9.]+ s)");
  ASSERT_TRUE(ts::wait_for([&] { return std::regex_search(text("status"), dead); }, 10))
      << text("status");
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, std::chrono::seconds(6));
  const fs::path b = st.write("b.jsonl", batch(2));
  ASSERT_EQ(ts::sh(st.cli() + " run " + b.string() + " --run-id stall --background >/dev/null 2>&1")
                .first,
            0);
  ASSERT_TRUE(ts::wait_for(
      [&] {
        const json s = st.status("stall");
        return s.contains("stalled") && !s["stalled"].empty();
      },
      30))
      << st.status("stall").dump(2);
  const json s = st.status("stall");
  EXPECT_NE(s["stalled"][0].get<std::string>().find("stalled: no live pool for decode: dec (dead: "
                                                    "no heartbeat for"),
            std::string::npos)
      << s.dump(2);
  bool dec_dead = false;
  for (const auto& p : s["pools"])
    if (p["pool"] == "dec")
      dec_dead = !p["live"].get<bool>() && p["heartbeat_age_s"].get<double>() > 2;
  EXPECT_TRUE(dec_dead) << s["pools"].dump();
  const std::string out = text("status stall");
  EXPECT_NE(out.find("(stalled)"), std::string::npos) << out;
  EXPECT_EQ(out.find("(running)"), std::string::npos) << out;
  EXPECT_NE(out.find("stalled: no live pool for decode"), std::string::npos) << out;
  ::kill(decoder, SIGCONT);
  EXPECT_EQ(ts::sh(st.cli() + " wait stall --timeout 60 >/dev/null 2>&1").first, 0);
  EXPECT_TRUE(ts::wait_for([&] { return !std::regex_search(text("status"), dead); }, 10));
}

// #38 item 4: `h3pipe drain POOL` does what the console's drain does (api::set_pool_drained): the
// pool claims nothing more until `h3pipe undrain POOL`; a pool the config lacks is exit 2 naming
// its pools.  And the pool's duty cycle (its heartbeat's, as GET /v1/fleet shows it) moves from 0
// once it works.
TEST(Drain, DrainAndUndrainFromTheCliHoldAndReleaseAPool) {
  ts::TempDir dir;
  Stack st(dir.path(), 0.3);
  const auto npos = std::string::npos;
  auto s0 = [](const json& status) {
    for (const auto& p : status["pools"])
      if (p["pool"] == "s0") return p;
    return json();
  };
  auto [bad_rc, bad] = ts::sh(st.cli() + " drain nope 2>&1");
  EXPECT_EQ(bad_rc, 2) << bad;
  EXPECT_NE(bad.find("no pool named \"nope\" in the cluster config (its pools: enc, s0, dec)"),
            npos)
      << bad;
  EXPECT_EQ(ts::sh(st.cli() + " drain 2>&1").first, 2);  // no pool named
  auto [rc, out] = ts::sh(st.cli() + " drain s0 2>&1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("pool s0 drained"), npos) << out;
  auto r = st.redis("operator");
  auto held = queue::hget(*r, keys::drained_pools(), "s0");
  ASSERT_TRUE(held.ok() && held->has_value());
  EXPECT_NE((*held)->find("\"by\":\"cli:"), npos) << **held;
  // The workers read the flag at most 250 ms late: the run goes in once they have (else s0 may
  // claim a task and hand it back at its next read).
  std::this_thread::sleep_for(std::chrono::milliseconds(600));

  const fs::path b = st.write("held.jsonl", batch(2));
  ASSERT_EQ(
      ts::sh(st.cli() + " run " + b.string() + " --run-id held --background >/dev/null 2>&1").first,
      0);
  // Both jobs reach sample and stay there: the only sample pool is drained (it rechecks every
  // 250 ms; 2 s is eight rechecks).
  ASSERT_TRUE(ts::wait_for([&] { return st.status("held")["states"].value("sample", 0) == 2; }, 20))
      << st.status("held").dump(2);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  json s = st.status("held");
  EXPECT_EQ(s["done"], 0) << s.dump(2);
  EXPECT_EQ(s["states"].value("sample", 0), 2) << s.dump(2);
  EXPECT_TRUE(s0(s)["draining"].get<bool>()) << s["pools"].dump();
  EXPECT_EQ(s0(s)["duty_cycle"], 0.0) << s["pools"].dump();  // it never held a task

  auto [urc, uout] = ts::sh(st.cli() + " undrain s0 2>&1");
  ASSERT_EQ(urc, 0) << uout;
  EXPECT_NE(uout.find("pool s0 undrained: it claims again"), npos) << uout;
  EXPECT_EQ(ts::sh(st.cli() + " wait held --timeout 60 >/dev/null 2>&1").first, 0);
  s = st.status("held");
  EXPECT_FALSE(s0(s)["draining"].get<bool>()) << s["pools"].dump();
  // Two 0.3 s samples within the last minute: the duty cycle is no longer 0.
  EXPECT_GT(s0(s)["duty_cycle"].get<double>(), 0.0) << s["pools"].dump();
  EXPECT_GT(s0(s)["duty_window_s"].get<double>(), 0.0) << s["pools"].dump();
  EXPECT_TRUE(s0(s)["gpu"].is_null()) << s["pools"].dump();  // the sim runtime: no NVML
}

// #34 P14: while Redis is down every service loop fails every 200 ms; that is a few lines per
// service (one per kind of error per 10 s, and one when it works again), not five a second each.
TEST(RedisOutage, LogLinesAreRateLimited) {
  ts::TempDir dir;
  ts::RedisServer redis;  // a shared Redis the stack does not own: stopped and started here
  ASSERT_TRUE(redis.ok());
  json cfg = json::parse(R"({"name": "outage", "queue": {"block_ms": 50},
      "hosts": [{"name": "local"}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})");
  cfg["state_dir"] = (dir.path() / "state").string();
  cfg["redis"] = {{"host", "127.0.0.1"}, {"port", redis.port()}, {"embedded", false}};
  const fs::path config = dir.path() / "cluster.json";
  std::ofstream(config) << cfg.dump(2);
  const std::string cli = h3pipe_cli() + " --config " + config.string();
  auto [rc, out] = ts::sh(cli + " start 2>&1");
  ASSERT_EQ(rc, 0) << out;
  struct Stop {
    std::string cli;
    ~Stop() { ts::sh(cli + " stop >/dev/null 2>&1"); }
  } stop{cli};
  const std::vector<std::string> logs = {"encoder-enc.log", "sampler-s0.log", "decoder-dec.log"};
  auto lines = [&](const std::string& name) {
    std::ifstream in(dir.path() / "state" / "logs" / name);
    std::size_t n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  };
  std::map<std::string, std::size_t> before;
  for (const auto& l : logs) before[l] = lines(l);
  redis.stop(SIGTERM);
  // The outage itself: four seconds of every loop failing (20 failed steps each).
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_TRUE(redis.restart());
  // Back: a run goes through every stage (and every loop has said it works again).
  const fs::path b = dir.path() / "b.jsonl";
  std::ofstream(b) << batch(1);
  auto [rrc, rout] = ts::sh(cli + " run " + b.string() + " --run-id back --background 2>&1");
  ASSERT_EQ(rrc, 0) << rout;
  EXPECT_EQ(ts::sh(cli + " wait back --timeout 60 >/dev/null 2>&1").first, 0);
  for (const auto& l : logs) {
    std::ifstream in(dir.path() / "state" / "logs" / l);
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    EXPECT_LE(lines(l) - before[l], 10u) << l << ":\n" << text;
    EXPECT_NE(text.find("working again after"), std::string::npos) << l << ":\n" << text;
  }
}

// Item 8: the same --run-id with an edited batch is refused by the CLI (exit 2, FILE:LINE and
// the job id, nothing submitted), and a late XADD with another spec for an existing job is
// recorded beside the run: the finished run stays done, `wait` says 0, `resume` changes nothing.
TEST(RefusedSubmission, NeverChangesTheRunsVerdict) {
  ts::TempDir dir;
  Stack st(dir.path());
  const fs::path b = st.write("b.jsonl", batch(3));
  ASSERT_EQ(
      ts::sh(st.cli() + " run " + b.string() + " --run-id keep --background >/dev/null 2>&1").first,
      0);
  ASSERT_EQ(ts::sh(st.cli() + " wait keep --timeout 60 >/dev/null 2>&1").first, 0);

  // The CLI path: line 2 edited.
  std::string edited = batch(3);
  edited.replace(edited.find("clip 1"), 6, "edit 1");
  const fs::path e = st.write("edited.jsonl", edited);
  auto [rc, out] = ts::sh(st.cli() + " run " + e.string() + " --run-id keep --background 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(e.string() + ":2: jobId \"j01\" already exists in run keep"),
            std::string::npos)
      << out;
  // The same batch again is still fine (idempotent).
  EXPECT_EQ(
      ts::sh(st.cli() + " run " + b.string() + " --run-id keep --background >/dev/null 2>&1").first,
      0);

  // The raw path: XADD as the operator, another spec for j00, and a bad spec naming j02.
  auto r = st.redis("operator");
  ASSERT_TRUE(
      r->command({"XADD", keys::submit(), "*", "run", "keep", "spec",
                  R"({"jobId":"j00","prompt":"another","width":64,"height":64,"frames":9})"})
          .ok());
  ASSERT_TRUE(r->command({"XADD", keys::submit(), "*", "run", "keep", "spec",
                          R"({"jobId":"j02","prompt":""})"})
                  .ok());
  ASSERT_TRUE(
      ts::wait_for([&] { return st.status("keep").value("refused_submissions", 0) == 2; }, 20))
      << st.status("keep").dump();
  const json s = st.status("keep");
  EXPECT_EQ(s["total"], 3);
  EXPECT_EQ(s["done"], 3);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_TRUE(s["finished"].get<bool>());
  ASSERT_EQ(s["refused"].size(), 2u) << s.dump();
  EXPECT_EQ(s["refused"][0]["job_id"], "j00");
  EXPECT_NE(s["refused"][0]["reason"].get<std::string>().find("another spec"), std::string::npos);
  EXPECT_EQ(s["refused"][1]["job_id"], "j02");
  for (const auto& j : s["jobs"]) EXPECT_EQ(j["state"], "done") << j.dump();
  EXPECT_EQ(ts::sh(st.cli() + " wait keep --timeout 30 >/dev/null 2>&1").first, 0);
  auto [src, sout] = ts::sh(st.cli() + " status keep 2>&1");
  EXPECT_EQ(src, 0);
  EXPECT_NE(sout.find("2 submission(s) refused"), std::string::npos) << sout;
  EXPECT_EQ(ts::sh(st.cli() + " resume keep >/dev/null 2>&1").first, 0);
  EXPECT_EQ(ts::sh(st.cli() + " wait keep --timeout 30 >/dev/null 2>&1").first, 0);
}

// Item 10: the stack's file system fills up under a run.  Redis cannot write its AOF and refuses
// every write (MISCONF); that is said, once per change, and the run finishes once space is freed.
TEST(FullDisk, IsSaidAsADegradedStateAndRecoveryIsClean) {
  ts::SmallFs small(24u << 20);
  if (!small.mounted()) GTEST_SKIP() << "needs a tmpfs mount (CAP_SYS_ADMIN): " << small.why();
  // The state dir (Redis's AOF) on the small file system; artifacts elsewhere, so a stage in
  // progress finishes its files and then cannot record it: the run stalls, as in the issue.
  ts::TempDir elsewhere;
  Stack st(small.path(), 1.5, elsewhere.path());
  const fs::path b = st.write("b.jsonl", batch(2));
  ASSERT_EQ(
      ts::sh(st.cli() + " run " + b.string() + " --run-id full --background >/dev/null 2>&1").first,
      0);
  ASSERT_TRUE(
      ts::wait_for([&] { return st.status("full")["stages"].value("encode", 0) == 2; }, 30));
  const fs::path fill = small.path() / "fill";
  ts::sh("dd if=/dev/zero of=" + fill.string() + " bs=64k >/dev/null 2>&1");
  // The first write after the disk filled makes Redis's AOF write fail; from then it says MISCONF.
  auto admin = st.redis("admin");
  ASSERT_TRUE(ts::wait_for(
      [&] {
        (void)admin->command({"HSET", "h3pipe:probe", "x", "1"});
        auto p = admin->command({"PING"});
        return !p.ok() && p.error().message.rfind("MISCONF", 0) == 0;
      },
      20));
  const int sampler_metrics = st.service("sampler-s0")["metrics_port"];
  const int sampler_health = st.service("sampler-s0")["health_port"];
  const std::string series = R"(h3pipe_degraded_total{state="disk_full"})";
  ASSERT_TRUE(ts::wait_for([&] { return counter(sampler_metrics, series) >= 5; }, 30))
      << st.log("sampler-s0.log");
  // status: the reason, not "(running)".
  const json s = st.status("full");
  EXPECT_NE(
      s.value("degraded", "").find("disk full at " + (small.path() / "state" / "redis").string()),
      std::string::npos)
      << s.dump();
  auto [src, sout] = ts::sh(st.cli() + " status full 2>&1");
  EXPECT_NE(sout.find("degraded: disk full at"), std::string::npos) << sout;
  EXPECT_EQ(sout.find("(running)"), std::string::npos) << sout;
  // /readyz: 503 with the reason.
  auto [code, body] = readyz(sampler_health);
  EXPECT_EQ(code, 503);
  EXPECT_NE(body.find("degraded: disk full"), std::string::npos) << body;
  // wait: times out (3) and says why.
  auto [wrc, wout] = ts::sh(st.cli() + " wait full --timeout 2 2>&1 >/dev/null");
  EXPECT_EQ(wrc, 3) << wout;
  EXPECT_NE(wout.find("degraded: disk full"), std::string::npos) << wout;
  // One warning for the state, not one every 200 ms.
  const std::string log = st.log("sampler-s0.log");
  std::size_t misconf_lines = 0;
  for (std::istringstream in(log); std::getline(in, body);)
    if (body.find("MISCONF") != std::string::npos) ++misconf_lines;
  EXPECT_LE(misconf_lines, 2u) << log;
  // Free the space: the run finishes, the state is left (once), readiness is back.
  fs::remove(fill);
  EXPECT_EQ(ts::sh(st.cli() + " wait full --timeout 60 >/dev/null 2>&1").first, 0);
  EXPECT_TRUE(ts::wait_for([&] { return readyz(sampler_health).first == 200; }, 10));
  EXPECT_NE(st.log("sampler-s0.log").find("no longer degraded (disk_full)"), std::string::npos);
  EXPECT_EQ(st.status("full").value("degraded", "?"), "");
  EXPECT_EQ(st.status("full")["done"], 2);
}
