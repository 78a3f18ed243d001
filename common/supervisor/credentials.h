#pragma once
// The local stack's Redis credentials (issue #14): `h3pipe start` runs its private redis-server
// with the same per-service ACL users that compose and Helm deploy (configs/redis/users.acl,
// compiled in), the default user off.  Each user's password is generated once into
//   <state>/secrets/redis-<role>.password   (0600, 64 hex characters, in a 0700 folder)
// and the rendered ACL file (SHA-256 digests only, never a clear password) into
//   <state>/redis/users.acl                  (0600)
// Services get their own user through H3PIPE_REDIS_USER / H3PIPE_REDIS_PASSWORD_FILE; the CLI
// uses h3pipe-operator; the supervisor h3pipe-admin.
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::supervisor {

struct RedisUser {
  std::string user;                     // "h3pipe-sampler"
  std::filesystem::path password_file;  // <secrets>/redis-sampler.password
};

// The roles with a password in local mode; keda's user is rendered off.
inline constexpr std::string_view kLocalRoles[] = {"encoder",  "sampler",  "decoder",
                                                   "transfer", "operator", "admin"};

std::filesystem::path secrets_dir(const std::filesystem::path& state_dir);
// "sampler" -> {"h3pipe-sampler", <secrets>/redis-sampler.password}; "admin" -> "redis-admin".
RedisUser user_for(const std::filesystem::path& secrets, std::string_view role);

// Creates the missing password files (existing ones are kept, so a restart keeps its AOF's
// users working) and renders the ACL file; returns its path.  Errors: io.*, acl.*.
Result<std::filesystem::path> prepare_local_acl(const std::filesystem::path& state_dir);

// Renders the ACL file of a Redis h3pipe runs from the password files in `secrets` (every role of
// kLocalRoles must have one) into `acl_file` (0600).  Errors: acl.*, io.*.
Status render_acl_file(const std::filesystem::path& secrets, const std::filesystem::path& acl_file);

// A folder created (with its parents) and made 0700.  Errors: io.mkdir, io.chmod.
Status make_private_dir(const std::filesystem::path& dir);
// `data` written to a new 0600 file (never widened by the umask), fsynced and renamed over `path`.
Status write_private(const std::filesystem::path& path, std::string_view data);
// A new random password (64 hex characters).  Errors: acl.random.
Result<std::string> random_password();

// Renders an ACL template: each `#@ROLE_SHA256@` becomes `#<sha256 of the password>`, a role
// without a password is rendered `off resetpass`.  Pure; exposed for tests.
Result<std::string> render_acl(std::string_view tmpl,
                               const std::vector<std::pair<std::string, std::string>>& passwords);

}  // namespace h3pipe::supervisor
