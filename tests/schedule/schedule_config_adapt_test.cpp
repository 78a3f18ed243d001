// config-adapt: the seeds' host map becomes the seeds' topology; bad maps name the field.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/config/config.h"
#include "common/schedule/config_adapt.h"
#include "common/schedule/plan.h"

namespace h3pipe::schedule {
namespace fs = std::filesystem;
namespace {

const std::string kRoot = H3PIPE_SOURCE_DIR;

nlohmann::json read(const std::string& rel) {
  std::ifstream in(kRoot + "/" + rel);
  return nlohmann::json::parse(in);
}

GpuTable table() {
  auto t = load_gpu_table();
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().to_string());
  return t.value();
}

fs::path temp_dir() {
  auto d = fs::temp_directory_path() /
           fmt::format("h3pipe_adapt_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string adapt_error(const nlohmann::json& m) {
  auto r = adapt_host_map(m, table());
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message;
}

TEST(GpuTable, EveryKnownGpuHasNumbersAndSources) {
  auto raw = read("configs/gpus.json");
  auto t = table();
  for (const char* m :
       {"T10", "RTX 3080 Ti", "RTX 3090", "RTX A6000", "RX 7900 XTX", "H100", "H200"}) {
    const GpuInfo* g = t.find(m);
    ASSERT_NE(g, nullptr) << m;
    EXPECT_GT(g->memory_gb, 0) << m;
    EXPECT_GT(g->bandwidth_gbs, 0) << m;
    for (auto s :
         {config::StageKind::kEncode, config::StageKind::kSample, config::StageKind::kDecode})
      EXPECT_GT(g->speed_for(s, "sd"), 0) << m;
  }
  for (const auto& g : raw["gpus"]) {
    ASSERT_TRUE(g.contains("source")) << g["model"];
    for (const char* k : {"memory_gb", "bandwidth_gbs"})
      EXPECT_TRUE(g["source"].contains(k)) << g["model"] << " " << k;
    bool speed = g["source"].contains("speed") ||
                 (g["source"].contains("speed.encode") && g["source"].contains("speed.sample") &&
                  g["source"].contains("speed.decode"));
    EXPECT_TRUE(speed) << g["model"];
  }
  for (const auto& [stage, ref] : t.reference) EXPECT_FALSE(ref.source.empty());
  EXPECT_EQ(t.find("geforce rtx 3080 ti"), t.find("RTX 3080 Ti"));  // aliases, any case
}

TEST(ConfigAdapt, SeedsHostMapRoundTripsToTheTwoHostTopology) {
  const auto dir = temp_dir();
  const auto out_file = dir / "local.json";
  ConfigAdaptArgs a;
  a.host_map = kRoot + "/configs/hostmaps/seeds_two_host.json";
  a.output = out_file.string();
  std::ostringstream out, err;
  ASSERT_EQ(run_config_adapt(a, out, err), 0) << err.str();
  auto c = config::load_file(out_file);
  ASSERT_TRUE(c.ok()) << c.error().message;

  // The host map's facts are all there...
  auto map = read("configs/hostmaps/seeds_two_host.json");
  ASSERT_EQ(c->hosts.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c->hosts[i].name, map["hosts"][i]["name"]);
    EXPECT_EQ(c->hosts[i].address, map["hosts"][i]["address"]);
    EXPECT_EQ(c->hosts[i].ssh, map["hosts"][i]["ssh"]);
  }
  ASSERT_EQ(c->links.size(), 1u);
  EXPECT_DOUBLE_EQ(c->links[0].gbps, 2.35);
  const auto* sampler = c->find_pool("node-292-sample");
  const auto* encoder = c->find_pool("node-292-encode");
  const auto* decoder = c->find_pool("node-241-decode");
  ASSERT_TRUE(sampler && encoder && decoder);
  EXPECT_EQ(sampler->gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(encoder->shares_gpus_with, "node-292-sample");
  EXPECT_EQ(decoder->gpu_model, "RTX 3080 Ti");

  // The shared Redis is h3pipe's to run on the decode host, over TLS, with credentials beside the
  // config, and the transfer keys where `keygen --dir keys --name HOST` writes them (#34 P1, P15).
  EXPECT_FALSE(c->redis.embedded);
  EXPECT_TRUE(c->redis.managed);
  EXPECT_FALSE(c->redis.allow_plaintext);
  EXPECT_EQ(c->redis.host, c->find_host("node-241")->address);
  EXPECT_EQ(c->redis.port, 6379);
  EXPECT_EQ(fs::path(c->redis.credentials_dir), dir / "credentials");
  for (const auto& h : c->hosts) {
    EXPECT_EQ(fs::path(h.transfer_public_key_file), dir / "keys" / (h.name + ".pub"));
    EXPECT_EQ(fs::path(h.transfer_secret_key_file), dir / "keys" / (h.name + ".key"));
    EXPECT_NE(out.str().find("h3pipe keygen --dir keys --name " + h.name), std::string::npos)
        << out.str();
  }
  EXPECT_NE(out.str().find("h3pipe start --host node-241"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("credentials init"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("credentials export --host NAME -o DIR"), std::string::npos);
  EXPECT_EQ(out.str().find("started separately"), std::string::npos) << out.str();

  // ...its profiles are the seeds' stage times, so it plans exactly like the hand-written
  // topology...
  auto adapted = plan_file(out_file.string(), "sd", 2, "", false, 1);
  auto seeds =
      plan_file(kRoot + "/configs/topologies/two_host_4xT10_3080ti.json", "sd", 2, "", false, 1);
  ASSERT_TRUE(adapted.ok() && seeds.ok());
  EXPECT_NEAR(adapted->sim.makespan_s, seeds->sim.makespan_s, 0.01);
  EXPECT_NEAR(adapted->steady_throughput_per_hour, seeds->steady_throughput_per_hour, 0.01);

  // ...and adapting again gives the same bytes (no --force: refuses to overwrite).
  std::ostringstream o2, e2;
  EXPECT_EQ(run_config_adapt(a, o2, e2), 2);
  EXPECT_NE(e2.str().find("--force"), std::string::npos);
  ConfigAdaptArgs again = a;
  again.output.clear();
  std::ostringstream printed, e3;
  ASSERT_EQ(run_config_adapt(again, printed, e3), 0);
  std::ifstream written(out_file);
  std::stringstream ws;
  ws << written.rdbuf();
  EXPECT_EQ(printed.str(), ws.str());
  fs::remove_all(dir);
}

TEST(ConfigAdapt, XtxHostMapPlansLikeTheSeedTopology) {
  auto r = adapt_host_map(read("configs/hostmaps/seeds_four_four_xtx.json"), table());
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto c = config::parse(nlohmann::json::parse(r->config.dump()), fs::temp_directory_path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(count_gpus(c.value()), 10u);
  for (const char* cls : {"sd", "hd"}) {
    auto a = plan_cluster(c.value(), cls, 6, {});
    auto b =
        plan_file(kRoot + "/configs/topologies/four_four_xtx_plus_one.json", cls, 6, "", false, 1);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(a->sim.makespan_s, b->sim.makespan_s, 0.1) << cls;
  }
}

TEST(ConfigAdapt, PerGpuA6000IsTheCommittedTopology) {
  auto r = adapt_host_map(read("configs/hostmaps/seeds_a6000x4.json"), table());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(nlohmann::json::parse(r->config.dump()),
            read("configs/topologies/a6000x4_per_gpu.json"));
  EXPECT_EQ(r->config["pools"].size(), 12u);  // encoder + sampler + decoder per GPU
}

TEST(ConfigAdapt, BadHostMapsNameTheField) {
  auto good = read("configs/hostmaps/seeds_two_host.json");
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](auto& m) { m["hosts"][0]["gpus"][0]["model"] = "GTX 480"; },
       "/hosts/0/gpus/0/model: unknown GPU model \"GTX 480\"; known: T10"},
      {[](auto& m) { m["hosts"][1].erase("address"); },
       "/hosts/1/address: required when the map has more than one host"},
      {[](auto& m) {
         m["hosts"][0]["roles"] = {"encode", "samplr"};
       },
       "/hosts/0/roles/1: \"samplr\": expected encode, sample or decode"},
      {[](auto& m) { m["hosts"][0]["gpus"][0].erase("count"); },
       "/hosts/0/gpus/0/count: required but missing"},
      {[](auto& m) { m["hosts"][0]["gpus"][0]["count"] = 0; },
       "/hosts/0/gpus/0/count: 0 is out of range"},
      {[](auto& m) { m["hosts"][0]["gpus_per_pool"] = 3; },
       "/hosts/0/gpus_per_pool: 3 does not divide the 4 x T10 GPUs"},
      {[](auto& m) { m.erase("links"); }, "/links: no link between node-292 and node-241"},
      {[](auto& m) { m["links"][0]["to"] = "node-999"; },
       "/links/0/to: \"node-999\" is not a host in /hosts"},
      {[](auto& m) { m["links"][0].erase("gbps"); }, "/links/0/gbps: required but missing"},
      {[](auto& m) { m["hosts"][1]["roles"] = {"sample"}; },
       "/hosts: no host has the role \"decode\""},
      {[](auto& m) { m["hosts"][0]["colour"] = "blue"; }, "/hosts/0/colour: unknown key"},
      {[](auto& m) { m["hosts"][1]["name"] = "node-292"; },
       "/hosts/1/name: duplicate host \"node-292\""},
      {[](auto& m) { m["hosts"][0].erase("gpus"); }, "/hosts/0/gpus: required"},
      {[](auto& m) {
         m["classes"] = {"sd", "uhd"};
       },
       "/classes/1: unknown job class \"uhd\"; known: sd, hd"},
      {[](auto& m) { m["dispatch"] = "fastest"; },
       "/dispatch: \"fastest\": expected completion_time or first_free"},
  };
  for (const auto& k : cases) {
    auto m = good;
    k.edit(m);
    const std::string msg = adapt_error(m);
    EXPECT_NE(msg.find(k.want), std::string::npos) << "want: " << k.want << "\ngot: " << msg;
  }
  // All problems at once.
  auto m = good;
  m["hosts"][0]["gpus"][0]["model"] = "GTX 480";
  m["hosts"][1].erase("address");
  const std::string msg = adapt_error(m);
  EXPECT_NE(msg.find("/hosts/0/gpus/0/model"), std::string::npos);
  EXPECT_NE(msg.find("/hosts/1/address"), std::string::npos);
}

TEST(ConfigAdapt, SingleHostNeedsNoAddressOrLinks) {
  nlohmann::json m = {{"hosts",
                       {{{"name", "box"},
                         {"gpus", {{{"model", "RTX 3090"}, {"count", 2}}}},
                         {"gpus_per_pool", 1},
                         {"roles", {"encode", "sample", "decode"}}}}}};
  auto r = adapt_host_map(m, table());
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto c = config::parse(nlohmann::json::parse(r->config.dump()), fs::temp_directory_path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->redis.embedded);
  EXPECT_EQ(c->pools.size(), 6u);
  EXPECT_EQ(c->hosts[0].address, "127.0.0.1");
  auto p = plan_cluster(c.value(), "sd", 4, {});
  ASSERT_TRUE(p.ok());
  EXPECT_GT(p->sim.makespan_s, 0);
}

TEST(ConfigAdapt, ApiAddressAndPortsPassThroughLoopbackOtherwise) {
  // docs/api.md, "Two hosts": the decode host's API must be reachable for the others to serve its
  // videos; config-adapt keeps what the map says and otherwise leaves loopback, with a note.
  auto m = read("configs/hostmaps/seeds_two_host.json");
  auto r = adapt_host_map(m, table());
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto c = config::parse(nlohmann::json::parse(r->config.dump()), fs::temp_directory_path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  for (const auto& h : c->hosts) {
    EXPECT_EQ(h.api_bind, "127.0.0.1") << h.name;
    EXPECT_EQ(h.api_port, 0);
  }
  std::string notes;
  for (const auto& n : r->notes) notes += n + "\n";
  EXPECT_NE(notes.find("h3pipe-api of node-241 listens on 127.0.0.1"), std::string::npos) << notes;
  EXPECT_NE(notes.find("/hosts/1/api_bind"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("h3pipe-api of node-292"), std::string::npos) << "not a decode host";

  m["hosts"][1]["api_bind"] = "0.0.0.0";
  m["hosts"][1]["api_port"] = 8088;
  m["hosts"][1]["api_metrics_port"] = 9406;
  r = adapt_host_map(m, table());
  ASSERT_TRUE(r.ok()) << r.error().message;
  c = config::parse(nlohmann::json::parse(r->config.dump()), fs::temp_directory_path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  const auto* h = c->find_host("node-241");
  EXPECT_EQ(h->api_bind, "0.0.0.0");
  EXPECT_EQ(h->api_port, 8088);
  EXPECT_EQ(h->api_metrics_port, 9406);
  for (const auto& n : r->notes) EXPECT_EQ(n.find("h3pipe-api of"), std::string::npos) << n;

  // Its own certificate (docs/api.md, "TLS"): copied, resolved beside the config; one alone is
  // refused by the loader (what `config-adapt` checks the output with) naming the other.
  m["hosts"][1]["api_tls_cert"] = "tls/api-cert.pem";
  m["hosts"][1]["api_tls_key"] = "tls/api-key.pem";
  r = adapt_host_map(m, table());
  ASSERT_TRUE(r.ok()) << r.error().message;
  c = config::parse(nlohmann::json::parse(r->config.dump()), "/etc/h3pipe");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->find_host("node-241")->api_tls_cert, "/etc/h3pipe/tls/api-cert.pem");
  EXPECT_EQ(c->find_host("node-241")->api_tls_key, "/etc/h3pipe/tls/api-key.pem");
  EXPECT_EQ(c->find_host("node-292")->api_tls_cert, "");
  m["hosts"][1].erase("api_tls_key");
  r = adapt_host_map(m, table());
  ASSERT_TRUE(r.ok()) << r.error().message;
  c = config::parse(nlohmann::json::parse(r->config.dump()), "/etc/h3pipe");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      c.error().message.find("/hosts/1/api_tls_key: api_tls_cert and api_tls_key go together"),
      std::string::npos)
      << c.error().message;
  m["hosts"][1].erase("api_tls_cert");

  m["hosts"][1]["api_port"] = 70000;
  r = adapt_host_map(m, table());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/hosts/1/api_port"), std::string::npos) << r.error().message;
}

TEST(ConfigAdapt, CommandErrors) {
  ConfigAdaptArgs a;
  std::ostringstream out, err;
  EXPECT_EQ(run_config_adapt(a, out, err), 2);
  a.host_map = "/nonexistent.json";
  EXPECT_EQ(run_config_adapt(a, out, err), 1);
  EXPECT_NE(err.str().find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace h3pipe::schedule
