// prepare_dataset; see prepare.h. Phases: check the cache, read, dedup, tokenise, write shards
// into OUT.tmp-PID, then publish the folder with one atomic rename (internal/dataset_folder.h).
#include "frugal/data/prepare.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/hf_hub.h"
#include "frugal/core/features.h"
#include "frugal/core/threads.h"
#include "frugal/core/wall_clock.h"
#include "frugal/data/document_reader.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/shard.h"
#include "frugal/data/tokenizer.h"
#include "data/internal/dataset_folder.h"
#include "data/internal/record_prepare.h"
#include "frugal/data/record_inputs.h"
#include "frugal/data/tar_samples.h"

namespace frugal {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kFormatVersion = 1;

const char* dedup_name(DedupMode m) {
  return m == DedupMode::kNone ? "none" : m == DedupMode::kExact ? "exact" : "near";
}

const char* format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kText:
      return "text";
    case InputFormat::kJsonl:
      return "jsonl";
    case InputFormat::kImages:
      return "images";
    case InputFormat::kTar:
      return "tar";
    case InputFormat::kCsv:
      return "csv";
    case InputFormat::kParquet:
      return "parquet";
    case InputFormat::kChat:
      return "chat";
    case InputFormat::kPromptCompletion:
      return "prompt-completion";
    case InputFormat::kAvro:
      return "avro";
    case InputFormat::kTfrecord:
      return "tfrecord";
  }
  return "?";
}

// Everything that shapes the output (threads do not: the output is the same for any count).
nlohmann::json options_key(const PrepareOptions& o) {
  nlohmann::json k = {{"format", format_name(o.format)},   {"tokenizer", o.tokenizer},
                      {"dedup", dedup_name(o.dedup.mode)}, {"val_fraction", o.val_fraction},
                      {"shard_tokens", o.shard_tokens},    {"zstd", o.zstd}};
  const bool records_file = o.format == InputFormat::kAvro || o.format == InputFormat::kTfrecord;
  if (o.format == InputFormat::kJsonl || o.format == InputFormat::kParquet || records_file)
    k["jsonl_field"] = o.jsonl_field;
  if (o.tokenizer == "sentencepiece") k["vocab"] = o.vocab;
  if (o.tokenizer.rfind("sentencepiece:", 0) == 0) k["model_xxh64"] = hex64(xxh64_file(o.tokenizer.substr(14)));
  if (o.tokenizer.rfind("hf:", 0) == 0 && fs::is_regular_file(o.tokenizer.substr(3)))
    k["model_xxh64"] = hex64(xxh64_file(o.tokenizer.substr(3)));
  if (o.dedup.mode == DedupMode::kNear) {
    k["near_threshold"] = o.dedup.near_threshold;
    k["shingle_words"] = o.dedup.shingle_words;
  }
  if (o.format == InputFormat::kImages || o.format == InputFormat::kTar || o.format == InputFormat::kCsv ||
      o.format == InputFormat::kParquet || records_file) {
    k["seed"] = o.seed;
    k["shard_records"] = o.shard_records;
  }
  if (records_file) {
    k["image_field"] = o.image_field;
    k["label_column"] = o.label_column;
  }
  if (o.format == InputFormat::kImages || o.format == InputFormat::kTar || records_file) {
    k["image_size"] = o.image_size;
    k["pixels"] = o.pixels == PixelStorage::kUint8 ? "uint8" : "fp16";
    k["augment"] = o.augment;
  }
  if (o.format == InputFormat::kCsv || o.format == InputFormat::kParquet) k["label_column"] = o.label_column;
  if (o.format == InputFormat::kChat || o.format == InputFormat::kPromptCompletion) {
    k["seed"] = o.seed;
    k["shard_records"] = o.shard_records;
    k["train_on_prompt"] = o.train_on_prompt;
    k["max_tokens"] = o.max_tokens;
    k["overflow"] = o.overflow;
    if (!o.chat_template.empty()) k["chat_template_xxh64"] = hex64(xxh64_file(o.chat_template));
    // The files beside tokenizer.json that the renderings depend on: the folder's chat template
    // and the special tokens a template sees (src/spm/frugal_chat.py).
    if (o.tokenizer.rfind("hf:", 0) == 0) {
      const fs::path folder = fs::absolute(o.tokenizer.substr(3)).parent_path();
      for (const char* f : {"tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"})
        if (fs::is_regular_file(folder / f)) k["tokenizer_files_xxh64"][f] = hex64(xxh64_file((folder / f).string()));
    }
  }
  return k;
}

