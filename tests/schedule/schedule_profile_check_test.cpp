// `h3pipe run` warns when a batch meets sim pools that would run it in 0 s (issue #34 P11): the
// README's example batch against config-adapt's config ran at 0 s per stage, silently.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/schedule/config_adapt.h"
#include "common/schedule/profile_check.h"

namespace h3pipe::schedule {
namespace fs = std::filesystem;
namespace {

config::Cluster parsed(const nlohmann::json& j) {
  auto c = config::parse(j, fs::temp_directory_path());
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? *c : config::Cluster{};
}

nlohmann::json two_pools(const nlohmann::json& runtime, const nlohmann::json& profiles) {
  return {{"hosts", {{{"name", "local"}}}},
          {"stages",
           {{"encode", {{"runtime", runtime}}},
            {"sample", {{"runtime", runtime}}},
            {"decode", {{"runtime", runtime}}}}},
          {"pools",
           {{{"name", "enc"}, {"host", "local"}, {"stage", "encode"}, {"profiles", profiles}},
            {{"name", "s0"}, {"host", "local"}, {"stage", "sample"}, {"profiles", profiles}},
            {{"name", "dec"}, {"host", "local"}, {"stage", "decode"}, {"profiles", profiles}}}}};
}

}  // namespace

TEST(ZeroProfiles, TheReadmeBatchAgainstConfigAdaptsConfigIsNamed) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("h3pipe_zero_prof_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  ConfigAdaptArgs a;
  a.host_map = std::string(H3PIPE_SOURCE_DIR) + "/configs/hostmaps/seeds_two_host.json";
  a.output = (dir / "cluster.json").string();
  std::ostringstream out, err;
  ASSERT_EQ(run_config_adapt(a, out, err), 0) << err.str();
  auto c = config::load_file(a.output);
  ASSERT_TRUE(c.ok()) << c.error().message;
  // The README's fox: 256x256, 49 frames, 6 steps: no class of config-adapt's (sd, hd) matches.
  const std::string cls = c->class_of(256, 256, 49, 6);
  ASSERT_EQ(cls, "default");
  const std::string w = zero_profile_warning(*c, {cls}, a.output);
  EXPECT_NE(w.find("config " + a.output), std::string::npos) << w;
  EXPECT_NE(w.find("job class \"default\" in 0 s"), std::string::npos) << w;
  EXPECT_NE(w.find("node-292-sample"), std::string::npos) << w;
  EXPECT_NE(w.find("no profile for the class"), std::string::npos) << w;
  EXPECT_EQ(w.find('\n'), std::string::npos) << "one line";
  // Its own classes have profiles: no warning.
  EXPECT_EQ(zero_profile_warning(*c, {"sd", "hd"}, a.output), "");
  fs::remove_all(dir);
}

TEST(ZeroProfiles, ZeroSecondsOnASimPoolWarnsAndOtherRuntimesDoNot) {
  const nlohmann::json sim = {{"name", "sim"}, {"settings", nlohmann::json::object()}};
  const nlohmann::json builtin = {{"name", "builtin"}, {"settings", nlohmann::json::object()}};
  const nlohmann::json zero = {{"default", {{"kind", "fixed"}, {"seconds", 0}}}};
  const nlohmann::json some = {{"default", {{"kind", "fixed"}, {"seconds", 0.5}}}};
  const std::string w = zero_profile_warning(parsed(two_pools(sim, zero)), {"default"}, "c.json");
  EXPECT_NE(w.find("pools dec, enc, s0 (profile of 0 s)"), std::string::npos) << w;
  EXPECT_EQ(zero_profile_warning(parsed(two_pools(sim, some)), {"default"}, "c.json"), "");
  // A builtin pool computes for real whatever its profile says: the run is not 0 s.
  EXPECT_EQ(zero_profile_warning(parsed(two_pools(builtin, zero)), {"default"}, "c.json"), "");
  // time_scale multiplies the profile as the planner and the sim runtime do.
  auto scaled = two_pools(sim, some);
  scaled["time_scale"] = 0.01;
  EXPECT_EQ(zero_profile_warning(parsed(scaled), {"default"}, "c.json"), "");
}

}  // namespace h3pipe::schedule
