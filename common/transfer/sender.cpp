#include "common/transfer/sender.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/logging/log.h"
#include "common/transfer/frames.h"
#include "common/transfer/outbox.h"
#include "common/transfer/sender_parts.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("transfer");
  return *l;
}

}  // namespace

namespace h3pipe::transfer {
namespace fs = std::filesystem;
using detail::Clock;
using detail::Job;
using detail::make_job;
using detail::next_monitor_event;
using detail::open_peer;
using detail::Peer;
using detail::St;
using std::chrono::milliseconds;

namespace {

std::string key_of(const pb::StageTask& t) {
  return t.run_id() + "/" + t.job_id();
}

}  // namespace

class TransferSender::Impl {
 public:
  Impl(zmq::context_t& ctx, SenderOptions o, TransferProbe& probe)
      : ctx_(ctx),
        opts_(std::move(o)),
        probe_(probe),
        rng_(std::random_device{}()),
        ctl_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (opts_.local_root.empty()) opts_.local_root = opts_.root;
    for (std::size_t i = 0; i < opts_.peers.size(); ++i) {
      Peer p;
      p.o = opts_.peers[i];
      p.index = static_cast<int>(i);
      peers_.push_back(std::move(p));
    }
  }
  ~Impl() {
    for (auto& p : peers_) close_file(p);
    ::close(ctl_fd_);
  }

