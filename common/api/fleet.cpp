// What `status` (and GET /v1/runs/{id}, /v1/fleet) says about the hosts and pools (issue #34 P12,
// #35 D3): each pool's heartbeat age by Redis's own clock (TIME, so no host's clock can fool it),
// "dead: no heartbeat for N s" for a pool (or a host whose pools all are) that stopped beating, and
// for a run that is not finished, each stage whose jobs no live pool can take: "stalled: no live
// pool for sample". Heartbeats are read through the dispatch board's port
// (state::RedisPoolBoardStore) and judged by the board's own rule (worker/heartbeat.h).
#include "common/api/fleet.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "common/core/json_parse.h"
#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "common/queue/server.h"
#include "common/state/pool_board_store.h"
#include "common/state/state.h"
#include "common/worker/gpu_lease.h"
#include "common/worker/heartbeat.h"
#include "common/worker/worker.h"

namespace h3pipe::api {
namespace {

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

std::string age_text(double s) {
  return s < 10 ? fmt::format("{:.1f}", s) : fmt::format("{:.0f}", s);
}

std::string PoolLife::said() const {
  if (live) return fmt::format("live, heartbeat {} s ago", age_text(std::max(0.0, *age_s)));
  if (!age_s) return "dead: never sent a heartbeat";
  if (*age_s < 0)
    return fmt::format("dead: its heartbeat is stamped {} s in the future (a clock ahead)",
                       age_text(-*age_s));
  return fmt::format("dead: no heartbeat for {} s", age_text(*age_s));
}

Result<std::vector<PoolLife>> pool_lives(queue::Redis& redis, const config::Cluster& c) {
  auto now = queue::server_time_s(redis);
  if (!now.ok()) return now.error();
  state::RedisPoolBoardStore board(redis);
  auto beats = board.heartbeats();
  if (!beats.ok()) return beats.error();
  // Pools an operator drained (the console's POST /v1/pools/{pool}/drain): they claim nothing.
  auto drained = queue::hgetall(redis, keys::drained_pools());
  if (!drained.ok()) return drained.error();
  std::vector<PoolLife> out;
  for (const auto& p : c.pools) {
    PoolLife l{.pool = p.name, .host = p.host, .stage = p.stage};
    l.drained = drained->count(p.name) > 0;
    for (const auto& [name, bytes] : *beats) {
      if (name != p.name) continue;
      auto hb = worker::decode_heartbeat(name, bytes);
      if (!hb.ok()) break;  // not a heartbeat: no evidence
      l.age_s = worker::heartbeat_age_s(*hb, *now);
      l.live = worker::heartbeat_live(*hb, *now);
      l.state = hb->state();
      l.job_id = hb->job_id();
      if (l.live && hb->duty_window_s() > 0) {
        l.duty_cycle = hb->duty_cycle();
        l.duty_window_s = hb->duty_window_s();
      }
      if (l.live) {
        l.gpu_devices = hb->gpu_devices();
        l.gpu_utilization = hb->gpu_utilization();
        l.gpu_memory_used_bytes = static_cast<double>(hb->gpu_memory_used_bytes());
        l.gpu_memory_total_bytes = static_cast<double>(hb->gpu_memory_total_bytes());
      }
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

nlohmann::json pool_lives_json(const std::vector<PoolLife>& lives) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : lives) {
    nlohmann::json j = {{"pool", l.pool},
                        {"host", l.host},
                        {"stage", config::stage_name(l.stage)},
                        {"live", l.live},
                        {"said", l.said()},
                        {"state", l.state},
                        {"draining", l.drained || l.state == "draining"}};
    if (!l.job_id.empty()) j["job_id"] = l.job_id;
    j["heartbeat_age_s"] = l.age_s ? nlohmann::json(std::round(*l.age_s * 10) / 10) : nullptr;
    const auto r3 = [](double v) { return std::round(v * 1000) / 1000; };
    j["duty_cycle"] = l.duty_cycle ? nlohmann::json(r3(*l.duty_cycle)) : nullptr;
    j["duty_window_s"] = l.duty_cycle ? nlohmann::json(std::round(l.duty_window_s)) : nullptr;
    j["gpu"] = l.gpu_devices == 0
                   ? nlohmann::json(nullptr)
                   : nlohmann::json{{"devices", l.gpu_devices},
                                    {"utilization", r3(l.gpu_utilization)},
                                    {"memory_used_bytes", l.gpu_memory_used_bytes},
                                    {"memory_total_bytes", l.gpu_memory_total_bytes}};
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json drained_json(const std::string& pool, const std::string& value) {
  std::string why;
  auto v = json_reader::parse_limited(value, {}, &why).value_or(nlohmann::json());
  return {{"pool", pool},
          {"draining", true},
          {"by", v.is_object() ? v.value("by", "") : ""},
          {"since_ms", v.is_object() ? v.value("at_ms", 0LL) : 0LL}};
}

Result<std::optional<nlohmann::json>> set_pool_drained(queue::Redis& redis,
                                                       const config::Cluster& c,
                                                       const std::string& pool, bool on,
                                                       const std::string& by) {
  if (!c.find_pool(pool)) return std::optional<nlohmann::json>();
  const std::string value = nlohmann::json{{"by", by}, {"at_ms", state::now_ms()}}.dump();
  auto w = on ? redis.command({"HSET", keys::drained_pools(), pool, value})
              : redis.command({"HDEL", keys::drained_pools(), pool});
  if (!w.ok()) return w.error();
  return std::optional<nlohmann::json>(on ? drained_json(pool, value)
                                          : nlohmann::json{{"pool", pool}, {"draining", false}});
}

Result<nlohmann::json> fleet_json(queue::Redis& redis, const config::Cluster& c) {
  auto lives = pool_lives(redis, c);
  if (!lives.ok()) return lives.error();
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& h : c.hosts) {
    std::vector<PoolLife> mine;
    for (const auto& l : *lives)
      if (l.host == h.name) mine.push_back(l);
    std::optional<double> newest;
    bool any_live = false;
    for (const auto& l : mine) {
      any_live = any_live || l.live;
      if (l.age_s && *l.age_s >= 0 && (!newest || *l.age_s < *newest)) newest = l.age_s;
    }
    nlohmann::json j = {{"name", h.name}, {"live", any_live}, {"pools", pool_lives_json(mine)}};
    j["heartbeat_age_s"] = newest ? nlohmann::json(std::round(*newest * 10) / 10) : nullptr;
    j["dead"] = !mine.empty() && !any_live;
    hosts.push_back(std::move(j));
  }
  // The stage streams of this config (as resume reads them): encode and sample shared, decode
  // one per decode host, and each GPU group's own sample stream.
  struct Q {
    std::string stream, stage, host;
  };
  std::vector<Q> qs = {{worker::stream_for(config::StageKind::kEncode, ""), "encode", ""},
                       {worker::stream_for(config::StageKind::kSample, ""), "sample", ""}};
  for (const auto* p : c.pools_on("", config::StageKind::kDecode)) {
    const std::string s = worker::stream_for(config::StageKind::kDecode, p->host);
    if (std::none_of(qs.begin(), qs.end(), [&](const Q& q) { return q.stream == s; }))
      qs.push_back({s, "decode", p->host});
  }
  for (const auto* p : c.pools_on("", config::StageKind::kSample))
    if (const std::string g = worker::gpu_group(c, *p); !g.empty()) {
      const std::string s = worker::group_sample_stream(g);
      if (std::none_of(qs.begin(), qs.end(), [&](const Q& q) { return q.stream == s; }))
        qs.push_back({s, "sample", p->host});
    }
  std::vector<std::vector<std::string>> cmds;
  for (const auto& q : qs) cmds.push_back({"XLEN", q.stream});
  auto lens = queue::pipeline_values(redis, cmds);
  if (!lens.ok()) return lens.error();
  nlohmann::json queues = nlohmann::json::array();
  std::map<std::string, long long> by_stage;
  for (std::size_t i = 0; i < qs.size(); ++i) {
    const long long n = i < lens->size() ? std::atoll((*lens)[i].value_or("0").c_str()) : 0;
    by_stage[qs[i].stage] += n;
    nlohmann::json q = {{"stream", qs[i].stream}, {"stage", qs[i].stage}, {"depth", n}};
    if (!qs[i].host.empty()) q["host"] = qs[i].host;
    queues.push_back(std::move(q));
  }
  return nlohmann::json{{"object", "fleet"},
                        {"hosts", hosts},
                        {"queues", queues},
                        {"queue_depth", by_stage},
                        {"degraded", storage_degraded(redis, c)}};
}

}  // namespace h3pipe::api
