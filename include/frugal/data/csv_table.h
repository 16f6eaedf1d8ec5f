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
  std::vector<float> values;         // rows x features, row-major
  std::vector<int64_t> labels;       // class id per row
  std::vector<std::string> classes;  // class id -> name
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
};

// Reads the CSV files (all with the same header) into one table. `label_column` names the label
// column; empty = the last column. Throws DataError naming the file, line, column and value of a
// bad cell (not a finite number), a row with the wrong field count, a header mismatch, a missing
// label column, or an empty table.
CsvTable read_csv_table(const std::vector<std::string>& files, const std::string& label_column);

// The same table from Parquet files (`prepare --format parquet` without a text column; builds
// with FRUGAL_WITH_PARQUET): every numeric column but the label column is a feature (stored as
// float32), all files need the same columns, labels are integer or string cells classed as for
// CSV. Errors name the file, and the column and row of a null cell or a non-numeric feature.
CsvTable read_parquet_table(const std::vector<std::string>& files, const std::string& label_column);

// Sets t->labels and t->classes from the label cells: all non-negative integers -> their values
// (classes "0" ... "max"); otherwise each distinct string is a class, ids in sorted order.
void set_class_labels(CsvTable* t, const std::vector<std::string>& raw_labels);

}  // namespace frugal
