#include "common/supervisor/credentials.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/core/sha256.h"
#include "common/supervisor/embedded_acl.h"

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Status make_private_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(errc::io::kMkdir, "cannot create {}: {}", dir.string(), ec.message());
  if (::chmod(dir.c_str(), 0700) != 0)
    return make_error(errc::io::kChmod, "cannot make {} private: {}", dir.string(),
                      std::strerror(errno));
  return {};
}

// Writes `data` to a new file created 0600 (never widened by the umask), then renames it over
// `path`.
Status write_private(const fs::path& path, std::string_view data) {
  const fs::path tmp = path.string() + ".part";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return make_error(errc::io::kOpen, "cannot create {}: {}", tmp.string(), std::strerror(errno));
  const bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return make_error(errc::io::kWrite, "cannot write {}: {}", path.string(), std::strerror(errno));
  }
  return {};
}

namespace {

Result<std::string> read_password(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty())
    return make_error(errc::acl::kPassword, "{}: empty or unreadable", file.string());
  return line;
}

}  // namespace

fs::path secrets_dir(const fs::path& state_dir) {
  return state_dir / "secrets";
}

RedisUser user_for(const fs::path& secrets, std::string_view role) {
  return {role == "admin" ? std::string("redis-admin") : "h3pipe-" + std::string(role),
          secrets / ("redis-" + std::string(role) + ".password")};
}

Result<std::string> render_acl(std::string_view tmpl,
                               const std::vector<std::pair<std::string, std::string>>& passwords) {
  std::string out(tmpl);
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (std::size_t at = out.find(from); at != std::string::npos;
         at = out.find(from, at + to.size()))
      out.replace(at, from.size(), to);
  };
  for (const auto& [role, password] : passwords)
    replace_all("#@" + upper(role) + "_SHA256@", "#" + sha256_hex(password));
  // Roles without a password cannot log in.
  for (std::size_t at = out.find(" on #@"); at != std::string::npos; at = out.find(" on #@")) {
    const std::size_t end = out.find('@', at + 6);
    if (end == std::string::npos) break;
    out.replace(at, end + 1 - at, " off resetpass");
  }
  if (out.find("_SHA256@") != std::string::npos)
    return make_error(errc::acl::kTemplate, "unrendered placeholders remain in the ACL template");
  return out;
}

Result<std::string> random_password() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    return make_error(errc::acl::kRandom, "no random bytes for a Redis password");
  return sha256_hex(raw, sizeof raw);
}

Status render_acl_file(const fs::path& secrets, const fs::path& acl_file) {
  std::vector<std::pair<std::string, std::string>> passwords;
  for (std::string_view role : kLocalRoles) {
    auto pw = read_password(user_for(secrets, role).password_file);
    if (!pw.ok()) return pw.error();
    passwords.emplace_back(std::string(role), *pw);
  }
  auto acl = render_acl(kEmbeddedUsersAcl, passwords);
  if (!acl.ok()) return acl.error();
  return write_private(acl_file, *acl);
}

Result<fs::path> prepare_local_acl(const fs::path& state_dir) {
  const fs::path secrets = secrets_dir(state_dir);
  H3_TRY(make_private_dir(secrets));
  H3_TRY(make_private_dir(state_dir / "redis"));
  std::vector<std::pair<std::string, std::string>> passwords;
  for (std::string_view role : kLocalRoles) {
    const RedisUser u = user_for(secrets, role);
    if (!fs::exists(u.password_file)) {
      auto pw = random_password();
      if (!pw.ok()) return pw.error();
      H3_TRY(write_private(u.password_file, *pw + "\n"));
    }
    auto pw = read_password(u.password_file);
    if (!pw.ok()) return pw.error();
    passwords.emplace_back(std::string(role), *pw);
  }
  auto acl = render_acl(kEmbeddedUsersAcl, passwords);
  if (!acl.ok()) return acl.error();
  const fs::path file = state_dir / "redis" / "users.acl";
  H3_TRY(write_private(file, *acl));
  return file;
}

}  // namespace h3pipe::supervisor