nlohmann::json describe_sources(const std::vector<std::string>& files, int64_t* bytes) {
  nlohmann::json s = nlohmann::json::array();
  *bytes = 0;
  for (const auto& f : files) {
    const auto size = static_cast<int64_t>(fs::file_size(f));
    *bytes += size;
    s.push_back(
        {{"path", fs::absolute(f).lexically_normal().string()}, {"bytes", size}, {"xxh64", hex64(xxh64_file(f))}});
  }
  return s;
}

// True when out/manifest.json was written from the same options and inputs and its shards are
// all present with the recorded sizes.
bool cache_hit(const std::string& out, const nlohmann::json& key, const nlohmann::json& sources, PrepareReport* r) {
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_small_file(out + "/manifest.json"));
    if (m.at("format_version") != kFormatVersion || m.at("options") != key || m.at("sources") != sources) return false;
    for (const char* split : {"train", "val"})
      for (const auto& s : m.at("splits").at(split)) {
        std::error_code ec;
        if (fs::file_size(out + "/" + s.at("file").get<std::string>(), ec) != s.at("bytes").get<uint64_t>() || ec)
          return false;
      }
    const auto& c = m.at("counts");
    r->kind = m.at("kind").get<std::string>();
    if (r->kind == "documents") {
      r->documents = c.at("documents");
      r->train_records = c.at("train_documents");
      r->val_records = c.at("val_documents");
      r->tokens = c.at("tokens");
      r->target_tokens = c.at("target_tokens");
      r->record_content = m.at("content").get<std::string>();
      r->vocab = m.at("tokenizer").at("vocab");
      r->tokenizer = m.at("tokenizer").at("name");
    } else if (r->kind == "records") {
      r->train_samples = c.at("train_samples");
      r->val_samples = c.at("val_samples");
      r->train_records = c.at("train_records");
      r->val_records = c.at("val_records");
      r->classes = static_cast<int64_t>(m.at("classes").size());
      r->record_content = m.at("record").at("content").get<std::string>();
      r->record_shape =
          fmt::format("{} {}", m.at("record").at("dtype").get<std::string>(), m.at("record").at("shape").dump());
    } else {
      r->documents_in = c.at("documents_in");
      r->documents = c.at("documents");
      r->exact_removed = c.at("exact_duplicates");
      r->near_removed = c.at("near_duplicates");
      r->tokens = c.at("tokens");
      r->train_tokens = c.at("train_tokens");
      r->val_tokens = c.at("val_tokens");
      r->vocab = m.at("tokenizer").at("vocab");
      r->tokenizer = m.at("tokenizer").at("name");
    }
    r->shards = static_cast<int64_t>(m.at("splits").at("train").size() + m.at("splits").at("val").size());
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

nlohmann::json write_split(const std::string& dir, const char* split, const std::vector<int32_t>& tokens, size_t begin,
                           size_t end, const PrepareOptions& o, ShardDtype dtype, PrepareReport* r) {
  nlohmann::json files = nlohmann::json::array();
  const size_t per = static_cast<size_t>(o.shard_tokens);
  for (size_t i = 0, at = begin; at < end; ++i, at += per) {
    const std::string name = fmt::format("{}_{:06d}.frs", split, i);
    ShardWriterOptions wo;
    wo.zstd = o.zstd;
    ShardWriter w(dir + "/" + name, ShardKind::kTokens, dtype, wo);
    const size_t n = std::min(per, end - at);
    w.add_tokens(tokens.data() + at, n);
    const uint64_t hash = w.finish();
    const auto bytes = static_cast<int64_t>(fs::file_size(dir + "/" + name));
    r->bytes_out += bytes;
    ++r->shards;
    files.push_back({{"file", name},
                     {"tokens", n},
                     {"bytes", bytes},
                     {"xxh64", hex64(hash)},
                     {"index_xxh64", hex64(w.index_hash())}});
  }
  return files;
}

