#include "common/queue/queue.h"

#include <set>

#include "common/logging/log.h"
#include "common/queue/reply.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("queue");
  return *l;
}

}  // namespace

namespace h3pipe::queue {

const char* const kRenewScript = R"LUA(
-- KEYS[1] stream; ARGV group, consumer, id...  Returns the ids that are no longer ours.
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
)LUA";

// Ack + delete + follow-up commands, only if the entry is still pending for this consumer.
// ARGV: group, consumer, id, then follow-ups encoded as: count, (argc, argv...)*
const char* const kCompleteScript = R"LUA(
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #p == 0 then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
local n = tonumber(ARGV[4])
local at = 5
for c = 1, n do
  local argc = tonumber(ARGV[at]); at = at + 1
  local cmd = {}
  for k = 1, argc do cmd[k] = ARGV[at]; at = at + 1 end
  redis.call(unpack(cmd))
end
return 1
)LUA";

// The claim of a new entry in the claim order (claim_order_lua.inc).  KEYS: stream, share.  ARGV:
// group, consumer, order.  Returns {1, entry} or {0, last id seen}.
const char* const kClaimScript =
#include "common/queue/claim_order_lua.inc"
    R"LUA(
local e, last = h3o_take(KEYS[1], ARGV[1], ARGV[2], KEYS[2], ARGV[3])
if not e then return {0, last} end
return {1, e}
)LUA";

// The entry the claim order would take now, taking nothing.  KEYS: stream, share.  ARGV: group,
// order.  Returns {} or the entry.
const char* const kPeekScript =
#include "common/queue/claim_order_lua.inc"
    R"LUA(
local e = h3o_pick(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
if not e then return {} end
return {e[1], e[2]}
)LUA";

namespace {

// Parses one XREADGROUP/XAUTOCLAIM entry [id, [field, value, ...]] into Entry.
std::optional<Entry> parse_entry(const redisReply* e) {
  if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 2) return std::nullopt;
  Entry out;
  out.id = reply_str(e->element[0]);
  const redisReply* fields = e->element[1];
  if (!fields || fields->type != REDIS_REPLY_ARRAY) {
    // An entry deleted while pending shows as [id, nil]: still ours to ack.
    return out;
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i + 1 < fields->elements; i += 2) {
    std::string name = reply_str(fields->element[i]);
    if (!seen.insert(name).second &&
        std::find(out.repeated.begin(), out.repeated.end(), name) == out.repeated.end())
      out.repeated.push_back(name);
    if (name == "task")
      out.payload = reply_str(fields->element[i + 1]);
    else
      out.fields[std::move(name)] = reply_str(fields->element[i + 1]);
  }
  return out;
}

// A non-empty array reply (an XPENDING that found something; its summary's count first).
bool some(const redisReply* x) {
  return x && x->type == REDIS_REPLY_ARRAY && x->elements > 0;
}

// Redis lost the group (or the stream under it): FLUSHALL, a restart without persistence.
bool group_gone(const Error& e) {
  return e.code == errc::redis::kError && e.message.find("NOGROUP") != std::string::npos;
}

std::vector<std::string> flatten(const Commands& cmds) {
  std::vector<std::string> args = {std::to_string(cmds.size())};
  for (const auto& c : cmds) {
    args.push_back(std::to_string(c.size()));
    args.insert(args.end(), c.begin(), c.end());
  }
  return args;
}

}  // namespace

Status StageQueue::ensure_group() {
  auto r = redis_.command({"XGROUP", "CREATE", opts_.stream, opts_.group, "0", "MKSTREAM"});
  if (!r.ok() && r.error().message.find("BUSYGROUP") == std::string::npos) return r.error();
  return {};
}

