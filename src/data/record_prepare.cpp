// Record datasets for `frugal prepare`: images and tables into record shards; see
// internal/record_prepare.h, the layout in docs/formats/shards.md and the manifest in docs/data.md.
//
// Images are decoded, resized and augmented by `threads` workers, a chunk of images at a time
// (memory stays bounded by one chunk of encoded and decoded images), and written in item
// order, so the shards are byte-identical for any thread count.
#include "data/internal/record_prepare.h"

#include <c10/util/Half.h>
#include <fmt/ranges.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <thread>

#include "data/internal/little_endian.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"
#include "frugal/data/csv_table.h"
#include "frugal/data/document_reader.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/image.h"
#include "frugal/data/record_source.h"
#include "frugal/data/rng.h"
#include "frugal/data/sampler.h"
#include "frugal/data/shard.h"

namespace frugal::detail {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kAugmentStream = 0x6175676dULL;  // "augm"
constexpr uint64_t kHoldOutStream = 0x686f6c64ULL;  // "hold"

void put_label(std::string* rec, int64_t label) {
  rec->resize(kRecordLabelBytes);
  put_u64(reinterpret_cast<uint8_t*>(rec->data()), static_cast<uint64_t>(label));
}

std::string image_record(int64_t label, const Image& im, PixelStorage pixels) {
  const std::vector<uint8_t> chw = to_chw(im);
  std::string rec;
  put_label(&rec, label);
  if (pixels == PixelStorage::kUint8) {
    rec.append(reinterpret_cast<const char*>(chw.data()), chw.size());
  } else {
    rec.resize(kRecordLabelBytes + 2 * chw.size());
    auto* p = reinterpret_cast<uint8_t*>(rec.data()) + kRecordLabelBytes;
    for (size_t i = 0; i < chw.size(); ++i) put_u16(p + 2 * i, c10::Half(chw[i] / 255.0f).x);
  }
  return rec;
}

// Runs fn(i) for i in [0, n) on `threads` threads; rethrows the error of the lowest failing i.
template <class Fn>
void parallel_for(size_t n, int threads, Fn fn) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

bool is_image_ext(std::string ext) {
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == "jpg" || ext == "jpeg" || ext == "png";
}

void prepare_images(const PrepareOptions& o, std::vector<ImageItem> items, const std::vector<std::string>& classes,
                    const std::string& tmp, nlohmann::ordered_json* m, PrepareReport* r, const PrepareProgress& say) {
  const int64_t n = static_cast<int64_t>(items.size());
  if (n == 0) throw DataError(fmt::format("no JPEG or PNG images in {}", fmt::join(o.inputs, ", ")));
  // One class trains a classifier to answer it always; usually the folder given was one class's.
  if (classes.size() == 1)
    throw DataError(
        fmt::format("{} holds one class ('{}'): a classifier needs two or more. Give the folder whose sub-folders are "
                    "the classes (one sub-folder of images each), or tar samples with two or more '.cls' labels",
                    fmt::join(o.inputs, ", "), classes.front()));
  const bool explicit_val = std::any_of(items.begin(), items.end(), [](const ImageItem& i) { return i.val; });
  if (!explicit_val) {
    const std::vector<bool> val = held_out(n, o.val_fraction, o.seed);
    for (int64_t i = 0; i < n; ++i) items[static_cast<size_t>(i)].val = val[static_cast<size_t>(i)];
  }
  const int S = o.image_size;
  const AugmentOptions aug{std::max(1, S / 8), 0.2};
  SplitWriter train(tmp, "train", o, r), val(tmp, "val", o, r);
  const size_t chunk = static_cast<size_t>(std::max(1, r->threads)) * 64;
  for (size_t begin = 0; begin < items.size(); begin += chunk) {
    const size_t count = std::min(chunk, items.size() - begin);
    std::vector<std::vector<std::string>> records(count);
    const auto t0 = Clock::now();
    parallel_for(count, r->threads, [&](size_t j) {
      ImageItem& it = items[begin + j];
      const std::string bytes = it.bytes.empty() ? read_file(it.path) : std::move(it.bytes);
      const Image im = resize_image(decode_image(bytes, it.what, 2 * S), S, S);
      records[j].push_back(image_record(it.label, im, o.pixels));
      if (it.val) return;
      const uint64_t key = xxh64_bytes(it.key);
      for (int v = 1; v <= o.augment; ++v)
        records[j].push_back(
            image_record(it.label, augment_image(im, derive_seed(o.seed ^ kAugmentStream, key, v), aug), o.pixels));
    });
    r->decode_s += seconds_since(t0);
    for (size_t j = 0; j < count; ++j) {
      ImageItem& it = items[begin + j];
      for (const auto& rec : records[j]) (it.val ? val : train).add(rec);
      it.bytes = std::string();  // free the encoded image
      (it.val ? r->val_samples : r->train_samples) += 1;
    }
    const size_t done = begin + count;
    say(fmt::format("decoded {}/{} images ({:.0f} images/s, {} threads)", done, items.size(),
                    static_cast<double>(done) / std::max(r->decode_s, 1e-9), r->threads));
  }
  if (r->train_samples == 0) throw DataError("every image went to the validation split; lower --val-fraction");
  const size_t pixel_bytes = o.pixels == PixelStorage::kUint8 ? 1 : 2;
  const char* dtype = o.pixels == PixelStorage::kUint8 ? "uint8" : "float16";
  (*m)["kind"] = "records";
  (*m)["record"] = {{"content", "image"}, {"label", "int64"}, {"dtype", dtype},
                    {"shape", {3, S, S}}, {"layout", "CHW"},  {"bytes", kRecordLabelBytes + pixel_bytes * 3 * S * S}};
  (*m)["classes"] = classes;
  (*m)["augment"] = {{"variants", o.augment}, {"pad", aug.pad}, {"jitter", aug.jitter}, {"seed", o.seed}};
  (*m)["validation"] = explicit_val ? "val folder" : "held-out fraction";
  (*m)["splits"]["train"] = train.finish();
  (*m)["splits"]["val"] = val.finish();
  r->train_records = train.records();
  r->val_records = val.records();
  r->classes = static_cast<int64_t>(classes.size());
  r->record_content = "image";
  r->record_shape = fmt::format("{} [3, {}, {}]", dtype, S, S);
}

// Sub-folders of `dir` (sorted names), hidden ones (.ipynb_checkpoints, .git) left out.
std::vector<std::string> subdirs(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && !hidden_name(e.path())) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Image files under dir, recursively, as paths relative to `root` (sorted); hidden files and
// folders (._x.jpg resource forks, .DS_Store) are left out, uncounted.
std::vector<std::string> image_files(const fs::path& dir, const fs::path& root, int64_t* skipped) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (hidden_name(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    if (is_image_ext(it->path().extension().string()))
      out.push_back(fs::relative(it->path(), root).string());
    else
      ++*skipped;
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<bool> held_out(int64_t n, double fraction, uint64_t seed) {
  std::vector<bool> val(static_cast<size_t>(n), false);
  int64_t k = static_cast<int64_t>(std::llround(static_cast<double>(n) * fraction));
  if (fraction > 0 && n > 1) k = std::clamp<int64_t>(k, 1, n - 1);
  if (k <= 0) return val;
  const EpochSampler perm(n, seed ^ kHoldOutStream);
  for (int64_t p = 0; p < k; ++p) val[static_cast<size_t>(perm.permute(0, p))] = true;
  return val;
}

void prepare_image_folders(const PrepareOptions& o, const std::string& tmp, nlohmann::ordered_json* m, PrepareReport* r,
                           const PrepareProgress& say) {
  struct Found {
    std::string root, rel, cls;
    bool val;
  };
  std::vector<Found> found;
  std::set<std::string> class_set;
  int64_t skipped = 0;
  for (const auto& in : o.inputs) {
    if (!fs::is_directory(in))
      throw DataError(
          fmt::format("--format images: input '{}' is not a folder; give a folder with one "
                      "sub-folder of images per class",
                      in));
    const auto top = subdirs(in);
    const bool split = std::find(top.begin(), top.end(), "train") != top.end() &&
                       std::find(top.begin(), top.end(), "val") != top.end();
    for (const char* part : {"train", "val"}) {
      const fs::path base = split ? fs::path(in) / part : fs::path(in);
      for (const auto& cls : subdirs(base)) {
        for (auto& rel : image_files(base / cls, in, &skipped)) {
          found.push_back({in, rel, cls, split && std::string(part) == "val"});
          if (!found.back().val) class_set.insert(cls);
        }
      }
      if (!split) break;
    }
  }
  const std::vector<std::string> classes(class_set.begin(), class_set.end());
  std::vector<ImageItem> items;
  for (auto& f : found) {
    const auto it = std::lower_bound(classes.begin(), classes.end(), f.cls);
    if (it == classes.end() || *it != f.cls)
      throw DataError(
          fmt::format("image folder '{}': class '{}' appears under val/ but not under train/", f.root, f.cls));
    ImageItem item;
    item.path = (fs::path(f.root) / f.rel).string();
    item.what = item.path;
    item.key = f.rel;
    item.label = it - classes.begin();
    item.val = f.val;
    items.push_back(std::move(item));
  }
  if (skipped > 0) say(fmt::format("skipping {} files that are not .jpg, .jpeg or .png", skipped));
  if (classes.empty())
    throw DataError(fmt::format("--format images: no class sub-folders with .jpg/.jpeg/.png files under {}",
                                fmt::join(o.inputs, ", ")));
  prepare_images(o, std::move(items), classes, tmp, m, r, say);
}

void prepare_tar_images(const PrepareOptions& o, std::vector<std::pair<std::string, TarSample>> samples,
                        const std::string& tmp, nlohmann::ordered_json* m, PrepareReport* r,
                        const PrepareProgress& say) {
  std::vector<ImageItem> items;
  std::vector<std::string> labels, origins;
  const bool tar = o.format == InputFormat::kTar;
  for (auto& [archive, s] : samples) {
    auto img = std::find_if(s.members.begin(), s.members.end(), [](const auto& kv) { return is_image_ext(kv.first); });
    if (img == s.members.end()) continue;  // a sample without an image (metadata only)
    auto cls = s.members.find("cls");
    if (cls == s.members.end())
      throw DataError(fmt::format("tar archive '{}': sample '{}' has an image but no '{}.cls' label member", archive,
                                  s.key, s.key));
    std::string label = cls->second;
    while (!label.empty() && std::isspace(static_cast<unsigned char>(label.back()))) label.pop_back();
    if (label.empty()) throw DataError(fmt::format("tar archive '{}': member '{}.cls' is empty", archive, s.key));
    ImageItem item;
    item.key = s.key;
    item.what = fmt::format("{}:{}.{}", archive, s.key, img->first);
    item.bytes = std::move(img->second);
    items.push_back(std::move(item));
    labels.push_back(std::move(label));
    // Avro and TFRecord samples are keyed "record K".
    origins.push_back(tar ? fmt::format("tar archive '{}': member '{}.cls'", archive, s.key)
                          : fmt::format("{}: {}", archive, s.key));
  }
  // Integer labels are the class ids; otherwise each distinct name is a class (sorted).
  const std::string field = o.label_column.empty() ? "label" : o.label_column;
  ClassIds c = class_ids(labels, tar ? std::string("the '.cls' labels") : fmt::format("the label field '{}'", field),
                         [&](size_t i) { return origins[i]; });
  for (size_t i = 0; i < items.size(); ++i) items[i].label = c.ids[i];
  prepare_images(o, std::move(items), c.classes, tmp, m, r, say);
}

void prepare_table(const PrepareOptions& o, const CsvTable& t, const std::string& tmp, nlohmann::ordered_json* m,
                   PrepareReport* r, const PrepareProgress& say) {
  const auto t0 = Clock::now();
  const int64_t n = t.rows();
  const size_t F = t.features.size();
  say(fmt::format("parsed {} rows x {} features", n, F));
  const std::vector<bool> is_val = held_out(n, o.val_fraction, o.seed);
  SplitWriter train(tmp, "train", o, r), val(tmp, "val", o, r);
  std::vector<double> sum(F, 0.0), sum2(F, 0.0);
  std::string rec;
  for (int64_t i = 0; i < n; ++i) {
    put_label(&rec, t.labels[static_cast<size_t>(i)]);
    rec.resize(kRecordLabelBytes + 4 * F);
    auto* p = reinterpret_cast<uint8_t*>(rec.data()) + kRecordLabelBytes;
    const float* row = t.values.data() + static_cast<size_t>(i) * F;
    for (size_t f = 0; f < F; ++f) {
      uint32_t bits;
      std::memcpy(&bits, &row[f], 4);
      put_u32(p + 4 * f, bits);
      if (!is_val[static_cast<size_t>(i)]) {
        sum[f] += row[f];
        sum2[f] += static_cast<double>(row[f]) * row[f];
      }
    }
    if (is_val[static_cast<size_t>(i)]) {
      val.add(rec);
      ++r->val_samples;
    } else {
      train.add(rec);
      ++r->train_samples;
    }
  }
  if (r->train_samples == 0) throw DataError("every row went to the validation split; lower --val-fraction");
  std::vector<double> mean(F), stdev(F);
  for (size_t f = 0; f < F; ++f) {
    mean[f] = sum[f] / static_cast<double>(r->train_samples);
    stdev[f] = std::sqrt(std::max(0.0, sum2[f] / static_cast<double>(r->train_samples) - mean[f] * mean[f]));
  }
  (*m)["kind"] = "records";
  (*m)["record"] = {{"content", "table"},
                    {"label", "int64"},
                    {"dtype", "float32"},
                    {"shape", {F}},
                    {"bytes", kRecordLabelBytes + 4 * F}};
  (*m)["classes"] = t.classes;
  (*m)["features"] = t.features;
  (*m)["label_column"] = t.label_column;
  (*m)["feature_stats"] = {{"split", "train"}, {"mean", mean}, {"std", stdev}};
  (*m)["validation"] = "held-out fraction";
  (*m)["splits"]["train"] = train.finish();
  (*m)["splits"]["val"] = val.finish();
  r->train_records = train.records();
  r->val_records = val.records();
  r->classes = static_cast<int64_t>(t.classes.size());
  r->record_content = "table";
  r->record_shape = fmt::format("float32 [{}]", F);
  r->decode_s = seconds_since(t0);
}

}  // namespace frugal::detail
