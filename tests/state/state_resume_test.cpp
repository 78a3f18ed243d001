// Issue #26 item 2 in a real redis-server (label: redis): what `h3pipe resume` reads from Redis
// (state/resume.h) finds exactly one run's outstanding tasks (other runs' entries and malformed
// entries ignored) and clears the run's cancel flag; the typed server queries (queue/server.h)
// answer TIME, CONFIG GET appendonly, INFO, HGET and, against a real redis-sentinel, SENTINEL
// get-master-addr-by-name and ckquorum, and name the command and the reply on a reply of the
// wrong type.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <set>

#include "common/queue/keys.h"
#include "common/queue/server.h"
#include "common/state/resume.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;

namespace {

pb::JobSpec spec_of(const std::string& job) {
  pb::JobSpec s;
  s.set_job_id(job);
  s.set_prompt("p");
  s.set_width(64);
  s.set_height(64);
  s.set_frames(9);
  s.set_fps(12);
  return s;
}

std::string task(const std::string& run, const std::string& job, pb::Stage stage) {
  pb::StageTask t;
  t.set_run_id(run);
  t.set_job_id(job);
  t.set_stage(stage);
  std::string out;
  t.SerializeToString(&out);
  return out;
}

struct Fixture {
  ts::RedisServer srv;
  std::unique_ptr<queue::Redis> r;

  Fixture() {
    auto c = srv.connect();
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().to_string());
    if (c.ok()) r = std::move(*c);
  }
  void accept(const std::string& run, const std::string& job) {
    state::Store store(*r);
    auto a = store.accept_job(run, spec_of(job), task(run, job, pb::STAGE_ENCODE));
    ASSERT_TRUE(a.ok() && *a) << run << "/" << job;
  }
  // Acks (deletes) the job's encode task, as the encode's completion does.
  void drop_encode_task(const std::string& run, const std::string& job) {
    const std::string id = ts::hget(*r, keys::job(run, job), "task:encode");
    ASSERT_FALSE(id.empty());
    ASSERT_TRUE(r->command({"XDEL", keys::stream("encode"), id}).ok());
  }
  queue::Reply reply(const std::vector<std::string>& argv) {
    auto x = r->command(argv);
    EXPECT_TRUE(x.ok()) << (x.ok() ? "" : x.error().to_string());
    return x.ok() ? std::move(*x) : queue::Reply(nullptr);
  }
};

const std::vector<std::string> kStreams = {keys::stream("encode"), keys::stream("sample"),
                                           "h3pipe:stream:decode:nowhere", "h3pipe:not-a-stream"};

