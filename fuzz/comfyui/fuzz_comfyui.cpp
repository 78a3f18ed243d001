// libFuzzer target for the JSON a ComfyUI side hands h3pipe (issue #35 D2): arbitrary bytes read
// as `comfyui split` reads a workflow or --object-info and as the sampler's client reads a
// server's answers (a POST /prompt rejection, a /history status), all through the one bounded
// reader (common/core/json_parse.h).  Nothing may crash, overflow the stack, trip ASan/UBSan or
// throw; a refusal is one printable line; every error has a code and a message; an accepted
// document is within the depth limit, so copying and printing it is safe.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/comfyui/object_info.h"
#include "common/comfyui/split.h"
#include "common/comfyui/ui_workflow.h"
#include "common/core/json_parse.h"
#include "common/runtime/comfyui_client.h"

using namespace h3pipe;

namespace {

void check_error(const Error& e) {
  if (e.code.empty() || e.message.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string why;
  auto j = json_reader::parse_limited(in, {}, &why);
  if (!j) {
    if (why.empty() || why.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  // Within the limit: the recursive copy, dump and comparison are safe.
  const nlohmann::json copy = *j;
  if (copy != *j) std::abort();
  (void)copy.dump();
  // As a server's answer.
  (void)runtime::comfyui::describe_rejection(*j);
  (void)runtime::comfyui::execution_failure(*j);
  // As object_info, and as a workflow in either format.
  auto oi = comfyui::ObjectInfo::parse(*j);
  if (!oi.ok()) check_error(oi.error());
  comfyui::Json api = *j;
  if (comfyui::is_ui_format(*j)) {
    if (!oi.ok()) return 0;
    auto converted = comfyui::ui_to_api(*j, *oi);
    if (!converted.ok()) {
      check_error(converted.error());
      return 0;
    }
    api = std::move(*converted);
  }
  comfyui::SplitOptions o;
  auto r = comfyui::split_workflow(api, o);
  if (!r.ok()) check_error(r.error());
  return 0;
}
