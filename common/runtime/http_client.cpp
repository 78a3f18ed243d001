#include "common/runtime/http_client.h"

#include <curl/curl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <mutex>

namespace h3pipe::runtime::http {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Maps a libcurl failure to our error codes; the message names the method and URL.
Error curl_error(CURLcode rc, const char* errbuf, std::string_view method, const std::string& url) {
  const ErrorCode* code = &errc::http::kIo;
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
      code = &errc::http::kConnect;
      break;
    case CURLE_OPERATION_TIMEDOUT:
      code = &errc::http::kTimeout;
      break;
    case CURLE_WRITE_ERROR:
    case CURLE_FILESIZE_EXCEEDED:
      code = &errc::http::kTooLarge;
      break;
    default:
      break;
  }
  std::string detail = errbuf && *errbuf ? errbuf : curl_easy_strerror(rc);
  return make_error(*code, "{} {}: {}", method, url, detail);
}

struct BodySink {
  std::string* body;
  std::size_t cap;
  bool overflow = false;
};

std::size_t write_string(char* data, std::size_t size, std::size_t n, void* user) {
  auto* s = static_cast<BodySink*>(user);
  std::size_t len = size * n;
  if (s->body->size() + len > s->cap) {
    s->overflow = true;
    return 0;  // makes libcurl abort with CURLE_WRITE_ERROR
  }
  s->body->append(data, len);
  return len;
}

struct FileSink {
  CURL* curl;
  std::FILE* f;
  std::uint64_t cap, written = 0;
  std::string error_body;  // a non-2xx body is kept here (bounded), never written to the file
  bool overflow = false, io_error = false;
  int io_errno = 0;  // of the failed write
};

std::size_t write_file(char* data, std::size_t size, std::size_t n, void* user) {
  auto* s = static_cast<FileSink*>(user);
  std::size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) {
    if (s->error_body.size() < 4096) s->error_body.append(data, std::min<std::size_t>(len, 4096));
    return len;
  }
  if (s->written + len > s->cap) {
    s->overflow = true;
    return 0;
  }
  if (std::fwrite(data, 1, len, s->f) != len) {
    s->io_error = true;
    s->io_errno = errno;
    return 0;
  }
  s->written += len;
  return len;
}

// A form part streamed from a descriptor: libcurl pulls it through read_fd.
struct FdSource {
  int fd;
  std::uint64_t size, offset = 0;
};

std::size_t read_fd(char* buf, std::size_t size, std::size_t n, void* user) {
  auto* s = static_cast<FdSource*>(user);
  std::size_t want = std::min<std::uint64_t>(size * n, s->size - s->offset);
  if (want == 0) return 0;
  ssize_t got = ::pread(s->fd, buf, want, static_cast<off_t>(s->offset));
  if (got <= 0) return CURL_READFUNC_ABORT;  // the file shrank or cannot be read
  s->offset += static_cast<std::uint64_t>(got);
  return static_cast<std::size_t>(got);
}

int seek_fd(void* user, curl_off_t offset, int origin) {
  auto* s = static_cast<FdSource*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<std::uint64_t>(offset) > s->size)
    return CURL_SEEKFUNC_CANTSEEK;
  s->offset = static_cast<std::uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

}  // namespace

struct Client::Impl {
  CURL* curl = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {};

  // Resets the handle for a new request (keeps its connection cache) and sets common options.
  void prepare(const std::string& url, long connect_ms, long total_ms) {
    curl_easy_reset(curl);
    errbuf[0] = 0;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, total_ms);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "h3pipe");
    // The servers we drive are plain HTTP on a LAN; no redirects are expected or followed.
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  }

  Result<Response> perform(std::string_view method, const std::string& url, std::size_t cap) {
    Response r;
    BodySink sink{&r.body, cap};
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_string);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
    CURLcode rc = curl_easy_perform(curl);
    if (sink.overflow)
      return make_error(errc::http::kTooLarge, "{} {}: response body exceeds {} bytes", method, url,
                        cap);
    if (rc != CURLE_OK) return curl_error(rc, errbuf, method, url);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    char* ct = nullptr;
    if (curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct) r.content_type = ct;
    return r;
  }
};

Client::Client(Options options) : impl_(std::make_unique<Impl>()), options_(options) {
  global_init();
  impl_->curl = curl_easy_init();
}

Client::~Client() {
  if (impl_->curl) curl_easy_cleanup(impl_->curl);
}

