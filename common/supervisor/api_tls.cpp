#include "common/supervisor/api_tls.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "common/core/error_codes.h"

namespace h3pipe::supervisor {
namespace {

// The certificates of a PEM file (the leaf first); empty when it holds none or cannot be read.
std::vector<X509*> read_certs(const std::string& file) {
  std::vector<X509*> out;
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(file.c_str(), "r"), BIO_free);
  if (!bio) return out;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.push_back(x);
  ERR_clear_error();  // the end of the file reads as an error
  return out;
}

// The name a client checks the certificate against: its first DNS or IP subjectAltName (a
// wildcard's "*" made a label), else its common name.
std::string cert_name(X509* x) {
  std::string name;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans && name.empty() && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
    if (g->type == GEN_DNS) {
      name.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.dNSName)),
                  static_cast<std::size_t>(ASN1_STRING_length(g->d.dNSName)));
      if (name.rfind("*.", 0) == 0) name = "h3pipe-probe" + name.substr(1);
    } else if (g->type == GEN_IPADD) {
      char buf[INET6_ADDRSTRLEN] = {};
      const int len = ASN1_STRING_length(g->d.iPAddress);
      const void* data = ASN1_STRING_get0_data(g->d.iPAddress);
      if ((len == 4 && inet_ntop(AF_INET, data, buf, sizeof buf)) ||
          (len == 16 && inet_ntop(AF_INET6, data, buf, sizeof buf)))
        name = buf;
    }
  }
  GENERAL_NAMES_free(sans);
  if (name.empty()) {
    char cn[256] = {};
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn) > 0)
      name = cn;
  }
  return name;
}

}  // namespace

Status check_private_key_file(const std::string& label, const std::string& file) {
  const auto code = label.rfind("--", 0) == 0 ? errc::cli::kFlag : errc::config::kInvalid;
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || ::access(file.c_str(), R_OK) != 0)
    return make_error(code, "{} {}: cannot read it ({})", label, file, std::strerror(errno));
  if (st.st_mode & 077)
    return make_error(code,
                      "{} {}: the private key is readable by others (mode {:04o}); expected mode "
                      "0600 or 0400 (chmod 600 {})",
                      label, file, st.st_mode & 07777, file);
  return {};
}

Status check_api_tls(const config::Cluster& c, const std::string& host) {
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const config::Host& h = c.hosts[i];
    if (h.name != host || (h.api_tls_cert.empty() && h.api_tls_key.empty())) continue;
    const std::string at = fmt::format("/hosts/{}/", i);
    if (h.api_tls_cert.empty() || h.api_tls_key.empty())
      return make_error(errc::config::kInvalid,
                        "{}{}: api_tls_cert and api_tls_key go together (got only {})", at,
                        h.api_tls_cert.empty() ? "api_tls_cert" : "api_tls_key",
                        h.api_tls_cert.empty() ? "api_tls_key" : "api_tls_cert");
    const auto certs = read_certs(h.api_tls_cert);
    const bool none = certs.empty();
    for (X509* x : certs) X509_free(x);
    if (none)
      return make_error(errc::config::kInvalid, "{}api_tls_cert {}: expected a PEM certificate", at,
                        h.api_tls_cert);
    return check_private_key_file(at + "api_tls_key", h.api_tls_key);
  }
  return {};
}

ProbeAnswer https_get_trusting(const std::string& host, int port, const std::string& path,
                               const std::string& cert_file, int timeout_ms) {
  ProbeAnswer a;
  auto certs = read_certs(cert_file);
  if (certs.empty()) {
    a.error = cert_file + ": no PEM certificate";
    return a;
  }
  const std::string name = cert_name(certs.front());
  X509_STORE* store = X509_STORE_new();
  for (X509* x : certs) {
    X509_STORE_add_cert(store, x);
    X509_free(x);
  }
  X509_STORE_set_flags(store, X509_V_FLAG_PARTIAL_CHAIN);
  httplib::SSLClient cli(name.empty() ? host : name, port);
  if (!name.empty() && name != host) cli.set_hostname_addr_map({{name, host}});
  cli.set_ca_cert_store(store);  // owned by the client's context from here
  X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(cli.ssl_context()), X509_V_FLAG_PARTIAL_CHAIN);
  cli.enable_server_certificate_verification(true);
  cli.set_connection_timeout(0, timeout_ms * 1000);
  cli.set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  auto r = cli.Get(path.c_str());
  if (!r) {
    a.error = fmt::format("{} (verify result {})", httplib::to_string(r.error()),
                          cli.get_openssl_verify_result());
    return a;
  }
  a.status = r->status;
  a.body = r->body;
  return a;
}

}  // namespace h3pipe::supervisor
