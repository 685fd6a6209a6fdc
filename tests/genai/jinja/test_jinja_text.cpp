// The Jinja engine's strings are code points (jinja/text.h): bytes that are not well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence) are
// kept one code point each and written back unchanged, so a template never alters a message's bytes.
#include <gtest/gtest.h>

#include <string>

#include "genai/jinja/text.h"

namespace npullm::genai::jinja {
namespace {

TEST(JinjaText, WellFormedCharactersAreOneCodePointEach) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a, U+00E9, U+20AC, U+1F600
  EXPECT_EQ(utf8_decode(s), (std::u32string{U'a', U'\u00E9', U'\u20AC', U'\U0001F600'}));
  EXPECT_EQ(utf8_encode(utf8_decode(s)), s);
}

TEST(JinjaText, MalformedBytesAreKeptOneByOneAndWrittenBackUnchanged) {
  const std::string cases[] = {
      "\xC0\x80",          // overlong NUL
      "\xE0\x80\xAF",      // overlong '/'
      "\xED\xA0\x80",      // a UTF-16 surrogate, U+D800
      "\xF4\x90\x80\x80",  // U+110000, past the last code point
      "\xF5\x80",          // a lead byte no character has
      "\xE2\x82",          // truncated U+20AC
      "\x80",              // a lone continuation byte
      "\xC3(",             // a lead byte followed by ASCII
  };
  for (const std::string& bad : cases) {
    SCOPED_TRACE(testing::PrintToString(bad));
    const std::u32string cps = utf8_decode("x" + bad + "y");
    // No character is accepted: every byte is a code point of its own ('(' being one anyway).
    EXPECT_EQ(cps.size(), 2 + bad.size());
    EXPECT_EQ(utf8_encode(cps), "x" + bad + "y");
  }
}

}  // namespace
}  // namespace npullm::genai::jinja
