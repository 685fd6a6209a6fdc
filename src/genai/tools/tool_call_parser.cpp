#include "genai/tools/tool_call_parser.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace npullm::genai::tools {

namespace {

constexpr const char* kSpace = " \t\r\n";

// The length of the longest end of `s` that begins `marker` (a marker that may be arriving).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

ToolCallParser::ToolCallParser(Family family, Mode mode, std::vector<std::string> tools, bool parallel, std::string id_prefix)
    : family_(family), mode_(mode), tools_(std::move(tools)), parallel_(parallel), id_prefix_(std::move(id_prefix)) {
  switch (family_) {
    case Family::Hermes:
    case Family::Generic: open_ = "<tool_call>", close_ = "</tool_call>"; break;
    case Family::Phi4Mini: open_ = "<|tool_call|>", close_ = "<|/tool_call|>"; break;
    case Family::Llama3: open_ = "<|python_tag|>"; break;
    case Family::Harmony: break;  // the harmony parser finds the messages
  }
}

ToolCallParser::Delta ToolCallParser::feed(std::string_view piece) {
  Delta d;
  if (family_ == Family::Harmony) {
    take_harmony(d, harmony_.feed(piece));
    return d;
  }
  buf_ += piece;
  process(d, false);
  return d;
}

ToolCallParser::Delta ToolCallParser::finish() {
  Delta d;
  if (family_ == Family::Harmony) take_harmony(d, harmony_.finish());
  else process(d, true);
  // Trailing whitespace belongs to a plain reply (kept byte for byte), not around calls.
  if (calls_.empty() && !held_ws_.empty()) {
    d.content += held_ws_;
    content_ += held_ws_;
  }
  held_ws_.clear();
  return d;
}

void ToolCallParser::process(Delta& d, bool at_end) {
  for (;;) {
    if (!in_call_) {
      // JSON at the start of the reply is its calls: the constrained form (required), or Llama 3's
      // and Phi-4-mini's, whose markers are control tokens that the detokenizer does not print.
      if ((mode_ == Mode::Required || family_ == Family::Llama3 || family_ == Family::Phi4Mini) && !seen_text_ && found_ == 0) {
        const size_t i = buf_.find_first_not_of(kSpace);
        if (i == std::string::npos) {
          if (at_end) emit_content(d, buf_), buf_.clear();
          return;
        }
        if (buf_[i] == '{' || buf_[i] == '[') {
          in_call_ = bare_ = true;
          continue;
        }
        seen_text_ = true;
      }
      const size_t p = buf_.find(open_);
      if (p != std::string::npos) {
        emit_content(d, std::string_view(buf_).substr(0, p));
        held_ws_.clear();  // whitespace before a call is not content
        buf_.erase(0, p + open_.size());
        in_call_ = true;
        bare_ = false;
        continue;
      }
      const size_t keep = at_end ? 0 : partial_marker(buf_, open_);
      emit_content(d, std::string_view(buf_).substr(0, buf_.size() - keep));
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    // Inside a call: its body runs to the closing marker, or (bare, or no closing marker) to the end.
    std::string body, raw;
    const size_t p = bare_ || close_.empty() ? std::string::npos : buf_.find(close_);
    if (p != std::string::npos) {
      body = buf_.substr(0, p);
      raw = open_ + body + close_;
      buf_.erase(0, p + close_.size());
    } else {
      if (!at_end) return;
      body = std::move(buf_);
      raw = (bare_ ? "" : open_) + body;
      buf_.clear();
    }
    in_call_ = false;
    if (parse_calls(body, d)) after_call_ = true;
    else emit_content(d, raw);  // not calls of ours: the text stays
  }
}

void ToolCallParser::emit_content(Delta& d, std::string_view text) {
  if (text.empty()) return;
  std::string s = held_ws_;
  s += text;
  held_ws_.clear();
  if (after_call_) {
    const size_t i = s.find_first_not_of(kSpace);
    if (i == std::string::npos) return;  // whitespace after a call: not content
    s.erase(0, i);
  }
  const size_t e = s.find_last_not_of(kSpace);
  if (e == std::string::npos) {
    held_ws_ = std::move(s);
    return;
  }
  held_ws_ = s.substr(e + 1);
  s.resize(e + 1);
  after_call_ = false;
  seen_text_ = true;
  d.content += s;
  content_ += s;
}

void ToolCallParser::take_harmony(Delta& d, HarmonyParser::Delta h) {
  if (!h.reasoning.empty()) {
    d.reasoning += h.reasoning;
    reasoning_ += h.reasoning;
  }
  // A piece holds content and then the calls it completed (a call ends its message; text after
  // it in the same piece is rare, and then said before the call).
  emit_content(d, h.content);
  for (const HarmonyParser::Call& c : h.calls) {
    constexpr std::string_view kNamespace = "functions.";
    const std::string_view to = c.recipient;
    bool ok = to.substr(0, kNamespace.size()) == kNamespace && (c.constraint.empty() || c.constraint == "json");
    const std::string name(ok ? to.substr(kNamespace.size()) : std::string_view());
    ok = ok && std::find(tools_.begin(), tools_.end(), name) != tools_.end();
    std::string args;
    if (ok) {
      try {
        const nlohmann::ordered_json a = nlohmann::ordered_json::parse(c.arguments);
        ok = a.is_object();
        if (ok) args = a.dump();
      } catch (const nlohmann::ordered_json::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      emit_content(d, HarmonyParser::render_call(c));  // not a call of ours: the text stays
      continue;
    }
    held_ws_.clear();  // whitespace before a call is not content
    found_++;
    add_calls({ToolCall{"", name, std::move(args)}}, d);
    after_call_ = true;
  }
}

void ToolCallParser::add_calls(std::vector<ToolCall> found, Delta& d) {
  for (ToolCall& c : found) {
    if (!parallel_ && !calls_.empty()) continue;  // parallel_tool_calls false: the first call only
    c.id = id_prefix_ + std::to_string(calls_.size());
    calls_.push_back(c);
    d.calls.push_back(std::move(c));
  }
}

bool ToolCallParser::parse_calls(std::string_view body, Delta& d) {
  using nlohmann::ordered_json;
  ordered_json j;
  try {
    j = ordered_json::parse(body);
  } catch (const ordered_json::exception&) {
    return false;
  }
  std::vector<ordered_json> items;
  if (j.is_array()) items.assign(j.begin(), j.end());
  else items.push_back(std::move(j));
  if (items.empty()) return false;
  std::vector<ToolCall> found;
  for (const ordered_json& it : items) {
    if (!it.is_object()) return false;
    auto name = it.find("name");
    if (name == it.end() || !name->is_string()) return false;
    if (std::find(tools_.begin(), tools_.end(), name->get<std::string>()) == tools_.end()) return false;
    // "arguments" (OpenAI, Hermes, Phi-4-mini) or "parameters" (Llama 3); an object, or its JSON text.
    auto args = it.find("arguments");
    if (args == it.end()) args = it.find("parameters");
    ordered_json a = args == it.end() ? ordered_json::object() : *args;
    if (a.is_string()) {
      try {
        a = ordered_json::parse(a.get<std::string>());
      } catch (const ordered_json::exception&) {
        return false;
      }
    }
    if (!a.is_object()) return false;
    found.push_back({"", name->get<std::string>(), a.dump()});
  }
  found_ += static_cast<int64_t>(found.size());
  add_calls(std::move(found), d);
  return true;
}

}  // namespace npullm::genai::tools
