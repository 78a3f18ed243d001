#include "common/api/webhook_dispatch.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/api/context.h"
#include "common/api/webhooks.h"
#include "common/core/json_parse.h"
#include "common/logging/log.h"
#include "common/queue/events.h"
#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "common/queue/streams.h"
#include "common/state/state.h"

namespace h3pipe::api {
namespace {
using nlohmann::json;
namespace wh = webhooks;

const std::shared_ptr<spdlog::logger>& wlog() {
  static const auto l = logging::get("webhooks");
  return l;
}

long long env_ms(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end && *end == '\0' && n > 0 ? n : fallback;
}

std::optional<json> parse(const std::string& text) {
  std::string why;
  auto j = json_reader::parse_limited(text, {}, &why);
  if (!j || !j->is_object()) return std::nullopt;
  return j;
}

}  // namespace

WebhookOptions WebhookOptions::from_env() {
  WebhookOptions o;
  o.retry_ms = env_ms("H3PIPE_WEBHOOK_RETRY_MS", o.retry_ms);
  o.timeout_ms = env_ms("H3PIPE_WEBHOOK_TIMEOUT_MS", o.timeout_ms);
  o.give_up_ms = env_ms("H3PIPE_WEBHOOK_GIVE_UP_MS", o.give_up_ms);
  o.claim_idle_ms = env_ms("H3PIPE_WEBHOOK_CLAIM_IDLE_MS", o.claim_idle_ms);
  o.prune_ms = env_ms("H3PIPE_WEBHOOK_PRUNE_MS", o.prune_ms);
  if (const char* ca = std::getenv("H3PIPE_WEBHOOK_CA_FILE")) o.ca_file = ca;
  return o;
}

std::optional<std::string> check_webhook_ca_file() {
  const char* f = std::getenv("H3PIPE_WEBHOOK_CA_FILE");
  if (!f || !*f) return std::nullopt;
  std::ifstream in(f);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || text.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    return fmt::format(
        "--webhook-ca-file / H3PIPE_WEBHOOK_CA_FILE: expected a readable PEM file of CA "
        "certificates (-----BEGIN CERTIFICATE-----) for https webhook endpoints, got \"{}\"{}",
        f, in.is_open() ? " (no certificate in it)" : " (cannot be read)");
  return std::nullopt;
}

struct WebhookDispatcher::Impl {
  static constexpr long long kMaxWaitMs = 5000;
  static constexpr int kIntakeBlockMs = 2000;
  static constexpr int kDueScan = 16;
  Impl(Context& c, WebhookOptions opts) : ctx(c), o(opts) {
    char host[256] = "api";
    ::gethostname(host, sizeof host - 1);
    consumer = fmt::format("{}-{}", host, ::getpid());
    intake = std::thread([this] { intake_loop(); });
    for (int i = 0; i < kSenders; ++i) senders.emplace_back([this] { send_loop(); });
  }
  ~Impl() {
    stop = true;
    cv.notify_all();
    intake.join();
    for (auto& t : senders) t.join();
  }

  Context& ctx;
  const WebhookOptions o;
  std::string consumer;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  std::thread intake;
  std::vector<std::thread> senders;

  // Schedules this replica made (the intake's new deliveries, the sweep's cut-off ones): a
  // sender waiting for the earliest due time wakes for one that may be earlier (#37: no polling).
  std::uint64_t kicks = 0;  // guarded by mu

  void pause(std::chrono::milliseconds d) {
    std::unique_lock lk(mu);
    cv.wait_for(lk, d, [&] { return stop.load(); });
  }
  void kick() {
    {
      std::lock_guard lk(mu);
      ++kicks;
    }
    cv.notify_all();
  }
  std::uint64_t kicks_now() {
    std::lock_guard lk(mu);
    return kicks;
  }
  // Until `d` has passed, a schedule after `seen`, or the stop.
  void wait_kick(std::uint64_t seen, std::chrono::milliseconds d) {
    std::unique_lock lk(mu);
    cv.wait_for(lk, d, [&] { return stop.load() || kicks != seen; });
  }

