#pragma once
// A pool's heartbeat in the hash keys::pools() (field: the pool's name): pb::Heartbeat as
// protobuf bytes, like the tasks on the streams.  Binary rather than proto3 JSON: its only
// readers are the pools' dispatch boards (pool_board.cpp), which read the whole hash before
// every claim; nothing shows it to people (`h3pipe status` reads the runs, not the pools).
#include <string>
#include <string_view>

#include "common/core/result.h"
#include "h3pipe.pb.h"

namespace h3pipe::worker {

std::string encode_heartbeat(const pb::Heartbeat& hb);

// The heartbeat stored under `pool`.  Error "pools.heartbeat" naming the pool when the bytes are
// not one: not protobuf, another pool's name, no timestamp, or a time that is not a finite
// number >= 0 (a writer of another version, or something else wrote to the hash).
Result<pb::Heartbeat> decode_heartbeat(std::string_view pool, std::string_view bytes);

// Liveness that no writer's clock can fool (issue #35 D3).  A heartbeat's stamp is the writer's
// clock, `now_s` the reader's (unix seconds).  A stamp more than kHeartbeatFutureS ahead of the
// reader is no evidence at all (a host whose clock runs ahead, or a forged entry): the pool is
// not live on its word.  Otherwise it is live while its age is under kHeartbeatLiveS, chosen so
// that kHeartbeatFutureS + kHeartbeatLiveS = 3 s: a pool that stops beating is dead for every
// reader within 3 s of its last beat whatever the writer's clock said (pools beat every 500 ms).
inline constexpr double kHeartbeatFutureS = 0.5;
inline constexpr double kHeartbeatLiveS = 2.5;
// now_s - the stamp, in seconds (negative: a stamp in the reader's future).
double heartbeat_age_s(const pb::Heartbeat& hb, double now_s);
// A stamp in the future beyond kHeartbeatFutureS.
bool heartbeat_from_future(const pb::Heartbeat& hb, double now_s);
bool heartbeat_live(const pb::Heartbeat& hb, double now_s);

}  // namespace h3pipe::worker
