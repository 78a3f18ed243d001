#pragma once
// Typed answers of a Redis server (or a Sentinel) to the control plane's questions: PING, TIME,
// CONFIG GET appendonly, INFO, SENTINEL get-master-addr-by-name and ckquorum, pipelined HGETs.
// Replies are read here and in common/state only (issue #26 item 2); the supervisor, preflight
// and the CLI ask through these.  Errors: the command's own (redis.error, redis.io, ...)
// unchanged, so callers keep their texts; errc::redis::kReply ("unexpected CMD reply: ...") when
// the server answered with a reply of the wrong type or shape.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::queue {

// PING.  A Redis that cannot persist answers MISCONF (a redis.error): callers that only read may
// treat it as an answer.
Status ping(Redis& r);

// TIME as seconds since the epoch (seconds + microseconds / 1e6).
Result<double> server_time_s(Redis& r);

// CONFIG GET appendonly: true for "yes", false for any other value; nullopt when the server
// does not know the parameter (an empty answer).  An ACL that refuses CONFIG is the command's
// error (redis.error, NOPERM ...).
Result<std::optional<bool>> append_only(Redis& r);

// INFO SECTION: the reply text ("key:value" lines, CRLF-terminated, "# Section" headers).
Result<std::string> info(Redis& r, const std::string& section);
// The value of `key` in an INFO text; empty when absent.
std::string info_field(const std::string& info_text, const std::string& key);

// SENTINEL get-master-addr-by-name MASTER on a connection to a Sentinel: where the Sentinel says
// the primary is; nullopt when it monitors no master of that name.
Result<std::optional<HostPort>> sentinel_primary(Redis& sentinel, const std::string& master);
// SENTINEL ckquorum MASTER: the Sentinel's status line ("OK 3 usable Sentinels ..."); a quorum
// that cannot be reached is the command's error (redis.error, "NOQUORUM ...").
Result<std::string> sentinel_ckquorum(Redis& sentinel, const std::string& master);

// HGET KEY FIELD for each (key, field), pipelined in one round trip: the values in order, nullopt
// for a missing key or field.  An error reply to any of them (WRONGTYPE) is the error.
Result<std::vector<std::optional<std::string>>> hget_each(
    Redis& r, const std::vector<std::pair<std::string, std::string>>& key_fields);

// The parsers behind the queries, for replies read elsewhere (Redis::find_primary asks each
// Sentinel on a bare connection) and for tests.  `r` may be null (no reply): a kReply error.
Result<double> parse_time(const redisReply* r);
Result<std::optional<bool>> parse_append_only(const redisReply* r);
Result<std::optional<HostPort>> parse_primary(const redisReply* r);
// What a reply is, for error texts: "nil", "an integer", "an array of 3", ...
std::string reply_kind(const redisReply* r);

}  // namespace h3pipe::queue
