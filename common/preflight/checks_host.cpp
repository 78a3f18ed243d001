// gpu.visible, disk.free, curve.keys and api.tls rows: what this machine itself must provide.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "common/preflight/checks.h"
#include "common/supervisor/api_tls.h"
#include "common/transfer/keys.h"

namespace h3pipe::preflight {
namespace fs = std::filesystem;

namespace {

std::string join_ids(const std::vector<int>& ids) {
  std::string s;
  for (int i : ids) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s;
}

std::string gib(double bytes) {
  if (bytes >= double(1ull << 30)) return fmt::format("{:.2f} GiB", bytes / double(1ull << 30));
  if (bytes >= double(1ull << 20)) return fmt::format("{:.2f} MiB", bytes / double(1ull << 20));
  return fmt::format("{:.0f} KiB", bytes / 1024.0);
}

std::string models(const std::vector<std::string>& names) {
  std::map<std::string, int> n;
  for (const auto& x : names) ++n[x];
  std::string s;
  for (const auto& [name, k] : n) s += fmt::format("{}{} x{}", s.empty() ? "" : ", ", name, k);
  return s;
}

}  // namespace

void check_gpus(const config::Cluster& c, const Options& o, const Scope& s, Report& rep) {
  std::optional<gpu::Inventory> inv;  // probed once, on the first host that needs it
  for (const config::Host* h : s.checked) {
    std::set<int> ids;
    std::set<std::string> runtimes;
    for (const config::Pool* p : c.pools_on(h->name)) {
      if (p->gpus.empty()) continue;
      ids.insert(p->gpus.begin(), p->gpus.end());
      runtimes.insert(c.runtime_for(*p).name);
    }
    if (ids.empty()) continue;
    std::vector<int> want(ids.begin(), ids.end());
    if (!inv) inv = gpu::probe_inventory(o.nvml_library);
    std::string target = h->name;
    if (!inv->nvml) {
      bool only_sim = runtimes.size() == 1 && runtimes.count("sim");
      bool cpu_capable = !runtimes.empty();
      for (const auto& r : runtimes) cpu_capable = cpu_capable && (r == "sim" || r == "builtin");
      std::string detail =
          fmt::format("config asks for GPU(s) {} but {}", join_ids(want), inv->error);
      if (only_sim)
        rep.pass("gpu.visible", target, detail + "; the sim runtime needs none");
      else if (cpu_capable)
        rep.warn("gpu.visible", target, detail,
                 "the builtin runtime falls back to the CPU; install the NVIDIA driver (and, in a "
                 "container, the NVIDIA container toolkit with capability utility) for GPU runs");
      else
        rep.fail(
            "gpu.visible", target, detail,
            "install the NVIDIA driver; in a container, reserve the GPUs (compose "
            "deploy.resources.reservations.devices) and run with the NVIDIA container toolkit");
      continue;
    }
    std::string env;
    if (o.nvidia_visible_devices)
      env = *o.nvidia_visible_devices;
    else if (const char* e = std::getenv("NVIDIA_VISIBLE_DEVICES"))
      env = e;
    auto idx = gpu::nvml_indices(want, env.c_str());
    std::vector<int> missing;
    for (std::size_t i = 0; i < want.size(); ++i)
      if (idx[i] < 0 || idx[i] >= inv->count) missing.push_back(want[i]);
    std::string seen = fmt::format("NVML sees {} device(s){}{}, driver {}", inv->count,
                                   inv->count ? ": " : "", models(inv->names), inv->driver);
    if (missing.empty()) {
      rep.pass("gpu.visible", target, fmt::format("GPU(s) {} present; {}", join_ids(want), seen));
    } else {
      rep.fail(
          "gpu.visible", target,
          fmt::format("config asks for GPU(s) {} but {} {} not visible; {}{}", join_ids(want),
                      join_ids(missing), missing.size() == 1 ? "is" : "are", seen,
                      env.empty() ? "" : " (NVIDIA_VISIBLE_DEVICES=" + env + ")"),
          "fix pools[].gpus for this host (nvidia-smi -L lists the ids), or the GPU ids in the "
          "host's compose env file; a GPU that fell off the bus needs a reset or reboot");
    }
  }
}

void check_disk(const config::Cluster& c, const Options& o, Report& rep) {
  std::set<std::string> seen;
  for (const fs::path& root : {c.artifact_root, c.output_root, c.state_dir}) {
    if (root.empty() || !seen.insert(root.string()).second) continue;
    // The roots are created at start; measure the nearest directory that exists.
    fs::path p = root;
    std::error_code ec;
    while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) p = p.parent_path();
    struct statvfs v {};
    if (p.empty() || ::statvfs(p.c_str(), &v) != 0) {
      rep.fail("disk.free", root.string(),
               fmt::format("cannot stat {}: {}", p.string(), std::strerror(errno)),
               "create the directory or fix the path in the config");
      continue;
    }
    double free_b = double(v.f_bavail) * double(v.f_frsize);
    double size_b = double(v.f_blocks) * double(v.f_frsize);
    double threshold = std::min(double(o.min_free_bytes), o.min_free_ratio * size_b);
    std::string detail =
        fmt::format("{} free of {} ({:.1f} %) at {}; threshold {}", gib(free_b), gib(size_b),
                    size_b > 0 ? 100.0 * free_b / size_b : 0.0, p.string(), gib(threshold));
    if (::access(p.c_str(), W_OK) != 0) {
      rep.fail("disk.free", root.string(),
               fmt::format("{} is not writable: {}", p.string(), std::strerror(errno)),
               "give the service user write access (containers run as uid 10001)");
    } else if (free_b < threshold) {
      rep.fail(
          "disk.free", root.string(), detail,
          "free space: remove finished runs' artifacts (latents are only needed until decoded) "
          "or point artifact_root/output_root at a larger volume");
    } else {
      rep.pass("disk.free", root.string(), detail);
    }
  }
}

