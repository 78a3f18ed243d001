#pragma once
// The body of POST /v1/runs as the batch text `h3pipe run` reads (issue #37 item 2): JSON lines
// as they are, or a JSON array whose element i becomes line i+1, so spec::parse_batch's errors
// name the same line numbers either way.
#include <string>
#include <string_view>
#include <variant>

#include "common/api/videos.h"

namespace h3pipe::api {

// The batch text, or a 400 (param "body"): empty, or an array that is not valid JSON.
std::variant<std::string, FieldProblem> batch_text_of_body(std::string_view body,
                                                           std::string_view content_type);

}  // namespace h3pipe::api
