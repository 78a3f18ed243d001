#pragma once
// API tokens (issue #37 item 7): `h3pipe token create NAME --role submit|read|admin` makes a
// bearer token that h3pipe-api checks on every request.  Redis holds only its SHA-256:
//   h3pipe:api:tokens        hash  NAME -> {"role","sha256","created_ms"} (JSON)
//   h3pipe:api:token_hashes  hash  SHA-256 hex -> NAME
// so any API replica checks any token, and revoking one is immediate everywhere.
#include <optional>
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

enum class Role { kRead = 0, kSubmit = 1, kAdmin = 2 };
const char* role_name(Role r);
// "read" | "submit" | "admin", else nullopt.
std::optional<Role> parse_role(const std::string& s);

struct TokenInfo {
  std::string name;
  Role role = Role::kRead;
  long long created_ms = 0;
};

inline constexpr const char* kTokensKey = "h3pipe:api:tokens";
inline constexpr const char* kTokenHashesKey = "h3pipe:api:token_hashes";

// A new token for NAME (one path component, [A-Za-z0-9._-]{1,128}): "h3p_" + 64 hex characters
// from the OS's CSPRNG.  An existing NAME is refused (revoke it first): its holder keeps access
// until then.
Result<std::string> create_token(queue::Redis& redis, const std::string& name, Role role);
Result<std::vector<TokenInfo>> list_tokens(queue::Redis& redis);
// false when no token has that name.
Result<bool> revoke_token(queue::Redis& redis, const std::string& name);
// The token's holder, nullopt for an unknown (or revoked) token.
Result<std::optional<TokenInfo>> check_token(queue::Redis& redis, const std::string& token);
// The lower-case hex SHA-256 a token is stored as.
std::string token_sha256(const std::string& token);
// The holder of the token with hash `sha` said to be NAME, from what Redis holds now:
// `hashes_name` = HGET token_hashes SHA, `info` = HGET tokens NAME (nullopt: nil).  nullopt
// unless both agree (an unknown, revoked or replaced token).
std::optional<TokenInfo> token_holder(const std::string& sha, const std::string& name,
                                      const std::optional<std::string>& hashes_name,
                                      const std::optional<std::string>& info);

}  // namespace h3pipe::api
