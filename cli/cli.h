#pragma once
// The operator's CLI.  main.cpp declares the subcommands in one table; each lives in its own
// file as a function taking the parsed options.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "common/api/fleet.h"
#include "common/config/config.h"
#include "common/queue/redis.h"

namespace CLI {
class App;
}
namespace h3pipe::state {
struct RunStatus;
}

namespace h3pipe::cli {

// The exit codes of every command (README, `h3pipe --help`).
enum Exit : int {
  kExitOk = 0,           // done; for wait: every job done
  kExitFailed = 1,       // the operation failed; for wait: a job failed or was cancelled
  kExitUsage = 2,        // bad flags, config, batch or spec: nothing was done
  kExitTimedOut = 3,     // wait --timeout passed
  kExitNoSuchRun = 4,    // the run id is unknown to this Redis
  kExitUnreachable = 5,  // Redis did not answer (wait: within its grace) or refused the login
};
inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok (wait: every job done), 1 failed (wait: a job failed or was cancelled), "
    "2 bad input or config (nothing done), 3 timed out, 4 no such run, 5 Redis unreachable or "
    "refused the login.";

// config-adapt -o FILE: deploy/<host>.env beside FILE for every host (compose_env.cpp); an
// existing one is kept unless `force`.  0, or 1 when the config or a file cannot be read/written.
int write_compose_envs(const std::string& output, bool force, std::ostream& out, std::ostream& err);

// The exit code an error ends a command with: one table for every command (exit_codes.cpp),
// keyed by the error's catalogue code (or its whole domain); anything else is kExitFailed.
int exit_for(const Error& e);
// Prints "PREFIX: message" (or the message) to stderr and returns exit_for(e).
int fail(const Error& e, std::string_view prefix = {});

struct Global {
  std::string config_file;  // --config
  std::string redis;        // --redis HOST:PORT
  std::string state_dir;    // --state-dir
};

// --redis HOST:PORT: a host and a port 1-65535, else cli.flag naming the flag.
Result<std::pair<std::string, int>> parse_redis_flag(const std::string& v);

// The config file the CLI works with: --config, else the one the stack running here was
// started with, else "" (the embedded default).
std::string config_file_in_use(const Global& g);
// Loads that config (or the embedded default), with --state-dir over its state dir.
Result<config::Cluster> load_cluster(const Global& g);
// load_cluster for the commands that use the local stack's state dir (start, stop, run, wait,
// status, cancel, resume): the state dir and what the command reads there are checked first
// (supervisor/state_dir.h; state_dir.unsafe, exit 2).  `starting`: only what start reads itself.
Result<config::Cluster> load_stack_cluster(const Global& g, bool starting = false);
// Redis of the running local stack, else the config's, with --redis overriding; logged in as the
// operator (redis_login.cpp).  A refused login, a password Redis wants and the CLI lacks
// (NOAUTH) or an unreadable password file: redis.auth naming the user, the file and the config
// field (exit 5).
Result<std::unique_ptr<queue::Redis>> connect(const Global& g, const config::Cluster& c);

// f(redis) on a connection to the stack's Redis as the operator; a config that does not load is
// kExitUsage with its message, a Redis that does not answer fail()'s code.
template <typename F>
int with_stack_redis(const Global& g, F&& f) {
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return kExitUsage;
  }
  auto redis = connect(g, *c);
  if (!redis.ok()) return fail(redis.error());
  return f(**redis);
}
// redis.auth, or a NOAUTH/WRONGPASS reply to a command: no retry helps, the login must change.
bool is_auth_refusal(const Error& e);
std::filesystem::path bin_dir();
using api::storage_degraded;  // common/api/fleet.h

// Pools' heartbeats, dead pools, stalled stages (#34 P12): common/api/fleet.h, the code
// h3pipe-api answers with too; fleet_status.cpp prints them.
using api::pool_lives;
using api::pool_lives_json;
using api::PoolLife;
using api::stalled_stages;
void print_pool_lives(const config::Cluster& c, const std::vector<PoolLife>& lives);

