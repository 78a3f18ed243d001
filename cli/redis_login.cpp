// How the CLI logs in to Redis, and what it says when Redis refuses (issue #34 P3, #35 D9): a
// Redis that wants a password the CLI lacks (NOAUTH), refuses the one it has (WRONGPASS), or a
// password file that cannot be read is one error, redis.auth (exit 5 for every command), whose
// message names the Redis user, the password file and the config field that sets them.
//
// Where the credentials come from, first match wins:
//   1. an explicit --config that names credentials (/redis/credentials_dir, or
//      /redis/password_file): the operator's choice wins over what the stack recorded;
//   2. the running local stack's stack.json (its credentials_dir: the embedded Redis's secrets);
//   3. the config's /redis/credentials_dir, then /redis/user + /redis/password_file;
//   4. H3PIPE_REDIS_USER / H3PIPE_REDIS_PASSWORD_FILE (runner::redis_address) over 3.
#include <fmt/format.h>

#include <cstdlib>

#include "cli/cli.h"
#include "common/core/bounded_file.h"
#include "common/queue/server.h"
#include "common/runner/runner.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/state_dir.h"
#include "common/supervisor/supervisor.h"

namespace h3pipe::cli {
namespace {

// Who the CLI logs in as and where that came from, for the messages.
struct Login {
  std::string user;           // "" = Redis's default user
  std::string password_file;  // "" = no password
  std::string field;          // the config field (or variable) that named the file
  std::string config;         // the config file in use ("" = the embedded default)
};

std::string config_name(const std::string& file) {
  return file.empty() ? "the embedded default config" : file;
}

// What to change, for every refusal.
std::string fix_hint(const Login& l) {
  return fmt::format(
      "set /redis/credentials_dir (a folder with redis-operator.password) or /redis/user and "
      "/redis/password_file in {}{}",
      config_name(l.config), l.config.empty() ? " (pass --config FILE)" : "");
}

Error refused(const Login& l, const std::string& where, const std::string& why) {
  const std::string who = l.user.empty() ? "the default user" : "user \"" + l.user + "\"";
  if (l.password_file.empty())
    return make_error(errc::redis::kAuth,
                      "redis at {} refused the CLI ({}): it logged in as {} with no password "
                      "because {} names no password file; {}",
                      where, why, who, config_name(l.config), fix_hint(l));
  return make_error(errc::redis::kAuth,
                    "redis at {} refused the CLI ({}): it logged in as {} with the password in {} "
                    "(from {} in {}); check that file against the Redis ACL, or {}",
                    where, why, who, l.password_file, l.field, config_name(l.config), fix_hint(l));
}

bool auth_refusal(const std::string& m) {
  return m.rfind("NOAUTH", 0) == 0 || m.rfind("WRONGPASS", 0) == 0 ||
         m.find("NOAUTH Authentication required") != std::string::npos ||
         m.find("WRONGPASS") != std::string::npos;
}

// The password in `file`, or redis.auth naming the file, the user and the field.
Result<std::string> read_password(const Login& l) {
  auto text = read_bounded_file(l.password_file, {"a password file", kMaxSmallFileBytes});
  if (!text.ok())
    return make_error(errc::redis::kAuth,
                      "the CLI's Redis password file {} (user \"{}\", from {} in {}) cannot be "
                      "read: {}; create it, or {}",
                      l.password_file, l.user.empty() ? "default" : l.user, l.field,
                      config_name(l.config), text.error().message, fix_hint(l));
  std::string pw = text->substr(0, text->find('\n'));
  while (!pw.empty() && (pw.back() == '\r' || pw.back() == ' ')) pw.pop_back();
  if (pw.empty())
    return make_error(errc::redis::kAuth,
                      "the CLI's Redis password file {} (user \"{}\", from {} in {}) is empty",
                      l.password_file, l.user.empty() ? "default" : l.user, l.field,
                      config_name(l.config));
  return pw;
}

}  // namespace

bool is_auth_refusal(const Error& e) {
  return e.code == errc::redis::kAuth || (e.code == errc::redis::kError && auth_refusal(e.message));
}

Result<std::unique_ptr<queue::Redis>> connect(const Global& g, const config::Cluster& c) {
  auto addr = runner::redis_address(c);
  Login l;
  l.config = config_file_in_use(g);
  l.user = addr.user;
  // The running stack's address (an embedded Redis's port is only there) and credentials.
  std::string stack_creds;
  if (auto st = supervisor::running(c)) {
    addr.host = (*st)["redis"]["host"];
    addr.port = (*st)["redis"]["port"];
    stack_creds = (*st)["redis"].value("credentials_dir", "");
  }
  const bool config_names_creds =
      !c.redis.credentials_dir.empty() || !c.redis.password_file.empty();
  std::string creds;
  if (!g.config_file.empty() && !c.redis.embedded && config_names_creds) {
    creds = c.redis.credentials_dir;  // --config wins (may be "": its password_file below)
    l.field = "/redis/credentials_dir";
  } else if (!stack_creds.empty()) {
    creds = stack_creds;
    l.field = "the running stack's credentials_dir (stack.json)";
  } else {
    creds = c.redis.credentials_dir;
    l.field = "/redis/credentials_dir";
  }
  // Per-service ACL users (the local stack's, or a shared Redis's credentials_dir): the CLI is
  // h3pipe-operator.
  if (!creds.empty()) {
    const supervisor::RedisUser u = supervisor::user_for(creds, "operator");
    H3_TRY(supervisor::check_in_state_dir(c.state_dir, u.password_file));
    l.user = u.user;
    l.password_file = u.password_file.string();
  } else if (const char* f = std::getenv("H3PIPE_REDIS_PASSWORD_FILE"); f && *f) {
    l.password_file = f;
    l.field = "H3PIPE_REDIS_PASSWORD_FILE";
  } else if (!c.redis.password_file.empty()) {
    l.password_file = c.redis.password_file;
    l.field = "/redis/password_file";
  }
  addr.user = l.user;
  addr.password.clear();
  if (!l.password_file.empty()) {
    auto pw = read_password(l);
    if (!pw.ok()) return pw.error();
    addr.password = *pw;
  }
  if (!g.redis.empty()) {
    auto hp = parse_redis_flag(g.redis);
    if (!hp.ok()) return hp.error();
    addr.host = hp->first;
    addr.port = hp->second;
    addr.sentinels.clear();  // --redis is used as it is
  }
  if (addr.port == 0 && addr.sentinels.empty() && !queue::is_unix_socket(addr.host))
    return make_error(errc::cli::kRedis,
                      "no running local stack under {} and the config names no redis port; run "
                      "`h3pipe start` or pass --redis HOST:PORT",
                      c.state_dir.string());
  auto r = queue::Redis::connect(addr);
  if (!r.ok()) {
    if (r.error().code != errc::redis::kAuth) return r.error();
    const std::string& m = r.error().message;
    const auto colon = m.rfind(": ");
    return refused(l, fmt::format("{}:{}", addr.host, addr.port),
                   colon == std::string::npos ? m : m.substr(colon + 2));
  }
  // A Redis that wants a password the CLI did not send takes the connection and refuses every
  // command (NOAUTH): asked once here, so every command fails the same way before it starts.
  if (const Status ping = queue::ping(**r);
      !ping.ok() && ping.error().code == errc::redis::kError && auth_refusal(ping.error().message))
    return refused(l, (*r)->where(), ping.error().message);
  return r;
}

}  // namespace h3pipe::cli
