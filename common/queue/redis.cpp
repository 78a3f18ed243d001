#include "common/queue/redis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <mutex>
#include <string_view>

#include "common/core/sha256.h"
#include "common/queue/reply.h"
#include "common/queue/server.h"

namespace h3pipe::queue {

void ReplyDeleter::operator()(redisReply* r) const {
  if (r) freeReplyObject(r);
}

namespace {

Result<Reply> take(redisContext* ctx, void* raw) {
  if (!raw)
    return make_error(errc::redis::kIo, "redis I/O error: {}",
                      ctx && ctx->errstr[0] ? ctx->errstr : "connection lost");
  Reply r(static_cast<redisReply*>(raw));
  if (r->type == REDIS_REPLY_ERROR)
    return make_error(errc::redis::kError, "{}", std::string(r->str, r->len));
  return r;
}

// READONLY (a replica, e.g. a primary demoted by a failover, or a DNS name that has not moved
// yet) and MASTERDOWN (a replica that lost its primary): this is not the primary any more.
// A write to a Unix socket whose peer has gone (Redis killed) raises SIGPIPE at once, where TCP
// first reports the reset: a process that talks to Redis on a socket must survive that as an I/O
// error (redis.io, then a reconnect), so SIGPIPE is ignored unless the process chose a handler.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
      ::signal(SIGPIPE, SIG_IGN);
  });
}

bool not_primary(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_ERROR) return false;
  const std::string_view m(r->str, r->len);
  return m.starts_with("READONLY") || m.starts_with("MASTERDOWN") ||
         m.find("READONLY You can't write") != std::string_view::npos;
}

// One command on a bare context (AUTH, SENTINEL): the reply or why not.
Result<Reply> command_on(redisContext* ctx, const std::vector<std::string>& argv) {
  std::vector<const char*> a;
  std::vector<size_t> l;
  for (const auto& s : argv) {
    a.push_back(s.data());
    l.push_back(s.size());
  }
  return take(ctx, redisCommandArgv(ctx, static_cast<int>(a.size()), a.data(), l.data()));
}

}  // namespace

bool connection_lost(const Error& e) {
  return e.code == errc::redis::kIo || e.code == errc::redis::kNotPrimary;
}

std::string reply_str(const redisReply* r) {
  if (!r) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR)
    return std::string(r->str, r->len);
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  return {};
}

long long reply_int(const redisReply* r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) return std::atoll(std::string(r->str, r->len).c_str());
  return 0;
}

Result<std::unique_ptr<Redis>> Redis::connect(const RedisAddress& addr) {
  std::unique_ptr<Redis> r(new Redis(addr));
  H3_TRY(r->reconnect());
  return r;
}

Redis::~Redis() {
  if (ctx_) redisFree(ctx_);
}

void Redis::drop() {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
  unread_ = 0;  // a reply of a send() on the old connection is gone with it
}

std::string Redis::where() const {
  if (is_unix_socket(addr_.host)) return "unix:" + addr_.host;
  return fmt::format("{}:{}", addr_.host, addr_.port);
}

bool is_unix_socket(std::string_view host) {
  return !host.empty() && host.front() == '/';
}

