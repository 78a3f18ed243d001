#pragma once
// A strict reader over nlohmann::json that collects every error with its JSON pointer path
// (Redpanda-style: declare each field once, report all problems together).
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/core/json_parse.h"

namespace h3pipe::json_reader {

class Errors {
 public:
  void add(const std::string& path, const std::string& what) {
    list_.push_back(fmt::format("{}: {}", path.empty() ? "/" : path, what));
  }
  bool empty() const { return list_.empty(); }
  const std::vector<std::string>& list() const { return list_; }
  std::string joined() const {
    std::string s;
    for (const auto& e : list_) s += e + "\n";
    if (!s.empty()) s.pop_back();
    return s;
  }

 private:
  std::vector<std::string> list_;
};

// An object being read: each get() marks a key as known; finish() reports unknown keys.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& j, std::string path, Errors& errors)
      : j_(j), path_(std::move(path)), errors_(errors) {
    if (!j_.is_object()) {
      errors_.add(path_, fmt::format("expected an object, got {}", j_.type_name()));
      ok_ = false;
    }
  }
  ~ObjectReader() { finish(); }
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  bool ok() const { return ok_; }
  std::string path(const std::string& key) const { return path_ + "/" + key; }
  bool has(const std::string& key) const { return ok_ && j_.contains(key); }
  const nlohmann::json* raw(const std::string& key) {
    known_.insert(key);
    if (!ok_ || !j_.contains(key)) return nullptr;
    return &j_.at(key);
  }

  void get(const std::string& key, std::string& out, bool required = false) {
    if (auto* v = lookup(key, required)) {
      if (v->is_string())
        out = v->get<std::string>();
      else
        type_error(key, "a string", *v);
    }
  }
  void get(const std::string& key, bool& out) {
    if (auto* v = lookup(key, false)) {
      if (v->is_boolean())
        out = v->get<bool>();
      else
        type_error(key, "true or false", *v);
    }
  }
  void get(const std::string& key, double& out, double min = -1e300, double max = 1e300,
           bool required = false) {
    if (auto* v = lookup(key, required)) {
      if (!v->is_number()) return type_error(key, "a number", *v);
      double d = v->get<double>();
      if (d < min || d > max)
        errors_.add(path(key), fmt::format("{} is out of range [{}, {}]", d, min, max));
      else
        out = d;
    }
  }
  template <typename I>
  requires std::is_integral_v<I> &&
      (!std::is_same_v<I, bool>)void get(const std::string& key, I& out,
                                         long long min = std::numeric_limits<int>::min(),
                                         long long max = std::numeric_limits<int>::max(),
                                         bool required = false) {
    if (auto* v = lookup(key, required)) {
      if (!v->is_number_integer()) return type_error(key, "an integer", *v);
      long long n = v->is_number_unsigned() ? static_cast<long long>(v->get<unsigned long long>())
                                            : v->get<long long>();
      if (n < min || n > max)
        errors_.add(path(key), fmt::format("{} is out of range [{}, {}]", n, min, max));
      else
        out = static_cast<I>(n);
    }
  }
  void get(const std::string& key, std::vector<std::string>& out) {
    if (auto* v = lookup(key, false)) {
      if (!v->is_array()) return type_error(key, "an array of strings", *v);
      out.clear();
      for (std::size_t i = 0; i < v->size(); ++i) {
        if ((*v)[i].is_string())
          out.push_back((*v)[i].get<std::string>());
        else
          errors_.add(fmt::format("{}/{}", path(key), i), "expected a string");
      }
    }
  }
  void get(const std::string& key, std::vector<int>& out) {
    if (auto* v = lookup(key, false)) {
      if (!v->is_array()) return type_error(key, "an array of integers", *v);
      out.clear();
      for (std::size_t i = 0; i < v->size(); ++i) {
        if ((*v)[i].is_number_integer())
          out.push_back((*v)[i].get<int>());
        else
          errors_.add(fmt::format("{}/{}", path(key), i), "expected an integer");
      }
    }
  }

  void finish() {
    if (!ok_ || finished_) return;
    finished_ = true;
    std::string known;
    for (const auto& k : known_) known += (known.empty() ? "" : ", ") + k;
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!known_.count(it.key()))
        errors_.add(path(it.key()), known.empty()
                                        ? std::string("unknown key; none are accepted here")
                                        : "unknown key; known: " + known);
    }
  }

 private:
  const nlohmann::json* lookup(const std::string& key, bool required) {
    known_.insert(key);
    if (!ok_) return nullptr;
    if (!j_.contains(key)) {
      if (required) errors_.add(path(key), "required but missing");
      return nullptr;
    }
    return &j_.at(key);
  }
  void type_error(const std::string& key, const char* want, const nlohmann::json& got) {
    errors_.add(path(key), fmt::format("expected {}, got {}", want, got.type_name()));
  }

  const nlohmann::json& j_;
  std::string path_;
  Errors& errors_;
  std::set<std::string> known_;
  bool ok_ = true;
  bool finished_ = false;
};

}  // namespace h3pipe::json_reader

namespace h3pipe::json_reader {

// Parses JSON text strictly: a key twice in one object is an error naming its JSON pointer
// (nlohmann keeps the last one silently; a duplicated "hosts" once gave `"local" is not a host`),
// and every error is one line with the offending bytes escaped (no raw invalid UTF-8, no caret
// line), so `FILE:LINE: field: reason` output stays one line per problem (issue #14).
// Returns the document, or the error text.
// One printable line: newlines become " | ", other control and non-ASCII bytes \xNN.
inline std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n')
      out += " | ";
    else if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

inline std::optional<nlohmann::json> parse_strict(std::string_view text, std::string* error) {
  if (text.substr(0, 3) == "\xef\xbb\xbf") {
    *error = "starts with a UTF-8 byte order mark; save the file without one";
    return std::nullopt;
  }
  // Depth bounded too (issue #35 D2): common/core/json_parse.h.
  JsonLimits limits;
  limits.reject_duplicate_keys = true;
  return parse_limited(text, limits, error);
}

}  // namespace h3pipe::json_reader

// The config module (and every reader that came from it) names these config::ObjectReader,
// config::Errors, ...: the same types.
namespace h3pipe::config {
using namespace h3pipe::json_reader;  // NOLINT(google-build-using-namespace)
}  // namespace h3pipe::config
