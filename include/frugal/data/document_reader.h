// Reading raw corpora into documents for `frugal prepare`: plain text (documents separated by
// blank lines), JSONL (one object per line, one string field per document) and Parquet (one
// string column; in builds with FRUGAL_WITH_PARQUET).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/data/prepare.h"

namespace frugal {

// Input paths expanded to files: a file stays itself (hidden or not), a folder becomes every
// regular file under it (recursively, sorted by path) but the hidden ones (hidden_name), and those
// in hidden folders. Throws DataError for a path that does not exist, and ConfigError naming both
// inputs when one file would be read twice (compared by canonical path: the same input given
// twice, two spellings of one path, a folder and a file or folder under it, a link to a file).
// `out`: the folder prepare writes to, skipped where an input folder holds it (`frugal prepare
// data --out data/ds` run again must not read its own shards); "" for none.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, const std::string& out = "");

// True for a hidden entry, whose name starts with '.' (.DS_Store, .git, editor swap and lock files
// such as .notes.txt.swp and .~lock.data.csv#): never data where a folder is expanded.
bool hidden_name(const std::filesystem::path& path);

// Appends the documents of `text` (the contents of `path`) to docs. JSONL errors name the file
// and line. Empty documents are skipped.
void split_documents(const std::string& text, const std::string& path, InputFormat format,
                     const std::string& jsonl_field, std::vector<std::string>* docs);

// True when every Parquet file has `column` as a string column (so `prepare --format parquet` reads
// documents); false when none has it (a table of features and a label), unless `named` (the user
// named the column): then a DataError naming the first file, the column and the columns it has. A
// column of another type in any file, or present in some files only, is a DataError naming the file.
bool parquet_has_text_column(const std::vector<std::string>& files, const std::string& column, bool named);
// Appends the non-null, non-empty cells of string column `column` of each file, in file and row
// order. Errors name the file (a truncated or corrupt Parquet file, a missing column).
void read_parquet_documents(const std::vector<std::string>& files, const std::string& column,
                            std::vector<std::string>* docs);

// Throws DataError when `bytes` (the contents of `path`) do not look like text: more than 1% of
// them NUL or control bytes other than tab, line feed, vertical tab, form feed and carriage return
// (a binary file, a token shard, an image). The message names `what` (the setting or command),
// the file and the fraction, and what to give instead. UTF-8 (bytes >= 0x80) counts as text.
void require_text(std::string_view bytes, const std::string& path, const std::string& what);

// The offset of the first byte of `bytes` that does not begin a well-formed UTF-8 sequence (RFC
// 3629: no overlong forms, surrogates or code points above U+10FFFF), or npos when all are.
size_t invalid_utf8_at(std::string_view bytes);
// Throws DataError when `bytes` (the contents of `path`) are not UTF-8, naming the file, the byte
// offset and line of the first bad sequence, `what` (who needs UTF-8), and iconv as the way out.
void require_utf8(std::string_view bytes, const std::string& path, const std::string& what);

}  // namespace frugal
