// Unit: config validation (every error path reports its JSON path, all errors together) and job
// spec validation (each rule names its field).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/config/config.h"
#include "common/spec/spec.h"
#include "tests/support/temp_dir.h"

using namespace h3pipe;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
json minimal() {
  return json::parse(R"({"hosts":[{"name":"a"}],"pools":[{"name":"e","host":"a","stage":"encode"},
    {"name":"s","host":"a","stage":"sample"},{"name":"d","host":"a","stage":"decode"}]})");
}
std::string errors_of(const json& j) {
  auto c = config::parse(j, "/tmp");
  return c.ok() ? "" : c.error().message;
}
}  // namespace

TEST(Config, EmbeddedDefaultLoads) {
  auto c = config::embedded_default();
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->hosts.size(), 1u);
  EXPECT_FALSE(c->pools_on("", config::StageKind::kSample).empty());
}

TEST(Config, MinimalIsValid) {
  EXPECT_EQ(errors_of(minimal()), "");
}

TEST(Config, UnknownKeysNameTheirPath) {
  auto j = minimal();
  j["colour"] = "red";
  j["pools"][1]["gpuz"] = 1;
  auto e = errors_of(j);
  EXPECT_NE(e.find("/colour: unknown key"), std::string::npos) << e;
  EXPECT_NE(e.find("/pools/1/gpuz: unknown key"), std::string::npos) << e;
}

TEST(Config, WrongTypesAndRangesAreAllReportedTogether) {
  auto j = minimal();
  j["pools"][0]["gpus"] = json::array({0, "one"});
  j["queue"] = {{"lease_ms", "soon"}, {"max_deliveries", 0}};
  j["pools"][0]["profiles"] = {{"sd", {{"kind", "gamma"}}}};
  j["hosts"][0]["transfer_port"] = 70000;
  auto e = errors_of(j);
  EXPECT_NE(e.find("/pools/0/gpus/1: expected an integer"), std::string::npos) << e;
  EXPECT_NE(e.find("/queue/lease_ms: expected an integer, got string"), std::string::npos) << e;
  EXPECT_NE(e.find("/queue/max_deliveries: 0 is out of range"), std::string::npos) << e;
  EXPECT_NE(e.find("/pools/0/profiles/sd/kind: unknown profile kind \"gamma\""), std::string::npos)
      << e;
  EXPECT_NE(e.find("/hosts/0/transfer_port: 70000 is out of range"), std::string::npos) << e;
}

