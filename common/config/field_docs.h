#pragma once
// docs/config.md and the JSON Schema of the cluster object, printed from the field tables
// (fields.cpp; the builtin model's settings table is passed in by the generator,
// tests/config/config_gen.cpp, since h3pipe::config does not link the model).
//
// Threading: pure functions.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/core/field_table.h"

namespace h3pipe::config {

// The whole of docs/config.md: the cluster's objects, the rules across them, then `extra`
// (each a section of its own, e.g. the builtin runtime's settings).
std::string config_markdown(const std::vector<TableDoc>& extra = {});

// A JSON Schema (draft-07) of the cluster object: properties and types, ranges, enums, defaults,
// descriptions; unknown keys refused (additionalProperties false) as the loader refuses them.
// Its nested objects are in "definitions", referenced as "#/definitions/<name>".  Looser than
// the loader where a schema cannot say it: fields read only for one profile kind, and the rules
// across objects (cluster_rules()).
nlohmann::json cluster_schema();

}  // namespace h3pipe::config