TEST(ResumePlan, FindsExactlyTheRunsOutstandingTasksAndUncancelsIt) {
  Fixture f;
  ASSERT_TRUE(f.r);
  state::Store store(*f.r);
  ASSERT_TRUE(store.create_run("r1", {"a", "b", "c", "d", "e"}).ok());
  for (const char* j : {"a", "b", "c", "d"}) f.accept("r1", j);
  // a: queued, its encode task on the stream.  b: its task still there but the job failed (a
  // stale task).  c: its task acked.  d: at sample, its task on the sample stream.  e: rejected.
  ASSERT_TRUE(f.r->command({"HSET", keys::job("r1", "b"), "state", "failed"}).ok());
  f.drop_encode_task("r1", "c");
  f.drop_encode_task("r1", "d");
  ASSERT_TRUE(f.r->command({"HSET", keys::job("r1", "d"), "state", "sample"}).ok());
  ASSERT_TRUE(
      f.r->command({"XADD", keys::stream("sample"), "*", "task", task("r1", "d", pb::STAGE_SAMPLE)})
          .ok());
  ASSERT_TRUE(store.reject_job("r1", "e", "bad spec").ok());
  // Another run's task for a job named c, and malformed entries naming r1's c.
  f.accept("r2", "c");
  for (const std::vector<std::string>& e : std::vector<std::vector<std::string>>{
           {"XADD", keys::stream("sample"), "*", "task", "\x07garbage, not a StageTask"},
           {"XADD", keys::stream("sample"), "*", "payload", task("r1", "c", pb::STAGE_SAMPLE)},
           {"XADD", keys::stream("sample"), "*", "task", task("r1", "", pb::STAGE_SAMPLE)},
           {"SET", "h3pipe:not-a-stream", "x"}})
    ASSERT_TRUE(f.r->command(e).ok());
  ASSERT_TRUE(store.cancel("r1").ok());

  auto out = state::outstanding_jobs(*f.r, "r1", kStreams);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(*out, (std::set<std::string>{"a", "b", "d"}));
  auto other = state::outstanding_jobs(*f.r, "r2", kStreams);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, (std::set<std::string>{"c"}));

  auto plan = state::begin_resume(*f.r, "r1", kStreams);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_TRUE(plan->run.cancelled);  // as it was before the resume
  EXPECT_EQ(plan->run.total, 5);
  auto now_cancelled = store.cancelled("r1");
  ASSERT_TRUE(now_cancelled.ok());
  EXPECT_FALSE(*now_cancelled);
  EXPECT_EQ(ts::hget(*f.r, keys::run("r1"), "cancelled"), "0");

  ASSERT_EQ(plan->jobs.size(), 5u);
  std::map<std::string, const state::ResumeJob*> by_id;
  std::vector<std::string> order;
  for (const auto& j : plan->jobs) {
    by_id[j.job_id] = &j;
    order.push_back(j.job_id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_TRUE(by_id["a"]->left_to_its_task);
  EXPECT_FALSE(by_id["b"]->left_to_its_task);  // failed: its task is stale
  EXPECT_FALSE(by_id["c"]->left_to_its_task);  // r2's c and the malformed entries do not count
  EXPECT_TRUE(by_id["d"]->left_to_its_task);
  EXPECT_FALSE(by_id["e"]->left_to_its_task);
  for (const char* j : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(by_id[j]->spec.has_value()) << j;
    EXPECT_EQ(by_id[j]->spec->job_id(), j);
    EXPECT_EQ(by_id[j]->spec->width(), 64);
  }
  EXPECT_FALSE(by_id["e"]->spec.has_value());  // rejected at submission
  EXPECT_EQ(by_id["e"]->state, "failed");
  EXPECT_EQ(by_id["d"]->state, "sample");
  // r2 untouched.
  EXPECT_EQ(ts::hget(*f.r, keys::run("r2"), "cancelled"), "");
}

TEST(ResumePlan, AnUnknownRunIsAnErrorAndNothingIsWritten) {
  Fixture f;
  ASSERT_TRUE(f.r);
  auto plan = state::begin_resume(*f.r, "nope", kStreams);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().code, errc::run::kUnknown);
  EXPECT_NE(plan.error().message.find("no run \"nope\""), std::string::npos);
  auto exists = f.reply({"EXISTS", keys::run("nope")});
  EXPECT_EQ(queue::reply_int(exists.get()), 0);
}

TEST(ResumePlan, ARunWithoutJobsIsUncancelledAndHasAnEmptyPlan) {
  Fixture f;
  ASSERT_TRUE(f.r);
  state::Store store(*f.r);
  ASSERT_TRUE(store.create_run("r3", {}).ok());
  ASSERT_TRUE(store.cancel("r3").ok());
  auto plan = state::begin_resume(*f.r, "r3", kStreams);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_TRUE(plan->jobs.empty());
  EXPECT_EQ(ts::hget(*f.r, keys::run("r3"), "cancelled"), "0");
}

