// Stop-rule tests: stop strings spanning tokens, at the very start, overlapping partial matches,
// held-back text released when it stops matching, several stop strings, UTF-8 boundaries; every
// case with the exact text each push releases. A randomised check compares streaming against
// the plain definition (cut at the earliest occurrence) for every way of splitting the text.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "genai/sampling/stop_rules.h"
#include "test_util.h"

namespace npullm::genai {
namespace {

using test::error_of;

// What each push released, then what flush() released (unless already stopped).
struct Trace {
  std::vector<std::string> steps;
  std::string text;  // everything released
  bool stopped = false;
  std::optional<size_t> matched;
};

Trace feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  Trace t;
  for (const std::string& p : pieces) {
    const StopStep s = m.push(p);
    t.steps.push_back(s.text);
    t.text += s.text;
    t.stopped = s.stopped;
    if (s.stopped) break;
  }
  if (!t.stopped) {
    const StopStep s = m.flush();
    t.steps.push_back(s.text);
    t.text += s.text;
    t.stopped = s.stopped;
  }
  EXPECT_EQ(m.stopped(), t.stopped);
  t.matched = m.matched();
  return t;
}

using Steps = std::vector<std::string>;

TEST(StopMatcher, StopStringSpanningSeveralTokensIsCutAndNeverShown) {
  const Trace t = feed({"</s>"}, {"Hello", " wor", "ld<", "/", "s>", " never"});
  EXPECT_EQ(t.steps, (Steps{"Hello", " wor", "ld", "", ""}));
  EXPECT_EQ(t.text, "Hello world");
  EXPECT_TRUE(t.stopped);
  EXPECT_EQ(t.matched, 0u);
}

TEST(StopMatcher, StopStringInsideOnePieceCutsThatPiece) {
  const Trace t = feed({"\n\n"}, {"one", " two\n\nthree"});
  EXPECT_EQ(t.steps, (Steps{"one", " two"}));
  EXPECT_TRUE(t.stopped);
}

TEST(StopMatcher, StopStringAtTheVeryStart) {
  Trace t = feed({"User:"}, {"Us", "er:", " hi"});
  EXPECT_EQ(t.steps, (Steps{"", ""}));
  EXPECT_EQ(t.text, "");
  EXPECT_TRUE(t.stopped);

  t = feed({"User:"}, {"User: hi"});
  EXPECT_EQ(t.steps, (Steps{""}));
  EXPECT_TRUE(t.stopped);
}

TEST(StopMatcher, HeldBackTextIsReleasedWhenItStopsMatching) {
  const Trace t = feed({"</s>"}, {"a <", "/b>", " c"});
  EXPECT_EQ(t.steps, (Steps{"a ", "</b>", " c", ""}));
  EXPECT_EQ(t.text, "a </b> c");
  EXPECT_FALSE(t.stopped);
}

TEST(StopMatcher, HeldBackTextIsReleasedByFlush) {
  const Trace t = feed({"</s>"}, {"end </"});
  EXPECT_EQ(t.steps, (Steps{"end ", "</"}));
  EXPECT_FALSE(t.stopped);
  EXPECT_FALSE(t.matched.has_value());
}

TEST(StopMatcher, OverlappingPartialMatchesAreNotLost) {
  // "aba" could be the start of "abac" at 0 or at 2; the real match starts at 2.
  Trace t = feed({"abac"}, {"aba", "bac"});
  EXPECT_EQ(t.steps, (Steps{"", "ab"}));
  EXPECT_TRUE(t.stopped);

  // "ababab...": the partial match at 0 fails, the one at 2 ("ab") survives.
  t = feed({"abab"}, {"a", "ab", "ab", "x"});
  EXPECT_EQ(t.steps, (Steps{"", "a", ""}));
  EXPECT_EQ(t.text, "a");
  EXPECT_TRUE(t.stopped);

  // One byte at a time, "aaab" with stop "aab": a matcher that restarts after a mismatch misses it.
  t = feed({"aab"}, {"a", "a", "a", "b"});
  EXPECT_EQ(t.steps, (Steps{"", "", "a", ""}));
  EXPECT_TRUE(t.stopped);

  // "abab" then a mismatch: everything comes back, in order.
  t = feed({"abac"}, {"ab", "ab", "ab", "x"});
  EXPECT_EQ(t.steps, (Steps{"", "ab", "ab", "abx", ""}));
  EXPECT_EQ(t.text, "abababx");
  EXPECT_FALSE(t.stopped);
}

TEST(StopMatcher, OverlappingStopStrings) {
  // Stops "ab" and "bc": the text "abc" contains both; "ab" starts first.
  Trace t = feed({"ab", "bc"}, {"xa", "bc"});
  EXPECT_EQ(t.steps, (Steps{"x", ""}));
  EXPECT_EQ(t.matched, 0u);

  t = feed({"ab", "bc"}, {"xb", "c"});
  EXPECT_EQ(t.steps, (Steps{"x", ""}));
  EXPECT_EQ(t.matched, 1u);
}

TEST(StopMatcher, EarliestStartWinsEvenWhenALaterOneCompletesFirst) {
  // After "abc", "bc" is complete but "abcd" may still complete at an earlier position: wait.
  Trace t = feed({"abcd", "bc"}, {"ab", "c", "d"});
  EXPECT_EQ(t.steps, (Steps{"", "", ""}));
  EXPECT_EQ(t.text, "");
  EXPECT_EQ(t.matched, 0u);

  t = feed({"abcd", "bc"}, {"ab", "c", "x"});
  EXPECT_EQ(t.steps, (Steps{"", "", "a"}));
  EXPECT_EQ(t.matched, 1u);
}

TEST(StopMatcher, SeveralStopStringsEarliestMatchWins) {
  Trace t = feed({"world", "lo", "!"}, {"hello world!"});
  EXPECT_EQ(t.text, "hel");
  EXPECT_EQ(t.matched, 1u);

  // Same start: the shorter one is reported (it is the one that completes first when streaming).
  t = feed({"abc", "ab"}, {"xabc"});
  EXPECT_EQ(t.text, "x");
  EXPECT_EQ(t.matched, 1u);
  t = feed({"abc", "ab"}, {"x", "a", "b", "c"});
  EXPECT_EQ(t.text, "x");
  EXPECT_EQ(t.matched, 1u);
}

TEST(StopMatcher, NeverSplitsAMultibyteCharacter) {
  // "é" = C3 A9 arrives split; the lone lead byte is held until its continuation comes.
  Trace t = feed({"zz"}, {"caf", "\xC3", "\xA9!"});
  EXPECT_EQ(t.steps, (Steps{"caf", "", "\xC3\xA9!", ""}));

  // A 4-byte emoji in three pieces.
  t = feed({}, {"a\xF0", "\x9F\x98", "\x80" "b"});
  EXPECT_EQ(t.steps, (Steps{"a", "", "\xF0\x9F\x98\x80" "b", ""}));

  // A multibyte stop string split inside its first character.
  t = feed({"\xC3\xA9t\xC3\xA9"}, {"l'", "\xC3", "\xA9t\xC3", "\xA9 chaud"});  // stop "été"
  EXPECT_EQ(t.steps, (Steps{"l'", "", "", ""}));
  EXPECT_EQ(t.text, "l'");
  EXPECT_TRUE(t.stopped);

  // Cut just before a multibyte character that starts the stop string.
  t = feed({"\xE2\x80\x94"}, {"a\xE2\x80", "\x94" "b"});  // stop "—"
  EXPECT_EQ(t.steps, (Steps{"a", ""}));

  // An incomplete character at the very end is released by flush (the decoder upstream would
  // have turned it into U+FFFD; the matcher does not invent text).
  t = feed({}, {"x\xE2\x80"});
  EXPECT_EQ(t.steps, (Steps{"x", "\xE2\x80"}));
}

TEST(StopMatcher, NoStopStringsPassTextThrough) {
  const Trace t = feed({}, {"a", "bc", ""});
  EXPECT_EQ(t.steps, (Steps{"a", "bc", "", ""}));
  EXPECT_FALSE(t.stopped);
}

TEST(StopMatcher, IgnoresInputAfterAStopAndResetStartsOver) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abc END def").text, "abc ");
  const StopStep after = m.push("more");
  EXPECT_EQ(after.text, "");
  EXPECT_TRUE(after.stopped);
  EXPECT_TRUE(m.flush().stopped);
  m.reset();
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("fresh E").text, "fresh ");
  EXPECT_EQ(m.flush().text, "E");
}

