// Parquet input for `frugal prepare --format parquet`: documents from a string column, or a table
// of numeric features and a label (document_reader.h, csv_table.h). The Arrow side is
// parquet_file.cpp (C++20, only in builds with FRUGAL_WITH_PARQUET); without it these refuse by
// name (features.h) before any work.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/data/csv_table.h"
#include "frugal/data/document_reader.h"
#include "frugal_build_config.h"  // FRUGAL_HAVE_PARQUET
#if FRUGAL_HAVE_PARQUET
#include "data/internal/parquet_file.h"
#endif

namespace frugal {

#if FRUGAL_HAVE_PARQUET

bool parquet_has_text_column(const std::vector<std::string>& files, const std::string& column, bool named) {
  int with = 0;
  for (const auto& f : files) {
    for (const auto& c : detail::parquet_columns(f)) {
      if (c.name != column) continue;
      if (!c.is_string)
        throw DataError(
            fmt::format("{}: column '{}' is {}, not text; name the documents' string column with "
                        "--text-column, or rename the column for a table of features",
                        f, column, c.type));
      ++with;
    }
  }
  if (with == 0 && named) {
    std::vector<std::string> names;
    for (const auto& c : detail::parquet_columns(files[0])) names.push_back(c.name);
    throw DataError(
        fmt::format("{}: no column named '{}' for --text-column (columns: {}); name the documents' "
                    "string column, or leave --text-column out to read a table of features",
                    files[0], column, fmt::join(names, ", ")));
  }
  if (with != 0 && with != static_cast<int>(files.size()))
    throw DataError(fmt::format("column '{}' is in {} of the {} Parquet inputs; every input needs the same columns",
                                column, with, files.size()));
  return with != 0;
}

void read_parquet_documents(const std::vector<std::string>& files, const std::string& column,
                            std::vector<std::string>* docs) {
  for (const auto& f : files)
    detail::read_parquet_strings(f, column, [&](std::string_view s) {
      if (!s.empty()) docs->emplace_back(s);
    });
}

CsvTable read_parquet_table(const std::vector<std::string>& files, const std::string& label_column) {
  CsvTable t;
  std::vector<std::string> names;
  std::vector<std::vector<double>> columns;
  std::vector<std::pair<size_t, std::string>> starts;  // each file's first row, in order
  std::vector<std::string> labels;
  for (const auto& f : files) {
    const auto cols = detail::parquet_columns(f);
    std::vector<std::string> here;
    for (const auto& c : cols) here.push_back(c.name);
    if (names.empty()) {
      names = here;
      if (names.size() < 2)
        throw DataError(
            fmt::format("{}: {} column(s); a table needs at least one feature column and a label "
                        "column (documents need a string column: --text-column)",
                        f, names.size()));
      t.label_column = label_column.empty() ? names.back() : label_column;
      if (std::find(names.begin(), names.end(), t.label_column) == names.end())
        throw DataError(
            fmt::format("{}: no column named '{}' for the label (columns: {}); choose one with "
                        "--label-column",
                        f, t.label_column, fmt::join(names, ", ")));
      for (const auto& c : cols) {
        if (c.name == t.label_column) continue;
        if (!c.is_numeric)
          throw DataError(
              fmt::format("{}: column '{}' is {}; every column but the label must be numeric (a "
                          "feature), or be the documents' string column (--text-column)",
                          f, c.name, c.type));
        t.features.push_back(c.name);
      }
      columns.resize(t.features.size());
    } else if (here != names) {
      throw DataError(
          fmt::format("{}: its columns ({}) differ from the first file's ({}); every Parquet input "
                      "needs the same columns",
                      f, fmt::join(here, ", "), fmt::join(names, ", ")));
    }
    starts.emplace_back(labels.size(), f);  // the file's first row among all the files'
    for (size_t c = 0; c < t.features.size(); ++c) detail::read_parquet_numbers(f, t.features[c], &columns[c]);
    detail::read_parquet_labels(f, t.label_column, &labels);
  }
  if (labels.empty()) throw DataError(fmt::format("the Parquet inputs hold no rows ({} files)", files.size()));
  const size_t rows = labels.size(), F = t.features.size();
  t.values.resize(rows * F);
  for (size_t c = 0; c < F; ++c) {
    for (size_t r = 0; r < rows; ++r) {
      const double v = columns[c][r];
      if (!std::isfinite(static_cast<float>(v))) {
        auto file = std::prev(
            std::upper_bound(starts.begin(), starts.end(), r, [](size_t row, const auto& s) { return row < s.first; }));
        throw DataError(
            fmt::format("{}: column '{}', row {} (0-based): value {} is not a finite float32; fix the "
                        "cell or drop the column",
                        file->second, t.features[c], r - file->first, v));
      }
      t.values[r * F + c] = static_cast<float>(v);
    }
  }
  set_class_labels(&t, labels, [&](size_t r) {
    auto file = std::prev(
        std::upper_bound(starts.begin(), starts.end(), r, [](size_t row, const auto& s) { return row < s.first; }));
    return fmt::format("{}: row {} (0-based)", file->second, r - file->first);
  });
  return t;
}

#else  // a build without Arrow: refused by name, before any work

bool parquet_has_text_column(const std::vector<std::string>&, const std::string&, bool) {
  require_feature("parquet", "prepare --format parquet");
  return false;
}

void read_parquet_documents(const std::vector<std::string>&, const std::string&, std::vector<std::string>*) {
  require_feature("parquet", "prepare --format parquet");
}

CsvTable read_parquet_table(const std::vector<std::string>&, const std::string&) {
  require_feature("parquet", "prepare --format parquet");
  return {};
}

#endif

}  // namespace frugal
