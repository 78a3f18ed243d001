// scripts/bench.sh queue: enqueue -> claim -> ack latency (p50/p99) and tasks per second against a
// private local redis-server.  Last line: one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/queue/queue.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  test_support::RedisServer srv;
  auto rp = srv.connect();
  auto rc = srv.connect();
  if (!rp.ok() || !rc.ok()) {
    std::fprintf(stderr, "redis: cannot start\n");
    return 1;
  }
  queue::QueueOptions o{"h3pipe:stream:bench", "bench", "c", 5000, 1000, 1000000};
  queue::StageQueue producer(**rp, o), consumer(**rc, o);
  (void)producer.ensure_group();
  // Latency: one task at a time, end to end (enqueue, blocking claim, ack+delete in one script).
  std::vector<double> lat;
  lat.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    (void)producer.enqueue("x");
    auto e = consumer.claim();
    (void)consumer.complete(**e, {});
    lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(lat.begin(), lat.end());
  // Throughput: a producer thread and a consumer loop concurrently.
  auto t0 = Clock::now();
  std::thread prod([&] {
    for (int i = 0; i < n; ++i) (void)producer.enqueue("y");
  });
  int got = 0;
  while (got < n) {
    auto e = consumer.claim();
    if (e.ok() && e->has_value()) {
      (void)consumer.complete(**e, {});
      ++got;
    }
  }
  prod.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  nlohmann::json j = {{"tasks", n},
                      {"p50_ms", lat[n / 2]},
                      {"p99_ms", lat[n * 99 / 100]},
                      {"max_ms", lat.back()},
                      {"tasks_per_s", n / secs},
                      {"target_p99_ms", 1.0},
                      {"p99_ratio_to_target", lat[n * 99 / 100] / 1.0}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
