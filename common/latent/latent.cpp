#include "common/latent/latent.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>

#include "common/artifacts/artifacts.h"
#include "common/latent/check.h"
#include "common/latent/safetensors.h"

namespace h3pipe::latent {
namespace {

// A file descriptor that closes itself (docs/design.md, convention 12).
class Fd final {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status pread_all(int fd, std::uint8_t* dst, std::uint64_t len, std::uint64_t off,
                 const std::filesystem::path& p) {
  while (len > 0) {
    ssize_t n = ::pread(fd, dst, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return make_error(errc::io::kRead, "cannot read {}: {}", p.string(), std::strerror(errno));
    if (n == 0)
      return make_error(errc::latent::kTruncated, "{} shrank while being read", p.string());
    dst += n;
    off += static_cast<std::uint64_t>(n);
    len -= static_cast<std::uint64_t>(n);
  }
  return {};
}

// Opens a file and validates its prefix and header, reading only those bytes.
struct OpenedFile {
  std::unique_ptr<Fd> fd;
  st::Layout layout;
};

Result<OpenedFile> open_validated(const std::filesystem::path& path) {
  // O_NONBLOCK: a FIFO at the path is refused by the fstat below instead of hanging the open.
  auto fd =
      std::make_unique<Fd>(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd->get() < 0)
    return make_error(errc::io::kOpen, "cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd->get(), &sb) != 0)
    return make_error(errc::io::kStat, "cannot stat {}: {}", path.string(), std::strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return make_error(errc::latent::kNotAFile, "{} is not a regular file", path.string());
  const auto size = static_cast<std::uint64_t>(sb.st_size);
  std::uint8_t prefix[8] = {};
  if (size >= 8) H3_TRY(pread_all(fd->get(), prefix, 8, 0, path));
  auto n = st::check_prefix({prefix, size >= 8 ? 8u : 0u}, size);
  if (!n.ok()) return n.error();
  std::vector<std::uint8_t> header(*n);  // <= 1 MiB, and within the file
  H3_TRY(pread_all(fd->get(), header.data(), header.size(), 8, path));
  auto layout = st::parse_header(header, size - 8 - *n);
  if (!layout.ok()) return layout.error();
  return OpenedFile{std::move(fd), std::move(*layout)};
}

// Reads one validated tensor into floats.  The byte buffer is bounded by the file's size (the
// layout proved that the tensor lies inside the file).
Status read_tensor(const OpenedFile& f, const st::TensorInfo& t, std::vector<float>* out,
                   const std::filesystem::path& path) {
  out->resize(t.elems);
  const std::uint64_t bytes = t.end - t.begin;
  const std::uint64_t at = f.layout.data_offset() + t.begin;
  if (t.dtype == DType::kF32 && std::endian::native == std::endian::little) {
    H3_TRY(pread_all(f.fd->get(), reinterpret_cast<std::uint8_t*>(out->data()), bytes, at, path));
    return st::decode(t, {reinterpret_cast<const std::uint8_t*>(out->data()), bytes}, out->data());
  }
  std::vector<std::uint8_t> raw(bytes);
  H3_TRY(pread_all(f.fd->get(), raw.data(), bytes, at, path));
  return st::decode(t, raw, out->data());
}

Status decode_into(std::span<const std::uint8_t> bytes, const st::Layout& layout,
                   const st::TensorInfo& t, std::vector<float>* out) {
  out->resize(t.elems);
  return st::decode(t, bytes.subspan(layout.data_offset() + t.begin, t.end - t.begin), out->data());
}

}  // namespace

Result<st::Layout> st::read_layout(const std::filesystem::path& path) {
  auto f = open_validated(path);
  if (!f.ok()) return f.error();
  return std::move(f->layout);
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

std::size_t dtype_size(DType d) {
  return d == DType::kF32 ? 4 : 2;
}

Geometry Geometry::for_job(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps) {
  return expected_geometry(builtin_profile(), JobSize{width, height, frames, fps});
}

std::size_t Geometry::video_elems() const {
  std::size_t n = 1;
  for (auto d : video) n *= d;
  return video.empty() ? 0 : n;
}
std::size_t Geometry::audio_elems() const {
  std::size_t n = 1;
  for (auto d : audio) n *= d;
  return audio.empty() ? 0 : n;
}
std::size_t Geometry::data_bytes() const {
  return 4 * (video_elems() + audio_elems());
}

Geometry expected_geometry(const LatentProfile& p, const JobSize& job) {
  Geometry g;
  const std::uint64_t sf = std::max<std::uint32_t>(p.spatial_factor, 1);
  const std::uint64_t t = latent_frames(p, job.frames);
  g.video = {1, p.channels, t, job.height / sf, job.width / sf};  // (1, C, T', H', W')
  if (p.has_audio()) {
    const std::uint64_t len = audio_length(p.audio, job.frames, job.fps);
    for (auto d : p.audio.shape)
      g.audio.push_back(d == AudioRule::kLength ? len : static_cast<std::uint64_t>(d));
  }
  return g;
}

std::uint64_t latent_bytes(const LatentProfile& p, const JobSize& job) {
  return expected_geometry(p, job).data_bytes();
}

const char* container_name(Container c) {
  switch (c) {
    case Container::kV1:
      return "h3latent v1";
    case Container::kV2:
      return "h3latent v2";
    case Container::kComfy:
      return "ComfyUI .latent";
  }
  return "?";
}

Latent make_latent(const LatentProfile& p, const JobSize& job) {
  Latent l;
  l.geometry = expected_geometry(p, job);
  l.video.assign(l.geometry.video_elems(), 0.0f);
  l.audio.assign(l.geometry.audio_elems(), 0.0f);
  l.profile = p.name;
  l.job = job;
  return l;
}

namespace {

std::map<std::string, std::string> v2_metadata(const Latent& l) {
  auto m = l.metadata;
  m.insert_or_assign(kMetaFormat, std::string("h3latent"));
  m.insert_or_assign(kMetaVersion, std::to_string(2));
  m[kMetaProfile] = l.profile;
  m[kMetaWidth] = std::to_string(l.job.width);
  m[kMetaHeight] = std::to_string(l.job.height);
  m[kMetaFrames] = std::to_string(l.job.frames);
  m[kMetaFps] = std::to_string(l.job.fps);
  std::string layout = l.layout;
  if (layout.empty()) layout = l.geometry.has_audio() ? "video+audio" : "video";
  m[kMetaLayout] = std::move(layout);
  return m;
}

Status check_sizes(const std::filesystem::path& path, const Latent& l) {
  if (l.geometry.video.size() != 5 || l.video.size() != l.geometry.video_elems() ||
      l.audio.size() != l.geometry.audio_elems())
    return make_error(
        errc::latent::kGeometry,
        "{}: video holds {} values and audio {}, the geometry {} / {} needs {} and {}",
        path.string(), l.video.size(), l.audio.size(), detail::shape_str(l.geometry.video),
        detail::shape_str(l.geometry.audio), l.geometry.video_elems(), l.geometry.audio_elems());
  return {};
}

Error in_file(const std::filesystem::path& p, const Error& e) {
  return Error{e.code, p.string() + ": " + e.message};
}

void fill(Latent* l, detail::Classified&& c, std::map<std::string, std::string> metadata) {
  l->geometry = std::move(c.geometry);
  l->metadata = std::move(metadata);
  l->container = c.container;
  l->profile = std::move(c.profile);
  l->job = c.job;
  l->layout = std::move(c.layout);
}

}  // namespace

std::vector<std::uint8_t> serialize(const Latent& l, DType dtype) {
  std::vector<st::TensorRef> refs = {{"video", l.geometry.video, l.video}};
  if (l.geometry.has_audio()) refs.push_back({"audio", l.geometry.audio, l.audio});
  return st::serialize(refs, v2_metadata(l), dtype);
}

Result<std::vector<std::uint8_t>> serialize_comfy(const Latent& l, DType dtype) {
  if (l.geometry.has_audio() || !l.audio.empty())
    return make_error(
        errc::latent::kComfyAudio,
        "a ComfyUI .latent holds one video tensor; this latent (profile {}) has audio", l.profile);
  static const std::vector<float> kEmpty;
  // safetensors writes tensors sorted by dtype alignment, then name: the empty marker first.
  return st::serialize({{kComfyVersion0, {0}, kEmpty}, {kComfyTensor, l.geometry.video, l.video}},
                       l.metadata, dtype);
}

Result<std::string> write_latent(const std::filesystem::path& path, const Latent& l) {
  H3_TRY(check_sizes(path, l));
  // Version 2 names the job geometry; a reader checks it against the job (docs/latent.md).
  if (l.job.width == 0 || l.job.height == 0 || l.job.frames == 0 || l.job.fps == 0 ||
      l.profile.empty())
    return make_error(errc::latent::kGeometry,
                      "{}: the latent's profile and job geometry are not set (profile \"{}\", job "
                      "{}); make it with make_latent(profile, job)",
                      path.string(), l.profile, to_string(l.job));
  return artifacts::write_atomic(path, serialize(l));
}

Result<std::string> write_comfy_latent(const std::filesystem::path& path, const Latent& l) {
  H3_TRY(check_sizes(path, l));
  auto bytes = serialize_comfy(l);
  if (!bytes.ok()) return in_file(path, bytes.error());
  return artifacts::write_atomic(path, *bytes);
}

Result<Latent> parse_latent(std::span<const std::uint8_t> bytes, const Expected* expected) {
  auto layout = st::parse_layout(bytes);
  if (!layout.ok()) return layout.error();
  auto c = detail::classify(*layout, expected);
  if (!c.ok()) return c.error();
  Latent l;
  const st::TensorInfo* v = c->video;
  const st::TensorInfo* a = c->audio;
  fill(&l, std::move(*c), std::move(layout->metadata));
  H3_TRY(decode_into(bytes, *layout, *v, &l.video));
  if (a) H3_TRY(decode_into(bytes, *layout, *a, &l.audio));
  return l;
}

Result<Latent> read_latent(const std::filesystem::path& path, const Expected* expected) {
  auto f = open_validated(path);
  if (!f.ok()) return in_file(path, f.error());
  auto c = detail::classify(f->layout, expected);
  if (!c.ok()) return in_file(path, c.error());
  Latent l;
  const st::TensorInfo* v = c->video;
  const st::TensorInfo* a = c->audio;
  fill(&l, std::move(*c), f->layout.metadata);
  if (Status s = read_tensor(*f, *v, &l.video, path); !s.ok()) return in_file(path, s.error());
  if (a) {
    if (Status s = read_tensor(*f, *a, &l.audio, path); !s.ok()) return in_file(path, s.error());
  }
  return l;
}

std::vector<std::uint8_t> serialize_tensors(const std::map<std::string, TensorF32>& tensors,
                                            const std::map<std::string, std::string>& metadata,
                                            DType dtype) {
  std::vector<st::TensorRef> refs;
  for (const auto& [name, t] : tensors) refs.push_back({name, t.shape, t.data});
  return st::serialize(refs, metadata, dtype);
}

Result<std::string> write_tensors(const std::filesystem::path& path,
                                  const std::map<std::string, TensorF32>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  for (const auto& [name, t] : tensors) {
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    if (n != t.data.size())
      return make_error(errc::latent::kGeometry,
                        "{}: tensor \"{}\" holds {} values, shape {} needs {}", path.string(), name,
                        t.data.size(), detail::shape_str(t.shape), n);
    if (name == "__metadata__")
      return make_error(errc::latent::kHeaderSchema, "{}: \"__metadata__\" is not a tensor name",
                        path.string());
  }
  return artifacts::write_atomic(path, serialize_tensors(tensors, metadata));
}

Result<std::map<std::string, TensorF32>> parse_tensors(std::span<const std::uint8_t> bytes,
                                                       std::map<std::string, std::string>* meta) {
  auto layout = st::parse_layout(bytes);
  if (!layout.ok()) return layout.error();
  std::map<std::string, TensorF32> out;
  for (const auto& t : layout->tensors) {
    TensorF32& dst = out[t.name];
    dst.shape = t.shape;
    H3_TRY(decode_into(bytes, *layout, t, &dst.data));
  }
  if (meta) *meta = std::move(layout->metadata);
  return out;
}

Result<std::map<std::string, TensorF32>> read_tensors(const std::filesystem::path& path,
                                                      std::map<std::string, std::string>* meta) {
  auto f = open_validated(path);
  if (!f.ok()) return Error{f.error().code, path.string() + ": " + f.error().message};
  std::map<std::string, TensorF32> out;
  for (const auto& t : f->layout.tensors) {
    TensorF32& dst = out[t.name];
    dst.shape = t.shape;
    Status s = read_tensor(*f, t, &dst.data, path);
    if (!s.ok()) return Error{s.error().code, path.string() + ": " + s.error().message};
  }
  if (meta) *meta = f->layout.metadata;
  return out;
}

}  // namespace h3pipe::latent
