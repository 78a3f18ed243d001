// The cluster config's rules across objects (a pool's host must exist, ...), applied after the
// field table (fields.cpp) has read every object.  Each rule's wording is asserted by tests
// (tests/config/foundation_unit_test.cpp, tests/config/parser_regression_test.cpp).
#include <map>
#include <set>

#include "common/artifacts/artifacts.h"
#include "common/config/fields.h"

namespace h3pipe::config {

const std::vector<std::string>& cluster_rules() {
  static const std::vector<std::string> kRules = {
      "`latent_profile` and every `classes[].latent_profile` name a built-in or declared latent "
      "profile.",
      "At least one host; host names are ids (docs/security.md) and unique.",
      "Pool names are ids and unique; a pool's `host` is in `hosts`; `shares_gpus_with` names a "
      "pool.",
      "Two pools of one host do not share a non-zero `metrics_port`, nor with the host's "
      "`transfer_metrics_port`.",
      "A host's `api_port` and `api_metrics_port` differ from each other and from its pools' and "
      "transfer's metrics ports.",
      "A host's `api_tls_cert` and `api_tls_key` are both set or both left out.",
      "Every stage (encode, sample, decode) has at least one pool.",
      "A link's `from` and `to` are hosts.",
      "A `users` name is [A-Za-z0-9._@-]{1,64}.",
  };
  return kRules;
}

void check_across(const Cluster& c, Errors& e) {
  for (const auto& [name, u] : c.users)
    if (!valid_user_name(name)) e.add("/users/" + name, "a user's name is [A-Za-z0-9._@-]{1,64}");
  if (!c.find_latent_profile(c.latent_profile))
    e.add("/latent_profile", fmt::format("unknown latent profile \"{}\" (known: {})",
                                         c.latent_profile, c.latent_profile_names()));
  std::set<std::string> host_names;
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const auto& h = c.hosts[i];
    const std::string p = fmt::format("/hosts/{}", i);
    if (h.name.empty()) continue;
    if (auto s = artifacts::validate_id(p + "/name", h.name); !s.ok())
      e.add(p + "/name", s.error().message);
    if (!host_names.insert(h.name).second)
      e.add(p + "/name", fmt::format("duplicate host \"{}\"", h.name));
  }
  if (c.hosts.empty()) e.add("/hosts", "at least one host is required");
  std::set<std::string> pool_names;
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const auto& pl = c.pools[i];
    const std::string p = fmt::format("/pools/{}", i);
    if (!pl.name.empty()) {
      if (auto s = artifacts::validate_id(p + "/name", pl.name); !s.ok())
        e.add(p + "/name", s.error().message);
      if (!pool_names.insert(pl.name).second)
        e.add(p + "/name", fmt::format("duplicate pool \"{}\"", pl.name));
    }
    if (!pl.host.empty() && !host_names.count(pl.host))
      e.add(p + "/host", fmt::format("\"{}\" is not a host in /hosts", pl.host));
  }
  // Two pools of one host on one metrics port: the second cannot bind (was a 30 s start timeout).
  std::map<std::pair<std::string, int>, std::size_t> metrics_ports;
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const auto& pl = c.pools[i];
    if (pl.metrics_port == 0) continue;
    auto [it, fresh] = metrics_ports.emplace(std::make_pair(pl.host, pl.metrics_port), i);
    if (!fresh)
      e.add(fmt::format("/pools/{}/metrics_port", i),
            fmt::format("{} is already the metrics port of pool \"{}\" on host \"{}\"",
                        pl.metrics_port, c.pools[it->second].name, pl.host));
  }
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const auto& h = c.hosts[i];
    if (h.transfer_metrics_port == 0) continue;
    if (auto it = metrics_ports.find({h.name, h.transfer_metrics_port}); it != metrics_ports.end())
      e.add(fmt::format("/hosts/{}/transfer_metrics_port", i),
            fmt::format("{} is already the metrics port of pool \"{}\" on host \"{}\"",
                        h.transfer_metrics_port, c.pools[it->second].name, h.name));
  }
  // h3pipe-api's two ports (docs/api.md) are on the same host as its services' metrics ports.
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const auto& h = c.hosts[i];
    for (const auto& [field, port] : {std::pair<const char*, int>{"api_port", h.api_port},
                                      {"api_metrics_port", h.api_metrics_port}}) {
      if (port == 0) continue;
      std::string other;
      if (auto it = metrics_ports.find({h.name, port}); it != metrics_ports.end())
        other = fmt::format("the metrics port of pool \"{}\"", c.pools[it->second].name);
      else if (port == h.transfer_metrics_port)
        other = "its transfer_metrics_port";
      else if (field == std::string("api_metrics_port") && port == h.api_port)
        other = "its api_port";
      if (!other.empty())
        e.add(fmt::format("/hosts/{}/{}", i, field),
              fmt::format("{} is already {} on host \"{}\"", port, other, h.name));
    }
  }
  // Its own certificate: both files or neither (the words of h3pipe-api's --tls-* flags).
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const auto& h = c.hosts[i];
    if (h.api_tls_cert.empty() != h.api_tls_key.empty())
      e.add(fmt::format("/hosts/{}/{}", i, h.api_tls_cert.empty() ? "api_tls_cert" : "api_tls_key"),
            fmt::format("api_tls_cert and api_tls_key go together (got only {})",
                        h.api_tls_cert.empty() ? "api_tls_key" : "api_tls_cert"));
  }
  for (std::size_t i = 0; i < c.classes.size(); ++i) {
    const auto& lp = c.classes[i].latent_profile;
    if (!lp.empty() && !c.find_latent_profile(lp))
      e.add(fmt::format("/classes/{}/latent_profile", i),
            fmt::format("unknown latent profile \"{}\" (known: {})", lp, c.latent_profile_names()));
  }
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const auto& sw = c.pools[i].shares_gpus_with;
    if (!sw.empty() && !pool_names.count(sw))
      e.add(fmt::format("/pools/{}/shares_gpus_with", i), fmt::format("\"{}\" is not a pool", sw));
  }
  // A stage without a pool is a stack where every job waits forever (the planner can model a
  // cluster without encoders, but no such cluster can run: ingest lives in the encoder service).
  static const std::pair<StageKind, const char*> kEveryStage[] = {
      {StageKind::kEncode, "submissions are ingested by the encoder service"},
      {StageKind::kSample, "nothing would sample the encoded jobs"},
      {StageKind::kDecode, "nothing would decode the sampled latents into MP4s"}};
  for (const auto& [s, why] : kEveryStage) {
    if (c.pools_on("", s).empty())
      e.add("/pools", fmt::format("no pool runs stage {}: {}, so every job would wait forever; "
                                  "add a pool with \"stage\": \"{}\"",
                                  stage_name(s), why, stage_name(s)));
  }
  for (std::size_t i = 0; i < c.links.size(); ++i) {
    const auto& l = c.links[i];
    const std::string p = fmt::format("/links/{}", i);
    if (!l.from.empty() && !host_names.count(l.from))
      e.add(p + "/from", fmt::format("\"{}\" is not a host", l.from));
    if (!l.to.empty() && !host_names.count(l.to))
      e.add(p + "/to", fmt::format("\"{}\" is not a host", l.to));
  }
}

}  // namespace h3pipe::config
