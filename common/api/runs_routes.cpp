// h3pipe's own resources over HTTP (issue #37 item 2; docs/api.md): runs (a batch -> a run, its
// status, cancel, resume), a job's receipt and the fleet.  Every answer is built by the code the
// CLI prints: submit.h (`h3pipe run`), run_status.h (`status --json`), resume_run.h (`resume`),
// fleet.h (`status`'s hosts and pools).
#include <nlohmann/json.hpp>

#include "common/api/context.h"
#include "common/api/fleet.h"
#include "common/api/resume_run.h"
#include "common/api/routes.h"
#include "common/api/run_access.h"
#include "common/api/run_status.h"
#include "common/api/runs_body.h"
#include "common/api/submit.h"
#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/core/error_codes.h"
#include "common/core/json_parse.h"
#include "common/queue/hashes.h"
#include "common/state/paths.h"
#include "common/state/receipts.h"
#include "common/state/state.h"

namespace h3pipe::api {
namespace {
using nlohmann::json;

std::optional<HttpError> status_of(Context& ctx, queue::Redis& r, const std::string& run,
                                   httplib::Response& res, int http_status = 200) {
  std::vector<PoolLife> lives;
  if (auto l = pool_lives(r, ctx.c); l.ok()) lives = std::move(*l);
  auto j = run_status_json(r, ctx.c, run, lives, storage_degraded(r, ctx.c));
  if (!j.ok())
    return j.error().code == errc::run::kUnknown ? run_not_found(run) : redis_error(j.error());
  (*j)["object"] = "run";
  (*j)["id"] = run;
  res.status = http_status;
  res.set_content(j->dump(), "application/json");
  return std::nullopt;
}

std::optional<HttpError> create(Context& ctx, const httplib::Request& req, httplib::Response& res,
                                queue::Redis& r, const TokenInfo& who) {
  auto body = batch_text_of_body(req.body, req.get_header_value("Content-Type"));
  if (auto* p = std::get_if<FieldProblem>(&body))
    return HttpError{400, p->message, "invalid_request_error", p->param, "invalid_body"};
  const std::string& text = std::get<std::string>(body);
  spec::Batch batch = spec::parse_batch(text, ctx.c);
  // Every job records its user (#37): the token's name (an admin's line may name another user),
  // as `h3pipe run` gives a line without one its --user (or the login name).
  if (config::valid_user_name(who.name))
    for (auto& s : batch.specs)
      if (s.user().empty() || who.role != Role::kAdmin) s.set_user(who.name);
  if (!batch.errors.empty()) {
    // Every line's error, as `h3pipe run` prints them ("line 3: prompt: ..."), the first in
    // OpenAI's message and all of them in error.errors.
    json errors = json::array();
    std::string msg;
    for (const auto& e : batch.errors) {
      const std::string one = fmt::format("line {}: {}", e.line, e.error.to_string());
      errors.push_back({{"line", e.line}, {"field", e.error.field}, {"message", one}});
      if (msg.empty()) msg = one;
    }
    msg += fmt::format(" ({} error(s); nothing was submitted)", batch.errors.size());
    const auto& first = batch.errors.front();
    res.status = 400;
    res.set_content(json{{"error",
                          {{"message", msg},
                           {"type", "invalid_request_error"},
                           {"param", fmt::format("line {}: {}", first.line, first.error.field)},
                           {"code", "invalid_batch"},
                           {"errors", errors}}}}
                        .dump(),
                    "application/json");
    return std::nullopt;
  }
  if (batch.specs.empty())
    return HttpError{400, "the batch has no jobs (one JSON object per line, or a JSON array)",
                     "invalid_request_error", "", "invalid_body"};
  std::string run = req.has_param("run_id") ? req.get_param_value("run_id") : "";
  if (run.empty()) {
    run = state::new_run_id();
  } else if (auto s = artifacts::validate_id("run_id", run); !s.ok()) {
    return HttpError{400, s.error().message, "invalid_request_error", "run_id", "invalid_value"};
  } else if (state::Store(r).run_status(run).ok()) {
    // The same run id again (a retried POST): only its owner (or admin) adds to it.
    if (auto e = may_change_run(r, run, who)) return e;
  }
  auto sub = submit_batch(r, run, batch);
  if (!sub.ok()) return redis_error(sub.error());
  if (!sub->conflicts.empty()) {
    std::string msg;
    for (const auto& [line, job] : sub->conflicts)
      msg += fmt::format("{}line {}: jobId \"{}\" already exists in run {} with another spec",
                         msg.empty() ? "" : "; ", line, job, run);
    return HttpError{409, msg + "; nothing was submitted", "invalid_request_error", "run_id",
                     "conflict"};
  }
  auto owned = queue::hsetnx(r, kRunOwnersKey, run, who.name);
  if (!owned.ok()) return redis_error(owned.error());
  if (auto e = status_of(ctx, r, run, res, 201)) return e;
  // The jobs this request submitted (total counts them as the ingest takes them).
  auto j = json_reader::parse_limited(res.body, {}, nullptr);
  if (j) {
    (*j)["submitted"] = batch.specs.size();
    res.set_content(j->dump(), "application/json");
  }
  return std::nullopt;
}

std::optional<HttpError> list(const httplib::Request& req, httplib::Response& res,
                              queue::Redis& r) {
  int limit = 20;
  if (req.has_param("limit")) {
    const std::string s = req.get_param_value("limit");
    char* end = nullptr;
    const long n = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end || n < 1 || n > 100)
      return HttpError{400, fmt::format("limit: expected an integer 1-100, got \"{}\"", s),
                       "invalid_request_error", "limit", "invalid_value"};
    limit = static_cast<int>(n);
  }
  state::Store store(r);
  auto runs = store.runs(static_cast<std::size_t>(limit) + 1);
  if (!runs.ok()) return redis_error(runs.error());
  json data = json::array();
  for (const auto& id : *runs) {
    if (static_cast<int>(data.size()) == limit) break;
    auto s = store.run_status(id);
    if (!s.ok()) continue;
    json j = run_summary_json(id, *s);
    j["object"] = "run";
    j["id"] = id;
    data.push_back(std::move(j));
  }
  res.set_content(
      json{{"object", "list"}, {"data", data}, {"has_more", static_cast<int>(runs->size()) > limit}}
          .dump(),
      "application/json");
  return std::nullopt;
}

// GET /v1/jobs/{id}/receipt: id = "RUN:JOB" (':' is in no run or job id) or a video id.  The
// receipt Redis holds (state/receipts.h), else JOB.pipeline.json on this host's output root.
std::optional<HttpError> receipt(Context& ctx, const std::string& id, httplib::Response& res,
                                 queue::Redis& r) {
  std::string run, job;
  if (const auto colon = id.find(':'); colon != std::string::npos) {
    run = id.substr(0, colon);
    job = id.substr(colon + 1);
  } else if (id.rfind("video_", 0) == 0) {
    run = id.substr(6);
    job = kJobId;
  }
  const HttpError none{404,
                       fmt::format("no receipt for job \"{}\" (expected RUN:JOB or a video id of "
                                   "a completed job)",
                                   id),
                       "invalid_request_error", "id", "not_found"};
  if (!artifacts::validate_id("run", run).ok() || !artifacts::validate_id("job", job).ok())
    return none;
  if (id.rfind("video_", 0) == 0) {
    auto rec = ctx.record(r, id);
    if (!rec.ok()) return redis_error(rec.error());
    if (!*rec) return not_found(id);
  }
  auto held = queue::hget(r, state::receipts_key(run), job);
  if (!held.ok()) return redis_error(held.error());
  std::string text = held->value_or("");
  if (text.empty()) {
    auto p = paths::receipt(ctx.c, run, job);
    if (!p.ok()) return none;
    auto f = read_bounded_file(*p, {"a receipt", kMaxJsonFileBytes});
    if (!f.ok()) return none;
    text = std::move(*f);
  }
  res.set_content(text, "application/json");
  return std::nullopt;
}

}  // namespace

