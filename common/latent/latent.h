#pragma once
// The latent file (docs/latent.md): the safetensors layout holding a `video` tensor
// (1, C, T', H', W') of any channel count and, where the job's latent profile has one, an `audio`
// tensor, plus a `__metadata__` string map naming the format version, the profile and the job
// geometry.  Three forms are read: version 2, version 1 (no version key: video + audio, profile
// builtin) and ComfyUI's own `.latent` (SaveLatent: `latent_tensor` + `latent_format_version_0`).
//
// Every file is treated as hostile.  The reader checks, in this order and before it allocates
// anything sized by the file: header length cap, header within the file, '{' first byte, strict
// JSON without duplicate keys, dtype allow-list (F32, F16, BF16), shape x dtype size (overflow
// checked) equal to the data_offsets span, offsets sorted/contiguous/covering the data exactly,
// metadata values strings, the form and its metadata, tensor names and shapes against the job's
// profile, NaN/Inf scan.  Each failure has its own error code (docs/latent.md, "Errors").
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
#include "common/latent/profile.h"

namespace h3pipe::latent {

enum class DType { kF32, kF16, kBF16 };

const char* dtype_name(DType d);  // "F32", "F16", "BF16"
std::size_t dtype_size(DType d);  // 4, 2, 2

// The metadata keys of version 2 (docs/latent.md).
inline constexpr const char* kMetaFormat = "h3pipe.format";           // "h3latent"
inline constexpr const char* kMetaVersion = "h3pipe.format_version";  // "2"
inline constexpr const char* kMetaProfile = "h3pipe.profile";
inline constexpr const char* kMetaWidth = "h3pipe.width";
inline constexpr const char* kMetaHeight = "h3pipe.height";
inline constexpr const char* kMetaFrames = "h3pipe.frames";
inline constexpr const char* kMetaFps = "h3pipe.fps";
inline constexpr const char* kMetaLayout = "h3pipe.layout";  // video | video+audio | av_nested
// ComfyUI's SaveLatent tensors.
inline constexpr const char* kComfyTensor = "latent_tensor";
inline constexpr const char* kComfyVersion0 = "latent_format_version_0";

// The tensor shapes of one latent: `video` rank 5, `audio` any rank or none.
struct Geometry {
  std::vector<std::uint64_t> video;  // (1, C, T', H', W')
  std::vector<std::uint64_t> audio;  // the audio tensor's shape; empty = no audio tensor

