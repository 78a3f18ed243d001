// The sender's side of each peer's connection (TransferSender::Impl, sender_impl.h): opening the
// socket, its monitor's events, dropping it with a doubling reconnect delay, sending frames, the
// heartbeat, and the per-peer tick that starts the next transfer and drives the active one.
#include <chrono>

#include "common/transfer/log.h"
#include "common/transfer/sender_impl.h"
#include "common/transfer/sender_parts.h"
#include "common/transfer/wire.h"

namespace h3pipe::transfer {
using detail::Clock;
using detail::logger;
using detail::next_monitor_event;
using detail::open_peer;
using detail::Peer;
using detail::St;
using std::chrono::milliseconds;

void TransferSender::Impl::ensure_socket(Peer& p) {
  if (p.sock || Clock::now() < p.reconnect_at) return;
  if (auto st = open_peer(ctx_, opts_, p, this); !st.ok()) {
    logger().error("transfer sender: peer {}: {}", p.o.host, st.error().message);
    p.reconnect_at = Clock::now() + milliseconds(opts_.backoff_max_ms);
  }
}

void TransferSender::Impl::drop_socket(Peer& p, const char* why) {
  if (p.sock) zmq_socket_monitor(p.sock->handle(), nullptr, 0);
  p.mon.reset();
  p.sock.reset();
  detail::close_data_peer(p);  // learnt again from the next connection's pong
  p.connected = false;
  p.backoff_ms = p.backoff_ms == 0 ? opts_.backoff_initial_ms
                                   : std::min(p.backoff_ms * 2, opts_.backoff_max_ms);
  p.reconnect_at = Clock::now() + milliseconds(p.backoff_ms);
  logger().warn("transfer sender: peer {} ({}): {}; reconnecting in {} ms", p.o.host, p.o.endpoint,
                why, p.backoff_ms);
  reset_attempt(p);
}

void TransferSender::Impl::monitor_events(Peer& p) {
  while (auto ev = next_monitor_event(p)) {
    const std::uint16_t event = *ev;
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      p.connected = true;
      p.refused_logged = false;
      p.backoff_ms = 0;
      p.last_rx = Clock::now();
      p.next_ping = Clock::now();
      p.connected_at = Clock::now();
      p.pong_seen = false;
      p.data_waited = false;
      probe_.connected();
      logger().info("transfer sender: connected to {} ({})", p.o.host, p.o.endpoint);
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      if (p.connected)
        logger().warn("transfer sender: disconnected from {} ({})", p.o.host, p.o.endpoint);
      p.connected = false;
      reset_attempt(p);
    } else if (!p.refused_logged) {
      p.refused_logged = true;
      logger().error("transfer sender: handshake with {} ({}) failed{}", p.o.host, p.o.endpoint,
                     event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                         ? ": our key is not allowed by the receiver"
                         : "");
    }
  }
}

