#pragma once
// The sending side of the latent handoff (docs/transfer.md).  It learns of finished latents from
// the local notify socket (notify_latent_ready), from submit(), and from an outbox scan at start
// and every rescan_ms; it streams each to the receiver of the task's decode host, one transfer at
// a time per peer, under the receiver's credit, resuming from the receiver's durable offset after
// any disconnect or restart of either side.
//
// Threading: start() binds the notify socket and returns; the loop runs on its own thread and owns
// every socket.  submit() and stop() are thread-safe.  Callbacks run on the loop thread.
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/transfer/probe.h"
#include "common/transfer/wire.h"

namespace h3pipe::transfer {

struct PeerOptions {
  std::string host;        // config host name of a decode host
  std::string endpoint;    // tcp://ADDRESS:PORT of its receiver
  std::string server_key;  // its receiver's CURVE public key (Z85); unused with curve off
};

struct SendReport {
  pb::StageTask task;
  std::filesystem::path latent;
  std::string peer;
  std::string sha256;
  std::uint64_t size = 0;
  std::uint64_t bytes_sent = 0;    // over all attempts and reconnects
  std::uint64_t resumed_from = 0;  // offset the receiver held when the last attempt began
  int attempts = 0;
  double seconds = 0;        // queued -> acknowledged durable
  bool local = false;        // same host: no network
  bool eager_taken = false;  // the receiver kept the chunks sent with the first offer
  bool sealed = false;       // the last attempt's bytes went as AES-256-GCM data frames
};

struct SenderOptions {
  std::string host;              // this host's name
  std::filesystem::path root;    // artifact root (task.input_path is relative to it)
  std::filesystem::path outbox;  // task records (outbox.h); empty = no persistence
  std::string notify_endpoint;   // PULL bind for samplers ("" = none), e.g. ipc:///run/x.sock
  std::vector<PeerOptions> peers;
  CurveClient curve;                          // own key pair; server_key is taken per peer
  std::uint32_t max_chunk_bytes = 16u << 20;  // largest chunk size a receiver may ask for
  // (inbound frames from receivers are small: the DEALER caps them at 64 KiB)
  int heartbeat_ms = 500;
  int dead_after_ms = 3000;
  int max_attempts = 5;  // integrity failures before the task fails
  int backoff_initial_ms = 100;
  int backoff_max_ms = 5000;
  int rescan_ms = 5000;  // outbox rescan period (0 = only at start)
  // Zero-round-trip start (Offer.eager_bytes): the first offer of a latent notified to this
  // process is followed at once by up to eager_bytes of it in chunks of eager_chunk_bytes,
  // which the receiver keeps when it starts the latent from 0: that saves the offer's round
  // trip.  Not for latents found in the outbox at a restart (the receiver may hold part of
  // them) nor for re-offers.  Set from the receivers' chunk and window (eager_span_for, frames.h);
  // a span a receiver would not grant is dropped there and sent again.  0 turns it off.
  std::uint64_t eager_bytes = 1u << 20;
  std::uint32_t eager_chunk_bytes = 64u << 10;
  // Issue #36 item 8: with CURVE on, a receiver that announces a data connection (its pong's
  // data_port) gets each offer's bytes as AES-256-GCM data frames over it, under a fresh key per
  // offer sent inside CURVE (data_cipher.h), instead of through CURVE.  false: never.
  bool data_frames = true;
  // A new connection's offers wait for the data connection (the pong names its port, then its
  // handshake) at most this long after the control handshake, so that the first latent is sealed
  // too; past it (the data port unreachable: a firewall, an unpublished container port) the
  // latents go through CURVE, logged and counted (h3pipe_transfer_data_fallbacks_total), until
  // the data connection comes up.
  int data_wait_ms = 1000;

  // Decode host for a task whose target_host is empty: the hook gets the candidate hosts and
  // this sender's queue length per host.  Default: the shortest queue (first on ties).
  std::function<std::string(const pb::StageTask&, const std::map<std::string, std::size_t>&)>
      choose_host;
  // Same-host delivery (no network): called with the latent's final path after the link.
  std::function<Status(const pb::StageTask&, const std::filesystem::path&,
                       const std::string& sha256)>
      deliver_local;
  std::filesystem::path local_root;  // where same-host latents go (default: root, nothing moves)
  std::function<void(const SendReport&)> on_sent;
  std::function<void(const pb::StageTask&, const Error&)> on_failed;

  // TEST ONLY: flips one bit of the first chunk sent in each of the first N attempts of every
  // transfer, after the sender's own hashing (for sealed data frames: a bit of the ciphertext of
  // the attempt's second frame, after sealing), to prove that the receiver catches corruption
  // in transit.  Never set in production; the test driver enables it through the environment
  // variable H3PIPE_TEST_ONLY_CORRUPT_ATTEMPTS.
  int test_only_corrupt_attempts = 0;
};

class TransferSender final {
 public:
  static Result<std::unique_ptr<TransferSender>> start(zmq::context_t& ctx, SenderOptions opts,
                                                       TransferProbe& probe);
  ~TransferSender();
  TransferSender(const TransferSender&) = delete;
  TransferSender& operator=(const TransferSender&) = delete;

  void submit(pb::StageTask task);  // thread-safe; same as a notification
  void stop();                      // finishes nothing: unsent work stays in the outbox
  const std::string& notify_endpoint() const { return notify_endpoint_; }

  class Impl;

 private:
  explicit TransferSender(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string notify_endpoint_;
  std::thread thread_;
};

// Same-host handoff: hard-links `src` (and its sidecar) to `dst` atomically (rename over), or
// copies when they are on different filesystems.  A no-op when both name the same file.  With
// `dst_root` (the configured root dst lies below) its folders are made without following a
// symlink (path.* errors) and a copy is written below it (artifacts::Root).
Result<std::filesystem::path> local_handoff(const std::filesystem::path& src,
                                            const std::filesystem::path& dst,
                                            const std::filesystem::path& dst_root = {});

}  // namespace h3pipe::transfer
