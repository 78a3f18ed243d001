#include "common/api/api_metrics.h"

#include <array>
#include <vector>

namespace h3pipe::api {
namespace {

// The resources under /v1 and the actions after an id: any other word is "other".
constexpr std::array kResources = {"videos", "models",   "runs",   "jobs",   "fleet", "uploads",
                                   "files",  "webhooks", "events", "tokens", "pools"};
constexpr std::array kActions = {"content",   "cancel", "events", "receipt", "resume",
                                 "thumbnail", "jobs",   "retry",  "drain",   "undrain"};
constexpr std::array kPlain = {"/healthz",         "/readyz", "/metrics", "/openapi.json",
                               "/v1/openapi.json", "/ui",     "/"};

template <std::size_t N>
bool among(const std::array<const char*, N>& words, std::string_view w) {
  for (const char* x : words)
    if (w == x) return true;
  return false;
}

prometheus::Histogram::BucketBoundaries latency_buckets() {
  return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace

std::string ApiMetrics::route_of(std::string_view path) {
  if (const auto q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  for (const char* p : kPlain)
    if (path == p) return p;
  if (path.rfind("/ui/", 0) == 0) return "/ui";
  if (path.rfind("/v1/", 0) != 0) return "other";
  std::vector<std::string_view> seg;
  std::string_view rest = path.substr(4);
  while (!rest.empty()) {
    const auto slash = rest.find('/');
    seg.push_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  if (seg.empty() || seg.size() > 3 || !among(kResources, seg[0])) return "other";
  std::string r = "/v1/" + std::string(seg[0]);
  if (seg.size() >= 2) {
    if (seg[1].empty()) return "other";
    r += "/{id}";
  }
  if (seg.size() == 3) {
    if (!among(kActions, seg[2])) return "other";
    r += "/" + std::string(seg[2]);
  }
  return r;
}

ApiMetrics::ApiMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(registry ? std::move(registry) : std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("h3pipe_api_requests_total")
                    .Help("HTTP requests h3pipe-api answered, by route, method and status")
                    .Register(*registry_)),
      seconds_(prometheus::BuildHistogram()
                   .Name("h3pipe_api_request_seconds")
                   .Help("Seconds from a request's head to its reply written, by route and method "
                         "(an event stream: how long it stayed open)")
                   .Register(*registry_)),
      sse_(prometheus::BuildGauge()
               .Name("h3pipe_api_sse_clients")
               .Help("Server-Sent Events streams open now")
               .Register(*registry_)
               .Add({})),
      webhooks_(prometheus::BuildCounter()
                    .Name("h3pipe_api_webhook_deliveries_total")
                    .Help("Webhook delivery attempts by outcome (delivered, retried, "
                          "dead_lettered, refused, other)")
                    .Register(*registry_)) {
  for (const char* o : {"delivered", "retried", "dead_lettered", "refused"})
    webhooks_.Add({{"outcome", o}});  // present at 0 before the first delivery
}

void ApiMetrics::request(std::string_view method, std::string_view path, int status,
                         double seconds) {
  const std::string route = route_of(path);
  std::string m = "other";
  for (const char* k : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
    if (method == k) m = k;
  requests_.Add({{"route", route}, {"method", m}, {"status", std::to_string(status)}}).Increment();
  prometheus::Histogram* h;
  {
    std::lock_guard lk(mu_);
    auto& slot = hist_[m + " " + route];
    if (!slot) slot = &seconds_.Add({{"route", route}, {"method", m}}, latency_buckets());
    h = slot;
  }
  h->Observe(seconds);
}

void ApiMetrics::webhook_delivery(std::string_view outcome) {
  const bool known = outcome == "delivered" || outcome == "retried" || outcome == "dead_lettered" ||
                     outcome == "refused";
  webhooks_.Add({{"outcome", known ? std::string(outcome) : "other"}}).Increment();
}

double ApiMetrics::webhook_deliveries(std::string_view outcome) {
  return webhooks_.Add({{"outcome", std::string(outcome)}}).Value();
}

}  // namespace h3pipe::api
