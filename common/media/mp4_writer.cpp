// Streaming MP4 writer on libav: libx264 (yuv420p) + native AAC, faststart.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/media/libav_raii.h"
#include "common/media/media.h"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/dict.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
}

namespace h3pipe::media {

using namespace detail;

struct Mp4Writer::Impl {
  std::string path;
  VideoParams vp;
  AudioParams ap;
  OutputCtxPtr fmt;
  CodecCtxPtr venc, aenc;
  AVStream* vst = nullptr;
  AVStream* ast = nullptr;
  FramePtr vframe, aframe;
  PacketPtr pkt;
  SwsPtr sws;
  std::vector<float> audio_buf;  // interleaved; samples before audio_off are already encoded
  std::size_t audio_off = 0;     // floats consumed from the front (compacted once per add_audio)
  std::int64_t next_vpts = 0, next_apts = 0, audio_in = 0;
  bool header_written = false, finished = false, failed = false;

  Error err(std::string_view what, int rc) const {
    return make_error(errc::media::kMp4, "mp4 writer {}: {}: {}", path, what, av_error_text(rc));
  }
  Error err(std::string_view what) const {
    return make_error(errc::media::kMp4, "mp4 writer {}: {}", path, what);
  }

  // Sends `frame` (nullptr = flush) and writes every packet the encoder yields.
  Status encode(AVCodecContext* enc, AVStream* st, AVFrame* frame) {
    int rc = avcodec_send_frame(enc, frame);
    if (rc < 0) return err(fmt::format("avcodec_send_frame({})", enc->codec->name), rc);
    for (;;) {
      rc = avcodec_receive_packet(enc, pkt.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return Status::Ok();
      if (rc < 0) return err(fmt::format("avcodec_receive_packet({})", enc->codec->name), rc);
      av_packet_rescale_ts(pkt.get(), enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      rc = av_interleaved_write_frame(fmt.get(), pkt.get());  // takes the packet's reference
      if (rc < 0) return err("av_interleaved_write_frame", rc);
    }
  }

  // Encodes one full AAC frame (or a final short one) from the front of audio_buf.
  Status encode_audio_frame(int nb) {
    int rc = av_frame_make_writable(aframe.get());
    if (rc < 0) return err("av_frame_make_writable(audio)", rc);
    aframe->nb_samples = nb;
    auto* l = reinterpret_cast<float*>(aframe->data[0]);
    auto* r = reinterpret_cast<float*>(aframe->data[1]);
    const float* in = audio_buf.data() + audio_off;
    for (int i = 0; i < nb; ++i) {
      l[i] = std::clamp(in[2 * i], -1.0f, 1.0f);
      r[i] = std::clamp(in[2 * i + 1], -1.0f, 1.0f);
    }
    aframe->pts = next_apts;
    next_apts += nb;
    // Consumed by moving an offset, not by erasing the front: erasing made a long add_audio
    // quadratic in its length.
    audio_off += 2 * static_cast<std::size_t>(nb);
    return encode(aenc.get(), ast, aframe.get());
  }

  std::size_t audio_buffered() const { return audio_buf.size() - audio_off; }
  void compact_audio() {
    audio_buf.erase(audio_buf.begin(), audio_buf.begin() + static_cast<std::ptrdiff_t>(audio_off));
    audio_off = 0;
  }
};

Mp4Writer::Mp4Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Mp4Writer::~Mp4Writer() = default;  // Impl's RAII members close the file without a trailer.

Result<std::unique_ptr<Mp4Writer>> Mp4Writer::open(const std::filesystem::path& path,
                                                   const VideoParams& vp, const AudioParams& ap) {
  auto im = std::make_unique<Impl>();
  im->path = path.string();
  im->vp = vp;
  im->ap = ap;
  if (vp.width <= 0 || vp.height <= 0 || vp.width % 2 || vp.height % 2)
    return im->err(fmt::format("video size {}x{} must be positive and even", vp.width, vp.height));
  if (vp.fps <= 0 || vp.fps > 1000) return im->err(fmt::format("fps {} out of range", vp.fps));
  if (ap.channels != 2) return im->err(fmt::format("{} audio channels: only stereo", ap.channels));
  if (ap.sample_rate <= 0 || ap.bitrate <= 0) return im->err("audio rate and bitrate must be > 0");

  AVFormatContext* raw = nullptr;
  int rc = avformat_alloc_output_context2(&raw, nullptr, "mp4", im->path.c_str());
  if (rc < 0 || !raw) return im->err("avformat_alloc_output_context2", rc);
  im->fmt.reset(raw);
  const bool global_header = im->fmt->oformat->flags & AVFMT_GLOBALHEADER;

  // Video: libx264, yuv420p, time base 1/fps.
  const AVCodec* vc = avcodec_find_encoder_by_name("libx264");
  if (!vc) return im->err("libx264 encoder not available in this libavcodec");
  im->venc.reset(avcodec_alloc_context3(vc));
  if (!im->venc) return im->err("avcodec_alloc_context3(libx264)", AVERROR(ENOMEM));
  AVCodecContext* v = im->venc.get();
  v->width = vp.width;
  v->height = vp.height;
  v->pix_fmt = AV_PIX_FMT_YUV420P;
  v->time_base = AVRational{1, vp.fps};
  v->framerate = AVRational{vp.fps, 1};
  v->gop_size = vp.fps * 2;
  if (global_header) v->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (vp.threads < 0) return im->err(fmt::format("{} encoder threads", vp.threads));
  v->thread_count = vp.threads;
  av_opt_set(v->priv_data, "preset", vp.preset.c_str(), 0);
  if (!vp.tune.empty() && (rc = av_opt_set(v->priv_data, "tune", vp.tune.c_str(), 0)) < 0)
    return im->err(fmt::format("x264 tune \"{}\"", vp.tune), rc);
  av_opt_set(v->priv_data, "crf", std::to_string(vp.crf).c_str(), 0);
  if ((rc = avcodec_open2(v, vc, nullptr)) < 0)
    return im->err(
        fmt::format("avcodec_open2(libx264, preset \"{}\", tune \"{}\")", vp.preset, vp.tune), rc);
  im->vst = avformat_new_stream(im->fmt.get(), nullptr);
  if (!im->vst) return im->err("avformat_new_stream(video)", AVERROR(ENOMEM));
  im->vst->time_base = v->time_base;
  im->vst->avg_frame_rate = v->framerate;
  im->vst->r_frame_rate = v->framerate;
  if ((rc = avcodec_parameters_from_context(im->vst->codecpar, v)) < 0)
    return im->err("avcodec_parameters_from_context(video)", rc);

  // Audio: native AAC, planar float.
  const AVCodec* ac = avcodec_find_encoder_by_name("aac");
  if (!ac) return im->err("aac encoder not available in this libavcodec");
  im->aenc.reset(avcodec_alloc_context3(ac));
  if (!im->aenc) return im->err("avcodec_alloc_context3(aac)", AVERROR(ENOMEM));
  AVCodecContext* a = im->aenc.get();
  a->sample_fmt = AV_SAMPLE_FMT_FLTP;
  a->sample_rate = ap.sample_rate;
  a->bit_rate = ap.bitrate;
  av_channel_layout_default(&a->ch_layout, 2);
  a->time_base = AVRational{1, ap.sample_rate};
  if (global_header) a->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if ((rc = av_opt_set(a->priv_data, "aac_coder", ap.coder.c_str(), 0)) < 0)
    return im->err(fmt::format("aac coder \"{}\"", ap.coder), rc);
  if ((rc = avcodec_open2(a, ac, nullptr)) < 0) return im->err("avcodec_open2(aac)", rc);
  im->ast = avformat_new_stream(im->fmt.get(), nullptr);
  if (!im->ast) return im->err("avformat_new_stream(audio)", AVERROR(ENOMEM));
  im->ast->time_base = a->time_base;
  if ((rc = avcodec_parameters_from_context(im->ast->codecpar, a)) < 0)
    return im->err("avcodec_parameters_from_context(audio)", rc);

  // Frames and converter.
  im->vframe.reset(av_frame_alloc());
  im->aframe.reset(av_frame_alloc());
  im->pkt.reset(av_packet_alloc());
  if (!im->vframe || !im->aframe || !im->pkt) return im->err("av_frame_alloc", AVERROR(ENOMEM));
  im->vframe->format = v->pix_fmt;
  im->vframe->width = v->width;
  im->vframe->height = v->height;
  if ((rc = av_frame_get_buffer(im->vframe.get(), 0)) < 0) return im->err("video frame buffer", rc);
  im->aframe->format = a->sample_fmt;
  im->aframe->nb_samples = a->frame_size > 0 ? a->frame_size : 1024;
  im->aframe->sample_rate = a->sample_rate;
  if ((rc = av_channel_layout_copy(&im->aframe->ch_layout, &a->ch_layout)) < 0)
    return im->err("av_channel_layout_copy", rc);
  if ((rc = av_frame_get_buffer(im->aframe.get(), 0)) < 0) return im->err("audio frame buffer", rc);
  im->sws.reset(sws_getContext(vp.width, vp.height, AV_PIX_FMT_RGB24, vp.width, vp.height,
                               AV_PIX_FMT_YUV420P, SWS_BICUBIC, nullptr, nullptr, nullptr));
  if (!im->sws) return im->err("sws_getContext(rgb24 -> yuv420p) failed");

  // File and header (faststart: the muxer rewrites moov to the front at the trailer).
  if ((rc = avio_open(&im->fmt->pb, im->path.c_str(), AVIO_FLAG_WRITE)) < 0)
    return im->err("avio_open", rc);
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "movflags", "+faststart", 0);
  rc = avformat_write_header(im->fmt.get(), &opts);
  av_dict_free(&opts);
  if (rc < 0) return im->err("avformat_write_header", rc);
  im->header_written = true;
  return std::unique_ptr<Mp4Writer>(new Mp4Writer(std::move(im)));
}

Status Mp4Writer::add_frame(std::span<const std::uint8_t> rgb) {
  Impl& im = *impl_;
  if (im.finished || im.failed) return im.err("add_frame after finish or error");
  const std::size_t want = static_cast<std::size_t>(im.vp.width) * im.vp.height * 3;
  if (rgb.size() != want)
    return im.err(fmt::format("frame has {} bytes, expected {}x{}x3 = {}", rgb.size(), im.vp.width,
                              im.vp.height, want));
  int rc = av_frame_make_writable(im.vframe.get());
  if (rc < 0) return im.err("av_frame_make_writable(video)", rc);
  const std::uint8_t* src[1] = {rgb.data()};
  const int src_stride[1] = {im.vp.width * 3};
  sws_scale(im.sws.get(), src, src_stride, 0, im.vp.height, im.vframe->data, im.vframe->linesize);
  im.vframe->pts = im.next_vpts++;
  Status s = im.encode(im.venc.get(), im.vst, im.vframe.get());
  if (!s) im.failed = true;
  return s;
}

Status Mp4Writer::add_audio(std::span<const float> samples) {
  Impl& im = *impl_;
  if (im.finished || im.failed) return im.err("add_audio after finish or error");
  if (samples.size() % 2) return im.err("interleaved stereo audio needs an even sample count");
  im.audio_buf.insert(im.audio_buf.end(), samples.begin(), samples.end());
  im.audio_in += static_cast<std::int64_t>(samples.size() / 2);
  const int fs = im.aenc->frame_size > 0 ? im.aenc->frame_size : 1024;
  while (im.audio_buffered() >= 2 * static_cast<std::size_t>(fs)) {
    Status s = im.encode_audio_frame(fs);
    if (!s) {
      im.failed = true;
      return s;
    }
  }
  im.compact_audio();
  return Status::Ok();
}

Status Mp4Writer::finish() {
  Impl& im = *impl_;
  if (im.finished) return im.err("finish called twice");
  if (im.failed) return im.err("finish after an earlier error");
  im.finished = true;
  if (im.audio_buffered() > 0) {
    // A short last frame is accepted when the encoder says so (native AAC does); otherwise the
    // remainder is padded with silence to a full frame.
    const int fs = im.aenc->frame_size > 0 ? im.aenc->frame_size : 1024;
    const int nb = static_cast<int>(im.audio_buffered() / 2);
    im.audio_buf.resize(im.audio_off + 2 * static_cast<std::size_t>(fs), 0.0f);
    const int caps = im.aenc->codec->capabilities;
    const bool short_ok = caps & (AV_CODEC_CAP_SMALL_LAST_FRAME | AV_CODEC_CAP_VARIABLE_FRAME_SIZE);
    H3_TRY(im.encode_audio_frame(short_ok ? nb : fs));
  }
  H3_TRY(im.encode(im.venc.get(), im.vst, nullptr));
  H3_TRY(im.encode(im.aenc.get(), im.ast, nullptr));
  int rc = av_write_trailer(im.fmt.get());
  if (rc < 0) return im.err("av_write_trailer", rc);
  rc = avio_closep(&im.fmt->pb);
  if (rc < 0) return im.err("avio_close", rc);
  return Status::Ok();
}

std::int64_t Mp4Writer::frames_written() const {
  return impl_->next_vpts;
}
std::int64_t Mp4Writer::audio_samples_written() const {
  return impl_->audio_in;
}

VideoParams fast_video_params(int width, int height, int fps) {
  VideoParams vp{width, height, fps};
  vp.preset = "ultrafast";
  if (static_cast<long long>(width) * height <= kSingleThreadPixels) {
    // Small clips: opening the encoder dominates; one thread, no frame delay.
    vp.threads = 1;
    vp.tune = "zerolatency";
  }  // larger: x264's frame threads (sliced zerolatency threads encode slower)
  return vp;
}

AudioParams fast_audio_params() {
  AudioParams ap;
  // The fast coder's cost grows steeply with the bitrate (bench_mp4, 0.75 s stereo: ~2.5 ms at
  // 48 kbit/s, ~7 ms at 64, ~25 ms at 96; twoloop ~20-35 ms at any of them).
  ap.coder = "fast";
  ap.bitrate = 48000;
  return ap;
}

Status warm_up() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec);
  if (ec) return make_error(errc::media::kMp4, "warm-up: no temp directory: {}", ec.message());
  std::random_device rd;
  const fs::path path = dir / fmt::format("h3pipe-warm-up-{}-{:08x}.mp4", ::getpid(), rd());
  Status s = [&]() -> Status {
    // Big enough that a small clip's buffers come from heap pages this already touched.
    constexpr int kSide = 128, kFps = 24;
    auto w = Mp4Writer::open(path, fast_video_params(kSide, kSide, kFps), fast_audio_params());
    if (!w.ok()) return w.error();
    std::vector<std::uint8_t> rgb(kSide * kSide * 3, 128);
    std::vector<float> pcm(2 * 48000 / kFps, 0.0f);
    for (int f = 0; f < 2; ++f) {
      H3_TRY((*w)->add_frame(rgb));
      H3_TRY((*w)->add_audio(pcm));
    }
    return (*w)->finish();
  }();
  fs::remove(path, ec);
  return s;
}

void set_libav_log_level(int level) {
  av_log_set_level(level);
}

}  // namespace h3pipe::media
