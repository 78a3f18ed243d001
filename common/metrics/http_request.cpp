#include "common/metrics/http_request.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace h3pipe::metrics::http {
namespace {

constexpr std::size_t kMaxMethod = 16;

// RFC 9110 token characters.
bool tchar(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (std::isalnum(u)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Leading CRLFs a client may send before a request (RFC 9112 2.2).
std::size_t skip_blank(std::string_view buf) {
  std::size_t i = 0;
  while (i < buf.size() && (buf[i] == '\r' || buf[i] == '\n')) ++i;
  return i;
}

ParseResult bad(int status, std::string why) {
  ParseResult r;
  r.what = Parsed::kBad;
  r.status = status;
  r.why = std::move(why);
  return r;
}

// The next line of buf from `at` (without CR LF) and where the one after starts; nullopt when
// no LF has arrived yet.
std::optional<std::pair<std::string_view, std::size_t>> line_at(std::string_view buf,
                                                                std::size_t at) {
  const auto lf = buf.find('\n', at);
  if (lf == std::string_view::npos) return std::nullopt;
  std::string_view l = buf.substr(at, lf - at);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  return std::make_pair(l, lf + 1);
}

// What can be said about a request line that has not ended yet.
std::optional<ParseResult> check_partial_line(std::string_view part, std::size_t max_header) {
  std::size_t i = 0;
  while (i < part.size() && tchar(part[i])) ++i;
  if (i > kMaxMethod) return bad(400, "not an HTTP request");
  if (i < part.size() && (i == 0 || part[i] != ' ')) return bad(400, "not an HTTP request");
  for (char c : part.substr(i))
    if (static_cast<unsigned char>(c) < 0x20 && c != '\r')
      return bad(400, "control character in the request line");
  if (part.size() > max_header) return bad(414, "request line too long");
  return std::nullopt;
}

}  // namespace

bool only_blank_lines(std::string_view buf) {
  return skip_blank(buf) == buf.size();
}

ParseResult parse_request(std::string_view buf, std::size_t max_header, std::size_t max_body) {
  const std::size_t start = skip_blank(buf);
  auto first = line_at(buf, start);
  if (!first) {
    if (auto r = check_partial_line(buf.substr(start), max_header)) return *r;
    return {};
  }
  // The request line: METHOD SP TARGET SP HTTP/x.y
  const std::string_view line = first->first;
  if (auto r = check_partial_line(line, max_header)) return *r;
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return bad(400, "malformed request line");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u == 0x7f;
      }))
    return bad(400, "malformed request target");
  const bool v10 = version == "HTTP/1.0";
  if (!v10 && version != "HTTP/1.1") {
    const bool looks = version.size() == 8 && version.substr(0, 5) == "HTTP/" &&
                       std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
                       std::isdigit(static_cast<unsigned char>(version[7]));
    return looks ? bad(505, "HTTP version not supported") : bad(400, "malformed HTTP version");
  }
  // Headers, up to the empty line.
  bool keep_alive = !v10;
  std::optional<std::size_t> content_length;
  std::size_t at = first->second;
  for (;;) {
    auto l = line_at(buf, at);
    if (!l) {
      if (buf.size() - start > max_header) return bad(431, "request header fields too large");
      return {};
    }
    if (l->second - start > max_header) return bad(431, "request header fields too large");
    at = l->second;
    const std::string_view h = l->first;
    if (h.empty()) break;
    if (h.front() == ' ' || h.front() == '\t') return bad(400, "obsolete header line folding");
    const auto colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        !std::all_of(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(colon), tchar))
      return bad(400, "malformed header line");
    const std::string_view name = h.substr(0, colon);
    const std::string_view value = trim(h.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), [](char c) {
          return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
        }))
      return bad(400, "control character in a header");
    if (iequals(name, "content-length")) {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(),
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        return bad(400, "malformed Content-Length");
      const std::size_t n = std::stoull(std::string(value));
      if (content_length && *content_length != n) return bad(400, "conflicting Content-Length");
      content_length = n;
    } else if (iequals(name, "transfer-encoding")) {
      return bad(501, "Transfer-Encoding is not supported");
    } else if (iequals(name, "connection")) {
      // A comma-separated token list.
      std::string_view rest = value;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        const std::string_view tok = trim(rest.substr(0, comma));
        if (iequals(tok, "close")) keep_alive = false;
        if (iequals(tok, "keep-alive")) keep_alive = true;
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
  }
  const std::size_t body = content_length.value_or(0);
  if (body > max_body) return bad(413, "request body too large");
  if (buf.size() - at < body) return {};
  ParseResult r;
  r.what = Parsed::kDone;
  r.request.method = std::string(method);
  r.request.path = std::string(target.substr(0, target.find('?')));
  r.request.keep_alive = keep_alive;
  r.request.consumed = at + body;
  return r;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

}  // namespace h3pipe::metrics::http
