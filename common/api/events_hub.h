#pragma once
// The Server-Sent Events hub of h3pipe-api (issue #37 item 3; docs/api.md "GET
// /v1/videos/{id}/events"). A subscriber costs a socket and a few buffers, never a thread: the
// route checks the token and the id on a pool thread, takes the connection away from the gate
// (GatedHttp::take_connection) and hands it here.  Two threads serve every subscriber:
//   - the reader: one Redis connection, XREAD BLOCK over all the run streams (keys::run_events)
//     that subscribers follow, many keys per call, one cursor per stream; a subscriber that joins
//     gets what it missed by XRANGE first (its Last-Event-ID replay, up to the stream's cursor);
//   - the writer: epoll over the subscribers' non-blocking sockets; each event is formatted once
//     and shared, written to every subscriber of its stream; a subscriber with more than
//     kMaxBuffered bytes of live events unwritten (its replay is allowed on top) is dropped (it
//     reconnects with Last-Event-ID and misses nothing); a comment every kHeartbeat keeps proxies
//     from closing an idle stream.
// Each subscriber gets only entries after its own last id, in stream order, each once.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace h3pipe::api {

class Context;

class EventsHub final {
 public:
  static constexpr std::size_t kMaxBuffered = 1 << 20;
  static constexpr std::chrono::seconds kHeartbeat{15};

  explicit EventsHub(Context& ctx);
  ~EventsHub();  // stops both threads and closes every subscriber
  EventsHub(const EventsHub&) = delete;
  EventsHub& operator=(const EventsHub&) = delete;

  // Takes fd (a non-blocking socket whose request was checked): writes the reply head, then the
  // entries of `stream` after the id `after` ("0-0": all), then live ones until the client goes.
  void add(int fd, const std::string& stream, const std::string& after);
  // Subscribers connected now.
  std::size_t clients() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3pipe::api
