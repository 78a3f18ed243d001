#pragma once
// What runs on one host of a cluster, as `h3pipe start` runs it (common/supervisor): one process
// per pool (encoder, sampler, decoder by the pool's stage) and, when the cluster has more than one
// host, the host's transfer service.  Shared by the Prometheus targets file and the systemd units.
#include <string>
#include <vector>

#include "common/config/config.h"

namespace h3pipe::deploy {

struct HostService {
  std::string service;                 // "encoder", "sampler", "decoder", "transfer"
  std::string instance;                // the pool's name, or the host's for transfer
  const config::Pool* pool = nullptr;  // nullptr for transfer
  int metrics_port = 0;                // the config's fixed port; 0 = none
  std::string port_field;              // its JSON path: "/pools/2/metrics_port", ...
  std::string name() const { return service + "-" + instance; }  // the run file's and log's
};

std::vector<HostService> services_on(const config::Cluster& c, const config::Host& h);

// The address Prometheus scrapes a host's services on: its bind address, or its address when it
// binds every interface.
std::string scrape_address(const config::Host& h);

}  // namespace h3pipe::deploy
