#pragma once
// Value-or-error results for the data path (docs/design.md, convention 6): a task, a frame or a
// reply never throws through a consumer loop; it returns Result<T> and the caller decides between
// ack, retry and dead-letter.
#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

#include "common/core/error_codes.h"

namespace h3pipe {

// An error: a stable machine-readable code and a human-readable message that names the field,
// file or peer concerned.  The code is the wire text of a catalogue entry (error_codes.inc), kept
// as text because it travels: receipts, status, dead-letter reasons, transfer replies.
struct Error {
  std::string code;     // e.g. "latent.header_too_large", "io.fsync"
  std::string message;  // complete sentence for operators

  std::string to_string() const { return code + ": " + message; }
};

// An error with a catalogue code: make_error(errc::io::kFsync, "fsync {}: {}", path, why).
template <typename... Args>
Error make_error(const ErrorCode& code, fmt::format_string<Args...> f, Args&&... args) {
  return Error{std::string(code.id), fmt::format(f, std::forward<Args>(args)...)};
}

// The cause's code with a new message, for a layer that adds context to an error it passes on
// ("{}: {}", path, cause.message).
template <typename... Args>
Error rephrase(const Error& cause, fmt::format_string<Args...> f, Args&&... args) {
  return Error{cause.code, fmt::format(f, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result without a value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  static Status Ok() { return {}; }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace h3pipe

// Propagate an error from an expression yielding Status or Result<T>.
#define H3_TRY(expr)                               \
  do {                                             \
    auto&& h3_try_r_ = (expr);                     \
    if (!h3_try_r_.ok()) return h3_try_r_.error(); \
  } while (0)
