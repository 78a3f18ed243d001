#pragma once
// The builtin reference model (docs/design.md "Runtimes": builtin): real compute, configurable
// size, shaped like the seeds' MiniMax-style model.
//
//   encode  prompt bytes -> byte tokens -> embedding + text transformer -> conditioning (N, D);
//           an optional reference image adds 64 patch tokens.
//   sample  flow-matching Euler sampler over a DiT whose sequence joins the video latent
//           (24 ch, patchified 1x2x2) and the audio latent (32 ch x 2, 4 steps per token);
//           each block: adaLN-modulated self-attention, cross-attention to the conditioning,
//           adaLN-modulated MLP.
//   decode  causal VAE-style conv decoder (4x temporal, 16x spatial) streaming frames in
//           segments/tiles under a memory budget; a 1-D transposed-conv audio decoder (hop 86).
//
// CPU: every matrix product is an OpenBLAS sgemm, called single-threaded from the model's own
// worker pool (config.threads); see parallel.h for why and for the determinism argument.
// Same spec, seed, weights and build on the same CPU -> identical latent bytes, whatever
// `threads` is.  docs/model.md has the architecture, FLOP accounting and memory budget.
//
// Threading: a Model is used by one thread at a time.  Errors are returned, never thrown.
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/result.h"
#include "common/media/media.h"

namespace h3pipe::model {

// Latent geometry constants (docs/design.md "Data").
inline constexpr int kVideoChannels = 24;
inline constexpr int kAudioChannels = 32;
inline constexpr int kTemporalFactor = 4;
inline constexpr int kSpatialFactor = 16;
inline constexpr int kSampleRate = 48000;
inline constexpr int kAudioHop = 86;
inline constexpr int kRefImageSize = 128;  // reference image is resized to this square
inline constexpr int kRefPatch = 16;       // -> 8x8 = 64 patch tokens

struct ModelConfig {
  int width = 384;  // d_model of the text encoder and the DiT
  int depth = 10;   // DiT blocks
  int heads = 3;    // attention heads (width / heads = head dim)
  int mlp_ratio = 4;
  int text_layers = 2;
  int cond_tokens = 128;                 // prompt bytes are truncated/padded to this many tokens
  std::array<int, 3> patch = {1, 2, 2};  // (t, h, w) patch of the video latent; t must be 1
  int audio_patch = 4;                   // audio latent steps per token
  // Decoder channels at 1/16, 1/8, 1/4, 1/2 and full resolution (exactly 5).
  std::vector<int> vae_channels = {192, 128, 64, 32, 16};
  // Audio decoder channels at latent rate, 2x, and 86x (exactly 3).
  std::vector<int> audio_channels = {128, 64, 32};
  int threads = 2;             // worker threads (OpenBLAS itself is pinned to 1 per call)
  int segment_frames = 0;      // latent frames per decode segment; 0 = largest under the budget
  int overlap = 8;             // spatial tiles: latent pixels of context decoded on each side
                               // (> 6 = the decoder's receptive radius -> exact seams)
  int memory_budget_mb = 512;  // decoder working-set budget
  std::uint64_t seed = 0;      // seeded ("dummy") weights
  std::string weights_file;    // safetensors file; empty = seeded weights
  double flow_shift = 3.0;     // timestep shift of the flow-matching schedule
  // "cpu", "cuda" (the pool's first GPU, else device 0) or "cuda:N": the sampler and both
  // decoders on that GPU through the device backend (cuda/backend.h; the text encoder stays on
  // the CPU).  UNRUN on a GPU so far: docs/model.md "Device backend".
  std::string device = "cpu";
  // Device backend: GEMM algorithms without atomics-based split-K reductions, so the same call
  // on the same GPU gives the same bytes (the CPU path is always deterministic).
  bool deterministic = false;
  // Decoder weights rounded at load to a reduced precision (precision.h): "f32" (none), "bf16",
  // "fp16", or "int8" (per-output-channel symmetric, 1-D tensors kept).  Arithmetic stays f32:
  // it changes the numerics of the decode, not its cost (for `h3pipe compare`, docs/compare.md).
  std::string decoder_precision = "f32";
};

// True when this build has the CUDA device backend (H3PIPE_CUDA).
bool cuda_built();

// Strict parse of the runtime `settings` object: unknown keys and wrong types are errors naming
// "<path_prefix>/<key>", all collected in one error (code "config.invalid").  Keys in
// `extra_keys` are tolerated (the runtime adapter's own settings).
Result<ModelConfig> parse_config(const nlohmann::json& settings, std::string_view path_prefix,
                                 std::span<const std::string_view> extra_keys = {});
nlohmann::json config_to_json(const ModelConfig& c);

// Latent geometry of a clip: video (1, 24, t, h, w), audio (1, 32, 2, audio_len).
struct LatentDims {
  int t = 0, h = 0, w = 0;
  int audio_len = 0;
  std::int64_t video_numel() const { return std::int64_t{kVideoChannels} * t * h * w; }
  std::int64_t audio_numel() const { return std::int64_t{kAudioChannels} * 2 * audio_len; }
};
// t = (frames-1)/4+1, h = height/16, w = width/16, audio_len = ceil(frames/fps*48000/86)
// (the same rule as latent::Geometry::for_job).
LatentDims latent_dims(int width, int height, int frames, int fps);
// PCM samples per channel of a clip: frames * 48000 / fps (floor).
std::int64_t audio_samples(int frames, int fps);

// A dense float32 tensor, row-major.
struct Tensor {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

// How decode_video will cut a clip (for tests, benchmarks and the receipt).
struct DecodePlan {
  int segment_frames = 0;      // latent frames per segment
  int tile_h = 0, tile_w = 0;  // latent pixels per tile (core, without overlap)
  int tiles = 1;
  std::uint64_t segment_bytes = 0;  // estimated peak working set of one segment/tile
  std::uint64_t whole_bytes = 0;    // estimated working set of a whole-clip, untiled decode
};

using FrameSink = std::function<Status(std::span<const std::uint8_t> rgb24)>;
using CancelFn = std::function<bool()>;
// Told after each sampling step: steps done (1..steps), the total, and the video latent after that
// step ((24, t, h, w) floats, valid during the call; nullptr on the device backend, whose latent
// stays on the GPU).  Called on the sampling thread, between steps: keep it cheap.
using StepFn = std::function<void(std::uint32_t done, std::uint32_t steps, const float* video)>;

// Which networks a process needs: a decoder service keeps only the VAE and audio decoder
// weights in memory (a weights file is still validated whole).
enum Parts : unsigned { kEncoder = 1, kSampler = 2, kDecoder = 4, kAllParts = 7 };

class Model final {
 public:
  static Result<std::unique_ptr<Model>> load(const ModelConfig& config, unsigned parts = kAllParts);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  std::string device() const;  // "cpu" or "cuda:0"

