// Pre-tokenizer regexes (facts taken from llama.cpp's llama-vocab.cpp and the HF tokenizer.json
// files it mirrors) and their application with PCRE2. See pretokenizer.h.
//
// Where llama.cpp rewrote a HF regex because its own regex engine lacks a feature (for example
// "(?i:'s|'t)" spelled "'[sS]|'[tT]"), the original HF regex is used here: PCRE2 has the feature,
// and the HF tokenizers are what the vectors come from.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "genai/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>
#include <utility>

#include "common/error.h"
#include "genai/utf8.h"

namespace npullm::genai::detail {

const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2 is Llama 3's regex with single digits.
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK ideographs, everything from U+0800 up to them, and Hangul (DeepSeek's "[一-龥ࠀ-一가-퟿]").
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct Preset {
  std::vector<std::string_view> names;
  std::vector<std::string> regexes;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {{"", "default", "gpt-2", "gpt2", "phi-2", "roberta-bpe", "mpt", "olmo", "jais", "jina-es",
        "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "gigachat", "exaone4",
        "modern-bert", "mellum", "a.x-4.0", "trillion", "granite-docling"},
       {kGpt2Regex}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "dbrx", "smaug-bpe", "chatglm-bpe", "glm4"},
       {kLlama3Regex}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "kormo", "hunyuan", "solar-open",
        "grok-2"},
       {kQwen2Regex}},
      {{"qwen35"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"deepseek-llm"},
       {R"([\r\n])",
        // Cased letters (Lu/Ll/Lt) as DeepSeek's tokenizer.json lists them.
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
        R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
        R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
        R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
        R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
        R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
        R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
        R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
        R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
        R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
        R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
        R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
        R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
        R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
        R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
        R"(\x{1E900}-\x{1E943}]+)",
        // ASCII punctuation, its full-width forms, curly quotes, ideographic space/comma/stop.
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
      {{"deepseek-coder"},
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm"},
       {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"falcon"},
       {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Regex, R"([0-9][0-9][0-9])"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2Regex}},
      {{"chameleon"},
       {R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", "([\\t\\n]|    |  )",
        R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2Regex}},
      {{"poro-chat", "bloom", "gpt3-finnish"},
       {R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)"}},
      {{"viking"},
       {R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)", R"(\p{N})"}},
      {{"gpt-4o", "llama4", "minimax-m2"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"tekken"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"seed-coder"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       {R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      {{"none"}, {}},
  };
  return p;
}

}  // namespace

std::vector<std::string> pretokenizer_regexes(std::string_view pre) {
  for (const Preset& p : presets())
    for (std::string_view n : p.names)
      if (n == pre) return p.regexes;
  std::string known;
  for (const Preset& p : presets())
    for (std::string_view n : p.names)
      if (!n.empty()) known += (known.empty() ? "" : ", ") + std::string(n);
  fail("unknown pre-tokenizer '{}' (tokenizer.ggml.pre); known: {}", pre, known);
}

// ---------------------------------------------------------------------------------------------

struct PreTokenizer::Regex {
  std::string source;
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
  for (const std::string& src : regexes) {
    auto r = std::make_unique<Regex>();
    r->source = src;
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    // MATCH_INVALID_UTF: the text is whatever the user typed; invalid bytes simply never match
    // (and end up in the pieces between matches) instead of failing the whole match.
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(src.data()), src.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset,
                            nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("pre-tokenizer regex /{}/ does not compile at offset {}: {}", src, err_offset,
           reinterpret_cast<const char*>(msg));
    }
    // JIT makes matching several times faster; without it (unsupported CPU) matching still works.
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(r));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  if (text.empty()) return {};  // no piece at all, as HF's Split gives (not one empty piece)
  std::vector<std::string_view> pieces{text};
  if (regexes_.empty()) return pieces;

  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  if (!md) fail("out of memory creating PCRE2 match data");

  std::vector<std::string_view> next;
  for (const auto& re : regexes_) {
    next.clear();
    for (std::string_view piece : pieces) {
      // Each piece is matched as a subject of its own: lookarounds and $ see the piece's ends,
      // exactly as when HF splits an already split string.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t last = 0;   // end of the previous match: text from here on is not yet emitted
      size_t start = 0;  // where the next search begins
      while (start < piece.size()) {
        const int rc = pcre2_match(re->code, subject, piece.size(), start, 0, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          fail("pre-tokenizer regex /{}/ failed: {}", re->source, reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t m_start = ov[0], m_end = ov[1];
        if (m_end == m_start) {
          // An empty match splits nothing; search again from the next character.
          if (m_start >= piece.size()) break;
          start = m_start + utf8_char_len(static_cast<uint8_t>(piece[m_start]));
          continue;
        }
        if (m_start > last) next.push_back(piece.substr(last, m_start - last));
        next.push_back(piece.substr(m_start, m_end - m_start));
        last = start = m_end;
      }
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace npullm::genai::detail
