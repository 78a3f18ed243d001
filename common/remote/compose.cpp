// The compose launcher's host side (issue #34 P7): which compose command a host has (Docker's
// plugin `docker compose`, or the standalone `docker-compose` that Debian 12 ships), and the
// deploy/<host>.env file compose.yaml reads, rendered from the cluster config.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>

#include "common/remote/remote.h"

namespace h3pipe::remote {
namespace {

const std::vector<std::vector<std::string>> kProbes = {{"docker", "compose", "version"},
                                                       {"docker-compose", "version"}};

std::string trimmed(const std::string& s) {
  std::string t = s;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t.empty() ? "(no output)" : t;
}

std::string gpu_list(const std::vector<int>& gpus) {
  return gpus.empty() ? "none" : fmt::format("{}", fmt::join(gpus, ","));
}

}  // namespace

Result<std::vector<std::string>> parse_compose_command(std::string_view text) {
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty() || words.front().front() == '-')
    return make_error(errc::remote::kCompose,
                      "--compose-cmd \"{}\": expected auto, \"docker compose\" or docker-compose "
                      "(a command, then its words)",
                      text);
  return words;
}

std::vector<std::vector<std::string>> compose_probes() {
  return kProbes;
}

Status detect_compose(const config::Cluster& c, Options& o) {
  Options probe = o;
  probe.launcher = Launcher::kNative;
  std::vector<std::string> pending;
  for (const auto& h : c.hosts)
    if (o.hosts.empty() || std::find(o.hosts.begin(), o.hosts.end(), h.name) != o.hosts.end())
      pending.push_back(h.name);
  std::map<std::string, std::string> tried;  // host -> what each probe said
  for (const auto& words : kProbes) {
    if (pending.empty()) break;
    std::vector<HostCommand> cmds;
    for (const auto& name : pending) {
      auto hc = wrap_for_host(c, probe, *c.find_host(name), words);
      if (!hc.ok()) return hc.error();
      cmds.push_back(std::move(*hc));
    }
    std::vector<std::string> still;
    for (const auto& r : run_all(cmds, std::min(o.timeout, std::chrono::seconds(30)), o.parallel)) {
      if (r.exit_code == 0 && !r.timed_out) {
        o.compose_by_host[r.host] = {words.begin(), words.end() - 1};  // without "version"
        continue;
      }
      tried[r.host] +=
          fmt::format("\n    `{}` exit {}: {}", render(words),
                      r.timed_out ? "TIMEOUT" : std::to_string(r.exit_code), trimmed(r.output));
      still.push_back(r.host);
    }
    pending = std::move(still);
  }
  if (pending.empty()) return {};
  std::string why;
  for (const auto& h : pending) why += fmt::format("\n  host {}:{}", h, tried[h]);
  return make_error(errc::remote::kCompose,
                    "no compose command found (install the Docker compose plugin or "
                    "docker-compose, or name one with --compose-cmd):{}",
                    why);
}

Result<std::string> compose_env(const config::Cluster& c, const config::Host& h,
                                const std::string& config_file) {
  auto profiles = compose_profiles(c, h);
  if (!profiles.ok()) return profiles.error();
  std::string e = fmt::format(
      "# compose.yaml's settings for host {} (written by h3pipe config-adapt from the config;\n"
      "# docs/deploy.md).  Used as:\n"
      "#   docker compose --project-directory DIR --env-file DIR/deploy/{}.env up -d\n"
      "# (or h3pipe start --all --launcher compose).  Paths are relative to DIR, the folder with\n"
      "# compose.yaml, this deploy/ folder and the config.\n",
      h.name, h.name);
  e += fmt::format("COMPOSE_PROFILES={}\n", fmt::join(*profiles, ","));
  e += fmt::format("H3PIPE_HOST={}\n", h.name);
  e += fmt::format("H3PIPE_CONFIG_FILE={}\n", config_file);
  e += "H3PIPE_KEYS_DIR=./keys\nH3PIPE_DATA_DIR=/var/lib/h3pipe\n";
  e += "# Secret files (redis-<user>.password per service user; docs/deploy.md).\n";
  e += "H3PIPE_SECRETS_DIR=./secrets\n";
  e += "# Pools (names from the config) and the host GPU ids each reserves.\n";
  const auto line = [&](const char* slot, const config::Pool* p) {
    e += fmt::format("H3PIPE_{}_POOL={}\nH3PIPE_{}_GPUS={}\n", slot, p->name, slot,
                     gpu_list(p->gpus));
  };
  const auto samplers = c.pools_on(h.name, config::StageKind::kSample);
  const auto encoders = c.pools_on(h.name, config::StageKind::kEncode);
  const auto decoders = c.pools_on(h.name, config::StageKind::kDecode);
  if (!encoders.empty()) line("ENCODER", encoders.front());
  if (!samplers.empty()) line("SAMPLER0", samplers.front());
  if (samplers.size() > 1) line("SAMPLER1", samplers[1]);
  if (!decoders.empty()) line("DECODER", decoders.front());
  e += "# Must equal hosts[].transfer_port of this host in the config.\n";
  e += fmt::format("H3PIPE_TRANSFER_PORT={}\n", h.transfer_port > 0 ? h.transfer_port : 7700);
  e +=
      "# Must equal the data port in effect: hosts[].transfer_data_port, else transfer_port + 1.\n";
  e += fmt::format("H3PIPE_TRANSFER_DATA_PORT={}\n", h.transfer_port > 0 ? h.data_port() : 7701);
  if (is_control_host(c, h)) e += fmt::format("H3PIPE_REDIS_PUBLISH={}\n", c.redis.port);
  e += "H3PIPE_LOG_LEVEL=info\n";
  return e;
}

}  // namespace h3pipe::remote
