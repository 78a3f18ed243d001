#include "common/spec/input_file.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <sys/vfs.h>

namespace h3pipe::spec {
namespace {
namespace fs = std::filesystem;

constexpr long kProcMagic = 0x9fa0;       // PROC_SUPER_MAGIC
constexpr long kSysfsMagic = 0x62656572;  // SYSFS_MAGIC

Error refused(std::string why) {
  return make_error(errc::input::kRefused, "{}", std::move(why));
}

std::string roots_text(const std::vector<fs::path>& roots) {
  std::vector<std::string> s;
  for (const auto& r : roots) s.push_back(r.string());
  return fmt::format("{}", fmt::join(s, ", "));
}

// The relative part is already lexically checked; the kernel resolves it beneath the root.
Result<InputFile> open_checked(const fs::path& root, const fs::path& rel,
                               const std::string& shown) {
  auto fd = artifacts::open_beneath(root, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd.ok()) {
    const auto& c = fd.error().code;
    if (c == errc::path::kSymlink || c == errc::path::kEscape)
      return refused(
          fmt::format("{} goes through a symlink below the input root {}", shown, root.string()));
    return refused(fmt::format("{} cannot be opened below the input root {}: {}", shown,
                               root.string(), fd.error().message));
  }
  InputFile f;
  f.fd = artifacts::UniqueFd(*fd);
  f.path = root / rel;
  struct stat st {};
  struct statfs sf {};
  if (::fstat(f.fd.get(), &st) != 0 || ::fstatfs(f.fd.get(), &sf) != 0)
    return refused(fmt::format("{} cannot be examined", shown));
  if (static_cast<long>(sf.f_type) == kProcMagic || static_cast<long>(sf.f_type) == kSysfsMagic)
    return refused(fmt::format("{} lies on /proc or /sys", shown));
  if (!S_ISREG(st.st_mode))
    return refused(fmt::format("{} is not a regular file ({})", shown,
                               S_ISDIR(st.st_mode)                          ? "a directory"
                               : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                               : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                                                      : "a socket or other special file"));
  f.size = static_cast<std::uint64_t>(st.st_size);
  return f;
}

}  // namespace

Result<InputFile> open_input(const std::vector<fs::path>& roots, const std::string& path) {
  if (path.find('\0') != std::string::npos) return refused("contains a NUL byte");
  if (roots.empty())
    return refused(
        fmt::format("{}: reference images are disabled here (limits.input_roots is [])", path));
  fs::path p(path);
  if (p.is_absolute()) {
    for (const auto& root : roots) {
      auto rel = artifacts::relative_beneath(root, p);
      if (!rel.ok()) {
        if (rel.error().code == errc::path::kNotBeneath) continue;
        return refused(fmt::format("{}: {}", path, rel.error().message));
      }
      return open_checked(root, *rel, path);
    }
    return refused(fmt::format("{} is not under an input root (limits.input_roots: {})", path,
                               roots_text(roots)));
  }
  if (auto st = artifacts::check_relative(p); !st.ok())
    return refused(fmt::format("{}: {}", path, st.error().message));
  std::string first_error;
  for (const auto& root : roots) {
    std::error_code ec;
    if (!fs::exists(fs::path(root) / p, ec) && !fs::is_symlink(fs::path(root) / p, ec)) continue;
    // Messages name the file the relative path resolved to, beneath this root.
    return open_checked(root, p, fmt::format("{} ({})", path, (root / p).string()));
  }
  return refused(
      fmt::format("{} is in no input root (limits.input_roots: {})", path, roots_text(roots)));
}

}  // namespace h3pipe::spec