Result<Reply> StageQueue::group_command(const std::vector<std::string>& argv) {
  auto r = redis_.command(argv);
  if (r.ok() || !group_gone(r.error())) return r;
  H3_TRY(ensure_group());
  ++groups_recreated_;
  drained_own_ = true;  // nothing is pending for us in a new group
  logger().warn(
      "queue {}: consumer group {} was gone (Redis lost it: a FLUSHALL or a restart without "
      "persistence); recreated it (what was claimed from the old one is gone with it)",
      opts_.stream, opts_.group);
  return redis_.command(argv);
}

Result<std::string> StageQueue::enqueue(const std::string& payload) {
  auto r = redis_.command({"XADD", opts_.stream, "*", "task", payload});
  if (!r.ok()) return r.error();
  return reply_str(r->get());
}

bool StageQueue::take_sweep() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_sweep_) return false;
  next_sweep_ = now + std::chrono::milliseconds(opts_.sweep_ms);
  return true;
}

Result<std::optional<Entry>> StageQueue::claim(bool new_work) {
  // 1. Own pending entries left by a previous incarnation of this consumer.
  if (!drained_own_) {
    auto r = group_command({"XREADGROUP", "GROUP", opts_.group, opts_.consumer, "COUNT", "1",
                            "STREAMS", opts_.stream, "0"});
    if (!r.ok()) return r.error();
    const redisReply* rep = r->get();
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0) {
      const redisReply* entries = rep->element[0]->element[1];
      if (entries->elements > 0) {
        auto e = parse_entry(entries->element[0]);
        if (e) {
          e->own_pending = true;
          return std::optional<Entry>(*e);
        }
      }
    }
    drained_own_ = true;
  }
  // 2. Expired leases of other consumers.
  auto now = std::chrono::steady_clock::now();
  if (now >= next_sweep_) {
    next_sweep_ = now + std::chrono::milliseconds(opts_.sweep_ms);
    auto r = group_command({"XAUTOCLAIM", opts_.stream, opts_.group, opts_.consumer,
                            std::to_string(opts_.lease_ms), "0-0", "COUNT", "1"});
    if (!r.ok()) return r.error();
    const redisReply* rep = r->get();
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 && rep->element[1]->elements > 0) {
      auto e = parse_entry(rep->element[1]->element[0]);
      if (e) {
        e->reclaimed = true;
        next_sweep_ = now;  // more may be waiting
        return std::optional<Entry>(*e);
      }
    }
  }
  // 3. New work.
  if (!new_work) return std::optional<Entry>();
  if (!opts_.claim_order.empty()) return claim_ordered();
  auto r = group_command({"XREADGROUP", "GROUP", opts_.group, opts_.consumer, "COUNT", "1", "BLOCK",
                          std::to_string(opts_.block_ms), "STREAMS", opts_.stream, ">"});
  if (!r.ok()) return r.error();
  const redisReply* rep = r->get();
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements == 0) return std::optional<Entry>();
  const redisReply* entries = rep->element[0]->element[1];
  if (entries->elements == 0) return std::optional<Entry>();
  return parse_entry(entries->element[0]);
}

Result<std::optional<Entry>> StageQueue::claim_ordered() {
  std::string last;
  for (int round = 0; round < 2; ++round) {
    const std::vector<std::string> keys = {opts_.stream, opts_.share_key};
    const std::vector<std::string> args = {opts_.group, opts_.consumer, opts_.claim_order};
    auto r = redis_.eval(kClaimScript, keys, args);
    if (!r.ok() && group_gone(r.error())) {
      H3_TRY(ensure_group());
      ++groups_recreated_;
      drained_own_ = true;
      r = redis_.eval(kClaimScript, keys, args);
    }
    if (!r.ok()) return r.error();
    const redisReply* rep = r->get();
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2)
      return make_error(errc::redis::kReply, "claim: unexpected reply");
    if (reply_int(rep->element[0]) == 1) return parse_entry(rep->element[1]);
    last = reply_str(rep->element[1]);
    if (round == 1 || opts_.block_ms <= 0) break;
    // Nothing to take: wait for the next entry after the last one seen (none is missed: one added
    // since the script ran is after it), then take in the order once more.
    auto w = redis_.command({"XREAD", "BLOCK", std::to_string(opts_.block_ms), "STREAMS",
                             opts_.stream, last.empty() ? "0-0" : last});
    if (!w.ok()) return w.error();
    if (w->get()->type != REDIS_REPLY_ARRAY) break;  // timed out
  }
  return std::optional<Entry>();
}

