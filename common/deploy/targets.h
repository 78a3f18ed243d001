#pragma once
// The Prometheus file_sd targets of a cluster (`h3pipe prometheus targets`, and written by
// `h3pipe start` into <state_dir>/prometheus/targets.json; docs/observability.md): one target
// group per service, labelled host, service and pool (pool: not for transfer), read by
// configs/prometheus/prometheus.yml's file_sd_configs.
//
// A service's port is the config's (pools[].metrics_port, hosts[].transfer_metrics_port); a
// service of the host whose stack runs here and has none takes the port from its run file
// (<state_dir>/run/<service>-<instance>.json, which the supervisor keeps across restarts).  Any
// other service without a port cannot be scraped: it is named in `missing` with the field to set.
// h3pipe-api (service "api", hosts[].api_metrics_port or its run file run/api-<host>.json) is
// listed when its port is known and is never `missing`: not every host runs one.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::deploy {

struct TargetsOptions {
  std::vector<std::string> hosts;  // empty: every host of the config
  std::string local_host;          // the host whose running stack's run files give missing ports
};

struct Targets {
  nlohmann::json groups = nlohmann::json::array();  // the file_sd document
  std::vector<std::string> missing;                 // "host/service-instance: set FIELD"
};

// Errors: config.invalid naming an unknown host of `hosts`.
Result<Targets> prometheus_targets(const config::Cluster& c, const TargetsOptions& o);

// The document written to `file` through a temporary and a rename, mode 0644 (Prometheus may run
// as another user; the file holds addresses, no secret).  Errors: io.*.
Status write_targets(const std::filesystem::path& file, const nlohmann::json& groups);

// <state_dir>/prometheus/targets.json.
std::filesystem::path state_targets_file(const config::Cluster& c);

}  // namespace h3pipe::deploy
