// What `start` decides before it starts anything (issue #34 P6, P13):
//   - a stack of this host and this config already runs here: "already running", exit 0
//     (`start --all` counts the host as started and goes on to preflight);
//   - a stack of another config or host runs here: refused, naming what runs (exit 1);
//   - nothing runs, no --config, and the state dir was last started with a config file: refused
//     (exit 2), naming that file, instead of silently starting the embedded default.
// The last start is remembered in <state>/started_with.json (config path, its SHA-256, host),
// written by the CLI after a successful start and kept across `stop`.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/core/sha256.h"
#include "common/supervisor/state_dir.h"
#include "common/supervisor/supervisor.h"

namespace h3pipe::cli {
namespace fs = std::filesystem;
namespace {

struct StartRecord {
  std::string config;  // absolute path, "" = the embedded default
  std::string config_sha256;
  std::string host;
};

fs::path record_file(const fs::path& state_dir) {
  return state_dir / "started_with.json";
}

// The record, if there is a readable one in a trusted place (state_dir.h).
std::optional<StartRecord> read_record(const fs::path& state_dir) {
  const fs::path f = record_file(state_dir);
  if (!supervisor::check_state_dir(state_dir).ok() ||
      !supervisor::check_in_state_dir(state_dir, f).ok())
    return std::nullopt;
  auto text = read_bounded_file(f, {"the start record", kMaxSmallFileBytes});
  if (!text.ok()) return std::nullopt;
  std::string why;
  const auto j =
      json_reader::parse_limited(*text, {kMaxSmallFileBytes}, &why).value_or(nlohmann::json());
  if (!j.is_object()) return std::nullopt;
  StartRecord r;
  r.config = j.value("config", "");
  r.config_sha256 = j.value("config_sha256", "");
  r.host = j.value("host", "");
  return r;
}

std::string canonical(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? fs::absolute(path).string() : p.string();
}

std::string file_sha(const std::string& path) {
  if (path.empty()) return "";
  auto s = sha256_file(path);
  return s.ok() ? *s : "";
}

std::string named(const std::string& config) {
  return config.empty() ? "the embedded default config" : "--config " + config;
}

}  // namespace

std::optional<int> start_precheck(const Global& g, const config::Cluster& c,
                                  const std::string& host, nlohmann::json* running_stack) {
  const std::string want = canonical(g.config_file);
  if (auto st = supervisor::running(c)) {
    const std::string run_cfg = canonical(st->value("config", ""));
    const std::string run_host = st->value("host", "");
    // No --config: the CLI already loaded the running stack's config (config_file_in_use).
    const std::string cfg = g.config_file.empty() ? run_cfg : want;
    const auto rec = read_record(c.state_dir);
    const bool edited = rec && canonical(rec->config) == run_cfg && !run_cfg.empty() &&
                        !rec->config_sha256.empty() && rec->config_sha256 != file_sha(run_cfg);
    if (cfg == run_cfg && (host.empty() || host == run_host) && !edited) {
      *running_stack = *st;
      return std::nullopt;  // already running: the caller says so and exits 0
    }
    fmt::print(stderr,
               "start: a stack already runs for {} (supervisor pid {}) with {} for host \"{}\"{}; "
               "this start asked for {}{}; run `h3pipe stop` first\n",
               c.state_dir.string(), st->value("supervisor_pid", 0), named(run_cfg), run_host,
               edited ? ", and that file has changed since it started" : "", named(cfg),
               host.empty() ? "" : " for host \"" + host + "\"");
    return kExitFailed;
  }
  if (g.config_file.empty()) {
    if (auto rec = read_record(c.state_dir); rec && !rec->config.empty()) {
      fmt::print(stderr,
                 "start: {} was started with --config {}{}; pass --config {} to start it again "
                 "(or --config FILE for another config; remove {} to start the embedded default "
                 "config there)\n",
                 c.state_dir.string(), rec->config,
                 rec->host.empty() ? "" : " (host \"" + rec->host + "\")", rec->config,
                 record_file(c.state_dir).string());
      return kExitUsage;
    }
  }
  return std::nullopt;
}

void write_start_record(const Global& g, const config::Cluster& c, const nlohmann::json& stack) {
  const std::string cfg = canonical(g.config_file);
  const nlohmann::json j = {
      {"config", cfg}, {"config_sha256", file_sha(cfg)}, {"host", stack.value("host", "")}};
  // Best effort: without it the next start only loses the P13 check.
  if (artifacts::write_atomic(record_file(c.state_dir), j.dump(2) + "\n").ok()) {
    std::error_code ec;
    fs::remove(artifacts::sidecar_path(record_file(c.state_dir)), ec);  // not an artifact
  }
}

}  // namespace h3pipe::cli
