#include "common/supervisor/cluster_credentials.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>

#include "common/supervisor/credentials.h"
#include "common/supervisor/tls_certs.h"

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
namespace {

constexpr int kCaDays = 3650;
constexpr int kCertDays = 825;

Result<std::string> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    return make_error(errc::acl::kCredentials, "cannot read {}: run `h3pipe credentials init`",
                      p.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes `pem` as NAME.pem/NAME.key pair files unless both exist.
Status write_pair(const fs::path& dir, const std::string& cert, const std::string& key,
                  const std::function<Result<Pem>()>& make, Written& w) {
  if (fs::exists(dir / cert) && fs::exists(dir / key)) {
    w.kept.push_back(dir / cert);
    w.kept.push_back(dir / key);
    return {};
  }
  auto pem = make();
  if (!pem.ok()) return pem.error();
  H3_TRY(write_private(dir / key, pem->key));
  H3_TRY(write_private(dir / cert, pem->cert));
  w.created.push_back(dir / cert);
  w.created.push_back(dir / key);
  return {};
}

}  // namespace

std::string client_cert_name(const std::string& host) {
  return "redis-client-" + host + ".pem";
}
std::string client_key_name(const std::string& host) {
  return "redis-client-" + host + ".key";
}

const config::Host* redis_host(const config::Cluster& c) {
  if (c.redis.embedded || !c.redis.managed) return nullptr;
  for (const auto& h : c.hosts)
    if (h.name == c.redis.host || (!h.address.empty() && h.address == c.redis.host)) return &h;
  return nullptr;
}

bool redis_tls(const config::Cluster& c) {
  return !c.redis.embedded && c.redis.managed && !c.redis.allow_plaintext;
}

std::vector<std::string> roles_for_host(const config::Cluster& c, const std::string& host) {
  const config::Host* rh = redis_host(c);
  if (rh && rh->name == host) return {std::begin(kLocalRoles), std::end(kLocalRoles)};
  std::vector<std::string> roles;
  auto add = [&](const char* r) {
    if (std::find(roles.begin(), roles.end(), r) == roles.end()) roles.emplace_back(r);
  };
  for (const auto* p : c.pools_on(host))
    add(p->stage == config::StageKind::kEncode   ? "encoder"
        : p->stage == config::StageKind::kSample ? "sampler"
                                                 : "decoder");
  if (c.hosts.size() > 1) add("transfer");
  add("operator");
  return roles;
}

Result<Written> init_credentials(const config::Cluster& c, const fs::path& dir) {
  if (dir.empty())
    return make_error(errc::acl::kCredentials,
                      "no credentials folder: set /redis/credentials_dir or pass --dir");
  H3_TRY(make_private_dir(dir));
  Written w;
  for (std::string_view role : kLocalRoles) {
    // redis-admin is born on the Redis host (its first `start`), so it never leaves that host.
    if (role == "admin" && redis_host(c)) continue;
    const fs::path f = user_for(dir, role).password_file;
    if (fs::exists(f)) {
      w.kept.push_back(f);
      continue;
    }
    auto pw = random_password();
    if (!pw.ok()) return pw.error();
    H3_TRY(write_private(f, *pw + "\n"));
    w.created.push_back(f);
  }
  if (!redis_tls(c)) return w;
  const config::Host* rh = redis_host(c);
  if (!rh)
    return make_error(errc::acl::kCredentials,
                      "/redis/host \"{}\" is neither the name nor the address of a host in /hosts: "
                      "the host that runs the managed Redis must be one of them",
                      c.redis.host);
  H3_TRY(write_pair(
      dir, kCaCert, kCaKey, [&] { return make_ca("h3pipe " + c.name + " CA", kCaDays); }, w));
  auto ca_cert = slurp(dir / kCaCert);
  if (!ca_cert.ok()) return ca_cert.error();
  auto ca_key = slurp(dir / kCaKey);
  if (!ca_key.ok()) return ca_key.error();
  const Pem ca{*ca_cert, *ca_key};
  H3_TRY(write_pair(
      dir, kServerCert, kServerKey, [&] { return issue_cert(ca, c.redis.host, true, kCertDays); },
      w));
  for (const auto& h : c.hosts) {
    if (h.name == rh->name) continue;
    H3_TRY(write_pair(
        dir, client_cert_name(h.name), client_key_name(h.name),
        [&] { return issue_cert(ca, h.name, false, kCertDays); }, w));
  }
  return w;
}

Result<std::vector<fs::path>> export_credentials(const config::Cluster& c, const std::string& host,
                                                 const fs::path& from, const fs::path& out) {
  if (!c.find_host(host))
    return make_error(errc::acl::kCredentials, "--host \"{}\" is not a host of the config", host);
  std::vector<std::string> names;
  for (const auto& role : roles_for_host(c, host))
    if (role != "admin" || !redis_host(c))  // made by the Redis host's own start
      names.push_back(user_for(from, role).password_file.filename().string());
  if (redis_tls(c)) {
    names.emplace_back(kCaCert);
    const config::Host* rh = redis_host(c);
    if (rh && rh->name == host) {
      names.emplace_back(kServerCert);
      names.emplace_back(kServerKey);
    } else {
      names.push_back(client_cert_name(host));
      names.push_back(client_key_name(host));
    }
  }
  // Everything is read before anything is written: a missing secret leaves no half export.
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& n : names) {
    auto text = slurp(from / n);
    if (!text.ok())
      return make_error(errc::acl::kCredentials,
                        "{} is missing: host {} needs it (run `h3pipe credentials init` first)",
                        (from / n).string(), host);
    files.emplace_back(n, std::move(*text));
  }
  H3_TRY(make_private_dir(out));
  std::vector<fs::path> written;
  for (const auto& [n, text] : files) {
    H3_TRY(write_private(out / n, text));
    written.push_back(out / n);
  }
  return written;
}

}  // namespace h3pipe::supervisor
