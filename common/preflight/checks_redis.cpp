// redis.* and clock.skew rows.
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/preflight/checks.h"
#include "common/queue/redis.h"
#include "common/queue/redis_config.h"
#include "common/queue/server.h"
#include "common/supervisor/cluster_credentials.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/stack_file.h"

namespace h3pipe::preflight {
namespace fs = std::filesystem;
using queue::info_field;

Resolved resolve_address(const config::Cluster& c, const Options& o) {
  Resolved r;
  // Host and port, or the Sentinels that name the primary, and WAIT: the services' resolution.
  queue::apply_topology(c.redis, r.addr);
  r.addr.user = c.redis.user;
  r.addr.timeout_ms = static_cast<int>(o.timeout.count());
  r.password_file = c.redis.password_file;
  // Per-service ACL users (the local stack's, or redis.credentials_dir): preflight is the operator.
  auto use_credentials = [&](const std::string& dir) {
    if (dir.empty()) return;
    const supervisor::RedisUser u = supervisor::user_for(dir, "operator");
    r.addr.user = u.user;
    r.password_file = u.password_file.string();
  };
  use_credentials(c.redis.credentials_dir);
  if (!c.redis.embedded && c.redis.managed) {
    // A Redis h3pipe runs is reached the way this host's stack reaches it
    // (supervisor/redis_plan.h): its Unix socket on the Redis host, the stunnel client's elsewhere,
    // both in stack.json.
    auto st = supervisor::read_stack(c.state_dir);
    if (!st.ok()) {
      r.error = st.error().message;
    } else if (!*st || !(**st).contains("redis")) {
      r.error = fmt::format(
          "the managed Redis (/redis/managed) is reached through this host's stack: no {} "
          "(start the Redis host first, then this one: h3pipe start --host NAME)",
          (c.state_dir / "stack.json").string());
    } else {
      const auto& j = (**st)["redis"];
      r.addr.host = j.value("host", r.addr.host);
      r.addr.port = j.value("port", r.addr.port);
      r.addr.sentinels.clear();
      use_credentials(j.value("credentials_dir", ""));
    }
    return r;
  }
  if (c.redis.embedded) {
    // `h3pipe start` runs the embedded Redis (on a free port when /redis/port is 0) and records
    // where in <state_dir>/stack.json.
    // Read only from a state dir nobody else can write (supervisor/state_dir.h, issue #22).
    auto f = c.state_dir / "stack.json";
    auto st = supervisor::read_stack(c.state_dir);
    if (!st.ok()) {
      r.error = st.error().message;
      return r;
    }
    if (!*st) {
      if (c.redis.port == 0)
        r.error = fmt::format("embedded Redis is not running: no {}", f.string());
      return r;
    }
    try {
      const auto& j = **st;
      r.addr.port = j.at("redis").at("port").get<int>();
      r.addr.host = j["redis"].value("host", r.addr.host);
      use_credentials(j["redis"].value("credentials_dir", ""));
    } catch (const std::exception& e) {
      r.error = fmt::format("{}: {}", f.string(), e.what());
    }
  }
  return r;
}

namespace {

// redis.replicas: the server is a primary and has the replicas WAIT waits for (INFO replication).
void check_replicas(const config::Cluster& c, queue::Redis& r, const std::string& target,
                    const std::string& who, Report& rep) {
  auto info = queue::info(r, "replication");
  if (!info.ok()) {
    rep.fail("redis.replicas", target, info.error().message,
             "allow INFO for " + who + " (ACL: +info)");
    return;
  }
  const std::string& text = *info;
  const std::string role = info_field(text, "role");
  if (role != "master") {
    rep.fail("redis.replicas", target,
             fmt::format("role {}: not the primary", role.empty() ? "unknown" : role),
             c.redis.sentinel.addresses.empty()
                 ? "point /redis/host and /redis/port at the primary"
                 : "the Sentinels name a replica: a failover in progress, or Sentinels out of date "
                   "(SENTINEL RESET on each)");
    return;
  }
  int online = 0;
  const int connected = std::atoi(info_field(text, "connected_slaves").c_str());
  for (int i = 0; i < connected; ++i)
    if (info_field(text, fmt::format("slave{}", i)).find("state=online") != std::string::npos)
      ++online;
  const int want = c.redis.wait_replicas;
  const std::string detail =
      fmt::format("primary with {} replica(s) online ({} connected); wait_replicas {}", online,
                  connected, want);
  if (want > 0 && online < want)
    rep.fail(
        "redis.replicas", target, detail,
        fmt::format(
            "every completion would wait /redis/wait_timeout_ms ({} ms) and stand on the primary "
            "alone: start or repair the replicas (INFO replication on {}), or lower "
            "/redis/wait_replicas",
            c.redis.wait_timeout_ms, target));
  else if (online == 0)
    rep.warn("redis.replicas", target, detail,
             "Sentinel has no replica to promote if the primary fails: start one (replicaof the "
             "primary)");
  else
    rep.pass("redis.replicas", target, detail);
}

}  // namespace

// redis.tls: a Redis on another host is reached through TLS (issue #34 P4): the stunnel hop h3pipe
// runs (/redis/managed), a local stunnel client the environment points at (compose's
// H3PIPE_REDIS_ADDRESS), or, only with /redis/allow_plaintext, plain RESP (a WARN).
void check_tls(const config::Cluster& c, const Options& o, Report& rep) {
  const std::string target = fmt::format("{}:{}", c.redis.host, c.redis.port);
  const std::string& h = c.redis.host;
  const bool local =
      queue::is_unix_socket(h) || h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0;
  if (c.redis.embedded) return;
  if (supervisor::redis_tls(c)) {
    // The files this host's end of the hop needs (the supervisor refuses to start without them).
    std::vector<std::string> missing;
    const fs::path creds = c.redis.credentials_dir;
    const auto* rh = supervisor::redis_host(c);
    for (const auto& hh : c.hosts) {
      const config::Host* host = &hh;
      const bool checked = !o.host_filter.empty() ? host->name == o.host_filter
                           : c.hosts.size() == 1  ? true
                           : o.is_local           ? o.is_local(*host)
                                                  : is_local_host(*host);
      if (!checked) continue;
      std::vector<std::string> names = {supervisor::kCaCert};
      if (rh && rh->name == host->name) {
        names.emplace_back(supervisor::kServerCert);
        names.emplace_back(supervisor::kServerKey);
      } else {
        names.push_back(supervisor::client_cert_name(host->name));
        names.push_back(supervisor::client_key_name(host->name));
      }
      for (const auto& n : names)
        if (!fs::exists(creds / n)) missing.push_back((creds / n).string());
    }
    if (!rh)
      rep.fail("redis.tls", target,
               "/redis/host names no host of /hosts: no host would run the managed Redis",
               "set /redis/host to the name or address of the host that runs Redis");
    else if (!missing.empty())
      rep.fail("redis.tls", target, "missing: " + fmt::format("{}", fmt::join(missing, ", ")),
               "run `h3pipe credentials init` where the credentials are made, then `h3pipe "
               "credentials export --host NAME -o DIR` and copy DIR to /redis/credentials_dir");
    else
      rep.pass("redis.tls", target,
               fmt::format("TLS 1.2+ through stunnel to {} (certificates of {}, checked both ways)",
                           rh->name, (creds / supervisor::kCaCert).string()));
    return;
  }
  if (const char* via = std::getenv("H3PIPE_REDIS_ADDRESS"); via && *via) {
    rep.pass("redis.tls", target,
             fmt::format("services reach Redis at {} (H3PIPE_REDIS_ADDRESS: a local stunnel "
                         "client, docs/security.md)",
                         via));
    return;
  }
  if (local) {
    rep.pass("redis.tls", target, "Redis on this machine: nothing crosses the network");
    return;
  }
  const std::string what = fmt::format(
      "plain RESP to {}: passwords, specs and tasks cross the network in clear", target);
  if (c.redis.allow_plaintext)
    rep.warn("redis.tls", target, what + " (allowed by /redis/allow_plaintext)",
             "set /redis/managed true (h3pipe runs the stunnel hop) on an untrusted network");
  else
    rep.fail("redis.tls", target, what,
             "set /redis/managed true so h3pipe runs Redis behind its stunnel TLS hop, point "
             "/redis/host at a local stunnel client (docs/security.md), or set "
             "/redis/allow_plaintext true on a network you trust");
}

namespace {

// Where the Redis checks report: behind Sentinel the primary once a Sentinel named it (the
// connection's where()), else the address.
struct Target {
  std::string name;
  bool sentinel = false;
  bool replicas = false;  // redis.replicas is a row (Sentinel or /redis/wait_replicas)
};

// The checks that need a connection, skipped because of `why`.
void skip_rest(const Target& t, Report& rep, const std::string& why) {
  for (const char* n :
       {"redis.version", "redis.aof", "redis.eviction", "redis.replicas", "clock.skew"})
    if (t.replicas || std::string(n) != "redis.replicas") rep.add(n, t.name, Outcome::kSkip, why);
}
void unreachable(const Target& t, Report& rep, const std::string& why, const std::string& fix) {
  rep.fail("redis.reachable", t.name, why, fix);
  rep.add("redis.auth", t.name, Outcome::kSkip, "needs redis.reachable");
  skip_rest(t, rep, "needs redis.reachable");
}

// The password read here, so an unreadable password file is named as such; false when it is.
bool read_password(Resolved& res, const Target& t, Report& rep) {
  if (res.password_file.empty()) return true;
  std::ifstream pf(res.password_file);
  if (!pf) {
    rep.add("redis.reachable", t.name, Outcome::kSkip, "needs redis.auth");
    rep.fail("redis.auth", t.name,
             fmt::format("cannot read the password file {}", res.password_file),
             "create the file (one line, the password; chmod 600) or fix the path in the config");
    skip_rest(t, rep, "needs redis.auth");
    return false;
  }
  config::Redis pr;
  pr.password_file = res.password_file;
  res.addr.password = pr.password();
  return true;
}

// redis.reachable, and the connection (nullptr when the rows say why there is none).
std::unique_ptr<queue::Redis> connect_reachable(const config::Cluster& c, const Resolved& res,
                                                Target& t, Report& rep) {
  auto t0 = std::chrono::steady_clock::now();
  auto conn = queue::Redis::connect(res.addr);
  double connect_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!conn.ok() && conn.error().code == errc::redis::kSentinel) {
    unreachable(t, rep, conn.error().message,
                "see the sentinel.* rows: a Sentinel that answers must monitor "
                "/redis/sentinel/master");
    return nullptr;
  }
  if (t.sentinel && conn.ok()) t.name = (*conn)->where();
  if (!conn.ok() && conn.error().code == errc::redis::kConnect) {
    unreachable(t, rep, conn.error().message,
                c.redis.embedded
                    ? "start the cluster (h3pipe start); the embedded Redis runs with it"
                    : "start Redis on that host (compose profile control) and check the "
                      "firewall; /redis/host and /redis/port must reach it from this machine");
    return nullptr;
  }
  rep.pass(
      "redis.reachable", t.name,
      t.sentinel
          ? fmt::format("the primary Sentinel names for \"{}\"; found and connected in {:.1f} ms",
                        c.redis.sentinel.master, connect_ms)
          : fmt::format("{} connect in {:.1f} ms",
                        queue::is_unix_socket(res.addr.host) ? "Unix socket" : "TCP", connect_ms));
  if (!conn.ok()) {  // connected, but refused the credentials
    rep.fail("redis.auth", t.name, conn.error().message,
             "the password in /redis/password_file (and /redis/user) must match the server's ACL "
             "(configs/redis/entrypoint.sh builds it from the same secret file)");
    skip_rest(t, rep, "needs redis.auth");
    return nullptr;
  }
  return std::move(*conn);
}

// redis.auth: PING as `who`, and whether a password guards the server at all; false when PING
// is refused.
bool check_auth(const config::Cluster& c, const Resolved& res, queue::Redis& r, const Target& t,
                const std::string& who, Report& rep) {
  auto ping = queue::ping(r);
  if (!ping.ok()) {
    bool noauth = ping.error().message.find("NOAUTH") != std::string::npos;
    rep.fail("redis.auth", t.name, ping.error().message,
             noauth ? "the server requires a password: set /redis/password_file (and /redis/user)"
                    : "the ACL of " + who + " must allow PING, INFO, TIME and the h3pipe:* keys");
    skip_rest(t, rep, "needs redis.auth");
    return false;
  }
  // A Redis that takes commands without a password is anyone's on that network: tolerable on one
  // machine (a warning), a failure between hosts (issue #14).
  if (res.addr.password.empty() && c.hosts.size() > 1)
    rep.fail("redis.auth", t.name, "no password configured and the server accepts commands",
             "give every service its ACL user (configs/redis/users.acl, /redis/credentials_dir or "
             "/redis/user + /redis/password_file)");
  else if (res.addr.password.empty())
    rep.warn("redis.auth", t.name, "no password configured and the server accepts commands",
             "`h3pipe start` runs its Redis with per-service ACL users; a Redis of your own "
             "needs /redis/credentials_dir or /redis/user + /redis/password_file");
  else
    rep.pass("redis.auth", t.name, "authenticated as " + who);
  return true;
}

void check_version(queue::Redis& r, const std::string& target, const std::string& who,
                   Report& rep) {
  auto server = queue::info(r, "server");
  if (!server.ok()) {
    rep.fail("redis.version", target, server.error().message,
             "allow INFO for " + who + " (ACL: +info)");
    return;
  }
  std::string ver = info_field(*server, "redis_version");
  int major = 0, minor = 0;
  std::sscanf(ver.c_str(), "%d.%d", &major, &minor);
  if (major > kMinRedisMajor || (major == kMinRedisMajor && minor >= kMinRedisMinor))
    rep.pass("redis.version", target, "redis " + ver);
  else
    rep.fail("redis.version", target, "redis " + (ver.empty() ? std::string("(unknown)") : ver),
             fmt::format("h3pipe needs Redis >= {}.{} (XAUTOCLAIM, ACL users); upgrade the server",
                         kMinRedisMajor, kMinRedisMinor));
}

// redis.aof and redis.eviction: what a Redis restart or a full memory would lose.
void check_durability(const config::Cluster& c, queue::Redis& r, const std::string& target,
                      const std::string& who, Report& rep) {
  auto pers = queue::info(r, "persistence");
  if (!pers.ok()) {
    rep.fail("redis.aof", target, pers.error().message, "allow INFO for " + who + " (ACL: +info)");
  } else {
    std::string aof = info_field(*pers, "aof_enabled");
    if (aof == "1") {
      rep.pass("redis.aof", target, "appendonly yes");
    } else if (c.redis.embedded) {
      rep.warn("redis.aof", target, "appendonly no: queued tasks are lost if Redis dies",
               "fine for a rehearsal; production Redis runs with appendonly yes "
               "(configs/redis/redis.conf)");
    } else {
      rep.fail("redis.aof", target,
               "appendonly no: queued tasks and leases are lost if Redis restarts",
               "set appendonly yes (CONFIG SET appendonly yes, and in redis.conf)");
    }
  }
  auto mem = queue::info(r, "memory");
  if (mem.ok()) {
    std::string policy = info_field(*mem, "maxmemory_policy");
    if (policy.empty() || policy == "noeviction")
      rep.pass("redis.eviction", target,
               "maxmemory-policy " + (policy.empty() ? "unknown" : policy));
    else
      rep.warn("redis.eviction", target, "maxmemory-policy " + policy + " may evict task streams",
               "set maxmemory-policy noeviction");
  } else {
    rep.add("redis.eviction", target, Outcome::kSkip, mem.error().message);
  }
}

// Redis TIME against the local clock, taking the midpoint of the round trip.
void check_clock(const Options& o, queue::Redis& r, const std::string& target,
                 const std::string& who, Report& rep) {
  auto before = std::chrono::system_clock::now();
  auto time = queue::server_time_s(r);
  auto after = std::chrono::system_clock::now();
  if (!time.ok()) {
    rep.fail("clock.skew", target, time.error().message, "allow TIME for " + who);
    return;
  }
  const double server_s = *time;
  auto mid = before + (after - before) / 2;
  double local_s = std::chrono::duration<double>(mid.time_since_epoch()).count();
  double rtt_ms = std::chrono::duration<double, std::milli>(after - before).count();
  double skew = server_s - local_s;
  std::string detail =
      fmt::format("Redis clock {:+.3f} s from this machine (round trip {:.1f} ms)", skew, rtt_ms);
  if (std::abs(skew) <= o.max_clock_skew_s)
    rep.pass("clock.skew", target, detail);
  else
    rep.fail("clock.skew", target, detail,
             fmt::format(
                 "synchronise clocks (chrony/systemd-timesyncd) on this host and the Redis host; "
                 "more than {:.0f} s skews receipts and lease ages",
                 o.max_clock_skew_s));
}

}  // namespace

