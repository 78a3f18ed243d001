// /v1/videos and /v1/models: OpenAI's Videos API as the official SDKs speak it (docs/api.md).
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/api/context.h"
#include "common/api/peers.h"
#include "common/api/previews.h"
#include "common/api/routes.h"
#include "common/api/submit.h"
#include "common/api/upload.h"
#include "common/api/upload_stream.h"
#include "common/api/videos.h"
#include "common/api/webhooks.h"
#include "common/artifacts/artifacts.h"
#include "common/core/error_codes.h"
#include "common/core/json_parse.h"
#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "common/state/paths.h"
#include "common/state/state.h"

namespace h3pipe::api {
namespace {
using nlohmann::json;

struct VideoRoutes {
  Context& ctx;

  // The request's fields (multipart/form-data as the SDK sends it, or a JSON object of strings
  // and numbers) and its input_reference file, streamed to disk as it arrives (upload_stream.h)
  // and stored for video `id`; 400/413/503 naming what is wrong, leaving no file then.
  std::optional<HttpError> read_fields(const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader* reader, const std::string& id,
                                       std::map<std::string, std::string>& fields,
                                       StreamedForm& form) {
    if (reader && req.is_multipart_form_data()) {
      // An upload holds a pool thread while its body arrives: at most a quarter of them at once,
      // so slow uploads never starve the other requests.
      static std::atomic<int> streaming{0};
      struct Slot {
        bool held;
        explicit Slot(int cap) : held(streaming.fetch_add(1) < cap) {}
        ~Slot() { --streaming; }
      } slot(std::max(1, ctx.o.threads / 4));
      if (!slot.held) {
        res.set_header("Retry-After", "1");
        return HttpError{503,
                         fmt::format("{} uploads are being received already; retry in a second",
                                     std::max(1, ctx.o.threads / 4)),
                         "server_error", "input_reference", "too_many_uploads"};
      }
      if (auto bad = read_streamed_form(*reader, ctx.c, ctx.o, id, form)) return bad;
      fields = form.fields;
      return std::nullopt;
    }
    std::string body;
    if (reader) {
      if (auto bad = read_bounded_body(*reader, ctx.o.max_body_bytes, body)) return bad;
    } else {
      body = req.body;
    }
    if (body.size() > ctx.o.max_body_bytes)
      return HttpError{413,
                       fmt::format("the request body is larger than {} bytes (an upload goes as "
                                   "multipart/form-data)",
                                   ctx.o.max_body_bytes),
                       "invalid_request_error", "", "body_too_large"};
    // The body is bounded above; depth by the reader.
    std::string why;
    auto parsed_body = json_reader::parse_limited(body, {}, &why);
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
    return std::nullopt;
  }

  // Idempotency-Key (the SDK's idempotencyKey): the same key and body within 24 h is the same
  // video (`id` becomes the earlier one's; `answered` when its record was sent back), the same key
  // with another body 409.  No key: nothing to do.
  std::optional<HttpError> reserve_idempotent(const httplib::Request& req, httplib::Response& res,
                                              queue::Redis& r, const TokenInfo& who,
                                              const std::map<std::string, std::string>& fingerprint,
                                              std::string& id, bool& answered) {
    const std::string idem = req.get_header_value("Idempotency-Key");
    if (!idem.empty()) {
      if (idem.size() > 255)
        return HttpError{400, "Idempotency-Key: at most 255 characters", "invalid_request_error",
                         "Idempotency-Key", "invalid_value"};
      // One key per (token, key), kept for the window and then removed by Redis (no sweeper).
      const std::string key = idempotency_key(who.name, idem);
      const std::string fp = sha256_hex(json(fingerprint).dump());
      const long long now = state::now_ms();
      const long long window = prune_ms();
      const json mine = {{"sha256", fp}, {"video", id}, {"at_ms", now}};
      const std::string px = std::to_string(window);
      auto set =
          queue::pipeline_values(r, {{"SET", key, mine.dump(), "NX", "PX", px}, {"GET", key}});
      if (!set.ok()) return redis_error(set.error());
      if (!(*set)[0]) {  // held already: that request's entry
        std::string why;
        auto held_json = json_reader::parse_limited((*set)[1].value_or(""), {}, &why);
        const json h = held_json ? std::move(*held_json) : json();
        const bool expired = !h.is_object() || now - h.value("at_ms", 0LL) > window;
        if (expired) {
          auto s = r.command({"SET", key, mine.dump(), "PX", px});
          if (!s.ok()) return redis_error(s.error());
        } else if (h.value("sha256", "") != fp) {
          return HttpError{409,
                           fmt::format("Idempotency-Key \"{}\" was used within 24 h with another "
                                       "request body (video {}); send a new key for a new video",
                                       idem, h.value("video", "")),
                           "invalid_request_error", "Idempotency-Key", "idempotency_conflict"};
        } else {
          id = h.value("video", id);  // the same request again: the same video
          auto rec = ctx.record(r, id);
          if (!rec.ok()) return redis_error(rec.error());
          if (*rec) {
            auto out = ctx.video_json(r, id, **rec);
            if (!out.ok()) return redis_error(out.error());
            res.set_content(out->dump(), "application/json");
            answered = true;
            return std::nullopt;
          }
          // Reserved but never recorded (the first request died mid-way): submitted again
          // below with the same run id, which the pipeline makes one job.
        }
      }
    }
    return std::nullopt;
  }

