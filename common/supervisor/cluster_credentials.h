#pragma once
// The credentials of a cluster whose shared Redis h3pipe runs (/redis/managed, issue #34 items 1
// and 2), made by `h3pipe credentials init` and handed out by `h3pipe credentials export`.
// A credentials folder (the config's /redis/credentials_dir; 0700, every file 0600) holds
//   redis-<role>.password        role: encoder sampler decoder transfer operator; admin only on
//                                the Redis host, made there by its first `h3pipe start` (a
//                                managed Redis's admin password never leaves that host)
//   redis-ca.pem                 the CA of the stunnel hop (every host)
//   redis-ca.key                 the CA's key: only where `init` ran, never exported
//   redis-server.pem, .key       the Redis host's stunnel server (subjectAltName = /redis/host)
//   redis-client-<host>.pem,.key each other host's stunnel client certificate
// `export --host NAME` copies what that host needs: the Redis host everything but the CA key;
// any other host the passwords of its own services' users and the operator (never admin), the
// CA certificate and its own client pair.
#include <filesystem>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::supervisor {

inline constexpr const char kCaCert[] = "redis-ca.pem";
inline constexpr const char kCaKey[] = "redis-ca.key";
inline constexpr const char kServerCert[] = "redis-server.pem";
inline constexpr const char kServerKey[] = "redis-server.key";
std::string client_cert_name(const std::string& host);  // redis-client-<host>.pem
std::string client_key_name(const std::string& host);   // redis-client-<host>.key

// The host that runs a managed shared Redis: the one whose name or address is /redis/host
// (nullptr when the Redis is embedded, not managed, or no host matches).
const config::Host* redis_host(const config::Cluster& c);
// Whether the hop to a managed Redis is TLS (stunnel): managed and not /redis/allow_plaintext.
bool redis_tls(const config::Cluster& c);
// The Redis roles whose passwords `host` needs: its services' (encoder, sampler, decoder,
// transfer when the cluster has more than one host) and the operator's; the Redis host: all.
std::vector<std::string> roles_for_host(const config::Cluster& c, const std::string& host);

struct Written {
  std::vector<std::filesystem::path> created;  // new files
  std::vector<std::filesystem::path> kept;     // files that were there and were left as they are
};

// Creates what is missing in `dir` (passwords for every role but a managed Redis's admin; with
// TLS, the CA, the server pair
// for /redis/host and a client pair per other host); existing files are kept, so a second init
// changes nothing a running Redis uses.  Errors: acl.*, io.*.
Result<Written> init_credentials(const config::Cluster& c, const std::filesystem::path& dir);

// Copies into `out` (created 0700) exactly what `host` needs (above) from `from`.  A missing
// source file is acl.credentials naming it; an unknown host acl.credentials.
Result<std::vector<std::filesystem::path>> export_credentials(const config::Cluster& c,
                                                              const std::string& host,
                                                              const std::filesystem::path& from,
                                                              const std::filesystem::path& out);

}  // namespace h3pipe::supervisor
