#pragma once
// The dispatch policy: which pool takes which task, which decode host gets which latent.
//
// One implementation, two callers (docs/design.md "One policy, live and planned"):
//  - the live workers: an idle pool calls should_claim() before XREADGROUP, with pool states
//    built from heartbeats (busy_until_unix_s) and the stream's queue depth;
//  - the planner's discrete-event simulator (simulate.h), with states built from its own clock.
// Nothing here knows Redis, clocks or files: every input is a plain number, so both callers
// make the same decision from the same state.  All functions are pure, thread-safe and cheap
// (O(pools) for should_claim; O(queued * log pools) for choose_decode_host).
//
// Tie rule: when two pools would complete at the same time (within 1e-9 s relative), the pool
// whose name sorts first wins.  Every live worker applies the same rule, so exactly one claims.
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/dispatch/policy.h"

namespace h3pipe::dispatch {

inline constexpr double kCannotRun = std::numeric_limits<double>::infinity();

// What a pool looks like to the policy, for one task class.
//
// GPU groups: a pool whose GPUs are shared (config shares_gpus_with) with pools of later stages
// (an encoder on a sampler's GPUs, or a serial box running all three stages) commits those GPUs
// to the job through the later stages as well.  Its expected_s is then its own stage time plus
// the later stages' times on the same group, and while busy its free_in_s runs to the end of
// that commitment (the live worker reports it as busy_until in its heartbeat).  Without this an
// encoder would look free again right after encoding, while its GPUs are about to sample.
//
// queued_tasks for should_claim: the tasks queued for the pool's stage plus those still upstream
// that will reach it (for samplers: queued and running encodes; for decoders: latents in transit
// to the decoder's host).  The lookahead stops a slower pool from deferring a task to a faster
// one when more work is on its way anyway.
struct PoolState {
  std::string name;
  double expected_s = kCannotRun;  // expected stage time for the task's class; kCannotRun if the
                                   // pool has no profile for it (it never gets that task)
  double free_in_s = 0;            // 0 if idle; else expected seconds until it can start a task
                                   // (for a pool whose GPUs another pool holds: that pool's rest)
  bool alive = true;               // false: a missed heartbeat; never assigned
  double tail_s = 0;               // seconds from the end of its task to the job's end that do
                                   // not hold the pool (route_tail_s: transfer + decode); the
                                   // same for all its slots, so pools on hosts with a slower way
                                   // to the decoders finish a job later
};

// The work a stage's claim decision counts (the lookahead above), from queue depths a live
// worker reads with XLEN/XPENDING and the simulator tracks.  Only the counts for stages
// upstream of `stage` matter.
struct Backlog {
  std::size_t encode_queued = 0, encoding = 0;  // encode stream: waiting, claimed
  std::size_t sample_queued = 0, sampling = 0;  // sample stream: waiting, claimed
  std::size_t decode_queued_here = 0;           // this host's decode stream: waiting
  std::size_t in_transit_here = 0;              // latents being sent to this host
};
// encode: encode_queued.  sample: sample_queued + encode_queued + encoding.  decode:
// decode_queued_here + in_transit_here + every job not yet routed to a decode host (sampling,
// sample_queued, encode_queued, encoding).
std::size_t claim_lookahead(config::StageKind stage, const Backlog& b);

// The policy a pool applies.  Encoders and samplers apply the configured one.  An encoder whose
// GPUs a sampler shares states its commitment (encode + that sampling, PoolState above), so under
// kCompletionTime a job is encoded in the group that will have sampled it soonest, or left for a
// busy group that frees in time.  Decoders always apply kCompletionTime: a decoder takes a latent
// only if no other decoder of its host would finish it sooner (a plain queue lets an idle slow
// decoder take it; that is never better for the latent and the decode queue is FIFO anyway).
Policy effective_policy(Policy configured, config::StageKind stage);

// Should the idle pool `self` claim one of `queued_tasks` identical tasks now?
//  - kFirstFree: yes if there is any task and `self` can run it.
//  - kCompletionTime: yes iff the greedy earliest-completion assignment (each task in turn to the
//    pool that would finish it first, given the pools' free_in_s and expected_s) hands `self` at
//    least one task.  Equivalently: fewer than queued_tasks task slots of other pools complete
//    before self's first one (self_expected).  `self`'s own free_in_s is treated as 0.
// Returns false if `self` is not in `pools`, is dead, or cannot run the class.
bool should_claim(Policy policy, std::string_view self, const std::vector<PoolState>& pools,
                  std::size_t queued_tasks);
// The same with `self` an index into `pools` (no name lookup; the rollout's inner loop).
bool should_claim_at(Policy policy, std::size_t self, const std::vector<PoolState>& pools,
                     std::size_t queued_tasks);

// When the tasks still upstream reach the next stage's queue, from the upstream stage's pool
// states: one arrival per busy feeder whose output reaches the queue (at its free_in_s), then
// the greedy earliest-completion assignment (assign_greedy, tails ignored) of the `queued`
// upstream tasks on all feeders, keeping those of feeders that reach it (`reaches`, parallel to
// `feeders`: false for an encoder whose job its own GPU group samples).  Ascending, at most
// kRolloutTasks.
std::vector<double> upstream_arrivals(const std::vector<PoolState>& feeders,
                                      const std::vector<bool>& reaches, std::size_t queued);

// The greedy earliest-completion assignment itself, for reports and tests: element i is the index
// into `pools` of the pool that takes task i (tasks in queue order), or npos if no pool can.
// completion_s (optional) receives each task's expected completion time (with the pool's tail_s).
std::vector<std::size_t> assign_greedy(const std::vector<PoolState>& pools, std::size_t tasks,
                                       std::vector<double>* completion_s = nullptr);

// A candidate decode host for a finished latent.
struct DecodeHostState {
  std::string host;
  double transfer_s = 0;            // expected seconds until the latent is durable there
                                    // (0 on the same host; includes the link's backlog)
  std::vector<PoolState> decoders;  // the host's decode pools, expected_s for the job's class
  std::size_t queued = 0;           // decode tasks already waiting on that host
  bool alive = true;
  bool local = false;  // the latent is already on this host (wins ties)
};

// Expected completion time of one more decode on `h`: the queued tasks take the earliest decoder
// slots first (the decode queue is FIFO), then the new latent the earliest slot that starts no
// sooner than its arrival.  kCannotRun if no live decoder there can run it.
double expected_decode_completion(const DecodeHostState& h);

// Which host decodes a finished latent, under every policy: the earliest expected decode
// completion.  Ties go to a host that already holds the latent (`local`: no network), then to the
// earlier host in the vector (config order).  nullopt if no host can decode the class.  (A
// lookahead like claim_lookahead's was tried here: giving the current latent the slowest of the
// k earliest slots made tails worse, so routing is myopic.)  Callers build `hosts` with
// decode_hosts() (decode_route.h), from Redis live and from the simulator's clock in a plan.
std::optional<std::size_t> choose_decode_host(const std::vector<DecodeHostState>& hosts);

// What a claim decision can see beyond the stage's queue, all from heartbeats, stream depths and
// the config (nothing a live worker lacks):
//  - arrivals_in_s: seconds from now until each task still upstream reaches the stage's queue
//    (upstream_arrivals, from the upstream pools' states);
//  - the decode side the stage's latents go to: decode_hosts as decode_hosts() builds them
//    (decode_route.h: decoders' free_in_s, each host's queued latents; transfer_s unused), and
//    transfer_s[i][h], seconds for pool i's latent to reach host h (0 on the same host, with the
//    link's backlog).  An empty row (or none): pool i's tail_s stands for the decode (a GPU
//    group with its own decoder: 0).
struct Lookahead {
  std::vector<double> arrivals_in_s;
  std::vector<DecodeHostState> decode_hosts;
  std::vector<std::vector<double>> transfer_s;
};

// The claim decision when part of the work is still upstream: `ready_tasks` are in the stage's
// queue now and more arrive at la.arrivals_in_s.  No arrivals: should_claim(..., ready_tasks).
// Otherwise, under kCompletionTime, a one-step rollout: the stage is modelled from now on, with
// a pool taking a ready task now or sitting out this instant, every pool then deciding by the
// greedy count rule or by first-free (each option is worth the better of the two), then the
// latents (the modelled tasks' and those the busy pools are making), in order of their stage end,
// sent to the host that would decode each first and taken there by an idle decoder the greedy
// count rule gives work (as live decoders decide), else by the one that finishes it first; links
// are free but for the backlog in transfer_s.  A pool claims unless sitting out gives an earlier
// last job end by more than kRolloutTieBand of it; within that band (a near tie, which the few
// milliseconds a live pool's view is off by could flip) the greedy count rule over ready +
// arriving tasks decides.  That rule alone treats arriving tasks as if queued: a slow pool it
// gives a later task takes the head one while a faster idle pool waits for the next arrival, and
// it ignores the decoders, so sampling sooner can decode later (docs/planner.md).
// The instant is modelled as the simulator runs it (Sim::dispatch): the idle pools asked in
// vector order (config order), again after each claim, until none claims; `self` claims if that
// hands it a task.  So the answer does not depend on which idle pool asks first (live: whichever
// polls first).  The model covers the first kRolloutTasks tasks; O(idle pools * (tasks * pools^2
// + tasks * decoders)).
inline constexpr std::size_t kRolloutTasks = 256;
inline constexpr double kRolloutTieBand = 0.005;
bool should_claim(Policy policy, std::string_view self, const std::vector<PoolState>& pools,
                  std::size_t ready_tasks, const Lookahead& la);

}  // namespace h3pipe::dispatch
