// The claim decision when part of the work is still upstream (dispatch.h, should_claim with a
// Lookahead): a one-step rollout of the stage and the decode side.
#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "common/dispatch/dispatch.h"

namespace h3pipe::dispatch {
namespace {

constexpr std::size_t kNo = static_cast<std::size_t>(-1);
constexpr double kInf = std::numeric_limits<double>::infinity();

bool usable(const PoolState& p) {
  return p.alive && std::isfinite(p.expected_s) && p.expected_s >= 0;
}

double tie_eps(double t) {
  return 1e-9 * std::max(1.0, std::fabs(t));
}

// A stage task the model finishes: on pool `pool` at `end_s` (seconds from now).
struct Done {
  double end_s;
  std::size_t pool;
};

// The modelled stage from now, every pool deciding by `base` (first-free, or the greedy count
// rule of should_claim) at each instant, pools free at the same instant asked in vector order
// until none claims: `ready` tasks in the queue now, the others at `arrivals` (ascending).  With
// self_claims, `self` takes one ready task now; without, it sits out this instant and decides
// like the others from the next event on.  Appends the tasks' ends to `out`; false if some task
// is never run.
bool run_stage(const std::vector<PoolState>& pools, std::size_t self, bool self_claims,
               std::size_t ready, const std::vector<double>& arrivals, Policy base,
               std::vector<Done>& out) {
  std::vector<double> free_at(pools.size(), kInf);
  for (std::size_t i = 0; i < pools.size(); ++i)
    if (usable(pools[i])) free_at[i] = std::max(0.0, pools[i].free_in_s);
  if (self_claims) {
    free_at[self] = pools[self].expected_s;
    out.push_back({free_at[self], self});
    --ready;
  }
  std::vector<PoolState> view = pools;  // the pools as they look at time t (base kCompletionTime)
  std::size_t next = 0;                 // the first arrival not yet in the queue
  for (double t = 0;;) {
    while (next < arrivals.size() && arrivals[next] <= t + tie_eps(t)) ++ready, ++next;
    for (bool changed = true; changed && ready > 0;) {
      changed = false;
      if (base == Policy::kCompletionTime)
        for (std::size_t i = 0; i < pools.size(); ++i)
          view[i].free_in_s = std::isfinite(free_at[i]) ? std::max(0.0, free_at[i] - t) : 0;
      for (std::size_t i = 0; i < pools.size() && ready > 0; ++i) {
        if (free_at[i] > t + tie_eps(t) || (i == self && !self_claims && t == 0)) continue;
        if (base == Policy::kCompletionTime &&
            !should_claim_at(base, i, view, ready + arrivals.size() - next))
          continue;
        free_at[i] = t + pools[i].expected_s;
        view[i].free_in_s = pools[i].expected_s;
        out.push_back({free_at[i], i});
        --ready;
        changed = true;
      }
    }
    if (ready == 0 && next == arrivals.size()) return true;
    // The next instant something changes: an arrival, or (with tasks waiting) a pool freeing.
    double t_next = next < arrivals.size() ? arrivals[next] : kInf;
    if (ready > 0)
      for (std::size_t i = 0; i < pools.size(); ++i)
        if (free_at[i] > t + tie_eps(t)) t_next = std::min(t_next, free_at[i]);
    if (ready > 0 && t == 0 && !self_claims && free_at[self] <= 0)
      t_next = std::min(t_next, tie_eps(0) * 2);  // self decides again from the next instant on
    if (!std::isfinite(t_next)) return false;     // nobody can run the waiting tasks
    t = t_next;
  }
}

// The decode side's decoders after the tasks already queued there (FIFO on the earliest slots).
struct Decoder {
  std::size_t host;
  double avail, dur;
  const std::string* name;
};

std::vector<Decoder> decoders_after_queue(const std::vector<DecodeHostState>& hosts) {
  std::vector<Decoder> out;
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    if (!hosts[h].alive) continue;
    const std::size_t first = out.size();
    for (const auto& d : hosts[h].decoders)
      if (usable(d)) out.push_back({h, std::max(0.0, d.free_in_s), d.expected_s, &d.name});
    if (out.size() == first) continue;
    using Item = std::pair<double, std::size_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
    for (std::size_t i = first; i < out.size(); ++i) heap.push({out[i].avail + out[i].dur, i});
    for (std::size_t q = 0; q < std::min(hosts[h].queued, kRolloutTasks); ++q) {
      auto [t, i] = heap.top();
      heap.pop();
      out[i].avail = t;
      heap.push({t + out[i].dur, i});
    }
  }
  return out;
}

// When the last of the jobs ends: `done` (the modelled tasks) and the latents the busy pools are
// making now, in order of their stage end, each sent (transfer_s from its pool's host) to the
// host whose decoder would finish it first, and taken there as the decoders decide (below); a
// pool without a transfer row counts its tail_s.
double last_job_end(const std::vector<PoolState>& pools, const Lookahead& la,
                    std::vector<Done> done) {
  for (std::size_t i = 0; i < pools.size(); ++i)
    if (usable(pools[i]) && pools[i].free_in_s > 0) done.push_back({pools[i].free_in_s, i});
  std::stable_sort(done.begin(), done.end(),
                   [](const Done& a, const Done& b) { return a.end_s < b.end_s; });
  std::vector<Decoder> decs = decoders_after_queue(la.decode_hosts);
  // Per host, its decoders as the claim rule sees them (free_in_s set per latent).
  std::vector<std::vector<PoolState>> view(la.decode_hosts.size());
  std::vector<std::vector<std::size_t>> at(la.decode_hosts.size());
  for (std::size_t k = 0; k < decs.size(); ++k) {
    view[decs[k].host].push_back({*decs[k].name, decs[k].dur, 0});
    at[decs[k].host].push_back(k);
  }
  double last = 0;
  for (const Done& d : done) {
    const std::vector<double>* row = d.pool < la.transfer_s.size() && !la.transfer_s[d.pool].empty()
                                         ? &la.transfer_s[d.pool]
                                         : nullptr;
    if (!row || decs.empty()) {
      last = std::max(last, d.end_s + pools[d.pool].tail_s);
      continue;
    }
    double best = kInf;
    std::size_t pick = kNo;
    for (std::size_t k = 0; k < decs.size(); ++k) {
      const double reach = decs[k].host < row->size() ? (*row)[decs[k].host] : kInf;
      const double end = std::max(decs[k].avail, d.end_s + reach) + decs[k].dur;
      if (pick == kNo || end < best - tie_eps(best)) best = end, pick = k;
    }
    if (pick == kNo) return kInf;
    // The host's decoders decide as the live ones do: an idle one that the greedy count rule
    // over the latents still to come gives work takes the latent when it arrives.
    const std::size_t h = decs[pick].host;
    const double arrive = d.end_s + (*row)[h];
    auto& hv = view[h];
    for (std::size_t v = 0; v < hv.size(); ++v)
      hv[v].free_in_s = std::max(0.0, decs[at[h][v]].avail - arrive);
    const std::size_t still = done.size() - static_cast<std::size_t>(&d - done.data());
    for (std::size_t v = 0; v < hv.size() && hv.size() > 1; ++v)
      if (hv[v].free_in_s <= tie_eps(arrive) &&
          should_claim_at(Policy::kCompletionTime, v, hv, still)) {
        pick = at[h][v];
        best = arrive + decs[pick].dur;
        break;
      }
    decs[pick].avail = best;
    last = std::max(last, best);
  }
  return last;
}

}  // namespace

