// What `status` and `wait` say about storage that cannot take writes (issue #22 item 10): a
// Redis refusing writes because it cannot persist (MISCONF after a failed AOF/RDB write: a full
// disk under it), and, for the local stack, which of its folders has no space left.  Reads only:
// PING (Redis answers MISCONF to it while writes are refused), INFO persistence, statvfs.
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <optional>
#include <set>

#include "common/api/fleet.h"
#include "common/queue/server.h"
#include "common/supervisor/supervisor.h"

namespace h3pipe::api {
namespace fs = std::filesystem;
namespace {

// The file system's id when `p` is on one with no space left for unprivileged writes.
std::optional<unsigned long> full_fs(const fs::path& p) {
  struct statvfs v {};
  struct stat st {};
  if (::statvfs(p.c_str(), &v) != 0 || v.f_bavail != 0 || ::stat(p.c_str(), &st) != 0)
    return std::nullopt;
  return static_cast<unsigned long>(st.st_dev);
}

}  // namespace

std::string storage_degraded(queue::Redis& redis, const config::Cluster& c) {
  std::string why;
  auto ping = queue::ping(redis);
  if (!ping.ok() && ping.error().code == errc::redis::kError &&
      ping.error().message.rfind("MISCONF", 0) == 0)
    why = ping.error().message;
  if (why.empty()) {
    auto info = queue::info(redis, "persistence");
    const std::string text = info.ok() ? *info : "";
    if (text.find("aof_last_write_status:err") != std::string::npos)
      why = "Redis's last AOF write failed";
    else if (text.find("rdb_last_bgsave_status:err") != std::string::npos)
      why = "Redis's last RDB save failed";
  }
  // The local stack's folders (Redis's data dir among them) that have no space left.
  std::vector<std::string> full_dirs;
  if (supervisor::running(c)) {
    std::set<unsigned long> seen;  // one folder per file system
    for (const fs::path& p : {c.state_dir / "redis", c.artifact_root, c.output_root}) {
      std::error_code ec;
      if (!fs::exists(p, ec)) continue;
      if (auto id = full_fs(p); id && seen.insert(*id).second) full_dirs.push_back(p.string());
    }
  }
  if (why.empty() && full_dirs.empty()) return "";
  std::string out =
      full_dirs.empty() ? "Redis cannot persist" : "disk full at " + full_dirs.front();
  for (std::size_t i = 1; i < full_dirs.size(); ++i) out += ", " + full_dirs[i];
  if (!why.empty())
    out += " (" + why + "; Redis refuses every write, so no job moves until space is freed)";
  return out;
}

}  // namespace h3pipe::api
