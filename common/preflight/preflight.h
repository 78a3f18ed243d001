#pragma once
// `h3pipe preflight`: the seeds' step 4 ("service checks") before `start` / `run`.  Every check is
// a row of a table: what was checked, against what, PASS / WARN / FAIL / SKIP, the evidence, and
// for a failure what to do.  Exit status: 0 when no row failed, 1 otherwise.
//
// Checks (names are stable: tests, docs/deploy.md and the CLI refer to them):
//   config.host      the --host filter names a host of the config
//   sentinel.reachable / sentinel.auth / sentinel.master / sentinel.quorum
//                    with /redis/sentinel, per Sentinel: TCP connect; AUTH with
//                    /redis/sentinel/user + password_file (or none required); it monitors
//                    /redis/sentinel/master (the primary it names); SENTINEL ckquorum answers OK
//   redis.reachable  TCP connect to /redis (embedded: where <state_dir>/stack.json says it runs;
//                    behind Sentinel: the primary the Sentinels name, as every service finds it)
//   redis.auth       authenticated with /redis/user + password_file (or no password required)
//   redis.version    >= 6.2 (XAUTOCLAIM)
//   redis.aof        appendonly yes (external Redis: FAIL when off; embedded: WARN)
//   redis.eviction   maxmemory-policy noeviction (streams must never be evicted): WARN otherwise
//   redis.replicas   with /redis/sentinel or /redis/wait_replicas > 0: the server is a primary
//                    (INFO replication) with >= wait_replicas replicas online (FAIL when fewer;
//                    WARN when none and wait_replicas is 0)
//   clock.skew       |Redis TIME - local clock| <= kMaxClockSkewSeconds
//   service.ready    per configured service on the checked hosts: the run file
//                    <state_dir>/run/<service>-<pool|host>.json
//                    {"pid","metrics_port","health_port", "host"} exists and GET /readyz on its
//                    health port answers 200
//   service.heartbeat per pool of each host that is not checked here: its heartbeat in Redis
//                    (h3pipe:pools) by Redis's clock, the dispatch board's rule: PASS live, FAIL
//                    "dead: no heartbeat for N s", WARN when it never beat (not started yet)
//   gpu.visible      NVML sees every GPU the host's pools are configured with
//   disk.free        free space at artifact_root, output_root and state_dir >= the threshold
//   curve.keys       the host's transfer key files exist and are readable (secret: not group/other)
//   comfyui.up       GET <settings.url>/system_stats answers 200 for each comfyui pool
//   comfyui.templates every class and model file each comfyui pool's workflow(s) name is on its
//                    server (GET /object_info/<class>), values as POST /prompt checks them; one
//                    FAIL row per missing class or file, naming the template and the node
//   runtime.settings each checked host's pools' runtime settings as their services will check
//                    them (runtime::check_settings, host scope: an exec program on PATH, ...)
//
// Which hosts are "checked": the one named by host_filter; with no filter, every host that is
// this machine (a one-host config, or a host whose address/bind is a local interface address or
// this machine's hostname).  Rows for other hosts are SKIPped with the command to run there;
// remote::start_all runs preflight on each host over SSH.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/gpu/nvml.h"

namespace h3pipe::preflight {

inline constexpr std::uint64_t kMinFreeBytes = 1ull << 30;  // disk.free: 1 GiB ...
inline constexpr double kMinFreeRatio = 0.05;               // ... or 5 % of a smaller filesystem
inline constexpr double kMaxClockSkewSeconds = 2.0;         // lease deadlines, receipt timestamps
inline constexpr int kMinRedisMajor = 6, kMinRedisMinor = 2;

enum class Outcome { kPass, kWarn, kFail, kSkip };
const char* outcome_name(Outcome o);

struct CheckResult {
  std::string check;   // e.g. "redis.auth"
  std::string target;  // e.g. "10.0.0.241:6379", "sampler-a@node292", "/var/lib/h3pipe/artifacts"
  Outcome outcome = Outcome::kPass;
  std::string detail;  // the evidence
  std::string fix;     // what to do (set for WARN and FAIL)
};

struct Options {
  std::string host_filter;  // empty = the hosts that are this machine
  std::string nvml_library = gpu::kNvmlLibrary;
  std::optional<std::string> nvidia_visible_devices;  // nullopt = process environment
  std::chrono::milliseconds timeout{2000};            // per network probe
  std::uint64_t min_free_bytes = kMinFreeBytes;
  double min_free_ratio = kMinFreeRatio;
  double max_clock_skew_s = kMaxClockSkewSeconds;
  // Is this host this machine?  Default: see above.  Tests inject their own.
  std::function<bool(const config::Host&)> is_local;
};

std::vector<CheckResult> run_checks(const config::Cluster& cluster, const Options& options);

// The table, then one "what to do" line per WARN/FAIL row, then the verdict line.
void print_report(const config::Cluster& cluster, const Options& options,
                  const std::vector<CheckResult>& results, std::ostream& out);

// Runs every check, prints the report; returns 0 when no check failed, 1 otherwise.
int preflight_main(const config::Cluster& cluster, const std::string& host_filter,
                   std::ostream& out);
int preflight_main(const config::Cluster& cluster, const Options& options, std::ostream& out);

// --- pieces, exposed for tests and for the CLI's status command -----------------------------

// The run file a service writes at start (the runner's contract).
struct RunFile {
  long long pid = 0;
  int metrics_port = 0;
  int health_port = 0;
  std::string host;
  std::string bind;  // where it listens (optional; wildcard or empty = loopback is probed)
};
// <state_dir>/run/<service>-<instance>.json; service is encoder|sampler|decoder|transfer.
std::filesystem::path run_file_path(const config::Cluster& cluster, const std::string& service,
                                    const std::string& instance);
Result<RunFile> read_run_file(const std::filesystem::path& file);

// A service the config says should run: encoder/sampler/decoder per pool, transfer per host.
struct ExpectedService {
  std::string service;   // encoder | sampler | decoder | transfer
  std::string instance;  // pool name, or host name for transfer
  std::string host;
};
std::vector<ExpectedService> expected_services(const config::Cluster& cluster);

bool is_local_host(const config::Host& host);

}  // namespace h3pipe::preflight