bool TransferSender::Impl::send(Peer& p, const pb::TransferFrame& f) {
  if (!p.sock) return false;
  try {
    return p.sock->send(encode(f), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

// Both frames or neither: the first is sent only when the socket can take a message now.
bool TransferSender::Impl::send_chunk(Peer& p, const pb::TransferFrame& f, zmq::message_t data) {
  if (!p.sock) return false;
  try {
    if (!p.sock->send(encode(f), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return false;
    (void)p.sock->send(data, zmq::send_flags::dontwait);  // parts of a message are atomic
    return true;
  } catch (const zmq::error_t&) {
    return false;
  }
}

// The receiver's pong names its data connection's port (0: none).  A new port (the receiver
// restarted) replaces the data socket; the active attempt keeps going where it was.
void TransferSender::Impl::on_pong(Peer& p, const pb::Ping& pong) {
  if (!opts_.curve.enabled || !opts_.data_frames) return;
  p.pong_seen = true;
  const std::uint32_t port = pong.data_port();
  if (port == p.data_port) return;
  if (p.active && p.sealer) reset_attempt(p);  // its frames went to the old connection
  detail::close_data_peer(p);
  if (port == 0) return;
  if (auto st = detail::open_data_peer(ctx_, opts_, p, port, this); !st.ok())
    logger().warn("transfer sender: peer {}: {}; its chunks go through CURVE", p.o.host,
                  st.error().message);
}

bool TransferSender::Impl::data_usable(const Peer& p) const {
  return p.data_sock && p.data_connected && opts_.curve.enabled && opts_.data_frames &&
         Clock::now() >= p.data_retry_at;
}

// Whether the next offer waits for the data connection: on a new control connection, until the
// pong has named the data port and that connection's handshake is done, at most data_wait_ms
// after the control handshake (every latent sealed, the first one too).  Past that the wait is
// over for this connection: logged and counted once, and the latents go through CURVE until
// the data connection comes up (a firewalled data port costs one wait per connection).
bool TransferSender::Impl::wait_for_data(Peer& p) {
  const auto now = Clock::now();
  if (!opts_.curve.enabled || !opts_.data_frames || p.data_waited || data_usable(p) ||
      now < p.data_retry_at)
    return false;
  if (p.pong_seen && p.data_port == 0) return false;  // the receiver has no data connection
  if (now - p.connected_at < milliseconds(opts_.data_wait_ms)) return true;
  p.data_waited = true;
  probe_.data_fallback();
  logger().warn(
      "transfer sender: data connection to {} ({}) not up {} ms after the control connection{}; "
      "latents go through CURVE until it is",
      p.o.host, p.o.endpoint, opts_.data_wait_ms,
      p.pong_seen ? fmt::format(" (data port {} unreachable?)", p.data_port)
                  : std::string(" (no pong yet)"));
  return false;
}

// The data connection's handshake and losses.  A loss during a sealed attempt ends it at once
// (its frames in flight are gone; the receiver would wait for them): offered again, as after a
// disconnect of the control connection.
void TransferSender::Impl::data_events(Peer& p) {
  while (auto ev = detail::next_data_event(p)) {
    if (*ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      p.data_connected = true;
      logger().info("transfer sender: data connection to {} up (port {})", p.o.host, p.data_port);
    } else if (*ev == ZMQ_EVENT_DISCONNECTED) {
      p.data_connected = false;
      if (p.active && p.sealer) reset_attempt(p);
    }
  }
}

void TransferSender::Impl::tick(Peer& p) {
  const auto now = Clock::now();
  if (!p.sock) return;
  if (p.connected && now >= p.next_ping) {
    pb::TransferFrame f;
    f.mutable_ping()->set_unix_ms(unix_ms());
    send(p, f);
    p.next_ping = now + milliseconds(opts_.heartbeat_ms);
  }
  if (p.connected && now - p.last_rx > milliseconds(opts_.dead_after_ms)) {
    probe_.peer_dead();
    drop_socket(p, fmt::format("no answer for {} ms", opts_.dead_after_ms).c_str());
    return;
  }
  if (!p.active && !p.queue.empty()) {
    p.active = std::move(p.queue.front());
    p.queue.pop_front();
    p.st = St::kIdle;
  }
  if (!p.active || !p.connected) return;
  if (p.st == St::kIdle) {
    if (now < p.next_offer_at || wait_for_data(p)) return;
    offer(p);
  } else if (now - p.progress > milliseconds(opts_.dead_after_ms)) {
    logger().warn("transfer sender: run={} job={}: no progress from {} for {} ms; offering again{}",
                  p.active->task.run_id(), p.active->task.job_id(), p.o.host, opts_.dead_after_ms,
                  p.sealer ? " through CURVE (the data connection is left unused for 60 s)" : "");
    if (p.sealer) {
      p.data_retry_at = now + std::chrono::seconds(60);
      probe_.data_fallback();
    }
    reset_attempt(p);
    offer(p);
  } else if (p.st == St::kStreaming || (p.st == St::kOffered && p.eager)) {
    pump(p);
  }
}

}  // namespace h3pipe::transfer
