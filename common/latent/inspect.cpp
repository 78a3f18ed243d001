// `h3pipe latent inspect FILE [--json] [--profile NAME --geometry WxHxF@FPS]` (wired into the
// CLI by cli/).
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "common/core/bounded_file.h"
#include "common/core/sha256.h"
#include "common/latent/check.h"
#include "common/latent/latent.h"
#include "common/latent/safetensors.h"

namespace h3pipe::latent {
namespace {

using detail::shape_str;

// A latent in any of its forms (v1, v2, ComfyUI); anything else is a generic tensor file.
bool is_latent(const st::Layout& l) {
  return l.find("video") || l.find(kComfyTensor) || l.find(kComfyVersion0) ||
         l.metadata.count(kMetaVersion);
}

// Text from the file (tensor names, metadata, messages that quote them) made safe for a terminal
// (issue #35 D10): C0 controls (ESC included), DEL and the UTF-8 C1 controls U+0080..U+009F
// (8-bit CSI among them) are written as \xNN or \u00NN, a byte that is not UTF-8 as \xNN, and a
// backslash doubled so no escape is ambiguous; printable UTF-8 stays as it is.
std::string shown(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // A whole, shortest-form UTF-8 sequence passes (C1 controls excepted); any other byte is
      // escaped on its own.
      const std::size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                              : c >= 0xe0 && c <= 0xef ? 3
                              : c >= 0xf0 && c <= 0xf4 ? 4
                                                       : 0;
      bool ok = len > 0 && i + len <= s.size();
      for (std::size_t k = 1; ok && k < len; ++k)
        ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
      if (ok && len == 3) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogate
      }
      if (ok && len == 4) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
      }
      if (ok && len == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
        out += fmt::format("\\u00{:02x}", static_cast<unsigned char>(s[i + 1]));
        ++i;
      } else if (ok) {
        out.append(s.substr(i, len));
        i += len - 1;
      } else {
        out += fmt::format("\\x{:02x}", c);
      }
    }
  }
  return out;
}

}  // namespace

int inspect_main(const std::string& file, bool as_json, std::ostream& out, const Expected* expected,
                 std::uint64_t max_file_bytes) {
  // Read once, bounded (a FIFO, /dev/zero or a 2 GB file is refused at once, exit 2); every check
  // below works on these bytes, so what is hashed is what is validated.
  auto bytes = read_bounded_file(
      file, {"a latent", max_file_bytes, errc::io::kOpen, errc::latent::kNotAFile,
             errc::file::kTooLarge, "limits.max_latent_bytes and the 1 MiB header cap"});
  if (!bytes.ok()) {
    std::cerr << fmt::format("latent inspect: {}\n", shown(bytes.error().message));
    return 2;
  }
  const std::span<const std::uint8_t> span(reinterpret_cast<const std::uint8_t*>(bytes->data()),
                                           bytes->size());
  nlohmann::json j;
  j["file"] = file;
  const auto size = bytes->size();
  j["size"] = size;
  const std::string sha = sha256_hex(bytes->data(), bytes->size());
  j["sha256"] = sha;

  std::optional<Error> error;
  auto layout = st::parse_layout(span);
  std::string kind = "unknown";
  std::optional<Latent> latent;
  if (expected)
    j["checked_against"] = {{"profile", expected->profile.name}, {"job", to_string(expected->job)}};
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
      auto r = parse_latent(span, expected);
      if (!r.ok()) {
        error = r.error();
      } else {
        latent = std::move(*r);
        j["form"] = container_name(latent->container);
        j["profile"] = latent->profile;
        j["layout"] = latent->layout;
        if (latent->job != JobSize{})
          j["job"] = {{"width", latent->job.width},
                      {"height", latent->job.height},
                      {"frames", latent->job.frames},
                      {"fps", latent->job.fps}};
      }
    } else {
      kind = "tensors";
      auto r = parse_tensors(span);
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
  // Everything below that came from the file (or names it) goes through shown().
  out << fmt::format("file      {} ({} bytes)\n", shown(file), size);
  out << fmt::format("sha256    {}\n", sha);
  if (layout.ok()) {
    const char* label = "tensors   ";
    for (const auto& t : layout->tensors) {
      out << fmt::format("{}{:<8} {:<5} {:<24} bytes [{}, {})\n", label, shown(t.name),
                         dtype_name(t.dtype), shape_str(t.shape), t.begin, t.end);
      label = "          ";
    }
    label = "metadata  ";
    for (const auto& [k, v] : layout->metadata) {
      out << fmt::format("{}{} = {}\n", label, shown(k), shown(v));
      label = "          ";
    }
  }
  if (latent) {
    out << fmt::format("form      {}, layout {}\n", container_name(latent->container),
                       shown(latent->layout));
    out << fmt::format("profile   {}",
                       latent->profile.empty() ? "(not recorded)" : shown(latent->profile));
    if (latent->job != JobSize{}) out << fmt::format(", job {}", to_string(latent->job));
    out << "\n";
  }
  if (expected)
    out << fmt::format("checked   against profile {} for {}\n", expected->profile.name,
                       to_string(expected->job));
  if (error)
    out << fmt::format("verdict   INVALID {}: {}\n", error->code, shown(error->message));
  else
    out << fmt::format("verdict   valid {}\n", kind == "latent" ? "latent" : "tensor file");
  return error ? 1 : 0;
}

Result<JobSize> parse_job_size(std::string_view text) {
  JobSize j;
  std::uint32_t* dst[] = {&j.width, &j.height, &j.frames, &j.fps};
  const char seps[] = {'x', 'x', '@', '\0'};
  std::size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    std::size_t n = 0;
    std::uint64_t v = 0;
    while (at + n < text.size() && text[at + n] >= '0' && text[at + n] <= '9' && n < 10)
      v = v * 10 + static_cast<std::uint64_t>(text[at + n++] - '0');
    const bool end_ok =
        i == 3 ? at + n == text.size() : at + n < text.size() && text[at + n] == seps[i];
    if (n == 0 || !end_ok || v > 0xffffffffu)
      return make_error(errc::latent::kBadGeometryArg,
                        "geometry \"{}\": expected WIDTHxHEIGHTxFRAMES@FPS, e.g. 832x480x81@16",
                        std::string(text));
    *dst[i] = static_cast<std::uint32_t>(v);
    at += n + 1;
  }
  return j;
}

}  // namespace h3pipe::latent
