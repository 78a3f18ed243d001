#pragma once
// Named loggers, one per component (docs/design.md, convention 9):
// logging::get("engine")->warn(...).
//
// Every component logger writes through one shared sink with one level and one pattern, and the
// pattern carries the component's name on every line:
//
//   2026-12-01T14:20:29.123 warning [encoder] [engine] run=r1 job=j1 encode attempt 1/3 failed: ...
//
// configure() sets the service's name, the level and stderr as the sink; before it is called the
// loggers write to stderr at level info.  Loggers are spdlog's (fmt-style, thread-safe); get() is
// cheap enough to call per line but a file usually keeps its logger in a function-local static.
// This header and log.cpp are the only places that call spdlog's free functions (spdlog::info and
// so on log to spdlog's default logger, outside this scheme); scripts/check_logging.py checks it.
#include <spdlog/logger.h>
#include <spdlog/sinks/sink.h>

#include <memory>
#include <string_view>

namespace h3pipe::logging {

// The logger named `component` (created on first use).  Names are short, lower case, one per
// component: "engine", "queue", "transfer", ...
std::shared_ptr<spdlog::logger> get(std::string_view component);

// Once per process, at start: `service` leads every line, `level` is spdlog's ("trace",
// "debug", "info", "warn", "error", "critical", "off"; anything else means info).
void configure(std::string_view service, std::string_view level);

// Sends every component logger's lines to `sink` instead (a test captures lines this way);
// returns the sink it replaces.  The pattern set by configure() applies to `sink` too.
spdlog::sink_ptr set_sink(spdlog::sink_ptr sink);

// The line pattern configure() uses for `service`.
std::string pattern_for(std::string_view service);

}  // namespace h3pipe::logging
