// CSV reading for tabular datasets; see csv_table.h.
#include "frugal/data/csv_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <utility>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal {

namespace {

// The fields of one line. Throws DataError at a malformed quote.
std::vector<std::string> split_fields(std::string_view line, const std::string& file, size_t line_no) {
  std::vector<std::string> out;
  std::string field;
  size_t i = 0;
  for (;;) {
    field.clear();
    if (i < line.size() && line[i] == '"') {
      ++i;
      for (;;) {
        if (i >= line.size())
          throw DataError(
              fmt::format("{}:{}: a quoted field is not closed (quoted fields may not span lines)", file, line_no));
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field.push_back('"');
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field.push_back(line[i++]);
      }
      if (i < line.size() && line[i] != ',')
        throw DataError(fmt::format("{}:{}: text after a closing quote (column {})", file, line_no, out.size() + 1));
    } else {
      const size_t end = std::min(line.find(',', i), line.size());
      field.assign(line.substr(i, end - i));
      i = end;
    }
    out.push_back(field);
    if (i >= line.size()) return out;
    ++i;  // the comma
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_float(std::string_view s, float* out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(*out);
}

}  // namespace

CsvTable read_csv_table(const std::vector<std::string>& files, const std::string& label_column) {
  CsvTable t;
  std::vector<std::string> header;
  size_t label_at = 0;
  std::vector<std::string> raw_labels;
  std::vector<std::pair<size_t, std::string>> starts;  // each file's first row, for messages
  std::vector<size_t> lines;                           // each row's line in its file
  for (const auto& file : files) {
    starts.emplace_back(raw_labels.size(), file);
    const std::string text = read_file(file);
    // A UTF-8 byte-order mark (Excel's "CSV UTF-8") is no part of the first column's name.
    size_t pos = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0, line_no = 0;
    bool have_header = false;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (trim(line).empty()) continue;
      std::vector<std::string> fields = split_fields(line, file, line_no);
      if (!have_header) {
        have_header = true;
        for (auto& f : fields) f = std::string(trim(f));
        if (header.empty()) {
          header = fields;
          if (header.size() < 2)
            throw DataError(
                fmt::format("{}:{}: the header names {} column(s); a table needs at least one "
                            "feature column and a label column",
                            file, line_no, header.size()));
          const std::string want = label_column.empty() ? header.back() : label_column;
          const auto it = std::find(header.begin(), header.end(), want);
          if (it == header.end())
            throw DataError(
                fmt::format("{}:{}: no column named '{}' for the label (columns: {}); choose "
                            "one with --label-column",
                            file, line_no, want, fmt::join(header, ", ")));
          label_at = static_cast<size_t>(it - header.begin());
          t.label_column = want;
          for (size_t c = 0; c < header.size(); ++c)
            if (c != label_at) t.features.push_back(header[c]);
        } else if (fields != header) {
          throw DataError(
              fmt::format("{}:{}: the header differs from the first file's ({}); every CSV "
                          "input needs the same columns",
                          file, line_no, fmt::join(header, ", ")));
        }
        continue;
      }
      if (fields.size() != header.size())
        throw DataError(fmt::format("{}:{}: {} fields, but the header names {} columns", file, line_no, fields.size(),
                                    header.size()));
      for (size_t c = 0; c < fields.size(); ++c) {
        if (c == label_at) continue;
        float v;
        if (!parse_float(fields[c], &v))
          throw DataError(
              fmt::format("{}:{}: column '{}' (column {}): value '{}' is not a finite number; "
                          "fix the cell or drop the column",
                          file, line_no, header[c], c + 1, fields[c]));
        t.values.push_back(v);
      }
      const std::string label(trim(fields[label_at]));
      if (label.empty())
        throw DataError(fmt::format("{}:{}: column '{}' (column {}): the label is empty", file, line_no,
                                    header[label_at], label_at + 1));
      raw_labels.push_back(label);
      lines.push_back(line_no);
    }
  }
  if (raw_labels.empty()) throw DataError(fmt::format("the CSV inputs hold no data rows ({} files)", files.size()));
  set_class_labels(&t, raw_labels, [&](size_t row) {
    const auto file = std::prev(
        std::upper_bound(starts.begin(), starts.end(), row, [](size_t r, const auto& s) { return r < s.first; }));
    return fmt::format("{}:{}", file->second, lines[row]);
  });
  return t;
}

}  // namespace frugal
