#pragma once
// h3pipe-api on several hosts (docs/api.md, "Two hosts"): each host's API registers the URL it
// answers on in Redis, and a video whose MP4 lies on another host's output root (the decode ran
// there) is served by reading it through that host's API, Range by Range (1 MiB each;
// H3PIPE_API_PEER_CHUNK_BYTES for tests), so the client sees one API whichever host it asked.
//
// h3pipe:api:hosts  hash: host name -> {"url": "http://ADDR:PORT/v1", "at_ms": N}, written by each
// API at start and every kAnnounceEvery after (a Redis that lost it is filled again).
#include <httplib.h>

#include <chrono>
#include <optional>
#include <string>

#include "common/api/context.h"
#include "common/config/config.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

inline constexpr const char* kApiHostsKey = "h3pipe:api:hosts";
inline constexpr auto kAnnounceEvery = std::chrono::seconds(10);
// Sent on a request one API makes to another: the receiver serves from its own disk only (no
// second hop, no loop).  Its value is the asking host.
inline constexpr const char* kForwardedHeader = "X-H3pipe-Forwarded-By";

// The URL peers and clients reach an API on: advertise when set, else http://ADDR:PORT/v1 (https
// when the API serves TLS itself, tls_front.h) where ADDR is bind, or the host's address when
// bind is every interface (0.0.0.0, ::).
std::string advertised_url(const config::Cluster& c, const std::string& host,
                           const std::string& bind, int port, const std::string& advertise,
                           bool https = false);

// HSET h3pipe:api:hosts host {"url", "at_ms"}.
Status announce(queue::Redis& r, const std::string& host, const std::string& url);

// The host whose decode committed the job's MP4 (its stage history in Redis); "" when none did.
Result<std::string> decode_host(queue::Redis& r, const std::string& run, const std::string& job);

// The MP4 of a completed video that is not on this host's output root: read from the API of the
// host that decoded it (the client's Authorization and Range go along; 206 and Accept-Ranges as
// for a local file).  404 when no other host holds it or the request came from a peer; 503 when
// that host's API has not registered or does not answer.
std::optional<HttpError> serve_from_peer(Context& ctx, queue::Redis& r, const std::string& id,
                                         const std::string& run, const std::string& job,
                                         const httplib::Request& req, httplib::Response& res);

}  // namespace h3pipe::api
