// Redis ACL users per service (label redis): a real redis-server loaded with
// configs/redis/users.acl.
//   - no anonymous access, no clear passwords on disk, the unrendered template never loads;
//   - every service user is refused admin commands, keys outside its patterns, and scripts that
//     reach outside them (Redis checks each redis.call inside a script, KEYS declared or not);
//   - what the services write survives a restart with the shipped ACL file.
// Each service's real code with only its own user: redis_acl_services_test.cpp (same binary).
#include <gtest/gtest.h>

#include "common/queue/redis.h"
#include "common/queue/reply.h"
#include "common/state/resume.h"
#include "common/state/state.h"
#include "common/state/transfer_facts.h"
#include "tests/queue/redis_acl_checks.h"
#include "tests/queue/redis_acl_fixture.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using queue::reply_int;
using queue::reply_str;

namespace {

using ts::Argv;
using ts::is_acl_denial;
using ts::refusal;

TEST(RedisAcl, AnonymousAndWrongPasswordsAreRefusedAndNoClearPasswordIsStored) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  // No AUTH at all: the default user is off.
  auto anon = queue::Redis::connect({"127.0.0.1", srv.port(), "", "", 5000});
  ASSERT_TRUE(anon.ok());
  for (const Argv& argv :
       {Argv{"PING"}, Argv{"GET", "h3pipe:runs"}, Argv{"XADD", "h3pipe:submit", "*", "spec", "{}"}})
    EXPECT_NE(refusal(**anon, argv).find("NOAUTH"), std::string::npos) << argv[0];
  // The default user with any password, a service user with a wrong one, a user that does not
  // exist.
  for (auto addr : {queue::RedisAddress{"127.0.0.1", srv.port(), "", "anything", 5000},
                    queue::RedisAddress{"127.0.0.1", srv.port(), "default", "anything", 5000},
                    queue::RedisAddress{"127.0.0.1", srv.port(), "h3pipe-encoder",
                                        srv.password("sampler"), 5000},
                    queue::RedisAddress{"127.0.0.1", srv.port(), "nobody", "x", 5000}}) {
    auto c = queue::Redis::connect(addr);
    ASSERT_FALSE(c.ok()) << addr.user;
    EXPECT_EQ(c.error().code, "redis.auth");
    EXPECT_EQ(c.error().message.find(addr.password), std::string::npos)
        << "the error must not echo the password";
  }
  // The rendered file holds digests only.
  std::ifstream in(srv.acl_file());
  std::string acl((std::istreambuf_iterator<char>(in)), {});
  for (const auto& u : ts::acl_users())
    EXPECT_EQ(acl.find(srv.password(u)), std::string::npos) << u;
  EXPECT_NE(acl.find("user default off resetpass"), std::string::npos);
  // The template as shipped cannot be loaded: its placeholders are not valid digests.
  ts::TempDir sock;
  auto [rc, out] = ts::sh(
      fmt::format("timeout 20 /usr/bin/redis-server --port 0 --unixsocket {}/r.sock --save '' "
                  "--aclfile {} 2>&1",
                  sock.path().string(), ts::source("configs/redis/users.acl")));
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(rc, 124) << "the unrendered template loaded: " << out;
  EXPECT_NE(out.find("Aborting Redis startup because of ACL errors"), std::string::npos) << out;
}