int cmd_start(const Global& g, const std::string& host);
// start_record.cpp (#34 P6, P13): before `start` starts anything.  An exit code when start must
// not go on (another stack runs here: 1; no --config and the state dir was last started with a
// config file: 2); nullopt to go on, with *running_stack set when this host's stack of this
// config already runs (start then answers "already running", exit 0).
std::optional<int> start_precheck(const Global& g, const config::Cluster& c,
                                  const std::string& host, nlohmann::json* running_stack);
// Remembers the config file (and its SHA-256) and host of a successful start in the state dir.
void write_start_record(const Global& g, const config::Cluster& c, const nlohmann::json& stack);

// start --all / stop --all over SSH (common/remote).
struct FleetOptions {
  bool all = false;
  std::string launcher = "native";  // native | compose | systemd
  std::string compose_dir = "/opt/h3pipe";
  std::string compose_cmd = "auto";  // auto | "docker compose" | docker-compose | a path
  std::string remote_config;         // the config path as the hosts see it (default: --config)
  std::string remote_bin;            // the h3pipe CLI on the hosts (default: h3pipe on their PATH)
  std::string ssh_config;            // ssh -F FILE (default: ~/.ssh/config)
  bool dry_run = false;
};
void add_fleet_options(CLI::App* s, FleetOptions& f);
int cmd_fleet(const Global& g, const FleetOptions& f, bool start);
int cmd_stop(const Global& g, const std::string& host = "");
// The run's share of a fleet (docs/design.md, "The claim order"): the priority of every job its
// line leaves at 0, and its user (default: the login name).
struct RunShare {
  std::optional<int> priority;
  std::string user;
};
int cmd_run(const Global& g, const std::string& batch, bool background, const std::string& run_id,
            const RunShare& share = {});
// pause RUN (pause true) / unpause RUN: the run's waiting tasks are not claimed / claimed again.
int cmd_pause(const Global& g, const std::string& run_id, bool pause);
// drain POOL / undrain POOL: what the console's drain does (api::set_pool_drained): the pool
// claims nothing more (its task in progress finishes) / claims again.  Exit 2 for a pool not in
// the config.  fleet_status.cpp, which register_drain_commands adds them from.
int cmd_drain(const Global& g, const std::string& pool, bool drain);
void register_drain_commands(CLI::App& app, const Global& g, int& rc);
// move JOB --run RUN --first: the job's waiting task is taken before every other.
int cmd_move_first(const Global& g, const std::string& run_id, const std::string& job_id);
int cmd_wait(const Global& g, const std::string& run_id, double timeout_s);
int cmd_status(const Global& g, const std::string& run_id, bool json);
int cmd_cancel(const Global& g, const std::string& run_id);
int cmd_resume(const Global& g, const std::string& run_id);

}  // namespace h3pipe::cli

namespace CLI {
class App;
}
namespace h3pipe::cli {
// Subcommands contributed by other modules (latent inspect, keygen, plan, config-adapt, profile,
// report, preflight), declared in extra_commands.cpp.
void register_extra_commands(CLI::App& app, Global& g, int& rc);
void register_planner_commands(CLI::App& app, Global& g, int& rc);
// comfyui split / install-nodes (comfyui_cmds.cpp).
void register_comfyui_commands(CLI::App& app, Global& g, int& rc);
// compare (compare_cmds.cpp): decoder A/B on a run's latents.
void register_compare_commands(CLI::App& app, Global& g, int& rc);
// prometheus targets (prometheus_cmds.cpp) and systemd units|install (systemd_cmds.cpp).
void register_prometheus_commands(CLI::App& app, Global& g, int& rc);
void register_systemd_commands(CLI::App& app, Global& g, int& rc);
// After `start`: <state_dir>/prometheus/targets.json from the config and the stack's run files.
void write_prometheus_targets(const config::Cluster& c, const nlohmann::json& stack);
// credentials init / export (credentials_cmds.cpp): the shared Redis's secrets.
void register_credentials_commands(CLI::App& app, Global& g, int& rc);
// token create / list / revoke (api_cmds.cpp): h3pipe-api's bearer tokens.
void register_api_commands(CLI::App& app, Global& g, int& rc);
// webhook add / list / remove / allow / disallow (webhook_cmds.cpp): h3pipe-api's webhooks.
void register_webhook_commands(CLI::App& app, Global& g, int& rc);
}  // namespace h3pipe::cli
