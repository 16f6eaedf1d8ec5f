// Reading raw corpora into documents for `frugal prepare`: plain text (documents separated by
// blank lines) and JSONL (one object per line, one string field per document).
#pragma once

#include <string>
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

}  // namespace frugal
