// Small UTF-8 helpers shared by the tokenizers (genai/tokenizer/) and the Jinja engine (internal to genai/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace npullm::genai::detail {

// Length of the UTF-8 character that starts with `lead`, judged from the lead byte alone. This is
// deliberately as lenient as llama.cpp (continuation bytes are not checked, a stray continuation
// byte counts as one character): encoding never rejects input, and whatever such a "character"
// turns out to be, it has no token and is emitted byte by byte anyway.
inline size_t utf8_char_len(uint8_t lead) {
  if (lead < 0xC0) return 1;  // ASCII, or a stray continuation byte
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Appends the UTF-8 encoding of code point `cp` (<= 0x10FFFF).
inline void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes the character at s[pos] (pos < s.size()) and advances pos. Returns -1 (and advances one
// byte) for a byte that does not start a well-formed character, so callers can keep such bytes.
inline int32_t utf8_next(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  size_t n;
  uint32_t cp;
  if (b0 < 0x80) {
    ++pos;
    return b0;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, cp = b0 & 0x07;
  } else {
    ++pos;
    return -1;
  }
  if (pos + n > s.size()) {
    ++pos;
    return -1;
  }
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return -1;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++pos;
    return -1;
  }
  pos += n;
  return static_cast<int32_t>(cp);
}

}  // namespace npullm::genai::detail
