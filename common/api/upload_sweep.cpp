#include "common/api/upload_sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <regex>
#include <string>
#include <vector>

namespace h3pipe::api {
namespace {

// upload_stream.cpp's temporaries: artifacts::own_part_path of reference.<ext> (and the pending
// sidecar commit_own_part writes beside it).
bool is_upload_temp(const std::string& name) {
  static const std::regex kTemp(
      R"(reference\.(png|jpg|webp)(\.sha256)?\.p[0-9]+-[0-9a-f]{16}\.part)");
  return std::regex_match(name, kTemp);
}

// The names in an open directory (the descriptor stays ours).
std::vector<std::string> entries(int dir_fd) {
  std::vector<std::string> out;
  const int fd = ::dup(dir_fd);
  if (fd < 0) return out;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return out;
  }
  while (const dirent* e = ::readdir(d))
    if (std::string n = e->d_name; n != "." && n != "..") out.push_back(std::move(n));
  ::closedir(d);
  return out;
}

}  // namespace

std::size_t sweep_dead_uploads(const std::filesystem::path& input_root,
                               std::chrono::seconds min_age) {
  const int root = ::open(input_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return 0;
  const int uploads =
      ::openat(root, "api-uploads", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  ::close(root);
  if (uploads < 0) return 0;  // none yet (or a symlink: not ours to walk)
  const std::time_t before = std::time(nullptr) - min_age.count();
  std::size_t removed = 0;
  for (const std::string& id : entries(uploads)) {
    const int dir = ::openat(uploads, id.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) continue;
    std::size_t here = 0;
    for (const std::string& name : entries(dir)) {
      struct stat st {};
      if (!is_upload_temp(name) || ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode) || st.st_mtime > before)
        continue;
      if (::unlinkat(dir, name.c_str(), 0) == 0) ++here;
    }
    ::close(dir);
    if (here) (void)::unlinkat(uploads, id.c_str(), AT_REMOVEDIR);  // fails unless now empty
    removed += here;
  }
  ::close(uploads);
  return removed;
}

}  // namespace h3pipe::api
