#include "common/api/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/api/gate.h"
#include "common/api/submit.h"
#include "common/api/tokens.h"
#include "common/api/videos.h"
#include "common/artifacts/artifacts.h"
#include "common/core/error_codes.h"
#include "common/core/json_parse.h"
#include "common/core/sha256.h"
#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "common/queue/server.h"
#include "common/state/paths.h"
#include "common/state/state.h"

namespace h3pipe::api {
namespace {
using nlohmann::json;

constexpr const char* kVideosKey = "h3pipe:api:videos";            // zset: id by created ms
constexpr const char* kIdempotencyKey = "h3pipe:api:idempotency";  // hash: user:key -> JSON
constexpr long long kIdempotencyMs = 24LL * 3600 * 1000;
constexpr const char* kJobId = "video";
std::string video_key(const std::string& id) {
  return "h3pipe:api:video:" + id;
}

// An error in OpenAI's shape, with the status its SDKs map to their typed errors.
struct HttpError {
  int status = 400;
  std::string message, type = "invalid_request_error", param, code;
};
void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  res.set_content(json{{"error", err}}.dump(), "application/json");
}
HttpError redis_error(const Error& e) {
  // Redis not answering, or not as the primary (a fail-over): retry later.  A command Redis
  // refused (redis.error) is this server's fault, not the client's nor the network's.
  const bool unreachable = e.code == errc::redis::kConnect || e.code == errc::redis::kIo ||
                           e.code == errc::redis::kAuth || e.code == errc::redis::kNotPrimary ||
                           e.code == errc::redis::kReply || e.code == errc::redis::kSentinel;
  if (unreachable)
    return {503, "Redis is unreachable: " + e.message + " (retry later)", "server_error", "",
            "redis_unavailable"};
  return {500, e.message, "server_error", "", e.code};
}
HttpError not_found(const std::string& id) {
  return {404, fmt::format("no video with id \"{}\"", id), "invalid_request_error", "id",
          "not_found"};
}

std::string sha256_hex(const std::string& s) {
  Sha256 h;
  h.update(s.data(), s.size());
  return h.hex_digest();
}

long long mtime_s(const std::filesystem::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<long long>(st.st_mtime) : 0;
}

// One request's connection, handed over by the Gate with the bytes it has read: reads come from
// those first, then (rarely: a body over the bounds, which httplib skips) from the socket until
// a short deadline; writes wait at most write_timeout each.
class GatedStream final : public httplib::Stream {
 public:
  GatedStream(int fd, const std::string& head, std::chrono::milliseconds write_timeout)
      : fd_(fd),
        head_(head),
        write_timeout_(write_timeout),
        read_deadline_(std::chrono::steady_clock::now() + std::chrono::seconds(2)) {}
  bool is_readable() const override { return pos_ < head_.size() || wait(POLLIN, left()); }
  bool is_writable() const override { return wait(POLLOUT, write_timeout_.count()); }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < head_.size()) {
      const size_t n = std::min(size, head_.size() - pos_);
      std::memcpy(ptr, head_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!wait(POLLIN, left())) return -1;
    return ::recv(fd_, ptr, size, 0);
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t sent = 0;
    while (sent < size) {
      if (!wait(POLLOUT, write_timeout_.count())) return -1;
      const ssize_t n = ::send(fd_, ptr + sent, size - sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return -1;
      sent += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    name(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    name(::getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  void name(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char buf[INET6_ADDRSTRLEN] = "";
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return;
    if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
      port = ntohs(a->sin6_port);
    } else if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
      port = ntohs(a->sin_port);
    }
    ip = buf;
  }
  long long left() const {
    return std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      read_deadline_ - std::chrono::steady_clock::now())
                                      .count());
  }
  bool wait(short ev, long long ms) const {
    pollfd p{fd_, ev, 0};
    int r;
    while ((r = ::poll(&p, 1, static_cast<int>(ms))) < 0 && errno == EINTR) {
    }
    return r > 0 && (p.revents & (ev | POLLHUP | POLLERR));
  }
  int fd_;
  const std::string& head_;
  size_t pos_ = 0;
  std::chrono::milliseconds write_timeout_;
  std::chrono::steady_clock::time_point read_deadline_;
};

// httplib's routing and reply writing, fed one request at a time by the Gate.
struct GatedHttp : httplib::Server {
  // httplib reads svr_sock_ (its own listening socket, unused here: the Gate listens) only to
  // tell whether it is shutting down, and then stops a content provider's reply midway.
  GatedHttp() { svr_sock_ = 0; }
  void serve(int fd, const std::string& head, std::chrono::milliseconds write_timeout) {
    GatedStream strm(fd, head, write_timeout);
    bool closed = false;
    process_request(strm, /*close_connection=*/true, closed, nullptr);
  }
};

}  // namespace

