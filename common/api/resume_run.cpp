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

}  // namespace

Result<ResumeOutcome> resume_run(queue::Redis& r, const config::Cluster& cluster,
                                 const std::string& run_id) {
  const config::Cluster* c = &cluster;
  ResumeOutcome out;
  auto prefixed = [](Error e, const std::string& job) {
    e.message = "resume " + job + ": " + e.message;
    return e;
  };
  state::Store store(r);
  // Outstanding tasks: on the stage streams of this config (stream names follow from it and
  // worker/, which the state module does not use).
  std::vector<std::string> streams = {worker::stream_for(config::StageKind::kEncode, ""),
                                      worker::stream_for(config::StageKind::kSample, "")};
  for (const auto* p : c->pools_on("", config::StageKind::kDecode))
    streams.push_back(worker::stream_for(config::StageKind::kDecode, p->host));
  // GPU groups' own sample streams (an encoder on a sampler's GPUs sends its jobs there).
  for (const auto* p : c->pools_on("", config::StageKind::kSample))
    if (const std::string g = worker::gpu_group(*c, *p); !g.empty())
      streams.push_back(worker::group_sample_stream(g));
  // The run's status, its cancel flag cleared first (nothing resumed is dropped by a cancel),
  // its jobs and which of them a task on a stream will still run (state/resume.h).
  auto plan = state::begin_resume(r, run_id, streams);
  if (!plan.ok()) return plan.error();
  if (plan->jobs.empty()) {
    out.no_jobs = true;
    return out;
  }

  const std::set<std::string> here = hosts_on_this_disk(*c);
  int* counts = out.counts;
  for (const auto& j : plan->jobs) {
    // The run's resume lock (state::ResumeLock, held by the plan) stays this resume's throughout.
    if (auto held = plan->lock->refresh(); !held.ok()) return held.error();
    if (!j.spec) continue;  // rejected at submission: nothing to resume
    // The job's history, read when an output is not on this disk.
    std::optional<std::vector<pb::StageRecord>> hist;
    const auto history = [&]() -> Result<const std::vector<pb::StageRecord>*> {
      if (!hist) {
        auto h = store.history(run_id, j.job_id);
        if (!h.ok()) return h.error();
        hist = std::move(*h);
      }
      return &*hist;
    };
    // Committed on a host whose disk is not this one, as the history records it.
    const auto committed_elsewhere = [&](pb::Stage s) -> Result<std::optional<pb::StageRecord>> {
      auto h = history();
      if (!h.ok()) return h.error();
      auto rec = state::completion(**h, s);
      if (rec && !rec->host().empty() && !here.count(rec->host())) return rec;
      return std::optional<pb::StageRecord>();
    };
    auto mp4 = paths::mp4(*c, run_id, j.job_id);
    auto rec = paths::receipt(*c, run_id, j.job_id);
    if (mp4.ok() && rec.ok() && artifacts::verify(*mp4).ok() && artifacts::verify(*rec).ok()) {
      counts[0]++;
      continue;
    }
    if (j.state == state::job_state_name(state::JobState::kDone)) {
      auto decoded = committed_elsewhere(pb::STAGE_DECODE);
      if (!decoded.ok()) return prefixed(decoded.error(), j.job_id);
      if (*decoded) {
        counts[0]++;  // its MP4 is on the decode host, which checks it when it resumes
        continue;
      }
    }
    // A job with its task on a stream is left to it, unless it is terminal (ResumeJob).
    if (j.left_to_its_task) {
      counts[1]++;
      continue;
    }
    pb::StageTask t;
    t.set_run_id(run_id);
    t.set_job_id(j.job_id);
    *t.mutable_spec() = *j.spec;
    t.set_enqueued_unix_ms(state::now_ms());
    std::string stream, sender;
    state::JobState st = state::JobState::kEncode;
    bool via_transfer = false;
    auto h = history();
    if (!h.ok()) return prefixed(h.error(), j.job_id);
    auto lat = paths::latent(*c, run_id, j.job_id);
    const bool latent_here = lat.ok() && artifacts::verify(*lat).ok();
    auto holders = latent_holders(**h);
    if (!latent_here) {
      // Not on this disk: the other hosts that hold it, when its sampling committed.
      if (!state::completion(**h, pb::STAGE_SAMPLE)) holders.clear();
      std::erase_if(holders, [&](const std::string& x) { return here.count(x) > 0; });
    }
    bool encoded = false;  // the conditioning is here, or committed on another host
    if (!latent_here && holders.empty()) {
      auto cond = paths::conditioning(*c, run_id, j.job_id);
      encoded = cond.ok() && artifacts::verify(*cond).ok();
      if (!encoded) {
        auto e = committed_elsewhere(pb::STAGE_ENCODE);
        if (!e.ok()) return prefixed(e.error(), j.job_id);
        encoded = e->has_value();
      }
    }
    if (latent_here || !holders.empty()) {
      // The decode goes where the latent is (or will be): the hosts the job's history says hold
      // it, through the one decode-host choice (worker/decode_choice.h).
      state::RedisPoolBoardStore board(r);
      auto target = worker::resume_decode_target(*c, holders, t, &board);
      if (target.host.empty()) {
        out.no_decode_pool = j.job_id;
        return out;
      }
      if (!latent_here && target.via_transfer) {
        // Only the sampling host's transfer sender can move it: its outbox is on that host.
        out.notes.push_back(fmt::format("resume {}: its latent is on host {}; run resume there",
                                        j.job_id, holders.front()));
        counts[5]++;
        continue;
      }
      t.set_stage(pb::STAGE_DECODE);
      t.set_target_host(target.host);
      if (target.via_transfer) {
        // Only the sampling host has it and does not decode: its transfer sender moves it (the
        // outbox record is durable; the sender takes it at its next scan if the nudge is missed),
        // once the job is reopened at transfer below.
        t.set_input_path(fs::relative(*lat, c->artifact_root).generic_string());  // lat verified
        sender = holders.front();
        via_transfer = true;
        st = state::JobState::kTransfer;
      } else {
        stream = worker::stream_for(config::StageKind::kDecode, target.host);
        st = state::JobState::kDecode;
      }
      counts[4]++;
    } else if (encoded) {
      t.set_stage(pb::STAGE_SAMPLE);
      stream = worker::stream_for(config::StageKind::kSample, "");
      st = state::JobState::kSample;
      counts[3]++;
    } else {
      t.set_stage(pb::STAGE_ENCODE);
      stream = worker::stream_for(config::StageKind::kEncode, "");
      counts[2]++;
    }
    std::string payload;
    t.SerializeToString(&payload);
    // Reopened through the state machine: the run's counters follow (a done job whose files are
    // gone leaves done), attempts and the error are cleared, and the task is enqueued with it.
    auto moved = store.apply(
        state::Store::reopen_move(run_id, j.job_id, st, via_transfer ? "" : stream, payload));
    if (!moved.ok()) return prefixed(moved.error(), j.job_id);
    if (via_transfer) {
      auto sent = transfer::notify_latent_ready(transfer::notify_endpoint(*c, sender), t,
                                                transfer::outbox_dir(*c, sender));
      if (!sent.ok()) return prefixed(sent.error(), j.job_id);
    }
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
