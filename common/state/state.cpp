#include "common/state/state.h"

#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "common/config/stages.h"
#include "common/core/json_parse.h"
#include "common/queue/reply.h"
#include "common/spec/spec.h"
#include "common/state/move_commands.h"
#include "common/state/run_commands.h"
#include "common/state/scripts.h"

namespace h3pipe::state {
using queue::reply_int;
using queue::reply_str;

const char* stage_key(pb::Stage s) {
  const auto* d = config::find_stage(s);
  return d ? d->name.data() : "unknown";  // the table's names are literals: NUL-terminated
}

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string new_run_id() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  // 48 random bits: the API names every POST /v1/videos with one, and two requests given the
  // same id become one run (24 bits collided in ~0.7% of seconds at 500 requests/s).
  std::random_device rd;
  const std::uint64_t suffix = (std::uint64_t{rd()} << 16 ^ rd()) & 0xffffffffffffULL;
  return fmt::format("r-{:04d}{:02d}{:02d}-{:02d}{:02d}{:02d}-{:012x}", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, suffix);
}

namespace {

std::string csv(const std::vector<JobState>& states) {
  std::string out;
  for (JobState s : states) out += (out.empty() ? "" : ",") + std::string(job_state_name(s));
  return out;
}

void flatten_into(std::vector<std::string>& args, const queue::Commands& cmds) {
  args.push_back(std::to_string(cmds.size()));
  for (const auto& c : cmds) {
    args.push_back(std::to_string(c.size()));
    args.insert(args.end(), c.begin(), c.end());
  }
}

JobState state_of(const redisReply* r) {
  return parse_job_state(reply_str(r)).value_or(JobState::kNone);
}

}  // namespace

const char* applied_name(Applied a) {
  switch (a) {
    case Applied::kLeaseLost:
      return "lease lost";
    case Applied::kApplied:
      return "applied";
    case Applied::kRefused:
      return "refused";
    case Applied::kAlreadyPast:
      return "already past";
    case Applied::kNotCancelled:
      return "run no longer cancelled";
  }
  return "?";
}

std::map<std::string, long long> RunStatus::stage_jobs() const {
  auto in = [&](const char* s) {
    auto it = in_state.find(s);
    return it == in_state.end() ? 0LL : it->second;
  };
  const long long done_n = in("done"), decode = in("decode") + done_n,
                  sample = in("transfer") + decode;
  return {{"encode", in("sample") + sample}, {"sample", sample}, {"decode", done_n}};
}

queue::Commands create_run_commands(const std::string& run_id,
                                    const std::vector<std::string>& job_ids) {
  std::vector<std::string> sadd = {"SADD", keys::run_expected(run_id)};
  sadd.insert(sadd.end(), job_ids.begin(), job_ids.end());
  queue::Commands cmds = {{"HSETNX", keys::run(run_id), "created_ms", std::to_string(now_ms())},
                          {"ZADD", keys::runs(), "NX", std::to_string(now_ms()), run_id}};
  if (!job_ids.empty()) cmds.push_back(sadd);
  return cmds;
}

Status Store::create_run(const std::string& run_id, const std::vector<std::string>& job_ids) {
  auto r = redis_.pipeline(create_run_commands(run_id, job_ids));
  if (!r.ok()) return r.error();
  return {};
}

Result<bool> Store::accept_job(const std::string& run_id, const pb::JobSpec& s,
                               const std::string& payload, const std::string& stream) {
  std::vector<std::string> args = {spec::to_json(s), std::to_string(now_ms()), s.job_id(), payload,
                                   run_id};
  for (auto& f :
       queue::events::fields({.type = std::string(queue::events::kQueued), .job = s.job_id()}))
    args.push_back(std::move(f));
  auto r = redis_.eval(
      kAcceptScript,
      {keys::job(run_id, s.job_id()), keys::run(run_id), keys::run_jobs(run_id), keys::runs(),
       stream.empty() ? keys::stream("encode") : stream, keys::run_events(run_id)},
      args);
  if (!r.ok()) return r.error();
  return reply_int(r->get()) == 1;
}

