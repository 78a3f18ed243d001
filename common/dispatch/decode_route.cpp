#include "common/dispatch/decode_route.h"

#include <algorithm>

#include "common/dispatch/geometry.h"

namespace h3pipe::dispatch {

config::Link link_between(const config::Cluster& c, std::string_view from, std::string_view to,
                          bool* found) {
  const config::Link* exact = nullptr;
  const config::Link* reverse = nullptr;
  for (const auto& l : c.links) {
    if (l.from == from && l.to == to && !exact) exact = &l;
    if (l.from == to && l.to == from && !reverse) reverse = &l;
  }
  if (found) *found = exact || reverse;
  return exact ? *exact : reverse ? *reverse : config::Link{};
}

std::vector<DecodeHostState> decode_hosts(const config::Cluster& c,
                                          const std::vector<std::string>& holders,
                                          std::string_view job_class, std::uint64_t latent_bytes,
                                          const DecodeLoad& load) {
  const double scale = c.time_scale > 0 ? c.time_scale : 1.0;
  bool any_profile = false;
  for (const auto& p : c.pools)
    if (p.stage == config::StageKind::kDecode && p.profile_for(job_class)) any_profile = true;
  std::vector<DecodeHostState> out;
  std::map<std::string, std::size_t> index;
  for (const auto& p : c.pools) {
    if (p.stage != config::StageKind::kDecode) continue;
    auto [it, fresh] = index.emplace(p.host, out.size());
    if (fresh) {
      DecodeHostState h;
      h.host = p.host;
      h.local = std::find(holders.begin(), holders.end(), p.host) != holders.end();
      if (!h.local && !holders.empty()) {
        auto b = load.link_backlog_s.find({holders.front(), p.host});
        h.transfer_s = (b == load.link_backlog_s.end() ? 0.0 : std::max(0.0, b->second)) +
                       transfer_seconds(latent_bytes, link_between(c, holders.front(), p.host));
      }
      if (auto q = load.queued.find(p.host); q != load.queued.end()) h.queued = q->second;
      out.push_back(std::move(h));
    }
    PoolState s;
    s.name = p.name;
    const config::Profile* prof = p.profile_for(job_class);
    s.expected_s = prof ? std::max(0.0, prof->expected()) * scale : any_profile ? kCannotRun : 1.0;
    if (auto f = load.decoder_free_in_s.find(p.name); f != load.decoder_free_in_s.end())
      s.free_in_s = std::max(0.0, f->second);
    s.alive = !load.dead_pools.count(p.name);
    out[it->second].decoders.push_back(std::move(s));
  }
  return out;
}

std::optional<DecodeRoute> route_latent(const config::Cluster& c,
                                        const std::vector<std::string>& holders,
                                        std::string_view job_class, std::uint64_t latent_bytes,
                                        const DecodeLoad& load) {
  const auto hosts = decode_hosts(c, holders, job_class, latent_bytes, load);
  const auto pick = choose_decode_host(hosts);
  if (!pick) return std::nullopt;
  const auto& h = hosts[*pick];
  return DecodeRoute{h.host, h.transfer_s, expected_decode_completion(h)};
}

void fill_decode_side(const config::Cluster& c, const std::vector<std::string>& pool_hosts,
                      std::string_view job_class, std::uint64_t latent_bytes,
                      const DecodeLoad& load, Lookahead& la) {
  la.decode_hosts = decode_hosts(c, {}, job_class, latent_bytes, load);
  la.transfer_s.assign(pool_hosts.size(), {});
  for (std::size_t i = 0; i < pool_hosts.size(); ++i) {
    if (pool_hosts[i].empty()) continue;
    for (const auto& h : la.decode_hosts) {
      double t = 0;
      if (h.host != pool_hosts[i]) {
        auto b = load.link_backlog_s.find({pool_hosts[i], h.host});
        t = (b == load.link_backlog_s.end() ? 0.0 : std::max(0.0, b->second)) +
            transfer_seconds(latent_bytes, link_between(c, pool_hosts[i], h.host));
      }
      la.transfer_s[i].push_back(t);
    }
  }
}

double route_tail_s(const config::Cluster& c, std::string_view host, std::string_view job_class,
                    std::uint64_t latent_bytes) {
  const auto r = route_latent(c, {std::string(host)}, job_class, latent_bytes, {});
  return r ? r->done_in_s : 0.0;
}

}  // namespace h3pipe::dispatch
