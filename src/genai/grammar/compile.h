// StructuredOutput -> Grammar, with a cache: a schema or grammar that a client sends again (an
// agent's tool set, on every request) is compiled once. The cache is keyed by (kind, source), holds
// the most recently used grammars (bounded), and is safe to use from several threads.
#pragma once
#include <memory>

#include <npullm/llm_pipeline.h>

#include "genai/grammar/grammar.h"

namespace npullm::genai::grammar {

// Throws GrammarError (an npullm::Error) naming what it refuses. Kind None returns null.
std::shared_ptr<const Grammar> compile(const StructuredOutput& s);

// The same without the cache (for measuring compile time).
std::shared_ptr<const Grammar> compile_uncached(const StructuredOutput& s);

const char* kind_name(StructuredOutput::Kind k);

}  // namespace npullm::genai::grammar
