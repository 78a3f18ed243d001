#include "common/dispatch/board_model.h"

#include <algorithm>
#include <cmath>

#include "common/dispatch/geometry.h"

namespace h3pipe::dispatch {

using config::StageKind;

BoardModel::BoardModel(const config::Cluster& c, std::optional<Policy> policy)
    : c_(c), policy_(policy ? *policy : c.dispatch) {
  const std::size_t n = c.pools.size();
  leader_ = c.gpu_group_leaders();
  grouped_.assign(n, false);
  group_decodes_.assign(n, false);
  leases_.assign(n, false);
  peers_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    stage_pools_[static_cast<int>(c.pools[i].stage)].push_back(i);
    for (std::size_t k = 0; k < n; ++k) {
      if (k == i || leader_[k] != leader_[i]) continue;
      grouped_[i] = true;
      if (c.pools[k].stage == StageKind::kDecode) group_decodes_[i] = true;
      if (c.pools[i].stage == StageKind::kEncode && c.pools[k].stage == StageKind::kSample)
        leases_[i] = true;
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k : stage_pools(c.pools[i].stage))
      if (c.pools[i].stage != StageKind::kDecode || c.pools[k].host == c.pools[i].host)
        peers_[i].push_back(k);
}

std::size_t BoardModel::pool_index(std::string_view name) const {
  for (std::size_t i = 0; i < c_.pools.size(); ++i)
    if (c_.pools[i].name == name) return i;
  return kNoPool;
}

double BoardModel::expected_s(std::size_t pool, std::string_view job_class) const {
  const double scale = c_.time_scale > 0 ? c_.time_scale : 1.0;
  const config::Pool& p = c_.pools[pool];
  if (const config::Profile* prof = p.profile_for(job_class)) return prof->expected() * scale;
  for (std::size_t k : stage_pools(p.stage))
    if (c_.pools[k].profile_for(job_class)) return kCannotRun;
  if (p.profiles.empty()) return 1.0;  // no profiles: all pools equal
  return std::max(0.0, p.profiles.begin()->second.expected() * scale);
}

std::uint64_t BoardModel::class_bytes(std::string_view job_class) const {
  return class_latent_bytes(c_, std::string(job_class));
}

ClassModel BoardModel::class_model(std::string_view job_class) const {
  const std::size_t n = c_.pools.size();
  ClassModel m;
  m.job_class = std::string(job_class);
  m.latent_bytes = class_bytes(job_class);
  m.expected_s.resize(n);
  for (std::size_t i = 0; i < n; ++i) m.expected_s[i] = expected_s(i, job_class);
  // A pool's GPUs stay committed to the job through the later stages its group runs: the
  // fastest pool of each later stage in the group.
  m.committed_s = m.expected_s;
  for (std::size_t i = 0; i < n; ++i) {
    if (!grouped_[i]) continue;
    for (int later = static_cast<int>(c_.pools[i].stage) + 1; later < 3; ++later) {
      double best = kCannotRun;
      for (std::size_t k = 0; k < n; ++k)
        if (leader_[k] == leader_[i] && static_cast<int>(c_.pools[k].stage) == later)
          best = std::min(best, m.expected_s[k]);
      if (std::isfinite(best)) m.committed_s[i] += best;
    }
  }
  m.tail_s.assign(n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    if (c_.pools[i].stage != StageKind::kDecode && !group_decodes_[i])
      m.tail_s[i] = route_tail_s(c_, c_.pools[i].host, job_class, m.latent_bytes);
  return m;
}

double BoardModel::free_in_s(std::size_t pool, const Observation& o) const {
  double t = o.pools[pool].busy_for_s;
  if (grouped_[pool])
    for (std::size_t k = 0; k < c_.pools.size(); ++k)
      if (k != pool && leader_[k] == leader_[pool] && o.pools[k].alive)
        t = std::max(t, o.pools[k].busy_for_s);
  return std::max(0.0, t);
}

std::vector<PoolState> BoardModel::states(const std::vector<std::size_t>& ids, const ClassModel& m,
                                          const Observation& o, std::size_t self) const {
  std::vector<PoolState> out;
  out.reserve(ids.size());
  for (std::size_t i : ids) {
    PoolState s;
    s.name = c_.pools[i].name;
    s.expected_s = m.committed_s[i];
    s.tail_s = m.tail_s[i];
    s.alive = i == self || o.pools[i].alive;
    s.free_in_s = i == self ? 0.0 : free_in_s(i, o);
    out.push_back(std::move(s));
  }
  return out;
}

bool BoardModel::should_claim(std::size_t self, const ClassModel& m, const Observation& o) const {
  const config::Pool& me = c_.pools[self];
  const Backlog& b = o.backlog;
  const std::size_t ready = me.stage == StageKind::kEncode   ? b.encode_queued
                            : me.stage == StageKind::kSample ? b.sample_queued
                                                             : b.decode_queued_here;
  if (ready == 0 || !std::isfinite(m.expected_s[self])) return false;
  const Policy policy = effective_policy(policy_, me.stage);
  const std::vector<PoolState> pools = states(peers(self), m, o, self);
  // A sampler with encodes still upstream sees them as arrivals, and the decode side.
  if (policy == Policy::kCompletionTime && me.stage == StageKind::kSample &&
      (b.encoding > 0 || b.encode_queued > 0)) {
    const auto& enc_ids = stage_pools(StageKind::kEncode);
    std::vector<PoolState> enc = states(enc_ids, m, o);
    std::vector<bool> reaches;  // a leasing encoder's job stays on its GPU group
    for (std::size_t i = 0; i < enc_ids.size(); ++i) {
      enc[i].tail_s = 0;
      reaches.push_back(!leases_[enc_ids[i]]);
    }
    Lookahead la;
    la.arrivals_in_s = upstream_arrivals(enc, reaches, b.encode_queued);
    std::vector<std::string> hosts;  // a GPU group with its own decoder: no row (its tail counts)
    for (std::size_t q : peers(self)) hosts.push_back(group_decodes_[q] ? "" : c_.pools[q].host);
    fill_decode_side(c_, hosts, m.job_class, m.latent_bytes,
                     o.decode_load ? o.decode_load() : DecodeLoad{}, la);
    return dispatch::should_claim(policy, me.name, pools, b.sample_queued, la);
  }
  return dispatch::should_claim(policy, me.name, pools, claim_lookahead(me.stage, b));
}

}  // namespace h3pipe::dispatch