Result<bool> StageQueue::complete(const Entry& e, const Commands& follow_up) {
  std::vector<std::string> args = {opts_.group, opts_.consumer, e.id};
  auto f = flatten(follow_up);
  args.insert(args.end(), f.begin(), f.end());
  auto r = redis_.eval(kCompleteScript, {opts_.stream}, args);
  if (!r.ok()) return r.error();
  return reply_int(r->get()) == 1;
}

Status StageQueue::dead_letter(const Entry& e, const std::string& stage, const std::string& run_id,
                               const std::string& job_id, const std::string& reason,
                               const Commands& follow_up) {
  Commands cmds = {dead_letter_record(stage, run_id, job_id, reason, e.payload)};
  cmds.insert(cmds.end(), follow_up.begin(), follow_up.end());
  auto r = complete(e, cmds);
  if (!r.ok()) return r.error();
  return {};
}

Status StageQueue::release_for_retry(const Entry& e, int backoff_ms) {
  // Keep it ours but pretend it has been idle for (lease - backoff): XAUTOCLAIM picks it up
  // once the backoff has passed.
  long long idle = std::max(0, opts_.lease_ms - backoff_ms);
  auto r = redis_.command({"XCLAIM", opts_.stream, opts_.group, opts_.consumer, "0", e.id, "IDLE",
                           std::to_string(idle), "JUSTID"});
  if (!r.ok()) return r.error();
  return {};
}

Result<long long> StageQueue::pending_count() {
  auto r = redis_.command({"XPENDING", opts_.stream, opts_.group});
  if (!r.ok()) return r.error();
  return reply_int(r->get()->element[0]);
}

Result<long long> StageQueue::length() {
  auto r = redis_.command({"XLEN", opts_.stream});
  if (!r.ok()) return r.error();
  return reply_int(r->get());
}

Result<Claimable> StageQueue::claimable() {
  const auto& o = opts_;
  auto r = redis_.pipeline(
      {{"XLEN", o.stream},
       {"XPENDING", o.stream, o.group},
       {"XPENDING", o.stream, o.group, "-", "+", "1", o.consumer},
       {"XPENDING", o.stream, o.group, "IDLE", std::to_string(o.lease_ms), "-", "+", "1"}});
  if (!r.ok()) return r.error();
  Claimable c;
  c.length = reply_int((*r)[0].get());
  const redisReply* summary = (*r)[1].get();
  c.pending = some(summary) ? reply_int(summary->element[0]) : 0;
  c.own_pending = some((*r)[2].get());
  c.expired = some((*r)[3].get());
  return c;
}

Result<std::vector<StreamBacklog>> stream_backlogs(
    Redis& redis, const std::vector<std::pair<std::string, std::string>>& streams) {
  std::vector<StreamBacklog> out(streams.size());
  if (streams.empty()) return out;
  Commands lens, pend;
  for (const auto& [s, g] : streams) {
    lens.push_back({"XLEN", s});
    pend.push_back({"XPENDING", s, g});
  }
  auto l = redis.pipeline(lens);
  if (!l.ok()) return l.error();
  for (std::size_t i = 0; i < out.size(); ++i) out[i].length = reply_int((*l)[i].get());
  auto count = [](const redisReply* x) { return some(x) ? reply_int(x->element[0]) : 0LL; };
  if (auto p = redis.pipeline(pend); p.ok()) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i].claimed = count((*p)[i].get());
    return out;
  }
  // A group not created yet (NOGROUP) fails the pipeline: ask one by one, a missing one is 0.
  for (std::size_t i = 0; i < out.size(); ++i)
    if (auto one = redis.command(pend[i]); one.ok()) out[i].claimed = count(one->get());
  return out;
}

