#include "common/api/tokens.h"

#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/artifacts/artifacts.h"
#include "common/core/json_parse.h"
#include "common/core/sha256.h"
#include "common/queue/hashes.h"

namespace h3pipe::api {
namespace {

Result<std::string> random_token() {
  unsigned char b[32];
  if (RAND_bytes(b, sizeof b) != 1)
    return make_error(errc::cli::kFlag, "the OS random generator failed; no token was made");
  static const char* kHex = "0123456789abcdef";
  std::string t = "h3p_";
  for (unsigned char c : b) {
    t += kHex[c >> 4];
    t += kHex[c & 15];
  }
  return t;
}

std::optional<TokenInfo> parse_info(const std::string& name, const std::string& json,
                                    std::string* sha = nullptr) {
  std::string why;
  auto parsed = json_reader::parse_limited(json, {}, &why);
  if (!parsed || !parsed->is_object()) return std::nullopt;
  const nlohmann::json& j = *parsed;
  auto role = parse_role(j.value("role", ""));
  if (!role) return std::nullopt;
  if (sha) *sha = j.value("sha256", "");
  return TokenInfo{name, *role, j.value("created_ms", 0LL)};
}

}  // namespace

const char* role_name(Role r) {
  switch (r) {
    case Role::kRead:
      return "read";
    case Role::kSubmit:
      return "submit";
    case Role::kAdmin:
      return "admin";
  }
  return "read";
}

std::optional<Role> parse_role(const std::string& s) {
  if (s == "read") return Role::kRead;
  if (s == "submit") return Role::kSubmit;
  if (s == "admin") return Role::kAdmin;
  return std::nullopt;
}

Result<std::string> create_token(queue::Redis& redis, const std::string& name, Role role) {
  H3_TRY(artifacts::validate_id("token NAME", name));
  auto token = random_token();
  if (!token.ok()) return token.error();
  const std::string sha = token_sha256(*token);
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const nlohmann::json info = {{"role", role_name(role)}, {"sha256", sha}, {"created_ms", now}};
  auto r = queue::hsetnx(redis, kTokensKey, name, info.dump());
  if (!r.ok()) return r.error();
  if (!*r)
    return make_error(errc::cli::kFlag,
                      "a token named \"{}\" exists already; `h3pipe token revoke {}` first, or "
                      "choose another NAME",
                      name, name);
  auto h = redis.command({"HSET", kTokenHashesKey, sha, name});
  if (!h.ok()) return h.error();
  return *token;
}

Result<std::vector<TokenInfo>> list_tokens(queue::Redis& redis) {
  auto r = queue::hgetall(redis, kTokensKey);
  if (!r.ok()) return r.error();
  std::vector<TokenInfo> out;
  for (const auto& [name, json] : *r)
    if (auto t = parse_info(name, json)) out.push_back(*t);
  std::sort(out.begin(), out.end(),
            [](const TokenInfo& a, const TokenInfo& b) { return a.name < b.name; });
  return out;
}

Result<bool> revoke_token(queue::Redis& redis, const std::string& name) {
  H3_TRY(artifacts::validate_id("token NAME", name));
  auto r = queue::hget(redis, kTokensKey, name);
  if (!r.ok()) return r.error();
  if (!*r) return false;
  std::string sha;
  parse_info(name, **r, &sha);
  auto d = redis.pipeline({{"HDEL", kTokenHashesKey, sha}, {"HDEL", kTokensKey, name}});
  if (!d.ok()) return d.error();
  return true;
}

std::string token_sha256(const std::string& token) {
  Sha256 h;
  h.update(token.data(), token.size());
  return h.hex_digest();
}

std::optional<TokenInfo> token_holder(const std::string& sha, const std::string& name,
                                      const std::optional<std::string>& hashes_name,
                                      const std::optional<std::string>& info) {
  if (!hashes_name || *hashes_name != name || !info) return std::nullopt;
  std::string held;
  auto who = parse_info(name, *info, &held);
  if (!who || held != sha) return std::nullopt;
  return who;
}

Result<std::optional<TokenInfo>> check_token(queue::Redis& redis, const std::string& token) {
  if (token.empty() || token.size() > 256) return std::optional<TokenInfo>{};
  const std::string sha = token_sha256(token);
  auto n = queue::hget(redis, kTokenHashesKey, sha);
  if (!n.ok()) return n.error();
  if (!*n) return std::optional<TokenInfo>{};
  auto r = queue::hget(redis, kTokensKey, **n);
  if (!r.ok()) return r.error();
  return token_holder(sha, **n, *n, *r);
}

}  // namespace h3pipe::api
