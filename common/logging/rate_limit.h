#pragma once
// A log line that a peer can trigger at will (a junk frame, a refused offer) must not become one
// line per event: a hostile or broken peer would fill the disk.  LogRateLimit admits at most
// `burst` lines per key (a peer) per `period`; the first line admitted after some were held back
// is told how many, so the log still says how much happened.  The events themselves are counted
// by the caller's probe, every one.
//
// The number of keys is bounded (max_keys): when full, keys whose period is over are forgotten;
// if none is, further keys share one overflow bucket, so many peers cannot grow the map either.
// Thread-compatible: one owner (the transfer receiver's loop thread).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace h3pipe::logging {

class LogRateLimit final {
 public:
  using Clock = std::chrono::steady_clock;

  LogRateLimit(std::size_t burst, std::chrono::milliseconds period, std::size_t max_keys = 256)
      : burst_(burst), period_(period), max_keys_(max_keys) {}

  struct Admit {
    bool log = false;              // write this line
    std::uint64_t suppressed = 0;  // lines held back for this key since the last one written
  };

  Admit admit(std::string_view key, Clock::time_point now = Clock::now());

  std::uint64_t logged_total() const { return logged_; }
  std::uint64_t suppressed_total() const { return suppressed_; }

 private:
  struct Window {
    Clock::time_point start;
    std::size_t lines = 0;
    std::uint64_t held = 0;
  };
  std::size_t burst_;
  Clock::duration period_;
  std::size_t max_keys_;
  std::unordered_map<std::string, Window> windows_;
  std::uint64_t logged_ = 0, suppressed_ = 0;
};

}  // namespace h3pipe::logging
