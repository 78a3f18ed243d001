#include "common/schedule/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <set>
#include <type_traits>

#include "common/dispatch/board_model.h"
#include "common/dispatch/claim_order.h"
#include "common/dispatch/decode_route.h"
#include "common/dispatch/geometry.h"
#include "common/schedule/sim_parts.h"

namespace h3pipe::schedule {
namespace {

using config::StageKind;
using namespace h3pipe::dispatch;

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

struct PoolRt {
  const config::Pool* cfg = nullptr;
  std::size_t group = 0;
  std::size_t lane = 0;
  std::size_t host = 0;                         // index into Sim::hosts_
  std::vector<const config::Profile*> profile;  // per class index; nullptr: cannot run
  std::vector<double> expected;                 // per class index (BoardModel's, time_scale
                                                // applied); committed_s: class_models_
  std::vector<std::size_t> cycle_pos;           // per class index
  bool leases_group = false;                    // an encoder whose GPU group has a sampler: the
                                                // group keeps the job through its sampling
};

struct GroupRt {
  std::vector<std::size_t> by_stage[3];  // pool indices per stage, config order
  bool busy = false;
  double expected_end = 0;
  std::size_t holder = 0;           // the pool that started its current task
  std::deque<std::size_t> encoded;  // jobs its encoder finished, for its own sampler (the lease)
};

struct LinkRt {
  config::Link cfg;
  std::size_t from = 0, to = 0;  // host indices
  std::size_t lane = 0;
  bool busy = false;
  double backlog_end = 0;  // when the link is expected free after everything queued
  std::deque<std::size_t> queue;
};

struct JobRt {
  std::size_t cls = 0;
  double ready_s = 0;       // ready for the stage it waits for
  double sample_end_s = 0;  // orders the decode queue
  std::size_t sample_host = 0, decode_host = 0;
};

enum class Ev { kSubmit, kPoolDone, kLinkDone };
struct Event {
  double t;
  std::uint64_t seq;
  Ev kind;
  std::size_t who;  // pool or link index
  std::size_t job;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Sim {
 public:
  Sim(const config::Cluster& c, const std::vector<SimJob>& jobs, const SimOptions& o)
      : c_(c), in_(jobs), opt_(o), rng_(o.seed), model_(c, o.policy) {}

  Result<SimResult> run();

 private:
  Status build();
  std::size_t host_index(const std::string& name) const { return host_ix_.at(name); }
  void push(double t, Ev k, std::size_t who, std::size_t job) {
    events_.push({t, seq_++, k, who, job});
  }
  double free_in(std::size_t pool) const {
    const auto& g = groups_[pools_[pool].group];
    return g.busy ? std::max(0.0, g.expected_end - now_) : 0.0;
  }
  void dispatch();
  bool try_claim(std::size_t pool);
  // The dispatch policy asked about the entry the order picked (what the pool observes now).
  bool policy_allows(std::size_t pool, const ClaimEntry& e);
  // The sampler of GPU group `group` that can sample class `cls` (the lease's), or kNone.
  std::size_t group_sampler(std::size_t group, std::size_t cls) const;
  void start(std::size_t pool, std::size_t job);
  void on_pool_done(std::size_t pool, std::size_t job);
  void on_link_done(std::size_t link, std::size_t job);
  void route_latent(std::size_t job, std::size_t from_host);
  // What the decode side looks like now (decode_route.h), with the links from `from_hosts`.
  DecodeLoad decode_load(const std::vector<std::string>& from_hosts) const;
  void start_link(std::size_t link);
  void arrive(std::size_t job, std::size_t host);
  const config::Link& link_cfg(std::size_t from, std::size_t to);
  std::size_t link_rt(std::size_t from, std::size_t to);  // creates the link's lane on first use
  void record(std::size_t lane, std::size_t job, double s, double e, double ready) {
    acc_[lane].add(s, e, ready);
    if (opt_.record) out_.segments.push_back({lane, job, s, e});
  }

  const config::Cluster& c_;
  const std::vector<SimJob>& in_;
  SimOptions opt_;
  std::mt19937_64 rng_;
  double now_ = 0;
  std::uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;

  std::vector<std::string> classes_;
  std::vector<bool> has_encode_;  // per class
  std::map<std::string, std::size_t> host_ix_;
  std::vector<std::string> host_names_;
  std::vector<PoolRt> pools_;
  std::vector<GroupRt> groups_;
  // The input model the live pool board uses (board_model.h), fed from this clock.
  BoardModel model_;
  std::vector<ClassModel> class_models_;   // per class index
  Observation seen_;                       // pools' part: refreshed at each claim decision
  std::vector<std::string> sample_hosts_;  // the links a sampler's lookahead reads (decode_load)
  std::vector<std::size_t> decode_hosts_;  // host indices with decode pools, config order
  std::vector<std::vector<std::size_t>> host_decoders_;  // per host index
  std::vector<LinkRt> links_;
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> link_ix_;
  std::map<std::pair<std::size_t, std::size_t>, config::Link> link_cfg_;
  std::vector<std::uint64_t> class_bytes_;  // latent bytes per class index
  std::vector<std::size_t> in_transit_;     // per host: latents on their way there

  std::deque<std::size_t> encode_q_, sample_q_;
  std::vector<std::set<std::pair<double, std::size_t>>> decode_q_;  // per host: (sample end, job)
  // The claim order (dispatch::pick): each pool's parameters, each queue's fair share.
  std::vector<ClaimOrder> orders_;  // per pool
  ShareState encode_share_, sample_share_;
  std::vector<ShareState> decode_share_;  // per host
  // The queue's first kClaimWindow jobs as the order sees them (ready_s: when it joined it).
  template <class It>
  std::vector<ClaimEntry> claim_entries(It first, It last) const;
  std::vector<JobRt> jobs_;
  std::vector<LaneAcc> acc_;
  std::size_t done_ = 0;
  std::size_t encoding_ = 0;  // encode tasks in progress
  std::size_t sampling_ = 0;  // sample tasks in progress
  SimResult out_;
};

Status Sim::build() {
  if (in_.empty()) return make_error(errc::plan::kNoJobs, "the plan needs at least one job");
  std::map<std::string, std::size_t> cls_ix;
  jobs_.resize(in_.size());
  for (std::size_t j = 0; j < in_.size(); ++j) {
    auto [it, fresh] = cls_ix.emplace(in_[j].job_class, classes_.size());
    if (fresh) classes_.push_back(in_[j].job_class);
    jobs_[j].cls = it->second;
  }
  for (const auto& h : c_.hosts) {
    host_ix_.emplace(h.name, host_names_.size());
    host_names_.push_back(h.name);
  }
  for (const auto& p : c_.pools)
    if (!host_ix_.count(p.host)) {
      host_ix_.emplace(p.host, host_names_.size());
      host_names_.push_back(p.host);
    }
  for (const auto& cls : classes_) {
    class_models_.push_back(model_.class_model(cls));
    const std::uint64_t bytes = class_models_.back().latent_bytes;
    if (bytes == 0)
      out_.warnings.push_back(
          fmt::format("job class \"{}\" is not in /classes: its latent size is unknown, so "
                      "transfers cost only the link latency",
                      cls));
    class_bytes_.push_back(bytes);
  }
  host_decoders_.resize(host_names_.size());
  in_transit_.assign(host_names_.size(), 0);
  decode_q_.resize(host_names_.size());
  decode_share_.resize(host_names_.size());

  // GPU groups: numbered in the order of their first pool.
  const std::vector<std::size_t> leader = c_.gpu_group_leaders();
  std::map<std::size_t, std::size_t> group_of_root;
  for (std::size_t i = 0; i < c_.pools.size(); ++i) {
    const auto& cfg = c_.pools[i];
    PoolRt p;
    p.cfg = &cfg;
    p.host = host_ix_.at(cfg.host);
    auto [g, fresh] = group_of_root.emplace(leader[i], groups_.size());
    if (fresh) groups_.emplace_back();
    p.group = g->second;
    groups_[p.group].by_stage[static_cast<int>(cfg.stage)].push_back(i);
    for (const auto& cls : classes_) {
      const config::Profile* prof = cfg.profile_for(cls);
      p.profile.push_back(prof);
      p.expected.push_back(class_models_[p.expected.size()].expected_s[i]);
      p.cycle_pos.push_back(0);
    }
    const LaneKind kinds[] = {LaneKind::kEncode, LaneKind::kSample, LaneKind::kDecode};
    p.lane = out_.lanes.size();
    out_.lanes.push_back({cfg.name, kinds[static_cast<int>(cfg.stage)], cfg.host, {}});
    if (cfg.stage == StageKind::kDecode) {
      if (host_decoders_[p.host].empty()) decode_hosts_.push_back(p.host);
      host_decoders_[p.host].push_back(i);
    }
    if (cfg.stage == StageKind::kSample)
      sample_hosts_.push_back(model_.group_decodes(i) ? std::string() : cfg.host);
    pools_.push_back(std::move(p));
    orders_.push_back(claim_order_for(c_, cfg));
  }
  // Committed times and route tails are the model's (class_models_); the lease is its too.
  for (std::size_t i = 0; i < pools_.size(); ++i) pools_[i].leases_group = model_.leases_group(i);
  seen_.pools.assign(pools_.size(), PoolSeen{});
  seen_.decode_load = [this] { return decode_load(sample_hosts_); };
  // The lease keeps a grouped encoder's jobs on its group: a sampler with no encoder on its GPUs
  // is fed by standalone encoders only.
  bool standalone_encoder = false, leasing_encoder = false;
  for (const auto& p : pools_)
    if (p.cfg->stage == StageKind::kEncode)
      (p.leases_group ? leasing_encoder : standalone_encoder) = true;
  if (leasing_encoder && !standalone_encoder)
    for (const auto& p : pools_)
      if (p.cfg->stage == StageKind::kSample && groups_[p.group].by_stage[0].empty())
        out_.warnings.push_back(fmt::format(
            "sample pool {} has no encoder on its GPUs and there is no standalone encoder: every "
            "encoder keeps its job for the sampler on its own GPUs (a GPU group is one lease), "
            "so {} gets no work",
            p.cfg->name, p.cfg->name));
  for (auto& p : pools_) {
    const auto& g = groups_[p.group];
    for (const auto& v : g.by_stage)
      if (!v.empty()) {
        out_.lanes[p.lane].group = c_.pools[v.front()].name;
        break;
      }
  }

  // Every class needs a sampler and a decoder; encoders are optional, but if any exist one of
  // them must run the class (an encoder without the profile is a config mistake, not "0 s").
  has_encode_.assign(classes_.size(), false);
  for (std::size_t k = 0; k < classes_.size(); ++k) {
    bool any[3] = {false, false, false}, can[3] = {false, false, false};
    for (const auto& p : pools_) {
      int s = static_cast<int>(p.cfg->stage);
      any[s] = true;
      can[s] = can[s] || p.profile[k] != nullptr;
    }
    for (int s = 0; s < 3; ++s)
      if ((s != 0 || any[0]) && !can[s])
        return make_error(
            errc::plan::kNoProfile,
            "no {} pool has a profile for job class \"{}\" (pools[].profiles.{} or .default)",
            config::stage_name(static_cast<StageKind>(s)), classes_[k], classes_[k]);
    has_encode_[k] = any[0];
  }
  acc_.resize(out_.lanes.size());
  return Status::Ok();
}

const config::Link& Sim::link_cfg(std::size_t from, std::size_t to) {
  auto key = std::make_pair(from, to);
  if (auto it = link_cfg_.find(key); it != link_cfg_.end()) return it->second;
  const config::Link* exact = nullptr;
  const config::Link* reverse = nullptr;
  for (const auto& cl : c_.links) {
    if (cl.from == host_names_[from] && cl.to == host_names_[to] && !exact) exact = &cl;
    if (cl.from == host_names_[to] && cl.to == host_names_[from] && !reverse) reverse = &cl;
  }
  config::Link l;
  if (exact)
    l = *exact;
  else if (reverse)
    l = *reverse;
  else
    out_.warnings.push_back(fmt::format("no link between {} and {}: assumed {} Gbit/s, {} ms",
                                        host_names_[from], host_names_[to], l.gbps, l.latency_ms));
  return link_cfg_.emplace(key, l).first->second;
}

std::size_t Sim::link_rt(std::size_t from, std::size_t to) {
  auto key = std::make_pair(from, to);
  if (auto it = link_ix_.find(key); it != link_ix_.end()) return it->second;
  LinkRt l;
  l.cfg = link_cfg(from, to);
  l.from = from;
  l.to = to;
  l.lane = out_.lanes.size();
  out_.lanes.push_back(
      {host_names_[from] + "->" + host_names_[to], LaneKind::kTransfer, host_names_[from], {}});
  acc_.emplace_back();
  link_ix_.emplace(key, links_.size());
  links_.push_back(std::move(l));
  return links_.size() - 1;
}

template <class It>
std::vector<ClaimEntry> Sim::claim_entries(It first, It last) const {
  std::vector<ClaimEntry> out;
  for (; first != last && out.size() < static_cast<std::size_t>(kClaimWindow); ++first) {
    const std::size_t job = [&] {
      if constexpr (std::is_same_v<std::decay_t<decltype(*first)>, std::size_t>)
        return *first;
      else
        return first->second;
    }();
    const long long ms = std::llround(jobs_[job].ready_s * 1000);
    out.push_back({"", ms, static_cast<long long>(job), in_[job].priority, in_[job].user,
                   classes_[jobs_[job].cls], false});
  }
  return out;
}

bool Sim::policy_allows(std::size_t pool, const ClaimEntry& e) {
  const PoolRt& p = pools_[pool];
  const std::size_t head = static_cast<std::size_t>(e.seq);
  // What a live pool would observe (board_model.h): each pool's busy-until (the pool holding
  // its GPU group's task), the queues and the work still upstream, the decode side.
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const GroupRt& g = groups_[pools_[i].group];
    seen_.pools[i].busy_for_s = g.busy && g.holder == i ? std::max(0.0, g.expected_end - now_) : 0;
  }
  Backlog& b = seen_.backlog;
  b.encode_queued = encode_q_.size(), b.encoding = encoding_;
  b.sample_queued = sample_q_.size(), b.sampling = sampling_;
  // Latents on their way to this host are not part of a decoder's claim observation: a live
  // decoder cannot see them (they sit in the senders' outboxes on other hosts; PoolBoard passes
  // 0, pool_board.h), and the plan decides as production does (#36 item 5).  They still count
  // in the decode-host choice's load (decode_load below), as the sampler's own outbox does live.
  b.decode_queued_here = decode_q_[p.host].size(), b.in_transit_here = 0;
  const std::size_t cls = jobs_[head].cls;
  const bool claims = model_.should_claim(pool, class_models_[cls], seen_);
  if (opt_.on_claim) {
    ClaimTrace tr{now_, pool, classes_[cls], seen_, seen_.decode_load(), claims};
    tr.seen.decode_load = nullptr;
    opt_.on_claim(tr);
  }
  return claims;
}

bool Sim::try_claim(std::size_t pool) {
  PoolRt& p = pools_[pool];
  // The job the claim order takes (docs/design.md, "The claim order"), as the live claim does.
  std::vector<ClaimEntry> entries;
  ShareState* share = nullptr;
  if (p.cfg->stage == StageKind::kEncode) {
    if (encode_q_.empty()) return false;
    entries = claim_entries(encode_q_.begin(), encode_q_.end());
    share = &encode_share_;
  } else if (p.cfg->stage == StageKind::kSample) {
    if (sample_q_.empty()) return false;
    entries = claim_entries(sample_q_.begin(), sample_q_.end());
    share = &sample_share_;
  } else {
    if (decode_q_[p.host].empty()) return false;
    entries = claim_entries(decode_q_[p.host].begin(), decode_q_[p.host].end());
    share = &decode_share_[p.host];
  }
  // The claim as the live Claimer makes it (dispatch::claim_next): the order's pick, the
  // dispatch policy asked about it, the share charged when it is taken.
  const auto at = claim_next(orders_[pool], entries, *share, std::llround(now_ * 1000),
                             [&](std::size_t i) { return policy_allows(pool, entries[i]); });
  if (!at) return false;
  const std::size_t head = static_cast<std::size_t>(entries[*at].seq);
  const auto k = static_cast<std::ptrdiff_t>(*at);
  if (p.cfg->stage == StageKind::kEncode)
    encode_q_.erase(encode_q_.begin() + k), ++encoding_;
  else if (p.cfg->stage == StageKind::kSample)
    sample_q_.erase(sample_q_.begin() + k), ++sampling_;
  else
    decode_q_[p.host].erase(std::next(decode_q_[p.host].begin(), k));
  start(pool, head);
  return true;
}

void Sim::start(std::size_t pool, std::size_t job) {
  PoolRt& p = pools_[pool];
  JobRt& j = jobs_[job];
  const double d = draw_seconds(*p.profile[j.cls], opt_.stochastic, rng_, p.cycle_pos[j.cls],
                                c_.time_scale > 0 ? c_.time_scale : 1.0);
  auto& g = groups_[p.group];
  g.busy = true;
  g.holder = pool;
  g.expected_end = now_ + class_models_[j.cls].committed_s[pool];
  record(p.lane, job, now_, now_ + d, j.ready_s);
  if (opt_.record) {
    auto& r = out_.job_records[job];
    switch (p.cfg->stage) {
      case StageKind::kEncode:
        r.encode_start_s = now_, r.encode_end_s = now_ + d, r.encode_pool = p.cfg->name;
        break;
      case StageKind::kSample:
        r.sample_start_s = now_, r.sample_end_s = now_ + d, r.sample_pool = p.cfg->name;
        break;
      case StageKind::kDecode:
        r.decode_start_s = now_, r.decode_end_s = now_ + d, r.decode_pool = p.cfg->name;
        break;
    }
  }
  push(now_ + d, Ev::kPoolDone, pool, job);
}

std::size_t Sim::group_sampler(std::size_t group, std::size_t cls) const {
  for (std::size_t q : groups_[group].by_stage[static_cast<int>(StageKind::kSample)])
    if (std::isfinite(pools_[q].expected[cls])) return q;
  return kNone;
}

void Sim::dispatch() {
  // Repeat until nothing changes: a claim changes the peers' view (free_in) and the queues.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& g : groups_) {
      if (g.busy) continue;
      // The lease: a job encoded on these GPUs is sampled on them next, before anything else.
      if (!g.encoded.empty()) {
        const std::size_t job = g.encoded.front();
        g.encoded.pop_front();
        ++sampling_;
        start(group_sampler(static_cast<std::size_t>(&g - groups_.data()), jobs_[job].cls), job);
        changed = true;
        continue;
      }
      for (int s : {2, 1, 0}) {  // downstream first
        for (std::size_t pool : g.by_stage[s])
          if (try_claim(pool)) {
            changed = true;
            break;
          }
        if (g.busy) break;
      }
    }
  }
}

