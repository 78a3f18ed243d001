#pragma once
// The safetensors container, independent of what the tensors mean: prefix and header validation,
// dtype conversion and serialisation.  latent.cpp builds the latent and the generic tensor file on
// top of it.  Every function is pure (no I/O) except where noted.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/latent/latent.h"

namespace h3pipe::latent::st {

inline constexpr std::uint64_t kMaxHeaderBytes = 1u << 20;  // 1 MiB (reference impl: 100 MB)
inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::size_t kMaxTensors = 4096;
inline constexpr int kMaxJsonDepth = 8;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::uint64_t> shape;
  std::uint64_t elems = 0;
  std::uint64_t begin = 0, end = 0;  // relative to the data section
};

struct Layout {
  std::uint64_t header_len = 0;
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  std::uint64_t data_offset() const { return 8 + header_len; }
  const TensorInfo* find(std::string_view name) const;
};

// Checks the 8-byte little-endian prefix against the file size; returns the header length.
// Errors: latent.too_short, latent.header_too_large, latent.header_past_eof.
Result<std::uint64_t> check_prefix(std::span<const std::uint8_t> bytes, std::uint64_t file_size);

// Parses and validates the header given the length of the data section that follows it.
// Errors: latent.header_start, latent.header_json, latent.duplicate_key, latent.header_schema,
// latent.bad_dtype, latent.bad_shape, latent.shape_overflow, latent.bad_offsets,
// latent.size_mismatch, latent.offsets_overlap, latent.offsets_gap, latent.offsets_past_eof,
// latent.trailing_bytes, latent.metadata_type.
Result<Layout> parse_header(std::span<const std::uint8_t> header, std::uint64_t data_len);

// Both steps on a complete in-memory file.
Result<Layout> parse_layout(std::span<const std::uint8_t> file);

// Both steps on a file, reading only its prefix and header (I/O; implemented in latent.cpp).
Result<Layout> read_layout(const std::filesystem::path& path);

// Converts raw little-endian tensor bytes (exactly elems * dtype size) to float and scans for
// NaN/Inf.  Error: latent.nonfinite naming the tensor and element index.
Status decode(const TensorInfo& t, std::span<const std::uint8_t> raw, float* out);

float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);  // round to nearest even
float bf16_to_float(std::uint16_t b);
std::uint16_t float_to_bf16(float f);  // round to nearest even

struct TensorRef {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::span<const float> data;
};
// Writes tensors in the given order with contiguous offsets; header padded with spaces to a
// multiple of 8 (reference implementation).
std::vector<std::uint8_t> serialize(const std::vector<TensorRef>& tensors,
                                    const std::map<std::string, std::string>& metadata,
                                    DType dtype);

}  // namespace h3pipe::latent::st
