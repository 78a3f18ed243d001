#pragma once
// TransferReceiver::Impl, the receive loop thread and all it owns, and Session, one offer being
// received.  Not a public interface.  Its methods are defined in two files:
//   receiver.cpp          the ROUTER socket (bind, ZAP), the loop, reading and dispatching frames,
//                         sending replies, expiring the sessions of silent senders;
//   receiver_session.cpp  one transfer's protocol: the offer, opening or resuming the part file,
//                         chunks, write-back, checkpoints and credit, the hash check, the commit
//                         and delivery.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <zmq.hpp>

#include "common/core/result.h"
#include "common/core/sha256.h"
#include "common/logging/rate_limit.h"
#include "common/proto/h3pipe.pb.h"
#include "common/transfer/data_cipher.h"
#include "common/transfer/disk.h"
#include "common/transfer/probe.h"
#include "common/transfer/receiver.h"
#include "common/transfer/zap.h"

namespace h3pipe::transfer {
using Clock = std::chrono::steady_clock;

struct Session {
  std::string key;      // run/job
  std::string routing;  // ZeroMQ routing id of the sender
  std::uint64_t tid = 0;
  pb::Offer offer;
  std::filesystem::path final_path;
  enum class Phase { kOpening, kReceiving, kCommitting } phase = Phase::kOpening;
  std::shared_ptr<PartFile> file;
  Sha256 hasher;
  std::uint64_t received = 0, durable = 0, writeback_at = 0, have = 0;
  bool checkpointing = false;
  bool eager_ok = false;  // takes the chunks sent with the offer (fresh start, span fits)
  // Set once the last byte is in: a checkpoint still queued on the I/O thread then has nothing
  // to add to the commit behind it, and is skipped.
  std::shared_ptr<std::atomic<bool>> finishing = std::make_shared<std::atomic<bool>>(false);
  Clock::time_point started = Clock::now(), first_byte, last_byte, committed;
  double check_s = 0, commit_s = 0;  // on the I/O thread: the file check, the fsyncs + renames
  // Chunks that arrived before the I/O thread created the file (fresh offers; at most a window):
  // each chunk's bytes are msg[skip, skip + len) (skip: a sealed frame's header).
  struct Held {
    std::uint64_t offset = 0;
    zmq::message_t msg;
    std::size_t skip = 0, len = 0;
  };
  std::deque<Held> pending;
  // Sealed data frames (issue #36 item 8): present when the offer carried a data key and the
  // chunks are to come over the data connection; the data connection that delivered the first
  // authenticated frame is the only one taken from then on (data_routing).
  std::optional<FrameOpener> opener;
  std::string data_routing;
  bool sealed = false;  // the offer carried a data key: a plain Chunk is refused
};

// A sealed frame that came over the data connection before its offer (the offer and its eager
// frames travel on two connections, so the frames may overtake it): held until the offer is in,
// for at most dead_after_ms, within kEarlyBytes in all.
struct EarlyFrame {
  std::string routing;
  zmq::message_t msg;
  std::chrono::steady_clock::time_point at;
};

class TransferReceiver::Impl {
 public:
  Impl(zmq::context_t& ctx, ReceiverOptions o, OnDurable cb, TransferProbe& probe);
  ~Impl();

  Result<std::string> bind();
  // The data connection (CURVE on and data_frames): bound next to the control socket.  Returns
  // its endpoint, or "" when there is none.
  Result<std::string> bind_data(const std::string& control_endpoint);
  void request_stop();
  long long zap_refused() const { return zap_ ? zap_->refused() : 0; }
  void loop();

 private:
  // receiver.cpp
  void read_frames();
  void send(const std::string& routing, const pb::TransferFrame& f);
  void send_done(const std::string& routing, const pb::Offer& o, std::uint64_t tid, bool ok,
                 std::string_view code, const std::string& reason, bool retry);
  void expire_sessions();

  // receiver_session.cpp
  void on_offer(const std::string& routing, const pb::Offer& o);
  template <typename Opened>
  void opened(std::uint64_t tid, Opened& r);
  void reply(Session& s, std::uint64_t have);
  void file_ready(Session& s, std::shared_ptr<PartFile> file);
  void on_chunk(const std::string& routing, const pb::Chunk& c, zmq::message_t& data);
  // receiver_data.cpp: the data connection's sealed frames.
  void read_data_frames();
  void on_sealed(const std::string& routing, zmq::message_t& msg);
  void make_opener(Session& s, std::uint64_t start);
  void replay_early(std::uint64_t tid);
  void expire_early();
  // A chunk's bytes msg[skip, skip + len) at `offset`, checked against the session's bounds,
  // hashed and written (or held until the file exists).  False: the session was closed.
  bool take_bytes(Session& s, std::uint64_t offset, zmq::message_t& msg, std::size_t skip,
                  std::size_t len);
  void after_write(Session& s);
  void maybe_checkpoint(Session& s);
  void finish(Session& s);
  bool deliver(Session& s);
  void flush(Session& s);
  void close_session(Session* s);
  void erase(Session* s);

  void update_in_flight() { probe_.set_in_flight(static_cast<double>(sessions_.size())); }

  zmq::context_t& ctx_;
  ReceiverOptions opts_;
  OnDurable on_durable_;
  TransferProbe& probe_;
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t sock_;
  std::unique_ptr<zmq::socket_t> data_sock_;  // sealed data frames; null without one
  std::uint32_t data_port_ = 0;
  std::map<std::uint64_t, std::deque<EarlyFrame>> early_;
  std::size_t early_bytes_ = 0;
  std::set<std::uint64_t> gone_tids_;  // transfers over: their late data frames are dropped
  int stop_fd_;
  IoThread io_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  std::map<std::uint64_t, Session*> by_tid_;
  std::map<std::string, Clock::time_point> last_rx_;
  std::set<std::uint64_t> unknown_told_;
  // One junk-frame line per peer per 10 s, with the count held back (#22); every junk frame
  // is still counted (h3pipe_transfer_protocol_errors_total).
  logging::LogRateLimit junk_log_{1, std::chrono::seconds(10)};
  // The CURVE key (ZAP's User-Id) of the peer whose offer on_offer is handling (read_frames).
  std::string offer_peer_;
};

}  // namespace h3pipe::transfer
