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

}  // namespace h3pipe::worker
