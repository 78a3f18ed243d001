#include "common/queue/redis.h"

#include "common/core/sha256.h"

namespace h3pipe::queue {
namespace {

Result<Reply> take(redisContext* ctx, void* raw) {
  if (!raw) return make_error("redis.io", "redis I/O error: {}", ctx && ctx->errstr[0] ? ctx->errstr : "connection lost");
  Reply r(static_cast<redisReply*>(raw));
  if (r->type == REDIS_REPLY_ERROR) return make_error("redis.error", "{}", std::string(r->str, r->len));
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
    return make_error("redis.connect", "cannot connect to redis at {}:{}: {}", addr_.host, addr_.port, why);
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
      return make_error("redis.auth", "redis at {}:{} refused authentication{}: {}", addr_.host,
                        addr_.port, addr_.user.empty() ? "" : " for user " + addr_.user, r.error().message);
    }
  }
  return {};
}

Result<Reply> Redis::command(const std::vector<std::string>& argv) {
  if (!ctx_ || ctx_->err) H3_TRY(reconnect());
  std::vector<const char*> a;
  std::vector<size_t> l;
  a.reserve(argv.size());
  l.reserve(argv.size());
  for (const auto& s : argv) { a.push_back(s.data()); l.push_back(s.size()); }
  auto r = take(ctx_, redisCommandArgv(ctx_, static_cast<int>(a.size()), a.data(), l.data()));
  if (!r.ok() && r.error().code == "redis.io" && ctx_) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  return r;
}

Result<std::vector<Reply>> Redis::pipeline(const std::vector<std::vector<std::string>>& cmds) {
  if (!ctx_ || ctx_->err) H3_TRY(reconnect());
  for (const auto& argv : cmds) {
    std::vector<const char*> a;
    std::vector<size_t> l;
    for (const auto& s : argv) { a.push_back(s.data()); l.push_back(s.size()); }
    redisAppendCommandArgv(ctx_, static_cast<int>(a.size()), a.data(), l.data());
  }
  std::vector<Reply> out;
  std::optional<Error> first_error;
  for (std::size_t i = 0; i < cmds.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK) {
      redisFree(ctx_);
      ctx_ = nullptr;
      return make_error("redis.io", "redis I/O error in pipeline");
    }
    auto r = take(ctx_, raw);
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
  std::string sha;
  {
    // SCRIPT LOAD returns the SHA-1; compute-free: we ask redis once per script text.
    static thread_local std::vector<std::pair<std::string, std::string>> cache;
    for (auto& [text, s] : cache)
      if (text == script) sha = s;
    if (sha.empty()) {
      auto r = command({"SCRIPT", "LOAD", script});
      if (!r.ok()) return r.error();
      sha = reply_str(r->get());
      cache.emplace_back(script, sha);
    }
  }
  std::vector<std::string> argv = {"EVALSHA", sha, std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = command(argv);
  if (!r.ok() && r.error().message.rfind("NOSCRIPT", 0) == 0) {
    argv[0] = "EVAL";
    argv[1] = script;
    return command(argv);
  }
  return r;
}

}  // namespace h3pipe::queue
