#pragma once
// Webhooks of h3pipe-api (issue #37 item 6; docs/api.md "Webhooks"): endpoints the operator adds
// (`h3pipe webhook add URL`), hosts a request's own `webhook_url` may name (`h3pipe webhook allow
// HOST`), Standard Webhooks signing, and the durable outbox the dispatcher (webhook_dispatch.h)
// delivers from.  Everything lives in Redis, so any API replica delivers any event:
//   h3pipe:api:webhooks:endpoints  hash  ID -> {"id","url","user","events","secret","created_ms"}
//   h3pipe:api:webhooks:allow      hash  HOST -> {"host","secret","created_ms"}
//   h3pipe:api:webhooks:outbox     hash  DELIVERY -> {"id","url","secret_of","body","attempts",
//                                        "first_ms","last_error"}   (the webhook-id is DELIVERY)
//   h3pipe:api:webhooks:due        zset  DELIVERY by the ms of its next attempt
//   h3pipe:api:webhooks:claims     hash  DELIVERY -> ms a replica took it (stale: retaken)
//   h3pipe:api:webhooks:dead       hash  DELIVERY -> the outbox entry, after 24 h of failures
// Secrets are kept (signing needs them), readable only by the operator's Redis user, and are
// never logged: the CLI prints one once, as the last line of `add` / `allow`.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::api::webhooks {

inline constexpr const char* kEndpointsKey = "h3pipe:api:webhooks:endpoints";
inline constexpr const char* kAllowKey = "h3pipe:api:webhooks:allow";
inline constexpr const char* kOutboxKey = "h3pipe:api:webhooks:outbox";
inline constexpr const char* kDueKey = "h3pipe:api:webhooks:due";
inline constexpr const char* kClaimsKey = "h3pipe:api:webhooks:claims";
inline constexpr const char* kDeadKey = "h3pipe:api:webhooks:dead";
inline constexpr const char* kGroup = "webhooks";

// The terminal event types an endpoint may ask for (all of them by default).
const std::vector<std::string>& event_types();

struct Url {
  std::string scheme, host;  // scheme: http | https; host lower-case
  int port = 0;
  std::string path;            // with its query; "/" at least
  std::string origin() const;  // scheme://host:port
};
// An absolute http(s) URL without user info; the error names `field` and what was expected.
std::variant<Url, std::string> parse_url(const std::string& field, const std::string& s);

struct Endpoint {
  std::string id, url, user;
  std::vector<std::string> events;
  std::string secret;  // whsec_...
  long long created_ms = 0;
};
// Validates URL and events ("" = all), makes an id (we_ + 16 hex) and a whsec_ secret.
Result<Endpoint> add_endpoint(queue::Redis& r, const std::string& url, const std::string& user,
                              const std::string& events);
Result<std::vector<Endpoint>> list_endpoints(queue::Redis& r);
// By id or by URL; the number removed.
Result<int> remove_endpoint(queue::Redis& r, const std::string& id_or_url);

// Allows HOST for a request's webhook_url; its signing secret (an allowed host keeps its own).
Result<std::string> allow_host(queue::Redis& r, const std::string& host);
Result<int> disallow_host(queue::Redis& r, const std::string& host);
Result<std::vector<std::string>> allowed_hosts(queue::Redis& r);
// The secret of an allowed host; nullopt when it is not allowed.
Result<std::optional<std::string>> host_secret(queue::Redis& r, const std::string& host);
// A request's webhook_url: nullopt when it may be used, else the 400 message (naming the field).
Result<std::optional<std::string>> check_request_url(queue::Redis& r, const std::string& url);

// Dead-lettered deliveries, oldest first: {"id","url","attempts","first_ms","dead_ms",
// "last_error", "type"}.
struct DeadLetter {
  std::string id, url, type, last_error;
  int attempts = 0;
  long long first_ms = 0, dead_ms = 0;
};
Result<std::vector<DeadLetter>> list_dead(queue::Redis& r);
// Deliveries not yet made (in the outbox).
Result<std::size_t> pending(queue::Redis& r);
// `h3pipe webhook redeliver`: puts dead-lettered deliveries back in the outbox, due now, with
// the same webhook-id and body (their attempts and give-up window start again).  `ids` empty:
// every dead letter.  An id that is not dead-lettered is an error naming it (nothing is moved).
// The number re-queued.
Result<int> redeliver(queue::Redis& r, const std::vector<std::string>& ids);

// Standard Webhooks: "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)) where
// key is the base64 after "whsec_".  Empty for a secret that does not decode.
std::string sign(const std::string& secret, const std::string& id, long long timestamp_s,
                 const std::string& body);
// A new secret: whsec_ + base64 of 32 random bytes.
Result<std::string> new_secret();

}  // namespace h3pipe::api::webhooks
