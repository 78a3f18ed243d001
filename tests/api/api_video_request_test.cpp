// parse_video_request (common/api/videos.h): the OpenAI-shaped fields of POST /v1/videos as one
// h3pipe job spec, validated with `h3pipe run`'s rules and words (issue #37, first slice).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/api/videos.h"

namespace h3pipe::api {
namespace {

config::Cluster cluster() {
  auto c = config::parse(nlohmann::json::parse(R"({
    "name": "t",
    "classes": [{"name": "wan", "width": 832, "height": 480, "frames": 81, "latent_profile": "wan2.1"},
                {"name": "ltx", "width": 768, "height": 512, "frames": 97, "latent_profile": "ltxv"}],
    "hosts": [{"name": "local"}],
    "pools": [
      {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
      {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
      {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}
    ]})"),
                         ".");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return *c;
}

VideoRequest ok(const std::map<std::string, std::string>& f) {
  auto r = parse_video_request(f, cluster(), "video");
  if (auto* p = std::get_if<FieldProblem>(&r)) ADD_FAILURE() << p->param << ": " << p->message;
  return std::get<VideoRequest>(r);
}
FieldProblem bad(const std::map<std::string, std::string>& f) {
  auto r = parse_video_request(f, cluster(), "video");
  EXPECT_TRUE(std::holds_alternative<FieldProblem>(r));
  return std::holds_alternative<FieldProblem>(r) ? std::get<FieldProblem>(r) : FieldProblem{};
}

TEST(VideoRequest, SecondsBecomeFramesByTheClassProfile) {
  // builtin at 24 fps: 2 s = 48 frames, raised to 49 (4k+1, the latent grid whole).
  auto v = ok({{"prompt", "p"}, {"size", "256x256"}, {"seconds", "2"}});
  EXPECT_EQ(v.batch.specs.at(0).frames(), 49u);
  EXPECT_EQ(v.model, "default");
  EXPECT_EQ(v.seconds, "2");
  EXPECT_EQ(v.size, "256x256");
  EXPECT_EQ(ok({{"prompt", "p"}, {"seconds", "1"}}).batch.specs.at(0).frames(), 25u);
  // frames, when given, wins over seconds.
  EXPECT_EQ(ok({{"prompt", "p"}, {"seconds", "2"}, {"frames", "17"}}).batch.specs.at(0).frames(),
            17u);
  // wan2.1 (strict 4k+1): 3 s = 72 -> 73; ltxv (8k+1): 1.5 s = 36 -> 41.
  auto w = ok({{"prompt", "p"}, {"model", "wan"}, {"seconds", "3"}});
  EXPECT_EQ(w.batch.specs.at(0).frames(), 73u);
  EXPECT_EQ(w.batch.specs.at(0).job_class(), "wan");
  EXPECT_EQ(w.size, "832x480");  // the class's size when none is asked
  EXPECT_EQ(ok({{"prompt", "p"}, {"model", "ltx"}, {"seconds", "1.5"}}).batch.specs.at(0).frames(),
            41u);
  // No seconds: the class's frames, answered as seconds.
  auto d = ok({{"prompt", "p"}, {"model", "wan"}});
  EXPECT_EQ(d.batch.specs.at(0).frames(), 81u);
  EXPECT_EQ(d.seconds, "3.375");
}

TEST(VideoRequest, BadFieldsAreNamedWithTheCliWords) {
  auto s = bad({{"prompt", "p"}, {"size", "12x"}});
  EXPECT_EQ(s.param, "size");
  EXPECT_NE(s.message.find("WIDTHxHEIGHT"), std::string::npos) << s.message;
  auto w = bad({{"prompt", "p"}, {"size", "250x256"}});
  EXPECT_EQ(w.param, "size");
  EXPECT_EQ(w.message.rfind("width: ", 0), 0u) << w.message;
  EXPECT_EQ(bad({{"size", "256x256"}}).param, "prompt");
  auto m = bad({{"prompt", "p"}, {"model", "nope"}});
  EXPECT_EQ(m.param, "model");
  EXPECT_NE(m.message.find("known: default, wan, ltx"), std::string::npos) << m.message;
  EXPECT_EQ(bad({{"prompt", "p"}, {"seconds", "-1"}}).param, "seconds");
  EXPECT_EQ(bad({{"prompt", "p"}, {"seconds", "abc"}}).param, "seconds");
  EXPECT_EQ(bad({{"prompt", "p"}, {"steps", "x"}}).param, "steps");
  EXPECT_EQ(bad({{"prompt", "p"}, {"colour", "red"}}).param, "colour");
}

}  // namespace
}  // namespace h3pipe::api
