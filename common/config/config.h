#pragma once
// The cluster config: one JSON file (docs/design.md, issue #2).  Loaded strictly: unknown keys and
// wrong types are errors naming the JSON path ("/pools/1/gpus/0: expected an integer"); all errors
// are collected and reported together.  docs/config.md documents every field.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/dispatch_policy.h"
#include "common/core/result.h"
#include "common/latent/profile.h"

namespace h3pipe::config {

// Stage-time profile: how long a stage takes for one job of a class on one pool.
struct Profile {
  enum class Kind { kFixed, kNormal, kCycle };
  Kind kind = Kind::kFixed;
  double seconds = 0;           // kFixed
  double mean = 0, sd = 0;      // kNormal (clamped at >= 0)
  std::vector<double> cycle{};  // kCycle: values used in turn
  double expected() const;      // mean duration, for dispatch decisions
};

// A job class: the size a profile applies to.  A job belongs to the class named in its spec, or
// else the class whose width/height/frames/steps match exactly, or else "default".
struct JobClass {
  std::string name;
  std::uint32_t width = 0, height = 0, frames = 0, steps = 0;
  std::string latent_profile{};  // "" = the cluster's latent_profile
};

// Which runtime computes a stage, and its runtime-specific settings (validated by the runtime).
struct RuntimeRef {
  std::string name = "sim";  // sim | builtin | exec | comfyui
  nlohmann::json settings = nlohmann::json::object();
};

enum class StageKind { kEncode, kSample, kDecode };
const char* stage_name(StageKind s);

// A pool: one worker process bound to a group of GPUs on one host, running one stage.
// Sampler pools are the seeds' "4x T10" groups; a decoder is a pool of stage decode.
struct Pool {
  std::string name;
  std::string host;
  StageKind stage = StageKind::kSample;
  std::vector<int> gpus;                    // device ids (CUDA_VISIBLE_DEVICES)
  std::string gpu_model;                    // informational, used by config-adapt and plan
  std::optional<RuntimeRef> runtime;        // overrides stages.<stage>.runtime
  std::map<std::string, Profile> profiles;  // job class -> stage time on this pool
  std::string shares_gpus_with;             // another pool on the same GPUs (encoder + sampler)
  int metrics_port = 0;                     // 0 = pick a free port and report it
  // The profile for a job class: the class's own, else "default", else none (this pool cannot
  // run that class).  The one lookup rule for the sim runtime, the planner and dispatch.
  const Profile* profile_for(std::string_view job_class) const;
};

struct Host {
  std::string name;
  std::string address = "127.0.0.1";     // where peers reach it
  std::string ssh;                       // SSH alias for start --all
  std::string bind = "127.0.0.1";        // interface services listen on
  int transfer_port = 0;                 // 0 = pick a free port (local mode only)
  int transfer_data_port = 0;            // its receiver's data connection; see data_port()
  int transfer_metrics_port = 0;         // its transfer service's metrics; 0 = a free one
  std::string transfer_public_key_file;  // CURVE server key pair of this host's receiver
  std::string transfer_secret_key_file;
  std::vector<std::string> transfer_allowed_clients;  // Z85 public keys admitted by ZAP
  // h3pipe-api on this host (docs/api.md): its listen address (loopback unless set), its port and
  // its Prometheus port (0 = a free one, reported in run/api-<host>.json).
  std::string api_bind = "127.0.0.1";
  int api_port = 0;
  int api_metrics_port = 0;
  // Its own certificate (PEM chain) and private key (mode 0600 or 0400): both or neither; set,
  // `h3pipe start` runs it with --tls-cert/--tls-key and probes it over HTTPS (docs/api.md, "TLS").
  std::string api_tls_cert;
  std::string api_tls_key;
  // Its transfer receiver's data connection (AES-256-GCM data frames, docs/transfer.md): the port
  // in effect is transfer_data_port, else transfer_port + 1, else 0 (a free one).
  int data_port() const {
    if (transfer_data_port != 0) return transfer_data_port;
    return transfer_port != 0 && transfer_port < 65535 ? transfer_port + 1 : 0;
  }
};

struct Link {
  std::string from, to;
  double gbps = 1.0;
  double latency_ms = 0.5;
};

struct Redis {
  std::string host = "127.0.0.1";
  int port = 0;               // 0 with embedded = pick a free port at start
  std::string user;           // ACL user; empty = default user
  std::string password_file;  // file holding the password; empty = none
  // A folder of redis-<role>.password files (role: encoder, sampler, decoder, transfer, operator,
  // admin) for the per-service ACL users of configs/redis/users.acl: `h3pipe start` gives each
  // service it starts its own user, the CLI uses the operator.  Embedded Redis: <state>/secrets,
  // generated.
  std::string credentials_dir;
  bool embedded = true;  // h3pipe start runs a private redis-server
  // A shared Redis (embedded false) that h3pipe runs: `h3pipe start` on the host whose name or
  // address is /redis/host starts redis-server (AOF, the ACL users of credentials_dir) and, unless
  // allow_plaintext, an stunnel TLS server on /redis/port; every other host's start runs an
  // stunnel client that checks the server's certificate (common/supervisor/redis_plan.h).
  bool managed = false;
  // Reach a Redis on another host without TLS (a trusted network only): preflight fails a plain
  // cross-host Redis unless this is set.
  bool allow_plaintext = false;
  std::string password() const;  // reads password_file ("" if none)
  // Redis behind Sentinel (embedded false): every process finds the primary through these
  // (docs/foundation.md, "Failover").  host/port are then unused.
  struct Sentinel {
    std::vector<std::string> addresses;  // HOST:PORT of each Sentinel
    std::string master;                  // the master name Sentinel monitors
    std::string user, password_file;     // Sentinel's own AUTH, if it has one
  } sentinel;
  // Submissions and stage completions WAIT for this many replicas (0 = off), at most
  // wait_timeout_ms.
  int wait_replicas = 0;
  int wait_timeout_ms = 1000;
};

struct Queue {
  int lease_ms = 5000;  // a claimed task is reclaimable after this without renewal
  int renew_ms = 1000;  // lease renewal period
  int sweep_ms = 1000;  // how often idle workers look for expired leases
  int max_deliveries =
      5;               // then dead-letter (5: a healthy task survives repeated kills of its worker)
  int block_ms = 200;  // XREADGROUP BLOCK
  int retry_backoff_ms = 200;  // minimum idle before a failed task is retried
  // The claim order's aging (docs/design.md, "The claim order"): a waiting task's priority rises
  // by one per aging_ms on its stream, up to the highest waiting; 0: no aging.
  int aging_ms = 30000;
};

// A user of a shared fleet (docs/design.md, "The claim order"): its weight in the fair share of
// pool-seconds among users with work queued.
struct User {
  double weight = 1.0;
  // Quota: the most jobs the user may have submitted and not finished (waiting or running at any
  // stage); a submission that would pass it is refused whole, or held (over_quota).  0: no quota.
  int max_jobs = 0;
  // Past max_jobs: "refuse" (h3pipe run refuses the batch whole) or "hold" (accepted; each job
  // past the quota is queued but not claimable until the user is back under it: its encode
  // task waits on keys::held(user) until ingest releases it; state/quota.h).
  std::string over_quota = "refuse";
};
// A user's name: [A-Za-z0-9._@-]{1,64} (config /users keys, a job spec's user, run --user).
bool valid_user_name(std::string_view name);

struct Limits {
  std::uint32_t max_width = 1920, max_height = 1920, max_frames = 513, max_steps = 100;
  std::uint32_t max_fps = 60;
  std::uint64_t max_latent_bytes = 256ull << 20;
  std::uint32_t max_batch = 10000;
  std::uint32_t max_prompt_bytes = 16384;  // also negativePrompt and each params value
  std::uint32_t max_params = 64;           // entries of a spec's params map (keys <= 128 bytes)
  // Folders a job's referenceImage may be read from (common/spec/input_file.h); absent from the
  // config: <state_dir>/inputs; [] allows none.
  std::vector<std::filesystem::path> input_roots;
};

struct Transfer {
  bool curve = true;  // required between hosts; ignored on one host
  std::uint32_t chunk_bytes = 256 * 1024;
  std::uint32_t window = 32;  // chunks in flight: covers one fsync at link rate
  int heartbeat_ms = 500;
  int dead_after_ms = 3000;
  int max_attempts = 5;
};

struct Cluster {
  std::string name = "local";
  std::filesystem::path state_dir;      // logs, pids, redis data (start)
  std::filesystem::path artifact_root;  // conditioning + latents: <root>/<run>/<job>/...
  std::filesystem::path output_root;    // <root>/<run>/<job>.mp4 + .pipeline.json
  DispatchPolicy dispatch = DispatchPolicy::kCompletionTime;  // dispatch_policy.h
  double time_scale = 1.0;  // multiplies every sim profile (rehearsal at 1/100)
  Redis redis;
  Queue queue;
  Limits limits;
  Transfer transfer;
  std::map<std::string, User> users;               // by name; a user not named here has weight 1
  std::map<StageKind, RuntimeRef> stage_runtimes;  // default runtime per stage
  std::vector<JobClass> classes;
  std::vector<Host> hosts;
  std::vector<Pool> pools;
  std::vector<Link> links;
  // docs/latent.md, "Latent profiles": the cluster's default profile and the ones it declares
  // beside the built-in table (a declared name may not shadow a built-in one).
  std::string latent_profile = "builtin";
  std::map<std::string, latent::LatentProfile> latent_profiles;

