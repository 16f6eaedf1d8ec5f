// WebDataset-style tars: members group into samples by key, unsafe member names are refused
// naming the member and the archive, image samples prepare into a record dataset and text
// samples into a token dataset.
#include "frugal/data/tar_samples.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/data/prepare.h"
#include "frugal/data/record_source.h"
#include "frugal/data/token_dataset.h"
#include "image_writers.h"
#include "test_util.h"

#if FRUGAL_HAVE_LIBARCHIVE && FRUGAL_HAVE_IMAGES
#include <archive.h>
#include <archive_entry.h>

namespace frugal::tar_samples_test {
namespace {

// Writes a ustar archive with the given (name, contents) members, in order, with libarchive.
void write_tar(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members,
               const std::string& symlink = "") {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const auto& [name, data] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_write_header(a, e);
    archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  }
  if (!symlink.empty()) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, symlink.c_str());
    archive_entry_set_filetype(e, AE_IFLNK);
    archive_entry_set_symlink(e, "/etc/passwd");
    archive_entry_set_perm(e, 0644);
    archive_write_header(a, e);
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TarSamples, MembersGroupByKeyInFirstAppearanceOrder) {
  test::TempDir dir;
  const std::string tar = dir.file("a.tar");
  write_tar(tar, {{"s/000.jpg", "J0"},
                  {"s/000.cls", "3"},
                  {"s/001.cls", "1"},
                  {"s/001.png", "P1"},
                  {"s/000.meta.json", "{}"},
                  {"t/x.y/doc.txt", "hello"},
                  {"noext", "N"}});
  const auto samples = read_tar_samples(tar);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].key, "s/000");
  EXPECT_EQ(samples[0].members.size(), 3u);
  EXPECT_EQ(samples[0].members.at("jpg"), "J0");
  EXPECT_EQ(samples[0].members.at("cls"), "3");
  EXPECT_EQ(samples[0].members.at("meta.json"), "{}");  // the extension is everything after the first dot
  EXPECT_EQ(samples[1].key, "s/001");
  EXPECT_EQ(samples[1].members.at("png"), "P1");
  EXPECT_EQ(samples[2].key, "t/x.y/doc");  // dots in folder names do not count
  EXPECT_EQ(samples[2].members.at("txt"), "hello");
  EXPECT_EQ(samples[3].key, "noext");
  EXPECT_EQ(samples[3].members.count(""), 1u);
}

TEST(TarSamples, UnsafeMemberNamesAreRefusedNamingMemberAndArchive) {
  test::TempDir dir;
  const std::string dotdot = dir.file("dotdot.tar"), abs = dir.file("abs.tar"), link = dir.file("link.tar");
  write_tar(dotdot, {{"ok/1.cls", "1"}, {"ok/../../evil.cls", "1"}});
  write_tar(abs, {{"/etc/evil.jpg", "x"}});
  write_tar(link, {{"a.cls", "1"}}, "a.jpg");
  const std::string e1 = error_of([&] { read_tar_samples(dotdot); });
  EXPECT_NE(e1.find("'ok/../../evil.cls'"), std::string::npos) << e1;
  EXPECT_NE(e1.find(dotdot), std::string::npos) << e1;
  EXPECT_NE(e1.find(".."), std::string::npos) << e1;
  const std::string e2 = error_of([&] { read_tar_samples(abs); });
  EXPECT_NE(e2.find("'/etc/evil.jpg'"), std::string::npos) << e2;
  EXPECT_NE(e2.find("absolute"), std::string::npos) << e2;
  EXPECT_NE(e2.find(abs), std::string::npos) << e2;
  const std::string e3 = error_of([&] { read_tar_samples(link); });
  EXPECT_NE(e3.find("'a.jpg'"), std::string::npos) << e3;
  EXPECT_NE(e3.find("not a regular file"), std::string::npos) << e3;
  // ".." inside a name is fine; only a whole ".." component is refused.
  EXPECT_EQ(split_member_name("a..b/c..d.txt", "x.tar"), (std::pair<std::string, std::string>{"a..b/c", ".d.txt"}));
  EXPECT_NE(error_of([] { split_member_name("..", "x.tar"); }), "no error");
  EXPECT_NE(error_of([] { split_member_name("a/..", "x.tar"); }), "no error");
}

TEST(TarSamples, DuplicateExtensionInASampleIsAnError) {
  test::TempDir dir;
  write_tar(dir.file("d.tar"), {{"k.cls", "1"}, {"k.cls", "2"}});
  EXPECT_NE(error_of([&] { read_tar_samples(dir.file("d.tar")); }).find("two '.cls' members"), std::string::npos);
}