  // ---- intake: terminal events -> outbox entries ---------------------------------------------
  // One MULTI/EXEC per event: its deliveries, scheduled now, and the XACK.
  Status take(queue::Redis& r, const queue::StreamEntry& e, const std::vector<wh::Endpoint>& eps) {
    std::string run;
    const auto ev = queue::events::from_fields(e.fields, &run);
    std::vector<std::vector<std::string>> cmds;
    if (queue::events::is_terminal(ev.type) && !run.empty()) {
      const std::string video = "video_" + run;
      auto rec = ctx.record(r, video);
      if (!rec.ok()) return rec.error();
      std::string user, own_url;
      json data;
      if (*rec) {
        user = (*rec)->count("user") ? (**rec)["user"] : "";
        own_url = (*rec)->count("webhook_url") ? (**rec)["webhook_url"] : "";
        data = {{"id", video}, {"run_id", run}, {"job_id", ev.job}};
      } else {
        auto u = queue::hget(r, keys::run(run), "user");
        if (!u.ok()) return u.error();
        user = u->value_or("");
        data = {{"run_id", run}, {"job_id", ev.job}};
      }
      if (!ev.reason.empty()) data["reason"] = ev.reason;
      const long long at_ms = ev.ts_ms > 0 ? ev.ts_ms : state::now_ms();
      const std::string body = json{
          {"object", "event"},
          {"id", "evt_" + e.id},
          {"type", ev.type},
          {"created_at", at_ms / 1000},
          {"data", data}}.dump();
      const long long now = state::now_ms();
      const auto out = [&](const std::string& id, const std::string& url,
                           const std::string& secret_of) {
        const json d = {{"id", id},        {"url", url},      {"secret_of", secret_of},
                        {"body", body},    {"type", ev.type}, {"attempts", 0},
                        {"first_ms", now}, {"last_error", ""}};
        cmds.push_back({"HSET", wh::kOutboxKey, id, d.dump()});
        cmds.push_back({"ZADD", wh::kDueKey, "NX", std::to_string(now), id});
      };
      for (const auto& ep : eps) {
        if (std::find(ep.events.begin(), ep.events.end(), ev.type) == ep.events.end()) continue;
        if (!ep.user.empty() && ep.user != user) continue;
        out("msg_" + e.id + "_" + ep.id, ep.url, "endpoint:" + ep.id);
      }
      if (!own_url.empty())
        if (auto u = wh::parse_url("webhook_url", own_url); std::holds_alternative<wh::Url>(u))
          out("msg_" + e.id + "_url", own_url, "host:" + std::get<wh::Url>(u).host);
    }
    cmds.push_back({"XACK", keys::terminal_events(), wh::kGroup, e.id});
    auto t = queue::transaction(r, cmds);
    if (!t.ok()) return t.error();
    return {};
  }

  Status take_all(queue::Redis& r, const std::vector<queue::StreamEntry>& entries) {
    if (entries.empty()) return {};
    auto eps = wh::list_endpoints(r);
    if (!eps.ok()) return eps.error();
    for (const auto& e : entries)
      if (auto s = take(r, e, *eps); !s.ok()) return s;
    kick();
    return {};
  }

  // Claims older than a delivery can take (their replica died mid-delivery) go back on the
  // schedule.
  Status sweep(queue::Redis& r) {
    auto claims = queue::hgetall(r, wh::kClaimsKey);
    if (!claims.ok()) return claims.error();
    const long long now = state::now_ms();
    for (const auto& [id, at] : *claims) {
      if (now - std::atoll(at.c_str()) < o.timeout_ms + 5000) continue;
      auto t = queue::transaction(
          r, {{"ZADD", wh::kDueKey, "NX", std::to_string(now), id}, {"HDEL", wh::kClaimsKey, id}});
      if (!t.ok()) return t.error();
      wlog()->warn("webhook {}: its delivery was cut off (a replica stopped); retried", id);
      kick();
    }
    return {};
  }

  // Consumers of the group idle for prune_ms with nothing pending: replicas gone for long.  A
  // consumer with entries pending is kept (XGROUP DELCONSUMER would drop them) until XAUTOCLAIM
  // has taken them; a replica that comes back is a consumer again on its next read.
  Status prune(queue::Redis& r) {
    auto all = queue::xinfo_consumers(r, keys::terminal_events(), wh::kGroup);
    if (!all.ok()) return all.error();
    for (const auto& [name, pending, idle] : *all) {
      if (name.empty() || name == consumer || pending != 0 || idle < o.prune_ms) continue;
      auto d = queue::int_command(
          r, {"XGROUP", "DELCONSUMER", keys::terminal_events(), wh::kGroup, name});
      if (!d.ok()) return d.error();
      wlog()->info(
          "webhooks: consumer {} idle {} s with nothing pending (its replica is gone); "
          "removed from group {}",
          name, idle / 1000, wh::kGroup);
    }
    return {};
  }

