#pragma once
// The one input model of the dispatch policy (issue #26): what every caller of the rule
// (dispatch.h, decode_route.h) knows from the config alone, built once, and the claim decision
// assembled from it and an Observation.  The live pool board (worker/pool_board.h, from
// heartbeats and stream depths), decode routing (worker/decode_choice.h, the transfer sender's
// fallback, `resume`) and the planner's simulator (schedule/simulate.cpp, from its clock) all
// feed it observations only, so live and plan size latents, commit GPU groups and count route
// tails the same way.
//
// From the config: the GPU groups (shares_gpus_with, Cluster::gpu_group_leaders), per pool and
// class the expected stage time, the time it commits its GPU group for (its stage plus the
// fastest pool of each later stage in the group) and its route tail (route_tail_s), the latent
// bytes of a class by the class's own latent profile (class_latent_bytes).  A job's own class and
// latent bytes, from its spec, are spec::route_inputs (common/spec/spec.h).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/dispatch/decode_route.h"
#include "common/dispatch/dispatch.h"

namespace h3pipe::dispatch {

inline constexpr std::size_t kNoPool = static_cast<std::size_t>(-1);

// One pool as seen now.
struct PoolSeen {
  double busy_for_s = 0;  // seconds until the GPUs it holds are free again (its heartbeat's
                          // busy-until; the simulator: its group's expected end); 0 when idle
  bool alive = true;      // a fresh heartbeat (the simulator: always)
};

// Everything a claim decision observes, besides the config.
struct Observation {
  std::vector<PoolSeen> pools;  // parallel to Cluster::pools
  Backlog backlog;
  // The decode side, read only when the decision looks at it (a sampler with encodes still
  // upstream); empty: no load (idle decoders, empty queues).
  std::function<DecodeLoad()> decode_load;
};

// The config's numbers for one job class, per pool (parallel to Cluster::pools).
struct ClassModel {
  std::string job_class;
  std::uint64_t latent_bytes = 0;   // class_latent_bytes: 0 when the class is not in /classes
  std::vector<double> expected_s;   // the stage time (time_scale applied); kCannotRun: no profile
  std::vector<double> committed_s;  // expected_s + the later stages of its GPU group
  std::vector<double> tail_s;       // route_tail_s; 0 for decoders and groups that decode
};

class BoardModel final {
 public:
  // Keeps a reference to `c`, which must outlive the model.  `policy`: the config's /dispatch
  // unless given (the planner's --policy).
  explicit BoardModel(const config::Cluster& c, std::optional<Policy> policy = std::nullopt);

  const config::Cluster& cluster() const { return c_; }
  // /dispatch as the config loader parsed it (config::Cluster::dispatch), or the one given.
  Policy policy() const { return policy_; }
  std::size_t pool_index(std::string_view name) const;  // kNoPool when not in the config
  std::size_t group(std::size_t pool) const { return leader_[pool]; }  // its first pool's index
  bool grouped(std::size_t pool) const { return grouped_[pool]; }      // shares its GPUs
  bool group_decodes(std::size_t pool) const { return group_decodes_[pool]; }
  // An encoder whose GPU group has a sampler: the group samples the job it encodes (the lease).
  bool leases_group(std::size_t pool) const { return leases_[pool]; }
  // The pools a pool defers to, config order: its stage's (a decoder: those of its host).
  const std::vector<std::size_t>& peers(std::size_t pool) const { return peers_[pool]; }
  const std::vector<std::size_t>& stage_pools(config::StageKind s) const {
    return stage_pools_[static_cast<int>(s)];
  }

  // The class's numbers (computed from the config on each call: callers keep the result).
  ClassModel class_model(std::string_view job_class) const;
  // A pool's stage seconds for a class: its profile (or "default") times time_scale; without
  // one, kCannotRun if another pool of its stage has one, else its first profile (1 s without
  // any), so a live stage never stalls on a config the planner refuses.
  double expected_s(std::size_t pool, std::string_view job_class) const;
  // A class's latent bytes by its own latent profile (class_latent_bytes).
  std::uint64_t class_bytes(std::string_view job_class) const;

  // Seconds until `pool` can start a task: the longest busy_for_s of it and the live pools of
  // its GPU group.
  double free_in_s(std::size_t pool, const Observation& o) const;
  // The policy's states of `ids` for the class (self: alive, free now).
  std::vector<PoolState> states(const std::vector<std::size_t>& ids, const ClassModel& m,
                                const Observation& o, std::size_t self = kNoPool) const;
  // Should the idle pool `self` claim the head task (of class m) of its stage's queue now?  The
  // effective policy (effective_policy) with the peers' states, the lookahead (claim_lookahead),
  // and for a sampler with encodes upstream the encoders' arrivals and the decode side.
  bool should_claim(std::size_t self, const ClassModel& m, const Observation& o) const;

 private:
  const config::Cluster& c_;
  Policy policy_ = Policy::kCompletionTime;
  std::vector<std::size_t> leader_;
  std::vector<bool> grouped_, group_decodes_, leases_;
  std::vector<std::vector<std::size_t>> peers_;
  std::vector<std::size_t> stage_pools_[3];
};

}  // namespace h3pipe::dispatch