Status Store::reject_job(const std::string& run_id, const std::string& job_id,
                         const std::string& reason) {
  Move m;
  m.run_id = run_id;
  m.job_id = job_id;
  m.event = Event::kReject;
  m.to = JobState::kFailed;
  m.next = {op::RegisterRejected{reason, now_ms()}};
  m.announce.push_back(
      {.type = std::string(queue::events::kFailed), .job = job_id, .reason = reason});
  auto moved = apply(m);
  if (!moved.ok()) return moved.error();
  if (moved->code != Applied::kApplied)
    return make_error(errc::state::kRefused,
                      "run {} job {}: a rejection of a job that exists ({}) was refused", run_id,
                      job_id, job_state_name(moved->from));
  return {};
}

Status Store::refuse_submission(const std::string& run_id, const Refusal& rf) {
  const nlohmann::json j = {{"submission", rf.submission},
                            {"job_id", rf.job_id},
                            {"reason", rf.reason},
                            {"at_ms", rf.at_ms ? rf.at_ms : now_ms()}};
  auto r =
      redis_.pipeline({{"RPUSH", keys::run_refused(run_id), j.dump()},
                       {"LTRIM", keys::run_refused(run_id), std::to_string(-kRefusedKept), "-1"},
                       {"HINCRBY", keys::run(run_id), "refused", "1"}});
  if (!r.ok()) return r.error();
  return {};
}

Result<std::vector<Refusal>> Store::refused(const std::string& run_id) {
  auto r = redis_.command({"LRANGE", keys::run_refused(run_id), "0", "-1"});
  if (!r.ok()) return r.error();
  std::vector<Refusal> out;
  for (std::size_t i = 0; i < r->get()->elements; ++i) {
    std::string why;
    const auto j = json_reader::parse_limited(reply_str(r->get()->element[i]), {}, &why)
                       .value_or(nlohmann::json());
    if (!j.is_object()) continue;
    out.push_back({j.value("submission", ""), j.value("job_id", ""), j.value("reason", ""),
                   j.value("at_ms", 0LL)});
  }
  return out;
}

namespace {

// kStartScript's reply from element `at` on (claim_and_start's comes after the claimed entry).
Result<Attempt> parse_attempt(const redisReply* a, std::size_t at) {
  if (a->type != REDIS_REPLY_ARRAY || a->elements < at + 5)
    return make_error(errc::redis::kReply, "start: unexpected reply");
  Attempt out;
  out.refused = reply_int(a->element[at]) == 2;
  out.from = state_of(a->element[at + 1]);
  out.number = reply_int(a->element[at + 2]);
  out.cancelled = reply_str(a->element[at + 3]) == "1";
  out.last_error = reply_str(a->element[at + 4]);
  pb::StageTask next;
  if (a->elements >= at + 7 && next.ParseFromString(reply_str(a->element[at + 6])) &&
      !next.run_id().empty() && !next.job_id().empty())
    out.next = NextEntry{reply_str(a->element[at + 5]), next.run_id(), next.job_id()};
  return out;
}

}  // namespace

Result<Attempt> Store::start_attempt(const std::string& run_id, const std::string& job_id,
                                     pb::Stage s, const std::optional<QueueAck>& entry, bool peek) {
  const JobState to = stage_state(s);
  std::vector<std::string> keys_ = {keys::job(run_id, job_id), keys::run(run_id)};
  std::vector<std::string> args = {job_state_name(to),
                                   csv(states_with(Event::kStart, to, Verdict::kApply)),
                                   std::string("attempts:") + stage_key(s)};
  if (entry) {
    keys_.push_back(entry->stream);
    args.insert(args.end(), {entry->group, entry->consumer, entry->entry_id, peek ? "1" : "0"});
  }
  auto r = redis_.eval(kStartScript, keys_, args);
  if (!r.ok()) return r.error();
  return parse_attempt(r->get(), 0);
}

