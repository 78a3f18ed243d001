#include "common/transfer/zap.h"

#include <zmq_addon.hpp>

#include "common/transfer/keys.h"

namespace h3pipe::transfer {

ZapHandler::ZapHandler(std::string domain, std::set<std::string> allowed, Observer observer)
    : domain_(std::move(domain)), allowed_(std::move(allowed)), observer_(std::move(observer)) {}

Result<std::unique_ptr<ZapHandler>> ZapHandler::start(zmq::context_t& ctx, std::string domain,
                                                      const std::vector<std::string>& allowed_z85,
                                                      Observer observer) {
  std::set<std::string> allowed;
  for (const auto& k : allowed_z85) {
    if (!is_z85_key(k))
      return make_error(errc::zap::kKeys, "allowed client key \"{}\" is not a 40-character Z85 key",
                        k);
    allowed.insert(k);
  }
  if (domain.empty()) return make_error(errc::zap::kDomain, "the ZAP domain must not be empty");
  zmq::socket_t sock(ctx, zmq::socket_type::rep);
  sock.set(zmq::sockopt::linger, 0);
  try {
    sock.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return make_error(errc::zap::kBind, "cannot bind the ZAP handler: {}", e.what());
  }
  std::unique_ptr<ZapHandler> h(
      new ZapHandler(std::move(domain), std::move(allowed), std::move(observer)));
  // The socket moves to the handler thread and is used only there from now on.
  h->thread_ =
      std::thread([raw = h.get(), s = std::move(sock)]() mutable { raw->loop(std::move(s)); });
  return h;
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::loop(zmq::socket_t sock) {
  while (!stop_) {
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> req;
      if (!zmq::recv_multipart(sock, std::back_inserter(req), zmq::recv_flags::dontwait)) continue;
      // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
      std::string version = req.size() > 0 ? req[0].to_string() : "";
      std::string request_id = req.size() > 1 ? req[1].to_string() : "";
      std::string domain = req.size() > 2 ? req[2].to_string() : "";
      std::string address = req.size() > 3 ? req[3].to_string() : "";
      std::string mechanism = req.size() > 5 ? req[5].to_string() : "";
      std::string key;
      if (mechanism == "CURVE" && req.size() > 6 && req[6].size() == 32) {
        char z85[41] = {};
        zmq_z85_encode(z85, static_cast<const std::uint8_t*>(req[6].data()), 32);
        key = z85;
      }
      bool ok = version == "1.0" && domain == domain_ && mechanism == "CURVE" && !key.empty() &&
                allowed_.count(key) > 0;
      (ok ? admitted_ : refused_)++;
      if (observer_) observer_(key, address, ok);
      const std::string user = ok ? key : std::string();
      std::array<zmq::const_buffer, 6> reply = {
          zmq::buffer(std::string_view("1.0")),
          zmq::buffer(request_id),
          zmq::buffer(std::string_view(ok ? "200" : "400")),
          zmq::buffer(std::string_view(ok ? "OK" : "client key not allowed")),
          zmq::buffer(user),
          zmq::buffer(std::string_view())};
      zmq::send_multipart(sock, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
    }
  }
}

}  // namespace h3pipe::transfer
