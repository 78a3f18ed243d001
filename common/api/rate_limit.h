#pragma once
// A rate limit per token (issue #37 item 7; docs/api.md "Rate limits"), shared by every replica
// because its counts live in Redis: a sliding window of one second estimated from two fixed
// windows (the previous second's count weighted by the share of it still inside the window, plus
// this second's), kept in the hash h3pipe:api:rate as "<token>:<unix second>" -> count of the
// requests let in.  One round trip per request (a pipeline: the token's own limit, HINCRBY this
// second, HGET the last, HDEL the one before; a refused request is taken back with a second
// one), no TTL and no script, so the operator's Redis user runs it as it is; a token leaves at
// most two fields behind.  Seconds are this replica's clock (unix ms): replicas on hosts whose
// clocks differ by d ms count a request up to d ms into the neighbouring window.
//
// The limit: the token's own (h3pipe:api:token_rates NAME -> requests per second, set by
// `h3pipe token limit NAME N`), else its role's (h3pipe-api --rate-limit ROLE=N); 0 = none.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/api/tokens.h"
#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

inline constexpr const char* kRateKey = "h3pipe:api:rate";
inline constexpr const char* kTokenRatesKey = "h3pipe:api:token_rates";

// Requests per second by role (0: unlimited).
struct RateLimits {
  double read = 100, submit = 50, admin = 0;
  double of(Role r) const { return r == Role::kAdmin ? admin : r == Role::kSubmit ? submit : read; }
};

// "read=100,submit=50,admin=0" (any subset; N a number >= 0) over `into`; the problem in words
// ("--rate-limit: ...") when the text is not that.
std::optional<std::string> parse_rate_limits(const std::string& text, RateLimits& into);

// The pure window rule: with `prev` requests in the last second, `cur` in this one (this request
// included) and `elapsed_ms` of this second gone, nullopt when allowed, else the milliseconds
// until the estimate is under `rate` again (>= 1).
std::optional<long long> window_verdict(long long prev, long long cur, long long elapsed_ms,
                                        double rate);

struct RateVerdict {
  double limit = 0;                         // requests per second applied (0: none)
  std::optional<long long> retry_after_ms;  // set: refused (429)
};
// Counts this request of `who` at `now_ms` (unix ms) and says whether it may go on.
Result<RateVerdict> rate_check(queue::Redis& r, const TokenInfo& who, const RateLimits& limits,
                               long long now_ms);

// The bearer token's holder (check_token) and, for a known token, its rate verdict
// (rate_check), in one round trip once this replica has seen the token: a map of token SHA-256
// -> NAME in memory (hashes and names only, never a token; a hint, never trusted) names it, and
// the one pipeline reads both token hashes again beside the rate's commands, so a revoked or
// replaced token is refused at once as before.  Unknown to this replica (or the hint is stale):
// the lookups of check_token first, then rate_check.  `who` nullopt: unknown or revoked.
// `reads`: the caller's own commands (reads only: they run before the token is checked), sent in
// that one round trip when the token is known; their replies in `read`, which is empty when they
// were not sent (or the token was refused): the caller then reads for itself.
struct Authorized {
  std::optional<TokenInfo> who;
  RateVerdict rate;
  std::vector<queue::Reply> read;
};
Result<Authorized> authorize(queue::Redis& r, const std::string& token, const RateLimits& limits,
                             long long now_ms,
                             const std::vector<std::vector<std::string>>& reads = {});

// `h3pipe token limit NAME N`: N requests per second for this token (0: unlimited); a negative N
// removes the token's own limit (its role's applies).
Status set_token_rate(queue::Redis& r, const std::string& name, double per_s);

}  // namespace h3pipe::api
