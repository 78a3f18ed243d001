// Pictures out of a movie and into JPEG (h3pipe-api's content variants, issue #37 item 1): the
// frames of a movie's first video stream decoded to RGB24 (only those asked for are kept), a
// JPEG of an RGB24 image (libav's mjpeg encoder), and a sheet of frames in a grid.
#include <algorithm>
#include <set>

#include "common/media/libav_raii.h"
#include "common/media/media.h"

namespace h3pipe::media {

using namespace detail;

Result<std::vector<Image>> read_frames(const std::filesystem::path& path,
                                       const std::vector<long long>& indices) {
  auto fail = [&](std::string_view what, int rc) {
    return make_error(errc::media::kProbe, "{}: {}: {}", path.string(), what, av_error_text(rc));
  };
  const std::set<long long> want(indices.begin(), indices.end());
  std::vector<Image> out;
  if (want.empty()) return out;
  AVFormatContext* raw = nullptr;
  int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  if (rc < 0) return fail("avformat_open_input", rc);
  InputCtxPtr in(raw);
  if ((rc = avformat_find_stream_info(in.get(), nullptr)) < 0)
    return fail("avformat_find_stream_info", rc);
  const int vi = av_find_best_stream(in.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (vi < 0) return make_error(errc::media::kProbe, "{}: holds no video stream", path.string());
  const AVCodec* codec = avcodec_find_decoder(in->streams[vi]->codecpar->codec_id);
  if (!codec) return make_error(errc::media::kProbe, "{}: no decoder for its video", path.string());
  CodecCtxPtr dec(avcodec_alloc_context3(codec));
  if (!dec) return fail("avcodec_alloc_context3", AVERROR(ENOMEM));
  if ((rc = avcodec_parameters_to_context(dec.get(), in->streams[vi]->codecpar)) < 0)
    return fail("avcodec_parameters_to_context", rc);
  dec->thread_count = 1;
  if ((rc = avcodec_open2(dec.get(), codec, nullptr)) < 0) return fail("avcodec_open2", rc);
  PacketPtr pkt(av_packet_alloc());
  FramePtr frame(av_frame_alloc());
  if (!pkt || !frame) return fail("av_frame_alloc", AVERROR(ENOMEM));
  SwsPtr sws;
  long long index = 0;
  const long long last = *want.rbegin();
  auto take = [&]() -> Status {
    for (;;) {
      const int r = avcodec_receive_frame(dec.get(), frame.get());
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return {};
      if (r < 0) return fail("avcodec_receive_frame", r);
      if (want.count(index)) {
        Image img{frame->width, frame->height, {}};
        img.rgb.resize(static_cast<std::size_t>(img.width) * img.height * 3);
        sws.reset(sws_getCachedContext(sws.release(), frame->width, frame->height,
                                       static_cast<AVPixelFormat>(frame->format), frame->width,
                                       frame->height, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr,
                                       nullptr, nullptr));
        if (!sws) return fail("sws_getCachedContext", AVERROR(EINVAL));
        uint8_t* dst[1] = {img.rgb.data()};
        const int stride[1] = {img.width * 3};
        sws_scale(sws.get(), frame->data, frame->linesize, 0, frame->height, dst, stride);
        out.push_back(std::move(img));
      }
      ++index;
      av_frame_unref(frame.get());
    }
  };
  while (index <= last && (rc = av_read_frame(in.get(), pkt.get())) >= 0) {
    if (pkt->stream_index == vi) {
      const int s = avcodec_send_packet(dec.get(), pkt.get());
      av_packet_unref(pkt.get());
      if (s < 0) return fail("avcodec_send_packet", s);
      H3_TRY(take());
    } else {
      av_packet_unref(pkt.get());
    }
  }
  if (rc < 0 && rc != AVERROR_EOF) return fail("av_read_frame", rc);
  if (index <= last) {  // the frames still inside the decoder
    avcodec_send_packet(dec.get(), nullptr);
    H3_TRY(take());
  }
  if (out.empty()) return make_error(errc::media::kProbe, "{}: no frame decoded", path.string());
  return out;
}

Result<std::string> encode_jpeg(const Image& img, int qscale) {
  auto fail = [&](std::string_view what, int rc) {
    return make_error(errc::media::kImage, "JPEG of {}x{}: {}: {}", img.width, img.height, what,
                      av_error_text(rc));
  };
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_MJPEG);
  if (!codec) return make_error(errc::media::kImage, "JPEG: libav has no mjpeg encoder");
  CodecCtxPtr enc(avcodec_alloc_context3(codec));
  if (!enc) return fail("avcodec_alloc_context3", AVERROR(ENOMEM));
  enc->width = img.width;
  enc->height = img.height;
  enc->pix_fmt = AV_PIX_FMT_YUVJ420P;
  enc->time_base = AVRational{1, 25};
  enc->flags |= AV_CODEC_FLAG_QSCALE;
  enc->global_quality = FF_QP2LAMBDA * std::clamp(qscale, 2, 31);
  int rc = avcodec_open2(enc.get(), codec, nullptr);
  if (rc < 0) return fail("avcodec_open2", rc);
  FramePtr f(av_frame_alloc());
  if (!f) return fail("av_frame_alloc", AVERROR(ENOMEM));
  f->format = enc->pix_fmt;
  f->width = img.width;
  f->height = img.height;
  f->quality = enc->global_quality;
  if ((rc = av_frame_get_buffer(f.get(), 0)) < 0) return fail("av_frame_get_buffer", rc);
  SwsPtr sws(sws_getContext(img.width, img.height, AV_PIX_FMT_RGB24, img.width, img.height,
                            AV_PIX_FMT_YUVJ420P, SWS_BILINEAR, nullptr, nullptr, nullptr));
  if (!sws) return fail("sws_getContext", AVERROR(EINVAL));
  const uint8_t* src[1] = {img.rgb.data()};
  const int stride[1] = {img.width * 3};
  sws_scale(sws.get(), src, stride, 0, img.height, f->data, f->linesize);
  if ((rc = avcodec_send_frame(enc.get(), f.get())) < 0) return fail("avcodec_send_frame", rc);
  avcodec_send_frame(enc.get(), nullptr);
  PacketPtr pkt(av_packet_alloc());
  std::string out;
  while ((rc = avcodec_receive_packet(enc.get(), pkt.get())) >= 0) {
    out.append(reinterpret_cast<const char*>(pkt->data), static_cast<std::size_t>(pkt->size));
    av_packet_unref(pkt.get());
  }
  if (rc != AVERROR_EOF && rc != AVERROR(EAGAIN)) return fail("avcodec_receive_packet", rc);
  if (out.empty()) return make_error(errc::media::kImage, "JPEG: the encoder gave no picture");
  return out;
}

Image sprite_sheet(const std::vector<Image>& frames, int tile_width, int columns) {
  Image sheet;
  if (frames.empty() || tile_width <= 0 || columns <= 0) return sheet;
  const Image& f0 = frames.front();
  // Even tile sizes (yuv420p halves them), the first frame's aspect.
  const int tw = std::max(2, tile_width & ~1);
  const int th = std::max(
      2, static_cast<int>(static_cast<long long>(tw) * f0.height / std::max(1, f0.width)) & ~1);
  const int cols = std::min<int>(columns, static_cast<int>(frames.size()));
  const int rows = (static_cast<int>(frames.size()) + cols - 1) / cols;
  sheet.width = tw * cols;
  sheet.height = th * rows;
  sheet.rgb.assign(static_cast<std::size_t>(sheet.width) * sheet.height * 3, 0);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const Image tile = resize_bilinear(frames[i], tw, th);
    const int x0 = static_cast<int>(i % cols) * tw, y0 = static_cast<int>(i / cols) * th;
    for (int y = 0; y < th; ++y)
      std::copy_n(tile.rgb.data() + static_cast<std::size_t>(y) * tw * 3, tw * 3,
                  sheet.rgb.data() + (static_cast<std::size_t>(y0 + y) * sheet.width + x0) * 3);
  }
  return sheet;
}

}  // namespace h3pipe::media
