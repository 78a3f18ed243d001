// GPU groups' lease against a real redis-server (label: redis): one holder at a time, a dead
// holder's lease expires, a later stage waiting goes first, and the group follows
// shares_gpus_with transitively.
#include <gtest/gtest.h>

#include "common/worker/gpu_lease.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using worker::GpuLease;

TEST(GpuLease, OneHolderAtATimeAndOnlyTheHolderReleases) {
  ts::RedisServer srv;
  GpuLease enc(srv.address(), "g", "enc", 1, 5000), samp(srv.address(), "g", "s0", 2, 5000);
  ASSERT_TRUE(*enc.acquire());
  EXPECT_TRUE(*enc.acquire());  // already ours: renewed
  EXPECT_FALSE(*samp.acquire());
  samp.release();  // not the holder: changes nothing
  EXPECT_FALSE(*samp.acquire());
  enc.release();
  EXPECT_TRUE(*samp.acquire());
}

TEST(GpuLease, ALaterStageWaitingGoesFirst) {
  ts::RedisServer srv;
  GpuLease enc(srv.address(), "g", "enc", 1, 5000), samp(srv.address(), "g", "s0", 2, 5000);
  ASSERT_TRUE(*enc.acquire());
  EXPECT_FALSE(*samp.acquire());  // the sampler now waits for it
  enc.release();
  EXPECT_FALSE(*enc.acquire());  // the encoder leaves it to the waiting sampler
  EXPECT_TRUE(*samp.acquire());
  samp.release();
  EXPECT_TRUE(*enc.acquire());  // nobody later waits: the encoder takes it
}

TEST(GpuLease, AHolderThatDiesFreesTheGpusAfterTheTtlAndALiveOneKeepsThem) {
  ts::RedisServer srv;
  GpuLease other(srv.address(), "g", "s0", 2, 5000);
  {
    GpuLease live(srv.address(), "g", "enc", 1, 300);
    ASSERT_TRUE(*live.acquire());
    // Renewed every ttl/3: still held well past its ttl.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(900);
    while (std::chrono::steady_clock::now() < until) {
      EXPECT_FALSE(*other.acquire());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_TRUE(*other.acquire());  // released at destruction
  // A holder that dies without releasing: its key expires after the ttl.
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->command({"SET", "h3pipe:gpu:h", "dead/1", "PX", "200"}).ok());
  GpuLease next(srv.address(), "h", "enc", 1, 5000);
  EXPECT_FALSE(*next.acquire());
  EXPECT_TRUE(ts::wait_for([&] { return *next.acquire(); }, 5));
}

TEST(GpuGroup, FollowsSharesGpusWithTransitivelyAndIsNamedByItsFirstPool) {
  config::Cluster c;
  for (auto [name, with] :
       {std::pair{"dec", ""}, {"enc", "s0"}, {"s0", ""}, {"s1", ""}, {"enc2", "enc"}}) {
    config::Pool p;
    p.name = name;
    p.shares_gpus_with = with;
    c.pools.push_back(p);
  }
  EXPECT_EQ(worker::gpu_group(c, c.pools[1]), "enc");
  EXPECT_EQ(worker::gpu_group(c, c.pools[2]), "enc");
  EXPECT_EQ(worker::gpu_group(c, c.pools[4]), "enc");
  EXPECT_EQ(worker::gpu_group(c, c.pools[0]), "");
  EXPECT_EQ(worker::gpu_group(c, c.pools[3]), "");
}
