// server/service/refusal_log.h: the first refusal of a kind is logged at
// once, later ones at most once per interval, with the count left out.
#include "server/service/refusal_log.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rope {
namespace {

struct FakeLog {
  std::vector<std::string> lines;
  absl::Time now = absl::FromUnixSeconds(1000);
  RefusalLog log{absl::Seconds(5), [this](const std::string& line) { lines.push_back(line); },
                 [this] { return now; }};
};

TEST(RefusalLogTest, FirstRefusalOfAKindIsLoggedAtOnceNamingKindAndReason) {
  FakeLog f;
  f.log.Note("RESOURCE_EXHAUSTED (max_concurrent_calls)", "too many calls in flight: 2 of 2");
  ASSERT_EQ(f.lines.size(), 1u);
  EXPECT_EQ(f.lines[0],
            "refused a call: RESOURCE_EXHAUSTED (max_concurrent_calls): too many calls in "
            "flight: 2 of 2");
}

TEST(RefusalLogTest, RefusalsWithinTheIntervalAreCountedNotLogged) {
  FakeLog f;
  for (int i = 0; i < 100; ++i) f.log.Note("UNAVAILABLE (draining)", "server is draining");
  ASSERT_EQ(f.lines.size(), 1u);
  f.now += absl::Seconds(6);
  f.log.Note("UNAVAILABLE (draining)", "server is draining");
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_NE(f.lines[1].find("(and 99 more of this kind since 6s ago, not logged)"),
            std::string::npos)
      << f.lines[1];
}

TEST(RefusalLogTest, KindsAreRateLimitedSeparately) {
  FakeLog f;
  f.log.Note("UNAUTHENTICATED", "missing bearer token");
  f.log.Note("UNAVAILABLE (draining)", "server is draining");
  f.log.Note("UNAUTHENTICATED", "missing bearer token");
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_NE(f.lines[0].find("UNAUTHENTICATED"), std::string::npos);
  EXPECT_NE(f.lines[1].find("UNAVAILABLE (draining)"), std::string::npos);
}

}  // namespace
}  // namespace rope
