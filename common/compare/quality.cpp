// PSNR and SSIM through FFmpeg's filters; pixel statistics over RGB24; PCM differences.
#include "common/compare/quality.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <numbers>
#include <string>

#include "common/compare/libav.h"

extern "C" {
#include <libavfilter/buffersink.h>
#include <libavutil/dict.h>
}

namespace h3pipe::compare {

using namespace detail;

namespace {

// A value inside a filter's arguments inside a filtergraph: the two levels of escaping of
// FFmpeg's filter documentation ("Notes on filtergraph escaping").
std::string escape(const std::string& s, std::string_view specials) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\' || specials.find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}
std::string movie_arg(const std::filesystem::path& p) {
  return escape(escape(p.string(), "':"), "'[],;");
}

double meta(AVFrame* f, const char* key, double fallback) {
  const AVDictionaryEntry* e = av_dict_get(f->metadata, key, nullptr, 0);
  if (!e) return fallback;
  const std::string v = e->value;
  if (v == "inf") return kInf;
  return std::strtod(v.c_str(), nullptr);
}

}  // namespace

Result<std::vector<FilterFrame>> psnr_ssim(const std::filesystem::path& reference,
                                           const std::filesystem::path& candidate) {
  auto ferr = [&](std::string_view what, int rc) {
    return make_error(errc::compare::kFilter, "psnr/ssim of {} against {}: {}: {}",
                      candidate.string(), reference.string(), what, av_text(rc));
  };
  {
    int w[2], h[2];
    for (int i = 0; i < 2; ++i) {
      auto r = VideoReader::open(i ? candidate : reference);
      if (!r) return r.error();
      w[i] = (*r)->width();
      h[i] = (*r)->height();
    }
    if (w[0] != w[1] || h[0] != h[1])
      return make_error(errc::compare::kMismatch, "{} is {}x{}, its reference {} is {}x{}",
                        candidate.string(), w[1], h[1], reference.string(), w[0], h[0]);
  }
  Ptr<AVFilterGraph> graph(avfilter_graph_alloc());
  if (!graph) return ferr("avfilter_graph_alloc", AVERROR(ENOMEM));
  graph->nb_threads = 1;
  AVFilterContext* sink = nullptr;
  int rc = avfilter_graph_create_filter(&sink, avfilter_get_by_name("buffersink"), "out", nullptr,
                                        nullptr, graph.get());
  if (rc < 0) return ferr("buffersink", rc);
  // psnr passes its first input through with the frame's statistics in its metadata; ssim adds
  // its own to the same frame.  shortest=1: a frame missing on either side ends the comparison
  // (the frame counts are checked by pixel_compare).
  const std::string desc = fmt::format(
      "movie={},format=yuv420p[c];movie={},format=yuv420p,split[r1][r2];"
      "[c][r1]psnr=shortest=1:repeatlast=0[p];[p][r2]ssim=shortest=1:repeatlast=0",
      movie_arg(candidate), movie_arg(reference));
  AVFilterInOut* in = avfilter_inout_alloc();
  if (!in) return ferr("avfilter_inout_alloc", AVERROR(ENOMEM));
  in->name = av_strdup("out");
  in->filter_ctx = sink;
  in->pad_idx = 0;
  in->next = nullptr;
  AVFilterInOut* outs = nullptr;
  rc = avfilter_graph_parse_ptr(graph.get(), desc.c_str(), &in, &outs, nullptr);
  Ptr<AVFilterInOut> in_owner(in), outs_owner(outs);
  if (rc < 0) return ferr("avfilter_graph_parse_ptr", rc);
  if ((rc = avfilter_graph_config(graph.get(), nullptr)) < 0)
    return ferr("avfilter_graph_config", rc);
  std::vector<FilterFrame> out;
  Ptr<AVFrame> f(av_frame_alloc());
  for (;;) {
    rc = av_buffersink_get_frame(sink, f.get());
    if (rc == AVERROR_EOF) break;
    if (rc < 0) return ferr("av_buffersink_get_frame", rc);
    FilterFrame ff;
    ff.mse = meta(f.get(), "lavfi.psnr.mse_avg", NAN);
    ff.psnr_db = meta(f.get(), "lavfi.psnr.psnr_avg", NAN);
    ff.ssim = meta(f.get(), "lavfi.ssim.All", NAN);
    av_frame_unref(f.get());
    if (std::isnan(ff.mse) || std::isnan(ff.psnr_db) || std::isnan(ff.ssim))
      return make_error(errc::compare::kFilter,
                        "psnr/ssim of {}: frame {} carries no lavfi.psnr / lavfi.ssim metadata",
                        candidate.string(), out.size());
    if (ff.mse == 0) ff.psnr_db = kInf;
    out.push_back(ff);
  }
  return out;
}

FrameLook look(const std::vector<std::uint8_t>& rgb) {
  const std::size_t n = rgb.size() / 3;
  std::size_t black = 0, sat = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
    if (r <= kBlackLevel && g <= kBlackLevel && b <= kBlackLevel) ++black;
    if (r >= kSaturatedLevel || g >= kSaturatedLevel || b >= kSaturatedLevel) ++sat;
  }
  FrameLook l;
  if (n) {
    l.black_share = static_cast<double>(black) / n;
    l.saturated_share = static_cast<double>(sat) / n;
  }
  return l;
}