TEST(ServerQueries, AnswerFromARealRedis) {
  Fixture f;
  ASSERT_TRUE(f.r);
  EXPECT_TRUE(queue::ping(*f.r).ok());

  auto t = queue::server_time_s(*f.r);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  const double local =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(*t, local, 5.0);

  auto aof = queue::append_only(*f.r);  // ts::RedisServer runs with --appendonly yes
  ASSERT_TRUE(aof.ok()) << aof.error().to_string();
  ASSERT_TRUE(aof->has_value());
  EXPECT_TRUE(**aof);
  ASSERT_TRUE(f.r->command({"CONFIG", "SET", "appendonly", "no"}).ok());
  aof = queue::append_only(*f.r);
  ASSERT_TRUE(aof.ok() && aof->has_value());
  EXPECT_FALSE(**aof);

  auto server = queue::info(*f.r, "server");
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  EXPECT_FALSE(queue::info_field(*server, "redis_version").empty());
  EXPECT_EQ(queue::info_field(*server, "no_such_field"), "");
  auto pers = queue::info(*f.r, "persistence");
  ASSERT_TRUE(pers.ok());
  EXPECT_EQ(queue::info_field(*pers, "aof_enabled"), "0");

  ASSERT_TRUE(f.r->command({"HSET", "h", "spec", "{\"x\":1}"}).ok());
  auto got = queue::hget_each(*f.r, {{"h", "spec"}, {"h", "other"}, {"missing", "spec"}});
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0], std::optional<std::string>("{\"x\":1}"));
  EXPECT_FALSE((*got)[1].has_value());
  EXPECT_FALSE((*got)[2].has_value());
  auto none = queue::hget_each(*f.r, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(f.r->command({"RPUSH", "l", "x"}).ok());
  auto wrong = queue::hget_each(*f.r, {{"h", "spec"}, {"l", "spec"}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, errc::redis::kError);
  EXPECT_NE(wrong.error().message.find("WRONGTYPE"), std::string::npos);
}

TEST(ServerQueries, AReplyOfTheWrongTypeIsAClearError) {
  Fixture f;
  ASSERT_TRUE(f.r);
  auto expect_reply_error = [](const auto& res, const std::string& cmd, const std::string& kind) {
    ASSERT_FALSE(res.ok());
    EXPECT_EQ(res.error().code, errc::redis::kReply);
    EXPECT_EQ(res.error().message.rfind("unexpected " + cmd + " reply: ", 0), 0u)
        << res.error().message;
    EXPECT_NE(res.error().message.find(kind), std::string::npos) << res.error().message;
  };
  // Real replies of other commands, fed to the parsers.
  auto str = f.reply({"ECHO", "x"});
  auto three = f.reply({"EVAL", "return {'1','2','3'}", "0"});
  auto words = f.reply({"EVAL", "return {'abc','1'}", "0"});
  auto seven = f.reply({"EVAL", "return 7", "0"});
  auto empty = f.reply({"EVAL", "return {}", "0"});
  auto pong = f.reply({"PING"});
  auto nil = f.reply({"GET", "missing"});
  auto hp = f.reply({"EVAL", "return {'10.0.0.5','6380'}", "0"});
  auto bad_port = f.reply({"EVAL", "return {'10.0.0.5','port'}", "0"});

  expect_reply_error(queue::parse_time(str.get()), "TIME", "a string \"x\"");
  expect_reply_error(queue::parse_time(three.get()), "TIME", "an array of 3");
  expect_reply_error(queue::parse_time(words.get()), "TIME", "a string \"abc\"");
  expect_reply_error(queue::parse_time(nullptr), "TIME", "no reply");
  auto two = f.reply({"EVAL", "return {'12','500000'}", "0"});
  auto t = queue::parse_time(two.get());
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 12.5);

  expect_reply_error(queue::parse_append_only(seven.get()), "CONFIG GET appendonly",
                     "an integer 7");
  expect_reply_error(queue::parse_append_only(three.get()), "CONFIG GET appendonly",
                     "an array of 3");
  auto unknown = queue::parse_append_only(empty.get());
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->has_value());  // a server without the parameter

  expect_reply_error(queue::parse_primary(pong.get()), "SENTINEL get-master-addr-by-name",
                     "a status \"PONG\"");
  expect_reply_error(queue::parse_primary(bad_port.get()), "SENTINEL get-master-addr-by-name",
                     "a string \"port\"");
  auto no_master = queue::parse_primary(nil.get());
  ASSERT_TRUE(no_master.ok());
  EXPECT_FALSE(no_master->has_value());
  auto primary = queue::parse_primary(hp.get());
  ASSERT_TRUE(primary.ok() && primary->has_value());
  EXPECT_EQ((*primary)->host, "10.0.0.5");
  EXPECT_EQ((*primary)->port, 6380);
}

