#include "common/core/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace h3pipe {

std::string_view file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFIFO:
      return "a FIFO";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symlink";
    default:
      return "not a file";
  }
}

std::string format_byte_limit(std::uint64_t b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} bytes", b);
}

namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> read_bounded_file(const std::filesystem::path& path, const FileKind& kind,
                                      std::string_view label) {
  const std::string shown = label.empty() ? path.string() : std::string(label);
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  if (f.fd < 0)
    return make_error(kind.open_code, "{}: cannot open {}: {}", shown, kind.name,
                      std::strerror(errno));
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0)
    return make_error(errc::io::kStat, "{}: cannot stat it: {}", shown, std::strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return make_error(kind.not_regular_code, "{}: not a regular file ({}); {} must be one", shown,
                      file_type_name(sb.st_mode), kind.name);
  const auto size = static_cast<std::uint64_t>(sb.st_size);
  const auto too_large = [&](std::uint64_t n, const char* more) {
    return make_error(kind.too_large_code, "{}: {}{} bytes, above the {} limit for {}{}{}", shown,
                      more, n, format_byte_limit(kind.max_bytes), kind.name,
                      kind.limit_from.empty() ? "" : " set by ", kind.limit_from);
  };
  if (size > kind.max_bytes) return too_large(size, "");
  // A regular file never blocks; clear O_NONBLOCK anyway so a short read means end of file.
  (void)::fcntl(f.fd, F_SETFL, 0);
  std::string out;
  out.resize(static_cast<std::size_t>(size));
  std::size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      // The file grew since fstat: read on, up to one byte past the cap.
      if (out.size() > kind.max_bytes) return too_large(out.size(), "more than ");
      out.resize(std::min<std::uint64_t>(kind.max_bytes + 1, out.size() + 64 * 1024));
    }
    const ssize_t n = ::read(f.fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(errc::io::kRead, "{}: cannot read {}: {}", shown, kind.name,
                        std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kind.max_bytes) return too_large(got, "more than ");
  out.resize(got);
  return out;
}

}  // namespace h3pipe
