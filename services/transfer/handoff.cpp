#include "services/transfer/handoff.h"

#include <google/protobuf/util/json_util.h>

#include "common/logging/log.h"
#include "common/queue/keys.h"
#include "common/spec/spec.h"
#include "common/state/state.h"
#include "common/state/transfer_facts.h"
#include "common/transfer/config_map.h"
#include "common/transfer/keys.h"
#include "common/transfer/receiver.h"
#include "common/worker/worker.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("handoff");
  return *l;
}

}  // namespace

namespace h3pipe::transfer_service {
namespace fs = std::filesystem;
Handoff::Handoff(const config::Cluster& cluster, std::string host, queue::Connector redis)
    : cluster_(cluster), host_(std::move(host)), connector_(std::move(redis)) {}

Result<queue::Redis*> Handoff::connection() {
  if (!redis_) {
    auto r = connector_.connect();
    if (!r.ok()) return r.error();
    redis_ = std::move(*r);
  }
  return redis_.get();
}

Status Handoff::run_script(pb::StageTask task, const fs::path& final_path,
                           const std::string& sha256, std::uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  auto conn = connection();
  if (!conn.ok()) return conn.error();
  queue::Redis& redis = **conn;
  const long long now = state::now_ms();
  pb::StageRecord rec;
  rec.set_stage(pb::STAGE_TRANSFER);
  rec.set_host(host_);
  rec.set_start_unix_ms(task.enqueued_unix_ms() ? task.enqueued_unix_ms() : now);
  rec.set_end_unix_ms(now);
  rec.set_attempts(1);
  rec.set_input_sha256(sha256);
  rec.set_output_sha256(sha256);
  std::error_code ec;
  rec.set_output_path(fs::relative(final_path, cluster_.artifact_root, ec).generic_string());
  rec.set_bytes(bytes);
  if (const auto* d = transfer::current_delivery()) {  // a delivery from a peer (not local)
    rec.set_wire_s(d->wire_s);
    rec.set_verify_s(d->verify_s);
  }
  std::string payload;
  task.set_stage(pb::STAGE_DECODE);
  task.set_target_host(host_);
  task.set_input_sha256(sha256);
  task.set_input_path(rec.output_path());
  task.set_enqueued_unix_ms(now);
  task.SerializeToString(&payload);
  // transfer -> decode through the state machine: a latent delivered twice (a re-offer after a
  // lost acknowledgement) finds the job already at decode and enqueues nothing.  The sampler's
  // own transfer move may come after ours (its ack races the delivery): sample -> decode applies.
  auto m =
      state::Store::advance_move(task.run_id(), task.job_id(), rec, state::JobState::kDecode,
                                 worker::stream_for(config::StageKind::kDecode, host_), payload);
  auto r = state::Store(redis).apply(m);
  if (!r.ok()) {
    redis_.reset();  // reconnect on the next call
    degraded_.hit(r.error().to_string() + " (the sender offers the latent again)");
    return r.error();
  }
  // A stage completion a failover must not lose: Store::apply WAITed for redis.wait_replicas.
  // Fewer is not a failure (a failover before it replicates is redone from the artifacts).
  const int want = redis.address().wait_replicas;
  if (r->code != state::Applied::kRefused && r->replicas >= 0 && r->replicas < want)
    logger().warn(
        "run={} job={}: hand-off acknowledged by {} of {} replica(s) within "
        "redis.wait_timeout_ms; a failover now would redo it from its artifacts",
        task.run_id(), task.job_id(), r->replicas, want);
  degraded_.ok();
  if (r->code == state::Applied::kRefused)
    logger().warn("run={} job={}: latent delivered but the job is {}; no decode enqueued",
                  task.run_id(), task.job_id(), state::job_state_name(r->from));
  return {};
}

Status Handoff::enqueue_decode(const pb::Offer& offer, const fs::path& final_path,
                               const std::string& sha256) {
  return run_script(offer.next_task(), final_path, sha256, offer.size());
}

Status Handoff::enqueue_local(const pb::StageTask& task, const fs::path& final_path,
                              const std::string& sha256) {
  std::error_code ec;
  return run_script(task, final_path, sha256, fs::file_size(final_path, ec));
}

transfer::OfferVerdict Handoff::admit(pb::Offer& offer, const std::string& peer_key) {
  const std::string& run = offer.run_id();
  const std::string& job = offer.job_id();
  auto refuse = [&](bool retry, std::string why) {
    refused_++;
    return transfer::OfferVerdict{
        make_error(errc::transfer::kRefused, "run={} job={}: {}", run, job, std::move(why)), retry};
  };
  std::lock_guard<std::mutex> l(mu_);
  auto conn = connection();
  if (!conn.ok()) return refuse(true, "cannot read the job: " + conn.error().message);
  auto facts = state::transfer_facts(**conn, run, job);
  if (!facts.ok()) {
    redis_.reset();
    return refuse(true, "cannot read the job: " + facts.error().message);
  }
  if (!facts->exists) return refuse(false, "no such job in this Redis");
  if (facts->state == state::job_state_name(state::JobState::kSample) || facts->sampled_on.empty())
    return refuse(true, fmt::format("the job is at {} and not sampled yet; no latent is expected",
                                    facts->state));
  // With CURVE every sender is authenticated by its key: it must be the sampling host's.
  if (!peer_key.empty() || transfer::curve_required(cluster_)) {
    auto want = host_keys_.find(facts->sampled_on);
    if (want == host_keys_.end()) {
      const config::Host* h = cluster_.find_host(facts->sampled_on);
      if (!h || h->transfer_public_key_file.empty())
        return refuse(false, fmt::format("sampled on host {}, whose transfer public key the config "
                                         "does not name: the sender cannot be checked",
                                         facts->sampled_on));
      auto k = transfer::load_key_file(h->transfer_public_key_file, false);
      if (!k.ok())
        return refuse(true, fmt::format("the transfer public key of host {}: {}", facts->sampled_on,
                                        k.error().message));
      want = host_keys_.emplace(facts->sampled_on, *k).first;
    }
    if (peer_key != want->second)
      return refuse(
          false, fmt::format("sampled on host {}; this sender (key {}) is not that "
                             "host, so its latent is not this job's",
                             facts->sampled_on, peer_key.empty() ? "none" : peer_key.substr(0, 8)));
  }
  auto spec = spec::parse_json(facts->spec_json);
  if (!spec.ok()) return refuse(false, "the job's stored spec: " + spec.error().message);
  *offer.mutable_next_task()->mutable_spec() = std::move(*spec);
  return {};
}

void Handoff::guard(transfer::ReceiverOptions& o) {
  o.admit_offer = [this](pb::Offer& offer, const std::string& peer_key) {
    return admit(offer, peer_key);
  };
}

void Handoff::fail(const pb::StageTask& task, const Error& e) {
  std::lock_guard<std::mutex> l(mu_);
  auto conn = connection();
  if (!conn.ok()) {
    logger().error("run={} job={}: cannot record the transfer failure: {}", task.run_id(),
                   task.job_id(), conn.error().message);
    return;
  }
  auto r = state::Store(**conn).apply(
      state::Store::fail_move(task.run_id(), task.job_id(), pb::STAGE_TRANSFER, e.to_string()));
  if (!r.ok()) {
    redis_.reset();
    degraded_.hit(fmt::format("run={} job={}: the transfer failure was not recorded: {}",
                              task.run_id(), task.job_id(), r.error().to_string()));
  }
}

}  // namespace h3pipe::transfer_service