std::unique_ptr<Tokenizer> make_tokenizer(const PrepareOptions& o, const std::vector<std::string>& docs, int threads,
                                          const std::string& tmp) {
  if (o.tokenizer == "bytes") return make_byte_tokenizer();
  if (o.tokenizer == "sentencepiece") return train_sentencepiece(docs, o.vocab, threads, tmp + "/tokenizer.model", tmp);
  if (o.tokenizer.rfind("sentencepiece:", 0) == 0) {
    fs::copy_file(o.tokenizer.substr(14), tmp + "/tokenizer.model");
    return load_sentencepiece(tmp + "/tokenizer.model");
  }
  if (o.tokenizer.rfind("hf:", 0) == 0) {
    const std::string src = o.tokenizer.substr(3);
    if (!fs::is_regular_file(src))
      throw ConfigError(
          fmt::format("--tokenizer {}: {} is not a file (a Hugging Face tokenizer.json)", o.tokenizer, src));
    fs::copy_file(src, tmp + "/tokenizer.json");
    try {
      return load_hf_tokenizer(tmp + "/tokenizer.json");
    } catch (const DataError& e) {  // the message names the copy; the user knows the file by its own path
      throw DataError(fmt::format("--tokenizer {}: {}", o.tokenizer, e.what()));
    }
  }
  throw ConfigError(
      fmt::format("--tokenizer {}: expected bytes, sentencepiece, sentencepiece:PATH.model or "
                  "hf:PATH/tokenizer.json",
                  o.tokenizer));
}

// Dedup, tokenise and write token shards; fills the token manifest fields.
void prepare_tokens(const PrepareOptions& o, std::vector<std::string> docs, const std::string& tmp,
                    nlohmann::ordered_json* mp, PrepareReport* rp, const PrepareProgress& say) {
  auto& m = *mp;
  auto& r = *rp;
  if (docs.empty()) throw DataError("the inputs hold no documents (all files empty?)");
  r.documents_in = static_cast<int64_t>(docs.size());
  say(fmt::format("dedup ({}) over {} documents", dedup_name(o.dedup.mode), docs.size()));
  const DedupResult dd = deduplicate(docs, o.dedup);
  r.exact_removed = dd.exact_removed;
  r.near_removed = dd.near_removed;
  std::vector<std::string> kept;
  int64_t kept_bytes = 0;
  for (size_t i = 0; i < docs.size(); ++i)
    if (dd.keep[i]) {
      kept_bytes += static_cast<int64_t>(docs[i].size());
      kept.push_back(std::move(docs[i]));
    }
  docs.clear();
  r.documents = static_cast<int64_t>(kept.size());
  r.bytes_kept = kept_bytes;

  auto tok = make_tokenizer(o, kept, r.threads, tmp);
  r.tokenizer = tok->name();
  r.vocab = tok->vocab();
  say(fmt::format("tokenising {:.1f} MB with {} ({} threads)", static_cast<double>(kept_bytes) / 1e6, tok->name(),
                  r.threads));
  const auto t_tok = Clock::now();
  const auto encoded = tok->encode(kept, r.threads, tmp);
  r.tokenize_s = seconds_since(t_tok);
  const auto sep = tok->separator();
  std::vector<int32_t> stream;
  for (const auto& d : encoded) {
    stream.insert(stream.end(), d.begin(), d.end());
    stream.insert(stream.end(), sep.begin(), sep.end());
  }
  r.tokens = static_cast<int64_t>(stream.size());
  r.val_tokens = static_cast<int64_t>(std::llround(static_cast<double>(r.tokens) * o.val_fraction));
  r.train_tokens = r.tokens - r.val_tokens;
  say(fmt::format("tokenised {} tokens in {:.2f} s ({:.1f} MB/s); writing shards", r.tokens, r.tokenize_s,
                  static_cast<double>(kept_bytes) / 1e6 / std::max(r.tokenize_s, 1e-9)));

  const ShardDtype dtype = r.vocab <= 65536 ? ShardDtype::kUint16 : ShardDtype::kUint32;
  m["kind"] = "tokens";
  m["dtype"] = dtype_name(dtype);
  m["tokenizer"] = {{"name", tok->name()}, {"vocab", r.vocab}, {"separator", sep}};
  if (!tok->model_path().empty()) {
    const std::string file = fs::path(tok->model_path()).filename().string();  // tokenizer.model or .json
    m["tokenizer"]["model"] = {{"file", file}, {"xxh64", hex64(xxh64_file(tmp + "/" + file))}};
  }
  m["splits"]["train"] = write_split(tmp, "train", stream, 0, static_cast<size_t>(r.train_tokens), o, dtype, &r);
  m["splits"]["val"] =
      write_split(tmp, "val", stream, static_cast<size_t>(r.train_tokens), stream.size(), o, dtype, &r);
  m["counts"] = {
      {"documents_in", r.documents_in},    {"documents", r.documents},  {"exact_duplicates", r.exact_removed},
      {"near_duplicates", r.near_removed}, {"bytes_in", r.bytes_in},    {"tokens", r.tokens},
      {"train_tokens", r.train_tokens},    {"val_tokens", r.val_tokens}};
  m["dedup"] = {{"mode", dedup_name(o.dedup.mode)}, {"lsh_bands", dd.lsh_bands}, {"lsh_rows", dd.lsh_rows}};
}