TEST(StopMatcher, RejectsEmptyAndInvalidStopStrings) {
  EXPECT_NE(error_of([] { StopMatcher m({"ok", ""}); }).find("#1 is empty"), std::string::npos);
  EXPECT_NE(error_of([] { StopMatcher m({"\xA9x"}); }).find("#0 is not valid UTF-8"), std::string::npos);
  EXPECT_NE(error_of([] { StopMatcher m({"\xC3"}); }).find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(error_of([] { StopMatcher m({"\xC0\x80"}); }).find("not valid UTF-8"), std::string::npos);  // overlong
}

// ---------------------------------------------------------------------------------------------
// streaming = cutting the whole text, however it is split

using test::is_valid_utf8;

TEST(StopMatcher, StreamingEqualsCuttingTheWholeTextForAnySplit) {
  // Small alphabets make overlaps and near-misses common; "é" adds multibyte characters.
  const std::vector<std::string> alphabet = {"a", "b", "c", "\xC3\xA9"};
  std::mt19937 rng(12345);
  auto word = [&](size_t min_len, size_t max_len) {
    std::string w;
    const size_t len = min_len + rng() % (max_len - min_len + 1);
    for (size_t i = 0; i < len; ++i) w += alphabet[rng() % alphabet.size()];
    return w;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    for (size_t k = 0, n = 1 + rng() % 3; k < n; ++k) stops.push_back(word(1, 4));
    const std::string text = word(0, 14);

    // The definition: the earliest start; at equal starts the shortest, then the first listed.
    size_t cut = std::string::npos;
    std::optional<size_t> which;
    for (size_t k = 0; k < stops.size(); ++k) {
      const size_t pos = text.find(stops[k]);
      if (pos != std::string::npos && (pos < cut || (pos == cut && stops[k].size() < stops[*which].size()))) {
        cut = pos;
        which = k;
      }
    }
    const std::string want = text.substr(0, cut);

    // A random split at byte positions (so multibyte characters get split too).
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t len = std::min(text.size() - i, static_cast<size_t>(rng() % 5));
      pieces.push_back(text.substr(i, len));
      i += len;
    }
    const Trace t = feed(stops, pieces);
    std::string ctx = "text '" + text + "', stops:";
    for (const auto& s : stops) ctx += " '" + s + "'";
    ASSERT_EQ(t.text, want) << ctx;
    ASSERT_EQ(t.stopped, which.has_value()) << ctx;
    ASSERT_EQ(t.matched, which) << ctx;
    for (const std::string& s : t.steps) ASSERT_TRUE(is_valid_utf8(s)) << ctx << ": released a split character";
  }
}

// ---------------------------------------------------------------------------------------------

TEST(StopTokens, ContainsExactlyTheGivenIds) {
  StopTokens ids{7, 2, 7};
  EXPECT_TRUE(ids.contains(2));
  EXPECT_TRUE(ids.contains(7));
  EXPECT_FALSE(ids.contains(3));
  ids.add(3);
  ids.add(3);
  EXPECT_TRUE(ids.contains(3));
  EXPECT_EQ(std::vector<int32_t>(ids.ids().begin(), ids.ids().end()), (std::vector<int32_t>{2, 3, 7}));
  EXPECT_TRUE(StopTokens().empty());
  EXPECT_FALSE(StopTokens().contains(0));
}

}  // namespace
}  // namespace npullm::genai