TEST(Config, ReferencesAndRequiredFields) {
  auto j = minimal();
  j["pools"][0]["host"] = "nowhere";
  j["pools"].push_back({{"name", "s"}, {"host", "a"}, {"stage", "paint"}});
  j["links"] = json::array({{{"from", "a"}, {"to", "b"}}});
  j["stages"] = {{"sample", {{"runtime", {{"name", "magic"}}}}}};
  auto e = errors_of(j);
  EXPECT_NE(e.find("/pools/0/host: \"nowhere\" is not a host"), std::string::npos) << e;
  EXPECT_NE(e.find("/pools/3/name: duplicate pool \"s\""), std::string::npos) << e;
  EXPECT_NE(e.find("/pools/3/stage: \"paint\": expected encode, sample or decode"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("/links/0/to: \"b\" is not a host"), std::string::npos) << e;
  EXPECT_NE(e.find("/stages/sample/runtime/name: unknown runtime \"magic\""), std::string::npos)
      << e;
  json none = {{"hosts", json::array()}};
  auto e2 = errors_of(none);
  EXPECT_NE(e2.find("/hosts: at least one host is required"), std::string::npos) << e2;
  EXPECT_NE(e2.find("no pool runs stage sample"), std::string::npos) << e2;
}

// A cluster missing a stage is a stack where every job waits forever: refused at load, naming the
// stage and why (ingest lives in the encoder, so without one nothing is even accepted).
TEST(Config, EveryStageNeedsAPool) {
  for (const char* stage : {"encode", "sample", "decode"}) {
    auto j = minimal();
    json kept = json::array();
    for (const auto& p : j["pools"])
      if (p["stage"] != stage) kept.push_back(p);
    j["pools"] = kept;
    auto e = errors_of(j);
    EXPECT_NE(e.find(std::string("/pools: no pool runs stage ") + stage), std::string::npos) << e;
    EXPECT_NE(e.find("every job would wait forever"), std::string::npos) << e;
  }
  auto j = minimal();
  j["pools"] = json::array({j["pools"][1], j["pools"][2]});
  EXPECT_NE(errors_of(j).find("submissions are ingested by the encoder service"),
            std::string::npos);
  EXPECT_EQ(errors_of(minimal()), "");
}

TEST(Config, LeaseRenewalMustFitTwiceInTheLease) {
  auto j = minimal();
  j["queue"] = {{"lease_ms", 1000}, {"renew_ms", 600}};
  EXPECT_NE(errors_of(j).find("/queue/renew_ms: 600 must be at most half of lease_ms"),
            std::string::npos);
}

// A managed shared Redis (#34 item 1) names its port and credentials folder and is not the
// embedded one; every problem is reported at once, each with its field.
TEST(Config, ManagedRedisNeedsAPortCredentialsAndNotEmbedded) {
  auto j = minimal();
  j["redis"] = {{"managed", true}};
  const std::string e = errors_of(j);
  EXPECT_NE(e.find("/redis/managed: a managed shared Redis is not the embedded one"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("/redis/credentials_dir: required with /redis/managed"), std::string::npos) << e;
  EXPECT_NE(e.find("/redis/port: required with /redis/managed"), std::string::npos) << e;
  j["redis"] = {{"managed", true}, {"embedded", false},          {"host", "a"},
                {"port", 6379},    {"credentials_dir", "creds"}, {"allow_plaintext", true}};
  EXPECT_EQ(errors_of(j), "");
}

TEST(Config, RedactsSecretsInEffectiveConfig) {
  auto j = minimal();
  j["redis"] = {{"password_file", "/etc/h3pipe/redis.pass"}};
  auto c = config::parse(j, "/tmp");
  ASSERT_TRUE(c.ok());
  auto dump = config::to_json(*c).dump();
  EXPECT_NE(dump.find("<redacted>"), std::string::npos);
}

namespace {
std::vector<std::string> spec_errors(const std::string& line) {
  auto b = spec::parse_batch(line, config::Limits{});
  std::vector<std::string> out;
  for (const auto& e : b.errors) out.push_back(e.error.to_string());
  return out;
}
bool any_contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x.find(s) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST(Spec, ValidSpecPassesWithDefaults) {
  auto b = spec::parse_batch(R"({"jobId":"a","prompt":"p"})", config::Limits{});
  ASSERT_TRUE(b.errors.empty());
  EXPECT_EQ(b.specs[0].fps(), 24u);
  EXPECT_EQ(b.specs[0].steps(), 6u);
}

TEST(Spec, EachRuleNamesItsField) {
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"a","prompt":"p","colour":1})"), "colour"));
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"a"})"), "prompt: required"));
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"a","prompt":"p","width":-16})"),
                           "not a valid job spec"));
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"a","prompt":"p","width":100})"),
                           "width: 100 is not a multiple of 16"));
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"a","prompt":"p","height":4096})"),
                           "height: 4096 exceeds the limit"));
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"a","prompt":"p","steps":5000})"),
                           "steps: 5000 exceeds"));
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"../etc","prompt":"p"})"),
                           "jobId: must not start with '.'"));
  EXPECT_TRUE(any_contains(spec_errors(R"({"jobId":"a/b","prompt":"p"})"), "jobId: character '/'"));
  EXPECT_TRUE(
      any_contains(spec_errors(R"({"jobId":"/abs","prompt":"p"})"), "jobId: character '/'"));
  EXPECT_TRUE(
      any_contains(spec_errors(R"({"jobId":"a\u0000b","prompt":"p"})"), "jobId: character NUL"));
  EXPECT_TRUE(
      any_contains(spec_errors(R"({"jobId":")" + std::string(200, 'x') + R"(","prompt":"p"})"),
                   "jobId: 200 characters"));
  EXPECT_TRUE(
      any_contains(spec_errors(R"({"jobId":"a","prompt":"p","referenceImage":"/no/such.png"})"),
                   "referenceImage: /no/such.png: reference images are disabled here "
                   "(limits.input_roots is [])"));
}

