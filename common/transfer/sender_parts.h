#pragma once
// Internals of TransferSender (sender*.cpp, with sender_impl.h): the per-latent job, the per-peer
// connection state, and the helpers that do not need the sender's loop.  Not a public interface.
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/core/result.h"
#include "common/core/sha256.h"
#include "common/transfer/data_cipher.h"
#include "common/transfer/sender.h"

namespace h3pipe::transfer::detail {

using Clock = std::chrono::steady_clock;

struct Job {
  pb::StageTask task;
  std::string key;
  std::filesystem::path latent;
  std::string rel;
  std::string sha;
  std::uint64_t size = 0;
  int attempts = 0;
  Clock::time_point queued = Clock::now();
  std::uint64_t bytes_sent = 0;
  std::optional<std::uint64_t> resumed_from;
  bool source_mismatch = false;
  bool eager_tried = false;  // only a latent's first offer carries eager chunks
  bool eager_taken = false;
  bool sealed = false;  // the current attempt's bytes go as sealed data frames
};

enum class St { kIdle, kOffered, kStreaming, kAwaitDone };

struct Peer {
  PeerOptions o;
  std::unique_ptr<zmq::socket_t> sock, mon;
  int index = 0;
  bool connected = false, refused_logged = false;
  Clock::time_point last_rx, next_ping, reconnect_at;
  int backoff_ms = 0;
  std::deque<Job> queue;
  std::optional<Job> active;
  St st = St::kIdle;
  std::uint64_t tid = 0, next = 0, limit = 0, chunk = 0, hashed = 0;
  int fd = -1;
  Sha256 hasher;
  bool hashing = false, want_out = false;
  bool eager = false;       // streaming eager chunks: offered, the reply not in yet
  int corrupt_pending = 0;  // test-only hook: flip a bit in the next chunk
  Clock::time_point progress;
  // A receiver that asks for a new offer (its Redis hand-off failed, it restarted, an I/O error)
  // is offered again after a doubling delay, reset by the next success: a persistent failure on
  // the decode host costs a few log lines a second, not hundreds (issue #15).
  int offer_again_ms = 0;
  Clock::time_point next_offer_at;
  // The receiver's data connection (issue #36 item 8): opened once its pong announces a port,
  // used once its monitor saw the handshake (data_connected: a port the sender cannot reach, as
  // behind a container's port mapping, is never used and costs nothing); the active attempt seals
  // its chunks with `sealer` when the offer carried a key.  A sealed
  // frame the socket could not take yet waits in `unsent` (its nonce is spent: it must go as
  // is).  A sealed attempt that made no progress leaves the data path unused until
  // data_retry_at (the chunks ride CURVE meanwhile).
  std::unique_ptr<zmq::socket_t> data_sock, data_mon;
  std::uint32_t data_port = 0;
  bool data_connected = false;
  // The control connection's handshake time, whether a pong came on it, and whether the wait
  // for the data connection is over on it (data_wait_ms: offers go through CURVE after it).
  Clock::time_point connected_at;
  bool pong_seen = false, data_waited = false;
  std::optional<FrameSealer> sealer;
  std::optional<zmq::message_t> unsent;
  std::uint64_t unsent_len = 0;
  bool data_want_out = false;
  Clock::time_point data_retry_at;
};

// Validates a task and builds its job: the latent must lie under opts.root, named by validated
// components (a local notification can never make the sender ship an arbitrary file), and have
// a sidecar that agrees with the task.  Errors: id.*, transfer.source.
Result<Job> make_job(const SenderOptions& opts, const pb::StageTask& t);

// Creates the peer's data DEALER (no CURVE: it carries sealed frames only) to `port` at the
// address of the peer's control endpoint, its socket monitor, and connects.  Errors:
// transfer.socket.
Status open_data_peer(zmq::context_t& ctx, const SenderOptions& opts, Peer& p, std::uint32_t port,
                      const void* owner);
// Closes the peer's data connection and its monitor.
void close_data_peer(Peer& p);
// The next event of the data connection's monitor, if one is waiting.
std::optional<std::uint16_t> next_data_event(Peer& p);

// Creates the peer's DEALER (CURVE client, limits), its socket monitor, and connects.
Status open_peer(zmq::context_t& ctx, const SenderOptions& opts, Peer& p, const void* owner);

// The next event of the peer's socket monitor, if one is waiting.
std::optional<std::uint16_t> next_monitor_event(Peer& p);

}  // namespace h3pipe::transfer::detail
