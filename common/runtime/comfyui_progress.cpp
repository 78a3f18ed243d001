#include "common/runtime/comfyui_progress.h"

#include <algorithm>
#include <thread>

#include "common/core/json_parse.h"
#include "common/runtime/http_client.h"

namespace h3pipe::runtime::comfyui {

std::optional<std::pair<long long, long long>> progress_of(std::string_view message,
                                                           std::string_view prompt_id) {
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
  if (pid == d->end() || !pid->is_string() || pid->get<std::string>() != prompt_id)
    return std::nullopt;
  auto v = d->find("value"), m = d->find("max");
  if (v == d->end() || m == d->end() || !v->is_number() || !m->is_number()) return std::nullopt;
  const long long value = static_cast<long long>(v->get<double>());
  const long long max = static_cast<long long>(m->get<double>());
  if (max < 1 || value < 0 || value > max) return std::nullopt;
  return std::make_pair(value, max);
}

void ProgressFollower::open(const std::string& base_url, const std::string& client_id,
                            int connect_timeout_ms) {
  if (ws_) return;
  const auto now = std::chrono::steady_clock::now();
  if (retry_at_ && now < *retry_at_) return;
  auto c = ws::Client::connect(base_url, "/ws?clientId=" + http::Client::escape(client_id),
                               connect_timeout_ms);
  if (!c.ok()) {
    status_ = "none: " + c.error().message;
    retry_at_ = now + std::chrono::seconds(30);
    return;
  }
  ws_ = std::move(*c);
  retry_at_.reset();
  status_ = "websocket";
}

void ProgressFollower::pump(std::chrono::steady_clock::time_point until,
                            const std::string& prompt_id,
                            const std::function<void(long long, long long)>& progress) {
  const auto end =
      std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  if (!ws_) {
    std::this_thread::sleep_until(end);
    return;
  }
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    auto got = ws_->poll(static_cast<int>(std::max<long long>(left, 0)));
    if (!got.ok()) {
      status_ = "none: " + got.error().message;
      ws_.reset();
      if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(left));
      return;
    }
    for (const auto& m : *got)
      if (auto p = progress_of(m, prompt_id); p && progress) progress(p->first, p->second);
    if (left <= 0) return;
  }
}

}  // namespace h3pipe::runtime::comfyui
