#pragma once
// Latent profiles as JSON: the one reader for the built-in table (latent_profiles.json, compiled
// in) and for a cluster config's /latent_profiles/<name> (common/config), and the writer that
// gives the same form back.  Field list and meaning: docs/latent.md, "Latent profiles".
//
// Threading: pure functions.
#include <nlohmann/json.hpp>
#include <string>

#include "common/core/json_reader.h"  // header-only: the strict reader every JSON input uses
#include "common/latent/profile.h"

namespace h3pipe::latent {

// Reads the fields of one profile from `j` into `p` (p.name is the caller's), every problem
// added to `errors` under `path` (unknown keys included).  `audio` is an object or the name of
// a rule (named_audio_rule) unless `allow_named_audio` is false: the built-in table itself,
// whose entries also carry their "name".
void read_profile(const nlohmann::json& j, const std::string& path, LatentProfile& p,
                  config::Errors& errors, bool allow_named_audio = true);

// The form read_profile reads (with "name"): read_profile(profile_to_json(p)) == p.
nlohmann::json profile_to_json(const LatentProfile& p);

}  // namespace h3pipe::latent