Result<Response> Client::get(const std::string& url) {
  if (!impl_->curl) return make_error(errc::http::kIo, "GET {}: libcurl handle unavailable", url);
  impl_->prepare(url, options_.connect_timeout_ms, options_.timeout_ms);
  curl_easy_setopt(impl_->curl, CURLOPT_HTTPGET, 1L);
  return impl_->perform("GET", url, options_.max_body_bytes);
}

Result<Response> Client::post_json(const std::string& url, const std::string& json) {
  if (!impl_->curl) return make_error(errc::http::kIo, "POST {}: libcurl handle unavailable", url);
  impl_->prepare(url, options_.connect_timeout_ms, options_.timeout_ms);
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  curl_easy_setopt(impl_->curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(impl_->curl, CURLOPT_POSTFIELDS, json.data());
  curl_easy_setopt(impl_->curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(json.size()));
  auto r = impl_->perform("POST", url, options_.max_body_bytes);
  curl_slist_free_all(headers);
  return r;
}

Result<Response> Client::post_form(const std::string& url, const std::vector<FormPart>& parts) {
  if (!impl_->curl) return make_error(errc::http::kIo, "POST {}: libcurl handle unavailable", url);
  impl_->prepare(url, options_.connect_timeout_ms, options_.timeout_ms);
  curl_mime* mime = curl_mime_init(impl_->curl);
  std::list<FdSource> sources;  // stable addresses while the request runs
  for (const auto& p : parts) {
    curl_mimepart* part = curl_mime_addpart(mime);
    curl_mime_name(part, p.name.c_str());
    if (p.fd >= 0) {
      auto& src = sources.emplace_back(FdSource{p.fd, p.size});
      curl_mime_data_cb(part, static_cast<curl_off_t>(p.size), read_fd, seek_fd, nullptr, &src);
    } else if (p.file.empty()) {
      curl_mime_data(part, p.value.data(), p.value.size());
      continue;
    } else if (curl_mime_filedata(part, p.file.c_str()) != CURLE_OK) {
      curl_mime_free(mime);
      return make_error(errc::http::kIo, "POST {}: cannot read {}", url, p.file.string());
    }
    std::string fname = p.filename.empty() ? p.file.filename().string() : p.filename;
    curl_mime_filename(part, fname.c_str());
    curl_mime_type(part,
                   p.content_type.empty() ? "application/octet-stream" : p.content_type.c_str());
  }
  curl_slist* headers = curl_slist_append(nullptr, "Expect:");
  curl_easy_setopt(impl_->curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(impl_->curl, CURLOPT_MIMEPOST, mime);
  auto r = impl_->perform("POST", url, options_.max_body_bytes);
  curl_mime_free(mime);
  curl_slist_free_all(headers);
  return r;
}

Result<std::uint64_t> Client::download(const std::string& url, const std::filesystem::path& path,
                                       std::uint64_t max_bytes, long timeout_ms) {
  if (!impl_->curl) return make_error(errc::http::kIo, "GET {}: libcurl handle unavailable", url);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error(errc::io::kOpen, "open {}: {}", path.string(), std::strerror(errno));
  impl_->prepare(url, options_.connect_timeout_ms, timeout_ms);
  curl_easy_setopt(impl_->curl, CURLOPT_HTTPGET, 1L);
  FileSink sink{impl_->curl, f, max_bytes, 0, {}};
  curl_easy_setopt(impl_->curl, CURLOPT_WRITEFUNCTION, write_file);
  curl_easy_setopt(impl_->curl, CURLOPT_WRITEDATA, &sink);
  CURLcode rc = curl_easy_perform(impl_->curl);
  const int close_errno = std::fclose(f) != 0 ? errno : 0;
  if (sink.overflow)
    return make_error(errc::http::kTooLarge, "GET {}: body exceeds {} bytes", url, max_bytes);
  if (sink.io_error || close_errno != 0)
    return make_error(errc::io::kWrite, "write {}: {}", path.string(),
                      std::strerror(sink.io_error ? sink.io_errno : close_errno));
  if (rc != CURLE_OK) return curl_error(rc, impl_->errbuf, "GET", url);
  long status = 0;
  curl_easy_getinfo(impl_->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300)
    return make_error(errc::http::kStatus, "GET {}: HTTP {} {}", url, status,
                      sink.error_body.substr(0, 300));
  return sink.written;
}

std::string Client::escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace h3pipe::runtime::http
