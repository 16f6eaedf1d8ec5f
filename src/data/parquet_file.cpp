// Parquet columns through Arrow's C++ library; see internal/parquet_file.h. Compiled as C++20
// (Arrow's headers need it) without the LibTorch precompiled header, only in builds with
// FRUGAL_WITH_PARQUET.
#include "data/internal/parquet_file.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/properties.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "frugal/core/errors.h"

namespace frugal::detail {
namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(
      fmt::format("{}: {} (is it a complete Parquet file? re-write it, e.g. with "
                  "pyarrow.parquet.write_table)",
                  path, trimmed(what)));
}

void check(const arrow::Status& s, const std::string& path) {
  if (!s.ok()) fail(path, s.ToString());
}

template <class T>
T unwrap(arrow::Result<T> r, const std::string& path) {
  if (!r.ok()) fail(path, r.status().ToString());
  return std::move(r).ValueOrDie();
}

struct OpenFile {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::shared_ptr<arrow::Schema> schema;
};

OpenFile open(const std::string& path) {
  try {
    std::shared_ptr<arrow::io::ReadableFile> in = unwrap(arrow::io::ReadableFile::Open(path), path);
    parquet::ReaderProperties props = parquet::default_reader_properties();
    props.set_page_checksum_verification(true);  // files written with page checksums catch flipped bytes
    parquet::ArrowReaderProperties arrow_props;
    arrow_props.set_batch_size(8192);
    parquet::arrow::FileReaderBuilder builder;
    check(builder.Open(in, props), path);
    builder.memory_pool(arrow::default_memory_pool())->properties(arrow_props);
    OpenFile f;
    f.reader = unwrap(builder.Build(), path);
    check(f.reader->GetSchema(&f.schema), path);
    return f;
  } catch (const parquet::ParquetException& e) {
    fail(path, e.what());
  }
}

bool is_string_type(arrow::Type::type t) {
  return t == arrow::Type::STRING || t == arrow::Type::LARGE_STRING || t == arrow::Type::STRING_VIEW;
}

bool is_numeric_type(arrow::Type::type t) {
  switch (t) {
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64:
    case arrow::Type::UINT8:
    case arrow::Type::UINT16:
    case arrow::Type::UINT32:
    case arrow::Type::UINT64:
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE:
      return true;
    default:
      return false;
  }
}

bool is_integer_type(arrow::Type::type t) {
  return is_numeric_type(t) && t != arrow::Type::FLOAT && t != arrow::Type::DOUBLE;
}

int column_index(const OpenFile& f, const std::string& path, const std::string& column) {
  const int i = f.schema->GetFieldIndex(column);
  if (i < 0) {
    std::vector<std::string> names;
    for (const auto& field : f.schema->fields()) names.push_back(field->name());
    throw DataError(fmt::format("{}: no column named '{}' (columns: {})", path, column, fmt::join(names, ", ")));
  }
  return i;
}

// Calls cell(array, i, row) for every cell of column `index`, one row group and batch at a time.
template <class F>
int64_t for_each_cell(OpenFile& f, const std::string& path, int index, F cell) {
  int64_t row = 0;
  try {
    for (int rg = 0; rg < f.reader->num_row_groups(); ++rg) {
      std::unique_ptr<arrow::RecordBatchReader> batches = unwrap(f.reader->GetRecordBatchReader({rg}, {index}), path);
      for (;;) {
        std::shared_ptr<arrow::RecordBatch> batch;
        check(batches->ReadNext(&batch), path);
        if (!batch) break;
        const arrow::Array& a = *batch->column(0);
        for (int64_t i = 0; i < a.length(); ++i) cell(a, i, row++);
      }
    }
  } catch (const parquet::ParquetException& e) {
    fail(path, e.what());
  }
  return row;
}

