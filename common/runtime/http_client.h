#pragma once
// A minimal blocking HTTP/1.1 client over libcurl, for runtimes that drive a server (comfyui).
//
// Threading: one Client per thread (it owns one curl easy handle, reused between requests so
// that keep-alive connections are kept).  Errors are returned, never thrown:
//   http.connect  — the server could not be reached (refused, unresolvable, unroutable);
//   http.timeout  — connect or transfer exceeded its limit;
//   http.too_large — the body exceeded the caller's cap;
//   http.io       — anything else libcurl reports (the message carries curl's text).
// A response with any status code is a success at this layer; callers judge the status.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::runtime::http {

struct Options {
  long connect_timeout_ms = 3000;
  long timeout_ms = 30000;  // whole request, body included
  std::size_t max_body_bytes = 64u << 20;
};

struct Response {
  long status = 0;
  std::string body;
  std::string content_type;
};

// One multipart/form-data field: a plain value, or a file sent under `filename`: read from an
// open descriptor (`fd` >= 0, `size` bytes from offset 0, read with pread; the caller keeps it
// open until the request returns; used for files opened confined to a root) or from `file`.
struct FormPart {
  std::string name;
  std::string value;  // used when there is neither fd nor file
  std::filesystem::path file;
  std::string filename;      // defaults to file's name
  std::string content_type;  // defaults to application/octet-stream for files
  int fd = -1;
  std::uint64_t size = 0;
};

class Client final {
 public:
  explicit Client(Options options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result<Response> get(const std::string& url);
  Result<Response> post_json(const std::string& url, const std::string& json);
  Result<Response> post_form(const std::string& url, const std::vector<FormPart>& parts);

  // GETs `url` and streams a 2xx body into `path` (created or truncated).  A non-2xx status is
  // an error "http.status" carrying the status and the start of the body; the file is then left
  // holding nothing useful and the caller removes it.  Returns the bytes written.
  Result<std::uint64_t> download(const std::string& url, const std::filesystem::path& path,
                                 std::uint64_t max_bytes, long timeout_ms);

  // Percent-encodes a query component (RFC 3986 unreserved characters pass through).
  static std::string escape(std::string_view s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Options options_;
};

}  // namespace h3pipe::runtime::http
