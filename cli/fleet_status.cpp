// What `status` prints about the hosts and pools (issue #34 P12, #35 D3).  The heartbeats, dead
// pools and stalled stages are common/api/fleet.h's, the code GET /v1/fleet and /v1/runs/{id}
// answer with; only the text is here.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "cli/cli.h"

namespace h3pipe::cli {

void print_pool_lives(const config::Cluster& c, const std::vector<PoolLife>& lives) {
  fmt::print("hosts and pools (heartbeat ages by Redis's clock):\n");
  for (const auto& h : c.hosts) {
    std::optional<double> newest;
    bool any = false, any_live = false;
    for (const auto& l : lives) {
      if (l.host != h.name) continue;
      any = true;
      any_live = any_live || l.live;
      if (l.age_s && l.age_s >= 0 && (!newest || *l.age_s < *newest)) newest = l.age_s;
    }
    if (!any) continue;  // a host with no pools (transfer only) beats nothing
    if (any_live)
      fmt::print("  {:<20} live, last heartbeat {} s ago\n", h.name,
                 api::age_text(newest.value_or(0)));
    else if (newest)
      fmt::print("  {:<20} dead: no heartbeat for {} s\n", h.name, api::age_text(*newest));
    else
      fmt::print("  {:<20} dead: no heartbeat from any of its pools\n", h.name);
    for (const auto& l : lives)
      if (l.host == h.name)
        fmt::print("    {:<18} {:<7} {}\n", l.pool, config::stage_name(l.stage), l.said());
  }
}

int cmd_drain(const Global& g, const std::string& pool, bool drain) {
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return kExitUsage;
  }
  auto redis = connect(g, *c);
  if (!redis.ok()) return fail(redis.error());
  const char* user = std::getenv("USER");
  auto done = api::set_pool_drained(**redis, *c, pool, drain,
                                    fmt::format("cli:{}", user && *user ? user : "?"));
  if (!done.ok()) return fail(done.error());
  if (!*done) {
    std::string names;
    for (const auto& p : c->pools) names += (names.empty() ? "" : ", ") + p.name;
    fmt::print(stderr, "no pool named \"{}\" in the cluster config (its pools: {})\n", pool, names);
    return kExitUsage;
  }
  if (drain)
    fmt::print("pool {} drained: it claims nothing more; its task in progress finishes\n", pool);
  else
    fmt::print("pool {} undrained: it claims again\n", pool);
  return kExitOk;
}

void register_drain_commands(CLI::App& app, const Global& g, int& rc) {
  static std::string pool;
  for (const bool drain : {true, false}) {
    CLI::App* s = app.add_subcommand(
        drain ? "drain" : "undrain",
        drain ? "drain a pool: it claims nothing more (its task in progress finishes)"
              : "undrain a pool: it claims again");
    s->add_option("pool", pool, "the pool's name")->required();
    s->callback([&g, &rc, drain] { rc = cmd_drain(g, pool, drain); });
  }
}

}  // namespace h3pipe::cli
