// GPT-2's byte <-> unicode table, built from its definition: the printable bytes '!'..'~',
// U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the other 68 bytes (controls, space,
// DEL, U+0080..U+00A0, soft hyphen) are numbered in byte order and stand for U+0100 + that number.
#include "genai/tokenizer/byte_level.h"

#include <array>

#include "genai/utf8.h"

namespace npullm::genai::detail {

namespace {

struct Table {
  std::array<uint32_t, 256> cp{};
  std::array<std::string, 256> utf8;

  Table() {
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      cp[b] = printable ? b : next++;
      utf8_append(utf8[b], cp[b]);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

std::string_view byte_to_chars(uint8_t b) { return table().utf8[b]; }

int byte_from_codepoint(uint32_t cp) {
  // The table's code points are all below U+0144: bytes map to themselves or to U+0100 + n.
  if (cp < 0x100) {
    const bool printable = (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE);
    return printable ? static_cast<int>(cp) : -1;
  }
  if (cp >= 0x100 + 68) return -1;
  // U+0100 + n is the n-th non-printable byte.
  static const std::array<uint8_t, 68> unprintable = [] {
    std::array<uint8_t, 68> u{};
    size_t n = 0;
    for (uint32_t b = 0; b < 256; ++b)
      if (table().cp[b] >= 0x100) u[n++] = static_cast<uint8_t>(b);
    return u;
  }();
  return unprintable[cp - 0x100];
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(table().utf8[static_cast<uint8_t>(c)]);
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const int32_t cp = utf8_next(text, pos);
    const int b = cp < 0 ? -1 : byte_from_codepoint(static_cast<uint32_t>(cp));
    if (b >= 0)
      out.push_back(static_cast<char>(b));
    else
      out.append(text.substr(start, pos - start));
  }
  return out;
}

}  // namespace npullm::genai::detail
