#include "common/api/runs_body.h"

#include <fmt/format.h>

#include "common/core/json_parse.h"

namespace h3pipe::api {

std::variant<std::string, FieldProblem> batch_text_of_body(std::string_view body,
                                                           std::string_view content_type) {
  std::size_t at = 0;
  while (at < body.size() &&
         (body[at] == ' ' || body[at] == '\t' || body[at] == '\r' || body[at] == '\n'))
    ++at;
  if (at == body.size())
    return FieldProblem{"body",
                        "the body is empty: expected the jobs as JSON lines (one JSON object per "
                        "line, as `h3pipe run` reads) or a JSON array of objects"};
  const bool array = body[at] == '[';
  (void)content_type;  // JSON lines whatever the type says: each line is checked by the batch
  if (!array) return std::string(body);
  std::string why;
  auto j = json_reader::parse_limited(body, {}, &why);
  if (!j || !j->is_array())
    return FieldProblem{"body", fmt::format("the body starts with '[' but is not a JSON array: {}",
                                            why.empty() ? "not an array" : why)};
  std::string text;
  for (const auto& e : *j) text += e.dump() + "\n";  // element i: line i+1
  return text;
}

}  // namespace h3pipe::api