struct Server::Impl {
  config::Cluster c;
  RedisFactory factory;
  ServerOptions o;
  GatedHttp http;
  std::unique_ptr<Gate> gate;
  std::mutex mu;
  std::vector<std::unique_ptr<queue::Redis>> idle;

  // A pooled connection, returned on scope exit.
  struct Lease {
    Impl* impl;
    std::unique_ptr<queue::Redis> r;
    Lease(Impl* i, std::unique_ptr<queue::Redis> c) : impl(i), r(std::move(c)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (!r) return;
      std::lock_guard lk(impl->mu);
      if (impl->idle.size() < 8) impl->idle.push_back(std::move(r));
    }
  };
  Result<Lease> lease() {
    {
      std::lock_guard lk(mu);
      if (!idle.empty()) {
        auto r = std::move(idle.back());
        idle.pop_back();
        return Lease{this, std::move(r)};
      }
    }
    auto r = factory();
    if (!r.ok()) return r.error();
    return Lease{this, std::move(*r)};
  }

  using Handler = std::function<std::optional<HttpError>(
      const httplib::Request&, httplib::Response&, queue::Redis&, const TokenInfo&)>;
  // Token check (401/403), a Redis connection (503), then the handler.
  httplib::Server::Handler guarded(Role need, Handler h) {
    return [this, need, h](const httplib::Request& req, httplib::Response& res) {
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) != 0 || auth.size() <= 7)
        return send_error(res, {401,
                                "missing bearer token: send \"Authorization: Bearer TOKEN\" with "
                                "a token from `h3pipe token create`",
                                "authentication_error", "", "missing_token"});
      auto l = lease();
      if (!l.ok()) return send_error(res, redis_error(l.error()));
      auto who = check_token(*l->r, auth.substr(7));
      if (!who.ok()) return send_error(res, redis_error(who.error()));
      if (!*who)
        return send_error(
            res, {401, "unknown or revoked token", "authentication_error", "", "invalid_token"});
      if (static_cast<int>((*who)->role) < static_cast<int>(need))
        return send_error(res, {403,
                                fmt::format("token \"{}\" has role {}; this needs role {} or "
                                            "admin",
                                            (*who)->name, role_name((*who)->role), role_name(need)),
                                "permission_error", "", "forbidden"});
      if (auto e = h(req, res, *l->r, **who)) send_error(res, *e);
    };
  }

  // The video record, or nullopt when there is none (or it was deleted).
  Result<std::optional<std::map<std::string, std::string>>> record(queue::Redis& r,
                                                                   const std::string& id) {
    using Out = std::optional<std::map<std::string, std::string>>;
    if (id.rfind("video_", 0) != 0 || !artifacts::validate_id("id", id).ok()) return Out{};
    auto rep = queue::hgetall(r, video_key(id));
    if (!rep.ok()) return rep.error();
    auto m = std::move(*rep);
    if (m.empty() || m.count("deleted")) return Out{};
    return Out{std::move(m)};
  }

  // OpenAI's Video object from the record and the job's state in Redis.
  Result<json> video_json(queue::Redis& r, const std::string& id,
                          const std::map<std::string, std::string>& rec) {
    const std::string run = rec.at("run");
    auto rep = queue::hgetall(r, keys::job(run, kJobId));
    if (!rep.ok()) return rep.error();
    auto job = std::move(*rep);
    auto flag = queue::hget(r, keys::run(run), "cancelled");
    if (!flag.ok()) return flag.error();
    const bool run_cancelled = *flag && !(*flag)->empty() && **flag != "0";
    const std::string st = job.count("state") ? job["state"] : "queued";
    std::string status = "in_progress";
    int progress = 0;
    if (st == "done")
      status = "completed", progress = 100;
    else if (st == "failed")
      status = "failed";
    else if (st == "cancelled" || run_cancelled)
      status = "cancelled";
    else if (st == "queued")
      status = "queued";
    else
      progress = st == "encode" ? 5 : st == "sample" ? 20 : st == "transfer" ? 75 : 85;
    json completed_at = nullptr;
    if (status == "completed")
      if (auto p = paths::mp4(c, run, kJobId); p.ok())
        if (long long t = mtime_s(*p)) completed_at = t;
    json error = nullptr;
    if (status == "failed")
      error = {{"code", "job_failed"}, {"message", job.count("error") ? job["error"] : "failed"}};
    return json{{"id", id},
                {"object", "video"},
                {"created_at", std::stoll(rec.at("created_ms")) / 1000},
                {"completed_at", completed_at},
                {"expires_at", nullptr},
                {"error", error},
                {"model", rec.at("model")},
                {"progress", progress},
                {"prompt", rec.at("prompt")},
                {"seconds", rec.at("seconds")},
                {"size", rec.at("size")},
                {"status", status},
                {"run_id", run},
                {"job_id", kJobId},
                {"user", rec.count("user") ? rec.at("user") : ""},
                {"stage", st}};
  }

  std::optional<HttpError> create(const httplib::Request& req, httplib::Response& res,
                                  queue::Redis& r, const TokenInfo& who) {
    std::map<std::string, std::string> fields;
    if (req.is_multipart_form_data()) {
      for (const auto& [name, part] : req.files) {
        if (!part.filename.empty())
          return HttpError{400,
                           fmt::format("{}: file uploads are not served by this API yet", name),
                           "invalid_request_error", name, "unsupported"};
        fields[name] = part.content;
      }
    } else {
      // The body is bounded by the server's payload limit (413 past it); depth by the reader.
      std::string why;
      auto parsed_body = json_reader::parse_limited(req.body, {}, &why);
      const json j = parsed_body ? std::move(*parsed_body) : json();
      if (!j.is_object())
        return HttpError{400,
                         "the body must be a JSON object or multipart/form-data with the fields "
                         "prompt, model, size, seconds",
                         "invalid_request_error", "", "invalid_body"};
      for (const auto& [k, v] : j.items()) {
        if (v.is_null()) continue;
        if (v.is_string())
          fields[k] = v.get<std::string>();
        else if (v.is_number())
          fields[k] = v.dump();
        else
          return HttpError{400, fmt::format("{}: expected a string or a number", k),
                           "invalid_request_error", k, "invalid_type"};
      }
    }
    // Validated before anything is reserved: a refused request leaves nothing behind.
    auto parsed = parse_video_request(fields, c, kJobId);
    if (auto* p = std::get_if<FieldProblem>(&parsed))
      return HttpError{400, p->message, "invalid_request_error", p->param, "invalid_value"};
    const VideoRequest& v = std::get<VideoRequest>(parsed);
    std::string id = "video_" + state::new_run_id();
    const std::string idem = req.get_header_value("Idempotency-Key");
    if (!idem.empty()) {
      if (idem.size() > 255)
        return HttpError{400, "Idempotency-Key: at most 255 characters", "invalid_request_error",
                         "Idempotency-Key", "invalid_value"};
      const std::string field = who.name + ":" + idem;
      const std::string fp = sha256_hex(json(fields).dump());
      const long long now = state::now_ms();
      const json mine = {{"sha256", fp}, {"video", id}, {"at_ms", now}};
      auto set = queue::hsetnx(r, kIdempotencyKey, field, mine.dump());
      if (!set.ok()) return redis_error(set.error());
      if (!*set) {
        auto held = queue::hget(r, kIdempotencyKey, field);
        if (!held.ok()) return redis_error(held.error());
        std::string why;
        auto held_json = json_reader::parse_limited(held->value_or(""), {}, &why);
        const json h = held_json ? std::move(*held_json) : json();
        const bool expired = !h.is_object() || now - h.value("at_ms", 0LL) > kIdempotencyMs;
        if (expired) {
          auto s = r.command({"HSET", kIdempotencyKey, field, mine.dump()});
          if (!s.ok()) return redis_error(s.error());
        } else if (h.value("sha256", "") != fp) {
          return HttpError{409,
                           fmt::format("Idempotency-Key \"{}\" was used within 24 h with another "
                                       "request body (video {}); send a new key for a new video",
                                       idem, h.value("video", "")),
                           "invalid_request_error", "Idempotency-Key", "idempotency_conflict"};
        } else {
          id = h.value("video", id);  // the same request again: the same video
          auto rec = record(r, id);
          if (!rec.ok()) return redis_error(rec.error());
          if (*rec) {
            auto out = video_json(r, id, **rec);
            if (!out.ok()) return redis_error(out.error());
            res.set_content(out->dump(), "application/json");
            return std::nullopt;
          }
          // Reserved but never recorded (the first request died mid-way): submitted again
          // below with the same run id, which the pipeline makes one job.
        }
      }
    }
    const std::string run = id.substr(6);
    auto sub = submit_batch(r, run, v.batch);
    if (!sub.ok()) return redis_error(sub.error());
    if (!sub->conflicts.empty())
      return HttpError{
          409, fmt::format("run {} already holds job \"{}\" with another spec", run, kJobId),
          "invalid_request_error", "", "conflict"};
    const std::string created = std::to_string(state::now_ms());
    auto w = r.pipeline(
        {{"MULTI"},
         {"HSETNX", video_key(id), "created_ms", created},
         {"HSET", video_key(id), "run", run, "model", v.model, "prompt",
          v.batch.specs.front().prompt(), "seconds", v.seconds, "size", v.size, "user", who.name},
         {"ZADD", kVideosKey, "NX", created, id},
         {"EXEC"}});
    if (!w.ok()) return redis_error(w.error());
    auto rec = record(r, id);
    if (!rec.ok()) return redis_error(rec.error());
    if (!*rec) return not_found(id);
    auto out = video_json(r, id, **rec);
    if (!out.ok()) return redis_error(out.error());
    res.set_content(out->dump(), "application/json");
    return std::nullopt;
  }

  std::optional<HttpError> list(const httplib::Request& req, httplib::Response& res,
                                queue::Redis& r) {
    int limit = 20;
    if (req.has_param("limit")) {
      const std::string s = req.get_param_value("limit");
      char* end = nullptr;
      const long n = std::strtol(s.c_str(), &end, 10);
      if (s.empty() || *end || n < 1 || n > 100)
        return HttpError{400, fmt::format("limit: expected an integer 1-100, got \"{}\"", s),
                         "invalid_request_error", "limit", "invalid_value"};
      limit = static_cast<int>(n);
    }
    const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
    if (order != "asc" && order != "desc")
      return HttpError{400, fmt::format("order: expected \"asc\" or \"desc\", got \"{}\"", order),
                       "invalid_request_error", "order", "invalid_value"};
    auto ids = queue::zmembers(r, kVideosKey, order != "asc");
    if (!ids.ok()) return redis_error(ids.error());
    const std::vector<std::string>& all = *ids;
    std::size_t at = 0;
    if (req.has_param("after")) {
      const std::string after = req.get_param_value("after");
      auto it = std::find(all.begin(), all.end(), after);
      if (it == all.end()) return not_found(after);
      at = static_cast<std::size_t>(it - all.begin()) + 1;
    }
    json data = json::array();
    bool more = false;
    for (; at < all.size(); ++at) {
      auto rec = record(r, all[at]);
      if (!rec.ok()) return redis_error(rec.error());
      if (!*rec) continue;
      if (static_cast<int>(data.size()) == limit) {
        more = true;
        break;
      }
      auto v = video_json(r, all[at], **rec);
      if (!v.ok()) return redis_error(v.error());
      data.push_back(*v);
    }
    json out = {{"object", "list"}, {"data", data}, {"has_more", more}};
    out["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
    out["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
    res.set_content(out.dump(), "application/json");
    return std::nullopt;
  }

  // The record of a video this token may change (submit: its own; admin: any).
  std::variant<std::map<std::string, std::string>, HttpError> owned(queue::Redis& r,
                                                                    const std::string& id,
                                                                    const TokenInfo& who) {
    auto rec = record(r, id);
    if (!rec.ok()) return redis_error(rec.error());
    if (!*rec) return not_found(id);
    if (who.role != Role::kAdmin && (*rec)->count("user") && (**rec)["user"] != who.name)
      return HttpError{403,
                       fmt::format("video {} belongs to \"{}\"; token \"{}\" may change only its "
                                   "own videos",
                                   id, (**rec)["user"], who.name),
                       "permission_error", "id", "forbidden"};
    return **rec;
  }

  std::optional<HttpError> cancel_or_delete(const std::string& id, bool remove,
                                            httplib::Response& res, queue::Redis& r,
                                            const TokenInfo& who) {
    auto o = owned(r, id, who);
    if (auto* e = std::get_if<HttpError>(&o)) return *e;
    const auto& rec = std::get<std::map<std::string, std::string>>(o);
    auto v = video_json(r, id, rec);
    if (!v.ok()) return redis_error(v.error());
    const std::string status = (*v)["status"];
    const bool finished = status == "completed" || status == "failed" || status == "cancelled";
    if (!finished) {
      if (auto s = state::Store(r).cancel(rec.at("run")); !s.ok()) return redis_error(s.error());
    }
    if (!remove) {
      auto after = video_json(r, id, rec);
      if (!after.ok()) return redis_error(after.error());
      res.set_content(after->dump(), "application/json");
      return std::nullopt;
    }
    // Outputs first, then the record: a crash between leaves a record whose content is gone
    // (404 on content), never an MP4 nobody can reach.
    std::error_code ec;
    for (auto p : {paths::mp4(c, rec.at("run"), kJobId), paths::receipt(c, rec.at("run"), kJobId)})
      if (p.ok()) std::filesystem::remove(*p, ec);
    auto d = r.command({"HSET", video_key(id), "deleted", std::to_string(state::now_ms())});
    if (!d.ok()) return redis_error(d.error());
    res.set_content(json{{"id", id}, {"object", "video.deleted"}, {"deleted", true}}.dump(),
                    "application/json");
    return std::nullopt;
  }

  std::optional<HttpError> content(const std::string& id, const httplib::Request& req,
                                   httplib::Response& res, queue::Redis& r) {
    const std::string variant = req.has_param("variant") ? req.get_param_value("variant") : "video";
    if (variant != "video")
      return HttpError{400,
                       fmt::format("variant: only \"video\" is served yet, got \"{}\"", variant),
                       "invalid_request_error", "variant", "invalid_value"};
    auto rec = record(r, id);
    if (!rec.ok()) return redis_error(rec.error());
    if (!*rec) return not_found(id);
    auto v = video_json(r, id, **rec);
    if (!v.ok()) return redis_error(v.error());
    if ((*v)["status"] != "completed")
      return HttpError{404,
                       fmt::format("video {} is {}; its content exists once it is completed", id,
                                   (*v)["status"].get<std::string>()),
                       "invalid_request_error", "id", "not_ready"};
    auto p = paths::mp4(c, (**rec)["run"], kJobId);
    std::error_code ec;
    const auto size = p.ok() ? std::filesystem::file_size(*p, ec) : 0;
    if (!p.ok() || ec)
      return HttpError{404,
                       fmt::format("video {} is completed but its MP4 is not on this host's "
                                   "output root",
                                   id),
                       "invalid_request_error", "id", "not_found"};
    auto file = std::make_shared<std::ifstream>(*p, std::ios::binary);
    res.set_header("Accept-Ranges", "bytes");
    res.set_content_provider(size, "video/mp4",
                             [file](std::size_t off, std::size_t len, httplib::DataSink& sink) {
                               std::vector<char> buf(std::min<std::size_t>(len, 64 * 1024));
                               file->seekg(static_cast<std::streamoff>(off));
                               file->read(buf.data(), static_cast<std::streamsize>(buf.size()));
                               const auto got = file->gcount();
                               if (got <= 0) return false;
                               sink.write(buf.data(), static_cast<std::size_t>(got));
                               return true;
                             });
    return std::nullopt;
  }

  void routes() {
    http.set_payload_max_length(o.max_body_bytes);
    gate = std::make_unique<Gate>(
        GateLimits{.max_body_bytes = o.max_body_bytes, .threads = o.threads});
    http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413)
        send_error(res,
                   {413, fmt::format("the request body is larger than {} bytes", o.max_body_bytes),
                    "invalid_request_error", "", "body_too_large"});
      else if (res.status == 404)
        send_error(res, {404, "no such endpoint", "invalid_request_error", "", "not_found"});
      else
        send_error(res, {res.status, "bad request", "invalid_request_error", "", ""});
    });
    const std::string vid = R"(/v1/videos/([^/]+))";
    http.Post("/v1/videos", guarded(Role::kSubmit, [this](auto& req, auto& res, auto& r, auto& w) {
                return create(req, res, r, w);
              }));
    http.Get("/v1/videos", guarded(Role::kRead, [this](auto& req, auto& res, auto& r, auto&) {
               return list(req, res, r);
             }));
    http.Get(vid, guarded(Role::kRead,
                          [this](auto& req, auto& res, auto& r, auto&) -> std::optional<HttpError> {
                            const std::string id = req.matches[1];
                            auto rec = record(r, id);
                            if (!rec.ok()) return redis_error(rec.error());
                            if (!*rec) return not_found(id);
                            auto v = video_json(r, id, **rec);
                            if (!v.ok()) return redis_error(v.error());
                            res.set_content(v->dump(), "application/json");
                            return std::nullopt;
                          }));
    http.Post(vid + "/cancel",
              guarded(Role::kSubmit, [this](auto& req, auto& res, auto& r, auto& w) {
                return cancel_or_delete(req.matches[1], false, res, r, w);
              }));
    http.Delete(vid, guarded(Role::kSubmit, [this](auto& req, auto& res, auto& r, auto& w) {
                  return cancel_or_delete(req.matches[1], true, res, r, w);
                }));
    http.Get(vid + "/content", guarded(Role::kRead, [this](auto& req, auto& res, auto& r, auto&) {
               return content(req.matches[1], req, res, r);
             }));
    http.Get(
        "/v1/models",
        guarded(Role::kRead, [this](auto&, auto& res, auto&, auto&) -> std::optional<HttpError> {
          json data = json::array();
          data.push_back(
              {{"id", "default"}, {"object", "model"}, {"created", 0}, {"owned_by", "h3pipe"}});
          for (const auto& k : c.classes)
            data.push_back(
                {{"id", k.name}, {"object", "model"}, {"created", 0}, {"owned_by", "h3pipe"}});
          res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
          return std::nullopt;
        }));
    http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    // Ready once Redis answers the operator's PING (`h3pipe start` waits for it).
    http.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      auto l = lease();
      const Status p = l.ok() ? queue::ping(*l->r) : Status(l.error());
      res.status = p.ok() ? 200 : 503;
      res.set_content(p.ok() ? "ready\n" : "not ready: " + p.error().message + "\n", "text/plain");
    });
  }
};

Server::Server(config::Cluster cluster, RedisFactory redis, ServerOptions o)
    : impl_(std::make_unique<Impl>()) {
  impl_->c = std::move(cluster);
  impl_->factory = std::move(redis);
  impl_->o = std::move(o);
  impl_->routes();
}
Server::~Server() {
  stop();
}

Result<int> Server::bind() {
  return impl_->gate->bind(impl_->o.bind, impl_->o.port);
}
void Server::listen() {
  const auto write_timeout = GateLimits{}.write_timeout;
  impl_->gate->run([this, write_timeout](int fd, const std::string& head) {
    impl_->http.serve(fd, head, write_timeout);
  });
}
void Server::stop() {
  impl_->gate->stop();
}

}  // namespace h3pipe::api
