// Corpus reading; see document_reader.h.
#include "frugal/data/document_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"

namespace frugal {
namespace fs = std::filesystem;

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in))
        if (e.is_regular_file()) found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      throw DataError(fmt::format("input '{}' does not exist (expected a file or a folder)", in));
    }
  }
  if (files.empty())
    throw DataError(fmt::format("no files under {}: {} empty; give the files to prepare, or the folders that hold them",
                                fmt::join(inputs, ", "), inputs.size() == 1 ? "the folder is" : "the folders are"));
  return files;
}

namespace {

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

void require_text(std::string_view bytes, const std::string& path, const std::string& what) {
  size_t odd = 0;
  for (unsigned char ch : bytes)
    if ((ch < 0x20 && (ch < '\t' || ch > '\r')) || ch == 0x7f) ++odd;
  if (bytes.empty() || odd * 100 <= bytes.size()) return;
  throw DataError(
      fmt::format("{}: '{}' does not look like text: {:.1f}% of its {} bytes are NUL or control bytes (a binary "
                  "file, a token shard, an image?); give a UTF-8 text file, or for token files prepare shards "
                  "with `frugal prepare` and train on shards:DIR",
                  what, path, 100.0 * static_cast<double>(odd) / static_cast<double>(bytes.size()), bytes.size()));
}

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The lead byte gives the length; its second byte's range excludes overlongs, surrogates and
    // code points above U+10FFFF (RFC 3629, table 3-7 of the Unicode standard).
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      lo = c == 0xe0 ? 0xa0 : 0x80;
      hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      lo = c == 0xf0 ? 0x90 : 0x80;
      hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
      return i;
    }
    if (i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xbfu)) return i;
    }
    i += n;
  }
  return std::string_view::npos;
}

void require_utf8(std::string_view bytes, const std::string& path, const std::string& what) {
  const size_t at = invalid_utf8_at(bytes);
  if (at == std::string_view::npos) return;
  const auto line = 1 + std::count(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  throw DataError(
      fmt::format("{}:{}: invalid UTF-8 at byte {} (0x{:02x}); {} reads UTF-8 text: convert the file, e.g. "
                  "iconv -f latin1 -t utf-8 '{}' > '{}.utf8' when it is Latin-1",
                  path, line, at, static_cast<unsigned char>(bytes[at]), what, path, path));
}

void split_documents(const std::string& text, const std::string& path, InputFormat format,
                     const std::string& jsonl_field, std::vector<std::string>* docs) {
  require_text(text, path, "prepare");
  size_t pos = 0, line_no = 0;
  std::string doc;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (format == InputFormat::kJsonl) {
      if (blank(line)) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() && invalid_utf8_at(line) != std::string_view::npos)
        throw DataError(fmt::format(
            "{}:{}: invalid UTF-8 at byte {} of the file; JSON is UTF-8 text: convert the file, e.g. iconv -f latin1 "
            "-t utf-8 '{}' > '{}.utf8' when it is Latin-1",
            path, line_no, static_cast<size_t>(line.data() - text.data()) + invalid_utf8_at(line), path, path));
      if (j.is_discarded() || !j.is_object())
        throw DataError(fmt::format("{}:{}: not a JSON object; JSONL needs one object per line", path, line_no));
      auto it = j.find(jsonl_field);
      if (it == j.end() || !it->is_string())
        throw DataError(fmt::format("{}:{}: no string field \"{}\"; choose the field with --jsonl-field", path, line_no,
                                    jsonl_field));
      if (!it->get_ref<const std::string&>().empty()) docs->push_back(it->get<std::string>());
      continue;
    }
    if (blank(line)) {
      if (!doc.empty()) docs->push_back(std::move(doc));
      doc.clear();
      continue;
    }
    if (!doc.empty()) doc.push_back('\n');
    doc.append(line);
  }
  if (!doc.empty()) docs->push_back(std::move(doc));
}

}  // namespace frugal
