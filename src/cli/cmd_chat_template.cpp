// npullm chat-template: render a chat template for a conversation and print exactly the text a
// model would be given (no newline added), or fail with the template's own error.
//
//   npullm chat-template --template llama3 --messages chat.json --add-generation-prompt
//
// --template takes a built-in name (llama2, llama3, chatml, mistral, zephyr, phi3, qwen3, ...), a
// Jinja file, an HF tokenizer_config.json (its chat_template, bos_token and eos_token), or Jinja
// source. --messages takes a JSON file (or - for stdin) holding either the message list or an
// object with "messages" and further template variables (tools, enable_thinking, ...).
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/error.h"
#include "genai/jinja/builtin_templates.h"
#include "genai/jinja/template.h"

namespace npullm::cli {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct ChatTemplateOptions {
  std::string choice, messages_path, bos, eos, date;
  bool add_generation_prompt = false;
};

std::string read_text(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open {}", path);
    ss << in.rdbuf();
  }
  return ss.str();
}

ojson parse_json(const std::string& text, const std::string& what) {
  try {
    return ojson::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{} is not valid JSON: {}", what, e.what());
  }
}

// A token in tokenizer_config.json is a string, an AddedToken object {"content": ...}, or null.
std::string token_text(const ojson& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const ojson& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  return "";
}

struct Resolved {
  std::string name, source, bos, eos;
};

// Built-in name first (as --chat-template does for run/chat), then a file, then inline source.
Resolved resolve(const std::string& choice) {
  if (const auto* b = genai::jinja::find_builtin_template(choice))
    return {std::string(b->name), std::string(b->source), std::string(b->bos_token), std::string(b->eos_token)};
  if (fs::is_regular_file(choice)) {
    const fs::path p(choice);
    const std::string text = read_text(choice);
    if (p.extension() == ".json") {  // an HF tokenizer_config.json
      const ojson cfg = parse_json(text, choice);
      if (!cfg.is_object() || !cfg.contains("chat_template")) fail("{} has no chat_template", choice);
      const ojson& t = cfg["chat_template"];
      std::string source;
      if (t.is_string()) {
        source = t.get<std::string>();
      } else if (t.is_array()) {  // named templates: take "default"
        for (const auto& e : t)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            source = e["template"].get<std::string>();
        if (source.empty()) fail("{}: chat_template has no template named \"default\"", choice);
      } else {
        fail("{}: chat_template must be a string or a list of named templates", choice);
      }
      return {choice, source, token_text(cfg, "bos_token"), token_text(cfg, "eos_token")};
    }
    // NAME.jinja may sit next to NAME.tokens.json giving the token strings it expects.
    Resolved r{choice, text, "", ""};
    fs::path tokens = p;
    tokens.replace_extension(".tokens.json");
    if (p.extension() == ".jinja" && fs::is_regular_file(tokens)) {
      const ojson t = parse_json(read_text(tokens.string()), tokens.string());
      r.bos = token_text(t, "bos_token");
      r.eos = token_text(t, "eos_token");
    }
    return r;
  }
  if (choice.find("{%") != std::string::npos || choice.find("{{") != std::string::npos) return {"inline template", choice, "", ""};
  std::string names;
  for (const auto& b : genai::jinja::builtin_templates()) names += (names.empty() ? "" : ", ") + std::string(b.name);
  fail("chat template '{}' is neither a built-in template ({}) nor a file", choice, names);
}

// --date YYYY-MM-DD: the day strftime_now() reports, so renders are reproducible.
std::tm parse_date(const std::string& s) {
  int y = 0, m = 0, d = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12 || d < 1 || d > 31)
    fail("--date must be YYYY-MM-DD, got '{}'", s);
  std::tm t{};
  t.tm_year = y - 1900;
  t.tm_mon = m - 1;
  t.tm_mday = d;
  const std::time_t secs = timegm(&t);  // normalises and fills in the weekday and day of the year
  std::tm out{};
  gmtime_r(&secs, &out);
  if (out.tm_mday != d) fail("--date {} is not a calendar day", s);
  return out;
}

int run(const ChatTemplateOptions& o, bool bos_given, bool eos_given) {
  const Resolved t = resolve(o.choice);
  const ojson doc = parse_json(read_text(o.messages_path), o.messages_path == "-" ? "stdin" : o.messages_path);
  ojson messages, extra = ojson::object();
  if (doc.is_array()) {
    messages = doc;
  } else if (doc.is_object() && doc.contains("messages") && doc["messages"].is_array()) {
    messages = doc["messages"];
    for (const auto& [k, v] : doc.items())
      if (k != "messages" && k != "add_generation_prompt") extra[k] = v;
  } else {
    fail("{}: expected a list of messages or an object with \"messages\"", o.messages_path);
  }
  // Token strings: the template's defaults, then the messages file, then the command line.
  if (bos_given) extra["bos_token"] = o.bos;
  if (eos_given) extra["eos_token"] = o.eos;
  genai::jinja::RenderOptions ro;
  if (!o.date.empty()) ro.now = parse_date(o.date);
  const std::string text = genai::jinja::render_chat_template(t.source, messages, o.add_generation_prompt, t.bos, t.eos, extra, ro);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_chat_template(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<ChatTemplateOptions>();
  CLI::App* cmd = app.add_subcommand("chat-template", "render a chat template for a conversation and print the exact text");
  cmd->add_option("-t,--template", o->choice, "built-in name (llama2, llama3, chatml, mistral, zephyr, phi3, qwen3, ...), a .jinja file, a tokenizer_config.json, or Jinja source")
      ->required();
  cmd->add_option("--messages", o->messages_path, "JSON file (- for stdin): a list of {role, content} messages, or an object with \"messages\" and other template variables")
      ->required();
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt, "end with the header that starts the assistant's reply");
  CLI::Option* bos = cmd->add_option("--bos-token", o->bos, "bos_token text (default: what the template expects, if known)");
  CLI::Option* eos = cmd->add_option("--eos-token", o->eos, "eos_token text (default: what the template expects, if known)");
  cmd->add_option("--date", o->date, "the date strftime_now() reports, YYYY-MM-DD (default: today)");
  actions.push_back([cmd, o, bos, eos]() -> int { return cmd->parsed() ? run(*o, bos->count() > 0, eos->count() > 0) : -1; });
}

}  // namespace npullm::cli