  // The builtin profile's geometry (video (1, 24, T', H/16, W/16), audio (1, 32, 2, L)):
  // 416x736x124 at 24 fps -> 4,297,600 data bytes.  Same as expected_geometry(builtin_profile()).
  static Geometry for_job(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                          std::uint32_t fps);
  bool has_audio() const { return !audio.empty(); }
  std::uint64_t channels() const { return video.size() == 5 ? video[1] : 0; }
  std::uint64_t t() const { return video.size() == 5 ? video[2] : 0; }
  std::uint64_t h() const { return video.size() == 5 ? video[3] : 0; }
  std::uint64_t w() const { return video.size() == 5 ? video[4] : 0; }
  std::size_t video_elems() const;
  std::size_t audio_elems() const;  // 0 without audio
  std::size_t data_bytes() const;   // float32 bytes of both tensors
  const std::vector<std::uint64_t>& video_shape() const { return video; }
  const std::vector<std::uint64_t>& audio_shape() const { return audio; }
  bool operator==(const Geometry&) const = default;
};

// What a profile makes for a job: T' by the frame rule's floor, H' = H / sf, W' = W / sf and the
// audio rule's nominal length.  Computed for any job; job_fits() says whether the job is valid.
Geometry expected_geometry(const LatentProfile& p, const JobSize& job);
inline Geometry expected_geometry(const LatentProfile& p, std::uint32_t width, std::uint32_t height,
                                  std::uint32_t frames, std::uint32_t fps) {
  return expected_geometry(p, JobSize{width, height, frames, fps});
}
// Float32 bytes of the expected latent (the planner's transfer size, max_latent_bytes).
std::uint64_t latent_bytes(const LatentProfile& p, const JobSize& job);

enum class Container { kV1, kV2, kComfy };
const char* container_name(Container c);  // "h3latent v1", "h3latent v2", "ComfyUI .latent"

struct Latent {
  Geometry geometry;
  std::vector<float> video;  // video_elems(), row-major
  std::vector<float> audio;  // audio_elems(), row-major; empty without audio
  // __metadata__ as read (every key).  The v2 writer adds the h3pipe.* keys from the fields
  // below over whatever this holds.
  std::map<std::string, std::string> metadata;
  Container container = Container::kV2;
  std::string profile = "builtin";  // v1: builtin; ComfyUI: the expectation's, else ""
  JobSize job;                      // v2: from the metadata; else the expectation's, else zero
  std::string layout;               // video | video+audio | av_nested; "" = by audio presence
};

// A zero-filled latent of the profile's geometry for the job, ready for a writer.
Latent make_latent(const LatentProfile& p, const JobSize& job);

// What a reader checks a latent against: the job's profile and geometry.
struct Expected {
  LatentProfile profile;
  JobSize job;
};

// Version 2 bytes: 8-byte LE header length, JSON header (padded with spaces to a multiple of 8,
// as the reference implementation does), raw LE data; `video` then `audio`.  F16/BF16 round to
// nearest even (used by tests and tools; the pipeline writes F32).
std::vector<std::uint8_t> serialize(const Latent& latent, DType dtype = DType::kF32);
// ComfyUI SaveLatent bytes (`latent_format_version_0` empty F32, then `latent_tensor`, as
// safetensors orders them); the latent's metadata is kept.  Error latent.comfy_audio when the
// latent has audio: that form holds video only.
Result<std::vector<std::uint8_t>> serialize_comfy(const Latent& latent, DType dtype = DType::kF32);

// Atomic write with the .sha256 sidecar (artifacts::write_atomic); returns the SHA-256 hex.
// Fails with latent.geometry when the vectors do not match the geometry, and (version 2) when
// the profile or the job geometry is not set.
Result<std::string> write_latent(const std::filesystem::path& path, const Latent& latent);
Result<std::string> write_comfy_latent(const std::filesystem::path& path, const Latent& latent);

// Strict parse of hostile bytes.  With `expected` the latent must be the job's: the profile's
// shapes for the job (audio required or refused by the profile), and for v2 the same profile name
// and job geometry in the metadata.  Without it only the structure is checked (and a v2 file
// naming a built-in profile against that profile and its own job geometry).
Result<Latent> parse_latent(std::span<const std::uint8_t> bytes, const Expected* expected);
// Same checks, reading the file in stages (prefix, header, then data) so that a hostile header
// never makes it allocate more than the file holds.  Errors name the file.
Result<Latent> read_latent(const std::filesystem::path& path, const Expected* expected);

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

// `h3pipe latent inspect FILE [--json] [--profile NAME --geometry WxHxF@FPS]`: tensors (name,
// dtype, shape), metadata, form, profile, SHA-256 and the verdict; with `expected` the latent is
// checked against that profile and job.  Returns 0 when the file is valid, 1 when invalid (the
// reason is printed), 2 when the file is refused before it is read: not a regular file, or larger
// than max_file_bytes (the config's limits.max_latent_bytes plus the header cap; the reason goes
// to stderr, naming the file).
inline constexpr std::uint64_t kInspectDefaultMaxBytes = (256ull << 20) + (1ull << 20) + 8;
int inspect_main(const std::string& file, bool json, std::ostream& out,
                 const Expected* expected = nullptr,
                 std::uint64_t max_file_bytes = kInspectDefaultMaxBytes);
// Parses "WxHxF@FPS" (e.g. 832x480x81@16).  Error latent.bad_geometry_arg.
Result<JobSize> parse_job_size(std::string_view text);

}  // namespace h3pipe::latent
