#include "common/dispatch/claim_order.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace h3pipe::dispatch {

std::string ClaimOrder::encode() const {
  std::string s = std::to_string(aging_ms) + " " + std::to_string(window) + " " +
                  std::to_string(default_cost_ms) + " " + std::to_string(weight_permille.size());
  for (const auto& [u, w] : weight_permille) s += " " + u + " " + std::to_string(w);
  s += " " + std::to_string(cost_ms.size());
  for (const auto& [c, ms] : cost_ms) s += " " + c + " " + std::to_string(ms);
  return s;
}

long long ClaimOrder::weight_of(const std::string& user) const {
  auto it = weight_permille.find(user);
  return it == weight_permille.end() ? 1000 : std::max(1LL, it->second);
}

long long ClaimOrder::cost_of(const std::string& cls) const {
  auto it = cost_ms.find(cls);
  return it == cost_ms.end() ? default_cost_ms : it->second;
}

ClaimOrder claim_order_for(const config::Cluster& c, const config::Pool& pool) {
  ClaimOrder o;
  o.aging_ms = c.queue.aging_ms;
  for (const auto& [name, u] : c.users)
    o.weight_permille[name] = std::max(1LL, std::llround(u.weight * 1000));
  auto ms = [&](const config::Profile& p) {
    return std::max(1LL, std::llround(p.expected() * c.time_scale * 1000));
  };
  for (const auto& [cls, p] : pool.profiles) o.cost_ms[cls] = ms(p);
  if (const auto* d = pool.profile_for("default")) o.default_cost_ms = ms(*d);
  return o;
}

long long ShareState::vt_of(const std::string& user) const {
  auto it = vt.find(user);
  return std::max(it == vt.end() ? 0 : it->second, floor);
}

namespace {

// The candidates: the first window entries no consumer holds.
std::vector<std::size_t> candidates(const ClaimOrder& o, const std::vector<ClaimEntry>& es) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < es.size() && static_cast<int>(out.size()) < o.window; ++i)
    if (!es[i].held) out.push_back(i);
  return out;
}

}  // namespace

std::optional<std::size_t> pick(const ClaimOrder& o, const std::vector<ClaimEntry>& es,
                                const ShareState& share, long long now_ms) {
  const auto cand = candidates(o, es);
  if (cand.empty()) return std::nullopt;
  long long pmax = es[cand.front()].priority;
  for (auto i : cand) pmax = std::max(pmax, es[i].priority);
  std::optional<std::size_t> best;
  long long best_f = 0, best_p = 0, best_vt = 0;
  for (auto i : cand) {
    const auto& e = es[i];
    long long p = e.priority;
    if (o.aging_ms > 0 && now_ms > e.ms) p = std::min(pmax, p + (now_ms - e.ms) / o.aging_ms);
    const long long vt = share.vt_of(e.user);
    const long long f = e.first;
    if (!best || f > best_f || (f == best_f && (p > best_p || (p == best_p && vt < best_vt)))) {
      best = i;
      best_f = f;
      best_p = p;
      best_vt = vt;
    }
  }
  return best;
}

void charge(const ClaimOrder& o, const std::vector<ClaimEntry>& es, std::size_t taken,
            ShareState& share) {
  const auto cand = candidates(o, es);
  std::optional<long long> low;
  for (auto i : cand) {
    const long long vt = share.vt_of(es[i].user);
    low = low ? std::min(*low, vt) : vt;
  }
  const auto& e = es[taken];
  const long long vt = share.vt_of(e.user) + o.cost_of(e.cls) * 1000 / o.weight_of(e.user);
  share.vt[e.user] = vt;
  if (low) share.floor = std::max(share.floor, *low);
}

std::optional<std::size_t> claim_next(const ClaimOrder& o, const std::vector<ClaimEntry>& es,
                                      ShareState& share, long long now_ms,
                                      const std::function<bool(std::size_t)>& may_claim) {
  const auto at = pick(o, es, share, now_ms);
  if (!at || !may_claim(*at)) return std::nullopt;
  charge(o, es, *at, share);
  return at;
}

bool parse_entry_id(const std::string& id, long long& ms, long long& seq) {
  const auto dash = id.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 >= id.size()) return false;
  try {
    std::size_t a = 0, b = 0;
    ms = std::stoll(id.substr(0, dash), &a);
    seq = std::stoll(id.substr(dash + 1), &b);
    return a == dash && b == id.size() - dash - 1;
  } catch (...) {
    return false;
  }
}

}  // namespace h3pipe::dispatch
