#include "genai/tools/tool_prompt.h"

#include "common/error.h"

namespace npullm::genai::tools {

using nlohmann::ordered_json;

namespace {

// A function's parameters schema; an omitted one means "no parameters" (OpenAI).
ordered_json parameters_of(const Tool& t) {
  if (!t.parameters.is_null()) return t.parameters;
  return {{"type", "object"}, {"properties", ordered_json::object()}};
}

ordered_json function_json(const Tool& t) {
  ordered_json f = {{"name", t.name}};
  if (!t.description.empty()) f["description"] = t.description;
  f["parameters"] = parameters_of(t);
  return f;
}

// Templates take a call's arguments as a mapping (Qwen2.5 and Llama 3.1 write them with tojson).
ordered_json arguments_object(const ToolCall& c) {
  try {
    return ordered_json::parse(c.arguments);
  } catch (const ordered_json::exception&) {
    fail("the arguments of tool call '{}' ({}) are not JSON", c.id, c.name);
  }
}

ordered_json call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", arguments_object(c)}}}};
}

// A call in the Hermes form npullm asks Generic templates' models for (and parses back).
std::string hermes_text(const ToolCall& c) {
  return "<tool_call>\n" + ordered_json({{"name", c.name}, {"arguments", arguments_object(c)}}).dump() + "\n</tool_call>";
}

std::string generic_instructions(const std::vector<Tool>& tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to help with the user's request. The functions, as JSON schemas:\n";
  for (const Tool& t : tools) s += function_json(t).dump() + "\n";
  s += "\nTo call a function, reply with one block per call, each of the form\n"
       "<tool_call>\n{\"name\": <function name>, \"arguments\": <the arguments as a JSON object>}\n</tool_call>\n"
       "and nothing after them. The results come back in <tool_response> blocks; use them to answer.";
  return s;
}

ordered_json plain(const Message& m) {
  ordered_json j = {{"role", m.role}, {"content", m.content}};
  if (!m.name.empty()) j["name"] = m.name;
  return j;
}

TemplateInput generic(const std::vector<Message>& messages, const std::vector<Tool>& shown) {
  struct Turn {
    std::string role, content, name;
  };
  std::vector<Turn> turns;
  // Consecutive turns of one role become one (tool results after each other, or a result and
  // the user's next question), so that templates that insist on alternating turns still render.
  auto add = [&](const std::string& role, const std::string& text, const std::string& name) {
    if (!turns.empty() && turns.back().role == role && turns.back().name.empty() && name.empty())
      turns.back().content += "\n\n" + text;
    else
      turns.push_back({role, text, name});
  };
  size_t first = 0;
  if (!shown.empty()) {
    std::string system = generic_instructions(shown);
    if (!messages.empty() && messages[0].role == "system") {
      system = messages[0].content + (messages[0].content.empty() ? "" : "\n\n") + system;
      first = 1;
    }
    turns.push_back({"system", system, ""});
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == "tool") {
      add("user", "<tool_response>\n" + m.content + "\n</tool_response>", "");
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      std::string text = m.content;
      for (const ToolCall& c : m.tool_calls) text += (text.empty() ? "" : "\n") + hermes_text(c);
      add("assistant", text, m.name);
    } else {
      add(m.role, m.content, m.name);
    }
  }
  TemplateInput in;
  for (const Turn& t : turns) {
    ordered_json j = {{"role", t.role}, {"content", t.content}};
    if (!t.name.empty()) j["name"] = t.name;
    in.messages.push_back(std::move(j));
  }
  return in;
}

// gpt-oss's template renders one call per assistant message (the first of its tool_calls) and
// names a tool result after the latest call. So an assistant turn with several calls becomes one
// message per call, each followed by its result (matched by tool_call_id; results that match
// none follow in their order), and the turn's content goes with its first call.
TemplateInput harmony(const std::vector<Message>& messages, const std::vector<Tool>& shown) {
  TemplateInput in;
  if (!shown.empty()) in.extra["tools"] = tools_json(shown);
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role != "assistant" || m.tool_calls.empty()) {
      ordered_json j = plain(m);
      if (m.role == "tool") j["tool_call_id"] = m.tool_call_id;
      in.messages.push_back(std::move(j));
      continue;
    }
    size_t end = i + 1;  // the results that answer this turn
    while (end < messages.size() && messages[end].role == "tool") ++end;
    std::vector<bool> used(end - i - 1, false);
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
      const ToolCall& c = m.tool_calls[k];
      ordered_json j = plain(m);
      if (k > 0) j["content"] = "";
      j["tool_calls"] = ordered_json::array({call_json(c)});
      in.messages.push_back(std::move(j));
      for (size_t r = i + 1; r < end; ++r) {
        if (used[r - i - 1] || messages[r].tool_call_id != c.id) continue;
        used[r - i - 1] = true;
        ordered_json t = plain(messages[r]);
        t["tool_call_id"] = messages[r].tool_call_id;
        in.messages.push_back(std::move(t));
        break;
      }
    }
    for (size_t r = i + 1; r < end; ++r) {
      if (used[r - i - 1]) continue;
      ordered_json t = plain(messages[r]);
      t["tool_call_id"] = messages[r].tool_call_id;
      in.messages.push_back(std::move(t));
    }
    i = end - 1;
  }
  return in;
}

}  // namespace

ordered_json tools_json(const std::vector<Tool>& tools) {
  ordered_json a = ordered_json::array();
  for (const Tool& t : tools) a.push_back({{"type", "function"}, {"function", function_json(t)}});
  return a;
}

TemplateInput template_input(Family family, const std::vector<Message>& messages, const std::vector<Tool>& tools,
                             const ToolChoice& choice) {
  const std::vector<Tool> none;
  const std::vector<Tool>& shown = choice.mode == ToolChoice::Mode::None ? none : tools;
  if (family == Family::Generic) return generic(messages, shown);
  if (family == Family::Harmony) return harmony(messages, shown);

  TemplateInput in;
  if (!shown.empty()) in.extra["tools"] = tools_json(shown);
  bool system_seen = false;
  for (const Message& m : messages) {
    ordered_json j = plain(m);
    if (m.role == "tool") {
      j["tool_call_id"] = m.tool_call_id;
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      if (family == Family::Phi4Mini) {
        // Phi-4-mini's template writes only the content: the calls go there in the model's own form.
        ordered_json calls = ordered_json::array();
        for (const ToolCall& c : m.tool_calls) calls.push_back({{"name", c.name}, {"arguments", arguments_object(c)}});
        j["content"] = m.content + "<|tool_call|>" + calls.dump() + "<|/tool_call|>";
      } else {
        j["tool_calls"] = ordered_json::array();
        for (const ToolCall& c : m.tool_calls) j["tool_calls"].push_back(call_json(c));
      }
    } else if (m.role == "system" && family == Family::Phi4Mini && !system_seen && !shown.empty()) {
      // Phi-4-mini takes the functions as JSON text in the system message's `tools` field.
      ordered_json fns = ordered_json::array();
      for (const Tool& t : shown) fns.push_back(function_json(t));
      j["tools"] = fns.dump();
    }
    system_seen |= m.role == "system";
    in.messages.push_back(std::move(j));
  }
  if (family == Family::Phi4Mini && !system_seen && !shown.empty()) {
    ordered_json fns = ordered_json::array();
    for (const Tool& t : shown) fns.push_back(function_json(t));
    in.messages.insert(in.messages.begin(), ordered_json{{"role", "system"}, {"content", ""}, {"tools", fns.dump()}});
  }
  return in;
}

}  // namespace npullm::genai::tools
