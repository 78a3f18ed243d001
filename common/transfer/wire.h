#pragma once
// Frames and socket options shared by the sender and the receiver.
#include <cstdint>
#include <string>
#include <zmq.hpp>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/transfer/frames.h"  // frame_name, parse_frame

namespace h3pipe::transfer {

// Room for an Offer (its StageTask carries the job spec, prompt up to 16 KiB) beside a chunk.
inline constexpr std::size_t kFrameOverhead = 64 * 1024;
inline constexpr std::size_t max_message_bytes(std::uint32_t chunk_bytes) {
  return std::size_t{chunk_bytes} + kFrameOverhead;
}
inline constexpr const char* kDefaultZapDomain = "h3pipe-transfer";

// CURVE settings of one side.  Keys are Z85 text (keys.h).
struct CurveServer {
  bool enabled = true;
  std::string public_key, secret_key;
  std::vector<std::string> allowed_clients;  // Z85 public keys admitted by ZAP
  std::string zap_domain = kDefaultZapDomain;
};
struct CurveClient {
  bool enabled = true;
  std::string public_key, secret_key;  // this host's pair
  std::string server_key;              // the receiver's public key
};

zmq::message_t encode(const pb::TransferFrame& f);
// False when the bytes are not one TransferFrame with a body.
bool decode(const zmq::message_t& m, pb::TransferFrame* f);

// ROUTER options: CURVE server with ZAP domain enforced, max message size, small HWMs,
// ZMTP heartbeats.  Errors: transfer.curve (bad keys), transfer.socket.
Status configure_server(zmq::socket_t& s, const CurveServer& curve, std::uint32_t chunk_bytes,
                        std::uint32_t window, int heartbeat_ms, int dead_after_ms);
// DEALER options: CURVE client, immediate (no queueing to an unconnected peer), same limits.
Status configure_client(zmq::socket_t& s, const CurveClient& curve, std::uint32_t chunk_bytes,
                        std::uint32_t window, int heartbeat_ms, int dead_after_ms);

// Process-wide malloc tuning for a transfer service (call once at start; not done implicitly):
// chunk-sized buffers come and go hundreds of times a second, so keep them in the heap instead
// of fresh mmaps (each a round of page faults) and do not trim the heap after every transfer.
void tune_allocator();
std::int64_t unix_ms();

}  // namespace h3pipe::transfer
