// Reading raw corpora into documents for `frugal prepare`: plain text (documents separated by
// blank lines) and JSONL (one object per line, one string field per document).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "frugal/data/prepare.h"

namespace frugal {

// Input paths expanded to files: a file stays itself, a folder becomes every regular file under
// it (recursively, sorted by path). Throws DataError for a path that does not exist.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// Appends the documents of `text` (the contents of `path`) to docs. JSONL errors name the file
// and line. Empty documents are skipped.
void split_documents(const std::string& text, const std::string& path, InputFormat format,
                     const std::string& jsonl_field, std::vector<std::string>* docs);

// Throws DataError when `bytes` (the contents of `path`) do not look like text: more than 1% of
// them NUL or control bytes other than tab, line feed, vertical tab, form feed and carriage return
// (a binary file, a token shard, an image). The message names `what` (the setting or command),
// the file and the fraction, and what to give instead. UTF-8 (bytes >= 0x80) counts as text.
void require_text(std::string_view bytes, const std::string& path, const std::string& what);

}  // namespace frugal
