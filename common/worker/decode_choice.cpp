#include "common/worker/decode_choice.h"

#include <algorithm>
#include <set>

#include "common/latent/latent.h"
#include "common/spec/spec.h"
#include "common/worker/worker.h"

namespace h3pipe::worker {

schedule::DecodeLoad decode_load(const config::Cluster& c, queue::Redis* redis) {
  schedule::DecodeLoad load;
  if (!redis) return load;
  std::set<std::string> hosts;
  for (const auto* p : c.pools_on("", config::StageKind::kDecode)) hosts.insert(p->host);
  std::vector<std::string> order(hosts.begin(), hosts.end());
  std::vector<std::vector<std::string>> cmds;
  for (const auto& h : order) cmds.push_back({"XLEN", stream_for(config::StageKind::kDecode, h)});
  auto r = redis->pipeline(cmds);
  if (!r.ok()) return load;
  for (std::size_t i = 0; i < order.size() && i < r->size(); ++i) {
    const redisReply* x = (*r)[i].get();
    if (x && x->type == REDIS_REPLY_INTEGER && x->integer > 0)
      load.queued[order[i]] = static_cast<std::size_t>(x->integer);
  }
  return load;
}

std::string job_class_of(const config::Cluster& c, const pb::StageTask& task) {
  const auto& s = task.spec();
  return c.class_of(s.width(), s.height(), s.frames(), s.steps(), s.job_class());
}

// The job's latent profile gives the transfer size (docs/latent.md); an unknown one (refused at
// submission) counts as builtin.
std::uint64_t latent_bytes_of(const config::Cluster& c, const pb::StageTask& task) {
  const auto& s = task.spec();
  auto profile = spec::latent_profile(s, c);
  return latent::latent_bytes(profile.ok() ? *profile : latent::builtin_profile(),
                              {s.width(), s.height(), s.frames(), s.fps() ? s.fps() : 24});
}

std::vector<DecodeCandidate> score_decode_hosts(const config::Cluster& c,
                                                const std::vector<std::string>& holders,
                                                const pb::StageTask& task, queue::Redis* redis) {
  const auto load = decode_load(c, redis);
  const auto hosts = schedule::decode_hosts(c, holders, job_class_of(c, task), latent_bytes_of(c, task), load);
  // Rank by taking the shared choice's pick out, one host at a time, so the order is its order.
  std::vector<schedule::DecodeHostState> left = hosts;
  std::vector<DecodeCandidate> out;
  while (auto pick = schedule::choose_decode_host(left)) {
    const auto& h = left[*pick];
    DecodeCandidate d;
    d.host = h.host;
    d.transfer_s = h.transfer_s;
    d.decode_s = schedule::kCannotRun;
    for (const auto& p : h.decoders)
      if (p.alive) d.decode_s = std::min(d.decode_s, p.expected_s);
    d.done_s = schedule::expected_decode_completion(h);
    out.push_back(std::move(d));
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(*pick));
  }
  return out;
}

std::string choose_decode_host(const config::Cluster& c, const std::vector<std::string>& holders,
                               const pb::StageTask& task, queue::Redis* redis) {
  auto route = schedule::route_latent(c, holders, job_class_of(c, task), latent_bytes_of(c, task),
                                      decode_load(c, redis));
  if (route) return route->host;
  return holders.empty() ? std::string() : holders.front();
}

ResumeTarget resume_decode_target(const config::Cluster& c, const std::vector<std::string>& holders,
                                  const pb::StageTask& task, queue::Redis* redis) {
  auto hosts = schedule::decode_hosts(c, holders, job_class_of(c, task), latent_bytes_of(c, task), decode_load(c, redis));
  std::vector<schedule::DecodeHostState> here;
  for (const auto& h : hosts)
    if (h.local) here.push_back(h);
  if (auto pick = schedule::choose_decode_host(here)) return {here[*pick].host, false};
  auto pick = schedule::choose_decode_host(hosts);
  if (!pick) return {};
  return {hosts[*pick].host, !holders.empty()};
}

}  // namespace h3pipe::worker
