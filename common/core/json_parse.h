#pragma once
// The one way JSON text from outside becomes a DOM (issue #35 D2): configs, workflows,
// object_info, every HTTP body from ComfyUI, receipts, records read back from Redis, weight and
// latent headers.  nlohmann's parser is iterative, but its copy constructor, dump() and
// comparison recurse once per level: a body that nests 300,000 arrays parses fine and then
// overflows the stack of whoever copies or prints it.  So depth is bounded while parsing, before
// any DOM exists, and the text's size before that; what is refused is an error that names the
// source and the JSON pointer where the limit was passed, never an exception or a crash.
//
// Why 128 levels: the deepest document h3pipe reads for real is a ComfyUI UI workflow with
// subgraphs (about 12 levels: definitions/subgraphs/N/nodes/N/inputs/N/widget/...); configs,
// object_info, /history and receipts stay under 10.  128 leaves ten times that for extension
// payloads nobody here controls, while the recursion it allows (a few frames per level, under
// 1 KiB a level even with ASan) stays below 128 KiB of stack: far inside any thread's stack.
//
// scripts/check_json_parse.py (ctest json_parse_check) fails on a nlohmann parse outside this
// reader.  Thread-safe; no state.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/core/result.h"

namespace h3pipe::json_reader {

inline constexpr int kMaxJsonDepth = 128;
// A body or record that is not a file (files go through read_bounded_file's caps first):
// the HTTP client's own body cap.
inline constexpr std::uint64_t kMaxJsonTextBytes = 64ull << 20;

struct JsonLimits {
  std::uint64_t max_bytes = kMaxJsonTextBytes;
  int max_depth = kMaxJsonDepth;
  bool reject_duplicate_keys = false;  // a key twice in one object is an error naming its path
  bool ignore_comments = false;
};

// The reason alone ("nesting deeper than 128 levels at /a/0/b (byte 1234)", "syntax error ...",
// "70000000 bytes, above the 64 MiB limit"), one printable line; nullopt and *error when refused.
// Never throws.
std::optional<nlohmann::json> parse_limited(std::string_view text, const JsonLimits& limits,
                                            std::string* error);
std::optional<nlohmann::ordered_json> parse_limited_ordered(std::string_view text,
                                                            const JsonLimits& limits,
                                                            std::string* error);

// The same as a Result: the error has `code` and the message "<label>: <reason>" (the reason
// alone when label is empty).
Result<nlohmann::json> parse_json(std::string_view text, std::string_view label,
                                  const ErrorCode& code, const JsonLimits& limits = {});
Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text, std::string_view label,
                                                  const ErrorCode& code,
                                                  const JsonLimits& limits = {});

}  // namespace h3pipe::json_reader
