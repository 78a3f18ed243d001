#pragma once
// The stage worker's ports in memory (common/worker/ports.h, engine.h), for unit tests of the
// engine (tests/worker/stage_engine_test.cpp) and of the worker's loop
// (stage_worker_unit_test.cpp):
//   MemoryLedger  the job state machine (the same transition table, state::judge, that
//                 Store::apply hands its Lua script; job_state_redis_test checks the two agree)
//                 and an entry set standing for this consumer's pending entries;
//   MemoryFiles   the artifact files;
//   MemoryTasks   a stage stream: entries in order, claimed into the ledger's pending set;
//   MemoryGpu     a GPU group's lease, held by this pool or by "another" one;
//   MemoryIntake  the submit stream and the job records submissions become (Ingest's port).
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "common/config/config.h"
#include "common/spec/spec.h"
#include "common/state/job_state.h"
#include "common/worker/engine.h"
#include "common/worker/ports.h"

namespace h3pipe::test_support {

using state::Applied;
using state::JobState;
using worker::Claimed;

struct Job {
  JobState state = JobState::kNone;
  long long attempts = 0;
  std::string error;
  long long exec = 0, wrote = 0;
  std::string handed_back;  // why it was handed back at scale-in
  std::vector<pb::StageRecord> history;
  std::string receipt;  // the receipt the completion kept in Redis (state/receipts.h)
};

// The ledger in memory: the same table, the same counters, an entry set standing for the PEL.
class MemoryLedger final : public worker::Ledger {
 public:
  std::map<std::string, Job> jobs;
  std::set<std::string> pending;  // entries this consumer holds
  std::set<std::string> lost;     // entries whose lease a renewal found lost
  std::vector<std::pair<std::string, std::string>> enqueued;  // (stream, payload)
  std::vector<std::string> dead;                              // dead-letter reasons
  std::map<std::string, int> retries;                         // entry -> backoff asked
  bool cancelled = false;
  int cancel_polls = 0;
  std::map<std::string, long long> illegal;  // "from>to" -> count
  std::function<void()> after_start;         // what happens between the start and what follows

  Result<state::Attempt> start(const pb::StageTask& t, const std::string& id) override {
    Job& j = jobs[t.job_id()];
    state::Attempt a;
    const JobState to = state::stage_state(t.stage());
    a.from = j.state;
    if (state::judge(state::Event::kStart, j.state, to) != state::Verdict::kApply) {
      a.refused = true;
      pending.erase(id);
      illegal[std::string(state::job_state_name(j.state)) + ">" + state::job_state_name(to)]++;
      return a;
    }
    j.state = to;
    a.number = ++j.attempts;
    a.cancelled = cancelled;
    a.last_error = j.error;
    if (after_start) after_start();
    return a;
  }
  Result<state::Moved> apply(state::Move m, const std::string& id) override {
    if (!pending.count(id)) return state::Moved{Applied::kLeaseLost, JobState::kNone};
    if (m.only_while_cancelled && !cancelled)
      return state::Moved{Applied::kNotCancelled, JobState::kNone};
    Job& j = jobs[m.job_id];
    const JobState from = j.state;
    pending.erase(id);
    const auto v = state::judge(m.event, from, m.to);
    if (v == state::Verdict::kRefuse) {
      illegal[std::string(state::job_state_name(from)) + ">" + state::job_state_name(m.to)]++;
      return state::Moved{Applied::kRefused, from};
    }
    run(m.record, j);
    if (v == state::Verdict::kAlreadyPast) return state::Moved{Applied::kAlreadyPast, from};
    j.state = m.to;
    run(m.next, j);
    return state::Moved{Applied::kApplied, from};
  }
  Status dead_letter_entry(const Claimed& c, const std::string& reason) override {
    pending.erase(c.entry_id);
    dead.push_back(reason);
    return {};
  }
  Status retry_later(const std::string& id, int backoff_ms) override {
    retries[id] = backoff_ms;
    return {};
  }
  void note_exec(const pb::StageTask& t) override { jobs[t.job_id()].exec++; }
  void note_error(const pb::StageTask& t, const std::string& why) override {
    jobs[t.job_id()].error = why;
  }
  Result<bool> run_cancelled(const std::string&) override {
    ++cancel_polls;
    return cancelled;
  }
  bool lease_lost(const std::string& id) override { return lost.count(id) > 0; }
  void note_handed_back(const pb::StageTask& t, const std::string& why) override {
    jobs[t.job_id()].handed_back = why;
  }

