#pragma once
// The receiving side of the latent handoff (docs/transfer.md): a ROUTER bound to the configured
// interface that accepts offers, resumes from the durable prefix, writes NAME.part while hashing,
// grants credit as data becomes durable, verifies the SHA-256 against the offer, commits
// atomically and calls on_durable once per delivered (job, hash).
//
// Threading: start() returns with the socket bound; the receive loop runs on its own thread, disk
// syncs on a second (IoThread), ZAP on a third.  on_durable runs on the receive loop thread.
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/transfer/probe.h"
#include "common/transfer/wire.h"

namespace h3pipe::transfer {

// admit_offer's answer.
struct OfferVerdict {
  Status status;       // ok: admitted
  bool retry = false;  // refused for now (the sender offers again), not for good
};

struct ReceiverOptions {
  std::string bind_endpoint = "tcp://127.0.0.1:0";  // never "*" by default
  std::filesystem::path root;                       // offers' relative paths resolve under it
  std::uint32_t chunk_bytes = 256 * 1024;
  std::uint32_t window = 32;            // chunks the sender may have beyond the durable prefix
  std::uint32_t checkpoint_chunks = 0;  // durable checkpoint period; 0 = window / 4
  int heartbeat_ms = 500;
  int dead_after_ms = 3000;
  std::uint64_t max_file_bytes = 256ull << 20;
  CurveServer curve;
  // Issue #36 item 8: with CURVE on, a second ROUTER (no CURVE, bound to bind_endpoint's address,
  // port data_port, 0 = any free one, announced in every pong) takes the chunks as AES-256-GCM
  // data frames sealed under the per-offer key the offer carried inside CURVE (data_cipher.h).
  // false, or CURVE off: no data connection; every chunk rides the CURVE socket.
  bool data_frames = true;
  std::uint16_t data_port = 0;
  std::string host;  // for log lines
  // Checks the received, hash-verified file (NAME.part) before it is committed, on the I/O thread:
  // the service checks the latent against the job's latent profile (docs/latent.md).  A failure
  // discards the file and refuses the transfer for good (Done retry = false, the error's code and
  // message), so the job fails with the reason instead of being re-sent.  Empty: no check.
  std::function<Status(const pb::Offer& offer, const std::filesystem::path& part)> check_file;
  // Decides, when an offer arrives and before any byte of it is accepted, whether this sender
  // may deliver this latent at all (issue #35 D4: the service checks the job is at transfer and
  // its sample record names the sending host, and puts the job's stored spec into the offer's
  // next_task, so nothing of the peer's task but its ids is believed).  `peer_key`: the sender's
  // CURVE public key (Z85; ZAP's User-Id), empty without CURVE.  It may rewrite `offer` (what
  // check_file and on_durable then see).  A refusal is answered Done(ok = false) with the error's
  // code and message, retry as returned ("not yet": the sender offers again after its backoff).
  // Runs on the receive loop thread.  Empty: every offer admitted.
  std::function<OfferVerdict(pb::Offer& offer, const std::string& peer_key)> admit_offer;
};

// Called once the file is verified and durable under its final name.  A failure makes the sender
// retry the offer (the file stays; the next offer calls on_durable again).  The service wires it
// to the idempotent enqueue of offer.next_task().
using OnDurable = std::function<Status(
    const pb::Offer& offer, const std::filesystem::path& final_path, const std::string& sha256)>;

// One delivery's time, as the receiver saw it (the receipt's transfer wire_s / verify_s).
struct DeliveryTiming {
  double offer_s = 0;   // offer received -> first byte of data
  double wire_s = 0;    // offer received -> last byte (the offer's round trip and the bytes)
  double verify_s = 0;  // last byte -> hash checked, file checked, fsynced and renamed
  // Parts of verify_s, on the I/O thread (the rest is the hash's last block and the queue to it):
  double check_s = 0;   // ReceiverOptions::check_file (the latent against its profile)
  double commit_s = 0;  // fdatasync, sidecar, renames, state, directory fsync (PartFile::commit)
  long long started_ns = 0;  // the offer's arrival, steady clock (CLOCK_MONOTONIC) ns
};
// Inside an OnDurable callback (on the receive loop thread): the delivery's timing; nullptr
// anywhere else.
const DeliveryTiming* current_delivery();

class TransferReceiver final {
 public:
  static Result<std::unique_ptr<TransferReceiver>> start(zmq::context_t& ctx, ReceiverOptions opts,
                                                         OnDurable on_durable,
                                                         TransferProbe& probe);
  ~TransferReceiver();
  TransferReceiver(const TransferReceiver&) = delete;
  TransferReceiver& operator=(const TransferReceiver&) = delete;

  // The bound endpoint with the real port (tcp://127.0.0.1:41234).
  const std::string& endpoint() const { return endpoint_; }
  // The data connection's bound endpoint (empty when it has none: CURVE off or data_frames off).
  const std::string& data_endpoint() const { return data_endpoint_; }
  void stop();
  long long zap_refused() const;

  class Impl;

 private:
  explicit TransferReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string endpoint_, data_endpoint_;
  std::thread thread_;
};

// Validates an offer against the receiver's limits and resolves its final path under root: ids
// and every path component pass artifacts::validate_id, the path is RUN/JOB/NAME (3..6
// components, the offer's own run and job), and next_task names the same run and job.
// Errors: transfer.refused with the field named.
Result<std::filesystem::path> resolve_offer(const pb::Offer& offer,
                                            const std::filesystem::path& root,
                                            std::uint64_t max_file_bytes);

}  // namespace h3pipe::transfer