void Sim::arrive(std::size_t job, std::size_t host) {
  JobRt& j = jobs_[job];
  j.ready_s = now_;
  decode_q_[host].insert({j.sample_end_s, job});
}

void Sim::route_latent(std::size_t job, std::size_t from) {
  JobRt& j = jobs_[job];
  const std::uint64_t bytes = class_bytes_[j.cls];

  // The one decode-host choice (decode_route.h), fed from the simulator's clock.
  for (std::size_t h : decode_hosts_)
    if (h != from) (void)link_cfg(from, h);  // warns once about a missing link
  const DecodeLoad load = decode_load({host_names_[from]});
  auto route = dispatch::route_latent(c_, {host_names_[from]}, classes_[j.cls], bytes, load);
  const std::size_t to = route ? host_ix_.at(route->host) : decode_hosts_.front();
  if (opt_.on_route)
    opt_.on_route({now_, host_names_[from], classes_[j.cls], host_names_[to], bytes, load});
  j.decode_host = to;
  if (opt_.record) out_.job_records[job].decode_host = host_names_[to];
  if (to == from) return arrive(job, to);
  const std::size_t li = link_rt(from, to);
  LinkRt& l = links_[li];
  const double tt = transfer_seconds(bytes, l.cfg);
  l.backlog_end = std::max(now_, l.backlog_end) + tt;
  l.queue.push_back(job);
  j.ready_s = now_;
  ++in_transit_[to];
  if (!l.busy) start_link(li);
}

