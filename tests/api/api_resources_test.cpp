// The parsers of h3pipe-api's own resources (issue #37): POST /v1/runs's body as batch text,
// --rate-limit, the rate limit's window rule, input_reference's sniffing and storage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/api/rate_limit.h"
#include "common/api/runs_body.h"
#include "common/api/upload.h"

namespace h3pipe::api {
namespace {

std::string text(std::string_view body) {
  auto r = batch_text_of_body(body, "application/json");
  EXPECT_TRUE(std::holds_alternative<std::string>(r)) << std::get<FieldProblem>(r).message;
  return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : "";
}

TEST(RunsBody, JsonLinesPassAsTheyAre) {
  const std::string lines = "{\"prompt\": \"a\"}\n# c\n\n{\"prompt\": \"b\"}\n";
  EXPECT_EQ(text(lines), lines);
  // Not JSON at all: left to the batch parser, which names the line.
  EXPECT_EQ(text("nope\n"), "nope\n");
}

TEST(RunsBody, ArrayElementIBecomesLineIPlusOne) {
  EXPECT_EQ(text(" [ {\"prompt\": \"a\"}, 3, \"x\", {\"jobId\": \"j\"} ]"),
            "{\"prompt\":\"a\"}\n3\n\"x\"\n{\"jobId\":\"j\"}\n");
  EXPECT_EQ(text("[]"), "");
}

TEST(RunsBody, EmptyOrBrokenArrayIsA400OnBody) {
  for (std::string_view b : {"", "  \n\t", "[{\"prompt\": ", "[1,]"}) {
    auto r = batch_text_of_body(b, "");
    ASSERT_TRUE(std::holds_alternative<FieldProblem>(r)) << b;
    EXPECT_EQ(std::get<FieldProblem>(r).param, "body");
  }
  auto r = batch_text_of_body("[1,", "");
  EXPECT_NE(std::get<FieldProblem>(r).message.find("not a JSON array"), std::string::npos);
}

TEST(RateLimits, ParsesRolesAndRefusesTheRest) {
  RateLimits l;
  EXPECT_FALSE(parse_rate_limits("read=10,submit=2.5,admin=0", l));
  EXPECT_EQ(l.read, 10);
  EXPECT_EQ(l.submit, 2.5);
  EXPECT_EQ(l.admin, 0);
  EXPECT_EQ(l.of(Role::kSubmit), 2.5);
  for (const char* bad :
       {"reader=1", "read", "read=", "read=-1", "read=x", "read=1,", "read=1e9"}) {
    RateLimits keep;
    auto e = parse_rate_limits(bad, keep);
    ASSERT_TRUE(e) << bad;
    EXPECT_NE(e->find("--rate-limit: expected ROLE=N"), std::string::npos) << *e;
    EXPECT_EQ(keep.read, RateLimits{}.read) << "a refused text changes nothing";
  }
}

TEST(RateWindow, AllowsUpToTheRateThenSaysHowLongToWait) {
  EXPECT_FALSE(window_verdict(0, 5, 0, 5));
  EXPECT_FALSE(window_verdict(100, 100, 0, 0)) << "0: unlimited";
  // The 6th request in a second of rate 5, 300 ms in: not before the next second, and then
  // only once this second's count weighs 5: 700 ms + (1 - 5/6) s.
  auto w = window_verdict(0, 6, 300, 5);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 700 + 167);
  // The last second was full: at 500 ms it still weighs 2.5; 3 more make 5.5 > 5, so wait until
  // 10 x (1 - f) + 3 <= 5, f = 0.8: 300 ms.
  w = window_verdict(10, 3, 500, 5);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 300);
  EXPECT_FALSE(window_verdict(10, 3, 800, 5));
  EXPECT_GE(*window_verdict(1000, 1, 999, 1), 1);
}

TEST(Upload, SniffsPngJpegWebpByTheirBytes) {
  EXPECT_EQ(sniff_image(std::string("\x89PNG\r\n\x1a\n....", 12)), "png");
  EXPECT_EQ(sniff_image(std::string("\xff\xd8\xff\xe0", 4)), "jpg");
  EXPECT_EQ(sniff_image("RIFF\x10\0\0\0WEBPVP8 "), std::nullopt) << "NUL cut the literal";
  EXPECT_EQ(sniff_image(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)), "webp");
  for (std::string bad : {std::string(), std::string("GIF89a"), std::string("\x89PNG", 4),
                          std::string("RIFF\0\0\0\0WAVE", 12), std::string("<svg/>")})
    EXPECT_EQ(sniff_image(bad), std::nullopt) << bad;
}

TEST(Upload, StoredBeneathTheFirstInputRootByTheIdOnly) {
  config::Cluster c;
  const auto root =
      std::filesystem::temp_directory_path() / ("h3upload-" + std::to_string(getpid()));
  c.limits.input_roots = {root};
  auto u = store_reference(c, "video_r-1", "png", "\x89PNG\r\n\x1a\nxx");
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->relative, std::filesystem::path("api-uploads/video_r-1/reference.png"));
  EXPECT_TRUE(std::filesystem::is_regular_file(root / u->relative));
  for (const char* id : {"../x", "a/b", ".hidden", ""})
    EXPECT_FALSE(store_reference(c, id, "png", "x").ok()) << id;
  remove_reference(*u);
  EXPECT_FALSE(std::filesystem::exists(root / "api-uploads/video_r-1"));
  c.limits.input_roots.clear();
  auto none = store_reference(c, "video_r-2", "png", "x");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("limits.input_roots is []"), std::string::npos);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace h3pipe::api
