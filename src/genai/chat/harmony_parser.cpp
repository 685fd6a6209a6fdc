// See harmony_parser.h for the format and where each part goes.
#include "genai/chat/harmony_parser.h"

#include <array>
#include <cctype>

namespace npullm::genai {

namespace {

constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
// What ends a body: the next message's start (<|start|>, or <|channel|> when the model leaves
// <|start|>assistant out), and the end markers where the vocabulary prints them.
constexpr std::array<std::string_view, 5> kBodyEnds = {"<|start|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>"};
// A first "header" this long without a marker is plain text from a model that does not speak
// harmony (a real header is a role, a recipient and a channel: a few dozen bytes).
constexpr size_t kMaxPlainHeader = 128;

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// The word starting at `at` (after spaces): up to a space, a marker's '<', or the end.
std::string_view word_at(std::string_view s, size_t at) {
  while (at < s.size() && is_space(s[at])) ++at;
  size_t end = at;
  while (end < s.size() && !is_space(s[end]) && s[end] != '<') ++end;
  return s.substr(at, end - at);
}

// Where the earliest body end is in `s` (npos if none) and which marker it is.
size_t find_body_end(std::string_view s, std::string_view& marker) {
  size_t best = std::string_view::npos;
  for (std::string_view m : kBodyEnds) {
    const size_t at = s.find(m);
    if (at < best) best = at, marker = m;
  }
  return best;
}

// Bytes at the end of `s` that could be the start of a body-end marker (to hold back until the
// next piece shows whether they are).
size_t partial_marker_tail(std::string_view s) {
  const size_t from = s.size() > 10 ? s.size() - 10 : 0;  // the longest marker has 10 bytes + 1
  for (size_t at = from; at < s.size(); ++at) {
    if (s[at] != '<') continue;
    const std::string_view tail = s.substr(at);
    for (std::string_view m : kBodyEnds)
      if (m.size() > tail.size() && m.compare(0, tail.size(), tail) == 0) return s.size() - at;
  }
  return 0;
}

}  // namespace

HarmonyParser::HarmonyParser(bool text_first) {
  if (text_first) {
    state_ = State::Body;
    sink_ = Sink::Content;
    first_header_ = false;
  }
}

std::string HarmonyParser::render_call(const Call& call) {
  std::string s = "<|start|>assistant to=" + call.recipient + "<|channel|>commentary";
  if (!call.constraint.empty()) s += " " + call.constraint;
  return s + "<|message|>" + call.arguments + "<|call|>";
}

HarmonyParser::Delta HarmonyParser::feed(std::string_view piece) {
  Delta d;
  buf_.append(piece);
  process(d, false);
  return d;
}

HarmonyParser::Delta HarmonyParser::finish() {
  Delta d;
  process(d, true);
  return d;
}

void HarmonyParser::process(Delta& d, bool at_end) {
  for (;;) {
    if (state_ == State::Header) {
      // No header after all: the reply is plain text. Decided on the first bytes alone, so that
      // how the text was cut into pieces does not matter.
      if (first_header_) {
        const std::string_view probe = std::string_view(buf_).substr(0, kMaxPlainHeader + 1);
        if (probe.find("<|") == std::string_view::npos && (at_end || probe.size() > kMaxPlainHeader)) {
          state_ = State::Body;
          sink_ = Sink::Content;
          first_header_ = false;
          continue;
        }
      }
      const size_t at = buf_.find(kMessage);
      if (at != std::string::npos) {
        open_body(std::string_view(buf_).substr(0, at));
        buf_.erase(0, at + kMessage.size());
        state_ = State::Body;
        first_header_ = false;
        continue;
      }
      if (at_end) buf_.clear();  // an unfinished header is markup, not text
      return;
    }

    std::string_view marker;
    const size_t at = find_body_end(buf_, marker);
    if (at != std::string::npos) {
      say(d, std::string_view(buf_).substr(0, at));
      // <|channel|> is already part of the next header; the other markers only end this body.
      buf_.erase(0, marker == kChannel ? at : at + marker.size());
      close_body(d);
      state_ = State::Header;
      continue;
    }
    const size_t hold = at_end ? 0 : partial_marker_tail(buf_);
    say(d, std::string_view(buf_).substr(0, buf_.size() - hold));
    buf_.erase(0, buf_.size() - hold);
    if (at_end) close_body(d);
    return;
  }
}

void HarmonyParser::open_body(std::string_view header) {
  std::string_view channel, recipient, constraint;
  if (const size_t c = header.find(kChannel); c != std::string_view::npos) {
    channel = word_at(header, c + kChannel.size());
    // "commentary json": a content type may follow the channel name.
    const size_t after = channel.data() + channel.size() - header.data();
    if (std::string_view next = word_at(header, after); !next.empty() && next.rfind("to=", 0) != 0) constraint = next;
  }
  for (size_t at = header.find("to="); at != std::string_view::npos; at = header.find("to=", at + 1)) {
    if (at == 0 || is_space(header[at - 1]) || header[at - 1] == '>') {
      recipient = word_at(header, at + 3);
      break;
    }
  }
  if (const size_t k = header.find(kConstrain); k != std::string_view::npos) constraint = word_at(header, k + kConstrain.size());

  if (!recipient.empty()) {
    sink_ = Sink::Call;
    call_ = Call{std::string(recipient), std::string(constraint), ""};
  } else if (channel == "analysis") {
    sink_ = Sink::Reasoning;
  } else {
    sink_ = Sink::Content;
  }
}

void HarmonyParser::close_body(Delta& d) {
  if (sink_ == Sink::Call) {
    d.calls.push_back(call_);
    calls_.push_back(std::move(call_));
    call_ = Call{};
  }
  sink_ = Sink::Content;
}

void HarmonyParser::say(Delta& d, std::string_view text) {
  if (text.empty()) return;
  switch (sink_) {
    case Sink::Content:
      d.content.append(text);
      content_.append(text);
      break;
    case Sink::Reasoning:
      d.reasoning.append(text);
      reasoning_.append(text);
      break;
    case Sink::Call:
      call_.arguments.append(text);
      break;
  }
}

}  // namespace npullm::genai
