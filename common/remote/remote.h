#pragma once
// `h3pipe start --all` / `stop --all`: the seeds' step 5, "bring up the remote distributed
// services in one command".  For each host of the config, one command line, run over SSH with the
// host's alias (hosts[].ssh), no shell on this side (posix_spawn), all hosts in parallel within a
// wave; then preflight on every host the same way.
//
//   native launcher:  ssh -o BatchMode=yes ... ALIAS h3pipe start --host NAME --config PATH
//   compose launcher: ssh -o BatchMode=yes ... ALIAS docker compose --project-directory DIR
//                         --env-file DIR/deploy/NAME.env --profile ROLE ... up -d
//   systemd launcher: ssh ... ALIAS h3pipe systemd install --host NAME --config PATH
//                         (stop: systemctl stop h3pipe.target; common/deploy/systemd_units.h)
//
// Waves: hosts that carry the control role (Redis, monitoring: the host whose name or address is
// /redis/host) start first and stop last, so workers find Redis when they come up.
// A host with no ssh alias runs its command here, without ssh, if it is this machine (or the
// config has one host); otherwise planning fails naming the host.
//
// The remote side sees each argument word shell-quoted (ssh hands the words to the remote shell
// joined by spaces), so paths with spaces or quotes survive.  Aliases are validated so that an
// alias can never be read as an ssh option.
#include <chrono>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::remote {

enum class Action { kStart, kStop };
// Where compose.yaml mounts the cluster config inside every container.
inline constexpr const char kComposeConfigPath[] = "/etc/h3pipe/cluster.json";
enum class Launcher { kNative, kCompose, kSystemd };

struct Options {
  Action action = Action::kStart;
  Launcher launcher = Launcher::kNative;
  // The config file as the remote hosts see it (native: the same path on every host by
  // convention; compose: the path inside the containers).
  std::string config_path;
  std::string h3pipe = "h3pipe";            // the CLI on the remote hosts' PATH
  std::string compose_dir = "/opt/h3pipe";  // compose.yaml + deploy/<host>.env on each host
  std::vector<std::string> compose = {"docker", "compose"};  // or {"docker-compose"}
  // Find the compose command on each host first (start_all / stop_all: `docker compose version`,
  // else `docker-compose version`; detect_compose); `compose` is then what plan shows.
  bool detect_compose = false;
  std::map<std::string, std::vector<std::string>> compose_by_host;  // found by detect_compose
  std::string ssh = "ssh";
  std::vector<std::string> ssh_options = {"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
  std::vector<std::string> hosts;     // empty = every host (--all)
  std::chrono::seconds timeout{180};  // per command
  int parallel = 16;
  bool preflight = true;  // start: run preflight on each host afterwards
  // Is this host this machine?  Default: preflight::is_local_host.
  std::function<bool(const config::Host&)> is_local;
};

// One command for one host.
struct HostCommand {
  std::string host;
  std::string via;                // the ssh alias, or "local"
  int wave = 0;                   // lower waves run (and finish) first
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
};

struct HostResult {
  std::string host;
  std::vector<std::string> argv;
  int exit_code = -1;  // 128+N when killed by signal N
  bool timed_out = false;
  std::string output;  // stdout and stderr interleaved, capped at kMaxOutput
  double seconds = 0;
};
inline constexpr std::size_t kMaxOutput = 64 * 1024;

// compose profiles for a host from what the config places on it:
// control (Redis + Prometheus + Grafana), sampler-host (+ sampler-host-2 for a second sampler
// pool), encoder-host (an encoder on a host that does not sample), decoder-host.
Result<std::vector<std::string>> compose_profiles(const config::Cluster& c, const config::Host& h);
bool is_control_host(const config::Cluster& c, const config::Host& h);

// The start/stop command of every selected host (errors: unknown host, missing or unsafe alias,
// more sampler pools on a host than compose.yaml has slots).
Result<std::vector<HostCommand>> plan(const config::Cluster& c, const Options& o);
// `h3pipe preflight --host NAME --config PATH` on every selected host (compose: through the
// compose file's cli service, which runs on the host network).
Result<std::vector<HostCommand>> plan_preflight(const config::Cluster& c, const Options& o);

// Runs the commands, wave by wave, up to `parallel` at once; kills (SIGTERM, then SIGKILL after
// 2 s) any that passes `timeout`.  Results come back in the order of `cmds`.
std::vector<HostResult> run_all(const std::vector<HostCommand>& cmds, std::chrono::seconds timeout,
                                int parallel);

// start --all / stop --all: plan, run, print a table of hosts; start then runs preflight on each
// host and prints their reports.  Returns 0 when every command (and preflight) succeeded.
int start_all(const config::Cluster& c, const Options& o, std::ostream& out);
int stop_all(const config::Cluster& c, const Options& o, std::ostream& out);

// The host's command as plan() runs it: over ssh with the host's alias, or here (wave 0).
Result<HostCommand> wrap_for_host(const config::Cluster& c, const Options& o, const config::Host& h,
                                  std::vector<std::string> words);

// --compose-cmd: "docker compose", "docker-compose", or a path, as words.  Error remote.compose.
Result<std::vector<std::string>> parse_compose_command(std::string_view text);
// What detect_compose runs on a host, in order: docker compose version, docker-compose version.
std::vector<std::vector<std::string>> compose_probes();
// Runs the probes on every selected host (in parallel, over ssh as the commands) and fills
// o.compose_by_host with the first that exits 0; error remote.compose naming each host where none
// did, with what each probe printed.
Status detect_compose(const config::Cluster& c, Options& o);
// deploy/<host>.env for compose.yaml: COMPOSE_PROFILES, H3PIPE_HOST, the config file (as
// compose's project folder sees it), pools and their GPUs per slot, the transfer port.
Result<std::string> compose_env(const config::Cluster& c, const config::Host& h,
                                const std::string& config_file);

// POSIX shell quoting: safe words stay as they are, anything else goes in single quotes.
std::string shell_quote(std::string_view word);
// The command as one line, for logs and --dry-run.
std::string render(const std::vector<std::string>& argv);

}  // namespace h3pipe::remote
