// Stop rules: stop strings, matched on the text as it streams, and stop token ids.
//
// StopMatcher's contract. Let T be all the text pushed so far and m the earliest position at
// which any stop string occurs in T. The final output is T[0, m) (T when nothing matched): the
// stop string and everything after it are never released. While streaming, push() releases the
// longest prefix of T that is certain to belong to the final output, so:
//   - a stop string split over several pieces (tokens) is caught, and none of it is shown;
//   - text at the end that could still grow into a stop string is held back, and released as
//     soon as it cannot (or by flush() when generation ends for another reason);
//   - every position is considered, so overlapping partial matches ("abab" in "ababab", or the
//     stops "ab" and "bc") are never lost;
//   - with several stop strings the earliest start wins, even when a later-starting one completes
//     first (the matcher waits until the earlier candidate is decided);
//   - released text never ends inside a UTF-8 multibyte character.
// The released text, and whether and where it stops, do not depend on how T was cut into pieces.
//
// Typical use in a generation loop:
//   StopMatcher stop(cfg.stop_strings);
//   StopTokens stop_ids(cfg.stop_token_ids);  stop_ids.add(tokenizer.eos());
//   for (...) {
//     id = sampler.sample(logits);
//     if (stop_ids.contains(id)) break;
//     StopStep s = stop.push(decoder.push(id));
//     emit(s.text);
//     if (s.stopped) break;
//   }
//   if (!stop.stopped()) { emit(stop.push(decoder.flush()).text); emit(stop.flush().text); }
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace npullm::genai {

struct StopStep {
  std::string text;      // may be shown now (possibly empty)
  bool stopped = false;  // a stop string was hit: `text` ends where it began; end the generation
};

class StopMatcher {
 public:
  // Throws npullm::Error for an empty stop string (it would match before any text) or one that
  // is not valid UTF-8. No stop strings: text passes straight through (UTF-8 completeness aside).
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Feeds the next piece of generated text. After a stop, returns {"", true} and ignores input.
  StopStep push(std::string_view piece);
  // The generation ended for another reason (EOS, length): releases what was held back.
  StopStep flush();

  bool stopped() const { return matched_.has_value(); }
  // Which stop string ended the output (index into stops()); among those starting at the same
  // earliest position, the shortest (it is the one that completes first while streaming).
  std::optional<size_t> matched() const { return matched_; }
  const std::vector<std::string>& stops() const { return stops_; }
  // Ready for a new generation with the same stop strings.
  void reset();

 private:
  StopStep step(bool at_end);

  std::vector<std::string> stops_;
  std::string pending_;  // pushed but not yet released
  std::optional<size_t> matched_;
};

// A small set of token ids that end the generation when sampled (EOS, <|im_end|>, ...).
class StopTokens {
 public:
  StopTokens() = default;
  StopTokens(std::initializer_list<int32_t> ids) : StopTokens(std::vector<int32_t>(ids)) {}
  explicit StopTokens(std::vector<int32_t> ids);
  void add(int32_t id);
  bool contains(int32_t id) const;
  bool empty() const { return ids_.empty(); }
  std::span<const int32_t> ids() const { return ids_; }  // ascending, no duplicates

 private:
  std::vector<int32_t> ids_;
};

// The length of the longest prefix of s[0, end) that does not stop inside a UTF-8 multibyte
// character. Bytes that can never become valid UTF-8 count as whole characters.
size_t utf8_safe_end(std::string_view s, size_t end);

}  // namespace npullm::genai
