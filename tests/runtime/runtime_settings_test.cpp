// Runtime settings are checked where a config is loaded (issue #14): an unknown key or a bad value
// at config load, what the host must provide (an exec program on PATH) in preflight, start and
// the service, with one error text naming the settings path, the runtime and the pool.
#include <gtest/gtest.h>

#include <fstream>

#include "common/runtime/settings_check.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using nlohmann::json;

namespace {

// One host: encoder, sampler "s" on `sample_runtime`, decoder; sim elsewhere.
json cluster_json(const json& sample_runtime, const std::string& state_dir = "") {
  json j = {{"name", "rt"},
            {"hosts", json::array({{{"name", "a"}}})},
            {"stages",
             {{"encode", {{"runtime", {{"name", "sim"}}}}},
              {"decode", {{"runtime", {{"name", "sim"}}}}}}},
            {"pools", json::array({{{"name", "e"},
                                    {"host", "a"},
                                    {"stage", "encode"},
                                    {"profiles", {{"default", {{"seconds", 1}}}}}},
                                   {{"name", "s"},
                                    {"host", "a"},
                                    {"stage", "sample"},
                                    {"runtime", sample_runtime},
                                    {"profiles", {{"default", {{"seconds", 1}}}}}},
                                   {{"name", "d"},
                                    {"host", "a"},
                                    {"stage", "decode"},
                                    {"profiles", {{"default", {{"seconds", 1}}}}}}})}};
  if (!state_dir.empty()) j["state_dir"] = state_dir;
  return j;
}

std::string write(const ts::TempDir& dir, const json& j) {
  auto p = dir.path() / "cluster.json";
  std::ofstream(p) << j.dump(2);
  return p.string();
}

std::string load_error(const ts::TempDir& dir, const json& j) {
  auto c = runtime::load_config(write(dir, j));
  return c.ok() ? "" : c.error().message;
}

const char* const kNoSuchProgram = "h3pipe-no-such-program-on-path";

}  // namespace

