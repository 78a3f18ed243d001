#pragma once
// The transfer service's Redis side: what happens when a latent is durable on the decode host
// (enqueue its decode task, once per (job, hash)) and when a transfer is given up (fail the job).
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include "common/config/config.h"
#include "common/metrics/degraded.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/connector.h"
#include "common/queue/redis.h"
#include "common/transfer/receiver.h"

namespace h3pipe::transfer_service {

class Handoff final {
 public:
  // Its connection from `redis` (the service's connector, the runner's; reopened after a failure).
  Handoff(const config::Cluster& cluster, std::string host, queue::Connector redis);
  // The job's transfer -> decode move (state::Store::apply) with the transfer's history record
  // and the decode task for this host's stream, in one script; a latent delivered again finds the
  // job already at decode and enqueues nothing.  Thread-safe.
  Status enqueue_decode(const pb::Offer& offer, const std::filesystem::path& final_path,
                        const std::string& sha256);
  Status enqueue_local(const pb::StageTask& task, const std::filesystem::path& final_path,
                       const std::string& sha256);
  // The job fails with the transfer's reason (max attempts, refused, missing source).
  void fail(const pb::StageTask& task, const Error& e);
  // The receiver's admission of a peer's offer (transfer::ReceiverOptions::admit_offer; issue #35
  // D4): the job must exist, have been sampled (its latest sample record names a host) and, with
  // CURVE, by the sender: `peer_key` must be that host's transfer public key.  A job still at
  // sample (its sampler's completion not applied yet) is refused for now; a job past transfer is
  // admitted (a re-offer after a lost acknowledgement: its hand-off enqueues nothing).  The
  // offer's next_task gets the job's stored spec: nothing of the peer's task but its ids is
  // believed.  Thread-safe.
  transfer::OfferVerdict admit(pb::Offer& offer, const std::string& peer_key);
  // Sets o.admit_offer to admit (the receiver must not outlive this Handoff).
  void guard(transfer::ReceiverOptions& o);
  // Offers refused by admit, for good or for now.
  long long refused() const { return refused_.load(); }

 private:
  Status run_script(pb::StageTask task, const std::filesystem::path& final_path,
                    const std::string& sha256, std::uint64_t bytes);
  // The open connection, or a new one (under mu_).
  Result<queue::Redis*> connection();
  const config::Cluster& cluster_;
  std::string host_;
  queue::Connector connector_;
  std::mutex mu_;
  std::unique_ptr<queue::Redis> redis_;
  std::map<std::string, std::string> host_keys_;  // host -> its transfer public key (under mu_)
  std::atomic<long long> refused_{0};
  metrics::Degraded degraded_{"transfer_handoff_redis", "transfer handoff on host " + host_};
};

}  // namespace h3pipe::transfer_service
