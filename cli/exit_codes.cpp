// The CLI's exit codes (README "Exit codes", `h3pipe --help`): one table from an error's
// catalogue code to the code every command exits with, so `run`, `status`, `cancel`, `resume`,
// `wait` and the rest agree.  Flag errors (CLI11's parse errors) are kExitUsage in main.cpp.
#include <fmt/format.h>

#include <span>

#include "cli/cli.h"

namespace h3pipe::cli {
namespace {

struct ExitRule {
  const ErrorCode& code;
  bool whole_domain;  // every code of code's domain ("config.*"), not only this one
  Exit exit;
};

// First match wins; an error no row names is kExitFailed.
const ExitRule kExitRules[] = {
    {errc::run::kUnknown, false, kExitNoSuchRun},
    // Redis did not answer, dropped the connection, or refused this user's login; no address.
    {errc::redis::kConnect, false, kExitUnreachable},
    {errc::redis::kIo, false, kExitUnreachable},
    {errc::redis::kAuth, false, kExitUnreachable},
    // Sentinel configured: no Sentinel answered, or none named the primary (#36 item 3).
    {errc::redis::kSentinel, false, kExitUnreachable},
    {errc::cli::kRedis, false, kExitUnreachable},
    // Bad input: nothing was done.
    {errc::cli::kFlag, false, kExitUsage},
    {errc::state_dir::kUnsafe, false, kExitUsage},  // a state dir another user can write (#22)
    {errc::config::kInvalid, true, kExitUsage},
    {errc::batch::kOpen, true, kExitUsage},
    {errc::spec::kJson, true, kExitUsage},
    {errc::id::kEmpty, true, kExitUsage},
};

}  // namespace

int exit_for(const Error& e) {
  // A NOAUTH/WRONGPASS reply to any command is a refused login, whatever the command was.
  if (is_auth_refusal(e)) return kExitUnreachable;
  for (const ExitRule& r : kExitRules) {
    const bool hit =
        r.whole_domain ? errc::domain_of(e.code) == errc::domain_of(r.code.id) : r.code == e.code;
    if (hit) return r.exit;
  }
  return kExitFailed;
}

int fail(const Error& e, std::string_view prefix) {
  if (prefix.empty())
    fmt::print(stderr, "{}\n", e.message);
  else
    fmt::print(stderr, "{}: {}\n", prefix, e.message);
  return exit_for(e);
}

}  // namespace h3pipe::cli
