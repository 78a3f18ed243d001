#pragma once
// cpp-httplib's routing and reply writing, fed one request at a time by the accept gate
// (gate.h): the gate owns the socket and hands a connection over only once its whole request
// has arrived, with the bytes read so far.
#include <httplib.h>

#include <chrono>
#include <string>

namespace h3pipe::api {

struct GatedHttp : httplib::Server {
  // httplib reads svr_sock_ (its own listening socket, unused here: the Gate listens) only to
  // tell whether it is shutting down, and then stops a content provider's reply midway.
  GatedHttp() {
    svr_sock_ = 0;
    // What a kept-alive reply announces (Keep-Alive: timeout=5, max=1000), as the gate keeps it.
    keep_alive_timeout_sec_ = 5;
    keep_alive_max_count_ = 1000;
  }
  // Serves the one request on fd whose first bytes are `head`; each write waits at most
  // write_timeout.
  void serve(int fd, const std::string& head, std::chrono::milliseconds write_timeout);
  // From inside a handler: takes the request's connection (a non-blocking socket) away, for a
  // reply that outlives the handler (Server-Sent Events, events_hub.h).  httplib's own reply is
  // then discarded and the gate leaves the socket open: the caller writes the whole reply and
  // closes it.  -1 outside a request served here.
  static int take_connection();
};

}  // namespace h3pipe::api
