#include "common/worker/decode_choice.h"

#include <algorithm>
#include <map>

#include "common/latent/latent.h"
#include "common/spec/spec.h"
#include "common/worker/worker.h"

namespace h3pipe::worker {
namespace {

double decode_seconds(const config::Cluster& c, const config::Pool& p, const std::string& job_class) {
  const config::Profile* prof = p.profile_for(job_class);
  if (!prof) return 1.0;  // no profile: every decode pool counts the same
  return std::max(1e-6, prof->expected() * c.time_scale);
}

const config::Link* link_between(const config::Cluster& c, const std::string& a, const std::string& b) {
  for (const auto& l : c.links)
    if ((l.from == a && l.to == b) || (l.from == b && l.to == a)) return &l;
  return nullptr;
}

}  // namespace

std::vector<DecodeCandidate> score_decode_hosts(const config::Cluster& c, const std::string& self,
                                                const pb::StageTask& task, queue::Redis* redis) {
  const auto& s = task.spec();
  const std::string cls = c.class_of(s.width(), s.height(), s.frames(), s.steps(), s.job_class());
  // The job's latent profile gives the transfer size (docs/latent.md); an unknown one (refused at
  // submission) counts as builtin.
  auto profile = spec::latent_profile(s, c);
  const double bytes = static_cast<double>(latent::latent_bytes(
      profile.ok() ? *profile : latent::builtin_profile(),
      {s.width(), s.height(), s.frames(), s.fps() ? s.fps() : 24}));
  // Decode pools per host, in config order of first appearance.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const config::Pool*>> pools;
  for (const auto* p : c.pools_on("", config::StageKind::kDecode)) {
    if (!pools.count(p->host)) order.push_back(p->host);
    pools[p->host].push_back(p);
  }
  std::vector<DecodeCandidate> out;
  for (const auto& h : order) {
    DecodeCandidate d;
    d.host = h;
    double mean = 0;
    for (const auto* p : pools[h]) mean += decode_seconds(c, *p, cls);
    mean /= static_cast<double>(pools[h].size());
    d.decode_s = mean;
    if (h != self) {
      const auto* l = link_between(c, self, h);
      const double gbps = l && l->gbps > 0 ? l->gbps : 1.0;
      d.transfer_s = bytes * 8 / (gbps * 1e9) + (l ? l->latency_ms / 1000.0 : 0.0005);
    }
    if (redis) {
      auto r = redis->command({"XLEN", stream_for(config::StageKind::kDecode, h)});
      if (r.ok() && r->get()->type == REDIS_REPLY_INTEGER)
        d.backlog_s = static_cast<double>(r->get()->integer) * mean / static_cast<double>(pools[h].size());
    }
    out.push_back(d);
  }
  std::stable_sort(out.begin(), out.end(), [&](const DecodeCandidate& a, const DecodeCandidate& b) {
    if (a.total() != b.total()) return a.total() < b.total();
    return a.host == self && b.host != self;
  });
  return out;
}

std::string choose_decode_host(const config::Cluster& c, const std::string& self, const pb::StageTask& task,
                               queue::Redis* redis) {
  auto scored = score_decode_hosts(c, self, task, redis);
  return scored.empty() ? self : scored.front().host;
}

}  // namespace h3pipe::worker
