// What `status` prints about the hosts and pools (issue #34 P12, #35 D3).  The heartbeats, dead
// pools and stalled stages are common/api/fleet.h's, the code GET /v1/fleet and /v1/runs/{id}
// answer with; only the text is here.
#include <fmt/format.h>

#include "cli/cli.h"

namespace h3pipe::cli {

void print_pool_lives(const config::Cluster& c, const std::vector<PoolLife>& lives) {
  fmt::print("hosts and pools (heartbeat ages by Redis's clock):\n");
  for (const auto& h : c.hosts) {
    std::optional<double> newest;
    bool any = false, any_live = false;
    for (const auto& l : lives) {
      if (l.host != h.name) continue;
      any = true;
      any_live = any_live || l.live;
      if (l.age_s && l.age_s >= 0 && (!newest || *l.age_s < *newest)) newest = l.age_s;
    }
    if (!any) continue;  // a host with no pools (transfer only) beats nothing
    if (any_live)
      fmt::print("  {:<20} live, last heartbeat {} s ago\n", h.name,
                 api::age_text(newest.value_or(0)));
    else if (newest)
      fmt::print("  {:<20} dead: no heartbeat for {} s\n", h.name, api::age_text(*newest));
    else
      fmt::print("  {:<20} dead: no heartbeat from any of its pools\n", h.name);
    for (const auto& l : lives)
      if (l.host == h.name)
        fmt::print("    {:<18} {:<7} {}\n", l.pool, config::stage_name(l.stage), l.said());
  }
}

}  // namespace h3pipe::cli
