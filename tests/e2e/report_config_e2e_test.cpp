// `h3pipe report RUN_ID` without --config plans with the config the stack running here was
// started with (issue #34 P10: it planned nothing and named every job "default"), here the
// embedded default (no config file at all: `start --state-dir DIR`), with the receipts read from
// the stack's Redis.  A config file's stack is checked by plan_vs_run_e2e_test and, across two
// hosts, one_answer_netns.  Label: e2e.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

using nlohmann::json;

TEST(ReportConfig, WithoutConfigTheEmbeddedDefaultStackPlansItsRun) {
  ts::TempDir dir;
  const std::string cli = ts::bin("h3pipe") + " --state-dir " + (dir.path() / "state").string();
  // A tiny job for the builtin runtime: class "default" of the embedded config.
  std::ofstream(dir.path() / "b.jsonl")
      << R"({"jobId":"tiny","prompt":"p","width":64,"height":64,"frames":9,"fps":12,"steps":1,"seed":1})"
      << "\n";
  auto [src, sout] = ts::sh(cli + " start 2>&1");
  ASSERT_EQ(src, 0) << sout;
  auto [rc, out] = ts::sh(cli + " run " + (dir.path() / "b.jsonl").string() + " 2>/dev/null");
  const std::string run = out.substr(0, out.find('\n'));
  auto [rrc, rep] = ts::sh(cli + " report " + run + " --json");
  ts::sh(cli + " stop >/dev/null 2>&1");
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(rrc, 0) << rep;
  const json r = json::parse(rep, nullptr, false);
  ASSERT_TRUE(r.is_object()) << rep;
  EXPECT_EQ(r["jobs"], 1);
  ASSERT_TRUE(r.contains("planned")) << rep;
  EXPECT_EQ(r["planned"]["config"], "the embedded default config");
  EXPECT_GT(r["planned"]["makespan_s"].get<double>(), 0);
  for (const auto& p : r["pools"]) EXPECT_TRUE(p["classes"].contains("default")) << p.dump();
}
