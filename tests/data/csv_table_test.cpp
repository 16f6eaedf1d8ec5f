// CSV tables: features and labels parse as written (string labels become sorted class ids,
// integer labels stay themselves), quoting works, and every bad input is an error naming the
// file, line, column and value.
#include "frugal/data/csv_table.h"

#include <gtest/gtest.h>

#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::csv_table_test {
namespace {

std::string error_of(const std::vector<std::string>& files, const std::string& label = "") {
  try {
    read_csv_table(files, label);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CsvTable, FeaturesAndStringLabelsParse) {
  test::TempDir dir;
  test::write_text(dir.file("iris.csv"),
                   "sepal,petal,species\r\n5.1,1.4,setosa\r\n\r\n6.3, -2.5e1 ,virginica\r\n4.9,+1.0,setosa\r\n");
  const CsvTable t = read_csv_table({dir.file("iris.csv")}, "");
  EXPECT_EQ(t.features, (std::vector<std::string>{"sepal", "petal"}));
  EXPECT_EQ(t.label_column, "species");
  EXPECT_EQ(t.values, (std::vector<float>{5.1f, 1.4f, 6.3f, -25.0f, 4.9f, 1.0f}));
  EXPECT_EQ(t.classes, (std::vector<std::string>{"setosa", "virginica"}));
  EXPECT_EQ(t.labels, (std::vector<int64_t>{0, 1, 0}));
}

TEST(CsvTable, LabelColumnByNameQuotesAndIntegerLabels) {
  test::TempDir dir;
  test::write_text(dir.file("a.csv"), "y,\"x, one\",x2\n2,1,2\n0,\"3.5\",4\n");
  test::write_text(dir.file("b.csv"), "y,\"x, one\",x2\n5,7,8\n");
  const CsvTable t = read_csv_table({dir.file("a.csv"), dir.file("b.csv")}, "y");
  EXPECT_EQ(t.features, (std::vector<std::string>{"x, one", "x2"}));
  EXPECT_EQ(t.values, (std::vector<float>{1, 2, 3.5f, 4, 7, 8}));
  EXPECT_EQ(t.labels, (std::vector<int64_t>{2, 0, 5}));
  EXPECT_EQ(t.classes.size(), 6u);  // integer labels 0..5 are the class ids
  EXPECT_EQ(t.classes[5], "5");
}

// Excel's "CSV UTF-8" starts the file with a byte-order mark: not part of the first column's name,
// in the first file or a later one (whose header must still equal the first's).
TEST(CsvTable, AByteOrderMarkIsNoPartOfTheFirstColumnsName) {
  test::TempDir dir;
  const std::string bom = "\xef\xbb\xbf";
  test::write_text(dir.file("bom.csv"), bom + "cls,x,y\n0,1,2\n1,3,4\n");
  test::write_text(dir.file("plain.csv"), "cls,x,y\n0,5,6\n");
  const CsvTable t = read_csv_table({dir.file("bom.csv"), dir.file("plain.csv")}, "cls");
  EXPECT_EQ(t.label_column, "cls");
  EXPECT_EQ(t.features, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(t.labels, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(read_csv_table({dir.file("plain.csv"), dir.file("bom.csv")}, "").features,
            (std::vector<std::string>{"cls", "x"}));  // the default label: the last column
}

TEST(CsvTable, BadCellNamesFileLineColumnAndValue) {
  test::TempDir dir;
  test::write_text(dir.file("t.csv"), "a,b,label\n1,2,x\n3,oops,y\n");
  const std::string e = error_of({dir.file("t.csv")});
  EXPECT_NE(e.find(dir.file("t.csv") + ":3"), std::string::npos) << e;
  EXPECT_NE(e.find("column 'b' (column 2)"), std::string::npos) << e;
  EXPECT_NE(e.find("'oops'"), std::string::npos) << e;
  test::write_text(dir.file("nan.csv"), "a,label\nnan,x\n");
  EXPECT_NE(error_of({dir.file("nan.csv")}).find("value 'nan' is not a finite number"), std::string::npos);
  test::write_text(dir.file("empty.csv"), "a,label\n,x\n");
  EXPECT_NE(error_of({dir.file("empty.csv")}).find(":2: column 'a' (column 1): value ''"), std::string::npos);
}

TEST(CsvTable, StructuralErrorsAreNamed) {
  test::TempDir dir;
  test::write_text(dir.file("short.csv"), "a,b,label\n1,2,x\n1,2\n");
  EXPECT_NE(error_of({dir.file("short.csv")}).find(":3: 2 fields, but the header names 3 columns"), std::string::npos);
  test::write_text(dir.file("ok.csv"), "a,label\n1,x\n");
  EXPECT_NE(error_of({dir.file("ok.csv")}, "target").find("no column named 'target'"), std::string::npos);
  test::write_text(dir.file("other.csv"), "b,label\n1,x\n");
  EXPECT_NE(error_of({dir.file("ok.csv"), dir.file("other.csv")}).find("the header differs"), std::string::npos);
  test::write_text(dir.file("quote.csv"), "a,label\n\"1,x\n");
  EXPECT_NE(error_of({dir.file("quote.csv")}).find(":2: a quoted field is not closed"), std::string::npos);
  test::write_text(dir.file("header_only.csv"), "a,label\n");
  EXPECT_NE(error_of({dir.file("header_only.csv")}).find("no data rows"), std::string::npos);
  test::write_text(dir.file("nolabel.csv"), "a,label\n1, \n");
  EXPECT_NE(error_of({dir.file("nolabel.csv")}).find("the label is empty"), std::string::npos);
}

}  // namespace
}  // namespace frugal::csv_table_test
