#include "common/artifacts/safe_path.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string_view>
#include <vector>

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#else
#include <cstdint>
struct open_how {
  std::uint64_t flags;
  std::uint64_t mode;
  std::uint64_t resolve;
};
#define RESOLVE_NO_XDEV 0x01
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_BENEATH 0x08
#endif

#ifndef SYS_openat2
#define SYS_openat2 437  // the same number on every architecture (asm-generic)
#endif

namespace h3pipe::artifacts {
namespace {

constexpr std::size_t kMaxComponent = NAME_MAX;     // 255
constexpr std::size_t kMaxRelative = PATH_MAX - 1;  // 4095

// Splits a relative path into its names, skipping empty ones ("a//b", a trailing '/').
std::vector<std::string> components(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find('/', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string shown(const fs::path& root, const fs::path& rel) {
  std::string r = rel.native();
  for (auto& c : r)
    if (c == '\0') c = '?';
  return (root / fs::path(r)).string();
}

// `call` is the io.* code for an errno without a path.* meaning; its leaf names the call.
Error errno_error(int err, const fs::path& root, const fs::path& rel, const ErrorCode& call) {
  const std::string_view what = call.leaf();
  switch (err) {
    case ELOOP:
      return make_error(
          errc::path::kSymlink,
          "{} {}: a symlink below the root {} was refused (symlinks are never followed there)",
          what, shown(root, rel), root.string());
    case EXDEV:
      return make_error(errc::path::kEscape, "{} {}: resolution would leave the root {}", what,
                        shown(root, rel), root.string());
    case ENOENT:
      return make_error(errc::path::kMissing, "{} {}: no such file or directory", what,
                        shown(root, rel));
    case ENAMETOOLONG:
      return make_error(errc::path::kTooLong, "{} {}: a name is too long", what, shown(root, rel));
    default:
      return make_error(call, "{} {}: {}", what, shown(root, rel), std::strerror(err));
  }
}

Result<UniqueFd> open_root(const fs::path& root) {
  if (root.native().find('\0') != std::string::npos)
    return make_error(errc::path::kNul, "root {}: contains a NUL byte", shown(root, {}));
  const char* p = root.empty() ? "." : root.c_str();
  int fd = ::open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return make_error(e == ENOENT ? errc::path::kMissing : errc::io::kOpen, "root {}: {}",
                      root.string(), std::strerror(e));
  }
  return UniqueFd(fd);
}

long sys_openat2(int dirfd, const char* path, int flags, mode_t mode) {
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  how.flags = static_cast<std::uint64_t>(flags) | O_CLOEXEC;
  bool takes_mode = (flags & O_CREAT) || ((flags & O_TMPFILE) == O_TMPFILE);
  how.mode = takes_mode ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  long fd;
  int tries = 0;
  do {
    // EAGAIN: a concurrent rename or mount raced the lookup; the kernel asks us to retry.
    fd = ::syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  } while (fd < 0 && errno == EAGAIN && ++tries < 16);
  return fd;
}

// One name relative to dirfd, never following a symlink at it.
int open_one(int dirfd, const std::string& name, int flags, mode_t mode) {
  return ::openat(dirfd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

// O_DIRECTORY | O_NOFOLLOW on a symlink gives ELOOP on Linux, but a symlink to a non-directory
// may report ENOTDIR on some filesystems: look before naming the error.
int classify(int dirfd, const std::string& name, int err) {
  if (err == ENOTDIR || err == EEXIST) {
    struct stat st {};
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      return ELOOP;
  }
  return err;
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

bool openat2_available() {
  static const bool kAvailable = [] {
    long fd = sys_openat2(AT_FDCWD, ".", O_PATH, 0);
    if (fd < 0) return false;  // ENOSYS (old kernel) or EPERM/ENOSYS from a seccomp profile
    ::close(static_cast<int>(fd));
    return true;
  }();
  return kAvailable;
}

Status check_relative(const fs::path& relative) {
  const std::string& s = relative.native();
  if (s.find('\0') != std::string::npos)
    return make_error(errc::path::kNul, "{}: contains a NUL byte", shown({}, relative));
  if (s.empty())
    return make_error(errc::path::kEmpty, "an empty path names nothing below the root");
  if (s.front() == '/')
    return make_error(errc::path::kAbsolute,
                      "{}: an absolute path where a path below the root is required", s);
  if (s.size() > kMaxRelative)
    return make_error(errc::path::kTooLong, "{}...: {} bytes, at most {} allowed", s.substr(0, 64),
                      s.size(), kMaxRelative);
  auto parts = components(s);
  if (parts.empty()) return make_error(errc::path::kEmpty, "{}: names nothing below the root", s);
  for (const auto& c : parts) {
    if (c == "." || c == "..")
      return make_error(errc::path::kDotdot, "{}: component \"{}\" is not allowed below the root",
                        s, c);
    if (c.size() > kMaxComponent)
      return make_error(errc::path::kTooLong, "{}...: a component of {} bytes, at most {} allowed",
                        s.substr(0, 64), c.size(), kMaxComponent);
  }
  return {};
}

Result<fs::path> relative_beneath(const fs::path& root, const fs::path& path) {
  if (path.native().find('\0') != std::string::npos ||
      root.native().find('\0') != std::string::npos)
    return make_error(errc::path::kNul, "{}: contains a NUL byte", shown({}, path));
  if (!path.is_absolute()) {
    H3_TRY(check_relative(path));
    return path;
  }
  std::error_code ec;
  fs::path abs_root = root.is_absolute() ? root : fs::absolute(root, ec);
  if (ec)
    return make_error(errc::io::kCwd, "cannot make {} absolute: {}", root.string(), ec.message());
  auto rc = components(abs_root.native());
  auto pc = components(path.native());
  bool under = pc.size() > rc.size();
  for (std::size_t i = 0; under && i < rc.size(); ++i) under = rc[i] == pc[i];
  if (!under)
    return make_error(errc::path::kNotBeneath, "{} is not below the root {}", path.string(),
                      abs_root.string());
  fs::path rel;
  for (std::size_t i = rc.size(); i < pc.size(); ++i) rel /= pc[i];
  H3_TRY(check_relative(rel));
  return rel;
}

Result<int> open_beneath(const fs::path& root, const fs::path& relative, int flags, mode_t mode,
                         Resolver how) {
  H3_TRY(check_relative(relative));
  auto rootfd = open_root(root);
  if (!rootfd.ok()) return rootfd.error();
  bool use_openat2 = how == Resolver::kOpenat2 || (how == Resolver::kAuto && openat2_available());
  if (how == Resolver::kOpenat2 && !openat2_available())
    return make_error(errc::path::kUnsupported, "openat2 is not available on this kernel");
  if (use_openat2) {
    long fd = sys_openat2(rootfd->get(), relative.c_str(), flags, mode);
    if (fd < 0) {
      int e = errno;
      if (e == EEXIST) {
        struct stat st {};
        if (::fstatat(rootfd->get(), relative.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode))
          e = ELOOP;
      }
      return errno_error(e, root, relative, errc::io::kOpen);
    }
    return static_cast<int>(fd);
  }
  // The walk: every directory by one name relative to the fd of the one before, O_NOFOLLOW each.
  auto parts = components(relative.native());
  UniqueFd dir = std::move(*rootfd);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    int next = open_one(dir.get(), parts[i], O_RDONLY | O_DIRECTORY, 0);
    if (next < 0)
      return errno_error(classify(dir.get(), parts[i], errno), root, relative, errc::io::kOpen);
    dir = UniqueFd(next);
  }
  int fd = open_one(dir.get(), parts.back(), flags, mode);
  if (fd < 0)
    return errno_error(classify(dir.get(), parts.back(), errno), root, relative, errc::io::kOpen);
  return fd;
}

Status mkdirs_beneath(const fs::path& root, const fs::path& relative, Resolver how) {
  H3_TRY(check_relative(relative));
  if (how == Resolver::kOpenat2 && !openat2_available())
    return make_error(errc::path::kUnsupported, "openat2 is not available on this kernel");
  auto rootfd = open_root(root);
  if (!rootfd.ok()) return rootfd.error();
  // One name per step is safe with either resolver: mkdirat never follows a symlink at its last
  // name (EEXIST) and the open that follows refuses one (O_NOFOLLOW), so a symlink planted
  // anywhere, before or during the walk, stops it.
  UniqueFd dir = std::move(*rootfd);
  for (const auto& name : components(relative.native())) {
    if (::mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST)
      return errno_error(errno, root, relative, errc::io::kMkdir);
    int next = open_one(dir.get(), name, O_RDONLY | O_DIRECTORY, 0);
    if (next < 0)
      return errno_error(classify(dir.get(), name, errno), root, relative, errc::io::kMkdir);
    dir = UniqueFd(next);
  }
  return {};
}

Result<UniqueFd> open_dir_beneath(const fs::path& root, const fs::path& relative, bool create,
                                  Resolver how) {
  if (relative.empty()) return open_root(root);
  if (create) H3_TRY(mkdirs_beneath(root, relative, how));
  auto fd = open_beneath(root, relative, O_RDONLY | O_DIRECTORY, 0, how);
  if (!fd.ok()) return fd.error();
  return UniqueFd(*fd);
}

}  // namespace h3pipe::artifacts
