// The receiver's data connection (TransferReceiver::Impl, receiver_impl.h; issue #36 item 8): a
// ROUTER without CURVE that takes a transfer's chunks as AES-256-GCM data frames
// (data_cipher.h) sealed under the key its offer carried inside the CURVE session.  Each frame
// is authenticated and decrypted in place by the session's FrameOpener, then hashed and written
// like a chunk (receiver_session.cpp).  A frame refused on the connection bound to the transfer
// fails it (Done retry, transfer.integrity: the sender re-offers under a fresh key, at most
// transfer.max_attempts times); a frame refused on any other connection is dropped and fails
// nothing, so a stranger who can reach the data port cannot stop someone else's transfer.
#include <zmq_addon.hpp>

#include "common/transfer/data_cipher.h"
#include "common/transfer/log.h"
#include "common/transfer/receiver_impl.h"

namespace h3pipe::transfer {
using detail::logger;

namespace {
// Sealed frames held for offers not yet read (EarlyFrame): at most this many bytes in all.
constexpr std::size_t kEarlyBytes = 8u << 20;
}  // namespace

void TransferReceiver::Impl::read_data_frames() {
  for (int budget = 0; budget < 256; ++budget) {
    std::vector<zmq::message_t> parts;
    try {
      if (!zmq::recv_multipart(*data_sock_, std::back_inserter(parts), zmq::recv_flags::dontwait))
        return;
    } catch (const zmq::error_t&) {
      return;
    }
    if (parts.size() != 2) {  // [routing id, sealed frame]
      probe_.protocol_error();
      continue;
    }
    on_sealed(parts[0].to_string(), parts[1]);
  }
}

void TransferReceiver::Impl::on_sealed(const std::string& routing, zmq::message_t& msg) {
  auto* bytes = static_cast<unsigned char*>(msg.data());
  const std::span<const unsigned char> frame(bytes, msg.size());
  auto h = parse_data_header(frame);  // not yet authenticated: used only to find the session
  if (!h.ok()) {
    probe_.protocol_error();
    return;
  }
  if (gone_tids_.count(h->tid)) return;  // late frames of a transfer already over
  auto it = by_tid_.find(h->tid);
  if (it == by_tid_.end()) {
    // Its offer may still be on the way (two connections): hold it a while, within a bound.
    if (early_bytes_ + msg.size() <= kEarlyBytes) {
      early_bytes_ += msg.size();
      early_[h->tid].push_back({routing, std::move(msg), Clock::now()});
    } else {
      probe_.protocol_error();
    }
    return;
  }
  Session& s = *it->second;
  // No opener: the offer had no key, or its eager frames are not taken (the sender offers
  // again); or the session is past receiving.  Dropped.
  if (!s.opener || s.phase != Session::Phase::kReceiving) return;
  const bool bound = !s.data_routing.empty();
  if (bound && routing != s.data_routing) {
    probe_.protocol_error();  // another connection speaking for a bound transfer: ignored
    return;
  }
  auto opened = s.opener->open(frame, std::span<unsigned char>(bytes + kHeaderBytes, h->len),
                               /*fail_transfer=*/bound);
  if (!opened.ok()) {
    probe_.protocol_error();
    if (!bound) {
      logger().debug("transfer receiver: run={} job={}: unbound data connection: {}",
                     s.offer.run_id(), s.offer.job_id(), opened.error().message);
      return;
    }
    // Tampered, replayed, reordered or lost on the transfer's own connection: nothing of the
    // frame is used (the opener wiped it), and, as for a hash mismatch at the end, the attempt's
    // file is discarded and the sender hears of it once it is gone: it sends again from 0
    // under a new key (an integrity failure: at most transfer.max_attempts).
    probe_.integrity_failure();
    const std::string reason = opened.error().message;
    logger().warn("transfer receiver: run={} job={} attempt {}: {}; discarded, sender will re-send",
                  s.offer.run_id(), s.offer.job_id(), s.offer.attempt(), reason);
    s.phase = Session::Phase::kCommitting;  // takes nothing more
    s.finishing->store(true);
    const std::uint64_t tid = s.tid;
    auto discard = [this, tid, reason] {
      auto it = by_tid_.find(tid);
      if (it == by_tid_.end()) return;
      send_done(it->second->routing, it->second->offer, tid, false, errc::transfer::kIntegrity.id,
                reason, true);
      erase(it->second);
    };
    if (!s.file) {  // still being created: the I/O thread's open runs first, then this
      s.pending.clear();
    }
    io_.post([f = s.file, path = s.final_path, discard]() -> IoThread::Completion {
      if (f)
        f->discard();
      else
        PartFile::discard_paths(path);
      return discard;
    });
    return;
  }
  if (!bound) s.data_routing = routing;
  // An authenticated frame is the sender's sign of life, as a chunk on its control connection
  // was: its pings there may wait behind these frames on a slow link (expire_sessions).
  last_rx_[s.routing] = Clock::now();
  (void)take_bytes(s, opened->offset, msg, kHeaderBytes, opened->len);
}

void TransferReceiver::Impl::make_opener(Session& s, std::uint64_t start) {
  s.opener.reset();
  s.data_routing.clear();
  auto key = DataKey::from_bytes(s.offer.data_key());
  if (!key.ok()) return;  // on_offer checked the length: cannot happen
  auto o = FrameOpener::make(*key, s.tid, start);
  if (!o.ok()) {
    logger().error("transfer receiver: run={} job={}: {}", s.offer.run_id(), s.offer.job_id(),
                   o.error().message);
    return;  // no opener: the frames are dropped, the sender times out and offers again
  }
  s.opener.emplace(std::move(*o));
}

void TransferReceiver::Impl::replay_early(std::uint64_t tid) {
  auto e = early_.find(tid);
  if (e == early_.end()) return;
  std::deque<EarlyFrame> frames = std::move(e->second);
  early_.erase(e);
  for (auto& f : frames) early_bytes_ -= f.msg.size();
  for (auto& f : frames) {
    if (by_tid_.find(tid) == by_tid_.end()) return;  // a frame closed the session
    on_sealed(f.routing, f.msg);
  }
}

void TransferReceiver::Impl::expire_early() {
  const auto old = Clock::now() - std::chrono::milliseconds(opts_.dead_after_ms);
  for (auto it = early_.begin(); it != early_.end();) {
    auto& q = it->second;
    while (!q.empty() && q.front().at < old) {
      early_bytes_ -= q.front().msg.size();
      q.pop_front();
    }
    it = q.empty() ? early_.erase(it) : std::next(it);
  }
}

}  // namespace h3pipe::transfer
