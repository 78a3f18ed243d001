// h3pipe prometheus targets: the cluster's Prometheus file_sd targets (common/deploy/targets.h;
// docs/observability.md, "Scraping").
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/cli.h"
#include "common/deploy/targets.h"
#include "common/supervisor/supervisor.h"

namespace h3pipe::cli {
namespace {

// The host of the stack running for this state dir ("" when none runs here).
std::string local_stack_host(const config::Cluster& c) {
  const auto st = supervisor::running(c);
  return st ? st->value("host", "") : "";
}

}  // namespace

void write_prometheus_targets(const config::Cluster& c, const nlohmann::json& stack) {
  deploy::TargetsOptions o;
  o.local_host = stack.value("host", "");
  auto t = deploy::prometheus_targets(c, o);
  if (!t.ok()) return;
  const auto file = deploy::state_targets_file(c);
  if (auto s = deploy::write_targets(file, t->groups); !s.ok()) {
    fmt::print(stderr, "start: prometheus targets not written: {}\n", s.error().message);
    return;
  }
  fmt::print("  prometheus {} ({} targets; file_sd, docs/observability.md){}\n", file.string(),
             t->groups.size(),
             t->missing.empty() ? ""
                                : fmt::format("; {} without a fixed port left out "
                                              "(`h3pipe prometheus targets` names them)",
                                              t->missing.size()));
}

void register_prometheus_commands(CLI::App& app, Global& g, int& rc) {
  CLI::App* prom =
      app.add_subcommand("prometheus", "Prometheus: the scrape targets of the cluster");
  prom->require_subcommand(1);
  static std::string out;
  static std::vector<std::string> hosts;
  static bool allow_missing = false;
  CLI::App* t = prom->add_subcommand(
      "targets",
      "write the file_sd JSON of every host's services (labels host, service, pool) for "
      "configs/prometheus/prometheus.yml");
  t->add_option("-o,--output", out, "the file to write (default: standard output)");
  t->add_option("--host", hosts, "only these hosts (repeatable; default: every host)");
  t->add_flag("--allow-missing", allow_missing,
              "leave out services without a fixed metrics port instead of failing");
  t->callback([&g, &rc] {
    auto c = load_cluster(g);
    if (!c.ok()) {
      rc = fail(c.error(), "prometheus targets");
      return;
    }
    deploy::TargetsOptions o;
    o.hosts = hosts;
    o.local_host = local_stack_host(*c);
    auto targets = deploy::prometheus_targets(*c, o);
    if (!targets.ok()) {
      rc = fail(targets.error(), "prometheus targets");
      return;
    }
    for (const auto& m : targets->missing) fmt::print(stderr, "prometheus targets: {}\n", m);
    if (!targets->missing.empty() && !allow_missing) {
      fmt::print(stderr,
                 "prometheus targets: {} service(s) have no fixed metrics port and no running "
                 "stack here names theirs: set the fields above (a port Prometheus can reach), or "
                 "pass --allow-missing; nothing written\n",
                 targets->missing.size());
      rc = kExitUsage;
      return;
    }
    if (out.empty()) {
      std::cout << targets->groups.dump(2) << "\n";
    } else if (auto s = deploy::write_targets(out, targets->groups); !s.ok()) {
      rc = fail(s.error(), "prometheus targets");
      return;
    } else {
      fmt::print(stderr, "prometheus targets: {} target(s) written to {}\n", targets->groups.size(),
                 out);
    }
    rc = kExitOk;
  });
}

}  // namespace h3pipe::cli