void check_redis(const config::Cluster& c, const Options& o, Report& rep) {
  check_tls(c, o, rep);
  Resolved res = resolve_address(c, o);
  Target t;
  t.sentinel = !res.addr.sentinels.empty();
  t.replicas = t.sentinel || c.redis.wait_replicas > 0;
  const std::string at = queue::is_unix_socket(res.addr.host)
                             ? "unix:" + res.addr.host
                             : fmt::format("{}:{}", res.addr.host, res.addr.port);
  t.name = t.sentinel          ? fmt::format("sentinel master {}", c.redis.sentinel.master)
           : res.error.empty() ? at
                               : fmt::format("{}:{}", c.redis.host, c.redis.port);
  if (!res.error.empty()) {
    unreachable(t, rep, res.error,
                "start the cluster first (h3pipe start), or set /redis/port to the server's port");
    return;
  }
  if (!read_password(res, t, rep)) return;
  const auto conn = connect_reachable(c, res, t, rep);
  if (!conn) return;
  const std::string who = res.addr.user.empty() ? "the default user" : "user " + res.addr.user;
  if (!check_auth(c, res, *conn, t, who, rep)) return;
  check_version(*conn, t.name, who, rep);
  check_durability(c, *conn, t.name, who, rep);
  if (t.replicas) check_replicas(c, *conn, t.name, who, rep);
  check_clock(o, *conn, t.name, who, rep);
}

}  // namespace h3pipe::preflight
