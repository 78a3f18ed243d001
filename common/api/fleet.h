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
  // The heartbeat's use figures (its duty_cycle over duty_window_s; its GPUs, gpu_devices 0: no
  // NVML reading), for GET /v1/fleet and the console's fleet cards.
  std::optional<double> duty_cycle;  // nullopt: no live heartbeat, or a writer that does not say
  double duty_window_s = 0;
  unsigned gpu_devices = 0;
  double gpu_utilization = 0, gpu_memory_used_bytes = 0, gpu_memory_total_bytes = 0;
  std::string said() const;  // "live, heartbeat 0.4 s ago" / "dead: no heartbeat for 12 s"
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
// draining (drained by an operator, or its heartbeat says so), job_id, duty_cycle and
// duty_window_s (null: no live heartbeat that says), gpu (null: none reported, e.g. a CPU pool;
// else devices, utilization, memory_used_bytes, memory_total_bytes)]}], "queues": [{stream,
// stage, host, depth}], "queue_depth", "degraded"}: depth = the stream's entries (waiting or
// claimed and not yet done: a task is deleted when its stage ends).
Result<nlohmann::json> fleet_json(queue::Redis& redis, const config::Cluster& c);

// Drains (on) or undrains a pool, as POST /v1/pools/{pool}/drain|undrain and `h3pipe drain|undrain
// POOL` both do: the hash keys::drained_pools() pool -> {"by", "at_ms"}, which every stage worker
// reads before it claims (common/worker/drain_flag.h): a drained pool claims nothing more, its
// task in progress finishes.  Returns what the API answers: {"pool", "draining": true, "by",
// "since_ms"} or {"pool", "draining": false}; nullopt for a pool not in the config (nothing
// written).  Errors: Redis's.
Result<std::optional<nlohmann::json>> set_pool_drained(queue::Redis& redis,
                                                       const config::Cluster& c,
                                                       const std::string& pool, bool on,
                                                       const std::string& by);
// One entry of keys::drained_pools() as the API lists it: {"pool", "draining": true, "by",
// "since_ms"}.
nlohmann::json drained_json(const std::string& pool, const std::string& value);

}  // namespace h3pipe::api
