#include "common/core/error_codes.h"

#include <algorithm>
#include <iterator>

namespace h3pipe::errc {
namespace {

constexpr ErrorCode kAll[] = {
#define H3_ERROR_CODE(domain, name, text, retry, meaning) domain::name,
#include "common/core/error_codes.inc"
#undef H3_ERROR_CODE
};

}  // namespace

std::span<const ErrorCode> all() {
  return kAll;
}

const ErrorCode* find(std::string_view code) {
  auto it = std::find_if(std::begin(kAll), std::end(kAll),
                         [&](const ErrorCode& c) { return c.id == code; });
  return it == std::end(kAll) ? nullptr : &*it;
}

bool is_permanent(std::string_view code) {
  const ErrorCode* c = find(code);
  return c != nullptr && c->retry == RetryClass::kPermanent;
}

std::string_view retry_name(RetryClass r) {
  switch (r) {
    case RetryClass::kRetried:
      return "retried";
    case RetryClass::kPermanent:
      return "permanent";
    case RetryClass::kNotATask:
      return "-";
  }
  return "?";
}

}  // namespace h3pipe::errc
