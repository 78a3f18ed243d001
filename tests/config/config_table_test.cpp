// Unit: the cluster config's field table drives the loader (each declared key is read, and read
// with its declared type and range), the runtime names are the one list, the docs and the schema
// carry every field, and the builtin model settings read through the same machinery.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/config/config.h"
#include "common/config/field_docs.h"
#include "common/config/fields.h"
#include "common/config/runtime_names.h"
#include "common/model/settings_table.h"

using namespace h3pipe;
using nlohmann::json;

namespace {

json minimal() {
  return json::parse(R"({"hosts":[{"name":"a"}],"pools":[{"name":"e","host":"a","stage":"encode"},
    {"name":"s","host":"a","stage":"sample"},{"name":"d","host":"a","stage":"decode"}]})");
}

std::string errors_of(const json& j) {
  auto c = config::parse(j, "/tmp");
  return c.ok() ? "" : c.error().message;
}

// A value of the wrong JSON type for a field of `type`.
json wrong_for(config::FieldType t) {
  return t == config::FieldType::kString || t == config::FieldType::kPath ? json(17) : json("x");
}

}  // namespace

// Every scalar field of the top level and of /queue, /limits, /transfer, /redis: given a value of
// the wrong type, the loader names exactly that field's path.  So the table is what the loader
// reads (a field missing from it would be an "unknown key" instead).
TEST(ConfigTable, EveryDeclaredScalarIsReadWithItsType) {
  struct Where {
    std::string pointer;
    config::TableDoc doc;
  };
  std::vector<Where> tables = {{"", config::describe(config::cluster_table())}};
  for (const auto& f : tables[0].doc.fields)
    if (f.type == config::FieldType::kObject && f.sub && f.key != "stages")
      tables.push_back({"/" + f.key, f.sub()});
  int checked = 0;
  for (const auto& [pointer, doc] : tables) {
    for (const auto& f : doc.fields) {
      if (f.sub || f.type == config::FieldType::kMap || f.type == config::FieldType::kObject ||
          f.type == config::FieldType::kArray)
        continue;
      json j = minimal();
      json& obj = pointer.empty() ? j : j[pointer.substr(1)];
      obj[f.key] = wrong_for(f.type);
      const std::string e = errors_of(j);
      EXPECT_NE(e.find(pointer + "/" + f.key + ": expected "), std::string::npos)
          << f.key << ": " << e;
      EXPECT_EQ(e.find("unknown key"), std::string::npos) << e;
      ++checked;
    }
  }
  EXPECT_GE(checked, 35);
}

// Integer ranges come from the table: one past each end is refused, each end accepted.
TEST(ConfigTable, RangesAreTheDeclaredOnes) {
  const auto doc = config::describe(config::cluster_table());
  for (const auto& f : doc.fields) {
    if (f.key != "queue" && f.key != "transfer") continue;
    for (const auto& q : f.sub().fields) {
      if (q.type != config::FieldType::kInteger || !q.imin || !q.imax) continue;
      json j = minimal();
      j[f.key] = json::object();
      if (f.key == "queue") j[f.key]["lease_ms"] = 3600000;  // renew_ms at its top stays valid
      j[f.key][q.key] = *q.imax + 1;
      EXPECT_NE(errors_of(j).find("/" + f.key + "/" + q.key + ": " + std::to_string(*q.imax + 1) +
                                  " is out of range"),
                std::string::npos)
          << q.key;
      j[f.key] = {{q.key, *q.imin}};
      if (q.key == "lease_ms") j[f.key]["renew_ms"] = 10;
      EXPECT_EQ(errors_of(j), "") << q.key;
    }
  }
}

// Defaults: what the docs and the schema print is what a config that leaves the key out gets.
TEST(ConfigTable, DefaultsAreWhatTheLoaderGives) {
  auto c = config::parse(minimal(), "/tmp");
  ASSERT_TRUE(c.ok()) << c.error().message;
  const json schema = config::cluster_schema();
  const auto& q = schema["definitions"]["queue"]["properties"];
  EXPECT_EQ(q["lease_ms"]["default"], c->queue.lease_ms);
  EXPECT_EQ(q["max_deliveries"]["default"], c->queue.max_deliveries);
  EXPECT_EQ(schema["properties"]["dispatch"]["default"], config::policy_name(c->dispatch));
  EXPECT_EQ(schema["definitions"]["limits"]["properties"]["max_latent_bytes"]["default"],
            c->limits.max_latent_bytes);
  EXPECT_EQ(schema["definitions"]["hosts.item"]["properties"]["address"]["default"],
            c->hosts[0].address);
  EXPECT_EQ(schema["additionalProperties"], false);
}

