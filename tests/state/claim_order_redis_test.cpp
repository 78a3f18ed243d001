// The claim order written twice (docs/design.md, "The claim order"): the C++ (dispatch::pick and
// dispatch::charge) and the Lua every live claim runs (common/queue/claim_order_lua.inc, through
// StageQueue::claim, Store::claim_and_start and a completion's folded claim, Move::then_claim)
// take the same entry and leave the same fair-share
// state, over random stream states: priorities, users, classes, aged entries, entries another
// consumer holds, a share hash with a floor, small windows.  Then the same order's properties on
// the C++ alone: a priority job behind 50 goes first, aging lifts a waiting job to the top class
// and no further, and the fair share alternates two users.  Label: redis.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "common/dispatch/claim_order.h"
#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/queue/reply.h"
#include "common/state/pause.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using queue::reply_int;
using queue::reply_str;

namespace {

const std::string kStream = keys::stream("sample");
const std::string kShare = keys::claim_share(kStream);

long long redis_now_ms(queue::Redis& r) {
  auto t = r.command({"TIME"});
  EXPECT_TRUE(t.ok());
  return std::stoll(reply_str(t->get()->element[0])) * 1000 +
         std::stoll(reply_str(t->get()->element[1])) / 1000;
}

// The stream and share hash as the C++ order reads them.
std::vector<dispatch::ClaimEntry> read_entries(queue::Redis& r) {
  std::set<std::string> held;
  auto p = r.command({"XPENDING", kStream, "sample", "-", "+", "100000"});
  EXPECT_TRUE(p.ok());
  for (std::size_t i = 0; i < p->get()->elements; ++i)
    held.insert(reply_str(p->get()->element[i]->element[0]));
  std::set<std::string> paused;
  auto pr = r.command({"SMEMBERS", keys::paused_runs()});
  EXPECT_TRUE(pr.ok());
  for (std::size_t i = 0; i < pr->get()->elements; ++i)
    paused.insert(reply_str(pr->get()->element[i]));
  std::map<std::string, long long> moved;
  auto mv = r.command({"ZRANGE", keys::moved_first(), "0", "-1", "WITHSCORES"});
  EXPECT_TRUE(mv.ok());
  for (std::size_t i = 0; i + 1 < mv->get()->elements; i += 2)
    moved[reply_str(mv->get()->element[i])] = std::stoll(reply_str(mv->get()->element[i + 1]));
  auto es = queue::read_range(r, kStream, "-", "+");
  EXPECT_TRUE(es.ok());
  std::vector<dispatch::ClaimEntry> out;
  for (const auto& e : *es) {
    dispatch::ClaimEntry c;
    c.id = e.id;
    EXPECT_TRUE(dispatch::parse_entry_id(e.id, c.ms, c.seq));
    auto f = [&](const char* k) {
      auto it = e.fields.find(k);
      return it == e.fields.end() ? std::string() : it->second;
    };
    c.priority = f("prio").empty() ? 0 : std::stoll(f("prio"));
    c.user = f("user");
    c.cls = f("cls");
    if (auto m = moved.find(f("run") + " " + f("job")); m != moved.end()) c.first = m->second;
    c.held = held.count(e.id) > 0 || paused.count(f("run")) > 0;  // a paused run's: no candidate
    out.push_back(c);
  }
  return out;
}

dispatch::ShareState read_share(queue::Redis& r) {
  dispatch::ShareState s;
  auto h = r.command({"HGETALL", kShare});
  EXPECT_TRUE(h.ok());
  for (std::size_t i = 0; i + 1 < h->get()->elements; i += 2) {
    const std::string k = reply_str(h->get()->element[i]);
    const long long v = std::stoll(reply_str(h->get()->element[i + 1]));
    if (k == "floor")
      s.floor = v;
    else if (k.rfind("u:", 0) == 0)
      s.vt[k.substr(2)] = v;
  }
  return s;
}

TEST(ClaimOrder, TheLuaTakesWhatTheCppPicksOverRandomStreams) {
  ts::RedisServer srv;
  auto c = srv.connect();
  ASSERT_TRUE(c.ok());
  auto& r = **c;
  std::mt19937 rng(39);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::string> users = {"", "alice", "bob", "carol"};
  const std::vector<std::string> classes = {"", "small", "big"};
  int compared = 0, took = 0;
  for (int trial = 0; trial < 120; ++trial) {
    ASSERT_TRUE(r.command({"FLUSHALL"}).ok());
    dispatch::ClaimOrder order;
    order.aging_ms = trial % 3 == 0 ? 0 : 10000;
    order.window = uni(1, 12);
    order.default_cost_ms = uni(1, 5000);
    order.cost_ms = {{"small", uni(1, 3000)}, {"big", uni(1, 30000)}};
    if (uni(0, 1)) order.weight_permille = {{"alice", uni(1, 4000)}, {"bob", uni(1, 4000)}};
    // Entries at ages between boundaries (mid-way through an aging step), increasing ids.
    const long long now = redis_now_ms(r);
    const int n = uni(0, 30);
    std::vector<long long> steps;
    for (int i = 0; i < n; ++i) steps.push_back(uni(0, 6));
    std::sort(steps.rbegin(), steps.rend());
    for (int i = 0; i < n; ++i) {
      const long long ms = now - steps[i] * 10000 - 5000;
      std::vector<std::string> cmd = {"XADD", kStream, std::to_string(ms) + "-" + std::to_string(i),
                                      "task", "t" + std::to_string(i)};
      if (uni(0, 4)) cmd.insert(cmd.end(), {"prio", std::to_string(uni(-2, 3))});
      if (uni(0, 4)) cmd.insert(cmd.end(), {"user", users[uni(0, 3)]});
      if (uni(0, 2)) cmd.insert(cmd.end(), {"cls", classes[uni(0, 2)]});
      const std::string run = "r" + std::to_string(uni(1, 3));
      if (uni(0, 3)) cmd.insert(cmd.end(), {"run", run, "job", "j" + std::to_string(i)});
      if (uni(0, 9) == 0)
        ASSERT_TRUE(r.command({"ZADD", keys::moved_first(), std::to_string(uni(1, 1000)),
                               run + " j" + std::to_string(i)})
                        .ok());
      ASSERT_TRUE(r.command(cmd).ok());
    }
    ASSERT_TRUE(r.command({"XGROUP", "CREATE", kStream, "sample", "0", "MKSTREAM"}).ok());
    // Some held by another consumer (forced into its pending list, as a claim does).
    for (const auto& e : read_entries(r))
      if (uni(0, 3) == 0)
        ASSERT_TRUE(r.command({"XCLAIM", kStream, "sample", "other", "0", e.id, "FORCE"}).ok());
    if (uni(0, 2) == 0)
      ASSERT_TRUE(r.command({"SADD", keys::paused_runs(), "r" + std::to_string(uni(1, 3))}).ok());
    if (uni(0, 1)) {
      ASSERT_TRUE(r.command({"HSET", kShare, "floor", std::to_string(uni(0, 5000))}).ok());
      for (const auto& u : users)
        if (uni(0, 1))
          ASSERT_TRUE(r.command({"HSET", kShare, "u:" + u, std::to_string(uni(0, 20000))}).ok());
    }
    queue::StageQueue q(r, {kStream, "sample", "me", 60000, 0, 60000, order.encode(), kShare});
    state::Store store(r);
    // Claim until nothing is left, comparing every claim; in turn through each script the
    // Claimer (common/worker/claimer.h) runs: the queue's, the state machine's claim folded with
    // a start (claim_and_start), and the claim folded into a completion (Move::then_claim; the
    // completion here is of a job that is not there, refused, as the claim after it still runs).
    for (int k = 0;; ++k) {
      const auto entries = read_entries(r);
      auto share = read_share(r);
      const auto want = dispatch::pick(order, entries, share, redis_now_ms(r));
      std::optional<std::string> got;
      if (k % 3 == 0) {
        auto e = q.claim(true);
        ASSERT_TRUE(e.ok()) << e.error().to_string();
        if (*e) got = (*e)->id;
      } else if (k % 3 == 1) {
        auto e = store.claim_and_start({kStream, "sample", "me", "", order.encode(), kShare},
                                       {"", "r", "j"}, pb::STAGE_SAMPLE);
        ASSERT_TRUE(e.ok()) << e.error().to_string();
        if (*e) got = (*e)->entry_id;
      } else {
        auto m = state::Store::advance_move("r", "gone", pb::StageRecord(), state::JobState::kDone);
        m.ack = state::QueueAck{kStream, "sample", "me", "1-1", order.encode(), kShare};
        m.then_claim = state::ClaimNext{{}, pb::STAGE_SAMPLE, 0};
        auto e = store.apply(m);
        ASSERT_TRUE(e.ok()) << e.error().to_string();
        if (e->claimed) got = e->claimed->entry_id;
      }
      ++compared;
      ASSERT_EQ(want.has_value(), got.has_value()) << "trial " << trial << " claim " << k;
      if (!want) break;
      ASSERT_EQ(entries[*want].id, *got) << "trial " << trial << " claim " << k;
      dispatch::charge(order, entries, *want, share);
      const auto after = read_share(r);
      EXPECT_EQ(after.floor, share.floor) << "trial " << trial << " claim " << k;
      for (const auto& [u, v] : share.vt) EXPECT_EQ(after.vt_of(u), share.vt_of(u)) << u;
      // Taken: pending for this consumer with one delivery.
      auto p = r.command({"XPENDING", kStream, "sample", *got, *got, "1"});
      ASSERT_TRUE(p.ok());
      ASSERT_EQ(p->get()->elements, 1u);
      EXPECT_EQ(reply_str(p->get()->element[0]->element[1]), "me");
      EXPECT_EQ(reply_int(p->get()->element[0]->element[3]), 1);
      ++took;
    }
  }
  EXPECT_GT(took, 500);
  RecordProperty("claims_compared", compared);
}

// The board's head: what the claim would take, taking nothing.
TEST(ClaimOrder, ThePeekIsTheClaimsPick) {
  ts::RedisServer srv;
  auto c = srv.connect();
  ASSERT_TRUE(c.ok());
  auto& r = **c;
  const dispatch::ClaimOrder order;
  ASSERT_TRUE(r.command({"XGROUP", "CREATE", kStream, "sample", "0", "MKSTREAM"}).ok());
  ASSERT_TRUE(r.command({"XADD", kStream, "*", "task", "low", "prio", "0"}).ok());
  ASSERT_TRUE(r.command({"XADD", kStream, "*", "task", "high", "prio", "5"}).ok());
  auto head = queue::peek_ordered(r, kStream, "sample", order.encode());
  ASSERT_TRUE(head.ok() && head->has_value());
  EXPECT_EQ((*head)->payload, "high");
  queue::StageQueue q(r, {kStream, "sample", "me", 60000, 0, 60000, order.encode(), kShare});
  auto e = q.claim(true);
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->payload, "high");
  head = queue::peek_ordered(r, kStream, "sample", order.encode());
  ASSERT_TRUE(head.ok() && head->has_value());
  EXPECT_EQ((*head)->payload, "low");
}