  const Host* find_host(std::string_view name) const;
  const Pool* find_pool(std::string_view name) const;
  const RuntimeRef& runtime_for(const Pool& p) const;
  std::vector<const Pool*> pools_on(std::string_view host,
                                    std::optional<StageKind> stage = {}) const;
  // GPU groups (shares_gpus_with, transitive): for each pool (index into `pools`), the index of
  // the first pool of its group in config order (its own index when it shares with nobody).  The
  // one grouping the simulator and the live GPU leases use.
  std::vector<std::size_t> gpu_group_leaders() const;
  // Class of a job by the rule in JobClass; "default" when none matches.
  std::string class_of(std::uint32_t w, std::uint32_t h, std::uint32_t frames, std::uint32_t steps,
                       std::string_view named = {}) const;
  // A declared profile, else a built-in one; null when neither has the name.
  const latent::LatentProfile* find_latent_profile(std::string_view name) const;
  // The one rule for a job's profile: `requested` (the job's params["latent_profile"]) when not
  // empty, else the job class's latent_profile, else the cluster's.  Error config.latent_profile
  // naming the unknown profile and where it came from.
  Result<latent::LatentProfile> latent_profile_for(std::string_view job_class,
                                                   std::string_view requested = {}) const;
  std::string latent_profile_names() const;  // "builtin, wan2.1, ..., <declared>"
};

// Parses and validates; on failure the Error's message lists every problem, one per line.
// Relative paths in the file resolve against the file's directory; state_dir, artifact_root and
// output_root default to $H3PIPE_STATE (or ./.state) subfolders.
Result<Cluster> load_file(const std::filesystem::path& file);
Result<Cluster> parse(const nlohmann::json& j, const std::filesystem::path& base_dir);

// A --state-dir flag: the state dir is DIR (made absolute), whatever the config names; the
// artifact, output and input roots the config left at their defaults under the state dir move
// with it.
void override_state_dir(Cluster& c, const std::filesystem::path& dir);

// The embedded default (configs/local.json compiled in): one host, encoder, one sampler pool,
// decoder, builtin runtime.
Result<Cluster> embedded_default();
std::string embedded_default_text();

// The effective config as JSON with secrets redacted (logged at start).
nlohmann::json to_json(const Cluster& c, bool redact = true);

}  // namespace h3pipe::config
