// What `status` says about the hosts and pools (issue #34 P12, #35 D3): each pool's heartbeat
// age by Redis's own clock (TIME, so no host's clock can fool it), "dead: no heartbeat for N s"
// for a pool (or a host whose pools all are) that stopped beating, and for a run that is not
// finished, each stage whose jobs no live pool can take: "stalled: no live pool for sample".
// Heartbeats are read through the dispatch board's port (state::RedisPoolBoardStore) and judged
// by the board's own rule (worker/heartbeat.h).
#include <fmt/format.h>

#include <cmath>

#include "cli/cli.h"
#include "common/queue/server.h"
#include "common/state/pool_board_store.h"
#include "common/state/state.h"
#include "common/worker/heartbeat.h"

namespace h3pipe::cli {
namespace {

std::string seconds(double s) {
  return s < 10 ? fmt::format("{:.1f}", s) : fmt::format("{:.0f}", s);
}

// A stage's jobs in the run, waiting or running, that a pool of `stage` takes next.
long long jobs_for(const state::RunStatus& s, config::StageKind stage) {
  auto in = [&](const char* st) {
    auto it = s.in_state.find(st);
    return it == s.in_state.end() ? 0LL : it->second;
  };
  switch (stage) {
    case config::StageKind::kEncode:
      return in("queued") + in("encode");
    case config::StageKind::kSample:
      return in("sample");
    case config::StageKind::kDecode:
      return in("decode");
  }
  return 0;
}

}  // namespace

std::string PoolLife::said() const {
  if (live) return fmt::format("live, heartbeat {} s ago", seconds(std::max(0.0, *age_s)));
  if (!age_s) return "dead: never sent a heartbeat";
  if (*age_s < 0)
    return fmt::format("dead: its heartbeat is stamped {} s in the future (a clock ahead)",
                       seconds(-*age_s));
  return fmt::format("dead: no heartbeat for {} s", seconds(*age_s));
}

Result<std::vector<PoolLife>> pool_lives(queue::Redis& redis, const config::Cluster& c) {
  auto now = queue::server_time_s(redis);
  if (!now.ok()) return now.error();
  state::RedisPoolBoardStore board(redis);
  auto beats = board.heartbeats();
  if (!beats.ok()) return beats.error();
  std::vector<PoolLife> out;
  for (const auto& p : c.pools) {
    PoolLife l{.pool = p.name, .host = p.host, .stage = p.stage};
    for (const auto& [name, bytes] : *beats) {
      if (name != p.name) continue;
      auto hb = worker::decode_heartbeat(name, bytes);
      if (!hb.ok()) break;  // not a heartbeat: no evidence
      l.age_s = worker::heartbeat_age_s(*hb, *now);
      l.live = worker::heartbeat_live(*hb, *now);
    }
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<std::string> stalled_stages(const state::RunStatus& s,
                                        const std::vector<PoolLife>& lives) {
  std::vector<std::string> out;
  if (s.finished() || lives.empty()) return out;
  for (const auto stage :
       {config::StageKind::kEncode, config::StageKind::kSample, config::StageKind::kDecode}) {
    if (jobs_for(s, stage) == 0) continue;
    std::string pools;
    bool any_live = false;
    for (const auto& l : lives) {
      if (l.stage != stage) continue;
      any_live = any_live || l.live;
      pools += fmt::format("{}{} ({})", pools.empty() ? "" : ", ", l.pool, l.said());
    }
    if (!any_live)
      out.push_back(fmt::format("stalled: no live pool for {}: {}", config::stage_name(stage),
                                pools.empty() ? "the config has none" : pools));
  }
  return out;
}

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
      fmt::print("  {:<20} live, last heartbeat {} s ago\n", h.name, seconds(newest.value_or(0)));
    else if (newest)
      fmt::print("  {:<20} dead: no heartbeat for {} s\n", h.name, seconds(*newest));
    else
      fmt::print("  {:<20} dead: no heartbeat from any of its pools\n", h.name);
    for (const auto& l : lives)
      if (l.host == h.name)
        fmt::print("    {:<18} {:<7} {}\n", l.pool, config::stage_name(l.stage), l.said());
  }
}

nlohmann::json pool_lives_json(const std::vector<PoolLife>& lives) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : lives) {
    nlohmann::json j = {{"pool", l.pool},
                        {"host", l.host},
                        {"stage", config::stage_name(l.stage)},
                        {"live", l.live},
                        {"said", l.said()}};
    j["heartbeat_age_s"] = l.age_s ? nlohmann::json(std::round(*l.age_s * 10) / 10) : nullptr;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace h3pipe::cli