Result<std::optional<Entry>> peek_ordered(Redis& redis, const std::string& stream,
                                          const std::string& group, const std::string& order) {
  auto r = redis.eval(kPeekScript, {stream, keys::claim_share(stream)}, {group, order});
  if (!r.ok()) return r.error();
  const redisReply* rep = r->get();
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2) return std::optional<Entry>();
  return parse_entry(rep);
}

Result<std::string> group_last_delivered(Redis& redis, const std::string& stream,
                                         const std::string& group) {
  auto g = redis.command({"XINFO", "GROUPS", stream});
  if (!g.ok()) return g.error();
  std::string last;
  const redisReply* groups = g->get();
  for (std::size_t i = 0; groups->type == REDIS_REPLY_ARRAY && i < groups->elements; ++i) {
    const redisReply* grp = groups->element[i];
    std::string name, id;
    for (std::size_t k = 0; grp && k + 1 < grp->elements; k += 2) {
      const std::string f = reply_str(grp->element[k]);
      if (f == "name") name = reply_str(grp->element[k + 1]);
      if (f == "last-delivered-id") id = reply_str(grp->element[k + 1]);
    }
    if (name == group) last = id;
  }
  return last;
}

Result<std::vector<Entry>> read_range(Redis& redis, const std::string& stream,
                                      const std::string& start, const std::string& end, int count) {
  std::vector<std::string> cmd = {"XRANGE", stream, start, end};
  if (count > 0) cmd.insert(cmd.end(), {"COUNT", std::to_string(count)});
  auto r = redis.command(cmd);
  if (!r.ok()) return r.error();
  std::vector<Entry> out;
  const redisReply* entries = r->get();
  for (std::size_t i = 0; entries->type == REDIS_REPLY_ARRAY && i < entries->elements; ++i)
    if (auto e = parse_entry(entries->element[i])) out.push_back(std::move(*e));
  return out;
}

std::vector<std::string> dead_letter_record(const std::string& stage, const std::string& run_id,
                                            const std::string& job_id, const std::string& reason,
                                            const std::string& payload) {
  return {"XADD", keys::dead_letter(),
          "*",    "stage",
          stage,  "run",
          run_id, "job",
          job_id, "reason",
          reason, "task",
          payload};
}

Result<long long> dead_letter_count(Redis& redis) {
  auto n = redis.command({"XLEN", keys::dead_letter()});
  if (!n.ok()) return n.error();
  return reply_int(n->get());
}

namespace {
// A stream entry id ("MS-SEQ") as a pair that orders as Redis orders them.
std::pair<unsigned long long, unsigned long long> id_key(const std::string& id) {
  const auto dash = id.find('-');
  const auto num = [](const std::string& s) { return s.empty() ? 0ULL : std::stoull(s); };
  if (dash == std::string::npos) return {num(id), 0};
  return {num(id.substr(0, dash)), num(id.substr(dash + 1))};
}
}  // namespace

