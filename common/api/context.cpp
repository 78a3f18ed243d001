#include "common/api/context.h"

#include <sys/stat.h>

#include "common/api/progress.h"
#include "common/api/queue_position.h"
#include "common/artifacts/artifacts.h"
#include "common/core/error_codes.h"
#include "common/core/sha256.h"
#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "common/state/paths.h"
#include "common/state/state.h"

namespace h3pipe::api {
using nlohmann::json;

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  res.set_content(json{{"error", err}}.dump(), "application/json");
}
HttpError redis_error(const Error& e) {
  // Redis not answering, or not as the primary (a fail-over): retry later.  A command Redis
  // refused (redis.error) is this server's fault, not the client's nor the network's.
  const bool unreachable = e.code == errc::redis::kConnect || e.code == errc::redis::kIo ||
                           e.code == errc::redis::kAuth || e.code == errc::redis::kNotPrimary ||
                           e.code == errc::redis::kReply || e.code == errc::redis::kSentinel;
  if (unreachable)
    return {503, "Redis is unreachable: " + e.message + " (retry later)", "server_error", "",
            "redis_unavailable"};
  return {500, e.message, "server_error", "", e.code};
}
HttpError not_found(const std::string& id) {
  return {404, fmt::format("no video with id \"{}\"", id), "invalid_request_error", "id",
          "not_found"};
}

std::string sha256_hex(const std::string& s) {
  Sha256 h;
  h.update(s.data(), s.size());
  return h.hex_digest();
}

std::string idempotency_key(const std::string& token_name, const std::string& key) {
  return "h3pipe:api:idempotency:" + sha256_hex(token_name + ":" + key);
}

long long prune_ms() {
  static const long long ms = [] {
    const char* v = std::getenv("H3PIPE_API_PRUNE_MS");
    char* end = nullptr;
    const long long n = v ? std::strtoll(v, &end, 10) : 0;
    return v && *v && *end == '\0' && n > 0 ? n : kIdempotencyMs;
  }();
  return ms;
}

long long mtime_s(const std::filesystem::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<long long>(st.st_mtime) : 0;
}

Context::Lease::~Lease() {
  if (!r) return;
  std::lock_guard lk(ctx->mu_);
  if (ctx->idle_.size() < 8) ctx->idle_.push_back(std::move(r));
}

Result<Context::Lease> Context::lease() {
  {
    std::lock_guard lk(mu_);
    if (!idle_.empty()) {
      auto r = std::move(idle_.back());
      idle_.pop_back();
      return Lease{this, std::move(r)};
    }
  }
  auto r = factory_();
  if (!r.ok()) return r.error();
  return Lease{this, std::move(*r)};
}

httplib::Server::Handler Context::guarded(Role need, Handler h) {
  return guarded(
      need, nullptr,
      [h](const httplib::Request& req, httplib::Response& res, queue::Redis& r,
          const TokenInfo& who, std::vector<queue::Reply>&) { return h(req, res, r, who); });
}

httplib::Server::Handler Context::guarded(Role need, Reads reads, ReadHandler h) {
  return [this, need, reads, h](const httplib::Request& req, httplib::Response& res) {
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) != 0 || auth.size() <= 7)
      return send_error(res, {401,
                              "missing bearer token: send \"Authorization: Bearer TOKEN\" with "
                              "a token from `h3pipe token create`",
                              "authentication_error", "", "missing_token"});
    auto l = lease();
    if (!l.ok()) return send_error(res, redis_error(l.error()));
    // The token and its rate (rate_limit.h: one round trip for a token seen before), counted in
    // Redis, so every replica sees every request.
    auto a = authorize(*l->r, auth.substr(7), o.rate_limits, state::now_ms(),
                       reads ? reads(req) : std::vector<std::vector<std::string>>{});
    if (!a.ok()) return send_error(res, redis_error(a.error()));
    const std::optional<TokenInfo>& who = a->who;
    if (!who)
      return send_error(
          res, {401, "unknown or revoked token", "authentication_error", "", "invalid_token"});
    const RateVerdict* rate = &a->rate;
    if (rate->retry_after_ms) {
      const long long ms = *rate->retry_after_ms;
      res.set_header("Retry-After", std::to_string((ms + 999) / 1000));
      res.set_header("retry-after-ms", std::to_string(ms));
      res.set_header("x-ratelimit-limit-requests", fmt::format("{:g}/s", rate->limit));
      return send_error(res, {429,
                              fmt::format("rate limit of {:g} requests per second for token "
                                          "\"{}\" reached; retry after {} ms",
                                          rate->limit, who->name, ms),
                              "requests", "", "rate_limit_exceeded"});
    }
    if (static_cast<int>(who->role) < static_cast<int>(need))
      return send_error(res, {403,
                              fmt::format("token \"{}\" has role {}; this needs role {} or "
                                          "admin",
                                          who->name, role_name(who->role), role_name(need)),
                              "permission_error", "", "forbidden"});
    if (auto e = h(req, res, *l->r, *who, a->read)) send_error(res, *e);
  };
}

Result<std::optional<Record>> Context::record(queue::Redis& r, const std::string& id) {
  using Out = std::optional<Record>;
  if (id.rfind("video_", 0) != 0 || !artifacts::validate_id("id", id).ok()) return Out{};
  auto rep = queue::hgetall(r, video_key(id));
  if (!rep.ok()) return rep.error();
  auto m = std::move(*rep);
  if (m.empty() || m.count("deleted")) return Out{};
  return Out{std::move(m)};
}

namespace {
// What a video's Video object reads beside its record, for its run, in one pipeline: the job's
// hash, the run's cancelled flag, the run's events (progress.h).
std::vector<std::vector<std::string>> video_reads(const std::string& run) {
  return {{"HGETALL", keys::job(run, kJobId)},
          {"HGET", keys::run(run), "cancelled"},
          progress_command(run)};
}
}  // namespace

