// resume RUN_ID (`h3pipe resume`, POST /v1/runs/{id}/resume): for each job, the furthest stage
// whose output exists and verifies; re-enqueue only what is missing (docs/design.md rule 1 applied
// to every job).  Jobs with an outstanding task on any stage stream are left alone: their task will
// run.
//
// One answer from every host (issue #34 P8): an output is checked on this host's disk when this
// host is the one that holds it; one that another host holds counts as there when the job's
// history in Redis records its completion there (the stage's record with its output SHA-256), so
// the sampler host no longer re-enqueues the decodes of a finished run.  The host that holds an
// output is the one whose resume finds it missing and re-enqueues it (docs/design.md, rule 1).
#include "common/api/resume_run.h"

#include <algorithm>
#include <optional>
#include <set>

#include "common/artifacts/artifacts.h"
#include "common/state/paths.h"
#include "common/state/receipts.h"
#include "common/state/resume.h"
#include "common/state/state.h"
#include "common/supervisor/supervisor.h"
#include "common/transfer/config_map.h"
#include "common/transfer/outbox.h"
#include "common/worker/decode_choice.h"
#include "common/worker/worker.h"

namespace h3pipe::api {
namespace fs = std::filesystem;
namespace {

// The hosts holding a job's latent, from its history: where it was sampled first, then where a
// transfer delivered it.
std::vector<std::string> latent_holders(const std::vector<pb::StageRecord>& h) {
  std::vector<std::string> out;
  for (const auto& rec : h)
    if (rec.stage() == pb::STAGE_SAMPLE && !rec.host().empty()) out.insert(out.begin(), rec.host());
  for (const auto& rec : h)
    if (rec.stage() == pb::STAGE_TRANSFER && !rec.host().empty() &&
        std::find(out.begin(), out.end(), rec.host()) == out.end())
      out.push_back(rec.host());
  return out;
}

// The hosts whose outputs lie on this host's disk: the stack running here (every host of the
// config for a stack started without --host, which runs them all), else the only host of a
// one-host config; none known otherwise (an operator's machine: Redis's records decide).
std::set<std::string> hosts_on_this_disk(const config::Cluster& c) {
  std::set<std::string> out;
  if (auto st = supervisor::running(c)) {
    if (const std::string h = st->value("host", ""); !h.empty()) return {h};
    for (const auto& h : c.hosts) out.insert(h.name);
  } else if (c.hosts.size() == 1) {
    out.insert(c.hosts.front().name);
  }
  return out;
}

// The ResumeOutcome::counts entries.
enum Count { kDone = 0, kInFlight, kEncode, kSample, kDecode, kLeftToHolders };

Error prefixed(Error e, const std::string& job) {
  e.message = "resume " + job + ": " + e.message;
  return e;
}

// The stage streams on which an outstanding task of a job leaves the job to it: those of this
// config (stream names follow from it and worker/, which the state module does not use).
std::vector<std::string> stage_streams(const config::Cluster& c) {
  std::vector<std::string> streams = {worker::stream_for(config::StageKind::kEncode, ""),
                                      worker::stream_for(config::StageKind::kSample, "")};
  for (const auto* p : c.pools_on("", config::StageKind::kDecode))
    streams.push_back(worker::stream_for(config::StageKind::kDecode, p->host));
  // GPU groups' own sample streams (an encoder on a sampler's GPUs sends its jobs there).
  for (const auto* p : c.pools_on("", config::StageKind::kSample))
    if (const std::string g = worker::gpu_group(c, *p); !g.empty())
      streams.push_back(worker::group_sample_stream(g));
  return streams;
}

// Where a job that is neither done nor left to its task resumes.
struct Reopen {
  enum Kind {
    kEnqueue,       // task enqueued on `stream`, or through `sender`'s transfer outbox
    kLeftToHolder,  // its latent is only on another host, whose resume re-enqueues it
    kNoDecodePool,  // no decode pool in the config: the resume stops
  } kind = kEnqueue;
  pb::StageTask task;
  state::JobState state = state::JobState::kEncode;
  std::string stream;  // the stage stream it goes on; empty: through the transfer sender
  std::string sender;  // the host whose transfer sender moves its latent (stream empty)
  std::string holder;  // kLeftToHolder: the host that holds its latent
  Count count = kEncode;
};

// One job of a resume: its outputs on this disk, and its history in Redis (read once, when an
// output is not on this disk) for those committed on another host.
class JobResume {
 public:
  JobResume(state::Store& store, const config::Cluster& c, const std::string& run_id,
            const state::ResumeJob& job, const std::set<std::string>& here)
      : store_(store), c_(c), run_id_(run_id), job_(job), here_(here) {}