Status StageQueue::trim() {
  // Acked entries are deleted with their ack, so what trim may remove is only an entry acked and
  // left behind.  The floor is the first entry still owed: one pending, or one never delivered
  // (above the group's last-delivered id).  Not the oldest pending id: the claim order (docs/
  // design.md, "The claim order") claims out of arrival order, so a waiting entry may sit below
  // a pending one.
  constexpr int kScan = 512;
  auto head = read_range(redis_, opts_.stream, "-", "+", kScan);
  if (!head.ok()) return head.error();
  if (head->empty()) return {};
  auto p = redis_.command({"XPENDING", opts_.stream, opts_.group, "-", "+", std::to_string(kScan)});
  if (!p.ok()) return p.error();
  std::set<std::string> pending;
  for (std::size_t i = 0; p->get()->type == REDIS_REPLY_ARRAY && i < p->get()->elements; ++i)
    if (const redisReply* e = p->get()->element[i]; e->type == REDIS_REPLY_ARRAY && e->elements)
      pending.insert(reply_str(e->element[0]));
  auto g = group_last_delivered(redis_, opts_.stream, opts_.group);
  if (!g.ok()) return g.error();
  const auto last = id_key(g->empty() ? "0-0" : *g);
  std::string floor;
  for (const auto& e : *head)
    if (pending.count(e.id) || id_key(e.id) > last) {
      floor = e.id;
      break;
    }
  if (floor.empty()) {
    if (head->size() == static_cast<std::size_t>(kScan)) return {};  // owed work may lie further
    const auto& lk = last;
    floor = std::to_string(lk.first) + "-" + std::to_string(lk.second + 1);
  }
  auto r = redis_.command({"XTRIM", opts_.stream, "MINID", floor});
  if (!r.ok()) return r.error();
  return {};
}

LeaseKeeper::LeaseKeeper(Connector connector, QueueOptions opts, int renew_ms)
    : connector_(std::move(connector)),
      opts_(std::move(opts)),
      renew_ms_(renew_ms),
      thread_([this] { loop(); }) {}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LeaseKeeper::hold(const std::string& id) {
  std::lock_guard lk(mu_);
  held_.insert(id);
}

void LeaseKeeper::release(const std::string& id) {
  std::lock_guard lk(mu_);
  held_.erase(id);
  lost_ids_.erase(id);
}

bool LeaseKeeper::is_lost(const std::string& id) const {
  std::lock_guard lk(mu_);
  return lost_ids_.count(id) != 0;
}

void LeaseKeeper::loop() {
  std::unique_ptr<Redis> redis;
  // The same failure again (a Redis refusing writes, MISCONF, for as long as its disk is full)
  // is logged once, not at every renewal; a success or another failure logs again.
  std::string last_failure;
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(renew_ms_), [this] { return stop_; });
    if (stop_ || held_.empty()) continue;
    std::vector<std::string> args = {opts_.group, opts_.consumer};
    for (const auto& id : held_)
      if (!lost_ids_.count(id)) args.push_back(id);  // a lost entry stays lost: no renewal
    std::size_t want = args.size() - 2;
    if (want == 0) continue;
    std::vector<std::string> gone;
    lk.unlock();
    if (!redis) {
      auto c = connector_.connect();
      if (c.ok())
        redis = std::move(c.value());
      else
        logger().warn("lease keeper: {}", c.error().message);
    }
    if (redis) {
      auto r = redis->eval(kRenewScript, {opts_.stream}, args);
      if (r.ok() && !last_failure.empty()) {
        logger().info("lease keeper: renewals work again");
        last_failure.clear();
      }
      if (r.ok()) {
        for (std::size_t i = 0; r->get()->type == REDIS_REPLY_ARRAY && i < r->get()->elements; ++i)
          gone.push_back(reply_str(r->get()->element[i]));
        renewals_ += static_cast<long long>(want - std::min(want, gone.size()));
        lost_ += static_cast<long long>(gone.size());
      } else if (group_gone(r.error())) {
        // The group went with every claim in it: nothing held is ours any more.
        gone.assign(args.begin() + 2, args.end());
        lost_ += static_cast<long long>(gone.size());
        logger().warn(
            "lease keeper: consumer group {} on {} is gone (Redis lost it); {} held entries lost",
            opts_.group, opts_.stream, gone.size());
      } else {
        if (r.error().message != last_failure)
          logger().warn("lease keeper: renewal failed: {}", r.error().message);
        last_failure = r.error().message;
        if (r.error().code == errc::redis::kIo) redis.reset();
      }
    }
    lk.lock();
    for (const auto& id : gone)
      if (held_.count(id)) lost_ids_.insert(id);  // not if released meanwhile
  }
}

}  // namespace h3pipe::queue
