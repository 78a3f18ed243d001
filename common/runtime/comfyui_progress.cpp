#include "common/runtime/comfyui_progress.h"

#include <time.h>

#include <algorithm>
#include <thread>

#include "common/core/json_parse.h"
#include "common/runtime/http_client.h"
#include "common/runtime/preview.h"

namespace h3pipe::runtime::comfyui {
namespace {

using Clock = std::chrono::steady_clock;

struct Step {
  std::string prompt_id;
  long long value = 0, max = 0;
};

// A `progress` message of any prompt.
std::optional<Step> step_of(std::string_view message) {
  // Cheap refusal first: most messages are not progress (status, executing, executed...).
  if (message.find("\"progress\"") == std::string_view::npos) return std::nullopt;
  json_reader::JsonLimits limits;
  limits.max_bytes = ws::kMaxMessageBytes;
  std::string why;
  auto j = json_reader::parse_limited(message, limits, &why);
  if (!j || !j->is_object() || j->value("type", "") != "progress") return std::nullopt;
  auto d = j->find("data");
  if (d == j->end() || !d->is_object()) return std::nullopt;
  auto pid = d->find("prompt_id");
  if (pid == d->end() || !pid->is_string()) return std::nullopt;
  auto v = d->find("value"), m = d->find("max");
  if (v == d->end() || m == d->end() || !v->is_number() || !m->is_number()) return std::nullopt;
  Step s{pid->get<std::string>(), static_cast<long long>(v->get<double>()),
         static_cast<long long>(m->get<double>())};
  if (s.max < 1 || s.value < 0 || s.value > s.max) return std::nullopt;
  return s;
}

// This thread's CPU time: what a preview costs the host, whatever else runs on it.
double thread_cpu_s() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::uint32_t be32(std::string_view b, std::size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + at);
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         p[3];
}

}  // namespace

std::optional<std::pair<long long, long long>> progress_of(std::string_view message,
                                                           std::string_view prompt_id) {
  auto s = step_of(message);
  if (!s || s->prompt_id != prompt_id) return std::nullopt;
  return std::make_pair(s->value, s->max);
}

std::optional<PreviewFrame> preview_frame_of(std::string_view m) {
  if (m.size() < 8) return std::nullopt;
  const std::uint32_t type = be32(m, 0);
  if (type == 1) {  // PREVIEW_IMAGE
    const std::uint32_t format = be32(m, 4);
    if ((format != 1 && format != 2) || m.size() == 8) return std::nullopt;
    return PreviewFrame{std::nullopt, m.substr(8)};
  }
  if (type != 4) return std::nullopt;  // PREVIEW_IMAGE_WITH_METADATA
  const std::uint32_t n = be32(m, 4);
  if (n > 64 * 1024 || n >= m.size() - 8) return std::nullopt;
  json_reader::JsonLimits limits;
  limits.max_bytes = 64 * 1024;
  std::string why;
  auto meta = json_reader::parse_limited(m.substr(8, n), limits, &why);
  if (!meta || !meta->is_object()) return std::nullopt;
  auto pid = meta->find("prompt_id");
  const std::string image_type = meta->value("image_type", "");
  if (pid == meta->end() || !pid->is_string() ||
      (image_type != "image/jpeg" && image_type != "image/png"))
    return std::nullopt;
  return PreviewFrame{pid->get<std::string>(), m.substr(8 + n)};
}

nlohmann::json to_json(const PreviewStats& s) {
  return {{"frames", s.frames},       {"sent", s.sent},     {"bytes_in", s.bytes_in},
          {"bytes_out", s.bytes_out}, {"cost_s", s.cost_s}, {"cpu_s", s.cpu_s}};
}

