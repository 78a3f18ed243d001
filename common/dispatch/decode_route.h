#pragma once
// The one decode-host choice (issue #13): which host decodes a finished latent.  Called by the
// planner's simulator (route_latent, from its clock), the sampler when it finishes a latent
// (worker::choose_decode_host, backlog from Redis XLEN), the transfer sender when a task arrives
// without a target, and `resume` when it re-enqueues a decode.  Each caller fills a DecodeLoad
// from what it can see; the candidates and the rule (choose_decode_host in dispatch.h: earliest
// expected decode completion, ties to a host holding the latent, then config order) are shared.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/config/config.h"
#include "common/dispatch/dispatch.h"

namespace h3pipe::dispatch {

// What the caller knows about the decode side now.  Absent entries mean "none": no queue, an idle
// decoder, a free link, every pool alive.
struct DecodeLoad {
  std::map<std::string, std::size_t> queued;        // per host: decode tasks waiting or running
                                                    // there, plus latents on their way there
  std::map<std::string, double> decoder_free_in_s;  // per decode pool: seconds until it is idle
  std::map<std::pair<std::string, std::string>, double> link_backlog_s;  // (from, to): transfers
                                                                         // queued ahead
  std::set<std::string> dead_pools;  // missed heartbeats: never chosen
};

// The link a latent takes from `from` to `to`: the config's in that direction, else the reverse,
// else the loader's default (1 Gbit/s, 0.5 ms); `found` tells which.
config::Link link_between(const config::Cluster& c, std::string_view from, std::string_view to,
                          bool* found = nullptr);

// The candidate hosts (every host with a decode pool, in config order) for a latent of
// `job_class` and `latent_bytes` held on `holders` (holders[0]: the host that made it, whose
// transfer sender moves it; a host in `holders` needs no transfer).  A decode pool without a
// profile for the class cannot take it, unless no decode pool has one: then each counts 1 s (the
// live side never fails a latent for a missing profile; the planner rejects such a config).
std::vector<DecodeHostState> decode_hosts(const config::Cluster& c,
                                          const std::vector<std::string>& holders,
                                          std::string_view job_class, std::uint64_t latent_bytes,
                                          const DecodeLoad& load);

// The chosen host and its expected completion (seconds from now); nullopt if no host can decode.
struct DecodeRoute {
  std::string host;
  double transfer_s = 0;
  double done_in_s = 0;
};
std::optional<DecodeRoute> route_latent(const config::Cluster& c,
                                        const std::vector<std::string>& holders,
                                        std::string_view job_class, std::uint64_t latent_bytes,
                                        const DecodeLoad& load);

// The decode side of a Lookahead (dispatch.h) for pools on `pool_hosts` (parallel to the pools;
// an empty name: no row, the pool's tail_s counts): decode_hosts from `load`, and per pool the
// transfer to each host (0 on its own host; the link's backlog in `load`, then the latent).
void fill_decode_side(const config::Cluster& c, const std::vector<std::string>& pool_hosts,
                      std::string_view job_class, std::uint64_t latent_bytes,
                      const DecodeLoad& load, Lookahead& la);

// The part of a job's time after a pool on `host` finishes it that does not hold that pool, with
// idle decoders: the fastest transfer + decode over the decode hosts (PoolState::tail_s).  From
// the config alone, so every live worker and the planner compute the same.
double route_tail_s(const config::Cluster& c, std::string_view host, std::string_view job_class,
                    std::uint64_t latent_bytes);

}  // namespace h3pipe::dispatch
