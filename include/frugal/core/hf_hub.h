// The local Hugging Face hub cache, as huggingface_hub lays it out: what `hf:X` names, for
// model.init_from (model/hf_checkpoint.h) and for `frugal prepare --tokenizer` (data/prepare.h)
// alike. X is a folder when one exists by that name; else a hub id ("name" or "org/name") is looked
// up in the cache (refs/main under <cache>/models--org--name/snapshots/). Nothing is downloaded.
#pragma once

#include <string>

namespace frugal {

// The Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::string hf_hub_cache();
// Whether `name` reads as a hub id: "name" or "org/name" (anything else, /abs, ./rel, a/b/c, is a
// path and never looked up).
bool is_hf_hub_id(const std::string& name);
// The cache's folder of a hub id: <cache>/models--org--name.
std::string hf_hub_repo_folder(const std::string& repo_id);
// The snapshot directory the local cache holds of a hub id (refs/main under
// hf_hub_repo_folder(repo_id)) when it holds `file` (config.json for a model, tokenizer.json for a
// tokenizer), or "" when it holds none.
std::string hf_cached_snapshot(const std::string& repo_id, const std::string& file = "config.json");
// The directory `hf:X` names: X when it is a directory, else the cached snapshot of hub id X that
// holds `file`, else X (which the caller then refuses, saying where it looked).
std::string hf_resolve_dir(const std::string& x, const std::string& file = "config.json");

}  // namespace frugal