TEST(ConfigTable, RuntimeNamesAreTheOneList) {
  const auto doc = config::describe(config::runtime_table());
  ASSERT_EQ(doc.fields[0].key, "name");
  EXPECT_EQ(doc.fields[0].choices,
            std::vector<std::string>(config::kRuntimeNames.begin(), config::kRuntimeNames.end()));
  for (auto name : config::kRuntimeNames) {
    json j = minimal();
    j["pools"][1]["runtime"] = {{"name", std::string(name)}};
    EXPECT_EQ(errors_of(j).find("unknown runtime"), std::string::npos) << name;
  }
  json j = minimal();
  j["pools"][1]["runtime"] = {{"name", "magic"}};
  EXPECT_NE(errors_of(j).find("/pools/1/runtime/name: unknown runtime \"magic\"; expected sim, "
                              "builtin, exec or comfyui"),
            std::string::npos);
}

// All errors together, one a line, each with its path.
TEST(ConfigTable, AllErrorsTogether) {
  json j = minimal();
  j["queue"] = {{"block_ms", 0}, {"lease_ms", "x"}};
  j["hosts"][0]["bind"] = 3;
  j["pools"][0]["profiles"] = {{"sd", {{"kind", "cycle"}, {"seconds", json::array()}}}};
  const std::string e = errors_of(j);
  for (const char* want : {"/queue/block_ms: 0 is out of range [1, 60000]",
                           "/queue/lease_ms: expected an integer, got string",
                           "/hosts/0/bind: expected a string, got number",
                           "/pools/0/profiles/sd/seconds: expected a non-empty array of numbers"})
    EXPECT_NE(e.find(want), std::string::npos) << want << "\n" << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 3) << e;
}

// A profile reads the fields of its kind only: the others are unknown keys, as they always were.
TEST(ConfigTable, ProfileFieldsDependOnTheKind) {
  json j = minimal();
  j["pools"][0]["profiles"] = {{"a", {{"kind", "fixed"}, {"seconds", 1}, {"mean", 2}}},
                               {"b", {{"kind", "normal"}, {"mean", 2}, {"sd", 1}}},
                               {"c", {{"kind", "gamma"}, {"seconds", 1}}}};
  const std::string e = errors_of(j);
  EXPECT_NE(e.find("/pools/0/profiles/a/mean: unknown key; known: kind, seconds"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("/pools/0/profiles/b"), std::string::npos) << e;
  EXPECT_NE(e.find("/pools/0/profiles/c/seconds: unknown key; known: kind"), std::string::npos)
      << e;
}

TEST(ConfigTable, DocsAndSchemaCarryEveryField) {
  const std::string md = config::config_markdown({config::describe(model::settings_table())});
  const json schema = config::cluster_schema();
  std::set<std::string> seen;
  std::vector<config::TableDoc> todo = {config::describe(config::cluster_table())};
  while (!todo.empty()) {
    auto t = todo.back();
    todo.pop_back();
    if (!seen.insert(t.name).second) continue;
    EXPECT_NE(md.find("## `" + (t.name.empty() ? std::string("/") : t.name) + "`"),
              std::string::npos)
        << t.name;
    for (const auto& f : t.fields) {
      EXPECT_NE(md.find("| `" + f.key + "` |"), std::string::npos) << f.key;
      EXPECT_FALSE(f.description.empty()) << f.key;
      if (f.sub) todo.push_back(f.sub());
    }
  }
  EXPECT_GE(seen.size(), 13u);
  EXPECT_NE(md.find("| `decoder_precision` |"), std::string::npos);
  EXPECT_EQ(schema["definitions"]["runtime"]["properties"]["name"]["enum"].size(),
            config::kRuntimeNames.size());
}

// The builtin model's settings: the same machinery, the model's own wording kept.
TEST(ModelSettingsTable, ReadsByTheTable) {
  const auto doc = config::describe(model::settings_table());
  EXPECT_EQ(doc.fields.size(), 20u);
  json all = json::object();
  for (std::size_t i = 0; i < doc.fields.size(); ++i) all[doc.fields[i].key] = doc.defaults[i];
  auto c = model::parse_config(all, "/s");  // every default, given explicitly: valid
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(model::config_to_json(*c), all);
  auto bad =
      model::parse_config(json{{"threads", 0}, {"flow_shift", 1000}, {"seed", -1}, {"x", 1}}, "/s");
  ASSERT_FALSE(bad.ok());
  const auto& m = bad.error().message;
  for (const char* want :
       {"/s/threads: expected an integer in [1, 256]",
        "/s/flow_shift: expected a number in [0.01, 100]",
        "/s/seed: expected a non-negative integer", "/s/x: unknown key; known: audio_channels"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
}
