#include "common/latent/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace h3pipe::latent::st {
namespace {

using json = nlohmann::json;

// A SAX handler that builds the DOM and refuses what nlohmann's DOM parser would silently accept:
// a duplicate key (the DOM keeps the last one, so two readers could disagree on a tensor's
// offsets) and nesting deeper than any valid header needs.
class StrictDom final {
 public:
  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t&) {
    return fail(errc::latent::kHeaderJson, "binary values are not JSON");
  }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    json* top = stack_.back();
    if (top->contains(k)) {
      return fail(errc::latent::kDuplicateKey, "header: duplicate key \"{}\"{}", k,
                  stack_.size() > 1 ? " inside a nested object" : "");
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) {
    if (error_.code.empty())
      error_ = make_error(errc::latent::kHeaderJson, "header is not strict JSON at byte {}: {}",
                          pos, ex.what());
    return false;
  }

  json& root() { return root_; }
  const Error& error() const { return error_; }

 private:
  template <typename... A>
  bool fail(const ErrorCode& code, fmt::format_string<A...> f, A&&... a) {
    error_ = make_error(code, f, std::forward<A>(a)...);
    return false;
  }
  json* insert(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool put(json v) {
    insert(std::move(v));
    return true;
  }
  bool open(json v) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth)
      return fail(errc::latent::kHeaderJson, "header nests deeper than {} levels", kMaxJsonDepth);
    stack_.push_back(insert(std::move(v)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  json root_;
  std::vector<json*> stack_;
  std::string key_;
  Error error_;
};

bool dtype_from(std::string_view s, DType* out) {
  static constexpr std::pair<std::string_view, DType> kAllowed[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}};
  for (auto [name, d] : kAllowed) {
    if (s == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

std::string shape_str(const std::vector<std::uint64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// Stage 1: entry structure and dtype.
Status check_entry(const std::string& name, const json& v, TensorInfo* t) {
  if (!v.is_object())
    return make_error(errc::latent::kHeaderSchema, "tensor \"{}\": entry must be an object", name);
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      return make_error(errc::latent::kHeaderSchema, "tensor \"{}\": unknown field \"{}\"", name,
                        it.key());
  }
  for (const char* f : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(f))
      return make_error(errc::latent::kHeaderSchema, "tensor \"{}\": missing field \"{}\"", name,
                        f);
  }
  if (!v["dtype"].is_string())
    return make_error(errc::latent::kHeaderSchema, "tensor \"{}\": dtype must be a string", name);
  if (!dtype_from(v["dtype"].get_ref<const std::string&>(), &t->dtype))
    return make_error(errc::latent::kBadDtype,
                      "tensor \"{}\": dtype \"{}\" not allowed (F32, F16, BF16)", name,
                      v["dtype"].get_ref<const std::string&>());
  t->name = name;
  return {};
}

// Stage 2: shape, overflow-checked byte size, and that size against the data_offsets span.
Status check_extent(const json& v, TensorInfo* t) {
  const json& shape = v["shape"];
  if (!shape.is_array() || shape.size() > kMaxRank)
    return make_error(errc::latent::kBadShape,
                      "tensor \"{}\": shape must be an array of at most {} sizes", t->name,
                      kMaxRank);
  std::uint64_t elems = 1;
  bool overflow = false;
  for (const json& d : shape) {
    if (!d.is_number_unsigned())
      return make_error(errc::latent::kBadShape,
                        "tensor \"{}\": shape entries must be non-negative integers, got {}",
                        t->name, d.dump());
    std::uint64_t n = d.get<std::uint64_t>();
    t->shape.push_back(n);
    overflow = overflow || __builtin_mul_overflow(elems, n, &elems);
  }
  std::uint64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(elems, std::uint64_t{dtype_size(t->dtype)}, &bytes))
    return make_error(errc::latent::kShapeOverflow,
                      "tensor \"{}\": shape {} x {} bytes overflows 64 bits", t->name,
                      shape_str(t->shape), dtype_size(t->dtype));
  t->elems = elems;
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    return make_error(errc::latent::kBadOffsets,
                      "tensor \"{}\": data_offsets must be two non-negative integers [begin, end]",
                      t->name);
  t->begin = off[0].get<std::uint64_t>();
  t->end = off[1].get<std::uint64_t>();
  if (t->begin > t->end)
    return make_error(errc::latent::kBadOffsets,
                      "tensor \"{}\": data_offsets [{}, {}] end before begin", t->name, t->begin,
                      t->end);
  if (t->end - t->begin != bytes)
    return make_error(errc::latent::kSizeMismatch,
                      "tensor \"{}\": shape {} {} needs {} bytes, data_offsets [{}, {}] span {}",
                      t->name, shape_str(t->shape), dtype_name(t->dtype), bytes, t->begin, t->end,
                      t->end - t->begin);
  return {};
}

// Stage 3: sorted, contiguous, exactly covering the data section.
Status check_coverage(std::vector<TensorInfo>& ts, std::uint64_t data_len) {
  std::sort(ts.begin(), ts.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : ts) {
    if (t.begin < at)
      return make_error(errc::latent::kOffsetsOverlap,
                        "tensor \"{}\" [{}, {}] overlaps tensor \"{}\" [{}, {}]", t.name, t.begin,
                        t.end, prev->name, prev->begin, prev->end);
    if (t.begin > at)
      return make_error(errc::latent::kOffsetsGap,
                        "hole of {} bytes in the data before tensor \"{}\" at {}", t.begin - at,
                        t.name, t.begin);
    at = t.end;
    prev = &t;
  }
  if (at > data_len)
    return make_error(errc::latent::kOffsetsPastEof,
                      "tensor \"{}\" ends at data byte {}, past the {} bytes the file holds",
                      prev->name, at, data_len);
  if (at < data_len)
    return make_error(errc::latent::kTrailingBytes,
                      "{} bytes after the last tensor's data (tensors cover {} of {} bytes)",
                      data_len - at, at, data_len);
  return {};
}

Status check_metadata(const json* meta, std::map<std::string, std::string>* out) {
  if (meta == nullptr) return {};
  if (!meta->is_object())
    return make_error(errc::latent::kMetadataType, "__metadata__ must be an object of strings");
  for (auto it = meta->begin(); it != meta->end(); ++it) {
    if (!it.value().is_string())
      return make_error(errc::latent::kMetadataType,
                        "__metadata__ \"{}\": value must be a string, got {}", it.key(),
                        it.value().type_name());
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return {};
}

[[maybe_unused]] std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

void put_le64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

}  // namespace

const TensorInfo* Layout::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Result<std::uint64_t> check_prefix(std::span<const std::uint8_t> bytes, std::uint64_t file_size) {
  if (bytes.size() < 8 || file_size < 8)
    return make_error(errc::latent::kTooShort,
                      "file holds {} bytes, less than the 8-byte header length", file_size);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | bytes[i];
  if (n > kMaxHeaderBytes)
    return make_error(errc::latent::kHeaderTooLarge, "header length {} exceeds the {} byte limit",
                      n, kMaxHeaderBytes);
  if (n > file_size - 8)
    return make_error(errc::latent::kHeaderPastEof,
                      "header length {} runs past the end of the file ({} bytes after the prefix)",
                      n, file_size - 8);
  return n;
}

Result<Layout> parse_header(std::span<const std::uint8_t> header, std::uint64_t data_len) {
  if (header.empty() || header[0] != '{')
    return make_error(errc::latent::kHeaderStart, "header must start with '{{', got {}",
                      header.empty() ? std::string("nothing") : fmt::format("0x{:02x}", header[0]));
  // nlohmann's lexer takes a NUL byte for the end of input, which would let bytes after it pass
  // unparsed; a NUL is never valid JSON (not whitespace, and escaped inside strings).
  if (const void* nul = std::memchr(header.data(), 0, header.size()))
    return make_error(errc::latent::kHeaderJson,
                      "header is not strict JSON: NUL byte at header offset {}",
                      static_cast<const std::uint8_t*>(nul) - header.data());
  StrictDom dom;
  // json-parse: StrictDom bounds depth (kMaxJsonDepth) and size (kMaxHeaderBytes) itself.
  bool ok = json::sax_parse(header.begin(), header.end(), &dom);
  if (!ok) {
    if (!dom.error().code.empty()) return dom.error();
    return make_error(errc::latent::kHeaderJson, "header is not strict JSON");
  }
  json& root = dom.root();
  if (!root.is_object())
    return make_error(errc::latent::kHeaderSchema, "header must be a JSON object");
  if (root.size() > kMaxTensors + 1)
    return make_error(errc::latent::kHeaderSchema, "header lists {} entries, at most {} allowed",
                      root.size(), kMaxTensors);

  Layout layout;
  layout.header_len = header.size();
  const json* meta = nullptr;
  std::vector<const json*> entries;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      meta = &it.value();
      continue;
    }
    TensorInfo t;
    H3_TRY(check_entry(it.key(), it.value(), &t));
    layout.tensors.push_back(std::move(t));
    entries.push_back(&it.value());
  }
  for (std::size_t i = 0; i < entries.size(); ++i)
    H3_TRY(check_extent(*entries[i], &layout.tensors[i]));
  H3_TRY(check_coverage(layout.tensors, data_len));
  H3_TRY(check_metadata(meta, &layout.metadata));
  return layout;
}

