// The console's static files (#38, docs/console.md) under /ui/: the bundle `ui/build.mjs` wrote
// (index.html, app.js, app.css), served without a token, since they hold no data: every figure
// on the page comes through the token'd /v1 API.  Any other path under /ui/ is the page itself
// (the app routes /ui/runs/RUN, /ui/jobs/ID, /ui/fleet), so a deep link survives a reload.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/api/context.h"
#include "common/api/routes.h"

namespace h3pipe::api {
namespace {
namespace fs = std::filesystem;

const char* mime(const fs::path& p) {
  const std::string e = p.extension().string();
  if (e == ".html") return "text/html; charset=utf-8";
  if (e == ".js") return "text/javascript; charset=utf-8";
  if (e == ".css") return "text/css; charset=utf-8";
  if (e == ".svg") return "image/svg+xml";
  if (e == ".png") return "image/png";
  if (e == ".map") return "application/json";
  return "application/octet-stream";
}

// The page may reach only this server: no CDN, no inline script, media from blob: URLs that the
// page made from token'd fetches.
constexpr const char* kCsp =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "media-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'";

void serve_file(const fs::path& p, httplib::Response& res) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  res.set_header("Content-Security-Policy", kCsp);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-cache");
  res.set_content(s.str(), mime(p));
}

}  // namespace

void register_ui_routes(httplib::Server& http, Context& ctx) {
  const fs::path root = ctx.o.ui_dir;
  http.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/ui/"); });
  http.Get("/ui",
           [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/ui/"); });
  http.Get(R"(/ui/(.*))", [root](const httplib::Request& req, httplib::Response& res) {
    std::error_code ec;
    if (root.empty() || !fs::is_regular_file(root / "index.html", ec))
      return send_error(res, {404,
                              fmt::format("the console is not built here (no index.html in "
                                          "\"{}\"): build the target h3pipe-ui, or start "
                                          "h3pipe-api with --ui-dir",
                                          root.string()),
                              "invalid_request_error", "", "not_found"});
    const std::string rel = req.matches[1];
    // Only the bundle's own files, by a plain name: nothing reaches outside root.
    const bool plain = !rel.empty() && rel.find('/') == std::string::npos &&
                       rel.find("..") == std::string::npos && rel[0] != '.';
    if (plain && fs::is_regular_file(root / rel, ec)) return serve_file(root / rel, res);
    const std::string ext = fs::path(rel).extension().string();
    if (ext == ".js" || ext == ".css" || ext == ".map" || ext == ".png" || ext == ".svg")
      return send_error(res, {404, "no such file in the console's bundle", "invalid_request_error",
                              "", "not_found"});
    serve_file(root / "index.html", res);
  });
}

}  // namespace h3pipe::api