Status Redis::find_primary() {
  // A short connect timeout per Sentinel: one that is down must not hold a failover up.
  const int ms = std::min(addr_.timeout_ms, 1000);
  const timeval tv{ms / 1000, (ms % 1000) * 1000};
  std::vector<std::string> why;
  for (const auto& s : addr_.sentinels) {
    redisContext* c = redisConnectWithTimeout(s.host.c_str(), s.port, tv);
    if (!c || c->err) {
      why.push_back(fmt::format("{}:{}: {}", s.host, s.port, c ? c->errstr : "out of memory"));
      if (c) redisFree(c);
      continue;
    }
    redisSetTimeout(c, tv);
    Result<Reply> r = Reply(nullptr);
    if (!addr_.sentinel_password.empty()) {
      std::vector<std::string> auth = {"AUTH"};
      if (!addr_.sentinel_user.empty()) auth.push_back(addr_.sentinel_user);
      auth.push_back(addr_.sentinel_password);
      r = command_on(c, auth);
    }
    if (r.ok()) r = command_on(c, {"SENTINEL", "get-master-addr-by-name", addr_.sentinel_master});
    redisFree(c);
    if (!r.ok()) {
      why.push_back(fmt::format("{}:{}: {}", s.host, s.port, r.error().message));
      continue;
    }
    // The reply read as preflight's sentinel.master row reads it (server.h).
    auto primary = parse_primary(r->get());
    if (!primary.ok() || !*primary) {
      why.push_back(primary.ok()
                        ? fmt::format("{}:{}: does not know a primary named {}", s.host, s.port,
                                      addr_.sentinel_master)
                        : fmt::format("{}:{}: {}", s.host, s.port, primary.error().message));
      continue;
    }
    addr_.host = (*primary)->host;
    addr_.port = (*primary)->port;
    return {};
  }
  return make_error(errc::redis::kSentinel, "no Sentinel named the primary {}: {}",
                    addr_.sentinel_master, fmt::join(why, "; "));
}

Status Redis::reconnect() {
  drop();
  if (!addr_.sentinels.empty()) H3_TRY(find_primary());
  timeval tv{addr_.timeout_ms / 1000, (addr_.timeout_ms % 1000) * 1000};
  // A host that is a path is a Unix socket (the local stack's, in its 0700 state dir, issue #35
  // D1): only its owner can connect, and nobody else can listen there to collect the AUTH.
  if (is_unix_socket(addr_.host)) ignore_sigpipe();
  ctx_ = is_unix_socket(addr_.host) ? redisConnectUnixWithTimeout(addr_.host.c_str(), tv)
                                    : redisConnectWithTimeout(addr_.host.c_str(), addr_.port, tv);
  if (!ctx_ || ctx_->err) {
    std::string why = ctx_ ? ctx_->errstr : "out of memory";
    if (ctx_) redisFree(ctx_);
    ctx_ = nullptr;
    return make_error(errc::redis::kConnect, "cannot connect to redis at {}: {}", where(), why);
  }
  redisSetTimeout(ctx_, tv);
  if (!addr_.password.empty()) {
    std::vector<std::string> argv = {"AUTH"};
    if (!addr_.user.empty()) argv.push_back(addr_.user);
    argv.push_back(addr_.password);
    auto r = command_on(ctx_, argv);
    if (!r.ok() && r.error().code == errc::redis::kIo) {
      // No reply at all: not a refusal but a peer that hung up (a TLS hop whose handshake failed).
      redisFree(ctx_);
      ctx_ = nullptr;
      return make_error(errc::redis::kConnect,
                        "redis at {} closed the connection before answering AUTH (for a TLS hop: "
                        "its handshake failed, see the stunnel log): {}",
                        where(), r.error().message);
    }
    if (!r.ok()) {
      redisFree(ctx_);
      ctx_ = nullptr;
      return make_error(errc::redis::kAuth, "redis at {} refused authentication{}: {}", where(),
                        addr_.user.empty() ? "" : " for user " + addr_.user, r.error().message);
    }
  }
  return {};
}

void Redis::append(const std::vector<std::string>& argv) {
  std::vector<const char*> a;
  std::vector<size_t> l;
  a.reserve(argv.size());
  l.reserve(argv.size());
  for (const auto& s : argv) {
    a.push_back(s.data());
    l.push_back(s.size());
  }
  redisAppendCommandArgv(ctx_, static_cast<int>(a.size()), a.data(), l.data());
}

// One reply (the first call flushes what was appended); an I/O error drops the connection.
Result<Reply> Redis::read_reply() {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) {
    std::string why = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    redisFree(ctx_);
    ctx_ = nullptr;
    unread_ = 0;
    return make_error(errc::redis::kIo, "redis I/O error: {}", why);
  }
  if (not_primary(static_cast<redisReply*>(raw))) {
    // Dropped, so the next command reconnects (behind Sentinel: to the primary it names now).
    // The command was refused, not applied.
    Reply r(static_cast<redisReply*>(raw));
    drop();
    return make_error(errc::redis::kNotPrimary, "redis at {} is not the primary ({}); reconnecting",
                      where(), std::string(r->str, r->len));
  }
  return take(ctx_, raw);
}