 private:
  // What the move does (state/move_ops.h), done to the job in memory.
  void run(const state::Ops& ops, Job& j) {
    for (const auto& o : ops) std::visit(Apply{*this, j}, o);
  }
  struct Apply {
    MemoryLedger& l;
    Job& j;
    void operator()(const state::op::RecordStage& o) { j.history.push_back(o.record); }
    void operator()(const state::op::CountWritten&) { j.wrote++; }
    void operator()(const state::op::KeepReceipt& o) { j.receipt = o.json; }
    void operator()(const state::op::Enqueue& o) { l.enqueued.emplace_back(o.stream, o.payload); }
    void operator()(const state::op::SetError& o) { j.error = o.text; }
    void operator()(const state::op::DeadLetter& o) { l.dead.push_back(o.reason); }
    void operator()(const state::op::ClearAttempts&) {
      j.attempts = 0;
      j.error.clear();
    }
    void operator()(const state::op::RegisterRejected& o) { j.error = o.reason; }
  };
};

class MemoryFiles final : public worker::Files {
 public:
  std::map<std::string, std::string> sha;  // path -> sha of a present, verified artifact
  std::set<std::string> corrupt;
  bool fit = true;
  int receipts = 0;
  Result<std::string> verify(const std::filesystem::path&,
                             const std::filesystem::path& p) override {
    if (corrupt.count(p.string()))
      return make_error(errc::artifact::kMismatch, "{}: sha mismatch", p.string());
    auto it = sha.find(p.string());
    if (it == sha.end()) return make_error(errc::artifact::kMissing, "{}: missing", p.string());
    return it->second;
  }
  void remove(const std::filesystem::path& p) override { corrupt.erase(p.string()); }
  Result<std::uint64_t> size(const std::filesystem::path&) override { return std::uint64_t{10}; }
  Status make_dirs(const std::filesystem::path&, const std::filesystem::path&) override {
    return {};
  }
  Status fits(const std::filesystem::path& p, const latent::Expected&) override {
    if (fit) return {};
    return make_error(errc::latent::kProfile, "{}: another profile", p.string());
  }
  Result<std::string> write_receipt(const pb::StageTask& t, const pb::StageRecord&) override {
    ++receipts;
    return std::string(receipt_text.empty() ? "{\"jobId\":\"" + t.job_id() + "\"}" : receipt_text);
  }
  std::string receipt_text;  // what write_receipt returns (default: a small JSON naming the job)
};

// A stage stream in memory: entries in order; a take() moves the first into the ledger's pending
// set (the PEL), and one handed back (retry_later, hand_back_ahead) is taken again.
class MemoryTasks final : public worker::TaskSource {
 public:
  explicit MemoryTasks(MemoryLedger& ledger) : ledger_(ledger) {}
  std::deque<std::pair<std::string, std::string>> stream;  // (entry id, payload), undelivered
  std::optional<worker::Taken> ahead;  // a task claimed ahead by the last completion
  std::set<std::string> held;          // entries whose lease is renewed now
  std::vector<std::string> taken_ids;  // every entry handed out, in order
  worker::ClaimPolicy policy;          // the dispatch policy this source asks
  int asked = 0;                       // times may_claim was asked
  int rechecks = 0;                    // recheck_own() calls
  int handed_back_ahead = 0;
  std::optional<Error> fail_next;  // the next visible()/take() fails with this (Redis went away)

  void add(std::string id, std::string payload) {
    stream.emplace_back(std::move(id), std::move(payload));
  }
  Result<bool> visible() override {
    if (auto e = std::exchange(fail_next, std::nullopt)) return *e;
    return !stream.empty() || ahead.has_value();
  }
  Result<worker::Claim> take() override {
    if (auto e = std::exchange(fail_next, std::nullopt)) return *e;
    if (ahead) return hand_out(*std::exchange(ahead, std::nullopt));
    ++asked;
    if (!policy.may_claim()) return worker::Claim{std::nullopt, true};
    if (stream.empty()) return worker::Claim{};
    worker::Taken t;
    std::tie(t.entry.id, t.entry.payload) = std::move(stream.front());
    stream.pop_front();
    return hand_out(std::move(t));
  }
  void wait_after_refusal(std::chrono::milliseconds d) override {
    if (policy.idle_wait) policy.idle_wait(d);
  }
  // No claim is folded into a completion here (the Claimer's, over Redis: claimer_test).
  void fold_into(state::Move&) override {}
  void folded(std::optional<state::ClaimedStart>) override {}
  void hold(const std::string& id) override { held.insert(id); }
  void let_go(const std::string& id) override { held.erase(id); }
  bool claimed_ahead() const override { return ahead.has_value(); }
  Status hand_back_ahead() override {
    if (!ahead) return {};
    ++handed_back_ahead;
    ledger_.pending.erase(ahead->entry.id);
    stream.emplace_front(ahead->entry.id, ahead->entry.payload);
    ahead.reset();
    return {};
  }
  void recheck_own() override { ++rechecks; }
  Result<long long> depth() override { return static_cast<long long>(stream.size()); }

