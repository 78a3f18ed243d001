// TransferSender and its loop thread (sender_impl.h): the tasks that come in (submit, local
// notifications, outbox scans), where each latent goes (a peer's queue or this host), failures
// and the gauges.  The peers' sockets are in sender_connection.cpp, one transfer's protocol in
// sender_transfer.cpp.
#include "common/transfer/sender.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>

#include "common/artifacts/artifacts.h"
#include "common/transfer/log.h"
#include "common/transfer/outbox.h"
#include "common/transfer/sender_impl.h"
#include "common/transfer/sender_parts.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
using detail::Clock;
using detail::Job;
using detail::logger;
using detail::make_job;
using detail::Peer;
using std::chrono::milliseconds;

namespace {

std::string key_of(const pb::StageTask& t) {
  return t.run_id() + "/" + t.job_id();
}

}  // namespace

TransferSender::Impl::Impl(zmq::context_t& ctx, SenderOptions o, TransferProbe& probe)
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

TransferSender::Impl::~Impl() {
  for (auto& p : peers_) close_file(p);
  ::close(ctl_fd_);
}

Result<std::string> TransferSender::Impl::bind() {
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

void TransferSender::Impl::submit(pb::StageTask t) {
  {
    std::lock_guard<std::mutex> l(mu_);
    submitted_.push_back(std::move(t));
  }
  wake();
}
void TransferSender::Impl::request_stop() {
  stop_ = true;
  wake();
}

void TransferSender::Impl::loop() {
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
      // The data connection only sends: polled for room while a sealed frame waits.
      const bool data_out = p.data_sock && p.data_want_out;
      items.push_back({data_out ? p.data_sock->handle() : nullptr, data_out ? 0 : -1,
                       data_out ? short(ZMQ_POLLOUT) : short(0), 0});
      items.push_back({p.data_mon ? p.data_mon->handle() : nullptr, p.data_mon ? 0 : -1,
                       p.data_mon ? short(ZMQ_POLLIN) : short(0), 0});
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
      if (items[first_peer + 4 * i + 1].revents & ZMQ_POLLIN) monitor_events(p);
      if (items[first_peer + 4 * i + 3].revents & ZMQ_POLLIN) data_events(p);
      if (items[first_peer + 4 * i].revents & ZMQ_POLLIN) read_frames(p);
      p.want_out = false;
      p.data_want_out = false;
      tick(p);
    }
    if (opts_.rescan_ms > 0 && Clock::now() >= next_rescan_) rescan();
    update_gauges();
  }
}

void TransferSender::Impl::wake() {
  std::uint64_t one = 1;
  (void)!::write(ctl_fd_, &one, sizeof one);
}

void TransferSender::Impl::take_submitted() {
  std::uint64_t v;
  (void)!::read(ctl_fd_, &v, sizeof v);
  std::vector<pb::StageTask> tasks;
  {
    std::lock_guard<std::mutex> l(mu_);
    tasks.swap(submitted_);
  }
  for (auto& t : tasks) accept(std::move(t), true);
}

void TransferSender::Impl::take_notifications() {
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

void TransferSender::Impl::rescan() {
  std::vector<Error> problems;
  for (auto& t : scan_outbox(opts_.outbox, &problems)) accept(std::move(t), false);
  for (const auto& e : problems) logger().warn("transfer sender: {}", e.message);
  next_rescan_ = Clock::now() + milliseconds(opts_.rescan_ms);
}

bool TransferSender::Impl::known(const std::string& key) const {
  for (const auto& p : peers_) {
    if (p.active && p.active->key == key) return true;
    for (const auto& j : p.queue)
      if (j.key == key) return true;
  }
  return false;
}

void TransferSender::Impl::fail(const pb::StageTask& t, const Error& e) {
  probe_.failed();
  logger().error("transfer sender: run={} job={} failed: {}", t.run_id(), t.job_id(), e.message);
  fail_record(opts_.outbox, t, e.to_string());
  if (opts_.on_failed) opts_.on_failed(t, e);
}

std::string TransferSender::Impl::choose(const pb::StageTask& t) {
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

void TransferSender::Impl::accept(pb::StageTask t, bool record) {
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
  fail(j.task, make_error(errc::transfer::kPeer,
                          "no transfer peer configured for decode host \"{}\"", target));
}

void TransferSender::Impl::deliver_here(Job j) {
  auto dst = local_handoff(j.latent, opts_.local_root / j.rel, opts_.local_root);
  Status s = dst.ok() ? Status{} : Status(dst.error());
  if (s.ok() && opts_.deliver_local) s = opts_.deliver_local(j.task, *dst, j.sha);
  if (!s.ok()) return fail(j.task, s.error());
  remove_record(opts_.outbox, j.task);
  SendReport r{j.task, *dst, opts_.host, j.sha, j.size, 0, 0, 0, 0.0, true};
  if (opts_.on_sent) opts_.on_sent(r);
}

void TransferSender::Impl::update_gauges() {
  double waiting = 0, active = 0;
  for (const auto& p : peers_) {
    waiting += static_cast<double>(p.queue.size());
    active += p.active ? 1 : 0;
  }
  probe_.set_waiting(waiting);
  probe_.set_in_flight(active);
}

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
