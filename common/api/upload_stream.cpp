#include "common/api/upload_stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/artifacts/artifacts.h"
#include "common/artifacts/safe_path.h"
#include "common/core/error_codes.h"

namespace h3pipe::api {
namespace {
namespace fs = std::filesystem;

constexpr std::size_t kSniffBytes = 12;  // enough for sniff_image's PNG, JPEG and WebP marks

HttpError reference_error(int status, std::string message, std::string_view code) {
  return HttpError{status, std::move(message), "invalid_request_error", "input_reference",
                   std::string(code)};
}

// input_reference on its way to disk: the first bytes are held until they tell the format, then
// everything goes to the temporary; the temporary is removed unless commit() published it.
class ReferenceFile {
 public:
  ReferenceFile(const config::Cluster& c, const std::string& id, std::size_t max_bytes)
      : c_(c), id_(id), max_(max_bytes) {}
  ~ReferenceFile() { discard(); }
  ReferenceFile(const ReferenceFile&) = delete;
  ReferenceFile& operator=(const ReferenceFile&) = delete;

  std::optional<HttpError> append(const char* data, std::size_t n) {
    bytes_ += n;
    if (bytes_ > max_)
      return reference_error(413,
                             fmt::format("input_reference: the upload is larger than {} bytes "
                                         "(h3pipe-api --max-upload-bytes)",
                                         max_),
                             "body_too_large");
    if (fd_ < 0) {
      head_.append(data, n);
      if (head_.size() < kSniffBytes) return std::nullopt;
      if (auto bad = open()) return bad;
      std::string held = std::move(head_);
      return write(held.data(), held.size());
    }
    return write(data, n);
  }

  // The whole part arrived: published under its final name.
  std::optional<HttpError> commit(StreamedForm& out) {
    if (fd_ < 0) {  // a file shorter than kSniffBytes
      if (auto bad = open()) return bad;
      std::string held = std::move(head_);
      if (auto bad = write(held.data(), held.size())) return bad;
    }
    ::close(fd_);
    fd_ = -1;
    auto sha = artifacts::commit_own_part(artifacts::Root(stored_.root),
                                          stored_.root / stored_.relative, part_);
    part_.clear();  // commit_own_part removed it on an error, renamed it otherwise
    if (!sha.ok())
      return reference_error(500, fmt::format("input_reference: {}", sha.error().message),
                             sha.error().code);
    out.upload = stored_;
    out.sha256 = *sha;
    out.upload_bytes = bytes_;
    return std::nullopt;
  }

 private:
  std::optional<HttpError> open() {
    const auto ext = sniff_image(head_);
    if (!ext)
      return reference_error(400,
                             "input_reference: expected a PNG, JPEG or WebP image, got bytes "
                             "that are none of them",
                             "invalid_value");
    if (c_.limits.input_roots.empty())
      return reference_error(400,
                             "input_reference: this cluster allows no input files "
                             "(limits.input_roots is [])",
                             errc::input::kRefused.id);
    if (auto v = artifacts::validate_id("id", id_); !v.ok())
      return reference_error(500, v.error().message, v.error().code);
    stored_ = {c_.limits.input_roots.front(),
               fs::path("api-uploads") / id_ / ("reference." + *ext)};
    std::error_code ec;
    fs::create_directories(stored_.root, ec);  // the operator's root itself, as start does
    const artifacts::Root root(stored_.root);
    if (auto d = artifacts::make_dirs(root, stored_.relative.parent_path()); !d.ok())
      return reference_error(500, fmt::format("input_reference: {}", d.error().message),
                             d.error().code);
    const fs::path part = artifacts::own_part_path(stored_.root / stored_.relative);
    auto fd =
        artifacts::open_beneath(stored_.root, stored_.relative.parent_path() / part.filename(),
                                O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (!fd.ok())
      return reference_error(500, fmt::format("input_reference: {}", fd.error().message),
                             fd.error().code);
    fd_ = *fd;
    part_ = part;
    return std::nullopt;
  }

  std::optional<HttpError> write(const char* data, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        return reference_error(500,
                               fmt::format("input_reference: cannot write {}: {}", part_.string(),
                                           std::strerror(errno)),
                               errc::io::kWrite.id);
      data += w;
      n -= static_cast<std::size_t>(w);
    }
    return std::nullopt;
  }

  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (part_.empty()) return;
    std::error_code ec;
    fs::remove(part_, ec);
    fs::remove(part_.parent_path(), ec);  // the video's folder, when it holds nothing else
    part_.clear();
  }

  const config::Cluster& c_;
  const std::string& id_;
  const std::size_t max_;
  std::size_t bytes_ = 0;
  std::string head_;
  int fd_ = -1;
  fs::path part_;
  StoredUpload stored_;
};

}  // namespace

std::optional<HttpError> read_streamed_form(const httplib::ContentReader& reader,
                                            const config::Cluster& c, const ServerOptions& o,
                                            const std::string& id, StreamedForm& out) {
  std::optional<HttpError> bad;
  std::optional<ReferenceFile> file;
  bool file_done = false;
  std::string* text = nullptr;  // the text part being read
  std::string name;
  std::size_t text_bytes = 0;
  const auto finish_part = [&]() -> bool {
    if (file && !file_done) {
      file_done = true;
      bad = file->commit(out);
    }
    text = nullptr;
    return !bad;
  };
  const bool read = reader(
      [&](const httplib::MultipartFormData& part) {
        if (!finish_part()) return false;
        name = part.name;
        if (name == "input_reference") {
          if (file) {
            bad = reference_error(400, "input_reference: one file only, got a second one",
                                  "invalid_value");
            return false;
          }
          file.emplace(c, id, o.max_upload_bytes);
          return true;
        }
        if (!part.filename.empty()) {
          bad = HttpError{
              400, fmt::format("{}: a file is taken only as input_reference (an image)", name),
              "invalid_request_error", name, "invalid_value"};
          return false;
        }
        text = &out.fields[name];
        text->clear();
        return true;
      },
      [&](const char* data, std::size_t n) {
        if (!text) {
          if (file && !file_done) bad = file->append(data, n);
          return !bad;
        }
        text_bytes += n;
        if (text_bytes > o.max_body_bytes) {
          bad = HttpError{413,
                          fmt::format("{}: the form's text fields are larger than {} bytes "
                                      "together (h3pipe-api --max-body-bytes)",
                                      name, o.max_body_bytes),
                          "invalid_request_error", name, "body_too_large"};
          return false;
        }
        text->append(data, n);
        return true;
      });
  if (!bad && !read)
    bad = HttpError{400,
                    "the multipart/form-data body is malformed or ended early (the client sent "
                    "less than it announced)",
                    "invalid_request_error", "", "invalid_body"};
  if (!bad) finish_part();
  if (bad && out.upload) {  // committed before a later part was refused
    remove_reference(*out.upload);
    out.upload.reset();
  }
  return bad;
}

std::optional<HttpError> read_bounded_body(const httplib::ContentReader& reader,
                                           std::size_t max_body_bytes, std::string& body) {
  bool over = false;
  const bool read = reader([&](const char* data, std::size_t n) {
    if (body.size() + n > max_body_bytes) {
      over = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (over)
    return HttpError{413,
                     fmt::format("the request body is larger than {} bytes (an upload goes as "
                                 "multipart/form-data)",
                                 max_body_bytes),
                     "invalid_request_error", "", "body_too_large"};
  if (!read)
    return HttpError{400, "the request body ended early (the client sent less than it announced)",
                     "invalid_request_error", "", "invalid_body"};
  return std::nullopt;
}

}  // namespace h3pipe::api
