// GET /v1/videos/{id}/events and GET /v1/runs/{id}/events: the run's live events as Server-Sent
// Events (issue #37 item 3; docs/api.md "GET /v1/videos/{id}/events").  The token and the id are
// checked here on a pool thread; the connection then goes to the EventsHub, which holds no thread
// per subscriber.
#include <memory>

#include "common/api/events_hub.h"
#include "common/api/gated_http.h"
#include "common/api/routes.h"
#include "common/artifacts/artifacts.h"
#include "common/queue/keys.h"
#include "common/queue/streams.h"

namespace h3pipe::api {
namespace {

// Where the replay starts: Last-Event-ID (what EventSource sends when it reconnects), else
// ?after=, else the stream's beginning.
std::variant<std::string, HttpError> after_of(const httplib::Request& req) {
  const bool header = req.has_header("Last-Event-ID");
  const std::string v = header ? req.get_header_value("Last-Event-ID")
                               : (req.has_param("after") ? req.get_param_value("after") : "");
  if (v.empty()) return std::string("0-0");
  if (!queue::parse_stream_id(v))
    return HttpError{400,
                     fmt::format("{}: expected an event id such as \"1796626381000-0\" (the "
                                 "`id:` of an event), got \"{}\"",
                                 header ? "Last-Event-ID" : "after", v.substr(0, 64)),
                     "invalid_request_error", header ? "Last-Event-ID" : "after", "invalid_value"};
  return v;
}

std::optional<HttpError> subscribe(EventsHub& hub, const httplib::Request& req,
                                   const std::string& run) {
  auto after = after_of(req);
  if (auto* e = std::get_if<HttpError>(&after)) return *e;
  const int fd = GatedHttp::take_connection();
  if (fd < 0)
    return HttpError{500, "this server cannot hand a connection to the event hub", "server_error",
                     "", "internal"};
  hub.add(fd, keys::run_events(run), std::get<std::string>(after));
  return std::nullopt;
}

}  // namespace

std::shared_ptr<EventsHub> register_events_routes(httplib::Server& http, Context& ctx) {
  auto hub = std::make_shared<EventsHub>(ctx);
  EventsHub* h = hub.get();
  http.Get(R"(/v1/videos/([^/]+)/events)",
           ctx.guarded(Role::kRead,
                       [&ctx, h](auto& req, auto&, auto& r, auto&) -> std::optional<HttpError> {
                         const std::string id = req.matches[1];
                         auto rec = ctx.record(r, id);
                         if (!rec.ok()) return redis_error(rec.error());
                         if (!*rec) return not_found(id);
                         return subscribe(*h, req, (**rec).at("run"));
                       }));
  http.Get(
      R"(/v1/runs/([^/]+)/events)",
      ctx.guarded(Role::kRead, [h](auto& req, auto&, auto& r, auto&) -> std::optional<HttpError> {
        const std::string run = req.matches[1];
        const HttpError none{404, fmt::format("no run with id \"{}\"", run),
                             "invalid_request_error", "id", "not_found"};
        if (!artifacts::validate_id("id", run).ok()) return none;
        auto n = queue::int_command(r, {"EXISTS", keys::run(run), keys::run_events(run)});
        if (!n.ok()) return redis_error(n.error());
        if (*n == 0) return none;
        return subscribe(*h, req, run);
      }));
  return hub;
}

}  // namespace h3pipe::api
