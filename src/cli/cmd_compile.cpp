// npullm compile: write the blobs a configuration needs into a folder (what the cache holds).
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

#include "cli/commands.h"
#include "common/error.h"

namespace npullm::cli {

namespace {
struct CompileOptions {
  std::string model, out;
  RuntimeOptions rt;
};

int run(const CompileOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) fail("cannot create output folder {}: {}", o.out, ec.message());
  for (const auto& [name, bytes] : npuw::compile_blobs(o.model, o.rt.resolve())) {
    const std::string path = o.out + "/" + name + ".blob";
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) fail("cannot write {}", path);
    fmt::print("{} ({} bytes)\n", path, bytes.size());
  }
  return 0;
}
}  // namespace

void add_compile(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand("compile", "compile a model's prefill blob and generate variants into a folder");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "output folder")->required();
  o->rt.add_to(cmd);
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? run(*o) : -1; });
}

}  // namespace npullm::cli