TEST(Spec, BatchReportsLineNumbersAndDuplicates) {
  auto b = spec::parse_batch(
      "{\"jobId\":\"a\",\"prompt\":\"p\"}\n\n# comment\n{\"jobId\":\"a\",\"prompt\":\"q\"}\nnot "
      "json\n",
      config::Limits{});
  ASSERT_EQ(b.errors.size(), 2u);
  EXPECT_EQ(b.errors[0].line, 4u);
  EXPECT_NE(b.errors[0].error.to_string().find("appears twice"), std::string::npos);
  EXPECT_EQ(b.errors[1].line, 5u);
}

// A key twice in one object is refused in configs and specs (nlohmann and protobuf keep one
// silently), and JSON errors are one line without raw bytes (issue #14).
TEST(StrictJson, DuplicateKeysAreRefusedAndErrorsAreOneLine) {
  const test_support::TempDir tmp("h3pipe-strict");
  const fs::path& dir = tmp.path();
  const fs::path cfg = dir / "cluster.json";
  std::ofstream(cfg)
      << R"({"name": "a", "hosts": [{"name": "h"}], "redis": {"port": 1, "port": 2}, "hosts": []})";
  auto c = config::load_file(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/redis/port: duplicate key"), std::string::npos)
      << c.error().message;

  auto s = spec::parse_json(R"({"jobId": "a", "prompt": "p", "prompt": "q"})");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("/prompt: duplicate key"), std::string::npos)
      << s.error().message;

  for (std::string bad : {std::string("{\"prompt\": \"\xff\xfe\"}"), std::string("\xef\xbb\xbf{}"),
                          std::string(R"({"width": 1e400})")}) {
    auto r = spec::parse_json(bad);
    ASSERT_FALSE(r.ok()) << bad;
    const std::string& m = r.error().message;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (unsigned char ch : m) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << m;
  }
  fs::remove_all(dir);
}

TEST(Config, TwoPoolsOfAHostOnOneMetricsPortIsAConfigError) {
  auto j = json::parse(R"({"hosts": [{"name": "h"}], "pools": [
    {"name": "e", "host": "h", "stage": "encode", "metrics_port": 9101},
    {"name": "s", "host": "h", "stage": "sample", "metrics_port": 9101},
    {"name": "d", "host": "h", "stage": "decode", "metrics_port": 9102}]})");
  auto c = config::parse(j, fs::temp_directory_path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find(
                "/pools/1/metrics_port: 9101 is already the metrics port of pool \"e\""),
            std::string::npos)
      << c.error().message;
}

// The transfer service's fixed port (issue #34 P5) shares the host's ports with its pools.
TEST(Config, TransferMetricsPortIsUniqueOnItsHost) {
  auto j = json::parse(R"({"hosts": [{"name": "h", "transfer_metrics_port": 9102},
                                     {"name": "g", "transfer_metrics_port": 9101}], "pools": [
    {"name": "e", "host": "h", "stage": "encode", "metrics_port": 9101},
    {"name": "s", "host": "h", "stage": "sample"},
    {"name": "d", "host": "h", "stage": "decode", "metrics_port": 9102}]})");
  auto c = config::parse(j, fs::temp_directory_path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message.find("/hosts/1/"), std::string::npos) << "another host's port";
  EXPECT_NE(c.error().message.find("/hosts/0/transfer_metrics_port: 9102 is already the metrics "
                                   "port of pool \"d\" on host \"h\""),
            std::string::npos)
      << c.error().message;
  j["hosts"][0]["transfer_metrics_port"] = 9103;
  auto ok = config::parse(j, fs::temp_directory_path());
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->hosts[0].transfer_metrics_port, 9103);
}

TEST(Spec, NegativePromptAndParamsAreBoundedLikeThePrompt) {
  config::Limits l;
  l.max_prompt_bytes = 100;
  l.max_params = 2;
  pb::JobSpec s = *spec::parse_json(R"({"jobId": "a", "prompt": "p"})");
  s.set_negative_prompt(std::string(101, 'n'));
  (*s.mutable_params())["a"] = std::string(101, 'v');
  (*s.mutable_params())["b"] = "1";
  (*s.mutable_params())["c"] = "2";
  std::string all;
  for (const auto& e : spec::validate(s, l)) all += e.field + ": " + e.reason + "\n";
  EXPECT_NE(all.find("negativePrompt: 101 bytes, at most 100"), std::string::npos) << all;
  EXPECT_NE(all.find("params: 3 entries, at most 2"), std::string::npos) << all;
  EXPECT_NE(all.find("params.a: 101 bytes"), std::string::npos) << all;
}
