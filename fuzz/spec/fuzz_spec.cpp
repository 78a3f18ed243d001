// libFuzzer target for job specs, the door every user input passes (CLI batch, redis-cli XADD on
// h3pipe:submit): spec::parse_json + spec::validate + spec::parse_batch on hostile bytes, and the
// same bytes as a binary JobSpec (a task payload read back from a stream).  Nothing may crash,
// hang, trip ASan/UBSan or throw; every validation error names its field; a spec that parses
// must survive its canonical JSON (stored in the job hash, re-read by `resume`) unchanged.
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/spec/spec.h"

using namespace h3pipe;

namespace {

void check_errors(const std::vector<spec::FieldError>& errs) {
  for (const auto& e : errs)
    if (e.field.empty() || e.reason.empty()) std::abort();  // rule 4: each rule names its field
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const config::Limits limits;

  auto s = spec::parse_json(in);
  if (s.ok()) {
    auto errs = spec::validate(*s, limits);
    check_errors(errs);
    std::string canonical = spec::to_json(*s);
    auto again = spec::parse_json(canonical);
    if (!again.ok()) std::abort();  // the stored form must always parse back
    if (!google::protobuf::util::MessageDifferencer::Equals(*s, *again)) std::abort();
    if (spec::validate(*again, limits).size() != errs.size()) std::abort();
    (void)spec::to_json_object(*s);  // nlohmann must accept protobuf's output (UTF-8, numbers)
  } else if (s.error().message.empty()) {
    std::abort();
  }

  // The binary form: validate() must hold up on any field values, defaults not applied.
  pb::JobSpec raw;
  if (raw.ParseFromArray(data, static_cast<int>(size))) check_errors(spec::validate(raw, limits));

  // JSON lines: every error carries a line number within the text; all or nothing.
  auto b = spec::parse_batch(in, limits);
  std::size_t lines = 1;
  for (char c : in) lines += c == '\n';
  for (const auto& e : b.errors)
    if (e.line > lines || e.error.reason.empty()) std::abort();
  return 0;
}
