#include "common/logging/log.h"

#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <string>

namespace h3pipe::logging {
namespace {

// Every component logger holds this one sink; swapping its child redirects all of them at once
// without touching a logger another thread is writing to.
struct Shared {
  std::mutex mu;
  std::shared_ptr<spdlog::sinks::dist_sink_mt> fanout =
      std::make_shared<spdlog::sinks::dist_sink_mt>();
  spdlog::sink_ptr target = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  std::string pattern = pattern_for("h3pipe");

  Shared() {
    fanout->set_sinks({target});
    spdlog::set_pattern(pattern);
  }
};

Shared& shared() {
  static Shared s;  // NOLINT: the registry spdlog keeps is process-wide already
  return s;
}

}  // namespace

std::string pattern_for(std::string_view service) {
  std::string name;
  for (char c : service) {
    if (c == '%') name += '%';  // a literal % in the pattern
    name += c;
  }
  return "%Y-%m-%dT%H:%M:%S.%e %^%l%$ [" + name + "] [%n] %v";
}

std::shared_ptr<spdlog::logger> get(std::string_view component) {
  Shared& s = shared();
  std::lock_guard lock(s.mu);
  const std::string name(component);
  if (auto l = spdlog::get(name)) return l;
  auto l = std::make_shared<spdlog::logger>(name, s.fanout);
  spdlog::initialize_logger(l);  // registers it with the process's level and pattern
  return l;
}

void configure(std::string_view service, std::string_view level) {
  Shared& s = shared();
  std::lock_guard lock(s.mu);
  s.pattern = pattern_for(service);
  s.target = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  s.target->set_pattern(s.pattern);
  s.fanout->set_sinks({s.target});
  spdlog::set_pattern(s.pattern);  // every registered logger, and the ones made later
  const auto lvl = spdlog::level::from_str(std::string(level));  // unknown text: off
  spdlog::set_level(lvl == spdlog::level::off && level != "off" ? spdlog::level::info : lvl);
}

spdlog::sink_ptr set_sink(spdlog::sink_ptr sink) {
  Shared& s = shared();
  std::lock_guard lock(s.mu);
  spdlog::sink_ptr previous = s.target;
  s.target = std::move(sink);
  s.target->set_pattern(s.pattern);
  s.fanout->set_sinks({s.target});
  return previous;
}

}  // namespace h3pipe::logging
