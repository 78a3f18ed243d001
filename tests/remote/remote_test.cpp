// start --all / stop --all: the command lines planned for the seeds' two hosts
// (deploy/cluster.seeds.json), quoting, refusals, and real execution through posix_spawn with a
// stand-in ssh (tests/remote/fake_ssh.sh) that records what it was asked to run.
#include "common/remote/remote.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace h3pipe::remote {
namespace {

namespace fs = std::filesystem;
using Words = std::vector<std::string>;

config::Cluster seeds() {
  auto c = config::load_file(fs::path(H3PIPE_SOURCE_DIR) / "deploy" / "cluster.seeds.json");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? *c : config::Cluster{};
}

Options native() {
  Options o;
  o.config_path = "/etc/h3pipe/cluster.json";
  o.is_local = [](const config::Host&) { return false; };
  return o;
}

const HostCommand* find(const std::vector<HostCommand>& v, const std::string& host) {
  for (const auto& c : v)
    if (c.host == host) return &c;
  return nullptr;
}

TEST(RemotePlan, NativeStartOverSsh) {
  auto cmds = plan(seeds(), native());
  ASSERT_TRUE(cmds.ok()) << cmds.error().message;
  ASSERT_EQ(cmds->size(), 2u);
  const HostCommand* a = find(*cmds, "node292");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->via, "node292");
  EXPECT_EQ(a->argv,
            (Words{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "node292", "h3pipe",
                   "start", "--host", "node292", "--config", "/etc/h3pipe/cluster.json"}));
  // node241 carries Redis (the control role): it starts in the first wave.
  EXPECT_EQ(cmds->front().host, "node241");
  EXPECT_LT(find(*cmds, "node241")->wave, a->wave);
  EXPECT_EQ(
      render(a->argv),
      "ssh -o BatchMode=yes -o ConnectTimeout=10 node292 h3pipe start --host node292 --config "
      "/etc/h3pipe/cluster.json");
}

TEST(RemotePlan, NativeStopStopsControlLast) {
  auto o = native();
  o.action = Action::kStop;
  auto cmds = plan(seeds(), o);
  ASSERT_TRUE(cmds.ok());
  EXPECT_EQ(cmds->back().host, "node241");
  EXPECT_EQ(std::find(cmds->front().argv.begin(), cmds->front().argv.end(), "stop") !=
                cmds->front().argv.end(),
            true);
}

TEST(RemotePlan, ComposeProfilesPerRole) {
  auto o = native();
  o.launcher = Launcher::kCompose;
  o.compose_dir = "/opt/h3pipe";
  auto cmds = plan(seeds(), o);
  ASSERT_TRUE(cmds.ok()) << cmds.error().message;
  EXPECT_EQ(find(*cmds, "node292")->argv,
            (Words{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "node292", "docker",
                   "compose", "--project-directory", "/opt/h3pipe", "--env-file",
                   "/opt/h3pipe/deploy/node292.env", "--profile", "sampler-host", "up", "-d"}));
  EXPECT_EQ(find(*cmds, "node241")->argv,
            (Words{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "node241", "docker",
                   "compose", "--project-directory", "/opt/h3pipe", "--env-file",
                   "/opt/h3pipe/deploy/node241.env", "--profile", "control", "--profile",
                   "decoder-host", "up", "-d"}));
  auto pf = plan_preflight(seeds(), o);
  ASSERT_TRUE(pf.ok());
  auto& w = find(*pf, "node241")->argv;
  Words tail(w.end() - 8, w.end());
  EXPECT_EQ(tail, (Words{"run", "--rm", "cli", "preflight", "--host", "node241", "--config",
                         "/etc/h3pipe/cluster.json"}));
}

TEST(RemotePlan, SecondSamplerPoolUsesSecondSlot) {
  auto c = seeds();
  auto extra = c.pools[1];
  extra.name = "t10x4-sample-b";
  extra.gpus = {4, 5, 6, 7};
  c.pools.push_back(extra);
  auto p = compose_profiles(c, *c.find_host("node292"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (Words{"sampler-host", "sampler-host-2"}));
  extra.name = "third";
  c.pools.push_back(extra);
  EXPECT_FALSE(compose_profiles(c, *c.find_host("node292")).ok());
}

TEST(RemotePlan, QuotesWordsForTheRemoteShell) {
  auto o = native();
  o.config_path = "/srv/h3 pipe/it's.json";
  auto cmds = plan(seeds(), o);
  ASSERT_TRUE(cmds.ok());
  EXPECT_EQ(cmds->front().argv.back(), "'/srv/h3 pipe/it'\\''s.json'");
  EXPECT_EQ(shell_quote("plain-word_1.json"), "plain-word_1.json");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
}

TEST(RemotePlan, Refusals) {
  auto c = seeds();
  c.hosts[0].ssh = "-oProxyCommand=touch /tmp/x";
  auto r = plan(c, native());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("node292"), std::string::npos);

  c = seeds();
  c.hosts[1].ssh.clear();  // not this machine, no alias
  r = plan(c, native());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("node241"), std::string::npos) << r.error().message;

  auto o = native();
  o.hosts = {"nosuch"};
  EXPECT_FALSE(plan(seeds(), o).ok());
  o = native();
  o.config_path.clear();
  EXPECT_FALSE(plan(seeds(), o).ok());
}

