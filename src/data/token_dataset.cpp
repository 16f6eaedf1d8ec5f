// Token datasets: frugal manifests and llm.c .bin files; see token_dataset.h.
#include "frugal/data/token_dataset.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "data/internal/little_endian.h"
#include "data/internal/manifest.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/shard.h"

namespace frugal {
namespace fs = std::filesystem;
using detail::get_u16;
using detail::get_u32;

namespace {

constexpr uint32_t kLlmcMagic = 20240520;
constexpr uint64_t kLlmcHeaderBytes = 256 * 4;

class ShardTokenFile : public TokenFile {
 public:
  explicit ShardTokenFile(const std::string& path) : r_(path) {
    if (r_.kind() != ShardKind::kTokens)
      throw DataError(fmt::format("shard '{}' holds records, but a token dataset needs token shards", path));
  }
  const std::string& path() const override { return r_.path(); }
  uint64_t size() const override { return r_.size(); }
  void read(uint64_t start, size_t n, int32_t* out) const override { r_.read_tokens(start, n, out); }
  uint64_t byte_offset(uint64_t token) const override { return r_.token_offset(token); }
  const ShardReader& reader() const { return r_; }

 private:
  ShardReader r_;
};

// uint16 tokens after a header of `header_` bytes: llm.c's (1024 bytes) or nanoGPT's (none).
class LlmcBinFile : public TokenFile {
 public:
  LlmcBinFile(std::string path, uint64_t header) : path_(std::move(path)), header_(header) {
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw DataError(fmt::format("cannot open '{}': {}", path_, std::strerror(errno)));
    struct stat st {};
    ::fstat(fd, &st);
    bytes_ = static_cast<uint64_t>(st.st_size);
    if (bytes_ < header_ || bytes_ == 0) {
      ::close(fd);
      fail(bytes_, header_ ? fmt::format("truncated: {} bytes, the header alone needs {}", bytes_, header_)
                           : std::string("empty: no tokens"));
    }
    void* m = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) throw DataError(fmt::format("cannot map '{}': {}", path_, std::strerror(errno)));
    map_ = static_cast<const uint8_t*>(m);
    if (header_ == 0) {
      tokens_ = bytes_ / 2;
      if (bytes_ % 2)
        release_and_fail(bytes_ - 1, fmt::format("{} bytes is not a whole number of uint16 tokens", bytes_));
      return;
    }
    const uint32_t magic = get_u32(map_), version = get_u32(map_ + 4);
    tokens_ = get_u32(map_ + 8);
    if (magic != kLlmcMagic) release_and_fail(0, fmt::format("magic {} is not llm.c's {}", magic, kLlmcMagic));
    if (version != 1) release_and_fail(4, fmt::format("version {} is not supported (1 = uint16 tokens)", version));
    if (kLlmcHeaderBytes + 2 * tokens_ != bytes_)
      release_and_fail(std::min(bytes_, kLlmcHeaderBytes + 2 * tokens_),
                       fmt::format("the header promises {} tokens ({} bytes) but the file has {} bytes", tokens_,
                                   kLlmcHeaderBytes + 2 * tokens_, bytes_));
  }
  ~LlmcBinFile() override {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), bytes_);
  }
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return tokens_; }
  void read(uint64_t start, size_t n, int32_t* out) const override {
    const uint8_t* p = map_ + header_ + 2 * start;
    for (size_t i = 0; i < n; ++i) out[i] = get_u16(p + 2 * i);
  }
  uint64_t byte_offset(uint64_t token) const override { return header_ + 2 * token; }

 private:
  [[noreturn]] void fail(uint64_t offset, const std::string& what) const {
    throw DataError(fmt::format("{} token file '{}' is invalid at byte offset {}: {}", header_ ? "llm.c" : "nanoGPT",
                                path_, offset, what));
  }
  [[noreturn]] void release_and_fail(uint64_t offset, const std::string& what) {
    ::munmap(const_cast<uint8_t*>(map_), bytes_);
    map_ = nullptr;
    fail(offset, what);
  }
  std::string path_;
  uint64_t header_ = 0;
  const uint8_t* map_ = nullptr;
  uint64_t bytes_ = 0, tokens_ = 0;
};

