#include "common/api/queue_position.h"

#include "common/dispatch/claim_order.h"
#include "common/queue/claim_view.h"
#include "common/queue/keys.h"

namespace h3pipe::api {

Result<std::unordered_map<std::string, long long>> rank_queue(queue::Redis& r,
                                                              const config::Cluster& c) {
  std::unordered_map<std::string, long long> places;
  const std::string stage = config::stage_name(config::StageKind::kEncode);
  const std::string stream = keys::stage_stream(stage);
  auto view = queue::claim_view(r, stream, stage, kQueueScan);
  if (!view.ok()) return view.error();
  // The order of the first encode pool (pools of one stage differ only in their class costs).
  dispatch::ClaimOrder order;
  for (const auto& p : c.pools)
    if (p.stage == config::StageKind::kEncode) {
      order = dispatch::claim_order_for(c, p);
      break;
    }
  std::vector<dispatch::ClaimEntry> es;
  std::vector<std::string> names;  // "RUN JOB" of es[i]
  for (const auto& e : view->entries) {
    dispatch::ClaimEntry ce;
    ce.id = e.id;
    if (!dispatch::parse_entry_id(e.id, ce.ms, ce.seq)) continue;
    std::string erun, ejob;
    for (const auto& [k, v] : e.fields) {
      if (k == "prio") ce.priority = std::strtoll(v.c_str(), nullptr, 10);
      if (k == "user") ce.user = v;
      if (k == "cls") ce.cls = v;
      if (k == "run") erun = v;
      if (k == "job") ejob = v;
    }
    ce.held = view->pending.count(e.id) || view->paused.count(erun);
    if (auto m = view->moved.find(erun + " " + ejob); m != view->moved.end()) ce.first = m->second;
    es.push_back(std::move(ce));
    names.push_back(erun + " " + ejob);
  }
  dispatch::ShareState share;
  for (const auto& [k, v] : view->share) {
    if (k == "floor") share.floor = std::strtoll(v.c_str(), nullptr, 10);
    if (k.rfind("u:", 0) == 0) share.vt[k.substr(2)] = std::strtoll(v.c_str(), nullptr, 10);
  }
  // The claims the encoders would make from here, one by one, until none is left to take.
  for (long long place = 1;; ++place) {
    auto next = dispatch::pick(order, es, share, view->now_ms);
    if (!next) break;
    places.emplace(names[*next], place);
    dispatch::charge(order, es, *next, share);
    es[*next].held = true;
  }
  return places;
}

Result<std::optional<long long>> QueuePositions::of(queue::Redis& r, const config::Cluster& c,
                                                    const std::string& run,
                                                    const std::string& job) {
  std::lock_guard lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!ranked_at_ || now - *ranked_at_ >= max_age_) {
    auto places = rank_queue(r, c);
    if (!places.ok()) return places.error();
    places_ = std::move(*places);
    ranked_at_ = now;
  }
  const auto it = places_.find(run + " " + job);
  return it == places_.end() ? std::optional<long long>() : std::optional<long long>(it->second);
}

}  // namespace h3pipe::api