// --dedup works on the documents of a token dataset; `what` (records, chat documents) has none.
void refuse_dedup(const PrepareOptions& o, const std::string& what) {
  if (o.dedup.mode != DedupMode::kNone)
    throw ConfigError(
        fmt::format("--dedup {} applies to text documents (--format text and jsonl, and the text of parquet, tar, "
                    "avro and tfrecord inputs), not to {}; drop --dedup",
                    dedup_name(o.dedup.mode), what));
}

// WebDataset-style tars, Avro and TFRecord files (whose records are samples alike:
// record_inputs.h): image samples become a record dataset (returns true); otherwise the text
// members become the documents of a token dataset.
bool read_samples(const PrepareOptions& o, const std::vector<std::string>& files, const std::string& tmp,
                  nlohmann::ordered_json* m, PrepareReport* r, const PrepareProgress& say,
                  std::vector<std::string>* docs) {
  std::vector<std::pair<std::string, TarSample>> samples;
  bool images = false, texts = false;
  const RecordFields fields{o.jsonl_field, o.image_field, o.label_column.empty() ? "label" : o.label_column};
  for (const auto& f : files) {
    std::vector<TarSample> read = o.format == InputFormat::kAvro       ? read_avro_samples(f, fields)
                                  : o.format == InputFormat::kTfrecord ? read_tfrecord_samples(f, fields)
                                                                       : read_tar_samples(f);
    for (auto& s : read) {
      for (const auto& [ext, data] : s.members) {
        std::string e = ext;
        std::transform(e.begin(), e.end(), e.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        images = images || e == "jpg" || e == "jpeg" || e == "png";
        texts = texts || ext == "txt";
      }
      samples.emplace_back(f, std::move(s));
    }
    say(fmt::format("read {} samples from {} files", samples.size(), files.size()));
  }
  if (images) {
    refuse_dedup(o, fmt::format("the image records of --format {}", format_name(o.format)));
    detail::prepare_tar_images(o, std::move(samples), tmp, m, r, say);
    return true;
  }
  if (!texts)
    throw DataError(
        fmt::format("the {} inputs hold no image and no text ({} samples): tars need .jpg/.jpeg/.png or .txt members, "
                    "avro and tfrecord records the field --image-field ('{}') or --text-column ('{}')",
                    format_name(o.format), samples.size(), o.image_field, o.jsonl_field));
  for (auto& [archive, s] : samples) {
    auto it = s.members.find("txt");
    if (it != s.members.end() && !it->second.empty()) docs->push_back(std::move(it->second));
  }
  return false;
}

// The options' ranges, and the features of this build they need: refused before any work.
void check_prepare_options(const PrepareOptions& o) {
  if (o.out_dir.empty()) throw ConfigError("prepare needs an output folder (--out DIR)");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1) || o.shard_tokens < 1 || o.shard_records < 1)
    throw ConfigError("--val-fraction must be in [0, 1), --shard-tokens and --shard-records positive");
  if (o.image_size < 1 || o.image_size > 4096 || o.augment < 0)
    throw ConfigError(
        fmt::format("--size {} must be in [1, 4096] and --augment {} at least 0", o.image_size, o.augment));
  if (o.format == InputFormat::kChat || o.format == InputFormat::kPromptCompletion ||
      o.format == InputFormat::kImages || o.format == InputFormat::kCsv)
    refuse_dedup(o, fmt::format("--format {}", format_name(o.format)));
  // What this build lacks (see features.h).
  if (o.zstd) require_feature("zstd", "prepare --zstd");
  if (o.format == InputFormat::kImages || o.format == InputFormat::kTar)
    require_feature("images", fmt::format("prepare --format {}", format_name(o.format)));
  if (o.format == InputFormat::kTar) require_feature("libarchive", "prepare --format tar");
  if (o.format == InputFormat::kParquet) require_feature("parquet", "prepare --format parquet");
  if (o.format == InputFormat::kAvro) require_feature("avro", "prepare --format avro");
  if (o.format == InputFormat::kTfrecord) require_feature("tfrecord", "prepare --format tfrecord");
  if (o.tokenizer.rfind("sentencepiece", 0) == 0) require_sentencepiece("prepare --tokenizer sentencepiece");
}

