// Minimal strict safetensors I/O for the builtin model's weights (F32 only).  Layout: 8-byte
// little-endian header length, JSON header {name: {dtype, shape, data_offsets}, __metadata__},
// raw little-endian data.
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/core/json_parse.h"
#include "common/model/weights.h"

namespace h3pipe::model {

namespace {

constexpr std::uint64_t kMaxHeader = 100ull << 20;
constexpr std::size_t kMaxReported = 20;

Error weights_error(const std::filesystem::path& f, const std::vector<std::string>& problems) {
  std::string msg = fmt::format("weights file {}:", f.string());
  for (std::size_t i = 0; i < problems.size() && i < kMaxReported; ++i) msg += "\n  " + problems[i];
  if (problems.size() > kMaxReported)
    msg += fmt::format("\n  ... and {} more", problems.size() - kMaxReported);
  return make_error(errc::runtime::kPermanentWeights, "{}", msg);
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

}  // namespace

Result<Weights> load_safetensors(const std::filesystem::path& file,
                                 const std::vector<ParamSpec>& specs,
                                 const std::function<bool(const std::string&)>& keep) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return weights_error(file, {fmt::format("cannot open: {}", std::strerror(errno))});
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char len_bytes[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8))
    return weights_error(file, {"truncated: shorter than the 8-byte header length"});
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeader || header_len > file_size - 8)
    return weights_error(file, {fmt::format("header length {} exceeds the file ({} bytes) or the "
                                            "{} byte limit",
                                            header_len, file_size, kMaxHeader)});
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len)))
    return weights_error(file, {"truncated header"});
  std::string why;
  const auto parsed = json_reader::parse_limited(header, {kMaxHeader}, &why);
  if (!parsed) return weights_error(file, {"header is not valid JSON: " + why});
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return weights_error(file, {"header is not a JSON object"});
  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = file_size - data_start;

  std::vector<std::string> problems;
  std::map<std::string, const ParamSpec*> wanted;
  for (const auto& s : specs) wanted[s.name] = &s;
  for (const auto& [name, _] : j.items())
    if (name != "__metadata__" && !wanted.count(name))
      problems.push_back(
          fmt::format("tensor {}: unexpected (not a parameter of this config)", name));

  Weights w;
  for (const auto& s : specs) {
    const auto it = j.find(s.name);
    if (it == j.end()) {
      problems.push_back(
          fmt::format("tensor {}: missing (expected F32 {})", s.name, shape_str(s.shape)));
      continue;
    }
    const auto& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      problems.push_back(fmt::format("tensor {}: malformed header entry", s.name));
      continue;
    }
    if (e["dtype"] != "F32") {
      problems.push_back(
          fmt::format("tensor {}: dtype {} (expected F32)", s.name, e["dtype"].dump()));
      continue;
    }
    std::vector<std::int64_t> shape;
    bool shape_ok = true;
    for (const auto& v : e["shape"]) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
        shape_ok = false;
      else
        shape.push_back(v.get<std::int64_t>());
    }
    if (!shape_ok || shape != s.shape) {
      problems.push_back(fmt::format("tensor {}: shape {} (expected {})", s.name, e["shape"].dump(),
                                     shape_str(s.shape)));
      continue;
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      problems.push_back(
          fmt::format("tensor {}: data_offsets must be non-negative integers", s.name));
      continue;
    }
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    const std::uint64_t want_bytes = static_cast<std::uint64_t>(s.numel()) * 4;
    if (end < begin || end - begin != want_bytes) {
      problems.push_back(fmt::format("tensor {}: data_offsets [{}, {}] hold {} bytes (expected {})",
                                     s.name, begin, end, end >= begin ? end - begin : 0,
                                     want_bytes));
      continue;
    }
    if (end > data_size) {
      problems.push_back(fmt::format("tensor {}: truncated (data ends at byte {} of {} available)",
                                     s.name, end, data_size));
      continue;
    }
    Tensor t;
    t.shape = shape;
    t.data.resize(static_cast<std::size_t>(s.numel()));
    in.seekg(static_cast<std::streamoff>(data_start + begin));
    if (!in.read(reinterpret_cast<char*>(t.data.data()),
                 static_cast<std::streamsize>(want_bytes))) {
      problems.push_back(fmt::format("tensor {}: read failed", s.name));
      in.clear();
      continue;
    }
    static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
    for (std::size_t i = 0; i < t.data.size(); ++i)
      if (!std::isfinite(t.data[i])) {
        problems.push_back(
            fmt::format("tensor {}: non-finite value {} at element {}", s.name, t.data[i], i));
        break;
      }
    if (!keep || keep(s.name)) w.put(s.name, std::move(t));
  }
  if (!problems.empty()) return weights_error(file, problems);
  return w;
}

Status save_safetensors(const std::filesystem::path& file, const Weights& w,
                        const std::vector<ParamSpec>& specs,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h;
  h["__metadata__"] = metadata;
  std::uint64_t off = 0;
  for (const auto& s : specs) {
    const Tensor* t = w.find(s.name);
    if (!t)
      return make_error(errc::runtime::kPermanentWeights, "save {}: tensor {} missing",
                        file.string(), s.name);
    const std::uint64_t bytes = t->data.size() * 4;
    h[s.name] = {{"dtype", "F32"}, {"shape", t->shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string header = h.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out)
    return make_error(errc::io::kWrite, "save {}: cannot open: {}", file.string(),
                      std::strerror(errno));
  unsigned char len_bytes[8];
  std::uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(len >> (8 * i));
  out.write(reinterpret_cast<const char*>(len_bytes), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& s : specs) {
    const Tensor* t = w.find(s.name);
    out.write(reinterpret_cast<const char*>(t->data.data()),
              static_cast<std::streamsize>(t->data.size() * 4));
  }
  out.flush();
  if (!out) return make_error(errc::io::kWrite, "save {}: write failed", file.string());
  return Status::Ok();
}

}  // namespace h3pipe::model
