// Unit: component loggers (common/logging/log.h) share one sink, one level and one pattern, and
// every line names its component.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <memory>
#include <string>
#include <vector>

#include "common/logging/log.h"

namespace h3pipe::logging {
namespace {

// Captures every component logger's lines for one test, then puts the previous sink back.
class Capture {
 public:
  Capture()
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100)),
        previous_(set_sink(sink_)) {}
  ~Capture() { set_sink(previous_); }
  std::vector<std::string> lines() const { return sink_->last_formatted(); }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  spdlog::sink_ptr previous_;
};

TEST(Logging, EveryLineCarriesTheServiceAndItsComponentName) {
  configure("encoder", "info");
  Capture cap;
  get("engine")->warn("run={} job={} attempt {} failed", "r1", "j1", 1);
  get("queue")->info("stream {} created", "h3pipe:encode");
  auto lines = cap.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(" warning [encoder] [engine] run=r1 job=j1 attempt 1 failed"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find(" info [encoder] [queue] stream h3pipe:encode created"),
            std::string::npos)
      << lines[1];
}

TEST(Logging, TheConfiguredLevelHoldsForLoggersMadeBeforeAndAfter) {
  auto before = get("made_before");
  configure("sampler", "warn");
  Capture cap;
  before->info("dropped");
  get("made_after")->info("dropped too");
  before->warn("kept");
  get("made_after")->error("kept too");
  auto lines = cap.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("[sampler] [made_before] kept"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("[sampler] [made_after] kept too"), std::string::npos) << lines[1];
  configure("sampler", "info");
}

TEST(Logging, ANameIsOneLoggerAndAnUnknownLevelMeansInfo) {
  EXPECT_EQ(get("transfer"), get("transfer"));
  configure("decoder", "loud");
  Capture cap;
  get("transfer")->debug("not shown");
  get("transfer")->info("shown");
  ASSERT_EQ(cap.lines().size(), 1u);
  EXPECT_EQ(pattern_for("50%"), "%Y-%m-%dT%H:%M:%S.%e %^%l%$ [50%%] [%n] %v");
}

}  // namespace
}  // namespace h3pipe::logging
