// h3pipe-api's deployment pieces (issue #37 item 8; docs/api.md "Starting it", "Metrics", "Two
// hosts"): the per-route metrics' bounded labels and what they count, the URL an API announces to
// its peers, and the config fields of its address and ports with their cross-checks.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <nlohmann/json.hpp>

#include "common/api/api_metrics.h"
#include "common/api/peers.h"
#include "common/config/config.h"

namespace h3pipe::api {
namespace {

std::string text(ApiMetrics& m) {
  return prometheus::TextSerializer().Serialize(m.registry()->Collect());
}

TEST(ApiMetrics, RoutesReplaceIdsAndAnythingUnknownIsOther) {
  EXPECT_EQ(ApiMetrics::route_of("/v1/videos"), "/v1/videos");
  EXPECT_EQ(ApiMetrics::route_of("/v1/videos/video_r-1-2"), "/v1/videos/{id}");
  EXPECT_EQ(ApiMetrics::route_of("/v1/videos/video_r-1/content?variant=video"),
            "/v1/videos/{id}/content");
  EXPECT_EQ(ApiMetrics::route_of("/v1/runs/r-1/cancel"), "/v1/runs/{id}/cancel");
  EXPECT_EQ(ApiMetrics::route_of("/v1/jobs/r-1:a/receipt"), "/v1/jobs/{id}/receipt");
  EXPECT_EQ(ApiMetrics::route_of("/healthz"), "/healthz");
  EXPECT_EQ(ApiMetrics::route_of("/ui/app.js"), "/ui");
  // A client cannot grow the label set: unknown resources, actions, depths are one label.
  for (const char* p : {"/v1/zzz", "/v1/videos/x/aaaa", "/v1/videos/x/content/more", "/etc/passwd",
                        "/v1/videos//content", "/v2/videos"})
    EXPECT_EQ(ApiMetrics::route_of(p), "other") << p;
}

TEST(ApiMetrics, CountsRequestsByRouteMethodStatusAndTheirLatency) {
  ApiMetrics m;
  m.request("GET", "/v1/videos/a", 200, 0.001);
  m.request("GET", "/v1/videos/b", 200, 0.003);
  m.request("DELETE", "/v1/videos/b", 404, 0.002);
  m.request("BREW", "/v1/videos/b", 400, 0.002);
  const std::string t = text(m);
  EXPECT_NE(
      t.find(R"(h3pipe_api_requests_total{method="GET",route="/v1/videos/{id}",status="200"} 2)"),
      std::string::npos)
      << t;
  EXPECT_NE(
      t.find(
          R"(h3pipe_api_requests_total{method="DELETE",route="/v1/videos/{id}",status="404"} 1)"),
      std::string::npos);
  EXPECT_NE(t.find(R"(method="other")"), std::string::npos);
  EXPECT_NE(t.find(R"(h3pipe_api_request_seconds_count{method="GET",route="/v1/videos/{id}"} 2)"),
            std::string::npos);
  EXPECT_NE(
      t.find(
          R"(h3pipe_api_request_seconds_bucket{method="GET",route="/v1/videos/{id}",le="0.002"} 1)"),
      std::string::npos);
}

TEST(ApiMetrics, SseClientsAndWebhookOutcomes) {
  ApiMetrics m;
  {
    auto a = m.sse_client();
    m.sse_opened();
    EXPECT_NE(text(m).find("h3pipe_api_sse_clients 2"), std::string::npos);
    m.sse_closed();
  }
  EXPECT_NE(text(m).find("h3pipe_api_sse_clients 0"), std::string::npos);
  EXPECT_EQ(m.webhook_deliveries("delivered"), 0);  // present before the first delivery
  m.webhook_delivery("delivered");
  m.webhook_delivery("retried");
  m.webhook_delivery("retried");
  m.webhook_delivery("bogus");
  EXPECT_EQ(m.webhook_deliveries("delivered"), 1);
  EXPECT_EQ(m.webhook_deliveries("retried"), 2);
  EXPECT_EQ(m.webhook_deliveries("other"), 1);
}

Result<config::Cluster> cluster(const nlohmann::json& host_b) {
  nlohmann::json hb = {{"name", "b"}, {"address", "10.0.0.2"}};
  hb.update(host_b);
  const auto prof = nlohmann::json{{"default", {{"kind", "fixed"}, {"seconds", 0.01}}}};
  return config::parse({{"name", "t"},
                        {"hosts", {{{"name", "a"}, {"address", "10.0.0.1"}}, hb}},
                        {"pools",
                         {{{"name", "enc"}, {"host", "a"}, {"stage", "encode"}, {"profiles", prof}},
                          {{"name", "s0"}, {"host", "a"}, {"stage", "sample"}, {"profiles", prof}},
                          {{"name", "dec"},
                           {"host", "b"},
                           {"stage", "decode"},
                           {"profiles", prof},
                           {"metrics_port", 9404}}}}},
                       ".");
}

TEST(ApiConfig, LoopbackAndFreePortsUnlessConfigured) {
  auto c = cluster(nlohmann::json::object());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->find_host("b")->api_bind, "127.0.0.1");
  EXPECT_EQ(c->find_host("b")->api_port, 0);
  EXPECT_EQ(c->find_host("b")->api_metrics_port, 0);
  c = cluster({{"api_bind", "0.0.0.0"}, {"api_port", 8088}, {"api_metrics_port", 9410}});
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->find_host("b")->api_port, 8088);
  EXPECT_EQ(advertised_url(*c, "b", "0.0.0.0", 8088, ""), "http://10.0.0.2:8088/v1");
  EXPECT_EQ(advertised_url(*c, "b", "10.0.0.7", 8088, ""), "http://10.0.0.7:8088/v1");
  EXPECT_EQ(advertised_url(*c, "b", "::", 8088, ""), "http://10.0.0.2:8088/v1");
  EXPECT_EQ(advertised_url(*c, "b", "::1", 8, ""), "http://[::1]:8/v1");
  EXPECT_EQ(advertised_url(*c, "b", "0.0.0.0", 8088, "https://api.example/v1"),
            "https://api.example/v1");
}

TEST(ApiConfig, BadFieldsAndPortClashesNameTheField) {
  auto c = cluster({{"api_port", 70000}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/hosts/1/api_port"), std::string::npos) << c.error().message;
  c = cluster({{"api_bind", ""}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/hosts/1/api_bind"), std::string::npos) << c.error().message;
  c = cluster({{"api_metrics_port", 9404}});  // the decoder's metrics port on that host
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/hosts/1/api_metrics_port"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("pool \"dec\""), std::string::npos) << c.error().message;
  c = cluster({{"api_port", 9410}, {"api_metrics_port", 9410}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("its api_port"), std::string::npos) << c.error().message;
}

}  // namespace
}  // namespace h3pipe::api
