#include "genai/grammar/compile.h"

#include <list>
#include <mutex>
#include <string>

#include "genai/grammar/gbnf.h"
#include "genai/grammar/json_schema.h"
#include "genai/grammar/regex.h"

namespace npullm::genai::grammar {

namespace {

constexpr size_t kCacheEntries = 64;

struct Entry {
  StructuredOutput::Kind kind;
  std::string source;
  std::shared_ptr<const Grammar> grammar;
};

std::mutex g_mutex;
std::list<Entry> g_cache;  // most recently used first; a full comparison of the source, not a hash alone

}  // namespace

const char* kind_name(StructuredOutput::Kind k) {
  switch (k) {
    case StructuredOutput::Kind::None: return "none";
    case StructuredOutput::Kind::JsonObject: return "json_object";
    case StructuredOutput::Kind::JsonSchema: return "json_schema";
    case StructuredOutput::Kind::Gbnf: return "grammar";
    case StructuredOutput::Kind::Regex: return "regex";
    case StructuredOutput::Kind::PrefixedJsonSchemas: return "prefixed_json_schemas";
  }
  return "?";
}

std::shared_ptr<const Grammar> compile_uncached(const StructuredOutput& s) {
  switch (s.kind) {
    case StructuredOutput::Kind::None: return nullptr;
    case StructuredOutput::Kind::JsonObject: return compile_json_object();
    case StructuredOutput::Kind::JsonSchema: return compile_json_schema(s.source);
    case StructuredOutput::Kind::Gbnf: return compile_gbnf(s.source);
    case StructuredOutput::Kind::Regex: return compile_regex(s.source);
    case StructuredOutput::Kind::PrefixedJsonSchemas: return compile_prefixed_json_schemas(s.source);
  }
  return nullptr;
}

std::shared_ptr<const Grammar> compile(const StructuredOutput& s) {
  if (s.kind == StructuredOutput::Kind::None) return nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto it = g_cache.begin(); it != g_cache.end(); ++it)
      if (it->kind == s.kind && it->source == s.source) {
        g_cache.splice(g_cache.begin(), g_cache, it);
        return it->grammar;
      }
  }
  // Compiled outside the lock: another request's compile does not wait for this one.
  std::shared_ptr<const Grammar> g = compile_uncached(s);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_cache.push_front({s.kind, s.source, g});
  if (g_cache.size() > kCacheEntries) g_cache.pop_back();
  return g;
}

}  // namespace npullm::genai::grammar