// --tokenizer hf:X, as model.init_from = "hf:X" names a model (core/hf_hub.h): X itself where it is
// a file, else the tokenizer.json in folder X or in the hub cache's snapshot of hub id X.
PrepareOptions with_tokenizer_file(PrepareOptions o) {
  const std::string x = o.tokenizer.rfind("hf:", 0) == 0 ? o.tokenizer.substr(3) : "";
  std::error_code ec;
  if (x.empty() || fs::is_regular_file(x, ec)) return o;
  const std::string dir = hf_resolve_dir(x, "tokenizer.json");
  if (!fs::is_directory(dir, ec) && is_hf_hub_id(x))
    throw ConfigError(fmt::format(
        "--tokenizer {}: no file or folder {} here, and the Hugging Face cache {} has no snapshot of \"{}\" "
        "holding a tokenizer.json (a hub id is looked up in {}, the cache at $HF_HUB_CACHE, else $HF_HOME/hub, "
        "else ~/.cache/huggingface/hub; nothing is downloaded): get it with `huggingface-cli download {}`, or give "
        "hf:PATH/tokenizer.json or hf:DIR, a folder holding one",
        o.tokenizer, fs::absolute(x).lexically_normal().string(), hf_hub_cache(), x, hf_hub_repo_folder(x), x));
  if (!fs::is_directory(dir, ec))
    throw ConfigError(fmt::format(
        "--tokenizer {}: no such file or folder ({}); give hf:PATH/tokenizer.json or hf:DIR, a folder holding one",
        o.tokenizer, fs::absolute(x).lexically_normal().string()));
  const std::string file = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::is_regular_file(file))
    throw ConfigError(fmt::format(
        "--tokenizer {}: the folder has no tokenizer.json (save_pretrained writes one); give hf:PATH/tokenizer.json",
        o.tokenizer));
  o.tokenizer = "hf:" + file;
  return o;
}

}  // namespace