 private:
  Result<worker::Claim> hand_out(worker::Taken t) {
    ledger_.pending.insert(t.entry.id);
    taken_ids.push_back(t.entry.id);
    return worker::Claim{std::move(t)};
  }
  MemoryLedger& ledger_;
};

// A GPU group's lease: free, held by this pool, or held by another pool of the group.
class MemoryGpu final : public worker::GpuGate {
 public:
  bool other_holds = false;  // another pool of the group runs now
  bool held = false;
  int acquires = 0;
  std::vector<int> released;  // then_rank of each release
  Result<bool> acquire() override {
    ++acquires;
    if (other_holds) return false;
    held = true;
    return true;
  }
  void release(int then_rank) override {
    held = false;
    released.push_back(then_rank);
  }
};

// Submissions and the jobs they become, in memory: jobs keyed "run/job" hold their spec as
// spec::to_json wrote it.
class MemoryIntake final : public worker::Intake {
 public:
  std::deque<queue::Entry> submissions;     // undelivered, in order
  std::vector<std::string> acked;           // entries acknowledged (done), in order
  std::map<std::string, std::string> jobs;  // "run/job" -> spec JSON
  std::vector<std::string> encode_tasks;    // payloads, in order
  std::vector<std::tuple<std::string, std::string, std::string>> rejected;  // run, job, why
  std::vector<std::pair<std::string, state::Refusal>> refused;              // run, refusal
  std::optional<Error> fail_accept;  // the next accept_job fails with this (Redis went away)
  long long dead = 0;

  // A submission entry: XADD h3pipe:submit * run RUN spec JSON (a field left out when nullopt).
  void submit(std::string id, std::optional<std::string> run, std::optional<std::string> spec) {
    queue::Entry e;
    e.id = std::move(id);
    if (run) e.fields["run"] = *run;
    if (spec) e.fields["spec"] = *spec;
    submissions.push_back(std::move(e));
  }
  Result<std::optional<queue::Entry>> next() override {
    if (submissions.empty()) return std::optional<queue::Entry>();
    queue::Entry e = std::move(submissions.front());
    submissions.pop_front();
    return std::optional<queue::Entry>(std::move(e));
  }
  Status done(const queue::Entry& e) override {
    acked.push_back(e.id);
    return {};
  }
  Result<bool> job_exists(const std::string& run, const std::string& job) override {
    return jobs.count(run + "/" + job) > 0;
  }
  Result<std::string> job_spec(const std::string& run, const std::string& job) override {
    auto it = jobs.find(run + "/" + job);
    return it == jobs.end() ? std::string() : it->second;
  }
  Result<bool> accept_job(const std::string& run, const pb::JobSpec& spec,
                          const std::string& payload) override {
    if (auto e = std::exchange(fail_accept, std::nullopt)) return *e;
    if (!jobs.emplace(run + "/" + spec.job_id(), spec::to_json(spec)).second) return false;
    encode_tasks.push_back(payload);
    return true;
  }
  Status reject_job(const std::string& run, const std::string& job,
                    const std::string& why) override {
    rejected.emplace_back(run, job, why);
    return {};
  }
  Status refuse_submission(const std::string& run, const state::Refusal& r) override {
    refused.emplace_back(run, r);
    return {};
  }
  Result<long long> dead_letters() override { return dead; }
};

// A cluster of one host h1 with a pool per stage (enc, samp, dec), roots /art and /out, three
// deliveries and a 100 ms retry backoff.
inline config::Cluster stage_cluster() {
  config::Cluster c;
  c.artifact_root = "/art";
  c.output_root = "/out";
  c.queue.max_deliveries = 3;
  c.queue.retry_backoff_ms = 100;
  for (auto [name, kind] : {std::pair{"enc", config::StageKind::kEncode},
                            {"samp", config::StageKind::kSample},
                            {"dec", config::StageKind::kDecode}}) {
    config::Pool p;
    p.name = name;
    p.host = "h1";
    p.stage = kind;
    c.pools.push_back(p);
  }
  return c;
}

// A task of run r1 for job `job` at `stage`, with a spec that passes the submission's rules (the
// engine checks every task's: issue #22).
inline pb::StageTask stage_task(pb::Stage stage, const std::string& job) {
  pb::StageTask t;
  t.set_run_id("r1");
  t.set_job_id(job);
  t.set_stage(stage);
  auto* s = t.mutable_spec();
  s->set_job_id(job);
  s->set_prompt("p");
  s->set_width(64);
  s->set_height(64);
  s->set_frames(9);
  s->set_fps(24);
  s->set_steps(4);
  return t;
}

}  // namespace h3pipe::test_support