TEST(RedisAcl, ServiceUsersAreRefusedAdminCommandsForeignKeysAndEscapingScripts) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  ASSERT_EQ(refusal(**admin, {"SET", "other-app:key", "keep"}), "");
  ASSERT_EQ(refusal(**admin, {"ZADD", "h3pipe:runs", "1", "r-1"}), "");
  const std::vector<Argv> denied = {
      {"FLUSHALL"},
      {"FLUSHDB"},
      {"CONFIG", "GET", "*"},
      {"CONFIG", "SET", "appendonly", "no"},
      {"KEYS", "*"},
      {"SCAN", "0"},
      {"DEBUG", "SLEEP", "0"},
      {"SHUTDOWN", "NOSAVE"},
      {"ACL", "LIST"},
      {"ACL", "SETUSER", "h3pipe-sampler", "+@all"},
      {"SCRIPT", "FLUSH"},
      {"SCRIPT", "KILL"},
      {"MODULE", "LIST"},
      {"CLIENT", "KILL", "TYPE", "normal"},
      {"MIGRATE", "127.0.0.1", "1", "h3pipe:runs", "0", "10"},
      {"SET", "other-app:key", "pwned"},
      {"GET", "other-app:key"},
      {"HSET", "other-app:hash", "a", "1"},
      {"XADD", "other-app:stream", "*", "a", "1"},
      {"DEL", "h3pipe:runs"},
      {"SUBSCRIBE", "h3pipe:events"},
      {"PUBLISH", "h3pipe:events", "x"},
      // Scripts: every redis.call is checked against the caller's user, declared in KEYS or not.
      {"EVAL", "return redis.call('SET', 'other-app:key', 'pwned')", "0"},
      {"EVAL", "return redis.call('HSET', 'other-app:hash', 'a', '1')", "0"},
      {"EVAL", "return redis.call('FLUSHALL')", "0"},
      {"EVAL", "return redis.call('DEL', KEYS[1])", "1", "h3pipe:runs"},
      {"EVAL", "return 1", "1", "other-app:key"},
  };
  for (const char* who : {"encoder", "sampler", "decoder", "transfer", "operator", "keda"}) {
    auto r = srv.connect(who);
    ASSERT_TRUE(r.ok()) << who << ": " << r.error().message;
    for (const auto& argv : denied) {
      if (std::string(who) == "operator" && argv[0] == "SCRIPT" && argv[1] == "KILL")
        continue;  // granted
      std::string why = refusal(**r, argv);
      // DEBUG is refused to every connection before the ACL check (enable-debug-command no).
      bool refused = is_acl_denial(why) ||
                     (argv[0] == "DEBUG" && why.find("not allowed") != std::string::npos);
      EXPECT_TRUE(refused) << who << " ran " << fmt::format("{}", fmt::join(argv, " ")) << ": \""
                           << why << "\"";
    }
  }
  EXPECT_EQ(reply_str((*admin)->command({"GET", "other-app:key"})->get()), "keep");
  EXPECT_EQ(reply_int((*admin)
                          ->command({"EXISTS", "h3pipe:runs", "other-app:hash", "other-app:stream"})
                          ->get()),
            1);
  EXPECT_EQ(reply_str((*admin)->command({"CONFIG", "GET", "appendonly"})->get()->element[1]), "no");
}

// Issue #22 item 9: one operator EVAL busy loop answered BUSY to every client until SCRIPT KILL.
// The operator may not run or load Lua of its own; it runs h3pipe's scripts once a service has
// loaded them (EVALSHA), which is all `resume` needs.
TEST(RedisAcl, TheOperatorCannotRunItsOwnLuaButRunsH3pipesLoadedScripts) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  auto op = srv.connect("operator");
  ASSERT_TRUE(op.ok()) << op.error().message;
  for (const Argv& argv :
       {Argv{"EVAL", "while true do end", "0"}, Argv{"EVAL", "return 1", "0"},
        Argv{"SCRIPT", "LOAD", "while true do end"}, Argv{"EVAL_RO", "return 1", "0"},
        Argv{"FUNCTION", "LOAD",
             "#!lua name=x\nredis.register_function('x', function() while true do end end)"},
        Argv{"FCALL", "x", "0"}})
    EXPECT_TRUE(is_acl_denial(refusal(**op, argv))) << argv[0] << " " << argv[1];
  // Until a service loaded it, h3pipe's own state-machine script is not there for the operator:
  // refused with the reason, not run.
  state::Store as_operator(**op);
  auto before = as_operator.apply(state::Store::reopen_move("r", "j", state::JobState::kEncode));
  ASSERT_FALSE(before.ok());
  EXPECT_NE(before.error().message.find("may not load scripts"), std::string::npos)
      << before.error().message;
  // The encoder's ingest loads them at start (Store::load_scripts); then the operator's move runs.
  auto enc = srv.connect("encoder");
  ASSERT_TRUE(enc.ok());
  ASSERT_TRUE(state::Store(**enc).load_scripts().ok());
  auto after = as_operator.apply(state::Store::reopen_move("r", "j", state::JobState::kEncode));
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_EQ(after->code, state::Applied::kRefused);  // no such job: refused by the table, counted
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(reply_str((*admin)->command({"ACL", "LOG", "RESET"})->get()), "OK");
}

