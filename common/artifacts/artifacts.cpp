#include "common/artifacts/artifacts.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "common/core/sha256.h"

namespace h3pipe::artifacts {
namespace {

Error io_error(std::string_view what, const fs::path& p, int err) {
  return make_error(std::string("io.") + std::string(what), "{} {}: {}", what, p.string(),
                    std::strerror(err));
}

Status write_all(int fd, const std::uint8_t* data, std::size_t len, const fs::path& p) {
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write", p, errno);
    }
    data += n;
    len -= static_cast<std::size_t>(n);
  }
  return {};
}

Status write_file_synced(const fs::path& p, std::span<const std::uint8_t> bytes) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("open", p, errno);
  Status s = write_all(fd, bytes.data(), bytes.size(), p);
  if (s.ok() && ::fsync(fd) != 0) s = io_error("fsync", p, errno);
  if (::close(fd) != 0 && s.ok()) s = io_error("close", p, errno);
  return s;
}

Status rename_synced(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return io_error("rename", from, errno);
  return fsync_path(to.parent_path().empty() ? fs::path(".") : to.parent_path(), true);
}

Status write_sidecar(const fs::path& final_path, const std::string& hex) {
  fs::path side = sidecar_path(final_path);
  fs::path part = part_path(side);
  std::string line = hex + "  " + final_path.filename().string() + "\n";  // sha256sum format
  H3_TRY(write_file_synced(part, {reinterpret_cast<const std::uint8_t*>(line.data()), line.size()}));
  return rename_synced(part, side);
}

}  // namespace

Status validate_id(std::string_view field, std::string_view id) {
  if (id.empty()) return make_error("id.empty", "{}: must not be empty", field);
  if (id.size() > kMaxIdLength)
    return make_error("id.too_long", "{}: {} characters, at most {} allowed", field, id.size(),
                      kMaxIdLength);
  if (id.front() == '.')
    return make_error("id.dot", "{}: must not start with '.' (got \"{}\")", field, id);
  for (unsigned char c : id) {
    bool ok = std::isalnum(c) || c == '_' || c == '-' || c == '.';
    if (!ok) {
      std::string shown = c == 0 ? "NUL" : c == '/' ? "'/'" : fmt::format("0x{:02x}", c);
      return make_error("id.char", "{}: character {} not allowed; use letters, digits, '.', '_', '-'",
                        field, shown);
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
  if (fd < 0) return io_error("open", p, errno);
  Status s;
  if (::fsync(fd) != 0) s = io_error("fsync", p, errno);
  ::close(fd);
  return s;
}

Result<std::string> write_atomic(const fs::path& final_path, std::span<const std::uint8_t> bytes) {
  std::error_code ec;
  fs::create_directories(final_path.parent_path(), ec);
  if (ec) return make_error("io.mkdir", "mkdir {}: {}", final_path.parent_path().string(), ec.message());
  fs::path part = part_path(final_path);
  Status s = write_file_synced(part, bytes);
  if (!s.ok()) {
    fs::remove(part, ec);
    return s.error();
  }
  H3_TRY(rename_synced(part, final_path));
  std::string hex = sha256_hex(bytes.data(), bytes.size());
  H3_TRY(write_sidecar(final_path, hex));
  return hex;
}

Result<std::string> commit_part(const fs::path& final_path, std::string_view expected_sha256) {
  fs::path part = part_path(final_path);
  std::error_code ec;
  H3_TRY(fsync_path(part, false));
  auto hex = sha256_file(part);
  if (!hex.ok()) return hex.error();
  if (!expected_sha256.empty() && *hex != expected_sha256) {
    fs::remove(part, ec);
    return make_error("artifact.mismatch", "{}: content hashes to {}, expected {}",
                      final_path.string(), *hex, expected_sha256);
  }
  H3_TRY(rename_synced(part, final_path));
  H3_TRY(write_sidecar(final_path, *hex));
  return *hex;
}

std::string read_sidecar(const fs::path& final_path) {
  std::ifstream in(sidecar_path(final_path));
  std::string hex;
  if (!(in >> hex) || hex.size() != 64) return {};
  return hex;
}

Result<std::string> verify(const fs::path& final_path) {
  std::error_code ec;
  if (!fs::exists(final_path, ec))
    return make_error("artifact.missing", "{} does not exist", final_path.string());
  std::string want = read_sidecar(final_path);
  if (want.empty())
    return make_error("artifact.no_sidecar", "{} has no valid .sha256 sidecar", final_path.string());
  auto got = sha256_file(final_path);
  if (!got.ok()) return got.error();
  if (*got != want)
    return make_error("artifact.mismatch", "{}: content hashes to {}, sidecar says {}",
                      final_path.string(), *got, want);
  return want;
}

std::size_t sweep_parts(const fs::path& root) {
  std::size_t n = 0;
  std::error_code ec;
  if (!fs::exists(root, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".part") {
      if (fs::remove(it->path(), ec)) ++n;
    }
  }
  return n;
}

}  // namespace h3pipe::artifacts
