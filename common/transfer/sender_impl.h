#pragma once
// TransferSender::Impl, the sender's loop thread and all it owns.  Not a public interface.  Its
// methods are defined in three files:
//   sender.cpp             the loop, the tasks that come in (submit, notifications, outbox scans),
//                          where each goes (a peer's queue or this host), failures, the gauges;
//   sender_connection.cpp  each peer's socket: open, monitor events, drop and back off, sends,
//                          the heartbeat and the per-peer tick;
//   sender_transfer.cpp    one transfer's protocol with its peer: offer, reply, credit, pump, done.
#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/transfer/probe.h"
#include "common/transfer/sender.h"
#include "common/transfer/sender_parts.h"

namespace h3pipe::transfer {

class TransferSender::Impl {
 public:
  Impl(zmq::context_t& ctx, SenderOptions o, TransferProbe& probe);
  ~Impl();

  Result<std::string> bind();
  void submit(pb::StageTask t);
  void request_stop();
  void loop();

 private:
  // sender.cpp
  void wake();
  void take_submitted();
  void take_notifications();
  void rescan();
  bool known(const std::string& key) const;
  void fail(const pb::StageTask& t, const Error& e);
  std::string choose(const pb::StageTask& t);
  void accept(pb::StageTask t, bool record);
  void deliver_here(detail::Job j);
  void update_gauges();

  // sender_connection.cpp
  void ensure_socket(detail::Peer& p);
  void drop_socket(detail::Peer& p, const char* why);
  void monitor_events(detail::Peer& p);
  bool send(detail::Peer& p, const pb::TransferFrame& f);
  bool send_chunk(detail::Peer& p, const pb::TransferFrame& f, zmq::message_t data);
  void tick(detail::Peer& p);
  void on_pong(detail::Peer& p, const pb::Ping& pong);
  bool data_usable(const detail::Peer& p) const;
  bool wait_for_data(detail::Peer& p);
  void data_events(detail::Peer& p);

  // sender_transfer.cpp
  void reset_attempt(detail::Peer& p);
  void close_file(detail::Peer& p);
  void offer(detail::Peer& p);
  bool open_source(detail::Peer& p);
  void read_frames(detail::Peer& p);
  void on_reply(detail::Peer& p, const pb::OfferReply& r);
  void on_credit(detail::Peer& p, const pb::Credit& c);
  void pump(detail::Peer& p);
  bool seal_next(detail::Peer& p, std::uint64_t n);
  bool send_sealed(detail::Peer& p);
  void on_done(detail::Peer& p, const pb::Done& d);
  void succeed(detail::Peer& p, const std::string& sha);
  void fail_active(detail::Peer& p, const Error& e);

  zmq::context_t& ctx_;
  SenderOptions opts_;
  TransferProbe& probe_;
  std::mt19937_64 rng_;
  int ctl_fd_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<pb::StageTask> submitted_;
  std::unique_ptr<zmq::socket_t> notify_;
  std::vector<detail::Peer> peers_;
  detail::Clock::time_point next_rescan_;
};

}  // namespace h3pipe::transfer
