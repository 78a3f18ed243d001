#pragma once
// An in-memory dispatch board behind state::PoolBoardStore (common/state/pool_board_store.h): the
// heartbeat hash, each stream's (length, claimed) and next undelivered task, shared by every store
// opened on it (a board's own and its heartbeat thread's), so a test drives a worker::PoolBoard
// or worker::decode_load with no Redis.  Thread-safe; every port call is counted.
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/core/error_codes.h"
#include "common/state/pool_board_store.h"

namespace h3pipe::test_support {

class FakeBoard final {
 public:
  struct Calls {
    int backlogs = 0, heartbeats = 0, publish = 0, publish_now = 0, flush = 0, next_task = 0,
        wait_for_entry = 0, opened = 0;
  };

  // Each call opens a store on this board (PoolBoard::create's opener); the board outlives them.
  state::OpenPoolBoardStore opener() {
    return [this]() -> Result<std::unique_ptr<state::PoolBoardStore>> {
      std::lock_guard lk(mu_);
      if (failing_) return io_error();
      ++calls_.opened;
      return std::unique_ptr<state::PoolBoardStore>(new Store(*this));
    };
  }
  // A reader for decode_load: the same board.
  std::unique_ptr<state::PoolBoardStore> reader() { return std::make_unique<Store>(*this); }

  void set_heartbeat(const std::string& pool, std::string bytes) {
    std::lock_guard lk(mu_);
    hash_[pool] = std::move(bytes);
  }
  void erase_heartbeat(const std::string& pool) {
    std::lock_guard lk(mu_);
    hash_.erase(pool);
  }
  std::optional<std::string> heartbeat(const std::string& pool) const {
    std::lock_guard lk(mu_);
    auto it = hash_.find(pool);
    if (it == hash_.end()) return std::nullopt;
    return it->second;
  }
  // A stream's backlog as XLEN and XPENDING would count it.
  void set_backlog(const std::string& stream, long long length, long long claimed) {
    std::lock_guard lk(mu_);
    backlog_[stream] = {length, claimed};
  }
  // The task the stream's group hands out next (nullopt: none).
  void set_next_task(const std::string& stream, std::optional<std::string> task) {
    std::lock_guard lk(mu_);
    next_[stream] = std::move(task);
  }
  // An entry added to the stream: its length grows, a wait_for_entry on it returns.
  void add_entry(const std::string& stream) {
    {
      std::lock_guard lk(mu_);
      ++backlog_[stream].length;
      ++added_[stream];
    }
    cv_.notify_all();
  }
  // While set, every call (and opening a store) fails as a lost connection would (redis.io).
  void fail(bool on) {
    std::lock_guard lk(mu_);
    failing_ = on;
  }
  Calls calls() const {
    std::lock_guard lk(mu_);
    return calls_;
  }

 private:
  static Error io_error() {
    return make_error(errc::redis::kIo, "redis I/O error: fake board down");
  }

  class Store final : public state::PoolBoardStore {
   public:
    explicit Store(FakeBoard& b) : b_(b) {}
    Result<std::vector<queue::StreamBacklog>> backlogs(
        const std::vector<std::pair<std::string, std::string>>& streams) override {
      std::lock_guard lk(b_.mu_);
      ++b_.calls_.backlogs;
      if (b_.failing_) return io_error();
      std::vector<queue::StreamBacklog> out;
      for (const auto& s : streams) {
        auto it = b_.backlog_.find(s.first);
        out.push_back(it == b_.backlog_.end() ? queue::StreamBacklog{} : it->second);
      }
      return out;
    }
    Result<std::vector<std::pair<std::string, std::string>>> heartbeats() override {
      std::lock_guard lk(b_.mu_);
      ++b_.calls_.heartbeats;
      if (b_.failing_) return io_error();
      return std::vector<std::pair<std::string, std::string>>(b_.hash_.begin(), b_.hash_.end());
    }
    Status publish(const std::string& pool, const std::string& heartbeat) override {
      std::lock_guard lk(b_.mu_);
      ++b_.calls_.publish;
      if (b_.failing_) return io_error();
      b_.hash_[pool] = heartbeat;
      return {};
    }
    Status publish_now(const std::string& pool, const std::string& heartbeat) override {
      std::lock_guard lk(b_.mu_);
      ++b_.calls_.publish_now;
      if (b_.failing_) return io_error();
      b_.hash_[pool] = heartbeat;
      return {};
    }
    void flush() override {
      std::lock_guard lk(b_.mu_);
      ++b_.calls_.flush;
    }
    Result<std::optional<std::string>> next_task(const std::string& stream, const std::string&,
                                                 const std::string&) override {
      std::lock_guard lk(b_.mu_);
      ++b_.calls_.next_task;
      if (b_.failing_) return io_error();
      auto it = b_.next_.find(stream);
      return it == b_.next_.end() ? std::optional<std::string>() : it->second;
    }
    Status wait_for_entry(const std::string& stream, std::chrono::milliseconds max) override {
      std::unique_lock lk(b_.mu_);
      ++b_.calls_.wait_for_entry;
      if (b_.failing_) return io_error();
      const long long seen = b_.added_[stream];
      b_.cv_.wait_for(lk, std::max(max, std::chrono::milliseconds(1)),
                      [&] { return b_.added_[stream] != seen; });
      return {};
    }

   private:
    FakeBoard& b_;
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> hash_;
  std::map<std::string, queue::StreamBacklog> backlog_;
  std::map<std::string, std::optional<std::string>> next_;
  std::map<std::string, long long> added_;
  bool failing_ = false;
  Calls calls_;
};

}  // namespace h3pipe::test_support
