#include "common/queue/server.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "common/queue/reply.h"

namespace h3pipe::queue {
namespace {

bool is_string(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

// A decimal integer that is the whole of a string reply (TIME's fields, a Sentinel's port).
std::optional<long long> whole_int(const redisReply* r) {
  if (!is_string(r)) return std::nullopt;
  long long v = 0;
  const char* end = r->str + r->len;
  auto [p, ec] = std::from_chars(r->str, end, v);
  if (ec != std::errc() || p != end || r->len == 0) return std::nullopt;
  return v;
}

Error unexpected(const char* command, const redisReply* r, const char* wanted) {
  return make_error(errc::redis::kReply, "unexpected {} reply: {}, not {}", command, reply_kind(r),
                    wanted);
}

}  // namespace

std::string reply_kind(const redisReply* r) {
  if (!r) return "no reply";
  switch (r->type) {
    case REDIS_REPLY_STRING:
      return fmt::format("a string \"{}\"", std::string(r->str, std::min<size_t>(r->len, 40)));
    case REDIS_REPLY_STATUS:
      return fmt::format("a status \"{}\"", std::string(r->str, std::min<size_t>(r->len, 40)));
    case REDIS_REPLY_ERROR:
      return "an error";
    case REDIS_REPLY_INTEGER:
      return fmt::format("an integer {}", r->integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_ARRAY:
      return fmt::format("an array of {}", r->elements);
    default:
      return fmt::format("a reply of type {}", r->type);
  }
}

Result<double> parse_time(const redisReply* r) {
  constexpr const char* kWanted = "an array of (seconds, microseconds)";
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return unexpected("TIME", r, kWanted);
  const auto s = whole_int(r->element[0]), us = whole_int(r->element[1]);
  if (!s || !us || *us < 0 || *us >= 1000000)
    return make_error(errc::redis::kReply, "unexpected TIME reply: ({}, {}), not {}",
                      reply_kind(r->element[0]), reply_kind(r->element[1]), kWanted);
  return static_cast<double>(*s) + static_cast<double>(*us) / 1e6;
}

Result<std::optional<bool>> parse_append_only(const redisReply* r) {
  constexpr const char* kWanted = "an array of (\"appendonly\", VALUE) or an empty one";
  if (!r || r->type != REDIS_REPLY_ARRAY || (r->elements != 0 && r->elements != 2))
    return unexpected("CONFIG GET appendonly", r, kWanted);
  if (r->elements == 0) return std::optional<bool>();  // a server without the parameter
  if (!is_string(r->element[1])) return unexpected("CONFIG GET appendonly", r, kWanted);
  return std::optional<bool>(reply_str(r->element[1]) == "yes");
}

Result<std::optional<HostPort>> parse_primary(const redisReply* r) {
  constexpr const char* kWanted = "an array of (host, port) or nil";
  // nil (or, from some versions, an empty array): the Sentinel monitors no master of that name.
  if (r && (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0)))
    return std::optional<HostPort>();
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
    return unexpected("SENTINEL get-master-addr-by-name", r, kWanted);
  const auto port = whole_int(r->element[1]);
  if (!is_string(r->element[0]) || r->element[0]->len == 0 || !port || *port <= 0 || *port > 65535)
    return make_error(errc::redis::kReply,
                      "unexpected SENTINEL get-master-addr-by-name reply: ({}, {}), not {}",
                      reply_kind(r->element[0]), reply_kind(r->element[1]), kWanted);
  return std::optional<HostPort>(HostPort{reply_str(r->element[0]), static_cast<int>(*port)});
}

Status ping(Redis& r) {
  auto p = r.command({"PING"});
  if (!p.ok()) return p.error();
  return {};
}

Result<double> server_time_s(Redis& r) {
  auto t = r.command({"TIME"});
  if (!t.ok()) return t.error();
  return parse_time(t->get());
}

Result<std::optional<bool>> append_only(Redis& r) {
  auto v = r.command({"CONFIG", "GET", "appendonly"});
  if (!v.ok()) return v.error();
  return parse_append_only(v->get());
}

Result<std::string> info(Redis& r, const std::string& section) {
  auto v = r.command({"INFO", section});
  if (!v.ok()) return v.error();
  if (!is_string(v->get())) return unexpected("INFO", v->get(), "a string");
  return reply_str(v->get());
}

std::string info_field(const std::string& info_text, const std::string& key) {
  std::istringstream in(info_text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind(key + ":", 0) == 0) return line.substr(key.size() + 1);
  }
  return {};
}

Result<std::optional<HostPort>> sentinel_primary(Redis& sentinel, const std::string& master) {
  auto v = sentinel.command({"SENTINEL", "get-master-addr-by-name", master});
  if (!v.ok()) return v.error();
  return parse_primary(v->get());
}

Result<std::string> sentinel_ckquorum(Redis& sentinel, const std::string& master) {
  auto v = sentinel.command({"SENTINEL", "ckquorum", master});
  if (!v.ok()) return v.error();
  if (!is_string(v->get())) return unexpected("SENTINEL ckquorum", v->get(), "a status line");
  return reply_str(v->get());
}

Result<std::vector<std::optional<std::string>>> hget_each(
    Redis& r, const std::vector<std::pair<std::string, std::string>>& key_fields) {
  std::vector<std::optional<std::string>> out;
  if (key_fields.empty()) return out;
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(key_fields.size());
  for (const auto& [key, field] : key_fields) cmds.push_back({"HGET", key, field});
  auto replies = r.pipeline(cmds);
  if (!replies.ok()) return replies.error();
  out.reserve(replies->size());
  for (const auto& rep : *replies) {
    if (!rep || rep->type == REDIS_REPLY_NIL) {
      out.emplace_back();
    } else if (is_string(rep.get())) {
      out.emplace_back(reply_str(rep.get()));
    } else {
      return unexpected("HGET", rep.get(), "a string or nil");
    }
  }
  return out;
}

}  // namespace h3pipe::queue
