// Unit: regressions for what the spec/config fuzzers found (fuzz/spec, fuzz/config; the crashing
// inputs are kept in their seed corpora as regress_*).
#include <gtest/gtest.h>

#include <fstream>

#include "common/config/config.h"
#include "common/spec/spec.h"
#include "tests/support/test_support.h"

using namespace h3pipe;

namespace {
bool has(const std::vector<spec::FieldError>& errs, const std::string& field,
         const std::string& text) {
  for (const auto& e : errs)
    if (e.field == field && e.reason.find(text) != std::string::npos) return true;
  return false;
}
}  // namespace

// fuzz_spec: validate() divided by zero on a spec whose fps was 0 (a binary JobSpec, or any spec
// not made by parse_json, which fills defaults).  Now zeros are field errors.
TEST(SpecRegression, ZeroFieldsAreErrorsNotADivisionByZero) {
  pb::JobSpec s;
  s.set_job_id("a");
  s.set_prompt("p");
  auto errs = spec::validate(s, config::Limits{});
  EXPECT_TRUE(has(errs, "fps", "at least 1"));
  EXPECT_TRUE(has(errs, "frames", "at least 1"));
  EXPECT_TRUE(has(errs, "steps", "at least 1"));
  EXPECT_TRUE(has(errs, "width", "at least 16"));
  EXPECT_TRUE(has(errs, "height", "at least 16"));
  // JSON input still gets the documented defaults, so nothing changes for users.
  auto j = spec::parse_json(R"({"jobId":"a","prompt":"p","fps":0,"frames":0})");
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(spec::validate(*j, config::Limits{}).empty());
}

// fuzz_config: a number too large for a double ("1e40070000") made nlohmann throw out_of_range,
// which load_file did not catch (it caught parse_error only): the process terminated.
TEST(ConfigRegression, NumberOverflowIsAConfigErrorNotACrash) {
  ts::TempDir d;
  auto p = d.path() / "c.json";
  std::ofstream(p) << R"({"hosts":[{"name":"a","transfer_port":1e40070000}]})";
  auto c = config::load_file(p);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, "config.json");
  EXPECT_NE(c.error().message.find(p.string()), std::string::npos);
}

// fuzz_config invariant: required names that are present but "" were accepted (a host "", a pool
// on host "", a pool with stage "" silently became a sampler, runtime "", links between "").
TEST(ConfigRegression, EmptyRequiredNamesAreErrors) {
  auto j = nlohmann::json::parse(R"({"hosts":[{"name":""}],
    "pools":[{"name":"","host":"","stage":""},{"name":"d","host":"","stage":"decode","runtime":{"name":""}}],
    "classes":[{"name":""}],"links":[{"from":"","to":""}]})");
  auto c = config::parse(j, "/tmp");
  ASSERT_FALSE(c.ok());
  const auto& m = c.error().message;
  for (const char* path :
       {"/hosts/0/name: must not be empty", "/pools/0/name: must not be empty",
        "/pools/0/host: must not be empty", "/pools/0/stage: must not be empty",
        "/pools/1/runtime/name: must not be empty", "/classes/0/name: must not be empty",
        "/links/0/from: must not be empty", "/links/0/to: must not be empty"})
    EXPECT_NE(m.find(path), std::string::npos) << path << "\n" << m;
}
