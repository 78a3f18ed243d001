#include "common/supervisor/redis_plan.h"

#include <fmt/format.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/queue/redis_config.h"
#include "common/supervisor/cluster_credentials.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/tls_certs.h"

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
namespace {

Status socket_path_fits(const fs::path& p) {
  if (p.string().size() >= sizeof(sockaddr_un{}.sun_path))
    return make_error(errc::start::kRedis,
                      "{} is {} bytes, longer than a Unix socket path may be ({}): choose a "
                      "shorter /state_dir",
                      p.string(), p.string().size(), sizeof(sockaddr_un{}.sun_path) - 1);
  return {};
}

// The files a TLS end needs, each named when missing.
Status need_files(const fs::path& creds, std::initializer_list<std::string> names,
                  const std::string& host) {
  for (const auto& n : names)
    if (!fs::exists(creds / n))
      return make_error(errc::start::kRedis,
                        "{} is missing: host {} needs it for the TLS hop to Redis; run `h3pipe "
                        "credentials init` (where the credentials are made) and copy `h3pipe "
                        "credentials export --host {} -o DIR` to /redis/credentials_dir here",
                        (creds / n).string(), host, host);
  return {};
}

}  // namespace

std::string stunnel_binary() {
  for (const char* p : {"/usr/bin/stunnel4", "/usr/bin/stunnel"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

std::string stunnel_server_conf(const std::string& accept, const fs::path& connect,
                                const fs::path& creds) {
  return fmt::format(
      "; written by h3pipe start: the TLS server in front of the shared Redis (docs/security.md)\n"
      "foreground = yes\npid =\nsyslog = no\ndebug = notice\n\n[redis-tls]\naccept = {}\n"
      "connect = {}\ncert = {}\nkey = {}\nCAfile = {}\nverifyChain = yes\nrequireCert = yes\n"
      "sslVersionMin = TLSv1.2\nTIMEOUTclose = 0\n",
      accept, connect.string(), (creds / kServerCert).string(), (creds / kServerKey).string(),
      (creds / kCaCert).string());
}

std::string stunnel_client_conf(const fs::path& accept, const std::string& connect,
                                const std::string& server_name, const fs::path& creds,
                                const std::string& host) {
  return fmt::format(
      "; written by h3pipe start: this host's TLS client to the shared Redis (docs/security.md)\n"
      "foreground = yes\npid =\nsyslog = no\ndebug = notice\n\n[redis]\nclient = yes\n"
      "accept = {}\nconnect = {}\nCAfile = {}\nverifyChain = yes\n{} = {}\ncert = {}\nkey = {}\n"
      "sslVersionMin = TLSv1.2\nTIMEOUTclose = 0\n",
      accept.string(), connect, (creds / kCaCert).string(),
      is_ip_literal(server_name) ? "checkIP" : "checkHost", server_name,
      (creds / client_cert_name(host)).string(), (creds / client_key_name(host)).string());
}

Result<RedisPlan> plan_redis(const config::Cluster& c, const std::string& host) {
  RedisPlan p;
  const fs::path redis_dir = fs::absolute(c.state_dir) / "redis";
  p.local = queue::address_of(c.redis);
  p.local.user.clear();
  p.local.password.clear();
  if (c.redis.embedded) {
    p.run_redis = true;
    p.socket = redis_dir / "redis.sock";
    H3_TRY(socket_path_fits(p.socket));
    // No TCP port, however many hosts the config names (issue #35 D1): an embedded Redis is this
    // stack's alone (every host's `start` runs its own; nothing of another stack connects to
    // it), so a loopback port would only hand AUTH to whoever binds it after a kill -9 or stop.
    p.credentials_dir = secrets_dir(c.state_dir);
    p.ping_role = "admin";
    p.local.sentinels.clear();
    p.local.host = p.socket.string();
    p.local.port = 0;
    return p;
  }
  p.credentials_dir = c.redis.credentials_dir;
  p.ping_role = p.credentials_dir.empty() ? "" : "operator";
  if (!c.redis.managed) return p;
  const config::Host* rh = redis_host(c);
  if (!rh)
    return make_error(errc::start::kRedis,
                      "/redis/managed: /redis/host \"{}\" is neither the name nor the address of a "
                      "host in /hosts",
                      c.redis.host);
  const fs::path creds = fs::absolute(p.credentials_dir);
  const config::Host* me = c.find_host(host);
  if (rh->name == host) {
    p.run_redis = true;
    p.socket = redis_dir / "redis.sock";
    H3_TRY(socket_path_fits(p.socket));
    p.ping_role = "admin";
    // redis-admin is made here, on the Redis host, and nowhere else (cluster_credentials.h).
    if (const fs::path admin = user_for(creds, "admin").password_file;
        fs::exists(creds) && !fs::exists(admin)) {
      auto pw = random_password();
      if (!pw.ok()) return pw.error();
      H3_TRY(write_private(admin, *pw + "\n"));
    }
    std::vector<std::string> names;
    for (std::string_view role : kLocalRoles)
      names.push_back(user_for(creds, role).password_file.filename().string());
    for (const auto& n : names)
      if (!fs::exists(creds / n))
        return make_error(errc::start::kRedis,
                          "{} is missing: the Redis host {} renders every ACL user from "
                          "/redis/credentials_dir; run `h3pipe credentials init --config ...` "
                          "here, or copy `h3pipe credentials export --host {}`",
                          (creds / n).string(), host, host);
    const std::string bind = me && !me->bind.empty() ? me->bind : me ? me->address : "127.0.0.1";
    if (redis_tls(c)) {
      H3_TRY(need_files(creds, {kCaCert, kServerCert, kServerKey}, host));
      p.tls_server = true;
      p.stunnel_conf = redis_dir / "stunnel-server.conf";
      p.stunnel_text =
          stunnel_server_conf(fmt::format("{}:{}", bind, c.redis.port), p.socket, creds);
    } else {
      p.tcp_port = c.redis.port;
      p.tcp_bind = bind;
    }
    p.local.sentinels.clear();
    p.local.host = p.socket.string();
    p.local.port = 0;
    return p;
  }
  if (!redis_tls(c)) return p;  // plain RESP to /redis/host:/redis/port (allow_plaintext)
  H3_TRY(need_files(creds, {kCaCert, client_cert_name(host), client_key_name(host)}, host));
  p.tls_client = true;
  p.tunnel_socket = redis_dir / "tunnel.sock";
  H3_TRY(socket_path_fits(p.tunnel_socket));
  p.stunnel_conf = redis_dir / "stunnel-client.conf";
  p.stunnel_text = stunnel_client_conf(
      p.tunnel_socket, fmt::format("{}:{}", c.redis.host, c.redis.port), c.redis.host, creds, host);
  p.local.sentinels.clear();
  p.local.host = p.tunnel_socket.string();
  p.local.port = 0;
  return p;
}

std::vector<std::string> redis_server_argv(const std::string& binary, int tcp_port,
                                           const std::string& bind,
                                           const std::filesystem::path& socket,
                                           const std::filesystem::path& dir) {
  return {binary,
          "--port",
          std::to_string(tcp_port),
          "--bind",
          bind,
          "--unixsocket",
          socket.string(),
          "--unixsocketperm",
          "700",
          "--dir",
          dir.string(),
          "--appendonly",
          "yes",
          "--appendfsync",
          "everysec",
          "--save",
          "",
          "--protected-mode",
          "yes",
          "--aclfile",
          (dir / "users.acl").string(),
          "--daemonize",
          "no"};
}

}  // namespace h3pipe::supervisor
