// Subcommands whose logic lives in other modules: one declarative list.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/cli.h"
#include "common/api/run_receipts.h"
#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/latent/latent.h"
#include "common/latent/profile_json.h"
#include "common/latent/safetensors.h"
#include "common/preflight/preflight.h"
#include "common/remote/remote.h"
#include "common/runtime/settings_check.h"
#include "common/schedule/config_adapt.h"
#include "common/schedule/plan.h"
#include "common/schedule/receipts.h"
#include "common/state/receipts.h"
#include "common/supervisor/supervisor.h"
#include "common/transfer/keys.h"

namespace h3pipe::cli {

namespace {

using ProfileSources = std::vector<std::pair<const latent::LatentProfile*, const char*>>;

// `latent inspect FILE [--json] [--profile P --geometry WxHxF@FPS]`.
void register_latent_inspect(CLI::App* latent, Global& g, int& rc) {
  auto* inspect = latent->add_subcommand("inspect",
                                         "validate a latent (.h3latent v1/v2, ComfyUI .latent) and "
                                         "print its tensors, metadata and SHA-256");
  static std::string file, profile_name, geometry;
  static bool json = false;
  inspect->add_option("file", file)->required();
  inspect->add_flag("--json", json);
  auto* po = inspect->add_option(
      "--profile", profile_name,
      "check against this latent profile (built-in, or declared in the config)");
  auto* go = inspect->add_option("--geometry", geometry,
                                 "the job geometry WIDTHxHEIGHTxFRAMES@FPS, e.g. 832x480x81@16");
  po->needs(go);
  go->needs(po);
  inspect->callback([&rc, &g] {
    // The file is read at most up to the config's latent limit plus the header cap (#22).
    const auto max_bytes = [&g] {
      auto c = load_cluster(g);
      const std::uint64_t lim =
          c.ok() ? c->limits.max_latent_bytes : config::Limits{}.max_latent_bytes;
      return lim + latent::st::kMaxHeaderBytes + 8;
    };
    if (profile_name.empty()) {
      rc = latent::inspect_main(file, json, std::cout, nullptr, max_bytes());
      return;
    }
    auto job = latent::parse_job_size(geometry);
    if (!job.ok()) {
      fmt::print(stderr, "--geometry: {}\n", job.error().message);
      rc = 2;
      return;
    }
    // Declared profiles come from the config; without one the built-in table is enough.
    const latent::LatentProfile* p = latent::find_builtin_profile(profile_name);
    auto c = load_cluster(g);
    if (c.ok()) p = c->find_latent_profile(profile_name);
    if (!p) {
      fmt::print(stderr, "--profile: unknown latent profile \"{}\" (known: {})\n", profile_name,
                 c.ok() ? c->latent_profile_names() : config::Cluster{}.latent_profile_names());
      rc = 2;
      return;
    }
    const latent::Expected want{*p, *job};
    rc = latent::inspect_main(
        file, json, std::cout, &want,
        (c.ok() ? c->limits.max_latent_bytes : config::Limits{}.max_latent_bytes) +
            latent::st::kMaxHeaderBytes + 8);
  });
}

// `latent profiles`: one row per profile, where it comes from at the end.
void print_profile_table(const ProfileSources& all) {
  fmt::print("{:<14} {:>4} {:>10} {:>7} {:>8} {:>4}  {:<18} {}\n", "profile", "C", "frames",
             "spatial", "multiple", "fps", "audio", "models");
  for (auto [p, from] : all) {
    const std::string frames = p->frame_rule == latent::FrameRule::kFloor
                                   ? fmt::format(">={}", p->frame_offset)
                                   : fmt::format("{}k+{}", p->temporal_factor, p->frame_offset);
    std::string audio = "none";
    if (p->has_audio()) {
      audio = "(";
      for (std::size_t i = 0; i < p->audio.shape.size(); ++i)
        audio += (i ? "," : "") + (p->audio.shape[i] == latent::AudioRule::kLength
                                       ? std::string("L")
                                       : std::to_string(p->audio.shape[i]));
      audio += ")";
    }
    fmt::print("{:<14} {:>4} {:>10} {:>7} {:>8} {:>4}  {:<18} {}{}\n", p->name, p->channels, frames,
               p->spatial_factor, p->size_multiple, p->fps ? std::to_string(p->fps) : "any", audio,
               p->models, std::string_view(from) == "config" ? " (config)" : "");
  }
}

// `latent profiles [--json]`: the profile table as the C++ side parsed it (the node pack reads the
// same file; its tests compare the two whole tables through --json), plus the config's declared
// profiles.
void register_latent_profiles(CLI::App* latent, Global& g, int& rc) {
  auto* lp = latent->add_subcommand(
      "profiles", "list the latent profiles: built-in, and declared in the config");
  static bool lp_json = false;
  lp->add_flag("--json", lp_json, "the profiles as JSON, in the latent_profiles form");
  lp->callback([&rc, &g] {
    ProfileSources all;
    for (const auto& p : latent::builtin_profiles()) all.emplace_back(&p, "built-in");
    auto c = load_cluster(g);
    if (c.ok())
      for (const auto& [name, p] : c->latent_profiles) all.emplace_back(&p, "config");
    if (lp_json) {
      nlohmann::json out = {{"profiles", nlohmann::json::array()}};
      for (auto [p, from] : all) {
        auto j = latent::profile_to_json(*p);
        j["source"] = from;
        out["profiles"].push_back(std::move(j));
      }
      std::cout << out.dump(2) << "\n";
    } else {
      print_profile_table(all);
    }
    rc = 0;
  });
}

// `keygen`: a CURVE key pair for the transfer service.
void register_keygen(CLI::App& app, int& rc) {
  auto* kg =
      app.add_subcommand("keygen", "write a CURVE key pair DIR/NAME.pub and DIR/NAME.key (0600)");
  static std::string kg_dir = ".", kg_name = "transfer";
  static bool kg_force = false;
  kg->add_option("--dir", kg_dir, "output folder");
  kg->add_option("--name", kg_name, "file name stem");
  kg->add_flag("--force", kg_force, "overwrite existing files");
  kg->callback([&rc] {
    auto k = transfer::keygen(kg_dir, kg_name, kg_force);
    if (!k.ok()) {
      fmt::print(stderr, "keygen: {}\n", k.error().message);
      rc = 1;
      return;
    }
    fmt::print("public key {}\nsecret key {} (mode 0600)\n", k->public_path.string(),
               k->secret_path.string());
    rc = 0;
  });
}

// `preflight [--host H]`.
void register_preflight(CLI::App& app, Global& g, int& rc) {
  auto* pf = app.add_subcommand(
      "preflight", "check Redis, services, GPUs, disk, clocks, keys and ComfyUI endpoints");
  static std::string pf_host;
  pf->add_option("--host", pf_host,
                 "check this host only (default: the hosts that are this machine)");
  pf->callback([&rc, &g] {
    auto c = load_cluster(g);
    if (!c.ok()) {
      fmt::print(stderr, "{}\n", c.error().message);
      rc = 2;
      return;
    }
    rc = preflight::preflight_main(*c, pf_host, std::cout);
  });
}

}  // namespace

void register_extra_commands(CLI::App& app, Global& g, int& rc) {
  auto* latent = app.add_subcommand("latent", "latent file tools");
  register_latent_inspect(latent, g, rc);
  register_latent_profiles(latent, g, rc);
  register_planner_commands(app, g, rc);
  register_keygen(app, rc);
  register_preflight(app, g, rc);
}

namespace {

// Receipts of a run (api/run_receipts.h: Redis's, then the output folder's for any job Redis holds
// none for), in job id order: the same receipts give the same report wherever it runs.
Result<std::vector<nlohmann::json>> read_receipts(const Global& g, const std::string& run_id,
                                                  const char* command) {
  auto c = load_cluster(g);
  if (!c.ok()) return c.error();
  auto redis = connect(g, *c);
  auto got = api::run_receipts(redis.ok() ? redis->get() : nullptr, *c, run_id,
                               redis.ok() ? "" : redis.error().message);
  if (!got.ok()) return got.error();
  for (const auto& w : got->warnings) fmt::print(stderr, "warning: {}\n", w);
  if (!got->redis_error.empty())
    fmt::print(stderr, "{}: Redis not read ({}); the receipts under {} only\n", command,
               got->redis_error, (c->output_root / run_id).string());
  return std::move(got->receipts);
}

// The config a command plans with, loaded as every command loads it (the field's path in the
// message): false and rc 2 when it does not load (README: 2, bad config, nothing done).
bool config_loads(const std::string& file, const char* command, int& rc) {
  if (file.empty()) return true;
  auto c = runtime::load_config(file);
  if (c.ok()) return true;
  fmt::print(stderr, "{}: {}\n", command, c.error().message);
  rc = 2;
  return false;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

void register_planner_commands(CLI::App& app, Global& g, int& rc) {
  static schedule::PlanArgs plan;
  static std::string compare;
  auto* p = app.add_subcommand(
      "plan", "simulate a topology offline (no network, no GPU) with the live dispatch policy");
  p->add_option("--jobs", plan.jobs, "number of jobs");
  p->add_option("--class", plan.job_class, "job class (default: the config's first)");
  p->add_flag("--json", plan.json, "one JSON object");
  p->add_option("--svg", plan.svg, "write the Gantt chart");
  p->add_option("--compare", compare,
                "A.json,B.json,...: compare topologies under the threshold rule");
  p->add_option("--threshold", plan.threshold, "minimum gain to add hardware (default 0.15)");
  p->add_option("--metric", plan.metric, "end_to_end | steady");
  p->add_option("--policy", plan.policy, "completion_time | first_free");
  p->add_flag("--stochastic", plan.stochastic, "draw normal profiles");
  p->add_option("--seed", plan.seed, "seed for --stochastic");
  p->add_option("--batch", plan.source.batches,
                "FILE[@SECONDS]: plan this batch (users, priorities per line), submitted at "
                "SECONDS (repeatable)");
  p->add_option("--mix", plan.source.mix,
                "USER:JOBS[:PRIORITY][@SECONDS],...: a generated mix of users and priorities");
  p->add_option("--user", plan.source.user, "the user of batch lines without one");
  p->add_option("--priority", plan.source.priority, "the priority of batch lines without one");
  p->callback([&rc, &g] {
    plan.config = g.config_file;
    plan.compare = split_commas(compare);
    // The planner reads the files itself; the runtime settings are checked here first, as
    // `start` and the services check them (runtime/settings_check.h).
    std::vector<std::string> files = plan.compare;
    if (!plan.config.empty()) files.insert(files.begin(), plan.config);
    for (const auto& f : files) {
      if (f.empty()) continue;
      auto c = runtime::load_config(f);
      if (!c.ok()) {
        fmt::print(stderr, "plan: {}\n", c.error().message);
        rc = 2;
        return;
      }
    }
    rc = schedule::run_plan(plan, std::cout, std::cerr);
  });

  static schedule::ConfigAdaptArgs adapt;
  auto* a = app.add_subcommand("config-adapt", "write a full cluster config from a short host map");
  a->add_option("host_map", adapt.host_map)->required();
  a->add_option("-o,--output", adapt.output, "output file (default: stdout)");
  a->add_option("--gpus", adapt.gpu_table, "GPU table (default: the built-in configs/gpus.json)");
  a->add_flag("--force", adapt.force, "overwrite the output");
  a->callback([&rc] {
    rc = schedule::run_config_adapt(adapt, std::cout, std::cerr);
    // deploy/<host>.env beside the config, for the compose launcher (compose_env.cpp).
    if (rc == 0 && !adapt.output.empty())
      rc = write_compose_envs(adapt.output, adapt.force, std::cout, std::cerr);
  });

  static schedule::ProfileLearnArgs learn;
  static std::string learn_run;
  auto* prof = app.add_subcommand("profile", "stage-time profiles");
  auto* l = prof->add_subcommand("learn", "fit per pool and class profiles from a run's receipts");
  l->add_option("run_id", learn_run)->required();
  l->add_option("-o,--output", learn.output, "write the config with the learned profiles");
  l->add_option("--min-samples", learn.min_samples);
  l->add_flag("--json", learn.json);
  l->callback([&rc, &g] {
    // The receipts came from the stack that runs here: update its config, or the embedded one.
    learn.config = config_file_in_use(g);
    if (!config_loads(learn.config, "profile learn", rc)) return;
    if (learn.config.empty()) learn.config_text = config::embedded_default_text();
    auto r = read_receipts(g, learn_run, "profile learn");
    if (!r.ok()) {
      fmt::print(stderr, "{}\n", r.error().message);
      rc = 1;
      return;
    }
    learn.receipts = std::move(*r);
    rc = schedule::run_profile_learn(learn, std::cout, std::cerr);
  });

  static schedule::ReportArgs report;
  static std::string report_run;
  auto* rep = app.add_subcommand(
      "report", "the measured Gantt of a run and, with a config, plan against actual");
  rep->add_option("run_id", report_run)->required();
  rep->add_option("--svg", report.svg, "measured Gantt SVG");
  rep->add_option("--plan-svg", report.plan_svg, "planned Gantt SVG");
  rep->add_option("--policy", report.policy);
  rep->add_flag("--json", report.json);
  rep->callback([&rc, &g] {
    // --config, else the config the stack running here was started with (its stack.json): the
    // plan and the job classes are that config's (issue #34 P10).
    report.config = config_file_in_use(g);
    if (!config_loads(report.config, "report", rc)) return;
    // A stack running here on the embedded default config: that config plans.
    std::optional<config::Cluster> embedded;
    report.cluster = nullptr;
    if (report.config.empty())
      if (auto c = load_cluster(g); c.ok() && supervisor::running(*c)) {
        embedded = std::move(*c);
        report.cluster = &*embedded;
      }
    auto r = read_receipts(g, report_run, "report");
    if (!r.ok()) {
      fmt::print(stderr, "{}\n", r.error().message);
      rc = 1;
      return;
    }
    report.receipts = std::move(*r);
    rc = schedule::run_report(report, std::cout, std::cerr);
    report.cluster = nullptr;
  });
}

void add_fleet_options(CLI::App* s, FleetOptions& f) {
  s->add_flag("--all", f.all, "every host of the config, over SSH (hosts[].ssh)");
  s->add_option("--launcher", f.launcher,
                "native (h3pipe start on each host), compose, or systemd (h3pipe systemd install "
                "on each host: units that come back after a reboot)")
      ->check(CLI::IsMember({"native", "compose", "systemd"}));
  s->add_option("--compose-dir", f.compose_dir, "where compose.yaml lives on each host");
  s->add_option(
      "--compose-cmd", f.compose_cmd,
      "compose: the command on the hosts, \"docker compose\" or docker-compose "
      "(default auto: `docker compose version`, else `docker-compose version`, per host)");
  s->add_option("--remote-config", f.remote_config,
                "the config path as the hosts see it (default: --config)");
  s->add_option("--remote-bin", f.remote_bin,
                "native: the h3pipe CLI on the hosts (default: h3pipe on their PATH)");
  s->add_option("--ssh-config", f.ssh_config,
                "the ssh client config with the hosts' aliases (ssh -F; default: ~/.ssh/config)")
      ->check(CLI::ExistingFile);
  s->add_flag("--dry-run", f.dry_run, "print the commands, run nothing");
}

int cmd_fleet(const Global& g, const FleetOptions& f, bool start) {
  auto c = load_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
  remote::Options o;
  o.action = start ? remote::Action::kStart : remote::Action::kStop;
  o.launcher = f.launcher == "compose"   ? remote::Launcher::kCompose
               : f.launcher == "systemd" ? remote::Launcher::kSystemd
                                         : remote::Launcher::kNative;
  o.compose_dir = f.compose_dir;
  if (f.compose_cmd == "auto") {
    o.detect_compose = true;
  } else if (auto words = remote::parse_compose_command(f.compose_cmd); words.ok()) {
    o.compose = std::move(*words);
  } else {
    fmt::print(stderr, "{}\n", words.error().message);
    return 2;
  }
  o.config_path = f.remote_config.empty() ? g.config_file : f.remote_config;
  if (!f.remote_bin.empty()) o.h3pipe = f.remote_bin;
  if (!f.ssh_config.empty())
    o.ssh_options.insert(o.ssh_options.begin(),
                         {"-F", std::filesystem::absolute(f.ssh_config).string()});
  if (f.dry_run) {
    auto cmds = remote::plan(*c, o);
    if (!cmds.ok()) {
      fmt::print(stderr, "{}\n", cmds.error().message);
      return 2;
    }
    if (o.launcher == remote::Launcher::kCompose && o.detect_compose)
      fmt::print(
          "# compose command: found on each host before the first command: {} (shown "
          "below as the first); --compose-cmd picks one\n",
          [] {
            std::string s;
            for (const auto& p : remote::compose_probes())
              s += (s.empty() ? "`" : ", else `") + remote::render(p) + "`";
            return s;
          }());
    for (const auto& hc : *cmds) fmt::print("{}\t{}\n", hc.host, remote::render(hc.argv));
    return 0;
  }
  return start ? remote::start_all(*c, o, std::cout) : remote::stop_all(*c, o, std::cout);
}

}  // namespace h3pipe::cli
