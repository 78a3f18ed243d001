#pragma once
// How one host's stack reaches Redis, and what it runs for it (issue #34 items 1-2, #35 D1):
//   embedded            redis-server on a Unix socket in <state>/redis (0700) and no TCP port,
//                       however many hosts the config names (each host's stack runs its own)
//   managed, Redis host redis-server on the socket (AOF, the ACL of /redis/credentials_dir), and
//                       an stunnel TLS server on the host's bind address : /redis/port in front
//                       of it (allow_plaintext: redis-server itself listens there instead)
//   managed, other host an stunnel client on <state>/redis/tunnel.sock that checks the server's
//                       certificate (CA and SAN) and presents this host's client certificate
//   external            the config's address, as it is
// This host's services and CLI use `local` (a socket path or the config's address); the
// supervisor pings as `ping_role`: admin only where this host runs Redis, else the operator
// (no other host holds redis-admin, P2).
#include <filesystem>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::supervisor {

struct RedisPlan {
  bool run_redis = false;        // this stack runs redis-server
  std::filesystem::path socket;  // its Unix socket
  int tcp_port = 0;      // its TCP port (0: socket only; only a managed Redis with allow_plaintext)
  std::string tcp_bind;  // and address
  bool tls_server = false;             // an stunnel server in front of it (Redis host)
  bool tls_client = false;             // an stunnel client to it (every other host)
  std::filesystem::path stunnel_conf;  // <state>/redis/stunnel.conf, written by start()
  std::string stunnel_text;
  std::filesystem::path tunnel_socket;    // the client's accept socket
  std::filesystem::path credentials_dir;  // "" = the config's user/password_file
  std::string ping_role;                  // "admin", "operator" or "" (the config's user)
  queue::RedisAddress local;              // what this host's services and CLI use (no user)
};

// Errors: start.redis (a managed Redis whose credentials or stunnel are missing, a state dir
// too long for a Unix socket).
Result<RedisPlan> plan_redis(const config::Cluster& c, const std::string& host);

// redis-server's command line as h3pipe runs it (the supervisor's child and the systemd unit):
// `tcp_port` on `bind` (0: socket only), the Unix socket 0700, AOF everysec and no RDB
// snapshots, protected mode, the ACL file `dir`/users.acl, in the foreground.  The caller adds
// what differs (the supervisor a pid file, the unit --supervised systemd).
std::vector<std::string> redis_server_argv(const std::string& binary, int tcp_port,
                                           const std::string& bind,
                                           const std::filesystem::path& socket,
                                           const std::filesystem::path& dir);

// The stunnel configs (foreground, no pid file, TLS 1.2+, certificates checked both ways; the
// shape of configs/redis/stunnel-{server,client}.conf).  Pure; exposed for tests.
std::string stunnel_server_conf(const std::string& accept, const std::filesystem::path& connect,
                                const std::filesystem::path& creds);
std::string stunnel_client_conf(const std::filesystem::path& accept, const std::string& connect,
                                const std::string& server_name, const std::filesystem::path& creds,
                                const std::string& host);
// /usr/bin/stunnel4 or /usr/bin/stunnel ("" when neither is installed).
std::string stunnel_binary();

}  // namespace h3pipe::supervisor