Result<std::vector<PixelFrame>> pixel_compare(const std::filesystem::path& reference,
                                              const std::filesystem::path& candidate) {
  auto ref = VideoReader::open(reference);
  if (!ref) return ref.error();
  auto cand = VideoReader::open(candidate);
  if (!cand) return cand.error();
  if ((*ref)->width() != (*cand)->width() || (*ref)->height() != (*cand)->height())
    return make_error(errc::compare::kMismatch, "{} is {}x{}, its reference {} is {}x{}",
                      candidate.string(), (*cand)->width(), (*cand)->height(), reference.string(),
                      (*ref)->width(), (*ref)->height());
  std::vector<PixelFrame> out;
  std::vector<std::uint8_t> a, b;
  for (;;) {
    auto ga = (*ref)->next(a);
    if (!ga) return ga.error();
    auto gb = (*cand)->next(b);
    if (!gb) return gb.error();
    if (*ga != *gb) {
      // Count the rest of the longer one for the message.
      long long more = 1;
      auto& longer = *ga ? **ref : **cand;
      std::vector<std::uint8_t>& buf = *ga ? a : b;
      for (;;) {
        auto g = longer.next(buf);
        if (!g || !*g) break;
        ++more;
      }
      const long long n = static_cast<long long>(out.size());
      return make_error(errc::compare::kMismatch, "{} has {} frames, its reference {} has {}",
                        candidate.string(), *gb ? n + more : n, reference.string(),
                        *ga ? n + more : n);
    }
    if (!*ga) break;
    PixelFrame pf;
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
    pf.mae = a.empty() ? 0 : static_cast<double>(sum) / a.size();
    pf.look = look(b);
    out.push_back(pf);
  }
  return out;
}

namespace {

// In-place radix-2 FFT (size a power of two).
void fft(std::vector<std::complex<double>>& a) {
  const std::size_t n = a.size();
  for (std::size_t i = 1, j = 0; i < n; ++i) {
    std::size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (std::size_t len = 2; len <= n; len <<= 1) {
    const double ang = -2 * std::numbers::pi / static_cast<double>(len);
    const std::complex<double> wl(std::cos(ang), std::sin(ang));
    for (std::size_t i = 0; i < n; i += len) {
      std::complex<double> w(1);
      for (std::size_t k = 0; k < len / 2; ++k, w *= wl) {
        auto u = a[i + k], v = a[i + k + len / 2] * w;
        a[i + k] = u + v;
        a[i + k + len / 2] = u - v;
      }
    }
  }
}

constexpr std::size_t kFft = 1024, kHop = 512;

// Band powers (kLsdBands) of each segment of the mono mix of `pcm`'s first `n` frames.
std::vector<std::vector<double>> band_powers(const Pcm& pcm, std::size_t n) {
  const int ch = pcm.channels;
  std::vector<double> mono(n);
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0;
    for (int c = 0; c < ch; ++c) s += pcm.samples[i * ch + c];
    mono[i] = s / ch;
  }
  const double rate = pcm.sample_rate > 0 ? pcm.sample_rate : 48000;
  const double high = std::min(kLsdHighHz, rate / 2);
  // The FFT bin each band edge falls on (log-spaced); a band narrower than a bin takes one bin.
  std::vector<std::size_t> edge(kLsdBands + 1);
  for (int b = 0; b <= kLsdBands; ++b) {
    const double hz = kLsdLowHz * std::pow(high / kLsdLowHz, static_cast<double>(b) / kLsdBands);
    edge[b] = std::min<std::size_t>(kFft / 2, static_cast<std::size_t>(hz * kFft / rate));
    if (b > 0 && edge[b] <= edge[b - 1]) edge[b] = std::min(kFft / 2, edge[b - 1] + 1);
  }
  std::vector<double> window(kFft);
  for (std::size_t i = 0; i < kFft; ++i)
    window[i] = 0.5 - 0.5 * std::cos(2 * std::numbers::pi * i / kFft);
  const std::size_t segment =
      std::max<std::size_t>(kFft, static_cast<std::size_t>(kLsdSegmentS * rate));
  std::vector<std::vector<double>> out;
  std::vector<std::complex<double>> buf(kFft);
  for (std::size_t seg = 0; seg + kFft <= n; seg += segment) {
    const std::size_t end = std::min(n, seg + segment);
    std::vector<double> bands(kLsdBands, 0);
    int frames = 0;
    for (std::size_t f = seg; f + kFft <= end; f += kHop, ++frames) {
      for (std::size_t i = 0; i < kFft; ++i) buf[i] = mono[f + i] * window[i];
      fft(buf);
      for (int b = 0; b < kLsdBands; ++b)
        for (std::size_t k = edge[b]; k < edge[b + 1]; ++k) bands[b] += std::norm(buf[k]);
    }
    for (auto& v : bands) v /= std::max(frames, 1);
    out.push_back(std::move(bands));
  }
  return out;
}

// Power floor: -120 dB of a full-scale sine's band power, so silence against silence is 0 and
// silence against sound is large but finite.
constexpr double kPowerFloor = 1e-12 * (kFft * kFft / 16.0);

double log_spectral_distance(const Pcm& ref, const Pcm& cand, std::size_t n) {
  const auto a = band_powers(ref, n), b = band_powers(cand, n);
  if (a.empty()) return 0;
  double sum = 0;
  for (std::size_t s = 0; s < a.size(); ++s) {
    double sq = 0;
    for (int k = 0; k < kLsdBands; ++k) {
      const double d = 10 * std::log10((b[s][k] + kPowerFloor) / (a[s][k] + kPowerFloor));
      sq += d * d;
    }
    sum += std::sqrt(sq / kLsdBands);
  }
  return sum / static_cast<double>(a.size());
}

}  // namespace

