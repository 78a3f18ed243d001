#pragma once
// The OpenAI-shaped /v1/videos request as an h3pipe job (issue #37 item 1): the form fields of a
// POST (multipart or JSON) become one JSON line of a batch, validated by spec::parse_batch, the
// same rules and words as `h3pipe run`.
#include <map>
#include <string>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/spec/spec.h"

namespace h3pipe::api {

// A 400: the message, and the request field it is about (OpenAI's error.param).
struct FieldProblem {
  std::string param, message;
};

struct VideoRequest {
  spec::Batch batch;    // one spec, no errors
  std::string model;    // the job class ("default" when omitted)
  std::string seconds;  // as answered: the request's, else frames / fps
  std::string size;     // "WxH" of the spec
};

// Fields: prompt, model, size ("WxH"), seconds, negative_prompt, fps, frames, steps, seed.
// seconds -> frames = ceil(seconds x fps) raised to the next count the class's latent profile
// accepts (builtin, 24 fps: 2 s -> 49); frames, when given, wins.  Size and frames default to
// the named class's, else the spec's defaults.  Unknown fields are refused.
// `reference_image`, when not empty: the input_reference's path beneath the input roots
// (upload.h), the spec's referenceImage (its problems are reported as param input_reference).
std::variant<VideoRequest, FieldProblem> parse_video_request(
    const std::map<std::string, std::string>& fields, const config::Cluster& cluster,
    const std::string& job_id, const std::string& reference_image = "");

}  // namespace h3pipe::api