void register_runs_routes(httplib::Server& http, Context& ctx) {
  const std::string run = R"(/v1/runs/([^/]+))";
  http.Post("/v1/runs", ctx.guarded(Role::kSubmit, [&ctx](auto& req, auto& res, auto& r, auto& w) {
    return create(ctx, req, res, r, w);
  }));
  http.Get("/v1/runs", ctx.guarded(Role::kRead, [](auto& req, auto& res, auto& r, auto&) {
    return list(req, res, r);
  }));
  http.Get(run,
           ctx.guarded(Role::kRead,
                       [&ctx](auto& req, auto& res, auto& r, auto&) -> std::optional<HttpError> {
                         const std::string id = req.matches[1];
                         if (auto e = check_run_id(id)) return e;
                         return status_of(ctx, r, id, res);
                       }));
  http.Post(run + "/cancel",
            ctx.guarded(Role::kSubmit,
                        [&ctx](auto& req, auto& res, auto& r, auto& w) -> std::optional<HttpError> {
                          const std::string id = req.matches[1];
                          if (auto e = run_or_404(r, id)) return e;
                          if (auto e = may_change_run(r, id, w)) return e;
                          if (auto s = state::Store(r).cancel(id); !s.ok())
                            return redis_error(s.error());
                          return status_of(ctx, r, id, res);
                        }));
  http.Post(run + "/resume",
            ctx.guarded(Role::kSubmit,
                        [&ctx](auto& req, auto& res, auto& r, auto& w) -> std::optional<HttpError> {
                          const std::string id = req.matches[1];
                          if (auto e = run_or_404(r, id)) return e;
                          if (auto e = may_change_run(r, id, w)) return e;
                          auto out = resume_run(r, ctx.c, id);
                          if (!out.ok()) {
                            if (out.error().code == errc::run::kUnknown) return run_not_found(id);
                            return redis_error(out.error());
                          }
                          if (out->no_jobs) return run_not_found(id);
                          if (!out->no_decode_pool.empty())
                            return HttpError{409,
                                             fmt::format("resume {}: no decode pool in the config",
                                                         out->no_decode_pool),
                                             "invalid_request_error", "", "no_decode_pool"};
                          json j = out->to_json(id);
                          j["object"] = "run.resume";
                          res.set_content(j.dump(), "application/json");
                          return std::nullopt;
                        }));
  http.Get(R"(/v1/jobs/([^/]+)/receipt)",
           ctx.guarded(Role::kRead, [&ctx](auto& req, auto& res, auto& r, auto&) {
             return receipt(ctx, req.matches[1], res, r);
           }));
  http.Get("/v1/fleet",
           ctx.guarded(Role::kRead,
                       [&ctx](auto&, auto& res, auto& r, auto&) -> std::optional<HttpError> {
                         auto j = fleet_json(r, ctx.c);
                         if (!j.ok()) return redis_error(j.error());
                         res.set_content(j->dump(), "application/json");
                         return std::nullopt;
                       }));
}

}  // namespace h3pipe::api
