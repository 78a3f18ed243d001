#include "common/state/state.h"

#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <random>

#include "common/spec/spec.h"

namespace h3pipe::state {
using queue::reply_int;
using queue::reply_str;

const char* stage_key(pb::Stage s) {
  switch (s) {
    case pb::STAGE_ENCODE: return "encode";
    case pb::STAGE_SAMPLE: return "sample";
    case pb::STAGE_TRANSFER: return "transfer";
    case pb::STAGE_DECODE: return "decode";
    default: return "unknown";
  }
}

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_run_id() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::random_device rd;
  return fmt::format("r-{:04d}{:02d}{:02d}-{:02d}{:02d}{:02d}-{:06x}", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, rd() & 0xffffff);
}

Status Store::create_run(const std::string& run_id, long long expected) {
  auto r = redis_.pipeline({
      {"HSETNX", keys::run(run_id), "created_ms", std::to_string(now_ms())},
      {"HINCRBY", keys::run(run_id), "expected", std::to_string(expected)},
      {"ZADD", keys::runs(), "NX", std::to_string(now_ms()), run_id},
  });
  if (!r.ok()) return r.error();
  return {};
}

// Lua: register job if new, then enqueue its encode task; atomic so a crash never leaves a job
// without its task or a task without its job.
static const char* const kAcceptScript = R"LUA(
-- KEYS: job, run, run_jobs, runs, encode stream ; ARGV: spec, now, job_id, payload
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local id = redis.call('XADD', KEYS[5], '*', 'task', ARGV[4])
redis.call('HSET', KEYS[1], 'state', 'queued', 'spec', ARGV[1], 'submitted_ms', ARGV[2], 'task:encode', id)
redis.call('HSETNX', KEYS[2], 'created_ms', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'total', 1)
redis.call('ZADD', KEYS[3], 'NX', redis.call('HGET', KEYS[2], 'total'), ARGV[3])
redis.call('ZADD', KEYS[4], 'NX', ARGV[2], ARGV[5])
return 1
)LUA";

Result<bool> Store::accept_job(const std::string& run_id, const pb::JobSpec& s, const std::string& payload) {
  auto r = redis_.eval(kAcceptScript,
                       {keys::job(run_id, s.job_id()), keys::run(run_id), keys::run_jobs(run_id),
                        keys::runs(), keys::stream("encode")},
                       {spec::to_json(s), std::to_string(now_ms()), s.job_id(), payload, run_id});
  if (!r.ok()) return r.error();
  return reply_int(r->get()) == 1;
}

Status Store::reject_job(const std::string& run_id, const std::string& job_id, const std::string& reason) {
  std::string now = std::to_string(now_ms());
  auto r = redis_.pipeline({
      {"HSETNX", keys::run(run_id), "created_ms", now},
      {"ZADD", keys::runs(), "NX", now, run_id},
      {"HSET", keys::job(run_id, job_id), "state", "failed", "error", reason, "submitted_ms", now},
      {"ZADD", keys::run_jobs(run_id), "NX", now, job_id},
      {"HINCRBY", keys::run(run_id), "total", "1"},
      {"HINCRBY", keys::run(run_id), "failed", "1"},
  });
  if (!r.ok()) return r.error();
  return {};
}

Result<Attempt> Store::start_attempt(const std::string& run_id, const std::string& job_id, pb::Stage s) {
  auto r = redis_.pipeline({
      {"HINCRBY", keys::job(run_id, job_id), std::string("attempts:") + stage_key(s), "1"},
      {"HSET", keys::job(run_id, job_id), "state", stage_key(s)},
      {"HGET", keys::run(run_id), "cancelled"},
      {"HGET", keys::job(run_id, job_id), "error"},
  });
  if (!r.ok()) return r.error();
  return Attempt{reply_int((*r)[0].get()), reply_str((*r)[2].get()) == "1", reply_str((*r)[3].get())};
}

Result<long long> Store::begin_attempt(const std::string& run_id, const std::string& job_id, pb::Stage s) {
  auto a = start_attempt(run_id, job_id, s);
  if (!a.ok()) return a.error();
  return a->number;
}

Status Store::note_exec(const std::string& run_id, const std::string& job_id, pb::Stage s) {
  return redis_.send({"HINCRBY", keys::job(run_id, job_id), std::string("exec:") + stage_key(s), "1"});
}

Status Store::note_error(const std::string& run_id, const std::string& job_id, pb::Stage s, const std::string& reason) {
  auto r = redis_.command({"HSET", keys::job(run_id, job_id), "error", fmt::format("{}: {}", stage_key(s), reason)});
  if (!r.ok()) return r.error();
  return {};
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

Result<std::vector<pb::StageRecord>> Store::history(const std::string& run_id, const std::string& job_id) {
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
  if (r->get()->elements == 0) return make_error("run.unknown", "no run \"{}\" in this Redis", run_id);
  RunStatus s;
  s.run_id = run_id;
  for (std::size_t i = 0; i + 1 < r->get()->elements; i += 2) {
    std::string k = reply_str(r->get()->element[i]);
    long long v = reply_int(r->get()->element[i + 1]);
    if (k == "created_ms") s.created_ms = v;
    else if (k == "expected") s.expected = v;
    else if (k == "total") s.total = v;
    else if (k == "done") s.done = v;
    else if (k == "failed") s.failed = v;
    else if (k == "cancelled") s.cancelled = v == 1;
    else if (k.rfind("count:", 0) == 0) s.stage_done[k.substr(6)] = v;
  }
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
  for (std::size_t i = 0; i < r->get()->elements; ++i) out.push_back(reply_str(r->get()->element[i]));
  return out;
}

queue::Commands Store::complete_cmds(const std::string& run_id, const std::string& job_id,
                                     const pb::StageRecord& rec, const std::string& next_state,
                                     const std::string& next_stream, const std::string& next_payload,
                                     bool final_stage) {
  std::string rec_json;
  (void)google::protobuf::util::MessageToJsonString(rec, &rec_json);
  const char* sk = stage_key(rec.stage());
  queue::Commands c = {
      {"RPUSH", keys::history(run_id, job_id), rec_json},
      {"HINCRBY", keys::job(run_id, job_id), std::string("done:") + sk, "1"},
      {"HINCRBY", keys::run(run_id), std::string("count:") + sk, "1"},
      {"HSET", keys::job(run_id, job_id), "state", next_state},
  };
  if (!next_stream.empty()) c.push_back({"XADD", next_stream, "*", "task", next_payload});
  if (final_stage) c.push_back({"HINCRBY", keys::run(run_id), "done", "1"});
  return c;
}

queue::Commands Store::fail_cmds(const std::string& run_id, const std::string& job_id, pb::Stage s,
                                 const std::string& reason) {
  return {
      {"HSET", keys::job(run_id, job_id), "state", "failed", "error", fmt::format("{}: {}", stage_key(s), reason)},
      {"HINCRBY", keys::run(run_id), "failed", "1"},
  };
}

queue::Commands Store::cancel_cmds(const std::string& run_id, const std::string& job_id) {
  return {
      {"HSET", keys::job(run_id, job_id), "state", "cancelled"},
      {"HINCRBY", keys::run(run_id), "failed", "1"},
  };
}

}  // namespace h3pipe::state
