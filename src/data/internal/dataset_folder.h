// The folder `frugal prepare` writes (--out): where the dataset lands, the temporary folder
// OUT.tmp-PID beside it, and the atomic rename that publishes it (renameat2 RENAME_EXCHANGE when
// an older dataset is being replaced). Called by prepare_dataset only.
#pragma once

#include <functional>
#include <string>

#include "frugal/data/prepare.h"

namespace frugal::detail {

// The dataset folder --out names, without a trailing separator (so that OUT.tmp-PID is its
// sibling, not a folder inside it). A symbolic link at --out is kept: the folder returned is the
// one it points to (links followed, absolute), so the data reaches it and the rename stays on its
// file system. Throws ConfigError naming --out when it names the current, parent or root folder,
// is a file, lies below a file, or is a folder that holds something other than an earlier dataset.
std::string dataset_folder(const PrepareOptions& o);

// Removes the OUT.tmp-PID folders of prepares that were killed (their pid no longer runs): they
// can be as large as the dataset. Says what it removed.
void remove_dead_temp_dirs(const std::string& out, const std::function<void(const std::string&)>& say);

// Moves the finished temporary folder `tmp` to `out`, atomically replacing an older dataset there.
void publish(const std::string& tmp, const std::string& out);

}  // namespace frugal::detail