Result<Layout> parse_layout(std::span<const std::uint8_t> file) {
  auto n = check_prefix(file, file.size());
  if (!n.ok()) return n.error();
  return parse_header(file.subspan(8, *n), file.size() - 8 - *n);
}

float half_to_float(std::uint16_t h) {
  std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t man = h & 0x3ff;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400) == 0);
    bits = sign | (static_cast<std::uint32_t>(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t float_to_half(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000);
  std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);  // Inf/NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00;  // rounds past 65504 -> Inf
  if (ax < 0x38800000u) {                       // subnormal or zero in half
    if (ax < 0x33000000u) return sign;          // below half the smallest subnormal
    std::uint32_t man = (ax & 0x7fffff) | 0x800000;
    int shift = 126 - static_cast<int>(ax >> 23);  // 14..24 -> bits to drop beyond 13
    std::uint32_t v = man >> (shift);
    std::uint32_t rem = man & ((1u << shift) - 1);
    std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1))) ++v;
    return sign | static_cast<std::uint16_t>(v);
  }
  std::uint32_t v = ax - 0x38000000u;  // rebias exponent 127 -> 15
  std::uint32_t r = v >> 13;
  std::uint32_t rem = v & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return sign | static_cast<std::uint16_t>(r);
}

float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<std::uint16_t>(x >> 16);
}

