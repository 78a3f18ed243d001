// Pause, unpause and move first over HTTP (issue #39 item 4; docs/api.md, "Pause, unpause, move
// first"): POST /v1/runs/{id}/pause|unpause, /v1/runs/{id}/jobs/{job}/move and
// /v1/videos/{id}/move.  The same code as `h3pipe pause|unpause|move` (run_control.h); the same
// ownership rule as cancel (run_access.h: submit its own runs and videos, admin any).  The CLI
// writes no event for these, so neither does the API.
#include <nlohmann/json.hpp>

#include "common/api/context.h"
#include "common/api/routes.h"
#include "common/api/run_access.h"
#include "common/api/run_control.h"
#include "common/artifacts/artifacts.h"
#include "common/core/json_parse.h"
#include "common/state/state.h"

namespace h3pipe::api {
namespace {
using nlohmann::json;

std::optional<HttpError> pause(const std::string& run, bool on, httplib::Response& res,
                               queue::Redis& r, const TokenInfo& who) {
  if (auto e = run_or_404(r, run)) return e;
  if (auto e = may_change_run(r, run, who)) return e;
  auto out = set_run_paused(r, run, on);
  if (!out.ok()) return redis_error(out.error());
  if (*out == ControlOutcome::kNoSuchRun) return run_not_found(run);
  res.set_content(json{{"object", "run.pause"}, {"id", run}, {"paused", on}}.dump(),
                  "application/json");
  return std::nullopt;
}

// The body {"position": "first"} (the only move there is), else a 400 naming the field.
std::optional<HttpError> check_position(const std::string& body) {
  std::string why;
  auto j = json_reader::parse_limited(body, {}, &why);
  if (!j || !j->is_object())
    return HttpError{400,
                     j ? "the body must be a JSON object {\"position\": \"first\"}"
                       : "the body is not JSON: " + why,
                     "invalid_request_error", "", "invalid_body"};
  for (const auto& [k, v] : j->items())
    if (k != "position")
      return HttpError{400, fmt::format("{}: unknown field (expected only \"position\")", k),
                       "invalid_request_error", k, "unknown_parameter"};
  const auto p = j->find("position");
  if (p == j->end() || !p->is_string() || *p != "first")
    return HttpError{400,
                     fmt::format("position: expected \"first\" (the only move), got {}",
                                 p == j->end() ? "nothing" : p->dump()),
                     "invalid_request_error", "position", "invalid_value"};
  return std::nullopt;
}

std::optional<HttpError> move(const std::string& run, const std::string& job,
                              const httplib::Request& req, httplib::Response& res, queue::Redis& r,
                              const TokenInfo& who) {
  if (auto e = check_position(req.body)) return e;
  if (auto e = run_or_404(r, run)) return e;
  if (auto e = may_change_run(r, run, who)) return e;
  if (!artifacts::validate_id("job", job).ok()) return not_found(job);
  auto out = move_job_first(r, run, job, state::now_ms());
  if (!out.ok()) return redis_error(out.error());
  if (*out != ControlOutcome::kDone)
    return HttpError{404, fmt::format("no job \"{}\" in run \"{}\"", job, run),
                     "invalid_request_error", "job", "not_found"};
  res.set_content(
      json{{"object", "job.move"}, {"run", run}, {"job", job}, {"position", "first"}}.dump(),
      "application/json");
  return std::nullopt;
}

std::optional<HttpError> move_video(Context& ctx, const std::string& id,
                                    const httplib::Request& req, httplib::Response& res,
                                    queue::Redis& r, const TokenInfo& who) {
  if (auto e = check_position(req.body)) return e;
  auto o = ctx.owned(r, id, who);
  if (auto* e = std::get_if<HttpError>(&o)) return *e;
  const auto& rec = std::get<Record>(o);
  auto out = move_job_first(r, rec.at("run"), kJobId, state::now_ms());
  if (!out.ok()) return redis_error(out.error());
  if (*out != ControlOutcome::kDone) return not_found(id);
  auto v = ctx.video_json(r, id, rec);
  if (!v.ok()) return redis_error(v.error());
  res.set_content(v->dump(), "application/json");
  return std::nullopt;
}

}  // namespace

void register_control_routes(httplib::Server& http, Context& ctx) {
  const std::string run = R"(/v1/runs/([^/]+))";
  http.Post(run + "/pause", ctx.guarded(Role::kSubmit, [](auto& req, auto& res, auto& r, auto& w) {
    return pause(req.matches[1], true, res, r, w);
  }));
  http.Post(run + "/unpause",
            ctx.guarded(Role::kSubmit, [](auto& req, auto& res, auto& r, auto& w) {
              return pause(req.matches[1], false, res, r, w);
            }));
  http.Post(run + R"(/jobs/([^/]+)/move)",
            ctx.guarded(Role::kSubmit, [](auto& req, auto& res, auto& r, auto& w) {
              return move(req.matches[1], req.matches[2], req, res, r, w);
            }));
  http.Post(R"(/v1/videos/([^/]+)/move)",
            ctx.guarded(Role::kSubmit, [&ctx](auto& req, auto& res, auto& r, auto& w) {
              return move_video(ctx, req.matches[1], req, res, r, w);
            }));
}

}  // namespace h3pipe::api
