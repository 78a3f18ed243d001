#pragma once
// Typed hash and sorted-set reads for the services that keep small records in Redis (h3pipe-api's
// tokens, videos and idempotency keys, issue #37): replies are read here, in common/queue, never
// by the caller (docs/design.md, "Redis behind ports").
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/queue/redis.h"

namespace h3pipe::queue {

// HGETALL KEY: field -> value (empty for a missing key).
Result<std::map<std::string, std::string>> hgetall(Redis& r, const std::string& key);
// HGET KEY FIELD: nullopt for a missing key or field.
Result<std::optional<std::string>> hget(Redis& r, const std::string& key, const std::string& field);
// HSETNX KEY FIELD VALUE: true when it was set (the field was absent).
Result<bool> hsetnx(Redis& r, const std::string& key, const std::string& field,
                    const std::string& value);
// ZRANGE KEY 0 -1 (ascending score) or ZREVRANGE (descending): the members.
Result<std::vector<std::string>> zmembers(Redis& r, const std::string& key, bool descending);

// The commands in one pipeline (one round trip), each reply as text: a string or status as it
// is, an integer in decimal, nil (or an array) as nullopt.  An error reply is the Error.
Result<std::vector<std::optional<std::string>>> pipeline_values(
    Redis& r, const std::vector<std::vector<std::string>>& cmds);

// One reply of Redis::pipeline read as HGETALL's (field -> value; empty for nil or a missing
// key) or as HGET's (nullopt for nil), so a caller that pipelines reads of several kinds in one
// round trip needs no hiredis of its own.
std::map<std::string, std::string> as_hash(const Reply& x);
std::optional<std::string> as_value(const Reply& x);
// A string, status or integer reply as text (pipeline_values' reading of each); nullopt else.
std::optional<std::string> as_scalar(const Reply& x);

}  // namespace h3pipe::queue