DecodeLoad Sim::decode_load(const std::vector<std::string>& from_hosts) const {
  DecodeLoad load;
  for (std::size_t h : decode_hosts_) {
    load.queued[host_names_[h]] = decode_q_[h].size() + in_transit_[h];
    for (std::size_t d : host_decoders_[h])
      load.decoder_free_in_s[pools_[d].cfg->name] = free_in(d);
    for (const auto& f : from_hosts) {
      if (f.empty() || !host_ix_.count(f)) continue;
      if (auto it = link_ix_.find({host_ix_.at(f), h}); it != link_ix_.end())
        load.link_backlog_s[{f, host_names_[h]}] =
            std::max(0.0, links_[it->second].backlog_end - now_);
    }
  }
  return load;
}

void Sim::start_link(std::size_t li) {
  LinkRt& l = links_[li];
  if (l.busy || l.queue.empty()) return;
  const std::size_t job = l.queue.front();
  l.queue.pop_front();
  l.busy = true;
  const double d = transfer_seconds(class_bytes_[jobs_[job].cls], l.cfg);
  record(l.lane, job, now_, now_ + d, jobs_[job].ready_s);
  if (opt_.record)
    out_.job_records[job].transfer_start_s = now_, out_.job_records[job].transfer_end_s = now_ + d;
  push(now_ + d, Ev::kLinkDone, li, job);
}

