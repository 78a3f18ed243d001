#pragma once
// The certificates of the stunnel hop between hosts (issue #34 P4), made with OpenSSL's library
// (no openssl binary needed): one CA per cluster, a server certificate for the Redis host's
// address (subjectAltName IP or DNS, what the stunnel clients check) and a client certificate per
// other host (the server requires one signed by the same CA).  ECDSA P-256, SHA-256, PEM.
#include <string>

#include "common/core/result.h"

namespace h3pipe::supervisor {

struct Pem {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key (PKCS#8, unencrypted: the files are 0600)
};

// A self-signed CA ("CN=<name>"), valid `days` days.  Errors: tls.make.
Result<Pem> make_ca(const std::string& name, int days);
// A leaf signed by `ca`: CN and subjectAltName = `subject` (an IPv4/IPv6 literal becomes an IP
// SAN, anything else a DNS SAN), extendedKeyUsage serverAuth or clientAuth.  Errors: tls.make.
Result<Pem> issue_cert(const Pem& ca, const std::string& subject, bool server, int days);
// Whether `s` is an IPv4 or IPv6 literal (stunnel then checks it with checkIP, else checkHost).
bool is_ip_literal(const std::string& s);

}  // namespace h3pipe::supervisor
