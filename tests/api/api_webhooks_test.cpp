// Webhook signing and URL rules (issue #37 item 6; common/api/webhooks.h).  Label: unit.
#include <gtest/gtest.h>

#include "common/api/webhooks.h"

namespace wh = h3pipe::api::webhooks;

// The Standard Webhooks specification's own example (standard-webhooks/spec, "Signature
// scheme"): what its libraries and the openai SDK's webhooks.unwrap() verify.
TEST(WebhookSign, TheStandardWebhooksExample) {
  EXPECT_EQ(wh::sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
                     1614265330, R"({"test": 2432232314})"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST(WebhookSign, EachPartCountsAndABadSecretSignsNothing) {
  const std::string s = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const std::string a = wh::sign(s, "msg_1", 1, "{}");
  EXPECT_NE(a, wh::sign(s, "msg_2", 1, "{}"));
  EXPECT_NE(a, wh::sign(s, "msg_1", 2, "{}"));
  EXPECT_NE(a, wh::sign(s, "msg_1", 1, "{ }"));
  EXPECT_EQ(wh::sign("whsec_!!!", "msg_1", 1, "{}"), "");
  auto fresh = wh::new_secret();
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->rfind("whsec_", 0), 0u);
  EXPECT_EQ(fresh->size(), 6u + 44u);  // 32 bytes in base64
  EXPECT_NE(wh::sign(*fresh, "msg_1", 1, "{}"), "");
}

TEST(WebhookUrl, AbsoluteHttpOnlyWithoutUserInfo) {
  auto u = wh::parse_url("URL", "https://Hooks.Example.com/h3pipe?x=1#frag");
  ASSERT_TRUE(std::holds_alternative<wh::Url>(u));
  const auto& url = std::get<wh::Url>(u);
  EXPECT_EQ(url.host, "hooks.example.com");
  EXPECT_EQ(url.port, 443);
  EXPECT_EQ(url.path, "/h3pipe?x=1");
  EXPECT_EQ(url.origin(), "https://hooks.example.com:443");
  auto p = wh::parse_url("URL", "http://127.0.0.1:9000");
  ASSERT_TRUE(std::holds_alternative<wh::Url>(p));
  EXPECT_EQ(std::get<wh::Url>(p).port, 9000);
  EXPECT_EQ(std::get<wh::Url>(p).path, "/");
  for (const char* bad : {"ftp://x/y", "example.com/hook", "http://user:pw@example.com/",
                          "http://example.com:0/", "http://example.com:99999/",
                          "http://exa mple.com/", "http:///path", "http://example.com/\r\nX: y"}) {
    auto r = wh::parse_url("webhook_url", bad);
    ASSERT_TRUE(std::holds_alternative<std::string>(r)) << bad;
    EXPECT_EQ(std::get<std::string>(r).rfind("webhook_url: expected an absolute http", 0), 0u)
        << std::get<std::string>(r);
  }
}
