#include "common/dispatch/dispatch.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

namespace h3pipe::dispatch {
namespace {

bool usable(const PoolState& p) {
  return p.alive && std::isfinite(p.expected_s) && p.expected_s >= 0;
}

double tie_eps(double t) {
  return 1e-9 * std::max(1.0, std::fabs(t));
}

// A slot: a pool's j-th next completion.  Ordered by time, then pool name (the tie rule).
struct Slot {
  double t;
  const std::string* name;
  std::size_t index;
};
struct SlotLater {
  bool operator()(const Slot& a, const Slot& b) const {
    if (std::fabs(a.t - b.t) > tie_eps(std::max(a.t, b.t))) return a.t > b.t;
    return *a.name > *b.name;
  }
};

}  // namespace

std::size_t claim_lookahead(config::StageKind stage, const Backlog& b) {
  switch (stage) {
    case config::StageKind::kEncode:
      return b.encode_queued;
    case config::StageKind::kSample:
      return b.sample_queued + b.encode_queued + b.encoding;
    case config::StageKind::kDecode:
      return b.decode_queued_here + b.in_transit_here + b.sampling + b.sample_queued +
             b.encode_queued + b.encoding;
  }
  return 0;
}

Policy effective_policy(Policy configured, config::StageKind stage) {
  return stage == config::StageKind::kDecode ? Policy::kCompletionTime : configured;
}

namespace {

// Does the greedy earliest-completion assignment of `tasks` tasks give `me` one?  Fewer than
// `tasks` slots of other pools complete before me's first one (me's free_in_s counts as 0).
bool greedy_gives(const PoolState& me, const std::vector<PoolState>& pools, std::size_t tasks) {
  const double c = me.expected_s + me.tail_s;
  std::size_t before = 0;
  for (const auto& p : pools) {
    if (&p == &me || !usable(p)) continue;
    const double a = std::max(0.0, p.free_in_s) + p.tail_s;
    auto wins_ties = [&] { return p.name < me.name; };
    const double eps = tie_eps(c);
    if (p.expected_s <= 0) {
      // A zero-time pool has unbounded slots at time a: it takes everything it can reach.
      if (a < c - eps || (std::fabs(a - c) <= eps && wins_ties())) return false;
      continue;
    }
    // Slots j >= 1 complete at a + j*e.  Strictly before c (beyond the tie band): j < y.
    const double y = (c - eps - a) / p.expected_s;
    std::size_t n = y > 1 ? static_cast<std::size_t>(std::min(std::ceil(y) - 1, 1e18)) : 0;
    // The next slot may tie with c: it counts only if p wins ties.
    if (std::fabs(a + static_cast<double>(n + 1) * p.expected_s - c) <= eps && wins_ties()) ++n;
    before += n;
    if (before >= tasks) return false;
  }
  return before < tasks;
}

}  // namespace

bool should_claim(Policy policy, std::string_view self, const std::vector<PoolState>& pools,
                  std::size_t queued_tasks) {
  for (std::size_t i = pools.size(); i-- > 0;)
    if (pools[i].name == self) return should_claim_at(policy, i, pools, queued_tasks);
  return false;
}

bool should_claim_at(Policy policy, std::size_t self, const std::vector<PoolState>& pools,
                     std::size_t queued_tasks) {
  if (queued_tasks == 0 || self >= pools.size() || !usable(pools[self])) return false;
  if (policy == Policy::kFirstFree) return true;
  return greedy_gives(pools[self], pools, queued_tasks);
}

std::vector<std::size_t> assign_greedy(const std::vector<PoolState>& pools, std::size_t tasks,
                                       std::vector<double>* completion_s) {
  std::vector<std::size_t> out(tasks, static_cast<std::size_t>(-1));
  if (completion_s) completion_s->assign(tasks, kCannotRun);
  std::priority_queue<Slot, std::vector<Slot>, SlotLater> heap;
  for (std::size_t i = 0; i < pools.size(); ++i)
    if (usable(pools[i]))
      heap.push({std::max(0.0, pools[i].free_in_s) + pools[i].expected_s + pools[i].tail_s,
                 &pools[i].name, i});
  for (std::size_t t = 0; t < tasks && !heap.empty(); ++t) {
    Slot s = heap.top();
    heap.pop();
    out[t] = s.index;
    if (completion_s) (*completion_s)[t] = s.t;
    heap.push({s.t + pools[s.index].expected_s, s.name, s.index});
  }
  return out;
}

namespace {

// A decoder's next free slot for a new latent after the host's queue is served: it completes
// first at `first`, then every `period` seconds.
struct DecoderSlots {
  double first, period;
};

std::vector<DecoderSlots> decoder_slots(const DecodeHostState& h) {
  std::vector<DecoderSlots> out;
  if (!h.alive) return out;
  std::vector<double> avail;
  std::vector<double> dur;
  for (const auto& d : h.decoders) {
    if (!usable(d)) continue;
    avail.push_back(std::max(0.0, d.free_in_s));
    dur.push_back(d.expected_s);
  }
  if (avail.empty()) return out;

  // Serve the queued tasks first (FIFO): each goes to the decoder that finishes it first.
  if (h.queued <= 256) {
    using Item = std::pair<double, std::size_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
    for (std::size_t i = 0; i < avail.size(); ++i) heap.push({avail[i] + dur[i], i});
    for (std::size_t q = 0; q < h.queued; ++q) {
      auto [t, i] = heap.top();
      heap.pop();
      avail[i] = t;
      heap.push({t + dur[i], i});
    }
  } else {
    // Long queues: find the time T by which the decoders complete `queued` tasks (bisection on
    // the slot count), then advance each decoder by its slots up to T.  Ties at T are resolved
    // approximately, which moves the estimate by at most one decode time.
    auto count = [&](double t) {
      double n = 0;
      for (std::size_t i = 0; i < avail.size(); ++i)
        if (t >= avail[i] + dur[i]) n += dur[i] > 0 ? std::floor((t - avail[i]) / dur[i]) : 1e18;
      return n;
    };
    double lo = 0, hi = 1;
    while (count(hi) < static_cast<double>(h.queued)) hi *= 2;
    for (int it = 0; it < 100; ++it) {
      double mid = 0.5 * (lo + hi);
      (count(mid) >= static_cast<double>(h.queued) ? hi : lo) = mid;
    }
    for (std::size_t i = 0; i < avail.size(); ++i)
      if (hi >= avail[i] + dur[i] && dur[i] > 0)
        avail[i] += std::floor((hi - avail[i]) / dur[i]) * dur[i];
  }
  for (std::size_t i = 0; i < avail.size(); ++i)
    out.push_back({std::max(avail[i], h.transfer_s) + dur[i], dur[i]});
  return out;
}

}  // namespace

double expected_decode_completion(const DecodeHostState& h) {
  double best = kCannotRun;
  for (const auto& s : decoder_slots(h)) best = std::min(best, s.first);
  return best;
}

std::optional<std::size_t> choose_decode_host(const std::vector<DecodeHostState>& hosts) {
  std::optional<std::size_t> best;
  double best_t = kCannotRun;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const double t = expected_decode_completion(hosts[i]);
    if (!std::isfinite(t)) continue;
    const bool sooner = !best || t < best_t - tie_eps(best_t);
    const bool tie_local =
        best && !sooner && t <= best_t + tie_eps(best_t) && hosts[i].local && !hosts[*best].local;
    if (sooner || tie_local) best = i, best_t = t;
  }
  return best;
}

}  // namespace h3pipe::dispatch
