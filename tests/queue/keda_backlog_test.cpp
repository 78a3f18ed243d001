// What KEDA's redis-streams scaler would read from h3pipe's stage streams, as the shipped
// h3pipe-keda user, with the queue code the workers run (StageQueue: XREADGROUP one task at a
// time, XACK + XDEL when done).  The chart's ScaledObjects (helm/h3pipe/templates/keda.yaml) use
// its XLEN mode (streamLength): the stream holds every task from enqueue to ack, so XLEN is the
// backlog.  The pending entries list (its pendingEntriesCount mode, which the chart once used)
// holds only the running tasks, at most one per replica: one replica with seven tasks waiting
// asked for ceil(1 / 2) = 1 replica, so a pool never grew.  The lag (its lagCount mode) counts
// only the waiting ones, so with every task running it asks for none, and the HPA would take
// away busy replicas.
#include <gtest/gtest.h>

#include <cmath>

#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/queue/reply.h"
#include "tests/queue/redis_acl_fixture.h"

using namespace h3pipe;
namespace ts = h3pipe::test_support;
using queue::reply_int;

namespace {

// KEDA's desired replica count for an AverageValue target: ceil(metric / target) within bounds.
long long desired_replicas(long long metric, long long target, long long min, long long max) {
  const long long want = static_cast<long long>(std::ceil(static_cast<double>(metric) / target));
  return std::clamp(want, min, max);
}

struct KedaView {
  long long xlen = 0, pending = 0, lag = -1;
};

KedaView read_as_keda(queue::Redis& keda, const std::string& stream, const std::string& group) {
  KedaView v;
  v.xlen = reply_int(keda.command({"XLEN", stream})->get());
  auto p = keda.command({"XPENDING", stream, group});
  EXPECT_TRUE(p.ok()) << p.error().message;
  if (p.ok() && p->get()->type == REDIS_REPLY_ARRAY && p->get()->elements > 0)
    v.pending = p->get()->element[0]->integer;
  auto g = keda.command({"XINFO", "GROUPS", stream});
  EXPECT_TRUE(g.ok()) << g.error().message;
  if (g.ok() && g->get()->type == REDIS_REPLY_ARRAY && g->get()->elements > 0) {
    const redisReply* grp = g->get()->element[0];
    for (std::size_t i = 0; i + 1 < grp->elements; i += 2)
      if (std::string(grp->element[i]->str) == "lag" &&
          grp->element[i + 1]->type == REDIS_REPLY_INTEGER)
        v.lag = grp->element[i + 1]->integer;
  }
  return v;
}

TEST(KedaBacklog, StreamLengthCountsWaitingAndRunningTasksThePendingListOnlyRunningOnes) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  auto encoder = srv.connect("encoder");
  auto sampler = srv.connect("sampler");
  auto keda = srv.connect("keda");
  ASSERT_TRUE(encoder.ok() && sampler.ok() && keda.ok());
  const std::string stream = keys::stream("sample");
  queue::StageQueue in(**encoder, {stream, "sample", "encoder-1"});
  ASSERT_TRUE(in.ensure_group().ok());
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(in.enqueue("task " + std::to_string(i)).ok());

  // One sampler replica takes one task; six wait.
  queue::StageQueue replica(**sampler, {stream, "sample", "sampler-1"});
  auto running = replica.claim();
  ASSERT_TRUE(running.ok() && running->has_value());
  KedaView v = read_as_keda(**keda, stream, "sample");
  EXPECT_EQ(v.xlen, 7) << "the backlog: 6 waiting + 1 running";
  EXPECT_EQ(v.pending, 1) << "only the running task";
  // The chart's default: streamLength 2, replicas 1..4.
  EXPECT_EQ(desired_replicas(v.xlen, 2, 1, 4), 4);
  EXPECT_EQ(desired_replicas(v.pending, 2, 1, 4), 1) << "the pending list never asks for more";

  // The task is done: the ack deletes it, and the backlog shrinks by one.
  auto done = replica.complete(**running, {});
  ASSERT_TRUE(done.ok() && *done);
  v = read_as_keda(**keda, stream, "sample");
  EXPECT_EQ(v.xlen, 6);
  EXPECT_EQ(v.pending, 0);

  // Four replicas take the next four; while they run, XLEN keeps all of them (and the two
  // waiting) in the count: no busy replica is scaled away.
  std::vector<std::unique_ptr<queue::Redis>> conns;
  std::vector<std::pair<std::unique_ptr<queue::StageQueue>, queue::Entry>> busy;
  for (int r = 0; r < 4; ++r) {
    auto c = srv.connect("sampler");
    ASSERT_TRUE(c.ok());
    conns.push_back(std::move(*c));
    auto q = std::make_unique<queue::StageQueue>(
        *conns.back(), queue::QueueOptions{stream, "sample", "s" + std::to_string(r)});
    auto e = q->claim();
    ASSERT_TRUE(e.ok() && e->has_value());
    busy.emplace_back(std::move(q), std::move(**e));
  }
  v = read_as_keda(**keda, stream, "sample");
  EXPECT_EQ(v.xlen, 6);
  EXPECT_EQ(v.pending, 4);
  EXPECT_EQ(desired_replicas(v.xlen, 2, 1, 4), 3);
  EXPECT_EQ(v.lag, 2) << "the lag counts the waiting ones only (Redis 7: XINFO GROUPS lag)";
  EXPECT_EQ(desired_replicas(v.lag, 2, 0, 4), 1) << "lagCount would take three busy replicas away";

  for (auto& [q, e] : busy) ASSERT_TRUE(q->complete(e, {}).ok());
  for (int i = 0; i < 2; ++i) {
    auto e = busy[0].first->claim();
    ASSERT_TRUE(e.ok() && e->has_value());
    ASSERT_TRUE(busy[0].first->complete(**e, {}).ok());
  }
  v = read_as_keda(**keda, stream, "sample");
  EXPECT_EQ(v.xlen, 0) << "an idle pool's stream is empty: KEDA may scale it to its minimum";
  EXPECT_EQ(desired_replicas(v.xlen, 2, 1, 4), 1);
}

}  // namespace
