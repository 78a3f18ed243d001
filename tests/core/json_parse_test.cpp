// The one bounded JSON reader (common/core/json_parse.h; issue #35 D2): depth refused before any
// DOM exists, naming the JSON pointer; size refused; never a throw; linear in the input.
#include "common/core/json_parse.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/core/json_reader.h"

namespace h3pipe::json_reader {
namespace {

std::string nested_arrays(std::size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

TEST(JsonParse, ThreeHundredThousandLevelsAreRefusedNotACrash) {
  // {"error": {"message": [[[[...]]]]}}: what a hostile ComfyUI answered with a 400.
  const std::string text = R"({"error": {"message": )" + nested_arrays(300000) + "}}";
  std::string why;
  auto j = parse_limited(text, {}, &why);
  ASSERT_FALSE(j.has_value());
  EXPECT_NE(why.find("nesting deeper than 128 levels at /error/message/0/0/0/0/...("),
            std::string::npos)
      << why;
  auto o = parse_limited_ordered(text, {}, &why);
  EXPECT_FALSE(o.has_value());
}

TEST(JsonParse, TheLimitIsExactAndThePathNamesKeysAndIndexes) {
  JsonLimits l;
  l.max_depth = 4;
  std::string why;
  // Four levels: accepted, and the document is whole.
  auto ok = parse_limited(R"({"a": [1, {"b": [2]}]})", l, &why);
  ASSERT_TRUE(ok.has_value()) << why;
  EXPECT_EQ((*ok)["a"][1]["b"][0], 2);
  // Five: refused at the fifth container, /a/1/b/0.
  EXPECT_FALSE(parse_limited(R"({"a": [1, {"b": [[3]]}]})", l, &why).has_value());
  EXPECT_EQ(why, "nesting deeper than 4 levels at /a/1/b/0");
  // Keys with / and ~ are escaped as JSON pointers say; control bytes are printed as \xNN.
  EXPECT_FALSE(parse_limited("{\"x/y~\\u001b\": [[[[1]]]]}", l, &why).has_value());
  EXPECT_EQ(why, "nesting deeper than 4 levels at /x~1y~0\\x1b/0/0/0");
}

TEST(JsonParse, SizeIsCappedPerSource) {
  JsonLimits l;
  l.max_bytes = 1024;
  std::string why;
  EXPECT_FALSE(parse_limited(std::string(2000, ' ') + "1", l, &why).has_value());
  EXPECT_EQ(why, "2001 bytes, above the 1 KiB limit for this JSON");
  auto r = parse_json(std::string(2000, ' ') + "1", "ComfyUI at http://x: GET /queue",
                      errc::runtime::kComfyuiHttp, l);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, errc::runtime::kComfyuiHttp.id);
  EXPECT_EQ(r.error().message,
            "ComfyUI at http://x: GET /queue: 2001 bytes, above the 1 KiB limit for this JSON");
}

TEST(JsonParse, SyntaxErrorsAreOneLineAndNeverThrow) {
  std::string why;
  EXPECT_FALSE(parse_limited("{\"a\":\n 1,,}", {}, &why).has_value());
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_NE(why.find("syntax error"), std::string::npos) << why;
  EXPECT_FALSE(parse_limited("", {}, &why).has_value());
  EXPECT_FALSE(parse_limited("1e99999", {}, &why).has_value());
  EXPECT_FALSE(parse_limited("[1] [2]", {}, &why).has_value());
}

TEST(JsonParse, DuplicateKeysNameTheirPathWhenAsked) {
  std::string why;
  JsonLimits l;
  l.reject_duplicate_keys = true;
  EXPECT_FALSE(parse_limited(R"({"pools": [{"name": 1, "name": 2}]})", l, &why).has_value());
  EXPECT_EQ(why, "/pools/0/name: duplicate key (each key may appear once)");
  // Not asked: the last one wins, as nlohmann's own parser does.
  auto j = parse_limited(R"({"a": 1, "a": 2})", {}, &why);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ((*j)["a"], 2);
  // parse_strict (configs, specs) is the same reader with duplicates refused.
  EXPECT_FALSE(parse_strict(R"({"a": 1, "a": 2})", &why).has_value());
  EXPECT_FALSE(parse_strict("{\"a\": " + nested_arrays(200) + "}", &why).has_value());
  EXPECT_NE(why.find("nesting deeper than 128 levels at /a/0/0"), std::string::npos) << why;
}

TEST(JsonParse, OrderedKeepsTheOrderAndScalarsSurvive) {
  std::string why;
  auto o = parse_limited_ordered(
      R"({"z": 1, "a": [true, null, -3, 18446744073709551615, 1.5, "s"], "m": {}})", {}, &why);
  ASSERT_TRUE(o.has_value()) << why;
  EXPECT_EQ(o->dump(), R"({"z":1,"a":[true,null,-3,18446744073709551615,1.5,"s"],"m":{}})");
}

TEST(JsonParse, LinearInTheNumberOfObjects) {
  // nlohmann's callback parser rescans the parent at every object end (quadratic); this reader
  // must not: 200,000 small objects parse in well under the bound on a loaded 2-core machine.
  std::string text = "{";
  for (int i = 0; i < 200000; ++i)
    text += (i ? "," : "") + std::string("\"") + std::to_string(i) + "\": {\"class_type\": \"X\"}";
  text += "}";
  const auto t0 = std::chrono::steady_clock::now();
  std::string why;
  auto j = parse_limited(text, {}, &why);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(j.has_value()) << why;
  EXPECT_EQ(j->size(), 200000u);
  EXPECT_LT(s, 20.0);
}

}  // namespace
}  // namespace h3pipe::json_reader