TEST(RemotePlan, LocalHostRunsWithoutSsh) {
  auto c = seeds();
  c.hosts[1].ssh.clear();
  auto o = native();
  o.is_local = [](const config::Host& h) { return h.name == "node241"; };
  auto r = plan(c, o);
  ASSERT_TRUE(r.ok());
  const HostCommand* l = find(*r, "node241");
  EXPECT_EQ(l->via, "local");
  EXPECT_EQ(l->argv, (Words{"h3pipe", "start", "--host", "node241", "--config",
                            "/etc/h3pipe/cluster.json"}));
}

TEST(RunAll, ExitCodesOutputAndTimeouts) {
  std::vector<HostCommand> cmds = {
      {"ok", "local", 0, {"echo", "hello"}},
      {"fails", "local", 0, {"sh", "-c", "echo oops >&2; exit 3"}},
      {"missing", "local", 0, {"/nonexistent/h3pipe"}},
      {"slow", "local", 1, {"sleep", "30"}},
  };
  auto t0 = std::chrono::steady_clock::now();
  auto rs = run_all(cmds, std::chrono::seconds(1), 4);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs[0].exit_code, 0);
  EXPECT_EQ(rs[0].output, "hello\n");
  EXPECT_EQ(rs[1].exit_code, 3);
  EXPECT_EQ(rs[1].output, "oops\n");
  EXPECT_EQ(rs[2].exit_code, 127);
  EXPECT_TRUE(rs[3].timed_out);
  EXPECT_EQ(rs[3].exit_code, 128 + SIGTERM);
  EXPECT_LT(took, 10.0);
}

class FakeSsh : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = fs::temp_directory_path() / ("h3pipe_fake_ssh_" + std::to_string(::getpid()) + ".log");
    fs::remove(log_);
    ::setenv("FAKE_SSH_LOG", log_.c_str(), 1);
    ::unsetenv("FAKE_SSH_FAIL");
  }
  void TearDown() override { fs::remove(log_); }
  std::vector<Words> calls() {
    std::vector<Words> out;
    std::ifstream in(log_);
    for (std::string line; std::getline(in, line);) {
      Words w;
      std::stringstream ss(line);
      for (std::string x; std::getline(ss, x, '\t');) w.push_back(x);
      out.push_back(w);
    }
    return out;
  }
  Options opts() {
    auto o = native();
    o.ssh = std::string(H3PIPE_SOURCE_DIR) + "/tests/remote/fake_ssh.sh";
    o.timeout = std::chrono::seconds(20);
    return o;
  }
  fs::path log_;
};

TEST_F(FakeSsh, StartAllThenPreflightOnEachHost) {
  std::ostringstream out;
  int rc = start_all(seeds(), opts(), out);
  EXPECT_EQ(rc, 0) << out.str();
  auto c = calls();
  ASSERT_EQ(c.size(), 4u) << out.str();
  for (const auto& call : c) ASSERT_GE(call.size(), 7u) << "a garbled log line";
  // Wave 0 (control) finished before wave 1 started; preflight after both.
  EXPECT_EQ(c[0][4], "node241");
  EXPECT_EQ(c[0][6], "start");
  EXPECT_EQ(c[1][4], "node292");
  for (int i : {2, 3}) EXPECT_EQ(c[i][6], "preflight") << i;
  EXPECT_NE(out.str().find("every host started and passed preflight"), std::string::npos)
      << out.str();
}

TEST_F(FakeSsh, AFailedHostStopsBeforePreflight) {
  ::setenv("FAKE_SSH_FAIL", "node292", 1);
  std::ostringstream out;
  int rc = start_all(seeds(), opts(), out);
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(calls().size(), 2u);
  EXPECT_NE(out.str().find("Connection refused"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("preflight skipped"), std::string::npos);
}

TEST_F(FakeSsh, StopAll) {
  std::ostringstream out;
  EXPECT_EQ(stop_all(seeds(), opts(), out), 0) << out.str();
  auto c = calls();
  ASSERT_EQ(c.size(), 2u);
  for (const auto& call : c) ASSERT_GE(call.size(), 7u) << "a garbled log line";
  EXPECT_EQ(c[1][4], "node241");  // control last
  EXPECT_EQ(c[0][6], "stop");
}

}  // namespace
}  // namespace h3pipe::remote
