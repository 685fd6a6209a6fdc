// GPT-2's byte <-> unicode mapping, used by byte-level BPE vocabs (GPT-2, Llama 3, Qwen, ...):
// every byte is written as one printable code point, so that token texts are valid UTF-8 that
// never contain raw spaces or control characters ("Ġ" is a space, "Ċ" a newline).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace npullm::genai::detail {

// The UTF-8 text of the code point that stands for byte `b`.
std::string_view byte_to_chars(uint8_t b);
// The byte that code point `cp` stands for, or -1 when `cp` is not one of the 256 byte chars.
int byte_from_codepoint(uint32_t cp);
// `bytes` spelled with byte chars.
std::string byte_level_encode(std::string_view bytes);
// The bytes a byte-char text stands for. Characters outside the table (which a well-formed
// byte-level token never holds) are kept as their own UTF-8, so nothing is lost.
std::string byte_level_decode(std::string_view text);

}  // namespace npullm::genai::detail
