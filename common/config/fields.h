#pragma once
// The cluster config's field table (fields.cpp): every key of the cluster JSON, its type,
// default, range and meaning, declared once.  config::parse reads through it, then applies the
// rules across objects (cross_checks.cpp); docs/config.md and the chart's values.schema.json are
// printed from it (field_docs.h, tests/config).
#include "common/config/config.h"
#include "common/core/field_table.h"

namespace h3pipe::config {

const Table<Cluster>& cluster_table();
const Table<Profile>& profile_table();
const Table<RuntimeRef>& runtime_table();

// The rules across objects, after the table pass (cross_checks.cpp): every problem added to `e`.
void check_across(const Cluster& c, Errors& e);
// Those rules in words, for docs/config.md.
const std::vector<std::string>& cluster_rules();

}  // namespace h3pipe::config
