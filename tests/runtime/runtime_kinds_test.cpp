// Runtime names once (issue #26): the RuntimeKind table (common/runtime/kinds.h) that the registry
// and the settings checks read is config::kRuntimeNames (the config's enum for runtime.name),
// entry for entry, and the error texts that list the names are what they were.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/config/config.h"
#include "common/config/runtime_names.h"
#include "common/runtime/kinds.h"
#include "common/runtime/runtime.h"
#include "common/runtime/settings_check.h"

namespace h3pipe {
namespace {

TEST(RuntimeKinds, AreTheConfigsNamesInOrder) {
  const auto kinds = runtime::runtime_kinds();
  ASSERT_EQ(kinds.size(), config::kRuntimeNames.size());
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(kinds[i].name, config::kRuntimeNames[i]);
    EXPECT_NE(kinds[i].encode, nullptr) << kinds[i].name;
    EXPECT_NE(kinds[i].sample, nullptr) << kinds[i].name;
    EXPECT_NE(kinds[i].decode, nullptr) << kinds[i].name;
    EXPECT_NE(kinds[i].check_settings, nullptr) << kinds[i].name;
    EXPECT_EQ(runtime::find_runtime_kind(config::kRuntimeNames[i]), &kinds[i]);
  }
  EXPECT_EQ(runtime::find_runtime_kind("magic"), nullptr);
  EXPECT_EQ(runtime::find_runtime_kind(""), nullptr);
}

TEST(RuntimeKinds, UnknownNameListsTheKnownOnes) {
  const runtime::FactoryArgs a;
  auto e = runtime::make_runtime(config::StageKind::kEncode, "magic", a);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message,
            "stage encode: runtime \"magic\" is not available in this build (known: sim, "
            "builtin, exec, comfyui)");
  auto s = runtime::make_runtime(config::StageKind::kSample, "magic", a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("stage sample: runtime \"magic\""), std::string::npos);
  auto d = runtime::make_runtime(config::StageKind::kDecode, "magic", a);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("stage decode: runtime \"magic\""), std::string::npos);
}

// check_settings reaches each kind's checker through the table: a key no runtime knows is
// reported for every name, under the pool's settings path.
TEST(RuntimeKinds, SettingsChecksGoThroughTheTable) {
  for (auto name : config::kRuntimeNames) {
    auto c = config::parse(nlohmann::json::parse(R"({"hosts":[{"name":"a"}],"pools":[
      {"name":"e","host":"a","stage":"encode"},{"name":"s","host":"a","stage":"sample"},
      {"name":"d","host":"a","stage":"decode"}]})"),
                           "/tmp");
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    c->pools[1].runtime = config::RuntimeRef{};
    c->pools[1].runtime->name = std::string(name);
    c->pools[1].runtime->settings = {{"no_such_key_h3", 1}};
    auto st = runtime::check_settings(*c, runtime::SettingsScope::kConfig);
    ASSERT_FALSE(st.ok()) << name;
    EXPECT_NE(st.error().message.find("no_such_key_h3"), std::string::npos) << name << "\n"
                                                                            << st.error().message;
    EXPECT_NE(st.error().message.find("(runtime " + std::string(name) + "; pool s)"),
              std::string::npos)
        << name << "\n"
        << st.error().message;
  }
}

}  // namespace
}  // namespace h3pipe