Result<std::optional<ClaimedStart>> Store::claim_and_start(const QueueAck& q,
                                                           const NextEntry& expected, pb::Stage s) {
  const JobState to = stage_state(s);
  auto r = redis_.eval(
      kClaimStartScript,
      {q.stream, keys::job(expected.run_id, expected.job_id), keys::run(expected.run_id),
       q.share_key.empty() ? keys::claim_share(q.stream) : q.share_key},
      {q.group, q.consumer, expected.entry_id, job_state_name(to),
       csv(states_with(Event::kStart, to, Verdict::kApply)),
       std::string("attempts:") + stage_key(s), q.claim_order});
  if (!r.ok()) return r.error();
  const redisReply* a = r->get();
  if (a->type != REDIS_REPLY_ARRAY || a->elements == 0) return std::optional<ClaimedStart>();
  if (a->elements < 2) return make_error(errc::redis::kReply, "claim: unexpected reply");
  ClaimedStart out{reply_str(a->element[0]), reply_str(a->element[1]), std::nullopt};
  if (a->elements > 2) {
    auto at = parse_attempt(a, 2);
    if (!at.ok()) return at.error();
    out.attempt = std::move(*at);
  }
  return std::optional<ClaimedStart>(std::move(out));
}

Status Store::load_scripts() {
  auto r = redis_.pipeline({{"SCRIPT", "LOAD", kApplyScript},
                            {"SCRIPT", "LOAD", kStartScript},
                            {"SCRIPT", "LOAD", kClaimStartScript},
                            {"SCRIPT", "LOAD", kApplyClaimScript},
                            {"SCRIPT", "LOAD", kAcceptScript}});
  if (!r.ok()) return r.error();
  return {};
}

Result<Moved> Store::apply(const Move& m) {
  std::vector<std::string> keys_ = {keys::job(m.run_id, m.job_id), keys::run(m.run_id)};
  std::vector<std::string> args = {
      job_state_name(m.to), csv(states_with(m.event, m.to, Verdict::kApply)),
      csv(states_with(m.event, m.to, Verdict::kAlreadyPast)), m.ack ? "1" : "0"};
  if (m.ack) {
    keys_.push_back(m.ack->stream);
    args.insert(args.end(), {m.ack->group, m.ack->consumer, m.ack->entry_id});
  } else {
    args.insert(args.end(), {"", "", ""});
  }
  args.push_back(m.only_while_cancelled ? "cancelled" : "");
  const bool claim = m.ack && m.then_claim;
  if (claim) {
    const ClaimNext& c = *m.then_claim;
    const bool known = !c.expected.entry_id.empty();
    const JobState to = stage_state(c.stage);
    keys_.push_back(known ? keys::job(c.expected.run_id, c.expected.job_id) : keys_[0]);
    keys_.push_back(known ? keys::run(c.expected.run_id) : keys_[1]);
    keys_.push_back(m.ack->share_key.empty() ? keys::claim_share(m.ack->stream) : m.ack->share_key);
    args.insert(args.end(),
                {c.sweep_idle_ms > 0 ? std::to_string(c.sweep_idle_ms) : "", c.expected.entry_id,
                 job_state_name(to), csv(states_with(Event::kStart, to, Verdict::kApply)),
                 std::string("attempts:") + stage_key(c.stage), m.ack->claim_order});
  }
  flatten_into(args, op_commands(m.run_id, m.job_id, m.record));
  queue::Commands next = op_commands(m.run_id, m.job_id, m.next);
  for (const auto& e : m.announce) {
    next.push_back(queue::events::run_xadd(m.run_id, e));
    if (queue::events::is_terminal(e.type))
      next.push_back(queue::events::terminal_xadd(m.run_id, e));
  }
  flatten_into(args, next);
  auto r = redis_.eval(claim ? kApplyClaimScript : kApplyScript, keys_, args);
  if (!r.ok()) return r.error();
  const redisReply* a = r->get();
  if (a->type != REDIS_REPLY_ARRAY || a->elements < 2)
    return make_error(errc::redis::kReply, "apply: unexpected reply");
  Moved moved{static_cast<Applied>(reply_int(a->element[0])), state_of(a->element[1])};
  if (claim && a->elements >= 5) {
    ClaimedStart c{reply_str(a->element[2]), reply_str(a->element[3]), std::nullopt,
                   reply_int(a->element[4]) == 1};
    if (a->elements > 5) {
      auto at = parse_attempt(a, 5);
      if (!at.ok()) return at.error();
      c.attempt = std::move(*at);
    }
    moved.claimed = std::move(c);
  }
  // A stage completion a failover must not lose: WAIT for the configured replicas.  That is a
  // move that acks a stream entry (a worker's), and an advance that acks none (the transfer
  // service's hand-off) unless it was refused.  Fewer is not a failure (the move stands on the
  // primary; a failover before it replicates is redone from the artifacts, each stage being
  // idempotent): the caller sees the count.
  const bool completion = m.ack || (m.event == Event::kAdvance && moved.code != Applied::kRefused);
  if (completion && redis_.address().wait_replicas > 0) {
    auto w = redis_.wait_replicated();
    moved.replicas = w.ok() ? *w : 0;
  }
  return moved;
}

