// Reading Parquet files for `frugal prepare --format parquet` through Apache Arrow's C++ library
// (the one the pyarrow wheel ships; FRUGAL_WITH_PARQUET). Arrow 26's Parquet headers need C++20,
// so parquet_file.cpp is the one translation unit compiled as C++20 and this interface holds only
// standard types. Every function reads one column at a time, row group by row group (memory is
// bounded by a row group of one column), verifies page checksums where the file has them, and
// throws DataError naming the file (and the column and row where it applies): a truncated or
// corrupt file, a missing column, a column of another type, a null cell.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace frugal::detail {

struct ParquetColumn {
  std::string name;
  std::string type;         // Arrow's spelling: "string", "large_string", "double", "int64", ...
  bool is_string = false;   // string, large_string or string_view
  bool is_numeric = false;  // integers of any width, float32, float64
};

// The file's top-level columns in file order.
std::vector<ParquetColumn> parquet_columns(const std::string& path);

// Calls `value` with every cell of string column `column`, in row order; null cells are skipped
// (they hold no document). Returns the number of rows read.
int64_t read_parquet_strings(const std::string& path, const std::string& column,
                             const std::function<void(std::string_view)>& value);

// Appends every cell of numeric column `column` to `out` as double, in row order. A null cell is
// a DataError naming the row.
void read_parquet_numbers(const std::string& path, const std::string& column, std::vector<double>* out);

// Appends every cell of column `column` to `out` as text: integers in decimal, strings as they
// are (a label column). A null cell is a DataError naming the row.
void read_parquet_labels(const std::string& path, const std::string& column, std::vector<std::string>* out);

}  // namespace frugal::detail
