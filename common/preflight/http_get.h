#pragma once
// A minimal HTTP/1.0 GET for probes (readiness endpoints, ComfyUI's /system_stats): plain http://
// only, one request per connection, bounded time and size.  Not a general client.
#include <chrono>
#include <string>

#include "common/core/result.h"

namespace h3pipe::preflight {

struct HttpResponse {
  int status = 0;
  std::string body;
};

struct Url {
  std::string host;
  int port = 80;
  std::string path = "/";
};

// "http://host[:port][/path]"; error "http.url" for anything else (https included).
Result<Url> parse_url(const std::string& url);

// Errors: "http.connect" (refused, unreachable, timeout while connecting), "http.io" (no or
// malformed reply within the timeout).  The timeout bounds the whole exchange.
Result<HttpResponse> http_get(const std::string& url, std::chrono::milliseconds timeout);

}  // namespace h3pipe::preflight