Status Store::note_exec(const std::string& run_id, const std::string& job_id, pb::Stage s) {
  return redis_.send(
      {"HINCRBY", keys::job(run_id, job_id), std::string("exec:") + stage_key(s), "1"});
}

Status Store::note_error(const std::string& run_id, const std::string& job_id, pb::Stage s,
                         const std::string& reason) {
  auto r = redis_.command(
      {"HSET", keys::job(run_id, job_id), "error", fmt::format("{}: {}", stage_key(s), reason)});
  if (!r.ok()) return r.error();
  return {};
}

Status Store::note_handed_back(const std::string& run_id, const std::string& job_id, pb::Stage s,
                               const std::string& why) {
  const std::string job = keys::job(run_id, job_id);
  auto r = redis_.pipeline({{"HINCRBY", job, std::string("handed_back:") + stage_key(s), "1"},
                            {"HSET", job, "error", why}});
  if (!r.ok()) return r.error();
  return {};
}

Result<bool> Store::job_exists(const std::string& run_id, const std::string& job_id) {
  auto r = redis_.command({"EXISTS", keys::job(run_id, job_id)});
  if (!r.ok()) return r.error();
  return reply_int(r->get()) != 0;
}

Result<std::string> Store::job_spec(const std::string& run_id, const std::string& job_id) {
  auto r = redis_.command({"HGET", keys::job(run_id, job_id), "spec"});
  if (!r.ok()) return r.error();
  return reply_str(r->get());
}

Result<bool> Store::cancelled(const std::string& run_id) {
  auto r = redis_.command({"HGET", keys::run(run_id), "cancelled"});
  if (!r.ok()) return r.error();
  return reply_str(r->get()) == "1";
}

Status Store::cancel(const std::string& run_id) {
  auto r = redis_.command({"HSET", keys::run(run_id), "cancelled", "1"});
  if (!r.ok()) return r.error();
  return {};
}

Result<std::vector<pb::StageRecord>> Store::history(const std::string& run_id,
                                                    const std::string& job_id) {
  auto r = redis_.command({"LRANGE", keys::history(run_id, job_id), "0", "-1"});
  if (!r.ok()) return r.error();
  std::vector<pb::StageRecord> out;
  for (std::size_t i = 0; i < r->get()->elements; ++i) {
    pb::StageRecord rec;
    if (google::protobuf::util::JsonStringToMessage(reply_str(r->get()->element[i]), &rec).ok())
      out.push_back(rec);
  }
  return out;
}

Result<RunStatus> Store::run_status(const std::string& run_id) {
  auto r = redis_.command({"HGETALL", keys::run(run_id)});
  if (!r.ok()) return r.error();
  if (r->get()->elements == 0)
    return make_error(errc::run::kUnknown, "no run \"{}\" in this Redis", run_id);
  RunStatus s;
  s.run_id = run_id;
  for (std::size_t i = 0; i + 1 < r->get()->elements; i += 2) {
    std::string k = reply_str(r->get()->element[i]);
    long long v = reply_int(r->get()->element[i + 1]);
    if (k == "created_ms")
      s.created_ms = v;
    else if (k == "total")
      s.total = v;
    else if (k == "done")
      s.done = v;
    else if (k == "failed")
      s.failed = v;
    else if (k == "cancelled")
      s.cancelled = v == 1;
    else if (k == "jobs_cancelled")
      s.cancelled_jobs = v;
    else if (k == "illegal")
      s.illegal = v;
    else if (k == "refused")
      s.refused = v;
    else if (k.rfind("n:", 0) == 0)
      s.in_state[k.substr(2)] = v;
  }
  auto e = redis_.command({"SCARD", keys::run_expected(run_id)});
  if (!e.ok()) return e.error();
  s.expected = reply_int(e->get());
  return s;
}