Status Redis::drop_unread() {
  while (unread_ > 0) {
    --unread_;
    auto r = read_reply();
    if (!r.ok() && connection_lost(r.error())) return r.error();
  }
  return {};
}

void Redis::drop_arrived() {
  while (unread_ > 0) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) return;  // the next command reports it
    if (raw) {
      freeReplyObject(raw);
      --unread_;
      continue;
    }
    pollfd p{ctx_->fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)) return;
    if (redisBufferRead(ctx_) != REDIS_OK) return;
  }
}

Status Redis::send(const std::vector<std::string>& argv) {
  if (!ctx_ || ctx_->err) H3_TRY(reconnect());
  // A connection used only for send() (a pool's board state) never waits; the replies that
  // have arrived are dropped here so they do not pile up, and past a bound the rest are awaited.
  drop_arrived();
  if (unread_ >= kMaxUnread) H3_TRY(drop_unread());
  append(argv);
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) {
      std::string why = ctx_->errstr[0] ? ctx_->errstr : "write failed";
      redisFree(ctx_);
      ctx_ = nullptr;
      unread_ = 0;
      return make_error(errc::redis::kIo, "redis I/O error: {}", why);
    }
  }
  ++unread_;
  return {};
}

Result<Reply> Redis::command(const std::vector<std::string>& argv) {
  if (!ctx_ || ctx_->err) H3_TRY(reconnect());
  append(argv);
  H3_TRY(drop_unread());
  return read_reply();
}

Result<std::vector<Reply>> Redis::pipeline(const std::vector<std::vector<std::string>>& cmds) {
  if (!ctx_ || ctx_->err) H3_TRY(reconnect());
  for (const auto& argv : cmds) append(argv);
  H3_TRY(drop_unread());
  std::vector<Reply> out;
  std::optional<Error> first_error;
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    auto r = read_reply();
    if (!r.ok() && connection_lost(r.error())) return r.error();
    if (!r.ok()) {
      if (!first_error) first_error = r.error();
      out.emplace_back(nullptr);
    } else {
      out.push_back(std::move(r.value()));
    }
  }
  if (first_error) return *first_error;
  return out;
}

Result<int> Redis::wait_replicated() {
  if (addr_.wait_replicas <= 0) return 0;
  auto r =
      command({"WAIT", std::to_string(addr_.wait_replicas), std::to_string(addr_.wait_timeout_ms)});
  if (!r.ok()) return r.error();
  return static_cast<int>(reply_int(r->get()));
}

Result<Reply> Redis::eval(const std::string& script, const std::vector<std::string>& keys,
                          const std::vector<std::string>& args) {
  // EVALSHA with the script's SHA-1 computed here: a user that may not load scripts (the
  // operator: +evalsha only, docs/security.md) runs h3pipe's own scripts once a service has
  // loaded them, and never arbitrary Lua.  Cached per script text on this thread.
  static thread_local std::vector<std::pair<std::string, std::string>> cache;
  std::string sha;
  for (auto& [text, s] : cache)
    if (text == script) sha = s;
  if (sha.empty()) {
    sha = sha1_hex(script);
    cache.emplace_back(script, sha);
  }
  std::vector<std::string> argv = {"EVALSHA", sha, std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = command(argv);
  if (r.ok() || r.error().message.rfind("NOSCRIPT", 0) != 0) return r;
  // Not in Redis's script cache (its first use since Redis started): load it, then run it.
  auto loaded = pipeline({{"SCRIPT", "LOAD", script}, argv});
  if (!loaded.ok() && loaded.error().message.find("NOPERM") != std::string::npos)
    return make_error(errc::redis::kError,
                      "h3pipe's script {} is not in Redis's script cache and user {} may not load "
                      "scripts (a service loads it on its first use): {}",
                      sha.substr(0, 12), addr_.user.empty() ? "default" : addr_.user,
                      loaded.error().message);
  if (!loaded.ok()) return loaded.error();
  return std::move((*loaded)[1]);
}

}  // namespace h3pipe::queue
