#include "common/comfyui/split_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace h3pipe::comfyui {
namespace fs = std::filesystem;
namespace {

Status write_fsync(const fs::path& p, const std::string& content) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::comfyui::kSplitWrite, "cannot create {}: {}", p.string(),
                      std::strerror(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return make_error(errc::comfyui::kSplitWrite, "cannot write {}: {}", p.string(),
                        std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return make_error(errc::comfyui::kSplitWrite, "cannot fsync {}: {}", p.string(),
                      std::strerror(err));
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace

std::vector<OutputFile> split_files(const SplitResult& r) {
  return {{"sample.api.json", r.sample.dump(2) + "\n"},
          {"decode.api.json", r.decode.dump(2) + "\n"},
          {"inject.json", r.inject.dump(2) + "\n"},
          {"config.snippet.json", r.snippet.dump(2) + "\n"}};
}

Status write_files(const fs::path& dir, const std::vector<OutputFile>& files, bool force) {
  std::error_code ec;
  for (const auto& f : files)
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.')
      return make_error(errc::comfyui::kSplitWrite, "\"{}\" is not a plain file name", f.name);
  if (fs::is_symlink(dir, ec))
    return make_error(errc::comfyui::kSplitWrite, "{} is a symlink; give the folder itself",
                      dir.string());
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return make_error(errc::comfyui::kSplitWrite, "cannot create the folder {}: {}", dir.string(),
                      ec ? ec.message() : "not a directory");
  for (const auto& f : files) {
    fs::path p = dir / f.name;
    auto st = fs::symlink_status(p, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::is_symlink(st) || !fs::is_regular_file(st))
      return make_error(errc::comfyui::kSplitWrite,
                        "{} exists and is not a plain file; not replaced", p.string());
    if (!force)
      return make_error(errc::comfyui::kSplitExists, "{} exists; pass --force to replace it",
                        p.string());
  }
  std::vector<fs::path> temps;
  auto cleanup = [&] {
    for (const auto& t : temps) fs::remove(t, ec);
  };
  for (const auto& f : files) {
    fs::path t = dir / fmt::format(".{}.tmp-{}", f.name, ::getpid());
    fs::remove(t, ec);  // a leftover of an earlier crash of this same pid number
    Status s = write_fsync(t, f.content);
    if (!s.ok()) {
      cleanup();
      return s;
    }
    temps.push_back(t);
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    fs::rename(temps[i], dir / files[i].name, ec);
    if (ec) {
      cleanup();
      return make_error(errc::comfyui::kSplitWrite, "cannot rename {} into place: {}",
                        temps[i].string(), ec.message());
    }
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

}  // namespace h3pipe::comfyui
