#pragma once
// protobuf's own log lines, routed into spdlog with a rate limit.
//
// libprotobuf logs one ERROR line per malformed string field it meets while parsing ("String
// field 'h3pipe.Offer.run_id' contains invalid UTF-8 data ..."), from whatever thread parses.
// Every service parses bytes from peers (transfer frames, notifications, queue entries), so a
// peer sending such frames in a loop could fill the disk with that line.  The parse still fails
// and the caller still counts it; this only bounds the log: at most `burst` lines per `period`,
// then one line saying how many were suppressed.
#include <chrono>
#include <cstddef>

namespace h3pipe::logging {

// Installs the handler process-wide (idempotent; the last call's limits win).
void route_protobuf_logs(std::size_t burst = 5,
                         std::chrono::milliseconds period = std::chrono::seconds(10));

}  // namespace h3pipe::logging