TokenDataset open_manifest(const std::string& dir) {
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  const nlohmann::json m = internal::read_manifest_json(dir, "token");
  TokenDataset d;
  d.dir = dir;
  d.format = "frugal";
  try {  // value() throws on a field of the wrong type: that is a malformed manifest too
    internal::refuse_documents_dataset(m, mpath);
    if (m.value("format", "") != "frugal-dataset" || m.value("kind", "") != "tokens")
      throw DataError(fmt::format("'{}' is not a frugal token-dataset manifest (format/kind)", mpath));
    if (m.value("format_version", 0) != 1)
      throw DataError(fmt::format("'{}': format_version {} is not supported (this build reads 1)", mpath,
                                  internal::manifest_field(m, "format_version")));
    const nlohmann::json& vocab = m.at("tokenizer").at("vocab");
    // The model's embedding has a row per token: a vocabulary that is no whole number in the range
    // model.vocab allows would train on a truncated value or ask for terabytes.
    // (Not a number at all: malformed, from get() below.)
    if (vocab.is_number() &&
        (!vocab.is_number_integer() || vocab.get<int64_t>() < 2 || vocab.get<int64_t>() > (int64_t{1} << 24)))
      throw DataError(
          fmt::format("'{}': tokenizer.vocab is {}, not a whole number in [2, 16777216]; re-run frugal "
                      "prepare",
                      mpath, vocab.dump()));
    d.vocab = vocab.get<int64_t>();
    d.tokenizer = m.at("tokenizer").at("name").get<std::string>();
    if (m.contains("dtype") && m["dtype"] != "uint16" && m["dtype"] != "uint32")
      throw DataError(fmt::format("'{}': dtype is {}, not \"uint16\" or \"uint32\"; re-run frugal prepare", mpath,
                                  m["dtype"].dump()));
    std::set<std::string> listed;
    for (const char* split : {"train", "val"}) {
      std::vector<std::unique_ptr<TokenFile>> files;
      for (const auto& s : m.at("splits").at(split)) {
        internal::check_listed_once(dir, s, listed);
        auto f = std::make_unique<ShardTokenFile>(internal::checked_shard_path(dir, s));
        internal::check_shard_identity(dir, s, f->reader());
        if (m.contains("dtype") && m["dtype"] != dtype_name(f->reader().dtype()))
          throw DataError(fmt::format("'{}': dtype is {} but shard '{}' holds {}; re-run frugal prepare", mpath,
                                      m["dtype"].dump(), f->reader().path(), dtype_name(f->reader().dtype())));
        files.push_back(std::move(f));
      }
      (std::string(split) == "train" ? d.train : d.val) = TokenStream(std::move(files));
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError(internal::malformed_manifest(mpath, e));
  }
  return d;
}

}  // namespace