  void intake_loop() {
    using Clock = std::chrono::steady_clock;
    std::optional<Context::Lease> conn;
    bool grouped = false;
    Clock::time_point next_claim{}, next_sweep{};
    while (!stop) {
      if (!conn) {
        auto l = ctx.lease();
        if (!l.ok()) {
          pause(std::chrono::seconds(1));
          continue;
        }
        conn.emplace(std::move(*l));
      }
      queue::Redis& r = *conn->r;
      Status st;
      if (!grouped) {
        st = queue::xgroup_create(r, keys::terminal_events(), wh::kGroup, "$");
        grouped = st.ok();
      }
      const auto now = Clock::now();
      if (st.ok() && now >= next_claim) {
        // What a replica that died read and never acknowledged, then its consumer once gone long.
        auto c = queue::xautoclaim(r, keys::terminal_events(), wh::kGroup, consumer,
                                   o.claim_idle_ms, "0-0", 100);
        st = c.ok() ? take_all(r, c->entries) : Status(c.error());
        if (st.ok()) st = prune(r);
        next_claim = now + std::chrono::milliseconds(std::min(10000LL, o.claim_idle_ms));
      }
      // A claim is cut off only after timeout_ms + 5 s: looked for every 5 s.
      if (st.ok() && now >= next_sweep) {
        st = sweep(r);
        next_sweep = now + std::chrono::seconds(5);
      }
      if (st.ok()) {
        // Blocks until an event arrives (taken at once) or kIntakeBlockMs pass (the sweeps above,
        // and the stop, wait at most that long).
        auto got = queue::xreadgroup(r, keys::terminal_events(), wh::kGroup, consumer, 100,
                                     kIntakeBlockMs);
        st = got.ok() ? take_all(r, *got) : Status(got.error());
      }
      if (!st.ok()) {
        if (st.error().message.find("NOGROUP") != std::string::npos) grouped = false;
        wlog()->warn("reading terminal events: {}", st.error().message);
        conn.reset();
        pause(std::chrono::seconds(1));
      }
    }
  }

  // ---- delivery ------------------------------------------------------------------------------
  std::optional<std::string> secret_of(queue::Redis& r, const std::string& ref, Status& st) {
    if (ref.rfind("endpoint:", 0) == 0) {
      auto v = queue::hget(r, wh::kEndpointsKey, ref.substr(9));
      if (!v.ok()) return st = v.error(), std::nullopt;
      if (!*v) return std::nullopt;
      auto j = parse(**v);
      return j ? std::optional<std::string>(j->value("secret", "")) : std::nullopt;
    }
    if (ref.rfind("host:", 0) == 0) {
      auto s = wh::host_secret(r, ref.substr(5));
      if (!s.ok()) return st = s.error(), std::nullopt;
      return *s;
    }
    return std::nullopt;
  }

  // One attempt: "" when the receiver answered 2xx, else what went wrong.
  std::string post(const json& d, const std::string& secret) {
    auto u = wh::parse_url("url", d.value("url", ""));
    if (auto* e = std::get_if<std::string>(&u)) return *e;
    const wh::Url& url = std::get<wh::Url>(u);
    const std::string id = d.value("id", ""), body = d.value("body", "");
    const long long ts = state::now_ms() / 1000;
    httplib::Client c(url.origin());
    const auto t = std::chrono::milliseconds(o.timeout_ms);
    c.set_connection_timeout(t);
    c.set_read_timeout(t);
    c.set_write_timeout(t);
    c.set_follow_location(false);  // a redirect is an answer, not a new destination
    if (url.scheme == "https") {
      c.enable_server_certificate_verification(true);
      if (!o.ca_file.empty()) c.set_ca_cert_path(o.ca_file);
    }
    const httplib::Headers h = {{"webhook-id", id},
                                {"webhook-timestamp", std::to_string(ts)},
                                {"webhook-signature", wh::sign(secret, id, ts, body)},
                                {"User-Agent", "h3pipe-webhooks"}};
    auto res = c.Post(url.path, h, body, "application/json");
    if (!res) return fmt::format("no answer ({})", httplib::to_string(res.error()));
    if (res->status >= 200 && res->status < 300) return "";
    return fmt::format("HTTP {}", res->status);
  }