  Result<std::string> bind() {
    if (opts_.notify_endpoint.empty()) return std::string();
    try {
      notify_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::pull);
      notify_->set(zmq::sockopt::linger, 0);
      notify_->set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(kFrameOverhead));
      notify_->bind(opts_.notify_endpoint);
      return notify_->get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return make_error(errc::transfer::kBind, "cannot bind the notify socket {}: {}",
                        opts_.notify_endpoint, e.what());
    }
  }

  void submit(pb::StageTask t) {
    {
      std::lock_guard<std::mutex> l(mu_);
      submitted_.push_back(std::move(t));
    }
    wake();
  }
  void request_stop() {
    stop_ = true;
    wake();
  }

  void loop() {
    rescan();
    while (!stop_) {
      std::vector<zmq::pollitem_t> items;
      items.push_back({nullptr, ctl_fd_, ZMQ_POLLIN, 0});
      if (notify_) items.push_back({notify_->handle(), 0, ZMQ_POLLIN, 0});
      const std::size_t first_peer = items.size();
      for (auto& p : peers_) {
        ensure_socket(p);
        short ev = ZMQ_POLLIN | (p.want_out ? ZMQ_POLLOUT : 0);
        items.push_back(
            {p.sock ? p.sock->handle() : nullptr, p.sock ? 0 : -1, p.sock ? ev : short(0), 0});
        items.push_back({p.mon ? p.mon->handle() : nullptr, p.mon ? 0 : -1,
                         p.mon ? short(ZMQ_POLLIN) : short(0), 0});
      }
      try {
        zmq::poll(items.data(), items.size(), milliseconds(std::min(opts_.heartbeat_ms, 100)));
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) return;
        continue;
      }
      if (items[0].revents & ZMQ_POLLIN) take_submitted();
      if (notify_ && (items[1].revents & ZMQ_POLLIN)) take_notifications();
      for (std::size_t i = 0; i < peers_.size(); ++i) {
        Peer& p = peers_[i];
        if (items[first_peer + 2 * i + 1].revents & ZMQ_POLLIN) monitor_events(p);
        if (items[first_peer + 2 * i].revents & ZMQ_POLLIN) read_frames(p);
        p.want_out = false;
        tick(p);
      }
      if (opts_.rescan_ms > 0 && Clock::now() >= next_rescan_) rescan();
      update_gauges();
    }
  }

 private:
  void wake() {
    std::uint64_t one = 1;
    (void)!::write(ctl_fd_, &one, sizeof one);
  }

  void take_submitted() {
    std::uint64_t v;
    (void)!::read(ctl_fd_, &v, sizeof v);
    std::vector<pb::StageTask> tasks;
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks.swap(submitted_);
    }
    for (auto& t : tasks) accept(std::move(t), true);
  }

  void take_notifications() {
    for (int i = 0; i < 64; ++i) {
      zmq::message_t m;
      if (!notify_->recv(m, zmq::recv_flags::dontwait)) return;
      pb::StageTask t;
      if (!t.ParseFromArray(m.data(), static_cast<int>(m.size()))) {
        logger().warn("transfer sender: undecodable notification of {} bytes dropped", m.size());
        continue;
      }
      accept(std::move(t), true);
    }
  }

  void rescan() {
    std::vector<Error> problems;
    for (auto& t : scan_outbox(opts_.outbox, &problems)) accept(std::move(t), false);
    for (const auto& e : problems) logger().warn("transfer sender: {}", e.message);
    next_rescan_ = Clock::now() + milliseconds(opts_.rescan_ms);
  }

  bool known(const std::string& key) const {
    for (const auto& p : peers_) {
      if (p.active && p.active->key == key) return true;
      for (const auto& j : p.queue)
        if (j.key == key) return true;
    }
    return false;
  }

  void fail(const pb::StageTask& t, const Error& e) {
    probe_.failed();
    logger().error("transfer sender: run={} job={} failed: {}", t.run_id(), t.job_id(), e.message);
    fail_record(opts_.outbox, t, e.to_string());
    if (opts_.on_failed) opts_.on_failed(t, e);
  }

  std::string choose(const pb::StageTask& t) {
    if (!t.target_host().empty()) return t.target_host();
    std::map<std::string, std::size_t> load;
    for (const auto& p : peers_) load[p.o.host] = p.queue.size() + (p.active ? 1 : 0);
    if (opts_.choose_host) return opts_.choose_host(t, load);
    std::string best;
    std::size_t best_n = SIZE_MAX;
    for (const auto& p : peers_) {
      std::size_t n = load[p.o.host];
      if (n < best_n) best = p.o.host, best_n = n;
    }
    return best;
  }

  void accept(pb::StageTask t, bool record) {
    const std::string key = key_of(t);
    if (auto s = artifacts::validate_id("task.run_id", t.run_id()); !s.ok())
      return fail(t, s.error());
    if (auto s = artifacts::validate_id("task.job_id", t.job_id()); !s.ok())
      return fail(t, s.error());
    if (known(key)) return;
    if (record && !opts_.outbox.empty() && !fs::exists(record_path(opts_.outbox, t))) {
      if (auto s = record_task(opts_.outbox, t); !s.ok())
        logger().warn("transfer sender: run={} job={}: cannot record in the outbox: {}", t.run_id(),
                     t.job_id(), s.error().message);
    }
    auto made = make_job(opts_, t);
    if (!made.ok()) return fail(t, made.error());
    Job j = std::move(*made);
    j.eager_tried = !record;  // found in the outbox: the receiver may hold part of it
    std::string target = choose(t);
    t.set_target_host(target);
    if (t.input_sha256().empty()) t.set_input_sha256(j.sha);
    j.task = std::move(t);
    if (target == opts_.host) return deliver_here(std::move(j));
    for (auto& p : peers_) {
      if (p.o.host == target) {
        p.queue.push_back(std::move(j));
        return;
      }
    }
    fail(j.task,
         make_error(errc::transfer::kPeer, "no transfer peer configured for decode host \"{}\"", target));
  }

  void deliver_here(Job j) {
    auto dst = local_handoff(j.latent, opts_.local_root / j.rel, opts_.local_root);
    Status s = dst.ok() ? Status{} : Status(dst.error());
    if (s.ok() && opts_.deliver_local) s = opts_.deliver_local(j.task, *dst, j.sha);
    if (!s.ok()) return fail(j.task, s.error());
    remove_record(opts_.outbox, j.task);
    SendReport r{j.task, *dst, opts_.host, j.sha, j.size, 0, 0, 0, 0.0, true};
    if (opts_.on_sent) opts_.on_sent(r);
  }

  // ---------------------------------------------------------------- connection

  void ensure_socket(Peer& p) {
    if (p.sock || Clock::now() < p.reconnect_at) return;
    if (auto st = open_peer(ctx_, opts_, p, this); !st.ok()) {
      logger().error("transfer sender: peer {}: {}", p.o.host, st.error().message);
      p.reconnect_at = Clock::now() + milliseconds(opts_.backoff_max_ms);
    }
  }

  void drop_socket(Peer& p, const char* why) {
    if (p.sock) zmq_socket_monitor(p.sock->handle(), nullptr, 0);
    p.mon.reset();
    p.sock.reset();
    p.connected = false;
    p.backoff_ms = p.backoff_ms == 0 ? opts_.backoff_initial_ms
                                     : std::min(p.backoff_ms * 2, opts_.backoff_max_ms);
    p.reconnect_at = Clock::now() + milliseconds(p.backoff_ms);
    logger().warn("transfer sender: peer {} ({}): {}; reconnecting in {} ms", p.o.host, p.o.endpoint,
                 why, p.backoff_ms);
    reset_attempt(p);
  }

  void monitor_events(Peer& p) {
    while (auto ev = next_monitor_event(p)) {
      const std::uint16_t event = *ev;
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        p.connected = true;
        p.refused_logged = false;
        p.backoff_ms = 0;
        p.last_rx = Clock::now();
        p.next_ping = Clock::now();
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

  bool send(Peer& p, const pb::TransferFrame& f) {
    if (!p.sock) return false;
    try {
      return p.sock->send(encode(f), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t&) {
      return false;
    }
  }

  // Both frames or neither: the first is sent only when the socket can take a message now.
  bool send_chunk(Peer& p, const pb::TransferFrame& f, zmq::message_t data) {
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

  void tick(Peer& p) {
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
      if (now < p.next_offer_at) return;
      offer(p);
    } else if (now - p.progress > milliseconds(opts_.dead_after_ms)) {
      logger().warn("transfer sender: run={} job={}: no progress from {} for {} ms; offering again",
                   p.active->task.run_id(), p.active->task.job_id(), p.o.host, opts_.dead_after_ms);
      reset_attempt(p);
      offer(p);
    } else if (p.st == St::kStreaming || (p.st == St::kOffered && p.eager)) {
      pump(p);
    }
  }

  // ---------------------------------------------------------------- one transfer

  void reset_attempt(Peer& p) {
    close_file(p);
    p.eager = false;
    p.st = St::kIdle;
    p.tid = 0;
  }

  void close_file(Peer& p) {
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }

  void offer(Peer& p) {
    Job& j = *p.active;
    if (j.attempts == 0) j.attempts = 1;
    do p.tid = rng_();
    while (p.tid == 0);
    pb::TransferFrame f;
    auto* o = f.mutable_offer();
    o->set_run_id(j.task.run_id());
    o->set_job_id(j.task.job_id());
    o->set_size(j.size);
    o->set_sha256(j.sha);
    o->set_relative_path(j.rel);
    *o->mutable_next_task() = j.task;
    o->mutable_next_task()->set_input_path(j.rel);
    o->set_transfer_id(p.tid);
    o->set_attempt(static_cast<std::uint32_t>(j.attempts));
    const bool eager =
        opts_.eager_bytes > 0 && opts_.eager_chunk_bytes > 0 && !j.eager_tried && j.attempts == 1;
    if (eager) {
      if (!open_source(p)) return;
      o->set_eager_bytes(std::min<std::uint64_t>(opts_.eager_bytes, j.size));
      o->set_eager_chunk(opts_.eager_chunk_bytes);
    }
    if (!send(p, f)) {  // not connected yet: the next tick tries again
      close_file(p);
      return;
    }
    p.st = St::kOffered;
    p.progress = Clock::now();
    if (!eager) return;
    j.eager_tried = true;
    p.eager = true;
    p.chunk = opts_.eager_chunk_bytes;
    p.next = 0;
    p.limit = o->eager_bytes();
    p.hashing = false;
    p.corrupt_pending = j.attempts <= opts_.test_only_corrupt_attempts ? 1 : 0;
    pump(p);
  }

  bool open_source(Peer& p) {
    if (p.fd >= 0) return true;
    p.fd = ::open(p.active->latent.c_str(), O_RDONLY | O_CLOEXEC);
    if (p.fd >= 0) return true;
    fail_active(p, make_error(errc::transfer::kSource, "open {}: {}", p.active->latent.string(),
                              std::strerror(errno)));
    return false;
  }

  void read_frames(Peer& p) {
    for (int budget = 0; budget < 256 && p.sock; ++budget) {
      zmq::message_t m;
      try {
        if (!p.sock->recv(m, zmq::recv_flags::dontwait)) return;
      } catch (const zmq::error_t&) {
        return;
      }
      p.last_rx = Clock::now();
      const std::string_view part(static_cast<const char*>(m.data()), m.size());
      auto f = parse_frame(Reader::kSender, std::span(&part, 1));
      if (!f.ok()) {
        probe_.protocol_error();
        continue;
      }
      switch (f->body_case()) {
        case pb::TransferFrame::kOfferReply:
          on_reply(p, f->offer_reply());
          break;
        case pb::TransferFrame::kCredit:
          on_credit(p, f->credit());
          break;
        case pb::TransferFrame::kDone:
          on_done(p, f->done());
          break;
        default:  // kPong: last_rx is all it is for
          break;
      }
    }
  }

  void on_reply(Peer& p, const pb::OfferReply& r) {
    if (!p.active || p.st != St::kOffered || r.transfer_id() != p.tid) return;
    Job& j = *p.active;
    p.progress = Clock::now();
    if (r.already_complete()) return succeed(p, j.sha);
    if (auto st = check_offer_reply(r, opts_.max_chunk_bytes, j.size, p.o.host); !st.ok()) {
      probe_.protocol_error();
      return fail_active(p, st.error());
    }
    const bool eager_taken = p.eager && r.eager_accepted();
    p.eager = false;
    if (eager_taken) {  // carry on from where the eager chunks got to, under the real grant
      j.eager_taken = true;
      p.chunk = r.chunk_size();
      p.limit = std::max(p.limit, grant_limit(0, r.window(), r.chunk_size()));
      j.resumed_from = 0;
      p.st = St::kStreaming;
      return pump(p);
    }
    if (!open_source(p)) return;
    p.chunk = r.chunk_size();
    p.next = r.have_offset();
    p.limit = grant_limit(r.have_offset(), r.window(), r.chunk_size());
    j.resumed_from = r.have_offset();
    if (r.have_offset() > 0) probe_.resumed(static_cast<double>(r.have_offset()));
    // After an integrity failure the source is hashed while it is re-read (from the start), so a
    // file corrupt on this host is named as such instead of being retried max_attempts times.
    p.hashing = r.have_offset() == 0 && j.attempts > 1;
    p.hashed = 0;
    if (p.hashing) p.hasher = Sha256();
    p.corrupt_pending = j.attempts <= opts_.test_only_corrupt_attempts ? 1 : 0;
    p.st = St::kStreaming;
    pump(p);
  }

  void on_credit(Peer& p, const pb::Credit& c) {
    if (!p.active || c.transfer_id() != p.tid || p.st != St::kStreaming) return;
    p.progress = Clock::now();
    p.limit = std::max(p.limit, grant_limit(c.acked_offset(), c.credits(), p.chunk));
    pump(p);
  }

  void pump(Peer& p) {
    Job& j = *p.active;
    while ((p.st == St::kStreaming || p.eager) && p.next < j.size && p.next < p.limit) {
      const std::uint64_t n = next_chunk_len(p.next, j.size, p.limit, p.chunk);
      pb::TransferFrame f;
      auto* c = f.mutable_chunk();
      c->set_job_id(j.task.job_id());
      c->set_offset(p.next);
      c->set_transfer_id(p.tid);
      c->set_eager(p.eager);
      zmq::message_t data(n);  // read straight into the message ZeroMQ will send: no copies
      auto* bytes = static_cast<std::uint8_t*>(data.data());
      ssize_t got = ::pread(p.fd, bytes, n, static_cast<off_t>(p.next));
      if (got != static_cast<ssize_t>(n))
        return fail_active(p, make_error(errc::transfer::kSource, "read {} at {}: short read",
                                         j.latent.string(), p.next));
      if (p.hashing && p.hashed == p.next) {
        p.hasher.update(bytes, n);
        p.hashed += n;
      }
      if (p.corrupt_pending > 0) {
        bytes[n / 2] ^= 0x10;  // TEST ONLY (see SenderOptions)
        logger().warn(
            "transfer sender: TEST ONLY: flipped a bit at offset {} of run={} job={} attempt {}",
            p.next + n / 2, j.task.run_id(), j.task.job_id(), j.attempts);
      }
      if (!send_chunk(p, f, std::move(data))) {
        p.want_out = true;  // HWM reached or reconnecting: resume on POLLOUT / next tick
        return;
      }
      p.corrupt_pending = 0;
      p.next += n;
      j.bytes_sent += n;
      probe_.add_bytes(static_cast<double>(n));
    }
    if (p.st == St::kStreaming && p.next == j.size) {
      p.st = St::kAwaitDone;
      if (p.hashing && p.hashed == j.size && p.hasher.hex_digest() != j.sha)
        j.source_mismatch = true;
    }
  }

  void on_done(Peer& p, const pb::Done& d) {
    if (!p.active || d.transfer_id() != p.tid) return;
    Job& j = *p.active;
    using A = DoneDecision::Action;
    const DoneDecision what = decide_done(
        d, {j.sha, j.latent.string(), j.source_mismatch, j.attempts, opts_.max_attempts}, p.o.host);
    if (what.count_protocol_error) probe_.protocol_error();
    if (what.count_retry) probe_.retry();
    switch (what.action) {
      case A::kSucceed:
        return succeed(p, d.sha256());
      case A::kFail:
        return fail_active(p, what.error);
      case A::kResend:
        ++j.attempts;
        logger().warn(
            "transfer sender: run={} job={}: integrity failure ({}); re-sending, attempt {} of {}",
            j.task.run_id(), j.task.job_id(), d.reason(), j.attempts, opts_.max_attempts);
        break;
      case A::kOfferAgain:
        p.offer_again_ms = p.offer_again_ms == 0
                               ? opts_.backoff_initial_ms
                               : std::min(p.offer_again_ms * 2, opts_.backoff_max_ms);
        p.next_offer_at = Clock::now() + milliseconds(p.offer_again_ms);
        logger().warn("transfer sender: run={} job={}: receiver says {}: {}; offering again in {} ms",
                     j.task.run_id(), j.task.job_id(), d.code(), d.reason(), p.offer_again_ms);
        break;
    }
    reset_attempt(p);
  }

  void succeed(Peer& p, const std::string& sha) {
    Job j = std::move(*p.active);
    p.active.reset();
    reset_attempt(p);
    p.offer_again_ms = 0;
    const double secs = std::chrono::duration<double>(Clock::now() - j.queued).count();
    probe_.transfer_done(secs);
    remove_record(opts_.outbox, j.task);
    logger().info(
        "transfer sender: run={} job={} -> {} durable ({} bytes sent, resumed from {}, {} "
        "attempt(s), {:.3f} s{})",
        j.task.run_id(), j.task.job_id(), p.o.host, j.bytes_sent, j.resumed_from.value_or(0),
        j.attempts, secs, j.eager_taken ? ", eager start" : "");
    SendReport r{j.task,
                 j.latent,
                 p.o.host,
                 sha,
                 j.size,
                 j.bytes_sent,
                 j.resumed_from.value_or(0),
                 j.attempts,
                 secs,
                 false,
                 j.eager_taken};
    if (opts_.on_sent) opts_.on_sent(r);
  }

  void fail_active(Peer& p, const Error& e) {
    Job j = std::move(*p.active);
    p.active.reset();
    reset_attempt(p);
    fail(j.task, e);
  }

  void update_gauges() {
    double waiting = 0, active = 0;
    for (const auto& p : peers_) {
      waiting += static_cast<double>(p.queue.size());
      active += p.active ? 1 : 0;
    }
    probe_.set_waiting(waiting);
    probe_.set_in_flight(active);
  }

  zmq::context_t& ctx_;
  SenderOptions opts_;
  TransferProbe& probe_;
  std::mt19937_64 rng_;
  int ctl_fd_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<pb::StageTask> submitted_;
  std::unique_ptr<zmq::socket_t> notify_;
  std::vector<Peer> peers_;
  Clock::time_point next_rescan_;
};

TransferSender::TransferSender(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<TransferSender>> TransferSender::start(zmq::context_t& ctx,
                                                              SenderOptions opts,
                                                              TransferProbe& probe) {
  if (opts.host.empty()) return make_error(errc::transfer::kConfig, "sender host must be set");
  if (opts.max_attempts < 1)
    return make_error(errc::transfer::kConfig, "max_attempts must be at least 1");
  for (const auto& p : opts.peers) {
    if (p.host.empty() || p.endpoint.empty())
      return make_error(errc::transfer::kConfig, "every peer needs a host and an endpoint");
  }
  auto impl = std::make_unique<Impl>(ctx, std::move(opts), probe);
  auto ep = impl->bind();
  if (!ep.ok()) return ep.error();
  std::unique_ptr<TransferSender> s(new TransferSender(std::move(impl)));
  s->notify_endpoint_ = *ep;
  s->thread_ = std::thread([raw = s->impl_.get()] { raw->loop(); });
  return s;
}

void TransferSender::submit(pb::StageTask task) {
  impl_->submit(std::move(task));
}

void TransferSender::stop() {
  if (!thread_.joinable()) return;
  impl_->request_stop();
  thread_.join();
}

TransferSender::~TransferSender() {
  stop();
}

}  // namespace h3pipe::transfer