namespace {

// The public keys of the other hosts that host `h` talks to over CURVE: a sender (sample pools)
// authenticates each decode host's receiver by its key (transfer::sender_options), a receiver
// (decode pools) admits each sampling host's sender by its key (receiver_options, the hand-off's
// sampled_on check).  Each must be a readable file holding a 40-character Z85 key.
void check_peer_keys(const config::Cluster& c, const config::Host& h, Report& rep) {
  const bool sends = !c.pools_on(h.name, config::StageKind::kSample).empty();
  const bool receives = !c.pools_on(h.name, config::StageKind::kDecode).empty();
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const config::Host& peer = c.hosts[i];
    if (peer.name == h.name) continue;
    const bool peer_receives = !c.pools_on(peer.name, config::StageKind::kDecode).empty();
    const bool peer_sends = !c.pools_on(peer.name, config::StageKind::kSample).empty();
    const char* why = sends && peer_receives   ? "this host's sender authenticates its receiver"
                      : receives && peer_sends ? "this host's receiver admits its sender"
                                               : nullptr;
    if (!why) continue;
    const std::string target =
        fmt::format("{} peer {} transfer_public_key_file", h.name, peer.name);
    const std::string where = fmt::format("/hosts/{}/transfer_public_key_file", i);
    const std::string fix = fmt::format(
        "on host {} run `h3pipe keygen --dir keys --name {}` and copy keys/{}.pub to this host "
        "at the path {} names (config-adapt writes keys/{}.pub beside the config)",
        peer.name, peer.name, peer.name, where, peer.name);
    if (peer.transfer_public_key_file.empty()) {
      rep.fail("curve.keys", target,
               fmt::format("{}: not configured, but {} by its public key", where, why), fix);
      continue;
    }
    auto k = transfer::load_key_file(peer.transfer_public_key_file, false);
    if (!k.ok())
      rep.fail("curve.keys", target, fmt::format("{}: {} ({})", where, k.error().message, why),
               fix);
    else
      rep.pass("curve.keys", target,
               fmt::format("{}: a Z85 public key ({})", peer.transfer_public_key_file, why));
  }
}

}  // namespace

