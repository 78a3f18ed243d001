#pragma once
// Local mode (`h3pipe start`): a private redis-server on a free loopback port (own data dir, AOF
// everysec), then every service this host's config names as child processes, restarted when they
// die (exponential backoff while they crash-loop).  Everything lives under the state dir:
//   <state>/stack.json     where everything is (read by the CLI)
//   <state>/logs/*.log     one log per process
//   <state>/redis/         redis data (appendonly)
//   <state>/run/*.json     each service's ports (written by the service)
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::supervisor {

struct StartOptions {
  std::filesystem::path config_file;  // empty = embedded default
  std::string host;                   // empty = the only host
  std::filesystem::path bin_dir;      // where h3pipe-* binaries are
  int ready_timeout_ms = 30000;
};

// Daemonizes a supervisor, waits until Redis answers and every service is ready; returns the
// stack description (stack.json).
Result<nlohmann::json> start(const config::Cluster& c, const StartOptions& o);
// Stops the supervisor (SIGTERM; it stops services, then Redis) and waits for it.
Status stop(const config::Cluster& c, int timeout_ms = 20000);
// The running stack of this state dir, if any (stack.json and a live supervisor).
std::optional<nlohmann::json> running(const config::Cluster& c);
int free_loopback_port();

}  // namespace h3pipe::supervisor