  std::optional<HttpError> create(const httplib::Request& req, httplib::Response& res,
                                  queue::Redis& r, const TokenInfo& who,
                                  const httplib::ContentReader* reader) {
    std::string id = "video_" + state::new_run_id();
    std::map<std::string, std::string> fields;
    // input_reference (upload.h) is checked by its bytes and stored where `h3pipe run` reads a
    // referenceImage while it arrives, before the spec is validated, which opens it; removed
    // again when refused.
    StreamedForm form;
    if (auto bad = read_fields(req, res, reader, id, fields, form)) return bad;
    std::optional<StoredUpload> upload = form.upload;
    std::map<std::string, std::string> fingerprint = fields;
    if (upload) fingerprint["input_reference"] = "sha256:" + form.sha256;
    struct Cleanup {
      std::optional<StoredUpload>* u;
      bool keep = false;
      ~Cleanup() {
        if (*u && !keep) remove_reference(**u);
      }
    } cleanup{&upload};
    // webhook_url (webhooks.h): only a host on the operator's allowlist, never any other.
    std::string webhook_url;
    if (auto w = fields.find("webhook_url"); w != fields.end()) {
      webhook_url = w->second;
      fields.erase(w);
      auto refused = webhooks::check_request_url(r, webhook_url);
      if (!refused.ok()) return redis_error(refused.error());
      if (*refused)
        return HttpError{400, **refused, "invalid_request_error", "webhook_url", "invalid_value"};
    }
    // Validated before anything is reserved: a refused request leaves nothing behind.
    auto parsed =
        parse_video_request(fields, ctx.c, kJobId, upload ? upload->relative.generic_string() : "");
    if (auto* p = std::get_if<FieldProblem>(&parsed))
      return HttpError{400, p->message, "invalid_request_error", p->param, "invalid_value"};
    VideoRequest& v = std::get<VideoRequest>(parsed);
    // The job records its user (the token's name; #37): its receipt's spec.user, its fair share
    // and its quota, as `h3pipe run --user` does.
    if (config::valid_user_name(who.name)) v.batch.specs.front().set_user(who.name);
    bool answered = false;
    if (auto bad = reserve_idempotent(req, res, r, who, fingerprint, id, answered)) return bad;
    if (answered) return std::nullopt;
    const std::string run = id.substr(6);
    // A retry of a reserved id keeps its own upload: the spec names this request's file.
    cleanup.keep = true;
    // The record is written in the submission's own transaction (submit.h).
    const std::string created = std::to_string(state::now_ms());
    auto sub = submit_batch(r, run, v.batch,
                            {{"HSETNX", video_key(id), "created_ms", created},
                             {"HSET", video_key(id), "run", run, "model", v.model, "prompt",
                              v.batch.specs.front().prompt(), "seconds", v.seconds, "size", v.size,
                              "user", who.name, "webhook_url", webhook_url},
                             {"ZADD", kVideosKey, "NX", created, id}},
                            Context::video_commands(id));  // read in the EXEC's round trip
    if (!sub.ok()) return redis_error(sub.error());
    if (!sub->conflicts.empty())
      return HttpError{
          409, fmt::format("run {} already holds job \"{}\" with another spec", run, kJobId),
          "invalid_request_error", "", "conflict"};
    auto out = ctx.video(r, id, sub->then, /*rank=*/false);
    if (!out.ok()) return redis_error(out.error());
    if (!*out) return not_found(id);
    res.set_content((*out)->dump(), "application/json");
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
      auto rec = ctx.record(r, all[at]);
      if (!rec.ok()) return redis_error(rec.error());
      if (!*rec) continue;
      if (static_cast<int>(data.size()) == limit) {
        more = true;
        break;
      }
      auto v = ctx.video_json(r, all[at], **rec);
      if (!v.ok()) return redis_error(v.error());
      data.push_back(*v);
    }
    json out = {{"object", "list"}, {"data", data}, {"has_more", more}};
    out["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
    out["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
    res.set_content(out.dump(), "application/json");
    return std::nullopt;
  }

  std::optional<HttpError> cancel_or_delete(const std::string& id, bool remove,
                                            httplib::Response& res, queue::Redis& r,
                                            const TokenInfo& who) {
    auto o = ctx.owned(r, id, who);
    if (auto* e = std::get_if<HttpError>(&o)) return *e;
    const auto& rec = std::get<Record>(o);
    auto v = ctx.video_json(r, id, rec);
    if (!v.ok()) return redis_error(v.error());
    const std::string status = (*v)["status"];
    const bool finished = status == "completed" || status == "failed" || status == "cancelled";
    if (!finished) {
      if (auto s = state::Store(r).cancel(rec.at("run")); !s.ok()) return redis_error(s.error());
    }
    if (!remove) {
      auto after = ctx.video_json(r, id, rec);
      if (!after.ok()) return redis_error(after.error());
      res.set_content(after->dump(), "application/json");
      return std::nullopt;
    }
    // Outputs first, then the record: a crash between leaves a record whose content is gone
    // (404 on content), never an MP4 nobody can reach.
    std::error_code ec;
    for (auto p :
         {paths::mp4(ctx.c, rec.at("run"), kJobId), paths::receipt(ctx.c, rec.at("run"), kJobId)})
      if (p.ok()) std::filesystem::remove(*p, ec);
    // Its thumbnail and sprite sheet (previews.h), with their sidecars.
    if (auto p = paths::mp4(ctx.c, rec.at("run"), kJobId); p.ok())
      for (const char* variant : {"thumbnail", "spritesheet"}) {
        std::filesystem::remove(preview_path(*p, variant), ec);
        std::filesystem::remove(artifacts::sidecar_path(preview_path(*p, variant)), ec);
      }
    // The record stays, marked deleted (404 from here on), for the idempotency window, then Redis
    // removes it (no sweeper; #37); the list forgets it now.
    auto d = r.pipeline({{"HSET", video_key(id), "deleted", std::to_string(state::now_ms())},
                         {"PEXPIRE", video_key(id), std::to_string(prune_ms())},
                         {"ZREM", kVideosKey, id}});
    if (!d.ok()) return redis_error(d.error());
    res.set_content(json{{"id", id}, {"object", "video.deleted"}, {"deleted", true}}.dump(),
                    "application/json");
    return std::nullopt;
  }

  std::optional<HttpError> content(const std::string& id, const httplib::Request& req,
                                   httplib::Response& res, queue::Redis& r) {
    const std::string variant = req.has_param("variant") ? req.get_param_value("variant") : "video";
    if (variant != "video" && variant != "thumbnail" && variant != "spritesheet")
      return HttpError{400,
                       fmt::format("variant: expected \"video\", \"thumbnail\" or "
                                   "\"spritesheet\", got \"{}\"",
                                   variant),
                       "invalid_request_error", "variant", "invalid_value"};
    auto rec = ctx.record(r, id);
    if (!rec.ok()) return redis_error(rec.error());
    if (!*rec) return not_found(id);
    auto v = ctx.video_json(r, id, **rec);
    if (!v.ok()) return redis_error(v.error());
    if ((*v)["status"] != "completed")
      return HttpError{404,
                       fmt::format("video {} is {}; its content exists once it is completed", id,
                                   (*v)["status"].get<std::string>()),
                       "invalid_request_error", "id", "not_ready"};
    auto p = paths::mp4(ctx.c, (**rec)["run"], kJobId);
    std::error_code ec;
    const auto size = p.ok() ? std::filesystem::file_size(*p, ec) : 0;
    if (!p.ok() || ec)  // decoded on another host: read through its API (peers.h)
      return serve_from_peer(ctx, r, id, (**rec)["run"], kJobId, req, res);
    if (variant != "video") {  // a JPEG made from the MP4 and cached beside it (previews.h)
      auto jpg = preview(ctx.c, *p, variant);
      if (!jpg.ok())
        return HttpError{500, fmt::format("{} of video {}: {}", variant, id, jpg.error().message),
                         "server_error", "variant", jpg.error().code};
      std::ifstream in(*jpg, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      res.set_content(std::move(bytes), "image/jpeg");
      return std::nullopt;
    }
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
};

}  // namespace

void register_video_routes(httplib::Server& http, Context& ctx) {
  const std::string vid = R"(/v1/videos/([^/]+))";
  // The body is read by the handler, after the token check: an upload streams to disk.
  http.Post("/v1/videos", [&ctx](const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& reader) {
    ctx.guarded(Role::kSubmit, [&ctx, &reader](auto& rq, auto& rs, auto& r, auto& w) {
      return VideoRoutes{ctx}.create(rq, rs, r, w, &reader);
    })(req, res);
  });
  http.Post("/v1/videos",
            ctx.guarded(Role::kSubmit, [&ctx](auto& req, auto& res, auto& r, auto& w) {
              return VideoRoutes{ctx}.create(req, res, r, w, nullptr);
            }));
  http.Get("/v1/videos", ctx.guarded(Role::kRead, [&ctx](auto& req, auto& res, auto& r, auto&) {
    return VideoRoutes{ctx}.list(req, res, r);
  }));
  // The video's reads go in the token check's round trip (Context::guarded): one for the GET.
  http.Get(vid, ctx.guarded(
                    Role::kRead, [](auto& req) { return Context::video_commands(req.matches[1]); },
                    [&ctx](auto& req, auto& res, auto& r, auto&,
                           auto& read) -> std::optional<HttpError> {
                      const std::string id = req.matches[1];
                      auto out = read.empty() ? ctx.video(r, id) : ctx.video(r, id, read);
                      if (!out.ok()) return redis_error(out.error());
                      if (!*out) return not_found(id);
                      res.set_content((*out)->dump(), "application/json");
                      return std::nullopt;
                    }));
  http.Post(vid + "/cancel",
            ctx.guarded(Role::kSubmit, [&ctx](auto& req, auto& res, auto& r, auto& w) {
              return VideoRoutes{ctx}.cancel_or_delete(req.matches[1], false, res, r, w);
            }));
  http.Delete(vid, ctx.guarded(Role::kSubmit, [&ctx](auto& req, auto& res, auto& r, auto& w) {
    return VideoRoutes{ctx}.cancel_or_delete(req.matches[1], true, res, r, w);
  }));
  http.Get(vid + "/content", ctx.guarded(Role::kRead, [&ctx](auto& req, auto& res, auto& r, auto&) {
    return VideoRoutes{ctx}.content(req.matches[1], req, res, r);
  }));
  http.Get(
      "/v1/models",
      ctx.guarded(Role::kRead, [&ctx](auto&, auto& res, auto&, auto&) -> std::optional<HttpError> {
        json data = json::array();
        data.push_back(
            {{"id", "default"}, {"object", "model"}, {"created", 0}, {"owned_by", "h3pipe"}});
        for (const auto& k : ctx.c.classes)
          data.push_back(
              {{"id", k.name}, {"object", "model"}, {"created", 0}, {"owned_by", "h3pipe"}});
        res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
        return std::nullopt;
      }));
}

}  // namespace h3pipe::api
