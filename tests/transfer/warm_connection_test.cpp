// A sender keeps one connection per peer warm between transfers (docs/transfer.md, "Warm
// connection"): latents sent one after another share one handshake and each starts at once with
// its eager chunks; a receiver restarted while the connection is idle is reconnected to and the
// next latent is delivered exactly once.
#include <gtest/gtest.h>

#include "common/transfer/outbox.h"
#include "tests/transfer/loopback_fixture.h"

namespace h3pipe::transfer {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Loopback;
using testing::make_latent_task;
using testing::slurp;
using testing::wait_until;

TEST_F(Loopback, WarmConnectionIsReusedAcrossTransfers) {
  start_receiver(receiver_options());
  start_sender(sender_options(keys_.client));
  constexpr int kN = 6;
  for (int i = 0; i < kN; ++i) {  // one after another, as the benchmark's series
    sender_->submit(
        make_latent_task(dir_.path() / "A", "run1", "j" + std::to_string(i), 300 * 1024 + i, "B"));
    ASSERT_TRUE(wait_until([&] { return sent_count() == static_cast<std::size_t>(i + 1); }, 10s))
        << "transfer " << i;
  }
  EXPECT_EQ(sprobe_.connects(), 1) << "one handshake for all transfers";
  EXPECT_EQ(durable_calls(), kN);
  for (const auto& r : sent_) {
    EXPECT_TRUE(r.eager_taken) << r.task.job_id() << ": started without waiting for the reply";
    EXPECT_EQ(r.bytes_sent, r.size) << r.task.job_id();
    EXPECT_EQ(r.attempts, 1) << r.task.job_id();
  }
}

TEST_F(Loopback, ReceiverRestartedWhileWarmDeliversTheNextLatentExactlyOnce) {
  ReceiverOptions ro = receiver_options();
  start_receiver(ro);
  start_sender(sender_options(keys_.client));
  sender_->submit(make_latent_task(dir_.path() / "A", "run1", "before", 200 * 1024, "B"));
  ASSERT_TRUE(wait_until([&] { return sent_count() == 1; }, 10s));
  ASSERT_EQ(sprobe_.connects(), 1);

  // The receiver goes away and comes back on the same address while the sender holds its warm,
  // idle connection; the sender notices (disconnect), reconnects and hands the next latent over.
  ro.bind_endpoint = receiver_->endpoint();
  receiver_.reset();
  // libzmq releases the old listening socket asynchronously: bind again until it is free.
  ASSERT_TRUE(wait_until([&] { return try_start_receiver(ro).ok(); }, 10s)) << "cannot bind again";
  std::string sha;
  sender_->submit(make_latent_task(dir_.path() / "A", "run1", "after", 700 * 1024 + 3, "B", &sha));
  ASSERT_TRUE(wait_until([&] { return sent_count() == 2; }, 15s))
      << "never delivered after the restart";
  EXPECT_EQ(sprobe_.connects(), 2) << "one new handshake with the restarted receiver";
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_EQ(durable_["after|" + sha], 1) << "on_durable exactly once";
  EXPECT_EQ(durable_attempts_, 2);
  const fs::path b = dir_.path() / "B/run1/after/latent.h3latent";
  EXPECT_EQ(slurp(b), slurp(dir_.path() / "A/run1/after/latent.h3latent"));
  EXPECT_EQ(artifacts::verify(b).value(), sha);
  EXPECT_TRUE(failed_.empty());
  EXPECT_TRUE(scan_outbox(dir_.path() / "A-outbox").empty());
}

}  // namespace
}  // namespace h3pipe::transfer
