// CSV tables: features and labels parse as written (string labels become sorted class ids,
// integer labels stay themselves, "1.0" is 1), quoting works, and every bad input is an error
// naming the file, line, column and value: a label at odds with the others, a negative one, and a
// sparse id space among them.
#include "frugal/data/csv_table.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

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

// One odd label among integers used to turn every label into a class name ("-1", "0", "1", or
// "0", "1", "1.0" as three classes): now it is refused, by file, line and value.
TEST(CsvTable, AnOddLabelAmongIntegersIsRefusedNamingFileLineAndValue) {
  test::TempDir dir;
  test::write_text(dir.file("a.csv"), "x,y\n1,0\n2,1\n");
  test::write_text(dir.file("name.csv"), "x,y\n3,1\n4,oops\n5,0\n");
  std::string e = error_of({dir.file("a.csv"), dir.file("name.csv")});
  EXPECT_NE(e.find(dir.file("name.csv") + ":3: label 'oops' is not a number, but 4 of the 5 labels of label column 'y' "
                                          "are"),
            std::string::npos)
      << e;
  test::write_text(dir.file("fraction.csv"), "x,y\n1,0\n2,1.5\n3,1\n");
  e = error_of({dir.file("fraction.csv")});
  EXPECT_NE(e.find(dir.file("fraction.csv") + ":3: label '1.5' is not a whole number"), std::string::npos) << e;
  test::write_text(dir.file("negative.csv"), "x,y\n1,0\n2,1\n3,-1\n4,1\n");
  e = error_of({dir.file("negative.csv")});
  EXPECT_NE(e.find(dir.file("negative.csv") + ":4: label -1 is negative"), std::string::npos) << e;
  EXPECT_NE(e.find("remap the labels"), std::string::npos) << e;
  test::write_text(dir.file("number.csv"), "x,y\n1,cat\n2,dog\n3,7\n");
  e = error_of({dir.file("number.csv")});
  EXPECT_NE(e.find(dir.file("number.csv") + ":4: label '7' is a number, but 2 of the 3 labels"), std::string::npos)
      << e;
  // Every label a name, numbers nowhere among them: classes as before (nan is no finite number).
  test::write_text(dir.file("names.csv"), "x,y\n1,b\n2,nan\n3,a\n");
  EXPECT_EQ(read_csv_table({dir.file("names.csv")}, "").classes, (std::vector<std::string>{"a", "b", "nan"}));
}

// A whole number written with a fraction or an exponent (pandas writes an integer column that once
// held a missing value as 1.0) is that integer, not a class name of its own.
TEST(CsvTable, WholeNumbersWrittenAsFractionsAreTheirIntegers) {
  test::TempDir dir;
  test::write_text(dir.file("t.csv"), "x,y\n1,0\n2,1.0\n3, 2.00\n4,1e0\n5,+2\n");
  const CsvTable t = read_csv_table({dir.file("t.csv")}, "");
  EXPECT_EQ(t.labels, (std::vector<int64_t>{0, 1, 2, 1, 2}));
  EXPECT_EQ(t.classes, (std::vector<std::string>{"0", "1", "2"}));
}

// Integer labels are the class ids: 0 and 1000000 made 1,000,001 classes. Above 1024 classes at
// least half of the ids must occur; the refusal names the largest label and the distinct count.
TEST(CsvTable, SparseIntegerLabelsAreRefusedNamingTheLargestAndTheCount) {
  test::TempDir dir;
  test::write_text(dir.file("sparse.csv"), "x,y\n1,0\n2,1000000\n3,1\n4,0\n");
  const std::string e = error_of({dir.file("sparse.csv")});
  EXPECT_NE(e.find("the largest label of label column 'y' is 1000000 (" + dir.file("sparse.csv") + ":3)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("only 3 distinct labels occur"), std::string::npos) << e;
  EXPECT_NE(e.find("remap the labels to 0 ... 2"), std::string::npos) << e;
  test::write_text(dir.file("edge.csv"), "x,y\n1,0\n2,1023\n");  // 1024 classes: still taken as ids
  EXPECT_EQ(read_csv_table({dir.file("edge.csv")}, "").classes.size(), 1024u);
  test::write_text(dir.file("over.csv"), "x,y\n1,0\n2,1024\n");
  EXPECT_NE(error_of({dir.file("over.csv")}).find("only 2 distinct labels occur"), std::string::npos);
  std::string dense = "x,y\n";  // 2000 classes, 1000 of them used: dense enough
  for (int i = 0; i < 2000; i += 2) dense += fmt::format("{},{}\n", i, i);
  test::write_text(dir.file("dense.csv"), dense);
  EXPECT_EQ(read_csv_table({dir.file("dense.csv")}, "").classes.size(), 1999u);
}

}  // namespace
}  // namespace frugal::csv_table_test
