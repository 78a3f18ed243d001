#pragma once
// RAII over hiredis (docs/design.md, convention 12).  One Redis object = one connection; not shared
// between threads (a worker's lease-renewal thread opens its own).
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/result.h"

// hiredis's types, whole only where replies are read: common/queue/reply.h, for common/queue,
// common/state and tests (hiredis is linked PRIVATE to the two libraries; docs/design.md, "Redis
// behind ports").  Everything else holds a Reply without looking inside.
struct redisReply;
struct redisContext;

namespace h3pipe::queue {

struct ReplyDeleter {
  void operator()(redisReply* r) const;  // freeReplyObject
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct HostPort {
  std::string host;
  int port = 0;
};

struct RedisAddress {
  // A host that begins with '/' is the path of a Unix socket (port unused): the local stack's
  // Redis or its stunnel client, inside the 0700 state dir (issue #35 D1).  Connecting to one
  // makes the process ignore SIGPIPE (unless it installed a handler): a dead peer is redis.io.
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user{};      // ACL user, empty = default
  std::string password{};  // empty = no AUTH
  int timeout_ms = 5000;
  // Redis behind Sentinel: when `sentinels` is not empty, every (re)connect asks them in turn
  // (SENTINEL get-master-addr-by-name sentinel_master) where the primary is, and host/port are
  // only what the last one answered.  Sentinel's own AUTH: sentinel_user/sentinel_password.
  std::vector<HostPort> sentinels{};
  std::string sentinel_master{};
  std::string sentinel_user{}, sentinel_password{};
  // Writes a failover must not lose (submissions, stage completions) WAIT for this many replicas
  // (0 = off: a single Redis), at most wait_timeout_ms.
  int wait_replicas = 0;
  int wait_timeout_ms = 1000;
};

// Whether an address's host names a Unix socket (an absolute path).
bool is_unix_socket(std::string_view host);

// True for the errors after which the connection was dropped and the next command reconnects
// (and, behind Sentinel, finds the primary again): I/O, and a READONLY/-MASTERDOWN reply.
bool connection_lost(const Error& e);

class Redis final {
 public:
  // Connects and authenticates; errors name the address (never the password).
  static Result<std::unique_ptr<Redis>> connect(const RedisAddress& addr);
  ~Redis();
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  // Runs one command given as argv (binary-safe).  A Redis error reply becomes an Error with
  // code "redis.error"; a broken connection "redis.io" (the object then reconnects on next call).
  Result<Reply> command(const std::vector<std::string>& argv);
  // Pipelined: sends all, reads all replies in order.
  Result<std::vector<Reply>> pipeline(const std::vector<std::vector<std::string>>& cmds);
  // Sends one command now without waiting for its reply, which is read (and dropped, error
  // replies included) with the next command's: bookkeeping that must reach Redis before a long
  // step starts but that nobody waits for costs no round trip.  Errors: only I/O ("redis.io").
  Status send(const std::vector<std::string>& argv);
  // EVALSHA with the script's SHA-1 (computed here); after NOSCRIPT (its first use since Redis
  // started) SCRIPT LOAD + EVALSHA in one round trip.  Never EVAL: a user granted +evalsha but
  // not +script|load (the operator) runs only scripts a service has loaded.
  Result<Reply> eval(const std::string& script, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args);
  // WAIT addr.wait_replicas addr.wait_timeout_ms after a write a failover must not lose: the
  // number of replicas that acknowledged it (wait_replicas when off, without a round trip).
  // Fewer than asked is not an error (the caller says so): the write stands on the primary.
  Result<int> wait_replicated();
  const RedisAddress& address() const { return addr_; }
  // Where this connection is (behind Sentinel: the primary it found), "HOST:PORT".
  std::string where() const;

 private:
  explicit Redis(RedisAddress addr) : addr_(std::move(addr)) {}
  Status reconnect();
  // Behind Sentinel: asks each Sentinel in turn where the primary is and sets addr_.host/port.
  Status find_primary();
  void drop();
  void append(const std::vector<std::string>& argv);
  // Reads and drops the replies of send() commands; call after appending the next command(s).
  Status drop_unread();
  // Drops the replies of send() commands that have already arrived, without waiting.
  void drop_arrived();
  static constexpr int kMaxUnread = 256;
  Result<Reply> read_reply();
  RedisAddress addr_;
  redisContext* ctx_ = nullptr;
  int unread_ = 0;  // replies of send() commands not read yet
};

// Helpers for reading replies.
std::string reply_str(const redisReply* r);
long long reply_int(const redisReply* r);

}  // namespace h3pipe::queue
