#pragma once
// The service runner shared by every binary (docs/design.md, convention 1): flags, config load and
// validation, spdlog, the Prometheus exposer, the readiness endpoint, signals with graceful drain,
// and a run file <state_dir>/run/<service>-<instance>.json that tools read ports from.
// A service's main() is one call: return h3pipe::runner::run(argc, argv, info, body).
#include <prometheus/registry.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/config/config.h"
#include "common/metrics/metrics.h"
#include "common/queue/redis.h"

namespace h3pipe::runner {

struct ServiceInfo {
  std::string name;                        // "encoder", "sampler", "decoder", "transfer"
  bool needs_pool = false;                 // --pool required (stage services)
  std::optional<config::StageKind> stage;  // the pool must run this stage
};

struct Context {
  config::Cluster cluster;
  std::string host;  // this host's name in the config
  const config::Pool* pool = nullptr;
  queue::RedisAddress redis;
  std::shared_ptr<prometheus::Registry> registry;
  metrics::HealthServer* health = nullptr;
  const std::atomic<bool>* stop = nullptr;
  std::string instance;  // pool name or host name
  std::string bind;
};

using Body = std::function<int(Context&)>;

int run(int argc, char** argv, const ServiceInfo& info, const Body& body);

// Redis address of a cluster (password read from its file; --redis override applied by run()).
queue::RedisAddress redis_address(const config::Cluster& c);

// Service entry for encoder/sampler/decoder: a StageWorker (+ ingest in the encoder).
int stage_service_main(int argc, char** argv, config::StageKind stage);

}  // namespace h3pipe::runner
