// Text helpers for the Jinja engine: UTF-8 <-> code points, and the handful of Python `str`
// behaviours that chat templates depend on (what counts as whitespace, case mapping, float repr).
//
// Jinja runs on Python strings, which are sequences of code points: `len`, indexing and slicing count
// characters, not bytes, and `strip()` removes Unicode whitespace. Strings here are UTF-8 in
// std::string and are decoded to std::u32string only when an operation needs code points.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace npullm::genai::jinja {

// Decodes UTF-8. A byte that does not start a valid sequence becomes U+DC80+byte (Python's
// "surrogateescape"), so that decoding then encoding gives back the same bytes.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
// Number of code points (what Python's len() says for the decoded string).
size_t utf8_length(std::string_view s);

// Python's str.isspace() for one code point.
bool py_isspace(char32_t c);
// Code-point classification and simple (1:1) case mapping. Uses the C library's UTF-8 tables when
// the C.UTF-8 locale is available, and ASCII rules otherwise.
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
bool py_isalnum(char32_t c);
bool py_islower(char32_t c);
bool py_isupper(char32_t c);
char32_t py_toupper(char32_t c);
char32_t py_tolower(char32_t c);

// str.upper() / str.lower(); ß upper-cases to "SS" as in Python.
std::string str_upper(std::string_view s);
std::string str_lower(std::string_view s);

// Python's repr(float): the shortest text that reads back to the same double, in the layout
// Python uses ("1.0", "0.0001", "1e-05", "1e+16", "inf", "nan").
std::string py_float_repr(double d);
// Python's repr(str): quoted with ' unless the text holds ' and no ", control characters escaped.
std::string py_str_repr(std::string_view s);

}  // namespace npullm::genai::jinja
