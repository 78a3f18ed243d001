// Prints what the config field tables declare (common/config/fields.cpp, common/model/config.cpp):
//   h3pipe_config_gen docs     docs/config.md
//   h3pipe_config_gen schema   the JSON Schema of the cluster object (values.schema.json's
//                              `cluster`, tests/config/config_docs.py)
#include <cstdio>
#include <string_view>

#include "common/config/field_docs.h"
#include "common/model/settings_table.h"

int main(int argc, char** argv) {
  using namespace h3pipe;
  const std::string_view what = argc == 2 ? argv[1] : "";
  if (what == "docs") {
    std::fputs(config::config_markdown({config::describe(model::settings_table())}).c_str(),
               stdout);
    return 0;
  }
  if (what == "schema") {
    std::puts(config::cluster_schema().dump(2).c_str());
    return 0;
  }
  std::fputs("usage: h3pipe_config_gen docs|schema\n", stderr);
  return 2;
}
