#include "common/core/json_parse.h"

#include <new>
#include <set>
#include <utility>
#include <vector>

#include "common/core/bounded_file.h"
#include "common/core/json_reader.h"

namespace h3pipe::json_reader {
namespace {

// A SAX handler that builds the DOM itself (nlohmann's own builder is in its detail namespace,
// and its callback variant rescans the parent at every object end: quadratic in a 20,000-node
// workflow), refusing a container that would open level max_depth + 1.
template <typename J>
class BoundedDom final {
 public:
  using number_integer_t = typename J::number_integer_t;
  using number_unsigned_t = typename J::number_unsigned_t;
  using number_float_t = typename J::number_float_t;
  using string_t = typename J::string_t;
  using binary_t = typename J::binary_t;

  BoundedDom(J& root, const JsonLimits& limits) : root_(root), limits_(limits) {}

  bool null() { return put(J(nullptr)) != nullptr; }
  bool boolean(bool v) { return put(J(v)) != nullptr; }
  bool number_integer(number_integer_t v) { return put(J(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return put(J(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t& /*text*/) { return put(J(v)) != nullptr; }
  bool string(string_t& v) { return put(J(std::move(v))) != nullptr; }
  bool binary(binary_t& v) { return put(J::binary(std::move(v))) != nullptr; }

  bool start_object(std::size_t /*len*/) { return open(J::object()); }
  bool start_array(std::size_t /*len*/) { return open(J::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    Frame& f = frames_.back();
    if (limits_.reject_duplicate_keys && !f.seen.insert(k).second && duplicate_.empty())
      duplicate_ = pointer(k);
    f.key = k;
    return true;
  }

  template <typename Exception>
  bool parse_error(std::size_t /*pos*/, const std::string& /*token*/, const Exception& ex) {
    std::string what = ex.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    error_ = printable(what);
    return false;
  }

  const std::string& error() const { return error_; }
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    J* value;
    std::string key;          // objects: the key being read
    std::set<string_t> seen;  // objects, when duplicates are refused
  };

  // The JSON pointer of the element about to be added to the innermost open container, or of
  // key `k` in it.
  std::string pointer(const std::string* k = nullptr) const {
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      const bool last = i + 1 == frames_.size();
      if (f.value->is_array())
        parts.push_back(std::to_string(last ? f.value->size() : f.value->size() - 1));
      else
        parts.push_back(last && k ? *k : f.key);
    }
    std::string out;
    auto add = [&](const std::string& part) {
      out += '/';
      for (char c : part) {
        if (c == '~')
          out += "~0";
        else if (c == '/')
          out += "~1";
        else
          out += c;
      }
    };
    // A pointer 128 levels long says no more than its two ends.
    constexpr std::size_t kEnds = 6;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (parts.size() > 3 * kEnds && i == kEnds) {
        out += fmt::format("/...({} more levels)...", parts.size() - 2 * kEnds);
        i = parts.size() - kEnds - 1;
        continue;
      }
      add(parts[i]);
    }
    return printable(out);
  }
  std::string pointer(const string_t& k) const {
    const std::string s(k.begin(), k.end());
    return pointer(&s);
  }

  J* put(J&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    J& parent = *frames_.back().value;
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    J& slot = parent[frames_.back().key];
    slot = std::move(v);
    return &slot;
  }

  bool open(J&& container) {
    if (static_cast<int>(frames_.size()) >= limits_.max_depth) {
      error_ = fmt::format("nesting deeper than {} levels at {}", limits_.max_depth, pointer());
      return false;
    }
    J* p = put(std::move(container));
    frames_.push_back(Frame{p, {}, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  J& root_;
  const JsonLimits& limits_;
  std::vector<Frame> frames_;
  std::string error_;
  std::string duplicate_;
};

template <typename J>
std::optional<J> parse_with(std::string_view text, const JsonLimits& limits, std::string* error) {
  if (text.size() > limits.max_bytes) {
    *error = fmt::format("{} bytes, above the {} limit for this JSON", text.size(),
                         format_byte_limit(limits.max_bytes));
    return std::nullopt;
  }
  J root;
  BoundedDom<J> dom(root, limits);
  bool ok = false;
  try {
    ok = J::sax_parse(text.begin(), text.end(), &dom, nlohmann::json::input_format_t::json,
                      /*strict=*/true, limits.ignore_comments);
  } catch (const nlohmann::json::exception& ex) {
    std::string what = ex.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    *error = printable(what);
    return std::nullopt;
  } catch (const std::bad_alloc&) {
    *error = fmt::format("out of memory reading {} bytes of JSON", text.size());
    return std::nullopt;
  }
  if (!ok) {
    *error = dom.error().empty() ? std::string("not valid JSON") : dom.error();
    return std::nullopt;
  }
  if (!dom.duplicate().empty()) {
    *error = fmt::format("{}: duplicate key (each key may appear once)", dom.duplicate());
    return std::nullopt;
  }
  return root;
}

}  // namespace

std::optional<nlohmann::json> parse_limited(std::string_view text, const JsonLimits& limits,
                                            std::string* error) {
  return parse_with<nlohmann::json>(text, limits, error);
}

std::optional<nlohmann::ordered_json> parse_limited_ordered(std::string_view text,
                                                            const JsonLimits& limits,
                                                            std::string* error) {
  return parse_with<nlohmann::ordered_json>(text, limits, error);
}

Result<nlohmann::json> parse_json(std::string_view text, std::string_view label,
                                  const ErrorCode& code, const JsonLimits& limits) {
  std::string why;
  auto j = parse_limited(text, limits, &why);
  if (!j) return make_error(code, "{}{}{}", label, label.empty() ? "" : ": ", why);
  return std::move(*j);
}

Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text, std::string_view label,
                                                  const ErrorCode& code, const JsonLimits& limits) {
  std::string why;
  auto j = parse_limited_ordered(text, limits, &why);
  if (!j) return make_error(code, "{}{}{}", label, label.empty() ? "" : ": ", why);
  return std::move(*j);
}

}  // namespace h3pipe::json_reader
