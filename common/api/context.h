#pragma once
// What every route of h3pipe-api shares (docs/api.md): the cluster config, the server's options,
// a pool of Redis connections, the token check, errors in OpenAI's shape, and the video record
// and its Video object.  Routes live in files of their own (routes.h) and get a Context.
#include <httplib.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/api/api_metrics.h"
#include "common/api/queue_position.h"
#include "common/api/server.h"
#include "common/api/tokens.h"
#include "common/config/config.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

inline constexpr const char* kVideosKey = "h3pipe:api:videos";  // zset: id by created ms
inline constexpr long long kIdempotencyMs = 24LL * 3600 * 1000;
// An Idempotency-Key's entry (JSON: sha256, video, at_ms), a string that expires with the window:
// h3pipe:api:idempotency:<sha256 of "TOKEN NAME:KEY">.
std::string idempotency_key(const std::string& token_name, const std::string& key);
// How long idempotency entries and the records of deleted videos are kept (#37): 24 h, or
// $H3PIPE_API_PRUNE_MS (tests).
long long prune_ms();
inline constexpr const char* kJobId = "video";  // a video is a run of one job of this id
inline std::string video_key(const std::string& id) {
  return "h3pipe:api:video:" + id;
}

// An error in OpenAI's shape, with the status its SDKs map to their typed errors.
struct HttpError {
  int status = 400;
  std::string message, type = "invalid_request_error", param, code;
};
void send_error(httplib::Response& res, const HttpError& e);
// 503 while Redis is unreachable or not the primary; 500 for a command Redis refused.
HttpError redis_error(const Error& e);
HttpError not_found(const std::string& id);
std::string sha256_hex(const std::string& s);
long long mtime_s(const std::filesystem::path& p);  // 0 when it cannot be read

using Record = std::map<std::string, std::string>;

class Context {
 public:
  Context(config::Cluster cluster, RedisFactory factory, ServerOptions options)
      : c(std::move(cluster)), o(std::move(options)), factory_(std::move(factory)) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const config::Cluster c;
  const ServerOptions o;
  // Per-route requests and latency, SSE clients, webhook deliveries (docs/api.md, "Metrics").
  ApiMetrics metrics;

  // A pooled connection, returned on scope exit.
  struct Lease {
    Context* ctx;
    std::unique_ptr<queue::Redis> r;
    Lease(Context* x, std::unique_ptr<queue::Redis> conn) : ctx(x), r(std::move(conn)) {}
    Lease(Lease&&) = default;
    ~Lease();
  };
  Result<Lease> lease();

  using Handler = std::function<std::optional<HttpError>(
      const httplib::Request&, httplib::Response&, queue::Redis&, const TokenInfo&)>;
  // Token check (401/403), a Redis connection (503), then the handler.
  httplib::Server::Handler guarded(Role need, Handler h);
  // The same for a route that reads Redis anyway: `reads` (of the request, before any check) go
  // in the token check's round trip, their replies to the handler (empty: not read, because this
  // replica had not seen the token yet; the handler then reads for itself).
  using Reads = std::function<std::vector<std::vector<std::string>>(const httplib::Request&)>;
  using ReadHandler = std::function<std::optional<HttpError>(
      const httplib::Request&, httplib::Response&, queue::Redis&, const TokenInfo&,
      std::vector<queue::Reply>& read)>;
  httplib::Server::Handler guarded(Role need, Reads reads, ReadHandler h);

  // The video record, or nullopt when there is none (or it was deleted).
  Result<std::optional<Record>> record(queue::Redis& r, const std::string& id);
  // OpenAI's Video object from the record and the job's state in Redis.
  Result<nlohmann::json> video_json(queue::Redis& r, const std::string& id, const Record& rec);
  // The record and its Video object in one round trip; nullopt when there is no record (or it
  // was deleted).
  Result<std::optional<nlohmann::json>> video(queue::Redis& r, const std::string& id);
  // That round trip's commands (none for an id no video has), and video() from their replies.
  static std::vector<std::vector<std::string>> video_commands(const std::string& id);
  // `rank`: false for a video just submitted, which the ingest has not put on the encode stream
  // yet (its queue_position is null by construction: no ranking on POST's path).
  Result<std::optional<nlohmann::json>> video(queue::Redis& r, const std::string& id,
                                              const std::vector<queue::Reply>& rep,
                                              bool rank = true);
  // The record of a video this token may change (submit: its own; admin: any).
  std::variant<Record, HttpError> owned(queue::Redis& r, const std::string& id,
                                        const TokenInfo& who);

 private:
  // The Video object from the record and the replies of its reads (context.cpp), from `at`.
  nlohmann::json video_from(const std::string& id, const Record& rec,
                            const std::vector<queue::Reply>& rep, std::size_t at) const;
  // Sets a queued video's queue_position from the shared ranking (queue_position.h: a round trip
  // and a ranking at most every 250 ms, a lookup otherwise).
  Status with_queue_position(queue::Redis& r, nlohmann::json& v);
  QueuePositions positions_;
  RedisFactory factory_;
  std::mutex mu_;
  std::vector<std::unique_ptr<queue::Redis>> idle_;
};

}  // namespace h3pipe::api