Result<json> Context::video_json(queue::Redis& r, const std::string& id, const Record& rec) {
  auto rep = r.pipeline(video_reads(rec.at("run")));
  if (!rep.ok()) return rep.error();
  json v = video_from(id, rec, *rep, 0);
  if (auto s = with_queue_position(r, v); !s.ok()) return s.error();
  return v;
}

Status Context::with_queue_position(queue::Redis& r, json& v) {
  // Only a queued video has a place (the shared ranking: queue_position.h, docs/api.md).
  if (v.value("status", "") != "queued") return {};
  auto p = positions_.of(r, c, v.value("run_id", ""), kJobId);
  if (!p.ok()) return p.error();
  if (*p) v["queue_position"] = **p;
  return {};
}

std::vector<std::vector<std::string>> Context::video_commands(const std::string& id) {
  if (id.rfind("video_", 0) != 0 || !artifacts::validate_id("id", id).ok()) return {};
  // A video's run is its id without "video_" (video_routes.cpp): read beside the record.
  std::vector<std::vector<std::string>> cmds = {{"HGETALL", video_key(id)}};
  for (auto& c : video_reads(id.substr(6))) cmds.push_back(std::move(c));
  return cmds;
}

Result<std::optional<json>> Context::video(queue::Redis& r, const std::string& id) {
  const auto cmds = video_commands(id);
  if (cmds.empty()) return std::optional<json>{};
  auto rep = r.pipeline(cmds);
  if (!rep.ok()) return rep.error();
  return video(r, id, *rep);
}

Result<std::optional<json>> Context::video(queue::Redis& r, const std::string& id,
                                           const std::vector<queue::Reply>& rep, bool rank) {
  using Out = std::optional<json>;
  if (rep.size() < 4) return Out{};  // not video_commands(id)'s: an id no video has
  const std::string run = id.substr(6);
  const Record rec = queue::as_hash(rep[0]);
  if (rec.empty() || rec.count("deleted")) return Out{};
  if (!rec.count("run") || rec.at("run") != run) {  // not a record this server wrote
    auto v = video_json(r, id, rec);
    if (!v.ok()) return v.error();
    return Out{std::move(*v)};
  }
  json v = video_from(id, rec, rep, 1);
  if (rank)
    if (auto s = with_queue_position(r, v); !s.ok()) return s.error();
  return Out{std::move(v)};
}

json Context::video_from(const std::string& id, const Record& rec,
                         const std::vector<queue::Reply>& rep, std::size_t at) const {
  const std::string run = rec.at("run");
  auto job = queue::as_hash(rep[at]);
  const auto flag = queue::as_value(rep[at + 1]);
  const bool run_cancelled = flag && !flag->empty() && *flag != "0";
  const std::string st = job.count("state") ? job["state"] : "queued";
  std::string status = "in_progress";
  int progress = 0;
  if (st == "done")
    status = "completed", progress = 100;
  else if (st == "failed")
    status = "failed";
  else if (st == "cancelled" || run_cancelled)
    status = "cancelled";
  else if (st == "queued")
    status = "queued";
  // The share of the planned time done, from the run's events (progress.h, #37).
  const std::string cls = rec.count("model") ? rec.at("model") : "default";
  const Progress prog = progress_from(rep[at + 2], kJobId, plan_for(c, cls), state::now_ms());
  if (status != "completed") progress = prog.percent;
  json completed_at = nullptr;
  if (status == "completed")
    if (auto p = paths::mp4(c, run, kJobId); p.ok())
      if (long long t = mtime_s(*p)) completed_at = t;
  json error = nullptr;
  if (status == "failed")
    error = {{"code", "job_failed"}, {"message", job.count("error") ? job["error"] : "failed"}};
  return json{{"id", id},
              {"object", "video"},
              {"created_at", std::stoll(rec.at("created_ms")) / 1000},
              {"completed_at", completed_at},
              {"expires_at", nullptr},
              {"error", error},
              {"model", rec.at("model")},
              {"progress", progress},
              {"prompt", rec.at("prompt")},
              {"seconds", rec.at("seconds")},
              {"size", rec.at("size")},
              {"status", status},
              {"run_id", run},
              {"job_id", kJobId},
              {"user", rec.count("user") ? rec.at("user") : ""},
              {"stage", st},
              {"host", prog.host},
              {"pool", prog.pool},
              {"attempt", std::strtoll(prog.attempt.c_str(), nullptr, 10)},
              {"eta_s", prog.eta_s ? json(*prog.eta_s) : json(nullptr)},
              // Filled for a queued video by with_queue_position (queue_position.h).
              {"queue_position", nullptr},
              // A completed job's receipt exists (the decode's completion writes it before
              // `done`): relative to the API's base URL, as the SDK's paths are.
              {"receipt_url", status == "completed" ? json(fmt::format("/v1/jobs/{}/receipt", id))
                                                    : json(nullptr)}};
}

std::variant<Record, HttpError> Context::owned(queue::Redis& r, const std::string& id,
                                               const TokenInfo& who) {
  auto rec = record(r, id);
  if (!rec.ok()) return redis_error(rec.error());
  if (!*rec) return not_found(id);
  if (who.role != Role::kAdmin && (*rec)->count("user") && (**rec)["user"] != who.name)
    return HttpError{403,
                     fmt::format("video {} belongs to \"{}\"; token \"{}\" may change only its "
                                 "own videos",
                                 id, (**rec)["user"], who.name),
                     "permission_error", "id", "forbidden"};
  return **rec;
}

}  // namespace h3pipe::api
