// npullm cache list | prune [--max-size SIZE] [--older-than DAYS] | clear: what the blob and
// packed-weight cache holds per model, and removing it (npuw/cache_admin.h).
#include <chrono>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/error.h"
#include "npuw/blob_cache.h"
#include "npuw/cache_admin.h"

namespace npullm::cli {

namespace {

struct CacheOptions {
  std::string dir, max_size;
  double older_than = -1;
};

std::string folder(const CacheOptions& o) { return o.dir.empty() ? npuw::BlobCache::default_dir() : o.dir; }

int list(const CacheOptions& o) {
  const std::string dir = folder(o);
  const auto models = npuw::list_cache(dir);
  uint64_t total = 0;
  const auto now = std::filesystem::file_time_type::clock::now();
  fmt::print("cache {} (bound {} unless --cache-max-size says otherwise)\n", dir, npuw::format_size(npuw::default_cache_max_bytes(dir)));
  for (const auto& m : models) {
    const double days = std::chrono::duration<double>(now - m.last_used).count() / 86400.0;
    fmt::print("{}  {:>10}  {:>3} blobs {:>10}  {:>4} packed weights {:>10}  last used {:.1f} days ago  {}\n", m.key,
               npuw::format_size(m.bytes()), m.blobs, npuw::format_size(m.blob_bytes), m.packed, npuw::format_size(m.packed_bytes), days,
               m.model_path);
    total += m.bytes();
  }
  fmt::print("{} model(s), {}\n", models.size(), npuw::format_size(total));
  return 0;
}

int prune(const CacheOptions& o, bool all) {
  if (!all && o.max_size.empty() && o.older_than < 0) fail("cache prune: give --max-size SIZE and/or --older-than DAYS");
  // clear: a bound of one byte takes every model folder.
  const uint64_t bound = all ? 1 : o.max_size.empty() ? 0 : npuw::parse_size(o.max_size);
  const npuw::PruneReport r = npuw::prune_cache(folder(o), bound, all ? -1.0 : o.older_than);
  fmt::print("removed {} model(s), {} freed; {} kept\n", r.removed, npuw::format_size(r.freed_bytes), npuw::format_size(r.kept_bytes));
  return 0;
}

}  // namespace

void add_cache(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<CacheOptions>();
  CLI::App* cmd = app.add_subcommand("cache", "what the compiled-blob and packed-weight cache holds, and pruning it");
  cmd->require_subcommand(1);
  CLI::App* ls = cmd->add_subcommand("list", "per model: blobs, packed weights, bytes, last use");
  CLI::App* pr = cmd->add_subcommand("prune", "remove models' entries: least recently used first down to --max-size, and/or unused for --older-than days");
  CLI::App* cl = cmd->add_subcommand("clear", "remove everything");
  for (CLI::App* c : {ls, pr, cl})
    c->add_option("--cache-dir", o->dir, "cache folder (default $NPULLM_CACHE_DIR, $XDG_CACHE_HOME/npullm or ~/.cache/npullm)");
  pr->add_option("--max-size", o->max_size, "keep at most this much, e.g. 10G");
  pr->add_option("--older-than", o->older_than, "remove what was not used for this many days");
  actions.push_back([cmd, ls, pr, cl, o]() -> int {
    if (!cmd->parsed()) return -1;
    if (ls->parsed()) return list(*o);
    return prune(*o, cl->parsed());
  });
}

}  // namespace npullm::cli
