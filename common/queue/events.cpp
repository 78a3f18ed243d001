#include "common/queue/events.h"

#include <chrono>

#include "common/queue/keys.h"

namespace h3pipe::queue::events {

bool is_terminal(std::string_view type) {
  return type == kCompleted || type == kFailed || type == kCancelled;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> fields(const Event& e) {
  std::vector<std::string> out;
  out.reserve(22 + 2 * e.extra.size());
  auto put = [&](std::string_view k, const std::string& v) {
    if (v.empty()) return;
    out.emplace_back(k);
    out.push_back(v);
  };
  put("type", e.type);
  put("job", e.job);
  put("stage", e.stage);
  put("host", e.host);
  put("pool", e.pool);
  put("attempt", e.attempt);
  put("step", e.step);
  put("steps", e.steps);
  put("reason", e.reason);
  out.emplace_back("ts_ms");
  out.push_back(std::to_string(e.ts_ms ? e.ts_ms : now_ms()));
  for (const auto& [k, v] : e.extra) {
    out.push_back(k);
    out.push_back(v);
  }
  return out;
}

namespace {
std::vector<std::string> xadd(std::string key, const Event& e, std::string_view run) {
  std::vector<std::string> argv{
      "XADD", std::move(key), "MAXLEN", "~", std::to_string(kEventsMaxLen), "*"};
  auto f = fields(e);
  argv.insert(argv.end(), std::make_move_iterator(f.begin()), std::make_move_iterator(f.end()));
  if (!run.empty()) {
    argv.emplace_back("run");
    argv.emplace_back(run);
  }
  return argv;
}
}  // namespace

std::vector<std::string> run_xadd(std::string_view run, const Event& e) {
  return xadd(keys::run_events(run), e, {});
}

std::vector<std::string> terminal_xadd(std::string_view run, const Event& e) {
  return xadd(keys::terminal_events(), e, run);
}

Event from_fields(const std::vector<std::pair<std::string, std::string>>& kv, std::string* run) {
  Event e;
  for (const auto& [k, v] : kv) {
    if (k == "type")
      e.type = v;
    else if (k == "job")
      e.job = v;
    else if (k == "stage")
      e.stage = v;
    else if (k == "host")
      e.host = v;
    else if (k == "pool")
      e.pool = v;
    else if (k == "attempt")
      e.attempt = v;
    else if (k == "step")
      e.step = v;
    else if (k == "steps")
      e.steps = v;
    else if (k == "reason")
      e.reason = v;
    else if (k == "ts_ms") {
      try {
        e.ts_ms = std::stoll(v);
      } catch (...) {
        e.ts_ms = 0;
      }
    } else if (k == "run" && run)
      *run = v;
    else
      e.extra.emplace_back(k, v);
  }
  return e;
}

}  // namespace h3pipe::queue::events
