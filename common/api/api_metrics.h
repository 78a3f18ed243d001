#pragma once
// h3pipe-api's Prometheus metrics (docs/api.md, "Metrics"), served on the host's
// api_metrics_port by common/metrics' MetricsServer like every service's:
//   h3pipe_api_requests_total{route,method,status}   every request httplib answered
//   h3pipe_api_request_seconds{route,method}         its latency, head in to reply written (an SSE
//                                                    stream's: how long it stayed open)
//   h3pipe_api_sse_clients                           event streams open now (SseClient)
//   h3pipe_api_webhook_deliveries_total{outcome}     webhook delivery attempts by outcome
// `route` is the path with its ids replaced ("/v1/videos/{id}/content"), from a fixed list of
// resources and actions: anything else is "other", so a client cannot grow the label set.
// Threading: every method may be called from any thread.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace h3pipe::api {

class ApiMetrics final {
 public:
  // Its families go into `registry` (a new one when null).
  explicit ApiMetrics(std::shared_ptr<prometheus::Registry> registry = nullptr);
  ApiMetrics(const ApiMetrics&) = delete;
  ApiMetrics& operator=(const ApiMetrics&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // One request answered (server.cpp calls it for every request httplib routed).
  void request(std::string_view method, std::string_view path, int status, double seconds);

  // An open event stream: construct one for as long as the SSE reply runs.
  class SseClient {
   public:
    explicit SseClient(ApiMetrics& m) : g_(&m.sse_) { g_->Increment(); }
    ~SseClient() { g_->Decrement(); }
    SseClient(const SseClient&) = delete;
    SseClient& operator=(const SseClient&) = delete;

   private:
    prometheus::Gauge* g_;
  };
  SseClient sse_client() { return SseClient(*this); }
  // The same without a scope (a stream handed to another thread): one closed per opened.
  void sse_opened() { sse_.Increment(); }
  void sse_closed() { sse_.Decrement(); }

  // One webhook delivery attempt by outcome: "delivered" (2xx), "retried" (failed, tried again
  // later), "dead_lettered" (given up), "refused" (not sent: a URL outside the allowlist, ...).
  // Another outcome is counted as "other".
  void webhook_delivery(std::string_view outcome);
  double webhook_deliveries(std::string_view outcome);  // for tests

  // "/v1/videos/{id}/content" for "/v1/videos/video_r-1/content"; "other" for what is not ours.
  static std::string route_of(std::string_view path);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& seconds_;
  prometheus::Gauge& sse_;
  prometheus::Family<prometheus::Counter>& webhooks_;
  std::mutex mu_;  // Family::Add is thread-safe; the cache of histograms below is ours
  std::map<std::string, prometheus::Histogram*> hist_;
};

}  // namespace h3pipe::api
