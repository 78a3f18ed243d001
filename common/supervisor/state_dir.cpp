#include "common/supervisor/state_dir.h"

#include <dirent.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
namespace {

std::string user_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(4096);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) return pw.pw_name;
  return "no name";
}

// "owned by uid 65534 (nobody), mode 0777"
std::string describe(const struct stat& st) {
  return fmt::format("owned by uid {} ({}), mode {:04o}", st.st_uid, user_name(st.st_uid),
                     st.st_mode & 07777);
}

std::string who_may() {
  const uid_t me = ::geteuid();
  return me == 0 ? std::string("it must be owned by root (you) and not writable by group or others")
                 : fmt::format(
                       "it must be owned by you (uid {}, {}) or root and not writable by group or "
                       "others",
                       me, user_name(me));
}

bool trusted_owner(const struct stat& st) {
  return st.st_uid == ::geteuid() || st.st_uid == 0;
}

Error unsafe(const fs::path& what, const fs::path& path, const struct stat& st,
             std::string_view problem) {
  return make_error(errc::state_dir::kUnsafe, "refusing state dir {}: {} is {}{}; {}",
                    what.string(), path.string(),
                    problem.empty() ? "" : std::string(problem) + ", ", describe(st), who_may());
}

fs::path absolute_normal(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec).lexically_normal();
  if (ec) a = p.lexically_normal();
  if (a.has_relative_path() && a.filename().empty()) a = a.parent_path();  // "dir/" -> "dir"
  return a;
}

// Walks `path` from "/" down: each folder on the way trusted (sticky folders above the last may
// be writable by others), the last one strictly; a symlink owned by a trusted user is followed
// and its target walked the same way.
Status walk_to_state_dir(const fs::path& what, const fs::path& path, int depth) {
  if (depth > 8)
    return make_error(errc::state_dir::kUnsafe, "refusing state dir {}: too many symlinks",
                      what.string());
  std::vector<fs::path> parts(path.begin(), path.end());
  fs::path prefix;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    prefix /= parts[i];
    const bool last = i + 1 == parts.size();
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) != 0) {
      if (errno == ENOENT) return {};  // not created yet: nothing below it to read
      return make_error(errc::io::kStat, "cannot inspect {} (state dir {}): {}", prefix.string(),
                        what.string(), std::strerror(errno));
    }
    if (S_ISLNK(st.st_mode)) {
      if (!trusted_owner(st)) return unsafe(what, prefix, st, "a symlink");
      std::error_code ec;
      const fs::path target = fs::canonical(prefix, ec);
      if (ec) return {};  // a dangling link: nothing to read through it
      fs::path rest = target;
      for (std::size_t k = i + 1; k < parts.size(); ++k) rest /= parts[k];
      return walk_to_state_dir(what, rest, depth + 1);
    }
    if (!S_ISDIR(st.st_mode)) return unsafe(what, prefix, st, "not a folder");
    if (!trusted_owner(st)) return unsafe(what, prefix, st, "");
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (others_write && (last || !(st.st_mode & S_ISVTX))) return unsafe(what, prefix, st, "");
  }
  return {};
}

// Clears the group and other bits of something the caller owns; refuses what another user owns
// and what root owns but others may write.
Status tighten(const fs::path& state_dir, const fs::path& path, const struct stat& st) {
  if (!trusted_owner(st)) return unsafe(state_dir, path, st, "not yours");
  if (st.st_uid == ::geteuid()) {
    if ((st.st_mode & 077) != 0 && ::chmod(path.c_str(), st.st_mode & 07700) != 0)
      return make_error(errc::io::kChmod, "cannot make {} private: {}", path.string(),
                        std::strerror(errno));
    return {};
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return unsafe(state_dir, path, st, "");
  return {};
}

Status tighten_tree(const fs::path& state_dir, const fs::path& dir, int depth) {
  if (depth > 16) return {};
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return make_error(errc::io::kOpen, "cannot list {}: {}", dir.string(), std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& n : names) {
    const fs::path p = dir / n;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;  // gone meanwhile
    if (S_ISLNK(st.st_mode)) return unsafe(state_dir, p, st, "a symlink");
    H3_TRY(tighten(state_dir, p, st));
    if (S_ISDIR(st.st_mode)) H3_TRY(tighten_tree(state_dir, p, depth + 1));
  }
  return {};
}

}  // namespace

Status check_state_dir(const fs::path& state_dir) {
  const fs::path abs = absolute_normal(state_dir);
  return walk_to_state_dir(abs, abs, 0);
}

bool in_state_dir(const fs::path& state_dir, const fs::path& path) {
  const fs::path rel = absolute_normal(path).lexically_relative(absolute_normal(state_dir));
  return !rel.empty() && rel != "." && *rel.begin() != "..";
}

Status check_in_state_dir(const fs::path& state_dir, const fs::path& path) {
  const fs::path base = absolute_normal(state_dir);
  const fs::path rel = absolute_normal(path).lexically_relative(base);
  if (rel.empty() || rel == "." || *rel.begin() == "..") return {};
  std::vector<fs::path> parts(rel.begin(), rel.end());
  fs::path prefix = base;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    prefix /= parts[i];
    const bool last = i + 1 == parts.size();
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) != 0) {
      if (errno == ENOENT) return {};
      return make_error(errc::io::kStat, "cannot inspect {}: {}", prefix.string(),
                        std::strerror(errno));
    }
    if (S_ISLNK(st.st_mode)) return unsafe(base, prefix, st, "a symlink");
    if (!S_ISDIR(st.st_mode) && !(last && S_ISREG(st.st_mode)))
      return unsafe(base, prefix, st, last ? "not a regular file" : "not a folder");
    if (!trusted_owner(st) || (st.st_mode & (S_IWGRP | S_IWOTH)))
      return unsafe(base, prefix, st, "");
  }
  return {};
}

Status make_private_tree(const fs::path& state_dir, const fs::path& dir, bool recursive) {
  const fs::path base = absolute_normal(state_dir);
  const fs::path rel = absolute_normal(dir).lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..")
    return make_error(errc::state_dir::kUnsafe, "{} is not inside the state dir {}", dir.string(),
                      base.string());
  fs::path prefix = base;
  for (const auto& part : rel) {
    if (part == ".") continue;
    prefix /= part;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      return make_error(errc::io::kMkdir, "cannot create {}: {}", prefix.string(),
                        std::strerror(errno));
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) != 0)
      return make_error(errc::io::kStat, "cannot inspect {}: {}", prefix.string(),
                        std::strerror(errno));
    if (S_ISLNK(st.st_mode)) return unsafe(base, prefix, st, "a symlink");
    if (!S_ISDIR(st.st_mode)) return unsafe(base, prefix, st, "not a folder");
    H3_TRY(tighten(base, prefix, st));
  }
  if (recursive) return tighten_tree(base, prefix, 0);
  return {};
}

Status tighten_fd(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return make_error(errc::io::kStat, "cannot inspect {}: {}", path.string(),
                      std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return unsafe(path.parent_path(), path, st, "not a regular file");
  if (!trusted_owner(st)) return unsafe(path.parent_path(), path, st, "not yours");
  if (st.st_uid == ::geteuid() && (st.st_mode & 077) != 0 && ::fchmod(fd, st.st_mode & 07700) != 0)
    return make_error(errc::io::kChmod, "cannot make {} private: {}", path.string(),
                      std::strerror(errno));
  if (st.st_uid != ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)))
    return unsafe(path.parent_path(), path, st, "");
  return {};
}

}  // namespace h3pipe::supervisor
