// An authenticated peer sending junk frames in a loop (issue #22 item 11): every frame is counted
// (h3pipe_transfer_protocol_errors_total), the log gets one line per peer per period, and the
// next line admitted says how many were held back.  The Loopback fixture's real receiver, a raw
// CURVE DEALER with the allowed client key, and the component loggers' sink captured.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <zmq.hpp>

#include "common/logging/log.h"
#include "common/logging/rate_limit.h"
#include "tests/transfer/loopback_fixture.h"
#include "tests/transfer/transfer_test_util.h"

namespace h3pipe::transfer {
namespace {

using namespace std::chrono_literals;
using testing::Loopback;
using testing::wait_until;

TEST_F(Loopback, ThousandJunkFramesAreCountedButLoggedOnce) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(5000);
  auto previous = logging::set_sink(sink);
  start_receiver(receiver_options());
  zmq::socket_t raw(ctx_, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::curve_serverkey, keys_.server.public_z85);
  raw.set(zmq::sockopt::curve_publickey, keys_.client.public_z85);
  raw.set(zmq::sockopt::curve_secretkey, keys_.client.secret_z85);
  raw.connect(receiver_->endpoint());
  for (int i = 0; i < 1000; ++i)
    raw.send(zmq::str_buffer("\xff\xff\xff not protobuf"), zmq::send_flags::none);
  const bool all = wait_until([&] { return rprobe_.protocol_errors() >= 1000; }, 20s);
  logging::set_sink(previous);
  ASSERT_TRUE(all) << rprobe_.protocol_errors();
  EXPECT_EQ(rprobe_.protocol_errors(), 1000);
  std::size_t junk_lines = 0;
  for (const auto& l : sink->last_formatted())
    if (l.find("transfer receiver:") != std::string::npos) ++junk_lines;
  EXPECT_EQ(junk_lines, 1u) << "one line for the peer in the period, not one per frame";
}

TEST(LogRateLimit, OneLinePerKeyPerPeriodThenTheCountHeldBack) {
  using Clock = logging::LogRateLimit::Clock;
  logging::LogRateLimit lim(1, std::chrono::milliseconds(10000), 2);
  const auto t0 = Clock::now();
  EXPECT_TRUE(lim.admit("a", t0).log);
  for (int i = 0; i < 999; ++i) EXPECT_FALSE(lim.admit("a", t0 + std::chrono::seconds(1)).log);
  EXPECT_TRUE(lim.admit("b", t0).log);  // another peer has its own budget
  const auto next = lim.admit("a", t0 + std::chrono::seconds(10));
  EXPECT_TRUE(next.log);
  EXPECT_EQ(next.suppressed, 999u);
  EXPECT_EQ(lim.suppressed_total(), 999u);
  EXPECT_EQ(lim.logged_total(), 3u);
  // Keys are bounded: "b"'s period is over, so "c" takes its place; then both windows are live
  // and further peers share one overflow bucket (one line for all of them).
  EXPECT_TRUE(lim.admit("c", t0 + std::chrono::seconds(11)).log);
  EXPECT_TRUE(lim.admit("d", t0 + std::chrono::seconds(11)).log);
  EXPECT_FALSE(lim.admit("e", t0 + std::chrono::seconds(11)).log);
  EXPECT_FALSE(lim.admit("f", t0 + std::chrono::seconds(11)).log);
}

}  // namespace
}  // namespace h3pipe::transfer
