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

// #34 P7: the compose command is chosen (--compose-cmd) and rendered in every command line.
TEST(RemotePlan, ComposeCommandChosen) {
  auto words = parse_compose_command("docker-compose");
  ASSERT_TRUE(words.ok());
  EXPECT_EQ(*words, Words{"docker-compose"});
  EXPECT_EQ(parse_compose_command("  docker   compose ").value(), (Words{"docker", "compose"}));
  EXPECT_FALSE(parse_compose_command("").ok());
  EXPECT_FALSE(parse_compose_command("--project-directory x").ok());
  auto o = native();
  o.launcher = Launcher::kCompose;
  o.compose = *words;
  auto cmds = plan(seeds(), o);
  ASSERT_TRUE(cmds.ok()) << cmds.error().message;
  EXPECT_EQ(render(find(*cmds, "node292")->argv),
            "ssh -o BatchMode=yes -o ConnectTimeout=10 node292 docker-compose --project-directory "
            "/opt/h3pipe --env-file /opt/h3pipe/deploy/node292.env --profile sampler-host up -d");
  // What detect_compose found on a host wins over the default, host by host.
  o.compose = {"docker", "compose"};
  o.compose_by_host["node241"] = {"docker-compose"};
  cmds = plan(seeds(), o);
  ASSERT_TRUE(cmds.ok());
  EXPECT_EQ(find(*cmds, "node241")->argv[6], "docker-compose");
  EXPECT_EQ(find(*cmds, "node292")->argv[6], "docker");
  EXPECT_EQ(compose_probes(),
            (std::vector<Words>{{"docker", "compose", "version"}, {"docker-compose", "version"}}));
}

// #34 P7: deploy/<host>.env as config-adapt writes it, with the names compose.yaml reads.
TEST(ComposeEnv, RendersProfilesPoolsAndPorts) {
  auto c = seeds();
  auto e = compose_env(c, *c.find_host("node241"), "./cluster.json");
  ASSERT_TRUE(e.ok()) << e.error().message;
  for (const char* line :
       {"COMPOSE_PROFILES=control,decoder-host\n", "H3PIPE_HOST=node241\n",
        "H3PIPE_CONFIG_FILE=./cluster.json\n", "H3PIPE_DECODER_POOL=3080ti-decode\n",
        "H3PIPE_DECODER_GPUS=0\n", "H3PIPE_TRANSFER_PORT=7700\n",
        "H3PIPE_TRANSFER_DATA_PORT=7701\n", "H3PIPE_REDIS_PUBLISH=6379\n"})
    EXPECT_NE(e->find(line), std::string::npos) << line << "\n" << *e;
  e = compose_env(c, *c.find_host("node292"), "./cluster.json");
  ASSERT_TRUE(e.ok());
  for (const char* line : {"COMPOSE_PROFILES=sampler-host\n", "H3PIPE_SAMPLER0_POOL=t10x4-sample\n",
                           "H3PIPE_SAMPLER0_GPUS=0,1,2,3\n", "H3PIPE_ENCODER_POOL=t10x4-encode\n"})
    EXPECT_NE(e->find(line), std::string::npos) << line << "\n" << *e;
  EXPECT_EQ(e->find("H3PIPE_REDIS_PUBLISH"), std::string::npos) << *e;
}

