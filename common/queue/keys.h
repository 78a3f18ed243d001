#pragma once
// Every Redis key h3pipe uses, in one place.  Stage streams are one key per stage; every key of
// a run shares the hash tag {RUN} so that run state can be sharded by run.
#include <string>
#include <string_view>

namespace h3pipe::keys {

inline constexpr std::string_view kPrefix = "h3pipe";

// A raw stream key h3pipe:stream:<name>.  Outside common/queue and common/state, stage streams
// are named only by the functions below (scripts/layers.py check fails on another `keys::stream(`).
inline std::string stream(std::string_view stage) {
  return std::string(kPrefix) + ":stream:" + std::string(stage);
}
// The stream a stage's tasks wait on, by the stage's name (config::stage_name): one shared stream
// per stage (h3pipe:stream:encode, h3pipe:stream:sample), but one per decode host for decode
// (h3pipe:stream:decode@HOST: a decode task waits on the host that holds its latent).
inline std::string stage_stream(std::string_view stage, std::string_view decode_host = {}) {
  if (stage == "decode") return stream("decode@" + std::string(decode_host));
  return stream(stage);
}
// A GPU group's own sample stream (worker/gpu_lease.h): h3pipe:stream:sample@GROUP, where the
// group's encoder puts its jobs so that the group keeps them through their sampling.
inline std::string group_sample_stream(std::string_view group) {
  return stream("sample@" + std::string(group));
}
// The fair share's state of a stage stream's claims (claim_order_lua.inc): h3pipe:share:<stage
// stream's name>, e.g. h3pipe:share:sample, h3pipe:share:decode@HOST.
inline std::string claim_share(std::string_view stream_key) {
  const std::string s = std::string(kPrefix) + ":stream:";
  std::string_view rest = stream_key;
  if (rest.substr(0, s.size()) == s) rest.remove_prefix(s.size());
  return std::string(kPrefix) + ":share:" + std::string(rest);
}
// Pools drained by an operator (#38: the console's drain, POST /v1/pools/{pool}/drain): a hash
// pool name -> {"by", "at_ms"} JSON.  A drained pool's workers claim nothing (StageWorker::step)
// until the field is deleted; the task in progress finishes.
inline std::string drained_pools() {
  return std::string(kPrefix) + ":pools:drained";
}
// Paused runs (h3pipe pause RUN): a set of run ids whose waiting tasks no claim takes
// (claim_order_lua.inc reads it by this name); the tasks running finish.
inline std::string paused_runs() {
  return std::string(kPrefix) + ":paused";
}
// Jobs moved to the front (h3pipe move JOB --run RUN --first): a sorted set "RUN JOB" -> the
// move's ms; such a job's waiting task is taken before every other, the latest move first, at
// every stage it has left (claim_order_lua.inc reads it by this name).
inline std::string moved_first() {
  return std::string(kPrefix) + ":first";
}
// A user's held encode tasks (users.NAME.over_quota "hold"): a stream of the task entries of its
// accepted jobs past users.NAME.max_jobs, oldest first; submission ingest moves them to the
// encode stream as the user's jobs finish (state/quota.h release_held).
inline std::string held(std::string_view user) {
  return std::string(kPrefix) + ":held:" + std::string(user);
}
inline std::string dead_letter() {
  return std::string(kPrefix) + ":dead";
}
// The documented submission stream: XADD h3pipe:submit * run RUN spec '{json}'
inline std::string submit() {
  return std::string(kPrefix) + ":submit";
}
inline std::string runs() {
  return std::string(kPrefix) + ":runs";
}  // zset run -> created ms
inline std::string pools() {
  return std::string(kPrefix) + ":pools";
}  // hash pool -> pb::Heartbeat bytes
inline std::string run(std::string_view r) {
  return std::string(kPrefix) + ":run:{" + std::string(r) + "}";
}
inline std::string run_jobs(std::string_view r) {
  return run(r) + ":jobs";
}  // zset job -> submit order
inline std::string job(std::string_view r, std::string_view j) {
  return run(r) + ":job:" + std::string(j);
}
inline std::string history(std::string_view r, std::string_view j) {
  return run(r) + ":hist:" + std::string(j);
}
inline std::string run_expected(std::string_view r) {
  return run(r) + ":expected";
}  // set of submitted job ids
// Submissions refused beside the run (a job id again with another spec): one JSON record each,
// the newest kept (state::kRefusedKept); never a job, so never part of the run's verdict.
inline std::string run_refused(std::string_view r) {
  return run(r) + ":refused";
}

// Live events of a run (#37): a capped stream (XADD MAXLEN ~ kEventsMaxLen), one entry per event,
// whose entry id is the SSE event id.  Fields: common/queue/events.h.
inline std::string run_events(std::string_view r) {
  return run(r) + ":events";
}
// The terminal events of every run (video.completed / failed / cancelled, with `run`), written in
// the same MULTI/EXEC or script as the state change; webhook delivery reads it as group "webhooks".
inline std::string terminal_events() {
  return std::string(kPrefix) + ":events";
}

inline constexpr std::string_view kIngestGroup = "ingest";

}  // namespace h3pipe::keys
