#pragma once
// The claim order: which waiting task of a stage stream a pool takes next (docs/design.md, "The
// claim order", issue #39).  Written twice, once here in C++ and once in Lua
// (common/queue/claim_order_lua.inc, the script every live claim runs), and the two are held equal
// by claim_order_redis_test, which runs the same stream states through both.  The planner's
// simulator claims through claim_next() below (pick, the policy, charge), as the live Claimer
// (common/worker/claimer.h) claims through the Lua twin.
//
//   1. candidates: the first `window` entries of the stream that no consumer holds, in stream
//      order (older entries further back wait; claims beyond the window are first come, first
//      served once it moves);
//   2. effective priority: the entry's priority plus one per `aging_ms` it has waited on the
//      stream, capped at the highest priority among the candidates (aging lifts a job to the top
//      class and no further, so within one class the fair share below still decides);
//   3. among the highest effective priority, the user with the least virtual time: a user's
//      virtual time grows by cost / weight at each of its claims (cost: the claiming pool's
//      expected stage time for the entry's class, in ms; weight: /users/NAME/weight) and never
//      lags the stream's floor (the least virtual time of the users with candidates at the last
//      claim), so an idle user banks no credit;
//   4. then stream order (first come, first served within a user).
// Before all of these, a job moved to the front (h3pipe move --first) is taken first, the latest
// move first.
// Nothing here knows Redis or clocks: all inputs are plain values.  Pure and thread-safe.
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"

namespace h3pipe::dispatch {

// How many waiting entries a claim looks at.
inline constexpr int kClaimWindow = 256;

// The parameters of one pool's claims on one stream.
struct ClaimOrder {
  long long aging_ms = 0;  // 0: no aging
  int window = kClaimWindow;
  long long default_cost_ms = 1000;                  // a class with no cost below
  std::map<std::string, long long> weight_permille;  // user -> weight x 1000 (absent: 1000)
  std::map<std::string, long long> cost_ms;          // class -> this pool's expected stage ms
  // The one-line form the Lua reads (tokens separated by spaces; user and class names hold none).
  std::string encode() const;
  long long weight_of(const std::string& user) const;
  long long cost_of(const std::string& cls) const;
};

// The order of `pool`'s claims from the config: /queue/aging_ms, /users/*/weight, the pool's
// profiles scaled by time_scale.
ClaimOrder claim_order_for(const config::Cluster& c, const config::Pool& pool);

// A stream entry as the order sees it (stream fields prio, user, cls; the id's parts).
struct ClaimEntry {
  std::string id;
  long long ms = 0, seq = 0;  // the id's two parts
  long long priority = 0;
  std::string user, cls;
  // Never a candidate: pending (a consumer holds it), or its run is paused (keys::paused_runs()).
  bool held = false;
  long long first = 0;  // moved to the front (keys::moved_first()) at this ms; 0: not moved
};

// The fair share's state of one stream (the hash keys::claim_share(stream)): virtual time per
// user, and the floor.
struct ShareState {
  std::map<std::string, long long> vt;
  long long floor = 0;
  long long vt_of(const std::string& user) const;  // max(vt, floor)
};

// The entry to take (an index into `entries`, which are in stream order), or none.
std::optional<std::size_t> pick(const ClaimOrder& o, const std::vector<ClaimEntry>& entries,
                                const ShareState& share, long long now_ms);
// The share after taking entries[taken] (the claim's own update, as the Lua makes it).
void charge(const ClaimOrder& o, const std::vector<ClaimEntry>& entries, std::size_t taken,
            ShareState& share);

// One claim of a pool, as the live Claimer makes it (common/worker/claimer.h: the order's pick,
// the dispatch policy asked about that entry, the share charged when it is taken): the index
// taken, or none (nothing waiting, or `may_claim(index)` said no: the entry stays, the share
// unchanged).  The planner's simulator claims through this (schedule::simulate).
std::optional<std::size_t> claim_next(const ClaimOrder& o, const std::vector<ClaimEntry>& entries,
                                      ShareState& share, long long now_ms,
                                      const std::function<bool(std::size_t)>& may_claim);

// "1700000000000-3" -> (1700000000000, 3); false when it is not an id.
bool parse_entry_id(const std::string& id, long long& ms, long long& seq);

}  // namespace h3pipe::dispatch