// A paused run's entries are taken by no claim, however many lie ahead of the others (they take
// no place in the window), and again once it is unpaused.
TEST(ClaimOrder, APausedRunsTasksWaitAndTheOthersGoPastThem) {
  ts::RedisServer srv;
  auto c = srv.connect();
  ASSERT_TRUE(c.ok());
  auto& r = **c;
  dispatch::ClaimOrder order;
  order.window = 4;
  ASSERT_TRUE(r.command({"XGROUP", "CREATE", kStream, "sample", "0", "MKSTREAM"}).ok());
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(
        r.command({"XADD", kStream, "*", "task", "p" + std::to_string(i), "run", "held"}).ok());
  ASSERT_TRUE(r.command({"XADD", kStream, "*", "task", "other", "run", "free"}).ok());
  ASSERT_TRUE(state::pause_run(r, "held").ok());
  auto paused = state::run_paused(r, "held");
  ASSERT_TRUE(paused.ok() && *paused);
  queue::StageQueue q(r, {kStream, "sample", "me", 60000, 0, 60000, order.encode(), kShare});
  auto e = q.claim(true);
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->payload, "other");
  e = q.claim(true);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->has_value());
  ASSERT_TRUE(state::unpause_run(r, "held").ok());
  e = q.claim(true);
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->payload, "p0");
}