Result<std::vector<JobStatus>> Store::jobs(const std::string& run_id) {
  auto ids = redis_.command({"ZRANGE", keys::run_jobs(run_id), "0", "-1"});
  if (!ids.ok()) return ids.error();
  std::vector<std::vector<std::string>> cmds;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < ids->get()->elements; ++i) {
    names.push_back(reply_str(ids->get()->element[i]));
    cmds.push_back({"HGETALL", keys::job(run_id, names.back())});
  }
  std::vector<JobStatus> out;
  if (cmds.empty()) return out;
  auto r = redis_.pipeline(cmds);
  if (!r.ok()) return r.error();
  for (std::size_t i = 0; i < names.size(); ++i) {
    JobStatus j;
    j.job_id = names[i];
    const redisReply* h = (*r)[i].get();
    for (std::size_t k = 0; h && k + 1 < h->elements; k += 2)
      j.fields[reply_str(h->element[k])] = reply_str(h->element[k + 1]);
    j.state = j.fields["state"];
    j.error = j.fields["error"];
    out.push_back(std::move(j));
  }
  return out;
}

Result<std::vector<std::string>> Store::runs(std::size_t limit) {
  auto r = redis_.command({"ZREVRANGE", keys::runs(), "0", std::to_string(limit - 1)});
  if (!r.ok()) return r.error();
  std::vector<std::string> out;
  for (std::size_t i = 0; i < r->get()->elements; ++i)
    out.push_back(reply_str(r->get()->element[i]));
  return out;
}

Move Store::advance_move(const std::string& run_id, const std::string& job_id,
                         const pb::StageRecord& rec, JobState to, const std::string& next_stream,
                         const std::string& next_payload) {
  Move m;
  m.run_id = run_id;
  m.job_id = job_id;
  m.event = Event::kAdvance;
  m.to = to;
  m.record = {op::RecordStage{rec}};
  if (!next_stream.empty()) m.next.push_back(op::Enqueue{next_stream, next_payload});
  queue::events::Event fin;
  fin.type = queue::events::kStageFinished;
  fin.job = job_id;
  fin.stage = stage_key(rec.stage());
  fin.host = rec.host();
  fin.pool = rec.pool();
  if (rec.attempts() > 0) fin.attempt = std::to_string(rec.attempts());
  m.announce.push_back(fin);
  if (to == JobState::kDone) {
    fin.type = queue::events::kCompleted;
    m.announce.push_back(fin);
  }
  return m;
}

Move Store::fail_move(const std::string& run_id, const std::string& job_id, pb::Stage s,
                      const std::string& reason,
                      const std::optional<std::string>& dead_letter_payload) {
  Move m;
  m.run_id = run_id;
  m.job_id = job_id;
  m.event = Event::kFail;
  m.to = JobState::kFailed;
  m.next = {op::SetError{fmt::format("{}: {}", stage_key(s), reason)}};
  if (dead_letter_payload) m.next.push_back(op::DeadLetter{s, reason, *dead_letter_payload});
  m.announce.push_back({.type = std::string(queue::events::kFailed),
                        .job = job_id,
                        .stage = stage_key(s),
                        .reason = fmt::format("{}: {}", stage_key(s), reason)});
  return m;
}

void Store::count_written(Move& m, pb::Stage s) {
  m.record.push_back(op::CountWritten{s});
}

Move Store::cancel_move(const std::string& run_id, const std::string& job_id, pb::Stage s) {
  Move m;
  m.run_id = run_id;
  m.job_id = job_id;
  m.event = Event::kCancel;
  m.to = JobState::kCancelled;
  m.only_while_cancelled = true;
  m.next = {op::SetError{
      fmt::format("cancelled at {}: the run was cancelled (h3pipe cancel)", stage_key(s))}};
  m.announce.push_back(
      {.type = std::string(queue::events::kCancelled),
       .job = job_id,
       .stage = stage_key(s),
       .reason = fmt::format("cancelled at {}: the run was cancelled", stage_key(s))});
  return m;
}

Move Store::reopen_move(const std::string& run_id, const std::string& job_id, JobState to,
                        const std::string& stream, const std::string& payload) {
  Move m;
  m.run_id = run_id;
  m.job_id = job_id;
  m.event = Event::kReopen;
  m.to = to;
  m.next = {op::ClearAttempts{}};
  if (!stream.empty()) m.next.push_back(op::Enqueue{stream, payload});
  return m;
}

}  // namespace h3pipe::state
