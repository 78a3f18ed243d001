// TransferReceiver and its receive loop (receiver_impl.h): the ROUTER socket with CURVE and ZAP,
// the loop, reading and dispatching frames, sending replies, and expiring the sessions of
// senders gone silent.  One transfer's protocol is in receiver_session.cpp.
#include "common/transfer/receiver.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <zmq_addon.hpp>

#include "common/transfer/frames.h"
#include "common/transfer/log.h"
#include "common/transfer/receiver_impl.h"
#include "common/transfer/wire.h"
#include "common/transfer/zap.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
using detail::logger;

TransferReceiver::Impl::Impl(zmq::context_t& ctx, ReceiverOptions o, OnDurable cb,
                             TransferProbe& probe)
    : ctx_(ctx),
      opts_(std::move(o)),
      on_durable_(std::move(cb)),
      probe_(probe),
      sock_(ctx, zmq::socket_type::router),
      stop_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (opts_.checkpoint_chunks == 0) opts_.checkpoint_chunks = std::max(1u, opts_.window / 4);
}

TransferReceiver::Impl::~Impl() {
  ::close(stop_fd_);
}

Result<std::string> TransferReceiver::Impl::bind() {
  if (opts_.curve.enabled) {
    auto zap =
        ZapHandler::start(ctx_, opts_.curve.zap_domain, opts_.curve.allowed_clients,
                          [this](const std::string& key, const std::string& addr, bool ok) {
                            if (!ok) {
                              probe_.auth_refused();
                              logger().warn("transfer receiver: refused client key {} from {}",
                                            key.empty() ? "(none)" : key, addr);
                            }
                          });
    if (!zap.ok()) return zap.error();
    zap_ = std::move(*zap);
  }
  H3_TRY(configure_server(sock_, opts_.curve, opts_.chunk_bytes, opts_.window, opts_.heartbeat_ms,
                          opts_.dead_after_ms));
  try {
    sock_.bind(opts_.bind_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(errc::transfer::kBind, "cannot bind {}: {}", opts_.bind_endpoint, e.what());
  }
  return sock_.get(zmq::sockopt::last_endpoint);
}

Result<std::string> TransferReceiver::Impl::bind_data(const std::string& control_endpoint) {
  if (!opts_.curve.enabled || !opts_.data_frames) return std::string();
  // tcp://ADDRESS:PORT -> tcp://ADDRESS:data_port (the control socket's own address, so the data
  // connection is exactly as reachable as it: loopback by default, never "*" unless configured).
  const auto colon = control_endpoint.rfind(':');
  if (control_endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos)
    return std::string();  // ipc:// or inproc://: no data connection, chunks ride CURVE
  const std::string ep = fmt::format("{}:{}", control_endpoint.substr(0, colon), opts_.data_port);
  auto s = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
  CurveServer none;  // no CURVE: the frames carry their own encryption and authentication
  none.enabled = false;
  H3_TRY(configure_server(*s, none, opts_.chunk_bytes, opts_.window, opts_.heartbeat_ms,
                          opts_.dead_after_ms));
  try {
    s->bind(ep);
  } catch (const zmq::error_t& e) {
    return make_error(errc::transfer::kBind, "cannot bind the data connection {}: {}", ep,
                      e.what());
  }
  std::string bound = s->get(zmq::sockopt::last_endpoint);
  const auto port = bound.substr(bound.rfind(':') + 1);
  data_port_ = static_cast<std::uint32_t>(std::stoul(port));
  data_sock_ = std::move(s);
  return bound;
}

void TransferReceiver::Impl::request_stop() {
  std::uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
}

void TransferReceiver::Impl::loop() {
  for (;;) {
    zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, io_.event_fd(), ZMQ_POLLIN, 0},
                               {nullptr, stop_fd_, ZMQ_POLLIN, 0},
                               {data_sock_ ? data_sock_->handle() : nullptr, data_sock_ ? 0 : -1,
                                data_sock_ ? short(ZMQ_POLLIN) : short(0), 0}};
    try {
      zmq::poll(items, data_sock_ ? 4 : 3, std::chrono::milliseconds(opts_.heartbeat_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      continue;
    }
    if (items[2].revents & ZMQ_POLLIN) break;
    if (items[1].revents & ZMQ_POLLIN) io_.drain();
    // Control first: an offer read in this round is in before the data frames that follow it.
    if (items[0].revents & ZMQ_POLLIN) read_frames();
    if (data_sock_ && (items[3].revents & ZMQ_POLLIN)) read_data_frames();
    expire_sessions();
  }
  // Keep what was received for the next start: checkpoint every open session.
  for (auto& [key, s] : sessions_) flush(*s);
  while (io_.pending() > 0) {
    zmq::pollitem_t it{nullptr, io_.event_fd(), ZMQ_POLLIN, 0};
    zmq::poll(&it, 1, std::chrono::milliseconds(100));
    io_.drain();
  }
}

void TransferReceiver::Impl::read_frames() {
  for (int budget = 0; budget < 256; ++budget) {
    std::vector<zmq::message_t> parts;
    try {
      if (!zmq::recv_multipart(sock_, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t&) {
      return;
    }
    // [routing id, frame] or, for a chunk, [routing id, frame, bytes]
    std::vector<std::string_view> views;
    for (const auto& p : parts) views.emplace_back(static_cast<const char*>(p.data()), p.size());
    auto f = parse_frame(Reader::kReceiver, views);
    if (!f.ok() && f.error().code == errc::transfer::kFrameParts) {
      probe_.protocol_error();
      continue;
    }
    std::string routing = parts[0].to_string();
    last_rx_[routing] = Clock::now();
    if (!f.ok()) {
      probe_.protocol_error();
      if (f.error().code != errc::transfer::kFrameNoData) {
        // The peer's CURVE key (ZAP's User-Id) names it across reconnects; else its routing id.
        std::string peer;
        try {
          peer = parts.back().gets("User-Id");
        } catch (const zmq::error_t&) {
        }
        const auto a = junk_log_.admit(peer.empty() ? routing : peer);
        if (a.log)
          logger().warn("transfer receiver: peer {}: {}{}",
                        peer.empty() ? "(no key)" : peer.substr(0, 8), f.error().message,
                        a.suppressed ? fmt::format(" ({} more junk frame(s) from it not logged)",
                                                   a.suppressed)
                                     : std::string());
      }
      continue;
    }
    switch (f->body_case()) {
      case pb::TransferFrame::kPing: {
        pb::TransferFrame r;
        r.mutable_pong()->set_unix_ms(f->ping().unix_ms());
        r.mutable_pong()->set_data_port(data_port_);
        send(routing, r);
        break;
      }
      case pb::TransferFrame::kOffer:
        offer_peer_.clear();
        try {
          offer_peer_ = parts.back().gets("User-Id");
        } catch (const zmq::error_t&) {  // no CURVE: no key
        }
        on_offer(routing, f->offer());
        break;
      default:  // kChunk, with its bytes (parse_frame admits nothing else)
        on_chunk(routing, f->chunk(), parts[2]);
    }
  }
}

void TransferReceiver::Impl::send(const std::string& routing, const pb::TransferFrame& f) {
  try {
    zmq::message_t id(routing.data(), routing.size());
    if (!sock_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
    (void)sock_.send(encode(f), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // EHOSTUNREACH: the sender went away; it re-offers when it comes back.
  }
}

void TransferReceiver::Impl::send_done(const std::string& routing, const pb::Offer& o,
                                       std::uint64_t tid, bool ok, std::string_view code,
                                       const std::string& reason, bool retry) {
  pb::TransferFrame f;
  auto* d = f.mutable_done();
  d->set_job_id(o.job_id());
  d->set_transfer_id(tid);
  d->set_ok(ok);
  d->set_sha256(ok ? o.sha256() : "");
  d->set_code(std::string(code));
  d->set_reason(reason);
  d->set_retry(retry);
  send(routing, f);
}

void TransferReceiver::Impl::expire_sessions() {
  const auto now = Clock::now();
  const auto dead = std::chrono::milliseconds(opts_.dead_after_ms);
  std::vector<Session*> gone;
  for (auto& [key, s] : sessions_) {
    auto it = last_rx_.find(s->routing);
    if (s->phase == Session::Phase::kReceiving && (it == last_rx_.end() || now - it->second > dead))
      gone.push_back(s.get());
  }
  for (Session* s : gone) {
    probe_.peer_dead();
    logger().warn(
        "transfer receiver: run={} job={}: sender silent for {} ms; keeping {} bytes for resume",
        s->offer.run_id(), s->offer.job_id(), opts_.dead_after_ms, s->received);
    close_session(s);
  }
  for (auto it = last_rx_.begin(); it != last_rx_.end();)
    it = now - it->second > 10 * dead ? last_rx_.erase(it) : std::next(it);
  if (unknown_told_.size() > 4096) unknown_told_.clear();
  expire_early();
}

TransferReceiver::TransferReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<TransferReceiver>> TransferReceiver::start(zmq::context_t& ctx,
                                                                  ReceiverOptions opts,
                                                                  OnDurable on_durable,
                                                                  TransferProbe& probe) {
  if (opts.root.empty()) return make_error(errc::transfer::kConfig, "receiver root must be set");
  opts.root = fs::absolute(opts.root);  // offers resolve below it (artifacts::Root checks)
  if (opts.chunk_bytes == 0 || opts.chunk_bytes > (16u << 20) || opts.window == 0)
    return make_error(errc::transfer::kConfig,
                      "chunk_bytes must be 1..16 MiB and window at least 1");
  auto impl = std::make_unique<Impl>(ctx, std::move(opts), std::move(on_durable), probe);
  auto ep = impl->bind();
  if (!ep.ok()) return ep.error();
  std::unique_ptr<TransferReceiver> r(new TransferReceiver(std::move(impl)));
  r->endpoint_ = *ep;
  auto dep = r->impl_->bind_data(*ep);
  if (!dep.ok()) return dep.error();
  r->data_endpoint_ = *dep;
  r->thread_ = std::thread([raw = r->impl_.get()] { raw->loop(); });
  return r;
}

void TransferReceiver::stop() {
  if (!thread_.joinable()) return;
  impl_->request_stop();
  thread_.join();
}

TransferReceiver::~TransferReceiver() {
  stop();
}

long long TransferReceiver::zap_refused() const {
  return impl_->zap_refused();
}

}  // namespace h3pipe::transfer
