#pragma once
// POST /v1/videos's multipart/form-data body read as it arrives (issue #37: "uploads are bounded
// and streamed to disk"; docs/api.md, "POST /v1/videos").  cpp-httplib's ContentReader hands each
// part's bytes in chunks: the input_reference file goes straight to a temporary of its own beside
// its final name under the input root (artifacts::own_part_path of
// api-uploads/<id>/reference.<ext>, mode 0600, opened beneath the root without following a symlink;
// <ext> from its first bytes, so anything but a PNG, JPEG or WebP is refused before more is read),
// and is committed (fsync, sidecar, rename, fsync of the folder: artifacts::commit_own_part) once
// the whole body arrived. The text fields are kept in memory, at most max_body_bytes together. Past
// max_upload_bytes the read stops at once (413 naming input_reference); on any error, or a client
// gone mid-body, the temporary is removed, so a refused upload leaves nothing behind.
#include <httplib.h>

#include <map>
#include <optional>
#include <string>

#include "common/api/context.h"
#include "common/api/upload.h"

namespace h3pipe::api {

struct StreamedForm {
  std::map<std::string, std::string> fields;  // the text parts
  std::optional<StoredUpload> upload;         // input_reference, committed (remove_reference)
  std::string sha256;                         // its SHA-256 hex
  std::size_t upload_bytes = 0;
};

// Reads the multipart body of a request for video `id` through `reader`.  400/413/500 naming the
// part that is wrong; nothing is left on disk then.
std::optional<HttpError> read_streamed_form(const httplib::ContentReader& reader,
                                            const config::Cluster& c, const ServerOptions& o,
                                            const std::string& id, StreamedForm& out);

// A body that is not multipart (JSON), read into `body`: 413 past max_body_bytes.
std::optional<HttpError> read_bounded_body(const httplib::ContentReader& reader,
                                           std::size_t max_body_bytes, std::string& body);

}  // namespace h3pipe::api
