// What the console (#38, docs/console.md) needs beside the resources of #37: who a token is
// (GET /v1/me), draining a pool
// (it stops claiming, as at scale-in; its task in progress finishes) and retrying a failed or
// cancelled video (the same job again, so still exactly one output).
#include <nlohmann/json.hpp>

#include "common/api/context.h"
#include "common/api/fleet.h"
#include "common/api/routes.h"
#include "common/core/error_codes.h"
#include "common/core/json_parse.h"
#include "common/queue/events.h"
#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "common/state/resume.h"
#include "common/state/state.h"

namespace h3pipe::api {
namespace {
using nlohmann::json;

std::optional<HttpError> set_drain(Context& ctx, const std::string& pool, bool on,
                                   httplib::Response& res, queue::Redis& r, const TokenInfo& who) {
  auto done = set_pool_drained(r, ctx.c, pool, on, who.name);  // fleet.h: the CLI's drain too
  if (!done.ok()) return redis_error(done.error());
  if (!*done)
    return HttpError{404, fmt::format("no pool named \"{}\" in the cluster config", pool),
                     "invalid_request_error", "pool", "not_found"};
  res.set_content((*done)->dump(), "application/json");
  return std::nullopt;
}

// The video's job again from its first stage, when it failed or was cancelled.  Under the run's
// resume lock (state::begin_resume, which also clears the run's cancel flag), so two retries at
// once reopen it once: the second finds it no longer terminal.
std::optional<HttpError> retry(Context& ctx, const std::string& id, httplib::Response& res,
                               queue::Redis& r, const TokenInfo& who) {
  auto o = ctx.owned(r, id, who);
  if (auto* e = std::get_if<HttpError>(&o)) return *e;
  const auto& rec = std::get<Record>(o);
  auto v = ctx.video_json(r, id, rec);
  if (!v.ok()) return redis_error(v.error());
  const std::string status = (*v)["status"];
  if (status != "failed" && status != "cancelled")
    return HttpError{
        409, fmt::format("video {} is {}; only a failed or cancelled video is retried", id, status),
        "invalid_request_error", "id", "not_retryable"};
  const std::string run = rec.at("run");
  auto plan = state::begin_resume(r, run, {keys::stage_stream("encode")});
  if (!plan.ok()) {
    if (plan.error().code == errc::run::kUnknown) return not_found(id);
    return redis_error(plan.error());
  }
  for (const auto& j : plan->jobs) {
    if (j.job_id != kJobId) continue;
    const auto st = state::parse_job_state(j.state);
    // Cancelled while its task was still on its way: clearing the flag let it run on.
    if (!st || !state::terminal(*st) || *st == state::JobState::kDone) break;
    if (!j.spec)
      return HttpError{409, fmt::format("video {} has no spec to run again", id),
                       "invalid_request_error", "id", "not_retryable"};
    pb::StageTask t;
    t.set_run_id(run);
    t.set_job_id(j.job_id);
    *t.mutable_spec() = *j.spec;
    t.set_enqueued_unix_ms(state::now_ms());
    t.set_stage(pb::STAGE_ENCODE);
    std::string payload;
    t.SerializeToString(&payload);
    auto m = state::Store::reopen_move(run, j.job_id, state::JobState::kEncode,
                                       keys::stage_stream("encode"), payload);
    queue::events::Event q;
    q.type = queue::events::kQueued;
    q.job = j.job_id;
    q.reason = "retry by " + who.name;
    m.announce.push_back(q);
    auto moved = state::Store(r).apply(m);
    if (!moved.ok()) return redis_error(moved.error());
    break;
  }
  auto after = ctx.video_json(r, id, rec);
  if (!after.ok()) return redis_error(after.error());
  res.set_content(after->dump(), "application/json");
  return std::nullopt;
}

}  // namespace

void register_admin_routes(httplib::Server& http, Context& ctx) {
  // Who the token is: the console shows its actions by role.
  http.Get(
      "/v1/me",
      ctx.guarded(Role::kRead, [](auto&, auto& res, auto&, auto& who) -> std::optional<HttpError> {
        res.set_content(
            json{{"object", "token"}, {"name", who.name}, {"role", role_name(who.role)}}.dump(),
            "application/json");
        return std::nullopt;
      }));
  http.Get(
      "/v1/pools/drained",
      ctx.guarded(Role::kRead, [](auto&, auto& res, auto& r, auto&) -> std::optional<HttpError> {
        auto all = queue::hgetall(r, keys::drained_pools());
        if (!all.ok()) return redis_error(all.error());
        json data = json::array();
        for (const auto& [pool, value] : *all) data.push_back(drained_json(pool, value));
        res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
        return std::nullopt;
      }));
  const std::string pool = R"(/v1/pools/([A-Za-z0-9._-]{1,128}))";
  http.Post(pool + "/drain",
            ctx.guarded(Role::kAdmin, [&ctx](auto& req, auto& res, auto& r, auto& w) {
              return set_drain(ctx, req.matches[1], true, res, r, w);
            }));
  http.Post(pool + "/undrain",
            ctx.guarded(Role::kAdmin, [&ctx](auto& req, auto& res, auto& r, auto& w) {
              return set_drain(ctx, req.matches[1], false, res, r, w);
            }));
  http.Post(R"(/v1/videos/([^/]+)/retry)",
            ctx.guarded(Role::kSubmit, [&ctx](auto& req, auto& res, auto& r, auto& w) {
              return retry(ctx, req.matches[1], res, r, w);
            }));
}

}  // namespace h3pipe::api
