// service.heartbeat rows (#34 P12): preflight on one host checks the services of the others too,
// by what they publish to the one shared state: every pool's heartbeat in h3pipe:pools, judged by
// Redis's own clock (TIME) with the dispatch board's rule (worker/heartbeat.h), so a decode host
// that died is "dead: no heartbeat for N s" from every host, not "ready".
#include <fmt/format.h>

#include "common/preflight/checks.h"
#include "common/queue/server.h"
#include "common/state/pool_board_store.h"
#include "common/worker/heartbeat.h"

namespace h3pipe::preflight {

void check_heartbeats(const config::Cluster& c, const Options& o, const Scope& s, Report& rep) {
  std::vector<const config::Pool*> pools;
  for (const config::Host* h : s.elsewhere)
    for (const config::Pool* p : c.pools_on(h->name)) pools.push_back(p);
  if (pools.empty()) return;
  auto skip_all = [&](const std::string& why) {
    for (const config::Pool* p : pools)
      rep.add("service.heartbeat", fmt::format("{}@{}", p->name, p->host), Outcome::kSkip, why);
  };
  Resolved res = resolve_address(c, o);
  if (!res.error.empty()) return skip_all("needs redis.reachable");
  if (!res.password_file.empty()) {
    config::Redis pr;
    pr.password_file = res.password_file;
    res.addr.password = pr.password();
  }
  auto conn = queue::Redis::connect(res.addr);
  if (!conn.ok()) return skip_all("needs redis.reachable and redis.auth");
  auto now = queue::server_time_s(**conn);
  state::RedisPoolBoardStore board(**conn);
  auto beats = board.heartbeats();
  if (!now.ok() || !beats.ok())
    return skip_all(fmt::format("cannot read the heartbeats: {}",
                                !now.ok() ? now.error().message : beats.error().message));
  for (const config::Pool* p : pools) {
    const std::string target = fmt::format("{}@{}", p->name, p->host);
    const std::string fix = fmt::format(
        "on host {}: `h3pipe status` and its log under <state_dir>/logs; start it with `h3pipe "
        "start --host {}` (or `h3pipe start --all` from here)",
        p->host, p->host);
    std::optional<pb::Heartbeat> hb;
    for (const auto& [name, bytes] : *beats)
      if (name == p->name)
        if (auto d = worker::decode_heartbeat(name, bytes); d.ok()) hb = *d;
    if (!hb) {
      rep.warn("service.heartbeat", target,
               "no heartbeat in Redis yet: not started, or started a moment ago", fix);
      continue;
    }
    const double age = worker::heartbeat_age_s(*hb, *now);
    if (worker::heartbeat_live(*hb, *now))
      rep.pass("service.heartbeat", target,
               fmt::format("live: heartbeat {:.1f} s ago by Redis's clock", std::max(0.0, age)));
    else if (age < 0)
      rep.fail("service.heartbeat", target,
               fmt::format("dead: its heartbeat is stamped {:.1f} s in the future (a clock ahead)",
                           -age),
               "synchronise that host's clock (chrony/NTP); " + fix);
    else
      rep.fail("service.heartbeat", target, fmt::format("dead: no heartbeat for {:.0f} s", age),
               fix);
  }
}

}  // namespace h3pipe::preflight
