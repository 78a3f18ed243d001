#pragma once
// RAII over hiredis (CONVENTIONS.md rule 12).  One Redis object = one connection; not shared
// between threads (a worker's lease-renewal thread opens its own).
#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::queue {

struct ReplyDeleter {
  void operator()(redisReply* r) const { if (r) freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user;      // ACL user, empty = default
  std::string password;  // empty = no AUTH
  int timeout_ms = 5000;
};

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
  const RedisAddress& address() const { return addr_; }

 private:
  explicit Redis(RedisAddress addr) : addr_(std::move(addr)) {}
  Status reconnect();
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