std::vector<double> upstream_arrivals(const std::vector<PoolState>& feeders,
                                      const std::vector<bool>& reaches, std::size_t queued) {
  std::vector<double> out;
  for (std::size_t i = 0; i < feeders.size(); ++i)
    if (reaches[i] && usable(feeders[i]) && feeders[i].free_in_s > 0)
      out.push_back(feeders[i].free_in_s);
  std::vector<PoolState> untailed = feeders;
  for (auto& f : untailed) f.tail_s = 0;
  std::vector<double> done;
  const auto who = assign_greedy(untailed, std::min(queued, kRolloutTasks), &done);
  for (std::size_t t = 0; t < who.size(); ++t)
    if (who[t] != kNo && reaches[who[t]]) out.push_back(done[t]);
  std::sort(out.begin(), out.end());
  if (out.size() > kRolloutTasks) out.resize(kRolloutTasks);
  return out;
}

namespace {

// The rollout's answer for pools[me] on its own, as if no other pool were asked at this instant.
bool rollout_claims(Policy policy, std::size_t me, const std::vector<PoolState>& pools,
                    std::size_t ready_tasks, const Lookahead& la) {
  std::vector<PoolState> now = pools;
  now[me].free_in_s = 0;  // asked by an idle pool
  const std::size_t ready = std::min(ready_tasks, kRolloutTasks);
  std::vector<double> arrivals(la.arrivals_in_s);
  std::sort(arrivals.begin(), arrivals.end());
  arrivals.resize(std::min(arrivals.size(), kRolloutTasks - ready));
  if (arrivals.empty())  // the queue alone fills the model: the count rule's case
    return should_claim_at(policy, me, pools, ready_tasks + la.arrivals_in_s.size());
  // Each option is worth the better of its two continuations.
  double claim = kInf, wait = kInf;
  for (Policy base : {Policy::kCompletionTime, Policy::kFirstFree})
    for (bool take : {true, false}) {
      std::vector<Done> done;
      if (!run_stage(now, me, take, ready, arrivals, base, done)) continue;
      double& v = take ? claim : wait;
      v = std::min(v, last_job_end(now, la, std::move(done)));
    }
  // Within the band the greedy count rule decides: a live pool sees the model's times through
  // heartbeats and polls a few milliseconds off, and a choice that turns on less than that
  // would flip between the plan and the run.
  const double band = kRolloutTieBand * (std::isfinite(claim) ? claim : wait);
  if (std::isfinite(wait) && (!std::isfinite(claim) || wait < claim - band)) return false;
  if (std::isfinite(claim) && (!std::isfinite(wait) || claim < wait - band)) return true;
  return should_claim_at(policy, me, pools, ready_tasks + la.arrivals_in_s.size());
}

}  // namespace

