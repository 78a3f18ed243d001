// h3pipe: the operator's CLI.  Subcommands are declared in one table below.
#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>

#include "cli/cli.h"
#include "common/logging/protobuf_log.h"

using namespace h3pipe::cli;

int main(int argc, char** argv) {
  h3pipe::logging::route_protobuf_logs();
  CLI::App app{"h3pipe: video-diffusion stage pipeline across GPU hosts"};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);
  app.fallthrough();  // global options (--config, --redis, --state-dir) may follow the subcommand
  Global g;
  app.add_option(
      "--config", g.config_file,
      "cluster config JSON (default: the running stack's, else the embedded local config)");
  app.add_option("--redis", g.redis, "HOST:PORT of Redis (default: the running local stack's)")
      ->check([](const std::string& v) -> std::string {
        // CLI11 names the flag itself: "--redis: \"x\" is not HOST:PORT ...".
        return parse_redis_flag(v).ok() ? "" : "\"" + v + "\" is not HOST:PORT with a port 1-65535";
      });
  app.add_option("--state-dir", g.state_dir,
                 "state dir, over the config's state_dir (default: the config's, else "
                 "$H3PIPE_STATE, else ./.state)");

  std::string run_id, batch, host;
  bool background = false, json = false;
  double timeout_s = 0;
  int rc = 0;
  FleetOptions fleet;
  RunShare run_share;
  std::string move_job;
  bool move_first = false;

  struct Sub {
    const char* name;
    const char* help;
    std::function<void(CLI::App*)> options;
    std::function<int()> action;
  };
  const std::vector<Sub> table = {
      {"start",
       "start the local stack (private redis + this host's services), or every host with --all",
       [&](CLI::App* s) {
         s->add_option("--host", host, "host name in the config");
         add_fleet_options(s, fleet);
       },
       [&] { return fleet.all ? cmd_fleet(g, fleet, true) : cmd_start(g, host); }},
      {"stop", "stop the local stack, or every host with --all",
       [&](CLI::App* s) {
         s->add_option("--host", host,
                       "host name in the config: stop only if the stack here is that host's");
         add_fleet_options(s, fleet);
       },
       [&] { return fleet.all ? cmd_fleet(g, fleet, false) : cmd_stop(g, host); }},
      {"run",
       "validate and submit a JSON-lines batch; prints the run id (last line); waits unless "
       "--background",
       [&](CLI::App* s) {
         s->add_option("batch", batch, "BATCH.jsonl")->required();
         s->add_flag("--background", background, "return after submission");
         s->add_option("--run-id", run_id, "choose the run id");
         s->add_option("--priority", run_share.priority,
                       "priority of every job whose line sets none (higher first; default 0)");
         s->add_option("--user", run_share.user,
                       "the run's user for the fair share (default: the login name)");
       },
       [&] { return cmd_run(g, batch, background, run_id, run_share); }},
      {"wait",
       "wait for a run: exit 0 when every job is done, 1 if any failed, 4 no such run; rides out a "
       "Redis restart",
       [&](CLI::App* s) {
         s->add_option("run_id", run_id)->required();
         s->add_option("--timeout", timeout_s, "give up after this many seconds (exit 3)");
       },
       [&] { return cmd_wait(g, run_id, timeout_s); }},
      {"status", "runs, or one run's jobs",
       [&](CLI::App* s) {
         s->add_option("run_id", run_id);
         s->add_flag("--json", json);
       },
       [&] { return cmd_status(g, run_id, json); }},
      {"cancel", "cancel a run", [&](CLI::App* s) { s->add_option("run_id", run_id)->required(); },
       [&] { return cmd_cancel(g, run_id); }},
      {"pause", "pause a run: none of its waiting tasks is claimed (running ones finish)",
       [&](CLI::App* s) { s->add_option("run_id", run_id)->required(); },
       [&] { return cmd_pause(g, run_id, true); }},
      {"unpause", "unpause a run: its waiting tasks are claimed again",
       [&](CLI::App* s) { s->add_option("run_id", run_id)->required(); },
       [&] { return cmd_pause(g, run_id, false); }},
      {"move", "move a job: --first takes its waiting task before every other (every stage)",
       [&](CLI::App* s) {
         s->add_option("job_id", move_job, "the job")->required();
         s->add_option("--run", run_id, "its run")->required();
         s->add_flag("--first", move_first, "to the front (the only move)")->required();
       },
       [&] { return cmd_move_first(g, run_id, move_job); }},
      {"resume", "re-enqueue only the missing stages of a run",
       [&](CLI::App* s) { s->add_option("run_id", run_id)->required(); },
       [&] { return cmd_resume(g, run_id); }},
  };
  for (const auto& sub : table) {
    CLI::App* s = app.add_subcommand(sub.name, sub.help);
    sub.options(s);
    s->callback([&rc, &sub] { rc = sub.action(); });
  }
  register_extra_commands(app, g, rc);
  register_comfyui_commands(app, g, rc);
  register_compare_commands(app, g, rc);
  register_prometheus_commands(app, g, rc);
  register_systemd_commands(app, g, rc);
  register_credentials_commands(app, g, rc);
  register_api_commands(app, g, rc);
  register_webhook_commands(app, g, rc);
  register_drain_commands(app, g, rc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; every other parse error (an unknown flag, a missing
    // argument, a value that fails its check) is bad input: kExitUsage, as the footer says.
    const int cli11 = app.exit(e);
    return cli11 == 0 ? kExitOk : kExitUsage;
  }
  return rc;
}