  // Its MP4 and receipt verify on this disk, or it is done and its decode committed on a host
  // whose disk is not this one (which checks the MP4 when it resumes).
  Result<bool> finished() {
    auto mp4 = paths::mp4(c_, run_id_, job_.job_id);
    auto rec = paths::receipt(c_, run_id_, job_.job_id);
    if (mp4.ok() && rec.ok() && artifacts::verify(*mp4).ok() && artifacts::verify(*rec).ok())
      return true;
    if (job_.state != state::job_state_name(state::JobState::kDone)) return false;
    auto decoded = committed_elsewhere(pb::STAGE_DECODE);
    if (!decoded.ok()) return decoded.error();
    return decoded->has_value();
  }

  // The furthest stage whose input exists: decode where the latent is (or is held), else sample
  // when the conditioning is there, else encode.
  Result<Reopen> where_it_resumes(queue::Redis& r) {
    Reopen o;
    o.task.set_run_id(run_id_);
    o.task.set_job_id(job_.job_id);
    *o.task.mutable_spec() = *job_.spec;
    o.task.set_enqueued_unix_ms(state::now_ms());
    auto h = history();
    if (!h.ok()) return h.error();
    auto lat = paths::latent(c_, run_id_, job_.job_id);
    const bool latent_here = lat.ok() && artifacts::verify(*lat).ok();
    auto holders = latent_holders(**h);
    if (!latent_here) {
      // Not on this disk: the other hosts that hold it, when its sampling committed.
      if (!state::completion(**h, pb::STAGE_SAMPLE)) holders.clear();
      std::erase_if(holders, [&](const std::string& x) { return here_.count(x) > 0; });
    }
    if (latent_here || !holders.empty()) {
      decode(o, latent_here ? *lat : fs::path(), holders, r);
      return o;
    }
    auto enc = encoded();
    if (!enc.ok()) return enc.error();
    if (*enc) {
      o.task.set_stage(pb::STAGE_SAMPLE);
      o.stream = worker::stream_for(config::StageKind::kSample, "");
      o.state = state::JobState::kSample;
      o.count = kSample;
    } else {
      o.task.set_stage(pb::STAGE_ENCODE);
      o.stream = worker::stream_for(config::StageKind::kEncode, "");
      o.count = kEncode;
    }
    return o;
  }

 private:
  Result<const std::vector<pb::StageRecord>*> history() {
    if (!hist_) {
      auto h = store_.history(run_id_, job_.job_id);
      if (!h.ok()) return h.error();
      hist_ = std::move(*h);
    }
    return &*hist_;
  }

  // Committed on a host whose disk is not this one, as the history records it.
  Result<std::optional<pb::StageRecord>> committed_elsewhere(pb::Stage s) {
    auto h = history();
    if (!h.ok()) return h.error();
    auto rec = state::completion(**h, s);
    if (rec && !rec->host().empty() && !here_.count(rec->host())) return rec;
    return std::optional<pb::StageRecord>();
  }

  // The conditioning is on this disk, or its encode committed on another host.
  Result<bool> encoded() {
    auto cond = paths::conditioning(c_, run_id_, job_.job_id);
    if (cond.ok() && artifacts::verify(*cond).ok()) return true;
    auto e = committed_elsewhere(pb::STAGE_ENCODE);
    if (!e.ok()) return e.error();
    return e->has_value();
  }

  // The decode goes where the latent is (or will be): `lat` when it verifies on this disk (else
  // empty), else the hosts the job's history says hold it, through the one decode-host choice
  // (worker/decode_choice.h).
  void decode(Reopen& o, const fs::path& lat, const std::vector<std::string>& holders,
              queue::Redis& r) {
    state::RedisPoolBoardStore board(r);
    auto target = worker::resume_decode_target(c_, holders, o.task, &board);
    if (target.host.empty()) {
      o.kind = Reopen::kNoDecodePool;
      return;
    }
    if (lat.empty() && target.via_transfer) {
      // Only the sampling host's transfer sender can move it: its outbox is on that host.
      o.kind = Reopen::kLeftToHolder;
      o.holder = holders.front();
      o.count = kLeftToHolders;
      return;
    }
    o.task.set_stage(pb::STAGE_DECODE);
    o.task.set_target_host(target.host);
    o.count = kDecode;
    if (target.via_transfer) {
      // Only the sampling host has it and does not decode: its transfer sender moves it (the
      // outbox record is durable; the sender takes it at its next scan if the nudge is missed),
      // once the job is reopened at transfer (reopen()).
      o.task.set_input_path(fs::relative(lat, c_.artifact_root).generic_string());
      o.sender = holders.front();
      o.state = state::JobState::kTransfer;
    } else {
      o.stream = worker::stream_for(config::StageKind::kDecode, target.host);
      o.state = state::JobState::kDecode;
    }
  }

