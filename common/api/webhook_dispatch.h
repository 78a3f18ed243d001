#pragma once
// Webhook delivery in every h3pipe-api replica (issue #37 item 6; docs/api.md "Webhooks").
//   intake:   XREADGROUP GROUP webhooks <host-pid> on keys::terminal_events() (and XAUTOCLAIM of
//             what a dead replica read and never acknowledged); for each event, one outbox entry
//             per matching endpoint (and the video's own allowed webhook_url), scheduled now, in
//             the same MULTI/EXEC as the XACK: an event is in the outbox or still pending, never
//             lost.  The delivery id (the webhook-id header) is msg_<event entry id>_<endpoint>,
//             the same on every attempt, by every replica.
//   delivery: kSenders threads take due entries from the schedule (ZREM by one replica only),
//             each waiting, when none is due, until the earliest one falls due or this replica's
//             intake schedules one (at most 5 s: another replica's), never polling (#37),
//             POST them signed (Standard Webhooks) with cpp-httplib (no redirect followed,
//             timeout_ms), then remove them (2xx) or reschedule with exponential backoff
//             (retry_ms, doubling, at most 1 h apart) until give_up_ms after the first attempt,
//             then dead-letter them.  A claim older than timeout_ms + 5 s (its replica died
//             mid-delivery) is put back on the schedule.  An https URL is verified against the
//             system's CAs, or only those of ca_file when the operator names one.
//   pruning:  a consumer of the group idle for prune_ms (a replica gone for long) with nothing
//             pending (its entries were taken by XAUTOCLAIM after claim_idle_ms) is deleted.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace h3pipe::api {

class Context;

struct WebhookOptions {
  long long retry_ms = 5000;          // the first retry's delay (H3PIPE_WEBHOOK_RETRY_MS)
  long long timeout_ms = 10000;       // per attempt (H3PIPE_WEBHOOK_TIMEOUT_MS)
  long long give_up_ms = 86400000LL;  // then dead-lettered (H3PIPE_WEBHOOK_GIVE_UP_MS)
  // A dead replica's unacknowledged events are taken over when idle this long
  // (H3PIPE_WEBHOOK_CLAIM_IDLE_MS); its consumer is deleted once idle prune_ms
  // (H3PIPE_WEBHOOK_PRUNE_MS) with nothing pending.
  long long claim_idle_ms = 30000;
  long long prune_ms = 3600000;
  // PEM CA bundle https endpoints are verified against instead of the system's
  // (H3PIPE_WEBHOOK_CA_FILE, h3pipe-api --webhook-ca-file); "": the system's.
  std::string ca_file;
  // The defaults, overridden by those environment variables.
  static WebhookOptions from_env();
};

// H3PIPE_WEBHOOK_CA_FILE (or --webhook-ca-file) checked at start: nullopt when unset or a
// readable file holding a PEM certificate, else the message naming it and what was expected.
std::optional<std::string> check_webhook_ca_file();

class WebhookDispatcher final {
 public:
  static constexpr int kSenders = 4;
  WebhookDispatcher(Context& ctx, WebhookOptions o);
  ~WebhookDispatcher();  // stops the threads (a delivery in flight ends within timeout_ms)
  WebhookDispatcher(const WebhookDispatcher&) = delete;
  WebhookDispatcher& operator=(const WebhookDispatcher&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3pipe::api