  Status deliver(queue::Redis& r, const std::string& id) {
    const std::string now_s = std::to_string(state::now_ms());
    auto claim =
        queue::transaction(r, {{"ZREM", wh::kDueKey, id}, {"HSET", wh::kClaimsKey, id, now_s}});
    if (!claim.ok()) return claim.error();
    if ((*claim)[0] != "1") {  // another sender has it: ours was only the claims field
      return {};
    }
    auto text = queue::hget(r, wh::kOutboxKey, id);
    if (!text.ok()) return text.error();
    auto d = *text ? parse(**text) : std::nullopt;
    Status st;
    auto secret = d ? secret_of(r, d->value("secret_of", ""), st) : std::nullopt;
    if (!st.ok()) return st;
    if (!d || !secret) {
      // Delivered already, or its endpoint (or host) was removed: nothing more to send.
      if (d) ctx.metrics.webhook_delivery("refused");
      auto t = queue::transaction(r, {{"HDEL", wh::kOutboxKey, id}, {"HDEL", wh::kClaimsKey, id}});
      if (!t.ok()) return t.error();
      if (d) wlog()->info("webhook {}: its endpoint was removed; dropped", id);
      return {};
    }
    const std::string why = post(*d, *secret);
    const int attempts = d->value("attempts", 0) + 1;
    if (why.empty()) {
      ctx.metrics.webhook_delivery("delivered");
      wlog()->info("webhook {} to {}: delivered (attempt {})", id, d->value("url", ""), attempts);
      auto t = queue::transaction(r, {{"HDEL", wh::kOutboxKey, id}, {"HDEL", wh::kClaimsKey, id}});
      return t.ok() ? Status{} : Status(t.error());
    }
    const long long now = state::now_ms();
    long long delay = o.retry_ms;
    for (int i = 1; i < attempts && delay < 3600000; ++i) delay *= 2;
    delay = std::min(delay, 3600000LL);
    (*d)["attempts"] = attempts;
    (*d)["last_error"] = why;
    if (now + delay - d->value("first_ms", now) > o.give_up_ms) {
      (*d)["dead_ms"] = now;
      ctx.metrics.webhook_delivery("dead_lettered");
      wlog()->warn("webhook {} to {}: {} (attempt {}); dead-lettered", id, d->value("url", ""), why,
                   attempts);
      auto t = queue::transaction(r, {{"HSET", wh::kDeadKey, id, d->dump()},
                                      {"HDEL", wh::kOutboxKey, id},
                                      {"HDEL", wh::kClaimsKey, id}});
      return t.ok() ? Status{} : Status(t.error());
    }
    ctx.metrics.webhook_delivery("retried");
    wlog()->warn("webhook {} to {}: {} (attempt {}); retried in {} ms", id, d->value("url", ""),
                 why, attempts, delay);
    auto t = queue::transaction(r, {{"HSET", wh::kOutboxKey, id, d->dump()},
                                    {"ZADD", wh::kDueKey, std::to_string(now + delay), id},
                                    {"HDEL", wh::kClaimsKey, id}});
    return t.ok() ? Status{} : Status(t.error());
  }

  // The first kDueScan entries of the schedule: those due now (ids), and the earliest time of
  // the others (0: none).
  struct Due {
    std::vector<std::string> ids;
    long long next_ms = 0;
  };
  static Result<Due> due_now(queue::Redis& r) {
    auto rep =
        r.pipeline({{"ZRANGE", wh::kDueKey, "0", std::to_string(kDueScan - 1), "WITHSCORES"}});
    if (!rep.ok()) return rep.error();
    const long long now = state::now_ms();
    Due out;
    for (const auto& [id, score] : queue::as_hash((*rep)[0])) {
      const long long at = std::atoll(score.c_str());
      if (at <= now)
        out.ids.push_back(id);
      else if (!out.next_ms || at < out.next_ms)
        out.next_ms = at;
    }
    return out;
  }

  // Each sender reads the schedule, delivers what is due, then waits until the earliest entry
  // falls due or this replica schedules one (kick), at most kMaxWaitMs (an entry another replica
  // scheduled and could not deliver: one that died).  Idle: a ZRANGE per kMaxWaitMs per sender.
  void send_loop() {
    while (!stop) {
      const std::uint64_t seen = kicks_now();  // before the read: a later schedule wakes us
      long long wait = 0;                      // > 0: nothing due, wait this long
      {
        auto l = ctx.lease();  // back to the pool at the end of this block, before the wait
        if (!l.ok()) {
          pause(std::chrono::seconds(1));
          continue;
        }
        auto due = due_now(*l->r);
        if (!due.ok()) {
          l->r.reset();  // a broken connection is not pooled
          pause(std::chrono::seconds(1));
          continue;
        }
        if (due->ids.empty()) {
          wait = kMaxWaitMs;
          if (due->next_ms) wait = std::clamp(due->next_ms - state::now_ms(), 1LL, kMaxWaitMs);
        }
        for (const auto& id : due->ids) {
          if (stop) break;
          if (auto s = deliver(*l->r, id); !s.ok()) {
            wlog()->warn("webhook {}: {}", id, s.error().message);
            l->r.reset();
            break;
          }
        }
      }
      if (wait > 0) wait_kick(seen, std::chrono::milliseconds(wait));
    }
  }
};

WebhookDispatcher::WebhookDispatcher(Context& ctx, WebhookOptions o)
    : impl_(std::make_unique<Impl>(ctx, o)) {}
WebhookDispatcher::~WebhookDispatcher() = default;

}  // namespace h3pipe::api
