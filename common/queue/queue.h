#pragma once
// Leased work on Redis Streams (docs/design.md rule 3): one stream and one consumer group per
// stage.
//
//   claim():   first this consumer's own pending entries (a restarted consumer drains what it
//   held),
//              then expired leases of others (XAUTOCLAIM, min idle = lease), then new entries
//              (XREADGROUP >, blocking up to block_ms).
//   renew():   XCLAIM to itself with JUSTID, only while the entry is still ours (Lua), called by
//              the LeaseKeeper thread, never by the thread doing the work.
//   complete(): atomically (Lua) ack + delete the entry and run the caller's follow-up commands
//              (enqueue the next stage, state updates) — only if we still own the entry, so a
//              robbed worker cannot double-enqueue.
//   dead_letter(): XADD to h3pipe:dead with the reason, ack + delete.
//   release_for_retry(): keep it pending but make it reclaimable after the backoff.
//
// When Redis reports the group gone (NOGROUP: a FLUSHALL, a restart without persistence), claim()
// recreates it, logs one warning and carries on; what this consumer held went with the old group
// (LeaseKeeper then reports those entries lost).
//
// Entries are deleted when acked, so the stream holds only outstanding work; trim() never drops
// an entry that is pending or was never delivered, even below a pending one (claims follow the
// claim order, not arrival).
// Thread-safety: a StageQueue is used by one thread; LeaseKeeper owns its own connection.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/queue/connector.h"
#include "common/queue/keys.h"
#include "common/queue/redis.h"

namespace h3pipe::queue {

struct Entry {
  std::string id;                             // stream entry id
  std::string payload;                        // serialized task (protobuf bytes): the field "task"
  std::map<std::string, std::string> fields;  // the entry's other fields (submissions: run, spec)
  // Field names the entry holds more than once, "task" included (XADD accepts a field twice;
  // `fields` and `payload` keep the last value): ingest refuses such a submission (issue #35 D12).
  std::vector<std::string> repeated;
  long long deliveries = 1;
  bool reclaimed = false;    // came from XAUTOCLAIM (another consumer's expired lease)
  bool own_pending = false;  // came from this consumer's PEL after a restart
};

struct QueueOptions {
  std::string stream;
  std::string group;
  std::string consumer;
  int lease_ms = 5000;
  int block_ms = 200;
  int sweep_ms = 1000;
  // A stage stream's claim order (dispatch::ClaimOrder::encode(); docs/design.md, "The claim
  // order"): new entries are taken by claim_order_lua.inc's h3o_take, which updates `share_key`
  // (the fair share's hash).  Empty: first come, first served (XREADGROUP >; the submission
  // stream).
  std::string claim_order{};
  std::string share_key{};
};

// One follow-up Redis command to run inside complete() (keys and args separated so the script
// stays binary-safe).  Each command is argv; it runs only if the entry was still ours.
using Commands = std::vector<std::vector<std::string>>;

// What a consumer could claim now (StageQueue::claimable): undelivered entries, one of its own
// pending, or another's lease expired.
struct Claimable {
  long long length = 0;      // XLEN: entries on the stream (acked ones are deleted)
  long long pending = 0;     // XPENDING's count: delivered and not acked (0 without a group)
  bool own_pending = false;  // one of them is this consumer's
  bool expired = false;      // one of them has been idle for a lease
  bool any() const { return length > pending || own_pending || expired; }
};

// (length, claimed) of a (stream, group): XLEN and XPENDING's count.
struct StreamBacklog {
  long long length = 0, claimed = 0;
  long long waiting() const { return std::max(0LL, length - claimed); }
};
// Each (stream, group)'s backlog in two round trips (the XLENs, then the XPENDINGs, each
// pipelined); a stream or group that does not exist yet counts 0 (after a NOGROUP the XPENDINGs
// are asked one by one).  Error only when Redis does not answer the XLENs.
Result<std::vector<StreamBacklog>> stream_backlogs(
    Redis& redis, const std::vector<std::pair<std::string, std::string>>& streams);

// The entry a claim in `order` (QueueOptions::claim_order) would take from `stream` now, taking
// nothing (the pool board's head class).  An error when the stream or group is missing.
Result<std::optional<Entry>> peek_ordered(Redis& redis, const std::string& stream,
                                          const std::string& group, const std::string& order);

// The last-delivered id of `group` on `stream` (XINFO GROUPS); "" when the stream has no such
// group.
Result<std::string> group_last_delivered(Redis& redis, const std::string& stream,
                                         const std::string& group);

// XRANGE stream start end [COUNT count] (count 0: all) as entries, parsed as claim() parses them
// (the "task" field is the payload); a missing stream has none.  A key of another type is the
// command's error (WRONGTYPE).
Result<std::vector<Entry>> read_range(Redis& redis, const std::string& stream,
                                      const std::string& start, const std::string& end,
                                      int count = 0);

// The one dead-letter record: XADD h3pipe:dead * stage run job reason task (the task's bytes).
// Every writer of a dead letter (StageQueue::dead_letter, state::Store::fail_move) files this.
std::vector<std::string> dead_letter_record(const std::string& stage, const std::string& run_id,
                                            const std::string& job_id, const std::string& reason,
                                            const std::string& payload);
// Entries on the dead-letter stream (XLEN h3pipe:dead).
Result<long long> dead_letter_count(Redis& redis);

class StageQueue final {
 public:
  StageQueue(Redis& redis, QueueOptions opts) : redis_(redis), opts_(std::move(opts)) {}

