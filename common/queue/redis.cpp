#include "common/queue/redis.h"

#include <poll.h>

#include "common/core/sha256.h"

namespace h3pipe::queue {
namespace {

Result<Reply> take(redisContext* ctx, void* raw) {
  if (!raw) return make_error(errc::redis::kIo, "redis I/O error: {}", ctx && ctx->errstr[0] ? ctx->errstr : "connection lost");
  Reply r(static_cast<redisReply*>(raw));
  if (r->type == REDIS_REPLY_ERROR) return make_error(errc::redis::kError, "{}", std::string(r->str, r->len));
  return r;
}

}  // namespace

std::string reply_str(const redisReply* r) {
  if (!r) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
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

Status Redis::reconnect() {
  unread_ = 0;  // a reply of a send() on the old connection is gone with it
  if (ctx_) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  timeval tv{addr_.timeout_ms / 1000, (addr_.timeout_ms % 1000) * 1000};
  ctx_ = redisConnectWithTimeout(addr_.host.c_str(), addr_.port, tv);
  if (!ctx_ || ctx_->err) {
    std::string why = ctx_ ? ctx_->errstr : "out of memory";
    if (ctx_) redisFree(ctx_);
    ctx_ = nullptr;
    return make_error(errc::redis::kConnect, "cannot connect to redis at {}:{}: {}", addr_.host, addr_.port, why);
  }
  redisSetTimeout(ctx_, tv);
  if (!addr_.password.empty()) {
    std::vector<std::string> argv = {"AUTH"};
    if (!addr_.user.empty()) argv.push_back(addr_.user);
    argv.push_back(addr_.password);
    std::vector<const char*> a;
    std::vector<size_t> l;
    for (auto& s : argv) { a.push_back(s.data()); l.push_back(s.size()); }
    auto r = take(ctx_, redisCommandArgv(ctx_, static_cast<int>(a.size()), a.data(), l.data()));
    if (!r.ok()) {
      redisFree(ctx_);
      ctx_ = nullptr;
      return make_error(errc::redis::kAuth, "redis at {}:{} refused authentication{}: {}", addr_.host,
                        addr_.port, addr_.user.empty() ? "" : " for user " + addr_.user, r.error().message);
    }
  }
  return {};
}

void Redis::append(const std::vector<std::string>& argv) {
  std::vector<const char*> a;
  std::vector<size_t> l;
  a.reserve(argv.size());
  l.reserve(argv.size());
  for (const auto& s : argv) { a.push_back(s.data()); l.push_back(s.size()); }
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
  return take(ctx_, raw);
}

Status Redis::drop_unread() {
  while (unread_ > 0) {
    --unread_;
    auto r = read_reply();
    if (!r.ok() && r.error().code == errc::redis::kIo) return r.error();
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
    if (!r.ok() && r.error().code == errc::redis::kIo) return r.error();
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
                      sha.substr(0, 12), addr_.user.empty() ? "default" : addr_.user, loaded.error().message);
  if (!loaded.ok()) return loaded.error();
  return std::move((*loaded)[1]);
}

}  // namespace h3pipe::queue
