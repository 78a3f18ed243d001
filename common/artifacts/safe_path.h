#pragma once
// Confinement of every file a service creates to a configured root (issue #7, docs/security.md).
//
// A path given to these functions is split into a trusted root (from the config: artifact_root,
// output_root, state_dir; it may itself be a symlink, the operator chose it) and a relative part
// that may come from untrusted input (run id, job id, an offer's name).  The relative part is
// resolved beneath the root by the kernel:
//   - openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) via syscall(SYS_openat2) where the kernel
//     has it (Linux >= 5.6), so neither "..", a symlink, nor a rename race can leave the root;
//   - else a component-by-component walk: openat(dirfd, one_name, O_NOFOLLOW | O_DIRECTORY) per
//     directory and O_NOFOLLOW on the last name, each step relative to the fd of the one before.
// Both refuse, with a clear error and before creating anything outside the root:
//   path.absolute   an absolute relative part         path.dotdot    a ".." or "." component
//   path.nul        a NUL byte                         path.too_long  a component > 255 bytes or >
//   4095 in all path.empty      nothing to open                    path.symlink   a symlink
//   anywhere below the root path.escape     resolution would leave the root    path.not_beneath  an
//   absolute path not under root
// Thread-safe; no global state other than a cached "does this kernel have openat2" probe.
#include <fcntl.h>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <utility>

#include "common/core/result.h"

namespace h3pipe::artifacts {

namespace fs = std::filesystem;

// How the relative part is resolved.  kAuto = openat2 where available, else the walk.  Tests force
// kWalk to cover the fallback on kernels that have openat2.
enum class Resolver { kAuto, kOpenat2, kWalk };

// Owns one file descriptor (closed on destruction).
class UniqueFd final {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Lexical checks on a relative part (the list above, except symlink/escape which need the disk).
Status check_relative(const fs::path& relative);

// Splits `path` into the part below `root`: an absolute path must start with root's components
// (compared as written, no normalisation, so "root/a/../../x" is refused for its ".."); a relative
// path is taken as already relative to the root.  The result passed check_relative.
Result<fs::path> relative_beneath(const fs::path& root, const fs::path& path);

// Opens root/relative with open(2) flags and mode; the caller owns the returned fd.  O_CLOEXEC is
// always added; O_NOFOLLOW semantics apply to every component below the root.  With O_CREAT the
// parent directories must exist (see mkdirs_beneath).
Result<int> open_beneath(const fs::path& root, const fs::path& relative, int flags, mode_t mode = 0,
                         Resolver how = Resolver::kAuto);

// Creates root/relative and every missing directory between (mode 0755), never following a
// symlink below the root.  The root itself must exist.  Existing directories are fine.
Status mkdirs_beneath(const fs::path& root, const fs::path& relative,
                      Resolver how = Resolver::kAuto);

// Opens the directory root/relative (O_DIRECTORY); creates it first (mkdirs_beneath) if `create`.
// An empty relative part opens the root itself.
Result<UniqueFd> open_dir_beneath(const fs::path& root, const fs::path& relative, bool create,
                                  Resolver how = Resolver::kAuto);

// Whether this kernel (and seccomp policy) lets us call openat2; probed once.
bool openat2_available();

}  // namespace h3pipe::artifacts