std::optional<ManifestTokenizer> manifest_tokenizer(const std::string& dir) {
  try {
    const nlohmann::json m = nlohmann::json::parse(read_small_file((fs::path(dir) / "manifest.json").string()));
    const auto& t = m.at("tokenizer");
    const auto& v = t.at("vocab");
    // Out of model.vocab's range: none (opening the dataset then says why, by name).
    if (v.is_number_integer() && v.get<int64_t>() >= 2 && v.get<int64_t>() <= (int64_t{1} << 24))
      return ManifestTokenizer{t.value("name", std::string("unknown")), v.get<int64_t>()};
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string dataset_fingerprint(const std::string& dataset_dir) {
  std::error_code ec;
  const fs::path manifest = fs::path(dataset_dir) / "manifest.json";
  if (!fs::is_regular_file(manifest, ec)) return "";
  const nlohmann::json m = nlohmann::json::parse(read_small_file(manifest.string()), nullptr, false);
  if (!m.is_object() || !m.contains("splits")) return "";
  return hex64(xxh64_bytes(m["splits"].dump()));
}

bool keep_tokenizer(const std::string& dataset_dir, const std::string& to_dir) {
  const fs::path to(to_dir);
  std::error_code ec;
  if (fs::exists(to / "manifest.json", ec) || !manifest_tokenizer(dataset_dir)) return false;
  const nlohmann::json m = nlohmann::json::parse(read_small_file((fs::path(dataset_dir) / "manifest.json").string()));
  nlohmann::json kept = {{"format", "frugal-tokenizer"},
                         {"format_version", 1},
                         {"dataset", fs::absolute(dataset_dir).lexically_normal().string()},
                         {"tokenizer", m.at("tokenizer")}};
  fs::create_directories(to, ec);
  if (ec) throw IoError(fmt::format("cannot create {}: {}", to.string(), ec.message()), ec.value());
  // The tokenizer's model file and, for chat documents, the template they were rendered with.
  for (const char* key : {"model", "chat_template"}) {
    const nlohmann::json& entry = m["tokenizer"].value(key, nlohmann::json::object());
    if (!entry.is_object() || !entry.contains("file") || !entry["file"].is_string()) continue;
    const std::string name = fs::path(entry["file"].get<std::string>()).filename().string();
    const std::string from = (fs::path(dataset_dir) / name).string();
    if (!fs::is_regular_file(from, ec))
      throw IoError(
          fmt::format("{}: the dataset's tokenizer file {} is missing; prepare the dataset again", dataset_dir, from));
    const std::string bytes = read_file(from);
    if (entry.contains("xxh64") && entry["xxh64"] != hex64(xxh64_bytes(bytes)))
      throw IoError(
          fmt::format("{}: {} does not match the xxh64 its manifest.json records (replaced or corrupt); "
                      "prepare the dataset again",
                      dataset_dir, from));
    write_file_atomic((to / name).string(), bytes);
  }
  write_file_atomic((to / "manifest.json").string(), kept.dump(2) + "\n");  // last: it marks the folder complete
  return true;
}

std::unique_ptr<TokenFile> open_llmc_bin(const std::string& path) {
  return std::make_unique<LlmcBinFile>(path, kLlmcHeaderBytes);
}

std::unique_ptr<TokenFile> open_nanogpt_bin(const std::string& path) { return std::make_unique<LlmcBinFile>(path, 0); }

TokenStream::TokenStream(std::vector<std::unique_ptr<TokenFile>> files) {
  for (auto& f : files) {
    starts_.push_back(total_);
    total_ += f->size();
    files_.push_back(std::move(f));
  }
}

void TokenStream::read(uint64_t start, size_t n, int32_t* out) const {
  if (start + n > total_)
    throw DataError(
        fmt::format("token range [{}, {}) is past the end of the split ({} tokens)", start, start + n, total_));
  size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
  while (n > 0) {
    const uint64_t local = start - starts_[f];
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, files_[f]->size() - local));
    files_[f]->read(local, take, out);
    out += take;
    start += take;
    n -= take;
    ++f;
  }
}

std::string TokenStream::locate(uint64_t token) const {
  if (token >= total_) return "past the end";
  size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), token) - starts_.begin()) - 1;
  return fmt::format("'{}' at byte offset {}", files_[f]->path(), files_[f]->byte_offset(token - starts_[f]));
}

TokenDataset open_token_dataset(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw DataError(
        fmt::format("data.source: dataset directory '{}' does not exist; create it with "
                    "`frugal prepare INPUT --out {}`",
                    dir, dir));
  if (fs::exists(fs::path(dir) / "manifest.json")) return open_manifest(dir);
  std::vector<std::string> train, val;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".bin") continue;
    if (name.find("_train_") != std::string::npos)
      train.push_back(e.path().string());
    else if (name.find("_val_") != std::string::npos)
      val.push_back(e.path().string());
  }
  TokenDataset d;
  d.dir = dir;
  if (train.empty() && val.empty() && fs::is_regular_file(fs::path(dir) / "train.bin") &&
      fs::is_regular_file(fs::path(dir) / "val.bin")) {
    // nanoGPT's prepare.py: train.bin and val.bin, uint16 tokens without a header.
    d.format = "nanoGPT";
    d.tokenizer = "gpt2 or the dataset's own (nanoGPT convention)";
    auto one = [&](const char* name) {
      std::vector<std::unique_ptr<TokenFile>> files;
      files.push_back(open_nanogpt_bin((fs::path(dir) / name).string()));
      return TokenStream(std::move(files));
    };
    d.train = one("train.bin");
    d.val = one("val.bin");
    return d;
  }
  if (train.empty() || val.empty())
    throw DataError(
        fmt::format("dataset '{}' has no manifest.json, no llm.c '*_train_*.bin' and '*_val_*.bin' "
                    "files and no nanoGPT 'train.bin' and 'val.bin'; prepare it with `frugal prepare`",
                    dir));
  std::sort(train.begin(), train.end());
  std::sort(val.begin(), val.end());
  d.format = "llm.c";
  d.tokenizer = "gpt2 (llm.c convention)";
  auto open_all = [](const std::vector<std::string>& paths) {
    std::vector<std::unique_ptr<TokenFile>> files;
    for (const auto& p : paths) files.push_back(open_llmc_bin(p));
    return TokenStream(std::move(files));
  };
  d.train = open_all(train);
  d.val = open_all(val);
  return d;
}

}  // namespace frugal
