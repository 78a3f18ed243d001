// One transfer's protocol on the sender's side (TransferSender::Impl, sender_impl.h): the offer
// (with its eager chunks), the receiver's reply and credits, pumping chunks from the latent under
// the credit, and the receiver's Done: success, re-send, offer again later, or failure.
#include <fcntl.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/core/sha256.h"
#include "common/transfer/frames.h"
#include "common/transfer/log.h"
#include "common/transfer/outbox.h"
#include "common/transfer/sender_impl.h"
#include "common/transfer/sender_parts.h"
#include "common/transfer/wire.h"

namespace h3pipe::transfer {
using detail::Clock;
using detail::Job;
using detail::logger;
using detail::Peer;
using detail::St;
using std::chrono::milliseconds;

void TransferSender::Impl::reset_attempt(Peer& p) {
  close_file(p);
  p.sealer.reset();
  p.unsent.reset();
  p.unsent_len = 0;
  p.data_want_out = false;
  if (p.active) p.active->sealed = false;
  p.eager = false;
  p.st = St::kIdle;
  p.tid = 0;
}

void TransferSender::Impl::close_file(Peer& p) {
  if (p.fd >= 0) ::close(p.fd);
  p.fd = -1;
}

void TransferSender::Impl::offer(Peer& p) {
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
  // Issue #36 item 8: the bytes as AES-256-GCM data frames over the data connection, under a
  // key drawn for this offer alone and sent only here, inside the CURVE session.
  p.sealer.reset();
  j.sealed = false;
  if (data_usable(p)) {
    auto key = DataKey::random();
    auto sealer = key.ok() ? FrameSealer::make(*key, p.tid) : Result<FrameSealer>(key.error());
    if (sealer.ok()) {
      o->set_data_key(std::string(key->bytes()));
      p.sealer.emplace(std::move(*sealer));
      j.sealed = true;
    } else {
      logger().warn("transfer sender: run={} job={}: {}; this offer's chunks go through CURVE",
                    j.task.run_id(), j.task.job_id(), sealer.error().message);
    }
  }
  const bool sent = send(p, f);
  // The key's copy in the frame is wiped as soon as it is sent (the sealer keeps its own).
  if (!o->data_key().empty()) OPENSSL_cleanse(o->mutable_data_key()->data(), o->data_key().size());
  if (!sent) {  // not connected yet: the next tick tries again
    close_file(p);
    p.sealer.reset();
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

bool TransferSender::Impl::open_source(Peer& p) {
  if (p.fd >= 0) return true;
  p.fd = ::open(p.active->latent.c_str(), O_RDONLY | O_CLOEXEC);
  if (p.fd >= 0) return true;
  fail_active(p, make_error(errc::transfer::kSource, "open {}: {}", p.active->latent.string(),
                            std::strerror(errno)));
  return false;
}

void TransferSender::Impl::read_frames(Peer& p) {
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
      case pb::TransferFrame::kPong:
        on_pong(p, f->pong());
        break;
      default:
        break;
    }
  }
}

void TransferSender::Impl::on_reply(Peer& p, const pb::OfferReply& r) {
  if (!p.active || p.st != St::kOffered || r.transfer_id() != p.tid) return;
  Job& j = *p.active;
  p.progress = Clock::now();
  if (r.already_complete()) return succeed(p, j.sha);
  if (auto st = check_offer_reply(r, opts_.max_chunk_bytes, j.size, p.o.host); !st.ok()) {
    probe_.protocol_error();
    return fail_active(p, st.error());
  }
  const bool eager_taken = p.eager && r.eager_accepted();
  if (p.sealer && p.eager && !eager_taken) {
    // The receiver does not take this offer's eager frames, so it has no place in the sealed
    // stream for what follows them (receiver_session.cpp, reply): offer again under a new key,
    // without eager frames (a latent's first offer only carries them).  One round trip, only
    // when the receiver resumes a .part or is configured differently.
    reset_attempt(p);
    return offer(p);
  }
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

void TransferSender::Impl::on_credit(Peer& p, const pb::Credit& c) {
  if (!p.active || c.transfer_id() != p.tid) return;
  // A credit says the receiver made more of the latent durable: progress, also once everything
  // is sent (kAwaitDone: on a slow link the last window can take longer than dead_after_ms).
  if (p.st == St::kAwaitDone) p.progress = Clock::now();
  if (p.st != St::kStreaming) return;
  p.progress = Clock::now();
  p.limit = std::max(p.limit, grant_limit(c.acked_offset(), c.credits(), p.chunk));
  pump(p);
}

void TransferSender::Impl::pump(Peer& p) {
  Job& j = *p.active;
  if (p.unsent) {  // a sealed frame the data socket could not take: it goes first, as it is
    if (!send_sealed(p)) return;
  }
  while ((p.st == St::kStreaming || p.eager) && p.next < j.size && p.next < p.limit) {
    const std::uint64_t n = next_chunk_len(p.next, j.size, p.limit, p.chunk);
    if (p.sealer) {
      if (!seal_next(p, n)) return;
      continue;
    }
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
    if (p.hashing && p.hashed == j.size && p.hasher.hex_digest() != j.sha) j.source_mismatch = true;
  }
}

// The next n bytes at p.next as one sealed data frame: read straight into the frame, sealed in
// place, sent on the data connection (or held in p.unsent until it can take it).  False: stop
// pumping (socket full, or the attempt failed).
bool TransferSender::Impl::seal_next(Peer& p, std::uint64_t n) {
  Job& j = *p.active;
  zmq::message_t msg(sealed_size(n));
  auto* out = static_cast<unsigned char*>(msg.data());
  unsigned char* plain = out + kHeaderBytes;
  ssize_t got = ::pread(p.fd, plain, n, static_cast<off_t>(p.next));
  if (got != static_cast<ssize_t>(n)) {
    fail_active(p, make_error(errc::transfer::kSource, "read {} at {}: short read",
                              j.latent.string(), p.next));
    return false;
  }
  if (p.hashing && p.hashed == p.next) {
    p.hasher.update(plain, n);
    p.hashed += n;
  }
  if (auto st = p.sealer->seal(p.next, std::span<const unsigned char>(plain, n),
                               p.next + n == j.size, std::span<unsigned char>(out, msg.size()));
      !st.ok()) {
    fail_active(p, st.error());
    return false;
  }
  // TEST ONLY (see SenderOptions): a bit of the ciphertext, after sealing, in the attempt's
  // second frame (the first binds the data connection to the transfer on the receiver).
  if (p.corrupt_pending > 0 && p.sealer->next_index() >= 2) {
    plain[n / 2] ^= 0x10;
    logger().warn(
        "transfer sender: TEST ONLY: flipped a bit of the sealed frame at offset {} of run={} "
        "job={} attempt {}",
        p.next + n / 2, j.task.run_id(), j.task.job_id(), j.attempts);
    p.corrupt_pending = 0;
  }
  p.unsent.emplace(std::move(msg));
  p.unsent_len = n;
  return send_sealed(p);
}

bool TransferSender::Impl::send_sealed(Peer& p) {
  bool ok = false;
  try {
    ok = p.data_sock && p.data_sock->send(*p.unsent, zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
  }
  if (!ok) {
    p.data_want_out = true;  // HWM reached or not connected yet: resume on POLLOUT / next tick
    return false;
  }
  p.unsent.reset();
  p.next += p.unsent_len;
  p.active->bytes_sent += p.unsent_len;
  probe_.add_bytes(static_cast<double>(p.unsent_len));
  p.unsent_len = 0;
  return true;
}

void TransferSender::Impl::on_done(Peer& p, const pb::Done& d) {
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

void TransferSender::Impl::succeed(Peer& p, const std::string& sha) {
  Job j = std::move(*p.active);
  p.active.reset();
  reset_attempt(p);
  p.offer_again_ms = 0;
  const double secs = std::chrono::duration<double>(Clock::now() - j.queued).count();
  probe_.transfer_done(secs);
  if (j.sealed)
    probe_.delivered_sealed();
  else if (opts_.curve.enabled)
    probe_.delivered_curve();
  else
    probe_.delivered_plain();
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
               j.eager_taken,
               j.sealed};
  if (opts_.on_sent) opts_.on_sent(r);
}

void TransferSender::Impl::fail_active(Peer& p, const Error& e) {
  Job j = std::move(*p.active);
  p.active.reset();
  reset_attempt(p);
  fail(j.task, e);
}

}  // namespace h3pipe::transfer
