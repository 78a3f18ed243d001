#pragma once
// Typed stream, sorted-set and transaction reads for h3pipe-api's live events and webhooks
// (issue #37 items 3 and 6): XREAD over many run streams (the SSE hub), XRANGE (replay),
// XREADGROUP / XAUTOCLAIM / XACK (webhook delivery reads keys::terminal_events() as group
// "webhooks") and MULTI/EXEC.  Replies are read here, in
// common/queue, never by the caller (docs/design.md, "Redis behind ports").
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/queue/redis.h"

namespace h3pipe::queue {

struct StreamEntry {
  std::string id;  // "MS-SEQ"
  std::vector<std::pair<std::string, std::string>> fields;
};

// A stream entry id as a number pair, for ordering; nullopt for anything but "MS-SEQ" (or "MS").
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_stream_id(const std::string& id);

// XREAD [COUNT count] [BLOCK block_ms] STREAMS k1..kn id1..idn: the entries after each key's id,
// as {key, entries} for the keys that have some (empty after a BLOCK timed out).  block_ms < 0:
// no BLOCK.
Result<std::vector<std::pair<std::string, std::vector<StreamEntry>>>> xread(
    Redis& r, const std::vector<std::pair<std::string, std::string>>& key_after, int count,
    int block_ms);

// XRANGE key (after end COUNT count: the entries after `after` (exclusive; "0-0": from the start)
// up to `end` ("+": the last).
Result<std::vector<StreamEntry>> xrange_after(Redis& r, const std::string& key,
                                              const std::string& after, const std::string& end,
                                              int count);

// One reply of Redis::pipeline read as XRANGE's: its entries (none for nil).
std::vector<StreamEntry> as_entries(const Reply& x);

// XGROUP CREATE stream group id MKSTREAM; an existing group (BUSYGROUP) is not an error.
Status xgroup_create(Redis& r, const std::string& stream, const std::string& group,
                     const std::string& id);

// XREADGROUP GROUP group consumer COUNT count BLOCK block_ms STREAMS stream >.
Result<std::vector<StreamEntry>> xreadgroup(Redis& r, const std::string& stream,
                                            const std::string& group, const std::string& consumer,
                                            int count, int block_ms);

// XAUTOCLAIM stream group consumer min_idle_ms start COUNT count: the entries claimed (those
// another consumer read and did not acknowledge for min_idle_ms) and the cursor to go on from
// ("0-0": the scan is complete).
struct Claimed {
  std::vector<StreamEntry> entries;
  std::string next = "0-0";
};
Result<Claimed> xautoclaim(Redis& r, const std::string& stream, const std::string& group,
                           const std::string& consumer, long long min_idle_ms,
                           const std::string& start, int count);

// XINFO CONSUMERS stream group: each consumer's name, its entries pending (read, not
// acknowledged) and the ms since it last read (idle).
struct GroupConsumer {
  std::string name;
  long long pending = 0, idle_ms = 0;
};
Result<std::vector<GroupConsumer>> xinfo_consumers(Redis& r, const std::string& stream,
                                                   const std::string& group);

// A command whose reply is an integer (HDEL, ZREM, XACK, ...).
Result<long long> int_command(Redis& r, const std::vector<std::string>& argv);

// MULTI, the commands, EXEC in one round trip: each command's reply as a string (an integer in
// decimal, nil as ""), or an error when the transaction or one of its commands failed.
Result<std::vector<std::string>> transaction(Redis& r,
                                             const std::vector<std::vector<std::string>>& cmds);

}  // namespace h3pipe::queue
