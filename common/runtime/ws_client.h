#pragma once
// A minimal WebSocket client (RFC 6455) for following a server's push messages: ComfyUI's
// `/ws?clientId=` stream of progress messages (#37).  Plain ws:// over TCP (the http:// URL of a
// server), client frames masked, text messages returned whole; binary messages (ComfyUI's
// previews, #38 item 6) returned whole up to set_max_binary() bytes (0, the default: none), larger
// ones skipped without being buffered; pings answered.  Bounded: a text message above
// kMaxMessageBytes or a handshake above 16 KiB ends the connection with an error.
//
// Threading: one Client per thread.  Errors: http.connect (refused, unresolvable), http.timeout,
// http.io (a refused upgrade, a protocol error, the peer closed).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::runtime::ws {

inline constexpr std::size_t kMaxMessageBytes = 1u << 20;

struct Message {
  bool binary = false;
  std::string data;
};

class Client final {
 public:
  // Connects to `http_base` (http://host[:port][/prefix]) and upgrades `path` (e.g.
  // "/ws?clientId=x") below its prefix, within timeout_ms.  An https:// base is refused
  // (http.io): the caller goes on without the stream.
  static Result<std::unique_ptr<Client>> connect(const std::string& http_base,
                                                 const std::string& path, int timeout_ms);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The messages that arrive within timeout_ms (0: only what is already there), at most `max` of
  // them, in arrival order.  An error means the connection is over.
  Result<std::vector<Message>> poll(int timeout_ms, std::size_t max = 64);
  // Sends one text message (masked, as a client must).
  Status send_text(const std::string& text) { return send_frame(0x1, text); }
  // Binary messages up to `bytes` (at most kMaxMessageBytes) are returned; larger ones skipped.
  void set_max_binary(std::size_t bytes) { max_binary_ = std::min(bytes, kMaxMessageBytes); }
  // Binary messages skipped so far (over the bound, or while none are kept).
  std::uint64_t skipped_binary() const { return skipped_binary_; }

 private:
  explicit Client(int fd) : fd_(fd) {}
  // Parses what buf_ holds into messages; false + error on a protocol violation.
  Status parse(std::vector<Message>& out, std::size_t max);
  Status send_frame(int opcode, const std::string& payload);

  int fd_ = -1;
  std::string buf_;         // received, not yet parsed
  std::string message_;     // a fragmented text message being assembled
  bool in_text_ = false;    // message_ is open
  bool in_binary_ = false;  // a fragmented binary message is open
  bool skipping_ = false;   // ... and over its bound: its frames are discarded
  std::string binary_;      // a binary message being assembled (at most max_binary_)
  std::size_t max_binary_ = 0;
  std::uint64_t skipped_binary_ = 0;
  std::uint64_t skip_ = 0;  // bytes of a binary frame still to discard
};

}  // namespace h3pipe::runtime::ws
