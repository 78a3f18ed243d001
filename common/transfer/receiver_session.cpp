// One transfer's protocol on the receiver's side (TransferReceiver::Impl, receiver_impl.h): an
// offer opens or resumes the part file on the I/O thread, chunks are hashed and written, durable
// checkpoints grant credit, and the last byte leads to the hash check, the file check, the commit
// and on_durable; whatever fails is answered with a Done the sender acts on.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/transfer/disk.h"
#include "common/transfer/frames.h"
#include "common/transfer/log.h"
#include "common/transfer/receiver_impl.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
using detail::logger;

namespace {

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void TransferReceiver::Impl::on_offer(const std::string& routing, const pb::Offer& offered) {
  auto final_path = resolve_offer(offered, opts_.root, opts_.max_file_bytes);
  if (!final_path.ok()) {
    probe_.protocol_error();
    logger().warn("transfer receiver: run={} job={} offer refused: {}", offered.run_id(),
                  offered.job_id(), final_path.error().message);
    send_done(routing, offered, offered.transfer_id(), false, final_path.error().code,
              final_path.error().message, false);
    return;
  }
  // May this peer deliver this job's latent at all (ReceiverOptions::admit_offer)?  Before any
  // byte is taken: a refused latent never reaches the disk.
  pb::Offer o = offered;
  if (opts_.admit_offer) {
    const OfferVerdict v = opts_.admit_offer(o, offer_peer_);
    if (!v.status.ok()) {
      logger().warn("transfer receiver: run={} job={} offer from {} refused{}: {}", o.run_id(),
                    o.job_id(), offer_peer_.empty() ? "(no key)" : offer_peer_.substr(0, 8),
                    v.retry ? " for now" : "", v.status.error().message);
      send_done(routing, offered, offered.transfer_id(), false, v.status.error().code,
                v.status.error().message, v.retry);
      return;
    }
  }
  // A data key (issue #36 item 8) only where this receiver has a data connection to take the
  // frames it seals, and only of the one length AES-256 uses.
  if (!o.data_key().empty() && (!data_sock_ || o.data_key().size() != kDataKeyBytes)) {
    probe_.protocol_error();
    const std::string why =
        data_sock_ ? fmt::format("offer.data_key has {} bytes, expected {}", o.data_key().size(),
                                 kDataKeyBytes)
                   : std::string("offer.data_key given, but this receiver has no data connection");
    logger().warn("transfer receiver: run={} job={} offer refused: {}", o.run_id(), o.job_id(),
                  why);
    send_done(routing, offered, offered.transfer_id(), false, errc::transfer::kProtocol.id, why,
              false);
    return;
  }
  const std::string key = o.run_id() + "/" + o.job_id();
  bool replaced = false;
  if (auto it = sessions_.find(key); it != sessions_.end()) {
    if (it->second->tid == o.transfer_id() && it->second->routing == routing) return;  // duplicate
    close_session(it->second.get());  // superseded (sender restarted or re-offered)
    replaced = true;
  }
  // Fast path: nothing of this latent on disk and no earlier session, so the resume point is 0
  // without waiting for the disk; the I/O thread creates the file while the first chunks arrive
  // (they wait in memory, at most one window).
  std::error_code ec;
  const bool fresh = !replaced && !fs::exists(PartFile::paths_for(*final_path).state, ec) &&
                     !fs::exists(*final_path, ec);
  auto s = std::make_unique<Session>();
  s->eager_ok = fresh && eager_acceptable(o, opts_.chunk_bytes, opts_.window);
  s->key = key;
  s->routing = routing;
  s->tid = o.transfer_id();
  s->offer = o;
  s->sealed = !o.data_key().empty();
  s->final_path = *final_path;
  Session* raw = s.get();
  by_tid_[s->tid] = raw;
  sessions_[key] = std::move(s);
  logger().debug("transfer receiver: run={} job={} offer {} bytes sha256={} attempt {}", o.run_id(),
                 o.job_id(), o.size(), o.sha256(), o.attempt());

  struct Opened {
    Result<std::shared_ptr<PartFile>> file = Error{};
    Sha256 hasher;
    std::uint64_t have = 0;
    bool complete = false, notified = false;
  };
  auto out = std::make_shared<Opened>();
  const std::uint64_t tid = raw->tid;
  if (fresh) {
    raw->phase = Session::Phase::kReceiving;
    reply(*raw, 0);
  }
  const bool replay = fresh && raw->opener.has_value();
  io_.post([this, out, tid, o, fresh, path = *final_path,
            root = opts_.root]() -> IoThread::Completion {
    if (fresh) {
      out->file = PartFile::open(path, o.size(), o.sha256(), &out->hasher, &out->have, false, root);
    } else if (artifacts::read_sidecar(artifacts::Root(root), path) == o.sha256() &&
               artifacts::verify(artifacts::Root(root), path).ok()) {
      out->complete = true;
      (void)PartFile::remove_leftovers(path);  // a killed attempt's .part beside it (#35 D6)
      auto st = read_state(PartFile::paths_for(path).state);
      out->notified = st && st->complete && st->notified && st->sha256 == o.sha256();
    } else {
      out->file = PartFile::open(path, o.size(), o.sha256(), &out->hasher, &out->have, true, root);
    }
    return [this, out, tid] { opened(tid, *out); };
  });
  // Eager frames that overtook the offer on the data connection (the session may close here).
  if (replay) replay_early(tid);
}

template <typename Opened>
void TransferReceiver::Impl::opened(std::uint64_t tid, Opened& r) {
  auto it = by_tid_.find(tid);
  if (it == by_tid_.end()) return;  // superseded meanwhile
  Session& s = *it->second;
  if (s.phase == Session::Phase::kCommitting) return;  // a data frame refused meanwhile: discarded
  if (r.complete) {
    if (!r.notified && !deliver(s)) {
      erase(&s);
      return;
    }
    pb::TransferFrame f;
    auto* rep = f.mutable_offer_reply();
    rep->set_job_id(s.offer.job_id());
    rep->set_transfer_id(tid);
    rep->set_already_complete(true);
    rep->set_have_offset(s.offer.size());
    send(s.routing, f);
    erase(&s);
    return;
  }
  if (!r.file.ok()) {
    logger().error("transfer receiver: run={} job={}: {}", s.offer.run_id(), s.offer.job_id(),
                   r.file.error().message);
    send_done(s.routing, s.offer, tid, false, r.file.error().code, r.file.error().message, true);
    erase(&s);
    return;
  }
  if (s.phase == Session::Phase::kReceiving) return file_ready(s, std::move(r.file.value()));
  s.file = std::move(r.file.value());
  s.hasher = std::move(r.hasher);
  s.received = s.durable = s.writeback_at = s.have = r.have;
  s.phase = Session::Phase::kReceiving;
  if (r.have > 0) {
    probe_.resumed(static_cast<double>(r.have));
    logger().info("transfer receiver: run={} job={} resumes at {} of {} bytes", s.offer.run_id(),
                  s.offer.job_id(), r.have, s.offer.size());
  }
  io_.post([f = s.file]() -> IoThread::Completion {
    (void)f->prepare();  // off the critical path: commit() retries it if this failed
    return {};
  });
  reply(s, r.have);
  update_in_flight();
  if (s.received == s.offer.size()) finish(s);
}

void TransferReceiver::Impl::reply(Session& s, std::uint64_t have) {
  pb::TransferFrame f;
  auto* rep = f.mutable_offer_reply();
  rep->set_job_id(s.offer.job_id());
  rep->set_transfer_id(s.tid);
  rep->set_have_offset(have);
  rep->set_window(opts_.window);
  rep->set_chunk_size(opts_.chunk_bytes);
  rep->set_eager_accepted(s.eager_ok);
  // Sealed data frames from `have` on.  An offer that came with eager frames which this receiver
  // does not take gets no opener: its frames (eager or not) are dropped, and the sender, seeing
  // eager_accepted false, offers again under a new key without eager frames (sender_transfer.cpp).
  if (s.sealed && (s.eager_ok || s.offer.eager_bytes() == 0)) make_opener(s, have);
  send(s.routing, f);
}

// Fresh offer: the file exists now; write what waited for it, then carry on as usual.
void TransferReceiver::Impl::file_ready(Session& s, std::shared_ptr<PartFile> file) {
  s.file = std::move(file);
  for (auto& h : s.pending) {
    if (auto w = s.file->write(h.offset, static_cast<const char*>(h.msg.data()) + h.skip, h.len);
        !w.ok()) {
      send_done(s.routing, s.offer, s.tid, false, w.error().code, w.error().message, true);
      return close_session(&s);
    }
  }
  s.pending.clear();
  io_.post([f = s.file]() -> IoThread::Completion {
    (void)f->prepare();
    return {};
  });
  update_in_flight();
  if (s.received > 0) after_write(s);
}

void TransferReceiver::Impl::on_chunk(const std::string& routing, const pb::Chunk& c,
                                      zmq::message_t& data) {
  auto it = by_tid_.find(c.transfer_id());
  if (c.eager() && (it == by_tid_.end() || it->second->routing != routing || !it->second->eager_ok))
    return;  // sent with an offer that was refused, resumes or is already complete
  if (it == by_tid_.end() || it->second->routing != routing) {
    // A transfer this process does not know (it restarted, or the session expired): tell the
    // sender once, so it re-offers and resumes instead of waiting.
    if (unknown_told_.insert(c.transfer_id()).second) {
      pb::Offer o;
      o.set_job_id(c.job_id());
      send_done(routing, o, c.transfer_id(), false, errc::transfer::kUnknown.id,
                "no such transfer on the receiver; offer again", true);
    }
    return;
  }
  Session& s = *it->second;
  if (s.phase != Session::Phase::kReceiving) return;
  if (s.sealed) {  // this transfer's bytes come sealed over the data connection, never here
    probe_.protocol_error();
    const std::string problem = "a plain chunk for a transfer whose offer carried a data key";
    logger().warn("transfer receiver: run={} job={}: {}", s.offer.run_id(), s.offer.job_id(),
                  problem);
    send_done(routing, s.offer, s.tid, false, errc::transfer::kProtocol.id, problem, true);
    close_session(&s);
    return;
  }
  (void)take_bytes(s, c.offset(), data, 0, data.size());
}

bool TransferReceiver::Impl::take_bytes(Session& s, std::uint64_t offset, zmq::message_t& msg,
                                        std::size_t skip, std::size_t len) {
  auto check = check_chunk({s.received, s.durable, s.offer.size(), opts_.chunk_bytes, opts_.window},
                           offset, len);
  if (check.verdict == ChunkCheck::Verdict::kDuplicate) return true;  // after a re-offer race
  if (check.verdict == ChunkCheck::Verdict::kRefuse) {
    const std::string& problem = check.problem;
    probe_.protocol_error();
    logger().warn("transfer receiver: run={} job={}: {}", s.offer.run_id(), s.offer.job_id(),
                  problem);
    send_done(s.routing, s.offer, s.tid, false, errc::transfer::kProtocol.id, problem, true);
    close_session(&s);
    return false;
  }
  const char* bytes = static_cast<const char*>(msg.data()) + skip;
  if (s.received == s.have) s.first_byte = Clock::now();
  s.hasher.update(bytes, len);
  s.received += len;
  probe_.add_bytes(static_cast<double>(len));
  if (!s.file) {  // fresh offer, file not created yet: keep the bytes (bounded by the credit)
    s.pending.push_back({offset, std::move(msg), skip, len});
    return true;
  }
  if (auto w = s.file->write(offset, bytes, len); !w.ok()) {
    send_done(s.routing, s.offer, s.tid, false, w.error().code, w.error().message, true);
    close_session(&s);
    return false;
  }
  after_write(s);
  return true;
}

// Write-back, checkpoint or commit once bytes up to s.received are in the file.
void TransferReceiver::Impl::after_write(Session& s) {
  constexpr std::uint64_t kWriteback = 1 << 20;
  if (s.received - s.writeback_at >= kWriteback || s.received == s.offer.size()) {
    io_.post([f = s.file, from = s.writeback_at,
              n = s.received - s.writeback_at]() -> IoThread::Completion {
      f->start_writeback(from, n);
      return {};
    });
    s.writeback_at = s.received;
  }
  if (s.received == s.offer.size())
    finish(s);
  else
    maybe_checkpoint(s);
}

// Durable checkpoints are what the credit is granted against: every `checkpoint_chunks` while
// the sender still needs credit to reach the end of the file. After that they run back to back
// (one at a time, whenever a chunk arrived since the last one started), so that the commit's
// fdatasync finds at most what arrived during one sync instead of a whole window: on a disk
// with a volatile write cache the cost of a sync grows with the bytes written since the last
// one (4 MiB ~4 ms on the benchmark VM's virtio disk, 0.2 MiB ~0.6 ms).
void TransferReceiver::Impl::maybe_checkpoint(Session& s) {
  const std::uint64_t window_bytes = std::uint64_t{opts_.window} * opts_.chunk_bytes;
  const bool tail = s.durable + window_bytes >= s.offer.size();
  const std::uint64_t period =
      tail ? 1 : std::uint64_t{opts_.checkpoint_chunks} * opts_.chunk_bytes;
  if (s.checkpointing || s.received - s.durable < period) return;
  s.checkpointing = true;
  const std::uint64_t tid = s.tid, at = s.received;
  io_.post([this, f = s.file, tid, at, finishing = s.finishing]() -> IoThread::Completion {
    if (finishing->load()) {
      return [this, tid] {
        if (auto it = by_tid_.find(tid); it != by_tid_.end()) it->second->checkpointing = false;
      };
    }
    Status st = f->checkpoint(at);
    return [this, tid, at, st] {
      auto it = by_tid_.find(tid);
      if (it == by_tid_.end()) return;
      Session& s = *it->second;
      s.checkpointing = false;
      if (!st.ok()) {
        logger().error("transfer receiver: run={} job={}: {}", s.offer.run_id(), s.offer.job_id(),
                       st.error().message);
        send_done(s.routing, s.offer, tid, false, st.error().code, st.error().message, true);
        close_session(&s);
        return;
      }
      s.durable = std::max(s.durable, at);
      // Also in the tail, where the sender holds credit to the end: there it tells the sender
      // that the transfer progresses (a slow link may take longer than dead_after_ms for it).
      pb::TransferFrame f;
      auto* c = f.mutable_credit();
      c->set_job_id(s.offer.job_id());
      c->set_transfer_id(tid);
      c->set_acked_offset(s.durable);
      c->set_credits(opts_.window);
      send(s.routing, f);
      if (s.phase == Session::Phase::kReceiving) maybe_checkpoint(s);
    };
  });
}

void TransferReceiver::Impl::finish(Session& s) {
  s.last_byte = Clock::now();
  s.finishing->store(true);
  const std::string got = s.hasher.hex_digest();
  if (got != s.offer.sha256()) {
    probe_.integrity_failure();
    const std::string reason =
        fmt::format("received bytes hash to {}, the offer says {}", got, s.offer.sha256());
    logger().warn("transfer receiver: run={} job={} attempt {}: {}; discarded, sender will re-send",
                  s.offer.run_id(), s.offer.job_id(), s.offer.attempt(), reason);
    // The sender hears of the failure only once the bad bytes are gone.
    s.phase = Session::Phase::kCommitting;
    const std::uint64_t tid = s.tid;
    io_.post([this, f = s.file, tid, reason]() -> IoThread::Completion {
      f->discard();
      return [this, tid, reason] {
        auto it = by_tid_.find(tid);
        if (it == by_tid_.end()) return;
        send_done(it->second->routing, it->second->offer, tid, false, errc::transfer::kIntegrity.id,
                  reason, true);
        erase(it->second);
      };
    });
    return;
  }
  s.phase = Session::Phase::kCommitting;
  const std::uint64_t tid = s.tid;
  io_.post([this, f = s.file, tid, offer = s.offer]() -> IoThread::Completion {
    const auto c0 = Clock::now();
    if (opts_.check_file) {
      if (Status chk = opts_.check_file(offer, f->paths().part); !chk.ok()) {
        f->discard();
        return [this, tid, chk] {
          auto it = by_tid_.find(tid);
          if (it == by_tid_.end()) return;
          Session& s = *it->second;
          logger().error("transfer receiver: run={} job={}: refused: {}", s.offer.run_id(),
                         s.offer.job_id(), chk.error().to_string());
          send_done(s.routing, s.offer, tid, false, chk.error().code, chk.error().message, false);
          erase(&s);
        };
      }
    }
    const auto c1 = Clock::now();
    Status st = f->commit();
    const double check_s = std::chrono::duration<double>(c1 - c0).count();
    const double commit_s = std::chrono::duration<double>(Clock::now() - c1).count();
    return [this, tid, st, check_s, commit_s] {
      auto it = by_tid_.find(tid);
      if (it == by_tid_.end()) return;
      Session& s = *it->second;
      s.check_s = check_s;
      s.commit_s = commit_s;
      if (!st.ok()) {
        logger().error("transfer receiver: run={} job={} commit: {}", s.offer.run_id(),
                       s.offer.job_id(), st.error().message);
        send_done(s.routing, s.offer, tid, false, st.error().code, st.error().message, true);
        erase(&s);
        return;
      }
      s.committed = Clock::now();
      probe_.transfer_done(since(s.started));
      if (deliver(s)) send_done(s.routing, s.offer, tid, true, "", "", false);
      erase(&s);
    };
  });
}

// on_durable, then the notified mark.  False (and a retry reply sent) when the callback failed;
// the caller erases the session either way.
namespace {
thread_local const DeliveryTiming* tl_delivery = nullptr;
}  // namespace

const DeliveryTiming* current_delivery() {
  return tl_delivery;
}

bool TransferReceiver::Impl::deliver(Session& s) {
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return a == Clock::time_point{} || b == Clock::time_point{}
               ? 0.0
               : std::chrono::duration<double>(b - a).count();
  };
  DeliveryTiming timing{secs(s.started, s.first_byte), secs(s.started, s.last_byte),
                        secs(s.last_byte, s.committed)};
  timing.check_s = s.check_s;
  timing.commit_s = s.commit_s;
  timing.started_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(s.started.time_since_epoch()).count();
  tl_delivery = &timing;
  Status st = on_durable_ ? on_durable_(s.offer, s.final_path, s.offer.sha256()) : Status{};
  tl_delivery = nullptr;
  if (!st.ok()) {
    logger().error("transfer receiver: run={} job={}: on_durable failed: {}", s.offer.run_id(),
                   s.offer.job_id(), st.error().message);
    send_done(s.routing, s.offer, s.tid, false, st.error().code, st.error().message, true);
    return false;
  }
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return a == Clock::time_point{} || b == Clock::time_point{}
               ? 0.0
               : std::chrono::duration<double, std::milli>(b - a).count();
  };
  logger().info(
      "transfer receiver: run={} job={} durable {} ({} bytes, sha256 {}; offer to first byte "
      "{:.1f} ms, "
      "receive {:.1f} ms, commit {:.1f} ms)",
      s.offer.run_id(), s.offer.job_id(), s.final_path.string(), s.offer.size(), s.offer.sha256(),
      ms(s.started, s.first_byte), ms(s.first_byte, s.last_byte), ms(s.last_byte, s.committed));
  io_.post(
      [p = s.final_path, sha = s.offer.sha256(), n = s.offer.size()]() -> IoThread::Completion {
        PartFile::mark_notified(p, sha, n);
        return {};
      });
  return true;
}

// Persist what was received so that a later offer resumes from it.
void TransferReceiver::Impl::flush(Session& s) {
  if (!s.file || s.phase != Session::Phase::kReceiving || s.received <= s.durable) return;
  io_.post([f = s.file, at = s.received]() -> IoThread::Completion {
    (void)f->checkpoint(at);
    return {};
  });
  s.durable = s.received;
}

void TransferReceiver::Impl::close_session(Session* s) {
  flush(*s);
  erase(s);
}

void TransferReceiver::Impl::erase(Session* s) {
  by_tid_.erase(s->tid);
  if (s->sealed) {
    if (gone_tids_.size() > 4096) gone_tids_.clear();
    gone_tids_.insert(s->tid);
  }
  if (auto e = early_.find(s->tid); e != early_.end()) {
    for (const auto& f : e->second) early_bytes_ -= f.msg.size();
    early_.erase(e);
  }
  std::string key = s->key;
  sessions_.erase(key);
  update_in_flight();
}

}  // namespace h3pipe::transfer