PrepareReport prepare_dataset(const PrepareOptions& given, const PrepareProgress& progress) {
  const PrepareOptions o = with_tokenizer_file(given);
  const auto t0 = Clock::now();
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  check_prepare_options(o);
  const std::string out = detail::dataset_folder(o);
  PrepareReport r;
  r.out_dir = out;
  r.threads = o.threads > 0 ? o.threads : usable_cpu_count();

  detail::remove_dead_temp_dirs(out, say);
  say("hashing inputs");
  const std::vector<std::string> files = expand_inputs(o.inputs, out);
  r.sources = static_cast<int64_t>(files.size());
  const nlohmann::json key = options_key(o), sources = describe_sources(files, &r.bytes_in);
  if (!o.force && cache_hit(out, key, sources, &r)) {
    r.up_to_date = true;
    r.seconds = seconds_since(t0);
    return r;
  }

  const std::string tmp = fmt::format("{}.tmp-{}", out, ::getpid());
  remove_tree(tmp);
  fs::create_directories(tmp);
  try {
    nlohmann::ordered_json m;
    m["format"] = "frugal-dataset";
    m["format_version"] = kFormatVersion;
    std::vector<std::string> docs;
    bool tokens = true;
    if (o.format == InputFormat::kChat || o.format == InputFormat::kPromptCompletion) {
      detail::prepare_masked_documents(o, files, tmp, &m, &r, say);
      tokens = false;
    } else if (o.format == InputFormat::kImages) {
      detail::prepare_image_folders(o, tmp, &m, &r, say);
      tokens = false;
    } else if (o.format == InputFormat::kCsv) {
      detail::prepare_table(o, read_csv_table(files, o.label_column), tmp, &m, &r, say);
      tokens = false;
    } else if (o.format == InputFormat::kTar || o.format == InputFormat::kAvro || o.format == InputFormat::kTfrecord) {
      tokens = !read_samples(o, files, tmp, &m, &r, say, &docs);
    } else if (o.format == InputFormat::kParquet) {
      // Documents when the files have the text column, else (unless it was named) a table.
      tokens = parquet_has_text_column(files, o.jsonl_field, o.text_column_named || o.jsonl_field != "text");
      if (tokens) {
        read_parquet_documents(files, o.jsonl_field, &docs);
        say(fmt::format("read {} Parquet files, {} documents from column '{}'", files.size(), docs.size(),
                        o.jsonl_field));
      } else {
        refuse_dedup(o, fmt::format("a Parquet table (the files have no column '{}')", o.jsonl_field));
        detail::prepare_table(o, read_parquet_table(files, o.label_column), tmp, &m, &r, say);
      }
    } else {
      for (const auto& f : files) {
        const std::string text = read_file(f);
        split_documents(text, f, o.format, o.jsonl_field, &docs);
        if (o.tokenizer.rfind("hf:", 0) == 0) require_utf8(text, f, "a Hugging Face tokenizer (--tokenizer hf:)");
        const double mb = static_cast<double>(r.bytes_in) / 1e6;
        say(fmt::format("read {} files, {} documents, {:.1f} MB ({:.0f} MB/s)", r.sources, docs.size(), mb,
                        mb / seconds_since(t0)));
      }
    }
    if (tokens) {
      prepare_tokens(o, std::move(docs), tmp, &m, &r, say);
    } else if (r.kind != "documents") {
      r.kind = "records";
      m["counts"] = {{"samples", r.train_samples + r.val_samples},
                     {"train_samples", r.train_samples},
                     {"val_samples", r.val_samples},
                     {"train_records", r.train_records},
                     {"val_records", r.val_records},
                     {"bytes_in", r.bytes_in}};
    }
    detail::check_splits(o, &r);  // a split frugal train cannot train on is refused before publishing
    m["options"] = key;
    m["sources"] = sources;
    m["prepare_seconds"] = r.seconds = seconds_since(t0);
    write_file_atomic(tmp + "/manifest.json", m.dump(2) + "\n");
    detail::publish(tmp, out);
  } catch (...) {
    std::error_code ec;
    remove_tree(tmp, ec);
    throw;
  }
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace frugal
