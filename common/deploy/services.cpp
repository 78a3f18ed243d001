#include "common/deploy/services.h"

#include <fmt/format.h>

namespace h3pipe::deploy {

std::vector<HostService> services_on(const config::Cluster& c, const config::Host& h) {
  std::vector<HostService> out;
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const config::Pool& p = c.pools[i];
    if (p.host != h.name) continue;
    const char* svc = p.stage == config::StageKind::kEncode   ? "encoder"
                      : p.stage == config::StageKind::kSample ? "sampler"
                                                              : "decoder";
    out.push_back({svc, p.name, &p, p.metrics_port, fmt::format("/pools/{}/metrics_port", i)});
  }
  if (c.hosts.size() > 1) {
    std::size_t i = 0;
    while (i < c.hosts.size() && c.hosts[i].name != h.name) ++i;
    out.push_back({"transfer", h.name, nullptr, h.transfer_metrics_port,
                   fmt::format("/hosts/{}/transfer_metrics_port", i)});
  }
  return out;
}

std::string scrape_address(const config::Host& h) {
  const std::string& a =
      h.bind.empty() || h.bind == "0.0.0.0" || h.bind == "::" ? h.address : h.bind;
  return a.find(':') != std::string::npos ? "[" + a + "]" : a;  // an IPv6 literal
}

}  // namespace h3pipe::deploy
