#pragma once
// systemd's readiness protocol without libsystemd (sd_notify(3)): one datagram of
// "NAME=VALUE\n..." lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or "@name" for
// the abstract namespace).  Units of `Type=notify` (h3pipe systemd units, docs/deploy.md) start
// when the service sends READY=1; STATUS= is the line `systemctl status` shows.
//
// ReadinessNotifier is what every service runs (runner.cpp): it asks the service's own /readyz
// (what the probe of compose, Helm and `h3pipe start` asks), sends READY=1 the first time it
// answers 200, a STATUS= line each time its answer changes, and STOPPING=1 when it stops.
// Without $NOTIFY_SOCKET it does nothing and starts no thread.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/core/result.h"

namespace h3pipe::runner {

// Sends `state` to `socket` ($NOTIFY_SOCKET's value); "" = not under systemd: nothing is sent and
// the result is ok.  Errors name the socket and the call that failed (io.open, io.write).
Status sd_notify(std::string_view socket, std::string_view state);

// GET http://HOST:PORT/readyz: the status code (0 when nothing answered) and the first line of
// the body.  HOST "0.0.0.0"/"::"/"" is asked on loopback.
struct Readyz {
  int status = 0;
  std::string body;
};
Readyz probe_readyz(const std::string& host, int port, int timeout_ms = 1000);

class ReadinessNotifier final {
 public:
  // `what`: "sampler t10x4-sample on node292" (the start of every STATUS= line); `detail`: said
  // after "ready" ("metrics :9402").  Reads $NOTIFY_SOCKET once, here.
  ReadinessNotifier(std::string what, std::string detail, std::string health_host, int health_port,
                    const std::atomic<bool>* stop);
  ~ReadinessNotifier();  // sends STOPPING=1 and joins
  ReadinessNotifier(const ReadinessNotifier&) = delete;
  ReadinessNotifier& operator=(const ReadinessNotifier&) = delete;

 private:
  void loop();
  std::string socket_;
  std::string what_, detail_, host_;
  int port_ = 0;
  const std::atomic<bool>* stop_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace h3pipe::runner