bool should_claim(Policy policy, std::string_view self, const std::vector<PoolState>& pools,
                  std::size_t ready_tasks, const Lookahead& la) {
  if (policy == Policy::kFirstFree || la.arrivals_in_s.empty())
    return should_claim(policy, self, pools, ready_tasks);
  if (ready_tasks == 0) return false;
  std::size_t me = kNo;
  for (std::size_t i = 0; i < pools.size(); ++i)
    if (pools[i].name == self) me = i;
  if (me == kNo || !usable(pools[me])) return false;
  // The instant as the simulator runs it (Sim::dispatch): the idle pools asked in vector order,
  // again after every claim, until none claims.  A live pool asks whenever it polls, so it
  // answers for the idle pools before it too: it claims only if the instant hands it a task,
  // whichever pool polls first (a slower idle pool, asked first, leaves the head task to a
  // faster idle one the instant gives it to).
  std::vector<PoolState> cur = pools;
  cur[me].free_in_s = 0;
  std::vector<bool> took(pools.size(), false);
  std::size_t ready = ready_tasks;
  for (bool changed = true; changed && ready > 0;) {
    changed = false;
    for (std::size_t i = 0; i < cur.size() && ready > 0; ++i) {
      if (took[i] || !usable(cur[i]) || cur[i].free_in_s > 0) continue;
      if (!rollout_claims(policy, i, cur, ready, la)) continue;
      if (i == me) return true;
      took[i] = true;
      cur[i].free_in_s = cur[i].expected_s;
      --ready;
      changed = true;
    }
  }
  return false;
}

}  // namespace h3pipe::dispatch