TEST(TarSamples, ImageSamplesPrepareIntoRecords) {
  test::TempDir dir;
  std::vector<std::pair<std::string, std::string>> m;
  for (int i = 0; i < 6; ++i) {
    const Image im = test::gradient_image(20, 12, i);
    m.push_back(
        {fmt::format("train/{:03d}.{}", i, i % 2 ? "png" : "jpg"), i % 2 ? encode_png(im) : test::encode_jpeg(im)});
    m.push_back({fmt::format("train/{:03d}.cls", i), i < 3 ? "bird\n" : "ant\n"});
  }
  write_tar(dir.file("shard-000.tar"), m);
  PrepareOptions o;
  o.inputs = {dir.file("shard-000.tar")};
  o.out_dir = dir.file("ds");
  o.format = InputFormat::kTar;
  o.image_size = 8;
  o.val_fraction = 0.34;
  const PrepareReport r = prepare_dataset(o);
  EXPECT_EQ(r.kind, "records");
  EXPECT_EQ(r.train_samples + r.val_samples, 6);
  EXPECT_EQ(r.val_samples, 2);
  const RecordDataset d = open_record_dataset(dir.file("ds"));
  EXPECT_EQ(d.classes, (std::vector<std::string>{"ant", "bird"}));  // string labels: sorted names
  EXPECT_EQ(d.spec.shape, (std::vector<int64_t>{3, 8, 8}));
  int birds = 0;
  for (const RecordSplit* s : {&d.train, &d.val})
    for (int64_t i = 0; i < s->size(); ++i) {
      int64_t label;
      std::memcpy(&label, s->record(i).data(), 8);
      birds += label == 1;
    }
  EXPECT_EQ(birds, 3);
}

TEST(TarSamples, ImageWithoutLabelAndCorruptImageNameTheMember) {
  test::TempDir dir;
  write_tar(dir.file("nolabel.tar"), {{"a.png", encode_png(test::gradient_image(4, 4, 1))}});
  write_tar(
      dir.file("corrupt.tar"),
      {{"b.jpg", "not a jpeg"}, {"b.cls", "0"}, {"c.png", encode_png(test::gradient_image(4, 4, 2))}, {"c.cls", "1"}});
  PrepareOptions o;
  o.out_dir = dir.file("ds");
  o.format = InputFormat::kTar;
  o.inputs = {dir.file("nolabel.tar")};
  EXPECT_NE(error_of([&] { prepare_dataset(o); }).find("'a.cls'"), std::string::npos);
  o.inputs = {dir.file("corrupt.tar")};
  const std::string e = error_of([&] { prepare_dataset(o); });
  EXPECT_NE(e.find(dir.file("corrupt.tar") + ":b.jpg"), std::string::npos) << e;
}

TEST(TarSamples, TextSamplesPrepareIntoTokens) {
  test::TempDir dir;
  write_tar(dir.file("text.tar"), {{"d/0.txt", "first"}, {"d/0.json", "{}"}, {"d/1.txt", "second"}});
  PrepareOptions o;
  o.inputs = {dir.file("text.tar")};
  o.out_dir = dir.file("ds");
  o.format = InputFormat::kTar;
  o.val_fraction = 0.1;
  const PrepareReport r = prepare_dataset(o);
  EXPECT_EQ(r.kind, "tokens");
  EXPECT_EQ(r.documents, 2);
  const TokenDataset d = open_token_dataset(dir.file("ds"));
  std::vector<int32_t> t(d.train.size() + d.val.size());
  d.train.read(0, d.train.size(), t.data());
  d.val.read(0, d.val.size(), t.data() + d.train.size());
  EXPECT_EQ(std::string(t.begin(), t.end()), "first\n\nsecond\n\n");
}

// '.cls' labels are classed as a table's are: one "-1" among integer labels used to make every
// label a class name, and labels 0, 1 and 5000 made 5001 classes. Both are refused by member.
TEST(TarSamples, ANegativeOrSparseIntegerLabelIsRefusedNamingTheMember) {
  test::TempDir dir;
  const auto tar_of = [&](const std::string& name, const std::vector<std::string>& labels) {
    std::vector<std::pair<std::string, std::string>> m;
    for (size_t i = 0; i < labels.size(); ++i) {
      m.push_back({fmt::format("s{}.png", i), encode_png(test::gradient_image(4, 4, static_cast<int>(i)))});
      m.push_back({fmt::format("s{}.cls", i), labels[i]});
    }
    write_tar(dir.file(name), m);
    PrepareOptions o;
    o.inputs = {dir.file(name)};
    o.out_dir = dir.file("ds");
    o.format = InputFormat::kTar;
    o.image_size = 4;
    return error_of([&] { prepare_dataset(o); });
  };
  std::string e = tar_of("negative.tar", {"0\n", "1\n", "-1\n", "1\n"});
  EXPECT_NE(e.find("tar archive '" + dir.file("negative.tar") + "': member 's2.cls': label -1 is negative"),
            std::string::npos)
      << e;
  e = tar_of("sparse.tar", {"0", "1", "5000", "1"});
  EXPECT_NE(e.find("the largest label of the '.cls' labels is 5000"), std::string::npos) << e;
  EXPECT_NE(e.find("only 3 distinct labels occur"), std::string::npos) << e;
  e = tar_of("mixed.tar", {"3", "1", "x", "0"});
  EXPECT_NE(e.find("member 's2.cls': label 'x' is not a number"), std::string::npos) << e;
  EXPECT_EQ(tar_of("whole.tar", {"0", "1.0", "1", "0"}), "no error");  // 1.0 is class 1
  EXPECT_EQ(open_record_dataset(dir.file("ds")).classes, (std::vector<std::string>{"0", "1"}));
}

}  // namespace
}  // namespace frugal::tar_samples_test

#else
TEST(TarSamples, NeedsTheLibarchiveAndImagesFeatures) {
  GTEST_SKIP() << "this build lacks libarchive or images (frugal doctor lists the features of a build)";
}
#endif  // FRUGAL_HAVE_LIBARCHIVE && FRUGAL_HAVE_IMAGES