// Issue #35 D12: the operator takes, refreshes and releases `resume`'s per-run lock (a string
// key beside the run: SET NX PX, GET, PEXPIRE, DEL granted on those keys only), and may not use
// those commands on any other key.
TEST(RedisAcl, TheOperatorHoldsTheResumeLockAndNoOtherStringKey) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  auto op = srv.connect("operator");
  ASSERT_TRUE(op.ok()) << op.error().message;
  {
    auto lock = state::ResumeLock::acquire(**op, "r", std::chrono::milliseconds(0));
    ASSERT_TRUE(lock.ok()) << lock.error().to_string();
    auto again = state::ResumeLock::acquire(**op, "r", std::chrono::milliseconds(0));
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, "state.refused") << again.error().message;
    EXPECT_NE(again.error().message.find(state::ResumeLock::key("r")), std::string::npos);
    EXPECT_TRUE(lock->refresh().ok());
  }
  auto after = state::ResumeLock::acquire(**op, "r", std::chrono::milliseconds(0));
  EXPECT_TRUE(after.ok()) << "released with its holder: " << after.error().to_string();
  for (const Argv& argv : {Argv{"SET", "h3pipe:run:{r}:job:j", "x"}, Argv{"GET", "h3pipe:runs"},
                           Argv{"DEL", "h3pipe:run:{r}"}, Argv{"SET", "h3pipe:gpu:g", "x"}})
    EXPECT_TRUE(is_acl_denial(refusal(**op, argv))) << argv[0] << " " << argv[1];
}

// Issue #35 D4: the transfer user reads what the receiver's admission of a peer's latent needs
// (the job's state and spec, its history: state::transfer_facts).
TEST(RedisAcl, TheTransferUserReadsTheJobBeforeItAdmitsALatent) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  ASSERT_TRUE((*admin)->command({"HSET", "h3pipe:run:{r}:job:j", "state", "transfer"}).ok());
  ASSERT_TRUE(
      (*admin)
          ->command({"RPUSH", "h3pipe:run:{r}:hist:j", R"({"stage": "STAGE_SAMPLE", "host": "a"})"})
          .ok());
  auto t = srv.connect("transfer");
  ASSERT_TRUE(t.ok());
  auto facts = state::transfer_facts(**t, "r", "j");
  ASSERT_TRUE(facts.ok()) << facts.error().to_string();
  EXPECT_EQ(facts->state, "transfer");
  EXPECT_EQ(facts->sampled_on, "a");
}

