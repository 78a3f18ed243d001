#include "common/deploy/targets.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/deploy/services.h"

namespace h3pipe::deploy {
namespace fs = std::filesystem;
namespace {

int run_file_port(const config::Cluster& c, const HostService& s) {
  std::ifstream in(c.state_dir / "run" / (s.name() + ".json"));
  if (!in) return 0;
  // json-parse: a run file h3pipe's own service wrote in the private (0700) state dir
  const auto j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() ? j.value("metrics_port", 0) : 0;
}

}  // namespace

Result<Targets> prometheus_targets(const config::Cluster& c, const TargetsOptions& o) {
  std::vector<const config::Host*> hosts;
  for (const auto& n : o.hosts) {
    const config::Host* h = c.find_host(n);
    if (!h) return make_error(errc::config::kInvalid, "--host {}: not a host in the config", n);
    hosts.push_back(h);
  }
  if (o.hosts.empty())
    for (const auto& h : c.hosts) hosts.push_back(&h);
  Targets t;
  for (const config::Host* h : hosts) {
    for (const HostService& s : services_on(c, *h)) {
      int port = s.metrics_port;
      if (port == 0 && h->name == o.local_host) port = run_file_port(c, s);
      if (port <= 0) {
        t.missing.push_back(
            fmt::format("{}/{}: no fixed metrics port; set {}", h->name, s.name(), s.port_field));
        continue;
      }
      nlohmann::json labels = {{"host", h->name}, {"service", s.service}};
      if (s.pool) labels["pool"] = s.pool->name;
      t.groups.push_back(
          {{"targets", {fmt::format("{}:{}", scrape_address(*h), port)}}, {"labels", labels}});
    }
    // h3pipe-api (docs/api.md, "Metrics"): listed when its port is known (api_metrics_port, or
    // the run file of this host's running API); optional, so never `missing`.
    int api_port = h->api_metrics_port;
    if (api_port == 0 && h->name == o.local_host)
      api_port = run_file_port(c, HostService{"api", h->name, nullptr, 0, ""});
    if (api_port > 0)
      t.groups.push_back({{"targets", {fmt::format("{}:{}", scrape_address(*h), api_port)}},
                          {"labels", {{"host", h->name}, {"service", "api"}}}});
  }
  return t;
}

Status write_targets(const fs::path& file, const nlohmann::json& groups) {
  std::error_code ec;
  if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
  if (ec)
    return make_error(errc::io::kMkdir, "cannot create {}: {}", file.parent_path().string(),
                      ec.message());
  const fs::path tmp = file.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return make_error(errc::io::kOpen, "cannot write {}: {}", tmp.string(), std::strerror(errno));
  ::fchmod(fd, 0644);  // never narrowed by the umask: Prometheus reads it
  const std::string text = groups.dump(2) + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    return make_error(errc::io::kWrite, "cannot write {}: {}", tmp.string(), std::strerror(err));
  fs::rename(tmp, file, ec);
  if (ec) return make_error(errc::io::kRename, "cannot rename {}: {}", tmp.string(), ec.message());
  return {};
}

fs::path state_targets_file(const config::Cluster& c) {
  return c.state_dir / "prometheus" / "targets.json";
}

}  // namespace h3pipe::deploy
