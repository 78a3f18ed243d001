// GET /v1/runs/{id}/gantt (issue #38 item 5; docs/api.md): the run's measured Gantt beside the
// planner's for the same jobs, exactly what `h3pipe report --svg / --plan-svg` draws (the charts
// come from schedule::report_charts, the receipts from run_receipts.h, the SVG from
// schedule::render_svg), as JSON spans or, with ?format=svg, as the SVG itself.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/api/context.h"
#include "common/api/routes.h"
#include "common/api/run_receipts.h"
#include "common/artifacts/artifacts.h"
#include "common/core/error_codes.h"
#include "common/schedule/gantt_svg.h"
#include "common/schedule/receipts.h"
#include "common/state/state.h"

namespace h3pipe::api {
namespace {
using nlohmann::json;

HttpError no_run(const std::string& id) {
  return {404, fmt::format("no run with id \"{}\"", id), "invalid_request_error", "id",
          "not_found"};
}

std::optional<HttpError> gantt(Context& ctx, const httplib::Request& req, httplib::Response& res,
                               queue::Redis& r) {
  const std::string id = req.matches[1];
  if (!artifacts::validate_id("id", id).ok()) return no_run(id);
  if (auto s = state::Store(r).run_status(id); !s.ok())
    return s.error().code == errc::run::kUnknown ? no_run(id) : redis_error(s.error());
  const std::string format = req.has_param("format") ? req.get_param_value("format") : "json";
  const std::string chart = req.has_param("chart") ? req.get_param_value("chart") : "measured";
  if (format != "json" && format != "svg")
    return HttpError{400, fmt::format("format \"{}\": expected json or svg", format),
                     "invalid_request_error", "format", "invalid_value"};
  if (chart != "measured" && chart != "planned")
    return HttpError{400, fmt::format("chart \"{}\": expected measured or planned", chart),
                     "invalid_request_error", "chart", "invalid_value"};

  std::optional<schedule::ReportCharts> charts;
  std::vector<std::string> warnings;
  if (auto got = run_receipts(&r, ctx.c, id); got.ok()) {
    if (!got->redis_error.empty())
      return redis_error(make_error(errc::redis::kIo, "{}", got->redis_error));
    warnings = got->warnings;
    schedule::ReportArgs a;
    a.receipts = std::move(got->receipts);
    a.cluster = &ctx.c;
    a.config_name = ctx.c.name;
    if (auto c = schedule::report_charts(a); c.ok()) {
      charts = std::move(*c);
      warnings.insert(warnings.end(), charts->warnings.begin(), charts->warnings.end());
    } else {
      warnings.push_back(c.error().message);
    }
  } else if (got.error().code != errc::report::kNone) {
    return redis_error(got.error());
  }

  if (format == "svg") {
    const schedule::GanttChart* g = !charts ? nullptr
                                    : chart == "planned"
                                        ? (charts->planned ? &*charts->planned : nullptr)
                                        : &charts->measured;
    if (!g)
      return HttpError{404,
                       fmt::format("run {} has no {} chart: {}", id, chart,
                                   !charts ? "no job of it has a receipt yet (a job has one once "
                                             "it is done)"
                                           : "the API's config could not plan its jobs"),
                       "invalid_request_error", "chart", "not_found"};
    res.set_header("Cache-Control", "no-store");
    res.set_content(schedule::render_svg(*g), "image/svg+xml");
    return std::nullopt;
  }
  json j = {{"object", "run.gantt"},
            {"run", id},
            {"config", ctx.c.name},
            {"jobs", charts ? charts->jobs : 0},
            {"measured", charts ? schedule::gantt_json(charts->measured) : json(nullptr)},
            {"planned",
             charts && charts->planned ? schedule::gantt_json(*charts->planned) : json(nullptr)},
            {"warnings", warnings}};
  res.set_content(j.dump(), "application/json");
  return std::nullopt;
}

}  // namespace

void register_gantt_routes(httplib::Server& http, Context& ctx) {
  http.Get(R"(/v1/runs/([^/]+)/gantt)",
           ctx.guarded(Role::kRead, [&ctx](auto& req, auto& res, auto& r, auto&) {
             return gantt(ctx, req, res, r);
           }));
}

}  // namespace h3pipe::api
