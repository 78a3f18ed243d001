// The events contract's argv (#37): every producer writes the same fields through these helpers.
#include <gtest/gtest.h>

#include "common/queue/events.h"
#include "common/queue/keys.h"

using namespace h3pipe;

TEST(Events, KeysAreTheContractsStrings) {
  EXPECT_EQ(keys::run_events("r1"), "h3pipe:run:{r1}:events");
  EXPECT_EQ(keys::terminal_events(), "h3pipe:events");
}

TEST(Events, RunXaddIsCappedAndLeavesEmptyFieldsOut) {
  queue::events::Event e;
  e.type = std::string(queue::events::kStep);
  e.job = "j1";
  e.stage = "sample";
  e.step = "3";
  e.steps = "8";
  e.ts_ms = 1234;
  auto argv = queue::events::run_xadd("r1", e);
  std::vector<std::string> want{"XADD",   "h3pipe:run:{r1}:events",
                                "MAXLEN", "~",
                                "100000", "*",
                                "type",   "step",
                                "job",    "j1",
                                "stage",  "sample",
                                "step",   "3",
                                "steps",  "8",
                                "ts_ms",  "1234"};
  EXPECT_EQ(argv, want);
}

TEST(Events, TerminalXaddCarriesTheRunAndReadsBack) {
  queue::events::Event e;
  e.type = std::string(queue::events::kFailed);
  e.job = "j1";
  e.reason = "sampler crashed";
  auto argv = queue::events::terminal_xadd("r1", e);
  ASSERT_GE(argv.size(), 6u);
  EXPECT_EQ(argv[1], "h3pipe:events");
  EXPECT_EQ(argv[argv.size() - 2], "run");
  EXPECT_EQ(argv.back(), "r1");
  std::vector<std::pair<std::string, std::string>> kv;
  for (size_t i = 6; i + 1 < argv.size(); i += 2) kv.emplace_back(argv[i], argv[i + 1]);
  std::string run;
  auto back = queue::events::from_fields(kv, &run);
  EXPECT_EQ(run, "r1");
  EXPECT_EQ(back.type, "video.failed");
  EXPECT_EQ(back.reason, "sampler crashed");
  EXPECT_GT(back.ts_ms, 1600000000000LL);
  EXPECT_TRUE(queue::events::is_terminal(back.type));
  EXPECT_FALSE(queue::events::is_terminal(queue::events::kStep));
}