// A claim that finds nothing waits for the next entry (block_ms) and takes it.
TEST(ClaimOrder, AnEmptyClaimWaitsForTheNextEntry) {
  ts::RedisServer srv;
  auto c = srv.connect();
  ASSERT_TRUE(c.ok());
  const dispatch::ClaimOrder order;
  queue::StageQueue q(**c, {kStream, "sample", "me", 60000, 3000, 60000, order.encode(), kShare});
  ASSERT_TRUE(q.ensure_group().ok());
  std::thread add([&] {
    auto o = srv.connect();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE((*o)->command({"XADD", kStream, "*", "task", "late"}).ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto e = q.claim(true);
  add.join();
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->payload, "late");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
}

std::vector<dispatch::ClaimEntry> queue_of(int n, long long ms0, const std::string& user,
                                           long long prio = 0) {
  std::vector<dispatch::ClaimEntry> out;
  for (int i = 0; i < n; ++i)
    out.push_back({std::to_string(ms0 + i) + "-0", ms0 + i, 0, prio, user, "", false});
  return out;
}

TEST(ClaimOrder, APriorityJobBehindFiftyGoesFirst) {
  dispatch::ClaimOrder o;
  o.aging_ms = 30000;
  auto es = queue_of(50, 1000, "a");
  es.push_back({"2000-0", 2000, 0, 1, "a", "", false});
  auto p = dispatch::pick(o, es, {}, 2001);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, 50u);
}

// Aging: a priority-0 job waiting behind a stream of priority-3 jobs is taken once it has waited
// (3 - 0) aging steps, ahead of the top-class jobs that came after it, and never ahead of the
// top-class job that came before it (it ties with it, and then stream order decides).
TEST(ClaimOrder, AgingLiftsAWaitingJobToTheTopClassAndNoFurther) {
  dispatch::ClaimOrder o;
  o.aging_ms = 1000;
  std::vector<dispatch::ClaimEntry> es = {{"100-0", 100, 0, 3, "a", "", false},
                                          {"200-0", 200, 0, 0, "a", "", false}};
  for (long long t = 300; t < 20000; t += 100) {
    es.push_back({std::to_string(t) + "-0", t, 0, 3, "a", "", false});
    auto p = dispatch::pick(o, es, {}, t);
    ASSERT_TRUE(p);
    if (t - 200 < 3000) {
      EXPECT_NE(es[*p].id, "200-0") << t;
    }
    if (es[*p].id == "200-0") {
      EXPECT_GE(t - 200, 3000);
      EXPECT_LT(t - 200, 3000 + 100 * 40);  // the bound: (3 - 0) aging steps, then its turn
      return;
    }
    es[*p].held = true;  // taken; the next claim comes 100 ms later (one task per 100 ms)
    if (es.front().held) es.erase(es.begin());
  }
  FAIL() << "the priority-0 job was never taken";
}

TEST(ClaimOrder, TheFairShareAlternatesTwoUsersAndBanksNoIdleCredit) {
  dispatch::ClaimOrder o;
  o.default_cost_ms = 300;
  auto es = queue_of(30, 1000, "a");
  dispatch::ShareState s;
  // a alone for 3 claims
  for (int i = 0; i < 3; ++i) {
    auto p = dispatch::pick(o, es, s, 5000);
    ASSERT_TRUE(p);
    EXPECT_EQ(es[*p].user, "a");
    dispatch::charge(o, es, *p, s);
    es[*p].held = true;
  }
  auto b = queue_of(4, 2000, "b");
  es.insert(es.end(), b.begin(), b.end());
  int a_taken = 3, b_taken = 0;
  while (b_taken < 4) {
    auto p = dispatch::pick(o, es, s, 5000);
    ASSERT_TRUE(p);
    dispatch::charge(o, es, *p, s);
    es[*p].held = true;
    (es[*p].user == "a" ? a_taken : b_taken)++;
  }
  // b, arriving with no credit banked, alternates with a: its 4th claim is a's 7th at most.
  EXPECT_LE(a_taken, 7);
  EXPECT_GE(a_taken, 6);
}

}  // namespace
