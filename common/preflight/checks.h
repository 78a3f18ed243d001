#pragma once
// Internal: the check functions behind run_checks(), one file per concern.
#include <string>
#include <vector>

#include "common/preflight/preflight.h"
#include "common/queue/redis.h"

namespace h3pipe::preflight {

class Report final {
 public:
  void add(std::string check, std::string target, Outcome o, std::string detail,
           std::string fix = {}) {
    rows_.push_back({std::move(check), std::move(target), o, std::move(detail), std::move(fix)});
  }
  void pass(std::string c, std::string t, std::string d) {
    add(std::move(c), std::move(t), Outcome::kPass, std::move(d));
  }
  void warn(std::string c, std::string t, std::string d, std::string fix) {
    add(std::move(c), std::move(t), Outcome::kWarn, std::move(d), std::move(fix));
  }
  void fail(std::string c, std::string t, std::string d, std::string fix) {
    add(std::move(c), std::move(t), Outcome::kFail, std::move(d), std::move(fix));
  }
  std::vector<CheckResult> take() { return std::move(rows_); }

 private:
  std::vector<CheckResult> rows_;
};

// The hosts whose local resources (run files, GPUs, key files, ComfyUI) this run checks.
struct Scope {
  std::vector<const config::Host*> checked;
  std::vector<const config::Host*> elsewhere;
};

// Where preflight finds Redis and as whom (checks_redis.cpp): the services' resolution, the
// operator's credentials.
struct Resolved {
  queue::RedisAddress addr;
  std::string password_file;  // the config's, or the operator's of per-service credentials
  std::string error;          // why the address could not be determined
};
Resolved resolve_address(const config::Cluster& c, const Options& o);

void check_redis(const config::Cluster& c, const Options& o, Report& rep);
// service.heartbeat: the pools of the hosts that are not checked here, by their heartbeats in
// Redis (checks_heartbeats.cpp, #34 P12).
void check_heartbeats(const config::Cluster& c, const Options& o, const Scope& s, Report& rep);
// With /redis/sentinel: the sentinel.* rows, one set per Sentinel (checks_sentinel.cpp).
void check_sentinels(const config::Cluster& c, const Options& o, Report& rep);
void check_services(const config::Cluster& c, const Options& o, const Scope& s, Report& rep);
void check_gpus(const config::Cluster& c, const Options& o, const Scope& s, Report& rep);
void check_disk(const config::Cluster& c, const Options& o, Report& rep);
void check_keys(const config::Cluster& c, const Options& o, const Scope& s, Report& rep);
// api.tls: h3pipe-api's own certificate as `start` checks it; off loopback without one, a WARN.
void check_api_tls(const config::Cluster& c, const Scope& s, Report& rep);
void check_comfyui(const config::Cluster& c, const Options& o, const Scope& s, Report& rep);
void check_comfyui_templates(const config::Cluster& c, const Options& o, const Scope& s,
                             Report& rep);
void check_runtime_settings(const config::Cluster& c, const Options& o, const Scope& s,
                            Report& rep);

}  // namespace h3pipe::preflight
