#pragma once
// Error codes as named constants (docs/design.md, convention 7): make_error(errc::redis::kIo, ...)
// and `e.code == errc::redis::kIo`, never the code's text.  The entries are in error_codes.inc.
#include <span>
#include <string_view>

namespace h3pipe {

// How a task that fails with a code ends (see error_codes.inc).
enum class RetryClass { kRetried, kPermanent, kNotATask };

struct ErrorCode {
  std::string_view id;  // the wire text, e.g. "redis.io"
  RetryClass retry;
  std::string_view meaning;  // one line for operators

  // The text after the last dot: "fsync" for io.fsync (the failed call, in io.* messages).
  constexpr std::string_view leaf() const { return id.substr(id.rfind('.') + 1); }

  friend constexpr bool operator==(const ErrorCode& c, std::string_view code) {
    return c.id == code;
  }
};

namespace errc {

#define H3_ERROR_CODE(domain, name, text, retry, meaning)            \
  namespace domain {                                                 \
  inline constexpr ErrorCode name{text, RetryClass::retry, meaning}; \
  }
#include "common/core/error_codes.inc"
#undef H3_ERROR_CODE

// Every entry, in catalogue order.
std::span<const ErrorCode> all();

// The entry whose wire text is `code`; nullptr for a code not in the catalogue (one a peer of
// another version sent).
const ErrorCode* find(std::string_view code);

// The code's first part, its domain: "io" for io.fsync.
constexpr std::string_view domain_of(std::string_view code) {
  return code.substr(0, code.find('.'));
}

// True when the catalogue says retrying cannot help.  A code not in the catalogue is retried.
bool is_permanent(std::string_view code);

// "retried", "permanent" or "-" (docs/errors.md's retry column).
std::string_view retry_name(RetryClass r);

}  // namespace errc
}  // namespace h3pipe