  // Creates the stream and group if missing (XGROUP CREATE ... MKSTREAM), idempotent.
  Status ensure_group();
  Result<std::string> enqueue(const std::string& payload);
  // Returns nullopt when nothing is available within block_ms.  With new_work false only
  // recovery work is taken (own pending entries, expired leases): a dispatch policy may hold a
  // pool back from new tasks, never from finishing what a crash left behind.
  // The next claim() first re-reads this consumer's own pending entries (after an error that
  // may have left a claimed task unfinished).
  void recheck_own() { drained_own_ = false; }
  // True when the next claim() would go straight to new entries: its own pending ones drained and
  // no sweep of expired leases due (a claim folded into another step, Store::claim_and_start,
  // keeps claim()'s order only then).
  bool next_claim_is_new() const {
    return drained_own_ && std::chrono::steady_clock::now() < next_sweep_;
  }
  // For a claim folded into a completion (state::Move::then_claim), which keeps claim()'s order:
  // whether this consumer's own pending entries are drained; take_sweep() says whether the sweep
  // of expired leases is due and, if so, counts it as made now (the next one sweep_ms later), and
  // swept_one() that it took an entry (more may wait: the next claim sweeps again).
  bool own_drained() const { return drained_own_; }
  bool take_sweep();
  void swept_one() { next_sweep_ = std::chrono::steady_clock::now(); }
  Result<std::optional<Entry>> claim(bool new_work = true);
  Result<bool> complete(const Entry& e, const Commands& follow_up);
  Status dead_letter(const Entry& e, const std::string& stage, const std::string& run_id,
                     const std::string& job_id, const std::string& reason,
                     const Commands& follow_up);
  Status release_for_retry(const Entry& e, int backoff_ms);
  Result<long long> pending_count();
  Result<long long> length();
  // What this consumer could claim now, in one round trip (XLEN and three XPENDINGs, pipelined):
  // a worker of a GPU group takes the group's lease only when there is.
  Result<Claimable> claimable();
  Status trim();
  const QueueOptions& options() const { return opts_; }
  // How many times claim() found the group gone and recreated it.
  long long groups_recreated() const { return groups_recreated_; }

 private:
  // Runs a command that names the group; on NOGROUP recreates the group and runs it once more.
  Result<Reply> group_command(const std::vector<std::string>& argv);
  // claim()'s new work under opts_.claim_order (claim_order_lua.inc), waiting up to block_ms for
  // one.
  Result<std::optional<Entry>> claim_ordered();
  Redis& redis_;
  QueueOptions opts_;
  long long groups_recreated_ = 0;
  bool drained_own_ = false;
  std::chrono::steady_clock::time_point next_sweep_{};
};

// Keeps the leases of the entries a worker holds alive, from its own thread and connection (opened
// from `connector` when the first renewal is due, again after an I/O error).
class LeaseKeeper final {
 public:
  LeaseKeeper(Connector connector, QueueOptions opts, int renew_ms);
  ~LeaseKeeper();
  void hold(const std::string& id);
  void release(const std::string& id);
  long long renewals() const { return renewals_.load(); }
  long long lost() const { return lost_.load(); }  // renewals refused: the entry was no longer ours
  // True once a renewal found `id` no longer ours (reclaimed by another worker, or gone after a
  // Redis restart that lost the claim): the work on it should stop before it commits anything.
  bool is_lost(const std::string& id) const;

 private:
  void loop();
  Connector connector_;
  QueueOptions opts_;
  int renew_ms_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> held_;
  std::set<std::string> lost_ids_;  // held ids a renewal found no longer ours
  bool stop_ = false;
  std::atomic<long long> renewals_{0}, lost_{0};
  std::thread thread_;
};

// The Lua scripts, exposed for tests.
extern const char* const kRenewScript;
extern const char* const kCompleteScript;
extern const char* const kClaimScript;

}  // namespace h3pipe::queue
