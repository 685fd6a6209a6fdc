// Text helpers: see text.h for why strings are handled as code points.
#include "genai/jinja/text.h"

#include <charconv>
#include <clocale>
#include <cmath>
#include <cwctype>
#include <locale.h>

#include "genai/utf8.h"

namespace npullm::genai::jinja {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  // detail::utf8_next rejects overlong forms, surrogates and truncated or broken sequences one
  // byte at a time, so every accepted character re-encodes identically and the rest round-trip.
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const int32_t cp = detail::utf8_next(s, i);
    out.push_back(cp < 0 ? char32_t{0xDC00} + b0 : static_cast<char32_t>(cp));  // surrogateescape: keeps the raw byte
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) out.push_back(static_cast<char>(c - 0xDC00));  // an escaped raw byte (see utf8_decode)
  else detail::utf8_append(out, static_cast<uint32_t>(c));
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  // Fast path for the common all-ASCII case; otherwise count what utf8_decode would produce.
  bool ascii = true;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  return ascii ? s.size() : utf8_decode(s).size();
}

bool py_isspace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D:
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x20:
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

// The C.UTF-8 locale, opened once and never installed globally (other code may rely on "C").
locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

bool use_wide(char32_t c) { return c >= 0x80 && !(c >= 0xD800 && c <= 0xDFFF) && utf8_locale() != nullptr; }

}  // namespace

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return use_wide(c) && iswalpha_l(static_cast<wint_t>(c), utf8_locale());
}

bool py_isdigit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return use_wide(c) && iswdigit_l(static_cast<wint_t>(c), utf8_locale());
}

bool py_isalnum(char32_t c) { return py_isalpha(c) || py_isdigit(c); }

bool py_islower(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z';
  return use_wide(c) && iswlower_l(static_cast<wint_t>(c), utf8_locale());
}

bool py_isupper(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z';
  return use_wide(c) && iswupper_l(static_cast<wint_t>(c), utf8_locale());
}

char32_t py_toupper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return use_wide(c) ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), utf8_locale())) : c;
}

char32_t py_tolower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return use_wide(c) ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), utf8_locale())) : c;
}

std::string str_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) {
    if (c == U'\u00DF') out += "SS";  // the one full case mapping templates are likely to meet
    else utf8_append(out, py_toupper(c));
  }
  return out;
}

std::string str_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) utf8_append(out, py_tolower(c));
  return out;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits come from to_chars in scientific form: "d.ddde[+-]xx".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits.push_back(c);
  int exp = 0;
  std::from_chars(sci.data() + epos + 1 + (sci[epos + 1] == '+'), sci.data() + sci.size(), exp);
  // Python switches to exponent notation when the decimal point would sit more than 16 digits
  // right of the first digit, or 4 or more zeros left of it.
  const int decpt = exp + 1;
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    const int e = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    out += eb;
  }
  return out;
}

namespace {

// Python's str.isprintable() is false for control, format, separator (other than ' '), surrogate,
// private-use and unassigned characters; this covers the ones that occur in practice.
bool py_isprintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F))
    return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xDFFF)) return false;
  if ((c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;
  return true;
}

}  // namespace

std::string py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_isprintable(c)) {
      char b[16];
      if (c < 0x100) std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(c));
      out += b;
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace npullm::genai::jinja