double number_at(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
    case arrow::Type::INT8:
      return static_cast<const arrow::Int8Array&>(a).Value(i);
    case arrow::Type::INT16:
      return static_cast<const arrow::Int16Array&>(a).Value(i);
    case arrow::Type::INT32:
      return static_cast<const arrow::Int32Array&>(a).Value(i);
    case arrow::Type::INT64:
      return static_cast<double>(static_cast<const arrow::Int64Array&>(a).Value(i));
    case arrow::Type::UINT8:
      return static_cast<const arrow::UInt8Array&>(a).Value(i);
    case arrow::Type::UINT16:
      return static_cast<const arrow::UInt16Array&>(a).Value(i);
    case arrow::Type::UINT32:
      return static_cast<const arrow::UInt32Array&>(a).Value(i);
    case arrow::Type::UINT64:
      return static_cast<double>(static_cast<const arrow::UInt64Array&>(a).Value(i));
    case arrow::Type::FLOAT:
      return static_cast<const arrow::FloatArray&>(a).Value(i);
    case arrow::Type::DOUBLE:
      return static_cast<const arrow::DoubleArray&>(a).Value(i);
    default:
      return 0;  // not reached: the column's type was checked
  }
}

std::string_view string_at(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
    case arrow::Type::STRING:
      return static_cast<const arrow::StringArray&>(a).GetView(i);
    case arrow::Type::LARGE_STRING:
      return static_cast<const arrow::LargeStringArray&>(a).GetView(i);
    case arrow::Type::STRING_VIEW:
      return static_cast<const arrow::StringViewArray&>(a).GetView(i);
    default:
      return {};  // not reached: the column's type was checked
  }
}

// The column's index after checking its type with `ok`; `want` says what was expected.
int typed_column(OpenFile& f, const std::string& path, const std::string& column, bool (*ok)(arrow::Type::type),
                 const char* want) {
  const int i = column_index(f, path, column);
  const auto& type = f.schema->field(i)->type();
  if (!ok(type->id()))
    throw DataError(fmt::format("{}: column '{}' is {}, but {} is needed", path, column, type->ToString(), want));
  return i;
}

void null_cell(const std::string& path, const std::string& column, int64_t row) {
  throw DataError(fmt::format("{}: column '{}', row {}: the cell is null; fill or drop such rows", path, column, row));
}

}  // namespace

std::vector<ParquetColumn> parquet_columns(const std::string& path) {
  OpenFile f = open(path);
  std::vector<ParquetColumn> out;
  for (const auto& field : f.schema->fields()) {
    const auto t = field->type()->id();
    out.push_back({field->name(), field->type()->ToString(), is_string_type(t), is_numeric_type(t)});
  }
  return out;
}

int64_t read_parquet_strings(const std::string& path, const std::string& column,
                             const std::function<void(std::string_view)>& value) {
  OpenFile f = open(path);
  const int i = typed_column(f, path, column, is_string_type, "a string column (the documents)");
  return for_each_cell(f, path, i, [&](const arrow::Array& a, int64_t k, int64_t) {
    if (!a.IsNull(k)) value(string_at(a, k));
  });
}

void read_parquet_numbers(const std::string& path, const std::string& column, std::vector<double>* out) {
  OpenFile f = open(path);
  const int i = typed_column(f, path, column, is_numeric_type, "a numeric column (a feature)");
  for_each_cell(f, path, i, [&](const arrow::Array& a, int64_t k, int64_t row) {
    if (a.IsNull(k)) null_cell(path, column, row);
    out->push_back(number_at(a, k));
  });
}

void read_parquet_labels(const std::string& path, const std::string& column, std::vector<std::string>* out) {
  OpenFile f = open(path);
  const int i = typed_column(
      f, path, column, [](arrow::Type::type t) { return is_string_type(t) || is_integer_type(t); },
      "an integer or string column (class labels)");
  const bool integer = is_integer_type(f.schema->field(i)->type()->id());
  for_each_cell(f, path, i, [&](const arrow::Array& a, int64_t k, int64_t row) {
    if (a.IsNull(k)) null_cell(path, column, row);
    out->push_back(integer ? fmt::format("{}", static_cast<int64_t>(number_at(a, k))) : std::string(string_at(a, k)));
  });
}

}  // namespace frugal::detail
