#pragma once
// RAII owners of the libav objects common/compare touches (docs/design.md, convention 12).  Private
// to common/compare.
#include <memory>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavfilter/avfilter.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace h3pipe::compare::detail {

inline std::string av_text(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

struct Del {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
  void operator()(AVFrame* f) const { av_frame_free(&f); }
  void operator()(AVPacket* p) const { av_packet_free(&p); }
  void operator()(SwsContext* s) const { sws_freeContext(s); }
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
  void operator()(AVFilterGraph* g) const { avfilter_graph_free(&g); }
  void operator()(AVFilterInOut* io) const { avfilter_inout_free(&io); }
};
template <class T>
using Ptr = std::unique_ptr<T, Del>;

}  // namespace h3pipe::compare::detail