TEST(RuntimeSettings, AnUnknownKeyIsAConfigErrorNamingTheKnownKeys) {
  ts::TempDir dir;
  auto e = load_error(
      dir, cluster_json({{"name", "exec"}, {"settings", {{"command", {"true"}}, {"timeout", 5}}}}));
  EXPECT_NE(
      e.find("/pools/1/runtime/settings/timeout: unknown key; known: command, cwd, device, env, "
             "kill_grace_s, timeout_s (runtime exec; pool s)"),
      std::string::npos)
      << e;
  e = load_error(dir, cluster_json({{"name", "sim"}, {"settings", {{"seconds", 3}}}}));
  EXPECT_NE(
      e.find("/pools/1/runtime/settings/seconds: unknown key; the sim runtime takes no settings"),
      std::string::npos)
      << e;
  e = load_error(dir, cluster_json({{"name", "builtin"}, {"settings", {{"widht", 64}}}}));
  EXPECT_NE(e.find("/pools/1/runtime/settings/widht: unknown key; known: "), std::string::npos)
      << e;
  EXPECT_NE(e.find("weights_file"), std::string::npos) << e;
  e = load_error(
      dir,
      cluster_json(
          {{"name", "comfyui"},
           {"settings",
            {{"url", "http://127.0.0.1:1"}, {"workflow", "sample.api.json"}, {"polll_ms", 5}}}}));
  EXPECT_NE(e.find("/pools/1/runtime/settings/polll_ms: unknown key; known: "), std::string::npos)
      << e;
  EXPECT_NE(e.find("(runtime comfyui; pool s)"), std::string::npos) << e;
  // A bad value and a bad placeholder: config errors too, wherever the config is read.
  e = load_error(
      dir, cluster_json({{"name", "exec"},
                         {"settings", {{"command", {"true", "{outptu}"}}, {"timeout_s", -1}}}}));
  EXPECT_NE(e.find("/pools/1/runtime/settings/command/1: unknown placeholder {outptu}"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("/pools/1/runtime/settings/timeout_s: -1 is out of range"), std::string::npos)
      << e;
  // Valid settings load.
  EXPECT_EQ(load_error(dir, cluster_json({{"name", "exec"},
                                          {"settings", {{"command", {"true", "{output}"}}}}})),
            "");
}

TEST(RuntimeSettings, AProgramNotOnPathIsAHostErrorNotAConfigError) {
  ts::TempDir dir;
  auto c = runtime::load_config(
      write(dir, cluster_json({{"name", "exec"}, {"settings", {{"command", {kNoSuchProgram}}}}})));
  ASSERT_TRUE(c.ok()) << c.error().message;  // `plan` on another machine need not have it
  auto s = runtime::check_settings(*c, runtime::SettingsScope::kHost, "a");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(
      s.error().message,
      fmt::format("/pools/1/runtime/settings/command/0: \"{}\" is not an executable file on PATH "
                  "(runtime exec; pool s)",
                  kNoSuchProgram));
  EXPECT_TRUE(
      runtime::check_settings(*c, runtime::SettingsScope::kHost, "a", "e").ok());  // another pool
}

TEST(RuntimeSettings, SettingsSharedByPoolsAreReportedOnceNamingThemAll) {
  ts::TempDir dir;
  json j = cluster_json({{"name", "sim"}});
  j["pools"][1].erase("runtime");
  j["pools"].push_back({{"name", "s2"},
                        {"host", "a"},
                        {"stage", "sample"},
                        {"profiles", {{"default", {{"seconds", 1}}}}}});
  j["stages"]["sample"] = {
      {"runtime", {{"name", "exec"}, {"settings", {{"command", {kNoSuchProgram}}, {"bogus", 1}}}}}};
  auto e = load_error(dir, j);
  EXPECT_NE(
      e.find(
          "/stages/sample/runtime/settings/bogus: unknown key; known: command, cwd, device, env, "
          "kill_grace_s, timeout_s (runtime exec; pools s, s2)"),
      std::string::npos)
      << e;
  EXPECT_EQ(e.find("bogus", e.find("bogus") + 1), std::string::npos) << "reported once: " << e;
}

// The CLI: plan, preflight and start refuse one config with one text, and start starts nothing.
TEST(RuntimeSettings, PlanPreflightAndStartGiveTheSameError) {
  ts::TempDir dir;
  const std::string state = (dir.path() / "state").string();
  auto run = [&](const std::string& file, const std::string& cmd) {
    return ts::sh(
        fmt::format("{} --config {} --state-dir {} {} 2>&1", ts::bin("h3pipe"), file, state, cmd));
  };
  // An unknown key: every command refuses the config, exit 2.
  const std::string unknown = write(
      dir, cluster_json({{"name", "exec"}, {"settings", {{"command", {"true"}}, {"timeout", 5}}}},
                        state));
  const std::string line =
      "/pools/1/runtime/settings/timeout: unknown key; known: command, cwd, device, env, "
      "kill_grace_s, timeout_s (runtime exec; pool s)";
  for (const char* cmd : {"plan --jobs 2", "preflight", "start"}) {
    auto [rc, out] = run(unknown, cmd);
    EXPECT_EQ(rc, 2) << cmd << ":\n" << out;
    EXPECT_NE(out.find(line), std::string::npos) << cmd << ":\n" << out;
  }
  // A program not on this machine: plan is offline and plans; preflight fails its row; start
  // refuses before it starts anything.
  auto p = dir.path() / "nopath.json";
  std::ofstream(p) << cluster_json(
                          {{"name", "exec"}, {"settings", {{"command", {kNoSuchProgram}}}}}, state)
                          .dump(2);
  const std::string host_line = fmt::format(
      "/pools/1/runtime/settings/command/0: \"{}\" is not an executable file on PATH (runtime "
      "exec; pool s)",
      kNoSuchProgram);
  auto [prc, pout] = run(p.string(), "plan --jobs 2");
  EXPECT_EQ(prc, 0) << pout;
  auto [frc, fout] = run(p.string(), "preflight");
  EXPECT_EQ(frc, 1) << fout;
  EXPECT_NE(fout.find("runtime.settings"), std::string::npos) << fout;
  EXPECT_NE(fout.find(host_line), std::string::npos) << fout;
  auto [src, sout] = run(p.string(), "start");
  EXPECT_EQ(src, 2) << sout;
  EXPECT_NE(sout.find(host_line), std::string::npos) << sout;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(state) / "stack.json"))
      << "start started something";
  auto [qrc, qout] = run(p.string(), "stop");
  (void)qrc;
  (void)qout;
}
