#pragma once
// The builtin model's settings as a field table (common/core/field_table.h): parse_config
// (model.h) reads by it, docs/config.md prints it (tests/config/config_gen.cpp).
#include "common/core/field_table.h"
#include "common/model/model.h"

namespace h3pipe::model {

const config::Table<ModelConfig>& settings_table();

}  // namespace h3pipe::model
