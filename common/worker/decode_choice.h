#pragma once
// Which host decodes a finished latent, live: the sampler decides when it completes the sample
// stage and writes the choice into the decode task's target_host; the transfer sender then moves
// the latent there.  The choice itself is the shared rule (dispatch::route_latent, decode_route.h:
// the earliest expected decode completion, ties to the sampling host, then config order); this
// adapter only fills its inputs from the board's ports (decode_load over state::BoardReader, in
// Redis: state::RedisPoolBoardStore).  On a Redis error a backlog counts as zero: the choice
// degrades to "fastest host for this job", never to a failure.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/config/config.h"
#include "common/dispatch/decode_route.h"
#include "common/proto/h3pipe.pb.h"
#include "common/state/pool_board_store.h"

namespace h3pipe::worker {

struct DecodeCandidate {
  std::string host;
  double transfer_s = 0;  // latent over the link (0 when local)
  double decode_s = 0;    // this job's decode time there (fastest decoder)
  double done_s = 0;  // expected seconds until decoded there (dispatch::expected_decode_completion)
  double total() const { return done_s; }
};

// The live DecodeLoad, as the simulator counts it: the decode tasks waiting on every decode host
// (XLEN - XPENDING) and each decoder's seconds until idle from its heartbeat, read from `board`
// (nothing on a Redis error or nullptr).
// from_host: the host whose transfer sender's outbox (on this machine) adds the latents still in
// transit, counted on the host each goes to.
dispatch::DecodeLoad decode_load(const config::Cluster& c, state::BoardReader* board,
                                 const std::string& from_host = "");

// The functions below read the load through `board` (in Redis: a state::RedisPoolBoardStore on
// the caller's connection; in tests: test_support::FakeBoard); nullptr: no backlogs and no
// heartbeats, the choice from the config alone.  Each reads the task's class and latent size with
// spec::route_inputs (the one derivation).

// Scores every host with a decode pool for a latent held on `holders` (the first made it).
// Sorted best first, in the order dispatch::choose_decode_host ranks them.
std::vector<DecodeCandidate> score_decode_hosts(const config::Cluster& c,
                                                const std::vector<std::string>& holders,
                                                const pb::StageTask& task,
                                                state::BoardReader* board);
inline std::vector<DecodeCandidate> score_decode_hosts(const config::Cluster& c,
                                                       const std::string& self,
                                                       const pb::StageTask& task,
                                                       state::BoardReader* board) {
  return score_decode_hosts(c, std::vector<std::string>{self}, task, board);
}

// The chosen host's name for a latent held on `holders`; holders[0] when no host can decode it
// (the config has no decode pool).
std::string choose_decode_host(const config::Cluster& c, const std::vector<std::string>& holders,
                               const pb::StageTask& task, state::BoardReader* board);
inline std::string choose_decode_host(const config::Cluster& c, const std::string& self,
                                      const pb::StageTask& task, state::BoardReader* board) {
  return choose_decode_host(c, std::vector<std::string>{self}, task, board);
}

// Where `resume` re-enqueues the decode of a latent held on `holders` (from the job's history:
// the sampling host, then hosts that received it): a holder that decodes, chosen among those by
// the same rule, so no latent is decoded where it is not; else the shared choice from holders[0],
// whose transfer sender must move it there (via_transfer).  Empty host: no decode pool at all.
struct ResumeTarget {
  std::string host;
  bool via_transfer = false;  // hand the task to holders[0]'s sender (outbox), not a decode stream
};
ResumeTarget resume_decode_target(const config::Cluster& c, const std::vector<std::string>& holders,
                                  const pb::StageTask& task, state::BoardReader* board);

}  // namespace h3pipe::worker
