#pragma once
// The latent file `.h3latent` (DESIGN.md "Data"): the safetensors layout holding two float tensors,
// `video` (1, C_v, T', H', W') and `audio` (1, C_a, 2, L), plus a `__metadata__` string map.
//
// Every file is treated as hostile.  The reader checks, in this order and before it allocates
// anything sized by the file: header length cap, header within the file, '{' first byte, strict
// JSON without duplicate keys, dtype allow-list (F32, F16, BF16), shape x dtype size (overflow
// checked) equal to the data_offsets span, offsets sorted/contiguous/covering the data exactly,
// metadata values strings, tensor names and shapes against the expected geometry, NaN/Inf scan.
// Each failure has its own error code (see docs/transfer.md, "Latent file").
//
// Threading: all functions are reentrant; no shared state.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::latent {

enum class DType { kF32, kF16, kBF16 };

const char* dtype_name(DType d);  // "F32", "F16", "BF16"
std::size_t dtype_size(DType d);  // 4, 2, 2

struct Geometry {  // DESIGN.md: video (1, 24, T', H/16, W/16), audio (1, 32, 2, L), float32
  std::uint32_t video_channels = 24, t = 0, h = 0, w = 0;
  std::uint32_t audio_channels = 32, audio_len = 0;

  // T' = (frames - 1) / 4 + 1, H' = height / 16, W' = width / 16,
  // L = ceil(frames / fps * 48000 / 86) (audio latent hop of 86 samples at 48 kHz).
  // 416x736x124 at 24 fps -> 4,297,600 data bytes.
  static Geometry for_job(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                          std::uint32_t fps);
  std::size_t video_elems() const;
  std::size_t audio_elems() const;
  std::size_t data_bytes() const;  // float32 bytes of both tensors
  std::vector<std::uint64_t> video_shape() const;
  std::vector<std::uint64_t> audio_shape() const;
  bool operator==(const Geometry&) const = default;
};

struct Latent {
  Geometry geometry;
  std::vector<float> video;                     // video_elems(), row-major (1, C, T, H, W)
  std::vector<float> audio;                     // audio_elems(), (1, C, 2, L)
  std::map<std::string, std::string> metadata;  // __metadata__
};

// Safetensors bytes: 8-byte LE header length, JSON header (padded with spaces to a multiple of 8,
// as the reference implementation does), raw LE data; `video` then `audio`.  F16/BF16 round to
// nearest even (used by tests and tools; the pipeline writes F32).
std::vector<std::uint8_t> serialize(const Latent& latent, DType dtype = DType::kF32);

// Atomic write with the .sha256 sidecar (artifacts::write_atomic); returns the SHA-256 hex.
// Fails with latent.geometry when the vectors do not match the geometry.
Result<std::string> write_latent(const std::filesystem::path& path, const Latent& latent);

// Strict parse of hostile bytes.  `expected` may be null: then only the structure is checked
// (tensors `video` rank 5 and `audio` rank 4 with leading 1 and stereo axis 2) and the geometry is
// taken from the shapes.
Result<Latent> parse_latent(std::span<const std::uint8_t> bytes, const Geometry* expected);
// Same checks, reading the file in stages (prefix, header, then data) so that a hostile header
// never makes it allocate more than the file holds.
Result<Latent> read_latent(const std::filesystem::path& path, const Geometry* expected);

// A generic named-tensor file in the same layout (the conditioning tensor).
struct TensorF32 {
  std::vector<std::uint64_t> shape;
  std::vector<float> data;
};
Result<std::string> write_tensors(const std::filesystem::path& path,
                                  const std::map<std::string, TensorF32>& tensors,
                                  const std::map<std::string, std::string>& metadata);
Result<std::map<std::string, TensorF32>> read_tensors(
    const std::filesystem::path& path, std::map<std::string, std::string>* metadata_out = nullptr);
std::vector<std::uint8_t> serialize_tensors(const std::map<std::string, TensorF32>& tensors,
                                            const std::map<std::string, std::string>& metadata,
                                            DType dtype = DType::kF32);
Result<std::map<std::string, TensorF32>> parse_tensors(
    std::span<const std::uint8_t> bytes,
    std::map<std::string, std::string>* metadata_out = nullptr);

// `h3pipe latent inspect FILE [--json]`: tensors (name, dtype, shape), metadata, SHA-256 and the
// verdict.  Returns 0 when the file is valid, 1 when invalid (the reason is printed).
int inspect_main(const std::string& file, bool json, std::ostream& out);

}  // namespace h3pipe::latent