TEST(RedisAcl, EachServiceIsConfinedToItsOwnStreams) {
  ts::AclRedis srv;
  REQUIRE_SERVER(srv);
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  for (const char* s :
       {"h3pipe:submit", "h3pipe:stream:encode", "h3pipe:stream:sample", "h3pipe:stream:decode@h1"})
    ASSERT_EQ(refusal(**admin, {"XGROUP", "CREATE", s, "g", "0", "MKSTREAM"}), "");
  // Commands each user is granted, aimed at keys of another service.
  const std::vector<std::pair<std::string, Argv>> denied = {
      {"encoder", {"XADD", "h3pipe:stream:decode@h1", "*", "task", "x"}},
      {"encoder",
       {"EVAL", "return redis.call('XADD', 'h3pipe:stream:decode@h1', '*', 'task', 'x')", "0"}},
      // The other stages' streams a board reads (XLEN, XPENDING) cannot be claimed from.
      {"encoder",
       {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:stream:decode@h1", ">"}},
      {"sampler",
       {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:stream:encode", ">"}},
      {"sampler", {"XACK", "h3pipe:stream:encode", "g", "0-1"}},
      {"decoder", {"XACK", "h3pipe:stream:sample", "g", "0-1"}},
      {"decoder",
       {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:stream:encode", ">"}},
      {"sampler", {"XADD", "h3pipe:submit", "*", "run", "r", "spec", "{}"}},
      {"sampler", {"XADD", "h3pipe:stream:encode", "*", "task", "x"}},
      {"sampler", {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:submit", ">"}},
      {"sampler", {"EXISTS", "h3pipe:runs"}},
      {"decoder",
       {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:stream:sample", ">"}},
      {"decoder", {"XADD", "h3pipe:stream:sample", "*", "task", "x"}},
      {"decoder", {"XADD", "h3pipe:submit", "*", "run", "r", "spec", "{}"}},
      {"transfer", {"XADD", "h3pipe:stream:sample", "*", "task", "x"}},
      {"transfer", {"XADD", "h3pipe:submit", "*", "run", "r", "spec", "{}"}},
      {"transfer",
       {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:stream:decode@h1", ">"}},
      {"transfer", {"XADD", "h3pipe:dead", "*", "a", "1"}},
      {"keda", {"XADD", "h3pipe:stream:sample", "*", "task", "x"}},
      {"keda",
       {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:stream:sample", ">"}},
      {"keda", {"HGETALL", "h3pipe:run:{r}"}},
      {"operator",
       {"XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "h3pipe:stream:sample", ">"}},
      {"operator", {"XACK", "h3pipe:stream:sample", "g", "0-1"}},
      // The operator runs the job state machine's script (resume), and a script is held to
      // its user's rights command by command.
      {"operator", {"EVAL", "return redis.call('FLUSHALL')", "0"}},
      {"operator",
       {"EVAL", "return redis.call('XACK', KEYS[1], 'g', '0-1')", "1", "h3pipe:stream:sample"}},
  };
  for (const auto& [who, argv] : denied) {
    auto r = srv.connect(who);
    ASSERT_TRUE(r.ok());
    std::string why = refusal(**r, argv);
    EXPECT_TRUE(is_acl_denial(why))
        << who << " ran " << fmt::format("{}", fmt::join(argv, " ")) << ": \"" << why << "\"";
  }
  EXPECT_EQ(reply_int((*admin)->command({"XLEN", "h3pipe:stream:sample"})->get()), 0);
  EXPECT_EQ(reply_int((*admin)->command({"XLEN", "h3pipe:stream:decode@h1"})->get()), 0);
  EXPECT_EQ(reply_int((*admin)->command({"XLEN", "h3pipe:submit"})->get()), 0);
}

// What the services write survives a Redis restart with the shipped ACL file: plain commands,
// MULTI/EXEC transactions (the CLI's submission) and script effects (every stage transition,
// which Redis 7 logs to the AOF as MULTI/EXEC).  Redis replays the AOF as the default user and
// re-checks each EXEC against its rights; with `default ... -@all` every transaction was dropped
// on restart and a stopped local stack came back without its runs.
TEST(RedisAcl, TransactionsAndScriptEffectsSurviveARestart) {
  ts::AclRedis srv(/*aof=*/true);
  REQUIRE_SERVER(srv);
  {
    auto op = srv.connect("operator");
    ASSERT_TRUE(op.ok());
    ASSERT_TRUE((*op)->command({"HSET", "h3pipe:run:{r}", "plain", "1"}).ok());
    // Two writes each: Redis logs a transaction of one write without MULTI/EXEC.
    ASSERT_TRUE((*op)
                    ->pipeline({{"MULTI"},
                                {"HSET", "h3pipe:run:{r}", "multi", "1"},
                                {"XADD", "h3pipe:submit", "*", "run", "r"},
                                {"EXEC"}})
                    .ok());
    auto enc = srv.connect("encoder");
    ASSERT_TRUE(enc.ok());
    auto ev = (*enc)->eval(
        "redis.call('HSET', KEYS[1], 'script', '1') redis.call('HINCRBY', KEYS[1], 'n', 1) return "
        "1",
        {"h3pipe:run:{r}"}, {});
    ASSERT_TRUE(ev.ok()) << ev.error().message;
  }
  srv.restart();
  REQUIRE_SERVER(srv);
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  // Until the AOF is loaded commands answer LOADING (seen under load): wait for a real answer.
  ASSERT_TRUE(ts::wait_for([&] { return (*admin)->command({"XLEN", "h3pipe:submit"}).ok(); }, 10));
  EXPECT_EQ(reply_int((*admin)->command({"XLEN", "h3pipe:submit"})->get()), 1);
  for (const char* field : {"plain", "multi", "script", "n"})
    EXPECT_EQ(reply_str((*admin)->command({"HGET", "h3pipe:run:{r}", field})->get()), "1") << field;
  // The default user's rights do not let anyone in: it is off and has no password.
  auto anon = queue::Redis::connect({"127.0.0.1", srv.port(), "", "", 5000});
  ASSERT_TRUE(anon.ok());
  EXPECT_FALSE((*anon)->command({"PING"}).ok());
}

}  // namespace
