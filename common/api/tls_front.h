#pragma once
// h3pipe-api's own certificate (issue #37 item 8: "TLS by the ingress or the service's own
// certificate"; docs/api.md, "TLS"; docs/security.md).  With --tls-cert and --tls-key the public
// port speaks only TLS (1.2 or later): TlsFront owns it and one poll() loop over non-blocking
// OpenSSL connections, and relays each one's plaintext to the accept gate (gate.h) over a Unix
// socket in a private (0700) directory of its own, so everything behind is unchanged: a stalled
// or idle client costs a slot in each loop, never a thread.  A handshake must finish within
// handshake_timeout of the accept; a client that speaks plain HTTP to the port fails its
// handshake and is closed.  The key file must be readable by its owner only (mode 0600 or 0400),
// else refused naming it.
#include <chrono>
#include <memory>
#include <string>

#include "common/core/result.h"

namespace h3pipe::api {

struct TlsOptions {
  std::string cert_file;  // PEM: the certificate, then any intermediates
  std::string key_file;   // PEM private key, mode 0600
  // What the errors call them: the flags, or the config's fields (/hosts/<i>/api_tls_cert).
  std::string cert_label = "--tls-cert";
  std::string key_label = "--tls-key";
  std::chrono::milliseconds handshake_timeout{5000};
  std::size_t max_connections = 4096;  // beyond: the oldest still in its handshake is closed
};

class TlsFront final {
 public:
  // Loads and checks the certificate and key (cli.flag errors naming the file and what is wrong).
  static Result<std::unique_ptr<TlsFront>> create(const TlsOptions& o);
  ~TlsFront();
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;
  // Binds the public host:port (0: a free one) and makes the backend's directory; the port.
  Result<int> bind(const std::string& host, int port);
  // The Unix socket path the gate listens on (in a 0700 directory made here, removed with this).
  const std::string& backend_path() const { return backend_; }
  // Relays until stop(); returns once every connection is closed.
  void run();
  void stop();

 private:
  TlsFront() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string backend_;
};

}  // namespace h3pipe::api
