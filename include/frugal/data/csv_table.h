// Tabular data for `frugal prepare --format csv`: a header row naming the columns, then one row
// per sample. Every column but the label column is a numeric feature (float32); the label
// column holds class labels.
//
// Syntax: comma-separated fields; a field may be quoted with double quotes ("a, b", with ""
// for a quote inside); a quoted field may not span lines. Surrounding spaces of a numeric cell
// are ignored. Blank lines are skipped; a trailing '\r' (CRLF files) is dropped.
// Labels: when every label cell is a non-negative integer the integers are the class ids
// (classes "0" ... "max"); otherwise each distinct label string is a class, ids in sorted order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frugal {

struct CsvTable {
  std::vector<std::string> features;  // feature column names, in file order
  std::string label_column;
  std::vector<float> values;          // rows x features, row-major
  std::vector<int64_t> labels;        // class id per row
  std::vector<std::string> classes;   // class id -> name
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
};

// Reads the CSV files (all with the same header) into one table. `label_column` names the label
// column; empty = the last column. Throws DataError naming the file, line, column and value of a
// bad cell (not a finite number), a row with the wrong field count, a header mismatch, a missing
// label column, or an empty table.
CsvTable read_csv_table(const std::vector<std::string>& files, const std::string& label_column);

}  // namespace frugal
