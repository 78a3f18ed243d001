#include "common/artifacts/artifacts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <vector>

#include "common/core/sha256.h"

namespace h3pipe::artifacts {
namespace {

// The message names the failed call: "fsync /out/j.mp4: No space left on device".
Error io_error(const ErrorCode& call, const fs::path& p, int err) {
  return make_error(call, "{} {}: {}", call.leaf(), p.string(), std::strerror(err));
}

Status write_all(int fd, const std::uint8_t* data, std::size_t len, const fs::path& p) {
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(errc::io::kWrite, p, errno);
    }
    data += n;
    len -= static_cast<std::size_t>(n);
  }
  return {};
}

// A file below a root, held as (fd of its directory, its name): every operation on the file and
// its .part/.sha256 siblings is an *at() call on that fd with one name and O_NOFOLLOW, so nothing
// can redirect it once the directory was opened beneath the root.
struct Target {
  UniqueFd dir;
  std::string name;
  fs::path shown;  // for messages
};

Result<Target> locate(const fs::path& root, const fs::path& final_path, bool create_dirs) {
  auto rel = relative_beneath(root, final_path);
  if (!rel.ok()) return rel.error();
  if (create_dirs) {
    std::error_code ec;
    fs::create_directories(root.empty() ? fs::path(".") : root, ec);  // the root is trusted config
    if (ec) return make_error(errc::io::kMkdir, "mkdir {}: {}", root.string(), ec.message());
  }
  auto dir = open_dir_beneath(root, rel->parent_path(), create_dirs);
  if (!dir.ok()) return dir.error();
  std::string name = rel->filename().native();
  if (name.size() + std::string_view(".sha256.part").size() > NAME_MAX)
    return make_error(errc::path::kTooLong,
                      "{}: the name leaves no room for its .sha256.part sibling ({} bytes)",
                      final_path.string(), name.size());
  return Target{std::move(*dir), name, final_path.is_absolute() ? final_path : root / final_path};
}

