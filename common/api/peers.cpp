#include "common/api/peers.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/core/json_parse.h"
#include "common/queue/hashes.h"
#include "common/state/receipts.h"
#include "common/state/state.h"

namespace h3pipe::api {
using nlohmann::json;

namespace {

// Bytes read from the peer per Range request: 1 MiB, or H3PIPE_API_PEER_CHUNK_BYTES (tests, to
// cross chunk boundaries with small videos; at least 1 KiB).
std::size_t chunk_bytes() {
  static const std::size_t n = [] {
    const char* v = std::getenv("H3PIPE_API_PEER_CHUNK_BYTES");
    const unsigned long long x = v ? std::strtoull(v, nullptr, 10) : 0;
    return x >= 1024 ? static_cast<std::size_t>(x) : std::size_t{1024 * 1024};
  }();
  return n;
}

HttpError peer_unavailable(const std::string& id, const std::string& host, const std::string& why) {
  return {503,
          fmt::format("video {} lies on host \"{}\", whose API {} (retry later; docs/api.md, "
                      "\"Two hosts\")",
                      id, host, why),
          "server_error", "", "peer_unavailable"};
}

// "http://10.0.0.2:8088/v1" -> {"http://10.0.0.2:8088", "/v1"}; nullopt when not http(s)://.
std::optional<std::pair<std::string, std::string>> split_url(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return std::nullopt;
  const std::string s = url.substr(0, scheme);
  if (s != "http" && s != "https") return std::nullopt;
  const auto path = url.find('/', scheme + 3);
  if (path == std::string::npos) return std::make_pair(url, std::string());
  std::string p = url.substr(path);
  while (!p.empty() && p.back() == '/') p.pop_back();
  return std::make_pair(url.substr(0, path), p);
}

}  // namespace

std::string advertised_url(const config::Cluster& c, const std::string& host,
                           const std::string& bind, int port, const std::string& advertise,
                           bool https) {
  if (!advertise.empty()) return advertise;
  std::string addr = bind;
  if (addr.empty() || addr == "0.0.0.0" || addr == "::") {
    const config::Host* h = c.find_host(host);
    addr = h ? h->address : "127.0.0.1";
  }
  if (addr.find(':') != std::string::npos) addr = "[" + addr + "]";
  return fmt::format("{}://{}:{}/v1", https ? "https" : "http", addr, port);
}

Status announce(queue::Redis& r, const std::string& host, const std::string& url) {
  const json v = {{"url", url}, {"at_ms", state::now_ms()}};
  auto s = r.command({"HSET", kApiHostsKey, host, v.dump()});
  if (!s.ok()) return s.error();
  return {};
}

Result<std::string> decode_host(queue::Redis& r, const std::string& run, const std::string& job) {
  auto h = state::Store(r).history(run, job);
  if (!h.ok()) return h.error();
  const auto rec = state::completion(*h, pb::STAGE_DECODE);
  return rec ? rec->host() : std::string();
}

std::optional<HttpError> serve_from_peer(Context& ctx, queue::Redis& r, const std::string& id,
                                         const std::string& run, const std::string& job,
                                         const httplib::Request& req, httplib::Response& res) {
  const HttpError absent{404,
                         fmt::format("video {} is completed but its MP4 is not on this host's "
                                     "output root",
                                     id),
                         "invalid_request_error", "id", "not_found"};
  if (req.has_header(kForwardedHeader)) return absent;  // a peer asked: our disk only
  auto host = decode_host(r, run, job);
  if (!host.ok()) return redis_error(host.error());
  if (host->empty() || *host == ctx.o.host) return absent;
  auto entry = queue::hget(r, kApiHostsKey, *host);
  if (!entry.ok()) return redis_error(entry.error());
  std::string why;
  auto parsed = json_reader::parse_limited(entry->value_or(""), {}, &why);
  const std::string url =
      parsed && parsed->is_object() ? parsed->value("url", std::string()) : std::string();
  const auto parts = split_url(url);
  if (!parts) return peer_unavailable(id, *host, "has not registered in Redis (is it running?)");
  auto cli = std::make_shared<httplib::Client>(parts->first);
  cli->set_connection_timeout(3);
  cli->set_read_timeout(10);
  const std::string path = fmt::format("{}/videos/{}/content", parts->second, id);
  const httplib::Headers base = {{"Authorization", req.get_header_value("Authorization")},
                                 {kForwardedHeader, ctx.o.host}};
  // The size first (a one-byte Range: 206 with Content-Range bytes 0-0/SIZE).
  httplib::Headers h = base;
  h.emplace("Range", "bytes=0-0");
  auto probe = cli->Get(path, h);
  if (!probe)
    return peer_unavailable(
        id, *host,
        fmt::format("at {} does not answer ({})", url, httplib::to_string(probe.error())));
  if (probe->status != 206) {
    // The peer's own answer (its 404, 401, ...), in OpenAI's shape as it wrote it.
    res.status = probe->status;
    res.set_content(probe->body, probe->get_header_value("Content-Type"));
    return std::nullopt;
  }
  const std::string range = probe->get_header_value("Content-Range");
  const auto slash = range.rfind('/');
  std::size_t size = 0;
  try {
    size = slash == std::string::npos ? 0 : std::stoull(range.substr(slash + 1));
  } catch (...) {
    size = 0;
  }
  if (size == 0)
    return peer_unavailable(id, *host, fmt::format("at {} answered no size (\"{}\")", url, range));
  res.set_header("Accept-Ranges", "bytes");
  res.set_content_provider(
      size, "video/mp4",
      [cli, path, base, size](std::size_t off, std::size_t len, httplib::DataSink& sink) {
        const std::size_t n = std::min({len, chunk_bytes(), size - off});
        httplib::Headers hh = base;
        hh.emplace("Range", fmt::format("bytes={}-{}", off, off + n - 1));
        auto part = cli->Get(path, hh);
        if (!part || part->status != 206 || part->body.size() != n) return false;
        sink.write(part->body.data(), part->body.size());
        return true;
      });
  return std::nullopt;
}

}  // namespace h3pipe::api
