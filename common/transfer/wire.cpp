#include "common/transfer/wire.h"

#include <malloc.h>

#include <chrono>

#include "common/transfer/keys.h"

namespace h3pipe::transfer {
namespace {

int hwm_for(std::uint32_t window) {
  return static_cast<int>(window) + 32;
}

// ZMQ_ZAP_ENFORCE_DOMAIN (93) sits behind ZMQ_BUILD_DRAFT_API in zmq.h although libzmq 4.3
// implements it; set by number.  With it, CURVE without a reachable ZAP handler refuses.
constexpr int kZapEnforceDomain = 93;

}  // namespace

zmq::message_t encode(const pb::TransferFrame& f) {
  zmq::message_t m(f.ByteSizeLong());
  f.SerializeToArray(m.data(), static_cast<int>(m.size()));
  return m;
}

bool decode(const zmq::message_t& m, pb::TransferFrame* f) {
  if (m.size() > static_cast<std::size_t>(INT32_MAX)) return false;
  if (!f->ParseFromArray(m.data(), static_cast<int>(m.size()))) return false;
  return f->body_case() != pb::TransferFrame::BODY_NOT_SET;
}

Status configure_server(zmq::socket_t& s, const CurveServer& curve, std::uint32_t chunk_bytes,
                        std::uint32_t window, int heartbeat_ms, int dead_after_ms) {
  try {
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(max_message_bytes(chunk_bytes)));
    s.set(zmq::sockopt::rcvhwm, hwm_for(window));
    s.set(zmq::sockopt::sndhwm, hwm_for(window));
    s.set(zmq::sockopt::router_mandatory, 1);
    s.set(zmq::sockopt::heartbeat_ivl, heartbeat_ms);
    s.set(zmq::sockopt::heartbeat_timeout, dead_after_ms);
    s.set(zmq::sockopt::heartbeat_ttl, dead_after_ms);
    s.set(zmq::sockopt::handshake_ivl, dead_after_ms);
    if (curve.enabled) {
      if (!is_z85_key(curve.secret_key))
        return make_error(errc::transfer::kCurve,
                          "receiver secret key is not a 40-character Z85 key");
      s.set(zmq::sockopt::curve_server, 1);
      s.set(zmq::sockopt::curve_secretkey, curve.secret_key);
      s.set(zmq::sockopt::zap_domain, curve.zap_domain);
      int one = 1;  // no handler -> refuse, never admit
      if (zmq_setsockopt(s.handle(), kZapEnforceDomain, &one, sizeof one) != 0)
        return make_error(errc::transfer::kSocket, "this libzmq lacks ZMQ_ZAP_ENFORCE_DOMAIN: {}",
                          zmq_strerror(zmq_errno()));
    }
  } catch (const zmq::error_t& e) {
    return make_error(errc::transfer::kSocket, "configuring the receiver socket: {}", e.what());
  }
  return {};
}

Status configure_client(zmq::socket_t& s, const CurveClient& curve, std::uint32_t chunk_bytes,
                        std::uint32_t window, int heartbeat_ms, int dead_after_ms) {
  try {
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::immediate, 1);
    s.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(max_message_bytes(chunk_bytes)));
    s.set(zmq::sockopt::rcvhwm, hwm_for(window));
    s.set(zmq::sockopt::sndhwm, hwm_for(window));
    s.set(zmq::sockopt::heartbeat_ivl, heartbeat_ms);
    s.set(zmq::sockopt::heartbeat_timeout, dead_after_ms);
    s.set(zmq::sockopt::heartbeat_ttl, dead_after_ms);
    s.set(zmq::sockopt::handshake_ivl, dead_after_ms);
    s.set(zmq::sockopt::reconnect_ivl, 100);
    s.set(zmq::sockopt::reconnect_ivl_max, 2000);
    if (curve.enabled) {
      if (!is_z85_key(curve.secret_key) || !is_z85_key(curve.public_key) ||
          !is_z85_key(curve.server_key))
        return make_error(
            errc::transfer::kCurve,
            "sender CURVE keys (own public/secret, receiver public) must be Z85 keys");
      s.set(zmq::sockopt::curve_serverkey, curve.server_key);
      s.set(zmq::sockopt::curve_publickey, curve.public_key);
      s.set(zmq::sockopt::curve_secretkey, curve.secret_key);
    }
  } catch (const zmq::error_t& e) {
    return make_error(errc::transfer::kSocket, "configuring the sender socket: {}", e.what());
  }
  return {};
}

void tune_allocator() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace h3pipe::transfer