// The legacy overloads: the final path's directory is the trusted root.
fs::path parent_root(const fs::path& p) {
  return p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

Status fsync_fd(int fd, const fs::path& p) {
  if (::fsync(fd) != 0) return io_error(errc::io::kFsync, p, errno);
  return {};
}

// name.part is created fresh (a stale one is unlinked first, never opened: it may be a symlink).
Status write_file_synced(const Target& t, const std::string& name,
                         std::span<const std::uint8_t> bytes) {
  fs::path shown = t.shown.parent_path() / name;
  if (::unlinkat(t.dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
    return io_error(errc::io::kUnlink, shown, errno);
  int fd = ::openat(t.dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0644);
  if (fd < 0) return io_error(errc::io::kOpen, shown, errno);
  Status s = write_all(fd, bytes.data(), bytes.size(), shown);
  if (s.ok()) s = fsync_fd(fd, shown);
  if (::close(fd) != 0 && s.ok()) s = io_error(errc::io::kClose, shown, errno);
  if (!s.ok()) (void)::unlinkat(t.dir.get(), name.c_str(), 0);  // ours (O_EXCL): no half file stays
  return s;
}

// On a failed rename `from` is removed: no .part outlives its attempt.
Status rename_synced(const Target& t, const std::string& from, const std::string& to) {
  if (::renameat(t.dir.get(), from.c_str(), t.dir.get(), to.c_str()) != 0) {
    Error e = io_error(errc::io::kRename, t.shown.parent_path() / from, errno);
    (void)::unlinkat(t.dir.get(), from.c_str(), 0);
    return e;
  }
  return fsync_fd(t.dir.get(), t.shown.parent_path());
}

Status write_sidecar(const Target& t, const std::string& hex) {
  std::string side = t.name + ".sha256";
  std::string part = side + ".part";
  std::string line = hex + "  " + t.name + "\n";  // sha256sum format
  H3_TRY(write_file_synced(t, part,
                           {reinterpret_cast<const std::uint8_t*>(line.data()), line.size()}));
  return rename_synced(t, part, side);
}

// Opens one regular file of the target's directory for reading, refusing a symlink.
Result<UniqueFd> open_read(const Target& t, const std::string& name) {
  int fd = ::openat(t.dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    fs::path shown = t.shown.parent_path() / name;
    if (e == ELOOP)
      return make_error(errc::path::kSymlink,
                        "{} is a symlink; artifacts are never read through one", shown.string());
    if (e == ENOENT)
      return make_error(errc::artifact::kMissing, "{} does not exist", shown.string());
    return io_error(errc::io::kOpen, shown, e);
  }
  UniqueFd out(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error(errc::io::kStat, t.shown.parent_path() / name, errno);
  if (!S_ISREG(st.st_mode))
    return make_error(errc::artifact::kNotRegular, "{} is not a regular file",
                      (t.shown.parent_path() / name).string());
  return out;
}

Result<std::string> hash_fd(int fd, const fs::path& shown) {
  Sha256 h;
  // Not zero-filled: only the pages read() fills get touched (a small file costs a few page
  // faults, not 256).
  constexpr std::size_t kBuf = 1 << 20;
  auto buf = std::make_unique_for_overwrite<std::uint8_t[]>(kBuf);
  for (;;) {
    ssize_t n = ::read(fd, buf.get(), kBuf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(errc::io::kRead, shown, errno);
    }
    if (n == 0) break;
    h.update(buf.get(), static_cast<std::size_t>(n));
  }
  return h.hex_digest();
}

std::string read_sidecar_at(const Target& t) {
  auto fd = open_read(t, t.name + ".sha256");
  if (!fd.ok()) return {};
  char buf[256];
  ssize_t n = ::read(fd->get(), buf, sizeof buf);
  if (n < 64) return {};
  std::string hex(buf, 64);
  for (char c : hex)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return {};
  if (n > 64 && !std::isspace(static_cast<unsigned char>(buf[64]))) return {};
  return hex;
}

Result<std::string> verify_at(const Target& t) {
  auto fd = open_read(t, t.name);
  if (!fd.ok()) return fd.error();
  std::string want = read_sidecar_at(t);
  if (want.empty())
    return make_error(errc::artifact::kNoSidecar, "{} has no valid .sha256 sidecar",
                      t.shown.string());
  auto got = hash_fd(fd->get(), t.shown);
  if (!got.ok()) return got.error();
  if (*got != want)
    return make_error(errc::artifact::kMismatch, "{}: content hashes to {}, sidecar says {}",
                      t.shown.string(), *got, want);
  return want;
}

// `part` is durable and hashes to `hex`; publish it.  Stage outputs are committed once: the sidecar
// is written before the data gets its final name (so a final name never exists without the sidecar
// that vouches for it), and the final rename never replaces a file (renameat2 RENAME_NOREPLACE).  A
// second execution of the same stage (a re-delivery after its worker died, a lease lost during a
// Redis fail-over) that reaches the commit finds the first one's verified output and discards its
// own .part: the output is written once whatever dies, and *reused tells the caller so.
// before_publish (if any) runs first; its error removes the .part and is returned.
Result<std::string> publish_once(const Target& t, const std::string& part, const std::string& hex,
                                 bool* reused, const BeforePublish& before_publish) {
  if (reused) *reused = false;
  if (before_publish) {
    if (Status held = before_publish(); !held.ok()) {
      (void)::unlinkat(t.dir.get(), part.c_str(), 0);
      return held.error();
    }
  }
  auto keep_existing = [&]() -> Result<std::string> {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    auto have = verify_at(t);
    if (!have.ok())
      return make_error(errc::artifact::kExists,
                        "{} already exists and does not verify ({}); remove it to redo the stage",
                        t.shown.string(), have.error().message);
    if (reused) *reused = true;
    return *have;
  };
  // An I/O error before the data has its name removes the .part and the sidecar written for it
  // (the final name does not exist, so that sidecar vouches for nothing).
  auto abandon = [&](Error e, bool sidecar_written) -> Result<std::string> {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    struct stat final_st {};
    if (sidecar_written &&
        ::fstatat(t.dir.get(), t.name.c_str(), &final_st, AT_SYMLINK_NOFOLLOW) != 0)
      (void)::unlinkat(t.dir.get(), (t.name + ".sha256").c_str(), 0);
    return e;
  };
  struct stat st {};
  if (::fstatat(t.dir.get(), t.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return keep_existing();
  if (Status side = write_sidecar(t, hex); !side.ok()) return abandon(side.error(), false);
  if (::renameat2(t.dir.get(), part.c_str(), t.dir.get(), t.name.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST) return keep_existing();  // lost a race with a concurrent commit
    if (errno != EINVAL && errno != ENOSYS)
      return abandon(io_error(errc::io::kRename, t.shown.parent_path() / part, errno), true);
    // A filesystem without RENAME_NOREPLACE: link() refuses an existing name just the same.
    if (::linkat(t.dir.get(), part.c_str(), t.dir.get(), t.name.c_str(), 0) != 0) {
      if (errno == EEXIST) return keep_existing();
      return abandon(io_error(errc::io::kLink, t.shown.parent_path() / part, errno), true);
    }
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
  }
  H3_TRY(fsync_fd(t.dir.get(), t.shown.parent_path()));
  return hex;
}

// Writes bytes to NAME.part (fsynced), then either replaces NAME (write_atomic: the sidecar first,
// then the rename) or publishes it once (write_once, see publish_once).
enum class Publish { kReplace, kOnce };
Result<std::string> write_bytes_at(const Target& t, std::span<const std::uint8_t> bytes,
                                   Publish mode, bool* reused = nullptr,
                                   const BeforePublish& before_publish = {}) {
  std::string part = t.name + ".part";
  Status s = write_file_synced(t, part, bytes);
  if (!s.ok()) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    return s.error();
  }
  std::string hex = sha256_hex(bytes.data(), bytes.size());
  if (mode == Publish::kOnce) return publish_once(t, part, hex, reused, before_publish);
  if (Status side = write_sidecar(t, hex); !side.ok()) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    return side.error();
  }
  H3_TRY(rename_synced(t, part, t.name));
  return hex;
}

Result<std::string> commit_part_at(const Target& t, std::string_view expected_sha256, bool* reused,
                                   const BeforePublish& before_publish = {}) {
  std::string part = t.name + ".part";
  auto fd = open_read(t, part);
  if (!fd.ok()) return fd.error();
  fs::path shown_part = part_path(t.shown);
  // The writer's .part goes with an error here, as with every error of publish_once.
  auto drop = [&](Error e) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    return e;
  };
  if (Status synced = fsync_fd(fd->get(), shown_part); !synced.ok()) return drop(synced.error());
  auto hex = hash_fd(fd->get(), shown_part);
  if (!hex.ok()) return drop(hex.error());
  if (!expected_sha256.empty() && *hex != expected_sha256) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    return make_error(errc::artifact::kMismatch, "{}: content hashes to {}, expected {}",
                      t.shown.string(), *hex, expected_sha256);
  }
  return publish_once(t, part, *hex, reused, before_publish);
}

// The legacy overloads' target: the final path's directory (created if missing) is the root.
Result<Target> locate_in_parent(const fs::path& final_path) {
  std::error_code ec;
  fs::create_directories(parent_root(final_path), ec);
  if (ec)
    return make_error(errc::io::kMkdir, "mkdir {}: {}", final_path.parent_path().string(),
                      ec.message());
  auto t = locate(parent_root(final_path), final_path.filename(), false);
  if (t.ok()) t->shown = final_path;
  return t;
}

}  // namespace

Status validate_id(std::string_view field, std::string_view id) {
  if (id.empty()) return make_error(errc::id::kEmpty, "{}: must not be empty", field);
  if (id.size() > kMaxIdLength)
    return make_error(errc::id::kTooLong, "{}: {} characters, at most {} allowed", field, id.size(),
                      kMaxIdLength);
  if (id.front() == '.')
    return make_error(errc::id::kDot, "{}: must not start with '.' (got \"{}\")", field, id);
  for (unsigned char c : id) {
    bool ok = std::isalnum(c) || c == '_' || c == '-' || c == '.';
    if (!ok) {
      std::string shown = c == 0 ? "NUL" : c == '/' ? "'/'" : fmt::format("0x{:02x}", c);
      return make_error(errc::id::kChar,
                        "{}: character {} not allowed; use letters, digits, '.', '_', '-'", field,
                        shown);
    }
  }
  return {};
}

Result<fs::path> join_under(const fs::path& root, std::initializer_list<std::string_view> parts) {
  fs::path p = root;
  for (auto part : parts) {
    H3_TRY(validate_id("path component", part));
    p /= fs::path(std::string(part));
  }
  return p;
}

fs::path part_path(const fs::path& final_path) {
  fs::path p = final_path;
  p += ".part";
  return p;
}

fs::path sidecar_path(const fs::path& final_path) {
  fs::path p = final_path;
  p += ".sha256";
  return p;
}

Status fsync_path(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return io_error(errc::io::kOpen, p, errno);
  Status s;
  if (::fsync(fd) != 0) s = io_error(errc::io::kFsync, p, errno);
  ::close(fd);
  return s;
}

Result<std::string> write_atomic(const fs::path& final_path, std::span<const std::uint8_t> bytes) {
  auto t = locate_in_parent(final_path);
  if (!t.ok()) return t.error();
  return write_bytes_at(*t, bytes, Publish::kReplace);
}

Result<std::string> write_atomic(const Root& root, const fs::path& final_path,
                                 std::span<const std::uint8_t> bytes) {
  auto t = locate(root.path, final_path, true);
  if (!t.ok()) return t.error();
  return write_bytes_at(*t, bytes, Publish::kReplace);
}

Result<std::string> write_once(const fs::path& final_path, std::span<const std::uint8_t> bytes,
                               bool* reused) {
  auto t = locate_in_parent(final_path);
  if (!t.ok()) return t.error();
  return write_bytes_at(*t, bytes, Publish::kOnce, reused);
}

Result<std::string> write_once(const Root& root, const fs::path& final_path,
                               std::span<const std::uint8_t> bytes, bool* reused,
                               const BeforePublish& before_publish) {
  auto t = locate(root.path, final_path, true);
  if (!t.ok()) return t.error();
  return write_bytes_at(*t, bytes, Publish::kOnce, reused, before_publish);
}

Result<std::string> commit_part(const fs::path& final_path, std::string_view expected_sha256,
                                bool* reused) {
  auto t = locate(parent_root(final_path), final_path.filename(), false);
  if (!t.ok()) return t.error();
  t->shown = final_path;
  return commit_part_at(*t, expected_sha256, reused);
}

Result<std::string> commit_part(const Root& root, const fs::path& final_path,
                                std::string_view expected_sha256, bool* reused,
                                const BeforePublish& before_publish) {
  auto t = locate(root.path, final_path, false);
  if (!t.ok()) return t.error();
  return commit_part_at(*t, expected_sha256, reused, before_publish);
}

std::string read_sidecar(const fs::path& final_path) {
  auto t = locate(parent_root(final_path), final_path.filename(), false);
  return t.ok() ? read_sidecar_at(*t) : std::string();
}

std::string read_sidecar(const Root& root, const fs::path& final_path) {
  auto t = locate(root.path, final_path, false);
  return t.ok() ? read_sidecar_at(*t) : std::string();
}

Result<std::string> verify(const fs::path& final_path) {
  auto t = locate(parent_root(final_path), final_path.filename(), false);
  if (!t.ok()) {
    if (t.error().code == errc::path::kMissing)
      return make_error(errc::artifact::kMissing, "{} does not exist", final_path.string());
    return t.error();
  }
  t->shown = final_path;
  return verify_at(*t);
}

Result<std::string> verify(const Root& root, const fs::path& final_path) {
  auto t = locate(root.path, final_path, false);
  if (!t.ok()) {
    // A missing directory below the root means a missing artifact; every other refusal stands.
    if (t.error().code == errc::path::kMissing)
      return make_error(errc::artifact::kMissing, "{} does not exist", final_path.string());
    return t.error();
  }
  return verify_at(*t);
}

Status make_dirs(const Root& root, const fs::path& dir) {
  auto rel = relative_beneath(root.path, dir);
  if (!rel.ok()) return rel.error();
  std::error_code ec;
  fs::create_directories(root.path.empty() ? fs::path(".") : root.path, ec);
  if (ec) return make_error(errc::io::kMkdir, "mkdir {}: {}", root.path.string(), ec.message());
  return mkdirs_beneath(root.path, *rel);
}

std::size_t sweep_parts(const fs::path& root, std::chrono::seconds min_age) {
  std::size_t n = 0;
  std::error_code ec;
  if (!fs::exists(root, ec)) return 0;
  const auto cutoff = fs::file_time_type::clock::now() - min_age;
  for (auto it = fs::recursive_directory_iterator(
           root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".part") {
      std::error_code tec;
      const auto modified = fs::last_write_time(it->path(), tec);
      if (tec || modified > cutoff) continue;  // possibly a live writer's
      if (fs::remove(it->path(), ec)) ++n;
    }
  }
  return n;
}

}  // namespace h3pipe::artifacts
