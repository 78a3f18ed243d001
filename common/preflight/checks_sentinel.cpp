// sentinel.* rows: each Sentinel of /redis/sentinel/addresses, as the services will ask it.
#include <fmt/ranges.h>

#include <fstream>
#include <map>

#include "common/preflight/checks.h"
#include "common/queue/redis.h"
#include "common/queue/redis_config.h"
#include "common/queue/server.h"

namespace h3pipe::preflight {
namespace {

constexpr const char* kDependents[] = {"sentinel.auth", "sentinel.master", "sentinel.quorum"};

void skip_from(Report& rep, const std::string& target, std::size_t first, const std::string& why) {
  for (std::size_t i = first; i < std::size(kDependents); ++i)
    rep.add(kDependents[i], target, Outcome::kSkip, why);
}

}  // namespace

void check_sentinels(const config::Cluster& c, const Options& o, Report& rep) {
  const auto& sc = c.redis.sentinel;
  if (sc.addresses.empty()) return;
  // The same parse the services use (queue::apply_topology): host, port, Sentinel's own AUTH.
  queue::RedisAddress topo;
  queue::apply_topology(c.redis, topo);
  std::string pw_error;
  if (!sc.password_file.empty() && !std::ifstream(sc.password_file))
    pw_error = fmt::format("cannot read the Sentinel password file {}", sc.password_file);
  const std::string who =
      topo.sentinel_user.empty() ? "Sentinel's default user" : "user " + topo.sentinel_user;
  std::map<std::string, std::vector<std::string>> named;  // primary -> the Sentinels naming it
  for (const auto& s : topo.sentinels) {
    const std::string target = fmt::format("{}:{}", s.host, s.port);
    if (!pw_error.empty()) {
      rep.add("sentinel.reachable", target, Outcome::kSkip, "needs sentinel.auth");
      rep.fail("sentinel.auth", target, pw_error,
               "create the file (one line, the password; chmod 600) or fix "
               "/redis/sentinel/password_file");
      skip_from(rep, target, 1, "needs sentinel.auth");
      continue;
    }
    queue::RedisAddress a;
    a.host = s.host;
    a.port = s.port;
    a.user = topo.sentinel_user;
    a.password = topo.sentinel_password;
    a.timeout_ms = static_cast<int>(o.timeout.count());
    auto conn = queue::Redis::connect(a);
    if (!conn.ok() && conn.error().code == errc::redis::kConnect) {
      rep.fail(
          "sentinel.reachable", target, conn.error().message,
          "start redis-sentinel there and check the firewall; /redis/sentinel/addresses must reach "
          "every Sentinel from this machine");
      skip_from(rep, target, 0, "needs sentinel.reachable");
      continue;
    }
    rep.pass("sentinel.reachable", target, "TCP connect");
    if (!conn.ok()) {
      rep.fail("sentinel.auth", target, conn.error().message,
               "/redis/sentinel/password_file (and /redis/sentinel/user) must match the Sentinel's "
               "requirepass / ACL");
      skip_from(rep, target, 1, "needs sentinel.auth");
      continue;
    }
    auto& r = **conn;
    auto ping = queue::ping(r);
    if (!ping.ok()) {
      const bool noauth = ping.error().message.find("NOAUTH") != std::string::npos;
      rep.fail("sentinel.auth", target, ping.error().message,
               noauth ? "the Sentinel requires a password: set /redis/sentinel/password_file (and "
                        "/redis/sentinel/user)"
                      : "the Sentinel must answer PING for " + who);
      skip_from(rep, target, 1, "needs sentinel.auth");
      continue;
    }
    rep.pass("sentinel.auth", target,
             topo.sentinel_password.empty()
                 ? "no password configured; the Sentinel accepts commands"
                 : "authenticated as " + who);
    auto m = queue::sentinel_primary(r, sc.master);
    if (!m.ok() || !m->has_value()) {
      rep.fail(
          "sentinel.master", target,
          m.ok() ? fmt::format("does not monitor a master named \"{}\"", sc.master)
                 : m.error().message,
          "/redis/sentinel/master must be the name of every Sentinel's `sentinel monitor NAME HOST "
          "PORT QUORUM` line");
      skip_from(rep, target, 2, "needs sentinel.master");
      continue;
    }
    const std::string primary = fmt::format("{}:{}", (*m)->host, (*m)->port);
    named[primary].push_back(target);
    rep.pass("sentinel.master", target, fmt::format("master \"{}\" is {}", sc.master, primary));
    // Enough Sentinels reachable to authorise a failover (quorum) and to elect its leader
    // (majority).
    auto q = queue::sentinel_ckquorum(r, sc.master);
    if (q.ok())
      rep.pass("sentinel.quorum", target, *q);
    else
      rep.fail(
          "sentinel.quorum", target, q.error().message,
          "start the missing Sentinels (or fix their network): a failover needs the quorum and a "
          "majority of all Sentinels reachable from each other");
  }
  if (named.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [p, by] : named)
      parts.push_back(fmt::format("{} by {}", p, fmt::join(by, ", ")));
    rep.warn(
        "sentinel.master", "sentinels",
        fmt::format("the Sentinels disagree: {}", fmt::join(parts, "; ")),
        "a failover in progress settles within failover-timeout; otherwise check each Sentinel's "
        "`sentinel monitor` line names the same primary");
  }
}

}  // namespace h3pipe::preflight