  // Calling a network whose part was not loaded returns "runtime.permanent.config".

  // Conditioning tokens (N, D): N = cond_tokens (+64 with a reference image).
  Result<Tensor> encode(std::string_view prompt, const media::Image* reference);

  // Flow-matching Euler sampling from noise seeded by `seed`.  cond is (N, width).  Outputs are
  // resized to dims.video_numel() / dims.audio_numel(), layouts (24, t, h, w) and (32, 2, L).
  Status sample(const Tensor& cond, const LatentDims& dims, std::uint32_t steps, std::uint64_t seed,
                std::vector<float>& video_out, std::vector<float>& audio_out,
                const CancelFn& cancelled = {}, const StepFn& on_step = {});

  // Decodes exactly `frames` RGB24 frames of out_w x out_h (<= 16*dims), streaming each frame to
  // on_frame in order as soon as it is produced.  The causal decoder yields 1 + 4*(t-1) frames;
  // fewer are trimmed, missing ones (at most 3) repeat the last frame.
  Status decode_video(const float* video, const LatentDims& dims, int frames, int out_w, int out_h,
                      const FrameSink& on_frame, const CancelFn& cancelled = {});

  // Interleaved stereo float PCM at 48 kHz, exactly samples_per_channel * 2 values.
  Status decode_audio(const float* audio, const LatentDims& dims, std::int64_t samples_per_channel,
                      std::vector<float>& pcm_out);

  DecodePlan plan_decode(const LatentDims& dims, int out_w, int out_h) const;

  // GEMM work of the last encode/sample/decode_* call, in GFLOP (2*M*N*K per product).
  double last_gflop() const;
  // Parameter count.
  std::int64_t parameters() const;
  // Device backend only (0 on the CPU): bytes of resident weights, and the peak of the
  // backend's own device allocations since load (weights, activations, workspaces).
  std::uint64_t device_weight_bytes() const;
  std::uint64_t device_peak_bytes() const;

  // Writes this model's weights as a safetensors file (tests, exporting seeded weights); all
  // parts must be loaded.
  Status save_weights(const std::filesystem::path& path) const;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Tool: seeded weights of `config` (config.seed) written to a safetensors file.
Status save_seeded_weights(const ModelConfig& config, const std::filesystem::path& path);

}  // namespace h3pipe::model
