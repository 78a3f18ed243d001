#pragma once
// The routes of h3pipe-api, one file per resource (docs/api.md); server.cpp calls each register_*
// once at start-up.  Every handler reaches Redis, tokens and errors through the Context.
#include <httplib.h>

#include <memory>

#include "common/api/context.h"

namespace h3pipe::api {

// /v1/videos (create, list, retrieve, cancel, delete, content) and /v1/models: video_routes.cpp.
void register_video_routes(httplib::Server& http, Context& ctx);
// /v1/runs (create, list, retrieve, cancel, resume), /v1/jobs/{id}/receipt, /v1/fleet:
// runs_routes.cpp.
void register_runs_routes(httplib::Server& http, Context& ctx);
// GET /v1/videos/{id}/events and /v1/runs/{id}/events (Server-Sent Events): events_routes.cpp.
// The hub's threads run until the returned hub is destroyed.
class EventsHub;
std::shared_ptr<EventsHub> register_events_routes(httplib::Server& http, Context& ctx);
// /v1/me, /v1/pools/{pool}/drain|undrain, /v1/pools/drained, /v1/videos/{id}/retry:
// admin_routes.cpp.
void register_admin_routes(httplib::Server& http, Context& ctx);
// POST /v1/runs/{id}/pause|unpause, /v1/runs/{id}/jobs/{job}/move, /v1/videos/{id}/move
// (issue #39 item 4): control_routes.cpp.
void register_control_routes(httplib::Server& http, Context& ctx);
// GET /v1/runs/{id}/gantt, the run's measured and planned Gantt (#38 item 5): gantt_routes.cpp.
void register_gantt_routes(httplib::Server& http, Context& ctx);
// The console's static files under /ui/ (ServerOptions::ui_dir): ui_routes.cpp.
void register_ui_routes(httplib::Server& http, Context& ctx);

}  // namespace h3pipe::api