  state::Store& store_;
  const config::Cluster& c_;
  const std::string& run_id_;
  const state::ResumeJob& job_;
  const std::set<std::string>& here_;
  std::optional<std::vector<pb::StageRecord>> hist_;
};

// Reopened through the state machine: the run's counters follow (a done job whose files are gone
// leaves done), attempts and the error are cleared, and the task is enqueued with it (or handed to
// the transfer sender that holds its latent).
Status reopen(state::Store& store, const config::Cluster& c, const Reopen& o) {
  std::string payload;
  o.task.SerializeToString(&payload);
  H3_TRY(store.apply(
      state::Store::reopen_move(o.task.run_id(), o.task.job_id(), o.state, o.stream, payload)));
  if (o.sender.empty()) return {};
  H3_TRY(transfer::notify_latent_ready(transfer::notify_endpoint(c, o.sender), o.task,
                                       transfer::outbox_dir(c, o.sender)));
  return {};
}

}  // namespace

Result<ResumeOutcome> resume_run(queue::Redis& r, const config::Cluster& c,
                                 const std::string& run_id) {
  ResumeOutcome out;
  state::Store store(r);
  // The run's status, its cancel flag cleared first (nothing resumed is dropped by a cancel),
  // its jobs and which of them a task on a stream will still run (state/resume.h).
  auto plan = state::begin_resume(r, run_id, stage_streams(c));
  if (!plan.ok()) return plan.error();
  if (plan->jobs.empty()) {
    out.no_jobs = true;
    return out;
  }
  const std::set<std::string> here = hosts_on_this_disk(c);
  for (const auto& j : plan->jobs) {
    // The run's resume lock (state::ResumeLock, held by the plan) stays this resume's throughout.
    if (auto held = plan->lock->refresh(); !held.ok()) return held.error();
    if (!j.spec) continue;  // rejected at submission: nothing to resume
    JobResume job(store, c, run_id, j, here);
    auto done = job.finished();
    if (!done.ok()) return prefixed(done.error(), j.job_id);
    if (*done) {
      out.counts[kDone]++;
      continue;
    }
    // A job with its task on a stream is left to it, unless it is terminal (ResumeJob).
    if (j.left_to_its_task) {
      out.counts[kInFlight]++;
      continue;
    }
    auto next = job.where_it_resumes(r);
    if (!next.ok()) return prefixed(next.error(), j.job_id);
    if (next->kind == Reopen::kNoDecodePool) {
      out.no_decode_pool = j.job_id;
      return out;
    }
    out.counts[next->count]++;
    if (next->kind == Reopen::kLeftToHolder) {
      out.notes.push_back(fmt::format("resume {}: its latent is on host {}; run resume there",
                                      j.job_id, next->holder));
      continue;
    }
    if (auto reopened = reopen(store, c, *next); !reopened.ok())
      return prefixed(reopened.error(), j.job_id);
  }
  return out;
}

std::string ResumeOutcome::summary(const std::string& run_id) const {
  return fmt::format(
      "resume {}: {} done, {} in flight, re-enqueued {} encode, {} sample, {} decode{}", run_id,
      counts[0], counts[1], counts[2], counts[3], counts[4],
      counts[5] ? fmt::format(", {} left to the hosts that hold their latents", counts[5])
                : std::string());
}

nlohmann::json ResumeOutcome::to_json(const std::string& run_id) const {
  return {{"run_id", run_id},           {"done", counts[0]},   {"in_flight", counts[1]},
          {"encode", counts[2]},        {"sample", counts[3]}, {"decode", counts[4]},
          {"left_to_hosts", counts[5]}, {"notes", notes},      {"summary", summary(run_id)}};
}

}  // namespace h3pipe::api
