#include "common/transfer/keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
namespace {

Status write_new(const fs::path& p, const std::string& text, mode_t mode, bool overwrite) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  int fd = ::open(p.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST)
      return make_error(errc::keygen::kExists,
                        "{} exists; refusing to overwrite a key (use --force)", p.string());
    return make_error(errc::io::kOpen, "cannot create {}: {}", p.string(), std::strerror(errno));
  }
  Status s;
  if (::fchmod(fd, mode) != 0)
    s = make_error(errc::io::kChmod, "chmod {}: {}", p.string(), std::strerror(errno));
  const char* d = text.data();
  std::size_t left = text.size();
  while (s.ok() && left > 0) {
    ssize_t n = ::write(fd, d, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = make_error(errc::io::kWrite, "write {}: {}", p.string(), std::strerror(errno));
      break;
    }
    d += n;
    left -= static_cast<std::size_t>(n);
  }
  if (s.ok() && ::fsync(fd) != 0)
    s = make_error(errc::io::kFsync, "fsync {}: {}", p.string(), std::strerror(errno));
  ::close(fd);
  return s;
}

}  // namespace

bool is_z85_key(std::string_view key) {
  if (key.size() != 40) return false;
  std::string z(key);
  std::uint8_t out[32];
  return zmq_z85_decode(out, z.c_str()) != nullptr;
}

Result<KeyPair> keygen(const fs::path& dir, const std::string& name, bool overwrite) {
  H3_TRY(artifacts::validate_id("key name", name));
  if (!zmq_has("curve"))
    return make_error(errc::keygen::kUnsupported, "this libzmq was built without CURVE support");
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    return make_error(errc::keygen::kFailed, "zmq_curve_keypair: {}", zmq_strerror(zmq_errno()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(errc::io::kMkdir, "mkdir {}: {}", dir.string(), ec.message());
  KeyPair kp{pub, sec, dir / (name + ".pub"), dir / (name + ".key")};
  H3_TRY(write_new(kp.secret_path, kp.secret_z85 + "\n", 0600, overwrite));
  H3_TRY(write_new(kp.public_path, kp.public_z85 + "\n", 0644, overwrite));
  H3_TRY(artifacts::fsync_path(dir, true));
  return kp;
}

Result<std::string> load_key_file(const fs::path& path, bool secret) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    return make_error(errc::keys::kMissing, "key file {}: {}", path.string(), std::strerror(errno));
  if (secret && (sb.st_mode & 077) != 0)
    return make_error(
        errc::keys::kPermissions,
        "secret key file {} is accessible by group or others (mode {:o}); chmod 600 it",
        path.string(), sb.st_mode & 0777);
  auto text = read_bounded_file(path, {secret ? "a secret key file" : "a public key file",
                                       kMaxSmallFileBytes, errc::keys::kMissing});
  if (!text.ok()) return text.error();
  std::string line = text->substr(0, text->find('\n'));
  auto b = line.find_first_not_of(" \t\r");
  auto e = line.find_last_not_of(" \t\r");
  line = b == std::string::npos ? "" : line.substr(b, e - b + 1);
  if (!is_z85_key(line))
    return make_error(errc::keys::kInvalid,
                      "key file {}: expected a 40-character Z85 key on its first line",
                      path.string());
  return line;
}

Result<std::string> public_of(const std::string& secret_z85) {
  if (!is_z85_key(secret_z85))
    return make_error(errc::keys::kInvalid, "secret key is not a Z85 key");
  char pub[41] = {};
  if (zmq_curve_public(pub, secret_z85.c_str()) != 0)
    return make_error(errc::keys::kInvalid, "zmq_curve_public: {}", zmq_strerror(zmq_errno()));
  return std::string(pub);
}

}  // namespace h3pipe::transfer