std::optional<AudioDiff> audio_diff(const Pcm& reference, const Pcm& candidate) {
  if (reference.channels == 0 || candidate.channels == 0 ||
      reference.channels != candidate.channels)
    return std::nullopt;
  const int ch = reference.channels;
  AudioDiff d;
  const std::size_t n = std::min(reference.samples.size(), candidate.samples.size());
  double sig = 0, noise = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = reference.samples[i], e = r - candidate.samples[i];
    sig += r * r;
    noise += e * e;
    d.max_abs = std::max(d.max_abs, std::fabs(e));
  }
  d.samples = static_cast<long long>(n / ch);
  d.length_difference = (static_cast<long long>(candidate.samples.size()) -
                         static_cast<long long>(reference.samples.size())) /
                        ch;
  d.snr_db = noise == 0 ? kInf : sig == 0 ? -kInf : 10 * std::log10(sig / noise);
  d.lsd_db = noise == 0 ? 0 : log_spectral_distance(reference, candidate, n / ch);
  return d;
}

Summary summarize(const std::vector<FilterFrame>& f, const std::vector<PixelFrame>& p) {
  Summary s;
  s.frames = static_cast<long long>(p.size());
  double mse_sum = 0, ssim_sum = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    mse_sum += f[i].mse;
    ssim_sum += f[i].ssim;
    if (f[i].psnr_db < s.psnr_min_db) {
      s.psnr_min_db = f[i].psnr_db;
      s.worst_frame = static_cast<long long>(i);
    }
    if (f[i].ssim < s.ssim_min) {
      s.ssim_min = f[i].ssim;
      s.ssim_worst_frame = static_cast<long long>(i);
    }
  }
  s.identical = mse_sum == 0;
  if (!f.empty()) {
    const double mse = mse_sum / f.size();
    s.psnr_db = mse == 0 ? kInf : 10 * std::log10(255.0 * 255.0 / mse);
    s.ssim_mean = ssim_sum / f.size();
  }
  double mae_sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    mae_sum += p[i].mae;
    s.mae_max = std::max(s.mae_max, p[i].mae);
    if (p[i].look.black()) s.black_frames.push_back(static_cast<long long>(i));
    if (p[i].look.saturated()) s.saturated_frames.push_back(static_cast<long long>(i));
  }
  if (!p.empty()) s.mae = mae_sum / p.size();
  return s;
}

Result<Looks> scan(const std::filesystem::path& movie) {
  auto r = VideoReader::open(movie);
  if (!r) return r.error();
  Looks l;
  std::vector<std::uint8_t> rgb;
  for (;;) {
    auto g = (*r)->next(rgb);
    if (!g) return g.error();
    if (!*g) break;
    const FrameLook fl = look(rgb);
    if (fl.black()) l.black_frames.push_back(l.frames);
    if (fl.saturated()) l.saturated_frames.push_back(l.frames);
    ++l.frames;
  }
  return l;
}

}  // namespace h3pipe::compare