void Sim::on_link_done(std::size_t li, std::size_t job) {
  LinkRt& l = links_[li];
  l.busy = false;
  --in_transit_[l.to];
  arrive(job, l.to);
  start_link(li);
}

void Sim::on_pool_done(std::size_t pool, std::size_t job) {
  PoolRt& p = pools_[pool];
  groups_[p.group].busy = false;
  JobRt& j = jobs_[job];
  switch (p.cfg->stage) {
    case StageKind::kEncode:
      --encoding_;
      j.ready_s = now_;
      if (p.leases_group && group_sampler(p.group, j.cls) != kNone)
        groups_[p.group].encoded.push_back(job);
      else
        sample_q_.push_back(job);
      break;
    case StageKind::kSample:
      --sampling_;
      j.sample_host = p.host;
      j.sample_end_s = now_;
      route_latent(job, p.host);
      break;
    case StageKind::kDecode:
      ++done_;
      if (done_ == 1) out_.first_completion_s = now_;
      out_.last_completion_s = std::max(out_.last_completion_s, now_);
      break;
  }
}

Result<SimResult> Sim::run() {
  H3_TRY(build());
  out_.jobs = in_.size();
  if (opt_.record) {
    out_.job_records.resize(in_.size());
    for (std::size_t j = 0; j < in_.size(); ++j) {
      out_.job_records[j].id = in_[j].id;
      out_.job_records[j].job_class = in_[j].job_class;
      out_.job_records[j].submit_s = in_[j].submit_s;
    }
  }
  for (std::size_t j = 0; j < in_.size(); ++j)
    push(std::max(0.0, in_[j].submit_s), Ev::kSubmit, 0, j);
  while (!events_.empty()) {
    now_ = events_.top().t;
    // Apply every event at this instant before dispatching, so simultaneous completions are
    // seen together (as heartbeats would show them).
    while (!events_.empty() && events_.top().t == now_) {
      Event e = events_.top();
      events_.pop();
      switch (e.kind) {
        case Ev::kSubmit:
          jobs_[e.job].ready_s = now_;
          (has_encode_[jobs_[e.job].cls] ? encode_q_ : sample_q_).push_back(e.job);
          break;
        case Ev::kPoolDone:
          on_pool_done(e.who, e.job);
          break;
        case Ev::kLinkDone:
          on_link_done(e.who, e.job);
          break;
      }
    }
    dispatch();
  }
  if (done_ != in_.size())
    return make_error(errc::plan::kStuck,
                      "the simulation stopped with {} of {} jobs done (a bug: please report)",
                      done_, in_.size());
  out_.makespan_s = out_.last_completion_s;
  out_.throughput_per_hour =
      out_.makespan_s > 0 ? static_cast<double>(in_.size()) / out_.makespan_s * 3600 : 0;
  out_.stats.reserve(acc_.size());
  for (const LaneAcc& a : acc_) out_.stats.push_back(a.stats(out_.makespan_s));
  return std::move(out_);
}

}  // namespace

Result<SimResult> simulate(const config::Cluster& cluster, const std::vector<SimJob>& jobs,
                           const SimOptions& options) {
  Sim sim(cluster, jobs, options);
  return sim.run();
}

}  // namespace h3pipe::schedule
