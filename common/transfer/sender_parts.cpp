#include "common/transfer/sender_parts.h"

#include <atomic>
#include <cstring>

#include "common/artifacts/artifacts.h"

namespace h3pipe::transfer::detail {
namespace fs = std::filesystem;

Result<Job> make_job(const SenderOptions& opts, const pb::StageTask& t) {
  Job j;
  j.key = t.run_id() + "/" + t.job_id();
  fs::path in = t.input_path();
  std::error_code ec;
  fs::path rel = in.is_absolute() ? fs::relative(in, opts.root, ec) : in;
  std::vector<std::string> parts;
  for (const auto& c : rel) parts.push_back(c.string());
  if (ec || parts.empty() || parts.size() > 6)
    return make_error(errc::transfer::kSource, "task.input_path \"{}\" is not a file under {}",
                      t.input_path(), opts.root.string());
  for (const auto& c : parts) H3_TRY(artifacts::validate_id("task.input_path", c));
  j.rel = rel.generic_string();
  j.latent = opts.root / rel;
  j.sha = artifacts::read_sidecar(j.latent);
  if (j.sha.empty())
    return make_error(errc::transfer::kSource, "{} has no valid .sha256 sidecar (not durable yet?)",
                      j.latent.string());
  if (!t.input_sha256().empty() && t.input_sha256() != j.sha)
    return make_error(errc::transfer::kSource, "{}: sidecar says {}, the task says {}",
                      j.latent.string(), j.sha, t.input_sha256());
  j.size = fs::file_size(j.latent, ec);
  if (ec) return make_error(errc::transfer::kSource, "{}: {}", j.latent.string(), ec.message());
  j.task = t;
  return j;
}

namespace {
std::optional<std::uint16_t> next_event(zmq::socket_t* mon) {
  for (;;) {
    zmq::message_t ev, addr;
    if (!mon || !mon->recv(ev, zmq::recv_flags::dontwait)) return std::nullopt;
    if (!mon->recv(addr, zmq::recv_flags::dontwait)) return std::nullopt;
    if (ev.size() < 6) continue;
    std::uint16_t event;
    std::memcpy(&event, ev.data(), 2);
    return event;
  }
}
// The monitors' inproc names must never repeat in this process (see open_peer).
std::atomic<std::uint64_t> g_data_monitors{0};
}  // namespace

void close_data_peer(Peer& p) {
  if (p.data_sock) zmq_socket_monitor(p.data_sock->handle(), nullptr, 0);
  p.data_mon.reset();
  p.data_sock.reset();
  p.data_port = 0;
  p.data_connected = false;
  p.data_want_out = false;
}

std::optional<std::uint16_t> next_data_event(Peer& p) {
  return next_event(p.data_mon.get());
}

Status open_data_peer(zmq::context_t& ctx, const SenderOptions& opts, Peer& p, std::uint32_t port,
                      const void* owner) {
  const auto colon = p.o.endpoint.rfind(':');
  if (p.o.endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos || port == 0 ||
      port > 65535)
    return make_error(errc::transfer::kSocket, "no data connection to {} (port {})", p.o.endpoint,
                      port);
  const std::string ep = fmt::format("{}:{}", p.o.endpoint.substr(0, colon), port);
  auto sock = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  CurveClient none;  // no CURVE: the frames carry their own encryption and authentication
  none.enabled = false;
  H3_TRY(configure_client(*sock, none, 0, 64, opts.heartbeat_ms, opts.dead_after_ms));
  // No ZMTP heartbeat from this end: nothing but its pongs ever comes back on this connection,
  // and on a slow link they wait behind megabytes of frames in the kernel's send buffer, so a
  // heartbeat timeout would cut a healthy transfer (a 20 Mbit/s link did).  The control
  // connection's pings, credits and the no-progress timer watch the transfer instead.
  try {
    sock->set(zmq::sockopt::heartbeat_ivl, 0);
  } catch (const zmq::error_t& e) {
    return make_error(errc::transfer::kSocket, "configuring the data connection: {}", e.what());
  }
  const std::string mon_ep = fmt::format("inproc://h3xfer-data-mon-{}-{}-{}", owner, p.index,
                                         g_data_monitors.fetch_add(1, std::memory_order_relaxed));
  if (zmq_socket_monitor(sock->handle(), mon_ep.c_str(),
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0)
    return make_error(errc::transfer::kSocket, "monitoring the data connection to {}: {}", ep,
                      zmq_strerror(zmq_errno()));
  auto mon = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
  try {
    mon->set(zmq::sockopt::linger, 0);
    mon->connect(mon_ep);
    sock->connect(ep);
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(sock->handle(), nullptr, 0);
    return make_error(errc::transfer::kSocket, "connect {}: {}", ep, e.what());
  }
  p.data_sock = std::move(sock);
  p.data_mon = std::move(mon);
  p.data_port = port;
  p.data_connected = false;
  p.data_want_out = false;
  return {};
}

Status open_peer(zmq::context_t& ctx, const SenderOptions& opts, Peer& p, const void* owner) {
  CurveClient c = opts.curve;
  c.server_key = p.o.server_key;
  auto sock = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  H3_TRY(configure_client(*sock, c, 0, 64, opts.heartbeat_ms, opts.dead_after_ms));
  // The monitor's inproc name must never repeat in this process: a closed monitor socket
  // releases its name only when libzmq's reaper gets to it, so a sender restarted at the same
  // address (the heap reuses it) once bound a name still held, lost every event, and never saw
  // the handshake.  A process-wide counter makes each name new.
  static std::atomic<std::uint64_t> monitors{0};
  const std::string mon_ep = fmt::format("inproc://h3xfer-mon-{}-{}-{}", owner, p.index,
                                         monitors.fetch_add(1, std::memory_order_relaxed));
  if (zmq_socket_monitor(sock->handle(), mon_ep.c_str(),
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
    return make_error(errc::transfer::kSocket, "monitoring the socket to {}: {}", p.o.endpoint,
                      zmq_strerror(zmq_errno()));
  auto mon = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
  try {
    mon->set(zmq::sockopt::linger, 0);
    mon->connect(mon_ep);
    sock->connect(p.o.endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(errc::transfer::kSocket, "connect {}: {}", p.o.endpoint, e.what());
  }
  p.sock = std::move(sock);
  p.mon = std::move(mon);
  p.connected = false;
  p.last_rx = Clock::now();
  return {};
}

std::optional<std::uint16_t> next_monitor_event(Peer& p) {
  for (;;) {
    zmq::message_t ev, addr;
    if (!p.mon || !p.mon->recv(ev, zmq::recv_flags::dontwait)) return std::nullopt;
    if (!p.mon->recv(addr, zmq::recv_flags::dontwait)) return std::nullopt;
    if (ev.size() < 6) continue;
    std::uint16_t event;
    std::memcpy(&event, ev.data(), 2);
    return event;
  }
}

}  // namespace h3pipe::transfer::detail
