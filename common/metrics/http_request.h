#pragma once
// Parsing one HTTP/1.x request from the bytes a connection has received so far (http_endpoint.cpp
// feeds it; no I/O here).  Strict and bounded: what cannot become a valid request is refused as
// soon as that is certain, with the status to answer (400, 413, 414, 431, 501, 505), so that junk
// is answered at once instead of waiting for a timeout.
#include <cstddef>
#include <string>
#include <string_view>

namespace h3pipe::metrics::http {

struct Request {
  std::string method;
  std::string path;  // the target without its query string
  bool keep_alive = false;
  std::size_t consumed = 0;  // bytes of the buffer this request used (line, headers, body)
};

enum class Parsed { kIncomplete, kBad, kDone };

struct ParseResult {
  Parsed what = Parsed::kIncomplete;
  int status = 0;   // kBad: the status to answer
  std::string why;  // kBad: one line for the reply body
  Request request;  // kDone
};

ParseResult parse_request(std::string_view buf, std::size_t max_header_bytes,
                          std::size_t max_body_bytes);

// True when buf holds nothing but the empty lines a client may send between requests.
bool only_blank_lines(std::string_view buf);

// "Bad Request" for 400, ...; "Unknown" for a status not in the table.
const char* reason_phrase(int status);

}  // namespace h3pipe::metrics::http
