// Unit: the error-code catalogue (common/core/error_codes.inc) and how errors carry its codes.
#include "common/core/error_codes.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/core/result.h"

using namespace h3pipe;

TEST(ErrorCodes, EveryCodeIsListedOnceWithAMeaning) {
  std::set<std::string_view> seen;
  for (const ErrorCode& c : errc::all()) {
    EXPECT_TRUE(seen.insert(c.id).second) << c.id << " listed twice";
    EXPECT_NE(c.id.find('.'), std::string_view::npos) << c.id << ": domain.name";
    EXPECT_GE(c.meaning.size(), 10u) << c.id;
    EXPECT_EQ(c.meaning.back(), '.') << c.id << ": the meaning is a sentence";
  }
  EXPECT_GE(seen.size(), 200u);
}

TEST(ErrorCodes, OnlyRuntimePermanentCodesArePermanent) {
  // Besides runtime.permanent.*, the inputs no retry can change (issue #22): a path refused for
  // what it is, a latent header over the limit.  scripts/error_codes.py holds the same list.
  const std::set<std::string_view> elsewhere = {
      "path.absolute",           "path.dotdot",     "path.empty",   "path.escape",
      "path.not_beneath",        "path.nul",        "path.symlink", "path.too_long",
      "latent.header_too_large", "latent.nonfinite"};
  int permanent = 0;
  for (const ErrorCode& c : errc::all()) {
    const bool named = c.id.rfind("runtime.permanent.", 0) == 0 || elsewhere.count(c.id);
    EXPECT_EQ(c.retry == RetryClass::kPermanent, named) << c.id;
    EXPECT_EQ(errc::is_permanent(c.id), named) << c.id;
    permanent += c.id.rfind("runtime.permanent.", 0) == 0;
  }
  EXPECT_EQ(permanent, 10);
  EXPECT_FALSE(errc::is_permanent(errc::path::kMissing.id)) << "a file may still appear";
}

TEST(ErrorCodes, LookupFindsTheEntryAndRetriesUnknownCodes) {
  ASSERT_NE(errc::find("redis.io"), nullptr);
  EXPECT_EQ(errc::find("redis.io")->id, errc::redis::kIo.id);
  EXPECT_EQ(errc::find("redis.io")->retry, RetryClass::kRetried);
  EXPECT_EQ(errc::find("no.such_code"), nullptr);
  EXPECT_FALSE(errc::is_permanent("no.such_code")) << "a peer's unknown code is retried";
  EXPECT_FALSE(errc::is_permanent("runtime.permanent.not_in_the_catalogue"))
      << "the catalogue decides, not the prefix";
  EXPECT_TRUE(errc::is_permanent(errc::runtime::kPermanentWeights.id));
  EXPECT_EQ(errc::retry_name(RetryClass::kPermanent), "permanent");
  EXPECT_EQ(errc::retry_name(RetryClass::kRetried), "retried");
  EXPECT_EQ(errc::retry_name(RetryClass::kNotATask), "-");
}

TEST(ErrorCodes, AnErrorCarriesTheWireTextOfItsCode) {
  Error e = make_error(errc::io::kFsync, "fsync {}: {}", "/out/a.mp4", "No space left on device");
  EXPECT_EQ(e.code, "io.fsync");
  EXPECT_EQ(e.to_string(), "io.fsync: fsync /out/a.mp4: No space left on device");
  EXPECT_TRUE(e.code == errc::io::kFsync);
  EXPECT_FALSE(e.code != errc::io::kFsync);
  EXPECT_TRUE(e.code != errc::io::kWrite);
  EXPECT_EQ(errc::io::kFsync.leaf(), "fsync");
  EXPECT_EQ(errc::runtime::kComfyuiFetch.leaf(), "fetch");
  EXPECT_EQ(errc::domain_of(e.code), "io");
  EXPECT_EQ(errc::domain_of("nodot"), "nodot");
}

TEST(ErrorCodes, RephraseKeepsTheCauseCode) {
  // A code that is not in the catalogue (a peer's) passes through unchanged.
  const Error cause{"peer.code_of_a_newer_build", "disk full"};
  Error e = rephrase(cause, "receiver h2: {}", cause.message);
  EXPECT_EQ(e.code, "peer.code_of_a_newer_build");
  EXPECT_EQ(e.message, "receiver h2: disk full");
}
