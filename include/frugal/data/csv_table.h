// Tabular data for `frugal prepare --format csv`: a header row naming the columns, then one row
// per sample. Every column but the label column is a numeric feature (float32); the label
// column holds class labels.
//
// Syntax: comma-separated fields; a field may be quoted with double quotes ("a, b", with ""
// for a quote inside); a quoted field may not span lines. Surrounding spaces of a numeric cell
// are ignored. Blank lines are skipped; a trailing '\r' (CRLF files) is dropped.
// Labels: classed by class_ids below (integers are the class ids, names are numbered in sorted
// order, a mix of the two is refused).
#pragma once

#include <cstdint>
#include <functional>
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

// Where label i came from, for messages: "FILE:LINE", "FILE: row R (0-based)", "FILE: record K".
using LabelOrigin = std::function<std::string(size_t)>;

struct ClassIds {
  std::vector<int64_t> ids;          // class id per label
  std::vector<std::string> classes;  // class id -> name
};

// The class ids of label cells (surrounding spaces ignored), for every record dataset (tables,
// tar / Avro / TFRecord image labels):
// - every label an integer: the integers are the class ids, classes "0" ... "max". A whole number
//   written with a fraction or an exponent ("1.0", "1e3") is that integer. A negative label is
//   refused, and so is a largest label of 2^24 or more, or one above 1023 when fewer than half of
//   the ids 0 ... max occur (a sparse id space: remap the labels to 0 ... N-1).
// - every label a name (not a finite number): each distinct name is a class, ids in sorted order.
// - anything else (integers with a fraction or a name among them, fractions only) is refused.
// Refusals are DataErrors naming where(i) and the value of the label at fault, and `what` (e.g.
// "label column 'y'").
ClassIds class_ids(const std::vector<std::string>& labels, const std::string& what, const LabelOrigin& where);

// Sets t->labels and t->classes from the label cells by class_ids (`where`: each row's origin).
void set_class_labels(CsvTable* t, const std::vector<std::string>& raw_labels, const LabelOrigin& where);

}  // namespace frugal
