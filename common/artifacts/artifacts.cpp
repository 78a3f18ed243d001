#include "common/artifacts/artifacts.h"

#include <dirent.h>
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

#include "common/artifacts/temporaries.h"
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
  if (name.size() + std::string_view(".sha256.0123456789abcdef.part").size() > NAME_MAX)
    return make_error(errc::path::kTooLong,
                      "{}: the name leaves no room for its .sha256.<token>.part sibling ({} bytes)",
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

// The temporaries of one execution's commit of a stage output (temporaries.h): two executions of
// one stage (a re-delivery, a forged second task) never share one, so neither can truncate,
// replace or publish the other's bytes (issue #35 D6).
struct Temps {
  std::string data, sidecar;
};
Temps temps_for(const std::string& name, const std::string& token) {
  return {fmt::format("{}.{}.part", name, token), fmt::format("{}.sha256.{}.part", name, token)};
}
Temps unique_temps(const std::string& name) {
  return temps_for(name, temps::new_token());
}

// After NAME is published with its sidecar: the temporaries of NAME that a writer left and can no
// longer use, because it died before its commit ended (a kill -9 while it streamed, or between
// the rename to its own temporary and the publish).  A live writer's are left alone: its rename
// finds NAME and it drops them itself.
void remove_dead_writers_temps(const Target& t) {
  (void)temps::remove_dead_writers(t.dir.get(), t.name);
}

std::string sidecar_line(const Target& t, const std::string& hex) {
  return hex + "  " + t.name + "\n";  // sha256sum format
}

Status write_sidecar_part(const Target& t, const std::string& part, const std::string& hex) {
  const std::string line = sidecar_line(t, hex);
  return write_file_synced(t, part,
                           {reinterpret_cast<const std::uint8_t*>(line.data()), line.size()});
}

// The sidecar through a temporary, renamed over NAME.sha256 (the shared NAME.sha256.part, or one
// of this execution's own).
Status write_sidecar(const Target& t, const std::string& hex, std::string part = {}) {
  if (part.empty()) part = t.name + ".sha256.part";
  H3_TRY(write_sidecar_part(t, part, hex));
  return rename_synced(t, part, t.name + ".sha256");
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

// The hash a sidecar file (NAME.sha256 or a pending one) vouches for; empty if none.
std::string read_sidecar_named(const Target& t, const std::string& name) {
  auto fd = open_read(t, name);
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

std::string read_sidecar_at(const Target& t) {
  return read_sidecar_named(t, t.name + ".sha256");
}

// A commit in flight (or cut short by a crash) between its data's rename and its sidecar's: a
// pending sidecar NAME.sha256.<token>.part that vouches for `hex`, the hash of the final file.
// The evidence that the final name holds a committed output rather than a stray file.
bool pending_sidecar_for(const Target& t, const std::string& hex) {
  int fd = ::openat(t.dir.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return false;
  }
  const std::string prefix = t.name + ".sha256.";
  bool found = false;
  while (!found) {
    const dirent* e = ::readdir(d);
    if (!e) break;
    const std::string_view n(e->d_name);
    if (n.size() > prefix.size() + 5 && n.starts_with(prefix) && n.ends_with(".part"))
      found = read_sidecar_named(t, std::string(n)) == hex;
  }
  ::closedir(d);
  return found;
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

// `tmp.data` (this execution's own temporary) is durable and hashes to `hex`; publish it.  Stage
// outputs are committed once, as one step per execution (issue #35 D6): the sidecar is written
// to this execution's own pending name first, the data's final rename never replaces a file
// (renameat2 RENAME_NOREPLACE), and only the execution whose rename won renames its pending
// sidecar to NAME.sha256, so the sidecar always vouches for the bytes at the final name (a
// sidecar written by name before the rename was overwritten by a second execution writing
// different bytes, leaving the output vouched for by the other's hash).  A second execution of
// the same stage (a re-delivery after its worker died, a lease lost during a Redis fail-over)
// that reaches the commit finds the first one's output and discards its own temporaries: the
// output is written once whatever dies, and *reused tells the caller so.  Between the winner's
// two renames (or after a crash there) the final name has no NAME.sha256 yet; whoever finds it so
// and a pending sidecar that vouches for its bytes writes the same sidecar (keep_existing).  A
// final file with neither is a stray, never adopted.
// before_publish (if any) runs first; its error removes the temporaries and is returned.
Result<std::string> publish_once(const Target& t, const Temps& tmp, const std::string& hex,
                                 bool* reused, const BeforePublish& before_publish) {
  if (reused) *reused = false;
  auto drop_temps = [&] {
    (void)::unlinkat(t.dir.get(), tmp.data.c_str(), 0);
    (void)::unlinkat(t.dir.get(), tmp.sidecar.c_str(), 0);
  };
  if (before_publish) {
    if (Status held = before_publish(); !held.ok()) {
      drop_temps();
      return held.error();
    }
  }
  auto keep_existing = [&]() -> Result<std::string> {
    drop_temps();
    auto have = verify_at(t);
    if (!have.ok() && have.error().code == errc::artifact::kNoSidecar) {
      auto fd = open_read(t, t.name);
      if (!fd.ok()) return fd.error();
      auto got = hash_fd(fd->get(), t.shown);
      if (!got.ok()) return got.error();
      if (pending_sidecar_for(t, *got)) {
        H3_TRY(write_sidecar(t, *got, unique_temps(t.name).sidecar));
        have = verify_at(t);
      }
    }
    if (!have.ok())
      return make_error(errc::artifact::kExists,
                        "{} already exists and does not verify ({}); remove it to redo the stage",
                        t.shown.string(), have.error().message);
    if (reused) *reused = true;
    remove_dead_writers_temps(t);
    return *have;
  };
  struct stat st {};
  if (::fstatat(t.dir.get(), t.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return keep_existing();
  if (Status side = write_sidecar_part(t, tmp.sidecar, hex); !side.ok()) {
    drop_temps();
    return side.error();
  }
  auto abandon = [&](Error e) -> Result<std::string> {
    drop_temps();
    return e;
  };
  if (::renameat2(t.dir.get(), tmp.data.c_str(), t.dir.get(), t.name.c_str(), RENAME_NOREPLACE) !=
      0) {
    if (errno == EEXIST) return keep_existing();  // lost a race with a concurrent commit
    if (errno != EINVAL && errno != ENOSYS)
      return abandon(io_error(errc::io::kRename, t.shown.parent_path() / tmp.data, errno));
    // A filesystem without RENAME_NOREPLACE: link() refuses an existing name just the same.
    if (::linkat(t.dir.get(), tmp.data.c_str(), t.dir.get(), t.name.c_str(), 0) != 0) {
      if (errno == EEXIST) return keep_existing();
      return abandon(io_error(errc::io::kLink, t.shown.parent_path() / tmp.data, errno));
    }
    (void)::unlinkat(t.dir.get(), tmp.data.c_str(), 0);
  }
  // This execution's bytes hold the final name: its own sidecar follows, then the directory's
  // entries are made durable.  A sidecar that cannot be renamed takes the data back out: no
  // output is left that nothing vouches for, and no temporary outlives the call.
  if (Status side = rename_synced(t, tmp.sidecar, t.name + ".sha256"); !side.ok()) {
    (void)::unlinkat(t.dir.get(), t.name.c_str(), 0);
    (void)fsync_fd(t.dir.get(), t.shown.parent_path());
    return side.error();
  }
  remove_dead_writers_temps(t);
  return hex;
}

// Writes bytes to NAME.part (fsynced), then either replaces NAME (write_atomic: the sidecar first,
// then the rename) or publishes it once (write_once, see publish_once).
enum class Publish { kReplace, kOnce };
Result<std::string> write_bytes_at(const Target& t, std::span<const std::uint8_t> bytes,
                                   Publish mode, bool* reused = nullptr,
                                   const BeforePublish& before_publish = {}) {
  // A stage output's temporaries are this execution's own (unique_temps); a replaced file's are
  // the shared NAME.part and NAME.sha256.part, removed and created afresh by each writer.
  const Temps tmp = unique_temps(t.name);
  std::string part = mode == Publish::kOnce ? tmp.data : t.name + ".part";
  Status s = write_file_synced(t, part, bytes);
  if (!s.ok()) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    return s.error();
  }
  std::string hex = sha256_hex(bytes.data(), bytes.size());
  if (mode == Publish::kOnce) return publish_once(t, tmp, hex, reused, before_publish);
  if (Status side = write_sidecar(t, hex); !side.ok()) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    return side.error();
  }
  H3_TRY(rename_synced(t, part, t.name));
  return hex;
}

// `tmp.data`, this execution's own temporary of the target, is made durable, hashed and published
// once (publish_once); it goes with every error.
Result<std::string> commit_temp_at(const Target& t, const Temps& tmp,
                                   std::string_view expected_sha256, bool* reused,
                                   const BeforePublish& before_publish) {
  const std::string& part = tmp.data;
  const fs::path shown_part = t.shown.parent_path() / part;
  auto fd = open_read(t, part);
  if (!fd.ok()) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    Error e = fd.error();
    if (e.code == errc::path::kSymlink)
      e.message =
          fmt::format("{} is a symlink; artifacts are never read through one", shown_part.string());
    return e;
  }
  auto drop = [&](Error e) {
    (void)::unlinkat(t.dir.get(), part.c_str(), 0);
    return e;
  };
  if (Status synced = fsync_fd(fd->get(), shown_part); !synced.ok()) return drop(synced.error());
  auto hex = hash_fd(fd->get(), shown_part);
  if (!hex.ok()) return drop(hex.error());
  if (!expected_sha256.empty() && *hex != expected_sha256)
    return drop(make_error(errc::artifact::kMismatch, "{}: content hashes to {}, expected {}",
                           t.shown.string(), *hex, expected_sha256));
  return publish_once(t, tmp, *hex, reused, before_publish);
}

Result<std::string> commit_part_at(const Target& t, std::string_view expected_sha256, bool* reused,
                                   const BeforePublish& before_publish = {}) {
  // The writer streamed into the shared NAME.part; it becomes this execution's own temporary
  // (unique_temps) first, so that what is hashed below is what gets published, whatever another
  // execution's commit does meanwhile (it finds no NAME.part, or its own).  Stage runtimes stream
  // into their own temporary from the start (own_part_path, commit_own_part).
  const std::string shared = t.name + ".part";
  const Temps tmp = unique_temps(t.name);
  if (::renameat(t.dir.get(), shared.c_str(), t.dir.get(), tmp.data.c_str()) != 0) {
    const fs::path shown_part = part_path(t.shown);
    if (errno == ENOENT)
      return make_error(errc::artifact::kMissing, "{} does not exist", shown_part.string());
    return io_error(errc::io::kRename, shown_part, errno);
  }
  return commit_temp_at(t, tmp, expected_sha256, reused, before_publish);
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

fs::path own_part_path(const fs::path& final_path) {
  fs::path p = final_path;
  p += "." + temps::new_token() + ".part";
  return p;
}

Result<std::string> commit_own_part(const Root& root, const fs::path& final_path,
                                    const fs::path& part, std::string_view expected_sha256,
                                    bool* reused, const BeforePublish& before_publish) {
  auto t = locate(root.path, final_path, false);
  if (!t.ok()) return t.error();
  std::error_code ec;
  const std::string file = part.filename().string();
  const std::string_view token = temps::token_of(file, t->name);
  const bool beside = fs::absolute(part, ec).parent_path().lexically_normal() ==
                      fs::absolute(t->shown, ec).parent_path().lexically_normal();
  // Only a data temporary (never the pending sidecar's name) of this very output.
  if (token.empty() || !beside || file != t->name + "." + std::string(token) + ".part")
    return make_error(errc::path::kEscape, "{} is not a temporary of {} (NAME.p<pid>-<hex>.part)",
                      part.string(), t->shown.string());
  return commit_temp_at(*t, temps_for(t->name, std::string(token)), expected_sha256, reused,
                        before_publish);
}

Result<std::size_t> remove_dead_temps(const Root& root, const fs::path& final_path) {
  auto t = locate(root.path, final_path, false);
  if (!t.ok()) {
    if (t.error().code == errc::path::kMissing) return std::size_t{0};
    return t.error();
  }
  std::string failed;
  int err = 0;
  const std::size_t n = temps::remove_dead_writers(t->dir.get(), t->name, &failed, &err);
  if (!failed.empty())
    return make_error(errc::io::kRemove, "cannot remove {}, left by a writer that died: {}",
                      (t->shown.parent_path() / failed).string(), std::strerror(err));
  return n;
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
