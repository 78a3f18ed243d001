#pragma once
// What `h3pipe status` and h3pipe-api (GET /v1/runs/{id}, GET /v1/fleet) both say about the
// hosts and pools (issue #34 P12, #35 D3, #37 item 2): one code for both, so the two never
// disagree.  fleet.cpp: each pool's heartbeat by Redis's clock, dead pools and stalled stages;
// storage_state.cpp: storage that takes no writes; fleet_json: the whole fleet with its queues.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/redis.h"
#include "common/state/state.h"

namespace h3pipe::api {

// Each pool's heartbeat age by Redis's clock.
struct PoolLife {
  std::string pool, host;
  config::StageKind stage = config::StageKind::kSample;
  std::optional<double> age_s;  // Redis TIME - the stamp (negative: stamped in the future)
  bool live = false;            // worker::heartbeat_live, the dispatch board's own rule
  std::string state;            // the heartbeat's: idle | busy | draining ("" none)
  std::string job_id;           // the job it runs, when busy
  bool drained = false;         // in keys::drained_pools(): an operator drained it
  std::string said() const;     // "live, heartbeat 0.4 s ago" / "dead: no heartbeat for 12 s"
};
Result<std::vector<PoolLife>> pool_lives(queue::Redis& redis, const config::Cluster& c);
// "stalled: no live pool for sample: s0 (dead: no heartbeat for 12 s)" for each stage with
// jobs of an unfinished run and no live pool.
std::vector<std::string> stalled_stages(const state::RunStatus& s,
                                        const std::vector<PoolLife>& lives);
nlohmann::json pool_lives_json(const std::vector<PoolLife>& lives);
// Seconds as status prints them: one decimal under 10 s.
std::string age_text(double s);

// "" or why the stack's storage takes no writes: "disk full at <dir> (MISCONF ...)" (a Redis
// that cannot persist; for the local stack, its folders with no space left).  storage_state.cpp.
std::string storage_degraded(queue::Redis& redis, const config::Cluster& c);

// GET /v1/fleet: {"hosts": [{name, live, dead, heartbeat_age_s, pools: [pool_lives_json: state,
// draining (drained by an operator, or its heartbeat says so), job_id]}], "queues": [{stream,
// stage, host, depth}], "queue_depth", "degraded"}: depth = the stream's entries (waiting or
// claimed and not yet done: a task is deleted when its stage ends).
Result<nlohmann::json> fleet_json(queue::Redis& redis, const config::Cluster& c);

}  // namespace h3pipe::api
