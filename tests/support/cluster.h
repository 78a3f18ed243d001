#pragma once
// The one way a test turns its config JSON into a config::Cluster: config::parse against
// `base_dir`; a config the test wrote that does not parse fails the test (with config::parse's
// message naming the field) and yields an empty Cluster.  The configs themselves stay in the tests
// (each says what it needs); sim_cluster (test_support.h) is the ready-made one-host cluster.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/config/config.h"

namespace h3pipe::test_support {

inline config::Cluster cluster_from(const nlohmann::json& j,
                                    const std::filesystem::path& base_dir = ".") {
  auto c = config::parse(j, base_dir);
  EXPECT_TRUE(c.ok()) << "the test's config does not parse: " << c.error().message;
  return c.ok() ? *c : config::Cluster{};
}

// One host "h1" with a sample, a decode and an encode pool ("samp", "dec", "enc") on the test's own
// redis-server at `redis_port`; its state, artifacts and outputs under `dir`.  JSON, so a test can
// change it before it parses it.
inline nlohmann::json one_host_on_redis(int redis_port, const std::filesystem::path& dir) {
  auto j = nlohmann::json::parse(R"({
    "hosts": [{"name": "h1"}],
    "pools": [{"name": "samp", "host": "h1", "stage": "sample"},
              {"name": "dec", "host": "h1", "stage": "decode"},
              {"name": "enc", "host": "h1", "stage": "encode"}]
  })");
  j["redis"] = {{"port", redis_port}, {"embedded", false}};
  j["state_dir"] = (dir / "state").string();
  j["artifact_root"] = (dir / "art").string();
  j["output_root"] = (dir / "out").string();
  return j;
}

}  // namespace h3pipe::test_support