void ProgressFollower::open(const std::string& base_url, const std::string& client_id,
                            int connect_timeout_ms, bool previews) {
  if (!ws_) {
    const auto now = Clock::now();
    if (retry_at_ && now < *retry_at_) return;
    auto c = ws::Client::connect(base_url, "/ws?clientId=" + http::Client::escape(client_id),
                                 connect_timeout_ms);
    // The first message of a connection (server.py reads only that one): frames then carry
    // their prompt_id.  A server before 0.3.4x ignores it and sends type 1 frames.
    Status flags;
    if (c.ok())
      flags = (*c)->send_text(
          R"({"type": "feature_flags", "data": {"supports_preview_metadata": true}})");
    if (!c.ok() || !flags.ok()) {
      status_ = "none: " + (c.ok() ? flags.error().message : c.error().message);
      retry_at_ = now + std::chrono::seconds(30);
      return;
    }
    ws_ = std::move(*c);
    retry_at_.reset();
    status_ = "websocket";
  }
  ws_->set_max_binary(previews ? kMaxPreviewFrameBytes : 0);
}

void ProgressFollower::offer_preview(const Preview& preview) {
  const auto now = Clock::now();
  if (!pending_ || !preview || steps_ < 1 || step_ == sent_step_ ||
      now - sent_at_ < kPreviewInterval)
    return;
  const std::string frame = std::exchange(pending_, std::nullopt).value();
  const double cpu0 = thread_cpu_s();
  auto small = image_preview_jpeg_base64(frame);
  sent_at_ = Clock::now();  // the interval runs from here; a frame that does not decode too
  stats_.cost_s += std::chrono::duration<double>(sent_at_ - now).count();
  stats_.cpu_s += thread_cpu_s() - cpu0;
  if (!small.ok()) return;
  sent_step_ = step_;
  ++stats_.sent;
  stats_.bytes_in += static_cast<long long>(frame.size());
  stats_.bytes_out += static_cast<long long>(small->size());
  preview(step_, steps_, *small);
}

void ProgressFollower::pump(std::chrono::steady_clock::time_point until,
                            const std::string& prompt_id,
                            const std::function<void(long long, long long)>& progress,
                            const Preview& preview) {
  const auto end = std::min(until, Clock::now() + std::chrono::milliseconds(50));
  if (prompt_id != prompt_) {  // a new prompt: nothing of the last one carries over
    prompt_ = prompt_id;
    running_ = false;
    step_ = steps_ = 0;
    sent_step_ = -1;
    pending_.reset();
    sent_at_ = {};
    stats_ = {};
  }
  if (!ws_) {
    std::this_thread::sleep_until(end);
    return;
  }
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    const bool got =
        read(static_cast<int>(std::max<long long>(left, 0)), prompt_id, progress, preview);
    if (!got && !ws_) {  // the stream broke: sleep out the wait
      if (left > 0) std::this_thread::sleep_until(end);
      return;
    }
    if (left <= 0) return;
  }
}

void ProgressFollower::drain(const std::string& prompt_id,
                             const std::function<void(long long, long long)>& progress,
                             const Preview& preview) {
  if (prompt_id != prompt_) return;
  const auto end = Clock::now() + std::chrono::milliseconds(100);
  for (int i = 0; i < 1024 && ws_; ++i) {
    const bool missing = steps_ > 0 && step_ < steps_;
    const auto left =
        missing ? std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count()
                : 0;
    if (!read(static_cast<int>(std::max<long long>(left, 0)), prompt_id, progress, preview) &&
        (!missing || Clock::now() >= end))
      return;
  }
}

bool ProgressFollower::read(int timeout_ms, const std::string& prompt_id,
                            const std::function<void(long long, long long)>& progress,
                            const Preview& preview) {
  auto got = ws_->poll(timeout_ms);
  if (!got.ok()) {
    status_ = "none: " + got.error().message;
    ws_.reset();
    return false;
  }
  for (const auto& m : *got) {
    if (!m.binary) {
      auto s = step_of(m.data);
      if (!s) continue;
      running_ = s->prompt_id == prompt_id;
      if (!running_) continue;
      step_ = s->value;
      steps_ = s->max;
      if (progress) progress(s->value, s->max);
      continue;
    }
    auto f = preview ? preview_frame_of(m.data) : std::nullopt;
    if (!f || (f->prompt_id ? *f->prompt_id != prompt_id : !running_)) continue;
    ++stats_.frames;
    pending_ = std::string(f->image);  // one frame at most waits: the newest
  }
  offer_preview(preview);
  return !got->empty();
}

}  // namespace h3pipe::runtime::comfyui
