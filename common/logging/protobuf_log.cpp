#include "common/logging/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>

#include <mutex>
#include <string>

#include "common/logging/log.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("protobuf");
  return *l;
}

}  // namespace

namespace h3pipe::logging {
namespace {

using Clock = std::chrono::steady_clock;

struct Limiter {
  std::mutex mu;
  std::size_t burst = 5;
  std::chrono::milliseconds period{10000};
  Clock::time_point window_start;
  std::size_t in_window = 0, suppressed = 0;
};

Limiter& limiter() {
  static Limiter l;
  return l;
}

spdlog::level::level_enum level_of(google::protobuf::LogLevel l) {
  switch (l) {
    case google::protobuf::LOGLEVEL_INFO:
      return spdlog::level::info;
    case google::protobuf::LOGLEVEL_WARNING:
      return spdlog::level::warn;
    case google::protobuf::LOGLEVEL_ERROR:
      return spdlog::level::err;
    default:
      return spdlog::level::critical;  // FATAL: protobuf aborts after the handler
  }
}

void handle(google::protobuf::LogLevel level, const char* file, int line,
            const std::string& message) {
  Limiter& l = limiter();
  std::size_t dropped = 0;
  {
    std::lock_guard<std::mutex> g(l.mu);
    const auto now = Clock::now();
    if (now - l.window_start >= l.period) {
      l.window_start = now;
      l.in_window = 0;
    }
    if (level != google::protobuf::LOGLEVEL_FATAL && l.in_window >= l.burst) {
      ++l.suppressed;
      return;
    }
    ++l.in_window;
    dropped = l.suppressed;
    l.suppressed = 0;
  }
  if (dropped > 0) logger().warn("protobuf: {} more log line(s) suppressed (rate limit)", dropped);
  logger().log(level_of(level), "protobuf: {} ({}:{})", message, file, line);
}

}  // namespace

void route_protobuf_logs(std::size_t burst, std::chrono::milliseconds period) {
  {
    Limiter& l = limiter();
    std::lock_guard<std::mutex> g(l.mu);
    l.burst = burst;
    l.period = period;
  }
  google::protobuf::SetLogHandler(&handle);
}

}  // namespace h3pipe::logging
