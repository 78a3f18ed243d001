// Unit: regressions for what the spec/config fuzzers found (fuzz/spec, fuzz/config; the crashing
// inputs are kept in their seed corpora as regress_*).
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <fstream>

#include "common/config/config.h"
#include "common/logging/log.h"
#include "common/logging/protobuf_log.h"
#include "common/proto/h3pipe.pb.h"
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

// A peer sending frames with malformed strings over and over: every parse still fails, but
// protobuf's own "invalid UTF-8" log line is rate-limited instead of written once per frame.
TEST(ProtobufLog, MalformedStringLinesAreRateLimited) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
  auto previous = h3pipe::logging::set_sink(sink);
  h3pipe::logging::route_protobuf_logs(3, std::chrono::hours(1));
  const std::string bad_run_id("\x0a\x02\xc3\x28", 4);  // Offer.run_id = "\xc3(" (not UTF-8)
  for (int i = 0; i < 50; ++i) {
    h3pipe::pb::Offer o;
    EXPECT_FALSE(o.ParseFromString(bad_run_id));
  }
  auto lines = sink->last_formatted();
  ASSERT_EQ(lines.size(), 3u) << "three lines, then silence for the rest of the period";
  EXPECT_NE(lines[0].find("invalid UTF-8"), std::string::npos) << lines[0];
  // A new period: the next line first says how many were dropped.
  h3pipe::logging::route_protobuf_logs(3, std::chrono::milliseconds(0));
  h3pipe::pb::Offer o;
  EXPECT_FALSE(o.ParseFromString(bad_run_id));
  lines = sink->last_formatted();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[3].find("47 more log line(s) suppressed"), std::string::npos) << lines[3];
  h3pipe::logging::route_protobuf_logs();
  h3pipe::logging::set_sink(previous);
}
