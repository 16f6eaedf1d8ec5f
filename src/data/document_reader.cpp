// Corpus reading; see document_reader.h.
#include "frugal/data/document_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "data/internal/jsonl_line.h"

namespace frugal {
namespace fs = std::filesystem;

bool hidden_name(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.' && name != "." && name != "..";
}

namespace {

// Each file once: one read twice (the same path given twice, two spellings of one path, a folder
// and a file or folder inside it, a link to another input) would duplicate its data.
void refuse_twice_read(const std::vector<std::string>& files, const std::vector<size_t>& given,
                       const std::vector<std::string>& inputs) {
  std::map<std::string, size_t> first;  // canonical path -> index into files
  for (size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(files[i], ec);
    if (ec) canonical = fs::absolute(files[i]).lexically_normal();
    const auto [at, fresh] = first.emplace(canonical.string(), i);
    if (fresh) continue;
    const auto named = [&](size_t f) {
      const std::string& in = inputs[given[f]];
      return files[f] == in ? fmt::format("input '{}'", in) : fmt::format("'{}' (under input '{}')", files[f], in);
    };
    const size_t j = at->second;
    const std::string how = inputs[given[j]] == inputs[given[i]] && files[j] == files[i]
                                ? fmt::format("input '{}' is given twice", inputs[given[i]])
                                : fmt::format("{} and {} are the same file", named(j), named(i));
    throw ConfigError(fmt::format(
        "{} ({}): it would be read twice, duplicating its data; give each file or folder once (a folder holds "
        "every file under it, a link to a file is that file)",
        how, canonical.string()));
  }
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, const std::string& out) {
  std::vector<std::string> files;
  std::vector<size_t> given;  // the input each file came from
  int64_t hidden = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string& in = inputs[k];
    std::error_code ec;
    if (fs::is_regular_file(in, ec)) {
      files.push_back(in);  // named on purpose: read even when hidden
      given.push_back(k);
    } else if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(in); it != fs::recursive_directory_iterator(); ++it) {
        if (hidden_name(it->path())) {  // .DS_Store, .git/, editor swap and lock files: not data
          if (it->is_directory()) it.disable_recursion_pending();
          ++hidden;
          continue;
        }
        std::error_code same;
        if (!out.empty() && it->is_directory() && fs::equivalent(it->path(), out, same)) {
          it.disable_recursion_pending();  // the dataset this prepare writes (or wrote before)
          continue;
        }
        if (it->is_regular_file()) found.push_back(it->path().string());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
      given.insert(given.end(), found.size(), k);
    } else {
      throw DataError(fmt::format("input '{}' does not exist (expected a file or a folder)", in));
    }
  }
  if (files.empty())
    throw DataError(fmt::format(
        "no files under {}: {} empty{}; give the files to prepare, or the folders that hold them",
        fmt::join(inputs, ", "), inputs.size() == 1 ? "the folder is" : "the folders are",
        hidden > 0 ? fmt::format(" but for {} hidden entries (names starting with '.', skipped)", hidden) : ""));
  refuse_twice_read(files, given, inputs);
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

namespace detail {

std::string json_kind(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  std::string shown = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  const char* kind = v.is_string()    ? "a string"
                     : v.is_boolean() ? "a boolean"
                     : v.is_number()  ? "a number"
                     : v.is_array()   ? "an array"
                                      : "an object";
  return fmt::format("{} ({})", kind, shown);
}

std::string json_fields(const nlohmann::json& object) {
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back("\"" + item.key() + "\"");
  return keys.empty() ? "none" : fmt::format("{}", fmt::join(keys, ", "));
}

nlohmann::json parse_jsonl_object(std::string_view line, const std::string& path, int64_t line_no, size_t offset,
                                  const std::string& expected) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    const size_t bad = invalid_utf8_at(line);
    if (bad != std::string_view::npos)
      throw DataError(fmt::format(
          "{}:{}: invalid UTF-8 at byte {} of the file (0x{:02x}); JSON is UTF-8 text: convert the file, e.g. "
          "iconv -f latin1 -t utf-8 '{}' > '{}.utf8' when it is Latin-1",
          path, line_no, offset + bad, static_cast<unsigned char>(line[bad]), path, path));
    std::string why = "a syntax error";
    try {
      [[maybe_unused]] const nlohmann::json again = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {  // "[json.exception...] parse error at line 1, column 5: ..."
      why = e.what();
      const size_t at = why.find("column ");
      if (at != std::string::npos) why = why.substr(at);
    }
    throw DataError(
        fmt::format("{}:{}: not valid JSON ({}); each line must be one JSON object, {}", path, line_no, why, expected));
  }
  if (!j.is_object())
    throw DataError(fmt::format("{}:{}: {}, not a JSON object; each line must be one JSON object, {}", path, line_no,
                                json_kind(j), expected));
  return j;
}

}  // namespace detail

void split_documents(const std::string& text, const std::string& path, InputFormat format,
                     const std::string& jsonl_field, std::vector<std::string>* docs) {
  require_text(text, path, "prepare");
  size_t pos = 0, line_no = 0;
  std::string doc;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    const size_t offset = pos;
    pos = end + 1;
    ++line_no;
    if (format == InputFormat::kJsonl) {
      if (blank(line)) continue;
      const nlohmann::json j =
          detail::parse_jsonl_object(line, path, static_cast<int64_t>(line_no), offset,
                                     fmt::format("{{\"{}\": \"the document\", ...}}", jsonl_field));
      auto it = j.find(jsonl_field);
      if (it == j.end())
        throw DataError(
            fmt::format("{}:{}: no field \"{}\" (the line's fields: {}); choose the field with --jsonl-field", path,
                        line_no, jsonl_field, detail::json_fields(j)));
      if (!it->is_string())
        throw DataError(
            fmt::format("{}:{}: field \"{}\" is {}, expected a string (the document); choose the field "
                        "with --jsonl-field",
                        path, line_no, jsonl_field, detail::json_kind(*it)));
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
