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

}  // namespace h3pipe::test_support
