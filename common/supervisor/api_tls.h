#pragma once
// h3pipe-api's own certificate from the cluster config (issue #37 item 8; docs/api.md, "TLS"):
// /hosts/*/api_tls_cert and api_tls_key.  The checks `h3pipe start` makes before it starts
// anything (the key readable by its owner only, both files there), shared with the API's
// --tls-key check so both say it in the same words, and the HTTPS probe of its /readyz that
// trusts that certificate (the operator's: self-signed, or signed by a private CA).
#include <string>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::supervisor {

// `label FILE: the private key is readable by others (mode 0644); expected mode 0600 or 0400`,
// or `label FILE: cannot read it (...)`; errc cli.flag with a flag's label, config.invalid else.
Status check_private_key_file(const std::string& label, const std::string& file);

// The host's api_tls_cert / api_tls_key: both set (the loader checks it), the certificate a
// readable file, the key checked as above; each error names /hosts/<i>/<field> and the file.
// Nothing to check (ok) when neither is set.
Status check_api_tls(const config::Cluster& c, const std::string& host);

// GET path over HTTPS from host:port, trusting only the certificates of `cert_file` (its leaf is
// a trust anchor: X509_V_FLAG_PARTIAL_CHAIN) and checking the name the certificate gives (its
// first DNS or IP subjectAltName, else its CN), which is mapped to `host`.  The status (0: no
// answer or the certificate did not verify) and the body.
struct ProbeAnswer {
  int status = 0;
  std::string body;
  std::string error;  // why there was no answer
};
ProbeAnswer https_get_trusting(const std::string& host, int port, const std::string& path,
                               const std::string& cert_file, int timeout_ms);

}  // namespace h3pipe::supervisor