// #34 P7: config-adapt writes deploy/<host>.env for every host, and start --all --launcher
// compose (here --dry-run) names exactly those files.
TEST(ComposeEnv, ConfigAdaptWritesTheFilesStartAllReads) {
  const fs::path dir =
      fs::temp_directory_path() / ("h3pipe_adapt_env_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cli = std::string(H3PIPE_BIN_DIR) + "/h3pipe";
  const std::string map = std::string(H3PIPE_SOURCE_DIR) + "/configs/hostmaps/seeds_two_host.json";
  const fs::path cfg = dir / "cluster.json";
  auto run = [](const std::string& cmd) {
    std::string out;
    FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    return std::make_pair(::pclose(p), out);
  };
  auto [rc, out] = run(cli + " config-adapt " + map + " -o " + cfg.string());
  ASSERT_EQ(rc, 0) << out;
  auto c = config::load_file(cfg);
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto [drc, dry] = run(cli + " --config " + cfg.string() +
                        " start --all --launcher compose --compose-cmd docker-compose --dry-run");
  ASSERT_EQ(drc, 0) << dry;
  for (const auto& h : c->hosts) {
    const fs::path env = dir / "deploy" / (h.name + ".env");
    ASSERT_TRUE(fs::exists(env)) << env << "\n" << out;
    std::ifstream in(env);
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    EXPECT_NE(text.find("H3PIPE_HOST=" + h.name + "\n"), std::string::npos) << text;
    EXPECT_NE(text.find("H3PIPE_CONFIG_FILE=./cluster.json\n"), std::string::npos) << text;
    EXPECT_NE(text.find("COMPOSE_PROFILES="), std::string::npos) << text;
    EXPECT_NE(dry.find("docker-compose --project-directory /opt/h3pipe --env-file "
                       "/opt/h3pipe/deploy/" +
                       h.name + ".env"),
              std::string::npos)
        << dry;
  }
  // auto (the default): the dry run says how the command is found.
  auto [arc, adry] =
      run(cli + " --config " + cfg.string() + " start --all --launcher compose --dry-run");
  EXPECT_EQ(arc, 0) << adry;
  EXPECT_NE(adry.find("`docker compose version`, else `docker-compose version`"), std::string::npos)
      << adry;
  fs::remove_all(dir);
}

// The hosts as real processes: an ssh stand-in that runs the remote words with sh (as sshd
// would), and fake `docker` / `docker-compose` programs first on PATH.
class FakeHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("h3pipe_fake_hosts_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
    write("ssh",
          "#!/bin/sh\n"
          "while [ $# -gt 0 ]; do case \"$1\" in -o|-F) shift 2;; -*) shift;; *) break;; esac; "
          "done\nshift\nexec sh -c \"$*\"\n");
    old_path_ = std::getenv("PATH");
    ::setenv("PATH", ((dir_ / "bin").string() + ":" + old_path_).c_str(), 1);
  }
  void TearDown() override {
    ::setenv("PATH", old_path_.c_str(), 1);
    fs::remove_all(dir_);
  }
  void write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / "bin" / name;
    std::ofstream(p) << text;
    fs::permissions(p, fs::perms::owner_all);
  }
  // Docker without the compose plugin, as on Debian 12.
  void docker_without_compose() {
    write("docker",
          "#!/bin/sh\necho \"docker: '$1' is not a docker command.\" >&2\n"
          "echo \"See 'docker --help'\" >&2\nexit 1\n");
  }
  // docker-compose that logs its calls and fails `up` as a missing env file does.
  void docker_compose(bool up_fails) {
    write("docker-compose",
          "#!/bin/sh\necho \"$*\" >> " + (dir_ / "compose.log").string() +
              "\ncase \"$*\" in version) echo 'docker-compose version 1.29.2'; exit 0;; esac\n" +
              (up_fails ? "echo \"ERROR: Couldn't find env file: $4\" >&2\n"
                          "echo \"Run 'docker-compose COMMAND --help' for more information.\" >&2\n"
                          "exit 1\n"
                        : "exit 0\n"));
  }
  std::string compose_log() const {
    std::ifstream in(dir_ / "compose.log");
    return {std::istreambuf_iterator<char>(in), {}};
  }
  Options opts() {
    auto o = native();
    o.launcher = Launcher::kCompose;
    o.detect_compose = true;
    o.preflight = false;
    o.ssh = (dir_ / "bin" / "ssh").string();
    o.timeout = std::chrono::seconds(20);
    return o;
  }
  fs::path dir_;
  std::string old_path_;
};

TEST_F(FakeHosts, FindsDockerComposeWhereThePluginIsMissing) {
  docker_without_compose();
  docker_compose(false);
  std::ostringstream out;
  EXPECT_EQ(start_all(seeds(), opts(), out), 0) << out.str();
  const std::string log = compose_log();
  EXPECT_NE(log.find("version\n"), std::string::npos) << log;
  EXPECT_NE(log.find("--project-directory /opt/h3pipe --env-file /opt/h3pipe/deploy/node241.env "
                     "--profile control --profile decoder-host up -d"),
            std::string::npos)
      << log;
  EXPECT_NE(out.str().find("compose on node292: docker-compose"), std::string::npos) << out.str();
}

TEST_F(FakeHosts, NoComposeAnywhereSaysWhatEachProbeAnswered) {
  docker_without_compose();
  // Shadows a docker-compose this machine may have, as a host without one answers.
  write("docker-compose", "#!/bin/sh\necho 'sh: 1: docker-compose: not found' >&2\nexit 127\n");
  std::ostringstream out;
  EXPECT_EQ(start_all(seeds(), opts(), out), 1) << out.str();
  EXPECT_NE(out.str().find("no compose command found"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("'compose' is not a docker command"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("docker-compose version` exit 127"), std::string::npos) << out.str();
}

TEST_F(FakeHosts, TheSummaryShowsTheRealErrorNotTheHelpHint) {
  docker_without_compose();
  docker_compose(true);
  std::ostringstream out;
  EXPECT_EQ(start_all(seeds(), opts(), out), 1) << out.str();
  // The table's line for the host is the error, not "Run 'docker-compose COMMAND --help'".
  std::istringstream in(out.str());
  bool seen = false;
  for (std::string l; std::getline(in, l);)
    if (l.rfind("node241 ", 0) == 0) {
      seen = true;
      EXPECT_NE(l.find("Couldn't find env file: /opt/h3pipe/deploy/node241.env"), std::string::npos)
          << l;
    }
  EXPECT_TRUE(seen) << out.str();
}

}  // namespace
}  // namespace h3pipe::remote