void check_keys(const config::Cluster& c, const Options& o, const Scope& s, Report& rep) {
  bool needed = c.transfer.curve && c.hosts.size() > 1;
  for (const config::Host* h : s.checked) {
    if (!needed && h->transfer_public_key_file.empty() && h->transfer_secret_key_file.empty()) {
      rep.add("curve.keys", h->name, Outcome::kSkip,
              c.hosts.size() > 1 ? "transfer.curve is off" : "one host: no transfer between hosts");
      continue;
    }
    struct Key {
      const char* what;
      const std::string& path;
      bool secret;
    };
    for (const Key& k : {Key{"transfer_public_key_file", h->transfer_public_key_file, false},
                         Key{"transfer_secret_key_file", h->transfer_secret_key_file, true}}) {
      std::string target = fmt::format("{} {}", h->name, k.what);
      std::string fix = fmt::format(
          "run `h3pipe keygen` for host {} and set hosts[].{} to the file "
          "(mounted read-only at /etc/h3pipe/keys in containers)",
          h->name, k.what);
      if (k.path.empty()) {
        rep.fail("curve.keys", target, "not configured, but transfer between hosts uses CURVE",
                 fix);
        continue;
      }
      struct stat st {};
      if (::stat(k.path.c_str(), &st) != 0) {
        rep.fail("curve.keys", target, fmt::format("{}: {}", k.path, std::strerror(errno)), fix);
        continue;
      }
      std::ifstream in(k.path);
      std::string first;
      if (!S_ISREG(st.st_mode) || !in || !std::getline(in, first) || first.empty()) {
        rep.fail("curve.keys", target, fmt::format("{} is not a readable, non-empty file", k.path),
                 fix);
        continue;
      }
      if (k.secret && (st.st_mode & 077))
        rep.warn(
            "curve.keys", target,
            fmt::format("{} is readable by group/others (mode {:o})", k.path, st.st_mode & 0777),
            "chmod 600 the secret key (or 0400 in the secret mount)");
      else
        rep.pass("curve.keys", target, k.path + " readable");
    }
    if (needed) check_peer_keys(c, *h, rep);
  }
}

// h3pipe-api's own certificate and the api_bind rule (docs/api.md, "TLS"): what `start` would
// refuse (supervisor::check_api_tls) fails; an API off loopback without its own certificate
// warns, as it is safe only behind a TLS proxy, which preflight cannot see.
void check_api_tls(const config::Cluster& c, const Scope& s, Report& rep) {
  for (const config::Host* h : s.checked) {
    if (h->api_tls_cert.empty() && h->api_tls_key.empty()) {
      const bool loopback =
          h->api_bind.rfind("127.", 0) == 0 || h->api_bind == "::1" || h->api_bind == "localhost";
      if (loopback)
        rep.add("api.tls", h->name, Outcome::kSkip,
                fmt::format("api_bind {}: loopback, no TLS needed", h->api_bind));
      else
        rep.warn("api.tls", h->name,
                 fmt::format("h3pipe-api listens on {} without its own certificate: bearer tokens "
                             "cross the network in clear unless a TLS proxy is in front",
                             h->api_bind),
                 "set hosts[].api_tls_cert and api_tls_key (docs/api.md, \"TLS\"), or put a TLS "
                 "proxy in front");
      continue;
    }
    if (auto st = supervisor::check_api_tls(c, h->name); !st.ok())
      rep.fail("api.tls", h->name, st.error().message,
               "hosts[].api_tls_cert: a PEM certificate chain; api_tls_key: its key, chmod 600");
    else
      rep.pass("api.tls", h->name,
               fmt::format("HTTPS with {} (its key readable by its owner only)", h->api_tls_cert));
  }
}

}  // namespace h3pipe::preflight
