#include "genai/sampling/stop_rules.h"

#include <algorithm>

#include "common/error.h"

namespace npullm::genai {

namespace {

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// How many bytes the character that starts with lead byte b has; 1 for bytes that cannot start a
// multibyte character (ASCII, stray continuation bytes, 0xF8..0xFF).
size_t utf8_length(unsigned char b) {
  if (b >= 0xC0 && b < 0xE0) return 2;
  if (b >= 0xE0 && b < 0xF0) return 3;
  if (b >= 0xF0 && b < 0xF8) return 4;
  return 1;
}

// Structural UTF-8 check for the stop strings: lead bytes followed by the right number of
// continuation bytes, no overlong forms, surrogates or code points past U+10FFFF.
bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    const size_t len = utf8_length(b);
    if (len == 1 || b == 0xC0 || b == 0xC1 || b > 0xF4 || i + len > s.size()) return false;
    uint32_t cp = b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (!is_continuation(c)) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

}  // namespace

size_t utf8_safe_end(std::string_view s, size_t end) {
  // A character is at most 4 bytes, so its lead byte is within the last 4 bytes before `end`.
  for (size_t back = 1; back <= 4 && back <= end; ++back) {
    const size_t j = end - back;
    const auto b = static_cast<unsigned char>(s[j]);
    if (is_continuation(b)) continue;
    // The character starting at j needs utf8_length(b) bytes; if they do not all fit before
    // `end`, cut before it. (A lead byte followed by too few continuation bytes is never
    // completed; it is still held, and released whole by the final step.)
    return j + utf8_length(b) > end ? j : end;
  }
  return end;  // only continuation bytes: invalid text that no later byte can repair
}

// ---------------------------------------------------------------------------------------------

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t k = 0; k < stops_.size(); ++k) {
    if (stops_[k].empty()) fail("stop string #{} is empty; it would stop before the first token", k);
    if (!is_valid_utf8(stops_[k])) fail("stop string #{} is not valid UTF-8", k);
  }
}

void StopMatcher::reset() {
  pending_.clear();
  matched_.reset();
}

StopStep StopMatcher::push(std::string_view piece) {
  if (stopped()) return {"", true};
  pending_.append(piece);
  return step(/*at_end=*/false);
}

StopStep StopMatcher::flush() {
  if (stopped()) return {"", true};
  return step(/*at_end=*/true);
}

StopStep StopMatcher::step(bool at_end) {
  // Invariant: no stop string can start in text already released. Every position whose suffix
  // could still grow into a stop string is held, so any occurrence starts inside pending_.
  const std::string_view text = pending_;
  constexpr size_t none = std::string_view::npos;

  // The earliest complete occurrence; at the same start the shortest, then the first listed.
  size_t match = none, which = 0;
  for (size_t k = 0; k < stops_.size(); ++k) {
    const size_t pos = text.find(stops_[k]);
    if (pos != none && (pos < match || (pos == match && stops_[k].size() < stops_[which].size()))) {
      match = pos;
      which = k;
    }
  }

  // The earliest position where the text's tail is a proper prefix of a stop string: a match
  // that may still complete there. At the end of the generation nothing more comes, so none can.
  size_t partial = none;
  if (!at_end) {
    for (const std::string& s : stops_) {
      // Tails shorter than s only; scanning from the longest finds this string's earliest one.
      for (size_t i = text.size() - std::min(text.size(), s.size() - 1); i < text.size() && i < partial; ++i) {
        if (std::string_view(s).starts_with(text.substr(i))) {
          partial = i;
          break;
        }
      }
    }
  }

  // A complete match stops the output unless a match starting earlier is still possible (then
  // the earliest start might change, so wait). At an equal start the cut is the same either way.
  if (match != none && match <= partial) {
    StopStep out{pending_.substr(0, match), true};
    matched_ = which;
    pending_.clear();
    return out;
  }

  size_t release = std::min({partial, match, text.size()});
  if (!at_end) release = utf8_safe_end(text, release);
  StopStep out{pending_.substr(0, release), false};
  pending_.erase(0, release);
  return out;
}

// ---------------------------------------------------------------------------------------------

StopTokens::StopTokens(std::vector<int32_t> ids) : ids_(std::move(ids)) {
  std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
}

void StopTokens::add(int32_t id) {
  const auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
  if (it == ids_.end() || *it != id) ids_.insert(it, id);
}

bool StopTokens::contains(int32_t id) const { return std::binary_search(ids_.begin(), ids_.end(), id); }

}  // namespace npullm::genai
