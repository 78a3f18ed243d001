#pragma once
// systemd units for one host of a cluster (`h3pipe systemd units --host NAME -o DIR`, installed by
// `h3pipe systemd install` and `h3pipe start --all --launcher systemd`; docs/deploy.md, "systemd"):
//   h3pipe-<service>-<instance>.service   one per process `h3pipe start` would run on the host
//   h3pipe-api-<host>.service             its h3pipe-api (Type=exec; TLS flags when configured)
//   h3pipe-redis.service                  the shared Redis (/redis/managed), on its host
//   h3pipe-redis-tls.service              its stunnel TLS server there, the client elsewhere
//   h3pipe.target                         wants them all; enabled, it brings them up at boot
// Every service unit is Type=notify (the runner sends READY=1 once its /readyz answers 200, and
// STATUS= lines: common/runner/sd_notify.h), Restart=on-failure, a long TimeoutStartSec for model
// loads, and hardened (docs/security.md): NoNewPrivileges, ProtectSystem=strict with the state,
// artifact and output roots writable, PrivateTmp, ProtectHome, RestrictAddressFamilies, a system
// call filter, no capabilities; GPU pools get DevicePolicy=closed + DeviceAllow=char-nvidia*
// rather than PrivateDevices (which hides the GPUs from CUDA), and no MemoryDenyWriteExecute
// (CUDA's JIT maps writable code).
#include <filesystem>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::deploy {

struct UnitOptions {
  std::string host;                     // the host in the config
  std::filesystem::path config_file;    // absolute, as that host sees it
  std::filesystem::path bin_dir;        // h3pipe-* (and h3pipe) there
  std::string user;                     // User= of every unit ("" = root; not advised)
  std::string group;                    // Group= ("" = the user's)
  std::string start_timeout = "30min";  // TimeoutStartSec: a model load may take minutes
  std::string redis_server = "/usr/bin/redis-server";
  std::string stunnel = "/usr/bin/stunnel4";
};

struct UnitFile {
  std::string name;  // "h3pipe-sampler-t10x4-sample.service"
  std::string text;
};

inline constexpr const char kTargetUnit[] = "h3pipe.target";

// Errors: config.invalid (an unknown host, an embedded Redis: its port and credentials are made
// by `h3pipe start` each time, so units need /redis/embedded false), cli.flag (a relative
// config or bin path).
Result<std::vector<UnitFile>> render_units(const config::Cluster& c, const UnitOptions& o);

// One ExecStart/Environment word as systemd reads it: quoted when it holds spaces or quotes,
// with '%' doubled and '$' doubled (no specifier or variable expansion).  Pure; for tests.
std::string unit_quote(const std::string& word);

// Whether the host runs the cluster's shared Redis (/redis/managed, and its name or address is
// /redis/host).
bool runs_shared_redis(const config::Cluster& c, const config::Host& h);

}  // namespace h3pipe::deploy
