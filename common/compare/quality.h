#pragma once
// How far one decoded movie is from another: FFmpeg's own psnr and ssim filters (libavfilter,
// per-frame statistics read from each frame's metadata), and over the RGB24 pixels the mean
// absolute error on 0-255 and the frames that are black or saturated (overflow).  Audio: SNR, the
// largest absolute difference and the log-spectral distance of the decoded PCM.  Errors:
// compare.filter (the filter graph), compare.media (a file libav cannot read), compare.mismatch
// (different sizes or frame counts).
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include "common/compare/frames.h"
#include "common/core/result.h"

namespace h3pipe::compare {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// One frame of the filters' output: lavfi.psnr.mse_avg, lavfi.psnr.psnr_avg (+inf when the
// frames are equal) and lavfi.ssim.All (1 when equal).
struct FilterFrame {
  double mse = 0, psnr_db = kInf, ssim = 1;
};
// Runs `movie=CANDIDATE [c]; movie=REFERENCE [r]; [c][r] psnr, ssim` (both in yuv420p) and
// returns one entry per frame pair.  Sizes must match (compare.mismatch otherwise).
Result<std::vector<FilterFrame>> psnr_ssim(const std::filesystem::path& reference,
                                           const std::filesystem::path& candidate);

// A frame is black when at least kBlackShare of its pixels have every channel <= kBlackLevel,
// saturated (clipped: what an overflowing decoder gives) when at least kSaturatedShare of its
// pixels have a channel at >= kSaturatedLevel.  A black frame is never also saturated.
inline constexpr int kBlackLevel = 16;
inline constexpr double kBlackShare = 0.98;
inline constexpr int kSaturatedLevel = 250;
inline constexpr double kSaturatedShare = 0.5;

// What one decoded frame is, alone.
struct FrameLook {
  double black_share = 0;      // pixels with every channel <= kBlackLevel
  double saturated_share = 0;  // pixels with a channel >= kSaturatedLevel
  bool black() const { return black_share >= kBlackShare; }
  bool saturated() const { return !black() && saturated_share >= kSaturatedShare; }
};
FrameLook look(const std::vector<std::uint8_t>& rgb);

// Pixels of a candidate against its reference, frame by frame.
struct PixelFrame {
  double mae = 0;  // mean |ref - cand| over every RGB value, 0-255
  FrameLook look;  // the candidate's own frame
};
Result<std::vector<PixelFrame>> pixel_compare(const std::filesystem::path& reference,
                                              const std::filesystem::path& candidate);

// Decoded PCM against the reference's: SNR in dB (+inf when equal) and the largest |difference|
// over the samples both have (full scale 1.0).  nullopt when either has no audio.
// lsd_db, the log-spectral distance (0 when the spectra are equal): the RMS over kLsdBands
// log-spaced bands (kLsdLowHz .. min(kLsdHighHz, Nyquist)) of 10 log10(candidate / reference band
// power), each side's power a Welch average (Hann, 1024-sample frames, hop 512) over one
// kLsdSegmentS segment of the mono mix, then the mean over segments.  Unlike the SNR it does not
// compare waveforms: AAC codes noise-like bands parametrically (a new waveform with the same
// envelope), so the builtin model's noise-like audio gives an SNR near 1 dB for any change at all,
// while the LSD stays near 0 for an inaudible change and grows with what a listener hears: a gain
// g everywhere gives |20 log10 g| exactly, a moved tone more than 15 dB
// (docs/compare.md "Audio").
inline constexpr int kLsdBands = 32;
inline constexpr double kLsdLowHz = 60, kLsdHighHz = 16000, kLsdSegmentS = 0.5;
struct AudioDiff {
  double snr_db = kInf, max_abs = 0;
  double lsd_db = 0;
  long long samples = 0;            // compared, per channel
  long long length_difference = 0;  // candidate minus reference, per channel
};
std::optional<AudioDiff> audio_diff(const Pcm& reference, const Pcm& candidate);

// The per-frame figures summed up for one decoder against the reference.
struct Summary {
  long long frames = 0;
  bool identical = false;      // every frame pair equal (all MSE 0)
  double psnr_db = kInf;       // FFmpeg's average: 10 log10(255^2 / mean MSE)
  double psnr_min_db = kInf;   // the worst frame's
  long long worst_frame = -1;  // lowest PSNR (first of equals); -1 when identical
  double ssim_mean = 1, ssim_min = 1;
  long long ssim_worst_frame = -1;
  double mae = 0, mae_max = 0;                            // mean over frames, worst frame
  std::vector<long long> black_frames, saturated_frames;  // the candidate's own
};
Summary summarize(const std::vector<FilterFrame>& f, const std::vector<PixelFrame>& p);

// The same black/saturated scan for a movie alone (the reference's own frames).
struct Looks {
  long long frames = 0;
  std::vector<long long> black_frames, saturated_frames;
};
Result<Looks> scan(const std::filesystem::path& movie);

}  // namespace h3pipe::compare
