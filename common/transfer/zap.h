#pragma once
// ZAP (ZeroMQ Authentication Protocol, RFC 27) handler for the transfer receiver: admits a CURVE
// client only when its public key is on the allow-list and the request's domain is ours.
// It binds inproc://zeromq.zap.01 in the process's one context and serves it from its own thread.
// With ZMQ_ZAP_ENFORCE_DOMAIN set on the server socket, a missing handler refuses every client.
#include <atomic>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/core/result.h"

namespace h3pipe::transfer {

class ZapHandler final {
 public:
  // Called for every decision (from the handler thread): client key (Z85), peer address, admitted.
  using Observer = std::function<void(const std::string& key, const std::string& address, bool ok)>;

  // Binds the endpoint before returning, so sockets created afterwards are covered.
  // Errors: zap.bind (another handler already bound in this context), zap.keys (bad Z85 key).
  static Result<std::unique_ptr<ZapHandler>> start(zmq::context_t& ctx, std::string domain,
                                                   const std::vector<std::string>& allowed_z85,
                                                   Observer observer = {});
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  long long admitted() const { return admitted_.load(); }
  long long refused() const { return refused_.load(); }

 private:
  ZapHandler(std::string domain, std::set<std::string> allowed, Observer observer);
  void loop(zmq::socket_t sock);

  std::string domain_;
  std::set<std::string> allowed_;
  Observer observer_;
  std::atomic<bool> stop_{false};
  std::atomic<long long> admitted_{0}, refused_{0};
  std::thread thread_;
};

}  // namespace h3pipe::transfer
