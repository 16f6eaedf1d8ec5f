// `frugal prepare --format images`: an image folder becomes record shards whose labels and
// pixels match a direct decode + resize of every image, fp16 storage holds the same values,
// augmentation is deterministic for a seed (bitwise-identical shards, for any thread count), a
// corrupt image stops prepare naming the file, and a val/ folder is the validation split.
#include <gtest/gtest.h>

#include <c10/util/Half.h>

#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/data/prepare.h"
#include "frugal/data/record_source.h"
#include "image_writers.h"
#include "test_util.h"

#if FRUGAL_HAVE_IMAGES
namespace frugal::image_prepare_test {
namespace {
namespace fs = std::filesystem;

struct Source {
  std::string path;
  std::string bytes;
  int64_t label;
};

// Two classes, JPEG and PNG mixed, sizes not equal to the target and not square.
std::vector<Source> make_folder(const std::string& root) {
  std::vector<Source> out;
  const std::vector<std::string> classes = {"cat", "dog"};
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(root + "/" + classes[c]);
    for (int i = 0; i < 5; ++i) {
      const Image im = test::gradient_image(40 + 3 * i, 30 + 5 * c, c * 10 + i);
      const bool jpeg = i % 2 == 0;
      Source s{fmt::format("{}/{}/img{}.{}", root, classes[c], i, jpeg ? "jpg" : "png"),
               jpeg ? test::encode_jpeg(im) : encode_png(im), c};
      test::write_bytes(s.path, s.bytes);
      out.push_back(s);
    }
  }
  test::write_text(root + "/cat/notes.txt", "not an image: skipped");
  return out;
}

PrepareOptions image_options(const std::string& in, const std::string& out) {
  PrepareOptions o;
  o.inputs = {in};
  o.out_dir = out;
  o.format = InputFormat::kImages;
  o.image_size = 16;
  o.val_fraction = 0.2;
  o.threads = 2;
  return o;
}

// Every record of the dataset as (label, 3*S*S values in [0, 255]).
std::vector<std::pair<int64_t, std::vector<float>>> all_records(const std::string& dir) {
  const RecordDataset ds = open_record_dataset(dir);
  const int64_t n = ds.spec.values();
  std::vector<std::pair<int64_t, std::vector<float>>> out;
  for (const RecordSplit* split : {&ds.train, &ds.val}) {
    for (int64_t i = 0; i < split->size(); ++i) {
      const std::string rec = split->record(i);
      std::pair<int64_t, std::vector<float>> r;
      std::memcpy(&r.first, rec.data(), 8);
      r.second.resize(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) {
        if (ds.spec.dtype == RecordDtype::kUint8) {
          r.second[static_cast<size_t>(k)] = static_cast<uint8_t>(rec[8 + static_cast<size_t>(k)]);
        } else {
          uint16_t bits;
          std::memcpy(&bits, rec.data() + 8 + 2 * k, 2);
          r.second[static_cast<size_t>(k)] = static_cast<float>(c10::Half(bits, c10::Half::from_bits())) * 255.0f;
        }
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

// The reference: libjpeg/libpng decode of the file, torch's antialiased resize, CHW.
std::vector<float> reference(const Source& s, int size) {
  const Image im = s.path.size() > 4 && s.path.substr(s.path.size() - 4) == ".png"
                       ? decode_image(s.bytes, s.path)  // PNG is lossless: checked in image_test
                       : test::reference_decode_jpeg(s.bytes);
  const torch::Tensor t = test::reference_resize(im, size, size).contiguous();
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

// Each record matches exactly one source image of its label within `tol`, and every source is
// matched once.
void expect_records_match_sources(const std::vector<std::pair<int64_t, std::vector<float>>>& recs,
                                  const std::vector<Source>& sources, int size, float tol) {
  ASSERT_EQ(recs.size(), sources.size());
  std::vector<int> used(sources.size(), 0);
  for (const auto& [label, px] : recs) {
    int match = -1;
    for (size_t s = 0; s < sources.size(); ++s) {
      if (sources[s].label != label) continue;
      const std::vector<float> ref = reference(sources[s], size);
      float worst = 0;
      for (size_t k = 0; k < ref.size(); ++k) worst = std::max(worst, std::abs(ref[k] - px[k]));
      if (worst <= tol) match = static_cast<int>(s);
    }
    ASSERT_GE(match, 0) << "a record of label " << label << " matches no source image";
    ++used[static_cast<size_t>(match)];
  }
  for (size_t s = 0; s < sources.size(); ++s) EXPECT_EQ(used[s], 1) << sources[s].path;
}

TEST(ImagePrepare, FolderRoundTripsLabelsAndPixels) {
  test::TempDir dir;
  const auto sources = make_folder(dir.file("in"));
  const PrepareReport r = prepare_dataset(image_options(dir.file("in"), dir.file("ds")));
  EXPECT_EQ(r.kind, "records");
  EXPECT_EQ(r.train_samples, 8);
  EXPECT_EQ(r.val_samples, 2);  // round(0.2 * 10)
  EXPECT_EQ(r.classes, 2);
  const auto m = nlohmann::json::parse(test::read_text(dir.file("ds/manifest.json")));
  EXPECT_EQ(m["classes"], nlohmann::json({"cat", "dog"}));
  EXPECT_EQ(m["record"]["shape"], nlohmann::json({3, 16, 16}));
  EXPECT_EQ(m["record"]["dtype"], "uint8");
  // 0.51: our uint8 rounding of the same filter (image_test checks the filter itself).
  expect_records_match_sources(all_records(dir.file("ds")), sources, 16, 0.51f);
  EXPECT_TRUE(prepare_dataset(image_options(dir.file("in"), dir.file("ds"))).up_to_date);
}

TEST(ImagePrepare, Fp16StorageHoldsTheSamePixels) {
  test::TempDir dir;
  const auto sources = make_folder(dir.file("in"));
  PrepareOptions o = image_options(dir.file("in"), dir.file("ds"));
  o.pixels = PixelStorage::kFp16;
  prepare_dataset(o);
  const auto m = nlohmann::json::parse(test::read_text(dir.file("ds/manifest.json")));
  EXPECT_EQ(m["record"]["dtype"], "float16");
  EXPECT_EQ(m["record"]["bytes"], 8 + 2 * 3 * 16 * 16);
  // fp16 of v/255 is within 2^-11 relative: at most 0.07 of 255 on top of the uint8 rounding.
  expect_records_match_sources(all_records(dir.file("ds")), sources, 16, 0.58f);
}

TEST(ImagePrepare, AugmentationIsBitwiseDeterministicForASeedAndThreadCount) {
  test::TempDir dir;
  make_folder(dir.file("in"));
  auto run = [&](const std::string& out, uint64_t seed, int threads) {
    PrepareOptions o = image_options(dir.file("in"), dir.file(out));
    o.augment = 3;
    o.seed = seed;
    o.threads = threads;
    return prepare_dataset(o);
  };
  const PrepareReport a = run("a", 5, 2);
  run("b", 5, 1);
  run("c", 6, 2);
  EXPECT_EQ(a.train_records, a.train_samples * 4);  // the original + 3 variants
  EXPECT_EQ(a.val_records, a.val_samples);          // validation is never augmented
  for (const char* f : {"train_000000.frs", "val_000000.frs"})
    EXPECT_EQ(test::read_text(dir.file(std::string("a/") + f)), test::read_text(dir.file(std::string("b/") + f))) << f;
  EXPECT_NE(test::read_text(dir.file("a/train_000000.frs")), test::read_text(dir.file("c/train_000000.frs")));
}

TEST(ImagePrepare, CorruptImageStopsPrepareNamingTheFile) {
  test::TempDir dir;
  make_folder(dir.file("in"));
  const std::string bad = dir.file("in/dog/broken.jpg");
  const std::string jpeg = test::encode_jpeg(test::gradient_image(64, 64, 1));
  test::write_bytes(bad, jpeg.substr(0, jpeg.size() / 2));
  try {
    prepare_dataset(image_options(dir.file("in"), dir.file("ds")));
    FAIL() << "a truncated JPEG was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.file("ds")));  // nothing half-written is published
}

TEST(ImagePrepare, TrainAndValFoldersAreTheSplit) {
  test::TempDir dir;
  make_folder(dir.file("in/train"));
  fs::create_directories(dir.file("in/val/dog"));
  test::write_bytes(dir.file("in/val/dog/v.png"), encode_png(test::gradient_image(20, 20, 9)));
  const PrepareReport r = prepare_dataset(image_options(dir.file("in"), dir.file("ds")));
  EXPECT_EQ(r.train_samples, 10);
  EXPECT_EQ(r.val_samples, 1);
  const RecordDataset d = open_record_dataset(dir.file("ds"));
  ASSERT_EQ(d.val.size(), 1);
  int64_t label;
  std::memcpy(&label, d.val.record(0).data(), 8);
  EXPECT_EQ(d.classes[static_cast<size_t>(label)], "dog");
}

TEST(ImagePrepare, CliPreparesAFolderAndSaysHowToTrain) {
  test::TempDir dir;
  make_folder(dir.file("in"));
  const auto res = test::run_frugal(
      fmt::format("prepare --format images --size 8 --augment 1 --quiet {} --out {}", dir.file("in"), dir.file("ds")));
  EXPECT_EQ(res.exit_code, 0) << res.output;
  EXPECT_NE(res.output.find("data.source=records:"), std::string::npos) << res.output;
  const auto bad = test::run_frugal(
      fmt::format("prepare --format images {} --out {}", dir.file("in/cat/img0.jpg"), dir.file("ds2")));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("is not a folder"), std::string::npos) << bad.output;
}

// An empty folder, and a folder that is one class's (its parent was meant), are refused by name
// with exit 2, and nothing is published.
TEST(ImagePrepare, AnEmptyFolderOrASingleClassIsRefusedNamingTheFolder) {
  test::TempDir dir;
  fs::create_directories(dir.file("empty"));
  auto r = test::run_frugal(fmt::format("prepare --format images {} --out {}", dir.file("empty"), dir.file("ds")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no files under " + dir.file("empty") + ": the folder is empty"), std::string::npos)
      << r.output;
  make_folder(dir.file("in"));
  fs::remove_all(dir.file("in/dog"));
  r = test::run_frugal(fmt::format("prepare --format images {} --out {}", dir.file("in"), dir.file("ds")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("in") + " holds one class ('cat'): a classifier needs two or more"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.file("ds")));
}

// Hidden entries are no data: a hidden folder (a notebook's checkpoints) was a class, and a macOS
// resource fork "._img0.jpg" (not an image) stopped prepare. Both are skipped now.
TEST(ImagePrepare, HiddenFoldersAndFilesAreNeitherClassesNorImages) {
  test::TempDir dir;
  make_folder(dir.file("in"));
  fs::create_directories(dir.file("in/.ipynb_checkpoints"));
  test::write_bytes(dir.file("in/.ipynb_checkpoints/img0.png"), encode_png(test::gradient_image(8, 8, 1)));
  test::write_text(dir.file("in/cat/._img0.jpg"), "AppleDouble resource fork, not a JPEG");
  fs::create_directories(dir.file("in/dog/.thumbs"));
  test::write_bytes(dir.file("in/dog/.thumbs/img0.png"), encode_png(test::gradient_image(8, 8, 2)));
  const PrepareReport r = prepare_dataset(image_options(dir.file("in"), dir.file("ds")));
  EXPECT_EQ(r.classes, 2);
  EXPECT_EQ(r.train_samples + r.val_samples, 10);
  const auto m = nlohmann::json::parse(test::read_text(dir.file("ds/manifest.json")));
  EXPECT_EQ(m["classes"], nlohmann::json({"cat", "dog"}));
}

}  // namespace
}  // namespace frugal::image_prepare_test

#else
TEST(ImagePrepare, NeedsTheImagesFeature) {
  GTEST_SKIP() << "this build has no images (frugal doctor lists the features of a build)";
}
#endif  // FRUGAL_HAVE_IMAGES