// A redis-sentinel monitoring the fixture's server (quorum 1): it names the primary from its
// config at once, without a replica or other Sentinels.
class Sentinel {
 public:
  Sentinel(const std::filesystem::path& dir, int primary_port) {
    port_ = supervisor::free_loopback_port();
    const auto conf = dir / "sentinel.conf";
    std::ofstream(conf) << "port " << port_ << "\nbind 127.0.0.1\ndir " << dir.string()
                        << "\nsentinel monitor h3 127.0.0.1 " << primary_port << " 1\n";
    pid_ = ts::spawn({"/usr/bin/redis-sentinel", conf.string()}, (dir / "sentinel.log").string());
    ts::wait_for([&] { return connect().ok(); }, 10);
  }
  ~Sentinel() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  Result<std::unique_ptr<queue::Redis>> connect() const {
    queue::RedisAddress a;
    a.port = port_;
    a.timeout_ms = 1000;
    auto r = queue::Redis::connect(a);
    if (r.ok()) H3_TRY(queue::ping(**r));
    return r;
  }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST(ServerQueries, SentinelNamesThePrimary) {
  if (::access("/usr/bin/redis-sentinel", X_OK) != 0) GTEST_SKIP() << "no redis-sentinel";
  Fixture f;
  ASSERT_TRUE(f.r);
  ts::TempDir dir;
  Sentinel s(dir.path(), f.srv.port());
  auto conn = s.connect();
  ASSERT_TRUE(conn.ok()) << conn.error().to_string();
  auto primary = queue::sentinel_primary(**conn, "h3");
  ASSERT_TRUE(primary.ok()) << primary.error().to_string();
  ASSERT_TRUE(primary->has_value());
  EXPECT_EQ((*primary)->host, "127.0.0.1");
  EXPECT_EQ((*primary)->port, f.srv.port());
  auto unknown = queue::sentinel_primary(**conn, "nope");
  ASSERT_TRUE(unknown.ok()) << unknown.error().to_string();
  EXPECT_FALSE(unknown->has_value());
  auto q = queue::sentinel_ckquorum(**conn, "h3");
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(q->rfind("OK", 0), 0u) << *q;
  auto nq = queue::sentinel_ckquorum(**conn, "nope");
  ASSERT_FALSE(nq.ok());
  EXPECT_EQ(nq.error().code, errc::redis::kError);

  // The connection behind Sentinel reads the same reply through the same parser.
  queue::RedisAddress via;
  via.sentinels = {{"127.0.0.1", s.port()}};
  via.sentinel_master = "h3";
  auto r = queue::Redis::connect(via);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ((*r)->where(), "127.0.0.1:" + std::to_string(f.srv.port()));
  EXPECT_TRUE(queue::ping(**r).ok());
  via.sentinel_master = "nope";
  auto none = queue::Redis::connect(via);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, errc::redis::kSentinel);
  EXPECT_NE(none.error().message.find("does not know a primary named nope"), std::string::npos)
      << none.error().message;
}

}  // namespace

// Every POST /v1/videos is a run named by new_run_id: two requests in one second must not get
// the same name (24 random bits did at 500 requests/s; 100,000 ids would all but surely repeat).
TEST(NewRunId, FormatAndNoRepeatAmong100000) {
  const std::regex shape(R"(r-\d{8}-\d{6}-[0-9a-f]{12})");
  std::set<std::string> seen;
  for (int i = 0; i < 100000; ++i) {
    std::string id = h3pipe::state::new_run_id();
    ASSERT_TRUE(std::regex_match(id, shape)) << id;
    ASSERT_TRUE(seen.insert(id.substr(id.size() - 12)).second) << "repeated suffix: " << id;
  }
}
