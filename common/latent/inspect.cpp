// `h3pipe latent inspect FILE [--json]` (wired into the CLI by cli/).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "common/core/sha256.h"
#include "common/latent/latent.h"
#include "common/latent/safetensors.h"

namespace h3pipe::latent {
namespace {

std::string shape_str(const std::vector<std::uint64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

bool is_latent(const st::Layout& l) {
  return l.tensors.size() == 2 && l.find("video") && l.find("audio");
}

}  // namespace

int inspect_main(const std::string& file, bool as_json, std::ostream& out) {
  nlohmann::json j;
  j["file"] = file;
  std::error_code ec;
  auto size = std::filesystem::file_size(file, ec);
  if (!ec) j["size"] = size;
  auto sha = sha256_file(file);
  if (sha.ok()) j["sha256"] = *sha;

  std::optional<Error> error;
  auto layout = st::read_layout(file);
  std::string kind = "unknown";
  if (!layout.ok()) {
    error = layout.error();
  } else {
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : layout->tensors)
      j["tensors"].push_back({{"name", t.name},
                              {"dtype", dtype_name(t.dtype)},
                              {"shape", t.shape},
                              {"data_offsets", {t.begin, t.end}}});
    j["metadata"] = layout->metadata;
    if (is_latent(*layout)) {
      kind = "latent";
      auto r = read_latent(file, nullptr);
      if (!r.ok()) error = r.error();
    } else {
      kind = "tensors";
      auto r = read_tensors(file);
      if (!r.ok()) error = r.error();
    }
  }
  j["kind"] = kind;
  j["valid"] = !error.has_value();
  if (error) j["error"] = {{"code", error->code}, {"message", error->message}};

  if (as_json) {
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return error ? 1 : 0;
  }
  out << fmt::format("file      {}", file);
  if (!ec) out << fmt::format(" ({} bytes)", size);
  out << "\n";
  if (sha.ok()) out << fmt::format("sha256    {}\n", *sha);
  if (layout.ok()) {
    const char* label = "tensors   ";
    for (const auto& t : layout->tensors) {
      out << fmt::format("{}{:<8} {:<5} {:<24} bytes [{}, {})\n", label, t.name,
                         dtype_name(t.dtype), shape_str(t.shape), t.begin, t.end);
      label = "          ";
    }
    label = "metadata  ";
    for (const auto& [k, v] : layout->metadata) {
      out << fmt::format("{}{} = {}\n", label, k, v);
      label = "          ";
    }
  }
  if (error)
    out << fmt::format("verdict   INVALID {}: {}\n", error->code, error->message);
  else
    out << fmt::format("verdict   valid {}\n", kind == "latent" ? "latent" : "tensor file");
  return error ? 1 : 0;
}

}  // namespace h3pipe::latent