Status decode(const TensorInfo& t, std::span<const std::uint8_t> raw, float* out) {
  const std::uint8_t* p = raw.data();
  switch (t.dtype) {
    case DType::kF32:
      if constexpr (std::endian::native == std::endian::little) {
        if (t.elems) std::memcpy(out, p, t.elems * 4);
      } else {
        for (std::uint64_t i = 0; i < t.elems; ++i)
          out[i] = std::bit_cast<float>(load_le32(p + 4 * i));
      }
      break;
    case DType::kF16:
      for (std::uint64_t i = 0; i < t.elems; ++i)
        out[i] = half_to_float(static_cast<std::uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
      break;
    case DType::kBF16:
      for (std::uint64_t i = 0; i < t.elems; ++i)
        out[i] = bf16_to_float(static_cast<std::uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
      break;
  }
  for (std::uint64_t i = 0; i < t.elems; ++i) {
    if (!std::isfinite(out[i]))
      return make_error(errc::latent::kNonfinite, "tensor \"{}\": element {} is {}", t.name, i,
                        std::isnan(out[i]) ? "NaN" : (out[i] > 0 ? "+Inf" : "-Inf"));
  }
  return {};
}

std::vector<std::uint8_t> serialize(const std::vector<TensorRef>& tensors,
                                    const std::map<std::string, std::string>& metadata,
                                    DType dtype) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) header["__metadata__"][k] = v;
  }
  const std::uint64_t esize = dtype_size(dtype);
  std::uint64_t at = 0;
  for (const auto& t : tensors) {
    std::uint64_t bytes = t.data.size() * esize;
    header[t.name] = {
        {"dtype", dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::uint8_t> out;
  out.reserve(8 + text.size() + at);
  put_le64(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& t : tensors) {
    std::size_t base = out.size();
    out.resize(base + t.data.size() * esize);
    std::uint8_t* p = out.data() + base;
    for (float f : t.data) {
      std::uint32_t bits = 0;
      if (dtype == DType::kF32) {
        bits = std::bit_cast<std::uint32_t>(f);
        for (int b = 0; b < 4; ++b) *p++ = static_cast<std::uint8_t>(bits >> (8 * b));
      } else {
        bits = dtype == DType::kF16 ? float_to_half(f) : float_to_bf16(f);
        *p++ = static_cast<std::uint8_t>(bits);
        *p++ = static_cast<std::uint8_t>(bits >> 8);
      }
    }
  }
  return out;
}

}  // namespace h3pipe::latent::st
