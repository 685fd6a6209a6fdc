// npullm inspect: validate a blob (the loader's own checks) and print its I/O, memory plan, tasks
// and relocations.
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>

#include "blob/blob_image.h"
#include "cli/commands.h"
#include "common/error.h"
#include "compiler/memory_plan.h"

namespace npullm::cli {

namespace {

std::string prologue_name(int32_t p) {
  switch (static_cast<blob::Prologue>(p)) {
    case blob::Prologue::RmsNorm: return "RmsNorm";
    case blob::Prologue::SwiGlu: return "SwiGlu";
    case blob::Prologue::GeGlu: return "GeGlu";
    case blob::Prologue::Rope: return "Rope";
    case blob::Prologue::RmsNormRope: return "RmsNorm+Rope";
    default: return "prologue " + std::to_string(p);
  }
}

const char* role_name(blob::IoRole r) {
  switch (r) {
    case blob::IoRole::Input: return "input";
    case blob::IoRole::Output: return "output";
    case blob::IoRole::State: return "state";
  }
  return "?";
}

const char* reloc_name(blob::RelocKind k) {
  switch (k) {
    case blob::RelocKind::Scratch: return "scratch";
    case blob::RelocKind::Const: return "const";
    case blob::RelocKind::Weight: return "weight";
    case blob::RelocKind::Io: return "io";
  }
  return "?";
}

int run(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const blob::BlobImage img = blob::read_blob(bytes.data(), bytes.size(), path);

  fmt::print("blob {} ({} bytes): {}\n\n", path, bytes.size(), img.meta_json);
  fmt::print("I/O ({}):\n", img.ios.size());
  for (size_t i = 0; i < img.ios.size(); ++i) {
    const blob::IoDesc& io = img.ios[i];
    fmt::print("  #{:<3} {:<7} {:<28} type {:<3} [{}] {} bytes\n", i, role_name(io.role), io.name, io.type,
               fmt::join(io.shape, ","), io.bytes);
  }
  fmt::print("\nweights ({}, in the weights bank, not in the blob):\n", img.weights.size());
  for (const blob::WeightRef& w : img.weights)
    fmt::print("  {:<28} type {:<3} [{}] {} bytes\n", w.name, w.type, fmt::join(w.shape, ","), w.bytes);

  std::vector<compiler::BufferUse> uses;
  for (const blob::PlanEntry& e : img.plan) uses.push_back({e.name, e.bytes, e.first_stage, e.last_stage, e.offset});
  fmt::print("\nmemory plan: ");
  fmt::print("{}", compiler::draw_memory_plan(uses, img.scratch_bytes));

  fmt::print("\ntasks ({}, {} stages):\n", img.tasks.size(), img.barriers.size());
  for (size_t i = 0; i < img.tasks.size(); ++i) {
    const blob::TaskDesc& t = img.tasks[i];
    std::string op = blob::op_name(t.op);
    if ((t.op == static_cast<uint32_t>(blob::OpCode::MatMul) || t.op == static_cast<uint32_t>(blob::OpCode::ScatterRows) ||
         t.op == static_cast<uint32_t>(blob::OpCode::Rope)) &&
        t.iparam[1] != 0)
      op = prologue_name(t.iparam[1]) + "+" + op;  // an op the compiler folded into this task
    const size_t res_slot = i * sizeof(blob::TaskDesc) + offsetof(blob::TaskDesc, ptr) + 3 * 8;
    if (t.op == static_cast<uint32_t>(blob::OpCode::RmsNorm) &&
        std::any_of(img.relocs.begin(), img.relocs.end(), [&](const blob::Reloc& r) { return r.offset == res_slot; }))
      op += "+Add";  // a folded residual
    fmt::print("  {:>4} stage {:>3} {:<19} dims [{}]\n", i, t.stage, op, fmt::join(t.dim, ","));
  }
  fmt::print("\nbarriers: ");
  for (size_t b = 0; b < img.barriers.size(); ++b) fmt::print("{}{}", b ? " " : "", img.barriers[b].count);
  fmt::print("  (tasks each stage waits for)\n");
  fmt::print("one run (a token of a generate blob): {} stages, {} barriers between them\n", img.barriers.size(),
             img.barriers.empty() ? 0 : img.barriers.size() - 1);

  fmt::print("\nrelocations ({}):\n", img.relocs.size());
  for (const blob::Reloc& r : img.relocs) {
    const size_t task = r.offset / sizeof(blob::TaskDesc);
    const size_t slot = (r.offset % sizeof(blob::TaskDesc) - offsetof(blob::TaskDesc, ptr)) / 8;
    std::string target;
    if (r.kind == blob::RelocKind::Io) target = img.ios.at(r.index).name;
    else if (r.kind == blob::RelocKind::Weight) target = img.weights.at(r.index).name;
    fmt::print("  task {:>4} ptr[{}] <- {:<7} {} +{}\n", task, slot, reloc_name(r.kind), target, r.addend);
  }
  return 0;
}

}  // namespace

void add_inspect(CLI::App& app, Actions& actions) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("inspect", "validate a compiled blob and print its I/O, memory plan, tasks and relocations");
  cmd->add_option("blob", *path, "blob file (from npullm compile or the blob cache)")->required();
  actions.push_back([cmd, path]() -> int { return cmd->parsed() ? run(*path) : -1; });
}

}  // namespace npullm::cli
